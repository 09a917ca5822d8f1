"""The step of bench/bench_gpu_step.cpp in Python: the main job's MLP
(784-256-128-10), SGD with momentum, cross-entropy, random inputs.

    python gpu_step_reference.py [DEVICE=cuda:0] [BATCH=64] [STEPS=500] [REPEATS=5]

Prints "python_step_us <median over REPEATS of the mean step time, µs>", timed
as the C++ program times it (50 warm-up steps; the device synchronized before
and after each repeat)."""
import sys
import time

import torch
from torch import nn

device = torch.device(sys.argv[1] if len(sys.argv) > 1 else "cuda:0")
batch = int(sys.argv[2]) if len(sys.argv) > 2 else 64
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 500
repeats = int(sys.argv[4]) if len(sys.argv) > 4 else 5


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 10)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def sync():
    if device.type == "cuda":
        torch.cuda.synchronize(device)


torch.manual_seed(0)
model = Mlp().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
x = torch.rand(batch, 784, device=device)
y = torch.randint(0, 10, (batch,), device=device)


def step():
    optimizer.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()


for _ in range(50):
    step()
means = []
for _ in range(repeats):
    sync()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    means.append((time.perf_counter() - start) * 1e6 / steps)
means.sort()
print(f"python_step_us {means[len(means) // 2]:.2f}")
