"""TMA for pipelined K-loop operands (select-tensor-copies, codegen/lower_tensor_copy.py, the host object).

The maps our compiler chooses for the launch set's matmuls are compared with the ones NVIDIA's hooks write
(read off their host objects as tests/test_host_object_gen.py does); unhinted bytecode keeps its cp.async
copies; and our cubin's launch metadata -- hidden parameters, `.nv.host`, the parameter records -- is
compared with the cubin NVIDIA's tileiras writes.  The emulated launches (tests/test_emu_manifest.py -k
launch) run the TMA code, its hook and the race check.
"""
from __future__ import annotations

import dataclasses
import platform
import random
import re
import subprocess

import msgspec
import numpy as np
import pytest
from conftest import LAUNCH, PUBLIC, nvidia_bin, nvidia_env, requires_corpus
from test_host_object_gen import _described_maps, _entry, _random_values

from tileiras_async.bytecode.reader import read_module
from tileiras_async.driver import compile_module, emit_kernel, module_ptx
from tileiras_async.targets import target
from tileiras_async.tilegpu.options import CodegenOptions

x86_only = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 hooks")
BIG = "matmul_f16_f16out_128x128x64"


def _module(root, cid):
    return read_module((root / f"{cid}.v13.4.tileirbc").read_bytes())


def _our_maps(cid, gpu):
    mod = _module(LAUNCH, cid)
    em = emit_kernel(mod, mod.functions[0], CodegenOptions(opt_level=3, target=gpu))
    return em.tensor_maps


@requires_corpus
@x86_only
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("cid,kc", [(BIG, 16), ("matmul_bf16_64x64x64", 32), ("matmul_f16_f32acc_64x64x32", 32)])
def test_the_maps_are_nvidias(cid, kc, gpu):
    """A's and B's maps describe the arrays NVIDIA's hook fills its first two maps from (parameters, element
    type); the boxes are our pipeline's K chunks (kc) in the stage layout's swizzle -- NVIDIA's where its K
    step is ours (the f32acc matmul).  (A third map, the output's: test_tensor_stores.)"""
    hooks = _our_maps(cid, gpu)
    assert hooks is not None
    loads = [m for m in hooks.maps if m.param in (15, 16)]
    assert [m.param for m in loads] == [15, 16] and hooks.params[15:17] == ((128, 64), (128, 64))
    nvidia = [m for m in _described_maps(*_entry(LAUNCH / f"{cid}.v13.4.{gpu}.host.o")) if m.param in (15, 16)]
    same = ("param", "base", "shape", "strides", "element")
    assert [[getattr(m, f) for f in same] for m in loads] == [[getattr(m, f) for f in same] for m in nvidia]
    (m, k), (_, n) = (s.box for s in nvidia)        # NVIDIA's A box: M x its K step; B's: its K step x 64
    a, b = loads
    assert a.box == (m, kc) and a.swizzle == {16: "32B", 32: "64B", 64: "128B"}[kc]     # kc 16-bit elements
    assert b.box == (kc, n) and b.swizzle == "128B"
    assert (loads == nvidia) == (k == kc)

@requires_corpus
@x86_only
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
def test_tf32_operands_land_unrounded_by_tma(gpu):
    """tf32 operands are copied as the f32 they are (the tensor core reads the bits as tf32; no rounding
    pass), by TMA through maps that say "tf32" as NVIDIA's do: A on both targets, and on sm_100 B too, N-major
    in 32-byte-atom swizzle as NVIDIA's sm_100 map has it (wgmma's tf32 B must be K-major: a transposing copy,
    no map on sm_90: test_tf32_b_is_transposed_through_registers_on_sm90)."""
    cid = "matmul_tf32_64x64x32"
    hooks = _our_maps(cid, gpu)
    nvidia = {m.param: m for m in _described_maps(*_entry(LAUNCH / f"{cid}.v13.4.{gpu}.host.o"))}
    loads = [m for m in hooks.maps if m.element == "tf32"]     # (sm_90's C map: test_tensor_stores)
    assert [m.param for m in loads] == ([15] if gpu == "sm_90" else [15, 16])
    same = ("param", "base", "shape", "strides", "element")
    for m in loads:
        assert [getattr(m, f) for f in same] == [getattr(nvidia[m.param], f) for f in same]
        assert m.element == "tf32"
    if gpu == "sm_100":
        assert loads[1].swizzle == nvidia[16].swizzle == "128B_base32B"
    ptx = module_ptx(_module(LAUNCH, cid), target(gpu))
    assert "cvt.rna.tf32" not in ptx and "cp.async.bulk.tensor" in ptx



