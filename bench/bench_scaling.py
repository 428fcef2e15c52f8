"""Scaling curves: time and peak RSS of a whole compile against input size, ours next to NVIDIA's.

    python bench/bench_scaling.py [--series kernels,ops,if,for,tile] [--gpu-name sm_90]
                                  [--timeout S] [--quick]

Each point compiles one generated module (tileiras_async.fuzz.hostile) with our drop-in
`tileiras` and with NVIDIA's, both as fresh processes, in the same run:

    kernels   n copies of a small elementwise kernel          50 .. 1000
    ops       one kernel with n dependent addf                 1000 .. 10000
    if        `if` nested n deep                               50 .. 2000
    for       `for` nested n deep                              10 .. 200
    tile      load/addf/store of an n-element f32 tile         2^12 .. 2^20

For each series the growth exponent b of time ~ a * n^b is fitted by least squares on log-log,
on the raw times and on the times less an empty module's (process start-up, which flattens the
small end of a curve).  A point that runs past --timeout is shown as such and left out of fits.
"""
from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, nvidia_bin, nvidia_env

from tileiras_async.fuzz import hostile

SERIES = {
    "kernels": (hostile.many_kernels, [50, 100, 200, 1000]),
    "ops": (hostile.straight_line, [1000, 3000, 10000]),
    "if": (hostile.nested_if, [50, 500, 2000]),
    "for": (hostile.nested_for, [10, 50, 200]),
    "tile": (hostile.big_tile, [1 << 12, 1 << 14, 1 << 16, 1 << 20]),
}
QUICK = {"kernels": [10, 50, 200], "ops": [300, 1000, 3000], "if": [50, 500], "for": [10, 50],
         "tile": [1 << 12, 1 << 16]}


def run(argv: list[str], env: dict | None, timeout: float) -> tuple[float | None, int | None, int]:
    """(wall seconds or None on timeout, exit status, peak RSS in bytes) of one fresh process."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    deadline = t0 + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return time.perf_counter() - t0, proc.returncode, usage.ru_maxrss * 1024
        if time.perf_counter() > deadline:
            os.killpg(proc.pid, 9)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = -9
            return None, None, usage.ru_maxrss * 1024
        time.sleep(0.01)


def fit(points: list[tuple[int, float]]) -> float | None:
    """b of t = a * n^b (least squares on log-log); None with fewer than two usable points."""
    pts = [(math.log(n), math.log(t)) for n, t in points if t and t > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None


def fmt_t(t: float | None) -> str:
    return "timeout" if t is None else f"{t:8.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--series", default=",".join(SERIES))
    ap.add_argument("--gpu-name", default="sm_90")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per compile (default 300)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a few minutes in all)")
    args = ap.parse_args()
    real = nvidia_bin("tileiras")
    if real is None:
        print("NVIDIA's tileiras (nvidia-cuda-tileiras wheel) is not installed; nothing to compare with")
        return 1
    ours = Path(sys.executable).parent / "tileiras"
    # the compiler itself, every time: no compile cache (these modules are the same bytes on every run) or server
    ours_env = dict(os.environ, TILEIRAS_ASYNC_NO_CACHE="1", TILEIRAS_ASYNC_SERVER="off")
    tools = {"ours": ([str(ours)], ours_env), "real": ([str(real)], nvidia_env(real))}
    work = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    print(f"# bench_scaling: {args.gpu_name}, fresh processes, timeout {args.timeout:g} s "
          f"(host load {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    base = {}
    empty = work / "empty.tileirbc"
    empty.write_bytes(hostile.many_kernels(0))
    for name, (argv, env) in tools.items():
        base[name] = min(run(argv + ["--gpu-name", args.gpu_name, "-o", str(work / "o"), str(empty)], env,
                             args.timeout)[0] or 0 for _ in range(3))
    print(f"# empty module (start-up): ours {base['ours']:.2f} s, real {base['real']:.2f} s\n")
    for series in args.series.split(","):
        build, sizes = SERIES[series]
        sizes = QUICK.get(series, sizes) if args.quick else sizes
        print(f"## {series}")
        print(f"{'n':>9} {'ours s':>8} {'real s':>8} {'ratio':>6} {'ours MiB':>9} {'real MiB':>9}  exit ours/real")
        times = {"ours": [], "real": []}
        for n in sizes:
            path = work / f"{series}-{n}.tileirbc"
            path.write_bytes(build(n))
            row = {}
            for name, (argv, env) in tools.items():
                out = work / f"{series}-{n}.{name}.cubin"
                row[name] = run(argv + ["--gpu-name", args.gpu_name, "-o", str(out), str(path)], env, args.timeout)
                if row[name][0] is not None:
                    times[name].append((n, row[name][0]))
            (to, eo, mo), (tr, er, mr) = row["ours"], row["real"]
            ratio = f"{to / tr:6.2f}" if to and tr else "     -"
            print(f"{n:>9} {fmt_t(to)} {fmt_t(tr)} {ratio} {mo / 2**20:9.0f} {mr / 2**20:9.0f}  {eo}/{er}",
                  flush=True)
        for name in ("ours", "real"):
            raw = fit(times[name])
            net = fit([(n, t - base[name]) for n, t in times[name]])
            shown = lambda b: "-" if b is None else f"{b:.2f}"
            print(f"  growth exponent {name}: {shown(raw)} (less start-up: {shown(net)})")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
