"""PyTorch peer for //kernels/cuda:memory_bound_benchmark: the same ops and shapes in PyTorch eager (bf16).

Usage: python3 memory_bound_peer.py     prints "<op> <median ms>" per op (CUDA events, after warm-up).
AdamW: torch.optim.AdamW(fused=True) over one fp32 parameter with an fp32 gradient, printed as "adamw_f32_grads"
(the same work as ours in that row) and again as "adamw" (torch's fused AdamW wants the gradient in the
parameter's dtype; ours there reads a bf16 gradient and also writes a bf16 weight copy). Embedding backward:
aten's embedding_dense_backward (a bf16 table gradient; ours accumulates into an fp32 one).
"""
import torch
import torch.nn.functional as F

from peer_timing import median_ms


def rotation(x, t, hs):
    """RoPE of x (B, T, heads, HS) in bf16 as PyTorch eager writes it: a function that returns the rotated x."""
    inv = 10000.0 ** (-torch.arange(0, hs, 2, device=x.device, dtype=torch.float32) / hs)
    ang = torch.arange(t, device=x.device, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos()[None, :, None, :].to(x.dtype), ang.sin()[None, :, None, :].to(x.dtype)

    def rope():
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)

    return rope


def main():
    dev, bf = "cuda", torch.bfloat16
    n, c, h, v, nce, p = 16384, 2048, 8192, 50304, 8192, 124_000_000
    x = torch.rand(n, c, device=dev, dtype=bf).requires_grad_()
    r = torch.rand(n, c, device=dev, dtype=bf)
    w = torch.rand(c, device=dev, dtype=bf).requires_grad_()
    dout = torch.rand(n, c, device=dev, dtype=bf)
    print("rmsnorm_fwd", median_ms(lambda: F.rms_norm(x, (c,), w, 1e-5)), flush=True)
    y = F.rms_norm(x, (c,), w, 1e-5)
    print("rmsnorm_bwd", median_ms(lambda: torch.autograd.grad(y, (x, w), dout, retain_graph=True)), flush=True)
    print("layernorm_fwd", median_ms(lambda: F.layer_norm(x, (c,), w, w, 1e-5)), flush=True)
    b_ln = torch.rand(c, device=dev, dtype=bf).requires_grad_()
    y_ln = F.layer_norm(x, (c,), w, b_ln, 1e-5)
    print("layernorm_bwd", median_ms(lambda: torch.autograd.grad(y_ln, (x, w, b_ln), dout, retain_graph=True)),
          flush=True)
    del y_ln
    print("residual_rmsnorm_fwd", median_ms(lambda: F.rms_norm(r + x, (c,), w, 1e-5)), flush=True)
    del x, r, y, dout

    gu = torch.rand(n, 2 * h, device=dev, dtype=bf).requires_grad_()
    d = torch.rand(n, h, device=dev, dtype=bf)
    def swiglu():
        g, u = gu.chunk(2, dim=-1)
        return F.silu(g) * u
    print("swiglu_fwd", median_ms(swiglu), flush=True)
    out = swiglu()
    print("swiglu_bwd", median_ms(lambda: torch.autograd.grad(out, gu, d, retain_graph=True)), flush=True)
    del gu, d, out

    b, t, nh, hs = 16, 1024, 16, 128
    q = torch.rand(b, t, nh, hs, device=dev, dtype=bf)
    print("rope_fwd", median_ms(rotation(q, t, hs)), flush=True)
    del q

    # GPT-2 small's q and k heads (12 + 12, head size 64) inside the fused (B*T, 3*768) qkv buffer.
    width, heads, hs2 = 3 * 768, 24, 64
    qkv = torch.rand(b * t, width, device=dev, dtype=bf)
    print("rope_qk_of_qkv", median_ms(rotation(qkv[:, : heads * hs2].view(b, t, heads, hs2), t, hs2)), flush=True)
    del qkv

    # GPT-2 small's token embedding: the benchmark's 16K ids into a (50304, 768) bf16 table.
    ne, ve, ce = 16384, 50304, 768
    i = torch.arange(ne, device=dev, dtype=torch.int64)
    ids = (i * 7919 + (i * i) % 977) % ve
    table = torch.rand(ve, ce, device=dev, dtype=bf)
    demb = torch.rand(ne, ce, device=dev, dtype=bf)
    print("embedding_fwd", median_ms(lambda: F.embedding(ids, table)), flush=True)
    print("embedding_bwd", median_ms(lambda: torch.ops.aten.embedding_dense_backward(demb, ids, ve, -1, False)),
          flush=True)
    del table, demb

    dy = torch.rand(16384, 3072, device=dev, dtype=bf)
    print("bias_grad_column_sum", median_ms(lambda: torch.sum(dy, dim=0, dtype=torch.float32)), flush=True)
    del dy

    logits = torch.rand(nce, v, device=dev, dtype=bf)[:, :50257].requires_grad_()
    targets = (torch.arange(nce, device=dev) * 7919) % 50257
    def ce():
        loss = F.cross_entropy(logits, targets)
        return torch.autograd.grad(loss, logits)
    print("cross_entropy_fused", median_ms(ce), flush=True)
    del logits

    param = torch.nn.Parameter(torch.rand(p, device=dev))
    param.grad = torch.rand(p, device=dev)
    opt = torch.optim.AdamW([param], lr=1e-3, weight_decay=0.1, fused=True)
    adamw_ms = median_ms(opt.step)
    print("adamw_f32_grads", adamw_ms, flush=True)
    print("adamw", adamw_ms, flush=True)
    g = torch.rand(p, device=dev)
    print("grad_norm", median_ms(lambda: torch.linalg.vector_norm(g)), flush=True)
    gb = g.to(bf)
    print("grad_norm_bf16", median_ms(lambda: torch.linalg.vector_norm(gb, dtype=torch.float32)), flush=True)


if __name__ == "__main__":
    main()
