"""Dead-code elimination on cuda_tile IR before code generation, including dead loop-carried values.

A value is live when something observable depends on it: a store, an atomic, a print, an assert, an
ordered (non-weak) load, the control flow that decides whether those run.  Values carried around a loop
are live only if their block argument or the loop's result is; a value that merely feeds itself from one
iteration to the next (an accumulator nobody reads) is dropped together with the work that computes it.
Weak loads are pure, so a load whose tile is never used disappears too.  What an op does (its effects,
whether it is a loop or a terminator and where it branches) comes from its definition (ir/cuda_tile.py).
"""
from __future__ import annotations

from ..ir.core import Block, Function, Module, Operation, Value


def _has_effect(op: Operation) -> bool:
    """Observable on its own: a declared write (memory or output) or an effect ordered with the others (a
    non-weak load).  Reads, allocations and ops that declare no effect go when nobody uses their results."""
    eff = op.spec.effects
    return eff is not None and (any(e.kind == "write" for e in eff.effects) or eff.is_ordered(op))


class _Liveness:
    def __init__(self, fn: Function):
        self.live: set[int] = set()          # id(Value)
        self.live_ops: set[int] = set()      # id(Operation) that must stay
        self.parent: dict[int, Operation] = {}    # id(op) -> enclosing region op
        self.owner_of_block: dict[int, Operation] = {}
        self._index(fn.body, None)
        self.changed = True

    def _index(self, block: Block, parent: Operation | None) -> None:
        work = [(block, parent)]   # explicit: the nesting depth is the input's
        while work:
            block, parent = work.pop()
            for op in block.ops:
                if parent is not None:
                    self.parent[id(op)] = parent
                for region in op.regions:
                    for b in region.blocks:
                        self.owner_of_block[id(b)] = op
                        work.append((b, op))

    def mark_value(self, v: Value | None) -> None:
        if v is not None and id(v) not in self.live:
            self.live.add(id(v))
            self.changed = True

    def mark_op(self, op: Operation | None) -> None:
        while op is not None and id(op) not in self.live_ops:
            self.live_ops.add(id(op))
            self.changed = True
            op = self.parent.get(id(op))  # the region op must run for this op to run

    def is_live(self, v: Value) -> bool:
        return id(v) in self.live


def _carried(loop: Operation) -> tuple[list[Value], list[Value], list[Value]]:
    """(init values, block arguments, results) of a loop, position by position."""
    ll = loop.spec.loop
    return ll.init_values(loop), ll.iter_args(loop), list(loop.results)


def _enclosing_loop(lv: _Liveness, op: Operation) -> Operation | None:
    p = lv.parent.get(id(op))
    while p is not None and not p.spec.is_loop:
        p = lv.parent.get(id(p))
    return p


def _step(lv: _Liveness, ops: list[Operation]) -> None:
    for op in ops:
        if op.spec.is_terminator:
            _terminator(lv, op)
            continue
        if _has_effect(op) or any(lv.is_live(r) for r in op.results):
            lv.mark_op(op)
        if id(op) not in lv.live_ops:
            continue
        if op.spec.is_loop:
            inits, args, results = _carried(op)
            for init, arg, res in zip(inits, args, results):
                if lv.is_live(arg) or lv.is_live(res):
                    lv.mark_value(init)
            for o in op.spec.operands:   # bounds and step: whatever is not a carried init
                if o.name != op.spec.loop.inits:
                    lv.mark_value(op.operands.get(o.name))
            continue
        for v in op.operand_values():  # any other live op needs all of its operands
            lv.mark_value(v)


def _terminator(lv: _Liveness, op: Operation) -> None:
    """A terminator matters once the region it leaves runs; its operands as far as their targets are live."""
    values = op.operands.get("operands") or []
    branch = op.spec.terminator.branch
    if branch == "function":
        lv.mark_op(op)
        for v in values:
            lv.mark_value(v)
        return
    if op.spec.terminator.targets_loop:
        loop = _enclosing_loop(lv, op)
        if loop is None or id(loop) not in lv.live_ops:
            return
        lv.mark_op(op)  # leaving the iteration early changes what runs: enclosing ifs must stay
        _, args, results = _carried(loop)
        for j, v in enumerate(values):
            needed = (j < len(results) and lv.is_live(results[j])) or \
                     (branch == "next_iteration" and j < len(args) and lv.is_live(args[j]))
            if needed:
                lv.mark_value(v)
        return
    owner = lv.parent.get(id(op))  # yield: of an if (result j) or of a combiner region (all of it)
    if owner is None or id(owner) not in lv.live_ops:
        return
    if owner.name == "if":
        for j, v in enumerate(values):
            if j < len(owner.results) and lv.is_live(owner.results[j]):
                lv.mark_value(v)
    else:
        for v in values:
            lv.mark_value(v)


def _prune_loop(loop: Operation, lv: _Liveness) -> None:
    """Drop carried positions whose block argument and result are both dead."""
    inits, args, results = _carried(loop)
    keep = [lv.is_live(a) or lv.is_live(r) for a, r in zip(args, results)]
    if all(keep):
        return
    ll = loop.spec.loop
    block = ll.body(loop)
    lead = block.args[:ll.induction_vars]
    loop.operands[ll.inits] = [v for v, k in zip(inits, keep) if k]
    block.args = lead + [a for a, k in zip(args, keep) if k]
    loop.results = [r for r, k in zip(results, keep) if k]
    for i, r in enumerate(loop.results):
        r.index = i
    for inner in loop.walk():
        t = inner.spec.terminator
        if t is not None and t.targets_loop and _enclosing_loop(lv, inner) is loop:
            vals = inner.operands.get("operands") or []
            inner.operands["operands"] = [v for v, k in zip(vals, keep) if k]


def _prune_if(op: Operation, lv: _Liveness) -> None:
    """Drop results of an if that nobody reads, with the values its branches yield for them."""
    keep = [lv.is_live(r) for r in op.results]
    if all(keep):
        return
    op.results = [r for r, k in zip(op.results, keep) if k]
    for i, r in enumerate(op.results):
        r.index = i
    for region in op.regions:
        for b in region.blocks:
            last = b.ops[-1] if b.ops else None
            if last is not None and last.name == "yield":
                vals = last.operands.get("operands") or []
                last.operands["operands"] = [v for v, k in zip(vals, keep) if k]


def _prune_block(block: Block, lv: _Liveness) -> None:
    work = [block]   # explicit: the nesting depth is the input's
    while work:
        block = work.pop()
        block.ops = [op for op in block.ops if id(op) in lv.live_ops or op.spec.is_terminator]
        for op in block.ops:
            if op.spec.is_loop:
                _prune_loop(op, lv)
            elif op.name == "if":
                _prune_if(op, lv)
            for region in op.regions:
                work.extend(region.blocks)


def eliminate_dead_code(fn: Function) -> None:
    """Remove what cannot affect memory, output or control flow (in place)."""
    lv = _Liveness(fn)
    # uses before definitions: one pass settles a straight-line chain; only loop-carried values and
    # region results need more passes (a forward walk would need one pass per op of a chain)
    ops = list(fn.walk())
    ops.reverse()
    while lv.changed:
        lv.changed = False
        _step(lv, ops)
    _prune_block(fn.body, lv)


def eliminate_dead_code_in_module(module: Module) -> None:
    for fn in module.functions:
        eliminate_dead_code(fn)
