#!/usr/bin/env bash
# fabric_accumulate_policy.sh RUN PROGRAM ACCUM WORLD WORKDIR: gradient
# accumulation as a Fabric policy (torch_fabric_accumulate: --accumulate's
# FabricOptions::accumulate(ACCUM), fabric.optimizer_step(), no no_sync() in
# the loop). Run L trains with batches of 4*ACCUM and no accumulation; run A
# with batches of 4 accumulated ACCUM at a time: A must end with L's
# parameters, optimizer and scheduler state (float tolerance: the sums run
# in another order) and the same step count (optimizer steps). In run B the
# last rank SIGKILLs itself mid-group after step 3 and rankwise-run
# --max-restarts 1 restarts the job: it must resume from a checkpoint at an
# optimizer step and end bitwise equal to A.
set -uo pipefail
run=$1; program=$2; accum=$3; world=$4; work=$5
here=$(cd "$(dirname "$0")" && pwd)
python=${RANKWISE_PYTHON:-/usr/bin/python3}
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"; mkdir -p "$work"
out=$("$run" --nproc-per-node "$world" "$program" 1 $((4 * accum)) 2 "$work/L" 2>&1) || fail "run L: $out"
out=$("$run" --nproc-per-node "$world" "$program" "$accum" 4 2 "$work/A" 2>&1) || fail "run A: $out"
"$python" - "$work/L/final.pt" "$work/A/final.pt" <<'PY' || fail "accumulating differs from the large batch"
import sys, torch
large, acc = (torch.load(p, map_location="cpu") for p in sys.argv[1:3])
for key in ("step", "epoch", "position"):
    assert large[key] == acc[key], f"{key}: {large[key]} != {acc[key]}"
def close(x, y, where):
    if isinstance(x, torch.Tensor):
        assert torch.allclose(x.double(), y.double(), rtol=1e-4, atol=1e-6), \
            f"{where}: max abs diff {(x.double() - y.double()).abs().max().item():g}"
    elif isinstance(x, dict):
        assert list(x) == list(y), f"{where}: keys {list(x)} != {list(y)}"
        for k in x: close(x[k], y[k], f"{where}.{k}")
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y), where
        for i, (a, b) in enumerate(zip(x, y)): close(a, b, f"{where}[{i}]")
    else:
        assert x == y, f"{where}: {x} != {y}"
for key in ("model", "optimizer", "lr_scheduler"):
    close(large[key], acc[key], key)
print(f"accumulated {sys.argv[2]} equals the large batch at step {acc['step']}")
PY
out=$("$run" --nproc-per-node "$world" --max-restarts 1 "$program" "$accum" 4 2 "$work/B" 3 2>&1) \
  || fail "run B: $out"
grep -q "rank $((world - 1)) was killed by SIGKILL" <<<"$out" || fail "run B was not killed: $out"
resumed=$(grep -o "at step [0-9]* (epoch" <<<"$out" | grep -o "[0-9]*" | head -1)
[[ -n "$resumed" ]] || fail "run B did not resume: $out"
(( resumed % 2 == 0 || resumed == 12 / accum )) || fail "run B resumed at step $resumed: $out"
echo "run B resumed at step $resumed"
"$python" "$here/compare_checkpoints.py" "$work/A/final.pt" "$work/B/final.pt" \
  || fail "run B differs from the uninterrupted run"
echo PASS
