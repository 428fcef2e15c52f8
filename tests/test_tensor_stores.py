"""Tile stores by TMA (select-tile-tensor-stores, codegen/lower_tensor_copy.py `tensor_store`): an mma result of
16- or 32-bit elements leaves through shared memory (stmatrix, st.shared.v2) and each warp's tensor stores, as
NVIDIA's tool stores the launch set's matmul results on sm_90; its map follows the loads', as NVIDIA's does.
The emulated launches (tests/test_emu_manifest.py -k launch, tests/test_warp_specialization.py) run it on the
corpus; here hinted matmuls whose tiles leave the output partly check that the boxes clip at the tensor's
bounds (and tf32's B, transposed through registers in K runs: codegen/lower_software_pipeline.py).
"""
from __future__ import annotations

import platform
import re
import sys

import numpy as np
import pytest
from conftest import LAUNCH, REPO, requires_corpus
from test_host_object_gen import _described_maps, _entry

from tileiras_async.bytecode.reader import read_module
from tileiras_async.driver import emit_kernel, module_ptx
from tileiras_async.targets import target
from tileiras_async.tilegpu.options import CodegenOptions
from tileiras_async.tilegpu.passes import tile_tensor_stores

x86_only = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 hooks")

# launch-set kernels whose result leaves by TMA on sm_90: (shared stores a thread -- stmatrix x4 of 16-bit
# elements, st.shared.v2 of 32-bit ones --, tensor stores a warp: slabs of 16 rows by boxes of 128 bytes)
STORED = {"matmul_f16_f16out_128x128x64": (16, 4), "matmul_bf16_64x64x64": (4, 1),
          "matmul_f16_f32acc_64x64x32": (16, 2), "matmul_tf32_64x64x32": (16, 2)}
STAGING_STORE = r"(?:stmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16|st\.shared\.v2\.b32) \[%r\d+\+\d+\]"


def _module(cid):
    return read_module((LAUNCH / f"{cid}.v13.4.tileirbc").read_bytes())


@requires_corpus
@x86_only
@pytest.mark.parametrize("cid", sorted(STORED))
def test_the_result_leaves_by_tma_through_nvidias_third_map(cid, monkeypatch):
    """The output's map describes the array NVIDIA's hook fills its third map from, in the hidden parameter
    after the loads' (17, as NVIDIA's, where A and B both have maps; tf32's B has none on sm_90); its box is a
    warp's slab (16 rows) by one 128-byte swizzle span.  No thread stores to global memory; no CTA barrier is
    added (as many as the per-thread stores had); each elected lane waits for its stores' reads of the
    buffer."""
    mod = _module(cid)
    hooks = emit_kernel(mod, mod.functions[0], CodegenOptions(opt_level=3, target="sm_90")).tensor_maps
    store, loads = hooks.maps[-1], hooks.maps[:-1]
    nvidia = {m.param: m for m in _described_maps(*_entry(LAUNCH / f"{cid}.v13.4.sm_90.host.o"))}
    same = ("base", "shape", "strides", "element")
    assert [getattr(store, f) for f in same] == [getattr(nvidia[17], f) for f in same]
    assert store.param == loads[-1].param + 1 == (16 if cid == "matmul_tf32_64x64x32" else 17)
    width = 64 if store.element in ("f16", "bf16") else 32
    assert store.box == (16, width) and store.swizzle == "128B" and hooks.params[store.param] == (128, 64)
    ptx = module_ptx(mod, target("sm_90"))
    staged, stores = STORED[cid]
    assert len(re.findall(STAGING_STORE, ptx)) == staged
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group") == stores
    assert "st.global" not in ptx and "cp.async.bulk.wait_group.read 0" in ptx
    monkeypatch.setattr(tile_tensor_stores, "run", lambda k: None)
    before = module_ptx(mod, target("sm_90"))
    assert "st.global" in before and _barriers(ptx) == _barriers(before)


FMHA = REPO / "examples" / "suite" / "launch" / "fmha_f16.v13.4.tileirbc"


