"""The tile-GPU IR's text (tilegpu/printer.py): decimal constants, readable predicates, layouts declared once,
records printed field by field, op references as SSA names; --print-ir-after-change, --print-debuginfo and
--print-llvm on both command lines."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import PUBLIC, requires_corpus

from tileiras_async.frontend import load
from tileiras_async.ir import types as T
from tileiras_async.ir.attrs import BoundedAttr, DivByAttr, FloatAttr
from tileiras_async.ir.builder import ModuleBuilder, tile
from tileiras_async.ir.core import Operation
from tileiras_async.tilegpu.ir import KernelIR, clone_function
from tileiras_async.tilegpu.options import CodegenOptions
from tileiras_async.tilegpu.passes import IRPrinting, pipeline_for, run_pipeline
from tileiras_async.tilegpu.analysis.software_pipeline import Geometry
from tileiras_async.tilegpu.printer import print_kernel

BIN = Path(sys.executable).parent
MATMUL = PUBLIC / "matmul_bf16_64x64x64.v13.4.tileirbc"
CORPUS_KERNELS = ("matmul_bf16_64x64x64", "softmax_rows_f16_512", "argmax_rows_f16_256")
ALIAS = re.compile(r"#[a-z_]+\d+\b")


def _kernel(module, **opts) -> KernelIR:
    return KernelIR(module, clone_function(module.functions[0]), CodegenOptions(**opts))


def _constants_module():
    mb = ModuleBuilder((13, 4, 0))
    i32 = tile(T.I32)
    with mb.kernel("consts", [tile(T.PointerType(T.F32)), i32]) as kb:
        three = kb.constant(np.int32(3), i32)
        kb.constant(np.float32(1.0), tile(T.F32, 4, 4))
        kb.constant(np.array([0, 1, 2, -3], dtype=np.int32), tile(T.I32, 4))
        kb.constant(np.float32(0.1), tile(T.F32))
        kb.constant(np.float16(-np.inf), tile(T.F16))
        kb.op("assume", [i32], value=kb.args[1], predicate=DivByAttr(16))
        kb.op("assume", [i32], value=three, predicate=BoundedAttr(0, None))
        kb.op("return")
    return mb.module


def test_constants_and_predicates_print_as_decimal_text():
    text = print_kernel(_kernel(_constants_module()))
    ops = {line.split(" = ", 1)[1] for line in text.splitlines() if " = cuda_tile." in line}
    assert ops == {"cuda_tile.constant 3 : tile<i32>", "cuda_tile.constant dense<1.0> : tile<4x4xf32>",
                   "cuda_tile.constant dense<[0, 1, 2, -3]> : tile<4xi32>", "cuda_tile.constant 0.1 : tile<f32>",
                   "cuda_tile.constant -inf : tile<f16>", "cuda_tile.assume div_by<16>, %1 : tile<i32>",
                   "cuda_tile.assume bounded<0, ?>, %2 : tile<i32>"}, text
    assert "0x" not in text and "Attr(" not in text


def test_records_print_field_by_field_and_ops_by_the_names_of_their_results():
    """A dataclass attribute prints as #tilegpu.<kind><field = value, ...> (declared once before the kernel
    when several attributes hold the same one); an op in the kernel as its first result's name (even one
    further down), an op no longer in the kernel under tilegpu.detached."""
    k = _kernel(_constants_module())
    ops = k.fn.body.ops
    first, later = ops[0], ops[2]
    gone = Operation("addi", {"lhs": first.result, "rhs": first.result}, {}, [tile(T.I32)])
    first.attrs.update(plan=Geometry(stages=4, chunks=2, kc=32, unit_bytes=8192), ahead=later, gone=gone,
                       widths={"a": 16, "b": 8}, identities=[FloatAttr(T.F16, 0x3C00)])
    ring = Geometry(stages=3, chunks=1, kc=16, unit_bytes=1024)
    ops[1].attrs["ring"] = later.attrs["ring"] = ring
    text = print_kernel(k)
    options, text = text.split("\n", 1)
    assert options.startswith('tilegpu.options {target = "sm_100", num_warps = 4, ')   # what the parser needs
    assert text.startswith("#geometry0 = #tilegpu.geometry<stages = 3, chunks = 1, kc = 16, unit_bytes = 1024, "
                           "align = 0, slack = 0>\ntilegpu.kernel @consts(")
    assert text.count("ring = #geometry0") == 2
    assert ("plan = #tilegpu.geometry<stages = 4, chunks = 2, kc = 32, unit_bytes = 8192, align = 0, slack = 0>"
            in text)
    assert "widths = {a = 16, b = 8}" in text and "identities = [1.0 : f16]" in text
    later_name = re.search(r"(%\d+) = cuda_tile\.constant dense<\[0, 1, 2, -3\]>", text).group(1)
    assert f"ahead = {later_name}," in text
    assert "gone = %d0" in text
    kernel, detached = text.split("tilegpu.detached {\n")
    assert detached == '  %d0 = "cuda_tile.addi"(%2, %2) : (tile<i32>, tile<i32>) -> (tile<i32>)\n}\n'
    assert "<Operation" not in text


def _snapshots(name: str, target: str, **printing) -> tuple[str, list]:
    """(the IR before any pass, the snapshots) of a corpus kernel through the target's pipeline."""
    module = load((PUBLIC / f"{name}.v13.4.tileirbc").read_bytes(), "x", with_debug_locations=True)
    k = KernelIR(module, clone_function(module.functions[0]), CodegenOptions(target=target))
    initial = print_kernel(k, debuginfo=printing.get("debuginfo", False))
    return initial, run_pipeline(k, IRPrinting(**printing)).snapshots


