#!/usr/bin/python3
"""Writes the PyTorch reference fixtures for the kernel tests into kernels/testdata/ (one .npz per op).

Run with Debian's PyTorch (1.13):  /usr/bin/python3 tools/kernels/make_fixtures.py [--out kernels/testdata]

Every fixture holds float32 inputs, and outputs and gradients that PyTorch computes from them in float64
(autograd for the gradients), rounded to float32; the C++ tests compare our fp32 kernels against these.
Arrays are C-order; shapes are documented per op below and in each *_test.cc. Deterministic (fixed seeds).
"""
import argparse
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(1234)


def f32(t):
    return t.detach().to(torch.float32).numpy()


def rnd(*shape, scale=1.0):
    """float32 random normal values, returned as a float64 leaf tensor that requires grad."""
    x = (torch.randn(*shape) * scale).to(torch.float32)
    return x.to(torch.float64).requires_grad_(True)


def save(out_dir, name, **arrays):
    path = os.path.join(out_dir, name + ".npz")
    np.savez(path, **{k: (v if isinstance(v, np.ndarray) else np.asarray(v)) for k, v in arrays.items()})
    print("wrote", path, sum(np.asarray(v).nbytes for v in arrays.values()), "bytes")


def backward(out, seed_scale=1.0):
    """Backpropagates a random upstream gradient dout (float32 values) through out; returns dout."""
    dout = rnd(*out.shape, scale=seed_scale).detach()
    out.backward(dout)
    return dout


def matmul_fixture(out_dir):
    arrays = {}
    batch, M, N, K = 3, 6, 5, 4
    for ta in (False, True):
        for tb in (False, True):
            prefix = f"ta{int(ta)}_tb{int(tb)}_"
            a = rnd(batch, K, M) if ta else rnd(batch, M, K)  # stored layout
            b = rnd(batch, N, K) if tb else rnd(batch, K, N)
            bias = rnd(N)
            opa = a.transpose(1, 2) if ta else a
            opb = b.transpose(1, 2) if tb else b
            c = torch.bmm(opa, opb) + bias
            dc = backward(c)
            arrays.update({prefix + "a": f32(a), prefix + "b": f32(b), prefix + "bias": f32(bias),
                           prefix + "c": f32(c), prefix + "dc": f32(dc), prefix + "da": f32(a.grad),
                           prefix + "db": f32(b.grad), prefix + "dbias": f32(bias.grad)})
    save(out_dir, "matmul", **arrays)


def embedding_fixture(out_dir):
    V, C = 11, 6
    ids = torch.tensor([3, 0, 10, 3, 7, 3, 1, 10, 5], dtype=torch.int64)
    table = rnd(V, C)
    out = F.embedding(ids, table)
    dout = backward(out)
    save(out_dir, "embedding", ids=ids.numpy().astype(np.int32), table=f32(table), out=f32(out), dout=f32(dout),
         dtable=f32(table.grad))


def rmsnorm_fixture(out_dir):
    N, C, eps = 6, 16, 1e-5
    x = rnd(N, C, scale=2.0)
    w = rnd(C)
    out = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
    dout = backward(out)
    save(out_dir, "rmsnorm", x=f32(x), weight=f32(w), out=f32(out), dout=f32(dout), dx=f32(x.grad),
         dweight=f32(w.grad), eps=np.float32(eps))


def layernorm_fixture(out_dir):
    N, C, eps = 6, 16, 1e-5
    x = rnd(N, C, scale=2.0)
    with torch.no_grad():
        x += 3.0  # a mean far from zero exercises the centring
    w, b = rnd(C), rnd(C)
    out = F.layer_norm(x, (C,), w, b, eps)
    dout = backward(out)
    save(out_dir, "layernorm", x=f32(x), weight=f32(w), bias=f32(b), out=f32(out), dout=f32(dout), dx=f32(x.grad),
         dweight=f32(w.grad), dbias=f32(b.grad), eps=np.float32(eps))


def activations_fixture(out_dir):
    n = 203  # not a multiple of 8: exercises the scalar tails
    base = torch.cat([torch.linspace(-9.0, 9.0, 150), torch.randn(53) * 3]).to(torch.float32)
    arrays = {"x": base.numpy()}
    for name, fn in (("gelu_tanh", lambda x: F.gelu(x, approximate="tanh")), ("silu", F.silu), ("relu", F.relu)):
        x = base.to(torch.float64).requires_grad_(True)
        out = fn(x)
        dout = backward(out)
        arrays[name + "_out"] = f32(out)
        arrays[name + "_dout"] = f32(dout)
        arrays[name + "_dx"] = f32(x.grad)
    # The soft-cap c tanh(x / c) at c = 2.5 (its own generator for dout, so the fixtures drawn after this one
    # keep their values).
    cap = 2.5
    x = base.to(torch.float64).requires_grad_(True)
    out = cap * torch.tanh(x / cap)
    dout = torch.randn(n, generator=torch.Generator().manual_seed(77)).to(torch.float32).to(torch.float64)
    out.backward(dout)
    arrays.update(softcap_out=f32(out), softcap_dout=f32(dout), softcap_dx=f32(x.grad), softcap_cap=np.float32(cap))
    assert arrays["x"].shape == (n,)
    save(out_dir, "activations", **arrays)


