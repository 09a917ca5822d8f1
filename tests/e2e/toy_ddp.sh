#!/usr/bin/env bash
# toy_ddp.sh RUN PROGRAM: the seed-000 toy through the launcher with the seed's tags.
set -uo pipefail
run=$1; program=$2
out=$("$run" --nproc-per-node 2 --tag '[GPU{rank}] ' "$program") || { echo "failed: $out"; exit 1; }
echo "$out"
fail() { echo "FAIL: $*"; exit 1; }
[ "$(grep -c '^\[GPU0\] rankwise .* world size: 2 | backend: gloo$' <<<"$out")" = 1 ] || fail "header once, from GPU0"
[ "$(grep -c 'rankwise .*world size' <<<"$out")" = 1 ] || fail "header printed more than once"
for r in 0 1; do
  for e in 001 002 003; do
    grep -Eq "^\[GPU$r\] Epoch: $e/003 \| Batchsize 002 \| Train/Val Loss: [0-9]+\.[0-9]{2}$" <<<"$out" \
      || fail "GPU$r epoch $e line"
  done
done
[ "$(grep -c 'Test accuracy' <<<"$out")" = 1 ] || fail "test accuracy printed exactly once"
grep -q '^\[GPU0\] Test accuracy: 1.00 (2 of 2 samples, 2 ranks)$' <<<"$out" || fail "accuracy over both test samples"
echo PASS