@requires_corpus
@pytest.mark.parametrize("target", ["sm_80", "sm_90", "sm_100"])
@pytest.mark.parametrize("name", CORPUS_KERNELS)
def test_corpus_dumps_are_text_and_after_change_prints_what_changed(name, target):
    initial, after_all = _snapshots(name, target, after_all=True)
    assert [s.pass_name for s in after_all] == pipeline_for(target)
    for s in after_all:
        for repr_text in ("<Operation", "Attr(", "0x", "#tilegpu.opaque", "object at"):
            assert repr_text not in s.text, (s.pass_name, repr_text)
        declared = re.findall(r"^(#\w+) = #tilegpu\.\w+<", s.text, re.M)
        assert len(declared) == len(set(declared)), s.pass_name        # each layout/record declared once ...
        assert set(ALIAS.findall(s.text)) <= set(declared), s.pass_name  # ... and every one used is declared
        assert not re.search(r"tile<[^>]*layout<", s.text)            # types name layouts, never spell them
    _, after_change = _snapshots(name, target, after_change=True)
    texts = [initial] + [s.text for s in after_all]
    changed = [s.pass_name for prev, s in zip(texts, after_all) if s.text != prev]
    assert [s.pass_name for s in after_change] == changed
    assert 0 < len(after_change) < len(after_all)


@requires_corpus
def test_debuginfo_gives_every_op_a_location():
    _, plain = _snapshots("matmul_bf16_64x64x64", "sm_90", after={"pipeline"})
    _, located = _snapshots("matmul_bf16_64x64x64", "sm_90", after={"pipeline"}, debuginfo=True)
    plain_lines, located_lines = plain[0].text.splitlines(), located[0].text.splitlines()
    assert len(plain_lines) == len(located_lines)
    ops = [line for line in located_lines if re.match(r"\s+(%\S+ = )?(\"|cuda_tile\.)", line)
           and not line.endswith("({")]
    assert ops and all(re.search(r' loc\(("[^"]+":\d+:\d+|unknown)\)$', line) for line in ops)
    assert any('loc("kernels_public.py":' in line for line in ops)
    assert "loc(" not in plain[0].text


# -- the command lines ------------------------------------------------------------------------------------

def _banners(stderr: str) -> list[str]:
    return re.findall(r"// -----// IR Dump After (\S+) \(\w+\) //----- //", stderr)


