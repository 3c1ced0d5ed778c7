"""The quickstart's sweep in PyTorch: trains the same runs (each run's shapes, steps, batch, context, optimizer,
schedule, evaluations and data, read from the config.textproto lmforge's sweep wrote for it) with the same
number of runs at once and threads per run, and reports the wall time. The peer of the quickstart sweep in
tools/peers/quickstart_sweep_benchmark.py, which runs both and prints the ratio.

  ~/.cache/lmforge/torch-venv/bin/python tools/peers/torch_sweep.py --sweep_dir=OUT/sweep \
      [--parallel_runs=2] [--threads_per_run=1] [--mode=eager|compile|bf16] [--runs=NAME,...]

The model is the quickstart's Llama-style decoder as lmforge builds it from the config: token embedding (no
positions), per block RMSNorm -> attention with RoPE (F.scaled_dot_product_attention, causal; grouped
key/value heads when n_kv_heads < n_heads) -> residual, RMSNorm -> SwiGLU -> residual; final RMSNorm and an
untied head, no biases. Init: truncated normal, std 0.02 (output projections / sqrt(2 n_layers)). AdamW
(torch's default, foreach) with the config's lr, betas, weight decay on matrices, grad-norm clip, and its
cosine schedule with linear warmup to min_lr_ratio; batches are random windows of the run's train token
file; every eval_interval steps and at the end the loss on eval_tokens validation tokens; the final weights
are saved (torch.save) as lmforge saves its final checkpoint. Each run is one process, as lmforge's are.
Prints one "run <name> <seconds> <final train loss> <final val loss>" line per run, then "peer PyTorch
<version> <mode>" and "sweep_seconds <wall>".
"""
import argparse
import concurrent.futures
import math
import os
import re
import subprocess
import sys
import tempfile
import time

MODES = {"eager": "eager fp32", "compile": "torch.compile fp32", "bf16": "eager bf16 autocast"}


# ---- config.textproto: the fields a run needs ----------------------------------------------------------------

def parse_textproto(text):
    """A protobuf text-format message as nested dicts of lists (scalars as str); comments dropped."""
    tokens = re.findall(r'"(?:[^"\\]|\\.)*"|[{}:]|[^\s{}:"]+', re.sub(r"#[^\n]*", "", text))
    stack, msg, i = [], {}, 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "}":
            msg = stack.pop()
            i += 1
        elif i + 1 < len(tokens) and tokens[i + 1] == "{" or (tokens[i + 1:i + 3] == [":", "{"]):
            child = {}
            msg.setdefault(tok, []).append(child)
            stack.append(msg)
            msg = child
            i += 2 if tokens[i + 1] == "{" else 3
        elif i + 2 < len(tokens) and tokens[i + 1] == ":":
            msg.setdefault(tok, []).append(tokens[i + 2].strip('"'))
            i += 3
        else:
            raise ValueError(f"unexpected token {tok!r}")
    if stack:
        raise ValueError("unbalanced braces")
    return msg


def field(msg, path, default=None, kind=str):
    """The value at a dotted path ("model.ffn.d_ff"), converted with kind; default when absent."""
    for name in path.split("."):
        if name not in msg:
            if default is None:
                raise KeyError(f"field {path} missing")
            return default
        msg = msg[name][0]
    return kind(msg)


