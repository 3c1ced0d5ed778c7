#!/usr/bin/env python3
"""Cross-checks lmforge's safetensors files against the PyPI `safetensors` package (the reference reader).

  check FILE EXPECT.json   load FILE with safetensors and compare every tensor, dtype, shape and the
                           metadata with EXPECT.json (written by //experiments/checkpoint:write_safetensors_sample
                           or any file of the form {"metadata": {..}, "tensors": {name: {"dtype", "shape",
                           "values"}}}); exits 1 on any difference.
  weights FILE             list a trainer checkpoint's tensors (name, dtype, shape, mean, std) as a PyTorch
                           user would see them.
  write-fixture OUT        write the fixture experiments/checkpoint/testdata/python_written.safetensors that
                           the C++ reader test compares against (values are simple formulas, see below).

Needs safetensors and numpy from PyPI (`python3 -m pip install safetensors numpy`), then
`python3 tools/experiments/check_safetensors.py ...`.
"""
import json
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64, "I32": np.int32, "U8": np.uint8}


def check(path, expect_path):
    with open(expect_path) as f:
        expect = json.load(f)
    tensors = load_file(path)
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata() or {}
    problems = []
    if metadata != expect.get("metadata", {}):
        problems.append(f"metadata {metadata} != expected {expect.get('metadata', {})}")
    if sorted(tensors) != sorted(expect["tensors"]):
        problems.append(f"tensor names {sorted(tensors)} != expected {sorted(expect['tensors'])}")
    for name, want in expect["tensors"].items():
        if name not in tensors:
            continue
        got = tensors[name]
        dtype = DTYPES[want["dtype"]]
        if got.dtype != dtype:
            problems.append(f"{name}: dtype {got.dtype} != {want['dtype']}")
        if list(got.shape) != want["shape"]:
            problems.append(f"{name}: shape {list(got.shape)} != {want['shape']}")
        values = np.array(want["values"], dtype=dtype).reshape(want["shape"])
        # Exact: the JSON holds each value with enough digits to round-trip its dtype.
        if got.shape == values.shape and not np.array_equal(got, values):
            problems.append(f"{name}: values differ, max |diff| {np.max(np.abs(got.astype(np.float64) - values)):.3g}")
    for p in problems:
        print("MISMATCH", p)
    print(f"{path}: {len(tensors)} tensors, {'OK' if not problems else 'FAILED'}")
    return 0 if not problems else 1


def weights(path):
    tensors = load_file(path)
    with safe_open(path, framework="numpy") as f:
        print("metadata:", f.metadata())
    for name in sorted(tensors):
        t = tensors[name]
        print(f"{name:40s} {str(t.dtype):8s} {str(list(t.shape)):18s} mean {t.mean():+.5f} std {t.std():.5f}")
    return 0


def write_fixture(out):
    # a: float32 (2, 3) = 0.25 * i - 0.5; b: float16 (4,) = [1, -2.5, 65504, 6e-8 (subnormal)];
    # c: int64 (3,) = [-1, 0, 2**40]; empty: float32 (0, 4).
    tensors = {
        "a": (0.25 * np.arange(6, dtype=np.float32) - 0.5).reshape(2, 3),
        "b": np.array([1, -2.5, 65504, 6e-8], dtype=np.float16),
        "c": np.array([-1, 0, 2**40], dtype=np.int64),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }
    save_file(tensors, out, metadata={"format": "np", "written_by": "check_safetensors.py"})
    print("wrote", out)
    return 0


def main(argv):
    if len(argv) == 4 and argv[1] == "check":
        return check(argv[2], argv[3])
    if len(argv) == 3 and argv[1] == "weights":
        return weights(argv[2])
    if len(argv) == 3 and argv[1] == "write-fixture":
        return write_fixture(argv[2])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
