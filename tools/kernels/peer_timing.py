"""Timing shared by the CPU benchmarks' PyTorch peers (attention_cpu_peer.py, moe_cpu_peer.py): the best of
several runs after a warm-up, as the benchmarks time their own kernels."""
import time


def best_ms(fn, budget_s=0.5, min_iters=3, max_iters=20):
    """Milliseconds of the fastest of at least min_iters calls of fn (more, up to max_iters, while the
    calls so far took less than budget_s), after one untimed call."""
    fn()
    times, spent = [], 0.0
    while len(times) < min_iters or (len(times) < max_iters and spent < budget_s):
        begin = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - begin
        times.append(elapsed)
        spent += elapsed
    return 1e3 * min(times)
