#!/usr/bin/env bash
# fashion_mnist_plain.sh PROGRAM: the main job's one-process original (the
# "before" of the README's diff) still builds, trains and prints its epoch
# line: accuracy above 0.55 after one short epoch, as the Fabric version.
set -uo pipefail
program=$1
fail() { echo "FAIL: $*"; exit 1; }
if [ ! -f /usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz ]; then
  echo "dataset-fashion-mnist is not installed (run scripts/setup)"; exit 1
fi
out=$("$program" --epochs 1 --limit 2000 2>&1) || fail "run: $out"
echo "$out"
line=$(grep -E '^epoch 1/1 \| train loss [0-9.]+ over 2000 samples \| test accuracy 0\.[0-9]{4}, macro F1 0\.[0-9]{4} over 2000 samples \| [0-9]+ samples/s$' <<<"$out") \
  || fail "epoch line"
acc=$(sed -E 's/.*test accuracy (0\.[0-9]+),.*/\1/' <<<"$line")
awk -v a="$acc" 'BEGIN { exit !(a > 0.55) }' || fail "accuracy $acc after one short epoch should exceed 0.55"
out=$("$program" --epochs 1 --no-such-flag 2>&1) && fail "an unknown flag was accepted: $out"
echo PASS
