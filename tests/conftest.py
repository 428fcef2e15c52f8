"""Shared fixtures: where the corpus lives, how its cases are loaded, and the --run-all switch for
exhaustive sweeps."""
from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("TILEIRAS_CORPUS", REPO.parent / "shared" / "corpus"))
PUBLIC = CORPUS / "out" / "public"
LAUNCH = CORPUS / "out" / "public-launch"   # the same cases as cuTile launches them (alignment/stride hints)
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


def manifest(root: Path = PUBLIC) -> dict:
    """The manifest.json of a corpus folder (PUBLIC or INVALID); {} when there is none."""
    path = root / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def manifest_entries(root: Path = PUBLIC) -> list[dict]:
    return manifest(root).get("entries", [])


def load_refs():
    """The corpus's numpy references (refs.py: make_inputs, grid, check, ...)."""
    sys.path.insert(0, str(CORPUS))
    try:
        import refs as module
    finally:
        sys.path.remove(str(CORPUS))
    return module


@pytest.fixture(scope="module")
def refs():
    if not (CORPUS / "refs.py").is_file():
        pytest.skip(f"corpus not found at {CORPUS}")
    return load_refs()


def corpus_case(refs, cid: str) -> tuple[dict, dict, tuple]:
    """A corpus kernel's arguments (the kernel writes its outputs into them), a second, untouched set
    to compute the reference from, and the launch grid."""
    inputs = refs.make_inputs(cid)
    return inputs, refs.make_inputs(cid), refs.grid(cid, inputs)


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


@pytest.fixture(autouse=True, scope="session")
def _compile_cache_off(tmp_path_factory):
    """The compile cache and the compile server are off inside the test session: many tests compile a
    module twice and expect two compiles (stage events, injected faults, fake tools).  The cache's
    own tests turn it on for themselves (tests/test_cache*.py); nothing touches the user's cache or
    talks to the user's server."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TILEIRAS_ASYNC_NO_CACHE", "1")
    mp.setenv("TILEIRAS_ASYNC_CACHE_DIR", str(tmp_path_factory.mktemp("compile-cache")))
    mp.setenv("TILEIRAS_ASYNC_SERVER", "off")
    yield
    mp.undo()


requires_corpus = pytest.mark.skipif(not PUBLIC.is_dir(), reason=f"corpus not found at {CORPUS}")


def stable_seed(*parts) -> int:
    """A random seed from `parts` that is the same in every process (Python's hash() of a str is salted per
    process, so a seed from it drew different cases on every run)."""
    import zlib
    return zlib.crc32(repr(parts).encode())


def mangled_copies(texts: list[str], count: int, seed: int = 7, marks: str = '%#<>[]{}(),:="0x?-.'):
    """`count` cut, shortened, spliced or mutated copies of the texts (for readers' error paths)."""
    import random
    rng = random.Random(seed)
    for _ in range(count):
        text = rng.choice(texts)
        p, q = rng.randrange(len(text)), rng.randrange(len(text))
        yield [text[:p], text[:p] + text[p + rng.randrange(1, 20):], text[:p] + text[q:q + 30] + text[p:],
               text[:p] + rng.choice(marks) + text[p:]][rng.randrange(4)]


def positioned_refusals(read, texts: list[str], count: int, error: type[Exception], name: str,
                        marks: str = '%#<>[]{}(),:="0x?-.') -> int:
    """How many of `count` mangled copies of the texts `read(text, name)` refuses; each refusal must be an
    `error` that starts `name:line:col: ` (anything else raised fails the test)."""
    import re
    refused = 0
    for mangled in mangled_copies(texts, count, marks=marks):
        try:
            read(mangled, name)
        except error as e:
            assert re.match(re.escape(name) + r":\d+:\d+: \S", str(e)), str(e)
            refused += 1
    return refused
