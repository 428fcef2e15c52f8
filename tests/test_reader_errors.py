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


# -- debug information ------------------------------------------------------------------------------

from tileiras_async.ir.core import DebugEntry  # noqa: E402

_FILE = DebugEntry(2, (1, 2))
_CU = DebugEntry(1, (1,))
_SP = DebugEntry(5, (1, 3, 0, 0, 2, 3))   # file, line, name, linkage name, compile unit, scope line
_LOC = DebugEntry(4, (3, 1, 5, 7))        # scope = the subprogram, f.py:5:7

# (name, debug entries, function location id, op location id, expected stderr lines before the trailer)
DEBUG_CASES = [
    ("valid", [_FILE, _CU, _SP, _LOC], 4, 4, []),
    ("unknown_tag_is_unknown_location", [_FILE, _CU, _SP, _LOC, DebugEntry(9, (1,))], 4, 5, []),
    ("op_location_is_a_file", [_FILE, _CU, _SP, _LOC], 4, 1,
     ["error: error at offset 1: failed to read operation location.",
      "error: error at offset 190: failed to parse function body for function 'k'",
      "error: error at offset 190: failed to create function from bytecode"]),
    ("op_location_out_of_range", [_FILE, _CU, _SP, _LOC], 4, 9,
     ["error: error at offset 1: failed to read operation location.",
      "error: error at offset 190: failed to parse function body for function 'k'",
      "error: error at offset 190: failed to create function from bytecode"]),
    ("function_location_is_a_subprogram", [_FILE, _CU, _SP, _LOC], 3, 4,
     ["error: error at offset 190: failed to read function location for 'k'",
      "error: error at offset 190: failed to create function from bytecode"]),
    ("loc_scope_is_a_file", [_FILE, _CU, _SP, DebugEntry(4, (1, 1, 5, 7))], 4, 4,
     ["error: error at offset 1: failed to read scope attribute when parsing DILocAttr",
      "error: error at offset 190: failed to read function location for 'k'",
      "error: error at offset 190: failed to create function from bytecode"]),
    ("subprogram_missing_scope_line", [_FILE, _CU, DebugEntry(5, (1, 3, 0, 0, 2)), _LOC], 4, 4,
     ["error: error at offset 5: failed to read scope line number when parsing DISubprogramAttr",
      "error: error at offset 1: failed to read scope attribute when parsing DILocAttr",
      "error: error at offset 190: failed to read function location for 'k'",
      "error: error at offset 190: failed to create function from bytecode"]),
    ("lexical_block_scope_is_a_file",
     [_FILE, _CU, _SP, DebugEntry(3, (1, 1, 4, 1)), DebugEntry(4, (4, 1, 5, 7))], 4, 5,
     ["error: error at offset 1: failed to read scope attribute when parsing DILexicalBlockAttr",
      "error: error at offset 202: failed to read function location for 'k'",
      "error: error at offset 202: failed to create function from bytecode"]),
    # NVIDIA's reader keeps a debug attribute's tag as a byte: 4 + 256 is a DILoc
    ("tag_high_bits_dropped", [_FILE, _CU, _SP, DebugEntry(4 + 256, (3, 1, 5, 7))], 4, 4, []),
    ("callsite_caller_not_a_location", [_FILE, _CU, _SP, _LOC, DebugEntry(6, (4, 1))], 4, 5,
     ["error: error at offset 2: failed to read caller attribute when parsing CallSiteLoc",
      "error: error at offset 1: failed to read operation location.",
      "error: error at offset 198: failed to parse function body for function 'k'",
      "error: error at offset 198: failed to create function from bytecode"]),
]


def _debug_module(entries, fn_loc: int, op_loc: int) -> bytes:
    import numpy as np
    mb = ModuleBuilder()
    mb.module.strings = [b"k", b"f.py", b""]
    mb.module.debug = list(entries)
    with mb.kernel("k", []) as k:
        k.loc = op_loc
        k.constant(np.int32(1), tile(T.I32))
        k.op("return")
    mb.module.functions[0].loc = fn_loc
    return write_module(mb.module)


@pytest.mark.parametrize("name,entries,fn_loc,op_loc,expected", DEBUG_CASES, ids=[c[0] for c in DEBUG_CASES])
def test_debug_references(name, entries, fn_loc, op_loc, expected, tmp_path, capsys):
    path = tmp_path / f"{name}.tileirbc"
    path.write_bytes(_debug_module(entries, fn_loc, op_loc))
    rc = disasm.main([str(path)])
    out, err = capsys.readouterr()
    if expected:
        assert rc == 3
        assert err.splitlines() == expected + ["error: failed to read provided Tile IR bytecode"]
    else:
        assert rc == 0 and out.startswith("entry @k")
    tool = nvidia_bin("tileirdisasm")
    if tool is not None:
        real = subprocess.run([str(tool), str(path)], capture_output=True, text=True, env=nvidia_env(), timeout=60)
        assert (rc, out, err) == (real.returncode, real.stdout, real.stderr)