def read_run(config_path):
    c = parse_textproto(open(config_path).read())
    run = {
        "vocab": field(c, "model.vocab_size", kind=int), "context": field(c, "model.context_length", kind=int),
        "d_model": field(c, "model.d_model", kind=int), "n_layers": field(c, "model.n_layers", kind=int),
        "n_heads": field(c, "model.n_heads", kind=int), "d_ff": field(c, "model.ffn.d_ff", kind=int),
        "rope_theta": field(c, "model.positional.rope_theta", 10000.0, float),
        "eps": field(c, "model.norm.eps", 1e-5, float),
        "lr": field(c, "optimizer.lr", kind=float), "beta1": field(c, "optimizer.adamw.beta1", 0.9, float),
        "beta2": field(c, "optimizer.adamw.beta2", 0.999, float),
        "weight_decay": field(c, "optimizer.adamw.weight_decay", 0.0, float),
        "grad_clip": field(c, "optimizer.grad_clip", 0.0, float),
        "warmup": field(c, "schedule.warmup", 0, int), "min_lr_ratio": field(c, "schedule.min_lr_ratio", 0.0, float),
        "batch": field(c, "run.batch_size", kind=int), "steps": field(c, "run.max_steps", kind=int),
        "eval_interval": field(c, "run.eval_interval", 0, int), "eval_tokens": field(c, "run.eval_tokens", 0, int),
        "seed": field(c, "run.seed", 1, int),
        "train_tokens": field(c, "data.train_tokens"), "val_tokens": field(c, "data.val_tokens"),
    }
    run["n_kv_heads"] = field(c, "model.n_kv_heads", run["n_heads"], int)
    run["adam_eps"] = field(c, "optimizer.adamw.eps", 1e-8, float)
    # What this peer does not build must be off, else the comparison would be of different models.
    for name, off in (("model.bias", "false"), ("model.tied_embeddings", "false"), ("model.attention.qk_norm", "false"),
                      ("model.parallel_block", "false"), ("model.z_loss", "0"), ("model.final_logit_softcap", "0"),
                      ("model.attention.logit_softcap", "0"), ("run.grad_accum_steps", "1")):
        value = field(c, name, off)
        if value != off:
            raise ValueError(f"{config_path}: {name} is {value}; this peer builds the quickstart's model ({off})")
    if "causal" not in c["model"][0].get("attention", [{"causal": [{}]}])[0]:
        raise ValueError(f"{config_path}: model.attention is not plain causal attention")
    for kind in ("norm.kind", "ffn.kind", "positional.kind"):
        value = field(c, "model." + kind, "")
        if value not in ("", "RMSNORM", "SWIGLU", "ROPE"):
            raise ValueError(f"{config_path}: model.{kind} is {value}; this peer builds RMSNORM, SWIGLU, ROPE")
    if field(c, "schedule.kind", "COSINE") != "COSINE":
        raise ValueError(f"{config_path}: schedule.kind is not COSINE (run the quickstart's default sweep)")
    return run


def read_tokens(path):
    """A token file (tokenizer/token_file.h: 64-byte header "LMFTOKS1", then uint16 or uint32 ids)."""
    import numpy as np
    with open(path, "rb") as f:
        header = f.read(64)
    if header[:8] != b"LMFTOKS1":
        raise ValueError(f"{path}: not a token file (magic {header[:8]!r})")
    width, count = int.from_bytes(header[12:16], "little"), int.from_bytes(header[24:32], "little")
    dtype = {2: np.uint16, 4: np.uint32}[width]
    return np.memmap(path, dtype=dtype, mode="r", offset=64, shape=(count,))


# ---- the model ------------------------------------------------------------------------------------------------

