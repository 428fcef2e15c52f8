"""Each kernel's resource table: what its cubin records, what its PTX asks of the GPU, and the occupancy.

Where each figure comes from (nothing runs ptxas again):

    registers, stack frame           the cubin's .nv.info (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE)
    spill stores / loads (bytes)     the cubin: the STL/LDL at the kernel's spill annotations (cubin.py)
    static shared memory             the size of the cubin's .nv.shared.<kernel> (the driver's reserve not counted)
    dynamic shared memory            the PTX: 0 unless the kernel declares `.extern .shared` (then None: the
                                     launch sets it); our code generator only allocates static shared memory
    threads per CTA                  the cubin's EIATTR_REQNTID (.reqntid), else EIATTR_MAX_THREADS (.maxntid)
    tensor-memory columns (sm_100+)  the PTX: the column operand of the kernel's `tcgen05.alloc` (the most it
                                     holds at once: each tcgen05 op frees its columns before the next allocates)
    tensor-core instruction          the PTX: tcgen05.mma / wgmma.mma_async / mma.sync in the kernel's body
    copy engine                      the PTX: cp.async.bulk (TMA) / cp.async / neither (plain loads and stores)
    CTAs per SM and what limits it   targets.occupancy over the figures above (None without a fixed block size)

The cubin is parsed once per call (cubin.kernel_code); the result is plain data for events and caches.
"""
from __future__ import annotations

import re
import struct

import msgspec

from ..targets import known_target, occupancy
from .cubin import KernelCode, kernel_code

# tensor-core instructions and copy engines, newest first (a kernel may use several: the names join with "+")
_TENSOR_CORE = (("tcgen05", re.compile(r"\btcgen05\.mma\b")), ("wgmma", re.compile(r"\bwgmma\.mma_async\b")),
                ("mma.sync", re.compile(r"(?<![\w.])(?:wmma\.)?mma(?:\.sp(?:::ordered_metadata)?)?\.sync\b")))
_COPY_ENGINE = (("TMA", re.compile(r"\bcp(?:\.reduce)?\.async\.bulk\b")),
                ("cp.async", re.compile(r"\bcp\.async\.(?!bulk\b)")))
_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$.]+)\s*\(", re.M)
_TOP_LEVEL_FUNCTION = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+|\.extern\s+)?\.(?:entry|func)\b", re.M)
_TMEM_ALLOC = re.compile(r"\btcgen05\.alloc\.[\w.:]*\s+\[[^\]]*\]\s*,\s*(\d+)\s*;")
_EXTERN_SHARED = re.compile(r"\.extern\s+\.shared\b")


class KernelResources(msgspec.Struct, frozen=True, kw_only=True):
    """One kernel's resources on one target (see the module docstring for where each comes from)."""
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    stack_frame_bytes: int
    shared_static_bytes: int
    shared_dynamic_bytes: int | None = 0   # None: `.extern .shared`, sized at launch
    tmem_columns: int | None = None        # None: no tensor memory allocated (or before sm_100)
    threads: int | None = None             # threads per CTA; None: the block size is not fixed
    ctas_per_sm: int | None = None
    occupancy_limit: str | None = None     # registers | shared memory | threads | blocks
    tensor_core: str = "none"              # tcgen05 | wgmma | mma.sync | none (several joined with "+")
    copy_engine: str = "plain"             # TMA | cp.async | plain (several joined with "+")

    def summary(self) -> str:
        """One line: what the drop-in's resource remark and the batch's table say."""
        shared = f"{self.shared_static_bytes} bytes static shared memory"
        if self.shared_dynamic_bytes is None:
            shared += " + dynamic (set at launch)"
        parts = [f"{self.registers} registers", f"{self.stack_frame_bytes} bytes stack frame",
                 f"{self.spill_store_bytes} bytes spill stores", f"{self.spill_load_bytes} bytes spill loads",
                 shared]
        if self.tmem_columns is not None:
            parts.append(f"{self.tmem_columns} tensor-memory columns")
        parts.append(f"{self.threads} threads per CTA" if self.threads else "block size not fixed")
        if self.ctas_per_sm is not None:
            parts.append(f"{self.ctas_per_sm} CTAs per SM (limited by {self.occupancy_limit})")
        parts.append(f"tensor cores: {self.tensor_core}")
        parts.append(f"copies: {self.copy_engine}")
        return ", ".join(parts)


def entry_bodies(ptx: str) -> dict[str, str]:
    """Each `.entry`'s text, up to the next top-level function."""
    out = {}
    for m in _ENTRY.finditer(ptx):
        nxt = _TOP_LEVEL_FUNCTION.search(ptx, m.end())
        out[m.group(1)] = ptx[m.start():nxt.start() if nxt else len(ptx)]
    return out


def _kinds(table, body: str) -> list[str]:
    return [name for name, pattern in table if pattern.search(body)]


def _tmem_columns(body: str) -> int | None:
    cols = [int(n) for n in _TMEM_ALLOC.findall(body)]
    return max(cols) if cols else None


def _resources(gpu_name: str, code: KernelCode, body: str) -> KernelResources:
    dynamic = None if _EXTERN_SHARED.search(body) else 0
    threads = code.threads or code.max_threads
    ctas = limit = None
    if code.threads:      # .maxntid bounds the block size, the launch picks it: no occupancy
        ctas, limit = occupancy(gpu_name, code.threads, code.registers, code.shared_bytes + (dynamic or 0))
    known = known_target(gpu_name)
    tmem = _tmem_columns(body) if known is not None and known.has_tensor_memory else None
    return KernelResources(
        registers=code.registers, spill_store_bytes=code.spill_store_bytes, spill_load_bytes=code.spill_load_bytes,
        stack_frame_bytes=code.frame_bytes, shared_static_bytes=code.shared_bytes, shared_dynamic_bytes=dynamic,
        tmem_columns=tmem, threads=threads, ctas_per_sm=ctas, occupancy_limit=limit,
        tensor_core="+".join(_kinds(_TENSOR_CORE, body)) or "none",
        copy_engine="+".join(_kinds(_COPY_ENGINE, body)) or "plain")


def kernel_resources(gpu_name: str, cubin: bytes, ptx: str) -> dict[str, KernelResources]:
    """Per kernel of the cubin (by symbol name): its resources on `gpu_name`; `ptx` is what ptxas assembled.
    ValueError when `cubin` is not an ELF cubin (or a truncated one)."""
    bodies = entry_bodies(ptx)
    try:
        code = kernel_code(cubin)
    except (struct.error, IndexError) as e:
        raise ValueError(f"not a readable cubin: {e}") from None
    return {name: _resources(gpu_name, c, bodies.get(name, "")) for name, c in code.items() if name in bodies}