@x86_only
def test_attentions_output_leaves_through_nvidias_fourth_map(monkeypatch):
    """fmha as cuTile launches it (sm_90): O -- the loop's accumulator over the row sums, cast to f16 and
    reshaped to the output's rank-4 view -- leaves by TMA through a map in the hidden parameter after Q's, K's
    and V's (41, as NVIDIA's fourth), describing the array NVIDIA's hook fills that map from: rank 4, a box
    of 1 along the unit dimensions by a warp's slab (16 rows) by one 128-byte swizzle span (NVIDIA's box is
    64 rows: a store warp of its own stores each consumer warpgroup's half once an mbarrier says it is
    staged).  NVIDIA's hook lists the two outer dimensions the other way round (its coordinates too), which
    describes the same boxes: they are compared as a set.  No thread stores to global memory any more, and no
    CTA barrier is added."""
    sys.path.insert(0, str(REPO / "bench"))
    import _build
    if _build.real_tool() is None:
        pytest.skip("NVIDIA's tileiras (nvidia-cuda-tileiras) is not installed")
    mod = read_module(FMHA.read_bytes())
    hooks = emit_kernel(mod, mod.functions[0], CodegenOptions(opt_level=3, target="sm_90")).tensor_maps
    store = hooks.maps[-1]
    real = _build.real_ptx(FMHA, "sm_90")
    nvidia = {m.param: m for m in _described_maps(*_entry(real.with_suffix(".host.o")))}[41]
    assert (store.param, store.base, store.element, store.swizzle) == (41, nvidia.base, "f16", nvidia.swizzle)
    assert (store.shape[2:], store.strides[2:]) == (nvidia.shape[2:], nvidia.strides[2:])
    assert set(zip(store.shape[:2], store.strides[:2])) == set(zip(nvidia.shape[:2], nvidia.strides[:2]))
    assert store.box == (1, 1, 16, 64) and nvidia.box == (1, 1, 64, 64) and hooks.params[41] == (128, 64)
    ptx = module_ptx(mod, target("sm_90"))
    assert len(re.findall(STAGING_STORE, ptx)) == 4      # a thread's 32 elements: 8x8 blocks four at a time
    assert ptx.count("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group") == 1
    assert "st.global" not in ptx
    monkeypatch.setattr(tile_tensor_stores, "run", lambda k: None)
    before = module_ptx(mod, target("sm_90"))
    assert "st.global" in before and _barriers(ptx) == _barriers(before)


def _barriers(ptx: str) -> list[str]:
    return re.findall(r"\bbar(?:rier)?\.sync\s+([^;]*);", ptx)


@requires_corpus
@x86_only
def test_sm100_result_leaves_by_tma_through_nvidias_third_map(monkeypatch):
    """On sm_100 the 128x128 result comes out of tensor memory a row a thread (tcgen05.ld 32x32b: 256 bytes a
    thread) and leaves by TMA too: each thread writes its row in 16-byte runs (16 st.shared.v4, no
    stmatrix), each warp stores its 32 rows in two 32x64 boxes; the map describes the array NVIDIA's hook
    fills its third map from (parameter 17, after the loads'), 128B-swizzled as NVIDIA's (its box is 128
    rows: a store warp of its own stores the whole tile).  No thread stores to global memory, no CTA barrier
    is added."""
    cid = "matmul_f16_f16out_128x128x64"
    mod = _module(cid)
    hooks = emit_kernel(mod, mod.functions[0], CodegenOptions(opt_level=3, target="sm_100")).tensor_maps
    store = hooks.maps[-1]
    nvidia = {m.param: m for m in _described_maps(*_entry(LAUNCH / f"{cid}.v13.4.sm_100.host.o"))}
    same = ("base", "shape", "strides", "element", "swizzle")
    assert store.param == 17 and [getattr(store, f) for f in same] == [getattr(nvidia[17], f) for f in same]
    assert store.box == (32, 64) and hooks.params[store.param] == (128, 64)
    ptx = module_ptx(mod, target("sm_100"))
    assert len(re.findall(r"st\.shared\.v4\.b32 \[%r\d+\+\d+\]", ptx)) == 16 and "stmatrix" not in ptx
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group") == 2
    assert "st.global" not in ptx and "cp.async.bulk.wait_group.read 0" in ptx
    monkeypatch.setattr(tile_tensor_stores, "run", lambda k: None)
    before = module_ptx(mod, target("sm_100"))
    assert "st.global" in before and _barriers(ptx) == _barriers(before)


