"""PyTorch peer for //kernels/attention:attention_benchmark (CPU, same thread count, same run).

Attention as a PyTorch model computes it: torch.nn.functional.scaled_dot_product_attention where the
installed PyTorch has it (2.0 on; fused, flash-style, on the CPU from 2.1), else (Debian 12's python3-torch
1.13) the expression models wrote before it: softmax(q k^T * scale with the causal mask filled by -inf) @ v.
The backward is autograd's, timed alone (retain_graph) with dout given. --mode: eager (fp32), compile (the
same function under torch.compile, fp32) or bf16 (eager under CPU bf16 autocast).

Usage: python attention_cpu_peer.py [--mode=eager|compile|bf16] THREADS LABEL:B,T,NH,HS,CAUSAL ...
Prints "peer <description>", then "LABEL_fwd <ms>" and "LABEL_bwd <ms>" per case: the best of several runs
after a warm-up, as the benchmark times its own kernel. q, k, v are (B, T, NH, HS) viewed as (B, NH, T, HS),
as a fused projection gives them.
"""
import argparse
import importlib
import math

import torch
import torch.nn.functional as F

from peer_timing import best_ms


MODES = {"eager": "eager fp32", "compile": "torch.compile fp32", "bf16": "eager bf16 autocast"}


def attention(q, k, v, causal):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))
    if causal:
        t, s = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(t, s, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=sorted(MODES), default="eager")
    p.add_argument("threads", type=int)
    p.add_argument("cases", nargs="+")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.mode == "compile" and not hasattr(torch, "compile"):
        p.error(f"--mode=compile: PyTorch {torch.__version__} has no torch.compile (2.0 on)")
    impl = "scaled_dot_product_attention" if hasattr(F, "scaled_dot_product_attention") else "matmul-softmax-matmul"
    print(f"peer PyTorch {torch.__version__} {MODES[a.mode]} {impl}, {torch.get_num_threads()} threads", flush=True)
    if a.mode == "compile":
        # The backward is timed alone, again and again on one graph (retain_graph), which a compiled
        # backward's donated buffers forbid.
        importlib.import_module("torch._functorch.config").donated_buffer = False
    fn = torch.compile(attention) if a.mode == "compile" else attention

    def run(q, k, v, causal):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.mode == "bf16"):
            return fn(q, k, v, causal)

    for arg in a.cases:
        label, dims = arg.split(":")
        b, t, nh, hs, causal = (int(d) for d in dims.split(","))
        q, k, v = (torch.randn(b, t, nh, hs).transpose(1, 2).requires_grad_() for _ in range(3))
        dout = torch.randn(b, nh, t, hs)
        with torch.no_grad():
            print(f"{label}_fwd", best_ms(lambda: run(q, k, v, bool(causal))), flush=True)
        out = run(q, k, v, bool(causal))
        print(f"{label}_bwd", best_ms(lambda: torch.autograd.grad(out, (q, k, v), dout.to(out.dtype), retain_graph=True)),
              flush=True)


if __name__ == "__main__":
    main()
