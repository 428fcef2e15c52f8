"""The tile-GPU layer: the pass list, each pass's contract checked on IR text, the printer, and the
--print-ir-* / --num-stages options of both command lines."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import PUBLIC, requires_corpus

from tileiras_async.ir import types as T
from tileiras_async.ir.attrs import FloatAttr
from tileiras_async.ir.builder import ModuleBuilder, tile
from tileiras_async.ir.core import Block, Region
from tileiras_async.ir.enums import MemoryOrderingSemantics as MO
from tileiras_async.ir.enums import RoundingMode
from tileiras_async.tilegpu.decisions import loop_schedules, pipelined_loops
from tileiras_async.tilegpu.ir import KernelIR, clone_function, walk_ops
from tileiras_async.tilegpu.options import CodegenOptions
from tileiras_async.tilegpu.passes import PASS_NAMES, IRPrinting, pipeline_for, run_pipeline
from tileiras_async.tilegpu.printer import print_kernel
from tileiras_async.tilegpu.types import LayoutTile, layout_of

BIN = Path(sys.executable).parent
MATMUL = PUBLIC / "matmul_f16_f32acc_64x64x32.v13.4.tileirbc"


def _kernel(module, **opts) -> KernelIR:
    return KernelIR(module, clone_function(module.functions[0]), CodegenOptions(**opts))


def _passes(k: KernelIR, until: str) -> None:
    """Run the target's pipeline up to and including `until`."""
    from tileiras_async.tilegpu.passes import _load
    for name in pipeline_for("sm_80"):
        _load(name)(k)
        if name == until:
            return
    raise AssertionError(f"no pass {until}")


def _views(kb, elem, shape, tile_shape):
    tv = T.TensorViewType(elem, shape, (shape[1], 1))
    v = kb.op("make_tensor_view", [tv], base=kb.args[0], dynamicShape=[], dynamicStrides=[]).result
    return kb.op("make_partition_view", [T.PartitionViewType(tile_shape, tv, (0, 1))], tensor_view=v).result


def transpose_add_module():
    """y = x^T + x, twice: the transposed tile fixes the layout, x converts to it (once per use)."""
    mb = ModuleBuilder((13, 4, 0))
    i32, t32 = tile(T.I32), tile(T.F32, 32, 32)
    with mb.kernel("transpose_add", [tile(T.PointerType(T.F32)), tile(T.F32)]) as kb:
        pv = _views(kb, T.F32, (64, 64), (32, 32))
        zero = kb.constant(np.int32(0), i32)
        x = kb.op("load_view_tko", [t32, T.TOKEN], view=pv, index=[zero, zero],
                  memory_ordering_semantics=MO.weak).results[0]
        xt = kb.op("permute", [t32], source=x, permutation=[1, 0]).result
        y = kb.op("addf", [t32], lhs=xt, rhs=x, rounding_mode=RoundingMode.nearest_even).result
        y2 = kb.op("addf", [t32], lhs=xt, rhs=x, rounding_mode=RoundingMode.nearest_even).result
        y3 = kb.op("addf", [t32], lhs=y, rhs=y2, rounding_mode=RoundingMode.nearest_even).result
        kb.op("store_view_tko", [T.TOKEN], tile=y3, view=pv, index=[zero, zero], memory_ordering_semantics=MO.weak)
        kb.op("return")
    return mb.module


def test_every_pass_is_a_documented_module():
    from tileiras_async.tilegpu.passes import _ALL
    import importlib
    assert len(set(PASS_NAMES)) == len(PASS_NAMES)
    for name, module in _ALL:
        mod = importlib.import_module(f"tileiras_async.tilegpu.passes.{module}")
        assert mod.__doc__.startswith(name + ":"), f"{module}: the docstring states the pass's name and contract"
        assert "Contract" in mod.__doc__
    for gpu in ("sm_80", "sm_90", "sm_100", "sm_120"):
        assert pipeline_for(gpu)[0] == "convert-to-tilegpu"


def test_convert_to_tilegpu_makes_scalars_uniform():
    k = _kernel(transpose_add_module())
    _passes(k, "convert-to-tilegpu")
    param = k.fn.body.args[1]
    assert isinstance(param.type, LayoutTile) and param.type.layout is None
    text = print_kernel(k)
    assert "%1: tile<f32>" in text and "#tilegpu.linear<" not in text


def test_assign_layouts_types_every_tile_and_makes_conversions_explicit():
    k = _kernel(transpose_add_module(), num_warps=4)
    _passes(k, "assign-layouts")
    ops = list(walk_ops(k.fn.body))
    load = next(o for o in ops if o.name == "load_view_tko")
    blocked = CodegenOptions(num_warps=4).default_layout((32, 32))
    assert layout_of(load.results[0].type) == blocked
    transposed = blocked.transpose((1, 0))
    converts = [o for o in ops if o.name == "tilegpu.convert_layout"]
    # each addf takes the transposed tile's layout: x converts to it, once per use
    assert len(converts) == 2 and all(layout_of(c.result.type) == transposed for c in converts)
    assert all(layout_of(o.result.type) == transposed for o in ops if o.name == "addf")
    text = print_kernel(k)
    assert re.search(r'= "tilegpu.convert_layout"\(%5\) : \(tile<32x32xf32, #blocked0>\) -> \(tile<32x32xf32, #linear0>\)',
                     text), text
    # the next pass merges the two conversions of the same value in the same block
    _passes(k, "remove-layout-conversions")
    assert sum(o.name == "tilegpu.convert_layout" for o in walk_ops(k.fn.body)) == 1


def test_assign_layouts_carries_mma_accumulators_in_the_mma_layout():
    from test_codegen_mma import build_mma_loop
    from tileiras_async.tilegpu.analysis.mma import plan_for
    k = _kernel(build_mma_loop(T.F16, T.F32, 32, 32, 16), target="sm_80")
    _passes(k, "assign-layouts")
    loop = next(o for o in walk_ops(k.fn.body) if o.name == "for")
    mma = next(o for o in walk_ops(k.fn.body) if o.name == "mmaf")
    c = plan_for(k.options, mma).c
    acc_arg = loop.regions[0].block.args[1]
    assert layout_of(acc_arg.type) == c and layout_of(loop.results[0].type) == c
    assert layout_of(mma.result.type) == c
    # the zero splat is made in the mma layout before the loop (an index-like value is computed where it is
    # needed instead of converted), and nothing converts inside the loop
    init = loop.operands["initValues"][0]
    assert init.owner.name == "constant" and layout_of(init.type) == c
    assert not any(o.name == "tilegpu.convert_layout" for o in walk_ops(loop.regions[0].block))


def _attention_loops(name: str, until: str) -> list:
    """The `for` loops of a suite attention kernel on sm_90, after the passes up to `until`."""
    from tileiras_async.bytecode.reader import read_module
    suite = Path(__file__).resolve().parents[1] / "examples" / "suite"
    k = _kernel(read_module((suite / f"{name}.v13.4.tileirbc").read_bytes()), target="sm_90")
    _passes(k, until)
    loops = [o for o in walk_ops(k.fn.body) if o.name == "for"]
    assert loops
    return loops


