"""GPU targets: the --gpu-name values the real tool offers, the architecture each is compiled for, and the
PTX ISA our PTX declares.  A leaf module: the passes, code generation and the toolchain all read it."""
from __future__ import annotations

import re
from dataclasses import dataclass

# --gpu-name -> the PTX `.target` / ptxas -arch: from sm_90 on the arch-specific ("a") variant, so
# wgmma/tcgen05-style instructions are allowed (traced from the real tool)
ARCH_FOR_TARGET: dict[str, str] = {
    "sm_80": "sm_80", "sm_86": "sm_86", "sm_87": "sm_87", "sm_88": "sm_88", "sm_89": "sm_89",
    "sm_90": "sm_90a", "sm_100": "sm_100a", "sm_103": "sm_103a", "sm_107": "sm_107a", "sm_110": "sm_110a",
    "sm_120": "sm_120a", "sm_121": "sm_121a",
}

# The lowest PTX ISA version that knows each target (code generation asks for at least 8.1, which
# every ptxas from CUDA 12.1 on reads, so fp8 conversions are available on sm_89).
_MIN_PTX_ISA: dict[str, tuple[int, int]] = {
    "sm_80": (7, 0), "sm_86": (7, 1), "sm_87": (7, 4), "sm_88": (9, 0), "sm_89": (7, 8),
    "sm_90": (8, 0), "sm_100": (8, 6), "sm_103": (8, 8), "sm_107": (9, 0), "sm_110": (9, 0),
    "sm_120": (8, 7), "sm_121": (8, 8),
}
GPU_NAMES = tuple(ARCH_FOR_TARGET)
# PTX ISA versions LLVM 22 can emit (feature +ptxNN); ptxas 13.x reads all of them
MAX_LLVM_PTX = (9, 0)
MIN_EMITTED_PTX = (8, 1)

# The constant-bank address of a kernel's first parameter as the launch hooks of NVIDIA's host objects lay
# the parameter buffer out (parameters are aligned as bank addresses), by target family: read from the hooks'
# code (emu/README.md, "NVIDIA's launch-time hook").
HOOK_PARAM_BANK_BASE = {"sm_90": 0x210, "sm_100": 0}


@dataclass(frozen=True)
class Target:
    """A --gpu-name and what its architecture offers.  The passes and code generation ask these fields, never
    the SM number: which instruction a target gets is decided here, once."""
    name: str           # sm_100
    ptx_target: str     # sm_100a
    ptx_isa: tuple[int, int]
    has_cp_async: bool          # cp.async global -> shared copies (the K-loop pipeliner's stage copies)
    has_fp8_mma: bool           # mma.sync .e4m3/.e5m2 (with a recent enough PTX ISA: see tilegpu.analysis.mma)
    has_wgmma: bool             # warpgroup MMA: sm_90a only
    has_tcgen05: bool           # tcgen05.mma: where NVIDIA's tileiras emits UTCHMMA (sm_100a, sm_103a, sm_110a)
    has_tensor_memory: bool     # the data-centre Blackwell SMs' TMEM (sm_107 too, though tcgen05 is not used)
    is_blackwell: bool          # sm_100 and later (sm_120/121: Blackwell without tensor memory)
    has_griddepcontrol: bool    # griddepcontrol.wait / launch_dependents
    has_tma: bool               # tensor maps and cp.async.bulk.tensor (sm_90 and later)
    has_tensor_map_hooks: bool  # the launch hooks' parameter layout is known (HOOK_PARAM_BANK_BASE)
    has_bf16_atomic_add: bool   # atom.add.noftz.bf16
    has_int_to_bf16_cvt: bool   # cvt.rn.bf16.s32 and friends
    has_fp8_cvt: bool           # cvt between f32/f16x2 and e4m3x2/e5m2x2 (sm_89 has it too, but only from PTX 8.1)
    tf32_cvt_roundings: frozenset[str]  # the rounding modifiers of cvt.<rnd>.tf32.f32 the target has

    @property
    def ptx_version(self) -> str:
        return f"{self.ptx_isa[0]}.{self.ptx_isa[1]}"

    @property
    def sm(self) -> int:
        return sm_number(self.name) or 0

    @property
    def emitted_ptx_isa(self) -> tuple[int, int]:
        """The PTX ISA version the emitted PTX declares (LLVM's +ptxNN feature)."""
        return min(max(self.ptx_isa, MIN_EMITTED_PTX), MAX_LLVM_PTX)


def _capabilities(sm: int) -> dict:
    """The PTX ISA's target requirements of the instructions we choose between, for one SM number."""
    return dict(
        has_cp_async=sm >= 80, has_fp8_mma=sm >= 89, has_wgmma=sm == 90, has_tcgen05=sm in (100, 103, 110),
        has_tensor_memory=sm in (100, 101, 103, 107, 110), is_blackwell=sm >= 100, has_griddepcontrol=sm >= 90,
        has_tma=sm >= 90, has_tensor_map_hooks=f"sm_{sm}" in HOOK_PARAM_BANK_BASE,
        has_bf16_atomic_add=sm >= 90, has_int_to_bf16_cvt=sm >= 90, has_fp8_cvt=sm >= 90,
        tf32_cvt_roundings=frozenset(r for r, first in (("rna", 80), ("rn", 90), ("rz", 90)) if sm >= first))


