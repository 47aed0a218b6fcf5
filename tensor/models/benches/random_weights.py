"""Writes a safetensors file of seeded random weights with the tensor names, shapes and dtypes of
a listing (JSON: name -> {"dtype", "shape"}, e.g. benches/minilm_tensors.json, read off
all-MiniLM-L6-v2's model.safetensors header), floats stored as f16.

For benchmarks on a machine the real weights cannot be shipped to (the GPU machine takes at most
64 MiB per call): the work of a forward pass does not depend on the weights' values, and ours
and PyTorch's (minilm_torch.py) read the same file. Values: N(0, 0.05) for weights and
embeddings, 1 for LayerNorm weights, 0 for biases; integer tensors (position_ids) are
0, 1, 2, ... along their last dim.

Usage: python3 random_weights.py LISTING OUT_FILE [--seed N]. Python stdlib + torch only.
"""
import argparse
import json
import struct

import torch

INTS = {"I64": torch.int64, "I32": torch.int32}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("listing")
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0x5EED)
    a = ap.parse_args()
    with open(a.listing) as f:
        listing = json.load(f)
    g = torch.Generator().manual_seed(a.seed)
    header, blobs, offset = {}, [], 0
    for name in sorted(listing):
        dtype, shape = listing[name]["dtype"], listing[name]["shape"]
        if dtype in INTS:
            last = shape[-1] if shape else 1
            t = torch.arange(last, dtype=INTS[dtype]).expand(*shape).contiguous() if shape else torch.zeros((), dtype=INTS[dtype])
            st = dtype
        else:
            if name.endswith("LayerNorm.weight"):
                t = torch.ones(shape)
            elif name.endswith(".bias"):
                t = torch.zeros(shape)
            else:
                t = torch.randn(shape, generator=g) * 0.05
            t = t.to(torch.float16)
            st = "F16"
        data = t.numpy().tobytes()
        header[name] = {"dtype": st, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(a.out, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)
    print(f"{a.out}: {len(header)} tensors, {offset / 2**20:.1f} MiB of random weights (seed {a.seed})")


if __name__ == "__main__":
    main()