# -- header tag bits and opcodes ------------------------------------------------------------------

def _return_only() -> bytes:
    mb = ModuleBuilder()
    with mb.kernel("k", []) as k:
        k.op("return")
    return write_module(mb.module)


def _disasm_both(path, capsys) -> tuple[int, str]:
    rc = disasm.main([str(path)])
    err = capsys.readouterr().err
    tool = nvidia_bin("tileirdisasm")
    if tool is not None:
        real = subprocess.run([str(tool), str(path)], capture_output=True, text=True, env=nvidia_env(), timeout=60)
        assert (rc, err) == (real.returncode, real.stderr)
    return rc, err


# (version tag, the bits named; recorded from tileirdisasm 13.5): unknown bits are reported before the
# preview bit, in upper-case hex
HEADER_TAGS = [(0xABCD, "0xABCC"), (0x0003, "0x2"), (0x0A00, "0xA00"), (0x8000, "0x8000")]


@pytest.mark.parametrize("tag,shown", HEADER_TAGS, ids=[hex(t) for t, _ in HEADER_TAGS])
def test_unrecognized_version_tag_bits(tag, shown, tmp_path, capsys):
    data = bytearray(_return_only())
    data[10:12] = tag.to_bytes(2, "little")
    path = tmp_path / "tag.tileirbc"
    path.write_bytes(bytes(data))
    rc, err = _disasm_both(path, capsys)
    assert rc == 3
    assert err.splitlines()[0] == f"error: error at offset 12: header has unrecognized version tag bits ({shown});"


# (opcode written, the message's ending): unassigned opcodes below the largest known one are gaps;
# opcodes are kept in 32 bits
OPCODES = [(29, "unknown or unimplemented opcode: 29"), (57, "unknown or unimplemented opcode: 57"),
           (200, "unsupported opcode 200 for bytecode version 13.4"),
           (2**32 - 1, "unsupported opcode 4294967295 for bytecode version 13.4"),
           (2**64 - 1, "unsupported opcode 4294967295 for bytecode version 13.4")]


@pytest.mark.parametrize("opcode,ending", OPCODES, ids=[str(o) for o, _ in OPCODES])
def test_bad_opcodes(opcode, ending, tmp_path, capsys):
    from tileiras_async.fuzz.mutate import Source, _replace_field, varint_bytes
    src = Source.of("k", _return_only())
    field, = [f for f in src.fields if f.what == "opcode"]
    path = tmp_path / "op.tileirbc"
    path.write_bytes(_replace_field(src, field, varint_bytes(opcode), fixup=True))
    rc, err = _disasm_both(path, capsys)
    assert rc == 3
    assert err.splitlines()[0].endswith(ending)
    assert "failed to parse function body for function 'k'" in err


# -- tags kept as bytes, segment sizes kept in 32 signed bits -------------------------------------

def _with_type_tag(data: bytes, index: int, tag: int) -> bytes:
    """`data` with entry `index` of its Type table given the tag `tag` (lengths re-encoded)."""
    from tileiras_async.bytecode.reader import SEC_TYPE
    from tileiras_async.fuzz.mutate import Source, _copy, _varint_at, build, join_table, split_table, varint_bytes
    layout = _copy(Source.of("k", data).layout)
    sec = layout.section(SEC_TYPE)
    entries = split_table(bytes(sec.payload))[0]
    entries[index] = varint_bytes(tag) + entries[index][_varint_at(entries[index], 0)[1]:]
    sec.payload = join_table(entries)
    return build(layout)


def _i32_kernel() -> tuple[bytes, int]:
    """A kernel with an i32 tile constant, and the index of the tile type in its Type table."""
    import numpy as np
    from tileiras_async.bytecode.reader import read_module
    mb = ModuleBuilder()
    with mb.kernel("k", []) as k:
        k.constant(np.int32(1), tile(T.I32))
        k.op("return")
    data = write_module(mb.module)
    return data, read_module(data).functions[0].body.ops[0].results[0].type


