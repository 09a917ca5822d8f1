"""Checkpoint interop with PyTorch (Debian python3-torch 1.13), both directions.

  checkpoint_interop.py check-cpp CKPT     torch.load a rankwise training-state checkpoint,
                                           load_state_dict its "model" into Net (strict) and
                                           print "equal" when Net's output on
                                           extras["probe_input"] is bitwise extras["probe_output"]
  checkpoint_interop.py write SD PROBE     train Net a little; torch.save its state_dict with
                                           DDP's "module." prefix to SD, {"input", "output"}
                                           (eval mode) to PROBE, and a typical training
                                           checkpoint {"model", "ema", "optimizer", "epoch"}
                                           to SD + ".full"

Net matches tests/programs/torch_interop_model.cpp.
"""
import collections
import sys

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


def check_cpp(path):
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    net = Net()
    net.load_state_dict(checkpoint["model"], strict=True)
    net.eval()
    extras = checkpoint["extras"]
    with torch.no_grad():
        output = net(extras["probe_input"])
    if torch.equal(output, extras["probe_output"]):
        print(f"equal (step {checkpoint['step']}, {len(checkpoint['model'])} entries)")
        return 0
    print(f"different: max abs diff {(output - extras['probe_output']).abs().max().item()}")
    return 1


def write(sd_path, probe_path):
    torch.manual_seed(5)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        opt.zero_grad()
        net(torch.randn(16, 4)).pow(2).mean().backward()
        opt.step()
    net.eval()
    probe = torch.randn(5, 4)
    with torch.no_grad():
        output = net(probe)
    # What DistributedDataParallel(net).state_dict() holds: the same OrderedDict, keys prefixed.
    state = collections.OrderedDict(("module." + k, v) for k, v in net.state_dict().items())
    torch.save(state, sd_path)
    # Several OrderedDicts in one pickle share memoized strings ("version", ...).
    ema = collections.OrderedDict((k, v.clone()) for k, v in net.state_dict().items())
    ema._metadata = net.state_dict()._metadata
    torch.save({"model": state, "ema": ema, "optimizer": opt.state_dict(), "epoch": 3},
               sd_path + ".full")
    torch.save({"input": probe, "output": output}, probe_path)
    print("written")
    return 0


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1] == "check-cpp":
        sys.exit(check_cpp(sys.argv[2]))
    sys.exit(write(sys.argv[2], sys.argv[3]))
