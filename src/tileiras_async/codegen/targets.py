"""GPU targets the drop-in accepts, and the PTX ISA each needs."""
from __future__ import annotations

from dataclasses import dataclass

from ..toolchain.ptxas import PTXAS_ARCH_FOR_TARGET

# The lowest PTX ISA version that knows each target (code generation asks for at least 8.1, which
# every ptxas from CUDA 12.1 on reads, so fp8 conversions are available on sm_89).
_MIN_PTX_ISA: dict[str, tuple[int, int]] = {
    "sm_80": (7, 0), "sm_86": (7, 1), "sm_87": (7, 4), "sm_88": (9, 0), "sm_89": (7, 8),
    "sm_90": (8, 0), "sm_100": (8, 6), "sm_103": (8, 8), "sm_107": (9, 0), "sm_110": (9, 0),
    "sm_120": (8, 7), "sm_121": (8, 8),
}
GPU_NAMES = tuple(PTXAS_ARCH_FOR_TARGET)


@dataclass(frozen=True)
class Target:
    name: str           # sm_100
    ptx_target: str     # sm_100a
    ptx_isa: tuple[int, int]

    @property
    def ptx_version(self) -> str:
        return f"{self.ptx_isa[0]}.{self.ptx_isa[1]}"


def target(name: str) -> Target:
    return Target(name, PTXAS_ARCH_FOR_TARGET[name], _MIN_PTX_ISA[name])
