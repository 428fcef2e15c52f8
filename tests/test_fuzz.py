"""Mutated corpus files never crash, hang or leave output: each gets a clean diagnostic and a documented exit code.

Seeded and deterministic.  CI runs FUZZ_CASES cases; `--run-all` runs ten times as many.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys

import pytest

from tileiras_async.frontend import EXIT_BAD_INPUT, InputError, load

from conftest import REPO, corpus_files, requires_corpus

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


@requires_corpus
def test_fuzz_through_the_cli_has_no_traceback(tmp_path):
    """A sample through the real entry point: stderr has one error line per problem and never a traceback."""
    rng = random.Random(0xF00D)
    sources = _sources()
    for case in range(25):
        bad = tmp_path / f"case{case}.tileirbc"
        bad.write_bytes(mutate(rng.choice(sources), rng))
        out = tmp_path / "out.cubin"
        proc = subprocess.run([sys.executable, "-m", "tileiras_async.cli.tileiras", "--gpu-name", "sm_100",
                               "-o", str(out), str(bad)], capture_output=True, text=True, timeout=60,
                              cwd=REPO)
        assert "Traceback" not in proc.stderr
        if proc.returncode != 0:
            assert not out.exists()
            assert proc.stderr.startswith("error: "), proc.stderr
        out.unlink(missing_ok=True)


@pytest.mark.slow
@requires_corpus
@pytest.mark.parametrize("seed", range(10))
def test_fuzz_exhaustive(seed):
    rng = random.Random(seed * 7919)
    sources = _sources()
    for _ in range(FUZZ_CASES):
        assert _check_one(mutate(rng.choice(sources), rng)) in DOCUMENTED_EXIT_CODES