def test_type_tags_are_bytes(tmp_path, capsys):
    """A type tag with high bits is read by its low byte (the file is valid), an unknown one named by it."""
    from tileiras_async.bytecode.reader import SEC_TYPE
    from tileiras_async.fuzz.mutate import Source, _varint_at, split_table
    data, _ = _i32_kernel()
    entries = split_table(bytes(Source.of("k", data).layout.section(SEC_TYPE).payload))[0]
    tags = [_varint_at(e, 0)[0] for e in entries]
    path = tmp_path / "t.tileirbc"
    for i, tag in enumerate(tags):
        path.write_bytes(_with_type_tag(data, i, tag + (1 << 8) + (7 << 32)))
        rc, _ = _disasm_both(path, capsys)
        assert rc == 0, (i, tag)
    path.write_bytes(_with_type_tag(data, len(tags) - 1, 40 + 256))
    rc, err = _disasm_both(path, capsys)
    assert rc == 3 and err.splitlines()[0] == "error: unknown type tag: 40"


def test_segment_sizes_wrap_to_32_signed_bits(tmp_path, capsys):
    """A variadic segment's size is a signed 32-bit count added to the operands read before it: a
    negative one that stays at or above zero reads nothing and fails verification as MLIR's
    AttrSizedOperandSegments does; one below zero exceeds the capacity; 2^32 is 0."""
    from tileiras_async.fuzz.mutate import Source, _replace_field, varint_bytes
    mb = ModuleBuilder()
    with mb.kernel("k", [tile(T.PointerType(T.F32)), tile(T.I32)]) as k:
        base, n = k.args
        k.op("make_tensor_view", [T.TensorViewType(T.F32, (T.DYNAMIC,), (1,))], base=base, dynamicShape=[n],
             dynamicStrides=[])
        k.op("return")
    src = Source.of("k", write_module(mb.module))
    shape_count, strides_count = [f for f in src.fields if f.what == "operand count"][:2]   # return has one too
    path = tmp_path / "seg.tileirbc"
    for field, value, expect in [
            (strides_count, 2**32, None),
            (strides_count, 2**32 - 2, "op 'operandSegmentSizes' attribute cannot have negative elements"),
            (strides_count, 2**64 - 1, "op 'operandSegmentSizes' attribute cannot have negative elements"),
            (strides_count, 2**32 - 3, "failed to read operands for dynamicStrides segment, exceeds maximum "
                                       "supported capacity"),
            (shape_count, 2**32 - 2, "failed to read operands for dynamicShape segment, exceeds maximum "
                                     "supported capacity"),
            (strides_count, 2**31, "failed to read operands for dynamicStrides segment, exceeds maximum "
                                   "supported capacity")]:
        path.write_bytes(_replace_field(src, field, varint_bytes(value), fixup=True))
        rc, err = _disasm_both(path, capsys)
        if expect is None:
            assert rc == 0, value
        else:
            assert rc == 3 and expect in err.splitlines()[0], (value, err)


# (entry argument types, the first stderr line): a rank-1 tile is the verifier's; an argument that is no tile
# at all passes it and fails NVIDIA's format-invariant check that follows (the first such argument only)
ENTRY_ARGS = [
    ("rank1_tile", [tile(T.F32, 4)], "error: 'cuda_tile.entry' op entry op must have scalar types (rank 0 "
                                     "!cuda_tile.tile)"),
    ("token", [tile(T.I32), T.TOKEN, T.PointerType(T.F32)],
     "error: unsupported type in bytecode for entry argument #1: '!cuda_tile.token'; expected a rank-0 "
     "!cuda_tile.tile type"),
    ("tensor_view", [T.TensorViewType(T.F32, (T.DYNAMIC,), (1,))],
     "error: unsupported type in bytecode for entry argument #0: '!cuda_tile.tensor_view<?xf32, strides=[1]>'; "
     "expected a rank-0 !cuda_tile.tile type"),
    ("verifier_first", [T.TOKEN, tile(T.F32, 4)], "error: 'cuda_tile.entry' op entry op must have scalar types "
                                                  "(rank 0 !cuda_tile.tile)"),
]


@pytest.mark.parametrize("name,args,first", ENTRY_ARGS, ids=[c[0] for c in ENTRY_ARGS])
def test_entry_arguments_must_be_tiles(name, args, first, tmp_path, capsys):
    mb = ModuleBuilder()
    with mb.kernel("k", args) as k:
        k.op("return")
    path = tmp_path / f"{name}.tileirbc"
    path.write_bytes(write_module(mb.module))
    rc, err = _disasm_both(path, capsys)
    assert rc == 3 and err.splitlines()[0] == first
    if "unsupported type" in first:
        assert err.splitlines()[1] == "error: deserialized module does not conform to bytecode format invariants"
