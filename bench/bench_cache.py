"""The drop-in's wall time per call, ours next to NVIDIA's tileiras in the same run: cold, warm server,
cache hit, `--help` and cuTile's empty-module probe.

    python bench/bench_cache.py [--gpu-name sm_90] [--corpus DIR] [--pattern GLOB] [--limit N] [--reps N]

Per file, each measurement is the fastest of --reps runs (the runs of ours and of the real tool
alternate, so machine load falls on both alike), every one a fresh process, as cuTile runs it:

    real    NVIDIA's tileiras (CUDA_HOME at its wheel)
    cold    ours, no server, an empty cache (the entry is written: that is part of a cold call)
    server  ours, cache off, a warm `tileiras-async serve` started by this script on a private socket
    hit     ours, the entry the cold call wrote

Ratios are ours / real.  The cubins of cold, server and hit are compared byte for byte.  The goals of
issue 17 are printed with each figure.
"""
from __future__ import annotations

import argparse
import glob
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import DEFAULT_CORPUS, REPO, corpus_files, nvidia_bin, nvidia_env

OURS = Path(sys.executable).parent / "tileiras"


def run(argv: list[str], env: dict) -> tuple[float, int, bytes, float]:
    """(wall seconds, exit status, stderr, CPU seconds of the process and the children it waited for)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, env=env, timeout=600)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, proc.returncode, proc.stderr, cpu


def fastest(samples: list[tuple], what: str, cpu: bool = False, rc: int = 0) -> float:
    """The fastest run; every run must have exited `rc` (a file both tools reject is timed too)."""
    bad = [s for s in samples if s[1] != rc]
    if bad:
        raise SystemExit(f"{what}: exit {bad[0][1]} (expected {rc}): {bad[0][2].decode(errors='replace')[:500]}")
    return min(s[3] if cpu else s[0] for s in samples)


def editable_finder() -> bool:
    """Whether this environment imports setuptools' editable-install finder at every start (it costs
    several milliseconds of every Python process; a plain or a static-path install does not)."""
    import site
    dirs = site.getsitepackages() + [site.getusersitepackages()]
    return any(glob.glob(os.path.join(d, "__editable__*finder*.py")) for d in dirs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu-name", default="sm_90")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--pattern", default="*.v13.4.tileirbc", help="which corpus files (default: one per kernel)")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    files = [f for f in corpus_files(args.corpus) if f.match(args.pattern)]
    if args.limit:
        files = files[:args.limit]
    real = nvidia_bin("tileiras")
    if real is None:
        print("NVIDIA's tileiras (nvidia-cuda-tileiras wheel) not found: nothing to compare with")
        return 1
    if not OURS.exists():
        print(f"{OURS} not found: run `make setup` first")
        return 1
    # what `make setup` leaves: the byte code, the dataclasses' compiled methods (dataclass_code.py) and the
    # installation's fingerprint (cache/fingerprint.py)
    for step in (["compileall", "-q", str(REPO / "src")], ["tileiras_async.dataclass_code"],
                 ["tileiras_async.cache.fingerprint"]):
        subprocess.run([sys.executable, "-m", *step], capture_output=True)
    work = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    sock = work / "s.sock"
    base = {k: v for k, v in os.environ.items() if not k.startswith("TILEIRAS_ASYNC_")}
    base["TILEIRAS_ASYNC_SOCKET"] = str(sock)
    env_real = nvidia_env(real)
    env_cold = {**base, "TILEIRAS_ASYNC_SERVER": "off"}
    env_server = {**base, "TILEIRAS_ASYNC_SERVER": "use", "TILEIRAS_ASYNC_NO_CACHE": "1"}
    server = subprocess.Popen([sys.executable, "-m", "tileiras_async.server", "--socket", str(sock), "-j", "2",
                               "--idle-timeout", "0"], env=env_server, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        _wait_ready(sock, env_server, files[0], work, args.gpu_name)
        rows = [_measure(f, i, args, real, env_real, env_cold, env_server, work) for i, f in enumerate(files)]
        reps = max(args.reps, 5)
        help_real = fastest([run([str(real), "--help"], env_real) for _ in range(reps)], "real --help")
        helps = [run([str(OURS), "--help"], env_cold) for _ in range(reps)]
        help_ours = (fastest(helps, "our --help"), fastest(helps, "our --help", cpu=True))
        floor = [run([sys.executable, *flags, "-c", "pass"], env_cold) for flags in ([], ["-S"]) for _ in range(reps)]
        python = (fastest(floor[:reps], "python"), fastest(floor[reps:], "python -S"), fastest(floor[:reps], "", True))
        probe = _probe(args, real, env_real, env_cold, env_server, work)
    finally:
        subprocess.run([sys.executable, "-m", "tileiras_async.server", "--socket", str(sock), "--stop"],
                       capture_output=True, env=env_server)
        server.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    _report(rows, help_ours, help_real, probe, python, args)
    return 0


def _wait_ready(sock: Path, env: dict, sample: Path, work: Path, gpu: str) -> None:
    """Until the server answers a compile (its workers are warm then)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if sock.exists():
            out = work / "warm.cubin"
            _, rc, _, _ = run([str(OURS), "--gpu-name", gpu, "-o", str(out), str(sample)], env)
            status = subprocess.run([sys.executable, "-m", "tileiras_async.server", "--socket", str(sock),
                                     "--status"], capture_output=True, text=True, env=env)
            if rc == 0 and "requests 1 " in status.stdout:
                return
        time.sleep(0.2)
    raise SystemExit("the compile server did not come up")


