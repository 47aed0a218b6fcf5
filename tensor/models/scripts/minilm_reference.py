#!/usr/bin/env python3
"""Independent float64 reference for all-MiniLM-L6-v2 sentence embeddings.

Writes tests/data/minilm_reference.json: for each test sentence the token ids of the Python
`tokenizers` library (same tokenizer.json) and the sentence embedding computed here in float64
NumPy, one sentence at a time (no padding), following Hugging Face's BertModel
(modeling_bert.py: embeddings + LayerNorm, post-LN encoder layers, exact erf GELU) and the
sentence-transformers pipeline of this model (modules.json: Transformer -> mean Pooling ->
Normalize). Nothing here shares code with candle.

Usage: python3 scripts/minilm_reference.py MODEL_DIR [OUT_JSON]
Needs: numpy, safetensors, tokenizers (pip install numpy safetensors tokenizers).
"""

import json
import math
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

# Keep in sync with tests/minilm.rs (the test reads the sentences from the JSON file).
SENTENCES = [
    "A man is playing a guitar.",
    "Someone is strumming a guitar.",
    "The stock market fell sharply today.",
    "A cat sleeps on the warm windowsill.",
    "A kitten is napping in the sun by the window.",
    "Quantum chromodynamics describes the strong interaction between quarks and gluons.",
    "ROCm lets Candle run on AMD GPUs!",
    "Hello",
    # The example of sentence-transformers' documentation (quickstart), whose published
    # similarities for this model are 0.6660 (0-1), 0.1046 (0-2), 0.1411 (1-2).
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
]

_erf = np.vectorize(math.erf, otypes=[np.float64])


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def linear(x, t, name):
    return x @ t[name + ".weight"].T + t[name + ".bias"]


def embed_one(ids, t, cfg):
    n = len(ids)
    heads = cfg["num_attention_heads"]
    hidden = cfg["hidden_size"]
    hd = hidden // heads
    eps = cfg["layer_norm_eps"]
    x = (
        t["embeddings.word_embeddings.weight"][ids]
        + t["embeddings.position_embeddings.weight"][:n]
        + t["embeddings.token_type_embeddings.weight"][0]
    )
    x = layer_norm(x, t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"], eps)
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        q = linear(x, t, p + "attention.self.query").reshape(n, heads, hd).transpose(1, 0, 2)
        k = linear(x, t, p + "attention.self.key").reshape(n, heads, hd).transpose(1, 0, 2)
        v = linear(x, t, p + "attention.self.value").reshape(n, heads, hd).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(hd)
        s = np.exp(s - s.max(-1, keepdims=True))
        s = s / s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(n, hidden)
        a = linear(ctx, t, p + "attention.output.dense") + x
        a = layer_norm(a, t[p + "attention.output.LayerNorm.weight"], t[p + "attention.output.LayerNorm.bias"], eps)
        h = linear(a, t, p + "intermediate.dense")
        h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
        o = linear(h, t, p + "output.dense") + a
        x = layer_norm(o, t[p + "output.LayerNorm.weight"], t[p + "output.LayerNorm.bias"], eps)
    pooled = x.mean(0)
    return pooled / max(np.linalg.norm(pooled), 1e-12)


def main():
    model_dir = Path(sys.argv[1])
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path(__file__).resolve().parent.parent / "tests/data/minilm_reference.json"
    cfg = json.loads((model_dir / "config.json").read_text())
    tensors = {k: v.astype(np.float64) for k, v in load_file(str(model_dir / "model.safetensors")).items() if v.dtype != np.int64}
    tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(256)  # sentence_bert_config.json: max_seq_length
    rows = []
    for s in SENTENCES:
        ids = tok.encode(s).ids
        e = embed_one(np.array(ids), tensors, cfg)
        rows.append({"sentence": s, "ids": ids, "embedding": [round(float(v), 8) for v in e]})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": "sentence-transformers/all-MiniLM-L6-v2", "precision": "float64", "rows": rows}, indent=1) + "\n")
    embs = np.array([r["embedding"] for r in rows])
    print(f"wrote {out}")
    print("similarity matrix (float64 reference):")
    print(np.array2string(embs @ embs.T, precision=4, suppress_small=True))


if __name__ == "__main__":
    main()
