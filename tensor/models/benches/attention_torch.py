"""PyTorch references for benches/attention.rs, measured on the same GPU in the same run.

prefill: F.scaled_dot_product_attention (flash backend), batch 1, 32 heads x 128, causal, bf16,
4096 tokens (TFLOP/s counting the causal half); decode: one query token, 32 q / 8 kv heads x 128,
bf16, KV cache 4k/16k/64k (GB/s of K and V read, GQA through enable_gqa); copy: a 1 GiB device copy
(GB/s read + written).
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def timeit(fn, iters=20):
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def main():
    dev = "cuda"
    h, d, s = 32, 128, 4096
    q, k, v = (torch.randn(1, h, s, d, device=dev, dtype=torch.bfloat16) for _ in range(3))
    flops = 4 * s * s * d * h / 2
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        t = timeit(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    print(f"torch prefill_4096 flash: {t * 1e3:.3f} ms, {flops / t / 1e12:.1f} TFLOP/s")
    for sk in (4096, 16384, 65536):
        q = torch.randn(1, 32, 1, d, device=dev, dtype=torch.bfloat16)
        k, v = (torch.randn(1, 8, sk, d, device=dev, dtype=torch.bfloat16) for _ in range(2))
        t = timeit(lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True), 50)
        print(f"torch decode_{sk}: {t * 1e6:.1f} us, {2 * sk * 8 * d * 2 / t / 1e9:.0f} GB/s (KV read)")
    x = torch.zeros(512 * 1024 * 1024, device=dev, dtype=torch.bfloat16)
    t = timeit(lambda: x.clone(), 20)
    print(f"torch copy_1GiB: {2 * x.numel() * 2 / t / 1e9:.0f} GB/s (read + write)")


if __name__ == "__main__":
    main()
