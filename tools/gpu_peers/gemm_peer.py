"""PyTorch peer for //kernels/matmul:matmul_cuda_benchmark: torch.matmul (bf16) times for y = x @ W^T.

Usage: python3 gemm_peer.py NAME:M,N,K ...   prints "NAME <median ms>" per shape (CUDA events, after warm-up).
"""
import sys

import torch

from peer_timing import median_ms


def main():
    for arg in sys.argv[1:]:
        name, dims = arg.split(":")
        m, n, k = (int(d) for d in dims.split(","))
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        print(name, median_ms(lambda: torch.matmul(x, w.t())), flush=True)


if __name__ == "__main__":
    main()
