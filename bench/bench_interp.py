"""Benchmark: throughput of the reference interpreter (`run_kernel(engine="interpret")`).

    python bench/bench_interp.py [--corpus DIR] [-n REPS] [--scale S]

Runs corpus kernels (softmax and matmul variants) on inputs larger than the
corpus references and reports, per kernel, the best of REPS runs of

    wall      the whole run_kernel call (read + verify + bind + run + copy back)
    run       the interpreter's own time (RunReport.time_s)
    tile-ops  ops executed per second
    elements  tile elements produced per second (sum of result-tile sizes of executed ops)
    problem   the kernel's own unit: input elements/s for softmax, MAC/s (and GFLOP/s) for matmul

Always exits 0: this reports, it does not gate.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from _common import DEFAULT_CORPUS

from tileiras_async.interp import run_kernel


def _bf16(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def cases(scale: int):
    rng = np.random.default_rng(0)
    M = 512 * scale
    yield ("softmax_rows_f32_128", f"softmax f32, {M}x100, TN=128",
           lambda: [rng.standard_normal((M, 100)).astype(np.float32), np.zeros((M, 100), np.float32)],
           (M,), ("elem", M * 100))
    yield ("softmax_rows_f16_512", f"softmax f16, {M // 2}x300, TN=512",
           lambda: [rng.standard_normal((M // 2, 300)).astype(np.float16), np.zeros((M // 2, 300), np.float16)],
           (M // 2,), ("elem", M // 2 * 300))
    n = 256 * scale
    yield ("matmul_f16_f16out_128x128x64", f"matmul f16->f16, {n}^3, 128x128x64 tiles",
           lambda: [rng.standard_normal((n, n)).astype(np.float16), rng.standard_normal((n, n)).astype(np.float16),
                    np.zeros((n, n), np.float16)], (n // 128, n // 128), ("mac", n ** 3))
    yield ("matmul_tf32_64x64x32", f"matmul tf32, {n}^3, 64x64x32 tiles",
           lambda: [rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32),
                    np.zeros((n, n), np.float32)], (n // 64, n // 64), ("mac", n ** 3))
    yield ("matmul_bf16_64x64x64", f"matmul bf16, {n}^3, 64x64x64 tiles",
           lambda: [_bf16(rng.standard_normal((n, n))), _bf16(rng.standard_normal((n, n))),
                    np.zeros((n, n), np.uint16)], (n // 64, n // 64), ("mac", n ** 3))


def _si(x: float) -> str:
    for unit, f in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= f:
            return f"{x / f:7.2f} {unit}"
    return f"{x:7.2f}  "


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("-n", "--reps", type=int, default=5)
    ap.add_argument("--scale", type=int, default=2, help="problem size multiplier (default 2)")
    args = ap.parse_args(argv)
    public = args.corpus / "out" / "public"
    if not public.is_dir():
        print(f"corpus not found at {args.corpus}; nothing to benchmark")
        return 0
    print(f"{'kernel':44s} {'wall s':>8s} {'run s':>8s} {'tile-ops/s':>12s} {'elements/s':>12s}  problem")
    for cid, what, make, grid, (unit, amount) in cases(args.scale):
        path = public / f"{cid}.v13.4.tileirbc"
        if not path.is_file():
            print(f"{cid}: missing")
            continue
        data = path.read_bytes()
        walls, runs, rep = [], [], None
        for _ in range(args.reps):
            kargs = make()
            t0 = time.perf_counter()
            rep = run_kernel(data, grid, kargs)
            walls.append(time.perf_counter() - t0)
            runs.append(rep.time_s)
        w, r = min(walls), min(runs)
        ops = rep.counters["ops"] / r
        elems = rep.counters["elements"] / r
        if unit == "mac":
            prob = f"{_si(amount / r)}MAC/s ({2 * amount / r / 1e9:.2f} GFLOP/s)"
        else:
            prob = f"{_si(amount / r)}elem/s"
        print(f"{what:44s} {w:8.3f} {r:8.3f} {_si(ops):>12s} {_si(elems):>12s}  {prob}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
