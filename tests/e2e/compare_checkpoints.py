"""compare_checkpoints.py A B: exit 0 when two rankwise training-state
checkpoints hold bitwise-equal model parameters and the same step, epoch and
position; prints what differs otherwise. (The optimizer entry is libtorch's
archive, whose bytes name parameters by address, so it differs between
processes; equal parameters after further steps show its momentum came back.) Read with Python's torch.load
(Debian python3-torch), which is also an interop check."""
import sys

import torch


def main(a_path, b_path):
    a = torch.load(a_path, map_location="cpu", weights_only=False)
    b = torch.load(b_path, map_location="cpu", weights_only=False)
    problems = []
    for key in ("step", "epoch", "position", "world_size"):
        if a[key] != b[key]:
            problems.append(f"{key}: {a[key]} != {b[key]}")
    if list(a["model"]) != list(b["model"]):
        problems.append(f"model keys differ: {list(a['model'])} vs {list(b['model'])}")
    for name, tensor in a["model"].items():
        other = b["model"][name]
        if tensor.dtype != other.dtype or tensor.shape != other.shape or not torch.equal(tensor, other):
            diff = (tensor.double() - other.double()).abs().max().item()
            problems.append(f"model.{name} differs (max abs diff {diff:g})")
    if problems:
        print("DIFFERENT:\n  " + "\n  ".join(problems))
        return 1
    print(f"bitwise equal: {len(a['model'])} tensors, step {a['step']}, epoch {a['epoch']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
