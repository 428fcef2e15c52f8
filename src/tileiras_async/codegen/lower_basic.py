"""Lowerings of grid queries, tokens, hints, constants and iota."""
from __future__ import annotations

from ..ir import types as T
from ..ir.core import Operation
from .emitter import KernelEmitter, LoweringError, lowers
from .llvmir import bits_literal
from ..tilegpu.analysis.smem import is_uniform
from ..tilegpu.types import is_splat, layout_of
from .values import TOKEN, Tile, llvm_type


def _sreg(em: KernelEmitter, name: str) -> str:
    return em.b.call("i32", f"llvm.nvvm.read.ptx.sreg.{name}", [], hint=name.replace(".", "_"))


@lowers("get_tile_block_id")
def _block_id(em: KernelEmitter, op: Operation) -> None:
    for axis, res in zip("xyz", op.results):
        em.set(res, Tile(res.type, None, [_sreg(em, f"ctaid.{axis}")]))


@lowers("get_num_tile_blocks")
def _num_blocks(em: KernelEmitter, op: Operation) -> None:
    for axis, res in zip("xyz", op.results):
        em.set(res, Tile(res.type, None, [_sreg(em, f"nctaid.{axis}")]))


@lowers("make_token", "join_tokens")
def _token(em: KernelEmitter, op: Operation) -> None:
    # memory ops are emitted in program order, which already respects every token edge
    em.set(op.result, TOKEN)


@lowers("tilegpu.convert_layout")
def _convert_layout(em: KernelEmitter, op: Operation) -> None:
    src = op.operands["source"]
    t = em.convert(em.get(src), layout_of(op.result.type), uniform=is_uniform(src))
    em.set(op.result, Tile(op.result.type, t.layout, t.regs))


@lowers("assume")
def _assume(em: KernelEmitter, op: Operation) -> None:
    # facts (div_by, bounded, same_elements) refine code generation later; the value is unchanged
    em.set(op.result, em.get(op.operands["value"]))


def element_literal(elem: T.Type, raw: bytes) -> str:
    """One element of a dense buffer as an LLVM constant."""
    if isinstance(elem, T.IntType):
        if elem.width == 1:
            return "true" if raw[0] else "false"
        return str(int.from_bytes(raw, "little", signed=True))
    lt = llvm_type(elem)
    if lt == "i8":
        return str(int.from_bytes(raw, "little", signed=True))
    if elem == T.TF32:  # 19 significant bits stored in 3 bytes, the low mantissa bits are zero
        bits = int.from_bytes(raw, "little") << 13
        return bits_literal(bits, "float")
    return bits_literal(int.from_bytes(raw, "little"), lt)


def dense_elements(elem: T.Type, raw: bytes, count: int) -> list[bytes]:
    """Split a dense buffer into per-element byte strings (one entry if it is a splat)."""
    if is_splat(raw, elem):
        return [raw]
    if isinstance(elem, T.IntType) and elem.width == 1:
        bits = [raw[i // 8] >> (i % 8) & 1 for i in range(min(count, 8 * len(raw)))]  # LSB first
        return [b"\xff" if b else b"\x00" for b in bits]
    size = 3 if elem == T.TF32 else max(1, elem.width // 8)
    if len(raw) != size * count:
        raise LoweringError(f"constant has {len(raw)} bytes, expected {size} or {size * count}")
    return [raw[i * size:(i + 1) * size] for i in range(count)]


@lowers("constant")
def _constant(em: KernelEmitter, op: Operation) -> None:
    ty: T.TileType = op.result.type
    dense = op.attrs["value"]
    parts = dense_elements(ty.elem, dense.raw, ty.num_elements())
    if not ty.shape:
        em.set(op.result, Tile(ty, None, [element_literal(ty.elem, parts[0])]))
        return
    layout = layout_of(ty)
    if len(parts) == 1:
        em.set(op.result, Tile(ty, layout, [element_literal(ty.elem, parts[0])] * layout.num_registers))
        return
    # a non-splat constant: each register reads its element from a constant table by linear index
    lt = llvm_type(ty.elem)
    name = em.unique_global("const")
    values = ", ".join(f"{lt} {element_literal(ty.elem, p)}" for p in parts)
    em.module_ir.add_global(f"{name} = internal addrspace(1) constant [{len(parts)} x {lt}] [{values}], align 16")
    regs = []
    for r in range(layout.num_registers):
        idx = em.linear_index(em.coords(layout, r), ty.shape)
        p = em.b.value(f"getelementptr {lt}, ptr addrspace(1) {name}, i32 {idx}", "cp")
        regs.append(em.b.value(f"load {lt}, ptr addrspace(1) {p}", "cv"))
    em.set(op.result, Tile(ty, layout, regs))


@lowers("iota")
def _iota(em: KernelEmitter, op: Operation) -> None:
    ty: T.TileType = op.result.type
    layout = layout_of(ty)
    lt = llvm_type(ty.elem)
    regs = []
    for r in range(layout.num_registers):
        (c,) = em.coords(layout, r)
        regs.append(em.b.value(f"trunc i32 {c} to {lt}") if lt in ("i8", "i16") else
                    em.b.value(f"zext i32 {c} to {lt}") if lt == "i64" else c)
    em.set(op.result, Tile(ty, layout, regs))