def target(name: str) -> Target:
    return Target(name, ARCH_FOR_TARGET[name], _MIN_PTX_ISA[name], **_capabilities(sm_number(name) or 0))


def known_target(spec) -> Target | None:
    """The Target a --gpu-name, its architecture name (sm_90a) or a Target names; None for anything else (the
    caller then uses only what every target has)."""
    if isinstance(spec, Target):
        return spec
    if isinstance(spec, str):
        if spec not in ARCH_FOR_TARGET and spec.endswith("a"):
            spec = spec[:-1]
        if spec in ARCH_FOR_TARGET:
            return target(spec)
    return None


def looks_like_gpu_name(value) -> bool:
    """sm_<anything>: the shape of a --gpu-name, for callers that do not depend on the target (the interpreter)."""
    return isinstance(value, str) and value.startswith("sm_")


def sm_number(name) -> int | None:
    """sm_90 / sm_90a / a Target -> 90 (None when it names no SM)."""
    name = getattr(name, "name", name)
    m = re.match(r"sm_(\d+)", name) if isinstance(name, str) else None
    return int(m.group(1)) if m else None


# ---------------------------------------------------------------- occupancy

@dataclass(frozen=True)
class SmLimits:
    """What one SM holds at once (NVIDIA's occupancy tables for each compute capability)."""
    warps: int
    ctas: int
    shared_bytes: int
    registers: int = 65536
    register_unit: int = 256          # registers are allocated per warp in units of this many
    max_thread_registers: int = 255
    cta_reserved_shared: int = 1024   # shared memory the driver reserves per CTA (sm_80 on)


_SM_LIMITS: dict[int, SmLimits] = {
    80: SmLimits(64, 32, 167936), 86: SmLimits(48, 16, 102400), 87: SmLimits(48, 16, 167936),
    88: SmLimits(48, 24, 102400), 89: SmLimits(48, 24, 102400), 90: SmLimits(64, 32, 233472),
    100: SmLimits(64, 32, 233472), 103: SmLimits(64, 32, 233472), 107: SmLimits(64, 32, 233472),
    110: SmLimits(64, 32, 233472), 120: SmLimits(48, 32, 102400), 121: SmLimits(48, 32, 102400),
}


def sm_limits(name) -> SmLimits:
    return _SM_LIMITS[sm_number(name) or 0]


def shared_memory_limit(name) -> int:
    """The most shared memory one CTA of a kernel for `name` may declare: the SM's shared memory less the
    driver's per-CTA reserve (163 KiB on sm_80/87, 99 KiB on sm_86/88/89/120/121, 227 KiB on sm_90..sm_110),
    the bound ptxas enforces under --enable-extended-smem (it reports e.g. `0x28c00 max` for sm_80).  Above
    48 KiB the real tool still declares the memory statically: ptxas gets --enable-extended-smem=true, the
    cubin's `.nv.shared.<kernel>` holds the whole size and the driver grants it at launch with no
    dynamic-shared-memory attribute set (cuTile's launcher sets none for a kernel without a dynamic size)."""
    lim = sm_limits(name)
    return lim.shared_bytes - lim.cta_reserved_shared


# what limits the CTAs on an SM, in the order a tie is named
OCCUPANCY_LIMITS = ("registers", "shared memory", "threads", "blocks")


def occupancy(name, threads: int, registers: int, shared_bytes: int) -> tuple[int, str]:
    """(CTAs that fit on one SM at once, the resource that limits them: one of OCCUPANCY_LIMITS) for CTAs of
    `threads` threads, each thread using `registers` registers and the CTA `shared_bytes` of shared memory
    (the driver's reserve not included)."""
    lim = sm_limits(name)
    warps = -(-threads // 32)
    per_warp = -(-max(registers, 1) * 32 // lim.register_unit) * lim.register_unit
    by = {"registers": lim.registers // (per_warp * warps),
          "shared memory": lim.shared_bytes // (shared_bytes + lim.cta_reserved_shared),
          "threads": lim.warps // warps, "blocks": lim.ctas}
    n = min(by.values())
    return n, next(k for k in OCCUPANCY_LIMITS if by[k] == n)


def resident_ctas(name, threads: int, registers: int, shared_bytes: int) -> int:
    """CTAs of `threads` threads, each thread using `registers` registers and the CTA `shared_bytes`
    of static shared memory (the driver's reserve not included), that fit on one SM at once."""
    return occupancy(name, threads, registers, shared_bytes)[0]


def register_cap_for_more_ctas(name, threads: int, registers: int, shared_bytes: int) -> int | None:
    """The most registers per thread, below `registers`, at which more such CTAs fit on an SM; None when
    registers do not limit them."""
    now = resident_ctas(name, threads, registers, shared_bytes)
    for r in range(registers - 1, 0, -1):
        if resident_ctas(name, threads, r, shared_bytes) > now:
            return r
    return None
