"""Sharded-checkpoint interop with PyTorch 2.x's torch.distributed.checkpoint (DCP), both directions
(tests/unit/checkpoint/sharded_checkpoint_test.cpp).

  dcp_interop.py save DIR NPROC SEED       NPROC processes dcp.save the "python" set: DTensors
                                           sharded by rows (Shard(0)), a plain, replicated tensor
                                           and non-tensor values (an int, a float, a str)
  dcp_interop.py load DIR NPROC SET SEED   NPROC processes dcp.load every entry of DIR and compare
                                           them with expected() / expected_object() for SET: plain tensors at one process;
                                           beyond, DTensors sharded by rows (Shard(0)) at NPROC ranks
                                           (replicated tensors stay plain)
  dcp_interop.py convert DIR SET SEED      format_utils.dcp_to_torch_save(DIR, DIR + ".pt"), then
                                           torch.load it and compare with expected() for SET

Each process prints "rank R: ok" (or its error); the command exits 0 when every one succeeded.
The processes meet over Gloo with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set here.
SETS, expected() and expected_object() match tests/programs/torch_sharded_checkpoint.cpp.
"""
import os
import socket
import subprocess
import sys

SETS = {
    "rankwise": [
        ("f32_6", (6,), "float32", "rows"),
        ("f32_10", (10,), "float32", "rows"),
        ("f64_10", (10,), "float64", "rows"),
        ("bf16_6", (6,), "bfloat16", "rows"),
        ("i64_10", (10,), "int64", "rows"),
        ("bool_10", (10,), "bool", "rows"),
        ("rows_10x3", (10, 3), "float32", "rows"),
        ("rows_6x4", (6, 4), "float64", "rows"),
        ("flat_3x5", (3, 5), "float32", "flat"),
        ("replicated", (2, 3), "float32", "replicated"),
        ("epoch", None, None, "object"),
        ("lr", None, None, "object"),
        ("betas", None, None, "object"),
        ("name", None, None, "object"),
        ("ids", None, None, "object"),
        ("flags", None, None, "object"),
        ("big", None, None, "object"),
    ],
    "python": [
        ("a", (10,), "float32", "rows"),
        ("b", (6, 4), "int64", "rows"),
        ("c", (7,), "bfloat16", "rows"),
        ("rep", (3, 2), "float64", "replicated"),
        ("epoch", None, None, "object"),
        ("lr", None, None, "object"),
        ("name", None, None, "object"),
        ("big", None, None, "object"),
    ],
}


def expected(torch, shape, dtype, k, seed):
    numel = 1
    for d in shape:
        numel *= d
    i = torch.arange(numel, dtype=torch.int64)
    base = k + 100 * seed
    if dtype == "bool":
        v = ((i * 7 + base) % 3) == 0
    elif dtype == "int64":
        v = i * 1000000000007 + base
    else:
        v = (i.double() * 0.5 + base).to(getattr(torch, dtype))
    return v.reshape(shape)


def expected_object(key, seed):
    return {
        "epoch": seed * 7 + 3,
        "lr": 0.25 + seed,
        "betas": (0.5, 0.75 + seed),
        "name": f"set-{seed}",
        "ids": [seed, seed + 1, seed + 2],
        "flags": [True, False, seed % 2 == 0],
        "big": -(2**40) - seed,  # pickled by Python as LONG1 of 6 bytes
    }[key]


def same_object(got, want):
    return type(got) is type(want) and got == want