@requires_corpus
def test_tf32_b_is_transposed_through_registers_on_sm90():
    """wgmma's tf32 B is K-major in shared memory, the array N-major: as cuTile launches it (16-byte aligned
    rows, sizes multiples of 16) B's copies are 16-byte loads along N and shared stores of K runs, recorded
    as `transpose` on B's copies by the pipeline pass; unhinted, nothing promises the loads aligned or wholly
    in bounds: B is copied one f32 at a time by cp.async, no vector load."""
    from tileiras_async.tilegpu.ir import walk_ops
    cid = "matmul_tf32_64x64x32"
    launch = _module(LAUNCH, cid)
    em = emit_kernel(launch, launch.functions[0], CodegenOptions(opt_level=3, target="sm_90"))
    copies = [op for op in walk_ops(em.fn.body) if op.name == "tilegpu.async_copy"]
    assert {(op.attrs["role"], op.attrs["vb"], bool(op.attrs.get("transpose"))) for op in copies} == {
        ("a", 16, False), ("b", 16, True)}
    ptx = module_ptx(launch, target("sm_90"))
    assert "ld.global.v4.b32" in ptx and "cp.async.ca" not in ptx and "cp.async.cg" not in ptx
    # a thread's two loads are consecutive K rows of one column block: each column's pair is one shared store
    assert "st.shared.b32" not in ptx and len(re.findall(r"st\.shared\.v2\.b32 \[%r\d+\], \{", ptx)) >= 4
    plain = module_ptx(_module(PUBLIC, cid), target("sm_90"))
    assert "ld.global.v4.b32" not in plain and "cp.async.ca.shared.global [%r" in plain


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
def test_unhinted_matmul_keeps_cp_async(gpu):
    """Without launch hints nothing promises what a map needs: the copies stay cp.async, no hidden parameter."""
    mod = _module(PUBLIC, BIG)
    assert emit_kernel(mod, mod.functions[0], CodegenOptions(opt_level=3, target=gpu)).tensor_maps is None
    ptx = module_ptx(mod, target(gpu))
    assert "cp.async.bulk.tensor" not in ptx and ".b8" not in ptx.split("{", 1)[0] and "cp.async.cg" in ptx


@requires_corpus
def test_the_tensor_copy_code(monkeypatch):
    """A single-warpgroup TMA loop (the form a loop keeps where the schedule does not warp-specialise it:
    test_warp_specialization has the split form): one elected thread expects the bytes and issues the boxes;
    every thread waits for the phase; the maps are prefetched, the mbarriers initialised (invalidated only
    after loops that run again: not this one, as in NVIDIA's code; test_tensor_copies_in_a_loop_over_tiles has
    those)."""
    from tileiras_async.tilegpu.passes import schedule_loops
    monkeypatch.setattr(schedule_loops, "WARP_SPECIALIZE", False)
    ptx = module_ptx(_module(LAUNCH, BIG), target("sm_90"))
    body = ptx.split("tileiras-async tensor maps", 1)[0]
    assert body.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") > 0
    assert "cp.async.cg" not in body                    # both operands by TMA
    assert body.count("prefetch.tensormap") == 2 and "fence.mbarrier_init.release.cluster" in body
    assert "mbarrier.try_wait.parity.shared.b64" in body and "mbarrier.inval.shared.b64" not in body
    assert "elect.sync" in body
    # A chunk 128 x 16 f16, B chunk 16 x 128 f16 (two boxes of 16 x 64): 4096 bytes each, one arrival each
    assert set(re.findall(r"mbarrier\.arrive\.expect_tx\.shared\.b64 st, \[%r\d+\], (\d+);", body)) == {"4096"}
    assert re.search(r"mbarrier\.init\.shared\.b64 \[%r\d+\+0\], 2;", body)


def _hidden_params(ptx: str) -> list[int]:
    return [int(n) for n in re.findall(r"\.param \.align 64 \.b8 \w+_param_(\d+)\[128\]", ptx)]


