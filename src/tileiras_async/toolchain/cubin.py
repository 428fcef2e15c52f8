"""What a cubin records about each kernel: registers, stack frame, spills, block size, instruction count.

A cubin is an ELF64 file.  ptxas writes attributes (EIATTR_*) into `.nv.info` (one record per kernel
symbol: EIATTR_REGCOUNT, EIATTR_FRAME_SIZE, `ptxas -v`'s figures) and into each kernel's own
`.nv.info.<kernel>` (EIATTR_REQNTID, the per-instruction annotations), the kernel's code into
`.text.<kernel>`, padded with NOPs to a 128-byte boundary, and its static shared memory as the size of
`.nv.shared.<kernel>`.  Facts from the ELF layout and from reading ptxas's output (CUDA 12.8 .. 13.x).

Spills: `ptxas -v`'s "N bytes spill stores, M bytes spill loads" has no attribute of its own.  Every spill or
refill instruction ptxas inserts is listed in the kernel's EIATTR_INSTR_ANNOTATIONS record as (kind 1, code
offset) (nvdisasm prints those instructions with the note "SpillRefill"); the instruction there is an STL
(store) or LDL (load) whose access size is in the instruction word, and their sums are `ptxas -v`'s bytes
(checked on sm_80, sm_90, sm_100 and sm_120 against `ptxas -v`, tests/test_resources.py).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

EIATTR_MAX_THREADS = 0x05          # .maxntid: (x, y, z)
EIATTR_REQNTID = 0x10              # .reqntid: (x, y, z)
EIATTR_FRAME_SIZE = 0x11           # in .nv.info: (symbol, bytes)
EIATTR_MIN_STACK_SIZE = 0x12       # in .nv.info: (symbol, bytes)
EIATTR_MAXREG_COUNT = 0x1B         # .maxnreg (255 when none)
EIATTR_PARAM_CBANK = 0x0A          # (symbol, bank offset u16, bytes u16): where the parameters are
EIATTR_CBANK_PARAM_SIZE = 0x19     # bytes of parameters, hidden ones (tensor maps) included
EIATTR_REGCOUNT = 0x2F             # in .nv.info: (symbol, registers)
EIATTR_KPARAM_INFO = 0x17          # (index, ordinal u16, offset u16, flags; bytes in flag bits 18..31): every parameter
EIATTR_KPARAM_INFO_V2 = 0x45       # the same, bytes in the flags' low 16 bits, hidden parameters left out (what
#                                    ptxas writes for PTX ISA 9: NVIDIA's tool; ours declares 8.x and gets the first)
EIATTR_NUM_BARRIERS = 0x4C
EIATTR_INSTR_ANNOTATIONS = 0x55    # (kind, code offset) pairs; kind 1: a spill store or refill load
_ANNOTATION_SPILL = 1
_EIFMT_SVAL = 4          # attribute with a u16 size and a payload; the others carry a u16 value inline
_SHT_SYMTAB = 2
_INSTRUCTION_BYTES = 16  # sm_70 and later
_NOP_OPCODE = 0x918      # the low 12 bits of an instruction's first word (sm_70 .. sm_120)
_STL_OPCODE, _LDL_OPCODE = 0x387, 0x983
# an LDL/STL's access size: bits 9..11 of the instruction's second word (U8 S8 U16 S16 32 64 128 U.128)
_ACCESS_BYTES = (1, 1, 2, 2, 4, 8, 16, 16)
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
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    max_threads: int | None = None   # .maxntid's product
    barriers: int = 0
    block: tuple[int, int, int] | None = None   # .reqntid: (x, y, z)


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


def _words(payload: bytes) -> tuple[int, ...]:
    return struct.unpack_from(f"<{len(payload) // 4}I", payload)


def _product(payload: bytes) -> int | None:
    if len(payload) < 4:
        return None
    n = 1
    for d in _words(payload):
        n *= d
    return n


def _dims(payload: bytes) -> tuple[int, int, int] | None:
    """(x, y, z) of a .reqntid / .maxntid record, the dimensions it leaves out 1."""
    return tuple((list(_words(payload)) + [1, 1])[:3]) if len(payload) >= 4 else None


def _u16(payload: bytes) -> int:
    return struct.unpack_from("<H", payload)[0] if len(payload) >= 2 else 0


def _spill_offsets(payload: bytes) -> list[int]:
    w = _words(payload)
    return [off for kind, off in zip(w[0::2], w[1::2]) if kind == _ANNOTATION_SPILL]


# The attributes read from a kernel's `.nv.info.<kernel>`: attribute -> (field, payload decoder)
_KERNEL_ATTRIBUTES = {
    EIATTR_REQNTID: ("block", _dims),
    EIATTR_MAX_THREADS: ("max_threads", _product),
    EIATTR_NUM_BARRIERS: ("barriers", _u16),
    EIATTR_INSTR_ANNOTATIONS: ("spills", _spill_offsets),
}
# The attributes of `.nv.info`, one (symbol index, value) record per kernel: attribute -> field
_SYMBOL_ATTRIBUTES = {EIATTR_REGCOUNT: "registers", EIATTR_FRAME_SIZE: "frame_bytes"}


@dataclass
class _Attributes:
    values: dict[str, object] = field(default_factory=dict)

    def add(self, name: str, value) -> None:
        if isinstance(value, list):     # a list-valued attribute may come in several records
            self.values.setdefault(name, []).extend(value)
        else:
            self.values[name] = value


def read_attributes(data: bytes, secs: list[Section] | None = None) -> dict[str, dict[str, object]]:
    """Per kernel name: the attributes of `_SYMBOL_ATTRIBUTES` and `_KERNEL_ATTRIBUTES` by field name."""
    secs = sections(data) if secs is None else secs
    syms = symbol_names(data, secs)
    out: dict[str, _Attributes] = {}
    for s in secs:
        if s.name == ".nv.info":
            for attr, payload in nv_info(data, s):
                if attr in _SYMBOL_ATTRIBUTES and len(payload) == 8:
                    sym, value = struct.unpack("<II", payload)
                    kernel = syms[sym] if sym < len(syms) else str(sym)
                    out.setdefault(kernel, _Attributes()).add(_SYMBOL_ATTRIBUTES[attr], value)
        elif s.name.startswith(".nv.info."):
            kernel = out.setdefault(s.name[len(".nv.info."):], _Attributes())
            for attr, payload in nv_info(data, s):
                if attr in _KERNEL_ATTRIBUTES:
                    name, decode = _KERNEL_ATTRIBUTES[attr]
                    kernel.add(name, decode(payload))
    return {k: a.values for k, a in out.items()}


def kernel_attributes(data: bytes, secs: list[Section] | None = None) -> dict[int, dict[str, int]]:
    """{EIATTR_REGCOUNT / EIATTR_FRAME_SIZE: {kernel name: value}}."""
    attrs = read_attributes(data, secs)
    return {attr: {k: v[name] for k, v in attrs.items() if name in v} for attr, name in _SYMBOL_ATTRIBUTES.items()}


def _instructions(data: bytes, s: Section) -> int:
    n = s.size // _INSTRUCTION_BYTES
    while n and struct.unpack_from("<Q", data, s.offset + (n - 1) * _INSTRUCTION_BYTES)[0] & 0xFFF == _NOP_OPCODE:
        n -= 1
    return n


def _spill_bytes(data: bytes, text: Section, offsets: list[int]) -> tuple[int, int]:
    """(bytes stored, bytes loaded) by the spill instructions at these offsets of the kernel's code."""
    stores = loads = 0
    for off in offsets:
        if off + _INSTRUCTION_BYTES > text.size:
            continue
        lo, hi = struct.unpack_from("<QQ", data, text.offset + off)
        size = _ACCESS_BYTES[(hi >> 9) & 7]
        if lo & 0xFFF == _STL_OPCODE:
            stores += size
        elif lo & 0xFFF == _LDL_OPCODE:
            loads += size
    return stores, loads


