"""mark-uniform-branches: branches around warp shuffles are declared warp-uniform, so ptxas keeps the shuffles
on their fast path.

Contract: in/out: tile-GPU IR; behaviour unchanged. An `if` gets `warp_uniform = true` when a shuffle could
run while its branch has not reconverged: its regions hold a reduce or scan (the ops lowered to
`shfl.sync`), or they leave early -- a `break` or `continue` of the innermost enclosing loop whose body holds
one, or a `return` from a kernel that holds one -- unless that region also holds a CTA barrier (a
`tilegpu.barrier`, or a reduce or scan with a shared-memory round): `bar.sync` is warp-aligned, so ptxas
already takes the code around it as convergent, and a vote there only costs instructions.

Code generation passes such a condition through `vote.sync.any` first. That is an identity: an `if`
condition is a 0-d tile, which every thread holds the same value of (reductions broadcast their result to
every thread). ptxas cannot see that, and without the vote it compiles every `shfl.sync` after a
data-dependent branch with a slow path for a diverged warp (a call to a WARPSYNC routine per shuffle:
first_exceed_f32_16, a loop that breaks on a running sum, takes 124 static instructions and 21 registers
with the slow paths on sm_80, 90 and 18 without; NVIDIA's tileiras keeps 20 such calls).
"""
from __future__ import annotations

from ...ir.core import Operation
from ..ir import KernelIR, own_ops, parents_of, walk_ops

SHUFFLING = frozenset({"reduce", "scan"})
LOOPS = frozenset({"for", "loop"})


def run(k: KernelIR) -> None:
    body = k.fn.body
    if not any(op.name in SHUFFLING for op in walk_ops(body)):
        return
    parents = parents_of(body)
    kernel_has_barrier = any(map(_barrier, walk_ops(body)))
    seen: dict[int, bool] = {}

    def shuffles(op: Operation) -> bool:
        """`op`'s regions run a shuffle that ptxas cannot tell is reached by a converged warp."""
        if id(op) not in seen:
            inner = [o for r in op.regions for b in r.blocks for o in walk_ops(b)]
            seen[id(op)] = any(o.name in SHUFFLING for o in inner) and not any(map(_barrier, inner))
        return seen[id(op)]

    for op in walk_ops(body):
        if op.name != "if":
            continue
        exits = {o.name for r in op.regions for b in r.blocks for o in own_ops(b)}
        loop = _enclosing_loop(op, parents)
        if (shuffles(op) or ({"break", "continue"} & exits and loop is not None and shuffles(loop))
                or ("return" in exits and not kernel_has_barrier)):
            op.attrs["warp_uniform"] = True


def _barrier(op: Operation) -> bool:
    return op.name == "tilegpu.barrier" or (op.name in SHUFFLING and bool(op.attrs.get("scratch_bytes")))


def _enclosing_loop(op: Operation, parents: dict[int, Operation]) -> Operation | None:
    p = parents.get(id(op))
    while p is not None and p.name not in LOOPS:
        p = parents.get(id(p))
    return p