@pytest.mark.parametrize("name", ["flash_attention_causal_gqa_f16", "flash_attention_ragged_f16"])
def test_attention_loops_carry_and_mask_in_the_mma_layouts(name):
    """Online softmax: the running max and sum are carried in the layout the mma's row reductions produce
    them in, and the causal mask is computed in the mma layout -- the loops move at most the masks' 1-D
    sources between threads, never a 32x32 tile or a carried vector (the first assignment converted them
    on every iteration)."""
    from tileiras_async.tilegpu.analysis.smem import free_conversion
    for loop in _attention_loops(name, "remove-layout-conversions"):
        moving = [o for o in walk_ops(loop.regions[0].block) if o.name == "tilegpu.convert_layout"
                  and not free_conversion(o.operands["source"], layout_of(o.result.type))]
        assert all(o.result.type.shape[0] == 1 for o in moving), [o.result.type for o in moving]


@pytest.mark.parametrize("name", ["flash_attention_causal_gqa_f16", "flash_attention_ragged_f16"])
def test_attention_inner_loops_synchronise_only_inside_their_staging_ops(name):
    """Each attention iteration waits at four barriers in all: one inside each of its two mma stagings and
    its two cross-warp row reductions. Their scratch lies apart (the last one's through the whole loop), so
    insert-barriers needs none of its own in the loop, and the mask moves no data."""
    from tileiras_async.tilegpu.analysis.smem import self_syncing
    for loop in _attention_loops(name, "insert-barriers"):
        body = list(walk_ops(loop.regions[0].block))
        assert not [o for o in body if o.name in ("tilegpu.barrier", "tilegpu.local_store")]
        assert sum(self_syncing(o) for o in body) == 4


@pytest.mark.parametrize("name", ["flash_attention_causal_gqa_f16", "flash_attention_ragged_f16"])
def test_attention_q_is_staged_once_for_both_loops(name):
    """Q, the first mma's A in both attention loops, is defined before them: one stage_operand writes it
    to a buffer before the loops and each loop's QK^T mma reads it from there (staging only K itself);
    P @ V, whose operands both change every iteration, stays an ordinary mma."""
    loops = _attention_loops(name, "hoist-operand-staging")
    inside = {id(o) for loop in loops for o in walk_ops(loop.regions[0].block)}
    buffers = set()
    for loop in loops:
        body = list(walk_ops(loop.regions[0].block))
        assert not [o for o in body if o.name == "tilegpu.stage_operand"]
        prestaged = [o for o in body if o.name == "tilegpu.mma_prestaged"]
        assert len(prestaged) == 1 and prestaged[0].attrs["role"] == "a"
        assert sum(o.name == "mmaf" for o in body) == 1
        buffers.add(prestaged[0].operands["buffer"])
    assert len(buffers) == 1
    alloc = buffers.pop().owner
    assert alloc.name == "tilegpu.local_alloc" and id(alloc) not in inside


def test_complex_halves_are_register_selections_or_share_one_staging():
    """fft_two_stage_f32 splits complex tiles into real and imaginary halves with `extract`: where the
    complex dimension is a register bit the extracts select registers (no shared memory); where it is not,
    the two extracts of one tile store it once and load each half."""
    from tileiras_async.bytecode.reader import read_module
    suite = Path(__file__).resolve().parents[1] / "examples" / "suite"
    k = _kernel(read_module((suite / "fft_two_stage_f32.v13.4.tileirbc").read_bytes()), target="sm_90")
    _passes(k, "materialize-shared-memory")
    ops = list(walk_ops(k.fn.body))
    assert sum(o.name == "extract" for o in ops) == 4
    stores = [o for o in ops if o.name == "tilegpu.local_store" and o.operands["value"].type.shape == (8, 8, 2)]
    assert len(stores) == 1
    loads = [o for o in ops if o.name == "tilegpu.local_load" and o.operands["buffer"] is stores[0].operands["buffer"]]
    assert len(loads) == 2


def _copy_loop(load_after_store: bool, n: int = 128):
    """for i < 4: dst[i] = src[i] (n-element f32 tiles); with `load_after_store` each load's token is that
    of a store earlier in the same iteration, which orders the load after it."""
    mb = ModuleBuilder((13, 4, 0))
    i32, t = tile(T.I32), tile(T.F32, n)
    with mb.kernel("copy_loop", [tile(T.PointerType(T.F32)), tile(T.PointerType(T.F32))]) as kb:
        pvs = []
        for p in kb.args:
            tv = T.TensorViewType(T.F32, (4 * n,), (1,))
            v = kb.op("make_tensor_view", [tv], base=p, dynamicShape=[], dynamicStrides=[]).result
            pvs.append(kb.op("make_partition_view", [T.PartitionViewType((n,), tv, (0,))], tensor_view=v).result)
        zero, one, four = (kb.constant(np.int32(c), i32) for c in (0, 1, 4))
        start = kb.op("make_token", [T.TOKEN]).result
        ones = kb.constant(np.float32(1), t)
        with kb.region([i32]) as body:
            iv = body.block.args[0]
            token = start
            if load_after_store:
                token = body.op("store_view_tko", [T.TOKEN], tile=ones, view=pvs[1], index=[iv], token=start,
                                memory_ordering_semantics=MO.weak).result
            x = body.op("load_view_tko", [t, T.TOKEN], view=pvs[0], index=[iv], token=token,
                        memory_ordering_semantics=MO.weak).results[0]
            body.op("store_view_tko", [T.TOKEN], tile=x, view=pvs[1], index=[iv], memory_ordering_semantics=MO.weak)
            body.op("continue", operands=[])
        kb.op("for", [], regions=[body.built_region], lowerBound=zero, upperBound=four, step=one, initValues=[])
        kb.op("return")
    return mb.module


@pytest.mark.parametrize("ordered", [False, True], ids=["free", "after-a-store"])
def test_loop_loads_are_prefetched_unless_their_token_orders_them(ordered):
    """A serial loop's tile load is issued two iterations ahead (one register per thread per iteration): two
    loads before the loop, the body's for iteration i + 2, its tile carried twice; a load whose token comes
    from a store in the iteration stays where it is."""
    k = _kernel(_copy_loop(ordered), target="sm_90")
    _passes(k, "pipeline")
    loop = next(o for o in walk_ops(k.fn.body) if o.name == "for")
    body_loads = [o for o in loop.regions[0].block.ops if o.name == "load_view_tko"]
    before = [o for o in k.fn.body.ops if o.name == "load_view_tko"]
    if ordered:
        assert not loop.operands["initValues"] and not before and len(body_loads) == 1
        return
    assert len(before) == 2 and len(body_loads) == 1
    assert loop.operands["initValues"] == [ld.results[0] for ld in before]
    cont = loop.regions[0].block.ops[-1]
    assert cont.operands["operands"] == [loop.regions[0].block.args[2], body_loads[0].results[0]]
    assert any(r.name == "LoadsPrefetched" for r in k.remarks)


def test_a_loop_whose_loads_hold_many_registers_is_not_prefetched():
    """512-element f32 tiles over 128 threads are four registers per thread per iteration: two iterations in
    flight would hold eight, past PREFETCH_REGS, so the loop keeps its load in place (no prologue copies)."""
    k = _kernel(_copy_loop(False, n=512), target="sm_90")
    _passes(k, "pipeline")
    loop = next(o for o in walk_ops(k.fn.body) if o.name == "for")
    assert not loop.operands["initValues"]
    assert not [o for o in k.fn.body.ops if o.name == "load_view_tko"]
    assert not any(r.name == "LoadsPrefetched" for r in k.remarks)


