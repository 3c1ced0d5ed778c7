"""PyTorch peer for experiments/trainer/train_step_cuda_benchmark: a nanoGPT-style GPT-2 training step.

The model is GPT-2 as nanoGPT writes it: learned token and position embeddings, pre-LayerNorm blocks with
biases, causal F.scaled_dot_product_attention, a GELU(tanh) MLP of width 4C, a final LayerNorm and an LM
head tied to the token embedding. Weights stay fp32; the step runs under bf16 autocast, with fused AdamW
and torch.compile, as nanoGPT trains on a GPU. One timed step is what the C++ benchmark times: zero grad,
forward + cross-entropy, backward, global grad-norm clipping, AdamW.

Usage: python3 nanogpt_peer.py --batch B --seq T [--layers 12 --width 768 --heads 12 --vocab 50304]
       [--warmup 5 --iters 20] [--no-compile] [--kernel-kinds STEPS] [--device cpu --tiny]
prints "train_step_ms <median ms>" and "tokens_per_second <B*T / median s>" (CUDA events on the GPU).
--kernel-kinds STEPS then profiles STEPS more steps (torch.profiler) and prints "peer_<kind>_ms <ms per step>"
for each kind of kernel the C++ benchmark splits its own ops into (gemm, attention, optimizer, other).
--device cpu --tiny runs a 2-layer, 64-wide model for a few steps, to check the script where no GPU is.
"""
import argparse
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

from peer_timing import median_ms


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # PyTorch < 2.0 (the CPU check only): the same math, unfused
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            y = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.fc_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, layers, width, heads, vocab, seq):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02  # residual projections
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, ids, targets):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(t, device=ids.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))  # fp32 under autocast


def make_optimizer(model, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=device == "cuda")
    except TypeError:  # PyTorch without fused AdamW (the CPU check only)
        return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8)


KINDS = ("gemm", "attention", "optimizer", "other")


def kernel_kind(name):
    """The kind of work a kernel (or, on the CPU, an aten op) does, from its name."""
    n = name.lower()
    if any(s in n for s in ("flash", "fmha", "attention", "sdpa")):
        return "attention"
    if any(s in n for s in ("gemm", "nvjet", "cutlass", "xmma", "aten::mm", "aten::addmm", "aten::bmm")):
        return "gemm"
    if any(s in n for s in ("adam", "multi_tensor", "foreach", "aten::norm")):
        return "optimizer"  # torch's fused AdamW and the grad-norm's multi-tensor kernels
    return "other"


def print_kernel_kinds(step, steps, device):
    """Device time per step of each kind of kernel over `steps` profiled steps (self time of each kernel)."""
    from torch.profiler import ProfilerActivity, profile

    activity = ProfilerActivity.CUDA if device == "cuda" else ProfilerActivity.CPU
    with profile(activities=[activity]) as prof:
        for _ in range(steps):
            step()
        if device == "cuda":
            torch.cuda.synchronize()
    totals = dict.fromkeys(KINDS, 0.0)
    for event in prof.key_averages():
        if device == "cuda":
            us = getattr(event, "self_device_time_total", None)
            if us is None:
                us = getattr(event, "self_cuda_time_total", 0.0)
        else:
            if not event.key.startswith("aten::"):
                continue
            us = event.self_cpu_time_total
        totals[kernel_kind(event.key)] += us
    for kind in KINDS:
        print(f"peer_{kind}_ms", totals[kind] / 1e3 / steps, flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--kernel-kinds", type=int, default=0, metavar="STEPS",
                        help="also profile STEPS steps and print the time per kind of kernel")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--tiny", action="store_true", help="2 layers, width 64, 4 heads, vocab 512, 3+3 steps")
    args = parser.parse_args()
    if args.tiny:
        args.layers, args.width, args.heads, args.vocab, args.warmup, args.iters = 2, 64, 4, 512, 3, 3
        args.seq = min(args.seq, 64)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("nanogpt_peer: no CUDA device")

    torch.manual_seed(1337)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model = GPT(args.layers, args.width, args.heads, args.vocab, args.seq).to(args.device)
    optimizer = make_optimizer(model, args.device)
    compiled = model
    if not args.no_compile and hasattr(torch, "compile"):
        compiled = torch.compile(model)
    generator = torch.Generator().manual_seed(7)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=generator).to(args.device)
    targets = torch.randint(0, args.vocab, (args.batch, args.seq), generator=generator).to(args.device)
    autocast_dtype = torch.bfloat16

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=args.device, dtype=autocast_dtype):
            loss = compiled(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss

    ms = median_ms(step, warmup=args.warmup, iters=args.iters, device=args.device)
    print("train_step_ms", ms, flush=True)
    print("tokens_per_second", args.batch * args.seq / (ms * 1e-3), flush=True)
    if args.kernel_kinds > 0:
        print_kernel_kinds(step, args.kernel_kinds, args.device)


if __name__ == "__main__":
    main()
