"""The minimal Python DDP loop the main job (examples/fashion_mnist) is
measured against in `make bench` (bench/run_main_job.sh): the same MLP
(784-256-128-10), SGD(lr 0.02, momentum 0.9), batch 64 per rank, one epoch
of Fashion-MNIST's training split normalized as rankwise's loader does,
PyTorch's DistributedSampler order, and each batch gathered by indexing the
whole split (x[idx]); no metrics, progress or checkpoints.

Run one process per rank with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
Prints one line on rank 0: `pytorch main_job world=<W> samples_per_s=<X>`
(the split's samples over the slowest rank's epoch time).
Usage: main_job_reference.py DATA_DIR
"""
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data.distributed import DistributedSampler

MEAN, STD = 0.2860, 0.3530  # rankwise::data::kFashionMnistMean / kFashionMnistStd


def idx(path, offset):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


torch.set_num_threads(1)
data_dir = sys.argv[1]
world = int(os.environ.get("WORLD_SIZE", "1"))
rank = int(os.environ.get("RANK", "0"))
dist.init_process_group("gloo", rank=rank, world_size=world)
images = torch.from_numpy(idx(f"{data_dir}/train-images-idx3-ubyte.gz", 16).copy())
x_all = images.reshape(-1, 784).float().div_(255).sub_(MEAN).div_(STD)
y_all = torch.from_numpy(idx(f"{data_dir}/train-labels-idx1-ubyte.gz", 8).astype(np.int64))
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
model = nn.parallel.DistributedDataParallel(net)
opt = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
sampler = DistributedSampler(range(len(y_all)), num_replicas=world, rank=rank, shuffle=True, seed=0)
sampler.set_epoch(0)
order = torch.tensor(list(sampler))
loss_fn = nn.CrossEntropyLoss()
started = time.perf_counter()
for b in range(0, len(order), 64):
    i = order[b:b + 64]
    opt.zero_grad()
    loss_fn(model(x_all[i]), y_all[i]).backward()
    opt.step()
seconds = torch.tensor([time.perf_counter() - started], dtype=torch.float64)
dist.all_reduce(seconds, op=dist.ReduceOp.MAX)
if rank == 0:
    print(f"pytorch main_job world={world} samples_per_s={len(y_all) / seconds.item():.1f}")
dist.destroy_process_group()
