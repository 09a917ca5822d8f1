#!/usr/bin/env bash
# torchrun_parity.sh RANKWISE_RUN SAVE_AND_LOG RESUME WORKDIR
#
# Seed 001 three ways, 2 ranks each, and the same lines from all three:
#   1. the Python originals (tests/python/seed001) under PyTorch's real
#      torchrun (RANKWISE_PYTHON -m torch.distributed.run);
#   2. their C++ ports (examples/save_and_log, examples/resume) under rankwise-run;
#   3. the same C++ programs, unchanged, under real torchrun (--no_python).
# rankwise-run tags each line "[rankN]: "; torchrun does not. Lines are
# compared without that tag, in sorted order (ranks interleave freely), and
# each set must also be the seed's printed output (tests/e2e/golden).
#
# Exits 77 (ctest: skipped) when RANKWISE_PYTHON's torch is 1.x: Debian's
# torchrun (1.13) fails at start on Python 3.11 (docs/getting-started.md, "Known quirks").
set -uo pipefail
run=$(realpath "$1") save_and_log=$(realpath "$2") resume=$(realpath "$3") work=$(realpath -m "$4")
here=$(cd "$(dirname "$0")" && pwd)
python=${RANKWISE_PYTHON:-/usr/bin/python3}
seed=$here/../python/seed001

version=$("$python" -c "import torch; print(torch.__version__)") || exit 1
major=${version%%.*}
if [ "$major" -lt 2 ]; then
  echo "skipped: $python has torch $version, whose torchrun does not start on this Python"
  exit 77
fi

rm -rf "$work" && mkdir -p "$work"/python "$work"/torchrun "$work"/rankwise-run
torchrun() { "$python" -m torch.distributed.run --standalone --nproc_per_node 2 "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

# Each step: its stdout into a file; stderr shown only when it fails.
step() {
  local out=$1; shift
  (cd "$(dirname "$out")" && "$@") >"$out" 2>"$out.err"
  local rc=$?
  if [ $rc -ne 0 ]; then
    cat "$out" "$out.err"
    fail "exit code $rc from: $*"
  fi
}

# Two Python processes sharing torchrun's stdout can tear each other's lines
# (seen: "...1.3542rank 1: ..."), the very thing rankwise-run prevents. So
# the reference's stdout goes to torchrun's per-rank log files (--redirects 1),
# read back whole; the C++ programs under torchrun share its stdout, since
# rankwise::print writes each line with one write().
python_step() {
  local out=$1 script=$2 logs="$1.logs"
  step "$out.torchrun" torchrun --redirects 1 --log-dir "$logs" "$script"
  local files
  files=$(find "$logs" -name stdout.log | sort)
  [ "$(wc -l <<<"$files")" -eq 2 ] || fail "torchrun wrote no per-rank stdout.log under $logs"
  cat $files >"$out"
}
python_step "$work/python/out" "$seed/ddp_save_log.py"
python_step "$work/python/out2" "$seed/ddp_resume.py"
step "$work/rankwise-run/out" "$run" --nproc-per-node 2 "$save_and_log" ckpt.pt
step "$work/rankwise-run/out2" "$run" --nproc-per-node 2 "$resume" ckpt.pt
step "$work/torchrun/out" torchrun --no_python "$save_and_log" ckpt.pt
step "$work/torchrun/out2" torchrun --no_python "$resume" ckpt.pt

untag() { sed -E 's/^\[rank[0-9]+\]: //' "$@" | sort; }
status=0
for pair in "out save_and_log" "out2 resume"; do
  set -- $pair
  untag "$here/golden/$2.txt" >"$work/$2.expected"
  for way in python rankwise-run torchrun; do
    if ! diff <(cat "$work/$2.expected") <(untag "$work/$way/$1") >"$work/$2.$way.diff"; then
      echo "FAIL: $2 via $way differs from the seed's output (< seed, > $way):"
      cat "$work/$2.$way.diff"
      status=1
    fi
  done
done
# rankwise-run tags every line; under torchrun the same program prints them bare.
grep -qvE '^\[rank[01]\]: ' "$work/rankwise-run/out" && fail "an untagged line under rankwise-run"
[ $status -eq 0 ] && echo "seed 001: Python under torchrun, C++ under rankwise-run and C++ under torchrun print the seed's lines (torch $version)"
exit $status
