#!/usr/bin/python3
"""PyTorch side of //model:train_step_benchmark: times one training step (forward, backward, grad-norm clip,
AdamW) of a GPT-2-style model on the CPU, the same model lmforge's benchmark runs, in one of three modes:
eager fp32, torch.compile fp32 (inductor; PyTorch 2.x and a C++ compiler), or eager with CPU bf16 autocast
(bf16 matmuls, fp32 weights, optimizer and loss).

  ~/.cache/lmforge/torch-venv/bin/python tools/model/torch_train_step.py --d_model 768 --n_layers 12 \
      --n_heads 12 --vocab_size 50304 --batch 4 --seq 64 --steps 3 --threads 2 --mode compile

The model is written the usual way (nanoGPT's structure: fused qkv Linear, LayerNorm, GELU-tanh MLP,
learned positions, tied head; attention is F.scaled_dot_product_attention where PyTorch has it, 2.0 on,
else softmax(QK^T/sqrt(d))V with a causal mask as 1.13 needs). AdamW uses torch's default (foreach)
implementation. Prints "peer PyTorch <version> <mode>, <n> threads" and "seconds_per_step <mean>" after
untimed warm-up steps (two under torch.compile, whose first steps compile). Run it with
OPENBLAS_CORETYPE=Haswell on an AMD or newer Intel CPU (the benchmark does): Debian's OpenBLAS, 1.13's BLAS,
otherwise picks a slow generic path. tools/peers/setup_torch.sh installs the current PyTorch.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, nh):
        super().__init__()
        self.nh = nh
        self.ln1 = nn.LayerNorm(c)
        self.qkv = nn.Linear(c, 3 * c)
        self.proj = nn.Linear(c, c)
        self.ln2 = nn.LayerNorm(c)
        self.fc = nn.Linear(c, 4 * c)
        self.fc_out = nn.Linear(4 * c, c)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, self.nh, c // self.nh).transpose(1, 2)
        k = k.view(b, t, self.nh, c // self.nh).transpose(1, 2)
        v = v.view(b, t, self.nh, c // self.nh).transpose(1, 2)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(mask[:t, :t] == 0, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, ctx, c, layers, nh):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(ctx, c)
        self.blocks = nn.ModuleList([Block(c, nh) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(c)
        self.register_buffer("mask", torch.tril(torch.ones(ctx, ctx)))

    def forward(self, ids, targets):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(t))
        for block in self.blocks:
            x = block(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


MODES = {"eager": "eager fp32", "compile": "torch.compile fp32", "bf16": "eager bf16 autocast"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--d_model", type=int, default=768)
    p.add_argument("--n_layers", type=int, default=12)
    p.add_argument("--n_heads", type=int, default=12)
    p.add_argument("--vocab_size", type=int, default=50304)
    p.add_argument("--token_ids", type=int, default=50257, help="ids drawn from [0, token_ids): the real vocabulary")
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--mode", choices=sorted(MODES), default="eager")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.mode == "compile" and not hasattr(torch, "compile"):
        p.error(f"--mode=compile: PyTorch {torch.__version__} has no torch.compile (2.0 on)")
    print(f"peer PyTorch {torch.__version__} {MODES[a.mode]}, {a.threads} threads", flush=True)
    model = GPT(a.vocab_size, a.context, a.d_model, a.n_layers, a.n_heads)
    decay = [q for q in model.parameters() if q.dim() >= 2]
    no_decay = [q for q in model.parameters() if q.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    ids = torch.randint(0, a.token_ids, (a.batch, a.seq))
    targets = torch.randint(0, a.token_ids, (a.batch, a.seq))
    forward = torch.compile(model) if a.mode == "compile" else model
    warmup = 2 if a.mode == "compile" else 1
    total = 0.0
    for step in range(warmup + a.steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.mode == "bf16"):
            loss = forward(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= warmup:
            total += time.perf_counter() - start
    print(f"final loss={loss.item():.4f}, threads={torch.get_num_threads()}")
    print(f"seconds_per_step {total / a.steps:.4f}")


if __name__ == "__main__":
    main()
