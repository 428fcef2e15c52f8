"""What the benchmarks share: where the checkout and the corpus are, finding NVIDIA's tools, timing a process.

Importing it also makes `tileiras_async` importable from a checkout without `pip install -e`.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus"

if str(REPO / "src") not in sys.path:  # running from a checkout without `pip install -e`
    sys.path.append(str(REPO / "src"))


def corpus_files(corpus: Path) -> list[Path]:
    """The *.tileirbc files under <corpus>/out/public, or directly in `corpus`."""
    for d in (corpus / "out" / "public", corpus):
        files = sorted(d.glob("*.tileirbc"))
        if files:
            return files
    return []


def nvidia_bin(name: str) -> Path | None:
    """A tool from NVIDIA's nvidia/cu13 wheel on sys.path, if installed."""
    for entry in sys.path:
        p = Path(entry) / "nvidia" / "cu13" / "bin" / name
        if p.is_file():
            return p
    return None


def nvidia_env(tool: Path) -> dict:
    """The environment to run one of NVIDIA's wheel tools in (CUDA_HOME at the wheel's root)."""
    return dict(os.environ, CUDA_HOME=str(tool.parent.parent))


def time_process(argv: list[str], env: dict | None = None, timeout: float = 600) -> tuple[float, int]:
    """Wall seconds and exit status of one process (output captured)."""
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, env=env, timeout=timeout)
    return time.perf_counter() - t0, proc.returncode
