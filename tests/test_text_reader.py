"""cuda_tile IR text read back (ir/text_reader.py): every corpus golden NVIDIA's tileirdisasm printed reads into
the IR our bytecode reader makes of the same module, prints back to the same text and writes a bytecode that
reads back the same; every op of tests/data/ops reads back; bad text is one `error: FILE:LINE:COL:` line;
`tileiras-async opt` takes such text as convert-to-tilegpu's input."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tileiras_async.bytecode.reader import read_module
from tileiras_async.bytecode.writer import write_module
from tileiras_async.cli.batch import run as batch_run
from tileiras_async.ir import attrs as A
from tileiras_async.ir import types as T
from tileiras_async.ir.cuda_tile import CUDA_TILE
from tileiras_async.ir.printer import print_module
from tileiras_async.ir.text_reader import MAX_NESTING, TextError, looks_like_cuda_tile, read_text_module
from tileiras_async.tilegpu.ir import KernelIR
from tileiras_async.tilegpu.options import CodegenOptions
from tileiras_async.tilegpu.printer import print_kernel

from conftest import PUBLIC, positioned_refusals, requires_corpus

OPS = Path(__file__).parent / "data" / "ops"


def _goldens(folder: Path) -> list[Path]:
    # an empty golden: NVIDIA's tool refused the module (nothing to read)
    return [p for p in sorted(folder.glob("*.disasm.txt")) if p.stat().st_size] if folder.is_dir() else []


def _version(path: Path) -> tuple[int, int, int]:
    return (13, int(re.search(r"\.v13\.(\d)\.", path.name).group(1)), 0)


def _everything_as_tilegpu(module) -> list[str]:
    """Each kernel as the tile-GPU printer writes it: every attribute, defaults too, every type."""
    return [print_kernel(KernelIR(module, fn, CodegenOptions())) for fn in module.functions]


@requires_corpus
@pytest.mark.parametrize("path", _goldens(PUBLIC), ids=lambda p: p.name.removesuffix(".disasm.txt"))
def test_corpus_golden_reads_as_the_bytecode_does(path):
    text = path.read_text()
    module = read_text_module(text, str(path), _version(path))
    assert print_module(module) == text
    from_bytecode = read_module(path.with_name(path.name.replace(".disasm.txt", ".tileirbc")).read_bytes())
    assert _everything_as_tilegpu(module) == _everything_as_tilegpu(from_bytecode)
    assert [(f.name, f.type, f.hints) for f in module.functions] == \
        [(f.name, f.type, f.hints) for f in from_bytecode.functions]
    assert print_module(read_module(write_module(module))) == text


@pytest.mark.parametrize("path", _goldens(OPS), ids=lambda p: p.name.removesuffix(".disasm.txt"))
def test_op_golden_prints_back(path):
    text = path.read_text()
    assert print_module(read_text_module(text, str(path), _version(path))) == text


def test_the_op_goldens_cover_every_op_the_text_can_hold():
    seen = set()
    for path in _goldens(OPS):
        module = read_text_module(path.read_text(), str(path), _version(path))
        seen |= {op.name for fn in module.functions for op in fn.walk()}
        seen |= {"global"} if module.globals else set()
    # entry: every kernel; module: a wrapper the disassembler never prints
    assert {spec.name for spec in CUDA_TILE} - seen - {"entry", "module"} == set()


def test_what_the_text_leaves_out_comes_back():
    """Default attributes, unit attributes, implicit terminators, result types from traits and kinds."""
    text = """entry @k(%arg0: tile<f32>, %arg1: tile<i32>) {
  %0 = make_token : token
  %1 = addf %arg0, %arg0  : tile<f32>
  %blockId_x, %blockId_y, %blockId_z = get_tile_block_id : tile<i32>
  %cst_0_i32 = constant <i32: 0> : tile<i32>
  %cst_1_i32 = constant <i32: 1> : tile<i32>
  %for = for %loopIdx in (%cst_0_i32 to %arg1, step %cst_1_i32) : tile<i32> iter_values(%iterArg0 = %1) -> (tile<f32>) {
    %5 = mulf %iterArg0, %iterArg0 rounding<zero> flush_to_zero : tile<f32>
    continue %5 : tile<f32>
  }
  %2 = muli %blockId_x, %blockId_y overflow<no_signed_wrap> : tile<i32>
  %3 = memory_fence_alias_tko %0
  %4 = cmpi equal %2, %2, signed : tile<i32> -> tile<i1>
  if %4 {
    %5 = negf %arg0 : tile<f32>
  }
  return
}
"""
    module = read_text_module(text, "k.ct")
    assert print_module(module) == text
    ops = {op.name: op for op in module.functions[0].walk()}
    assert set(ops["addf"].attrs) == {"flush_to_zero", "rounding_mode"} and ops["addf"].attrs["flush_to_zero"] is False
    assert ops["addf"].attrs["rounding_mode"].name == "nearest_even"
    assert ops["mulf"].attrs["flush_to_zero"] is True and ops["mulf"].attrs["rounding_mode"].name == "zero"
    assert ops["muli"].attrs["overflow"].name == "no_signed_wrap"
    assert [r.type for r in ops["get_tile_block_id"].results] == [T.TileType((), T.I32)] * 3
    assert ops["for"].results[0].type == T.TileType((), T.F32)
    assert ops["memory_fence_alias_tko"].results[0].type == T.TOKEN
    body = ops["for"].regions[0].blocks[0]
    assert [a.type for a in body.args] == [T.TileType((), T.I32), T.TileType((), T.F32)]
    assert body.ops[-1].name == "continue" and body.ops[-1].operand_values() == [body.ops[0].result]
    # an if's empty yield is not printed, and comes back; it has no else
    branch = ops["if"]
    assert [op.name for op in branch.regions[0].blocks[0].ops] == ["negf", "yield"]
    assert branch.regions[1].blocks == []


def test_hints_and_globals_read_back():
    text = ('global private  constant @table alignment = 16 <i32: [1, 2, 3, 4]> : tile<4xi32>\n'
            'entry @k(%arg0: tile<ptr<f32>>) optimization_hints=<sm_100 = {num_cta_in_cga = 2, occupancy = 4}, '
            'sm_90 = {}> {\n  return\n}\n')
    module = read_text_module(text, "k.ct")
    assert print_module(module) == text
    g = module.globals[0]
    assert (g.name, g.alignment, g.constant, g.visibility) == (b"table", 16, True, 1)
    assert module.functions[0].hints == A.OptimizationHintsAttr((
        (b"sm_100", A.DictAttr(((b"num_cta_in_cga", A.IntegerAttr(T.I32, 2)),
                                 (b"occupancy", A.IntegerAttr(T.I32, 4))))),
        (b"sm_90", A.DictAttr(()))))


_K = "entry @k(%arg0: tile<f32>) {\n"


@pytest.mark.parametrize("body, where, what", [
    ("  %0 = nope %arg0 : tile<f32>\n", "2:8", "unknown op 'nope'"),
    ("  %0 = negf %arg9 : tile<f32>\n", "2:13", "use of undefined value '%arg9'"),
    ("  %0 = negf %arg0 : tile<f33>\n", "2:26", "unknown type 'f33'"),
    ("  %0 = negf %arg0 : tile<f32>\n  %0 = negf %arg0 : tile<f32>\n", "3:3", "'%0' defined twice"),
    ("  %0 = addf %arg0, %arg0 rounding<sideways> : tile<f32>\n", "2:35", "unknown RoundingMode 'sideways'"),
    ("  %0 = negf %arg0 tile<f32>\n", "2:19", "expected ':'"),
    ("  %0 = negf %arg0 : tile<f32>\n", "3:1", "expected '}'"),
    ("  %0 = constant <i32: [1, 2]> : tile<4xi32>\n", "2:17", "2 elements for 4"),
    ("  %0 = constant <i32: 1.5> : tile<i32>\n", "2:17", "an element that is not a"),
    ("  %0 = negf %arg0 : tile<f32> loc(#loc1)\n", "2:31", "source locations (tileirdisasm -g) are not read"),
])
def test_bad_text_is_one_positioned_error(body, where, what):
    text = _K + body + ("}\n" if what != "expected '}'" else "")
    with pytest.raises(TextError) as e:
        read_text_module(text, "in.ct")
    assert str(e.value).startswith(f"in.ct:{where}: ") and what in str(e.value), str(e.value)


def _nested_ifs(depth: int) -> str:
    return _K + "  %c = constant <i1: true> : tile<i1>\n" + "  if %c {\n" * depth + "  }\n" * depth + "  return\n}\n"


@pytest.mark.parametrize("recursion_limit", [None, 100_000])   # as a deep compile (deepstack) may have raised it
def test_deep_nesting_is_an_error_not_a_crash(recursion_limit):
    old = sys.getrecursionlimit()
    try:
        if recursion_limit:
            sys.setrecursionlimit(recursion_limit)
        read_text_module(_nested_ifs(MAX_NESTING - 2), "deep.ct")
        with pytest.raises(TextError, match=rf"regions nested more than {MAX_NESTING} deep"):
            read_text_module(_nested_ifs(3000), "deep.ct")
    finally:
        sys.setrecursionlimit(old)


def test_which_text_is_which():
    assert looks_like_cuda_tile("// RUN: opt\n\nentry @k() {\n}\n")
    assert looks_like_cuda_tile("global @g <i32: 0> : tile<i32>\n")
    assert not looks_like_cuda_tile('tilegpu.options {target = "sm_90"}\n')


def _cuda_tile_kernel() -> str:
    """A pass case's input without its RUN and CHECK lines."""
    text = (Path(__file__).parent / "passes" / "convert-to-tilegpu" / "elementwise.tir").read_text()
    return "".join(line for line in text.splitlines(True) if not line.startswith("//"))


