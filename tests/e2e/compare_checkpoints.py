"""compare_checkpoints.py A B: exit 0 when two rankwise training-state
checkpoints are bitwise equal where a resumed run must equal an uninterrupted
one: model parameters, step, epoch, position, world size, and (when present)
the optimizer state_dict (every per-parameter tensor and every param_group
option), the learning-rate scheduler state and every rank's RNG states.
Prints what differs otherwise. Read with Python's torch.load and its defaults
(weights_only=True from torch 2.6; False on Debian's 1.13, whose weights-only
unpickler reads no float), which is also an interop check."""
import sys

import torch


def same(x, y):
    """Bitwise equality of nested dicts/lists/tuples of tensors and scalars."""
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dtype == y.dtype
                and x.shape == y.shape and torch.equal(x, y))
    if isinstance(x, dict) and isinstance(y, dict):
        return list(x) == list(y) and all(same(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(same(a, b) for a, b in zip(x, y))
    return type(x) == type(y) and x == y


def main(a_path, b_path):
    a = torch.load(a_path, map_location="cpu")
    b = torch.load(b_path, map_location="cpu")
    problems = []
    for key in ("format", "step", "epoch", "position", "world_size"):
        if a[key] != b[key]:
            problems.append(f"{key}: {a[key]} != {b[key]}")
    if list(a["model"]) != list(b["model"]):
        problems.append(f"model keys differ: {list(a['model'])} vs {list(b['model'])}")
    for name, tensor in a["model"].items():
        other = b["model"][name]
        if not same(tensor, other):
            diff = (tensor.double() - other.double()).abs().max().item()
            problems.append(f"model.{name} differs (max abs diff {diff:g})")
    checked = [f"{len(a['model'])} model tensors"]
    if a["format"] != "rankwise.training_state/1":  # format 1's optimizer entry names addresses
        for key in ("optimizer_type", "optimizer", "lr_scheduler"):
            if (key in a) != (key in b):
                problems.append(f"{key} present in only one checkpoint")
            elif key in a:
                checked.append(key)
                if not same(a[key], b[key]):
                    problems.append(f"{key} differs:\n    {a[key]}\n    {b[key]}")
    for rank, (x, y) in enumerate(zip(a["rank_states"], b["rank_states"])):
        if not same(x["rng"], y["rng"]):
            problems.append(f"rank {rank}'s RNG state differs")
    checked.append(f"{len(a['rank_states'])} RNG states")
    if problems:
        print("DIFFERENT:\n  " + "\n  ".join(problems))
        return 1
    print(f"bitwise equal: {', '.join(checked)}; step {a['step']}, epoch {a['epoch']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
