"""Walking and editing the tile-GPU IR (the cuda_tile object model: Operation, Block, Region, Value).

Everything here is iterative: the input's nesting depth is not bounded by the Python stack.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from ..ir.core import Block, Function, Module, Operation, Region, Value


def constant_bytes(v: Value) -> bytes | None:
    """The dense bytes of `v` where a `constant` op makes it, else None."""
    owner = v.owner
    return owner.attrs["value"].raw if isinstance(owner, Operation) and owner.name == "constant" else None


def zero_constant(v: Value) -> bool:
    """Whether `v` is a constant tile of zero bits (+0.0, 0)."""
    raw = constant_bytes(v)
    return raw is not None and not any(raw)


def walk_ops(block: Block) -> Iterator[Operation]:
    """Every op under `block`, pre-order (an op before the ops of its regions), program order."""
    return block.walk()   # iterative (ir.core)


def walk_blocks(block: Block) -> Iterator[Block]:
    """`block` and every block nested in it, pre-order."""
    stack = [block]
    while stack:
        b = stack.pop()
        yield b
        for op in reversed(b.ops):
            for region in reversed(op.regions):
                stack.extend(reversed(region.blocks))


def clone_function(fn: Function) -> Function:
    """A private copy of a function's IR (ops, blocks, values; attribute values are shared, they are never
    mutated), made without recursion and without copying the rest of the module."""
    vmap: dict[int, Value] = {}
    body = Block([a.type for a in fn.body.args])
    vmap.update((id(old), new) for old, new in zip(fn.body.args, body.args))
    body.ops = [clone_op(op, vmap) for op in fn.body.ops]
    return replace(fn, body=body)


def clone_op(op: Operation, vmap: dict[int, Value]) -> Operation:
    """A copy of `op` and everything nested in it, reading its operands through `vmap` (id of an old value ->
    the new one); the copies' results and block arguments are added to `vmap`.  Iterative."""
    def mapped(v):
        if isinstance(v, Value):
            return vmap.get(id(v), v)
        if isinstance(v, list):
            return [vmap.get(id(x), x) for x in v]
        return v

    stack: list[tuple[Block, Block]] = []

    def copy(o: Operation) -> Operation:
        regions = []
        for r in o.regions:
            blocks = []
            for b in r.blocks:
                nb = Block([a.type for a in b.args])
                vmap.update((id(x), y) for x, y in zip(b.args, nb.args))
                blocks.append(nb)
                stack.append((b, nb))
            regions.append(Region(blocks))
        new = Operation(o.spec, {k: mapped(v) for k, v in o.operands.items()}, dict(o.attrs),
                        [r.type for r in o.results], regions, o.loc)
        vmap.update((id(x), y) for x, y in zip(o.results, new.results))
        return new

    top = copy(op)
    while stack:
        src, dst = stack.pop()
        dst.ops = [copy(o) for o in src.ops]
    return top


def parent_blocks(body: Block) -> dict[int, Block]:
    """id(op) -> the block that holds it, for every op under `body`."""
    return {id(o): b for b in walk_blocks(body) for o in b.ops}


def parents(fn: Function) -> dict[int, Operation]:
    """id(op) -> the region op it is nested in (absent at the top level)."""
    return parents_of(fn.body)


def parents_of(body: Block) -> dict[int, Operation]:
    out: dict[int, Operation] = {}
    for b in walk_blocks(body):
        for op in b.ops:
            for region in op.regions:
                for inner in region.blocks:
                    for o in inner.ops:
                        out[id(o)] = op
    return out


def insert_before(block: Block, anchor: Operation, new: list[Operation]) -> None:
    i = next(k for k, o in enumerate(block.ops) if o is anchor)
    block.ops[i:i] = new


def replace_values(block: Block, mapping: dict[int, Value]) -> None:
    """Every operand use under `block` of a value whose id is in `mapping` reads the mapped value instead
    (one walk for any number of replacements)."""
    if not mapping:
        return
    for op in walk_ops(block):
        for name, v in op.operands.items():
            if isinstance(v, Value):
                if id(v) in mapping:
                    op.operands[name] = mapping[id(v)]
            elif isinstance(v, list) and any(id(x) in mapping for x in v):
                op.operands[name] = [mapping.get(id(x), x) for x in v]


@dataclass
class KernelIR:
    """One kernel on its way through the passes: the module (locations, globals), the function being
    rewritten (a private copy) and the remarks the passes make (what they decide is on the IR: decisions.py)."""
    module: Module
    fn: Function
    options: object                      # CompileSettings
    remarks: list = field(default_factory=list)
    source: str = ""                            # the input's path (named in schedule reports)

    @property
    def name(self) -> str:
        return self.fn.name.decode(errors="replace")

    def remark(self, kind: str, category: str, name: str, message: str, op: Operation | None = None) -> None:
        """Record an optimization remark (passed | missed | failed | analysis) at `op`'s source location."""
        from ..ir.diagnostics import resolve_loc
        from ..remarks import Remark
        loc = resolve_loc(self.module, op.loc) if op is not None and self.module is not None else None
        self.remarks.append(Remark(kind, category, name, self.name, message, loc.file if loc else "",
                                   loc.line if loc else 0, loc.col if loc else 0))


def single_op_combiner(op: Operation) -> Operation | None:
    """The op of a one-operand reduce/scan whose combiner is that one op of its two arguments, yielded (the
    combiners that a shuffle step, a `redux.sync` or a shared total can stand for), else None."""
    if len(op.operands["operands"]) != 1 or len(op.results) != 1:
        return None
    block = op.regions[0].blocks[0]
    if len(block.ops) != 2 or block.ops[1].name != "yield":
        return None
    inner, y = block.ops
    if (len(inner.results) != 1 or {id(v) for v in inner.operand_values()} != {id(a) for a in block.args}
            or [id(v) for v in y.operand_values()] != [id(inner.results[0])]):
        return None
    return inner


def own_ops(block: Block):
    """The ops of a loop body, including those nested in `if`s, but not those of nested loops."""
    for op in block.ops:
        yield op
        if op.name not in ("for", "loop"):
            for region in op.regions:
                for b in region.blocks:
                    yield from own_ops(b)