@requires_corpus
@x86_only
def test_launch_metadata_is_nvidias(tmp_path):
    """Our cubin of the TMA matmul against NVIDIA's: the hidden maps follow the user's 15 parameters at NVIDIA's
    positions (size 128, align 64; the third the output's, for the epilogue's TMA store, as NVIDIA's), both
    cubins carry `.nv.host`, the parameter records of what the user passes are the same, and the hook in our
    cubin's `.nv.host` writes maps of NVIDIA's A, B and C arrays."""
    from tileiras_async.emu.host_object import fill_tensor_maps, parse_host_object
    from tileiras_async.emu.isa.tensor_copy import decode_tensor_map
    from tileiras_async.emu.parser import parse_ptx
    from tileiras_async.toolchain.cubin import host_object, launch_params
    tool = nvidia_bin("tileiras")
    if tool is None:
        pytest.skip("NVIDIA's tileiras is not installed")
    mod = _module(LAUNCH, BIG)
    ptx = module_ptx(mod, target("sm_90"))
    ours = compile_module(mod, target("sm_90"))
    out = tmp_path / "nvidia.cubin"
    subprocess.run([str(tool), "--gpu-name", "sm_90", "-O3", str(LAUNCH / f"{BIG}.v13.4.tileirbc"), "-o", str(out)],
                   env=nvidia_env(), check=True, capture_output=True)
    theirs = out.read_bytes()
    nvidia_ptx = (LAUNCH / f"{BIG}.v13.4.sm_90.ptx").read_text()
    assert _hidden_params(ptx) == _hidden_params(nvidia_ptx) == [15, 16, 17]
    kernel = mod.functions[0].name.decode()
    mine, nv = launch_params(ours)[kernel], launch_params(theirs)[kernel]
    assert nv.v2 and not mine.v2   # NVIDIA's records (_V2) leave the hidden maps out, ours (PTX 8.1) list them
    # the user's parameters where NVIDIA has them; ours (PTX 8.1) lists the maps too, at the offsets the hooks use
    assert mine.params[:15] == nv.params and len(nv.params) == 15
    assert mine.params[15:] == ((15, 0x70, 128), (16, 0xf0, 128), (17, 0x170, 128))
    assert (mine.bank_offset, mine.bank_bytes) == (nv.bank_offset, nv.bank_bytes) == (0x210, 0x70 + 3 * 128)
    assert host_object(theirs) is not None
    hook = parse_host_object(host_object(ours), "ours")
    nvidia_target, _, nvidia_params, nvidia_hook = _entry(LAUNCH / f"{BIG}.v13.4.sm_90.host.o")
    our_params = parse_ptx(ptx).functions[kernel].params
    rng = random.Random(BIG)
    for large in (False, True):
        values = _random_values(nvidia_params, rng, large)
        expected = fill_tensor_maps(nvidia_hook, kernel, nvidia_target, nvidia_params, values)
        got = fill_tensor_maps(hook, kernel, "sm_90a", our_params, values[:15] + [None] * 3)
        # the same array; the box is our K chunk (test_the_maps_are_nvidias), C's a warp's 16 rows of 64
        for i in (15, 16, 17):
            mine, theirs = decode_tensor_map(got[i]), decode_tensor_map(expected[i])
            assert mine == dataclasses.replace(theirs, box=mine.box, swizzle=mine.swizzle)
            assert mine.box == {15: (16, 128), 16: (64, 16), 17: (64, 16)}[i] and got[i][64:] == bytes(64)


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_103", "sm_110", "sm_120"])
def test_targets_whose_hooks_are_not_known_keep_cp_async(gpu):
    """TMA needs the host object's parameter layout, known for sm_90 and sm_100 only (targets): elsewhere the
    hinted matmul compiles with cp.async copies and no hidden parameter."""
    mod = _module(LAUNCH, BIG)
    assert _our_maps(BIG, gpu) is None
    ptx = module_ptx(mod, target(gpu))
    assert "cp.async.bulk.tensor" not in ptx and "tileiras-async tensor maps" not in ptx


def _verified(module):
    from tileiras_async.ir.verifier import verify_module
    diags = verify_module(module)
    assert not diags, [d.render() for d in diags]
    return module


def build_hinted_kloops(tm=64, tn=64, tk=64):
    """C[t, 0] = sum over k in range(lb, ub) of A[t, k + 1] @ B[k + 1, 0] for t in range(tiles): a K-loop inside a
    loop over output tiles (each tile runs the pipelined loop, its mbarriers initialised and released again),
    the arrays with cuTile's launch hints (16-byte aligned bases, row strides multiples of 8 elements, literal
    unit inner strides); arguments A, B, C (pointer, extents, strides each, as cuTile passes arrays), then tiles,
    lb, ub."""
    from tileiras_async.ir.attrs import DivByAttr
    from tileiras_async.ir.builder import ModuleBuilder, tile
    from tileiras_async.ir.enums import MemoryOrderingSemantics as MO
    from tileiras_async.ir.types import DYNAMIC as DYN
    from tileiras_async.ir import types as T
    mb = ModuleBuilder((13, 4, 0))
    i32 = tile(T.I32)
    acc_t = tile(T.F32, tm, tn)
    arrays = [(T.F16, (tm, tk)), (T.F16, (tk, tn)), (T.F32, (tm, tn))]
    args = []
    for e, _ in arrays:
        args += [tile(T.PointerType(e))] + [i32] * 4
    args += [i32] * 3
    with mb.kernel("kloops", args) as kb:
        pvs = []
        for j, (e, ts) in enumerate(arrays):
            base, s0, s1, st0, _unit = kb.args[5 * j:5 * j + 5]       # cuTile passes the unit stride too
            base = kb.op("assume", [base.type], value=base, predicate=DivByAttr(16)).result
            st0 = kb.op("assume", [i32], value=st0, predicate=DivByAttr(8)).result
            tv_t = T.TensorViewType(e, (DYN, DYN), (DYN, 1))
            tv = kb.op("make_tensor_view", [tv_t], base=base, dynamicShape=[s0, s1], dynamicStrides=[st0]).result
            pvs.append(kb.op("make_partition_view", [T.PartitionViewType(ts, tv_t, (0, 1), None)],
                             tensor_view=tv).result)
        tiles, lb, ub = kb.args[-3:]
        zero, one = kb.constant(np.int32(0), i32), kb.constant(np.int32(1), i32)
        with kb.region([i32]) as outer:
            (t,) = outer.block.args
            init = outer.constant(np.float32(0), acc_t)
            with outer.region([i32, acc_t]) as body:
                iv, acc = body.block.args
                k = body.op("addi", [i32], lhs=iv, rhs=one).result
                a = body.op("load_view_tko", [tile(T.F16, tm, tk), T.TOKEN], view=pvs[0], index=[t, k],
                            memory_ordering_semantics=MO.weak).results[0]
                b = body.op("load_view_tko", [tile(T.F16, tk, tn), T.TOKEN], view=pvs[1], index=[k, zero],
                            memory_ordering_semantics=MO.weak).results[0]
                body.op("continue", operands=[body.op("mmaf", [acc_t], lhs=a, rhs=b, acc=acc).result])
            res = outer.op("for", [acc_t], regions=[body.built_region], lowerBound=lb, upperBound=ub, step=one,
                           initValues=[init]).result
            outer.op("store_view_tko", [T.TOKEN], tile=res, view=pvs[2], index=[t, zero],
                     memory_ordering_semantics=MO.weak)
            outer.op("continue", operands=[])
        kb.op("for", [], regions=[outer.built_region], lowerBound=zero, upperBound=tiles, step=one, initValues=[])
        kb.op("return")
    return _verified(mb.module)


