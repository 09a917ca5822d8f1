#!/usr/bin/env bash
# consumer_test.sh ROUTE BUILD_DIR SOURCE_DIR WORK_DIR VERSION: builds tests/consumer as a
# user's project would and runs it on 2 ranks through the launcher it found.
#   find_package:     `cmake --install BUILD_DIR` into WORK_DIR/prefix, then the
#                     consumer finds it with find_package(rankwise)
#   add_subdirectory: the consumer adds SOURCE_DIR with add_subdirectory() and
#                     gets rankwise's targets in BUILD_DIR-subproject; the test
#                     checks the generated targets and compiles the consumer's
#                     source against the subproject's rankwise::rankwise (its
#                     include directories, definitions and C++ standard). It
#                     links and runs nothing: a second librankwise would be
#                     minutes of compiling, and find_package's route runs the
#                     same program
# The compiler, build type and libtorch are the parent build's (WORK_DIR/parent.cmake
# and prefix_path.txt, written by tests/CMakeLists.txt), so it passes on either
# libtorch leg; VERSION is rankwise's, which the consumer's line must show.
set -euo pipefail
route=$1; build=$2; source=$3; work=$4; version=$5
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work/$route"
mkdir -p "$work/$route"
subproject="$build-subproject"
[ "$route" = add_subdirectory ] && rm -rf "$subproject"
consumer="$work/$route/build"
if [ "$route" = find_package ]; then
  prefix="$work/$route/prefix"
  cmake --install "$build" --prefix "$prefix" >/dev/null
  for f in include/rankwise/rankwise.h lib/cmake/rankwise/rankwiseConfig.cmake \
           lib/cmake/rankwise/rankwiseConfigVersion.cmake bin/rankwise-run bin/rankwise-ckpt; do
    [ -e "$prefix/$f" ] || fail "cmake --install did not install $f"
  done
  # The installed tool finds the installed librankwise and libtorch (its RPATH).
  "$prefix/bin/rankwise-ckpt" --help >/dev/null || fail "the installed rankwise-ckpt does not run"
  cmake -S "$source/tests/consumer" -B "$consumer" -C "$work/parent.cmake" \
        -DRANKWISE_CONSUMER_ROUTE=find_package -DCMAKE_PREFIX_PATH="$prefix;$(cat "$work/prefix_path.txt")"
  cmake --build "$consumer" -j2
  launcher=$(cat "$consumer/launcher.txt")
  [ "$launcher" = "$prefix/bin/rankwise-run" ] || fail "rankwise::rankwise-run is $launcher, not the installed one"
else
  cmake -S "$source/tests/consumer" -B "$consumer" -C "$work/parent.cmake" \
        -DRANKWISE_CONSUMER_ROUTE=add_subdirectory -DRANKWISE_SOURCE_DIR="$source" \
        -DRANKWISE_BINARY_DIR="$subproject" \
        -DCMAKE_PREFIX_PATH="$(cat "$work/prefix_path.txt")"
  grep -q '^RANKWISE_BUILD_TESTS:BOOL=OFF$' "$consumer/CMakeCache.txt" || fail "RANKWISE_BUILD_TESTS is not OFF in a subproject"
  targets=$(cmake --build "$consumer" --target help)
  for t in consumer rankwise rankwise-run; do
    grep -qE "^\.\.\. $t( |\$)|^$t: " <<<"$targets" || fail "the subproject build has no target $t"
  done
  [ "$(cat "$consumer/launcher.txt")" = "$consumer/rankwise-run" ] ||
    fail "rankwise::rankwise-run is $(cat "$consumer/launcher.txt"), not the subproject's"
  # The consumer's object only: rankwise's public headers with the usage
  # requirements the subproject gives rankwise::rankwise.
  if [ -f "$consumer/build.ninja" ]; then
    cmake --build "$consumer" --target CMakeFiles/consumer.dir/main.cpp.o
  else
    make -C "$consumer" main.cpp.o
  fi
  echo "PASS (configured, and the consumer compiled against the subproject's rankwise)"
  exit 0
fi
out=$("$launcher" --nproc-per-node 2 "$consumer/consumer" 2>&1) || fail "the consumer failed: $out"
echo "$out"
grep -qx "\[rank0\]: consumer: rankwise $version | world size 2 | sum 3 | from_map rank 3/4" <<<"$out" ||
  fail "rank 0's line is missing or wrong"
echo PASS
