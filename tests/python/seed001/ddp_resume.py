# Seed 001's ddp_resume.py (../shared/seeds/001_*.txt), verbatim: run by
# tests/e2e/torchrun_parity.sh under torchrun, beside its C++ port examples/resume.cpp.
import os
import torch
import torch.nn as nn
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group(backend="gloo")
rank = dist.get_rank()

torch.manual_seed(0)
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)

start_step = 0
if os.path.exists("ckpt.pt"):
    # load BEFORE wrapping in DDP, on every rank, from CPU
    ckpt = torch.load("ckpt.pt", map_location="cpu", weights_only=True)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    start_step = ckpt["step"]

ddp = DDP(model)          # broadcasts rank 0's weights, so all ranks agree anyway
print(f"rank {rank}: resuming from step {start_step}, "
      f"weight checksum {ddp.module.weight.sum().item():.6f}")

dist.destroy_process_group()
