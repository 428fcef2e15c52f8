"""TMA through tensor maps (emu/isa/tensor_copy.py): decoding NVIDIA's map words (ranks 2 and 4), box loads
with zero fill outside the tensor and clipped box stores of each rank 1 to 5 against a numpy model, the
128-byte swizzle in shared memory, and the host object's launch hook filling maps (emu/host_object.py)."""
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


def encode_nd(address: int, shape: tuple, strides: tuple, box: tuple, swizzle: int = 0, code: int = F32) -> bytes:
    """A map of the array at `address` with numpy's `shape` and byte `strides` (outermost first, the innermost
    stride the element's bytes) and `box` (innermost first, as PTX's coordinates), laid out as NVIDIA's hooks
    write it (emu/README.md): per dimension d >= 1 the stride / 16 in 32-bit half 2 + d, the extent - 1 in half
    8 + d, the box extent - 1 in byte d - 1 of word 7 (dimension 0's in byte 7 of word 6)."""
    rank = len(shape)
    halves = [0] * 32
    for d in range(rank):
        halves[8 + d] = shape[rank - 1 - d] - 1
        if d:
            halves[2 + d] = strides[rank - 1 - d] // 16
    w = [lo | hi << 32 for lo, hi in zip(halves[::2], halves[1::2])]
    w[0] = address
    w[1] |= 0x40002 | ((rank - 1) << 4) | (code << 7) | (swizzle << 13)
    w[6] |= (box[0] - 1) << 56
    w[7] = sum((b - 1) << 8 * d for d, b in enumerate(box[1:]))
    return struct.pack("<16Q", *w)


def encode(address: int, shape: tuple, box: tuple, swizzle: int = 0, code: int = F32, esize: int = 4) -> bytes:
    """A 2-D map of a row-major (rows, cols) array."""
    return encode_nd(address, shape, (shape[1] * esize, esize), box, swizzle, code)


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


def rank_ptx(rank: int, nbytes: int) -> str:
    """One thread loads a rank-`rank` box through `src_map` at (c0, ...) into shared memory, stores it through
    `dst_map` at (d0, ...) and copies the shared box verbatim to `out`."""
    names = [f"c{d}" for d in range(rank)] + [f"d{d}" for d in range(rank)]
    params = ", ".join(f".param .u32 {n}" for n in names)
    loads = "\n".join(f"    ld.param.u32 %r{10 + k}, [{n}];" for k, n in enumerate(names))
    at = ", ".join(f"%r{10 + d}" for d in range(rank))
    to = ", ".join(f"%r{10 + rank + d}" for d in range(rank))
    return f""".version 8.6
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out, .param .align 64 .b8 src_map[128], .param .align 64 .b8 dst_map[128], {params})
{{
    .reg .b32 %r<24>;
    .reg .b64 %rd<6>;
    .reg .pred %p<2>;
    .shared .align 1024 .b8 buf[{nbytes}];
    .shared .align 8 .b64 bar;
    ld.param.u64 %rd4, [out];
{loads}
    mov.b64 %rd1, src_map;
    mov.b64 %rd2, dst_map;
    mov.u32 %r1, buf;
    mov.u32 %r2, bar;
    mbarrier.init.shared::cta.b64 [%r2], 1;
    mbarrier.arrive.expect_tx.shared::cta.b64 %rd3, [%r2], {nbytes};
    cp.async.bulk.tensor.{rank}d.shared::cta.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint [%r1], [%rd1, {{{at}}}], [%r2], %rd4;
WAIT:
    mbarrier.try_wait.parity.shared::cta.b64 %p1, [%r2], 0;
    @!%p1 bra WAIT;
    cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group [%rd2, {{{to}}}], [%r1];
    cp.async.bulk.global.shared::cta.bulk_group [%rd4], [%r1], {nbytes};
    cp.async.bulk.commit_group;
    cp.async.bulk.wait_group 0;
    ret;
}}
"""


