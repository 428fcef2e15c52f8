"""Our launch-hook host object (codegen/host_object.py) against NVIDIA's (out/public-launch/*.host.o).

For every kernel of the launch set whose NVIDIA PTX takes tensor maps, the maps' descriptions (which
parameters, element type, box, swizzle) are read off NVIDIA's hook by running it on parameters that are all
distinct; our hook built from those descriptions must then write the same 128 bytes as NVIDIA's on other
parameters -- random arrays, small and above the 128 KiB flag, at either target's parameter layout.  Both
hooks run through the emulator's host-object machinery (emu/host_object.py), as a launch runs them.
"""
from __future__ import annotations

import platform
import random
import struct
import subprocess

import pytest
from conftest import LAUNCH, requires_corpus

from tileiras_async.codegen.host_object import (HostObjectError, KernelHooks, HookValue, TensorMapSpec,
                                                build_host_object, flags_word, hooks_ir)
from tileiras_async.emu.host_object import fill_tensor_maps, is_tensor_map, read_host_object
from tileiras_async.emu.isa.tensor_copy import decode_tensor_map
from tileiras_async.emu.parser import parse_ptx

x86_only = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86-64 hooks")
TMA_FILES = sorted(p for p in LAUNCH.glob("*.v13.4.sm_*.host.o")
                   if ".align 64 .b8" in p.with_name(p.name.replace(".host.o", ".ptx")).read_text()) \
    if LAUNCH.is_dir() else []
_ELEMENT_NAMES = {(2, 0): "i32", (6, 0): "f16", (7, 0): "f32", (7, 1): "tf32", (10, 0): "bf16"}


def _entry(host_path):
    ptx = parse_ptx(host_path.with_name(host_path.name.replace(".host.o", ".ptx")).read_text())
    host = read_host_object(str(host_path))
    (kernel,) = host.hooks
    return ptx.target, kernel, ptx.functions[kernel].params, host


def _probe_values(params) -> list:
    """Every ordinary parameter a distinct value that tells which one a map field came from."""
    return [None if is_tensor_map(p) else
            struct.pack("<Q", (i + 1) << 40) if p.nbytes == 8 else struct.pack("<I", 0x100 * (i + 1))
            for i, p in enumerate(params)]


