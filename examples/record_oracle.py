"""Record what NVIDIA's tileiras does with the workload suite, the capability probes and the corpus.

    python examples/record_oracle.py            # run the real tool, (re)write examples/suite/oracle.json
    python examples/record_oracle.py --check    # run it again and compare with the file (exit 1 on a difference)
    python examples/record_oracle.py --section suite   # re-record one section, keep the others

For every input and target: the exit code and the first stderr line.  Inputs:

* suite   examples/suite/*.tileirbc on sm_80, sm_90, sm_100 and sm_120;
* corpus  ../shared/corpus/out/public/*.v13.1/*.v13.4 tileirbc (TILEIRAS_CORPUS moves it) on the same targets;
* probes  the modules of examples/suite/probes.py on every architecture the real tool knows.

tests/test_suite.py checks our compiler against the file, so CI needs no real tool; when the tool is there,
the tests run it again on a sample and compare.  The real tool comes from the nvidia-cuda-tileiras wheel
only (never from PATH, where our own drop-in may be).  Output is deterministic (sorted, no timings).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE_DIR = HERE / "suite"
ORACLE = SUITE_DIR / "oracle.json"
TARGETS = ("sm_80", "sm_90", "sm_100", "sm_120")
CORPUS_VERSIONS = ("13.1", "13.4")


def corpus_dir() -> Path:
    root = Path(os.environ.get("TILEIRAS_CORPUS", HERE.parent.parent / "shared" / "corpus"))
    return root / "out" / "public"


def real_tileiras() -> Path | None:
    """tileiras from NVIDIA's wheel in this environment, or None."""
    for entry in sys.path:
        p = Path(entry) / "nvidia" / "cu13" / "bin" / "tileiras"
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None


def run_real(tool: Path, data: bytes, gpu: str) -> dict:
    """{"rc", "stderr" (first line)} of one real compile of `data` (from a temporary file named input.tileirbc,
    so no path of this machine can appear in the message)."""
    env = dict(os.environ, CUDA_HOME=str(tool.parent.parent))
    with tempfile.TemporaryDirectory(prefix="oracle-") as tmp:
        Path(tmp, "input.tileirbc").write_bytes(data)
        r = subprocess.run([str(tool), "--gpu-name", gpu, "input.tileirbc", "-o", "out.cubin"], cwd=tmp, env=env,
                           capture_output=True, text=True, timeout=600)
    lines = r.stderr.splitlines()
    return {"rc": r.returncode, "stderr": lines[0] if lines else ""}


def load_probes():
    name = "tileiras_async_examples_probes"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, SUITE_DIR / "probes.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return mod


def inputs() -> dict[str, list[tuple[str, bytes, tuple[str, ...]]]]:
    """section -> [(name, bytecode, targets)]."""
    from tileiras_async.ir.capabilities import ARCHS
    suite = [(p.name, p.read_bytes(), TARGETS) for p in sorted(SUITE_DIR.glob("*.tileirbc"))]
    corpus = [(p.name, p.read_bytes(), TARGETS) for v in CORPUS_VERSIONS
              for p in sorted(corpus_dir().glob(f"*.v{v}.tileirbc"))]
    probes = [(name, build(), ARCHS) for name, build in sorted(load_probes().probes().items())]
    return {"suite": suite, "corpus": corpus, "probes": probes}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record(tool: Path, progress=None, sections: list[str] | None = None, keep: dict | None = None) -> dict:
    """The whole oracle; with `sections`, only those are run again and the rest comes from `keep`."""
    out: dict = dict(keep or {})
    out["targets"] = list(TARGETS)
    version = subprocess.run([str(tool), "--version"], capture_output=True, text=True,
                             env=dict(os.environ, CUDA_HOME=str(tool.parent.parent))).stdout.splitlines()
    out["tool"] = next((line for line in version if line.startswith("Cuda compilation tools")), "")
    for section, items in inputs().items():
        if sections and section not in sections:
            continue
        entries = {}
        for name, data, targets in items:
            entries[name] = {"sha256": sha256(data), "results": {g: run_real(tool, data, g) for g in targets}}
            if progress:
                progress(f"{section} {name}: " + " ".join(f"{g}={r['rc']}" for g, r in entries[name]["results"].items()))
        out[section] = entries
    return out


def dumps(oracle: dict) -> str:
    return json.dumps(oracle, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare a fresh recording with oracle.json")
    ap.add_argument("--out", type=Path, default=ORACLE)
    ap.add_argument("--section", action="append", choices=("suite", "corpus", "probes"),
                    help="re-record only this section (repeatable); the others are kept from --out")
    args = ap.parse_args(argv)
    tool = real_tileiras()
    if tool is None:
        print("error: NVIDIA's tileiras (wheel nvidia-cuda-tileiras) is not installed here", file=sys.stderr)
        return 2
    keep = json.loads(args.out.read_text()) if args.section and args.out.exists() else None
    fresh = dumps(record(tool, progress=lambda line: print(line, flush=True), sections=args.section, keep=keep))
    if args.check:
        old = args.out.read_text() if args.out.exists() else ""
        if old != fresh:
            print(f"DIFFERS {args.out}")
            return 1
        print(f"same    {args.out}")
        return 0
    args.out.write_text(fresh)
    print(f"wrote   {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
