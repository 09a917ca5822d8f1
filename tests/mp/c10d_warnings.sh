#!/usr/bin/env bash
# c10d_warnings.sh RUN PROGRAM [ARG]: runs PROGRAM (tests/programs/torch_c10d_warning)
# on 2 ranks and checks its stderr: c10d's warning appears once per rank as
# one rankwise line, in C++ terms, and nothing of glog's or c10's raw format
# (libtorch without glog) does.
set -uo pipefail
run=$1; program=$2; shift 2
err=$("$run" --nproc-per-node 2 "$program" "$@" 2>&1 >/dev/null) || { echo "failed: $err"; exit 1; }
echo "$err"
fail() { echo "FAIL: $*"; exit 1; }
for r in 0 1; do
  line="^\[rank$r\]: rankwise: warning from c10d \(rank $r/2\): DistributedDataParallelOptions\(\)\.find_unused_parameters\(true\) was set, but did not find any unused parameters in the forward pass\. .* consider turning this flag off\. .*unused parameters\.$"
  [ "$(grep -Ec "$line" <<<"$err")" = 1 ] || fail "rank $r: the Reducer's warning once, as one rankwise line"
done
! grep -q 'InitGoogleLogging' <<<"$err" || fail "glog's 'Logging before InitGoogleLogging()' line"
! grep -Eq '^\[rank[0-9]\]: [IWEF][0-9]{8} ' <<<"$err" || fail "a raw glog line"
! grep -Eq '^\[rank[0-9]\]: \[[IWEF][0-9]{4} ' <<<"$err" || fail "a raw c10 log line"
! grep -Eq 'find_unused_parameters=True|DDP constructor|\(function ' <<<"$err" || fail "c10d's Python wording"
echo PASS
