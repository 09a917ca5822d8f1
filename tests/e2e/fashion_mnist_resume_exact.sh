#!/usr/bin/env bash
# fashion_mnist_resume_exact.sh RUN PROGRAM WORKDIR: the main job on 20,000
# samples for 3 epochs (157 steps per epoch on 2 ranks), checkpointing every
# 50 steps. Run A is uninterrupted. In run B, once its checkpoint of step 100
# exists, the test kills rank 1 with SIGKILL (from outside: wherever it is,
# mid-epoch 1 or 2, possibly while a checkpoint is being written);
# rankwise-run --max-restarts 1 restarts the job, which resumes from the
# latest checkpoint without a human. Both must end with bitwise equal
# parameters (read back with Python's torch.load) and print the same metrics
# for every epoch that ran after the restart.
set -uo pipefail
run=$1; program=$2; work=$3
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || fail "dataset-fashion-mnist is not installed (run scripts/setup)"
rm -rf "$work"; mkdir -p "$work"
common=(--epochs 3 --limit 20000 --checkpoint-every 50 --seed 5)
outA=$("$run" --nproc-per-node 2 "$program" "${common[@]}" --checkpoint-dir "$work/A" 2>&1) || fail "run A: $outA"
echo "$outA" | grep epoch
"$run" --nproc-per-node 2 --max-restarts 1 "$program" "${common[@]}" --checkpoint-dir "$work/B" \
  --resume >"$work/B.out" 2>&1 &
launcher=$!
for _ in $(seq 1 1200); do  # up to 120 s
  [ -f "$work/B/checkpoint-0000000100.pt" ] && break
  kill -0 $launcher 2>/dev/null || break
  sleep 0.1
done
pid=$(sed -nE 's/^\[rank0\]:   rank 1 \| .* \| pid ([0-9]+) \| .*/\1/p' "$work/B.out" | head -1)
[ -n "$pid" ] || fail "no pid of rank 1 in the header: $(cat "$work/B.out")"
kill -9 "$pid" || fail "rank 1 (pid $pid) had already exited: $(cat "$work/B.out")"
wait $launcher || fail "run B: $(cat "$work/B.out")"
outB=$(cat "$work/B.out")
echo "$outB" | grep -E 'epoch|resumed|restarting|no checkpoint'
grep -q "^\[rank0\]: no checkpoint in $work/B; starting from epoch 1$" <<<"$outB" || fail "first attempt should start fresh"
grep -q "attempt 0 failed (rank 1 was killed by SIGKILL (signal 9)); restarting (1/1)" <<<"$outB" || fail "restart line"
resumed=$(grep -E "^\[rank0\]: resumed from $work/B/checkpoint-[0-9]{10}\.pt at step [0-9]+ \(epoch [0-9], [0-9]+ samples into it on each rank\)$" <<<"$outB") \
  || fail "resume line"
step=$(sed -E 's/.* at step ([0-9]+) .*/\1/' <<<"$resumed")
[ "$step" -ge 100 ] && [ "$step" -lt 471 ] || fail "resumed at step $step, expected a checkpoint from step 100 on"
# Every epoch line printed after the restart (its loss includes the sums from
# before the crash) is identical to run A's, throughput aside.
after=$(sed -n '/restarting (1\/1)/,$p' <<<"$outB" | grep -E '^\[rank0\]: epoch [0-9]/3' | cut -d'|' -f1-3)
[ -n "$after" ] || fail "no epoch line after the restart"
while IFS= read -r line; do
  grep -qxF "$line" <<<"$(grep -E '^\[rank0\]: epoch [0-9]/3' <<<"$outA" | cut -d'|' -f1-3)" \
    || fail "epoch line differs from run A's: $line"
done <<<"$after"
[ "$(cat "$work/A/latest")" = "checkpoint-0000000471.pt" ] || fail "A latest: $(cat "$work/A/latest")"
[ "$(cat "$work/B/latest")" = "checkpoint-0000000471.pt" ] || fail "B latest: $(cat "$work/B/latest")"
"${RANKWISE_PYTHON:-/usr/bin/python3}" "$here/compare_checkpoints.py" "$work/A/checkpoint-0000000471.pt" "$work/B/checkpoint-0000000471.pt" \
  || fail "parameters differ"
echo PASS
