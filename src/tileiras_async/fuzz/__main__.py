"""Differential fuzzing from the command line (a test and benchmark tool, not part of the compiler).

    python -m tileiras_async.fuzz --cases 10000 --seed 1 --findings build/fuzz [--corpus DIR]

Mutants of the corpus bytecode (and of a few multi-kernel modules) go through our drop-ins and
NVIDIA's (`tileiras`, `tileirdisasm` from the nvidia-cuda-tileiras wheel, the test oracle); the
verdicts are counted, and every mismatching input is written to --findings with a JSON line
describing it (findings.jsonl).  The exit status is 1 when there was a mismatch.
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

from .differ import MISMATCHES, ORDER, Differ, Oracle
from .hostile import many_kernels
from .mutate import Mutator, Source

REPO = Path(__file__).resolve().parents[3]
DEFAULT_CORPUS = Path(os.environ.get("TILEIRAS_CORPUS", REPO.parent / "shared" / "corpus")) / "out" / "public"


def find_oracle() -> Oracle | None:
    """NVIDIA's tools from the wheels of this environment (as tests/conftest.py finds them)."""
    for entry in sys.path:
        bin_dir = Path(entry) / "nvidia" / "cu13" / "bin"
        if (bin_dir / "tileiras").is_file() and (bin_dir / "tileirdisasm").is_file():
            env = dict(os.environ, CUDA_HOME=str(bin_dir.parent))
            return Oracle(bin_dir / "tileiras", bin_dir / "tileirdisasm", env)
    found, disasm = shutil.which("tileiras"), shutil.which("tileirdisasm")
    if found and disasm:
        return Oracle(Path(found), Path(disasm), dict(os.environ))
    return None


def default_sources(corpus: Path = DEFAULT_CORPUS, every: int = 1) -> list[Source]:
    files = sorted(corpus.glob("*.tileirbc"))[::every] if corpus.is_dir() else []
    sources = [Source.of(p.name, p.read_bytes()) for p in files]
    sources.append(Source.of("many_kernels_3", many_kernels(3)))   # names, duplicated functions
    return sources


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tileiras_async.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start", type=int, default=0, help="first case index (to resume a run)")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--findings", type=Path, default=None, help="write mismatching inputs here")
    ap.add_argument("--gpu-name", default="sm_90")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case for ours")
    ap.add_argument("--progress", type=int, default=100, help="print the counts every N cases (0: never)")
    ap.add_argument("--record-messages", action="store_true",
                    help="also record inputs whose diagnostics differ (same decision and exit code)")
    ap.add_argument("--skip-compile-on-reject", action="store_true",
                    help="do not run the compilers when both disassemblers reject an input with exit 3")
    ap.add_argument("--record", type=Path, metavar="DIR", default=None,
                    help="instead of fuzzing: run the given files through both tools and record them as "
                         "regression cases in DIR (DIR/manifest.json)")
    ap.add_argument("files", nargs="*", type=Path)
    args = ap.parse_args(argv)
    oracle = find_oracle()
    if oracle is None:
        print("error: NVIDIA's tileiras/tileirdisasm (the oracle) were not found", file=sys.stderr)
        return 2
    if args.record:
        return record(args.record, args.files, oracle, args.gpu_name)
    sources = default_sources(args.corpus)
    mutator = Mutator(sources, args.seed)
    differ = Differ(oracle, gpu_name=args.gpu_name, timeout_s=args.timeout,
                    compile_rejected=not args.skip_compile_on_reject)
    counts: collections.Counter = collections.Counter()
    operators: collections.Counter = collections.Counter()
    if args.findings:
        args.findings.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    try:
        for i in range(args.start, args.start + args.cases):
            m = mutator.mutant(i)
            verdicts = differ.compare(m.data)
            worst = min(verdicts, key=lambda v: ORDER.index(v.kind))
            counts[worst.kind] += 1
            if worst.kind in MISMATCHES:
                operators[m.operator] += 1
            if worst.kind in MISMATCHES or (args.record_messages and worst.kind == "message"):
                _record(args.findings, args.seed, i, m, verdicts)
            done = i - args.start + 1
            if args.progress and done % args.progress == 0:
                print(f"{done} cases, {time.monotonic() - t0:.0f} s: {dict(counts)}", flush=True)
    finally:
        differ.close()
    total = sum(counts.values())
    mismatched = sum(n for k, n in counts.items() if k in MISMATCHES)
    print(f"seed {args.seed}, cases {args.start}..{args.start + args.cases - 1}: {total} mutants in "
          f"{time.monotonic() - t0:.0f} s")
    for kind in ORDER:
        if counts[kind]:
            print(f"  {kind:15s} {counts[kind]}")
    agree = total - mismatched
    print(f"same decision and exit code (and text): {agree}/{total} = {100.0 * agree / max(total, 1):.2f} %")
    if operators:
        print("mismatches by operator: " + ", ".join(f"{k} {n}" for k, n in operators.most_common()))
    return 1 if mismatched else 0


def record(folder: Path, files: list[Path], oracle: Oracle, gpu_name: str) -> int:
    """Regression cases: each file (deduplicated by content) with what the oracle does with it and
    whether we agree now; tests/test_fuzz.py replays them without the oracle."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest_path = folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.is_file() else {"entries": []}
    known = {e["file"] for e in manifest["entries"]}
    differ = Differ(oracle, gpu_name=gpu_name)
    try:
        for path in files:
            data = path.read_bytes()
            name = f"{hashlib.sha256(data).hexdigest()[:16]}.tileirbc"
            if name in known:
                continue
            verdicts = {v.tool: v for v in differ.compare(data)}
            (folder / name).write_bytes(data)
            entry = {"file": name, "found_as": path.name, "gpu_name": gpu_name}
            for tool, v in verdicts.items():
                entry[tool] = {"rc": v.theirs["rc"], "stderr": v.theirs["stderr"],
                               "stdout_sha256": v.theirs["stdout_sha256"], "agree": v.kind in ("same", "message"),
                               "same_stderr": v.ours["stderr"] == v.theirs["stderr"]}
            manifest["entries"].append(entry)
            known.add(name)
            print(f"{name}: " + ", ".join(f"{t} {v.kind}" for t, v in verdicts.items()), flush=True)
    finally:
        differ.close()
    manifest["entries"].sort(key=lambda e: e["file"])
    manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return 0


def _record(folder: Path | None, seed: int, index: int, m, verdicts) -> None:
    if folder is None:
        return
    digest = hashlib.sha256(m.data).hexdigest()[:12]
    worst = min(verdicts, key=lambda v: ORDER.index(v.kind))
    name = f"{worst.kind}-{digest}.tileirbc"
    (folder / name).write_bytes(m.data)
    entry = {"file": name, "seed": seed, "case": index, "source": m.source, "operator": m.operator,
             "detail": m.detail, "verdicts": [{"tool": v.tool, "kind": v.kind, "ours": v.ours, "theirs": v.theirs}
                                              for v in verdicts]}
    with open(folder / "findings.jsonl", "a") as f:
        f.write(json.dumps(entry) + "\n")


if __name__ == "__main__":
    sys.exit(main())
