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
@pytest.mark.parametrize("gpu", ["sm_90", "sm_100"])
def test_unhinted_matmul_keeps_cp_async(gpu):
    """Without launch hints nothing promises what a map needs: the copies stay cp.async, no hidden parameter."""
    mod = _module(PUBLIC, BIG)
    assert emit_kernel(mod, mod.functions[0], CodegenOptions(opt_level=3, target=gpu)).tensor_maps is None
    ptx = module_ptx(mod, target(gpu))
    assert "cp.async.bulk.tensor" not in ptx and ".b8" not in ptx.split("{", 1)[0] and "cp.async.cg" in ptx


@requires_corpus
def test_the_tensor_copy_code():
    """One thread expects the bytes and issues the boxes; every thread waits for the phase; the maps are
    prefetched, the mbarriers initialised and invalidated once per execution of the loop."""
    ptx = module_ptx(_module(LAUNCH, BIG), target("sm_90"))
    body = ptx.split("tileiras-async tensor maps", 1)[0]
    assert body.count("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") > 0
    assert "cp.async.cg" not in body                    # both operands by TMA
    assert body.count("prefetch.tensormap") == 2 and "fence.mbarrier_init.release.cluster" in body
    assert "mbarrier.try_wait.parity.shared.b64" in body and "mbarrier.inval.shared.b64" in body
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
