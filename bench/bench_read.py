"""Benchmark: read + verify + print every public corpus file, against NVIDIA's tileirdisasm.

    python bench/bench_read.py [--corpus DIR] [-n REPS] [--real-reps N] [--limit N]

For each `*.tileirbc` of the corpus (default: <repo>/../shared/corpus, files under
out/public/; --corpus may also name a directory holding the files directly) the stages

    read    tileiras_async.bytecode.reader.read_module(bytes)
    verify  tileiras_async.ir.verifier.verify_module(module)   (when importable)
    print   tileiras_async.ir.printer.print_module(module)     (when importable)

run in-process N times (default 20, after one untimed warm-up) and each file's median is
kept. The summary gives median / p90 / max over files of those per-file medians, per stage
and for their sum, against the target "median <= 2 ms per file". When the real
`tileirdisasm` is present in this environment's nvidia/cu13/bin, its wall time per file
(one process per run: start-up, read and print, output to a pipe) is measured the same way
with fewer repetitions and compared. Always exits 0: this reports, it does not gate.
"""
from __future__ import annotations

import argparse
import gc
import importlib
import math
import os
import site
import statistics
import sys
import sysconfig
import time
from pathlib import Path

from _common import DEFAULT_CORPUS, corpus_files, nvidia_env, time_process

TARGET_MS = 2.0


def _optional(module: str, attr: str):
    """`module.attr`, or (None, why) when it cannot be imported yet."""
    try:
        return getattr(importlib.import_module(module), attr), None
    except (ImportError, AttributeError) as exc:
        return None, f"{module}.{attr} not available ({exc})"


