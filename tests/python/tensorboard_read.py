"""TensorBoard's own reader on an event directory, for the C++ tests.

    PYTHON tensorboard_read.py DIR

Loads DIR with tensorboard's EventAccumulator (what `tensorboard --logdir`
runs) and prints one JSON object: {"files": [event file names],
"scalars": {tag: [[step, value, wall_time], ...]}}, values as TensorBoard
holds them (float32, widened to float). Exit 77 (skip) when this Python has
no tensorboard package; 1 when TensorBoard cannot read the directory.
"""
import json
import os
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
except ImportError:
    print("tensorboard is not installed for this Python; skipped")
    sys.exit(77)

directory = sys.argv[1]
acc = EventAccumulator(directory, size_guidance={"scalars": 0})  # 0: keep every value
acc.Reload()
scalars = {tag: [[e.step, e.value, e.wall_time] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
files = sorted(name for name in os.listdir(directory) if "tfevents" in name)
print(json.dumps({"files": files, "scalars": scalars}))
