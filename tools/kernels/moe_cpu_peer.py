"""PyTorch peer for //model/layers/moe:moe_benchmark (CPU, same thread count, same run).

A mixture-of-experts layer as PyTorch MoE code computes it (torchtitan's and Megatron-Core's token-choice
pattern, not per-token loops): router logits in fp32, softmax, top-k, the assignments sorted by expert, each
expert's rows gathered and run through its SwiGLU as one GEMM per matrix, the outputs weighted by their gates
and scattered back with index_add_. The backward is autograd's. Weights are stacked (E, ...) tensors.
--mode: eager (fp32), compile (the layer under torch.compile, fp32; the per-expert loop's data-dependent
counts break its graph, as they do in PyTorch MoE code) or bf16 (eager under CPU bf16 autocast).

Usage: python moe_cpu_peer.py [--mode=eager|compile|bf16] THREADS LABEL:N,C,E,K,F ...
Prints "peer <description>", then "LABEL_fwd <ms>" and "LABEL_fwdbwd <ms>" per case: the best of several runs
after a warm-up, as the benchmark times its own layer.
"""
import argparse

import torch
import torch.nn.functional as F

from peer_timing import best_ms


def moe(x, router, w1, w3, w2, k):
    n, c = x.shape
    e = router.shape[0]
    probs = torch.softmax(x @ router.t(), dim=-1)
    gates, experts = probs.topk(k, dim=-1)                  # (N, K)
    flat = experts.reshape(-1)
    order = flat.argsort(stable=True)                       # assignments grouped by expert
    token = order // k
    counts = torch.bincount(flat, minlength=e).tolist()
    out = torch.zeros_like(x)
    start = 0
    for i, count in enumerate(counts):
        if count == 0:
            continue
        rows = token[start:start + count]
        h = x[rows]
        y = (F.silu(h @ w1[i].t()) * (h @ w3[i].t())) @ w2[i].t()
        out.index_add_(0, rows, (y * gates.reshape(-1)[order[start:start + count]].unsqueeze(1)).to(out.dtype))
        start += count
    return out


MODES = {"eager": "eager fp32", "compile": "torch.compile fp32", "bf16": "eager bf16 autocast"}


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
    print(f"peer PyTorch {torch.__version__} {MODES[a.mode]} grouped token-choice MoE, {torch.get_num_threads()} threads",
          flush=True)
    # dynamic: each expert's row count changes from call to call; static shapes would recompile for each.
    fn = torch.compile(moe, dynamic=True) if a.mode == "compile" else moe

    def layer(*args):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.mode == "bf16"):
            return fn(*args)

    for arg in a.cases:
        label, dims = arg.split(":")
        n, c, e, k, f = (int(d) for d in dims.split(","))
        x = torch.randn(n, c, requires_grad=True)
        router = (0.02 * torch.randn(e, c)).requires_grad_()
        w1, w3 = ((0.02 * torch.randn(e, f, c)).requires_grad_() for _ in range(2))
        w2 = (0.02 * torch.randn(e, c, f)).requires_grad_()
        dout = torch.randn(n, c)
        with torch.no_grad():
            print(f"{label}_fwd", best_ms(lambda: layer(x, router, w1, w3, w2, k), budget_s=1.0), flush=True)

        def step():
            out = layer(x, router, w1, w3, w2, k)
            torch.autograd.backward(out, dout.to(out.dtype))

        print(f"{label}_fwdbwd", best_ms(step, budget_s=1.0), flush=True)


if __name__ == "__main__":
    main()
