#!/usr/bin/env bash
# bench/run_main_job.sh BUILD: the main job (examples/fashion_mnist, one
# epoch, 2 ranks, batch 64, --progress off; its printed samples/s: the
# Fabric's epoch throughput, every rank's samples over rank 0's time from the
# pass's start to its last progress reduction, which every rank enters after
# its last batch; metrics included, evaluation and the epoch-end checkpoint
# not) against the minimal Python DDP loop of
# bench/main_job_reference.py (same model, optimizer, order and batches, each
# gathered by indexing the whole split). 3 alternating trials; the median
# ratio (> 1 favours rankwise). Needs Debian's dataset-fashion-mnist.
set -uo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/reference_python.sh"
py=$(reference_python "$build")
data=/usr/share/datasets/fashion-mnist
job="$build/examples/fashion_mnist"
[ -x "$job" ] && [ -f "$data/train-images-idx3-ubyte.gz" ] \
  || { echo "run_main_job.sh: needs $job and $data (scripts/setup)"; exit 0; }
work=$(mktemp -d "${TMPDIR:-/tmp}/rankwise-bench-XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=1
free_port() { $py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rankwise_side() {
  "$build/rankwise-run" --nproc-per-node 2 --no-tag "$job" --epochs 1 --progress off \
    --data-dir "$data" --checkpoint-dir "$work/ckpt" --overwrite-checkpoints 2>/dev/null \
    | sed -nE 's/.* ([0-9]+) samples\/s at world size.*/\1/p'
}
pytorch_side() {
  local port r
  port=$(free_port)
  for r in 0 1; do
    RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      $py "$here/main_job_reference.py" "$data" &
  done | sed -nE 's/.*samples_per_s=([0-9.]+).*/\1/p'
  wait
}
echo "== the main job vs a minimal Python DDP loop (PyTorch $($py -c 'import torch; print(torch.__version__)'), 2 ranks, 1 epoch) =="
ratios=()
for trial in $(seq 1 "${RANKWISE_BENCH_TRIALS:-3}"); do
  rw=$(rankwise_side); pt=$(pytorch_side)
  [ -n "$rw" ] && [ -n "$pt" ] || { echo "  trial $trial: a side printed no result (rankwise '$rw', pytorch '$pt')"; exit 1; }
  ratios+=("$(awk -v a="$rw" -v b="$pt" 'BEGIN {printf "%.2f", a / b}')")
  echo "  trial $trial: main job $rw, python loop $pt samples/s"
done
echo "  ratio (median): $(printf "%s\n" "${ratios[@]}" | sort -g | awk "{a[NR]=\$1} END {print a[int((NR+1)/2)]}") (${ratios[*]})"
