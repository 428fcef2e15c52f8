"""Executed thread-instructions by class: what `run --engine emulate --stats FILE.json` writes.

The machine counts, per basic block, how many lanes executed it (one integer add per block step); each
block's instructions are classified once, when the launch builds it, so the classes cost nothing per
instruction.  Like `thread_instructions`, an instruction counts once per active lane whether or not its
guard predicate holds (the hardware issues it for the warp either way).

The classes partition every executed instruction, so they always sum to the total:

* memory      -- loads, stores, atomics, async/bulk copies, ldmatrix/stmatrix, tensor-memory ld/st/cp
* tensor_core -- the matrix multiplies themselves: mma.sync, wgmma.mma_async, tcgen05.mma
* barrier     -- CTA and warp synchronisation: bar/barrier, bar.warp.sync, mbarrier.*, cp.async.mbarrier.arrive
* shuffle     -- shfl.sync
* other       -- everything else (arithmetic, conversions, control flow, fences, ...)
"""
from __future__ import annotations

import json

CLASSES = ("memory", "tensor_core", "barrier", "shuffle", "other")

# Opcode prefixes (dotted components, modifiers left out) -> class; the longest matching prefix decides,
# so `cp.async.mbarrier.arrive` is a barrier while the rest of `cp.async` is memory.
_PREFIX_CLASS = {
    ("ld",): "memory", ("ldu",): "memory", ("st",): "memory", ("atom",): "memory", ("red",): "memory",
    ("cp",): "memory", ("ldmatrix",): "memory", ("stmatrix",): "memory", ("prefetch",): "memory",
    ("prefetchu",): "memory", ("multimem",): "memory",
    ("tcgen05", "ld"): "memory", ("tcgen05", "st"): "memory", ("tcgen05", "cp"): "memory",
    ("mma",): "tensor_core", ("wgmma", "mma_async"): "tensor_core", ("tcgen05", "mma"): "tensor_core",
    ("bar",): "barrier", ("barrier",): "barrier", ("mbarrier",): "barrier",
    ("cp", "async", "mbarrier"): "barrier",
    ("shfl",): "shuffle",
}
_LONGEST = max(len(k) for k in _PREFIX_CLASS)


def classify(opcode: str) -> str:
    """The class of one PTX opcode with its modifiers (`ld.global.v4.b32` -> memory)."""
    parts = tuple(opcode.split("."))
    for n in range(min(_LONGEST, len(parts)), 0, -1):
        cls = _PREFIX_CLASS.get(parts[:n])
        if cls is not None:
            return cls
    return "other"


def class_vector(opcodes) -> tuple[int, ...]:
    """How many of `opcodes` fall in each of CLASSES, in that order."""
    counts = [0] * len(CLASSES)
    for op in opcodes:
        counts[CLASSES.index(classify(op))] += 1
    return tuple(counts)


def tally(vectors: list[tuple[int, ...]], lanes: list[int]) -> dict[str, int]:
    """Thread-instructions per class: each block's class vector times the lanes that executed it."""
    totals = [0] * len(CLASSES)
    for vec, n in zip(vectors, lanes):
        if n:
            for k, c in enumerate(vec):
                totals[k] += c * n
    return dict(zip(CLASSES, totals))


def stats_document(kernel: str, grid, counters: dict[str, int]) -> dict:
    """The --stats JSON: the kernel, the grid and the executed thread-instructions, in total and by class.
    `counters`: a run report's counters (the emulator's are named `emulate.*` where two engines ran)."""
    prefix = "emulate." if "emulate.thread_instructions" in counters else ""
    by_class = {c: int(counters[f"{prefix}instructions.{c}"]) for c in CLASSES}
    return {"kernel": kernel, "grid": list(grid),
            "thread_instructions": {"total": int(counters[f"{prefix}thread_instructions"]), **by_class}}


def write_stats(path: str, kernel: str, grid, counters: dict[str, int]) -> None:
    """Write the --stats document (sorted keys: the same run gives the same bytes)."""
    from ..toolchain import write_atomic
    document = stats_document(kernel, grid, counters)
    write_atomic(path, (json.dumps(document, indent=2, sort_keys=True) + "\n").encode())
