#!/usr/bin/env bash
# epoch_world_change.sh RUN PROGRAM WORKDIR: an epoch checkpointed mid-way at
# 4 ranks, resumed at 3, stopped mid-way again and resumed at 2
# (torch_epoch_world_change, rankwise::Fabric): over the three runs every
# sample of that epoch is trained on exactly once, padding aside, and the
# epoch's tracked sample count (metric states merged at each change) is the
# dataset's 23. The next epoch, whole at 2 ranks, likewise.
set -uo pipefail
run=$1; program=$2; work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"; mkdir -p "$work/ckpt" "$work/log"
# 23 samples, batch 2: at 4 ranks 3 batches per rank; stop after 2 (16 samples seen).
out=$("$run" --nproc-per-node 4 "$program" "$work/ckpt" "$work/log" a 2 2>&1) || fail "4 ranks: $out"
grep -q "epoch 1: pass starts at batch 0 of 3" <<<"$out" || fail "4 ranks: pass extent: $out"
# At 3 ranks the 7 left are 3 per rank (2 batches); stop after 1 more step.
out=$("$run" --nproc-per-node 3 "$program" "$work/ckpt" "$work/log" b 3 2>&1) || fail "3 ranks: $out"
grep -q "resumed from .* at step 2 (epoch 1 at world size 3, after 4 samples on each of 4 ranks" \
  <<<"$out" || fail "no resume line at 3 ranks: $out"
grep -q "epoch 1: pass starts at batch 0 of 2" <<<"$out" || fail "3 ranks: the rest's extent: $out"
out=$("$run" --nproc-per-node 2 "$program" "$work/ckpt" "$work/log" c 2>&1) || fail "2 ranks: $out"
grep -q "after 4 samples on each of 4 ranks, then 2 samples on each of 3 ranks" <<<"$out" \
  || fail "no resume line at 2 ranks: $out"
grep -q "epoch 1: pass starts at batch 0 of 1" <<<"$out" || fail "2 ranks: the rest's extent: $out"
grep -q "epoch 2: pass starts at batch 0 of 6" <<<"$out" || fail "2 ranks: a whole epoch's extent: $out"
echo "$out" | grep "counted"
for epoch in 0 1; do
  seen=$(cat "$work"/log/*.txt | awk -v e=$epoch '$1 == e {print $2}' | sort -n | tr '\n' ' ')
  expected=$(seq 0 22 | tr '\n' ' ')
  [ "$seen" = "$expected" ] || fail "epoch $((epoch + 1)): samples seen '$seen', expected each of 0-22 once"
  grep -q "epoch $((epoch + 1)): counted 23 samples" <<<"$out" \
    || fail "epoch $((epoch + 1)): the tracked count is not 23: $out"
done
# At the same world size a resumed pass starts at the batch it stopped at.
mkdir -p "$work/same/ckpt" "$work/same/log"
"$run" --nproc-per-node 2 "$program" "$work/same/ckpt" "$work/same/log" a 2 >/dev/null 2>&1 || fail "2 ranks, same"
out=$("$run" --nproc-per-node 2 "$program" "$work/same/ckpt" "$work/same/log" b 3 2>&1) || fail "2 ranks again: $out"
grep -q "epoch 1: pass starts at batch 2 of 6" <<<"$out" || fail "same world size: the pass's start: $out"
echo PASS
