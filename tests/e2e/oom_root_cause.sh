#!/usr/bin/env bash
# A rank that the kernel's out-of-memory killer ends is named as such in the
# launcher's root cause, not only as "killed by SIGKILL": the launcher runs in
# a memory cgroup of 1.5 GiB and rank 1 of 2 allocates until it is killed
# (the kernel kills the largest process: the launcher, with the wheel's
# libtorch mapped, holds a few hundred MiB, so the limit leaves the probe
# the larger one by far).
# Skipped (exit 77) where no memory cgroup can be made (not root, no v1 or
# v2 memory controller).
# Usage: oom_root_cause.sh RANKWISE_RUN LAUNCH_PROBE
set -uo pipefail
run=$1 probe=$2
limit=$((1536 * 1024 * 1024))
cg=""
v1=/sys/fs/cgroup/memory/rankwise-oom-$$ v2=/sys/fs/cgroup/rankwise-oom-$$
if [ -w /sys/fs/cgroup/memory ] && mkdir "$v1" 2>/dev/null; then
  cg=$v1
  echo "$limit" >"$cg/memory.limit_in_bytes" || cg=""
  [ -n "$cg" ] && [ -e "$cg/memory.memsw.limit_in_bytes" ] && echo "$limit" >"$cg/memory.memsw.limit_in_bytes"
elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null && mkdir "$v2" 2>/dev/null; then
  cg=$v2
  echo "$limit" >"$cg/memory.max" || cg=""
  echo 0 >"$cg/memory.swap.max" 2>/dev/null
fi
if [ -z "$cg" ]; then
  rmdir "$v1" "$v2" 2>/dev/null
  echo "skipped: no memory cgroup can be made here (needs root and a memory controller)"
  exit 77
fi
cleanup() { for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && return; sleep 0.2; done; }
trap cleanup EXIT
out=$(bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" timeout 120 "$run" --nproc-per-node 2 "$probe" hog 2>&1)
rc=$?
fail() { echo "FAIL: $1"; echo "--- launcher output (rc $rc) ---"; echo "$out" | tail -30; exit 1; }
[ "$rc" = 1 ] || fail "exit code $rc, expected 1"
grep -qE "root cause \(first failure\): rank 1 \(local rank 1\) on host .* was killed by SIGKILL \(signal 9\) from the kernel's out-of-memory killer" <<<"$out" ||
  fail "the root cause does not name the out-of-memory killer"
echo "ok: $(grep -m1 'root cause' <<<"$out")"
