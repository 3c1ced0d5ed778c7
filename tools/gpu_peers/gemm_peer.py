"""PyTorch peer for //kernels/matmul:matmul_cuda_benchmark: torch.matmul (bf16) times for the three passes of a
Linear layer y = x @ W^T: forward (NAME), input gradient dy @ W (NAME_dgrad) and weight gradient dy^T @ x
(NAME_wgrad; bf16 out, as under autocast).

Usage: python3 gemm_peer.py NAME:M,N,K ...   prints "LABEL <median ms>" per pass (CUDA events, after warm-up).
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
        dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        print(name, median_ms(lambda: torch.matmul(x, w.t())), flush=True)
        print(name + "_dgrad", median_ms(lambda: torch.matmul(dy, w)), flush=True)
        print(name + "_wgrad", median_ms(lambda: torch.matmul(dy.t(), x)), flush=True)
        del x, w, dy


if __name__ == "__main__":
    main()
