"""Seed corpora for the fuzz targets, generated (nothing binary is committed).

usage: /usr/bin/python3 fuzz/make_seeds.py CORPUS_ROOT RANKWISE_SEEDS_DIR

RANKWISE_SEEDS_DIR holds checkpoints written by rankwise::save (fuzz_seeds).
Writes CORPUS_ROOT/<target>/ for every target: Python torch.save files (a
model's state_dict, an optimizer's, one-entry dicts, lists), rankwise's own
checkpoints, the data.pkl of each, IDX files plain and gzipped, and line
pieces in fuzz_line_assembler's input language.
"""
import gzip
import io
import os
import struct
import sys
import zipfile

import torch


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def python_checkpoints():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    adam = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.randn(4, 3)).sum().backward()
    adam.step()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sgd.step()
    values = {
        "state_dict": model.state_dict(),
        "adam": adam.state_dict(),
        "training": {"model": model.state_dict(), "optimizer": sgd.state_dict(), "epoch": 3},
        "one_entry": {"x": torch.ones(2)},
        "list": {"xs": [1, 2.5, "a", None, True]},
        "tensors": {"f": torch.arange(4.0), "i": torch.arange(3), "h": torch.ones(2).half(),
                    "t": torch.arange(6.0).reshape(2, 3).t(), "e": torch.zeros(0)},
        "nested": {"a": {"b": {"c": [torch.ones(1), (1, 2)]}}},
    }
    out = {}
    for name, value in values.items():
        buffer = io.BytesIO()
        torch.save(value, buffer)
        out["python_" + name + ".pt"] = buffer.getvalue()
    return out


def data_pkl(zip_bytes):
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as z:
        name = next(n for n in z.namelist() if n.endswith("/data.pkl"))
        return z.read(name)


def idx(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)


def idx_files():
    files = {
        "labels.idx": idx([5], range(5)),
        "images.idx": idx([2, 3, 3], range(18)),
        "four_dims.idx": idx([1, 2, 2, 2], range(8)),
        "empty.idx": idx([0, 28, 28], []),
    }
    files.update({name + ".gz": gzip.compress(data, mtime=0) for name, data in list(files.items())})
    return files


def line_input(pieces):
    """Encodes literal pieces (each < 64 bytes) in fuzz_line_assembler's language."""
    return b"".join(bytes([len(p)]) + p for p in pieces)


def line_inputs():
    return {
        "lines": line_input([b"epoch 1 loss 0.5\n", b"epoch 2", b" loss 0.4\n"]),
        "crlf": line_input([b"windows\r", b"\nline\r\n"]),
        "progress": line_input([b"[10%]\r[50%]\r", b"[100%]\n", b"done"]),
        "utf8": line_input(["caf\u00e9 \u2713 \U0001f600\n".encode()]),
        # 0xf0 + 1: a run of 'a' to 16 KiB ... 0xff + 4: a 4-byte UTF-8 sequence to 128 KiB
        "overlong": bytes([0xf0]) + b"a" + bytes([0xf7]) + b"\xc3" + line_input([b"\n"]),
        "overlong_utf8": bytes([0xff]) + "\U0001f600".encode() + line_input([b"\r\n"]),
    }


def main():
    root, rankwise_dir = sys.argv[1], sys.argv[2]
    targets = ["fuzz_checkpoint", "fuzz_checkpoint_crc", "fuzz_python_pickle", "fuzz_idx",
               "fuzz_line_assembler"]
    for t in targets:
        os.makedirs(os.path.join(root, t), exist_ok=True)
    checkpoints = python_checkpoints()
    for name in sorted(n for n in os.listdir(rankwise_dir) if n.endswith(".pt")):
        with open(os.path.join(rankwise_dir, name), "rb") as f:
            checkpoints["rankwise_" + name] = f.read()
    for name, data in checkpoints.items():
        write(os.path.join(root, "fuzz_checkpoint", name), data)
        write(os.path.join(root, "fuzz_checkpoint_crc", name), data)
        write(os.path.join(root, "fuzz_python_pickle", name[:-3] + ".pkl"), data_pkl(data))
    for name, data in idx_files().items():
        write(os.path.join(root, "fuzz_idx", name), data)
    for name, data in line_inputs().items():
        write(os.path.join(root, "fuzz_line_assembler", name), data)


if __name__ == "__main__":
    main()
