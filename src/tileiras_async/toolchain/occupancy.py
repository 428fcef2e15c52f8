"""Register caps that buy occupancy at (next to) no cost, decided from what ptxas did.

ptxas allocates registers for speed of one thread; when a kernel's count sits just above an occupancy
step (50 registers on sm_90 for 128 threads: 9 CTAs per SM, where 48 gives 10), ptxas can usually
meet the step with `.maxnreg` at no cost.  After the first assembly, every kernel whose registers
limit its CTAs per SM is assembled again capped at the next step down; a cap is kept only where the
kernel then has no larger stack frame (no spills) and at most 1 in 128 more instructions, so a kept
cap trades next to nothing for a step of occupancy and a dropped one leaves the kernel as ptxas first
made it.

`OccupancyTrim` holds the decision, not the runs: the caller assembles each PTX text it asks for
(synchronously in the stages, with the async harness in the pipeline) and feeds the cubin back.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..targets import register_cap_for_more_ctas, resident_ctas
from .cubin import KernelCode, kernel_code


# A kept cap may cost this fraction more instructions (rounded down): one or two in a small kernel, for a
# step of 10-33% more CTAs per SM (transpose2d_f32_32x32 sm_80: 145 -> 146 instructions, 12 -> 16 CTAs)
MAX_EXTRA_INSTRUCTIONS = 1 / 128
# A cap more than this fraction below ptxas's count is not tried: on the corpus every such cap spilled or
# cost instructions (40 -> 32, 118 -> 96, 198 -> 168), and each try is one more ptxas run.
MAX_CUT = 1 / 6


@dataclass(frozen=True)
class RegisterCap:
    """One kernel's cap: tried, and kept or dropped."""
    kernel: str
    cap: int
    kept: bool
    before: KernelCode
    after: KernelCode
    ctas_before: int
    ctas_after: int

    def describe(self) -> str:
        b, a = self.before, self.after
        figures = (f"{b.registers} -> {a.registers} registers, {self.ctas_before} -> {self.ctas_after} CTAs "
                   f"per SM, {b.instructions} -> {a.instructions} instructions")
        if self.kept:
            return f"registers capped at {self.cap} (.maxnreg) for occupancy: {figures}"
        why = "a stack frame (spills)" if a.frame_bytes > b.frame_bytes else "more instructions"
        return f"a register cap of {self.cap} for occupancy was dropped: it costs {why} ({figures})"


def with_register_caps(ptx: str, caps: dict[str, int]) -> str:
    """`ptx` with a `.maxnreg` directive on each entry named in `caps` (one without one already)."""
    for kernel, cap in sorted(caps.items()):
        m = re.search(rf"^\.(?:visible )?\.entry {re.escape(kernel)}\(.*?^\{{", ptx, re.M | re.S)
        if m is None or ".maxnreg" in m.group(0):
            continue
        brace = m.end() - 1
        ptx = ptx[:brace] + f".maxnreg {cap}\n" + ptx[brace:]
    return ptx


class OccupancyTrim:
    """The assemblies to run after the first one (`next_ptx` / `feed`), then `result`."""

    def __init__(self, gpu_name: str, ptx: str, cubin: bytes):
        self.gpu_name = gpu_name
        self.ptx, self.cubin = ptx, cubin
        self.first = kernel_code(cubin)
        self.caps = {k: cap for k, code in self.first.items() if (cap := self._cap(code)) is not None}
        self.decided: list[RegisterCap] = []
        self._pending = with_register_caps(ptx, self.caps) if self.caps else None
        self._final_run = False

    def _ctas(self, code: KernelCode) -> int:
        return resident_ctas(self.gpu_name, code.threads or 1, code.registers, code.shared_bytes)

    def _cap(self, code: KernelCode) -> int | None:
        if not code.threads or code.frame_bytes:
            return None     # no fixed block size: occupancy unknown; a frame: the kernel is already tight
        cap = register_cap_for_more_ctas(self.gpu_name, code.threads, code.registers, code.shared_bytes)
        return cap if cap is not None and code.registers - cap <= code.registers * MAX_CUT else None

    def next_ptx(self) -> str | None:
        """The PTX text to assemble next, or None when done."""
        return self._pending

    def feed(self, cubin: bytes) -> None:
        """The cubin assembled from the last `next_ptx`."""
        ptx, self._pending = self._pending, None
        if self._final_run:
            self.ptx, self.cubin = ptx, cubin
            return
        capped = kernel_code(cubin)
        for kernel, cap in sorted(self.caps.items()):
            before, after = self.first[kernel], capped.get(kernel)
            if after is None:
                continue
            allowed = before.instructions + int(before.instructions * MAX_EXTRA_INSTRUCTIONS)
            kept = (self._ctas(after) > self._ctas(before) and after.frame_bytes <= before.frame_bytes
                    and after.instructions <= allowed)
            self.decided.append(RegisterCap(kernel, cap, kept, before, after, self._ctas(before),
                                            self._ctas(after)))
        kept = {d.kernel: d.cap for d in self.decided if d.kept}
        if kept == self.caps:
            self.ptx, self.cubin = ptx, cubin
        elif kept:
            # ptxas compiles each entry on its own: the kept caps alone give those kernels' capped code
            self._pending, self._final_run = with_register_caps(self.ptx, kept), True

    def result(self) -> tuple[str, bytes, list[RegisterCap]]:
        """(the PTX assembled last, its cubin, every cap tried)."""
        return self.ptx, self.cubin, self.decided