def _measure(path: Path, index: int, args, real: Path, env_real, env_cold, env_server, work: Path) -> tuple:
    gpu = args.gpu_name
    outs = {k: work / f"{k}.cubin" for k in ("real", "cold", "server", "hit")}
    samples: dict[str, list] = {k: [] for k in outs}
    for rep in range(args.reps):
        env_c = {**env_cold, "TILEIRAS_ASYNC_CACHE_DIR": str(work / f"cache-{index}-{rep}")}
        samples["real"].append(run([str(real), "--gpu-name", gpu, "-o", str(outs["real"]), str(path)], env_real))
        samples["cold"].append(run([str(OURS), "--gpu-name", gpu, "-o", str(outs["cold"]), str(path)], env_c))
        samples["server"].append(run([str(OURS), "--gpu-name", gpu, "-o", str(outs["server"]), str(path)],
                                     env_server))
        samples["hit"].append(run([str(OURS), "--gpu-name", gpu, "-o", str(outs["hit"]), str(path)], env_c))
    rc = samples["real"][0][1]
    t = {k: fastest(v, f"{k} {path.name}", rc=rc) for k, v in samples.items()}
    t["hit_cpu"] = fastest(samples["hit"], "hit", cpu=True, rc=rc)
    t["rc"] = rc
    if rc:  # rejected by both tools: the same diagnostics from every path of ours, and no output
        same = len({s[2] for k in ("cold", "server", "hit") for s in samples[k]}) == 1 and not any(
            o.exists() for k, o in outs.items() if k != "real")
    else:
        same = outs["cold"].read_bytes() == outs["server"].read_bytes() == outs["hit"].read_bytes()
    for o in outs.values():
        o.unlink(missing_ok=True)
    name = path.name.split(".")[0]
    print(f"{name:40} real {t['real'] * 1e3:7.1f}  cold {t['cold'] * 1e3:7.1f}  server {t['server'] * 1e3:7.1f}  "
          f"hit {t['hit'] * 1e3:6.1f} ms{f'  (exit {rc} from both)' if rc else ''}"
          f"{'' if same else '  OUTPUTS DIFFER'}", flush=True)
    return name, t, same


