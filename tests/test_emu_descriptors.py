"""Tensor-core descriptors: shared-memory matrix descriptors (decoding, every swizzle mode, K- and
MN-major address mapping) and tcgen05 instruction descriptors, against hand-computed values.
"""
from __future__ import annotations

import numpy as np
import pytest

from tileiras_async.emu.isa.descriptors import (
    DescriptorError,
    SmemDescriptor,
    decode_idesc,
    decode_tcgen05_desc,
    decode_wgmma_desc,
    operand_addresses,
    swizzle_address,
)


def wgmma_desc(start, lbo, sbo, swizzle, base_offset=0):
    code = {"none": 0, "128B": 1, "64B": 2, "32B": 3}[swizzle]
    return (start >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | base_offset << 49 | code << 62


def tcgen05_desc(start, lbo, sbo, swizzle, base_offset=0):
    code = {"none": 0, "128B_base32B": 1, "128B": 2, "64B": 4, "32B": 6}[swizzle]
    return (start >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | 1 << 46 | base_offset << 49 | code << 61


# ---------------------------------------------------------------------------- decoding


def test_wgmma_descriptor_fields():
    d = decode_wgmma_desc(wgmma_desc(0x1230, 0x40, 0x400, "64B", base_offset=3))
    assert d == SmemDescriptor(start=0x1230, lbo=0x40, sbo=0x400, base_offset=3, swizzle="64B")
    # a value from NVIDIA's sm_90 PTX (matmul_f16_f16out_128x128x64): `or.b64 %rd, %rd, 4611686293305360384`
    d = decode_wgmma_desc(4611686293305360384)
    assert (d.start, d.lbo, d.sbo, d.swizzle) == (0, 16, 1024, "128B")
    assert decode_wgmma_desc(wgmma_desc(0, 16, 256, "32B")).swizzle == "32B"
    assert decode_wgmma_desc(wgmma_desc(0, 16, 256, "none")).swizzle == "none"
    # the start address has 14 bits (18-bit byte addresses): higher bits belong to other fields
    assert decode_wgmma_desc((1 << 14) | 5).start == 5 << 4


def test_tcgen05_descriptor_fields_and_reserved_bits():
    # NVIDIA's sm_100 PTX: `or.b64 %rd, %rd, -9223301530671579136` (0x8000402000010000)
    d = decode_tcgen05_desc(-9223301530671579136)
    assert (d.start, d.lbo, d.sbo, d.swizzle, d.base_offset) == (0, 16, 512, "64B", 0)
    for sw in ("none", "128B_base32B", "128B", "64B", "32B"):
        assert decode_tcgen05_desc(tcgen05_desc(0x100, 0x80, 0x800, sw, 5)) == \
            SmemDescriptor(0x100, 0x80, 0x800, 5, sw)
    with pytest.raises(DescriptorError, match="46-48"):
        decode_tcgen05_desc(tcgen05_desc(0, 16, 512, "64B") & ~(1 << 46))
    for bad in (3, 5, 7):
        with pytest.raises(DescriptorError, match="invalid"):
            decode_tcgen05_desc(1 << 46 | bad << 61)


# ---------------------------------------------------------------------------- swizzles


@pytest.mark.parametrize("width,xor", [(128, lambda r: r % 8), (64, lambda r: (r % 8) // 2),
                                       (32, lambda r: (r % 8) // 4)])
def test_swizzle_xors_the_16_byte_chunk_with_the_row_in_the_pattern(width, xor):
    # rows of `width` bytes starting at a pattern boundary: row r, 16-byte chunk c, byte j
    name = f"{width}B"
    for r in range(16):
        for c in range(width // 16):
            for j in (0, 5, 15):
                addr = 4096 + r * width + c * 16 + j
                assert swizzle_address(addr, name) == 4096 + r * width + (c ^ xor(r)) * 16 + j


def test_swizzle_by_hand():
    assert swizzle_address(1178, "128B") == 1162     # bits 4-6 (1) ^= bits 7-9 (1)
    assert swizzle_address(0x3F0, "64B") == 0x3C0    # chunk 3 ^ ((0x3F0 >> 7) & 3 = 3) = 0
    assert swizzle_address(0x90, "32B") == 0x80      # bit 4 ^= bit 7
    assert swizzle_address(0x90, "none") == 0x90
    # 128B with 32-byte atoms (Swizzle<2,5,2>): 32-byte pieces (bits 5-6) ^= bits 7-8
    assert swizzle_address(0x1A0, "128B_base32B") == 0x1C0   # piece (0x1A0 >> 5) & 3 = 1, ^ (0x1A0 >> 7) & 3 = 3
    # base offset: a pattern starting 128 bytes after its boundary (base offset 1) shifts the row phase
    assert swizzle_address(1024 + 128, "128B", base_offset=1) == 1024 + 128
    assert swizzle_address(1024 + 256 + 16, "128B", base_offset=1) == 1024 + 256 + 0


def test_swizzle_is_a_permutation_within_each_pattern():
    a = np.arange(0, 2048, 16)
    for sw in ("32B", "64B", "128B", "128B_base32B"):
        out = swizzle_address(a, sw)
        assert sorted(out.tolist()) == a.tolist()


# ---------------------------------------------------------------------------- canonical layouts


def test_k_major_no_swizzle():
    # core matrices of 8 rows x 16 bytes; LBO = next core matrix along K, SBO = next along M/N
    d = SmemDescriptor(start=0x400, lbo=256, sbo=512, base_offset=0, swizzle="none")
    a = operand_addresses(d, 16, 16, 2, False)       # f16: 8 elements per 16 bytes
    assert a[0, 0] == 0x400
    assert a[3, 5] == 0x400 + 3 * 16 + 5 * 2
    assert a[3, 9] == 0x400 + 256 + 3 * 16 + 1 * 2
    assert a[11, 9] == 0x400 + 512 + 256 + 3 * 16 + 2
    t = operand_addresses(d, 8, 8, 4, False)         # tf32: 4 elements per 16 bytes
    assert t[7, 6] == 0x400 + 256 + 7 * 16 + 2 * 4
    b = operand_addresses(d, 8, 32, 1, False)        # 8-bit: 16 per 16 bytes
    assert b[2, 17] == 0x400 + 256 + 2 * 16 + 1


@pytest.mark.parametrize("sw,width", [("32B", 32), ("64B", 64), ("128B", 128)])
def test_k_major_swizzled(sw, width):
    # rows of `width` bytes, 8 rows per pattern, SBO between 8-row groups; a K step is 32 bytes
    sbo = 8 * width
    d = SmemDescriptor(start=0x800, lbo=16, sbo=sbo, base_offset=0, swizzle=sw)
    a = operand_addresses(d, 24, 16, 2, False)
    for r, k in ((0, 0), (5, 3), (9, 15), (23, 8)):
        lin = 0x800 + (r // 8) * sbo + (r % 8) * width + 2 * k
        assert a[r, k] == swizzle_address(lin, sw)
    # the next k16 step of a wider row: the descriptor start advances by 32 bytes
    if width > 32:
        d2 = SmemDescriptor(start=0x800 + 32, lbo=16, sbo=sbo, base_offset=0, swizzle=sw)
        assert operand_addresses(d2, 24, 16, 2, False)[9, 1] == \
            swizzle_address(0x800 + sbo + width + 32 + 2, sw)


def test_mn_major_no_swizzle():
    # core matrices of 8 K-rows x 16 bytes (8 f16 along M/N): SBO = next along M/N, LBO = next along K
    d = SmemDescriptor(start=0, lbo=1024, sbo=128, base_offset=0, swizzle="none")
    a = operand_addresses(d, 16, 16, 2, True)
    assert a[0, 0] == 0
    assert a[5, 0] == 10
    assert a[5, 3] == 3 * 16 + 10
    assert a[13, 3] == 128 + 3 * 16 + 5 * 2
    assert a[13, 11] == 1024 + 128 + 3 * 16 + 10


@pytest.mark.parametrize("sw,width", [("32B", 32), ("64B", 64), ("128B", 128)])
def test_mn_major_swizzled(sw, width):
    # `width` bytes along M/N per K-row, 8 K-rows per pattern; LBO = next pattern along M/N,
    # SBO = next 8 K-rows
    lbo, sbo = 8 * width, 2 * 8 * width
    d = SmemDescriptor(start=0, lbo=lbo, sbo=sbo, base_offset=0, swizzle=sw)
    per_row = width // 2                             # f16 elements along M/N in one row
    a = operand_addresses(d, 2 * per_row, 16, 2, True)
    for r, k in ((0, 0), (3, 1), (per_row - 1, 7), (per_row + 2, 9), (2 * per_row - 1, 15)):
        lin = (r // per_row) * lbo + (r % per_row) * 2 + (k // 8) * sbo + (k % 8) * width
        assert a[r, k] == swizzle_address(lin, sw)


def test_operand_addresses_are_distinct_and_16_byte_pieces_stay_whole():
    width = {"none": 16, "32B": 32, "64B": 64, "128B": 128}
    for sw in ("none", "32B", "64B", "128B"):
        for mn in (False, True):
            if mn:      # LBO: next group of 8 core matrices / next pattern along M/N; SBO: next 8 K-rows
                lbo, sbo = (1024, 128) if sw == "none" else (8 * width[sw], 8 * 64 * 2)
            else:       # LBO: next core matrix along K (no swizzle); SBO: next 8 rows
                lbo, sbo = (128, 256) if sw == "none" else (16, 8 * width[sw])
            d = SmemDescriptor(0, lbo, sbo, 0, sw)
            a = operand_addresses(d, 64, 16, 2, mn)
            assert len(np.unique(a)) == a.size, (sw, mn)
            # two f16 elements in one 16-byte piece before the swizzle are in one piece after it
            assert (((a[:, 0::2] >> 4) == (a[:, 1::2] >> 4)) | mn).all()


# ---------------------------------------------------------------------------- instruction descriptors


def test_idesc_from_nvidia_sm100_ptx():
    d = decode_idesc("f16", 68157456)                # matmul_f16_f32acc_64x64x32 (0x04100010)
    assert (d.m, d.n, d.k, d.dtype, d.atype, d.btype) == (64, 64, 16, "f32", "f16", "f16")
    assert not (d.transpose_a or d.transpose_b or d.negate_a or d.negate_b)
    d = decode_idesc("f16", 136314896)               # matmul_f16_f16out_128x128x64 (0x08200010)
    assert (d.m, d.n, d.dtype) == (128, 128, "f32")
    assert decode_idesc("f16", 68158608).atype == "bf16"            # matmul_bf16_64x64x64
    d = decode_idesc("tf32", 68159760)                             # matmul_tf32_64x64x32
    assert (d.atype, d.btype, d.k) == ("tf32", "tf32", 8)


def idesc(m, n, dtype=1, atype=0, btype=0, **bits):
    v = dtype << 4 | atype << 7 | btype << 10 | (n >> 3) << 17 | (m >> 4) << 24
    for name, pos in (("sat", 3), ("nega", 13), ("negb", 14), ("ta", 15), ("tb", 16)):
        if bits.get(name):
            v |= 1 << pos
    return v | bits.get("raw", 0)


def test_idesc_fields():
    d = decode_idesc("f16", idesc(128, 256, dtype=0, atype=1, btype=1, nega=1, ta=1, tb=1))
    assert (d.m, d.n, d.dtype, d.atype, d.negate_a, d.negate_b, d.transpose_a, d.transpose_b) == \
        (128, 256, "f16", "bf16", True, False, True, True)
    d = decode_idesc("i8", idesc(64, 8, dtype=2, atype=1, btype=0, sat=1))     # s8 x u8
    assert (d.k, d.dtype, d.atype, d.btype, d.saturate) == (32, "s32", "s8", "u8", True)
    d = decode_idesc("f8f6f4", idesc(128, 16, atype=0, btype=1))
    assert (d.k, d.atype, d.btype) == (32, "e4m3", "e5m2")
    assert decode_idesc("f16", idesc(32, 64), ws=True).m == 32


@pytest.mark.parametrize("kind,value,msg", [
    ("f16", idesc(64, 64) | 1 << 2, "sparse"),
    ("f16", idesc(64, 64) | 1 << 23, "reserved"),
    ("f16", idesc(48, 64), "M=48"),
    ("f16", idesc(32, 64), "M=32"),                  # M=32 is .ws only
    ("f16", idesc(128, 24), "N=24"),                 # M=128 takes N in steps of 16
    ("f16", idesc(64, 64, atype=0, btype=1), "A is .f16 but B is .bf16"),
    ("tf32", idesc(64, 64, atype=0, btype=0), "not valid"),
    ("i8", idesc(64, 64, dtype=2, atype=1, btype=1, nega=1), "negation"),
    ("f16", idesc(64, 64, sat=1), "saturation"),
    ("f16", idesc(64, 64) | 1 << 30, "shift"),
    ("mxf4", idesc(64, 64), "not modelled"),
])
def test_idesc_errors(kind, value, msg):
    with pytest.raises(DescriptorError, match=msg):
        decode_idesc(kind, value)
