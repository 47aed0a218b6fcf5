"""PyTorch's NCCL all-reduce of the same call as benches/all_reduce.rs: a bf16 buffer of
256 MiB (ALL_REDUCE_MIB) summed over 1, 2, 4 and 8 GPUs (as many as there are), one process
per GPU (torch.distributed, backend "nccl"). Prints one line per rank count: the best of
5 rounds of 10 calls, algbw = bytes / time and busbw = algbw * 2(n-1)/n as nccl-tests defines
them. A reference measured beside our bench in the same run, on the same GPUs.

    python3 crates/candle-rocm/benches/all_reduce_torch.py
"""

import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, n, port, nbytes, out):
    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=n
    )
    x = torch.zeros(nbytes // 2, dtype=torch.bfloat16, device="cuda")
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        dist.barrier()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(10):
            dist.all_reduce(x)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / 10)
    worst = torch.tensor([best], device="cuda")
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    if rank == 0:
        out.put(worst.item())
    dist.destroy_process_group()


def main():
    nbytes = int(os.environ.get("ALL_REDUCE_MIB", "256")) << 20
    gpus = torch.cuda.device_count()
    if gpus == 0:
        print("all_reduce_torch: no GPU")
        return
    ctx = mp.get_context("spawn")
    for n in [k for k in (1, 2, 4, 8) if k <= gpus]:
        out = ctx.Queue()
        mp.spawn(rank_main, args=(n, free_port(), nbytes, out), nprocs=n, join=True)
        t = out.get()
        alg = nbytes / t / 1e9
        bus = alg * 2 * (n - 1) / n
        print(
            f"torch all_reduce bf16 {nbytes >> 20} MiB, {n} GPU(s): {t * 1e3:.3f} ms "
            f"(algbw {alg:.1f} GB/s, busbw {bus:.1f} GB/s), NCCL {torch.cuda.nccl.version()}"
        )


if __name__ == "__main__":
    main()