@requires_corpus
@pytest.mark.parametrize("cid", sorted(set(STORED) - {"matmul_f16_f16out_128x128x64"}))
def test_sm100_short_rows_keep_their_stores(cid):
    """The 64x64 results come out of tensor memory 16 rows a warp (tcgen05.ld 16x32bx2), 64 or 128 bytes a
    thread, which its 16-byte vector stores already write with one bounds check each: staging them would add
    more instructions than it saves (tensor_maps._LEAST_ROW_BYTES), so they stay per-thread and no third map
    is made."""
    mod = _module(cid)
    hooks = emit_kernel(mod, mod.functions[0], CodegenOptions(opt_level=3, target="sm_100")).tensor_maps
    assert [m.param for m in hooks.maps] == [15, 16]
    ptx = module_ptx(mod, target("sm_100"))
    assert "st.global.v4" in ptx and "st.shared.v4" not in ptx


def build_hinted_matmul(t: int, elem, out):
    """C = A @ B (`elem` operands -- f32 ones read as tf32 --, f32 accumulation, `out` result) over t x t output
    tiles, one per block (x: rows, y: columns), the K loop over `ktiles` t-wide chunks; the arrays with
    cuTile's launch hints (16-byte aligned bases, row strides and extents multiples of 16 elements).
    Arguments A, B, C (pointer, extents, strides each), then ktiles."""
    from tileiras_async.ir import types as T
    from tileiras_async.ir.attrs import DivByAttr
    from tileiras_async.ir.builder import ModuleBuilder, tile
    from tileiras_async.ir.enums import MemoryOrderingSemantics as MO, RoundingMode as RM
    from tileiras_async.ir.types import DYNAMIC as DYN
    mb = ModuleBuilder((13, 4, 0))
    i32 = tile(T.I32)
    acc_t = tile(T.F32, t, t)
    args = []
    for e in (elem, elem, out):
        args += [tile(T.PointerType(e))] + [i32] * 4
    with mb.kernel("stored", args + [i32]) as kb:
        pvs = []
        for j, e in enumerate((elem, elem, out)):
            base, s0, s1, st0, _unit = kb.args[5 * j:5 * j + 5]
            base = kb.op("assume", [base.type], value=base, predicate=DivByAttr(16)).result
            s0, s1, st0 = (kb.op("assume", [i32], value=v, predicate=DivByAttr(16)).result for v in (s0, s1, st0))
            tv_t = T.TensorViewType(e, (DYN, DYN), (DYN, 1))
            tv = kb.op("make_tensor_view", [tv_t], base=base, dynamicShape=[s0, s1], dynamicStrides=[st0]).result
            pvs.append(kb.op("make_partition_view", [T.PartitionViewType((t, t), tv_t, (0, 1), None)],
                             tensor_view=tv).result)
        bx, by, _ = kb.op("get_tile_block_id", [i32] * 3).results
        zero, one = kb.constant(np.int32(0), i32), kb.constant(np.int32(1), i32)
        init = kb.constant(np.float32(0), acc_t)
        with kb.region([i32, acc_t]) as body:
            k, acc = body.block.args
            a = body.op("load_view_tko", [tile(elem, t, t), T.TOKEN], view=pvs[0], index=[bx, k],
                        memory_ordering_semantics=MO.weak).results[0]
            b = body.op("load_view_tko", [tile(elem, t, t), T.TOKEN], view=pvs[1], index=[k, by],
                        memory_ordering_semantics=MO.weak).results[0]
            if elem == T.F32:   # read as tf32, as cuTile's tf32 matmul does
                a, b = (body.op("ftof", [tile(T.TF32, t, t)], **{"from": x}, rounding_mode=RM.nearest_even).result
                        for x in (a, b))
            body.op("continue", operands=[body.op("mmaf", [acc_t], lhs=a, rhs=b, acc=acc).result])
        res = kb.op("for", [acc_t], regions=[body.built_region], lowerBound=zero, upperBound=kb.args[-1], step=one,
                    initValues=[init]).result
        if out != T.F32:
            res = kb.op("ftof", [tile(out, t, t)], **{"from": res}, rounding_mode=RM.nearest_even).result
        kb.op("store_view_tko", [T.TOKEN], tile=res, view=pvs[2], index=[bx, by], memory_ordering_semantics=MO.weak)
        kb.op("return")
    return mb.module