def build_model(torch, r):
    nn, F = torch.nn, torch.nn.functional
    hs = r["d_model"] // r["n_heads"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.RMSNorm(r["d_model"], eps=r["eps"])
            self.q = nn.Linear(r["d_model"], r["n_heads"] * hs, bias=False)
            self.kv = nn.Linear(r["d_model"], 2 * r["n_kv_heads"] * hs, bias=False)
            self.o = nn.Linear(r["n_heads"] * hs, r["d_model"], bias=False)
            self.norm2 = nn.RMSNorm(r["d_model"], eps=r["eps"])
            self.gate_up = nn.Linear(r["d_model"], 2 * r["d_ff"], bias=False)
            self.down = nn.Linear(r["d_ff"], r["d_model"], bias=False)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            h = self.norm1(x)
            q = self.q(h).view(b, t, r["n_heads"], hs).transpose(1, 2)
            k, v = self.kv(h).view(b, t, 2, r["n_kv_heads"], hs).permute(2, 0, 3, 1, 4)
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                               enable_gqa=r["n_kv_heads"] != r["n_heads"])
            x = x + self.o(y.transpose(1, 2).reshape(b, t, -1))
            gate, up = self.gate_up(self.norm2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    def rope(x, cos, sin):
        x1, x2 = x[..., : hs // 2], x[..., hs // 2:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(r["vocab"], r["d_model"])
            self.blocks = nn.ModuleList(Block() for _ in range(r["n_layers"]))
            self.norm = nn.RMSNorm(r["d_model"], eps=r["eps"])
            self.head = nn.Linear(r["d_model"], r["vocab"], bias=False)
            inv = 1.0 / r["rope_theta"] ** (torch.arange(0, hs, 2).float() / hs)
            angles = torch.outer(torch.arange(r["context"]).float(), inv)
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)

        def forward(self, ids, targets):
            t = ids.shape[1]
            x = self.embed(ids)
            for block in self.blocks:
                x = block(x, self.cos[:t], self.sin[:t])
            logits = self.head(self.norm(x)).float()
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))

    model = Model()
    for name, p in model.named_parameters():
        if p.dim() == 2:
            std = 0.02 / math.sqrt(2 * r["n_layers"]) if name.endswith(("o.weight", "down.weight")) else 0.02
            nn.init.trunc_normal_(p, std=std, a=-3 * std, b=3 * std)
    return model


# ---- one run ---------------------------------------------------------------------------------------------------

