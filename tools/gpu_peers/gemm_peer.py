"""PyTorch peer for lab/cuda/gemm_benchmark: torch.matmul (bf16) times for y = x @ W^T.

Usage: python3 gemm_peer.py NAME:M,N,K ...   prints "NAME <median ms>" per shape (CUDA events, after warm-up).
"""
import sys

import torch


def median_ms(fn, warmup=3, iters=20):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    times.sort()
    return times[len(times) // 2]


def main():
    for arg in sys.argv[1:]:
        name, dims = arg.split(":")
        m, n, k = (int(d) for d in dims.split(","))
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        print(name, median_ms(lambda: torch.matmul(x, w.t())), flush=True)


if __name__ == "__main__":
    main()
