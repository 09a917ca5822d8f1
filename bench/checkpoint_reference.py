"""Python's torch.save / torch.load on the same state as bench_checkpoint.cpp (reference side).

Usage: /usr/bin/python3 checkpoint_reference.py SIZE_MIB DIR TRIALS [save|load]
(the optional last argument runs one phase only; load then saves once, with fsync,
untimed, first).
State (same dict, same order, same sizes as the C++ side): for i in 0..SIZE_MIB/16-1,
"layers.<i>.weight" [1024, 4096] float32 (16 MiB) and "layers.<i>.bias" [4096]; the last
weight has fewer rows so the tensors total exactly SIZE_MIB MiB; then "step" (an int).
torch.rand with seed 0.

Every series starts with one untimed warm-up (as on the C++ side; its time goes to
stderr). Each save trial: remove DIR/pt.pt and os.sync() (untimed, so no earlier trial's
write-back competes), then time torch.save(state, path). A second series times
torch.save + os.fsync of the file + os.fsync of its directory: the durable
equivalent of rankwise::save (which also fsyncs the file and the directory).
Loads time torch.load(path, map_location="cpu") of the file just written, from the
page cache (warm), as on the C++ side. Prints `key=value` lines, MiB of tensor data
per second, median of TRIALS; per-trial seconds go to stderr.
"""
import os
import sys
import time

import torch

MIB = 1 << 20
COLS = 4096
ROWS_PER_WEIGHT = 1024


def make_state(size_mib):
    torch.manual_seed(0)
    layers = max(1, size_mib // 16)
    total_floats = size_mib * MIB // 4
    last_rows = (total_floats - layers * COLS) // COLS - (layers - 1) * ROWS_PER_WEIGHT
    state = {}
    for i in range(layers):
        rows = last_rows if i + 1 == layers else ROWS_PER_WEIGHT
        state[f"layers.{i}.weight"] = torch.rand(rows, COLS)
        state[f"layers.{i}.bias"] = torch.rand(COLS)
    state["step"] = 1000
    return state


def median(values):
    return sorted(values)[len(values) // 2]


def fsync_path(path, directory=False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main():
    if len(sys.argv) not in (4, 5) or sys.argv[4:] not in ([], ["save"], ["load"]):
        sys.exit("usage: checkpoint_reference.py SIZE_MIB DIR TRIALS [save|load]")
    size_mib, directory, trials = int(sys.argv[1]), sys.argv[2], max(1, int(sys.argv[3]))
    phase = sys.argv[4] if len(sys.argv) == 5 else "all"
    path = os.path.join(directory, "pt.pt")
    state = make_state(size_mib)
    mib = sum(v.numel() * v.element_size() for v in state.values() if torch.is_tensor(v)) / MIB

    def fresh():
        if os.path.exists(path):
            os.remove(path)
        os.sync()

    def series(before, run):
        times = []
        for _ in range(trials + 1):  # the first is the warm-up
            before()
            t0 = time.perf_counter()
            run()
            times.append(time.perf_counter() - t0)
        return times

    def save():
        torch.save(state, path)

    def save_fsync():
        torch.save(state, path)
        fsync_path(path)
        fsync_path(directory, directory=True)

    loaded = []  # freed before the next trial, untimed (as in C++)

    def load():
        loaded.append(torch.load(path, map_location="cpu"))

    def report(name, values):
        print(f"pytorch {name} seconds: (warm-up {values[0]:.3f}) "
              + " ".join(f"{s:.3f}" for s in values[1:]), file=sys.stderr)
        print(f"{name}_mib_per_s={mib / median(values[1:]):.1f}")

    print(f"pytorch size_mib={mib:.1f} trials={trials}")
    if phase != "load":
        report("save", series(fresh, save))
        report("save_fsync", series(fresh, save_fsync))
    else:
        save_fsync()
    if phase != "save":
        report("load", series(loaded.clear, load))
        assert len(loaded[0]) == len(state)
        loaded.clear()
    os.remove(path)


if __name__ == "__main__":
    main()