def train_run(config_path, threads, mode, out_dir):
    import numpy as np
    import torch
    torch.set_num_threads(threads)
    r = read_run(config_path)
    torch.manual_seed(r["seed"])
    rng = np.random.default_rng(r["seed"])
    train, val = read_tokens(r["train_tokens"]), read_tokens(r["val_tokens"])
    model = build_model(torch, r)
    forward = torch.compile(model) if mode == "compile" else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": r["weight_decay"]}, {"params": rest, "weight_decay": 0.0}],
                            lr=r["lr"], betas=(r["beta1"], r["beta2"]), eps=r["adam_eps"])
    b, t = r["batch"], r["context"]

    def batch(tokens, starts):
        rows = np.stack([np.asarray(tokens[s:s + t + 1], dtype=np.int64) for s in starts])
        rows = torch.from_numpy(rows)
        return rows[:, :-1], rows[:, 1:]

    def lr_at(step):  # step counts from 0; linear warmup, then cosine to min_lr_ratio
        if step < r["warmup"]:
            return r["lr"] * (step + 1) / r["warmup"]
        progress = (step - r["warmup"]) / max(1, r["steps"] - r["warmup"])
        return r["lr"] * (r["min_lr_ratio"] + (1 - r["min_lr_ratio"]) * 0.5 * (1 + math.cos(math.pi * progress)))

    def evaluate():
        n = max(1, r["eval_tokens"] // t)
        total = 0.0
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16"):
            for first in range(0, n, b):
                ids, targets = batch(val, [i * t for i in range(first, min(n, first + b))])
                total += forward(ids, targets).item() * ids.shape[0]
        return total / n

    val_loss = float("nan")
    for step in range(r["steps"]):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        ids, targets = batch(train, rng.integers(0, len(train) - t - 1, size=b))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=mode == "bf16"):
            loss = forward(ids, targets)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if r["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), r["grad_clip"])
        opt.step()
        done = step + 1
        if r["eval_tokens"] > 0 and (done == r["steps"] or (r["eval_interval"] > 0 and done % r["eval_interval"] == 0)):
            val_loss = evaluate()
    torch.save(model.state_dict(), os.path.join(out_dir, "final.pt"))
    print(f"{loss.item():.4f} {val_loss:.4f}")


# ---- the sweep -------------------------------------------------------------------------------------------------

def run_order(sweep_dir):
    """The runs' folders under sweep_dir/runs, in the order of sweep_dir/results.csv when it lists them."""
    runs_dir = os.path.join(sweep_dir, "runs")
    if not os.path.isdir(runs_dir):
        sys.exit(f"torch_sweep.py: {runs_dir}: no such folder (run the quickstart first; --sweep_dir is its sweep/)")
    names = sorted(n for n in os.listdir(runs_dir) if os.path.isfile(os.path.join(runs_dir, n, "config.textproto")))
    results = os.path.join(sweep_dir, "results.csv")
    if os.path.isfile(results):
        listed = [line.split(",")[0] for line in open(results).read().splitlines()[1:]]
        names = [n for n in listed if n in names] + [n for n in names if n not in listed]
    return [(n, os.path.join(runs_dir, n, "config.textproto")) for n in names]


def one_process(name, config, threads, mode, scratch, timeout_s):
    """Trains one run in its own python; returns (name, seconds, output). Raises on failure or timeout."""
    out_dir = os.path.join(scratch, name)
    os.makedirs(out_dir, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads))
    env.setdefault("OPENBLAS_CORETYPE", "Haswell")
    start = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, f"--train_one={config}", f"--threads_per_run={threads}",
                           f"--mode={mode}", f"--out={out_dir}"], env=env, capture_output=True, text=True,
                          timeout=timeout_s)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"run {name} ({config}) failed with exit code {done.returncode}:\n{done.stderr[-2000:]}")
    return name, seconds, done.stdout.strip().splitlines()[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sweep_dir", help="the quickstart's OUT/sweep folder")
    p.add_argument("--parallel_runs", type=int, default=2)
    p.add_argument("--threads_per_run", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    p.add_argument("--mode", choices=sorted(MODES), default="eager")
    p.add_argument("--runs", default="", help="comma-separated run names (default: all)")
    p.add_argument("--run_timeout_s", type=float, default=3600)
    p.add_argument("--train_one", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.parallel_runs < 1 or a.threads_per_run < 1:
        p.error("--parallel_runs and --threads_per_run must be at least 1")
    if a.train_one:
        return train_run(a.train_one, a.threads_per_run, a.mode, a.out)
    if not a.sweep_dir:
        p.error("--sweep_dir is required")
    import torch
    if a.mode == "compile" and not hasattr(torch, "compile"):
        p.error(f"--mode=compile: PyTorch {torch.__version__} has no torch.compile")
    if not hasattr(torch.nn, "RMSNorm"):
        p.error(f"PyTorch {torch.__version__} has no nn.RMSNorm (2.4 on): run tools/peers/setup_torch.sh")
    runs = run_order(a.sweep_dir)
    if a.runs:
        wanted = a.runs.split(",")
        missing = [w for w in wanted if w not in dict(runs)]
        if missing:
            p.error(f"--runs: no such run under {a.sweep_dir}/runs: {', '.join(missing)}")
        runs = [(n, c) for n, c in runs if n in wanted]
    if not runs:
        sys.exit(f"torch_sweep.py: no runs under {a.sweep_dir}/runs")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="torch_sweep_") as scratch, \
            concurrent.futures.ThreadPoolExecutor(a.parallel_runs) as pool:
        futures = [pool.submit(one_process, n, c, a.threads_per_run, a.mode, scratch, a.run_timeout_s) for n, c in runs]
        for future in futures:
            name, seconds, losses = future.result()
            print(f"run {name} {seconds:.2f} {losses}", flush=True)
    wall = time.perf_counter() - start
    print(f"peer PyTorch {torch.__version__} {MODES[a.mode]}, {len(runs)} runs, {a.parallel_runs} at once, "
          f"{a.threads_per_run} threads each")
    print(f"sweep_seconds {wall:.2f}")


if __name__ == "__main__":
    main()
