"""PyTorch peer for //kernels/attention:attention_benchmark (CPU, fp32, same thread count, same run).

Attention as a PyTorch model computes it: torch.nn.functional.scaled_dot_product_attention where the
installed PyTorch has it (2.0 on; fused, flash-style, on the CPU from 2.1), else (Debian 12's python3-torch
1.13) the expression models wrote before it: softmax(q k^T * scale with the causal mask filled by -inf) @ v.
The backward is autograd's, timed alone (retain_graph) with dout given.

Usage: /usr/bin/python3 attention_cpu_peer.py THREADS LABEL:B,T,NH,HS,CAUSAL ...
Prints "peer <description>", then "LABEL_fwd <ms>" and "LABEL_bwd <ms>" per case: the best of several runs
after a warm-up, as the benchmark times its own kernel. q, k, v are (B, T, NH, HS) viewed as (B, NH, T, HS),
as a fused projection gives them.
"""
import math
import sys

import torch
import torch.nn.functional as F

from peer_timing import best_ms


def attention(q, k, v, causal):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    if causal:
        t, s = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(t, s, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def main():
    torch.set_num_threads(int(sys.argv[1]))
    torch.manual_seed(0)
    impl = "scaled_dot_product_attention" if hasattr(F, "scaled_dot_product_attention") else "matmul-softmax-matmul"
    print(f"peer PyTorch {torch.__version__} {impl}, {torch.get_num_threads()} threads", flush=True)
    for arg in sys.argv[2:]:
        label, dims = arg.split(":")
        b, t, nh, hs, causal = (int(d) for d in dims.split(","))
        q, k, v = (torch.randn(b, t, nh, hs).transpose(1, 2).requires_grad_() for _ in range(3))
        dout = torch.randn(b, nh, t, hs)
        with torch.no_grad():
            print(f"{label}_fwd", best_ms(lambda: attention(q, k, v, bool(causal))), flush=True)
        out = attention(q, k, v, bool(causal))
        print(f"{label}_bwd", best_ms(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)),
              flush=True)


if __name__ == "__main__":
    main()
