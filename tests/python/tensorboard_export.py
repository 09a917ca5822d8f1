"""rankwise-report --tensorboard, read back by TensorBoard's own reader.

    PYTHON tensorboard_export.py REPORT_TOOL WORKDIR

PYTHON must have the `tensorboard` package (the wheel leg's venv has it:
scripts/setup-torch-wheel); REPORT_TOOL is build/rankwise-report (run with
Debian's python3). A metrics log with step, epoch and per-rank records is
written, converted, and every scalar that TensorBoard's EventAccumulator
reads must equal the log's value (as float32: TensorBoard's simple_value),
at the log's step, and no other tag may appear. Exit 77 (skip) without
tensorboard.
"""
import datetime
import json
import os
import subprocess
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("tensorboard is not installed for this Python; skipped")
    sys.exit(77)
import numpy as np

tool, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
log = os.path.join(work, "metrics.jsonl")
records = [{"kind": "config", "world_size": 2, "rankwise_version": "test",
            "started_at": "2026-12-03T10:00:00Z", "config": {"program": "tb"}}]
expected = {}  # tag -> [(step, value)]
for step in range(5, 30, 5):
    loss = 2.0 / step + 0.1234567
    record = {"kind": "step", "step": step, "epoch": 1 + step // 15, "time": step * 0.5,
              "metrics": {"loss": loss}, "samples_per_s": 1000.0 + step,
              "ranks": [{"rank": r, "samples_per_s": 500.0 + r + step, "wait_ms": 3.0 * r,
                         "compute_ms": 40.0 - r} for r in range(2)]}
    records.append(record)
    expected.setdefault("loss", []).append((step, loss))
    expected.setdefault("samples_per_s", []).append((step, 1000.0 + step))
    for r in range(2):
        expected.setdefault(f"rank{r}/samples_per_s", []).append((step, 500.0 + r + step))
        expected.setdefault(f"rank{r}/wait_ms", []).append((step, 3.0 * r))  # rank 0: 0.0, which must be written
        expected.setdefault(f"rank{r}/compute_ms", []).append((step, 40.0 - r))
records.append({"kind": "epoch", "step": 15, "epoch": 1, "time": 8.0,
                "metrics": {"test_accuracy": 0.8125, "train_loss": 0.5}, "samples_per_s": 999.5})
expected["epoch/test_accuracy"] = [(15, 0.8125)]
expected["epoch/train_loss"] = [(15, 0.5)]
expected["epoch/samples_per_s"] = [(15, 999.5)]
with open(log, "w") as f:
    for r in records:
        f.write(json.dumps(r) + "\n")

board = os.path.join(work, "board")
out = subprocess.run([tool, log, "--tensorboard", board], capture_output=True, text=True)
assert out.returncode == 0, out.stderr
files = os.listdir(board)
assert len(files) == 1 and files[0].startswith("events.out.tfevents."), files

acc = EventAccumulator(board)
acc.Reload()
tags = sorted(acc.Tags()["scalars"])
assert tags == sorted(expected), (tags, sorted(expected))
for tag, points in expected.items():
    got = [(e.step, e.value) for e in acc.Scalars(tag)]
    want = [(s, float(np.float32(v))) for s, v in points]
    assert got == want, (tag, got, want)
    started = datetime.datetime(2026, 12, 3, 10, tzinfo=datetime.timezone.utc).timestamp()
    times = {r["step"]: r["time"] for r in records if r["kind"] == ("epoch" if tag.startswith("epoch/") else "step")}
    walls = [(e.step, e.wall_time) for e in acc.Scalars(tag)]
    assert walls == [(s, started + times[s]) for s, _ in points], (tag, walls)  # started_at + time
print(f"PASS: TensorBoard read {sum(len(p) for p in expected.values())} scalars of {len(expected)} tags "
      "equal to the log's")
