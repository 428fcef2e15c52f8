"""Mutated corpus files never crash, hang or leave output: each gets a clean diagnostic and a documented exit code.

Seeded and deterministic.  CI runs FUZZ_CASES cases; `--run-all` runs ten times as many.
"""
from __future__ import annotations

import json
import os
import random
import signal

import pytest

from tileiras_async.frontend import EXIT_BAD_INPUT, InputError, load

from conftest import PUBLIC, REPO, corpus_files, requires_corpus

FUZZ_CASES = int(os.environ.get("FUZZ_CASES", "2400"))
SEEDS = [0x7113, 0xC0DE, 0xB17E]
PER_CASE_SECONDS = 5
DOCUMENTED_EXIT_CODES = {0, EXIT_BAD_INPUT}


def _sources() -> list[bytes]:
    files = corpus_files("*.v13.*.tileirbc")
    # one file per kernel and version keeps the sample varied but small
    return [p.read_bytes() for p in files[::3]]


def _huge_varint(rng: random.Random) -> bytes:
    value = rng.choice([2**32 - 1, 2**63 - 1, 2**64 - 1, 2**70, rng.getrandbits(60)])
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    kind = rng.randrange(7)
    pos = rng.randrange(len(b)) if b else 0
    if kind == 0:                                # truncation
        return bytes(b[:pos])
    if kind == 1:                                # byte flips
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == 2:                                # random byte values
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 3:                                # inserted bytes
        return bytes(b[:pos] + bytes(rng.randrange(256) for _ in range(rng.randint(1, 16))) + b[pos:])
    if kind == 4:                                # deleted bytes
        return bytes(b[:pos] + b[pos + rng.randint(1, 16):])
    if kind == 5:                                # huge varints / lengths
        return bytes(b[:pos] + _huge_varint(rng) + b[pos + 1:])
    # duplicated slice (nested structure confusion)
    n = rng.randint(1, 64)
    return bytes(b[:pos] + b[pos:pos + n] * rng.randint(2, 8) + b[pos:])


class _Timeout(Exception):
    pass


def _alarm(_signum, _frame):
    raise _Timeout()


def _check_one(data: bytes) -> int:
    from tileiras_async.ir.printer import print_module
    try:
        module = load(data, "input does not correspond to Tile IR bytecode", with_debug_locations=True)
    except InputError as e:
        assert e.lines and all(isinstance(line, str) and line for line in e.lines)
        assert e.lines[-1].startswith("error: ") or e.lines[0].startswith("error: ")
        return e.rc
    print_module(module)
    return 0


@requires_corpus
@pytest.mark.parametrize("seed", SEEDS)
def test_fuzz_reader_verifier_printer(seed):
    rng = random.Random(seed)
    sources = _sources()
    count = FUZZ_CASES // len(SEEDS)
    old = signal.signal(signal.SIGALRM, _alarm)
    seen = {}
    try:
        for case in range(count):
            data = mutate(rng.choice(sources), rng)
            signal.alarm(PER_CASE_SECONDS)
            try:
                rc = _check_one(data)
            except _Timeout:
                pytest.fail(f"seed {seed:#x} case {case}: hang (> {PER_CASE_SECONDS}s)")
            finally:
                signal.alarm(0)
            assert rc in DOCUMENTED_EXIT_CODES, f"seed {seed:#x} case {case}: rc {rc}"
            seen[rc] = seen.get(rc, 0) + 1
    finally:
        signal.signal(signal.SIGALRM, old)
    assert seen.get(EXIT_BAD_INPUT, 0) > count // 4, seen  # the mutations really do break files


# ---------------------------------------------------------------- differential (NVIDIA's tools as oracle)

DIFF_SAMPLE = int(os.environ.get("FUZZ_DIFF_SAMPLE", "12"))
DIFF_EXHAUSTIVE = int(os.environ.get("FUZZ_DIFF_CASES", "2000"))
REGRESSIONS = REPO / "tests" / "data" / "fuzz"


@pytest.fixture(scope="module")
def differ():
    from tileiras_async.fuzz.__main__ import find_oracle
    from tileiras_async.fuzz.differ import Differ
    oracle = find_oracle()
    if oracle is None:
        pytest.skip("NVIDIA's tileiras/tileirdisasm (the oracle) are not installed")
    d = Differ(oracle, gpu_name="sm_90")
    yield d
    d.close()


