#!/usr/bin/python3
"""PyTorch reference of lmforge's dense transformer, written from the math, and the fixture writer for
model/testdata/.

Run with Debian's python3-torch (1.13):   /usr/bin/python3 tools/model/reference.py [--out model/testdata]

One model class covers both reference architectures through a config dict:
  - GPT-2 style: LayerNorm, GELU (tanh) MLP, learned absolute positions, biases, tied embeddings.
  - CS336 / Llama style: RMSNorm, SwiGLU, RoPE (adjacent pairs (2i, 2i+1) rotated), no biases, untied.
plus the other options the C++ ModelConfig offers (ReLU MLP, sinusoidal or no positions, n_kv_heads < n_heads)
and the block structures (`norm_placement`, `parallel_block`; absent from a config: "pre", false):
  pre       x = x + attn(ln1(x));                 x = x + ffn(ln2(x))                  then ln_final
  post      x = ln1(x + attn(x));                 x = ln2(x + ffn(x))                  no ln_final (BERT, OPT-350m)
  double    x = x + post_attn_norm(attn(ln1(x))); x = x + post_ffn_norm(ffn(ln2(x)))   then ln_final (Gemma 2)
  parallel  x = x + attn(ln1(x)) + ffn(ln2(x))                                         then ln_final (GPT-NeoX)
            x = x + attn(ln1(x)) + ffn(ln1(x))  with parallel_shared_norm (no ln2)       then ln_final (GPT-J, PaLM)

Parameter names (these are the checkpoint names the trainer writes; CS336's state_dict names where it has one):
  token_embeddings.weight           (V, C)
  position_embeddings.weight        (context_length, C)          learned positions only
  layers.{i}.ln1.weight / .bias     (C,)                         bias only for LayerNorm
  layers.{i}.attn.q_proj.weight     (NH*HS, C)      .bias (NH*HS,)   when biases
  layers.{i}.attn.k_proj.weight     (NKV*HS, C)     .bias
  layers.{i}.attn.v_proj.weight     (NKV*HS, C)     .bias
  layers.{i}.attn.output_proj.weight (C, NH*HS)     .bias (C,)
  layers.{i}.attn.q_norm.weight / .bias, layers.{i}.attn.k_norm.weight / .bias   (HS,)   qk_norm only
  layers.{i}.ln2.weight / .bias     (C,)   not with parallel_shared_norm
  layers.{i}.post_attn_norm.weight / .bias, layers.{i}.post_ffn_norm.weight / .bias   (C,)   double only
  layers.{i}.ffn.w1.weight          (d_ff, C)       .bias   SwiGLU gate / GELU,ReLU up projection
  layers.{i}.ffn.w3.weight          (d_ff, C)       .bias   SwiGLU and GeGLU only: the linear ("up") branch
  layers.{i}.ffn.w2.weight          (C, d_ff)       .bias   down projection
  ln_final.weight / .bias           (C,)                     not with post
  lm_head.weight                    (V, C)                   untied only (tied: token_embeddings.weight)
Linear weights are stored (out, in) as in torch.nn.Linear: y = x W^T + b.

Layers that differ (`layer_pattern`, a list of dicts with n_heads, n_kv_heads, sliding_window, attention_softcap,
qk_norm, ffn, d_ff): layer i is layer_pattern[i % len], as lmf::model::ModelConfig::layer(i); without a
pattern every layer takes those fields from the config itself (sliding_window with global_every).

Conventions: query head h uses key/value head h // (NH / NKV) (Llama's repeat_kv); attention is causal and
scaled by 1/sqrt(HS); the loss is the mean cross-entropy over all B*T targets.

Fixtures: for each tiny config, weights are drawn in float32 (so C++ reads them exactly), the forward and
backward run in float64, and logits, loss and every parameter gradient are stored as float32 — so the stored
values carry only the final rounding, and a C++ fp32 implementation is compared against the exact answer.
"""
import argparse
import json
import math
import os

import numpy as np
import torch

from moe_reference import NearTie, moe_forward, moe_parameter_shapes