def _argmax_kernel() -> KernelIR:
    from tileiras_async.bytecode.reader import read_module
    return _kernel(read_module((PUBLIC / "argmax_rows_f32_128.v13.4.tileirbc").read_bytes()), target="sm_90")


@requires_corpus
def test_back_to_back_reductions_stage_apart_without_a_barrier_between():
    k = _argmax_kernel()
    _passes(k, "insert-barriers")
    first, second = [o for o in k.fn.body.ops if o.name == "reduce"]
    a, b = (first.attrs["scratch_offset"], first.attrs["scratch_offset"] + first.attrs["scratch_bytes"])
    assert not a <= second.attrs["scratch_offset"] < b
    assert not any(o.name == "tilegpu.barrier" for o in k.fn.body.ops)


@requires_corpus
def test_a_reduction_reusing_the_previous_ones_scratch_waits_for_its_reads():
    """A cross-warp reduce reads its scratch last; a later one writing the same bytes must wait for every
    thread's reads (the combiner regions did not hide the ops' own accesses from insert-barriers)."""
    from tileiras_async.tilegpu.passes import insert_barriers
    k = _argmax_kernel()
    _passes(k, "allocate-shared-memory")
    first, second = [o for o in k.fn.body.ops if o.name == "reduce"]
    second.attrs["scratch_offset"] = first.attrs["scratch_offset"]
    insert_barriers.run(k)
    ops = k.fn.body.ops
    i = next(n for n, o in enumerate(ops) if o is first)
    j = next(n for n, o in enumerate(ops) if o is second)
    assert [o.name for o in ops[i:j + 1]].count("tilegpu.barrier") == 1
    assert ops[j - 1].name == "tilegpu.barrier"


def test_if_results_take_the_first_yield_layout_and_the_other_branch_converts():
    mb = ModuleBuilder((13, 4, 0))
    i32, f32t = tile(T.I32), tile(T.F32, 16, 16)
    with mb.kernel("pick", [tile(T.PointerType(T.F32)), tile(T.I1)]) as kb:
        pv = _views(kb, T.F32, (16, 16), (16, 16))
        zero = kb.constant(np.int32(0), i32)
        x = kb.op("load_view_tko", [f32t, T.TOKEN], view=pv, index=[zero, zero],
                  memory_ordering_semantics=MO.weak).results[0]
        xt = kb.op("permute", [f32t], source=x, permutation=[1, 0]).result
        with kb.region() as then:
            then.op("yield", operands=[xt])
        with kb.region() as other:
            other.op("yield", operands=[x])
        r = kb.op("if", [f32t], regions=[then.built_region, other.built_region], condition=kb.args[1]).result
        kb.op("store_view_tko", [T.TOKEN], tile=r, view=pv, index=[zero, zero], memory_ordering_semantics=MO.weak)
        kb.op("return")
    k = _kernel(mb.module)
    _passes(k, "assign-layouts")
    ifop = next(o for o in walk_ops(k.fn.body) if o.name == "if")
    xt_layout = layout_of(ifop.regions[0].block.ops[-1].operands["operands"][0].type)
    assert layout_of(ifop.result.type) == xt_layout
    else_ops = ifop.regions[1].block.ops
    assert [o.name for o in else_ops] == ["tilegpu.convert_layout", "yield"]
    assert layout_of(else_ops[-1].operands["operands"][0].type) == xt_layout


def test_printer_handles_deep_nesting():
    """2,000 nested ifs print without touching the Python recursion limit."""
    mb = ModuleBuilder((13, 4, 0))
    with mb.kernel("deep", [tile(T.I1)]) as kb:
        inner = Block()
        inner.ops.append(kb.op("yield"))
        kb.block.ops.pop()
        for _ in range(2000):
            from tileiras_async.bytecode.opspec import OPS_BY_NAME
            from tileiras_async.ir.core import Operation
            ifop = Operation(OPS_BY_NAME["if"], {"condition": kb.args[0]}, {}, [], [Region([inner]), Region([])])
            inner = Block()
            inner.ops = [ifop, Operation(OPS_BY_NAME["yield"], {"operands": []})]
        kb.block.ops.extend(inner.ops[:1])
        kb.op("return")
    k = _kernel(mb.module)
    text = print_kernel(k)
    assert text.count('"cuda_tile.if"') == 2000


def test_print_ir_snapshots_are_deterministic_and_selectable():
    module = transpose_add_module()
    k1, k2 = _kernel(module), _kernel(module)
    r1 = run_pipeline(k1, IRPrinting(after_all=True))
    r2 = run_pipeline(k2, IRPrinting(after_all=True))
    assert [s.pass_name for s in r1.snapshots] == list(pipeline_for("sm_100"))
    assert [s.text for s in r1.snapshots] == [s.text for s in r2.snapshots]
    k3 = _kernel(module)
    r3 = run_pipeline(k3, IRPrinting(before=frozenset({"assign-layouts"})))
    assert [(s.when, s.pass_name) for s in r3.snapshots] == [("before", "assign-layouts")]
    assert "#tilegpu.linear<" not in r3.snapshots[0].text  # no layouts before the pass that assigns them


# -- the command lines --------------------------------------------------------------------------------------

