#!/usr/bin/env bash
# fabric_async_kill.sh RUN PROGRAM WORKDIR: kill-safety of asynchronous saves
# (--checkpoint-async) in a Fabric run (torch_fabric_accumulation, 2 ranks,
# checkpoints every 2 steps, so that one is nearly always being written).
# Run A saves synchronously, uninterrupted. Each faulted run saves in the
# background and rank 0, the writer, is SIGKILLed inside a background save by
# RANKWISE_CHECKPOINT_FAULT (before the rename and before `latest` of later
# saves, through PHASE@N; kills mid-write and before pruning are
# CheckpointFaults.KillDuringAnAsyncSave*'s); the job fails.
# A second job then resumes from what the kill left, again asynchronously,
# and must end with A's parameters, optimizer and scheduler state and RNG
# states, bit for bit.
set -uo pipefail
run=$1; program=$2; work=$3
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"; mkdir -p "$work"
out=$("$run" --nproc-per-node 2 "$program" 1 2 "$work/A" 0 0 2>&1) || fail "run A: $out"
for fault in kill_at=before-rename@3 kill_at=before-latest@4; do
  dir="$work/${fault//[=@]/_}"
  out=$(RANKWISE_CHECKPOINT_FAULT=$fault "$run" --nproc-per-node 2 "$program" 1 2 "$dir" 0 0 async 2>&1) \
    && fail "$fault: the run was not killed: $out"
  grep -q "rank 0 (local rank 0) on host .* was killed by SIGKILL" <<<"$out" || fail "$fault: rank 0 was not the one killed: $out"
  out=$("$run" --nproc-per-node 2 "$program" 1 2 "$dir" 0 0 async 2>&1) || fail "$fault: the resumed run: $out"
  echo "$fault: $(grep -o -m1 -E 'resumed from [^ ]+ at step [0-9]+|no checkpoint in [^;]+' <<<"$out")"
  "${RANKWISE_PYTHON:-/usr/bin/python3}" "$here/compare_checkpoints.py" "$work/A/final.pt" "$dir/final.pt" \
    || fail "$fault: the resumed run differs from the uninterrupted one"
done
echo PASS
