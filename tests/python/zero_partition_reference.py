"""PyTorch's ZeroRedundancyOptimizer partition of parameters over ranks, the
reference for rankwise::zero_partition (tests/unit/parallel/zero_redundancy_optimizer_test.cpp).

Usage: zero_partition_reference.py JSON, JSON being a list of cases
{"groups": [[numel, ...], ...], "world_size": W}. Prints a JSON list: per
case, the owning rank of each parameter (groups flattened in order).

It runs PyTorch's own _partition_parameters on an object built without a
process group (only world_size and param_groups are read), so no processes
are started.
"""
import json
import sys

import torch
from torch.distributed.optim import ZeroRedundancyOptimizer


def partition(groups, world_size):
    z = ZeroRedundancyOptimizer.__new__(ZeroRedundancyOptimizer)
    z.world_size = world_size
    params = [[torch.zeros(n) for n in group] for group in groups]
    z.param_groups = [{"params": p} for p in params]
    z._partition_parameters_cache = []
    owner = {}
    for rank, rank_groups in enumerate(z._partition_parameters()):
        for group in rank_groups:
            for p in group["params"]:
                owner[id(p)] = rank
    return [owner[id(p)] for group in params for p in group]


cases = json.loads(sys.argv[1])
print(json.dumps([partition(c["groups"], c["world_size"]) for c in cases]))