def kernel_code(data: bytes) -> dict[str, KernelCode]:
    """Per kernel: registers, stack frame bytes, instructions (trailing NOP padding not counted), the fixed
    block size, static shared memory and spill bytes: what `ptxas -v` reports, read from the cubin."""
    secs = sections(data)
    attrs = read_attributes(data, secs)
    reserved = SMEM_RESERVED_SM90 if cubin_arch(data) >= 90 else 0
    shared = {s.name[len(".nv.shared."):]: max(0, s.size - reserved) for s in secs
              if s.name.startswith(".nv.shared.") and not s.name.startswith(".nv.shared.reserved")}
    out = {}
    for s in secs:
        if s.name.startswith(".text."):
            k = s.name[len(".text."):]
            a = attrs.get(k, {})
            stores, loads = _spill_bytes(data, s, a.get("spills", []))
            block = a.get("block")
            threads = block[0] * block[1] * block[2] if block else None
            out[k] = KernelCode(a.get("registers", 0), a.get("frame_bytes", 0), _instructions(data, s),
                                threads, shared.get(k, 0), stores, loads, a.get("max_threads"),
                                a.get("barriers", 0), block)
    return out


@dataclass(frozen=True)
class LaunchParams:
    """A kernel's parameter records: where its parameters start in constant bank 0, how many bytes they take
    (hidden tensor maps included), (ordinal, offset, bytes) of each parameter that has a record, and whether
    those records are EIATTR_KPARAM_INFO_V2's (`v2`: the hidden parameters have none)."""
    bank_offset: int
    bank_bytes: int
    params: tuple[tuple[int, int, int], ...]
    v2: bool = False