def _window(shape: tuple, at: tuple, box: tuple):
    """(tensor indices, box indices) of the in-bounds part of the box at `at` (both innermost first), as
    np.ix_ index tuples in numpy's order."""
    rank = len(shape)
    inside, where = [], []
    for d in range(rank):
        idx = at[rank - 1 - d] + np.arange(box[rank - 1 - d])
        ok = (idx >= 0) & (idx < shape[d])
        inside.append(idx[ok])
        where.append(np.flatnonzero(ok))
    return np.ix_(*inside), np.ix_(*where)


def model_load(src: np.ndarray, at: tuple, box: tuple) -> np.ndarray:
    """The box (numpy order) that a tile-mode load at `at` reads: zeros outside the tensor."""
    out = np.zeros(box[::-1], src.dtype)
    inside, where = _window(src.shape, at, box)
    out[where] = src[inside]
    return out


def model_store(dst: np.ndarray, to: tuple, box: np.ndarray) -> np.ndarray:
    """`dst` after a tile-mode store of `box` at `to`: only the in-bounds elements are written."""
    out = dst.copy()
    inside, where = _window(dst.shape, to, box.shape[::-1])
    out[inside] = box[where]
    return out


def _run_nd(src, src_view, dst, box, at, to, swizzle=0):
    """Load the box at `at` of `src_view` (a view of `src`, the array allocated) and store it at `to` of `dst`;
    returns the shared box's bytes as f32 in numpy order."""
    mem = DeviceMemory()
    nbytes = int(np.prod(box)) * 4
    out = np.zeros(box[::-1], np.float32)
    a_src, a_dst, a_out = mem.alloc_array(src), mem.alloc_array(dst), mem.alloc_array(out)
    emulate_ptx(rank_ptx(len(box), nbytes), "k", (1, 1, 1), (1, 1, 1),
                [a_out, encode_nd(a_src, src_view.shape, src_view.strides, box, swizzle),
                 encode_nd(a_dst, dst.shape, dst.strides, box, swizzle), *at, *to], mem, check_races=True)
    mem.copy_back(a_dst, dst)
    mem.copy_back(a_out, out)
    return out


def test_box_load_fills_zeros_outside_and_store_clips():
    src = np.arange(72, dtype=np.float32).reshape(6, 12) + 1     # rows of 48 bytes (TMA: multiples of 16)
    dst = np.full((5, 8), -1, np.float32)
    shared = _run_nd(src, src, dst, (8, 4), at=(8, 4), to=(3, 2))
    box = np.zeros((4, 8), np.float32)
    box[:2, :4] = src[4:6, 8:12]                  # rows 4..7 x cols 8..15 of a 6 x 12 tensor
    assert np.array_equal(shared.reshape(4, 8), box)
    want = np.full((5, 8), -1, np.float32)
    want[2:5, 3:8] = box[:3, :5]                  # rows 2..5 x cols 3..10 of a 5 x 8 tensor, clipped
    assert np.array_equal(dst, want)


def test_128_byte_swizzle_in_shared_memory():
    src = np.arange(256, dtype=np.float32).reshape(8, 32)
    dst = np.zeros((8, 32), np.float32)
    shared = _run_nd(src, src, dst, (32, 8), (0, 0), (0, 0), swizzle=3)
    chunks = src.reshape(8, 8, 4)                 # row r, 16-byte chunk j
    want = np.empty_like(chunks)
    for r in range(8):
        for j in range(8):
            want[r, j ^ r] = chunks[r, j]         # the buffer is 1024-aligned: chunk j of row r at j ^ (r % 8)
    assert np.array_equal(shared.reshape(8, 8, 4), want)
    assert np.array_equal(dst, src)               # the store unswizzles


