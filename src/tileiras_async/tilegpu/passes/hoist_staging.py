"""hoist-operand-staging: an mma operand that a loop does not change is staged once, before the loop.

Contract: in: IR after pipeline (scratch sizes known, no offsets yet). out: an `mmaf`/`mmai` lowered to
mma.sync in one K chunk, inside a loop, whose A (else B) operand is defined outside its innermost loop,
becomes `tilegpu.mma_prestaged` reading that operand from a buffer that one `tilegpu.stage_operand` right
after the operand's definition filled, laid out as the mma's own staging would. Several mmas staging the
same value the same way share the buffer (an attention kernel's Q, used by its masked and unmasked loops).
The mma still stages its other operand and waits at its own barrier before reading, so that barrier also
publishes the hoisted writes: no barrier is added, and the loop no longer holds the operand in registers
nor stores it every iteration (the attention kernels: 16 fewer shared-memory stores per iteration).
Not hoisted: wgmma/tcgen05 (they stage asynchronously), the FMA chain, K split into chunks (each chunk
reuses the staging bytes), mmas whose operands are both invariant (nothing would be left to publish them).
"""
from __future__ import annotations

from ...ir.core import Block, Operation, Value
from ..ir import KernelIR, parent_blocks, parents_of, replace_values, walk_blocks, walk_ops
from ..analysis.mma import MmaPlan, recorded_plan
from ..ops import LOCAL_ALLOC, MMA_PRESTAGED, STAGE_OPERAND
from ..types import SmemType

_MMA = ("mmaf", "mmai")
_LOOPS = ("for", "loop")
_ROLES = (("a", "lhs", "rhs"), ("b", "rhs", "lhs"))


def staged_bytes(plan: MmaPlan, role: str) -> int:
    """Bytes of `role`'s region of the plan's staging (A rows first, then B rows: tilegpu/analysis/mma.py)."""
    return plan.b_stage.base - plan.a_stage.base if role == "a" else plan.trash - plan.b_stage.base


def _signature(plan: MmaPlan, role: str) -> tuple:
    st = plan.a_stage if role == "a" else plan.b_stage
    return role, plan.instr, st.strides, st.kdim, st.kc, staged_bytes(plan, role)


def run(k: KernelIR) -> None:
    where = parent_blocks(k.fn.body)
    parent = parents_of(k.fn.body)
    loop_blocks: dict[int, set[int]] = {}     # id(loop) -> ids of the blocks at any depth inside it
    buffers: dict[tuple, Value] = {}          # (id(value), staging signature) -> the buffer staging it
    after: dict[int, list[Operation]] = {}    # id(op or block) -> ops to place after it (a block: at its start)
    mapping: dict[int, Value] = {}
    for op in list(walk_ops(k.fn.body)):
        loop = _innermost_loop(op, parent)
        if op.name not in _MMA or "scratch_bytes" not in op.attrs or loop is None:
            continue
        plan = recorded_plan(op)
        if type(plan) is not MmaPlan or len(plan.chunks()) != 1:
            continue
        inside = loop_blocks.get(id(loop))
        if inside is None:
            inside = loop_blocks[id(loop)] = {id(b) for r in loop.regions for b0 in r.blocks
                                              for b in walk_blocks(b0)}
        invariant = [r for r in _ROLES if not _defined_in(op.operands[r[1]], inside, where)]
        if len(invariant) != 1:
            continue
        role, name, other = invariant[0]
        value = op.operands[name]
        key = (id(value), _signature(plan, role))
        buf = buffers.get(key)
        if buf is None:
            alloc = Operation(LOCAL_ALLOC, {}, {}, [SmemType(staged_bytes(plan, role))], loc=op.loc)
            stage = Operation(STAGE_OPERAND, {"value": value, "buffer": alloc.result},
                              {"mma": op, "role": role}, loc=op.loc)
            after.setdefault(id(value.owner), []).extend([alloc, stage])
            buf = buffers[key] = alloc.result
        new = Operation(MMA_PRESTAGED, {"other": op.operands[other], "acc": op.operands["acc"], "buffer": buf},
                        {"mma": op, "role": role, "scratch_bytes": op.attrs["scratch_bytes"]},
                        [op.result.type], loc=op.loc)
        block = where[id(op)]
        block.ops[block.ops.index(op)] = new
        mapping[id(op.result)] = new.result
        k.remark("passed", "mma", "OperandStagingHoisted",
                 f"mma operand {role.upper()} staged once before the loop, not in every iteration", op)
    replace_values(k.fn.body, mapping)
    for b in walk_blocks(k.fn.body):
        out = list(after.pop(id(b), ()))
        for o in b.ops:
            out.append(o)
            out.extend(after.pop(id(o), ()))
        b.ops = out


def _innermost_loop(op: Operation, parent: dict[int, Operation]) -> Operation | None:
    p = parent.get(id(op))
    while p is not None and p.name not in _LOOPS:
        p = parent.get(id(p))
    return p


def _defined_in(v: Value, blocks: set[int], where: dict[int, Block]) -> bool:
    """Whether `v` (an op's result or a block argument) is defined in one of `blocks`."""
    owner = v.owner
    block = where.get(id(owner)) if isinstance(owner, Operation) else owner
    return id(block) in blocks
