"""Malformed modules built with the writer get the same diagnostics as NVIDIA's reader gives."""
from __future__ import annotations

import subprocess

import pytest

from tileiras_async.bytecode.writer import write_module
from tileiras_async.cli import disasm
from tileiras_async.ir import types as T
from tileiras_async.ir.attrs import DenseElements
from tileiras_async.ir.builder import ModuleBuilder, tile

from conftest import nvidia_bin, nvidia_env

# (name, raw buffer, shape, element type, first diagnostic line recorded from tileirdisasm 13.5)
BAD_CONSTANTS = [
    ("short", b"\x01\x00", (4,), T.I32, "error: error at offset 3: failed to validate buffer size and format"),
    ("empty", b"", (4,), T.I32, "error: error at offset 1: failed to validate buffer size and format"),
    ("i1_long", b"\x01\x02\x03", (8,), T.I1,
     "error: error at offset 4: i1 dense attribute payload size 3 is not a recognized encoding for 8 elements"),
    ("f32_three", b"\x00" * 12, (4,), T.F32, "error: error at offset 13: failed to validate buffer size and format"),
]


def _module(raw: bytes, shape, elem) -> bytes:
    mb = ModuleBuilder()
    with mb.kernel("k", []) as k:
        k.op("constant", [tile(elem, *shape)], value=DenseElements(tile(elem, *shape), raw))
        k.op("return")
    return write_module(mb.module)


@pytest.mark.parametrize("name,raw,shape,elem,first", BAD_CONSTANTS, ids=[c[0] for c in BAD_CONSTANTS])
def test_bad_constant_buffers(name, raw, shape, elem, first, tmp_path, capsys):
    path = tmp_path / f"{name}.tileirbc"
    path.write_bytes(_module(raw, shape, elem))
    rc = disasm.main([str(path)])
    err = capsys.readouterr().err
    assert rc == 3
    assert err.splitlines()[0] == first
    assert err.splitlines()[1] == "error: error at offset 3: failed to parse attribute 'value'"
    assert err.splitlines()[-1] == "error: failed to read provided Tile IR bytecode"
    tool = nvidia_bin("tileirdisasm")
    if tool is not None:  # the oracle, when installed, must agree line for line
        real = subprocess.run([str(tool), str(path)], capture_output=True, text=True, env=nvidia_env(), timeout=60)
        assert (rc, err) == (real.returncode, real.stderr)