@x86_only
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("lb,ub", [(0, 0), (0, 1), (0, 2), (0, 5), (-3, 2), (2, 4)])
@pytest.mark.parametrize("t", [64, 32], ids=["wgmma", "mma_sync"])
def test_tensor_copies_in_a_loop_over_tiles(gpu, lb, ub, t):
    """Trip counts 0, 1, fewer and more than the stages, tiles partly or wholly outside A and B (TMA reads
    zeros there), the pipelined loop run once per output tile, its mma on wgmma / tcgen05 (64 x 64 tiles) or
    mma.sync (32 x 32: unpadded stage rows read by ldmatrix): the emulated kernel (race check on, maps filled
    by the hook in our cubin) computes the reference."""
    from tileiras_async.emu.runner import run_compiled
    module = build_hinted_kloops(t, t, t)
    hooks = emit_kernel(module, module.functions[0], CodegenOptions(opt_level=3, target=gpu)).tensor_maps
    assert hooks is not None and len(hooks.maps) == 2
    rng = np.random.default_rng(abs(lb * 10 + ub))
    tiles, K = 3, t * 4 + 16                        # K: a partial last tile
    A = rng.standard_normal((t * tiles, K)).astype(np.float16)
    B = rng.standard_normal((K, t)).astype(np.float16)
    C = np.full((t * tiles, t), np.nan, np.float32)
    run = run_compiled(module, (1,), [A, B, C, np.int32(tiles), np.int32(lb), np.int32(ub)], gpu_name=gpu,
                       check_races=True)
    assert "cp.async.bulk.tensor" in run.ptx and ("mma.sync" in run.ptx) == (t == 32)
    assert "mbarrier.inval" in run.ptx              # initialised again per tile
    padded_a = np.zeros((t * tiles, t * 8))         # zeros where the tiles leave A and B
    padded_a[:, :K] = A
    padded_b = np.zeros((t * 8, t))
    padded_b[:K] = B
    ref = np.zeros(C.shape)
    for i in range(tiles):
        rows = slice(t * i, t * i + t)
        for k in range(lb + 1, ub + 1):
            if 0 <= k < 8:
                ref[rows] += padded_a[rows, t * k:t * k + t] @ padded_b[t * k:t * k + t]
    np.testing.assert_allclose(C, ref, rtol=2e-3, atol=2e-3)


# the launch set's K-loops on mma.sync (the FMA chain for bmm_f32) whose NVIDIA PTX copies operands by TMA:
# kernel -> the hidden parameters of the maps of ours (NVIDIA's first ones; it maps its TMA store's C too)
MMA_SYNC_TMA = {"matmul_bf16_f32out_32x64x32": [15, 16], "matmul_ragged_f16_32x32x32": [15],
                "matmul_tf32_32x32x16": [15], "bmm_f16_32x32x32": [21, 22], "bmm_f32_16x32x16": [21]}

# -- tile loads by TMA (select-tile-tensor-copies) -----------------------------------------------------------

# the launch-set kernels without an mma whose NVIDIA PTX loads tiles by TMA
TILE_TMA = ("cumsum_carry_f32_t512", "cumsum_carry_i32_t128", "first_exceed_f32_16", "first_exceed_f32_64",
            "layernorm_f16_128", "layernorm_f32_64", "reduce1d_f16_t1024", "reduce1d_f32_t256",
            "reduce2d_rows_f16_16x128", "reduce2d_rows_f32_8x64", "rmsnorm_bf16_1024", "rmsnorm_f32_256")
# zero-padded, hinted tiles loaded once in kernels without a reduction: NVIDIA keeps ld.global there
ONE_SHOT = ("cumsum_rows_f32_128", "gather_idx_f32_t128", "math_chain_f32_t256")


@requires_corpus
@x86_only
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("cid", sorted(MMA_SYNC_TMA))
def test_mma_sync_maps_are_nvidias(cid, gpu):
    """Where NVIDIA copies an mma.sync / FMA operand by TMA, so do we, with NVIDIA's map: the same array
    (parameters, element type; 3-D for the batched kernels), box (one per K chunk) and swizzle (over the
    unpadded stage rows that ldmatrix or A's word reads address through it).  But for the tf32 operand's
    element type: ours rounds where the fragments are read (an f32 map)."""
    hooks = _our_maps(cid, gpu)
    assert hooks is not None and [m.param for m in hooks.maps] == MMA_SYNC_TMA[cid]
    nvidia = _described_maps(*_entry(LAUNCH / f"{cid}.v13.4.{gpu}.host.o"))[:len(hooks.maps)]
    if cid == "matmul_tf32_32x32x16":
        nvidia = [msgspec.structs.replace(m, element="f32") for m in nvidia]
    assert list(hooks.maps) == list(nvidia)
    assert {len(m.box) for m in hooks.maps} == {3 if cid.startswith("bmm") else 2}