@pytest.fixture(scope="module")
def mutator():
    from tileiras_async.fuzz.__main__ import default_sources
    from tileiras_async.fuzz.mutate import Mutator
    sources = default_sources(PUBLIC, every=3)
    if len(sources) < 10:
        pytest.skip("corpus not found")
    return lambda seed: Mutator(sources, seed)


def _worst(verdicts):
    from tileiras_async.fuzz.differ import ORDER
    return min(verdicts, key=lambda v: ORDER.index(v.kind))


@requires_corpus
def test_differential_sample(differ, mutator):
    """Structure-aware mutants through our drop-ins and NVIDIA's: same decision, exit code and
    disassembly, never an internal error, a hang or a partial output (a fixed seed: deterministic)."""
    from tileiras_async.fuzz.differ import MISMATCHES
    m = mutator(0x5EED)
    for i in range(DIFF_SAMPLE):
        mutant = m.mutant(i)
        worst = _worst(differ.compare(mutant.data))
        assert worst.kind not in MISMATCHES, (i, mutant.operator, mutant.detail, worst)


@pytest.mark.slow
@requires_corpus
@pytest.mark.parametrize("seed", [1, 2])
def test_differential_thousands(differ, mutator, seed):
    """The done-when figure on fresh seeds: no internal errors or timeouts, >= 99.5 % agreement."""
    from tileiras_async.fuzz.differ import MISMATCHES
    m = mutator(seed * 1_000_003)
    kinds: dict[str, int] = {}
    for i in range(DIFF_EXHAUSTIVE // 2):
        kind = _worst(differ.compare(m.mutant(i).data)).kind
        kinds[kind] = kinds.get(kind, 0) + 1
    assert kinds.get("internal", 0) == 0 and kinds.get("timeout", 0) == 0, kinds
    agree = sum(n for k, n in kinds.items() if k not in MISMATCHES)
    assert agree >= 0.995 * sum(kinds.values()), kinds


def _regressions() -> list[dict]:
    path = REGRESSIONS / "manifest.json"
    return json.loads(path.read_text())["entries"] if path.is_file() else []


def _regression_params():
    """Each finding; a full compile (NVIDIA's tileiras accepted it, so ours must run ptxas too)
    costs a second or two, so those run in the exhaustive sweep and the disassembler checks them here."""
    out = []
    for e in _regressions():
        marks = [pytest.mark.slow] if e["tileiras"]["rc"] == 0 else []
        out.append(pytest.param(e, True, id=e["file"][:12], marks=marks))
        if marks:
            out.append(pytest.param(e, False, id=e["file"][:12] + "-disasm"))
    return out


@pytest.mark.parametrize("entry, compile_too", _regression_params())
def test_fuzz_finding_regressions(entry, compile_too, tmp_path, capsys):
    """Every input the fuzzer ever found a difference on, replayed (in this process, through the
    drop-ins' entry points) against what NVIDIA's tools did with it (recorded with
    `python -m tileiras_async.fuzz --record tests/data/fuzz FILES`)."""
    import hashlib
    from tileiras_async.cli import disasm, tileiras
    path = REGRESSIONS / entry["file"]
    rc = disasm.main([str(path)])
    out, err = capsys.readouterr()
    want = entry["tileirdisasm"]
    assert rc == want["rc"], err
    if want["rc"] == 0:
        assert hashlib.sha256(out.encode("utf-8", "surrogateescape")).hexdigest() == want["stdout_sha256"]
    if want["same_stderr"]:
        assert err[-2000:] == want["stderr"]   # recorded as the differ keeps it: the last 2,000 characters
    assert "Traceback" not in err
    if not compile_too:
        return
    cubin = tmp_path / "out.cubin"
    rc = tileiras.main(["--gpu-name", entry["gpu_name"], "-o", str(cubin), str(path)])
    _, err = capsys.readouterr()
    assert rc == entry["tileiras"]["rc"], err
    assert cubin.exists() == (rc == 0)
    assert "Traceback" not in err


@pytest.mark.slow
@requires_corpus
@pytest.mark.parametrize("seed", range(10))
def test_fuzz_exhaustive(seed):
    rng = random.Random(seed * 7919)
    sources = _sources()
    for _ in range(FUZZ_CASES):
        assert _check_one(mutate(rng.choice(sources), rng)) in DOCUMENTED_EXIT_CODES
