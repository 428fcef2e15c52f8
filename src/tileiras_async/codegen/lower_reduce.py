"""reduce and scan: operands go to shared memory; each thread folds the elements of the results it holds
with the op's combiner region, inlined in a counted loop."""
from __future__ import annotations

from ..ir import types as T
from ..ir.attrs import FloatAttr, IntegerAttr
from ..ir.core import Operation
from .emitter import KernelEmitter, LoweringError, lowers
from .llvmir import bits_literal
from ..tilegpu.types import layout_of
from .values import Tile, elem_bytes, llvm_type, SHARED_PTR


def identity_literal(attr, elem: T.Type) -> str:
    lt = llvm_type(elem)
    if isinstance(attr, IntegerAttr):
        width = elem.width if isinstance(elem, T.IntType) else 64
        v = attr.value & ((1 << width) - 1)
        if width == 1:
            return "true" if v else "false"
        return str(v - (1 << width) if v >> (width - 1) else v)
    if isinstance(attr, FloatAttr):
        if lt == "i8":
            return str(attr.bits)
        return bits_literal(attr.bits, lt)
    raise LoweringError(f"unsupported identity attribute {attr!r}")


def _stage_operands(em: KernelEmitter, tiles: list[Tile]) -> list[int]:
    """Write every operand to its own shared-memory array; returns their byte offsets."""
    em.barrier()
    bases, offset = [], 0
    for t in tiles:
        offset = (offset + 15) // 16 * 16
        bases.append(offset)
        em.store_to_shared(t, byte_base=offset)
        offset += t.type.num_elements() * elem_bytes(t.elem)
    em.barrier()
    return bases


def _combine(em: KernelEmitter, op: Operation, acc: list[str], xs: list[str], tiles: list[Tile],
             reverse_args: bool = False) -> list[str]:
    block = op.regions[0].block
    scalars = [T.TileType((), t.elem) for t in tiles]
    lhs = [Tile(s, None, [a]) for s, a in zip(scalars, acc)]
    rhs = [Tile(s, None, [x]) for s, x in zip(scalars, xs)]
    args = []
    for a, b in zip(lhs, rhs):  # block arguments interleave: lhs0, rhs0, lhs1, rhs1, ...
        args += [b, a] if reverse_args else [a, b]
    return [t.regs[0] for t in em.inline_region(block, args)]


def _load_elem(em: KernelEmitter, t: Tile, base: int, coords: list[str]) -> str:
    idx = em.linear_index(coords, t.type.shape)
    p = em.shared_slot(idx, t.elem, base)
    return em.b.value(f"load {t.llvm}, {SHARED_PTR} {p}", "rv")


def _insert_dim(coords: list[str], dim: int, k: str) -> list[str]:
    return coords[:dim] + [k] + coords[dim:]


@lowers("reduce")
def _reduce(em: KernelEmitter, op: Operation) -> None:
    tiles = [em.get(v) for v in op.operands["operands"]]
    dim = op.attrs["dim"]
    ids = op.attrs["identities"]
    res_ty: T.TileType = op.results[0].type
    layout = layout_of(res_ty)
    bases = _stage_operands(em, tiles)
    n = 1 if layout is None else layout.num_registers
    extent = tiles[0].type.shape[dim]
    out = [[None] * n for _ in tiles]
    init = [(t.llvm, identity_literal(a, t.elem)) for t, a in zip(tiles, ids)]
    coords_per_reg = [em.coords(layout, r) if layout else [] for r in range(n)]

    def body(k: str, carried: list[str]) -> list[str]:
        new = []
        for r in range(n):
            acc = carried[r * len(tiles):(r + 1) * len(tiles)]
            full = _insert_dim(coords_per_reg[r], dim, k)
            xs = [_load_elem(em, t, b, full) for t, b in zip(tiles, bases)]
            new += _combine(em, op, acc, xs, tiles)
        return new

    final = em.counted_loop("0", str(extent), init * n, body)
    for r in range(n):
        for i in range(len(tiles)):
            out[i][r] = final[r * len(tiles) + i]
    for res, regs in zip(op.results, out):
        em.set(res, Tile(res.type, layout, regs))


@lowers("scan")
def _scan(em: KernelEmitter, op: Operation) -> None:
    tiles = [em.get(v) for v in op.operands["operands"]]
    dim = op.attrs["dim"]
    reverse = op.attrs.get("reverse", False)
    ids = op.attrs["identities"]
    shape = tiles[0].type.shape
    layout = layout_of(op.results[0].type)
    bases = _stage_operands(em, tiles)
    extent = shape[dim]
    outs = [[] for _ in tiles]
    for r in range(layout.num_registers):
        coords = em.coords(layout, r)
        pos = coords[dim]
        init = [(t.llvm, identity_literal(a, t.elem)) for t, a in zip(tiles, ids)]

        def body(k: str, carried: list[str], coords=coords) -> list[str]:
            full = coords[:dim] + [k] + coords[dim + 1:]
            xs = [_load_elem(em, t, b, full) for t, b in zip(tiles, bases)]
            return _combine(em, op, carried, xs, tiles)

        if reverse:  # fold from the end down to this position: k = extent-1 .. pos
            start = str(extent - 1)
            stop = em.b.value(f"sub i32 {pos}, 1")
            vals = em.counted_loop(start, stop, init, body, step=-1)
        else:
            stop = em.b.value(f"add i32 {pos}, 1")
            vals = em.counted_loop("0", stop, init, body)
        for i, v in enumerate(vals):
            outs[i].append(v)
    for res, regs in zip(op.results, outs):
        em.set(res, Tile(res.type, layout, regs))
