"""Python's torch.amp.GradScaler("cpu") on a fixed sequence of steps, the
reference for rankwise::amp::GradScaler (tests/unit/amp/grad_scaler_test.cpp).

Usage: grad_scaler_reference.py
Output (JSON on stdout): the options, the plan of every step (which gradient
gets an inf or a nan, whether unscale_() is called before step(), a scale set
by update(new_scale)), and for each step whether optimizer.step() was skipped
and the scale after update(); then the final parameters and the scaler's
state_dict(). Keys starting with "_" describe the run and are not compared.

The committed golden tests/python/golden/grad_scaler_reference.json is this
script's output under torch 2.15 (build-wheel/venv/bin/python):
  build-wheel/venv/bin/python tests/python/grad_scaler_reference.py \
      > tests/python/golden/grad_scaler_reference.json
It needs a torch with a CPU GradScaler (2.3 and later); under an older torch
(Debian's 1.13) it prints {"skip": reason} and exits 0.

The model: parameters w [2, 2] and b [2] (float32), SGD with momentum, loss
mean((x @ w.T + b - y)^2) with x = (arange(8).reshape(4, 2) + step) / 8 - 0.5
and y = (arange(8).reshape(4, 2) - step) / 16, built from the same float32
operations in C++.
"""
import json

import torch

OPTIONS = {"init_scale": 256.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3}
LR, MOMENTUM = 0.1, 0.9
INIT = {"w": [[0.5, -0.25], [0.125, 1.0]], "b": [0.25, -0.5]}
# inject: (parameter, flat index, value) written into a gradient after backward().
PLAN = [
    {},
    {},
    {},                                            # third clean step in a row: the scale grows
    {"inject": ["w", 0, "inf"]},                   # skipped, scale backs off
    {},
    {"inject": ["b", 1, "nan"]},                   # skipped again
    {"unscale_first": True},
    {},
    {},                                            # grows
    {"unscale_first": True, "inject": ["w", 3, "-inf"]},
    {"new_scale": 64.0},                           # update(64.0) instead of update()
    {},
    {"inject": ["b", 0, "inf"]},
    {},
    {},
]


def batch(step):
    x = (torch.arange(8, dtype=torch.float32).reshape(4, 2) + step) / 8 - 0.5
    y = (torch.arange(8, dtype=torch.float32).reshape(4, 2) - step) / 16
    return x, y


def main():
    GradScaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
    if GradScaler is None:
        print(json.dumps({"skip": f"torch {torch.__version__} has no torch.amp.GradScaler"}))
        return
    try:
        scaler = GradScaler("cpu", **OPTIONS)
        probe = torch.ones(1)
        scaler.scale(probe)
        torch._amp_update_scale_(torch.ones(()), torch.zeros((), dtype=torch.int32),
                                 torch.zeros(()), 2.0, 0.5, 1)
    except (RuntimeError, NotImplementedError) as e:
        print(json.dumps({"skip": f"torch {torch.__version__} has no CPU GradScaler: {e}"}))
        return
    scaler = GradScaler("cpu", **OPTIONS)
    params = {name: torch.tensor(value, dtype=torch.float32, requires_grad=True)
              for name, value in INIT.items()}
    optimizer = torch.optim.SGD([params["w"], params["b"]], lr=LR, momentum=MOMENTUM)
    steps = []
    for step, plan in enumerate(PLAN):
        optimizer.zero_grad()
        x, y = batch(step)
        loss = ((x @ params["w"].T + params["b"] - y) ** 2).mean()
        scaler.scale(loss).backward()
        if "inject" in plan:
            name, index, value = plan["inject"]
            with torch.no_grad():
                params[name].grad.view(-1)[index] = float(value)
        if plan.get("unscale_first"):
            scaler.unscale_(optimizer)
        before = [p.detach().clone() for p in params.values()]
        scaler.step(optimizer)
        skipped = all(torch.equal(a, p.detach()) for a, p in zip(before, params.values()))
        if "new_scale" in plan:
            scaler.update(plan["new_scale"])
        else:
            scaler.update()
        steps.append({"plan": plan, "skipped": skipped, "scale": scaler.get_scale()})
    print(json.dumps({
        "_produced_by": "tests/python/grad_scaler_reference.py, torch " + torch.__version__,
        "options": OPTIONS,
        "lr": LR,
        "momentum": MOMENTUM,
        "init": INIT,
        "steps": steps,
        "final_params": {name: p.detach().tolist() for name, p in params.items()},
        "state_dict": scaler.state_dict(),
        "state_dict_types": {k: type(v).__name__ for k, v in scaler.state_dict().items()},
    }, indent=1))


if __name__ == "__main__":
    main()
