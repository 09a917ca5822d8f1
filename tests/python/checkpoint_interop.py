"""Checkpoint interop with PyTorch (Debian python3-torch 1.13), both directions.

  checkpoint_interop.py check-cpp CKPT [ATOL]  check every zip entry's CRC-32 (zipfile.testzip),
                                           torch.load a rankwise training-state checkpoint,
                                           load_state_dict its "model" into Net (strict) and
                                           print "equal" when Net's output on
                                           extras["probe_input"] is bitwise extras["probe_output"]
                                           (with ATOL: "close" when within ATOL, for another
                                           torch version, whose kernels round differently)
  checkpoint_interop.py fingerprint FILE [KEY]  print the CRC-32 of FILE's state_dict (FILE[KEY]),
                                           as torch_interop_model fingerprint does
  checkpoint_interop.py write SD PROBE     train Net a little; torch.save its state_dict with
                                           DDP's "module." prefix to SD, {"input", "output"}
                                           (eval mode) to PROBE, and a typical training
                                           checkpoint {"model", "ema", "optimizer", "epoch"}
                                           to SD + ".full"

Net matches tests/programs/torch_interop_model.cpp. Files are read with torch.load's
defaults: weights_only=True from torch 2.6, False on Debian's 1.13 (whose weights-only
unpickler reads no float).
"""
import collections
import sys
import zipfile
import zlib

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


def fingerprint(path, key=None):
    """CRC-32 over the entries sorted by name: name, NUL, the tensor's bytes."""
    state = torch.load(path, map_location="cpu")
    if key is not None:
        state = state[key]
    crc = 0
    for name in sorted(state):
        crc = zlib.crc32(name.encode() + b"\0", crc)
        crc = zlib.crc32(state[name].contiguous().numpy().tobytes(), crc)
    print(f"fingerprint {crc}")
    return 0


def check_cpp(path, atol=None):
    # torch.load skips the zip's CRC-32s; Python's zipfile checks every entry's.
    with zipfile.ZipFile(path) as archive:
        bad = archive.testzip()
        if bad is not None:
            print(f"zip entry {bad} has a wrong CRC-32")
            return 1
    checkpoint = torch.load(path, map_location="cpu")
    net = Net()
    net.load_state_dict(checkpoint["model"], strict=True)
    net.eval()
    extras = checkpoint["extras"]
    with torch.no_grad():
        output = net(extras["probe_input"])
    summary = f"(step {checkpoint['step']}, {len(checkpoint['model'])} entries)"
    if atol is None and torch.equal(output, extras["probe_output"]):
        print(f"equal {summary}")
        return 0
    if atol is not None and torch.allclose(output, extras["probe_output"], rtol=0, atol=atol):
        print(f"close {summary}")
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
        sys.exit(check_cpp(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else None))
    if sys.argv[1] == "fingerprint":
        sys.exit(fingerprint(*sys.argv[2:4]))
    sys.exit(write(sys.argv[2], sys.argv[3]))
