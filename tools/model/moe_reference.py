#!/usr/bin/python3
"""PyTorch reference of lmforge's mixture-of-experts layer (model/layers/moe), naive and readable, written from
the papers, and the fixture writer for its layer test (model/testdata/moe_layer_*.npz).

Run with Debian's python3-torch (1.13):   /usr/bin/python3 tools/model/moe_reference.py [--out model/testdata]
(tools/model/reference.py imports moe_forward for its whole-model MoE fixtures.)

For each token x (a row of h, C channels), with router logits z = W_r x (E experts):
  router "softmax_topk"  (Switch, GShard):   p = softmax(z); the k experts of largest p; gates p_j
         "topk_softmax"  (Mixtral):          the k experts of largest z; gates softmax over those k logits
         "sigmoid_topk"  (DeepSeek-V3):      s = sigmoid(z); the k experts of largest s; gates s_j
  normalize_gates: gates / their sum over the k (DeepSeek-V3's sigmoid gates); route_scale: gates * scale.
  expert_bias b (DeepSeek-V3, auxiliary-loss-free): the selection ranks score + b, the gates use the score.
  groups (DeepSeek-V3 node-limited routing): E experts in n_groups groups of consecutive experts; a group's
  score is the sum of its two best (biased) scores; only the topk_groups best groups are eligible.
  capacity_factor > 0 (Switch, GShard): an expert takes at most ceil(cf * N * k / E) of the N tokens; drop
  "position" keeps the earliest tokens, "score" the largest gates. A dropped (token, expert) adds nothing.
  out = shared(x) + sum over kept (j) gate_j * expert_j(x); an expert and the shared experts are feed-forwards
  w2(act(w1 x) * w3 x) (swiglu, geglu) or w2(act(w1 x)) (gelu, relu), with biases when the model has them.
Losses (added to the training objective):
  balance (Switch eq. 4, GShard; DeepSeek-V3's sequence-wise form): aux_loss * E * sum_i f_i P_i, f_i the
  share of the k * n selections that chose expert i (before capacity), P_i the mean over the n tokens of
  softmax(z)_i (for the sigmoid router s_i / sum_j s_j); over the micro-batch or each sequence, then averaged.
  router z-loss (ST-MoE eq. 5): router_z_loss * mean over tokens of logsumexp(z)^2.
Noisy top-k gating (Shazeer et al. 2017, eq. 3-5), noisy_gating: everything above (selection, gates, losses)
runs on H = z + eps * softplus(W_noise x) instead of z in training forwards, eps ~ N(0, 1) per token and
expert. lmforge draws eps from a counter-based hash of (seed, step, layer, the token's index among the step's
tokens, expert) (gating_noise below, the same arithmetic as moe::GatingNoise); the fixture stores that key
and eps so that the C++ test checks the draw as well as the layer.

Parameter names: {prefix}router.weight (E, C); {prefix}router.noise.weight (E, C) with noisy_gating; {prefix}experts.{e}.w1.weight (F, C), .w3.weight (F, C),
.w2.weight (C, F) (and .bias); {prefix}shared.w1/w3/w2.* (shared_d_ff wide).
"""
import argparse
import json
import math
import os

import numpy as np
import torch


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def feed_forward(kind, p, prefix, x, biases):
    def linear(v, name):
        y = v @ p[prefix + name + ".weight"].t()
        return y + p[prefix + name + ".bias"] if biases else y
    if kind == "swiglu":
        u = torch.nn.functional.silu(linear(x, "w1")) * linear(x, "w3")
    elif kind == "geglu":
        u = gelu_tanh(linear(x, "w1")) * linear(x, "w3")
    elif kind == "gelu":
        u = gelu_tanh(linear(x, "w1"))
    else:
        u = torch.relu(linear(x, "w1"))
    return linear(u, "w2")