@requires_corpus
def test_dropin_prints_every_pass_for_a_matmul(tmp_path):
    proc = subprocess.run([str(BIN / "tileiras"), "--gpu-name", "sm_90", str(MATMUL), "-o", str(tmp_path / "k.cubin"),
                           "--print-ir-after-all"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    banners = re.findall(r"// -----// IR Dump After (\S+) \((\w+)\) //----- //", proc.stderr)
    assert [b[0] for b in banners] == list(pipeline_for("sm_90"))
    assert "tilegpu.kernel @matmul_f16" in proc.stderr and (tmp_path / "k.cubin").is_file()


@requires_corpus
def test_dropin_rejects_unknown_pass_names(tmp_path):
    proc = subprocess.run([str(BIN / "tileiras"), "--gpu-name", "sm_90", str(MATMUL), "-o", str(tmp_path / "k.cubin"),
                           "--print-ir-before=no-such-pass"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: unknown pass 'no-such-pass' for --print-ir-before")
    assert not (tmp_path / "k.cubin").exists()


@requires_corpus
def test_batch_writes_snapshots_to_a_directory(tmp_path):
    irdir = tmp_path / "ir" / "nested"      # created like an output folder
    proc = subprocess.run([str(BIN / "tileiras-async"), "compile", str(MATMUL), "--gpu-name", "sm_90", "-j", "1",
                           "--out-dir", str(tmp_path / "out"), "--print-ir-after", "assign-layouts,dce",
                           "--print-ir-dir", str(irdir)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    names = sorted(p.name for p in irdir.iterdir())
    assert [n.split(".")[-2] for n in names] == ["01-after-dce", "02-after-assign-layouts"]
    assert all(n.startswith("matmul_f16_f32acc_64x64x32.v13.4.sm_90.matmul_f16") for n in names)


@requires_corpus
@pytest.mark.parametrize("cli", ["tileiras", "tileiras-async"])
def test_print_ir_dir_that_is_a_file_is_rejected(tmp_path, cli):
    (tmp_path / "taken").write_text("")
    argv = ([str(BIN / "tileiras"), str(MATMUL), "-o", str(tmp_path / "k.cubin")] if cli == "tileiras" else
            [str(BIN / "tileiras-async"), "compile", str(MATMUL), "--out-dir", str(tmp_path / "out")])
    proc = subprocess.run(argv + ["--gpu-name", "sm_90", "--print-ir-after-all", "--print-ir-dir",
                                  str(tmp_path / "taken")], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --print-ir-dir"), proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "k.cubin").exists()


@requires_corpus
@pytest.mark.parametrize("cli", ["tileiras", "tileiras-async"])
def test_num_stages_is_validated(tmp_path, cli):
    argv = ([str(BIN / "tileiras"), str(MATMUL), "-o", str(tmp_path / "k.cubin")] if cli == "tileiras" else
            [str(BIN / "tileiras-async"), "compile", str(MATMUL), "--out-dir", str(tmp_path)])
    proc = subprocess.run(argv + ["--gpu-name", "sm_90", "--num-stages", "9"], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 2 and "invalid number of pipeline stages: 9" in proc.stderr


# -- the schedule drives the pipeliner --------------------------------------------------------------------

def _pipelined(cid: str, gpu: str, stages: int = 4):
    from tileiras_async.bytecode.reader import read_module
    module = read_module((PUBLIC / f"{cid}.v13.4.tileirbc").read_bytes())
    k = _kernel(module, target=gpu, pipeline_stages=stages)
    run_pipeline(k)
    return k


def _in_order(block):
    """The ops of `block` and of the regions nested in it, in program order."""
    return list(walk_ops(block))


def _committed(ops) -> int:
    """Commit groups the ops issue: a rolled prologue loop's body counts once per iteration."""
    n = 0
    for o in ops:
        if o.name == "tilegpu.async_commit":
            n += 1
        elif o.name == "for":
            assert o.attrs.get("unroll") is False          # only the rolled prologue precedes the K-loop
            trips = int.from_bytes(o.operands["upperBound"].owner.attrs["value"].raw, "little", signed=True)
            n += trips * _committed(o.regions[0].block.ops)
    return n


@requires_corpus
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_pipelined_loop_follows_the_schedule_report(stages):
    """The loop the pipeline pass emits is the one schedule-loops reported: the mma consumes what the copies
    fetched (mma stage - load stage) iterations earlier, through that many + 1 stage buffers."""
    k = _pipelined("matmul_f16_f32acc_64x64x32", "sm_90", stages)
    (cand, report, geom, ring), = pipelined_loops(k.fn.body)
    assert loop_schedules(k.fn.body)[cand.loop.attrs["schedule"]] is report   # what the dashboard/trace show
    by_name = {}
    for o in report.ops:
        by_name.setdefault(o.name, []).append(o.stage)
    load_stage, mma_stage = max(by_name["load_view_tko"]), by_name["mmaf"][0]
    assert report.strategy == "modulo" and report.stage_count == stages == geom.stages
    assert mma_stage - load_stage + 1 == geom.stages
    assert [cand.a.load.attrs["stage"], cand.mma.attrs["stage"]] == [by_name["load_view_tko"][0], mma_stage]
    # the expanded IR: the first version's loop, with S - 1 units committed before it
    ops = _in_order(k.fn.body)
    loop = next(o for o in ops if o.name == "for" and o.attrs.get("pipelined"))
    block = next(b for o in ops for r in o.regions for b in r.blocks if loop in b.ops) \
        if loop not in k.fn.body.ops else k.fn.body
    before = block.ops[:block.ops.index(loop)]
    assert _committed(before) == geom.stages - 1
    # two or more whole iterations ahead are a loop (one copy block of code per version, not one per stage)
    assert any(o.name == "for" for o in before) == ((geom.stages - 1) // geom.chunks >= 2)
    body = _in_order(loop.regions[0].block)
    assert [o.attrs["pending"] for o in body if o.name == "tilegpu.async_wait"] == [geom.stages - 2] * geom.chunks
    assert sum(o.name == "tilegpu.mma_staged" for o in body) == geom.chunks
    assert not any(o.name in ("load_view_tko", "mmaf") for o in body)      # the loop reads the stage buffers
    # wgmma on sm_90: room to align the ring to the swizzle repeat at run time
    assert ring.result.type.nbytes == geom.stages * geom.unit_bytes + geom.slack
    assert ring.attrs.get("align", 0) == geom.align and geom.slack == max(0, geom.align - 16)


@requires_corpus
def test_schedule_report_marks_loops_kept_serial():
    """A loop that is not a K-loop keeps the scheduler's own choice, and its report says why."""
    k = _pipelined("cumsum_carry_f32_t512", "sm_90") if (PUBLIC / "cumsum_carry_f32_t512.v13.4.tileirbc").exists() \
        else None
    if k is None or not loop_schedules(k.fn.body):
        k = _pipelined("first_exceed_f32_64", "sm_90")
    for r in loop_schedules(k.fn.body):
        assert r.strategy == "serial" and r.rule.startswith("kept serial: not a K-loop")


@requires_corpus
@pytest.mark.parametrize("name, marked", [("first_exceed_f32_16", True), ("first_exceed_f32_64", False)])
def test_branches_around_shuffles_are_marked_warp_uniform(name, marked):
    """first_exceed breaks out of its loop on a running sum the loop reduces by shuffles: both of the loop's
    `if`s are marked warp-uniform. The 64-wide kernel's reduction spans two warps, so its loop holds a
    `bar.sync`, after which ptxas already takes the loop as convergent: nothing is marked there."""
    from tileiras_async.bytecode.reader import read_module
    k = _kernel(read_module((PUBLIC / f"{name}.v13.4.tileirbc").read_bytes()), target="sm_80")
    _passes(k, "mark-uniform-branches")
    ifs = [o for o in walk_ops(k.fn.body) if o.name == "if"]
    assert ifs
    assert [bool(o.attrs.get("warp_uniform")) for o in ifs] == [marked] * len(ifs)
    assert ("warp_uniform = true" in print_kernel(k)) == marked


@requires_corpus
@pytest.mark.parametrize("name, loads, repads", [("reduce1d_f32_t256", 1, 1), ("reduce2d_rows_f32_8x64", 1, 1),
                                                 ("reduce2d_rows_f16_16x128", 2, 0)])
def test_a_load_repeated_with_other_padding_reads_once(name, loads, repads):
    """cuTile loads a tile twice for a sum and a max, with zero and -inf padding: the second load becomes a
    repad of the first (one global load per element). A tile of 16 elements per thread keeps both loads
    (its bounds predicates would outlive the loads)."""
    from tileiras_async.bytecode.reader import read_module
    k = _kernel(read_module((PUBLIC / f"{name}.v13.4.tileirbc").read_bytes()), target="sm_80")
    _passes(k, "merge-repadded-loads")
    ops = list(walk_ops(k.fn.body))
    assert sum(o.name == "load_view_tko" for o in ops) == loads
    found = [o for o in ops if o.name == "tilegpu.repad"]
    assert len(found) == repads
    for r in found:
        src = r.operands["source"].owner
        assert src.name == "load_view_tko" and src.operands["view"].type.padding != r.operands["view"].type.padding
        assert r.operands["index"] == src.operands["index"]


def test_a_repeated_load_with_the_same_padding_is_the_first():
    """Two loads of the same view, index and token: the second's uses read the first; no repad."""
    mb = ModuleBuilder((13, 4, 0))
    t = tile(T.F32, 128)
    with mb.kernel("twice", [tile(T.PointerType(T.F32)), tile(T.PointerType(T.F32))]) as kb:
        pvs = []
        for p in kb.args:
            tv = T.TensorViewType(T.F32, (512,), (1,))
            v = kb.op("make_tensor_view", [tv], base=p, dynamicShape=[], dynamicStrides=[]).result
            pvs.append(kb.op("make_partition_view", [T.PartitionViewType((128,), tv, (0,))], tensor_view=v).result)
        zero = kb.constant(np.int32(0), tile(T.I32))
        x, y = (kb.op("load_view_tko", [t, T.TOKEN], view=pvs[0], index=[zero],
                      memory_ordering_semantics=MO.weak).results[0] for _ in range(2))
        s = kb.op("addf", [t], lhs=x, rhs=y, rounding_mode=RoundingMode.nearest_even).result
        kb.op("store_view_tko", [T.TOKEN], tile=s, view=pvs[1], index=[zero], memory_ordering_semantics=MO.weak)
        kb.op("return")
    k = _kernel(mb.module, target="sm_80")
    _passes(k, "merge-repadded-loads")
    ops = list(walk_ops(k.fn.body))
    loads = [o for o in ops if o.name == "load_view_tko"]
    assert len(loads) == 1 and not any(o.name == "tilegpu.repad" for o in ops)
    add = next(o for o in ops if o.name == "addf")
    assert add.operands["lhs"] is add.operands["rhs"] is loads[0].results[0]


# -- split-arg-reductions -----------------------------------------------------------------------------------

def _argmax_module(mutate=None):
    """The corpus argmax kernel (its combiner keeps the larger value, NaN losing, ties to the smaller
    index), with `mutate(combiner ops)` applied to its pair reduction's combiner."""
    from tileiras_async.bytecode.reader import read_module
    module = read_module((PUBLIC / "argmax_rows_f32_128.v13.4.tileirbc").read_bytes())
    if mutate is not None:
        pair = next(o for o in module.functions[0].body.ops if o.name == "reduce" and len(o.results) == 2)
        mutate(pair.regions[0].blocks[0].ops)
    return module


def _set_predicate(name: str, before, after):
    from tileiras_async.ir.enums import ComparisonPredicate as CP

    def mutate(ops):
        op = next(o for o in ops if o.name == name and o.attrs["comparison_predicate"] == getattr(CP, before))
        op.attrs["comparison_predicate"] = getattr(CP, after)
    return mutate


def _and_for_or(ops):
    """Tie-breaking and the value order no longer combine: not an arg-reduction any more."""
    from tileiras_async.ir.opdef import opdef
    last_or = [o for o in ops if o.name == "ori"][-1]
    last_or.spec = opdef("andi")


# (mutation, what the pass must see: None = not an arg-reduction)
ARG_VARIANTS = {
    "argmax": (None, "maxf mini"),
    "argmin": (_set_predicate("cmpf", "greater_than", "less_than"), "minf mini"),
    "last_index": (_set_predicate("cmpi", "less_than", "greater_than"), "maxf maxi"),
    "not_an_argmax": (_and_for_or, None),
}


@requires_corpus
@pytest.mark.parametrize("variant", sorted(ARG_VARIANTS))
def test_arg_reductions_split_into_a_value_and_an_index_reduction(variant):
    """An argmax/argmin whose value result is unused becomes a max (min) and an index min (max) over the
    elements that tie with it; the max reuses the kernel's own max of the same tile when it has one."""
    mutate, want = ARG_VARIANTS[variant]
    k = _kernel(_argmax_module(mutate), target="sm_80")
    _passes(k, "split-arg-reductions")
    reduces = [o for o in k.fn.body.ops if o.name == "reduce"]
    if want is None:
        assert [len(o.results) for o in reduces] == [2, 1]
        return
    assert all(len(o.results) == 1 for o in reduces)
    combiners = [o.regions[0].blocks[0].ops[0].name for o in reduces]
    value_op, index_op = want.split()
    assert index_op in combiners and combiners.count(value_op) == 1
    value_reduce = next(o for o in reduces if o.regions[0].blocks[0].ops[0].name == value_op)
    assert value_reduce.attrs["identities"][0].bits == 0x7FC00000     # NaN: fmax/fmin's identity
    if value_op == "maxf":     # the kernel's own max of the tile is the one reused: two reductions in all
        assert len(reduces) == 2


def _argmax_rows() -> np.ndarray:
    """Rows of 100 (the tile is 128 wide: 28 padding elements of -inf) with NaNs, ties, signed zeros and
    infinities."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((9, 100)).astype(np.float32)
    x[1] = np.nan                                   # NaN loses even to the -inf padding
    x[2, [5, 17, 90]] = 9.0                         # ties: the first
    x[3] = -1.0
    x[3, 7], x[3, 3] = -0.0, 0.0                    # -0 == +0: the first
    x[4] = np.nan
    x[4, 50] = np.inf
    x[5] = -np.inf                                  # all equal: the first
    x[6, 99] = 50.0
    x[7, 0], x[7, 60] = np.nan, 40.0
    x[8, ::2] = np.nan
    return x


@requires_corpus
@pytest.mark.parametrize("variant", sorted(v for v, (_, want) in ARG_VARIANTS.items() if want))
@pytest.mark.parametrize("gpu", ["sm_80", "sm_90"])
def test_split_arg_reductions_agree_with_the_interpreter(variant, gpu):
    """Interpreter (the pair combiner, as written) and emulator (the split form) give the same indices and
    maxima on rows of NaNs, ties, signed zeros and infinities (and their negations, for argmin). (A
    combiner that is no arg-reduction need not be associative: its reductions have no order to compare.)"""
    from tileiras_async.bytecode.writer import write_module
    from tileiras_async.engines import run_kernel
    x = _argmax_rows()
    for rows in (x, -x):
        args = [rows.copy(), np.full(len(x), -7, np.int32), np.zeros(len(x), np.float32)]
        module = write_module(_argmax_module(ARG_VARIANTS[variant][0]))
        report = run_kernel(module, (len(x), 1, 1), args, engine="both", gpu_name=gpu)
        assert not report.mismatches
        assert (args[1] >= 0).all() and (args[1] < 128).all()


@requires_corpus
@pytest.mark.parametrize("name, spread", [("reduce2d_rows_f16_16x128", True), ("softmax_rows_f32_128", False),
                                          ("layernorm_f32_64", False)])
def test_reductions_only_stored_spread_their_rows_over_the_lanes(name, spread):
    """A float reduce whose results only go to memory takes the scattered slice (each lane that reduced a
    row keeps a share of the rows); one whose result is broadcast back keeps every row in every thread."""
    from tileiras_async.bytecode.reader import read_module
    k = _kernel(read_module((PUBLIC / f"{name}.v13.4.tileirbc").read_bytes()), target="sm_80")
    _passes(k, "assign-layouts")
    reduces = [o for o in walk_ops(k.fn.body) if o.name == "reduce" and o.results[0].type.shape]
    assert reduces
    for op in reduces:
        operand = layout_of(op.operands["operands"][0].type)
        got = layout_of(op.results[0].type)
        want = operand.slice_scattered(op.attrs["dim"]) if spread else operand.slice(op.attrs["dim"])
        assert got == want and (got != operand.slice(op.attrs["dim"])) == spread


def test_a_combiner_doing_bitwise_arithmetic_on_indices_is_no_order():
    """Only truth values may go through andi/ori/xori: an xori of two indices makes a value that is neither
    argument, which no set of order cases can pin down."""
    from tileiras_async.ir.builder import BlockBuilder
    from tileiras_async.ir.enums import ComparisonOrdering, ComparisonPredicate
    from tileiras_async.tilegpu.passes.split_arg_reductions import _closed_comparison_region
    f, i = tile(T.F32), tile(T.I32)
    for bitwise_on_indices in (False, True):
        b = BlockBuilder(Block([f, f, i, i]), None)
        l0, r0, l1, r1 = b.args
        gt = b.op("cmpf", [tile(T.I1)], lhs=l0, rhs=r0, comparison_predicate=ComparisonPredicate.greater_than,
                  comparison_ordering=ComparisonOrdering.ordered).result
        v = b.op("select", [f], cond=gt, val_if_true=l0, val_if_false=r0).result
        idx = (b.op("xori", [i], lhs=l1, rhs=r1).result if bitwise_on_indices
               else b.op("select", [i], cond=gt, val_if_true=l1, val_if_false=r1).result)
        b.op("yield", operands=[v, idx])
        assert _closed_comparison_region(b.block) is not bitwise_on_indices


@requires_corpus
def test_a_compile_without_candidate_reductions_imports_no_numpy(tmp_path):
    """split-arg-reductions loads numpy and the interpreter's handlers only for a kernel with a candidate
    reduce: every other drop-in compile starts without them."""
    import json
    import os
    probe = ("import sys, json\nfrom tileiras_async.cli import tileiras\nrc = tileiras.main(sys.argv[1:])\n"
             "print(json.dumps({'rc': rc, 'numpy': 'numpy' in sys.modules}), file=sys.stderr)")
    env = {**os.environ, "TILEIRAS_ASYNC_NO_CACHE": "1"}
    for name, loads in (("vec_add_f32_t128", False), ("argmax_rows_f32_128", True)):
        argv = ["--gpu-name", "sm_80", "-o", str(tmp_path / "x.cubin"), str(PUBLIC / f"{name}.v13.4.tileirbc")]
        proc = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True, env=env,
                              timeout=300)
        got = json.loads(proc.stderr.strip().splitlines()[-1])
        assert got == {"rc": 0, "numpy": loads}, name


def _argmax_1d_module():
    """argmax of a 128-element vector (a rank-0 result, the corpus kernel's combiner), stored as one i32."""
    from tileiras_async.tilegpu.ir import clone_op
    pair = next(o for o in _argmax_module().functions[0].body.ops if o.name == "reduce" and len(o.results) == 2)
    mb = ModuleBuilder((13, 4, 0))
    i32 = tile(T.I32)
    # each array as (pointer, size, stride), as the runners pass it; the views are static
    with mb.kernel("argmax_1d", [tile(T.PointerType(T.F32)), i32, i32, tile(T.PointerType(T.I32)), i32, i32]) as kb:
        views = []
        for p, elem, n in ((kb.args[0], T.F32, 128), (kb.args[3], T.I32, 1)):
            tv = T.TensorViewType(elem, (n,), (1,))
            v = kb.op("make_tensor_view", [tv], base=p, dynamicShape=[], dynamicStrides=[]).result
            views.append(kb.op("make_partition_view", [T.PartitionViewType((n,), tv, (0,))], tensor_view=v).result)
        zero = kb.constant(np.int32(0), i32)
        x = kb.op("load_view_tko", [tile(T.F32, 128), T.TOKEN], view=views[0], index=[zero],
                  memory_ordering_semantics=MO.weak, inbounds=(False,)).results[0]
        idx = kb.op("iota", [tile(T.I32, 128)]).result
        red = clone_op(pair, {id(pair.operands["operands"][0]): x, id(pair.operands["operands"][1]): idx})
        red.attrs["dim"] = 0
        for o in red.walk():     # locations of this module, not the corpus file's
            o.loc = kb.loc
        red.loc = kb.loc
        red.results[0].type, red.results[1].type = tile(T.F32), i32
        kb.block.ops.append(red)
        one = kb.op("reshape", [tile(T.I32, 1)], source=red.results[1]).result
        kb.op("store_view_tko", [T.TOKEN], tile=one, view=views[1], index=[zero], memory_ordering_semantics=MO.weak,
              inbounds=(False,))
        kb.op("return")
    return mb.module


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_80", "sm_90"])
def test_a_vector_argmax_splits_and_agrees_with_the_interpreter(gpu):
    """A 1-D argmax (rank-0 results: the max is broadcast back from a uniform value)."""
    from tileiras_async.bytecode.writer import write_module
    from tileiras_async.engines import run_kernel
    from tileiras_async.ir.verifier import verify_module
    module = _argmax_1d_module()
    verify_module(module)
    k = _kernel(module, target=gpu)
    _passes(k, "split-arg-reductions")
    assert [len(o.results) for o in k.fn.body.ops if o.name == "reduce"] == [1, 1]
    rows = _argmax_rows()
    for row in (rows[0], rows[2], rows[4], -rows[3], rows[8]):
        x = np.zeros(128, np.float32)
        x[:100] = row
        x[100:] = row[:28]
        out = np.full(1, -7, np.int32)
        run_kernel(write_module(module), (1, 1, 1), [x, out], engine="both", gpu_name=gpu)
        numbers = x[~np.isnan(x)]
        want = int(np.flatnonzero(x == numbers.max())[0]) if numbers.size else 0   # NaN loses; ties: first
        assert out[0] == want


def _carry_kernel(mutate_reduce=None) -> KernelIR:
    from tileiras_async.bytecode.reader import read_module
    module = read_module((PUBLIC / "cumsum_carry_f32_t512.v13.4.tileirbc").read_bytes())
    if mutate_reduce is not None:
        reduce = next(o for o in walk_ops(module.functions[0].body) if o.name == "reduce")
        mutate_reduce(reduce.regions[0].blocks[0].ops[0])
    return _kernel(module, target="sm_80")


@requires_corpus
def test_a_reduction_of_a_scanned_tile_reads_the_scans_total():
    """cuTile's scan-with-carry loop scans a tile and sums it for the next carry: the sum becomes the scan's
    total (the scan keeps it: `with_total`), with the reduce's layout."""
    k = _carry_kernel()
    _passes(k, "share-scan-totals")
    ops = list(walk_ops(k.fn.body))
    assert not any(o.name == "reduce" for o in ops)
    total = next(o for o in ops if o.name == "tilegpu.scan_total")
    scan = total.operands["scan"].owner
    assert scan.name == "scan" and scan.attrs["with_total"]
    assert total.result.type == LayoutTile((), T.F32, None)


@requires_corpus
def test_a_reduction_with_another_combiner_than_the_scans_stays():
    from tileiras_async.ir.opdef import opdef
    k = _carry_kernel(lambda inner: setattr(inner, "spec", opdef("mulf")))
    _passes(k, "share-scan-totals")
    ops = list(walk_ops(k.fn.body))
    assert any(o.name == "reduce" for o in ops) and not any(o.name == "tilegpu.scan_total" for o in ops)


def _scan_and_sum_module(shape, reverse):
    """Row-wise inclusive sums (a scan along dim 1) and row totals (a reduce of the same tile, doubled: an
    elementwise user, so the rows stay in every thread that held them) of one tile, both stored."""
    rows, cols = shape
    mb = ModuleBuilder((13, 4, 0))
    i32, f = tile(T.I32), tile(T.F32)
    ptr = tile(T.PointerType(T.F32))
    with mb.kernel("scan_and_sum", [ptr, i32, i32, i32, i32, ptr, i32, i32, i32, i32, ptr, i32, i32]) as kb:
        def view(p, shp):
            tv = T.TensorViewType(T.F32, shp, tuple(int(np.prod(shp[d + 1:])) for d in range(len(shp))))
            v = kb.op("make_tensor_view", [tv], base=p, dynamicShape=[], dynamicStrides=[]).result
            dims = tuple(range(len(shp)))
            return kb.op("make_partition_view", [T.PartitionViewType(shp, tv, dims)], tensor_view=v).result
        xin, sout, tout = view(kb.args[0], shape), view(kb.args[5], shape), view(kb.args[10], (rows,))
        zero = kb.constant(np.int32(0), i32)
        x = kb.op("load_view_tko", [tile(T.F32, *shape), T.TOKEN], view=xin, index=[zero, zero],
                  memory_ordering_semantics=MO.weak, inbounds=(False, False)).results[0]
        results = []
        for name in ("scan", "reduce"):
            with kb.region([f, f]) as r:
                s = r.op("addf", [f], lhs=r.args[0], rhs=r.args[1], rounding_mode=RoundingMode.nearest_even).result
                r.op("yield", operands=[s])
            shp = shape if name == "scan" else (rows,)
            attrs = {"reverse": reverse} if name == "scan" else {}
            results.append(kb.op(name, [tile(T.F32, *shp)], [r.built_region], operands=[x], dim=1,
                                 identities=[FloatAttr(T.F32, 0)], **attrs).results[0])
        two = kb.constant(np.float32(2.0), tile(T.F32, rows))
        doubled = kb.op("mulf", [tile(T.F32, rows)], lhs=results[1], rhs=two,
                        rounding_mode=RoundingMode.nearest_even).result
        kb.op("store_view_tko", [T.TOKEN], tile=results[0], view=sout, index=[zero, zero],
              memory_ordering_semantics=MO.weak, inbounds=(False, False))
        kb.op("store_view_tko", [T.TOKEN], tile=doubled, view=tout, index=[zero], memory_ordering_semantics=MO.weak,
              inbounds=(False,))
        kb.op("return")
    return mb.module


@pytest.mark.parametrize("shape", [(16, 64), (4, 256), (32, 32), (2, 1024)])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_totals_of_rows_match_the_interpreter(shape, reverse):
    """Rows spread over registers, lanes and warps: the shared totals land in the right registers."""
    from tileiras_async.bytecode.writer import write_module
    from tileiras_async.engines import run_kernel
    from tileiras_async.ir.verifier import verify_module
    module = _scan_and_sum_module(shape, reverse)
    verify_module(module)
    k = _kernel(module, target="sm_80")
    _passes(k, "share-scan-totals")
    assert sum(o.name == "tilegpu.scan_total" for o in walk_ops(k.fn.body)) == 1
    x = np.random.default_rng(1).integers(-8, 8, shape).astype(np.float32)    # exact sums in any order
    s, t = np.zeros(shape, np.float32), np.zeros(shape[0], np.float32)
    run_kernel(write_module(module), (1, 1, 1), [x, s, t], engine="both", gpu_name="sm_80")
    np.testing.assert_array_equal(t, 2 * x.sum(axis=1))
    want = np.flip(np.cumsum(np.flip(x, 1), 1), 1) if reverse else np.cumsum(x, 1)
    np.testing.assert_array_equal(s, want)


@requires_corpus
@pytest.mark.parametrize("cid, units", [("matmul_f16_f16out_128x128x64", 4), ("matmul_f16_f32acc_64x64x32", 1)])
def test_tcgen05_k_loops_keep_the_accumulator_in_tensor_memory(cid, units):
    """sm_100: each pipelined loop version's accumulator chain (one mma_staged per K unit) becomes
    tmem_mma_staged ops threading the mbarrier phase (carried from 0) on one tmem_acquire, and one
    tmem_release makes the result; the two versions share them: the acquire right before the versions' `if`,
    the release right after it, in place of the `if`'s result.  No mma_staged is left."""
    from tileiras_async.bytecode.reader import read_module
    from tileiras_async.tilegpu.analysis.smem import constant_index
    k = _kernel(read_module((PUBLIC / f"{cid}.v13.4.tileirbc").read_bytes()), target="sm_100")
    _passes(k, "keep-accumulators-in-tensor-memory")
    ops = list(walk_ops(k.fn.body))
    assert not [o for o in ops if o.name == "tilegpu.mma_staged"]
    loops = [o for o in ops if o.name == "for" and o.attrs.get("pipelined")]
    assert len(loops) == 2                  # the 16-byte and the element-wise copy versions
    acquires = set()
    for loop in loops:
        body = loop.regions[0].block
        staged = [o for o in body.ops if o.name == "tilegpu.tmem_mma_staged"]
        assert len(staged) == units
        (acquire,) = {id(o.operands["tmem"].owner): o.operands["tmem"].owner for o in staged}.values()
        acquires.add(id(acquire))
        assert acquire.name == "tilegpu.tmem_acquire" and acquire.operands["acc"].type.shape
        assert acquire.attrs.get("barrier_follows")     # the unit's barrier orders its stores before the issue
        phase = staged[0].operands["phase"]
        assert phase.owner is body and phase.type.shape == ()
        assert constant_index(loop.operands["initValues"][phase.index - 1]) == 0
        for prev, nxt in zip(staged, staged[1:]):
            assert nxt.operands["phase"] is prev.result
        assert body.ops[-1].operand_values()[phase.index - 1] is staged[-1].result
        versions = next(o for o in ops if any(loop in b.ops for r in o.regions for b in r.blocks))
        assert versions.name == "if" and not versions.results
        outer = next((b for o in ops for r in o.regions for b in r.blocks if versions in b.ops), k.fn.body)
        after = outer.ops[outer.ops.index(versions) + 1]
        assert after.name == "tilegpu.tmem_release" and after.operands["tmem"] is acquire.result
        assert outer.ops[outer.ops.index(versions) - 1] is acquire
    assert len(acquires) == 1


@requires_corpus
def test_bf16_k_loops_keep_the_accumulator_in_tensor_memory_through_each_iteration():
    """cuTile's bf16 matmul rounds each K tile's product before adding it: the iteration's two K units
    accumulate from zero, then the result is rounded and added in registers. Nothing is carried through the
    mma, so the accumulator stays in tensor memory only through the iteration: one tmem_acquire before unit
    0, the mbarrier phase from 0 through both units, one tmem_release feeding the rounding.  The columns are
    allocated once for every iteration (and both versions), at the entry, and freed before the return."""
    from tileiras_async.bytecode.reader import read_module
    from tileiras_async.tilegpu.analysis.smem import constant_index
    k = _kernel(read_module((PUBLIC / "matmul_bf16_64x64x64.v13.4.tileirbc").read_bytes()), target="sm_100")
    _passes(k, "keep-accumulators-in-tensor-memory")
    ops = list(walk_ops(k.fn.body))
    assert not [o for o in ops if o.name == "tilegpu.mma_staged"]
    loops = [o for o in ops if o.name == "for" and o.attrs.get("pipelined")]
    assert len(loops) == 2
    for loop in loops:
        body = loop.regions[0].block
        names = [o.name for o in body.ops]
        staged = [o for o in body.ops if o.name == "tilegpu.tmem_mma_staged"]
        assert len(staged) == 2 and names.count("tilegpu.tmem_acquire") == names.count("tilegpu.tmem_release") == 1
        acquire = staged[0].operands["tmem"].owner
        assert acquire.name == "tilegpu.tmem_acquire" and staged[1].operands["tmem"] is acquire.result
        at = names.index("tilegpu.tmem_acquire")
        # right after the unit's barrier (which publishes the entry's allocation): the chain starts from zero,
        # so the acquire stores nothing; the first K step ignores D
        assert names[at - 1] == "tilegpu.barrier" and "tilegpu.barrier" not in names[at:body.ops.index(staged[0])]
        assert acquire.attrs.get("acc_zero") and acquire.attrs.get("allocated")
        assert staged[0].attrs.get("acc_zero") and not staged[1].attrs.get("acc_zero")
        assert constant_index(staged[0].operands["phase"]) == 0 and staged[1].operands["phase"] is staged[0].result
        release = body.ops[body.ops.index(staged[1]) + 1]
        assert release.name == "tilegpu.tmem_release" and release.attrs.get("allocated")
        assert [o.name for o in walk_ops(body) if any(v is release.result for v in o.operand_values())] == ["ftof"]
    top = [o.name for o in k.fn.body.ops]
    assert top[0] == "tilegpu.tmem_alloc" and top[-2:] == ["tilegpu.tmem_free", "return"]
    assert k.fn.body.ops[0].attrs.get("per_unit") and k.fn.body.ops[-2].attrs.get("per_unit")


@requires_corpus
def test_a_loop_with_another_tcgen05_op_keeps_the_per_chunk_form():
    """The kernel's tcgen05 ops share one mbarrier and one column-address slot: a loop that runs a second
    tcgen05 mma besides the accumulator chain (here a copy of the first unit's, on the initial value) keeps
    its accumulator in registers between units; the other loop version still gets tensor memory."""
    from tileiras_async.bytecode.reader import read_module
    from tileiras_async.tilegpu.ir import clone_op
    from tileiras_async.tilegpu.passes import _load
    k = _kernel(read_module((PUBLIC / "matmul_f16_f16out_128x128x64.v13.4.tileirbc").read_bytes()), target="sm_100")
    _passes(k, "hoist-operand-staging")
    loops = [o for o in walk_ops(k.fn.body) if o.name == "for" and o.attrs.get("pipelined")]
    body = loops[0].regions[0].block
    first = next(o for o in body.ops if o.name == "tilegpu.mma_staged")
    extra = clone_op(first, {id(first.operands["acc"]): loops[0].operands["initValues"][0]})
    body.ops.insert(body.ops.index(first), extra)
    _load("keep-accumulators-in-tensor-memory")(k)
    assert sum(o.name == "tilegpu.mma_staged" for o in body.ops) == 5
    assert not [o for o in body.ops if o.name == "tilegpu.tmem_mma_staged"]
    assert sum(o.name == "tilegpu.tmem_mma_staged" for o in walk_ops(loops[1].regions[0].block)) == 4


# -- choose-warps --------------------------------------------------------------------------------------------

def _suite_kernel(name: str, gpu: str, folder: str = "") -> KernelIR:
    from tileiras_async.bytecode.reader import read_module
    suite = Path(__file__).resolve().parents[1] / "examples" / "suite" / folder
    return _kernel(read_module((suite / f"{name}.v13.4.tileirbc").read_bytes()), target=gpu)


@pytest.mark.parametrize("gpu", ["sm_80", "sm_90", "sm_100"])
@pytest.mark.parametrize("name,folder", [("fmha_f16", ""), ("fmha_causal_f16", "launch")])
def test_choose_warps_gives_attention_accumulators_two_warpgroups(name, folder, gpu):
    """cuTile's FMHA sample keeps S (128x128 f32) and O (128x64 f32) live in its loop: 192 registers a thread at
    4 warps. Where NVIDIA's tool runs it on 256 threads (wgmma/tcgen05 targets) so does ours, and the mma plans
    made after the pass split the rows over the 8 warps; before sm_90 it stays at 128 threads, as NVIDIA's.
    On tcgen05 as cuTile launches it (K and V land by TMA) it stays at 4 warps, each thread holding whole
    rows of S and O (their row reductions thread-local), as NVIDIA's 128-thread softmax warpgroup."""
    warps = 8 if gpu == "sm_90" or (gpu == "sm_100" and not folder) else 4
    k = _suite_kernel(name, gpu, folder)
    _passes(k, "select-mma")
    assert k.options.num_warps == warps
    plans = [o.attrs["mma_plan"] for o in walk_ops(k.fn.body) if o.name == "mmaf"]
    assert plans and all(p.num_warps == warps for p in plans)
    assert ("MoreWarpsForAccumulators" in {r.name for r in k.remarks}) == (warps == 8)
    assert ("AccumulatorRowsInThreads" in {r.name for r in k.remarks}) == (gpu == "sm_100" and warps == 4)
    if gpu == "sm_100" and warps == 4:
        assert all(p.splits == 1 and p.per_warp == p.N for p in plans)


def test_choose_warps_widens_sm100_attention_that_keeps_mma_sync():
    """With tcgen05 turned off (mma_instruction="mma.sync") the accumulators of the FMHA sample as launched live
    in registers on sm_100 too: 192 a thread at 4 warps, so it gets two warpgroups."""
    from tileiras_async.bytecode.reader import read_module
    suite = Path(__file__).resolve().parents[1] / "examples" / "suite" / "launch"
    k = _kernel(read_module((suite / "fmha_f16.v13.4.tileirbc").read_bytes()), target="sm_100",
                mma_instruction="mma.sync")
    _passes(k, "choose-warps")
    assert k.options.num_warps == 8


def test_choose_warps_leaves_smaller_attention_and_matmul_loops_at_four():
    """flash attention's 64-row tiles fit 4 warps' registers; a matmul loop has a single accumulator."""
    from tileiras_async.tilegpu.passes.choose_warps import accumulator_registers, warps_for
    for name in ("flash_attention_causal_gqa_f16", "flash_attention_ragged_f16"):
        k = _suite_kernel(name, "sm_90")
        _passes(k, "choose-warps")
        assert k.options.num_warps == 4
    k = _suite_kernel("fmha_f16", "sm_90")
    _passes(k, "dce")
    [loop] = [o for o in walk_ops(k.fn.body) if o.name == "for"]
    mmas = [o for o in walk_ops(loop.regions[0].blocks[0]) if o.name == "mmaf"]
    assert accumulator_registers(mmas, 4) == 192 and accumulator_registers(mmas, 8) == 96
    assert warps_for([mmas], 4) == 8
    assert warps_for([mmas[:1]], 4) == 4     # one mma alone (128 registers): a matmul's K-loop is left alone
