"""dce: remove what cannot affect memory, output or control flow, dead loop-carried values included.

Contract: in/out: tile-GPU IR; no observable behaviour changes. (cuda_tile_dce.py has the liveness rules.)
"""
from __future__ import annotations

from ..cuda_tile_dce import eliminate_dead_code
from ..ir import KernelIR


def run(k: KernelIR) -> None:
    eliminate_dead_code(k.fn)
