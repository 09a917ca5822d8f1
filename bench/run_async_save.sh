#!/usr/bin/env bash
# bench/run_async_save.sh BUILD: asynchronous saves (issue 38).
#  1. Blocking: what CheckpointManager::save_async blocks the caller for, a
#     256 MiB and a 1 GiB state (bench_checkpoint's `async` phase), against a
#     plain memcpy of the state into buffers allocated once (the floor), the
#     synchronous save, and DCP's async_save of the same state
#     (bench/async_save_reference.py: a torch 2.x; Debian's 1.13 has none, so
#     the Debian leg borrows build-wheel/venv's when it exists). Goals:
#     <= 1.2x the memcpy, <= 0.5x DCP's blocking. Also the peak extra memory.
#     The same for sharded checkpoints at 2 ranks (bench_sharded's `async`
#     mode; DCP's async_save under torchrun, bench/sharded_reference.py).
#  2. Throughput, saving synchronously, asynchronously and not at all (3
#     alternating trials, medians; goal: async >= 0.9 of none): bench_ddp's
#     wide model (2 ranks, a 132 MiB state of parameters and momentum, saved
#     every 4 steps, about as long as a write takes), and the main job
#     (examples/fashion_mnist, 2 ranks, 1 epoch, a 1 MiB state every 5 steps).
set -uo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/reference_python.sh"
py=$(reference_python "$build")
bench="$build/bench/bench_checkpoint"
[ -x "$bench" ] || { echo "run_async_save.sh: build bench_checkpoint first"; exit 0; }
dcp_py=$py
"$dcp_py" -c 'import torch.distributed.checkpoint as d; d.async_save' 2>/dev/null || dcp_py="$here/../build-wheel/venv/bin/python"
"$dcp_py" -c 'import torch.distributed.checkpoint as d; d.async_save' 2>/dev/null || dcp_py=""
dir=$(mktemp -d "$build/bench/async-tmp-XXXXXX")
trap 'rm -rf "$dir"' EXIT
field() { sed -nE "s/^$1=([0-9.]+)$/\1/p"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "" || b == "" || b == 0) print "n/a"; else printf "%.2f", a / b}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo "== Asynchronous saves: save_async's blocking vs a memcpy of the state, save, and DCP async_save (ms, median of 5 after a warm-up) =="
echo "  DCP: ${dcp_py:-none} ($([ -n "$dcp_py" ] && "$dcp_py" -c 'import torch; print(torch.__version__)')); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| state | memcpy | save_async | save | DCP async_save | save_async / memcpy | save_async / DCP | save_async ms per GiB | peak extra MiB |"
echo "|---|---|---|---|---|---|---|---|---|"
export OMP_NUM_THREADS=1
for size in 256 1024; do
  out=$("$bench" "$size" "$dir" 5 async 2>/dev/null)
  cpy=$(field memcpy_ms <<<"$out"); blk=$(field async_block_ms <<<"$out")
  sav=$(field sync_save_ms <<<"$out"); extra=$(field async_extra_mib <<<"$out")
  dcp=""
  [ -n "$dcp_py" ] && dcp=$("$dcp_py" "$here/async_save_reference.py" "$size" "$dir" 5 2>/dev/null | field dcp_async_block_ms)
  printf '| %s MiB | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$size" "$cpy" "$blk" "$sav" "${dcp:-n/a}" \
    "$(ratio "$blk" "$cpy")" "$(ratio "$blk" "$dcp")" "$(awk -v b="$blk" -v s="$size" 'BEGIN {printf "%.0f", b * 1024 / s}')" "$extra"
done