def test_decode_a_rank_4_map_of_nvidia_hooks():
    # fmha_f16's Q as its sm_90 hook writes it for a (5, 7, 300, 64) f16 array with rows padded to 80
    # elements: the map's dimensions are (64, 300, batch 5, heads 7) -- batch and heads trade places
    words = [0x10000000000, 0xa00246332, 0xbb800005208, 0, 0x12b0000003f, 0x600000004, 0x3f00000000000000, 0x7f]
    tm = decode_tensor_map(struct.pack("<16Q", *words, *[0] * 8))
    assert tm == TensorMap(0x10000000000, 2, "128B", (64, 300, 5, 7), (2, 160, 7 * 48000, 48000), (64, 128, 1, 1))
    again = encode_nd(0x10000000000, (7, 5, 300, 64), (48000, 7 * 48000, 160, 2), (64, 128, 1, 1), 3, code=6)
    assert struct.unpack("<16Q", again)[:8] == tuple(words[:1]) + (words[1] & ~(1 << 21),) + tuple(words[2:])
    words[1] = (words[1] & ~0x70) | (5 << 4)     # rank 6: no such map
    with pytest.raises(ValueError, match="rank 6"):
        decode_tensor_map(struct.pack("<16Q", *words, *[0] * 8))


# per rank: the tensor's shape (numpy order), the box and the coordinates of the load and of the store
# (innermost first, as PTX's), each box partly outside its tensor
RANKS = {
    1: ((40,), (16,), (32,), (-4,)),
    2: ((6, 12), (8, 4), (8, 4), (-4, 3)),
    3: ((3, 5, 12), (8, 4, 2), (8, 3, 2), (4, -2, 1)),
    4: ((2, 3, 5, 12), (8, 2, 2, 2), (8, 4, 1, 1), (-4, 0, 2, -1)),
    5: ((2, 2, 3, 4, 8), (4, 2, 2, 2, 2), (-2, 3, 1, 1, 0), (4, 0, 2, -1, 1)),
}


@pytest.mark.parametrize("rank", sorted(RANKS))
def test_box_load_and_store_of_each_rank_match_the_numpy_model(rank):
    shape, box, at, to = RANKS[rank]
    src = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1
    dst = np.full(shape, -1, np.float32)
    shared = _run_nd(src, src, dst, box, at, to)
    want = model_load(src, at, box)
    assert np.count_nonzero(want == 0) and np.count_nonzero(want)       # partly outside, partly inside
    assert np.array_equal(shared, want)
    assert np.array_equal(dst, model_store(np.full(shape, -1, np.float32), to, want))


def test_rank_5_map_with_permuted_strides():
    """A map over a transposed view (the outer dimensions' strides not in order, as NVIDIA's attention maps
    have them) reads through each dimension's own stride."""
    base = np.arange(2 * 3 * 4 * 2 * 8, dtype=np.float32).reshape(2, 3, 4, 2, 8) + 1
    view = base.transpose(2, 0, 3, 1, 4)                       # (4, 2, 2, 3, 8)
    box, at = (8, 2, 2, 2, 3), (0, 2, 1, 1, 2)
    dst = np.zeros(view.shape, np.float32)
    shared = _run_nd(base, view, dst, box, at, (0, 0, 0, 0, 0))
    assert np.array_equal(shared, model_load(view, at, box))


def test_rank_4_box_with_the_128_byte_swizzle():
    src = np.arange(2 * 2 * 4 * 32, dtype=np.float32).reshape(2, 2, 4, 32)
    dst = np.zeros_like(src)
    shared = _run_nd(src, src, dst, (32, 4, 2, 2), (0, 0, 0, 0), (0, 0, 0, 0), swizzle=3)
    chunks = src.reshape(16, 8, 4)                # 128-byte row r of the whole box, 16-byte chunk j
    want = np.empty_like(chunks)
    for r in range(16):
        for j in range(8):
            want[r, j ^ (r % 8)] = chunks[r, j]
    assert np.array_equal(shared.reshape(16, 8, 4), want)
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
