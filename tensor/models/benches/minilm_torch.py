"""PyTorch eager reference for benches/models.rs `bert_minilm_32x128`, on the same GPU in the same run.

all-MiniLM-L6-v2 (BERT, 6 layers, 384 wide, 12 heads) embeds one batch of 32 x 128 tokens: the
same synthetic batch as `bert::synthetic_batch` (101, xorshift64 ids in 1000..29000, 102; mask all
ones), the same work as our unfused Candle model (embeddings + LayerNorm, per layer q/k/v Linear,
q k^T / sqrt(d) + additive mask, softmax, context, output dense + residual + LayerNorm, dense +
exact GELU, dense + residual + LayerNorm; mean pooling over the mask in f32, L2 normalisation),
written plainly in eager PyTorch as Hugging Face's BertModel runs it. One iteration is the forward
pass, the pooling and `.cpu()` of the (32, 384) embeddings, which synchronises; the figure is
ms per batch and embeddings/s, in f32 and f16 (weights converted on the device). `plain` is the
matmul + softmax attention of the Candle model (the main figure); `sdpa` is the same model with
F.scaled_dot_product_attention (additive mask passed, so PyTorch picks a masked backend). TF32 is
left at PyTorch's default (off), and printed. A self-check compares row 0 of each run to an f64
CPU evaluation of the same code on the first 2 rows.

Usage: python3 minilm_torch.py MODEL_DIR [WEIGHTS] [--device cuda|cpu] [--iters 50]
MODEL_DIR holds config.json and the weights (WEIGHTS: default model.safetensors, else
model.f16.safetensors; any float dtype, read without the safetensors package). benches/models.rs
reads model.f16.safetensors for every dtype: pass that name to use the same weights.
Python stdlib + torch only. CPU smoke test: --device cpu --iters 2 --warmup 1.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F

ST_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}
FLOATS = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def load_safetensors(path):
    """name -> CPU tensor in the file's dtype: u64 LE header length, JSON header, raw LE data."""
    if sys.byteorder != "little":
        raise SystemExit("safetensors data is little-endian; this reader needs a little-endian host")
    with open(path, "rb") as f:
        data = bytearray(f.read())
    (hlen,) = struct.unpack_from("<Q", data, 0)
    header = json.loads(data[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    view = memoryview(data)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = ST_DTYPES.get(info["dtype"])
        if dtype is None:
            raise SystemExit(f"{path}: {name}: unsupported dtype {info['dtype']}")
        start, end = info["data_offsets"]
        shape = info["shape"]
        numel = math.prod(shape)
        if end - start != numel * torch.empty((), dtype=dtype).element_size():
            raise SystemExit(f"{path}: {name}: {end - start} bytes for shape {shape} {info['dtype']}")
        if numel == 0:
            out[name] = torch.empty(shape, dtype=dtype)
        else:
            # clone: own, aligned memory, independent of the file's buffer.
            t = torch.frombuffer(view[base + start:base + end], dtype=dtype).clone()
            out[name] = t.reshape(shape)
    return out


def synthetic_batch(batch, seq):
    """bert::synthetic_batch: ids and mask, int64 (batch, seq), on the CPU."""
    state, ids, m64 = 0x9E3779B97F4A7C15, [], (1 << 64) - 1
    for _ in range(batch):
        row = [101]
        for _ in range(seq - 2):
            state ^= (state << 13) & m64
            state ^= state >> 7
            state ^= (state << 17) & m64
            row.append(1000 + state % 28000)
        ids.append(row + [102])
    return torch.tensor(ids, dtype=torch.int64), torch.ones(batch, seq, dtype=torch.int64)


class MiniLM:
    """BertModel (eager) + mean pooling + L2 normalisation, with weights in `dtype` on `device`."""

    def __init__(self, tensors, cfg, dtype, device, sdpa=False):
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise SystemExit("only absolute position embeddings are supported")
        act = cfg.get("hidden_act", "gelu")
        if act not in ("gelu", "gelu_new", "gelu_pytorch_tanh"):
            raise SystemExit(f"hidden_act {act!r} is not supported")
        self.approximate = "none" if act == "gelu" else "tanh"
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in tensors else ""

        def w(name):
            # To the device in the file's dtype, then converted there.
            return tensors[prefix + name].to(device).to(dtype)

        self.dtype, self.device, self.sdpa = dtype, device, sdpa
        self.hidden = cfg["hidden_size"]
        self.heads = cfg["num_attention_heads"]
        self.head_dim = self.hidden // self.heads
        self.eps = cfg["layer_norm_eps"]
        self.max_pos = cfg["max_position_embeddings"]
        e = "embeddings."
        self.word = w(e + "word_embeddings.weight")
        self.pos = w(e + "position_embeddings.weight")
        self.token_type0 = w(e + "token_type_embeddings.weight")[0]
        self.emb_ln = (w(e + "LayerNorm.weight"), w(e + "LayerNorm.bias"))
        self.layers = []
        for i in range(cfg["num_hidden_layers"]):
            p = f"encoder.layer.{i}."
            lin = lambda n: (w(p + n + ".weight"), w(p + n + ".bias"))  # noqa: E731
            self.layers.append({
                "q": lin("attention.self.query"), "k": lin("attention.self.key"),
                "v": lin("attention.self.value"), "o": lin("attention.output.dense"),
                "ln1": lin("attention.output.LayerNorm"), "i": lin("intermediate.dense"),
                "o2": lin("output.dense"), "ln2": lin("output.LayerNorm"),
            })

    def ln(self, x, wb):
        return F.layer_norm(x, (self.hidden,), wb[0], wb[1], self.eps)

    def attention(self, x, add_mask, L):
        n, s, _ = x.shape
        split = lambda t: t.view(n, s, self.heads, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = (split(F.linear(x, *L[name])) for name in "qkv")
        if self.sdpa:
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=add_mask)
        else:
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
            probs = torch.softmax(scores + add_mask, dim=-1)
            ctx = torch.matmul(probs, v)
        return ctx.transpose(1, 2).reshape(n, s, self.hidden)

    def hidden_states(self, ids, mask):
        n, s = ids.shape
        if s > self.max_pos:
            raise SystemExit(f"{s} tokens exceed max_position_embeddings {self.max_pos}")
        x = F.embedding(ids, self.word) + self.token_type0 + self.pos[:s]
        x = self.ln(x, self.emb_ln)
        add_mask = (1.0 - mask[:, None, None, :].to(self.dtype)) * torch.finfo(self.dtype).min
        for L in self.layers:
            x = self.ln(F.linear(self.attention(x, add_mask, L), *L["o"]) + x, L["ln1"])
            inter = F.gelu(F.linear(x, *L["i"]), approximate=self.approximate)
            x = self.ln(F.linear(inter, *L["o2"]) + x, L["ln2"])
        return x

    def embed(self, ids, mask):
        """(n, hidden) unit-norm embeddings; pooling in f32 (f64 for an f64 model), as Candle."""
        h = self.hidden_states(ids, mask)
        h = h.double() if self.dtype == torch.float64 else h.float()
        m = mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, p=2, dim=1, eps=1e-12)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model_dir")
    ap.add_argument("weights", nargs="?", help="file in MODEL_DIR (default model.safetensors, "
                    "else model.f16.safetensors)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", default="f32,f16", help="comma-separated: f32, f16, bf16")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=50)
    args = ap.parse_args()
    if args.batch < 1 or args.seq < 2 or args.iters < 1:
        raise SystemExit("need --batch >= 1, --seq >= 2, --iters >= 1")

    weights = args.weights
    if weights is None:
        f32 = os.path.join(args.model_dir, "model.safetensors")
        weights = "model.safetensors" if os.path.isfile(f32) else "model.f16.safetensors"
    wpath = weights if os.path.isabs(weights) else os.path.join(args.model_dir, weights)
    with open(os.path.join(args.model_dir, "config.json")) as f:
        cfg = json.load(f)
    tensors = load_safetensors(wpath)
    file_dtypes = sorted({str(t.dtype).removeprefix("torch.") for t in tensors.values()
                          if t.dtype in FLOATS})

    device = torch.device(args.device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
    else:
        name = f"{device.type} ({torch.get_num_threads()} threads)"
    print(f"torch {torch.__version__} on {name}; weights {wpath} ({', '.join(file_dtypes)})")
    print(f"torch.backends.cuda.matmul.allow_tf32 = {torch.backends.cuda.matmul.allow_tf32}, "
          f"cudnn.allow_tf32 = {torch.backends.cudnn.allow_tf32}, "
          f"float32_matmul_precision = {torch.get_float32_matmul_precision()}")

    ids_cpu, mask_cpu = synthetic_batch(args.batch, args.seq)
    with torch.inference_mode():
        ref = MiniLM(tensors, cfg, torch.float64, torch.device("cpu")).embed(ids_cpu[:2],
                                                                            mask_cpu[:2])
    ids, mask = ids_cpu.to(device), mask_cpu.to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    label = f"minilm_{args.batch}x{args.seq}"
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    results = {}
    for dname in args.dtypes.split(","):
        dtype = dtypes[dname.strip()]
        for variant in ("plain", "sdpa"):
            model = MiniLM(tensors, cfg, dtype, device, sdpa=variant == "sdpa")
            with torch.inference_mode():
                for _ in range(args.warmup):
                    emb = model.embed(ids, mask).cpu()
                sync()
                start = time.perf_counter()
                for _ in range(args.iters):
                    emb = model.embed(ids, mask).cpu()
                t = (time.perf_counter() - start) / args.iters
            print(f"torch {label} {dname} {variant}: {t * 1e3:.3f} ms, "
                  f"{args.batch / t:.0f} embeddings/s")
            results[(dname, variant)] = emb
            del model
    print("self-check (not asserted): row 0 vs an f64 CPU evaluation of the first 2 rows")
    for (dname, variant), emb in results.items():
        e = emb[0].double()
        diff = (e - ref[0]).abs().max().item()
        cos = F.cosine_similarity(e, ref[0], dim=0).item()
        print(f"  {dname} {variant}: max |diff| {diff:.3e}, cosine {cos:.8f}, "
              f"|e| {e.norm().item():.6f}, e[:4] {[round(x, 5) for x in e[:4].tolist()]}")


if __name__ == "__main__":
    main()