def swiglu_fixture(out_dir):
    N, H = 5, 13
    gate, up = rnd(N, H, scale=2.0), rnd(N, H)
    out = F.silu(gate) * up
    dout = backward(out)
    # GeGLU (gelu_tanh(gate) * up) on the same inputs and upstream gradient.
    g2, u2 = gate.detach().clone().requires_grad_(True), up.detach().clone().requires_grad_(True)
    out2 = F.gelu(g2, approximate="tanh") * u2
    out2.backward(dout)
    save(out_dir, "swiglu", gate=f32(gate), up=f32(up), out=f32(out), dout=f32(dout), dgate=f32(gate.grad),
         dup=f32(up.grad), geglu_out=f32(out2), geglu_dgate=f32(g2.grad), geglu_dup=f32(u2.grad))


def softmax_fixture(out_dir):
    N, C = 5, 37
    x = rnd(N, C, scale=3.0)
    out = torch.softmax(x, dim=-1)
    dout = backward(out)
    save(out_dir, "softmax", x=f32(x), out=f32(out), dout=f32(dout), dx=f32(x.grad))


def rope_reference(x, positions, theta):
    """x (B, T, NH, HS), positions (B, T): rotates pairs (2i, 2i+1) by pos * theta^(-2i/HS)."""
    HS = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, HS, 2, dtype=torch.float64) / HS)
    angle = positions.to(torch.float64)[:, :, None, None] * inv_freq  # (B, T, 1, HS/2)
    cos, sin = torch.cos(angle), torch.sin(angle)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x0 * cos - x1 * sin, x0 * sin + x1 * cos], dim=-1).flatten(-2)


def rope_fixture(out_dir):
    B, T, NH, HS, theta = 2, 7, 3, 8, 10000.0
    x = rnd(B, T, NH, HS)
    positions = torch.randint(0, 4000, (B, T))
    out = rope_reference(x, positions, theta)
    dout = backward(out)
    save(out_dir, "rope", x=f32(x), positions=positions.numpy().astype(np.int32), out=f32(out), dout=f32(dout),
         dx=f32(x.grad), theta=np.float32(theta))