@requires_corpus
def test_the_mma_sync_tensor_copy_code():
    """bmm f16: both operands by 3-D tensor copies of 1 x 32 x 32 f16 (2048 bytes a chunk, 64-byte swizzle),
    read by ldmatrix at row addresses XOR-ed as the swizzle moves them; each thread fences its reads for the
    async proxy before it releases the buffer (its arrival on the buffer's empty mbarrier), which the copies
    that overwrite it wait for: no barrier in the loop.  The ragged matmul's A, whose rows nothing promises
    aligned, stays cp.async."""
    ptx = module_ptx(_module(LAUNCH, "bmm_f16_32x32x32"), target("sm_90"))
    body = ptx.split("tileiras-async tensor maps", 1)[0]
    assert "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes" in body
    assert "cp.async.cg" not in body and "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16" in body
    assert re.search(r"and\.b32 \t%r\d+, %r\d+, 48;", body) and "xor.b32" in body     # 64B: bits 7-8 into 4-5
    assert set(re.findall(r"mbarrier\.arrive\.expect_tx\.shared\.b64 st, \[%r\d+\], (\d+);", body)) == {"2048"}
    assert body.count("bar.sync") == 1 and "cp.async.wait_group" not in body     # the mbarriers' publication
    reads = body.rindex("ldmatrix")
    assert body.index("fence.proxy.async.shared::cta; mbarrier.arrive.shared.b64", reads) > reads
    # in the loop: the unit's copies landed, its buffer's previous unit released, then the refill
    waits = [m.start() for m in re.finditer(r"mbarrier\.try_wait\.parity", body)]
    refill = body.index("cp.async.bulk.tensor", waits[-1])
    assert len(waits) == 2 and waits[0] < waits[1] < refill
    ragged = module_ptx(_module(LAUNCH, "matmul_ragged_f16_32x32x32"), target("sm_90"))
    assert "cp.async.bulk.tensor.2d" in ragged and "cp.async.cg" in ragged


def test_unpadded_rows_must_fit_the_planned_ring():
    """The bmm's mma.sync loop (tests/passes/select-tensor-copies/mma_sync_bmm.tir): TMA unpads its stage rows
    and aligns the ring to the swizzle.  choose-stage-copies chose them only because every ring the schedule
    may plan has room for that: select-tensor-copies builds them in the ring as planned (4 x 5120 with the
    padding), and a ring too small for them (here: no room for the alignment), which the decision ruled out,
    is an internal error rather than a quiet change of copies the schedule booked as TMA."""
    from pathlib import Path
    from tileiras_async.tilegpu.decisions import PIPELINE_PLAN
    from tileiras_async.tilegpu.errors import LoweringError
    from tileiras_async.tilegpu.ir import walk_ops
    from tileiras_async.tilegpu.parser import parse_kernel
    from tileiras_async.tilegpu.passes import tensor_copies
    text = (Path(__file__).parent / "passes" / "select-tensor-copies" / "mma_sync_bmm.tir").read_text()
    for unit_bytes, fits in ((5120, True), (4096, False)):
        k = parse_kernel(text)
        plan = next(op.attrs[PIPELINE_PLAN] for op in walk_ops(k.fn.body) if PIPELINE_PLAN in op.attrs)
        plan.geom.unit_bytes = unit_bytes          # as planned: 4 x 5120 with the padding
        if not fits:
            with pytest.raises(LoweringError, match="internal: the stage copies were chosen TMA"):
                tensor_copies.run(k)
            continue
        tensor_copies.run(k)
        xs = (plan.cand.a, plan.cand.b)
        assert all(x.tma is not None for x in xs)
        assert [(x.row, x.base) for x in xs] == [(64, 0), (64, 2048)]
        assert (plan.geom.unit_bytes, plan.geom.align) == (4096, 512)