def moe_parameter_shapes(spec, c, prefix, biases):
    """Ordered {name: shape} of one MoE layer's parameters."""
    shapes = {prefix + "router.weight": (spec["n_experts"], c)}
    if spec.get("noisy_gating", False):
        shapes[prefix + "router.noise.weight"] = (spec["n_experts"], c)
    gated = spec["expert_kind"] in ("swiglu", "geglu")

    def ffn(at, f):
        names = [("w1", f, c)] + ([("w3", f, c)] if gated else []) + [("w2", c, f)]
        for name, out_f, in_f in names:
            shapes[at + name + ".weight"] = (out_f, in_f)
            if biases:
                shapes[at + name + ".bias"] = (out_f,)
    for e in range(spec["n_experts"]):
        ffn(f"{prefix}experts.{e}.", spec["d_expert"])
    if spec.get("shared_d_ff", 0) > 0:
        ffn(prefix + "shared.", spec["shared_d_ff"])
    return shapes


class NearTie(Exception):
    """A selection decided by less than MARGIN: fp32 could decide it the other way; pick another seed."""


MARGIN = 1e-4


def top(values, k):
    """Indices of the k largest, best first, refusing a near-tie at the boundary."""
    order = sorted(range(len(values)), key=lambda i: -float(values[i]))
    if k < len(values) and float(values[order[k - 1]]) - float(values[order[k]]) < MARGIN:
        raise NearTie(f"{float(values[order[k - 1]])} vs {float(values[order[k]])}")
    return order[:k]


def route(spec, z, bias):
    """z (N, E) -> experts [[e_1..e_k] per token], gates (N, k) tensor, from the papers' definitions."""
    n, e = z.shape
    k, groups, router = spec["top_k"], spec.get("n_groups", 1), spec["router"]
    if router == "softmax_topk":
        scores = torch.softmax(z, dim=-1)
    elif router == "sigmoid_topk":
        scores = torch.sigmoid(z)
    else:
        scores = z
    experts, gates = [], []
    for t in range(n):
        keys = scores[t].detach().clone()
        if bias is not None:
            keys = keys + bias
        if groups > 1:
            size = e // groups
            group_keys = [sum(sorted(keys[g * size:(g + 1) * size].tolist(), reverse=True)[:2]) for g in range(groups)]
            chosen_groups = top(group_keys, spec["topk_groups"])
            for g in range(groups):
                if g not in chosen_groups:
                    keys[g * size:(g + 1) * size] = -float("inf")
        chosen = top(keys.tolist(), k)
        if router == "topk_softmax":
            g = torch.softmax(z[t, chosen], dim=-1)
        else:
            g = scores[t, chosen]
            if spec.get("normalize_gates", False):
                g = g / g.sum()
        experts.append(chosen)
        gates.append(g * spec.get("route_scale", 1.0))
    return experts, torch.stack(gates)


def kept_assignments(spec, experts, gates):
    """The set of (token, j) each expert computes after the capacity."""
    n, k, e = len(experts), spec["top_k"], spec["n_experts"]
    cf = spec.get("capacity_factor", 0.0)
    everything = {(t, j) for t in range(n) for j in range(k)}
    if cf <= 0:
        return everything
    capacity = math.ceil(cf * n * k / e)
    kept = set()
    for expert in range(e):
        mine = [(t, j) for t in range(n) for j in range(k) if experts[t][j] == expert]
        if spec.get("drop", "position") == "score" and len(mine) > capacity:
            values = [float(gates[t, j]) for t, j in mine]
            keep = top(values, capacity)
            mine = [mine[i] for i in keep]
        kept.update(mine[:capacity])
    return kept


def balance_loss(spec, z, experts, b, t):
    if spec.get("aux_loss", 0.0) == 0:
        return torch.zeros((), dtype=z.dtype)
    e, k = spec["n_experts"], spec["top_k"]
    if spec["router"] == "sigmoid_topk":
        s = torch.sigmoid(z)
        probs = s / s.sum(dim=-1, keepdim=True)
    else:
        probs = torch.softmax(z, dim=-1)
    segments = [(i * t, (i + 1) * t) for i in range(b)] if spec.get("aux_loss_scope") == "sequence" else [(0, b * t)]
    total = 0
    for first, last in segments:
        counts = torch.zeros(e, dtype=z.dtype)
        for token in range(first, last):
            for expert in experts[token]:
                counts[expert] += 1
        f = counts / ((last - first) * k)
        p_mean = probs[first:last].mean(dim=0)
        total = total + spec["aux_loss"] * e * (f * p_mean).sum()
    return total / len(segments)


