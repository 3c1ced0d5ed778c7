#!/usr/bin/env python3
"""Reads a run folder's TensorBoard event files with TensorBoard's own loader and prints each scalar tag,
its number of points and its last (step, value), checking them against metrics.jsonl when that exists.

  python3 tools/experiments/check_tensorboard.py RUN_DIR

Needs the PyPI `tensorboard` package (`python3 -m pip install tensorboard`). Exits 1 when TensorBoard
finds no scalars or when the train/loss curve differs from metrics.jsonl (after TensorBoard's purge of
the steps a resumed run replaced).
"""
import json
import os
import sys

from tensorboard.backend.event_processing import event_accumulator


def main(argv):
    if len(argv) != 2:
        print(__doc__)
        return 2
    run = argv[1]
    acc = event_accumulator.EventAccumulator(run, size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    if not tags:
        print(f"{run}: TensorBoard found no scalars")
        return 1
    for tag in sorted(tags):
        events = acc.Scalars(tag)
        print(f"{tag:26s} {len(events):6d} points, last step {events[-1].step} value {events[-1].value:.6g}")
    metrics_path = os.path.join(run, "metrics.jsonl")
    if os.path.exists(metrics_path) and "train/loss" in tags:
        with open(metrics_path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        tb = {e.step: e.value for e in acc.Scalars("train/loss")}
        jsonl = {m["step"]: m["loss"] for m in lines}
        # TensorBoard stores float32.
        bad = [s for s in jsonl if s not in tb or abs(tb[s] - jsonl[s]) > 1e-6 * max(1.0, abs(jsonl[s]))]
        if bad or len(tb) != len(jsonl):
            print(f"train/loss: {len(tb)} TensorBoard points vs {len(jsonl)} metrics.jsonl lines; mismatched steps {bad[:10]}")
            return 1
        print(f"train/loss matches metrics.jsonl at all {len(jsonl)} steps")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
