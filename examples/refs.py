"""Numpy references for every kernel of examples/kernels.py, with the interface of suite/refs.py
(``make_inputs``, ``grid``, ``reference``, ``tolerance``, ``check``; the same registry class).

The arrays are what examples/export_all.py specialises the launch forms on (examples/launch/), so their
shapes mix multiples of 16 with ragged ones, as users' do.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np


def _suite_refs():
    """suite/refs.py (its element formats and Registry), under the name examples/export_all.py gives it."""
    name = "tileiras_async_examples_refs_suite"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parent / "suite" / "refs.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # dataclasses look the module up while it executes
        spec.loader.exec_module(mod)
    return sys.modules[name]


_base = _suite_refs()
cdiv, grid_vals = _base.cdiv, _base.grid_vals
_EXAMPLES = _base.Registry()
REFS = _EXAMPLES.refs
register, make_inputs, grid = _EXAMPLES.register, _EXAMPLES.make_inputs, _EXAMPLES.grid
reference, tolerance, check = _EXAMPLES.reference, _EXAMPLES.tolerance, _EXAMPLES.check


def _axpby(n=1000, t=256):
    def make(rng):
        return {"alpha": np.float32(1.5), "beta": np.float32(-0.25),
                "x": rng.uniform(-1, 1, n).astype(np.float32), "y": rng.uniform(-1, 1, n).astype(np.float32),
                "out": np.zeros(n, np.float32)}

    def ref(d):
        return {"out": d["alpha"] * d["x"] + d["beta"] * d["y"]}

    register("axpby_f32", make, lambda d: (cdiv(n, t),), ref, {"out": "float32"}, {"out": (1e-6, 1e-6)})


def _online_softmax(rows=4, cols=300):
    def make(rng):
        return {"x": rng.uniform(-4, 4, (rows, cols)).astype(np.float16), "y": np.zeros((rows, cols), np.float16)}

    def ref(d):
        x = d["x"].astype(np.float64)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return {"y": (e / e.sum(axis=1, keepdims=True)).astype(np.float16)}

    register("online_softmax_f16", make, lambda d: (rows,), ref, {"y": "float16"}, {"y": (1e-2, 1e-4)})


def _matmul_bias_relu(m=128, n=128, k=96, tm=64, tn=64):
    def make(rng):
        return {"A": grid_vals(rng, (m, k), "float16"), "B": grid_vals(rng, (k, n), "float16"),
                "bias": grid_vals(rng, (n,), "float16"), "C": np.zeros((m, n), np.float16)}

    def ref(d):
        acc = d["A"].astype(np.float64) @ d["B"].astype(np.float64) + d["bias"].astype(np.float64)[None, :]
        return {"C": np.maximum(acc, 0.0).astype(np.float16)}

    register("matmul_bias_relu_f16", make, lambda d: (cdiv(m, tm), cdiv(n, tn)), ref, {"C": "float16"})


def _batched_transpose(b=3, m=64, n=48, tm=32, tn=16):
    def make(rng):
        return {"X": rng.uniform(-1, 1, (b, m, n)).astype(np.float32), "Y": np.zeros((b, n, m), np.float32)}

    register("batched_transpose_f32", make, lambda d: (cdiv(m, tm), cdiv(n, tn), b),
             lambda d: {"Y": d["X"].transpose(0, 2, 1)}, {"Y": "float32"})


def _exclusive_scan_max(n=512, t=128):
    def make(rng):
        return {"x": rng.integers(-1000, 1000, n).astype(np.int32),
                "excl": np.zeros(n, np.int32), "sufmax": np.zeros(n, np.int32)}

    def ref(d):
        tiles = d["x"].reshape(-1, t)
        suffix_max = np.maximum.accumulate(tiles[:, ::-1], axis=1)[:, ::-1]
        return {"excl": (np.cumsum(tiles, axis=1) - tiles).reshape(-1).astype(np.int32),
                "sufmax": suffix_max.reshape(-1).astype(np.int32)}

    register("exclusive_scan_max_i32", make, lambda d: (n // t,), ref, {"excl": "int32", "sufmax": "int32"})


def _clamp_count(n=640, t=64):
    def make(rng):
        return {"x": rng.integers(-100, 100, n).astype(np.int32), "y": np.zeros(n, np.int32),
                "nclamped": np.zeros(n // t, np.int32), "lo": np.int32(-40), "hi": np.int32(55)}

    def ref(d):
        x, lo, hi = d["x"], int(d["lo"]), int(d["hi"])
        c = np.clip(x, lo, hi)
        c = np.where(c & 1, c - 1, c)
        out_of_range = ((x < lo) | (x > hi)).reshape(-1, t).sum(axis=1)
        return {"y": c.astype(np.int32), "nclamped": out_of_range.astype(np.int32)}

    register("clamp_count_i32", make, lambda d: (n // t,), ref, {"y": "int32", "nclamped": "int32"})


def _bucket_histogram(n=1000, t=128, nb=32):
    def make(rng):
        # values on a 1/64 grid: (v - lo) * inv_width is exact in f32, so no bucket edge is rounded
        return {"data": (rng.integers(-40 * 64, 80 * 64, n) / 64).astype(np.float32),
                "hist": np.zeros(nb, np.int32), "maxbin": np.zeros(1, np.int32),
                "lo": np.float32(-32.0), "inv_width": np.float32(0.25)}

    def ref(d):
        bins = np.clip(np.floor((d["data"] - d["lo"]) * d["inv_width"]), 0, nb - 1).astype(np.int64)
        return {"hist": np.bincount(bins, minlength=nb).astype(np.int32),
                "maxbin": np.array([max(0, int(bins.max()))], np.int32)}

    register("bucket_histogram_f32", make, lambda d: (cdiv(n, t),), ref, {"hist": "int32", "maxbin": "int32"})


def _collatz_steps(blocks=64, limit=100):
    def steps(start):
        x, k = start, 0
        while x != 1 and k < limit:
            x, k = (x // 2 if x % 2 == 0 else 3 * x + 1), k + 1
        return k if x == 1 else -k

    register("collatz_steps_i32", lambda rng: {"out": np.zeros(blocks, np.int32), "limit": np.int32(limit)},
             lambda d: (blocks,), lambda d: {"out": np.array([steps(b + 1) for b in range(blocks)], np.int32)},
             {"out": "int32"})


for _make in (_axpby, _online_softmax, _matmul_bias_relu, _batched_transpose, _exclusive_scan_max, _clamp_count,
              _bucket_histogram, _collatz_steps):
    _make()