def worker(mode, path, set_name, seed):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    if world > 1:
        dist.init_process_group("gloo")
    specs = SETS[set_name]
    if mode == "save":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard

        mesh = init_device_mesh("cpu", (world,))
        state = {}
        for k, (key, shape, dtype, layout) in enumerate(specs, start=1):
            if layout == "object":
                state[key] = expected_object(key, seed)
                continue
            full = expected(torch, shape, dtype, k, seed)
            if layout == "replicated":
                state[key] = full
                continue
            # DTensor's Shard(0): torch.chunk's pieces, empty ones for the ranks past them.
            pieces = list(torch.chunk(full, world, dim=0))
            local = pieces[rank] if rank < len(pieces) else full[0:0]
            state[key] = DTensor.from_local(local.contiguous(), mesh, [Shard(0)], run_check=False,
                                            shape=full.shape, stride=full.stride())
        dcp.save(state, checkpoint_id=path)
    elif mode == "load":
        metadata = dcp.FileSystemReader(path).read_metadata().state_dict_metadata
        keys = sorted(metadata)
        want = sorted(key for key, _, _, _ in specs)
        if keys != want:
            raise SystemExit(f"rank {rank}: keys {keys}, expected {want}")
        state, pieces = {}, {}
        if world > 1:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.tensor import DTensor, Shard

            mesh = init_device_mesh("cpu", (world,))
        objects = {}
        for k, (key, shape, dtype, layout) in enumerate(specs, start=1):
            if layout == "object":
                state[key] = None  # dcp.load replaces it with the stored value
                objects[key] = expected_object(key, seed)
                continue
            values = expected(torch, shape, dtype, k, seed)
            if layout == "flat":
                values = values.reshape(-1)
            if world == 1 or layout == "replicated":
                state[key] = torch.zeros_like(values)
                pieces[key] = values
                continue
            # Sharded targets at this world size: DCP reads the overlapping parts of the stored chunks.
            chunks = list(torch.chunk(values, world, dim=0))
            pieces[key] = chunks[rank] if rank < len(chunks) else values[0:0]
            state[key] = DTensor.from_local(torch.zeros_like(pieces[key]), mesh, [Shard(0)], run_check=False,
                                            shape=values.shape, stride=values.stride())
        dcp.load(state, checkpoint_id=path)
        for key, piece in pieces.items():
            got = state[key].to_local() if hasattr(state[key], "to_local") else state[key]
            if got.dtype != piece.dtype or not torch.equal(got, piece):
                raise SystemExit(f"rank {rank}: '{key}' differs: {got} expected {piece}")
        for key, want in objects.items():
            if not same_object(state[key], want):
                raise SystemExit(f"rank {rank}: object '{key}' is {state[key]!r}, expected {want!r}")
    else:  # convert: DCP's own converter to one torch.save file
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

        dcp_to_torch_save(path, path + ".pt")
        loaded = torch.load(path + ".pt")
        for k, (key, shape, dtype, layout) in enumerate(specs, start=1):
            if layout == "object":
                if not same_object(loaded[key], expected_object(key, seed)):
                    raise SystemExit(f"object '{key}' is {loaded[key]!r} after dcp_to_torch_save")
                continue
            values = expected(torch, shape, dtype, k, seed)
            if layout == "flat":
                values = values.reshape(-1)
            if not torch.equal(loaded[key], values):
                raise SystemExit(f"'{key}' differs after dcp_to_torch_save: {loaded[key]} expected {values}")
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    print(f"rank {rank}: ok", flush=True)


def launch(argv, nproc):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    processes = []
    for rank in range(nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        processes.append(subprocess.Popen([sys.executable, __file__, "_worker"] + argv, env=env))
    codes = [p.wait(timeout=300) for p in processes]
    return 0 if all(c == 0 for c in codes) else 1


def main():
    mode = sys.argv[1]
    if mode == "_worker":
        worker(*sys.argv[2:4], sys.argv[4], int(sys.argv[5]))
    elif mode == "save":
        path, nproc, seed = sys.argv[2], int(sys.argv[3]), sys.argv[4]
        sys.exit(launch(["save", path, "python", seed], nproc))
    elif mode == "load":
        path, nproc, set_name, seed = sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
        sys.exit(launch(["load", path, set_name, seed], nproc))
    elif mode == "convert":
        path, set_name, seed = sys.argv[2], sys.argv[3], sys.argv[4]
        sys.exit(launch(["convert", path, set_name, seed], 1))
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
