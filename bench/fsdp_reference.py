"""PyTorch's own FSDP2 (fully_shard) on the job of fsdp_bench.cpp's `train` mode (reference side).

Usage (PyTorch 2.x, one process per rank, Gloo on the CPU, launched by torchrun):
  torchrun --nproc-per-node 2 fsdp_reference.py BLOCKS WIDTH BATCH STEPS WARMUP
Model: nn.Sequential of BLOCKS nn.Linear(WIDTH, WIDTH) (seed 0), each Linear wrapped with
fully_shard and then the root (defaults: reshard_after_forward=True, FSDP2's implicit
prefetch), on a 1-D CPU device mesh; torch.optim.Adam(lr=1e-3) over the sharded parameters;
an MSE loss against a random target, BATCH rows per rank (seed 1 + rank); 1 intra-op thread.
WARMUP untimed steps, then STEPS timed ones between barriers.
Memory, as the C++ side: VmHWM right after init_process_group (base), after wrapping and
building the optimizer (startup), then reset (echo 5 > /proc/self/clear_refs) and read after
the steps (train). Rank 0 prints the same key=value lines as fsdp_bench.cpp: base_hwm_mib=,
startup_mib=, train_mib= (minus base), hwm_reset=, samples_per_s=, lo_bytes_per_step=.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return status_kb("VmHWM") <= status_kb("VmRSS") + 1024


def lo_bytes():
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[8])
    return -1


def per_rank(value):
    t = torch.zeros(dist.get_world_size(), dtype=torch.float64)
    t[dist.get_rank()] = value
    dist.all_reduce(t)
    return t.tolist()


def list_and_max(values):
    return ",".join(f"{v:.1f}" for v in values) + f" max={max(values):.1f}"


def main():
    if len(sys.argv) != 6:
        sys.exit("usage: fsdp_reference.py BLOCKS WIDTH BATCH STEPS WARMUP")
    blocks, width, batch, steps, warmup = (int(a) for a in sys.argv[1:])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    base_kb = status_kb("VmHWM")

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(blocks)])
    mesh = init_device_mesh("cpu", (world,))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    startup_kb = status_kb("VmHWM")
    reset_ok = reset_hwm()

    torch.manual_seed(1 + rank)
    x = torch.randn(batch, width)
    y = torch.randn(batch, width)

    def step():
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()

    for _ in range(warmup):
        step()
    dist.barrier()
    lo_start = lo_bytes()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    dist.barrier()
    seconds = time.perf_counter() - start
    lo_end = lo_bytes()
    train_kb = status_kb("VmHWM")

    base = per_rank(base_kb / 1024)
    startup = per_rank((startup_kb - base_kb) / 1024)
    trained = per_rank((train_kb - base_kb) / 1024)
    resets = per_rank(1 if reset_ok else 0)
    if rank == 0:
        print(f"strategy=pytorch-fully_shard world={world} blocks={blocks} width={width} batch={batch} "
              f"steps={steps} warmup={warmup} torch={torch.__version__}")
        print(f"base_hwm_mib={list_and_max(base)}")
        print(f"startup_mib={list_and_max(startup)}")
        print(f"train_mib={list_and_max(trained)}")
        print(f"hwm_reset={'ok' if all(r == 1 for r in resets) else 'failed'}")
        print(f"samples_per_s={steps * batch * world / seconds:.1f}")
        print(f"lo_bytes_per_step={(lo_end - lo_start) / max(steps, 1):.0f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
