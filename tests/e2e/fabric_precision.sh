#!/usr/bin/env bash
# fabric_precision.sh RUN PROGRAM PRECISION WORLD WORKDIR: FabricOptions::
# precision(PRECISION) on a small MLP (torch_fabric_precision, 2 epochs, a
# synthetic 4-class task). Run F trains in 32-true and run A in PRECISION:
# A's held-out accuracy must be within 1 point of F's. In run B the last
# rank SIGKILLs itself mid-epoch after step 75 and rankwise-run
# --max-restarts 1 restarts the job: it must resume from the checkpoint of
# step 70 and end bitwise equal to A (parameters, optimizer state, RNG, and
# with 16-mixed the GradScaler's state).
set -uo pipefail
run=$1; program=$2; precision=$3; world=$4; work=$5
here=$(cd "$(dirname "$0")" && pwd)
python=${RANKWISE_PYTHON:-/usr/bin/python3}
fail() { echo "FAIL: $*"; exit 1; }
accuracy() { grep -o "accuracy [0-9.]*" <<<"$1" | grep -o "[0-9.]*$" | head -1; }
rm -rf "$work"; mkdir -p "$work"
out=$("$run" --nproc-per-node "$world" "$program" 32-true "$work/F" 2>&1) || fail "run F: $out"
full=$(accuracy "$out")
out=$("$run" --nproc-per-node "$world" "$program" "$precision" "$work/A" 2>&1) || fail "run A: $out"
mixed=$(accuracy "$out")
[[ -n "$full" && -n "$mixed" ]] || fail "no accuracy printed: $out"
echo "accuracy: 32-true $full, $precision $mixed"
"$python" -c "import sys; f, m = map(float, sys.argv[1:]); sys.exit(0 if f > 0.8 and abs(f - m) <= 0.01 else 1)" \
  "$full" "$mixed" || fail "$precision's accuracy $mixed is not within 1 point of 32-true's $full (or 32-true did not learn)"
out=$("$run" --nproc-per-node "$world" --max-restarts 1 "$program" "$precision" "$work/B" 75 2>&1) \
  || fail "run B: $out"
grep -q "rank $((world - 1)) was killed by SIGKILL" <<<"$out" || fail "run B was not killed: $out"
grep -q "at step 70 (epoch 2" <<<"$out" || fail "run B did not resume at step 70: $out"
"$python" "$here/compare_checkpoints.py" "$work/A/final.pt" "$work/B/final.pt" \
  || fail "run B differs from the uninterrupted run"
"$python" - "$work/A/final.pt" "$work/B/final.pt" "$precision" <<'PY' || fail "the GradScaler's state differs"
import sys, torch
a, b = (torch.load(p, map_location="cpu")["extras"] for p in sys.argv[1:3])
if sys.argv[3] == "16-mixed":
    assert "grad_scaler" in a, "no GradScaler state in final.pt"
    assert a["grad_scaler"] == b["grad_scaler"], f"{a['grad_scaler']} != {b['grad_scaler']}"
    print("GradScaler state:", a["grad_scaler"])
PY
echo PASS
