"""PyTorch's Python DDP on the same job as bench_ddp.cpp (reference side).

Run one process per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set
(Debian's torchrun fails on Python 3.11, see docs/getting-started.md, "Known quirks"). Prints one line on
rank 0: `pytorch <model> world=<W> samples_per_s=<X>`.
Usage: ddp_reference.py MODEL STEPS BATCH   (MODEL: mlp | wide)
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

torch.set_num_threads(1)
model_name, steps, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
if world > 1:
    dist.init_process_group("gloo")

torch.manual_seed(0)
if model_name == "mlp":
    net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                        nn.Linear(128, 10))
    in_features = 784
else:
    layers = [nn.Linear(784, 2048), nn.ReLU()]
    for _ in range(3):
        layers += [nn.Linear(2048, 2048), nn.ReLU()]
    net = nn.Sequential(*layers, nn.Linear(2048, 10))
    in_features = 784
model = nn.parallel.DistributedDataParallel(net) if world > 1 else net
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
torch.manual_seed(1 + rank)
distinct = min(steps, 50)  # 50 distinct batches, reused cyclically (as bench_ddp.cpp)
x = torch.randn(distinct, batch, in_features)
y = torch.randint(0, 10, (distinct, batch))
loss_fn = nn.CrossEntropyLoss()


def step(i):
    opt.zero_grad()
    loss_fn(model(x[i % distinct]), y[i % distinct]).backward()
    opt.step()


for i in range(min(5, steps)):  # warm-up
    step(i)
if world > 1:
    dist.barrier()
start = time.perf_counter()
for i in range(steps):
    step(i)
if world > 1:
    dist.barrier()
elapsed = time.perf_counter() - start
if rank == 0:
    print(f"pytorch {model_name} world={world} samples_per_s={steps * batch * world / elapsed:.1f}")
