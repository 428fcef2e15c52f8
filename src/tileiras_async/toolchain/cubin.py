"""What a cubin records about each kernel: registers, stack frame, instruction count.

A cubin is an ELF64 file.  ptxas writes per-kernel attributes into `.nv.info` (EIATTR_REGCOUNT,
EIATTR_FRAME_SIZE: `ptxas -v`'s figures) and each kernel's code into `.text.<kernel>`, padded with
NOPs to a 128-byte boundary.  Facts from the ELF layout and from reading ptxas's output.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

EIATTR_REQNTID = 0x10
EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 4          # attribute with a u16 size and a payload; the others carry a u16 value inline
_SHT_SYMTAB = 2
_INSTRUCTION_BYTES = 16  # sm_70 and later
_NOP_OPCODE = 0x918      # the low 12 bits of an instruction's first word (sm_70 .. sm_120)
SMEM_RESERVED_SM90 = 1024  # on sm_90+ the driver's per-CTA reserve is inside the kernel's .nv.shared section


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int


@dataclass(frozen=True)
class KernelCode:
    registers: int
    frame_bytes: int
    instructions: int    # up to the last one that is not padding
    threads: int | None  # .reqntid's product (None: the block size is not fixed)
    shared_bytes: int    # static shared memory, the driver's per-CTA reserve not included


def sections(data: bytes) -> list[Section]:
    """The ELF64 section headers; ValueError when `data` is not an ELF64 file."""
    if data[:4] != b"\x7fELF" or len(data) < 0x40 or data[4] != 2:
        raise ValueError("not an ELF64 cubin")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    stroff = raw[shstrndx][4]

    def name(off: int) -> str:
        end = data.index(b"\0", stroff + off)
        return data[stroff + off:end].decode("utf-8", "replace")

    return [Section(name(r[0]), r[1], r[4], r[5], r[6]) for r in raw]


def symbol_names(data: bytes, secs: list[Section]) -> list[str]:
    """Symbol names by index (`.nv.info` attributes name kernels by symbol index)."""
    for s in secs:
        if s.type == _SHT_SYMTAB:
            stroff = secs[s.link].offset
            out = []
            for k in range(s.size // 24):
                n = struct.unpack_from("<I", data, s.offset + k * 24)[0]
                out.append(data[stroff + n:data.index(b"\0", stroff + n)].decode("utf-8", "replace"))
            return out
    return []


def nv_info(data: bytes, section: Section):
    """(attribute, payload) pairs of one `.nv.info` section."""
    p, end = section.offset, section.offset + section.size
    while p + 4 <= end:
        fmt, attr = data[p], data[p + 1]
        if fmt == _EIFMT_SVAL:
            n = struct.unpack_from("<H", data, p + 2)[0]
            yield attr, data[p + 4:p + 4 + n]
            p += 4 + n
        else:
            yield attr, data[p + 2:p + 4]
            p += 4


def kernel_attributes(data: bytes, secs: list[Section] | None = None) -> dict[int, dict[str, int]]:
    """{EIATTR_REGCOUNT / EIATTR_FRAME_SIZE: {kernel name: value}}."""
    secs = sections(data) if secs is None else secs
    syms = symbol_names(data, secs)
    out: dict[int, dict[str, int]] = {EIATTR_REGCOUNT: {}, EIATTR_FRAME_SIZE: {}}
    for s in secs:
        if s.name != ".nv.info":
            continue
        for attr, payload in nv_info(data, s):
            if attr in out and len(payload) == 8:
                sym, value = struct.unpack("<II", payload)
                out[attr][syms[sym] if sym < len(syms) else str(sym)] = value
    return out


def _instructions(data: bytes, s: Section) -> int:
    n = s.size // _INSTRUCTION_BYTES
    while n and struct.unpack_from("<Q", data, s.offset + (n - 1) * _INSTRUCTION_BYTES)[0] & 0xFFF == _NOP_OPCODE:
        n -= 1
    return n


def _block_threads(data: bytes, secs: list[Section]) -> dict[str, int]:
    """Per kernel with a `.reqntid`: its thread count (in the kernel's own `.nv.info.<kernel>`)."""
    out = {}
    for s in secs:
        if s.name.startswith(".nv.info."):
            for attr, payload in nv_info(data, s):
                if attr == EIATTR_REQNTID and len(payload) >= 4:
                    n = 1
                    for d in struct.unpack_from(f"<{len(payload) // 4}I", payload):
                        n *= d
                    out[s.name[len(".nv.info."):]] = n
    return out


def kernel_code(data: bytes) -> dict[str, KernelCode]:
    """Per kernel: registers, stack frame bytes, instructions (trailing NOP padding not counted) and
    the fixed block size."""
    secs = sections(data)
    attrs = kernel_attributes(data, secs)
    regs, frames = attrs[EIATTR_REGCOUNT], attrs[EIATTR_FRAME_SIZE]
    threads = _block_threads(data, secs)
    reserved = SMEM_RESERVED_SM90 if cubin_arch(data) >= 90 else 0
    shared = {s.name[len(".nv.shared."):]: max(0, s.size - reserved) for s in secs
              if s.name.startswith(".nv.shared.") and not s.name.startswith(".nv.shared.reserved")}
    out = {}
    for s in secs:
        if s.name.startswith(".text."):
            k = s.name[len(".text."):]
            out[k] = KernelCode(regs.get(k, 0), frames.get(k, 0), _instructions(data, s), threads.get(k),
                                shared.get(k, 0))
    return out


def cubin_arch(data: bytes) -> int:
    """The SM number the cubin was built for (e_flags bits 8..15: 80, 90, 100, 120...)."""
    return (struct.unpack_from("<I", data, 0x30)[0] >> 8) & 0xFF
