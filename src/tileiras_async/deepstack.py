"""Running recursive code on deeply nested input: a thread with a large stack and a raised
recursion limit.

The reader, verifier, printer, DCE and IR copies walk regions with explicit stacks.  Code
generation (the per-op lowerings call back into the emitter for each region) and the schedule
analysis still recurse once per nesting level, so their entry points call `call_deep` when a
kernel nests deeper than SHALLOW: the call then runs on a thread whose stack and recursion limit
fit bytecode.reader.MAX_NESTING levels.
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable

SHALLOW = 64                     # nesting below this runs on the caller's stack, as before
FRAMES_PER_LEVEL = 12            # Python frames one nesting level may take in the recursive lowerings
STACK_BYTES_PER_FRAME = 2048     # C stack a Python frame may take when called through C code
_lock = threading.Lock()


def nesting_depth(block) -> int:
    """How deep ops nest below `block` (0: no op has regions); iterative."""
    deepest = 0
    work = [(block, 0)]
    while work:
        block, depth = work.pop()
        deepest = max(deepest, depth)
        for op in block.ops:
            for region in op.regions:
                work.extend((b, depth + 1) for b in region.blocks)
    return deepest


def call_deep(depth: int, func: Callable[..., Any], *args, **kwargs) -> Any:
    """func(*args, **kwargs), on a thread sized for `depth` nesting levels when depth > SHALLOW."""
    if depth <= SHALLOW:
        return func(*args, **kwargs)
    frames = depth * FRAMES_PER_LEVEL + 1000
    if sys.getrecursionlimit() < frames:
        sys.setrecursionlimit(frames)   # process-wide, and never lowered: other threads may be deep too
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = func(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            outcome["error"] = e

    stack = max(threading.stack_size(), frames * STACK_BYTES_PER_FRAME + (16 << 20))
    with _lock:   # threading.stack_size is a process-wide setting for the next thread started
        old = threading.stack_size(min(stack, 1 << 30))
        try:
            thread = threading.Thread(target=run, name="tileiras-async-deep", daemon=True)
            thread.start()
        finally:
            threading.stack_size(old)
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")
