"""rankwise's safetensors export read back by Hugging Face's `safetensors` package
(tests/unit/checkpoint/safetensors_test.cpp), compared with PyTorch's own reading of
the checkpoint it came from, or with the values it was saved with.

  safetensors_interop.py KIND SRC OUT PREFIX [KIND SRC OUT PREFIX ...]
    KIND torch-save: SRC is a torch.save file (torch.load)
    KIND set:        SRC is SET:SEED of a DCP directory tests/programs/torch_sharded_checkpoint
                     saved: the values tests/python/dcp_interop.py's expected() gives
                     (the formulas Python's dcp.load is checked against there)

The reference is SRC as PyTorch reads it, nested dicts and lists flattened into dotted
keys (as DCP flattens them), or SET's values; its tensors only, those under PREFIX with
PREFIX removed.
OUT is one .safetensors file, or a model.safetensors.index.json whose weight_map names
the files, read as transformers reads a sharded checkpoint: every file the index names,
each key from the file the index says. Every tensor must be equal, bit for bit, with
its dtype and shape; the index's total_size must be the bytes of the tensors. Prints
"ok: N tensors in F files" for each export checked, or what differs; exits 1 when anything does.
"""
import json
import os
import sys

import torch
from safetensors import safe_open


def flatten(prefix, value, out):
    if isinstance(value, dict) and value:
        for k, v in value.items():
            flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, (list, tuple)) and value:
        for i, v in enumerate(value):
            flatten(f"{prefix}.{i}" if prefix else str(i), v, out)
    elif isinstance(value, torch.Tensor):
        out[prefix] = value


def reference(kind, src, prefix):
    flat = {}
    if kind == "set":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import dcp_interop
        set_name, seed = src.split(":")
        for k, (key, shape, dtype, layout) in enumerate(dcp_interop.SETS[set_name], start=1):
            if layout != "object":  # a "flat" tensor is stored flattened: global shape [numel]
                value = dcp_interop.expected(torch, shape, dtype, k, int(seed))
                flat[key] = value.reshape(-1) if layout == "flat" else value
    else:
        flatten("", torch.load(src), flat)
    return {k[len(prefix):]: v for k, v in flat.items() if k.startswith(prefix) and len(k) > len(prefix)}


def exported(out):
    """Every tensor of the export, and the number of files, as transformers loads them."""
    if not out.endswith(".json"):
        files = {out: None}
    else:
        with open(out) as f:
            index = json.load(f)
        weight_map = index["weight_map"]
        files = {}
        for key, name in weight_map.items():
            files.setdefault(os.path.join(os.path.dirname(out), name), []).append(key)
    tensors = {}
    for path, keys in files.items():
        with safe_open(path, framework="pt") as f:
            if f.metadata() is None or f.metadata().get("format") != "pt":
                sys.exit(f"{path}: __metadata__ {f.metadata()} lacks format=pt (transformers requires it)")
            names = list(f.keys())
            if keys is not None and sorted(names) != sorted(keys):
                sys.exit(f"{path}: holds {sorted(names)}, the index says {sorted(keys)}")
            for name in names:
                if name in tensors:
                    sys.exit(f"{name} is in two files")
                tensors[name] = f.get_tensor(name)
    if out.endswith(".json"):
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        if index["metadata"]["total_size"] != total:
            sys.exit(f"index total_size {index['metadata']['total_size']} != {total} bytes of tensors")
    return tensors, len(files)


def check(kind, src, out, prefix):
    expected = reference(kind, src, prefix)
    got, nfiles = exported(out)
    problems = []
    if sorted(expected) != sorted(got):
        problems.append(f"keys differ: expected {sorted(expected)}, got {sorted(got)}")
    for key in sorted(set(expected) & set(got)):
        e, g = expected[key].contiguous(), got[key]
        if e.dtype != g.dtype or e.shape != g.shape:
            problems.append(f"{key}: expected {e.dtype} {tuple(e.shape)}, got {g.dtype} {tuple(g.shape)}")
        elif not torch.equal(e.reshape(-1).view(torch.uint8), g.contiguous().reshape(-1).view(torch.uint8)):
            problems.append(f"{key}: values differ: expected {e}, got {g}")
    print("\n".join(problems) if problems else f"ok: {len(got)} tensors in {nfiles} files")
    return not problems


def main():
    args = sys.argv[1:]
    if not args or len(args) % 4:
        sys.exit(__doc__)
    results = [check(*args[i:i + 4]) for i in range(0, len(args), 4)]
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
