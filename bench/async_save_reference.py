"""DCP's async_save on the same state as bench_checkpoint.cpp's `async` phase (reference side).

Usage: PYTHON async_save_reference.py SIZE_MIB DIR TRIALS   (a torch 2.x with
torch.distributed.checkpoint.async_save; a Gloo process group of one rank on the CPU)
The state is checkpoint_reference.make_state's. Each trial times the call to
torch.distributed.checkpoint.async_save(state, checkpoint_id=DIR/dcp-N): what
training waits for (DCP stages the state, then writes in the background). Before
each trial the previous save's future is waited for, its directory removed and
os.sync() called, untimed; one untimed warm-up first. Prints
dcp_async_block_ms=... (median of TRIALS); per-trial seconds go to stderr.
"""
import os
import shutil
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint_reference import make_state  # noqa: E402


def main():
    size_mib, where, trials = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    state = make_state(size_mib)
    times, future = [], None
    for t in range(trials + 1):
        if future is not None:
            future.result()
        path = os.path.join(where, f"dcp-{t}")
        shutil.rmtree(os.path.join(where, f"dcp-{t - 1}"), ignore_errors=True)
        os.sync()
        start = time.perf_counter()
        future = dcp.async_save(state, checkpoint_id=path)
        times.append(time.perf_counter() - start)
    future.result()
    shutil.rmtree(os.path.join(where, f"dcp-{trials}"), ignore_errors=True)
    print("dcp async_save seconds: (warm-up %.3f) %s" % (times[0], " ".join("%.3f" % s for s in times[1:])),
          file=sys.stderr)
    timed = sorted(times[1:])
    print("dcp_async_block_ms=%.2f" % (timed[len(timed) // 2] * 1000))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