# Tiny configs for the whole-model test. Field names match lmf::model::ModelConfig.
CONFIGS = {
    "gpt2_tiny": dict(
        vocab_size=61, context_length=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=128,
        norm="layernorm", norm_eps=1e-5, ffn="gelu", positions="learned", rope_theta=0.0, biases=True,
        tied_embeddings=True),
    "llama_tiny": dict(
        vocab_size=67, context_length=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=88,
        norm="rmsnorm", norm_eps=1e-5, ffn="swiglu", positions="rope", rope_theta=10000.0, biases=False,
        tied_embeddings=False),
    # The remaining options: ReLU MLP, sinusoidal positions, multi-query attention, biases with RMSNorm.
    "variants_tiny": dict(
        vocab_size=53, context_length=16, d_model=24, n_layers=2, n_heads=3, n_kv_heads=1, d_ff=40,
        norm="rmsnorm", norm_eps=1e-6, ffn="relu", positions="sinusoidal", rope_theta=0.0, biases=True,
        tied_embeddings=False),
    # Block structures. Post-norm on the GPT-2 architecture (tied, learned positions, biases).
    "post_tiny": dict(
        vocab_size=59, context_length=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=96,
        norm="layernorm", norm_eps=1e-5, ffn="gelu", positions="learned", rope_theta=0.0, biases=True,
        tied_embeddings=True, norm_placement="post"),
    # Double (sandwich) norm on the Llama architecture with GQA.
    "double_tiny": dict(
        vocab_size=47, context_length=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=72,
        norm="rmsnorm", norm_eps=1e-6, ffn="swiglu", positions="rope", rope_theta=10000.0, biases=False,
        tied_embeddings=False, norm_placement="double"),
    # Parallel attention and feed-forward (GPT-NeoX: two norms), LayerNorm, GELU, RoPE, biases.
    "parallel_tiny": dict(
        vocab_size=43, context_length=16, d_model=24, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=64,
        norm="layernorm", norm_eps=1e-5, ffn="gelu", positions="rope", rope_theta=500.0, biases=True,
        tied_embeddings=False, parallel_block=True),
    # The z-loss (PaLM): the trained objective is the mean of CE + z_loss * lse^2; "loss" stays the CE and
    # "z_term" holds the mean z_loss * lse^2. z = 1e-2 (PaLM's 1e-4 would move the gradients by ~0.01%,
    # below what the fp32 comparison resolves; here by ~10%).
    "zloss_tiny": dict(
        vocab_size=71, context_length=16, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, d_ff=64,
        norm="rmsnorm", norm_eps=1e-5, ffn="swiglu", positions="rope", rope_theta=10000.0, biases=False,
        tied_embeddings=True, z_loss=1e-2),
    # QK-norm (Qwen3, Gemma 3): the model's norm over each head's HS channels of q and of k, before RoPE, one
    # gain (and bias) of HS for q and one for k. RMSNorm with GQA and RoPE; LayerNorm with biases.
    "qknorm_tiny": dict(
        vocab_size=53, context_length=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
        norm="rmsnorm", norm_eps=1e-6, ffn="swiglu", positions="rope", rope_theta=10000.0, biases=False,
        tied_embeddings=False, qk_norm=True),
    "qknorm_ln_tiny": dict(
        vocab_size=41, context_length=16, d_model=24, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=48,
        norm="layernorm", norm_eps=1e-5, ffn="gelu", positions="learned", rope_theta=0.0, biases=True,
        tied_embeddings=True, qk_norm=True),
    # Sliding-window attention: token t attends to the 3 tokens (t - 3, t] (the batch is 8 long).
    "window_tiny": dict(
        vocab_size=37, context_length=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
        norm="rmsnorm", norm_eps=1e-5, ffn="swiglu", positions="rope", rope_theta=10000.0, biases=False,
        tied_embeddings=False, sliding_window=3),
    # Attention logit soft-capping (Gemma 2) at 1.5: the scaled scores (a few units with these weights) bend.
    "softcap_tiny": dict(
        vocab_size=39, context_length=16, d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64,
        norm="rmsnorm", norm_eps=1e-5, ffn="swiglu", positions="rope", rope_theta=10000.0, biases=False,
        tied_embeddings=False, attention_softcap=1.5),
    # Local and global layers interleaved (Gemma 2): layer 1 has a window of 2, layer 2 (global_every = 2)
    # attends to the whole prefix.
    "window_global_tiny": dict(
        vocab_size=41, context_length=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=64,
        norm="rmsnorm", norm_eps=1e-5, ffn="swiglu", positions="rope", rope_theta=10000.0, biases=False,
        tied_embeddings=False, sliding_window=2, global_every=2),
    # Parallel blocks with one shared norm (GPT-J, PaLM): RMSNorm, SwiGLU, RoPE, multi-query attention, tied.
    "parallel_shared_tiny": dict(
        vocab_size=45, context_length=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=1, d_ff=64,
        norm="rmsnorm", norm_eps=1e-6, ffn="swiglu", positions="rope", rope_theta=10000.0, biases=False,
        tied_embeddings=True, parallel_block=True, parallel_shared_norm=True),
    # GeGLU (Gemma, T5 v1.1): w2(gelu_tanh(w1 x) * w3 x), with Gemma's double norm, GQA and a tied head.
    "geglu_tiny": dict(
        vocab_size=49, context_length=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
        norm="rmsnorm", norm_eps=1e-6, ffn="geglu", positions="rope", rope_theta=10000.0, biases=False,
        tied_embeddings=True, norm_placement="double"),
    # Final-logit soft-capping (Gemma 2: 30): the LM head's logits become c tanh(z / c) before the softmax, in
    # training and sampling alike. The logits here have a standard deviation of ~1, so c = 1.5 bends them.
    "final_softcap_tiny": dict(
        vocab_size=43, context_length=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
        norm="rmsnorm", norm_eps=1e-5, ffn="swiglu", positions="rope", rope_theta=10000.0, biases=False,
        tied_embeddings=False, final_logit_softcap=1.5),
    # Blocks that differ (layer_pattern): a sliding-window GQA layer with a SwiGLU feed-forward, then a global
    # multi-query layer with QK-norm and soft-capping and a GELU feed-forward of another width, twice.
    "mixed_tiny": dict(
        vocab_size=53, context_length=16, d_model=32, n_layers=4, n_heads=4, n_kv_heads=2, d_ff=64,
        norm="rmsnorm", norm_eps=1e-5, ffn="swiglu", positions="rope", rope_theta=10000.0, biases=False,
        tied_embeddings=False,
        layer_pattern=[
            dict(n_heads=4, n_kv_heads=2, sliding_window=3, attention_softcap=0.0, qk_norm=False, ffn="swiglu",
                 d_ff=48),
            dict(n_heads=2, n_kv_heads=1, sliding_window=0, attention_softcap=2.0, qk_norm=True, ffn="gelu",
                 d_ff=80),
        ]),
    # Mixtures of experts (tools/model/moe_reference.py): the first layer keeps its dense SwiGLU
    # (first_k_dense), the others route each token to 2 of 4 SwiGLU experts with a shared expert, the
    # micro-batch balancing loss and the router z-loss.
    "moe_tiny": dict(
        vocab_size=47, context_length=16, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=64,
        norm="rmsnorm", norm_eps=1e-5, ffn="swiglu", positions="rope", rope_theta=10000.0, biases=False,
        tied_embeddings=False, first_k_dense=1,
        moe=dict(n_experts=4, top_k=2, d_expert=24, expert_kind="swiglu", shared_d_ff=16, router="softmax_topk",
                 normalize_gates=False, route_scale=1.0, n_groups=1, topk_groups=1, capacity_factor=0.0,
                 drop="position", aux_loss=0.1, aux_loss_scope="micro_batch", router_z_loss=0.01,
                 expert_bias=False)),
    # DeepSeek-V3's router on fine-grained GELU experts (GPT-2 style model with biases): sigmoid scores with
    # normalised gates, route_scale, group-limited routing, the sequence-wise balancing loss.
    "moe_sigmoid_tiny": dict(
        vocab_size=41, context_length=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=64,
        norm="layernorm", norm_eps=1e-5, ffn="gelu", positions="learned", rope_theta=0.0, biases=True,
        tied_embeddings=True, first_k_dense=0,
        moe=dict(n_experts=8, top_k=3, d_expert=8, expert_kind="gelu", shared_d_ff=0, router="sigmoid_topk",
                 normalize_gates=True, route_scale=2.5, n_groups=4, topk_groups=2, capacity_factor=0.0,
                 drop="position", aux_loss=0.1, aux_loss_scope="sequence", router_z_loss=0.0,
                 expert_bias=False)),
}
# Fixture seeds (the first three as when they were the only fixtures: their files do not change).
SEEDS = {"gpt2_tiny": 1000, "llama_tiny": 1001, "variants_tiny": 1002, "double_tiny": 1003,
         "parallel_tiny": 1004, "post_tiny": 1005, "zloss_tiny": 1006, "qknorm_tiny": 1007,
         "qknorm_ln_tiny": 1008, "window_tiny": 1009, "softcap_tiny": 1010,
         "window_global_tiny": 1011, "final_softcap_tiny": 1012, "parallel_shared_tiny": 1013,
         "geglu_tiny": 1014, "mixed_tiny": 1015, "moe_tiny": 1016, "moe_sigmoid_tiny": 1017}
