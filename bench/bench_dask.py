"""Benchmark: the corpus on a Dask LocalCluster (`--cluster local:2`) next to the local pool (`-j2`),
and NVIDIA's tileiras run serially on the same files.

    python bench/bench_dask.py [--corpus DIR] [--target sm_100] [--limit N] [--workers 2] [--skip-real]

Measured, on the same files:

  -j2           one batch on the trio-parallel pool (2 worker processes; ptxas run by the supervisor)
  local:2       one batch on a LocalCluster of 2 Dask workers (stages and ptxas on the workers), cluster
                start-up included and also shown apart
  per task      for each pool: mean (round trip - the stage's own time) per worker job, i.e. what the
                pool costs a task (encode, transport, scheduling, decode); Dask's includes its scheduler
  real          NVIDIA's tileiras (nvidia/cu13 wheel), one process per module, serially

The Dask run's cubins are compared with -j2's (byte-identical expected).  Always exits 0: this
reports, it does not gate.  The machine has 2 cores; the load average is printed with the results.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import DEFAULT_CORPUS, corpus_files, nvidia_bin, nvidia_env, time_process


def run(files: list[Path], target: str, out_dir: Path, **kw):
    from tileiras_async.pipeline.config import BatchConfig, output_stem
    from tileiras_async.pipeline.events import ClusterState, RunStarted, StageFinished
    from tileiras_async.pipeline.supervisor import compile_batch

    events: list = []
    t0 = time.perf_counter()
    finished = compile_batch(BatchConfig([str(p) for p in files], [target], out_dir=str(out_dir), **kw),
                             [events.append])
    wall = time.perf_counter() - t0
    jobs = [e for e in events if isinstance(e, StageFinished) and e.worker_pid]
    per_task = sum(e.overhead_s for e in jobs) / max(1, len(jobs))
    ready = next((e.t for e in events if isinstance(e, ClusterState)), None)
    start = next(e.t for e in events if isinstance(e, RunStarted))
    cubins = {}
    for p in files:
        out = out_dir / f"{output_stem(str(p))}.{target}.cubin"
        cubins[p.name] = out.read_bytes() if out.exists() else None
    return wall, per_task, len(jobs), (ready - start) if ready is not None else None, finished, cubins


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--target", default="sm_100")
    ap.add_argument("--limit", type=int, default=40, help="modules (every k-th of the corpus; default 40)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--skip-real", action="store_true")
    args = ap.parse_args()
    try:
        import distributed  # noqa: F401
    except ImportError:
        print("bench_dask: distributed is not installed (pip install '.[dask]'); nothing measured")
        return 0
    every = corpus_files(args.corpus)
    if not every:
        print(f"bench_dask: no corpus at {args.corpus}")
        return 0
    step = max(1, len(every) // args.limit)
    files = every[::step][: args.limit]
    n = args.workers
    print(f"bench_dask: {len(files)} modules, target {args.target}, load average {os.getloadavg()[0]:.2f}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-dask-"))
    try:
        wall_j, task_j, jobs_j, _, fin_j, cub_j = run(files, args.target, tmp / "local", jobs=n)
        wall_d, task_d, jobs_d, ready, fin_d, cub_d = run(files, args.target, tmp / "dask", cluster=f"local:{n}")
        print(f"{'pool':<12} {'wall s':>8} {'modules/s':>10} {'jobs':>6} {'per task ms':>12}")
        print(f"{'-j' + str(n):<12} {wall_j:>8.2f} {len(files) / wall_j:>10.2f} {jobs_j:>6} {task_j * 1e3:>12.1f}")
        print(f"{'local:' + str(n):<12} {wall_d:>8.2f} {len(files) / wall_d:>10.2f} {jobs_d:>6} {task_d * 1e3:>12.1f}")
        if ready is not None:
            print(f"  (cluster start-up until its first state: {ready:.2f} s of the local:{n} wall time)")
        print(f"ratio local:{n} / -j{n} wall: {wall_d / wall_j:.2f}x; per-task overhead: "
              f"{task_d / task_j if task_j else float('nan'):.1f}x")
        same = cub_d == cub_j
        print(f"cubins byte-identical to -j{n}: {same} ({sum(v is not None for v in cub_d.values())} written)")
        if not args.skip_real:
            real = nvidia_bin("tileiras")
            if real is None:
                print("real: NVIDIA's tileiras not installed")
            else:
                total = 0.0
                for p in files:
                    secs, _rc = time_process([str(real), "--gpu-name", args.target, "-o", str(tmp / "r.cubin"),
                                              str(p)], env=nvidia_env(real))
                    total += secs
                print(f"real tileiras serial: {total:.2f} s; ratio local:{n} / real: {wall_d / total:.2f}x, "
                      f"-j{n} / real: {wall_j / total:.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