sharded_async() {  # SIZE_MIB: one table row, 2 ranks
  local size=$1 out dcp="" torchrun
  out=$("$build/rankwise-run" --nproc-per-node 2 --no-tag "$build/bench/bench_sharded" "$size" "$dir" 5 async 2>/dev/null)
  local cpy blk sav pub extra
  cpy=$(field memcpy_ms <<<"$out"); blk=$(field async_block_ms <<<"$out"); sav=$(field sync_save_ms <<<"$out")
  pub=$(field next_call_ms <<<"$out"); extra=$(field async_extra_mib <<<"$out")
  torchrun="$(dirname "$dcp_py")/torchrun"
  if [ -n "$dcp_py" ] && [ -x "$torchrun" ]; then
    local port
    port=$("$dcp_py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    dcp=$("$torchrun" --nproc-per-node 2 --master-addr 127.0.0.1 --master-port "$port" \
      "$here/sharded_reference.py" "$size" "$dir" 5 async 2>/dev/null | field dcp_async_block_ms)
  fi
  printf '| %s MiB (%s per rank) | %s | %s | %s | %s | %s | %s / %s | %s / %s | %s | %s |\n' "$size" "$((size / 2)) MiB" \
    "$cpy" "$blk" "$pub" "$sav" "${dcp:-n/a}" "$(ratio "$blk" "$cpy")" "$(ratio "$pub" "$cpy")" \
    "$(ratio "$blk" "$dcp")" "$(ratio "$pub" "$dcp")" "$(awk -v b="$blk" -v s="$size" 'BEGIN {printf "%.0f", b * 1024 / s}')" \
    "$extra"
}
if [ -x "$build/bench/bench_sharded" ]; then
  echo "== Sharded asynchronous saves, 2 ranks: ShardedCheckpointManager::save_async's blocking (the slowest rank's) vs a memcpy of each rank's shard, save, and DCP async_save at 2 ranks (ms, median of 5 after a warm-up) =="
  echo "  (next call: a save_async called while the previous one is in flight, less its wait for that write: the ranks' agreement on the previous save, then its own begin and copy; the previous save's publication is on the writer thread)"
  echo "| state | memcpy | save_async | next call | save | DCP async_save | save_async / memcpy, next call / memcpy | save_async / DCP, next call / DCP | save_async ms per GiB | peak extra MiB per rank |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for size in 256 1024; do sharded_async "$size"; done
fi

echo "== Training throughput with saves: bench_ddp wide (2 ranks, batch 64, 40 steps, a save every 4; samples/s) =="
ddp() {  # [sync|async]
  local extra=()
  [ $# -gt 0 ] && extra=(0 4 "$1" "$dir/ddp")
  rm -rf "$dir/ddp"
  "$build/rankwise-run" --nproc-per-node 2 --no-tag "$build/bench/bench_ddp" wide 40 64 "${extra[@]}" 2>/dev/null \
    | sed -nE 's/.*samples_per_s=([0-9.]+).*/\1/p'
}
nones=() syncs=() asyncs=()
for trial in 1 2 3; do
  n=$(ddp); s=$(ddp sync); a=$(ddp async)
  echo "  trial $trial: no saves $n, sync $s, async $a"
  nones+=("$n"); syncs+=("$s"); asyncs+=("$a")
done
n=$(printf '%s\n' "${nones[@]}" | median); s=$(printf '%s\n' "${syncs[@]}" | median); a=$(printf '%s\n' "${asyncs[@]}" | median)
echo "  medians: no saves $n, sync $s ($(ratio "$s" "$n") of none), async $a ($(ratio "$a" "$n") of none)"

data=/usr/share/datasets/fashion-mnist
job="$build/examples/fashion_mnist"
[ -x "$job" ] && [ -f "$data/train-images-idx3-ubyte.gz" ] || { echo "run_async_save.sh: needs $job and $data"; exit 0; }
main_job() {  # extra flags...: the epoch's samples/s
  "$build/rankwise-run" --nproc-per-node 2 --no-tag "$job" --epochs 1 --progress off --data-dir "$data" \
    --checkpoint-dir "$dir/ckpt" --overwrite-checkpoints --keep-last 2 "$@" 2>/dev/null \
    | sed -nE 's/.* ([0-9]+) samples\/s at world size.*/\1/p'
}
echo "== Training throughput with a save every 5 steps (main job, 2 ranks, 1 epoch; samples/s) =="
export OMP_NUM_THREADS=1
nones=() syncs=() asyncs=()
for trial in 1 2 3; do
  n=$(main_job); s=$(main_job --checkpoint-every 5); a=$(main_job --checkpoint-every 5 --checkpoint-async)
  echo "  trial $trial: no saves $n, sync $s, async $a"
  nones+=("$n"); syncs+=("$s"); asyncs+=("$a")
done
n=$(printf '%s\n' "${nones[@]}" | median); s=$(printf '%s\n' "${syncs[@]}" | median); a=$(printf '%s\n' "${asyncs[@]}" | median)
echo "  medians: no saves $n, sync $s ($(ratio "$s" "$n") of none), async $a ($(ratio "$a" "$n") of none)"