def _described_maps(target, kernel, params, host) -> tuple[TensorMapSpec, ...]:
    """The tensor maps NVIDIA's hook writes, as our descriptions (parameters found by their probe values)."""
    maps = fill_tensor_maps(host, kernel, target, params, _probe_values(params))
    specs = []
    for index, raw in sorted(maps.items()):
        m = decode_tensor_map(raw)
        flags = struct.unpack_from("<Q", raw, 8)[0]
        element = _ELEMENT_NAMES[((flags >> 7) & 0xF, (flags >> 16) & 1)]
        shape = tuple(HookValue(param=x // 0x100 - 1) for x in reversed(m.extents))
        strides = tuple(HookValue(param=s // m.elem_bytes // 0x100 - 1) for s in reversed(m.strides[1:]))
        specs.append(TensorMapSpec(index, (m.address >> 40) - 1, shape, strides + (HookValue(value=1),), element,
                                   tuple(reversed(m.box)), m.swizzle))
    return tuple(specs)


def _random_values(params, rng, large: bool) -> list:
    """Arrays at random 16-byte aligned addresses; extents up to 4096 (large: up to 2**20) and row strides
    of at least the row, multiples of 16 elements."""
    out = []
    for p in params:
        if is_tensor_map(p):
            out.append(None)
        elif p.nbytes == 8:
            out.append(struct.pack("<Q", rng.randrange(1 << 44) * 16))
        else:
            out.append(struct.pack("<I", rng.randrange(1, (1 << 20) if large else 4096) * (16 if large else 1)))
    return out


def _kernel_hooks(kernel, params, specs) -> KernelHooks:
    return KernelHooks(kernel, tuple((p.nbytes, 64 if is_tensor_map(p) else p.nbytes) for p in params), specs)


@requires_corpus
@x86_only
@pytest.mark.parametrize("path", TMA_FILES, ids=lambda p: p.name.replace(".v13.4", "").replace(".host.o", ""))
def test_our_hook_writes_nvidias_tensor_maps(path, tmp_path):
    target, kernel, params, nvidia = _entry(path)
    specs = _described_maps(target, kernel, params, nvidia)
    ours = _read_built(build_host_object([_kernel_hooks(kernel, params, specs)], target), tmp_path)
    assert ours.hooks == {kernel: "__CUDA_TILEIR_FUNC_ON_ARGUMENTS_CHANGE_0"} and ours.code[kernel] is not None
    rng = random.Random(path.name)
    for trial in range(6):
        values = _random_values(params, rng, large=trial % 2 == 1)
        expected = fill_tensor_maps(nvidia, kernel, target, params, values)
        got = fill_tensor_maps(ours, kernel, target, params, values)
        assert got == expected, (trial, specs)


@requires_corpus
@x86_only
def test_the_matmul_maps_and_the_large_array_bit(tmp_path):
    """The 128x128x64 f16 matmul's maps as the README gives them; one more row of A reaches 128 KiB."""
    path = LAUNCH / "matmul_f16_f16out_128x128x64.v13.4.sm_90.host.o"
    target, kernel, params, nvidia = _entry(path)
    specs = _described_maps(target, kernel, params, nvidia)
    assert [(s.param, s.base, s.box, s.swizzle, s.element) for s in specs] == [
        (15, 0, (128, 64), "128B", "f16"), (16, 5, (64, 64), "128B", "f16"), (17, 10, (64, 64), "128B", "f16")]
    assert all(flags_word(s) == 0x46312 for s in specs)
    ours = _read_built(build_host_object([_kernel_hooks(kernel, params, specs)], target), tmp_path)
    for rows, bit in ((511, 0), (512, 1 << 21)):     # 512 x 128 f16 span 0x20000 bytes
        values = []
        for address in (0x10000000000, 0x20000000000, 0x30000000000):
            values += [struct.pack("<Q", address), *(struct.pack("<I", v) for v in (rows, 128, 128, 1))]
        maps = fill_tensor_maps(ours, kernel, target, params, values + [None] * 3)
        assert struct.unpack_from("<Q", maps[15], 8)[0] == 0x46312 | bit | (128 * 2 // 16) << 32
        assert maps == fill_tensor_maps(nvidia, kernel, target, params, values + [None] * 3)


def _read_built(data: bytes, tmp_path):
    path = tmp_path / "ours.o"
    path.write_bytes(data)
    return read_host_object(str(path))


def test_layout_of_the_object(tmp_path):
    """The symbols, sections and tables NVIDIA's host objects have (README: the layout); the hooks free of
    relocations, the tables' pointers relocated."""
    readelf = pytest.importorskip("shutil").which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed")
    kernels = [KernelHooks("k_a", ((8, 8), (4, 4), (4, 4), (4, 4), (128, 64)),
                           (TensorMapSpec(4, 0, (HookValue(1), HookValue(2)), (HookValue(3), HookValue(value=1)), "bf16",
                                          (32, 64), "64B"),)),
               KernelHooks("k_b", ((8, 8), (4, 4)))]
    path = tmp_path / "h.o"
    path.write_bytes(build_host_object(kernels, "sm_100a"))
    out = subprocess.run([readelf, "-sSW", str(path)], capture_output=True, text=True, check=True).stdout
    symbols = {line.split()[-1]: line.split() for line in out.splitlines() if "__CUDA_TILEIR" in line}
    assert symbols["__CUDA_TILEIR_ON_PRE_LOAD"][3:5] == ["FUNC", "GLOBAL"]
    assert symbols["__CUDA_TILEIR_CALLBACKS"][2:5] == ["72", "OBJECT", "GLOBAL"]
    assert symbols["__CUDA_TILEIR_FUNC_CALLBACKS"][2:5] == ["128", "OBJECT", "LOCAL"]
    for n in (0, 1):
        assert symbols[f"__CUDA_TILEIR_FUNC_ON_ARGUMENTS_CHANGE_{n}"][3:5] == ["FUNC", "LOCAL"]
        assert symbols[f"__CUDA_TILEIR_FUNC_NAME_{n}"][2] == "4"          # "k_a\0"
    for section in (".ltext", ".lrodata", ".lbss", ".data.rel.ro"):
        assert f" {section} " in out
    host = read_host_object(str(path))
    assert host.hooks == {"k_a": "__CUDA_TILEIR_FUNC_ON_ARGUMENTS_CHANGE_0",
                          "k_b": "__CUDA_TILEIR_FUNC_ON_ARGUMENTS_CHANGE_1"}
    assert all(code is not None for code in host.code.values())


@pytest.mark.parametrize("change,message", [
    (dict(strides=(HookValue(3), HookValue(value=2))), "innermost stride must be the literal 1"),
    (dict(box=(64, 512)), "extents 1 to 256"),
    (dict(element="f64"), "f64 elements is not encodable"),
    (dict(swizzle="16B"), "swizzle '16B'"),
    (dict(param=3), "not a 128-byte map aligned to 64"),
])
def test_descriptions_it_cannot_encode(change, message):
    spec = TensorMapSpec(4, 0, (HookValue(1), HookValue(2)), (HookValue(3), HookValue(value=1)), "f16", (64, 64), "128B")
    spec = TensorMapSpec(**{**{f: getattr(spec, f) for f in spec.__struct_fields__}, **change})
    kernel = KernelHooks("k", ((8, 8), (4, 4), (4, 4), (4, 4), (128, 64)), (spec,))
    with pytest.raises(HostObjectError, match=message):
        hooks_ir([kernel], "sm_90a")
    with pytest.raises(HostObjectError, match="target sm_80 is not known"):
        hooks_ir([KernelHooks("k", ())], "sm_80")


@requires_corpus
@x86_only
def test_ptxas_embeds_our_object_as_nvidias(tmp_path):
    """NVIDIA's TMA matmul PTX assembled with our hook's object (the real tool's ptxas invocation): the cubin
    carries our object as `.nv.host` and the parameter records NVIDIA's own cubin has -- 15 parameters the user
    passes, the three hidden 128-byte maps counted only in the bank's size (0x70 + 3 maps past 0x210)."""
    from conftest import nvidia_bin, nvidia_env
    from tileiras_async.toolchain.cubin import host_object, launch_params
    from tileiras_async.toolchain.ptxas import PtxasOptions, assemble
    path = LAUNCH / "matmul_f16_f16out_128x128x64.v13.4.sm_90.host.o"
    target, kernel, params, nvidia = _entry(path)
    ours = build_host_object([_kernel_hooks(kernel, params, _described_maps(target, kernel, params, nvidia))],
                             target)
    ptx = path.with_name(path.name.replace(".host.o", ".ptx")).read_text()
    cubin = assemble(ptx, PtxasOptions("sm_90a", host_object=ours))
    assert host_object(cubin) == ours
    assert host_object(assemble(ptx, PtxasOptions("sm_90a"))) is None
    got = launch_params(cubin)[kernel]
    assert (got.bank_offset, got.bank_bytes) == (0x210, 0x70 + 3 * 128)
    assert [o for o, _off, _flags in got.params] == list(range(15))
    tool = nvidia_bin("tileiras")
    if tool is None:
        return
    out = tmp_path / "nvidia.cubin"
    subprocess.run([str(tool), "--gpu-name", "sm_90", "-O3", str(LAUNCH / path.name.replace(".sm_90.host.o",
                    ".tileirbc")), "-o", str(out)], env=nvidia_env(), check=True, capture_output=True)
    theirs = out.read_bytes()
    assert launch_params(theirs)[kernel] == got
    assert host_object(theirs) is not None
