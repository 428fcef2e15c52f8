"""Compile the corpus with ours and with NVIDIA's tileiras in the same run; per-kernel times and the median ratio.

    python bench/compile.py [--gpu-name sm_100] [--corpus DIR] [--limit N] [--reps N]

Ours is timed two ways: in-process through the stages (parse, lower, codegen, assemble: the figure a warm
worker of the batch pipeline sees) and as a fresh `tileiras` process (what a single drop-in call costs,
Python start-up and imports included).  The real tool is always a fresh process.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import DEFAULT_CORPUS, REPO, nvidia_bin, nvidia_env, time_process

sys.path.insert(0, str(REPO / "src"))

from tileiras_async import stages  # noqa: E402
from tileiras_async.stages import (AssembleRequest, CodegenRequest, CompileOptions, LowerRequest,  # noqa: E402
                                   ParseRequest)


def time_stages(path: Path, opts: CompileOptions) -> dict[str, float] | None:
    data = path.read_bytes()
    t = {}
    t0 = time.perf_counter()
    parsed = stages.parse(ParseRequest(str(path), data))
    t["parse"] = time.perf_counter() - t0
    if not parsed.ok:
        return None
    t0 = time.perf_counter()
    lowered = [stages.lower(LowerRequest(str(path), k, opts)) for k in parsed.kernel_ir]
    t["lower"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ptx = stages.codegen(CodegenRequest(str(path), lowered, opts, parsed.globals_ir))
    t["codegen"] = time.perf_counter() - t0
    if not ptx.ok:
        return None
    t0 = time.perf_counter()
    cubin = stages.assemble(AssembleRequest(ptx.ptx, opts))
    t["ptxas"] = time.perf_counter() - t0
    return t if cubin.ok else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu-name", default="sm_100")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS / "out" / "public")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args()
    files = sorted(args.corpus.glob("*.v13.4.tileirbc"))
    if args.limit:
        files = files[:args.limit]
    opts = CompileOptions(args.gpu_name, 3)
    real = nvidia_bin("tileiras")
    env = nvidia_env(real) if real is not None else None
    ours_cli = [sys.executable, "-m", "tileiras_async.cli.tileiras"]
    # a whole compile in a fresh process every time: no compile cache, no compile server (bench_cache.py times those)
    ours_env = {**os.environ, "TILEIRAS_ASYNC_NO_CACHE": "1", "TILEIRAS_ASYNC_SERVER": "off"}
    rows = []
    stage_totals: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = str(Path(tmp) / "x.cubin")
        for path in files:
            best = None
            for _ in range(args.reps):
                t = time_stages(path, opts)
                if t is None:
                    break
                best = t if best is None or sum(t.values()) < sum(best.values()) else best
            if best is None:
                print(f"{path.name}: not compiled by us (skipped)")
                continue
            for k, v in best.items():
                stage_totals.setdefault(k, []).append(v)
            proc_s = min(time_process(ours_cli + ["--gpu-name", args.gpu_name, "-o", out, str(path)], ours_env)[0]
                         for _ in range(args.reps))
            real_s = None
            if real is not None:
                times = [time_process([str(real), "--gpu-name", args.gpu_name, "-o", out, str(path)], env)
                         for _ in range(args.reps)]
                ok = [s for s, rc in times if rc == 0]
                real_s = min(ok) if ok else None
            rows.append((path.name.split(".")[0], sum(best.values()), proc_s, real_s))
    print(f"\n{'kernel':44} {'ours in-proc':>12} {'ours process':>13} {'real':>8} {'ratio':>7}")
    for name, inproc, proc, real_s in rows:
        ratio = f"{inproc / real_s:7.2f}" if real_s else "      -"
        real_txt = f"{real_s:8.3f}" if real_s else "       -"
        print(f"{name:44} {inproc:12.3f} {proc:13.3f} {real_txt} {ratio}")
    paired = [(i, p, r) for _, i, p, r in rows if r]
    print(f"\nkernels compiled: {len(rows)} of {len(files)} ({args.gpu_name}, -O3)")
    print("our stage breakdown (median per kernel, s): " +
          ", ".join(f"{k} {statistics.median(v):.4f}" for k, v in stage_totals.items()))
    if paired:
        med_in = statistics.median(i / r for i, _, r in paired)
        med_proc = statistics.median(p / r for _, p, r in paired)
        print(f"median ratio ours/real: in-process {med_in:.2f}x (goal <= 1.0), "
              f"fresh process {med_proc:.2f}x (Python start-up and imports included)")
        print(f"median seconds: ours in-process {statistics.median(i for i, _, _ in paired):.3f}, "
              f"ours process {statistics.median(p for _, p, _ in paired):.3f}, "
              f"real {statistics.median(r for _, _, r in paired):.3f}")
    else:
        print("real tileiras not found: no ratio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
