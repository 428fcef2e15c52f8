"""The printer reproduces NVIDIA tileirdisasm 13.5 stdout byte for byte."""
from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import pytest
from conftest import manifest_entries, nvidia_bin, nvidia_env

from tileiras_async.bytecode.reader import read_module
from tileiras_async.ir import attrs as A
from tileiras_async.ir import enums as E
from tileiras_async.ir import types as T
from tileiras_async.ir.core import (
    Block,
    DebugEntry,
    Function,
    Global,
    Module,
    Operation,
    Region,
)
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
    out = {}
    for entry in manifest_entries(PUBLIC):
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
    from tileiras_async.ir.cuda_tile import CUDA_TILE
    from tileiras_async.ir.printer import CUSTOM_PRINTERS, _format

    for spec in CUDA_TILE:
        fmt = _format(spec)
        assert spec.format, spec.name
        assert fmt.elems or fmt.custom in CUSTOM_PRINTERS, spec.name


# ------------------------------------------------------- -g: debug locations

REAL_DISASM = nvidia_bin("tileirdisasm")
EXAMPLES = Path(__file__).parents[1] / "examples"


def _debug_goldens() -> list[Path]:
    return sorted(OPS.glob("*.disasm-g.txt")) if OPS.is_dir() else []


@pytest.mark.skipif(not _debug_goldens(), reason=f"no -g goldens under {OPS}")
@pytest.mark.parametrize("golden", _debug_goldens(), ids=lambda p: p.name.split(".disasm")[0])
def test_debug_info_golden(golden: Path):
    """`tileirdisasm -g` stdout, committed (families debug_info and control_flow, every version)."""
    bytecode = golden.with_name(golden.name.replace(".disasm-g.txt", ".tileirbc"))
    assert print_module(read_module(bytecode.read_bytes()), debug_info=True) == golden.read_text()


def _oracle_inputs() -> list[Path]:
    files = []
    for folder in (PUBLIC, OPS, EXAMPLES):
        if folder.is_dir():
            files.extend(sorted(folder.glob("*.tileirbc")))
    return files


