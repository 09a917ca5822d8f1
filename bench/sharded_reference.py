"""Python's torch.distributed.checkpoint.save (DCP) on the same sharded state as bench_sharded.cpp.

Usage (PyTorch 2.x, one process per rank, Gloo, launched by torchrun):
  torchrun --nproc-per-node 2 sharded_reference.py SIZE_MIB DIR TRIALS [async]
State (same keys, shapes, values and sharding as the C++ side): for i in 0..SIZE_MIB/16-1,
"layers.<i>.weight" [1024, 4096] float32, element e holding float(e + i), a DTensor sharded by
rows (Shard(0), torch.chunk's pieces) on a 1-D CPU device mesh; each rank builds only its rows.
TRIALS times after one untimed warm-up: rank 0 removes DIR/dcp and runs os.sync() (untimed),
then dcp.save(state, checkpoint_id=DIR/dcp) is timed from a barrier to a barrier (DCP's
FileSystemWriter defaults: one thread per rank, sync_files=True, i.e. every data file fsynced).
Rank 0 prints save_mib_per_s=<MiB of tensor data per second, median of TRIALS>; per-trial
seconds go to stderr. Removes DIR/dcp at the end.
With `async`: dcp.async_save(state, checkpoint_id=DIR/dcp-N, process_group=<a Gloo group of its
own>, as DCP's docs advise), each call timed on each rank; before each, the previous save's
future is waited for and os.sync() run (untimed). Rank 0 prints dcp_async_block_ms=<the slowest
rank's, median of TRIALS>.
"""
import os
import shutil
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

COLS = 4096
ROWS = 1024


def main():
    if len(sys.argv) not in (4, 5) or (len(sys.argv) == 5 and sys.argv[4] != "async"):
        sys.exit("usage: sharded_reference.py SIZE_MIB DIR TRIALS [async]")
    size_mib, directory, trials = int(sys.argv[1]), sys.argv[2], max(1, int(sys.argv[3]))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    path = os.path.join(directory, "dcp")
    piece = -(-ROWS // world)  # torch.chunk's piece
    begin, end = min(ROWS, rank * piece), min(ROWS, (rank + 1) * piece)
    state = {}
    for i in range(size_mib // 16):
        local = (torch.arange(begin * COLS, end * COLS, dtype=torch.int64) + i).float().reshape(end - begin, COLS)
        state[f"layers.{i}.weight"] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                                         shape=torch.Size([ROWS, COLS]), stride=(COLS, 1))
    if len(sys.argv) == 5:
        time_async_save(state, directory, trials, rank)
        dist.destroy_process_group()
        return
    times = []
    for _ in range(trials + 1):  # the first is the warm-up
        if rank == 0:
            shutil.rmtree(path, ignore_errors=True)
            os.sync()
        dist.barrier()
        t0 = time.perf_counter()
        dcp.save(state, checkpoint_id=path)
        dist.barrier()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        print(f"pytorch dcp.save seconds: (warm-up {times[0]:.3f}) " + " ".join(f"{s:.3f}" for s in times[1:]),
              file=sys.stderr)
        print(f"save_mib_per_s={size_mib / sorted(times[1:])[len(times[1:]) // 2]:.1f}", flush=True)
        shutil.rmtree(path, ignore_errors=True)
    dist.barrier()
    dist.destroy_process_group()


def time_async_save(state, directory, trials, rank):
    group = dist.new_group(backend="gloo")
    times, future = [], None
    for t in range(trials + 1):  # the first is the warm-up
        if future is not None:
            future.result()
        if rank == 0:
            shutil.rmtree(os.path.join(directory, f"dcp-{t - 1}"), ignore_errors=True)
            os.sync()
        dist.barrier()
        t0 = time.perf_counter()
        future = dcp.async_save(state, checkpoint_id=os.path.join(directory, f"dcp-{t}"), process_group=group)
        took = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        times.append(took.item())
    future.result()
    dist.barrier()
    if rank == 0:
        print(f"pytorch dcp.async_save seconds: (warm-up {times[0]:.3f}) " + " ".join(f"{s:.3f}" for s in times[1:]),
              file=sys.stderr)
        print(f"dcp_async_block_ms={sorted(times[1:])[len(times[1:]) // 2] * 1000:.2f}", flush=True)
        shutil.rmtree(os.path.join(directory, f"dcp-{trials}"), ignore_errors=True)


if __name__ == "__main__":
    main()
