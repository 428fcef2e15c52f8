"""select-access-forms decides how code generation moves registers; code generation follows the attributes.

Each decision: the pass sets its attribute on a corpus kernel (IR level, through `run_pipeline`), and the
LLVM IR changes the way the attribute says when a test overrides it after the passes (code generation reads
the attribute; it does not decide again)."""
from __future__ import annotations

import re

import pytest

from conftest import PUBLIC, requires_corpus
from tileiras_async.bytecode.reader import read_module
from tileiras_async.codegen.emitter import LoweringError
from tileiras_async.codegen.translate import translate_kernel
from tileiras_async.tilegpu.ir import KernelIR, clone_function, walk_ops
from tileiras_async.tilegpu.analysis import mma as mma_module
from tileiras_async.tilegpu.analysis.mma import FmaPlan, MmaPlan
from tileiras_async.tilegpu.options import CodegenOptions
from tileiras_async.tilegpu.parser import parse_kernel
from tileiras_async.tilegpu.passes import run_pipeline
from tileiras_async.tilegpu.passes.select_access_forms import FragmentLoads
from tileiras_async.tilegpu.printer import print_kernel
from tileiras_async.tilegpu.analysis.wgmma import WgmmaPlan

MATMUL = "matmul_f16_f32acc_64x64x32"


def _kernel(cid: str, gpu: str, stages: int, until: str | None = None) -> KernelIR:
    module = read_module((PUBLIC / f"{cid}.v13.4.tileirbc").read_bytes())
    k = KernelIR(module, clone_function(module.functions[0]), CodegenOptions(target=gpu, pipeline_stages=stages))
    run_pipeline(k, until=until)
    return k


def _llvm(k: KernelIR) -> str:
    return translate_kernel(k).module_ir.render()


def _ops(k: KernelIR, name: str) -> list:
    return [o for o in walk_ops(k.fn.body) if o.name == name]


@requires_corpus
def test_pipelined_mma_sync_reads_16_bit_fragments_with_ldmatrix():
    k = _kernel(MATMUL, "sm_80", 3)
    staged = _ops(k, "tilegpu.mma_staged")
    assert staged and all(o.attrs["ldmatrix"] == FragmentLoads(True, True, True) for o in staged)
    text = _llvm(k)
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in text
    assert "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in text


@requires_corpus
def test_codegen_follows_the_ldmatrix_attribute():
    k = _kernel(MATMUL, "sm_80", 3)
    for o in _ops(k, "tilegpu.mma_staged"):
        o.attrs["ldmatrix"] = FragmentLoads(False, True, False)
    text = _llvm(k)
    assert "ldmatrix" in text and ".x4.trans" not in text and ".x2.trans" in text
    assert "ldmatrix.sync.aligned.m8n8.x4.shared" not in text


@requires_corpus
def test_wgmma_staging_stores_vectors_the_pass_chose():
    k = _kernel(MATMUL, "sm_90", 1)   # one stage: the mmaf stages its registers itself
    (mma,) = _ops(k, "mmaf")
    assert mma.attrs["instruction"].startswith("wgmma.")
    assert mma.attrs["store_vectors"] == (4, 4)   # 8-byte runs of f16 within the 16-byte swizzle chunks
    assert _shared_vector_stores(_llvm(k)) == ["4"] * 8   # 16 elements of A and 16 of B per thread
    mma.attrs["store_vectors"] = (2, 1)
    text = _llvm(k)
    assert _shared_vector_stores(text) == ["2"] * 8   # A: twice as many stores of half the width
    assert len(re.findall(r"store half [^,]*, ptr addrspace\(3\)", text)) == 16   # B: one element each


def _shared_vector_stores(text: str) -> list[str]:
    """The width of every vector store of f16 to shared memory."""
    return re.findall(r"store <(\d+) x half> [^,]*, ptr addrspace\(3\)", text)


@requires_corpus
def test_thread_coordinates_are_recomputed_after_a_loop_of_register_mmas_only():
    serial = _kernel(MATMUL, "sm_80", 1)   # the K-loop's mma reads registers
    (loop,) = [o for o in walk_ops(serial.fn.body) if o.name == "for"]
    assert loop.attrs.get("recompute_thread_coords") is True
    piped = _kernel(MATMUL, "sm_80", 3)    # its mma reads stage buffers
    assert not any(o.attrs.get("recompute_thread_coords") for o in walk_ops(piped.fn.body))
    reads = _llvm(serial).count("mov.u32 $0, %tid.x;")
    loop.attrs.pop("recompute_thread_coords")
    assert _llvm(serial).count("mov.u32 $0, %tid.x;") == reads - 1


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_80", "sm_90", "sm_100"])
def test_every_loop_and_mma_has_its_decision(gpu):
    """Nothing codegen reads is left undecided: every mma_staged on mma.sync has `ldmatrix`, every
    wgmma/tcgen05 mmaf has `store_vectors`."""
    k = _kernel(MATMUL, gpu, 1)
    for o in _ops(k, "mmaf"):
        assert ("store_vectors" in o.attrs) == o.attrs["instruction"].startswith(("wgmma.", "tcgen05."))


