"""PyTorch peer for //kernels/attention:attention_cuda_benchmark: scaled_dot_product_attention with the
flash backend.

Usage: python3 attention_peer.py LABEL:B,T,NH,HS,CAUSAL ...
prints "LABEL_fwd <median ms>" and "LABEL_bwd <median ms>" (backward alone, CUDA events, after warm-up).
q, k, v are (B, T, NH, HS) bf16 viewed as (B, NH, T, HS), as a model's fused projection gives them.
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from peer_timing import median_ms


def main():
    for arg in sys.argv[1:]:
        label, dims = arg.split(":")
        b, t, nh, hs, causal = (int(d) for d in dims.split(","))
        q, k, v = (torch.rand(b, t, nh, hs, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
                   for _ in range(3))
        dout = torch.rand(b, nh, t, hs, device="cuda", dtype=torch.bfloat16)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            def forward():
                return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
            print(f"{label}_fwd", median_ms(forward), flush=True)
            out = forward()
            print(f"{label}_bwd", median_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)),
                  flush=True)


if __name__ == "__main__":
    main()
