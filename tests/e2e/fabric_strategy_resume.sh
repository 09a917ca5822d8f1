#!/usr/bin/env bash
# fabric_strategy_resume.sh RUN PROGRAM CKPT_TOOL STRATEGY WORLD WORKDIR [async]: exact
# resume of one Fabric loop under --strategy STRATEGY (torch_fabric_strategy:
# the two-call setup, Adam and a tracked StepLR, dropout per rank, clipping,
# --accumulate 2; checkpoints every 5 steps and at epoch ends, sharded under
# zero1 and fsdp). Run A is uninterrupted. In run B the last rank SIGKILLs
# itself after step 7 and rankwise-run --max-restarts 1 restarts the job,
# which resumes from the step-5 checkpoint. Both runs' last checkpoints (the
# model, the optimizer, the scheduler, step, epoch, position and every
# rank's RNG) must be equal byte for byte (rankwise-ckpt diff). With
# `async`, both runs save with --checkpoint-async and the rank dies after
# step 10, while step 10's save (and step 8's publication, which the writer
# thread finishes) may still be in flight: run B resumes from the last
# checkpoint published, step 10's, 8's (the end of epoch 2) or 5's.
set -uo pipefail
run=$1; program=$2; ckpt=$3; strategy=$4; world=$5; work=$6; mode=${7:-}
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"; mkdir -p "$work/A" "$work/B"
flags=(--strategy "$strategy" --accumulate 2)
kill_at=7 resumed_at="0000000005"
if [ "$mode" = async ]; then
  flags+=(--checkpoint-async)
  kill_at=10 resumed_at="00000000(05|08|10)"
fi
out=$("$run" --nproc-per-node "$world" "$program" "$work/A" 0 --checkpoint-dir "$work/A/ckpt" "${flags[@]}" 2>&1) \
  || fail "run A: $out"
grep -q "done at step 12" <<<"$out" || fail "run A did not end at step 12: $out"
out=$("$run" --nproc-per-node "$world" --max-restarts 1 "$program" "$work/B" "$kill_at" --checkpoint-dir "$work/B/ckpt" \
  "${flags[@]}" 2>&1) || fail "run B: $out"
grep -q "rank $((world - 1)) was killed by SIGKILL" <<<"$out" || fail "run B was not killed: $out"
grep -qE "resumed from $work/B/ckpt/checkpoint-$resumed_at" <<<"$out" ||
  fail "run B did not resume from checkpoint-$resumed_at: $out"
last=$(cat "$work/A/ckpt/latest")
[[ "$last" == "$(cat "$work/B/ckpt/latest")" ]] || fail "the runs' latest checkpoints differ: $last"
case "$strategy" in
  ddp) [[ -f "$work/A/ckpt/$last" ]] || fail "ddp's checkpoint $last is not a file" ;;
  *) [[ -d "$work/A/ckpt/$last" ]] || fail "$strategy's checkpoint $last is not a sharded directory" ;;
esac
"$ckpt" diff "$work/A/ckpt/$last" "$work/B/ckpt/$last" || fail "run B's $last differs from run A's"
echo PASS
