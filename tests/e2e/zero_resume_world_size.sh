#!/usr/bin/env bash
# zero_resume_world_size.sh RUN PROGRAM WORKDIR: ZeroRedundancyOptimizer state
# saved at one world size resumes at another (torch_zero_resume), from the
# consolidated state_dict (resume) and from the sharded checkpoint every rank
# wrote its own partition into (resume-sharded): saved at 2 ranks, resumed at
# 3 and at 1; saved at 3, resumed at 2.
set -uo pipefail
run=$1; program=$2; work=$3
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"; mkdir -p "$work/from2" "$work/from3"
for pair in "2 3 resume" "2 1 resume" "3 2 resume" "2 3 resume-sharded" "2 1 resume-sharded" "3 2 resume-sharded"; do
  read -r saved resumed mode <<<"$pair"
  dir="$work/from$saved"
  [ -f "$dir/state.pt" ] || { out=$("$run" --nproc-per-node "$saved" "$program" save "$dir" 2>&1) \
    || fail "save at $saved ranks: $out"; }
  out=$("$run" --nproc-per-node "$resumed" "$program" "$mode" "$dir" 2>&1) \
    || fail "$mode at $resumed ranks of a state saved at $saved: $out"
  grep -q "resumed.* at world size $resumed: state identical" <<<"$out" || fail "no result line: $out"
  grep "resumed.* at world size" <<<"$out"
done
echo PASS
