"""Parse, link and run one PTX kernel: `load_program` (cached) and `emulate_ptx` (the package re-exports both;
runner.py imports them from here, so the package and its runner do not import each other)."""
from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from .errors import LaunchError
from .memory import DeviceMemory
from .parser import parse_ptx
from .program import Program, link


@dataclass
class EmuReport:
    kernel: str
    grid: tuple
    block: tuple
    ctas: int
    batches: int
    lanes_per_batch: int
    thread_instructions: int      # instructions executed, summed over the threads that executed them
    block_steps: int              # basic blocks executed by lane groups
    wall_s: float
    instruction_classes: dict = field(default_factory=dict)   # thread-instructions per class (emu/stats.py)
    warnings: tuple = ()          # memcheck="device": reads past an allocation it served (Machine.memcheck_warnings)

    @property
    def thread_instructions_per_s(self) -> float:
        return self.thread_instructions / self.wall_s if self.wall_s > 0 else float("inf")

    def as_dict(self) -> dict:
        return {"kernel": self.kernel, "grid": list(self.grid), "block": list(self.block), "ctas": self.ctas,
                "batches": self.batches, "lanes_per_batch": self.lanes_per_batch,
                "thread_instructions": self.thread_instructions, "block_steps": self.block_steps,
                "wall_s": self.wall_s, "thread_instructions_per_s": self.thread_instructions_per_s,
                **{f"instructions.{c}": n for c, n in self.instruction_classes.items()}}


_CACHE: OrderedDict = OrderedDict()
_CACHE_MAX = 32


def load_program(ptx_text: str, kernel: str | None = None) -> Program:
    """Parse and link one kernel of a PTX module (cached by text and kernel name)."""
    key = (hashlib.sha1(ptx_text.encode()).hexdigest(), kernel)
    prog = _CACHE.get(key)
    if prog is not None:
        _CACHE.move_to_end(key)
        return prog
    mod = parse_ptx(ptx_text)
    if kernel is None:
        if len(mod.entries) != 1:
            raise LaunchError(f"the PTX has {len(mod.entries)} entries ({', '.join(mod.entries)}); name one")
        kernel = mod.entries[0]
    prog = link(mod, kernel)
    _CACHE[key] = prog
    if len(_CACHE) > _CACHE_MAX:
        _CACHE.popitem(last=False)
    return prog


def emulate_ptx(ptx_text: str, kernel: str | None, grid: tuple, block: tuple, params: list,
                memory: DeviceMemory, *, dynamic_smem: int = 0, max_lanes: int = 4096,
                max_steps: int | None = 20_000_000, canonical_nan: bool = True,
                check_races: bool = False, memcheck: str = "strict") -> EmuReport:
    """Run `kernel` of `ptx_text` over `grid` x `block` with entry parameter values `params`.

    `params`: one value per entry parameter, in order -- Python/numpy ints and
    floats, or device addresses (ints from `DeviceMemory.alloc*`) for pointers.
    Results are left in `memory`.  `check_races`: a shared- or tensor-memory access that another thread's (or
    asynchronous unit's) conflicting access precedes with no barrier or mbarrier wait ordering them raises
    `races.RaceError` (happens-before: emu/races.py).
    `memcheck`: "strict" (every access outside an allocation faults) or "device" (a read just past an
    allocation returns 0xff bytes and is reported in the report's `warnings`, as on a GPU: memory.py).
    """
    from .machine import Machine
    prog = load_program(ptx_text, kernel)
    t0 = time.perf_counter()
    mc = Machine(prog, memory, list(params), grid, block, dynamic_smem=dynamic_smem, max_lanes=max_lanes,
                 max_steps=max_steps, canonical_nan=canonical_nan, check_races=check_races, memcheck=memcheck)
    mc.run()
    wall = time.perf_counter() - t0
    return EmuReport(prog.kernel, mc.grid, mc.block, mc.ncta, mc.nbatches, mc.L, mc.thread_instructions,
                     mc.instructions, wall, mc.instruction_classes(), tuple(mc.memcheck_warnings()))
