"""Checkpoints as PyTorch 2.6's torch.load default (weights_only=True) reads them
(tests/unit/checkpoint/torch_save/weights_only_interop_test.cpp).

  weights_only_load.py version          print torch's "major.minor"
  weights_only_load.py seed DIR         in DIR, seed 001's line
                                        torch.load("ckpt.pt", map_location="cpu", weights_only=True),
                                        then print the seed's "loaded keys [...]"
  weights_only_load.py plain DIR        in DIR, torch.load(path) with its default arguments
                                        (ckpt.pt by its absolute path), then print the top-level keys
  weights_only_load.py python-save DIR  torch.save in DIR/ckpt.pt what seed 001's ddp_save_log.py saves

seed and plain then print "same as weights_only=False" when what they loaded equals
what the unrestricted unpickler loads, or "refused: " and the weights-only
unpickler's reason.
"""
import os
import sys

import torch


def same(x, y):
    """Equality of nested dicts/lists/tuples of tensors and scalars, types included."""
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        return (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.dtype == y.dtype
                and x.shape == y.shape and torch.equal(x, y))
    if type(x) != type(y):
        return False
    if isinstance(x, dict):
        return list(x) == list(y) and all(same(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return len(x) == len(y) and all(same(a, b) for a, b in zip(x, y))
    return x == y


def checked(load, describe):
    """Loads ckpt.pt with `load`; prints describe(checkpoint) and how it compares."""
    try:
        ckpt = load()
    except Exception as e:  # torch's UnpicklingError; 1.13 raises others too
        reason = str(e).split("WeightsUnpickler error: ")[-1]
        print(f"refused: {reason.splitlines()[0]}")
        return 0
    print(describe(ckpt))
    unrestricted = torch.load("ckpt.pt", map_location="cpu", weights_only=False)
    print("same as weights_only=False" if same(ckpt, unrestricted) else "differs from weights_only=False")
    return 0


def python_save():
    """The checkpoint of seed 001's ddp_save_log.py, one process, no DDP."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(50)
    x, y = torch.randn(6, 4), torch.randn(6, 1)
    opt.zero_grad(set_to_none=True)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": 1}, "ckpt.pt")
    print("written")
    return 0


def main(mode, directory=None):
    if mode == "version":
        print(".".join(torch.__version__.split(".")[:2]))
        return 0
    os.chdir(directory)
    if mode == "seed":
        return checked(lambda: torch.load("ckpt.pt", map_location="cpu", weights_only=True),
                       lambda ckpt: f"loaded keys {list(ckpt['model'])}")
    if mode == "plain":
        path = os.path.abspath("ckpt.pt")
        return checked(lambda: torch.load(path), lambda ckpt: f"keys {sorted(ckpt)}")
    if mode == "python-save":
        return python_save()
    raise ValueError(mode)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
