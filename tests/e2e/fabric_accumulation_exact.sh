#!/usr/bin/env bash
# fabric_accumulation_exact.sh RUN PROGRAM ACCUM WORLD WORKDIR [SAVE_EVERY]: exact resume
# of a Fabric loop with gradient accumulation (torch_fabric_accumulation:
# no_sync() on ACCUM-1 of every ACCUM batches, 7 batches per epoch,
# checkpoints every 5 steps and at epoch ends; neither is a multiple of
# ACCUM). Run A is uninterrupted. In run B the last rank SIGKILLs itself
# after step 13, mid-accumulation, and rankwise-run --max-restarts 1 restarts
# the job; in run C the same kill ends the job and a second, hand-started job
# resumes it. B and C must resume at an optimizer step (a multiple of ACCUM:
# scheduled checkpoints wait for it) and end with A's parameters, optimizer
# and scheduler state and every rank's RNG, bit for bit. With SAVE_EVERY the
# loop body also saves explicitly (fabric.save()) after every SAVE_EVERY-th
# batch's optimizer step, which must count that batch as trained.
set -uo pipefail
run=$1; program=$2; accum=$3; world=$4; work=$5; save_every=${6:-0}
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
kill_at=13
rm -rf "$work"; mkdir -p "$work"
out=$("$run" --nproc-per-node "$world" "$program" "$accum" 5 "$work/A" 0 "$save_every" 2>&1) || fail "run A: $out"
grep -q "waits for the optimizer step" <<<"$out" || fail "run A deferred no checkpoint: $out"
out=$("$run" --nproc-per-node "$world" --max-restarts 1 "$program" "$accum" 5 "$work/B" "$kill_at" "$save_every" 2>&1) \
  || fail "run B: $out"
grep -q "rank $((world - 1)) was killed by SIGKILL" <<<"$out" || fail "run B was not killed: $out"
resumed_b=$(grep -o "at step [0-9]* (epoch" <<<"$out" | grep -o "[0-9]*" | head -1)
[[ -n "$resumed_b" ]] || fail "run B did not resume: $out"
(( resumed_b % accum == 0 && resumed_b < kill_at )) \
  || fail "run B resumed at step $resumed_b, not at an optimizer step before $kill_at: $out"
echo "run B resumed at step $resumed_b"
out=$("$run" --nproc-per-node "$world" "$program" "$accum" 5 "$work/C" "$kill_at" "$save_every" 2>&1) \
  && fail "run C should have failed: $out"
out=$("$run" --nproc-per-node "$world" "$program" "$accum" 5 "$work/C" "$kill_at" "$save_every" 2>&1) \
  || fail "run C (resumed by hand): $out"
grep -q "resumed from" <<<"$out" || fail "run C did not resume: $out"
for other in B C; do
  "${RANKWISE_PYTHON:-/usr/bin/python3}" "$here/compare_checkpoints.py" "$work/A/final.pt" "$work/$other/final.pt" \
    || fail "run $other differs from the uninterrupted run"
done
echo PASS