def attention_reference(q, k, v, causal, mask):
    """q (B, T, NH, HS), k/v (B, S, NKV, HS), mask (B, NH, T, S) bool or None -> out (B, T, NH, HS), lse."""
    B, T, NH, HS = q.shape
    S, NKV = k.shape[1], k.shape[2]
    G = NH // NKV
    qh = q.permute(0, 2, 1, 3)
    kh = k.permute(0, 2, 1, 3).repeat_interleave(G, dim=1)
    vh = v.permute(0, 2, 1, 3).repeat_interleave(G, dim=1)
    s = qh @ kh.transpose(-1, -2) / math.sqrt(HS)
    allowed = torch.ones(T, S, dtype=torch.bool)
    if causal:
        allowed = torch.tril(allowed)
    allowed = allowed.expand(B, NH, T, S)
    if mask is not None:
        allowed = allowed & mask
    s = s.masked_fill(~allowed, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    out = (torch.softmax(s, dim=-1) @ vh).permute(0, 2, 1, 3)
    return out, lse


def attention_fixture(out_dir):
    cases = {
        # name: (B, T, S, NH, NKV, HS, causal, with_mask)
        "gqa_causal": (2, 9, 9, 4, 2, 8, True, False),
        "mqa_masked": (2, 5, 7, 2, 1, 8, False, True),
        "mha_causal_long": (1, 70, 70, 2, 2, 16, True, False),  # longer than one query and one key block
        "gqa_causal_masked": (1, 33, 33, 4, 2, 8, True, True),
    }
    arrays = {}
    for name, (B, T, S, NH, NKV, HS, causal, with_mask) in cases.items():
        q, k, v = rnd(B, T, NH, HS), rnd(B, S, NKV, HS), rnd(B, S, NKV, HS)
        mask = None
        if with_mask:
            mask = torch.rand(B, NH, T, S) > 0.4
            mask[..., 0] = True  # every query sees at least one key
            arrays[name + "_mask"] = mask.numpy().astype(np.uint8)
        out, lse = attention_reference(q, k, v, causal, mask)
        dout = backward(out)
        arrays.update({name + "_q": f32(q), name + "_k": f32(k), name + "_v": f32(v), name + "_out": f32(out),
                       name + "_lse": f32(lse), name + "_dout": f32(dout), name + "_dq": f32(q.grad),
                       name + "_dk": f32(k.grad), name + "_dv": f32(v.grad),
                       name + "_dims": np.array([B, T, S, NH, NKV, HS, int(causal), int(with_mask)], np.int64)})
    save(out_dir, "attention", **arrays)


def residual_fixture(out_dir):
    a, b = rnd(37), rnd(37)
    out = a + b
    dout = backward(out)
    save(out_dir, "residual", a=f32(a), b=f32(b), out=f32(out), dout=f32(dout), da=f32(a.grad), db=f32(b.grad))


def cross_entropy_fixture(out_dir):
    N, V, stride, z_loss, ignore = 6, 13, 16, 1e-3, -100
    logits = rnd(N, V, scale=3.0)
    targets = torch.tensor([3, 12, 0, ignore, 7, 7], dtype=torch.int64)
    lse = torch.logsumexp(logits, dim=-1)
    valid = targets != ignore
    picked = logits.gather(1, targets.clamp(min=0)[:, None])[:, 0]
    losses = torch.where(valid, lse - picked + z_loss * lse * lse, torch.zeros_like(lse))
    loss = losses.sum() / valid.sum()
    loss.backward()
    padded = np.zeros((N, stride), np.float32)
    padded[:, :V] = f32(logits)
    dpadded = np.zeros((N, stride), np.float32)
    dpadded[:, :V] = f32(logits.grad)
    # Final-logit soft-capping (Gemma 2): the loss of y = c tanh(z / c) of the same raw logits z, its gradient
    # taken w.r.t. z.
    cap = 2.0
    raw = logits.detach().clone().requires_grad_(True)
    capped = cap * torch.tanh(raw / cap)
    lse_c = torch.logsumexp(capped, dim=-1)
    picked_c = capped.gather(1, targets.clamp(min=0)[:, None])[:, 0]
    losses_c = torch.where(valid, lse_c - picked_c + z_loss * lse_c * lse_c, torch.zeros_like(lse_c))
    (losses_c.sum() / valid.sum()).backward()
    capped_padded = np.zeros((N, stride), np.float32)
    capped_padded[:, :V] = f32(capped)
    draw_padded = np.zeros((N, stride), np.float32)
    draw_padded[:, :V] = f32(raw.grad)
    save(out_dir, "cross_entropy", logits=padded, targets=targets.numpy().astype(np.int32), losses=f32(losses),
         lse=f32(lse), loss=f32(loss), dlogits=dpadded, dloss=np.float32(1.0 / float(valid.sum())),
         z_loss=np.float32(z_loss), V=np.int64(V), softcap=np.float32(cap), softcap_logits=capped_padded,
         softcap_losses=f32(losses_c), softcap_dlogits=draw_padded)


def adamw_fixture(out_dir):
    n, steps = 10, 5
    p = torch.nn.Parameter(torch.randn(n))
    p0 = p.detach().clone()
    opt = torch.optim.AdamW([p], lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    grads, params = [], []
    for _ in range(steps):
        g = torch.randn(n)
        p.grad = g.clone()
        opt.step()
        grads.append(g.numpy())
        params.append(p.detach().numpy().copy())
    state = opt.state[p]
    save(out_dir, "adamw", param0=p0.numpy(), grads=np.stack(grads), params=np.stack(params),
         m=state["exp_avg"].numpy(), v=state["exp_avg_sq"].numpy(),
         hyper=np.array([1e-2, 0.9, 0.95, 1e-8, 0.1], np.float32))


def grad_norm_fixture(out_dir):
    shapes = [(7,), (3, 5), (17000,)]  # the last spans two 16K blocks
    params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    for q in params:
        q.grad = torch.randn(q.shape) * 0.01
    grads = [q.grad.clone() for q in params]
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm=0.5)
    arrays = {"norm": np.float32(norm), "max_norm": np.float32(0.5)}
    for i, (g, q) in enumerate(zip(grads, params)):
        arrays[f"grad{i}"] = g.numpy().reshape(-1)
        arrays[f"clipped{i}"] = q.grad.numpy().reshape(-1)
    save(out_dir, "grad_norm", **arrays)


def npz_reader_fixture(out_dir):
    """Arrays of every dtype the C++ .npz reader supports, with known values."""
    save(out_dir, "npz_reader", f32=np.arange(6, dtype=np.float32).reshape(2, 3) / 4,
         f64=np.array([1.5, -2.25], np.float64), i64=np.array([[-3], [4]], np.int64),
         i32=np.array([7, -8, 9], np.int32), b=np.array([True, False, True]), scalar=np.float32(2.5))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--out", default=os.path.join(root, "kernels", "testdata"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for fn in (matmul_fixture, embedding_fixture, rmsnorm_fixture, layernorm_fixture, activations_fixture,
               swiglu_fixture, softmax_fixture, rope_fixture, attention_fixture, residual_fixture,
               cross_entropy_fixture, adamw_fixture, grad_norm_fixture, npz_reader_fixture):
        fn(args.out)


if __name__ == "__main__":
    main()
