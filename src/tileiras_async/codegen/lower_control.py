"""Structured control flow: for, loop, if and their terminators, as LLVM basic blocks with phis.

Conditions and loop bounds are rank-0 tiles, which every thread holds with the
same value, so all threads take the same path and barriers inside stay legal.
Values carried around loops and out of ifs keep one layout: assign-layouts made
every terminator pass its values in the layouts of the join they reach.  Only
tiles live in registers: a carried token (memory order is program order here)
or view is the same object on every edge and passes through without phis.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.core import Operation
from .emitter import KernelEmitter, LoweringError, lowers
from .values import Tile


@dataclass
class _Edges:
    """Values arriving at a join block: one (block label, tiles) per predecessor."""
    layouts: list
    incoming: list[tuple[str, list[Tile]]] = field(default_factory=list)

    def add(self, em: KernelEmitter, tiles: list) -> None:
        if self.layouts is None:  # the first arrival fixes the layouts
            self.layouts = [getattr(t, "layout", None) for t in tiles]
        if any(getattr(t, "layout", None) != lay for t, lay in zip(tiles, self.layouts)):
            raise LoweringError("internal: a value reaches a join in another layout than the join's")
        self.incoming.append((em.b.block_label, list(tiles)))

    def join(self, em: KernelEmitter, types) -> list[Tile]:
        """At the start of the join block: phis (or the single incoming value) per register."""
        if not self.incoming:
            return []
        if len(self.incoming) == 1:
            return self.incoming[0][1]
        out = []
        for i, ty in enumerate(types):
            first = self.incoming[0][1][i]
            if not isinstance(first, Tile):
                out.append(_same_on_every_edge(first, [tiles[i] for _, tiles in self.incoming]))
                continue
            dup = _copies(first)
            regs = []
            for r in range(len(first.regs)):
                if r & dup:
                    regs.append(regs[r & ~dup])
                    continue
                phi = em.b.phi(first.llvm)
                for label, tiles in self.incoming:
                    phi.add(tiles[i].regs[r], label)
                regs.append(phi.name)
            out.append(Tile(ty, first.layout, regs))
        return out


def _copies(t: Tile) -> int:
    """Register bits of t's layout that hold copies of another register's element: a join needs no phi for
    them (the copies are equal on every edge), and carrying them separately would make each iteration compute
    every copy again (the optimizer cannot see through a loop that the phis of copies stay equal)."""
    return 0 if t.layout is None else t.layout.duplicate_register_mask()


@dataclass
class _LoopCtx:
    next_iter: _Edges    # continue
    exit: _Edges         # break (and, for `for`, the normal exit)
    continue_label: str
    exit_label: str


@dataclass
class _IfCtx:
    merge: _Edges
    merge_label: str


def _same_on_every_edge(first, values: list):
    """A non-tile value (token, view) reaching a join: it has no registers, so every edge must bring
    the same one."""
    if any(v is not first for v in values):
        raise LoweringError(f"cannot join different {type(first).__name__} values at a control-flow merge")
    return first


def _carried_phis(em: KernelEmitter, inits: list, pre: str) -> list[tuple[list, object]]:
    out = []
    for t in inits:
        if not isinstance(t, Tile):  # tokens and views: no registers, no phis
            out.append(([], t))
            continue
        dup = _copies(t)
        phis, regs = [], []
        for r, reg in enumerate(t.regs):
            if r & dup:
                regs.append(regs[r & ~dup])
                continue
            p = em.b.phi(t.llvm)
            p.add(reg, pre)
            phis.append(p)
            regs.append(p.name)
        out.append((phis, Tile(t.type, t.layout, regs)))
    return out


def _close_back_edge(carried, next_values: list, label: str) -> None:
    for (phis, init), t in zip(carried, next_values):
        if not isinstance(init, Tile):
            _same_on_every_edge(init, [t])
            continue
        dup = _copies(t)
        for p, reg in zip(phis, [reg for r, reg in enumerate(t.regs) if not r & dup]):
            p.add(reg, label)


@lowers("for")
def _for(em: KernelEmitter, op: Operation) -> None:
    lb, ub, step = (em.get(op.operands[n]) for n in ("lowerBound", "upperBound", "step"))
    inits = [em.get(v) for v in op.operands["initValues"]]
    it = lb.llvm
    after = _one_warp_enter(em) if op.attrs.get("one_warp") else None
    pre = em.b.block_label
    header, body, latch, exit_ = (em.b.reserve_block(h) for h in ("for.head", "for.body", "for.next", "for.exit"))
    em.b.br(header)
    em.b.start_block(header)
    iv = em.b.phi(it, "iv")
    iv.add(lb.regs[0], pre)
    carried = _carried_phis(em, inits, pre)
    cmp = "ult" if op.attrs.get("unsignedCmp") else "slt"
    cond = em.b.value(f"icmp {cmp} {it} {iv.name}, {ub.regs[0]}")
    layouts = [getattr(t, "layout", None) for t in inits]
    ctx = _LoopCtx(_Edges(layouts), _Edges(list(layouts)), latch, exit_)
    ctx.exit.incoming.append((header, [t for _, t in carried]))
    em.b.cond_br(cond, body, exit_)
    em.b.start_block(body)
    block = op.regions[0].block
    em.set(block.args[0], Tile(block.args[0].type, None, [iv.name]))
    for arg, (_, t) in zip(block.args[1:], carried):
        em.set(arg, t)
    em.loops.append(ctx)
    em.emit_block(block)
    em.loops.pop()
    em.b.start_block(latch)
    nxt = ctx.next_iter.join(em, [a.type for a in block.args[1:]])
    new_iv = em.b.value(f"add {it} {iv.name}, {step.regs[0]}", "ivn")
    iv.add(new_iv, latch)
    _close_back_edge(carried, nxt, latch)
    if op.attrs.get("unroll") is False:     # the IR's decision (e.g. a rolled pipeline prologue)
        em.b.emit(f"br label %{header}, !llvm.loop {em.module_ir.no_unroll_loop()}")
    else:
        em.b.br(header)
    em.b.start_block(exit_)
    if after is not None:       # nothing reads the results (the pass's condition): none to merge
        em.b.br(after)
        em.b.start_block(after)
    else:
        for res, t in zip(op.results, ctx.exit.join(em, [r.type for r in op.results])):
            em.set(res, t)
    if op.attrs.get("recompute_thread_coords"):   # select-access-forms decided
        em.recompute_thread_coords()


def _one_warp_enter(em: KernelEmitter) -> str:
    """Warp 0 goes on into the loop (keep-accumulators-in-tensor-memory decided `one_warp`), the other warps
    branch to the returned block after it."""
    run, after = em.b.reserve_block("for.warp"), em.b.reserve_block("for.after")
    em.b.cond_br(em.b.value(f"icmp eq i32 {em.warp}, 0"), run, after)
    em.b.start_block(run)
    return after


@lowers("loop")
def _loop(em: KernelEmitter, op: Operation) -> None:
    inits = [em.get(v) for v in op.operands["initValues"]]
    pre = em.b.block_label
    header, latch, exit_ = (em.b.reserve_block(h) for h in ("loop.head", "loop.next", "loop.exit"))
    em.b.br(header)
    em.b.start_block(header)
    carried = _carried_phis(em, inits, pre)
    block = op.regions[0].block
    for arg, (_, t) in zip(block.args, carried):
        em.set(arg, t)
    ctx = _LoopCtx(_Edges([getattr(t, "layout", None) for t in inits]), _Edges(None), latch, exit_)
    em.loops.append(ctx)
    em.emit_block(block)
    em.loops.pop()
    if ctx.next_iter.incoming:
        em.b.start_block(latch)
        _close_back_edge(carried, ctx.next_iter.join(em, [a.type for a in block.args]), latch)
        em.b.br(header)
    em.b.start_block(exit_)
    if not ctx.exit.incoming:
        em.b.emit("unreachable")  # a loop without break never exits
        em.b.new_block("after")
    for res, t in zip(op.results, ctx.exit.join(em, [r.type for r in op.results])):
        em.set(res, t)
    if op.attrs.get("recompute_thread_coords"):   # select-access-forms decided
        em.recompute_thread_coords()


@lowers("if")
def _if(em: KernelEmitter, op: Operation) -> None:
    cond = em.get(op.operands["condition"]).regs[0]
    if op.attrs.get("warp_uniform"):
        cond = em.b.call("i1", "llvm.nvvm.vote.any.sync", [("i32", "-1"), ("i1", cond)], hint="uniform")
    then_l, else_l, merge_l = (em.b.reserve_block(h) for h in ("if.then", "if.else", "if.end"))
    has_else = bool(op.regions[1].blocks) if len(op.regions) > 1 else False
    em.b.cond_br(cond, then_l, else_l if has_else else merge_l)
    ctx = _IfCtx(_Edges(None), merge_l)
    if not has_else:
        ctx.merge.incoming.append((em.b.block_label, []))
    em.if_merges.append(ctx)
    em.b.start_block(then_l)
    em.emit_block(op.regions[0].block)
    if has_else:
        em.b.start_block(else_l)
        em.emit_block(op.regions[1].block)
    em.if_merges.pop()
    em.b.start_block(merge_l)
    if not ctx.merge.incoming:
        em.b.emit("unreachable")  # both branches left the enclosing loop
        em.b.new_block("after")
        return
    if op.results:
        joined = ctx.merge.join(em, [r.type for r in op.results])
        for res, t in zip(op.results, joined):
            em.set(res, t)


@lowers("yield")
def _yield(em: KernelEmitter, op: Operation) -> None:
    if em.inline_yields and em.inline_depth_marks[-1] == len(em.if_merges):
        em.inline_yields[-1].append([em.get(v) for v in op.operands["operands"]])
        return
    if not em.if_merges:
        raise LoweringError("yield outside of an if region")
    ctx = em.if_merges[-1]
    ctx.merge.add(em, [em.get(v) for v in op.operands["operands"]])
    em.b.br(ctx.merge_label)


@lowers("continue")
def _continue(em: KernelEmitter, op: Operation) -> None:
    ctx = em.loops[-1]
    ctx.next_iter.add(em, [em.get(v) for v in op.operands["operands"]])
    em.b.br(ctx.continue_label)


@lowers("break")
def _break(em: KernelEmitter, op: Operation) -> None:
    ctx = em.loops[-1]
    ctx.exit.add(em, [em.get(v) for v in op.operands["operands"]])
    em.b.br(ctx.exit_label)


@lowers("return")
def _return(em: KernelEmitter, op: Operation) -> None:
    em.b.emit("ret void")
