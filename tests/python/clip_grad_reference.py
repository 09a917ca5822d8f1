"""PyTorch's torch.nn.utils.clip_grad_norm_ on DDP-averaged gradients, the
reference for rankwise::parallel::clip_grad_norm and
ZeroRedundancyOptimizer::clip_grad_norm (tests/mp/test_clip_grad.cpp).

Usage: clip_grad_reference.py JSON, JSON being
  {"world_size": W, "scale": s, "shapes": [[d, ...], ...],
   "without_grad": [i, ...], "cases": [[max_norm, norm_type], ...]}
(norm_type a number or "inf"). On rank r, parameter i's gradient is
sin(arange(numel) * (i + 1) + r) * scale (float32, reshaped to shapes[i]);
the parameters in without_grad have none. The gradients are averaged over
the W ranks as DDP does (each divided by W, then summed), then each case
clips a fresh copy. Prints JSON:
  {"version": torch.__version__, "cases": [{"max_norm", "norm_type",
   "total_norm", "grads": [[float, ...] (flattened) or null, ...]}, ...]}
with every float32 value as the float64 it is, so json's repr keeps it
exactly.
"""
import json
import math
import sys

import torch


def rank_grad(i, shape, rank, scale):
    numel = math.prod(shape)
    g = torch.sin(torch.arange(numel, dtype=torch.float32) * (i + 1) + rank) * scale
    return g.reshape(shape)


def averaged_grads(spec):
    world = spec["world_size"]
    grads = []
    for i, shape in enumerate(spec["shapes"]):
        if i in spec["without_grad"]:
            grads.append(None)
            continue
        total = torch.zeros(shape, dtype=torch.float32)
        for r in range(world):
            total += rank_grad(i, shape, r, spec["scale"]) / world
        grads.append(total)
    return grads


def clip_case(spec, max_norm, norm_type):
    params = []
    for shape, grad in zip(spec["shapes"], averaged_grads(spec)):
        p = torch.zeros(shape, dtype=torch.float32, requires_grad=True)
        p.grad = grad
        params.append(p)
    total = torch.nn.utils.clip_grad_norm_(params, max_norm, float(norm_type))
    return {
        "max_norm": max_norm,
        "norm_type": str(norm_type),
        "total_norm": float(total),
        "grads": [None if p.grad is None else [float(v) for v in p.grad.reshape(-1).tolist()]
                  for p in params],
    }


spec = json.loads(sys.argv[1])
print(json.dumps({
    "version": torch.__version__,
    "cases": [clip_case(spec, max_norm, norm_type) for max_norm, norm_type in spec["cases"]],
}))
