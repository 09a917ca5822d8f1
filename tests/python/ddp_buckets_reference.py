"""Prints the gradient buckets PyTorch's DistributedDataParallel all_reduces.

Usage: ddp_buckets_reference.py BUCKET_CAP_MB [BUCKET_CAP_MB ...]
Output: {"version": torch.__version__, "<cap>": [step, ...]} where each step
is the list of buckets in the order their all_reduce ran, and each bucket the
names of its parameters, as a communication hook sees them
(GradBucket.parameters()). One process (Gloo, world size 1: the layout does not
depend on the world size), three SGD steps of the model of
tests/mp/test_ddp.cpp: fc1 = Linear(5, 8), fc2 = Linear(8, 3),
spare = Linear(8, 3); forward: h = tanh(fc1(x)); fc2(h) + spare(h).
"""
import json
import sys
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(5, 8)
        self.fc2 = nn.Linear(8, 3)
        self.spare = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        return self.fc2(h) + self.spare(h)


def buckets_per_step(cap_mb, steps=3):
    torch.manual_seed(0)
    net = Net()
    names = {p.data_ptr(): n for n, p in net.named_parameters()}
    ddp = nn.parallel.DistributedDataParallel(net, bucket_cap_mb=cap_mb)
    seen = []

    def hook(state, bucket):
        seen[-1].append([names[p.data_ptr()] for p in bucket.parameters()])
        return default_hooks.allreduce_hook(state, bucket)

    ddp.register_comm_hook(None, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for _ in range(steps):
        seen.append([])
        x, y = torch.randn(4, 5), torch.randn(4, 3)
        opt.zero_grad()
        nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return seen


with tempfile.TemporaryDirectory() as tmp:  # c10d's FileStore removes its file itself
    dist.init_process_group("gloo", init_method="file://" + tmp + "/store", rank=0, world_size=1)
    result = {"version": torch.__version__}
    for arg in sys.argv[1:]:
        result[arg] = buckets_per_step(float(arg))
    dist.destroy_process_group()
print(json.dumps(result))