BATCH, TIME = 2, 8


def placement(cfg):
    return cfg.get("norm_placement", "pre")


LAYER_FIELDS = ("n_heads", "n_kv_heads", "sliding_window", "attention_softcap", "qk_norm", "ffn", "d_ff")


def layer_cfg(cfg, i):
    """Layer i's (from 0) attention and feed-forward settings: layer_pattern[i % len], else the config's own,
    where the global layers of an interleaved pattern (every global_every-th, counting from 1) have no window."""
    pattern = cfg.get("layer_pattern")
    if pattern:
        return pattern[i % len(pattern)]
    layer = {k: cfg.get(k, 0) for k in LAYER_FIELDS}
    every = cfg.get("global_every", 0)
    if every > 0 and (i + 1) % every == 0:
        layer["sliding_window"] = 0
    if "moe" in cfg and i >= cfg.get("first_k_dense", 0):
        layer["moe"] = cfg["moe"]
    return layer


def rms_norm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def layer_norm(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    return (x - mean) * torch.rsqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def rope(x, theta):
    """x: (B, NH, T, HS). Rotates pairs (2i, 2i+1) of each head by pos * theta^(-2i/HS)."""
    _, _, t, hs = x.shape
    inv_freq = theta ** (-torch.arange(0, hs, 2, dtype=torch.float64) / hs)  # (HS/2,)
    angle = torch.arange(t, dtype=torch.float64)[:, None] * inv_freq[None, :]  # (T, HS/2)
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x0 * cos - x1 * sin
    out[..., 1::2] = x0 * sin + x1 * cos
    return out


def sinusoidal_table(t, c):
    """(T, C): PE[p, 2i] = sin(p / 10000^(2i/C)), PE[p, 2i+1] = cos(p / 10000^(2i/C))."""
    pos = torch.arange(t, dtype=torch.float64)[:, None]
    inv = 10000.0 ** (-torch.arange(0, c, 2, dtype=torch.float64) / c)
    table = torch.zeros(t, c, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv)
    table[:, 1::2] = torch.cos(pos * inv[: c // 2])
    return table


def parameter_shapes(cfg):
    """Ordered {name: shape} of every parameter of the model."""
    c, v = cfg["d_model"], cfg["vocab_size"]
    has_norm_bias = cfg["norm"] == "layernorm"
    shapes = {"token_embeddings.weight": (v, c)}
    if cfg["positions"] == "learned":
        shapes["position_embeddings.weight"] = (cfg["context_length"], c)
    for i in range(cfg["n_layers"]):
        layer = layer_cfg(cfg, i)
        f, hs = layer["d_ff"], c // layer["n_heads"]
        q, kv = layer["n_heads"] * hs, layer["n_kv_heads"] * hs
        linears = [("attn.q_proj", q, c), ("attn.k_proj", kv, c), ("attn.v_proj", kv, c),
                   ("attn.output_proj", c, q)]
        if "moe" not in layer:
            linears.append(("ffn.w1", f, c))
            if layer["ffn"] in ("swiglu", "geglu"):
                linears.append(("ffn.w3", f, c))
            linears.append(("ffn.w2", c, f))
        p = f"layers.{i}."
        norms = ("ln1", "ln2", "post_attn_norm", "post_ffn_norm") if placement(cfg) == "double" else ("ln1", "ln2")
        if cfg.get("parallel_shared_norm", False):
            norms = ("ln1",)
        for norm in norms:
            shapes[p + norm + ".weight"] = (c,)
            if has_norm_bias:
                shapes[p + norm + ".bias"] = (c,)
        for name, out_f, in_f in linears:
            shapes[p + name + ".weight"] = (out_f, in_f)
            if cfg["biases"]:
                shapes[p + name + ".bias"] = (out_f,)
        if layer.get("qk_norm", False):
            for norm in ("attn.q_norm", "attn.k_norm"):
                shapes[p + norm + ".weight"] = (hs,)
                if has_norm_bias:
                    shapes[p + norm + ".bias"] = (hs,)
        if "moe" in layer:
            shapes.update(moe_parameter_shapes(layer["moe"], c, p + "ffn.", cfg["biases"]))
    if placement(cfg) != "post":
        shapes["ln_final.weight"] = (c,)
        if has_norm_bias:
            shapes["ln_final.bias"] = (c,)
    if not cfg["tied_embeddings"]:
        shapes["lm_head.weight"] = (v, c)
    return shapes


def init_parameters(cfg, seed):
    """Float32 weights. Random everywhere (norm gains and biases included) so every gradient path is tested."""
    g = torch.Generator().manual_seed(seed)
    params = {}
    for name, shape in parameter_shapes(cfg).items():
        if name.endswith(("ln1.weight", "ln2.weight", "norm.weight")) or name == "ln_final.weight":
            t = 1.0 + 0.1 * torch.randn(shape, generator=g)
        elif name.endswith(".bias"):
            t = 0.05 * torch.randn(shape, generator=g)
        elif "embeddings" in name:
            t = 0.5 * torch.randn(shape, generator=g)
        else:
            t = torch.randn(shape, generator=g) / math.sqrt(shape[1])
        params[name] = t.to(torch.float32)
    return params


def forward(cfg, p, ids, targets):
    """ids, targets: (B, T) int64. Returns logits (B, T, V), the mean cross-entropy loss and the sum of the
    mixture-of-experts layers' auxiliary losses (balancing and router z-loss; 0 for a dense model)."""
    b, t = ids.shape
    c = cfg["d_model"]
    eps = cfg["norm_eps"]

    def norm(x, prefix):
        if cfg["norm"] == "rmsnorm":
            return rms_norm(x, p[prefix + ".weight"], eps)
        return layer_norm(x, p[prefix + ".weight"], p[prefix + ".bias"], eps)

    def linear(x, prefix):
        y = x @ p[prefix + ".weight"].t()
        if cfg["biases"]:
            y = y + p[prefix + ".bias"]
        return y

    x = p["token_embeddings.weight"][ids]  # (B, T, C)
    if cfg["positions"] == "learned":
        x = x + p["position_embeddings.weight"][:t]
    elif cfg["positions"] == "sinusoidal":
        x = x + sinusoidal_table(t, c).to(x.dtype)
    causal = torch.ones(t, t, dtype=torch.bool).tril()

    def visible(layer):
        """Layer `layer` (from 0): key u visible to query t iff u <= t, and t - W < u with a window."""
        w = layer_cfg(cfg, layer)["sliding_window"]
        if w <= 0:
            return causal
        return causal & ~torch.ones(t, t, dtype=torch.bool).tril(-w)

    def attention(h, pre, layer):
        nh, nkv = layer_cfg(cfg, layer)["n_heads"], layer_cfg(cfg, layer)["n_kv_heads"]
        hs = c // nh
        softcap = layer_cfg(cfg, layer)["attention_softcap"]
        q = linear(h, pre + "attn.q_proj").view(b, t, nh, hs).transpose(1, 2)  # (B, NH, T, HS)
        k = linear(h, pre + "attn.k_proj").view(b, t, nkv, hs).transpose(1, 2)  # (B, NKV, T, HS)
        v = linear(h, pre + "attn.v_proj").view(b, t, nkv, hs).transpose(1, 2)
        if layer_cfg(cfg, layer)["qk_norm"]:  # over the last dimension (HS) of every head
            q, k = norm(q, pre + "attn.q_norm"), norm(k, pre + "attn.k_norm")
        if cfg["positions"] == "rope":
            q, k = rope(q, cfg["rope_theta"]), rope(k, cfg["rope_theta"])
        k = k.repeat_interleave(nh // nkv, dim=1)  # query head h reads kv head h // (NH/NKV)
        v = v.repeat_interleave(nh // nkv, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hs)  # (B, NH, T, T)
        if softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        scores = scores.masked_fill(~visible(layer), float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v  # (B, NH, T, HS)
        attn = attn.transpose(1, 2).reshape(b, t, nh * hs)
        return linear(attn, pre + "attn.output_proj")

    aux = []

    def ffn(h, pre, layer):
        if "moe" in layer_cfg(cfg, layer):
            out, balance, z_loss, _ = moe_forward(layer_cfg(cfg, layer)["moe"], p, pre + "ffn.", h.reshape(b * t, c),
                                                  b, t, cfg["biases"])
            aux.append(balance + z_loss)
            return out.reshape(b, t, c)
        kind = layer_cfg(cfg, layer)["ffn"]
        if kind == "swiglu":
            u = torch.nn.functional.silu(linear(h, pre + "ffn.w1")) * linear(h, pre + "ffn.w3")
        elif kind == "geglu":
            u = gelu_tanh(linear(h, pre + "ffn.w1")) * linear(h, pre + "ffn.w3")
        elif kind == "gelu":
            u = gelu_tanh(linear(h, pre + "ffn.w1"))
        else:
            u = torch.relu(linear(h, pre + "ffn.w1"))
        return linear(u, pre + "ffn.w2")

    for i in range(cfg["n_layers"]):
        pre = f"layers.{i}."
        if cfg.get("parallel_block", False):
            h = norm(x, pre + "ln1")
            x = x + attention(h, pre, i) + ffn(h if cfg.get("parallel_shared_norm", False) else norm(x, pre + "ln2"), pre, i)
        elif placement(cfg) == "post":
            x = norm(x + attention(x, pre, i), pre + "ln1")
            x = norm(x + ffn(x, pre, i), pre + "ln2")
        elif placement(cfg) == "double":
            x = x + norm(attention(norm(x, pre + "ln1"), pre, i), pre + "post_attn_norm")
            x = x + norm(ffn(norm(x, pre + "ln2"), pre, i), pre + "post_ffn_norm")
        else:
            x = x + attention(norm(x, pre + "ln1"), pre, i)
            x = x + ffn(norm(x, pre + "ln2"), pre, i)
    if placement(cfg) != "post":
        x = norm(x, "ln_final")
    head = p["token_embeddings.weight"] if cfg["tied_embeddings"] else p["lm_head.weight"]
    logits = x @ head.t()  # (B, T, V)
    if cfg.get("final_logit_softcap", 0) > 0:
        logits = cfg["final_logit_softcap"] * torch.tanh(logits / cfg["final_logit_softcap"])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
    return logits, loss, sum(aux) if aux else torch.zeros((), dtype=logits.dtype)


def make_fixture(name, cfg, seed):
    """The training objective is the cross-entropy + the z-loss term + the MoE layers' auxiliary losses. An MoE
    config whose routing has a near-tie (moe_reference.NearTie) at `seed` is drawn again at seed + 100, ..."""
    for attempt in range(100):
        try:
            return make_fixture_at(cfg, seed + 100 * attempt)
        except NearTie:
            continue
    raise RuntimeError(f"{name}: no seed without a routing near-tie")


def make_fixture_at(cfg, seed):
    params32 = init_parameters(cfg, seed)
    params = {k: v.to(torch.float64).requires_grad_(True) for k, v in params32.items()}
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, cfg["vocab_size"], (BATCH, TIME), generator=g)
    targets = torch.randint(0, cfg["vocab_size"], (BATCH, TIME), generator=g)
    logits, loss, aux = forward(cfg, params, ids, targets)
    z_term = cfg.get("z_loss", 0.0) * torch.logsumexp(logits, dim=-1).pow(2).mean()
    (loss + z_term + aux).backward()
    out = {"config_json": np.frombuffer(json.dumps(cfg, sort_keys=True).encode(), dtype=np.uint8),
           "ids": ids.numpy().astype(np.int64), "targets": targets.numpy().astype(np.int64),
           "logits": logits.detach().numpy().astype(np.float32),
           "loss": np.array(loss.item(), dtype=np.float64)}
    if "z_loss" in cfg:
        out["z_term"] = np.array(z_term.item(), dtype=np.float64)
    if "moe" in cfg:
        out["aux_loss"] = np.array(float(aux), dtype=np.float64)
    for k, v in params32.items():
        out["param/" + k] = v.numpy()
        grad = params[k].grad  # None for an expert no token reached
        out["grad/" + k] = np.zeros_like(v.numpy()) if grad is None else grad.numpy().astype(np.float32)
    return out


# AdamW training steps on llama_tiny (no biases: a key bias has an exactly-zero gradient, whose fp32
# rounding noise AdamW would normalise into a full-size step).
ADAMW = dict(steps=3, lr=1e-2, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, max_grad_norm=0.5)


def make_adamw_fixture(cfg, seed):
    """Three steps of clip-then-AdamW on one batch; weight decay on matrices (2-D) only, as nanoGPT does."""
    base = make_fixture("llama_tiny", cfg, seed)
    params = {k[len("param/"):]: torch.from_numpy(v).to(torch.float64).requires_grad_(True)
              for k, v in base.items() if k.startswith("param/")}
    decay = [p for p in params.values() if p.dim() >= 2]
    no_decay = [p for p in params.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": ADAMW["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"])
    ids, targets = torch.from_numpy(base["ids"]), torch.from_numpy(base["targets"])
    losses, norms = [], []
    for _ in range(ADAMW["steps"]):
        opt.zero_grad()
        _, loss, _ = forward(cfg, params, ids, targets)
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(list(params.values()), ADAMW["max_grad_norm"]).item())
        losses.append(loss.item())
        opt.step()
    out = {"config_json": base["config_json"], "ids": base["ids"], "targets": base["targets"],
           "adamw_json": np.frombuffer(json.dumps(ADAMW, sort_keys=True).encode(), dtype=np.uint8),
           "losses": np.array(losses), "grad_norms": np.array(norms)}
    for k, v in params.items():
        out["param/" + k] = base["param/" + k]
        out["final/" + k] = v.detach().numpy().astype(np.float32)
    return out


def self_check():
    """The hand-written pieces against torch's own ops and the CS336 RoPE snapshot where present."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, generator=g, dtype=torch.float64)
    w, b = torch.randn(16, generator=g, dtype=torch.float64), torch.randn(16, generator=g, dtype=torch.float64)
    assert torch.allclose(layer_norm(x, w, b, 1e-5), torch.nn.functional.layer_norm(x, (16,), w, b, 1e-5))
    assert torch.allclose(gelu_tanh(x), torch.nn.functional.gelu(x, approximate="tanh"))
    shared = os.environ.get("LMF_SHARED_DATA", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                            "..", "..", "..", "shared", "data"))
    inputs = os.path.join(shared, "cs336", "derived", "a1_test_inputs.npz")
    snapshot = os.path.join(shared, "cs336", "assignment1-basics", "tests", "_snapshots", "test_rope.npz")
    if os.path.exists(inputs) and os.path.exists(snapshot):
        emb = torch.from_numpy(np.load(inputs)["in_embeddings"]).to(torch.float64)  # (4, 12, 64) one head
        got = rope(emb[:, None], 10000.0)[:, 0].numpy()
        np.testing.assert_allclose(got, np.load(snapshot)["array"], atol=1e-5)
        print("self-check: rope matches the CS336 snapshot")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "..", "model", "testdata"))
    args = parser.parse_args()
    self_check()
    os.makedirs(args.out, exist_ok=True)
    for name, cfg in sorted(CONFIGS.items()):
        arrays = make_fixture(name, cfg, SEEDS[name])
        path = os.path.join(args.out, name + ".npz")
        np.savez(path, **arrays)  # uncompressed zip of .npy
        n_params = sum(v.size for k, v in arrays.items() if k.startswith("param/"))
        print(f"{path}: {len(arrays)} arrays, {n_params} parameters, loss {float(arrays['loss']):.6f}")
    arrays = make_adamw_fixture(CONFIGS["llama_tiny"], SEEDS["llama_tiny"])
    path = os.path.join(args.out, "adamw_llama_tiny.npz")
    np.savez(path, **arrays)
    print(f"{path}: losses {arrays['losses']}, grad norms {arrays['grad_norms']}")


if __name__ == "__main__":
    main()
