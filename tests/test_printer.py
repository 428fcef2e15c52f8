"""The printer reproduces NVIDIA tileirdisasm 13.5 stdout byte for byte."""
from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from tileiras_async.bytecode.reader import read_module
from tileiras_async.ir import attrs as A
from tileiras_async.ir import enums as E
from tileiras_async.ir import types as T
from tileiras_async.ir.core import Block, Function, Module, Operation, Region
from tileiras_async.ir.printer import format_float, print_module

CORPUS = Path(__file__).parents[1].parent / "shared" / "corpus"
PUBLIC = CORPUS / "out" / "public"
OPS = Path(__file__).parent / "data" / "ops"


def _goldens(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.tileirbc") if p.with_name(p.stem + ".disasm.txt").is_file())


def _rejected() -> dict[str, str]:
    """Corpus files tileirdisasm refuses (its verifier runs before printing, so stdout is empty)."""
    manifest = PUBLIC / "manifest.json"
    if not manifest.is_file():
        return {}
    out = {}
    for entry in json.loads(manifest.read_text())["entries"]:
        disasm = entry.get("disasm") or {}
        if disasm.get("rc", 0) != 0:
            reason = (disasm.get("stderr") or "").strip().splitlines()
            out[Path(entry["file"]).name] = reason[0].split(": error: ")[-1] if reason else "rejected"
    return out


REJECTED = _rejected()


def _check(path: Path) -> None:
    golden = path.with_name(path.stem + ".disasm.txt").read_text()
    assert print_module(read_module(path.read_bytes())) == golden


@pytest.mark.skipif(not PUBLIC.is_dir(), reason=f"corpus not found at {PUBLIC}")
@pytest.mark.parametrize("path", _goldens(PUBLIC), ids=lambda p: p.stem)
def test_corpus_golden(path: Path):
    if path.name in REJECTED:
        pytest.skip(f"tileirdisasm's verifier rejects this module, so its golden is empty: {REJECTED[path.name]}")
    _check(path)


@pytest.mark.skipif(not _goldens(OPS), reason=f"no op goldens under {OPS}")
@pytest.mark.parametrize("path", _goldens(OPS), ids=lambda p: p.stem)
def test_ops_golden(path: Path):
    _check(path)


# ---------------------------------------------------------------- built modules

I32 = T.TileType((), T.I32)
I1 = T.TileType((), T.I1)


def _op(block: Block, name: str, operands=None, attrs=None, results=(), regions=None) -> Operation:
    op = Operation(name, operands or {}, attrs or {}, list(results), regions)
    block.ops.append(op)
    return op


def _const(block: Block, value: int, t=I32) -> Operation:
    return _op(block, "constant", attrs={"value": A.DenseElements(t, struct.pack("<i", value))}, results=[t])


def _reshape(block: Block, v) -> Operation:
    return _op(block, "reshape", {"source": v}, results=[T.TileType((1,), T.I32)])


def _module(args, build) -> str:
    body = Block(list(args))
    build(body)
    body.ops.append(Operation("return", {"operands": []}))
    fn = Function(b"k", T.FunctionType(tuple(args), ()), body)
    return print_module(Module(functions=[fn]))


def _region(terminator: str, arg_types=(), build=None) -> Region:
    block = Block(list(arg_types))
    operands = build(block) if build else []
    block.ops.append(Operation(terminator, {"operands": operands}))
    return Region([block])


def test_sibling_regions_restart_from_parent_counters():
    """Both branches of an if start from the counters the parent region ended with."""
    def build(b):
        _reshape(b, b.args[0])
        then = _region("yield", build=lambda t: [_reshape(t, b.args[0]).result, _const(t, 0).result][1:])
        other = _region("yield", build=lambda e: [_reshape(e, b.args[0]) and _const(e, 1).result])
        iff = _op(b, "if", {"condition": b.args[1]}, results=[I32], regions=[then, other])
        _reshape(b, iff.result)
    text = _module([I32, I1], build)
    assert "%reshape = reshape %arg0" in text
    assert "%reshape_0 = reshape %0" in text                 # parent region numbered first
    assert text.count("%reshape_1 = reshape %arg0") == 2     # each branch restarts at conflict id 1
    assert "%cst_0_i32 = constant" in text and "%cst_1_i32 = constant" in text


def test_result_groups_and_uses():
    I64 = T.TileType((), T.I64)

    def build(b):
        c = _op(b, "constant", attrs={"value": A.DenseElements(T.TileType((4,), T.I32), struct.pack("<i", 3))},
                results=[T.TileType((4,), T.I32)]).result
        d = _op(b, "constant", attrs={"value": A.DenseElements(T.TileType((4,), T.I64), struct.pack("<q", -2))},
                results=[T.TileType((4,), T.I64)]).result
        body = _region("yield", [I32, I32, I64, I64], lambda r: [r.args[0], r.args[2]])
        red = _op(b, "reduce", {"operands": [c, d]},
                  {"dim": 0, "identities": (A.IntegerAttr(T.I32, 0), A.IntegerAttr(T.I64, 7))},
                  results=[I32, I64], regions=[body])
        ids = _op(b, "get_tile_block_id", results=[I32] * 3)
        _op(b, "addi", {"lhs": red.results[0], "rhs": ids.results[2]}, {"overflow": E.IntegerOverflow.none},
            results=[I32])
        _op(b, "muli", {"lhs": red.results[1], "rhs": red.results[1]}, {"overflow": E.IntegerOverflow.none},
            results=[I64])
    text = _module([], build)
    # the i64 identity elides its type inside the array
    assert "%reduce:2 = reduce %cst_3_i32, %cst_-2_i64 dim=0 identities=[0 : i32, 7] :" in text
    assert "(%reduce_lhs0: tile<i32>, %reduce_rhs0: tile<i32>, %reduce_lhs1: tile<i64>, %reduce_rhs1: tile<i64>) {" in text
    assert "%blockId_x, %blockId_y, %blockId_z = get_tile_block_id : tile<i32>" in text
    assert "%0 = addi %reduce#0, %blockId_z : tile<i32>" in text
    assert "%1 = muli %reduce#1, %reduce#1 : tile<i64>" in text


def test_block_arguments():
    """Entry args are %argN; unnamed region args continue that count; loopIdx is uniqued when nested."""
    def build(b):
        a = b.args[0]

        def outer(body):
            inner = _region("continue", [I32], None)
            _op(body, "for", {"lowerBound": a, "upperBound": a, "step": a, "initValues": []}, {"unsignedCmp": False},
                regions=[inner])
            loop = _region("break", [I32], lambda lb: [])
            _op(body, "loop", {"initValues": [a]}, regions=[loop])
            return []
        _op(b, "for", {"lowerBound": a, "upperBound": a, "step": a, "initValues": []}, {"unsignedCmp": True},
            regions=[_region("continue", [I32], outer)])
    text = _module([I32], build)
    assert "  for unsigned %loopIdx in (%arg0 to %arg0, step %arg0) : tile<i32> {\n" in text
    assert "    for %loopIdx_0 in (%arg0 to %arg0, step %arg0) : tile<i32> {\n    }\n" in text
    assert "    loop iter_values(%arg1 = %arg0) : tile<i32> {\n      break\n    }\n" in text


def test_assume_names_follow_the_producer():
    def build(b):
        c = _const(b, 5)
        first = _op(b, "assume", {"value": c.result}, {"predicate": A.BoundedAttr(0, None)}, results=[I32])
        _op(b, "assume", {"value": first.result}, {"predicate": A.DivByAttr(4)}, results=[I32])
        _op(b, "assume", {"value": b.args[0]}, {"predicate": A.BoundedAttr(None, 9)}, results=[I32])
        iff = _op(b, "if", {"condition": b.args[1]}, results=[I32],
                  regions=[_region("yield", build=lambda t: [c.result]), _region("yield", build=lambda e: [c.result])])
        _op(b, "assume", {"value": iff.result}, {"predicate": A.BoundedAttr(0, 1)}, results=[I32])
    text = _module([I32, I1], build)
    assert "%assume_cst_5_i32 = assume bounded<0, ?>, %cst_5_i32" in text
    assert "%assume_assume_cst_5_i32 = assume div_by<4>, %assume_cst_5_i32" in text
    assert "%assume = assume bounded<?, 9>, %arg0" in text
    assert "%assume_ = assume bounded<0, 1>, %0" in text   # if is an OpAsmOpInterface op without names


def test_template_spacing_follows_optional_groups():
    """An absent optional group still advances MLIR's spacing state (hence the double spaces)."""
    def build(b):
        f = b.args[0]
        _op(b, "addf", {"lhs": f, "rhs": f}, {"flush_to_zero": False, "rounding_mode": E.RoundingMode.nearest_even},
            results=[f.type])
        _op(b, "addf", {"lhs": f, "rhs": f}, {"flush_to_zero": True, "rounding_mode": E.RoundingMode.zero},
            results=[f.type])
        _op(b, "divi", {"lhs": b.args[1], "rhs": b.args[1]},
            {"signedness": E.Signedness.unsigned, "rounding": E.RoundingMode.positive_inf}, results=[I32])
    text = _module([T.TileType((), T.F32), I32], build)
    assert "%0 = addf %arg0, %arg0  : tile<f32>" in text
    assert "%1 = addf %arg0, %arg0 rounding<zero> flush_to_zero : tile<f32>" in text
    assert "%2 = divi %arg1, %arg1 unsigned rounding<positive_inf> : tile<i32>" in text


@pytest.mark.parametrize("type_name, bits, text", [
    ("f32", 0x3F800000, "1.000000e+00"),
    ("f32", 0x3DCCCCCD, "1.000000e-01"),
    ("f32", 0x7F7FFFFF, "3.40282347E+38"),      # 6 digits do not round-trip: shortest APFloat form
    ("f32", 0x00000001, "1.401300e-45"),
    ("f32", 0xFF800000, "0xFF800000"),          # infinities and NaNs print as hex
    ("f16", 0xFC00, "0xFC00"),
    ("f64", 0x400921FB54442D18, "3.1415926535897931"),
    ("f8E8M0FNU", 0xFE, "1.701410e+38"),
    ("bf16", 0x8000, "-0.000000e+00"),
])
def test_float_spelling(type_name, bits, text):
    assert format_float(type_name, bits)[0] == text


def test_every_op_has_a_parsable_format():
    from tileiras_async.bytecode.opspec import OPS_BY_NAME
    from tileiras_async.ir.printer import CUSTOM_PRINTERS, _format

    for spec in OPS_BY_NAME.values():
        fmt = _format(spec)
        assert spec.format, spec.name
        assert fmt.elems or fmt.custom in CUSTOM_PRINTERS, spec.name