def test_stage_copies_chosen_for_a_target_without_tensor_maps_are_one_error(capsys):
    """sm_90 IR whose loads carry choose-stage-copies' decision, run on for sm_80 (no TMA): one error line, exit 1,
    not cp.async copies quietly in place of those the schedule booked as TMA."""
    from pathlib import Path
    from tileiras_async.cli.batch import run as batch_run
    case = Path(__file__).parent / "passes" / "select-tensor-copies" / "hinted_wgmma.tir"
    assert batch_run(["opt", str(case), "--passes", "select-tensor-copies", "--gpu-name", "sm_80"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert "stage copies chosen TMA for sm_80, which has no tensor maps" in err[0]


@requires_corpus
def test_no_stage_copies_are_chosen_that_a_planned_ring_cannot_hold(monkeypatch):
    """choose-stage-copies keeps an mma.sync loop's cp.async copies where the unpadded rows of some geometry
    the schedule may fix do not fit its padded ring: with TMA destinations aligned to 8 KiB (a unit of 16 KiB
    instead of 5120 bytes) none does, and the bmm's operands keep their cp.async copies."""
    from tileiras_async.tilegpu.analysis import software_pipeline
    from tileiras_async.tilegpu.decisions import STAGE_COPY
    from tileiras_async.tilegpu.ir import KernelIR, clone_function, walk_ops
    from tileiras_async.tilegpu.passes import run_pipeline

    def chosen() -> list:
        module = _module(LAUNCH, "bmm_f16_32x32x32")
        k = KernelIR(module, clone_function(module.functions[0]), CodegenOptions(target="sm_90"))
        run_pipeline(k, until="choose-stage-copies")
        return [op.attrs.get(STAGE_COPY) for op in walk_ops(k.fn.body) if op.name == "load_view_tko"]

    assert chosen() == ["tma", "tma"]
    monkeypatch.setattr(software_pipeline, "TMA_ALIGN", 8192)
    assert chosen() == [None, None]


@requires_corpus
@x86_only
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("cid", TILE_TMA)
def test_tile_loads_use_nvidias_maps(cid, gpu):
    """Every kernel of the launch set whose NVIDIA PTX loads a tile by TMA does so in ours, through maps that
    describe the same arrays in the same boxes in the same hidden parameters (the host-object comparison of
    test_host_object_gen), one mbarrier wait per load."""
    hooks = _our_maps(cid, gpu)
    nvidia = _described_maps(*_entry(LAUNCH / f"{cid}.v13.4.{gpu}.host.o"))
    assert hooks is not None and list(hooks.maps) == list(nvidia)
    assert hooks.params[-len(nvidia):] == ((128, 64),) * len(nvidia)
    ptx = module_ptx(_module(LAUNCH, cid), target(gpu))
    nvidia_ptx = (LAUNCH / f"{cid}.v13.4.{gpu}.ptx").read_text()
    assert _hidden_params(ptx) == _hidden_params(nvidia_ptx) == [m.param for m in nvidia]
    body = ptx.split("tileiras-async tensor maps", 1)[0]
    ranks = {len(m.box) for m in nvidia}
    assert {int(r) for r in re.findall(r"cp\.async\.bulk\.tensor\.(\d)d", body)} == ranks
    assert body.count("mbarrier.try_wait.shared.b64") == body.count("mbarrier.arrive.expect_tx")


@requires_corpus
@pytest.mark.parametrize("cid", ONE_SHOT)
def test_one_shot_tiles_keep_ld_global(cid):
    """A tile loaded once by a kernel that reduces nothing stays ld.global, as in NVIDIA's PTX."""
    assert "cp.async.bulk.tensor" not in (LAUNCH / f"{cid}.v13.4.sm_90.ptx").read_text()
    assert _our_maps(cid, "sm_90") is None
    ptx = module_ptx(_module(LAUNCH, cid), target("sm_90"))
    assert "cp.async.bulk.tensor" not in ptx and "mbarrier" not in ptx and "ld.global" in ptx


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
def test_unhinted_tile_loads_keep_ld_global(gpu):
    """Without launch hints nothing promises the alignment a map needs: no map, no mbarrier."""
    mod = _module(PUBLIC, "reduce1d_f32_t256")
    assert emit_kernel(mod, mod.functions[0], CodegenOptions(opt_level=3, target=gpu)).tensor_maps is None
    ptx = module_ptx(mod, target(gpu))
    assert "cp.async.bulk.tensor" not in ptx and "mbarrier" not in ptx and "ld.global" in ptx


@requires_corpus
def test_the_tile_copy_code():
    """rmsnorm's 1 x 1024 bf16 row and 1024-element weight: four boxes of 256 each, 2048 bytes expected on
    each of two mbarriers that all 128 threads arrive on, the weight's copies issued before the row is
    waited for; each wait loop ends warp-uniformly; straight-line loads need no barrier before their copies,
    a load in a loop (first_exceed) waits for the previous iteration's reads and fences them from the async
    proxy."""
    ptx = module_ptx(_module(LAUNCH, "rmsnorm_bf16_1024"), target("sm_90"))
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") == 4
    assert ptx.count("cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") == 4
    assert re.findall(r"mbarrier\.arrive\.expect_tx\.shared\.b64 %rd\d+, \[%r\d+\], (\d+);", ptx) == ["2048"] * 2
    assert re.search(r"mbarrier\.init\.shared\.b64 \[%r\d+\+0\], 128; @p mbarrier\.init\.shared\.b64 "
                     r"\[%r\d+\+8\], 128;", ptx)
    assert ptx.count("@!p mbarrier.arrive.shared.b64") == 2 and ptx.count("vote.sync.all.pred") == 2
    assert ptx.rindex("cp.async.bulk.tensor.1d") < ptx.index("mbarrier.try_wait.shared.b64")
    assert "fence.proxy.async" not in ptx and "bar.sync" not in ptx.split("mbarrier.init", 1)[1].split(
        "mbarrier.try_wait", 1)[0].split("bar.sync", 1)[1]
    assert len(re.findall(r"\.shared \.align 128 \.b8 tma_tile\S*\[2048\]", ptx)) == 2
    loop = module_ptx(_module(LAUNCH, "first_exceed_f32_16"), target("sm_90"))
    assert loop.count("@p fence.proxy.async.shared::cta;") == 1


@requires_corpus
@x86_only
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("cid", ["reduce1d_f32_t256", "reduce2d_rows_f32_8x64", "rmsnorm_bf16_1024"])
def test_our_hook_writes_nvidias_tile_maps(cid, gpu):
    """The hook in our cubin's `.nv.host` writes, for the same arguments, the very bytes NVIDIA's hook
    writes into each map."""
    from tileiras_async.emu.host_object import fill_tensor_maps, parse_host_object
    from tileiras_async.emu.parser import parse_ptx
    from tileiras_async.toolchain.cubin import host_object
    mod = _module(LAUNCH, cid)
    kernel = mod.functions[0].name.decode()
    hook = parse_host_object(host_object(compile_module(mod, target(gpu))), "ours")
    our_params = parse_ptx(module_ptx(mod, target(gpu))).functions[kernel].params
    nvidia_target, _, nvidia_params, nvidia_hook = _entry(LAUNCH / f"{cid}.v13.4.{gpu}.host.o")
    rng = random.Random(cid + gpu)
    for large in (False, True):
        values = _random_values(nvidia_params, rng, large)
        expected = fill_tensor_maps(nvidia_hook, kernel, nvidia_target, nvidia_params, values)
        got = fill_tensor_maps(hook, kernel, nvidia_target, our_params, values)
        assert got == expected and expected


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("cid", ["cumsum_carry_i32_t128", "layernorm_f32_64", "reduce1d_f16_t1024",
                                 "reduce2d_rows_f16_16x128", "rmsnorm_f32_256"])
def test_tile_tma_kernels_compute_the_references(refs, cid, gpu):
    """The emulated kernels (race check on, maps filled by the hook in our cubin) compute the corpus
    references: straight-line loads, loads in loops (the mbarrier's phase advancing every iteration),
    several boxes per tile, partial tiles (TMA's zeros)."""
    from conftest import corpus_case
    from tileiras_async.emu.runner import run_compiled
    inputs, orig, grid = corpus_case(refs, cid)
    run = run_compiled(LAUNCH / f"{cid}.v13.4.tileirbc", grid, list(inputs.values()), gpu_name=gpu,
                       check_races=True)
    assert "cp.async.bulk.tensor" in run.ptx
    assert not refs.check(cid, orig, inputs)


def build_hinted_row_sums(reduce_inside: bool, tile_cols: int = 64):
    """OUT[b] = sum over t in range(lb, ub) of the (1 x tile_cols) tile (b, t) of X, zero-padded: tile loads
    in a loop over X's columns (a partial last tile, tiles past the end read as zeros), the sum reduced
    inside the loop (its own barrier every iteration) or accumulated elementwise and reduced after it.
    Arguments: X (pointer, rows, columns, row stride, unit stride; cuTile's hints), OUT (pointer, length,
    unit stride), lb, ub."""
    from test_interp_helpers import f32attr
    from tileiras_async.ir.attrs import DivByAttr
    from tileiras_async.ir.builder import ModuleBuilder, tile
    from tileiras_async.ir.enums import MemoryOrderingSemantics as MO, PaddingValue, RoundingMode as RM
    from tileiras_async.ir.types import DYNAMIC as DYN
    from tileiras_async.ir import types as T
    mb = ModuleBuilder((13, 4, 0))
    i32 = tile(T.I32)
    row_t, one_t = tile(T.F32, 1, tile_cols), tile(T.F32, 1)
    args = [tile(T.PointerType(T.F32))] + [i32] * 4 + [tile(T.PointerType(T.F32))] + [i32] * 2 + [i32] * 2

    def sum_region(b):
        with b.region([tile(T.F32), tile(T.F32)]) as r:
            r.op("yield", operands=[r.op("addf", [tile(T.F32)], lhs=r.args[0], rhs=r.args[1],
                                         rounding_mode=RM.nearest_even).result])
        return r.built_region

    def row_sum(b, v):
        return b.op("reduce", [one_t], [sum_region(b)], operands=[v], dim=1,
                    identities=(f32attr(0.0),)).results[0]

    with mb.kernel("row_sums", args) as kb:
        x, rows, cols, stride, _unit, out, n, _unit2, lb, ub = kb.args
        x = kb.op("assume", [x.type], value=x, predicate=DivByAttr(16)).result
        out = kb.op("assume", [out.type], value=out, predicate=DivByAttr(16)).result
        stride = kb.op("assume", [i32], value=stride, predicate=DivByAttr(4)).result
        xv_t = T.TensorViewType(T.F32, (DYN, DYN), (DYN, 1))
        xv = kb.op("make_tensor_view", [xv_t], base=x, dynamicShape=[rows, cols], dynamicStrides=[stride]).result
        xp = kb.op("make_partition_view", [T.PartitionViewType((1, tile_cols), xv_t, (0, 1), PaddingValue.zero)],
                   tensor_view=xv).result
        ov_t = T.TensorViewType(T.F32, (DYN,), (1,))
        ov = kb.op("make_tensor_view", [ov_t], base=out, dynamicShape=[n], dynamicStrides=[]).result
        op_ = kb.op("make_partition_view", [T.PartitionViewType((1,), ov_t, (0,), None)], tensor_view=ov).result
        bid = kb.op("get_tile_block_id", [i32, i32, i32]).results[0]
        one = kb.constant(np.int32(1), i32)
        acc_t = one_t if reduce_inside else row_t
        with kb.region([i32, acc_t]) as body:
            t, acc = body.block.args
            v = body.op("load_view_tko", [row_t, T.TOKEN], view=xp, index=[bid, t],
                        memory_ordering_semantics=MO.weak).results[0]
            part = row_sum(body, v) if reduce_inside else v
            body.op("continue", operands=[body.op("addf", [acc_t], lhs=acc, rhs=part,
                                                  rounding_mode=RM.nearest_even).result])
        init = kb.constant(np.zeros(acc_t.shape, np.float32), acc_t)
        acc = kb.op("for", [acc_t], regions=[body.built_region], lowerBound=lb, upperBound=ub, step=one,
                    initValues=[init]).result
        total = acc if reduce_inside else row_sum(kb, acc)
        kb.op("store_view_tko", [T.TOKEN], tile=total, view=op_, index=[bid], memory_ordering_semantics=MO.weak)
        kb.op("return")
    return _verified(mb.module)


@x86_only
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("reduce_inside", [False, True])
@pytest.mark.parametrize("lb,ub", [(0, 0), (0, 1), (0, 3), (0, 6), (-2, 2), (4, 7)])
def test_tile_tma_loads_in_a_loop(gpu, reduce_inside, lb, ub):
    """Trip counts 0, 1 and several, tiles before, across and after X's columns (TMA's zeros), the mbarrier
    phase advancing every iteration, the buffer reused with and without the loop's own barrier: the emulated
    kernel (race check on, maps filled by the hook in our cubin) computes the reference."""
    from tileiras_async.emu.runner import run_compiled
    module = build_hinted_row_sums(reduce_inside)
    ops = emit_kernel(module, module.functions[0], CodegenOptions(opt_level=3, target=gpu))
    assert ops.tensor_maps is not None and [m.box for m in ops.tensor_maps.maps] == [(1, 64)]
    rows, cols = 5, 64 * 4 + 24                   # a partial last tile
    X = np.random.default_rng(abs(lb * 10 + ub)).standard_normal((rows, cols + 8)).astype(np.float32)
    view = X[:, :cols]                            # row stride cols + 8 (a multiple of 16 bytes)
    OUT = np.full(rows, np.nan, np.float32)
    run = run_compiled(module, (rows,), [view, OUT, np.int32(lb), np.int32(ub)], gpu_name=gpu, check_races=True)
    assert "cp.async.bulk.tensor.2d" in run.ptx
    padded = np.zeros((rows, 64 * 8))
    padded[:, :cols] = view
    ref = sum((padded[:, 64 * t:64 * t + 64].sum(axis=1) for t in range(lb, ub) if 0 <= t < 8), np.zeros(rows))
    np.testing.assert_allclose(OUT, ref, rtol=1e-5, atol=1e-5)


def test_two_loads_with_one_tile_copy_slot_are_an_error():
    """issue-tile-tensor-copies gives each decided load its own mbarrier and buffer: a load copied after the
    decision (two loads naming one slot) is a clear error, not two copies racing on one buffer."""
    from pathlib import Path

    from tileiras_async.tilegpu.opt import OptError, opt_text
    case = Path(__file__).parent / "passes" / "issue-tile-tensor-copies" / "loops_not_prefetched.tir"
    text = case.read_text()
    assert "tilegpu.tma_issue" in opt_text(text, str(case), ["issue-tile-tensor-copies"], None)
    with pytest.raises(OptError, match="two tile loads share TMA slot 0"):
        opt_text(text.replace("slot = 1>", "slot = 0>"), str(case), ["issue-tile-tensor-copies"], None)


def _nvidia_tma_kernels() -> list[tuple[str, str]]:
    """(kernel, target) of the launch set whose NVIDIA PTX copies by TMA."""
    if not LAUNCH.is_dir():
        return []
    return [(p.name.split(".")[0], p.name.split(".")[-2]) for p in sorted(LAUNCH.glob("*.v13.4.sm_*.ptx"))
            if "cp.async.bulk.tensor" in p.read_text()]


@requires_corpus
def test_every_kernel_nvidia_copies_by_tma_we_do_too():
    """Issue 29's bar: wherever NVIDIA's tileiras uses TMA on the launch set (21 kernels on sm_90 and on
    sm_100: matmuls, batched matmuls, reductions, norms, scans), our code copies through tensor maps too."""
    pairs = _nvidia_tma_kernels()
    assert len(pairs) >= 42
    missing = [f"{cid} {gpu}" for cid, gpu in pairs
               if "cp.async.bulk.tensor" not in module_ptx(_module(LAUNCH, cid), target(gpu))]
    assert missing == []
