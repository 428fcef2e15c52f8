"""Shared fixtures: where the corpus lives, and the --run-all switch for exhaustive sweeps."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("TILEIRAS_CORPUS", REPO.parent / "shared" / "corpus"))
PUBLIC = CORPUS / "out" / "public"
INVALID = CORPUS / "out" / "invalid"


def pytest_addoption(parser):
    parser.addoption("--run-all", action="store_true", default=False,
                     help="run exhaustive sweeps (every corpus file x every target, every fuzz seed)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-all"):
        return
    skip = pytest.mark.skip(reason="exhaustive sweep: run with --run-all (make test-all)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


def corpus_files(pattern: str) -> list[Path]:
    return sorted(PUBLIC.glob(pattern)) if PUBLIC.is_dir() else []


def nvidia_bin(name: str) -> Path | None:
    """A tool from NVIDIA's wheels in this environment (test oracles only)."""
    for entry in sys.path:
        p = Path(entry) / "nvidia" / "cu13" / "bin" / name
        if p.is_file():
            return p
    found = shutil.which(name)
    return Path(found) if found else None


def nvidia_env() -> dict:
    env = dict(os.environ)
    tool = nvidia_bin("tileiras")
    if tool is not None:
        env["CUDA_HOME"] = str(tool.parent.parent)
    return env


requires_corpus = pytest.mark.skipif(not PUBLIC.is_dir(), reason=f"corpus not found at {CORPUS}")