@requires_corpus
@pytest.mark.parametrize("gpu, stages, kind", [("sm_80", 3, MmaPlan), ("sm_90", 1, WgmmaPlan)])
def test_select_mma_records_the_plan_codegen_follows(gpu, stages, kind):
    (mma,) = _ops(_kernel(MATMUL, gpu, stages, until="select-mma"), "mmaf")
    plan = mma.attrs["mma_plan"]
    assert isinstance(plan, kind) and mma.attrs["instruction"].endswith(plan.instr.key)
    k = _kernel(MATMUL, gpu, stages)
    assert re.search(r"llvm\.nvvm\.mma\.m16n8k16|wgmma\.mma_async", _llvm(k))
    planned = {id(m): m for m in (o if o.name == "mmaf" else o.attrs["mma"] for o in walk_ops(k.fn.body)
                                  if o.name == "mmaf" or isinstance(o.attrs.get("mma"), type(o)))}.values()
    assert planned and all("mma_plan" in o.attrs for o in planned)   # the live mma, or the one a staged op reads
    for o in planned:
        del o.attrs["mma_plan"]
    with pytest.raises(LoweringError, match="select-mma recorded no mma_plan"):
        _llvm(k)   # code generation reads the plan; it does not make one


@requires_corpus
def test_a_plan_select_mma_cannot_make_is_reported_by_the_first_pass_that_reads_it(monkeypatch):
    """select-mma records why (`mma_plan_error`); assign-layouts, the first reader, raises it for the mmaf."""
    monkeypatch.setattr(mma_module, "STAGE_BUDGET", 1024)
    k = _kernel(MATMUL, "sm_80", 1, until="select-mma")
    (mma,) = _ops(k, "mmaf")
    assert "mma_plan" not in mma.attrs and mma.attrs["mma_plan_error"].endswith("per K chunk (limit 1024)")
    (read_back,) = _ops(parse_kernel(print_kernel(k)), "mmaf")     # the IR text carries it
    assert read_back.attrs["mma_plan_error"] == mma.attrs["mma_plan_error"]
    with pytest.raises(LoweringError, match=r"per K chunk \(limit 1024\)$") as failure:
        run_pipeline(k, after="select-mma")
    assert failure.value.op is mma


@requires_corpus
@pytest.mark.parametrize("stages, name", [(1, "mmaf"), (3, "tilegpu.mma_staged")])
def test_the_fma_chain_is_unrolled_or_a_loop_as_the_pass_decided(stages, name):
    """f32 x f32 runs on the FMA chain: a small tile's K steps are unrolled; a counted loop when told so."""
    k = _kernel("matmul_ragged_f32_16x16x16", "sm_80", stages)
    ops = _ops(k, name)
    assert ops and all(o.attrs["fma_unrolled"] is True for o in ops)
    mma = ops[0] if name == "mmaf" else ops[0].attrs["mma"]
    assert mma.attrs["mma_plan"] is None and isinstance(mma.attrs["fma_plan"], FmaPlan)   # select-mma's
    assert "cl.head" not in _llvm(k)
    for o in ops:
        o.attrs["fma_unrolled"] = False
    assert "cl.head" in _llvm(k)


@requires_corpus
def test_a_scan_across_lanes_shuffles_as_the_pass_decided():
    """A row scan whose lanes are consecutive positions of the row: Kogge-Stone (`shfl.up` by 1, 2, 4, ...);
    told "hypercube", code generation exchanges partial totals with xor partners instead."""
    k = _kernel("cumsum_rows_f32_128", "sm_80", 3)
    (scan,) = _ops(k, "scan")
    assert scan.attrs["lane_scan"] == "kogge_stone"
    text = _llvm(k)
    assert "shfl.sync.up" in text and "shfl.sync.bfly" not in text
    scan.attrs["lane_scan"] = "hypercube"
    text = _llvm(k)
    assert "shfl.sync.bfly" in text and "shfl.sync.up" not in text
