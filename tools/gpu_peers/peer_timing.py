"""Timing shared by the PyTorch peers of the CUDA benchmarks: median milliseconds by CUDA events (or, with
device="cpu", by the host clock, for checking a peer on a machine without a GPU)."""
import time

import torch


def median_ms(fn, warmup=3, iters=20, device="cuda"):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if device == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        else:
            begin = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - begin))
    times.sort()
    return times[len(times) // 2]
