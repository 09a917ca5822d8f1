#!/usr/bin/env bash
# fabric_argv.sh RUN PROGRAM: Fabric(argc, argv) takes its own flags out of
# argv and leaves the program's, in order; --help shows the Fabric's flags
# and then the program's (torch_fabric_argv), once for 2 ranks; a program
# without a parser exits 0 at setup() after --help, without training.
set -uo pipefail
run=$1; program=$2
fail() { echo "FAIL: $*"; exit 1; }
out=$("$run" --nproc-per-node 2 "$program" --epochs 3 --seed 5 --lr=0.1 -- --device x 2>&1) \
  || fail "plain run: $out"
grep -qx "\[rank0\]: program sees: --epochs 3 --lr=0.1 -- --device x" <<<"$out" \
  || fail "the program saw other arguments: $out"
grep -qx "\[rank0\]: seed 5" <<<"$out" || fail "--seed was not the Fabric's: $out"
out=$("$run" --nproc-per-node 2 "$program" --epochs 3 --help 2>&1) || fail "--help: $out"
grep -q -- "--checkpoint-dir" <<<"$out" || fail "--help without the Fabric's flags: $out"
grep -q "program options: --epochs N" <<<"$out" || fail "--help without the program's flags: $out"
[[ $(grep -c -- "--checkpoint-every" <<<"$out") == 1 ]] || fail "--help printed more than once: $out"
out=$("$run" --nproc-per-node 2 "$program" --help --no-parser 2>&1) || fail "--help, no parser: $out"
grep -q "trained" <<<"$out" && fail "--help without a parser went on: $out"
grep -q -- "--checkpoint-dir" <<<"$out" || fail "--help without the Fabric's flags: $out"
for bad in x -1 99999999999999999999; do  # CLI11 alone would wrap -1 and the overflow
  out=$("$run" --nproc-per-node 1 "$program" --seed "$bad" 2>&1) && fail "--seed $bad was accepted: $out"
  grep -q -- "--seed" <<<"$out" || fail "a bad --seed ($bad) is not named: $out"
done
echo PASS