def router_z_loss(spec, z):
    return spec.get("router_z_loss", 0.0) * torch.logsumexp(z, dim=-1).pow(2).mean()


MASK64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def gating_noise(seed, step, layer, first_token, n, e):
    """eps (N, E) float32 for the n tokens first_token .. first_token + n - 1 of a training step: per token,
    key = splitmix64(splitmix64(splitmix64(splitmix64(seed) ^ step) ^ layer) ^ token), then for expert i
    Box-Muller of u1 = ((splitmix64(key + 2i) >> 11) + 1) / 2^53 and u2 = (splitmix64(key + 2i + 1) >> 11) / 2^53."""
    eps = np.zeros((n, e), dtype=np.float32)
    layer_key = splitmix64(splitmix64(splitmix64(seed) ^ step) ^ layer)
    for row in range(n):
        key = splitmix64(layer_key ^ (first_token + row))
        for i in range(e):
            u1 = ((splitmix64((key + 2 * i) & MASK64) >> 11) + 1) / 2.0**53
            u2 = (splitmix64((key + 2 * i + 1) & MASK64) >> 11) / 2.0**53
            eps[row, i] = math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)
    return eps


def moe_forward(spec, p, prefix, h, b, t, biases, bias=None, noise=None):
    """h (N, C), N = b * t -> out (N, C), balance loss, router z-loss, dropped assignments. noise (N, E): the
    standard normals of noisy gating (needed when spec has it)."""
    z = h @ p[prefix + "router.weight"].t()
    if spec.get("noisy_gating", False):
        z = z + noise * torch.nn.functional.softplus(h @ p[prefix + "router.noise.weight"].t())
    experts, gates = route(spec, z, bias)
    kept = kept_assignments(spec, experts, gates)
    rows = []
    for token in range(h.shape[0]):  # one token at a time: the plain definition
        y = torch.zeros_like(h[token])
        for j, expert in enumerate(experts[token]):
            if (token, j) in kept:
                y = y + gates[token, j] * feed_forward(spec["expert_kind"], p, f"{prefix}experts.{expert}.",
                                                       h[token], biases)
        rows.append(y)
    out = torch.stack(rows)
    if spec.get("shared_d_ff", 0) > 0:
        out = out + feed_forward(spec["expert_kind"], p, prefix + "shared.", h, biases)
    dropped = h.shape[0] * spec["top_k"] - len(kept)
    return out, balance_loss(spec, z, experts, b, t), router_z_loss(spec, z), dropped


# Layer fixtures: C = 8, B = 2 sequences of T = 5 tokens. Each variant of the router, shared and fine-grained
# experts, dropping by position and by score, both loss scopes and the z-loss.
LAYER_C, LAYER_B, LAYER_T = 8, 2, 5
BASE = dict(n_experts=4, top_k=2, d_expert=6, expert_kind="swiglu", shared_d_ff=0, router="softmax_topk",
            normalize_gates=False, route_scale=1.0, n_groups=1, topk_groups=1, capacity_factor=0.0,
            drop="position", aux_loss=0.0, aux_loss_scope="micro_batch", router_z_loss=0.0, expert_bias=False)
LAYER_CASES = {
    "moe_layer_softmax_topk": dict(aux_loss=0.5, router_z_loss=0.05),
    "moe_layer_topk_softmax": dict(router="topk_softmax", expert_kind="gelu", biases=True, aux_loss=0.5,
                                   aux_loss_scope="sequence"),
    "moe_layer_sigmoid_grouped_bias": dict(router="sigmoid_topk", n_experts=8, top_k=2, d_expert=3,
                                           normalize_gates=True, route_scale=2.5, n_groups=4, topk_groups=2,
                                           expert_bias=True, aux_loss=0.5, aux_loss_scope="sequence"),
    "moe_layer_shared_fine_grained": dict(n_experts=8, top_k=3, d_expert=2, shared_d_ff=5, expert_kind="geglu",
                                          normalize_gates=True, aux_loss=0.5, router_z_loss=0.05),
    "moe_layer_drop_position": dict(top_k=1, capacity_factor=1.0, aux_loss=0.5),
    "moe_layer_drop_score": dict(capacity_factor=0.75, drop="score", normalize_gates=True, router_z_loss=0.05),
    "moe_layer_noisy_topk": dict(router="topk_softmax", noisy_gating=True, aux_loss=0.5, router_z_loss=0.05),
}
# (The loss coefficients are far above training's 1e-3 .. 1e-2 so that the losses' gradients are a large part
# of the router's and the test sees an error in them.)
LATER_SEEDS = {"moe_layer_noisy_topk": 2100}  # cases added later: the earlier ones keep their seeds
# The noisy case's training forward: (seed, step, layer, first token), as if the micro-batch were the fifth of
# B = 2 sequences of T = 5 in step 7 of a run with seed 1234, in layer 3.
NOISE_KEY = (1234, 7, 3, 4 * LAYER_B * LAYER_T)
LAYER_SEEDS = dict({name: 2000 + i for i, name in enumerate(sorted(set(LAYER_CASES) - set(LATER_SEEDS)))},
                   **LATER_SEEDS)


