#!/usr/bin/env bash
# fashion_mnist_resume_exact.sh RUN PROGRAM WORKDIR: the main job on 20,000
# samples for 2 epochs (157 steps per epoch on 2 ranks), checkpointing every
# 100 steps. Run A is uninterrupted. In run B rank 1 kills itself with SIGKILL
# after step 250 (mid epoch 2); rankwise-run --max-restarts 1 restarts the job,
# which resumes from step 200 without a human. Both must end with bitwise
# equal parameters (read back with Python's torch.load).
set -uo pipefail
run=$1; program=$2; work=$3
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || fail "dataset-fashion-mnist is not installed (run scripts/setup)"
rm -rf "$work"; mkdir -p "$work"
common=(--epochs 2 --limit 20000 --checkpoint-every 100 --seed 5)
outA=$("$run" --nproc-per-node 2 "$program" "${common[@]}" --checkpoint-dir "$work/A" 2>&1) || fail "run A: $outA"
echo "$outA" | grep epoch
outB=$("$run" --nproc-per-node 2 --max-restarts 1 "$program" "${common[@]}" --checkpoint-dir "$work/B" \
  --resume --simulate-failure-at-step 250 2>&1) || fail "run B: $outB"
echo "$outB" | grep -E 'epoch|resumed|restarting|no checkpoint'
grep -q "^\[rank0\]: no checkpoint in $work/B; starting from epoch 1$" <<<"$outB" || fail "first attempt should start fresh"
grep -q "attempt 0 failed (rank 1 was killed by SIGKILL (signal 9)); restarting (1/1)" <<<"$outB" || fail "restart line"
grep -q "^\[rank0\]: resumed from $work/B/checkpoint-0000000200.pt at step 200 (epoch 2, 2752 samples into it on each rank)$" <<<"$outB" \
  || fail "resume line"
# The epoch-2 line (loss over the whole epoch, half of it before the crash) is identical.
[ "$(grep 'epoch 2/2' <<<"$outA" | cut -d'|' -f1-3)" = "$(grep 'epoch 2/2' <<<"$outB" | cut -d'|' -f1-3)" ] \
  || fail "epoch 2 metrics differ between the runs"
[ "$(cat "$work/A/latest")" = "checkpoint-0000000314.pt" ] || fail "A latest: $(cat "$work/A/latest")"
[ "$(cat "$work/B/latest")" = "checkpoint-0000000314.pt" ] || fail "B latest: $(cat "$work/B/latest")"
"${RANKWISE_PYTHON:-/usr/bin/python3}" "$here/compare_checkpoints.py" "$work/A/checkpoint-0000000314.pt" "$work/B/checkpoint-0000000314.pt" \
  || fail "parameters differ"
echo PASS