def find_real_disasm() -> Path | None:
    """tileirdisasm from the nvidia/cu13 wheel of the running environment, if installed."""
    roots: list[str] = []
    for key in ("purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            roots.append(p)
    try:
        roots += site.getsitepackages()
    except AttributeError:
        pass
    roots += [p for p in sys.path if p]
    seen = set()
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        exe = Path(root) / "nvidia" / "cu13" / "bin" / "tileirdisasm"
        if exe.is_file() and os.access(exe, os.X_OK):
            return exe
    return None


def pct(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    s = sorted(values)
    return s[max(0, math.ceil(q / 100 * len(s)) - 1)]


def bench_ours(files: list[Path], reps: int, stages: dict):
    """Per-file median ms for each stage and the total; plus failures per stage."""
    read = stages["read"]
    names = ["read"] + [n for n in ("verify", "print") if stages.get(n)]
    per_file = {n: [] for n in names + ["total"]}
    failures: dict[str, list[str]] = {n: [] for n in names}
    clock = time.perf_counter_ns
    for path in files:
        data = path.read_bytes()
        samples = {n: [] for n in names + ["total"]}
        failed = False
        for rep in range(reps + 1):  # rep 0 is a warm-up
            t0 = clock()
            try:
                module = read(data)
            except Exception as exc:  # noqa: BLE001
                failures["read"].append(f"{path.name}: {type(exc).__name__}: {exc}")
                failed = True
                break
            t1 = clock()
            ns = {"read": t1 - t0}
            for n in names[1:]:  # verify, print: a failure is noted on the warm-up and timed anyway
                try:
                    stages[n](module)
                except Exception as exc:  # noqa: BLE001
                    if rep == 0:
                        failures[n].append(f"{path.name}: {type(exc).__name__}: {exc}")
                t2 = clock()
                ns[n] = t2 - t1
                t1 = t2
            del module
            if rep == 0:
                continue
            for n, t in ns.items():
                samples[n].append(t / 1e6)
            samples["total"].append(sum(ns.values()) / 1e6)
        if failed:
            continue
        for n, v in samples.items():
            per_file[n].append((statistics.median(v), path.name))
        del data
    return names, per_file, failures


def bench_real(tool: Path, files: list[Path], reps: int):
    """Per-file median wall ms of one `tileirdisasm FILE` process; failures listed apart."""
    env = nvidia_env(tool)
    per_file: list[tuple[float, str]] = []
    failures: list[str] = []
    for path in files:
        times = []
        for _ in range(reps):
            seconds, rc = time_process([str(tool), str(path)], env, timeout=120)
            times.append(seconds * 1e3)
            if rc != 0:
                failures.append(f"{path.name}: rc {rc}")
                break
        else:
            per_file.append((statistics.median(times), path.name))
    return per_file, failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                    help=f"corpus directory (default: {DEFAULT_CORPUS})")
    ap.add_argument("-n", "--reps", type=int, default=20, help="timed runs per file (default 20)")
    ap.add_argument("--real-reps", type=int, default=3,
                    help="runs per file of the real tileirdisasm (default 3; 0 = skip)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N files (0 = all)")
    args = ap.parse_args(argv)
    reps = max(1, args.reps)

    files = corpus_files(args.corpus)
    if args.limit > 0:
        files = files[: args.limit]
    if not files:
        print(f"bench_read: no *.tileirbc files under {args.corpus} (or its out/public/); "
              "nothing to measure")
        return 0

    from tileiras_async.bytecode.reader import read_module

    stages = {"read": read_module}
    notes = []
    for stage, (mod, attr) in (("verify", ("tileiras_async.ir.verifier", "verify_module")),
                               ("print", ("tileiras_async.ir.printer", "print_module"))):
        fn, why = _optional(mod, attr)
        if fn is None:
            notes.append(f"{stage}: skipped, {why}")
        else:
            stages[stage] = fn

    where = files[0].parent
    print(f"corpus: {where} ({len(files)} files), {reps} timed runs per file + 1 warm-up, "
          f"per-file median")
    for note in notes:
        print(f"  {note}")

    gc.collect()
    names, per_file, failures = bench_ours(files, reps, stages)
    measured = len(per_file["total"])

    print()
    print(f"{'stage':<8} {'files':>5} {'median':>9} {'p90':>9} {'max':>9}   ms per file")
    for n in names + ["total"]:
        vals = [v for v, _ in per_file[n]]
        if not vals:
            print(f"{n:<8} {0:>5} {'-':>9} {'-':>9} {'-':>9}")
            continue
        print(f"{n:<8} {len(vals):>5} {statistics.median(vals):>9.3f} {pct(vals, 90):>9.3f} "
              f"{max(vals):>9.3f}")
    for n, errs in failures.items():
        if errs:
            print(f"  {n}: {len(errs)} file(s) failed, e.g. {errs[0]}")

    if measured:
        totals = per_file["total"]
        ours_median = statistics.median(v for v, _ in totals)
        ok = ours_median <= TARGET_MS
        print()
        print(f"target: median <= {TARGET_MS:g} ms per file ({' + '.join(names)}): "
              f"{'MET' if ok else 'NOT MET'} ({ours_median:.3f} ms)")
        slow = sorted(totals, reverse=True)[:3]
        print("slowest: " + ", ".join(f"{name} {v:.3f} ms" for v, name in slow))

    tool = find_real_disasm()
    print()
    if tool is None:
        print("real tileirdisasm: not found in this environment's nvidia/cu13/bin; no comparison")
    elif args.real_reps <= 0:
        print(f"real tileirdisasm: {tool} (skipped, --real-reps 0)")
    else:
        real, real_fail = bench_real(tool, files, args.real_reps)
        vals = [v for v, _ in real]
        print(f"real tileirdisasm: {tool}")
        if vals:
            real_median = statistics.median(vals)
            print(f"  {len(vals)} files, {args.real_reps} runs per file (process wall time, "
                  f"start-up included): median {real_median:.3f} ms, p90 {pct(vals, 90):.3f} ms, "
                  f"max {max(vals):.3f} ms per file")
            ok_names = {name for _, name in real}
            common = [v for v, name in per_file["total"] if name in ok_names]
            if common:
                ours_common = statistics.median(common)
                print(f"  ours/real over the {len(common)} files both read (median per file, "
                      f"{' + '.join(names)} in-process vs one tileirdisasm process): "
                      f"{ours_common:.3f} / {real_median:.3f} ms = {ours_common / real_median:.2f}x")
        if real_fail:
            print(f"  {len(real_fail)} file(s) rejected by the real tool, e.g. {real_fail[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
