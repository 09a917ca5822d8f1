# Seed 001's ddp_save_log.py (../shared/seeds/001_*.txt), verbatim: run by
# tests/e2e/torchrun_parity.sh under torchrun, beside its C++ port examples/save_and_log.cpp.
import torch
import torch.nn as nn
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group(backend="gloo")
rank, world = dist.get_rank(), dist.get_world_size()

torch.manual_seed(0)
ddp = DDP(nn.Linear(4, 1))
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)

torch.manual_seed(50 + rank)          # each rank holds different data
x, y = torch.randn(6, 4), torch.randn(6, 1)

# --- one training step -------------------------------------------------
opt.zero_grad(set_to_none=True)
loss = nn.functional.mse_loss(ddp(x), y)
loss.backward()
opt.step()

# --- a metric that is honest across all ranks --------------------------
local = torch.tensor([loss.item() * len(x), float(len(x))])
dist.all_reduce(local, op=dist.ReduceOp.SUM)      # sum losses AND sample counts
global_loss = (local[0] / local[1]).item()
print(f"rank {rank}: my loss {loss.item():.4f} | "
      f"true loss over all {int(local[1])} samples {global_loss:.4f}")

# --- exactly one rank writes the file ----------------------------------
if rank == 0:
    torch.save({"model": ddp.module.state_dict(),   # .module strips the DDP wrapper
                "opt": opt.state_dict(), "step": 1}, "ckpt.pt")
dist.barrier()                                      # nobody reads before rank 0 wrote

ckpt = torch.load("ckpt.pt", map_location="cpu", weights_only=True)
print(f"rank {rank}: loaded keys {list(ckpt['model'])}")

dist.destroy_process_group()