def make_layer_fixture(name, seed):
    """Float32 inputs and weights, the forward and backward in float64, results stored as float32."""
    spec = dict(BASE, **LAYER_CASES[name])
    biases = spec.pop("biases", False)
    c, b, t = LAYER_C, LAYER_B, LAYER_T
    for attempt in range(100):  # the first seed whose selections have no near-tie
        g = torch.Generator().manual_seed(seed + 1000 * attempt)
        params32 = {k: (torch.randn(shape, generator=g) / math.sqrt(shape[-1]) if len(shape) == 2
                        else 0.1 * torch.randn(shape, generator=g)).to(torch.float32)
                    for k, shape in moe_parameter_shapes(spec, c, "", biases).items()}
        h32 = torch.randn(b * t, c, generator=g).to(torch.float32)
        dout32 = torch.randn(b * t, c, generator=g).to(torch.float32)
        bias32 = (0.05 * torch.randn(spec["n_experts"], generator=g)).to(torch.float32)
        params = {k: v.to(torch.float64).requires_grad_(True) for k, v in params32.items()}
        h = h32.to(torch.float64).requires_grad_(True)
        noise32 = gating_noise(*NOISE_KEY, b * t, spec["n_experts"])
        try:
            out, balance, z_loss, dropped = moe_forward(spec, params, "", h, b, t, biases,
                                                        bias32.to(torch.float64) if spec["expert_bias"] else None,
                                                        torch.from_numpy(noise32).to(torch.float64))
        except NearTie:
            continue
        ((out * dout32.to(torch.float64)).sum() + balance + z_loss).backward()
        spec_out = dict(spec, biases=biases)
        arrays = {"spec_json": np.frombuffer(json.dumps(spec_out, sort_keys=True).encode(), dtype=np.uint8),
                  "shape": np.array([b, t, c], dtype=np.int64), "h": h32.numpy(), "dout": dout32.numpy(),
                  "expert_bias": bias32.numpy(), "out": out.detach().numpy().astype(np.float32),
                  "balance_loss": np.array(float(balance), dtype=np.float64),
                  "z_loss": np.array(float(z_loss), dtype=np.float64),
                  "dropped": np.array(dropped, dtype=np.int64), "grad_h": h.grad.numpy().astype(np.float32)}
        if spec.get("noisy_gating", False):
            arrays["gating_noise"] = noise32
            arrays["noise_key"] = np.array(NOISE_KEY, dtype=np.int64)
        for k, v in params32.items():
            arrays["param/" + k] = v.numpy()
            grad = params[k].grad  # None for an expert no token reached
            arrays["grad/" + k] = np.zeros_like(v.numpy()) if grad is None else grad.numpy().astype(np.float32)
        return arrays
    raise RuntimeError(f"{name}: no seed without near-ties")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "..", "model", "testdata"))
    parser.add_argument("--only", help="write this one fixture (e.g. moe_layer_noisy_topk)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in sorted(LAYER_CASES) if args.only is None else [args.only]:
        arrays = make_layer_fixture(name, LAYER_SEEDS[name])
        path = os.path.join(args.out, name + ".npz")
        np.savez(path, **arrays)
        print(f"{path}: balance {float(arrays['balance_loss']):.6g}, z-loss {float(arrays['z_loss']):.6g}, "
              f"dropped {int(arrays['dropped'])}")


if __name__ == "__main__":
    main()