def _probe(args, real: Path, env_real, env_cold, env_server, work: Path) -> dict:
    """cuTile's version probe: an empty 13.4 module, compiled by every fresh interpreter."""
    sys.path.insert(0, str(REPO / "src"))
    from tileiras_async.bytecode.writer import write_module
    from tileiras_async.ir.core import Module
    src = work / "probe.bytecode"
    src.write_bytes(write_module(Module(version=(13, 4, 0))))
    out = str(work / "probe.cubin")
    argv = ["--gpu-name", args.gpu_name, "-O3", "--lineinfo", str(src), "-o", out]
    cache = {**env_cold, "TILEIRAS_ASYNC_CACHE_DIR": str(work / "probe-cache")}
    reps = max(args.reps, 5)
    return {
        "real": fastest([run([str(real), *argv], env_real) for _ in range(reps)], "real probe"),
        "cold": fastest([run([str(OURS), "--no-cache", *argv], env_cold) for _ in range(reps)], "cold probe"),
        "server": fastest([run([str(OURS), *argv], env_server) for _ in range(reps)], "server probe"),
        "hit": fastest([run([str(OURS), *argv], cache) for _ in range(reps + 1)], "hit probe"),
    }


def _report(rows, help_ours: tuple, help_real: float, probe: dict, python: tuple, args) -> None:
    """The goals' figures over the files both tools compile; files both reject are summed up apart (the real
    tool rejects them before any code generation, in a few milliseconds: a Python process cannot match that)."""
    compiled = [r for r in rows if not r[1]["rc"]]
    rejected = [r for r in rows if r[1]["rc"]]
    ratio = {k: [t[k] / t["real"] for _, t, _ in compiled] for k in ("cold", "server", "hit")}
    hit_ms = [t["hit"] * 1e3 for _, t, _ in compiled]
    worst = {k: max(compiled, key=lambda r: r[1][k] / r[1]["real"])[0] for k in ratio}
    print(f"\n{len(compiled)} files compiled, {args.gpu_name}, fastest of {args.reps} runs each; ratios are ours / real")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; editable-install finder at start-up: "
          f"{'yes' if editable_finder() else 'no'}")
    print(f"Python start-up alone (python -c pass): {python[0] * 1e3:.1f} ms wall, {python[2] * 1e3:.0f} ms CPU; "
          f"without site (-S): {python[1] * 1e3:.1f} ms")
    print(f"median real tileiras {statistics.median(t['real'] for _, t, _ in compiled) * 1e3:.1f} ms")
    print(f"cache hit:   median {statistics.median(hit_ms):.1f} ms, max {max(hit_ms):.1f} ms (goal <= 30 ms); "
          f"ratio median {statistics.median(ratio['hit']):.2f}, max {max(ratio['hit']):.2f} ({worst['hit']}; "
          f"goal <= 0.3); CPU median {statistics.median(t['hit_cpu'] for _, t, _ in compiled) * 1e3:.0f} ms")
    for k, goal in (("server", "median <= 0.7, none above 1.5"), ("cold", "median <= 2.0")):
        print(f"{'warm server' if k == 'server' else 'cold':12} ratio median {statistics.median(ratio[k]):.2f}, max "
              f"{max(ratio[k]):.2f} ({worst[k]}); {sum(x > 1.5 for x in ratio[k])} above 1.5 (goal: {goal})")
    for name, t, _ in rejected:
        print(f"rejected by both ({name}, exit {t['rc']}): real {t['real'] * 1e3:.1f} ms; ours cold "
              f"{t['cold'] * 1e3:.1f}, server {t['server'] * 1e3:.1f}, hit {t['hit'] * 1e3:.1f} ms")
    print(f"--help:      ours {help_ours[0] * 1e3:.1f} ms (goal <= 100 ms; CPU {help_ours[1] * 1e3:.0f} ms), "
          f"real {help_real * 1e3:.1f} ms")
    print("empty-module probe: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in probe.items())
          + f"; hit/real {probe['hit'] / probe['real']:.2f}, server/real {probe['server'] / probe['real']:.2f}, "
            f"cold/real {probe['cold'] / probe['real']:.2f}")
    differ = [name for name, _, same in rows if not same]
    print(f"outputs identical (cold, server, hit): {len(rows) - len(differ)} of {len(rows)}"
          + (f"; differ: {', '.join(differ)}" if differ else ""))


if __name__ == "__main__":
    sys.exit(main())