@pytest.mark.skipif(REAL_DISASM is None, reason="NVIDIA's tileirdisasm is not installed")
@pytest.mark.parametrize("path", _oracle_inputs(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_debug_info_matches_tileirdisasm(path: Path, capsys):
    """Every corpus/op/example file: `tileirdisasm-async -g` == `tileirdisasm -g` (stdout, stderr, rc)."""
    from tileiras_async.cli.disasm import main

    real = subprocess.run([str(REAL_DISASM), "-g", str(path)], capture_output=True, text=True,
                          env=nvidia_env(), timeout=120, check=False)
    if real.returncode == 0:   # the printer alone, without the CLI
        assert print_module(read_module(path.read_bytes()), debug_info=True) == real.stdout
    rc = main(["-g", str(path)])
    out = capsys.readouterr()
    assert (rc, out.out, out.err) == (real.returncode, real.stdout, real.stderr)


def test_cli_long_option_equals_short(capsys):
    from tileiras_async.cli.disasm import main

    path = OPS / "debug_info.v13.4.tileirbc"
    if not path.is_file():
        pytest.skip("op goldens absent")
    assert main(["--print-debug-info", str(path)]) == 0
    long = capsys.readouterr().out
    assert main([str(path), "-g"]) == 0
    assert capsys.readouterr().out == long == path.with_name("debug_info.v13.4.disasm-g.txt").read_text()


def _debug_module(entries, build, fn_loc=0, strings=None) -> Module:
    """One entry `k(i32, i1)` whose ops `build(block)` makes, with the given Debug entries."""
    body = Block([I32, I1])
    build(body)
    fn = Function(b"k", T.FunctionType((I32, I1), ()), body, loc=fn_loc)
    return Module(functions=[fn], strings=list(_STRINGS if strings is None else strings),
                  debug=[DebugEntry(tag, tuple(fields)) for tag, *fields in entries])


# strings: 0 file, 1 dir, 2 name, 3 linkage (the function's name), 4 "", 5 other file
_STRINGS = [b"k.py", b"/src", b"kern", b"k", b"", b'o"ther.py']
# ids: 1 file, 2 compile unit, 3 subprogram, 4 function loc, 5 lexical block (column 0),
#      6 loc in the block, 7 loc, 8 call site (6 at 7)
_ENTRIES = [(2, 0, 1), (1, 1), (5, 1, 10, 2, 3, 2, 11), (4, 3, 0, 10, 1), (3, 3, 1, 12, 0),
            (4, 5, 5, 13, 2), (4, 3, 0, 14, 3), (6, 6, 7)]


def _at(op: Operation, loc: int) -> Operation:
    op.loc = loc
    return op


def _ret(block: Block, loc: int) -> None:
    block.ops.append(_at(Operation("return", {"operands": []}), loc))


def test_debug_aliases_follow_mlir_alias_initializer():
    """Met in pre-order (the function's location first), sorted by depth then name, numbered per name."""
    def build(b):
        _at(_const(b, 1), 8)   # met right after the function's location, but deepest: numbered last
        _at(_const(b, 2), 0)   # unknown
        _ret(b, 7)
    text = print_module(_debug_module(_ENTRIES, build, fn_loc=4), debug_info=True)
    assert text == (
        "entry @k(%arg0: tile<i32>, %arg1: tile<i1>) {\n"
        "  %cst_1_i32 = constant <i32: 1> : tile<i32> loc(#loc7)\n"
        "  %cst_2_i32 = constant <i32: 2> : tile<i32> loc(#loc3)\n"
        "  return loc(#loc5)\n"
        "} loc(#loc4)\n"
        '#di_file = #cuda_tile.di_file<"k.py" in "/src">\n'                       # depth 0, by name
        '#loc = loc("k.py":10:1)\n'
        '#loc1 = loc("o\\22ther.py":13:2)\n'
        '#loc2 = loc("k.py":14:3)\n'
        "#loc3 = loc(unknown)\n"
        "#di_compile_unit = #cuda_tile.di_compile_unit<file = #di_file>\n"        # depth 1
        '#di_subprogram = #cuda_tile.di_subprogram<file = #di_file, line = 10, name = "kern", '
        "linkageName = \"k\", compileUnit = #di_compile_unit, scopeLine = 11>\n"  # depth 2
        "#di_lexical_block = #cuda_tile.di_lexical_block<scope = #di_subprogram, file = #di_file, line = 12>\n"
        "#loc4 = #cuda_tile.di_loc<#loc in #di_subprogram>\n"
        "#loc5 = #cuda_tile.di_loc<#loc2 in #di_subprogram>\n"
        "#loc6 = #cuda_tile.di_loc<#loc1 in #di_lexical_block>\n"                  # depth 4
        "#loc7 = loc(callsite(#loc6 at #loc5))\n")                                  # depth 5
    assert print_module(_debug_module(_ENTRIES, build, fn_loc=4)) == "".join(
        line.rsplit(" loc(", 1)[0] + "\n" for line in text.splitlines()[:5])


def test_debug_attributes_are_uniqued_by_content():
    """Equal entries are one attribute, so one alias; an empty file name reads as "-"."""
    entries = _ENTRIES[:4] + [(2, 0, 1), (1, 5), (5, 5, 10, 2, 3, 6, 11), (4, 7, 0, 10, 1),  # 5..8: copies of 1..4
                              (4, 3, 4, 20, 2)]
    def build(b):
        _at(_const(b, 1), 8)
        _at(_const(b, 2), 9)
        _ret(b, 4)
    text = print_module(_debug_module(entries, build, fn_loc=4), debug_info=True)
    assert text.split("}")[1] == (
        " loc(#loc2)\n"
        '#di_file = #cuda_tile.di_file<"k.py" in "/src">\n'
        '#loc = loc("k.py":10:1)\n'
        '#loc1 = loc("-":20:2)\n'
        "#di_compile_unit = #cuda_tile.di_compile_unit<file = #di_file>\n"
        '#di_subprogram = #cuda_tile.di_subprogram<file = #di_file, line = 10, name = "kern", '
        'linkageName = "k", compileUnit = #di_compile_unit, scopeLine = 11>\n'
        "#loc2 = #cuda_tile.di_loc<#loc in #di_subprogram>\n"
        "#loc3 = #cuda_tile.di_loc<#loc1 in #di_subprogram>\n")
    assert "tile<i32> loc(#loc2)\n  %cst_2_i32" in text and "loc(#loc3)\n  return loc(#loc2)\n" in text


def test_zero_optional_parameters_are_elided():
    """scopeLine and column are optional (default 0); line is not."""
    entries = [(2, 0, 1), (1, 1), (5, 1, 0, 2, 3, 2, 0), (4, 3, 0, 0, 0), (3, 3, 1, 0, 0), (4, 5, 0, 1, 1)]
    text = print_module(_debug_module(entries, lambda b: _ret(b, 6), fn_loc=4), debug_info=True)
    assert ('#di_subprogram = #cuda_tile.di_subprogram<file = #di_file, line = 0, name = "kern", '
            'linkageName = "k", compileUnit = #di_compile_unit>\n') in text
    assert "#di_lexical_block = #cuda_tile.di_lexical_block<scope = #di_subprogram, file = #di_file, line = 0>\n" in text
    assert '#loc = loc("k.py":0:0)\n' in text


def test_elided_terminators_locations_are_not_met():
    """An implicit, operand-less yield is not printed, so its location gets no alias."""
    def build(b):
        then = Region([Block([])])
        then.blocks[0].ops.append(_at(Operation("yield", {"operands": []}), 7))
        b.ops.append(_at(Operation("if", {"condition": b.args[1]}, regions=[then, Region([])]), 4))
        _ret(b, 4)
    text = print_module(_debug_module(_ENTRIES, build, fn_loc=4), debug_info=True)
    assert "  if %arg1 {\n  } loc(#loc1)\n" in text
    assert "14:3" not in text


def test_no_debug_info_is_all_unknown():
    """Globals have no location; without a Debug section everything is the one unknown location."""
    g = Global(b"g", T.TileType((1,), T.I32), A.DenseElements(T.TileType((1,), T.I32), struct.pack("<i", 7)))
    module = _debug_module([], lambda b: _ret(b, 0))
    module.globals.append(g)
    assert print_module(module, debug_info=True) == (
        "global  @g <i32: 7> : tile<1xi32> loc(#loc)\n"
        "entry @k(%arg0: tile<i32>, %arg1: tile<i1>) {\n"
        "  return loc(#loc)\n"
        "} loc(#loc)\n"
        "#loc = loc(unknown)\n")