@requires_corpus
def test_dropin_prints_changed_passes_locations_and_llvm(tmp_path):
    proc = subprocess.run([str(BIN / "tileiras"), "--gpu-name", "sm_100", str(MATMUL), "-o", str(tmp_path / "k.cubin"),
                           "--print-ir-after-change", "--print-debuginfo", "--print-llvm"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    banners = _banners(proc.stderr)
    assert banners[-1] == "emit-llvm" and 0 < len(banners) - 1 < len(pipeline_for("sm_100"))
    assert set(banners[:-1]) <= set(pipeline_for("sm_100"))
    tilegpu, llvm = proc.stderr.rsplit("IR Dump After emit-llvm", 1)
    assert " loc(" in tilegpu and 'target triple = "nvptx64-nvidia-cuda"' in llvm and "define " in llvm


def test_print_ir_after_emit_llvm_is_the_llvm_ir_on_both_command_lines(tmp_path):
    """--print-ir-after=emit-llvm names the LLVM IR as --print-llvm does (emit-llvm is the step after the last
    pass); a name that is neither a pass nor emit-llvm is still one error line."""
    axpby = Path(__file__).resolve().parents[1] / "examples" / "axpby_f32.v13.4.tileirbc"
    proc = subprocess.run([str(BIN / "tileiras"), "--gpu-name", "sm_90", str(axpby), "-o", str(tmp_path / "k.cubin"),
                           "--print-ir-after=dce,emit-llvm"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert _banners(proc.stderr) == ["dce", "emit-llvm"]
    assert "define " in proc.stderr.rsplit("IR Dump After emit-llvm", 1)[1]
    proc = subprocess.run([str(BIN / "tileiras-async"), "compile", str(axpby), "--gpu-name", "sm_90", "-j", "1",
                           "--no-cache", "--out-dir", str(tmp_path / "out"), "--print-ir-after", "emit-llvm",
                           "--print-ir-dir", str(tmp_path / "ir")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    names = [p.name for p in (tmp_path / "ir").iterdir()]
    assert len(names) == 1 and names[0].endswith("-after-emit-llvm.ll"), names
    proc = subprocess.run([str(BIN / "tileiras"), "--gpu-name", "sm_90", str(axpby), "-o", str(tmp_path / "k.cubin"),
                           "--print-ir-before=emit-llvm"], capture_output=True, text=True, timeout=600)
    assert proc.returncode != 0 and proc.stderr.startswith("error: unknown pass 'emit-llvm' for --print-ir-before")
    assert proc.stderr.count("\n") == 1


@requires_corpus
def test_batch_prints_changed_passes_and_llvm_to_files_and_the_ptx_stays(tmp_path):
    def compile_(out: str, *extra: str) -> str:
        proc = subprocess.run([str(BIN / "tileiras-async"), "compile", str(MATMUL), "--gpu-name", "sm_90", "-j", "1",
                               "--no-cache", "--keep-ptx", "--out-dir", str(tmp_path / out), *extra],
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return next((tmp_path / out).glob("*.ptx")).read_text()

    irdir = tmp_path / "ir"
    printed = compile_("printed", "--print-ir-after-change", "--print-llvm", "--print-ir-dir", str(irdir))
    assert printed == compile_("plain")      # printing never changes the code
    names = sorted(p.name for p in irdir.iterdir())
    assert names[-1].endswith("-after-emit-llvm.ll") and "define " in (irdir / names[-1]).read_text()
    assert 0 < len(names) - 1 < len(pipeline_for("sm_90"))
    assert all(n.endswith(".tilegpu") for n in names[:-1])


@requires_corpus
@pytest.mark.parametrize("name, target", [("matmul_bf16_64x64x64", "sm_100"), ("matmul_bf16_64x64x64", "sm_80"),
                                          ("softmax_rows_f16_512", "sm_90")])
def test_printing_never_changes_the_code(name, target):
    from tileiras_async.driver import kernel_llvm_ir
    module = load((PUBLIC / f"{name}.v13.4.tileirbc").read_bytes(), "x", with_debug_locations=True)
    fn = module.functions[0]
    plain = kernel_llvm_ir(module, fn, CodegenOptions(target=target))
    snapshots: list = []
    printed = kernel_llvm_ir(module, fn, CodegenOptions(target=target), snapshots=snapshots,
                             printing=IRPrinting(before=frozenset(pipeline_for(target)), after_all=True,
                                                 after_change=True, debuginfo=True))
    assert snapshots and printed == plain
