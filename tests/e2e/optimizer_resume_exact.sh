#!/usr/bin/env bash
# optimizer_resume_exact.sh RUN PROGRAM OPTIMIZER WORLD_SIZE WORKDIR: exact
# resume with the optimizers and schedules people use (torch_resume_trainer:
# Adam halved by hand every epoch, SGD + StepLR, AdamW). Run A is
# uninterrupted. In run B the last rank SIGKILLs itself mid epoch 2 and
# rankwise-run --max-restarts 1 restarts the job; in run C the same kill ends
# the job (exit 1) and a second, hand-started job resumes it. B and C must end
# with A's parameters, optimizer state and options, scheduler state and RNG
# states, bit for bit (compared with Python's torch.load).
set -uo pipefail
run=$1; program=$2; optimizer=$3; world=$4; work=$5
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
steps_per_epoch=$(( 120 / world / 4 ))
kill_at=$(( steps_per_epoch + steps_per_epoch / 2 + 1 ))  # mid epoch 2, after a checkpoint
rm -rf "$work"; mkdir -p "$work"
out=$("$run" --nproc-per-node "$world" "$program" "$optimizer" "$work/A" 2>&1) || fail "run A: $out"
out=$("$run" --nproc-per-node "$world" --max-restarts 1 "$program" "$optimizer" "$work/B" "$kill_at" 2>&1) \
  || fail "run B: $out"
grep -q "rank $((world - 1)) was killed by SIGKILL" <<<"$out" || fail "run B was not killed: $out"
grep -q "resumed at step" <<<"$out" || fail "run B did not resume: $out"
echo "$out" | grep -E "restarting|resumed"
out=$("$run" --nproc-per-node "$world" "$program" "$optimizer" "$work/C" "$kill_at" 2>&1) \
  && fail "run C should have failed: $out"
out=$("$run" --nproc-per-node "$world" "$program" "$optimizer" "$work/C" "$kill_at" 2>&1) \
  || fail "run C (resumed by hand): $out"
grep -q "resumed at step" <<<"$out" || fail "run C did not resume: $out"
echo "$out" | grep -E "resumed"
for other in B C; do
  "${RANKWISE_PYTHON:-/usr/bin/python3}" "$here/compare_checkpoints.py" "$work/A/final.pt" "$work/$other/final.pt" \
    || fail "run $other differs from the uninterrupted run"
done
echo PASS
