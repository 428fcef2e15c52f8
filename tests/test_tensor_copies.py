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
    step is ours (the f32acc matmul)."""
    hooks = _our_maps(cid, gpu)
    assert hooks is not None and [m.param for m in hooks.maps] == [15, 16]
    assert hooks.params[15:] == ((128, 64), (128, 64))
    nvidia = [m for m in _described_maps(*_entry(LAUNCH / f"{cid}.v13.4.{gpu}.host.o")) if m.param in (15, 16)]
    same = ("param", "base", "shape", "strides", "element")
    assert [[getattr(m, f) for f in same] for m in hooks.maps] == [[getattr(m, f) for f in same] for m in nvidia]
    (m, k), (_, n) = (s.box for s in nvidia)        # NVIDIA's A box: M x its K step; B's: its K step x 64
    a, b = hooks.maps
    assert a.box == (m, kc) and a.swizzle == {16: "32B", 32: "64B", 64: "128B"}[kc]     # kc 16-bit elements
    assert b.box == (kc, n) and b.swizzle == "128B"
    assert (list(hooks.maps) == nvidia) == (k == kc)

@requires_corpus
@x86_only
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
def test_tf32_operands_land_unrounded_by_tma(gpu):
    """tf32 operands are copied as the f32 they are (the tensor core reads the bits as tf32; no rounding
    pass), by TMA through maps that say "tf32" as NVIDIA's do: A on both targets, and on sm_100 B too, N-major
    in 32-byte-atom swizzle as NVIDIA's sm_100 map has it (wgmma's tf32 B must be K-major: a transposing copy,
    so it stays cp.async on sm_90)."""
    cid = "matmul_tf32_64x64x32"
    hooks = _our_maps(cid, gpu)
    nvidia = {m.param: m for m in _described_maps(*_entry(LAUNCH / f"{cid}.v13.4.{gpu}.host.o"))}
    assert [m.param for m in hooks.maps] == ([15] if gpu == "sm_90" else [15, 16])
    same = ("param", "base", "shape", "strides", "element")
    for m in hooks.maps:
        assert [getattr(m, f) for f in same] == [getattr(nvidia[m.param], f) for f in same]
        assert m.element == "tf32"
    if gpu == "sm_100":
        assert hooks.maps[1].swizzle == nvidia[16].swizzle == "128B_base32B"
    ptx = module_ptx(_module(LAUNCH, cid), target(gpu))
    assert "cvt.rna.tf32" not in ptx and "cp.async.bulk.tensor" in ptx



@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
def test_unhinted_matmul_keeps_cp_async(gpu):
    """Without launch hints nothing promises what a map needs: the copies stay cp.async, no hidden parameter."""
    mod = _module(PUBLIC, BIG)
    assert emit_kernel(mod, mod.functions[0], CodegenOptions(opt_level=3, target=gpu)).tensor_maps is None
    ptx = module_ptx(mod, target(gpu))
    assert "cp.async.bulk.tensor" not in ptx and ".b8" not in ptx.split("{", 1)[0] and "cp.async.cg" in ptx


@requires_corpus
def test_the_tensor_copy_code():
    """One elected thread expects the bytes and issues the boxes; every thread waits for the phase; the maps
    are prefetched, the mbarriers initialised (invalidated only after loops that run again: not this one, as
    in NVIDIA's code; test_tensor_copies_in_a_loop_over_tiles has those)."""
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
    positions (size 128, align 64; NVIDIA adds a third for its TMA store), both cubins carry `.nv.host`, the
    parameter records of what the user passes are the same, and the hook in our cubin's `.nv.host` writes
    maps of NVIDIA's A and B arrays."""
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
    assert _hidden_params(ptx) == [15, 16] and _hidden_params(nvidia_ptx) == [15, 16, 17]
    kernel = mod.functions[0].name.decode()
    mine, nv = launch_params(ours)[kernel], launch_params(theirs)[kernel]
    # the user's parameters where NVIDIA has them; ours (PTX 8.1) lists the maps too, at the offsets the hooks use
    assert mine.params[:15] == nv.params and len(nv.params) == 15
    assert mine.params[15:] == ((15, 0x70, 128), (16, 0xf0, 128))
    assert (mine.bank_offset, mine.bank_bytes) == (nv.bank_offset, nv.bank_bytes - 128) == (0x210, 0x70 + 2 * 128)
    assert host_object(theirs) is not None
    hook = parse_host_object(host_object(ours), "ours")
    nvidia_target, _, nvidia_params, nvidia_hook = _entry(LAUNCH / f"{BIG}.v13.4.sm_90.host.o")
    our_params = parse_ptx(ptx).functions[kernel].params
    rng = random.Random(BIG)
    for large in (False, True):
        values = _random_values(nvidia_params, rng, large)
        expected = fill_tensor_maps(nvidia_hook, kernel, nvidia_target, nvidia_params, values)
        got = fill_tensor_maps(hook, kernel, "sm_90a", our_params, values[:15] + [None, None])
        for i in (15, 16):      # the same array; the box is our K chunk (test_the_maps_are_nvidias)
            mine, theirs = decode_tensor_map(got[i]), decode_tensor_map(expected[i])
            assert mine == dataclasses.replace(theirs, box=mine.box, swizzle=mine.swizzle)
            assert mine.box == {15: (16, 128), 16: (64, 16)}[i] and got[i][64:] == bytes(64)


@requires_corpus
@pytest.mark.parametrize("gpu", ["sm_103", "sm_110", "sm_120"])
def test_targets_whose_hooks_are_not_known_keep_cp_async(gpu):
    """TMA needs the host object's parameter layout, known for sm_90 and sm_100 only (targets): elsewhere the
    hinted matmul compiles with cp.async copies and no hidden parameter."""
    mod = _module(LAUNCH, BIG)
    assert _our_maps(BIG, gpu) is None
    ptx = module_ptx(mod, target(gpu))
    assert "cp.async.bulk.tensor" not in ptx and "tileiras-async tensor maps" not in ptx


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
    from tileiras_async.ir.verifier import verify_module
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
    diags = verify_module(mb.module)
    assert not diags, [d.render() for d in diags]
    return mb.module


@x86_only
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
@pytest.mark.parametrize("lb,ub", [(0, 0), (0, 1), (0, 2), (0, 5), (-3, 2), (2, 4)])
def test_tensor_copies_in_a_loop_over_tiles(gpu, lb, ub):
    """Trip counts 0, 1, fewer and more than the stages, tiles partly or wholly outside A and B (TMA reads
    zeros there), the pipelined loop run once per output tile: the emulated kernel (race check on, maps
    filled by the hook in our cubin) computes the reference."""
    from tileiras_async.emu.runner import run_compiled
    module = build_hinted_kloops()
    hooks = emit_kernel(module, module.functions[0], CodegenOptions(opt_level=3, target=gpu)).tensor_maps
    assert hooks is not None and len(hooks.maps) == 2
    rng = np.random.default_rng(abs(lb * 10 + ub))
    tiles, K = 3, 64 * 4 + 16                       # K: a partial last tile
    A = rng.standard_normal((64 * tiles, K)).astype(np.float16)
    B = rng.standard_normal((K, 64)).astype(np.float16)
    C = np.full((64 * tiles, 64), np.nan, np.float32)
    run = run_compiled(module, (1,), [A, B, C, np.int32(tiles), np.int32(lb), np.int32(ub)], gpu_name=gpu,
                       check_races=True)
    assert "cp.async.bulk.tensor" in run.ptx and "mbarrier.inval" in run.ptx   # initialised again per tile
    padded_a = np.zeros((64 * tiles, 64 * 8))       # zeros where the tiles leave A and B
    padded_a[:, :K] = A
    padded_b = np.zeros((64 * 8, 64))
    padded_b[:K] = B
    ref = np.zeros(C.shape)
    for t in range(tiles):
        rows = slice(64 * t, 64 * t + 64)
        for k in range(lb + 1, ub + 1):
            if 0 <= k < 8:
                ref[rows] += padded_a[rows, 64 * k:64 * k + 64] @ padded_b[64 * k:64 * k + 64]
    np.testing.assert_allclose(C, ref, rtol=2e-3, atol=2e-3)
