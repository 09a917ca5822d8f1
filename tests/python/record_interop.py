"""Checks records rankwise's write_tensor_record wrote (tests/unit/checkpoint/torch_save/record_writer_test.cpp)
against PyTorch: torch.load(weights_only=True) of DIR/<case>.pt must equal the
tensor built here, contiguous, with every zip entry's CRC-32 right.

    python record_interop.py DIR   # prints "<case> ok" per case, or raises
"""
import os
import sys
import zipfile

import torch


def cases():
    return {
        "contiguous": torch.arange(15, dtype=torch.float32).reshape(3, 5) * 0.5,
        "transposed": torch.arange(24, dtype=torch.float64).reshape(4, 6).t(),
        "sliced": (torch.arange(40, dtype=torch.int64) * 1000000000007).reshape(5, 8)[1:4, ::3],
        "empty": torch.zeros(0, 3, dtype=torch.float32),
        "scalar": torch.tensor(2.5, dtype=torch.bfloat16),
        "bf16": (torch.arange(12, dtype=torch.float32) / 4).to(torch.bfloat16).reshape(3, 4)[:, 1:],
        "bool": (torch.arange(20) % 3 == 0).reshape(4, 5).t(),
    }


def main(directory):
    for name, expected in cases().items():
        path = os.path.join(directory, name + ".pt")
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
            assert bad is None, f"{name}: entry {bad} has a wrong CRC-32"
        got = torch.load(path, weights_only=True)
        assert got.dtype == expected.dtype, f"{name}: dtype {got.dtype}, expected {expected.dtype}"
        assert got.shape == expected.shape, f"{name}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
        assert got.is_contiguous() and got.stride() == expected.contiguous().stride(), f"{name}: stride {got.stride()}"
        assert torch.equal(got, expected), f"{name}: values {got}, expected {expected}"
        print(name, "ok")


if __name__ == "__main__":
    main(sys.argv[1])