def launch_params(data: bytes) -> dict[str, LaunchParams]:
    """Per kernel, its parameter records (EIATTR_PARAM_CBANK, EIATTR_CBANK_PARAM_SIZE, EIATTR_KPARAM_INFO or
    _V2): with _V2, hidden parameters -- the tensor maps the host object fills -- have no record but count in
    the bank's size."""
    secs = sections(data)
    out = {}
    for s in secs:
        if not s.name.startswith(".nv.info."):
            continue
        bank, size, params, v2 = 0, 0, [], False
        for attr, payload in nv_info(data, s):
            if attr == EIATTR_PARAM_CBANK and len(payload) == 8:
                bank, size = struct.unpack_from("<HH", payload, 4)
            elif attr == EIATTR_CBANK_PARAM_SIZE:
                size = _u16(payload)
            elif attr in (EIATTR_KPARAM_INFO, EIATTR_KPARAM_INFO_V2) and len(payload) == 12:
                _index, ordinal, offset, flags = struct.unpack("<IHHI", payload)
                size = (flags >> 18) & 0x3FFF if attr == EIATTR_KPARAM_INFO else flags & 0xFFFF
                params.append((ordinal, offset, size))
                v2 = v2 or attr == EIATTR_KPARAM_INFO_V2
        out[s.name[len(".nv.info."):]] = LaunchParams(bank, size, tuple(sorted(params)), v2)
    return out


def host_object(data: bytes) -> bytes | None:
    """The x86-64 host object ptxas embedded (`--nv-host=`) as the `.nv.host` section; None without one."""
    for s in sections(data):
        if s.name == ".nv.host":
            return data[s.offset:s.offset + s.size]
    return None


def cubin_arch(data: bytes) -> int:
    """The SM number the cubin was built for (e_flags bits 8..15: 80, 90, 100, 120...)."""
    return (struct.unpack_from("<I", data, 0x30)[0] >> 8) & 0xFF
