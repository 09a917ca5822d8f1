"""Prints torch.utils.data.DistributedSampler's index lists as JSON.

Usage: sampler_reference.py N REPLICAS SEED EPOCH SHUFFLE DROP_LAST
Output: {"0": [...], "1": [...], ...} for every rank. Run with Debian's
/usr/bin/python3 (python3-torch 1.13).
"""
import json
import sys

from torch.utils.data.distributed import DistributedSampler

n, replicas, seed, epoch, shuffle, drop_last = (int(a) for a in sys.argv[1:7])
result = {}
for rank in range(replicas):
    sampler = DistributedSampler(range(n), num_replicas=replicas, rank=rank,
                                 shuffle=bool(shuffle), seed=seed, drop_last=bool(drop_last))
    sampler.set_epoch(epoch)
    result[str(rank)] = list(sampler)
print(json.dumps(result))
