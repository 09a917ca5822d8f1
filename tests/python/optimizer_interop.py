"""Optimizer state between C++ and Python (Debian python3-torch), the Python
side; the C++ side is tests/programs/torch_optimizer_interop.cpp, which
trains the same model on the same batches (see train()).

  optimizer_interop.py start DIR     for each optimizer: py_start_<opt>.pt
                                     (4 steps from scratch) and py_full_<opt>.pt (8 steps)
  optimizer_interop.py continue DIR  cpp_start_<opt>.pt + 4 steps -> py_cont_<opt>.pt
  optimizer_interop.py compare DIR   py_cont vs cpp_full and cpp_cont vs py_full:
                                     prints one line per pair, exit 1 if any
                                     parameter differs by more than 1e-6

Files hold {"model": state_dict, "optimizer": optimizer.state_dict(), "step": n}.
The continuing side builds its optimizer with other hyper-parameters, and the
learning rate is halved at step 2, before the save: only a loaded state that
carries every option and buffer reproduces the uninterrupted run."""
import os
import sys

import torch

OPTIMIZERS = ["sgd", "adam", "adamw", "rmsprop", "adagrad"]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 8)
        self.fc2 = torch.nn.Linear(8, 1)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def make_optimizer(kind, params, other):
    """other=True: the hyper-parameters a resuming process might have (all wrong)."""
    if kind == "sgd":
        return torch.optim.SGD(params, lr=1.0 if other else 0.1, momentum=0.0 if other else 0.9,
                               nesterov=not other, weight_decay=0.0 if other else 1e-3)
    if kind == "adam":
        return torch.optim.Adam(params, lr=1.0 if other else 0.01, betas=(0.5, 0.9) if other else (0.8, 0.99),
                                amsgrad=not other)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=1.0 if other else 0.01, weight_decay=0.0 if other else 0.05)
    if kind == "rmsprop":
        return torch.optim.RMSprop(params, lr=1.0 if other else 0.01, alpha=0.5 if other else 0.9,
                                   momentum=0.0 if other else 0.5, centered=not other)
    if kind == "adagrad":
        return torch.optim.Adagrad(params, lr=1.0 if other else 0.05, lr_decay=0.0 if other else 0.01,
                                   initial_accumulator_value=0.0 if other else 0.1)
    raise ValueError(kind)


def batch(step):
    x = torch.sin(torch.arange(32, dtype=torch.float32).reshape(8, 4) * (0.1 * (step + 1)))
    y = torch.cos(torch.arange(8, dtype=torch.float32).reshape(8, 1) * (0.3 * (step + 1)))
    return x, y


def train(kind, start, steps, out):
    torch.manual_seed(3)
    model = Net()
    step = 0
    if start is None:
        optimizer = make_optimizer(kind, model.parameters(), other=False)
    else:
        ckpt = torch.load(start, map_location="cpu")
        model.load_state_dict(ckpt["model"])
        optimizer = make_optimizer(kind, model.parameters(), other=True)
        optimizer.load_state_dict(ckpt["optimizer"])
        step = ckpt["step"]
    for _ in range(steps):
        if step == 2:  # a hand-written decay; saved in the optimizer's lr
            for group in optimizer.param_groups:
                group["lr"] *= 0.5
        x, y = batch(step)
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
        step += 1
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, out)


def compare(a_path, b_path):
    a = torch.load(a_path, map_location="cpu")["model"]
    b = torch.load(b_path, map_location="cpu")["model"]
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


def main(mode, d):
    torch.set_num_threads(1)
    if mode == "start":
        for kind in OPTIMIZERS:
            train(kind, None, 4, os.path.join(d, f"py_start_{kind}.pt"))
            train(kind, None, 8, os.path.join(d, f"py_full_{kind}.pt"))
        print("started")
        return 0
    if mode == "continue":
        for kind in OPTIMIZERS:
            train(kind, os.path.join(d, f"cpp_start_{kind}.pt"), 4, os.path.join(d, f"py_cont_{kind}.pt"))
        print("continued")
        return 0
    if mode == "compare":
        worst = 0.0
        for kind in OPTIMIZERS:
            for cont, full, what in (("py_cont", "cpp_full", "python continues c++"),
                                     ("cpp_cont", "py_full", "c++ continues python")):
                diff = compare(os.path.join(d, f"{cont}_{kind}.pt"), os.path.join(d, f"{full}_{kind}.pt"))
                worst = max(worst, diff)
                print(f"{kind}: {what}: max abs diff {diff:.3g} {'ok' if diff <= 1e-6 else 'TOO LARGE'}")
        return 0 if worst <= 1e-6 else 1
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