def test_opt_reads_cuda_tile_text(tmp_path, capsys):
    (tmp_path / "k.ct").write_text(_cuda_tile_kernel())
    assert batch_run(["opt", str(tmp_path / "k.ct"), "--passes", "convert-to-tilegpu", "--gpu-name", "sm_80"]) == 0
    out = capsys.readouterr().out
    assert out.startswith('tilegpu.options {target = "sm_80", ') and '"cuda_tile.fma"' in out
    # with no pass: the kernel as the tile-GPU IR shows it, which opt reads again
    assert batch_run(["opt", str(tmp_path / "k.ct")]) == 0
    first = capsys.readouterr().out
    (tmp_path / "k.tir").write_text(first)
    assert batch_run(["opt", str(tmp_path / "k.tir")]) == 0
    assert capsys.readouterr().out == first


@pytest.mark.parametrize("edit, what", [
    (("= fma", "= frobf"), r"k\.ct:13:8: unknown op 'frobf'"),
    (("fma %", "fma %nine, %"), r"k\.ct:13:12: use of undefined value '%nine'"),
    (("  return", "  %9 = subf %tile, %blockId_x : tile<128xf16>\n  return"), r"k\.ct: 'cuda_tile\.subf' op "),
])
def test_opt_on_bad_cuda_tile_text_is_one_error_line(tmp_path, capsys, edit, what):
    text = _cuda_tile_kernel()
    assert edit[0] in text
    (tmp_path / "k.ct").write_text(text.replace(edit[0], edit[1], 1))
    assert batch_run(["opt", str(tmp_path / "k.ct"), "--passes", "convert-to-tilegpu"]) == 1
    err = capsys.readouterr().err
    assert re.match(r"error: " + str(tmp_path).replace("\\", "\\\\") + "/" + what, err) and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_opt_reads_one_kernel_at_a_time(tmp_path, capsys):
    body = _cuda_tile_kernel()
    (tmp_path / "two.ct").write_text(body + body.replace("@elementwise", "@other", 1))
    assert batch_run(["opt", str(tmp_path / "two.ct")]) == 1
    assert "2 entries: opt reads one kernel" in capsys.readouterr().err


def test_mangled_text_gets_positioned_errors():
    """Cut, spliced and mutated copies of op goldens: each reads or fails with one TextError."""
    texts = [p.read_text() for p in _goldens(OPS) if ".v13.4." in p.name]
    # nearly every mangling breaks the text
    assert positioned_refusals(read_text_module, texts, 400, TextError, "m.ct", '%#<>[]{}(),:="0x?-.@') > 250
