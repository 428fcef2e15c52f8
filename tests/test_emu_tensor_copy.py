"""TMA through tensor maps (emu/isa/tensor_copy.py): decoding NVIDIA's map words, a box load with zero fill
outside the tensor, a clipped box store, the 128-byte swizzle in shared memory, and the host object's
launch hook filling maps (emu/host_object.py)."""
from __future__ import annotations

import platform
import struct

import numpy as np
import pytest
from conftest import CORPUS, requires_corpus

from tileiras_async.emu import DeviceMemory, emulate_ptx
from tileiras_async.emu.isa.tensor_copy import TensorMap, decode_tensor_map

LAUNCH = CORPUS / "out" / "public-launch"
F32 = 7      # the element-type code of f32 in the map's flags (bits 7..10)


def encode(address: int, shape: tuple, box: tuple, swizzle: int = 0, code: int = F32, esize: int = 4) -> bytes:
    """A 2-D map of a row-major (rows, cols) array laid out as NVIDIA's hooks write it (emu/README.md)."""
    rows, cols = shape
    w = [0] * 16
    w[0] = address
    w[1] = (0x40002 | (1 << 4) | (code << 7) | (swizzle << 13)) | ((cols * esize // 16) << 32)
    w[4] = (cols - 1) | ((rows - 1) << 32)
    w[6] = (box[0] - 1) << 56
    w[7] = box[1] - 1
    return struct.pack("<16Q", *w)


def test_decode_the_words_of_nvidia_hooks():
    # A of matmul_f16_f16out_128x128x64 (256 x 128 f16) as its sm_90 hook writes it
    words = [0x10000000000, 0x1000046312, 0, 0, 0xff0000007f, 0, 0x3f00000000000000, 0x7f] + [0] * 8
    tm = decode_tensor_map(struct.pack("<16Q", *words))
    assert tm == TensorMap(0x10000000000, 2, "128B", (128, 256), (2, 256), (64, 128))
    assert tm.box_bytes == 16384
    words[1] = 0x18000d6392                      # sm_100's tf32 operand: f32, 128B swizzle of 32-byte atoms
    assert decode_tensor_map(struct.pack("<16Q", *words)).swizzle == "128B_base32B"
    words[1] = 0x40002                           # element-type code 0: not seen, not guessed
    with pytest.raises(ValueError, match="element-type code 0"):
        decode_tensor_map(struct.pack("<16Q", *words))


PTX = """.version 8.6
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out, .param .align 64 .b8 src_map[128], .param .align 64 .b8 dst_map[128],
                  .param .u32 c0, .param .u32 c1, .param .u32 d0, .param .u32 d1)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<6>;
    .reg .pred %p<2>;
    .shared .align 1024 .b8 buf[1024];
    .shared .align 8 .b64 bar;
    ld.param.u64 %rd4, [out];
    ld.param.u32 %r3, [c0];
    ld.param.u32 %r4, [c1];
    ld.param.u32 %r5, [d0];
    ld.param.u32 %r6, [d1];
    mov.b64 %rd1, src_map;
    mov.b64 %rd2, dst_map;
    mov.u32 %r1, buf;
    mov.u32 %r2, bar;
    mbarrier.init.shared::cta.b64 [%r2], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd3, [%r2], BYTES;
    cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r3, %r4}], [%r2];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r2], 0;
    @!%p1 bra WAIT;
    cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%rd2, {%r5, %r6}], [%r1];
    cp.async.bulk.global.shared::cta.bulk_group [%rd4], [%r1], BYTES;
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group 0;
    ret;
}
"""


def _run(src, dst, src_box, swizzle, at, to):
    """One thread loads the box at `at` of `src` and stores it at `to` of `dst`; returns the shared box's
    bytes as laid out in shared memory (copied out verbatim)."""
    mem = DeviceMemory()
    nbytes = int(np.prod(src_box)) * 4
    out = np.zeros(nbytes // 4, np.float32)
    a_src, a_dst, a_out = mem.alloc_array(src), mem.alloc_array(dst), mem.alloc_array(out)
    ptx = PTX.replace("BYTES", str(nbytes))
    emulate_ptx(ptx, "k", (1, 1, 1), (1, 1, 1),
                [a_out, encode(a_src, src.shape, src_box, swizzle), encode(a_dst, dst.shape, src_box, swizzle),
                 *at, *to], mem, check_races=True)
    mem.copy_back(a_dst, dst)
    mem.copy_back(a_out, out)
    return out


def test_box_load_fills_zeros_outside_and_store_clips():
    src = np.arange(72, dtype=np.float32).reshape(6, 12) + 1     # rows of 48 bytes (TMA: multiples of 16)
    dst = np.full((5, 8), -1, np.float32)
    shared = _run(src, dst, (8, 4), 0, at=(8, 4), to=(3, 2))
    box = np.zeros((4, 8), np.float32)
    box[:2, :4] = src[4:6, 8:12]                  # rows 4..7 x cols 8..15 of a 6 x 12 tensor
    assert np.array_equal(shared.reshape(4, 8), box)
    want = np.full((5, 8), -1, np.float32)
    want[2:5, 3:8] = box[:3, :5]                  # rows 2..5 x cols 3..10 of a 5 x 8 tensor, clipped
    assert np.array_equal(dst, want)


def test_128_byte_swizzle_in_shared_memory():
    src = np.arange(256, dtype=np.float32).reshape(8, 32)
    dst = np.zeros((8, 32), np.float32)
    shared = _run(src, dst, (32, 8), 3, at=(0, 0), to=(0, 0))
    chunks = src.reshape(8, 8, 4)                 # row r, 16-byte chunk j
    want = np.empty_like(chunks)
    for r in range(8):
        for j in range(8):
            want[r, j ^ r] = chunks[r, j]         # the buffer is 1024-aligned: chunk j of row r at j ^ (r % 8)
    assert np.array_equal(shared.reshape(8, 8, 4), want)
    assert np.array_equal(dst, src)               # the store unswizzles


@requires_corpus
@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="the hook is x86-64 code")
def test_the_host_object_hook_fills_maps():
    from tileiras_async.emu.host_object import bank_offsets, fill_tensor_maps, read_host_object
    from tileiras_async.emu.parser import parse_ptx
    cid = "matmul_f16_f16out_128x128x64"
    assert bank_offsets([(8, 8), (4, 4), (4, 4), (128, 64)], 0x210) == [0, 8, 12, 0x30]    # 0x240 in the bank
    assert bank_offsets([(8, 8), (4, 4), (4, 4), (128, 64)], 0) == [0, 8, 12, 64]
    mod = parse_ptx((LAUNCH / f"{cid}.v13.4.sm_90.ptx").read_text())
    entry = mod.functions[mod.entries[0]]
    host = read_host_object(str(LAUNCH / f"{cid}.v13.4.sm_90.host.o"))
    arrays = [(0x10000000000, 256, 128), (0x20000000000, 128, 128), (0x30000000000, 256, 128)]
    values = []
    for address, rows, cols in arrays:
        values += [struct.pack("<Q", address), *(struct.pack("<I", v) for v in (rows, cols, cols, 1))]
    maps = fill_tensor_maps(host, entry.name, mod.target, entry.params, values + [None] * 3)
    got = {i: decode_tensor_map(raw) for i, raw in maps.items()}
    assert got[15] == TensorMap(0x10000000000, 2, "128B", (128, 256), (2, 256), (64, 128))
    assert got[16] == TensorMap(0x20000000000, 2, "128B", (128, 128), (2, 256), (64, 64))
    assert got[17] == TensorMap(0x30000000000, 2, "128B", (128, 256), (2, 256), (64, 64))


RACE_PTX = """.version 8.6
.target sm_90a
.address_size 64
.visible .entry k(.param .align 64 .b8 src_map[128])
{
    .reg .b32 %r<10>;
    .reg .b64 %rd<4>;
    .reg .pred %p<4>;
    .shared .align 1024 .b8 buf[1024];
    .shared .align 8 .b64 bar;
    mov.b64 %rd1, src_map;
    mov.u32 %r1, buf;
    mov.u32 %r2, bar;
    mov.u32 %r3, %tid.x;
    mov.u32 %r8, 0;
    setp.eq.u32 %p1, %r3, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r2], 1;
    bar.sync 0;
    shl.b32 %r4, %r3, 2;
    add.u32 %r5, %r1, %r4;
    ld.shared.b32 %r7, [%r5];
    SYNC
    @!%p1 bra DONE;
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd3, [%r2], 1024;
    cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%r1], [%rd1, {%r8, %r8}], [%r2];
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r2], 0;
    @!%p3 bra WAIT;
DONE:
    ret;
}
"""


@pytest.mark.parametrize("sync", [True, False])
def test_a_tensor_copy_over_bytes_other_threads_read_needs_a_barrier(sync):
    """The box lands as a write by the thread that issued the copy: into bytes that other threads read with
    no barrier since, it is a race (the copy may overwrite them before they are read)."""
    from tileiras_async.emu.races import RaceError
    mem = DeviceMemory()
    src = np.arange(256, dtype=np.float32).reshape(8, 32)
    params = [encode(mem.alloc_array(src), src.shape, (32, 8))]
    ptx = RACE_PTX.replace("SYNC", "bar.sync 0;" if sync else "")
    if sync:
        emulate_ptx(ptx, "k", (1, 1, 1), (64, 1, 1), params, mem, check_races=True)
        return
    with pytest.raises(RaceError, match="write after a read"):
        emulate_ptx(ptx, "k", (1, 1, 1), (64, 1, 1), params, mem, check_races=True)
