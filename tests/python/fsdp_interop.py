"""Fully sharded checkpoints between rankwise's FullyShardedDataParallel and PyTorch 2.x's
fully_shard (FSDP2) through torch.distributed.checkpoint (DCP), both directions
(tests/unit/parallel/fsdp/fsdp_interop_test.cpp, with tests/programs/torch_fsdp_checkpoint.cpp).

  fsdp_interop.py load DIR NPROC   NPROC processes wrap the model with fully_shard (each Linear,
                                   then the root), dcp.load DIR into its parameters and Adam's
                                   state, and compare them with reference(): two Adam steps
                                   computed here without sharding
  fsdp_interop.py save DIR NPROC   NPROC processes train the model two steps under fully_shard
                                   and dcp.save it in rankwise's keys
  fsdp_interop.py reference        prints "fp KEY SUM SUMSQ" of reference() as the worker does

The model: Sequential(Linear(6, 10), Tanh(), Linear(10, 3)); initial() and data() match the
worker's formulas. Keys: "model.<name>", "optim.state.<i>.<exp_avg|exp_avg_sq|step>" (i in
model.parameters()' order), "optim.param_groups.0.<option>" (rankwise's layout).
Each process prints "rank R: ok" (or its error); the command exits 0 when every one succeeded.
"""
import os
import socket
import subprocess
import sys

LR = 0.05


def make_model(torch):
    model = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.Tanh(), torch.nn.Linear(10, 3))
    with torch.no_grad():
        for k, p in enumerate(model.parameters()):
            v = (torch.arange(p.numel(), dtype=torch.float64) * 0.37 + k).sin() * 0.3
            p.copy_(v.view(p.shape))
    return model


def data(torch):
    x = (torch.arange(24, dtype=torch.float64) * 0.11).cos().view(4, 6).float()
    y = (torch.arange(12, dtype=torch.float64) * 0.23).sin().view(4, 3).float()
    return x, y


def train(torch, model, opt, steps=2):
    x, y = data(torch)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def reference(torch):
    model = make_model(torch)
    opt = torch.optim.Adam(model.parameters(), lr=LR, foreach=False)
    train(torch, model, opt)
    out = {f"model.{n}": p.detach() for n, p in model.named_parameters()}
    for i, p in enumerate(model.parameters()):
        for name in ("exp_avg", "exp_avg_sq"):
            out[f"optim.state.{i}.{name}"] = opt.state[p][name]
    return out


def rankwise_keys(torch, model, opt):
    from torch.distributed.tensor import DTensor  # noqa: F401
    state = {"model": {n: p for n, p in model.named_parameters()}, "optim": {"state": {}}}
    for i, p in enumerate(model.parameters()):
        s = opt.state[p]
        state["optim"]["state"][str(i)] = {"exp_avg": s["exp_avg"], "exp_avg_sq": s["exp_avg_sq"],
                                           "step": s["step"]}
    return state


def sharded_model(torch):
    from torch.distributed.fsdp import fully_shard
    model = make_model(torch)
    fully_shard(model[0])
    fully_shard(model[2])
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=LR, foreach=False)
    return model, opt


def full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def worker(mode, directory):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        model, opt = sharded_model(torch)
        if mode == "save":
            train(torch, model, opt)
            state = rankwise_keys(torch, model, opt)
            state["optim"]["param_groups"] = {"0": {"lr": LR, "betas": (0.9, 0.999), "eps": 1e-8,
                                                    "weight_decay": 0.0, "amsgrad": False,
                                                    "params": [0, 1, 2, 3]}}
            dcp.save(state, checkpoint_id=directory)
        else:
            train(torch, model, opt, steps=1)  # creates Adam's state, then overwritten
            state = rankwise_keys(torch, model, opt)
            dcp.load(state, checkpoint_id=directory)
            want = reference(torch)
            for n, p in model.named_parameters():
                got = full(p.detach())
                if not torch.allclose(got, want[f"model.{n}"], rtol=1e-5, atol=1e-6):
                    raise AssertionError(f"model.{n}: {got} != {want['model.' + n]}")
            for i, p in enumerate(model.parameters()):
                s = opt.state[p]
                for name in ("exp_avg", "exp_avg_sq"):
                    got = full(s[name])
                    if not torch.allclose(got, want[f"optim.state.{i}.{name}"], rtol=1e-5, atol=1e-9):
                        raise AssertionError(f"optim.state.{i}.{name} differs")
                if float(full(s["step"])) != 2.0:
                    raise AssertionError(f"optim.state.{i}.step is {s['step']}, not 2")
        print(f"rank {rank}: ok", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"rank {rank}: error: {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
    finally:
        dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(mode, directory, nproc):
    port = str(free_port())
    procs = []
    for rank in range(nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=port, LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, __file__, "worker", mode, directory], env=env))
    return max(p.wait() for p in procs)


def main():
    if sys.argv[1] == "reference":
        import torch
        for key, t in reference(torch).items():
            t = t.double()
            print(f"fp {key} {t.sum().item():.10e} {t.pow(2).sum().item():.10e}")
        return 0
    if sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3])
        return 0
    return spawn(sys.argv[1], sys.argv[2], int(sys.argv[3]))


if __name__ == "__main__":
    sys.exit(main())
