"""What the passes and code generation are told about the compile: target, warps, stages, debug info."""
from __future__ import annotations

from dataclasses import dataclass
from math import prod

from .layout import WARP_SIZE, LinearLayout, blocked
from ..targets import Target, known_target


@dataclass
class CodegenOptions:
    num_warps: int = 4
    opt_level: int = 3
    vector_width: int = 4
    target: str = "sm_100"  # --gpu-name: picks instructions that exist on that architecture
    debug: str = "none"     # "none", "lineinfo" (--lineinfo) or "full" (-g): source lines in the PTX
    # software pipelining of K-loops: shared-memory stage buffers per pipelined operand; 1 (or 0) keeps every
    # loop synchronous.  4 is the real tool's `unspecialized-pipeline-num-stages` default (--num-stages).
    pipeline_stages: int = 4
    # which tensor-core instruction mmaf/mmai use: "auto" (wgmma on sm_90 where tilegpu.analysis.wgmma.select_wgmma
    # allows it -- where NVIDIA's tileiras uses HGMMA --, tcgen05 on sm_100 where tilegpu.analysis.tcgen05 allows it,
    # mma.sync elsewhere), "tcgen05" (tcgen05 where it applies) or "mma.sync" (neither wgmma nor tcgen05)
    mma_instruction: str = "auto"

    @property
    def known_target(self) -> Target | None:
        """The target's capabilities (None when `target` names no known GPU: use what every target has)."""
        return known_target(self.target)

    @property
    def num_threads(self) -> int:
        return self.num_warps * WARP_SIZE

    def default_layout(self, shape: tuple[int, ...]) -> LinearLayout:
        """The blocked layout of elementwise work and memory: per-thread vectors are widened only once every
        thread has an element, so small tiles are not replicated."""
        per_thread = max(1, prod(shape) // self.num_threads)
        return blocked(shape, self.num_warps, min(self.vector_width, per_thread))
