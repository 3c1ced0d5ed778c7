"""The quickstart's sweep, lmforge against PyTorch, in one run on one machine: runs lmforge's quickstart in a
fresh folder (corpus, tokenizer, its 20-run IsoFLOP sweep, report), then the same 20 runs in PyTorch
(tools/peers/torch_sweep.py: the configs lmforge's sweep wrote, the same runs at once and threads per run),
and prints both sweeps' wall times and the ratio.

  ./bazelw build --config=opt //experiments:quickstart
  python3 tools/peers/quickstart_sweep_benchmark.py [--quickstart=.bazel/bin/experiments/quickstart/quickstart]
      [--torch_python=PY] [--modes=eager] [--parallel_runs=2] [--keep=DIR] [--quickstart_args="--budgets=1e11"]

--quickstart_args passes flags to the quickstart (a smaller sweep, e.g. "--budgets=1e11 --models_per_budget=3",
for a quick check on a busy machine: the line then names how many runs were timed; the headline figure is the
default 20-run sweep).

lmforge's sweep time is the time between the quickstart's "[4/5] IsoFLOP sweep" and "[5/5] fits and report"
lines (its 20 training runs, each process's start, evaluations and final checkpoints; not the corpus,
tokenizer or report). PyTorch's is torch_sweep.py's wall time over the same runs (process starts,
evaluations and final saves included). --torch_python defaults as the C++ benchmarks' does
(kernels/testing/torch_peers.h): $LMF_TORCH_PYTHON, else ~/.cache/lmforge/torch-venv/bin/python
(tools/peers/setup_torch.sh), else /usr/bin/python3 (Debian's PyTorch 1.13 has no nn.RMSNorm and is refused).
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def current_torch_python():
    if os.environ.get("LMF_TORCH_PYTHON"):
        return os.environ["LMF_TORCH_PYTHON"]
    venv = os.path.expanduser("~/.cache/lmforge/torch-venv/bin/python")
    return venv if os.access(venv, os.X_OK) else "/usr/bin/python3"


def run_quickstart(binary, out_dir, parallel_runs, extra_args, timeout_s):
    """lmforge's quickstart into out_dir; returns (sweep seconds, total seconds)."""
    start = time.perf_counter()
    stamps = {}
    command = [binary, f"--out={out_dir}", f"--parallel_runs={parallel_runs}"] + extra_args
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        # The quickstart stops its own training processes when it is terminated (experiments/sweep/runner.cc).
        watchdog = threading.Timer(timeout_s, proc.terminate)
        watchdog.start()
        try:
            for line in proc.stdout:
                stage = re.match(r"\[(\d)/5\]", line)
                if stage:
                    stamps[stage.group(1)] = time.perf_counter()
                    print(f"  lmforge: {line.rstrip()[:100]}", flush=True)
        finally:
            proc.wait()
            watchdog.cancel()
    total = time.perf_counter() - start
    if total >= timeout_s:
        sys.exit(f"quickstart_sweep_benchmark.py: the quickstart took over {timeout_s:.0f} s; stopped")
    if proc.returncode != 0:
        sys.exit(f"quickstart_sweep_benchmark.py: {binary} failed with exit code {proc.returncode}")
    if "4" not in stamps or "5" not in stamps:
        sys.exit("quickstart_sweep_benchmark.py: the quickstart printed no [4/5] or [5/5] line: cannot time its sweep")
    return stamps["5"] - stamps["4"], total


def run_torch_sweep(python, sweep_dir, mode, parallel_runs, timeout_s):
    """torch_sweep.py on sweep_dir; returns (sweep seconds, its description line)."""
    command = [python, os.path.join(HERE, "torch_sweep.py"), f"--sweep_dir={sweep_dir}", f"--mode={mode}",
               f"--parallel_runs={parallel_runs}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        sys.exit(f"quickstart_sweep_benchmark.py: `{' '.join(command)}` failed:\n{done.stdout[-1500:]}{done.stderr[-1500:]}")
    seconds = description = None
    for line in done.stdout.splitlines():
        if line.startswith("run "):  # run <name> <seconds> <final train loss> <final val loss>
            print(f"  PyTorch {mode}: {line}", flush=True)
        if line.startswith("sweep_seconds "):
            seconds = float(line.split()[1])
        elif line.startswith("peer "):
            description = line[5:]
    if seconds is None:
        sys.exit(f"quickstart_sweep_benchmark.py: torch_sweep.py printed no sweep_seconds line:\n{done.stdout[-1500:]}")
    return seconds, description


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quickstart", default=".bazel/bin/experiments/quickstart/quickstart")
    p.add_argument("--torch_python", default=current_torch_python())
    p.add_argument("--modes", default="eager", help="torch_sweep.py modes, comma-separated: eager, compile, bf16")
    p.add_argument("--parallel_runs", type=int, default=2)
    p.add_argument("--keep", default="", help="a folder to keep the quickstart's output in (default: a temporary one)")
    p.add_argument("--quickstart_args", default="", help="more quickstart flags, e.g. \"--budgets=1e11\"")
    p.add_argument("--timeout_s", type=float, default=3600, help="for each sweep")
    a = p.parse_args()
    if not os.access(a.quickstart, os.X_OK):
        p.error(f"--quickstart={a.quickstart}: not an executable (./bazelw build --config=opt //experiments:quickstart)")
    modes = [m for m in a.modes.split(",") if m]
    bad = [m for m in modes if m not in ("eager", "compile", "bf16")]
    if bad or not modes:
        p.error(f"--modes={a.modes}: expected eager, compile and/or bf16")
    if a.keep and os.path.exists(a.keep):
        p.error(f"--keep={a.keep}: exists already; the quickstart must start in a fresh folder to train its runs")
    out_dir = os.path.abspath(a.keep) if a.keep else tempfile.mkdtemp(prefix="lmf_quickstart_bench_")
    try:
        cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
        print(f"machine: {cpu}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}", flush=True)
        ours, total = run_quickstart(a.quickstart, out_dir, a.parallel_runs, shlex.split(a.quickstart_args),
                                     a.timeout_s)
        runs = len(os.listdir(os.path.join(out_dir, "sweep", "runs")))
        print(f"lmforge quickstart: sweep {ours:.1f} s ({runs} runs, {a.parallel_runs} at once), whole quickstart "
              f"{total:.1f} s", flush=True)
        for mode in modes:
            seconds, description = run_torch_sweep(a.torch_python, os.path.join(out_dir, "sweep"), mode,
                                                   a.parallel_runs, a.timeout_s)
            print(f"{description}: sweep {seconds:.1f} s; lmforge is {seconds / ours:.2f}x faster", flush=True)
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
    finally:
        if not a.keep:
            shutil.rmtree(out_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
