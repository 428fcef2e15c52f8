"""The reader takes every corpus file and the writer gives the same bytes back."""
from __future__ import annotations

import pytest

from tileiras_async.bytecode.reader import read_module
from tileiras_async.bytecode.writer import write_module
from tileiras_async.bytecode.wire import ByteReader, encode_svarint, encode_varint
from tileiras_async.bytecode.errors import BytecodeError
from tileiras_async.ir import types as T

from conftest import corpus_files, requires_corpus

CORPUS_FILES = corpus_files("*.tileirbc")


@requires_corpus
@pytest.mark.parametrize("path", CORPUS_FILES, ids=lambda p: p.name)
def test_corpus_round_trip(path):
    data = path.read_bytes()
    module = read_module(data)
    assert module.functions, "every corpus file holds a kernel"
    assert write_module(module) == data


@requires_corpus
def test_corpus_covers_every_version():
    versions = {read_module(p.read_bytes()).version[:2] for p in CORPUS_FILES}
    assert versions == {(13, 1), (13, 2), (13, 3), (13, 4)}


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**63 - 1, 2**64 - 1])
def test_varint_round_trip(value):
    out = bytearray()
    encode_varint(value, out)
    assert ByteReader(bytes(out)).varint() == value


@pytest.mark.parametrize("value", [0, -1, 1, -64, 63, -(2**63), 2**63 - 1])
def test_zigzag_round_trip(value):
    out = bytearray()
    encode_svarint(value, out)
    assert ByteReader(bytes(out)).svarint() == value


def test_varint_too_long_is_an_error():
    with pytest.raises(BytecodeError):
        ByteReader(b"\xff" * 11 + b"\x01").varint()


def test_truncated_varint_is_an_error():
    with pytest.raises(BytecodeError, match="unexpected end of data"):
        ByteReader(b"\x80\x80").varint()


@requires_corpus
def test_entry_arguments_follow_the_calling_convention():
    path = next(p for p in CORPUS_FILES if p.name.startswith("vec_add_f32_t128.v13.4"))
    fn = read_module(path.read_bytes()).functions[0]
    kinds = [type(t.elem).__name__ for t in fn.type.inputs]
    # three arrays: ptr, shape, stride each
    assert kinds == ["PointerType", "IntType", "IntType"] * 3
    assert all(isinstance(t, T.TileType) and t.shape == () for t in fn.type.inputs)


@requires_corpus
def test_debug_locations_are_consumed_one_per_op():
    path = next(p for p in CORPUS_FILES if p.name.startswith("vec_add_f32_t128.v13.4"))
    module = read_module(path.read_bytes())
    fn = module.functions[0]
    ops = list(fn.walk())
    assert fn.loc != 0
    assert all(0 <= op.loc <= len(module.debug) for op in ops)
    assert len({op.loc for op in ops}) > 1  # distinct source lines were recorded
