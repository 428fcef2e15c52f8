"""prefetch-loads: a serial loop's tile loads are issued two iterations ahead, into registers the loop carries.

Contract: in: IR after pipeline (K-loops already expanded). out: in every other `for` loop, each load that may
move -- a weak `load_view_tko` at the top level of the body, through a view made outside the loop, whose
token comes from outside the loop and whose result token is unused, at tile indices computed from the
induction variable and loop invariants alone (`pipeline._slice`) -- is issued two iterations ahead: two
copies before the loop (iterations 0 and 1), one in the body for iteration i + 2, its tile carried through two
new loop-carried values (the body reads the oldest). Its token says no in-loop memory operation is ordered
before it, so moving it earlier keeps the program's meaning; a prefetch past the last iteration reads nothing
(every element is out of bounds: the bounds check masks it). A remark says which loops were changed.

Only loops whose loads hold at most PREFETCH_REGS registers per thread for both iterations in flight are
changed -- one to three elements per thread per iteration, the latency-bound case: on an H200 the
one-load-per-thread scan_carry_i64 went from 7.3 to 4.9 us, as NVIDIA's tileiras keeps such loads in flight
too. Loops with more loads per thread are left alone: those loads already overlap one another, and holding
two more iterations of them costs registers and a prologue (reduce2d_rows_f16_16x128, 32 registers of loads
per iteration, ran 5% slower prefetched on an H200; reduce2d_rows_f32_8x64, 8 registers, took 64 registers
instead of 48 and 282 static instructions instead of 165, and cumsum_carry_f32_t512, 4 registers, 63
instead of 55). Loops that run an mma are left alone too: accumulators and operand staging already hold
most registers (prefetching K and V cost the 1024-token flash attention 8% on an H200: 146 -> 178
registers, 3 -> 2 CTAs per SM).
"""
from __future__ import annotations

from ...ir.core import Operation, Value
from ...ir.enums import MemoryOrderingSemantics as MO
from .. import scalars
from ..ir import KernelIR, clone_op, own_ops, parent_blocks, replace_values, walk_ops
from ..software_pipeline import index_slice, use_counts
from ..types import elem_bytes, layout_of

PREFETCH_REGS = 6       # registers per thread the loads of both iterations ahead may hold
DISTANCE = 2
_MMA = frozenset({"mmaf", "mmai", "mmaf_scaled", "tilegpu.mma_staged"})


def run(k: KernelIR) -> None:
    loops = [op for op in walk_ops(k.fn.body) if op.name == "for" and not op.attrs.get("pipelined")]
    for loop in reversed(loops):          # inner loops first: an outer loop's body is final when it is done
        loads, slices = movable_loads(loop)
        regs = sum(_registers(ld) for ld in loads)
        if not loads or DISTANCE * regs > PREFETCH_REGS:
            continue
        _prefetch(k, loop, loads, slices, DISTANCE)
        k.remark("passed", "pipelining", "LoadsPrefetched",
                 f"loop loads issued {DISTANCE} iterations ahead ({len(loads)} tile load(s), "
                 f"{regs * DISTANCE} register(s) per thread in flight)", loop)


def movable_loads(loop: Operation) -> tuple[list[Operation], list[Operation]]:
    """The loads of the loop body that may be issued earlier, and the body ops computing their indices."""
    body = loop.regions[0].block
    if any(o.name in ("continue", "break", "return") and o is not body.ops[-1] for o in own_ops(body)):
        return [], []
    if any(o.name in _MMA for o in body.walk()):
        return [], []
    top = {id(o) for o in body.ops}
    inside = {id(o) for o in body.walk()}
    uses = use_counts(body)
    loads, slices = [], {}
    for op in body.ops:
        if op.name != "load_view_tko" or op.attrs.get("memory_ordering_semantics", MO.weak) != MO.weak:
            continue
        view, token = op.operands["view"], op.operands.get("token")
        if any(isinstance(v, Value) and (id(v.owner) in inside or v.owner is body) for v in (view, token)):
            continue    # made in the loop (or carried by it): not the same in every iteration
        if len(op.results) > 1 and uses.get(id(op.results[1]), 0):
            continue
        if layout_of(op.results[0].type) is None:
            continue
        if any(op.attrs.get("inbounds") or ()):   # promised in bounds: a prefetch past the end must stay masked
            continue
        mine: dict[int, Operation] = {}
        if all(index_slice(i, body, top, mine) for i in op.operands["index"]):
            slices.update(mine)
            loads.append(op)
    return loads, [o for o in body.ops if id(o) in slices]


def _registers(load: Operation) -> int:
    ty = load.results[0].type
    return layout_of(ty).num_registers * max(1, elem_bytes(ty.elem) // 4)


def _prefetch(k: KernelIR, loop: Operation, loads: list[Operation], slices: list[Operation], distance: int) -> None:
    body = loop.regions[0].block
    lb, step = loop.operands["lowerBound"], loop.operands["step"]
    iv = body.args[0]
    parent = parent_blocks(k.fn.body)[id(loop)]
    at = next(i for i, o in enumerate(parent.ops) if o is loop)
    before: list[Operation] = []
    ahead = [_issue(before, loads, slices, iv, lb, step, d, loop.loc) for d in range(distance)]
    parent.ops[at:at] = before
    # the body: the loads for iteration i + distance first, the carried tiles in place of the loads
    top: list[Operation] = []
    nxt = _issue(top, loads, slices, iv, iv, step, distance, loop.loc)
    carried = []
    for j, ld in enumerate(loads):
        ty = ld.results[0].type
        args = []
        for d in range(distance):
            a = Value(ty, body, len(body.args))
            body.args.append(a)
            args.append(a)
            loop.operands["initValues"] = list(loop.operands["initValues"]) + [ahead[d][j]]
            loop.results.append(Value(ty, loop, len(loop.results)))
        carried.append(args)
    gone = {id(ld) for ld in loads}
    body.ops = top + [o for o in body.ops if id(o) not in gone]
    replace_values(body, {id(ld.results[0]): args[0] for ld, args in zip(loads, carried)})
    term = body.ops[-1]
    term.operands["operands"] = list(term.operands["operands"]) + [
        v for args, new in zip(carried, nxt) for v in args[1:] + [new]]


def _issue(out: list, loads: list[Operation], slices: list[Operation], iv: Value, base: Value, step: Value,
           d: int, loc) -> list[Value]:
    """Copies of the index ops and the loads for iteration base + d * step (appended to `out`); the tiles."""
    vmap = {id(iv): scalars.iteration(out, base, step, d, loc)}
    out += [clone_op(o, vmap) for o in slices]
    copies = [clone_op(ld, vmap) for ld in loads]
    out += copies
    return [c.results[0] for c in copies]