@x86_only
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("kind", ["f16", "tf32"])
@pytest.mark.parametrize("rows,cols", [(128, 128), (112, 80), (80, 16)])
def test_the_boxes_clip_at_the_tensors_bounds(kind, rows, cols, gpu):
    """C's last row and column of tiles partly (112 x 80: rows of 16 and columns of 48 beyond it) or mostly
    (80 x 16: three warps' slabs of the second row of tiles outside) outside the array, K a chunk short of the
    last tile: the emulated kernel (race check on, strict memory checks: a store past C faults) writes exactly
    C, the product (f16 out of f16 operands; f32 out of f32 ones read as tf32, B transposed through registers
    in K runs).  On sm_100 the 128x128 tiles' results come out of tensor memory a row a thread and are staged
    by st.shared.v4 (64x64 ones, 128 bytes a thread, keep their stores: tensor_maps._LEAST_ROW_BYTES)."""
    from tileiras_async.emu.runner import run_compiled
    from tileiras_async.ir import types as T
    t, K = (64 if gpu == "sm_90" else 128), 112
    ktiles = -(-K // t)
    elem, out, np_elem, np_out = ((T.F16, T.F16, np.float16, np.float16) if kind == "f16"
                                  else (T.F32, T.F32, np.float32, np.float32))
    rng = np.random.default_rng(rows * 1000 + cols)
    A = rng.standard_normal((rows, K)).astype(np_elem)
    B = rng.standard_normal((K, cols)).astype(np_elem)
    C = np.full((rows, cols), np.nan, np_out)
    grid = (-(-rows // t), -(-cols // t), 1)
    run = run_compiled(build_hinted_matmul(t, elem, out), grid, [A, B, C, np.int32(ktiles)], gpu_name=gpu,
                       check_races=True)
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in run.ptx and "st.global" not in run.ptx
    assert ("st.shared.v4.b32" in run.ptx) == (gpu == "sm_100") and ("tcgen05.ld" in run.ptx) == (gpu == "sm_100")
    if kind == "tf32" and gpu == "sm_90":
        assert "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32" in run.ptx and "st.shared.b32" not in run.ptx
    ref = (A.astype(np.float64) @ B.astype(np.float64))
    tol = 2e-2 if kind == "f16" else 3e-2      # f16 rounding of the result; tf32's 10-bit mantissa
    np.testing.assert_allclose(C.astype(np.float64), ref, rtol=tol, atol=tol)


def build_hinted_heads(t: int):
    """C[:, h, :] = A @ B for every head h (grid y), t x t output tiles (grid x: rows), f16 operands, f32
    accumulation over `ktiles` t-wide chunks, f16 result: the accumulator reshaped to 1 x t x t and stored
    through a view of C (rows x heads x columns) that orders the tile's dimensions (head, rows, columns) as
    the tensor's 1, 0, 2 -- as attention stores a head's rows into a (sequence, heads, dimension) output.
    Every array's base and strides carry cuTile's launch hints (16-byte aligned), no extent does.  Arguments
    A, B (pointer, extents, strides), C (pointer, 3 extents, 3 strides), then ktiles."""
    from tileiras_async.ir import types as T
    from tileiras_async.ir.attrs import DivByAttr
    from tileiras_async.ir.builder import ModuleBuilder, tile
    from tileiras_async.ir.enums import MemoryOrderingSemantics as MO, RoundingMode as RM
    from tileiras_async.ir.types import DYNAMIC as DYN
    mb = ModuleBuilder((13, 4, 0))
    i32 = tile(T.I32)
    acc_t = tile(T.F32, t, t)
    ptr = tile(T.PointerType(T.F16))
    with mb.kernel("heads", [ptr] + [i32] * 4 + [ptr] + [i32] * 4 + [ptr] + [i32] * 6 + [i32]) as kb:
        def hinted(v):
            return kb.op("assume", [v.type], value=v, predicate=DivByAttr(16)).result

        def view(base, shape, strides, tile_shape, dim_map):
            rank = len(shape)
            tv_t = T.TensorViewType(T.F16, (DYN,) * rank, (DYN,) * (rank - 1) + (1,))
            tv = kb.op("make_tensor_view", [tv_t], base=hinted(base), dynamicShape=list(shape),
                       dynamicStrides=[hinted(v) for v in strides]).result
            return kb.op("make_partition_view", [T.PartitionViewType(tile_shape, tv_t, dim_map, None)],
                         tensor_view=tv).result
        a = view(kb.args[0], kb.args[1:3], kb.args[3:4], (t, t), (0, 1))
        b = view(kb.args[5], kb.args[6:8], kb.args[8:9], (t, t), (0, 1))
        c = view(kb.args[10], kb.args[11:14], kb.args[14:16], (1, t, t), (1, 0, 2))
        bx, head, _ = kb.op("get_tile_block_id", [i32] * 3).results
        zero, one = kb.constant(np.int32(0), i32), kb.constant(np.int32(1), i32)
        init = kb.constant(np.float32(0), acc_t)
        with kb.region([i32, acc_t]) as body:
            k, acc = body.block.args
            x = body.op("load_view_tko", [tile(T.F16, t, t), T.TOKEN], view=a, index=[bx, k],
                        memory_ordering_semantics=MO.weak).results[0]
            y = body.op("load_view_tko", [tile(T.F16, t, t), T.TOKEN], view=b, index=[k, zero],
                        memory_ordering_semantics=MO.weak).results[0]
            body.op("continue", operands=[body.op("mmaf", [acc_t], lhs=x, rhs=y, acc=acc).result])
        res = kb.op("for", [acc_t], regions=[body.built_region], lowerBound=zero, upperBound=kb.args[-1], step=one,
                    initValues=[init]).result
        res = kb.op("ftof", [tile(T.F16, t, t)], **{"from": res}, rounding_mode=RM.nearest_even).result
        res = kb.op("reshape", [tile(T.F16, 1, t, t)], source=res).result
        kb.op("store_view_tko", [T.TOKEN], tile=res, view=c, index=[head, bx, zero], memory_ordering_semantics=MO.weak)
        kb.op("return")
    return mb.module


@x86_only
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
def test_a_store_through_a_reordering_view_lands_in_the_tensors_order(gpu):
    """The heads of C (80 rows: the second row of tiles mostly outside, its boxes clipped) written through a
    rank-3 map whose dimensions follow the tensor's (rows, heads, columns), the tile's (head, rows, columns)
    coordinates reordered to them: the emulated kernel (race check on, strict memory checks) writes exactly
    every head's product, nothing else."""
    from tileiras_async.emu.runner import run_compiled
    t, rows, heads, K = (64 if gpu == "sm_90" else 128), 80, 3, 128
    rng = np.random.default_rng(7)
    A = rng.standard_normal((rows, K)).astype(np.float16)
    B = rng.standard_normal((K, t)).astype(np.float16)
    C = np.full((rows, heads, t), np.nan, np.float16)
    run = run_compiled(build_hinted_heads(t), (-(-rows // t), heads, 1), [A, B, C, np.int32(K // t)],
                       gpu_name=gpu, check_races=True)
    assert "cp.async.bulk.tensor.3d.global.shared::cta" in run.ptx and "st.global" not in run.ptx
    ref = A.astype(np.float64) @ B.astype(np.float64)
    for h in range(heads):
        np.testing.assert_allclose(C[:, h, :].astype(np.float64), ref, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("buffers,fits", [(223232, True), (224256, False)])
def test_shared_memory_is_placed_within_what_the_staging_buffer_leaves(buffers, fits):
    """A TMA store's staging buffer is shared memory beside the kernel's buffers: allocate-shared-memory places
    them within the target's limit (sm_90: 232448 bytes) less the buffer and its alignment's padding (8192 +
    1024 for the 64x64 f16 tile), and says so when they do not fit rather than leave ptxas to refuse it."""
    from tileiras_async.tilegpu.opt import OptError, opt_text
    case = REPO / "tests" / "passes" / "select-tile-tensor-stores" / "fragment_tile.tir"
    stored = opt_text(case.read_text(), str(case), ["select-tile-tensor-stores"])
    assert "tilegpu.tile_store" in stored
    constant = "  %17 = cuda_tile.constant dense<1.0> : tile<64x64xf16, #linear0>\n"
    alloc = f'  %20 = "tilegpu.local_alloc"() {{align = 1024}} : () -> (smem<{buffers}>)\n'
    text = stored.replace(constant, constant + alloc)
    if fits:
        assert re.search(r'"tilegpu.local_alloc"\(\) \{align = 1024, offset = 0\}',
                         opt_text(text, "t", ["allocate-shared-memory"]))
    else:
        with pytest.raises(OptError, match=r"needs 224256 bytes of shared memory \(limit 223232\)"):
            opt_text(text, "t", ["allocate-shared-memory"])
