#!/usr/bin/env bash
# zero_resume_world_size.sh RUN PROGRAM WORKDIR: ZeroRedundancyOptimizer state
# saved at one world size resumes at another (torch_zero_resume): saved at 2
# ranks, resumed at 3 and at 1; saved at 3, resumed at 2.
set -uo pipefail
run=$1; program=$2; work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"; mkdir -p "$work/from2" "$work/from3"
for pair in "2 3" "2 1" "3 2"; do
  read -r saved resumed <<<"$pair"
  dir="$work/from$saved"
  [ -f "$dir/state.pt" ] || { out=$("$run" --nproc-per-node "$saved" "$program" save "$dir" 2>&1) \
    || fail "save at $saved ranks: $out"; }
  out=$("$run" --nproc-per-node "$resumed" "$program" resume "$dir" 2>&1) \
    || fail "resume at $resumed ranks of a state saved at $saved: $out"
  grep -q "resumed at world size $resumed: state identical" <<<"$out" || fail "no result line: $out"
  grep "resumed at world size" <<<"$out"
done
echo PASS
