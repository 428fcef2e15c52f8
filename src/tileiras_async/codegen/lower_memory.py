"""Views and memory: tensor/partition views become base+shape+stride arithmetic; loads and stores are
predicated PTX (bounds checks, masks, padding) emitted as inline assembly, one element per register."""
from __future__ import annotations

import struct
from typing import Callable

from ..ir import types as T
from ..ir.attrs import BoundedAttr
from ..ir.core import Operation
from ..ir.enums import MemoryOrderingSemantics as MO, MemoryScope, PaddingValue
from .emitter import KernelEmitter, LoweringError, lowers
from .llvmir import bits_literal
from .lower_tensor_copy import tensor_store
from ..tilegpu.types import layout_of
from .values import GLOBAL_PTR, PartitionView, TOKEN, TensorView, Tile, elem_bytes, llvm_type

_SCOPE = {MemoryScope.tl_blk: ".cta", MemoryScope.device: ".gpu", MemoryScope.sys: ".sys"}
# access width in bits -> (PTX register class constraint, register LLVM type)
_REG = {8: ("h", "i16"), 16: ("h", "i16"), 32: ("r", "i32"), 64: ("l", "i64")}


def _i64(em: KernelEmitter, value: str, llvm: str) -> str:
    if llvm == "i64":
        return value
    return em.b.value(f"sext {llvm} {value} to i64")


def _u64(em: KernelEmitter, value: str, llvm: str) -> str:
    if llvm == "i64":
        return value
    return em.b.value(f"zext {llvm} {value} to i64")


def _non_negative(v) -> bool:
    """`v` is the result of an `assume` chain that bounds it below by zero or more."""
    while isinstance(getattr(v, "owner", None), Operation) and v.owner.name == "assume":
        pred = v.owner.attrs.get("predicate")
        if isinstance(pred, BoundedAttr) and pred.lb is not None and pred.lb >= 0:
            return True
        v = v.owner.operands["value"]
    return False


@lowers("make_tensor_view")
def _make_tensor_view(em: KernelEmitter, op: Operation) -> None:
    ty: T.TensorViewType = op.result.type
    base = em.get(op.operands["base"]).regs[0]
    dyn_shape = iter(op.operands["dynamicShape"])
    dyn_strides = iter(op.operands["dynamicStrides"])

    def resolve(static, dyn):
        out = []
        for s in static:
            if s == T.DYNAMIC:
                v = next(dyn)
                t = em.get(v)
                # a size or stride assumed non-negative widens with zeros: the upper half of every 64-bit
                # bound and address product is then a known zero, not a sign to compute per element
                out.append(_u64(em, t.regs[0], t.llvm) if _non_negative(v) else _i64(em, t.regs[0], t.llvm))
            else:
                out.append(str(s))
        return out

    em.set(op.result, TensorView(ty, base, resolve(ty.shape, dyn_shape), resolve(ty.strides, dyn_strides)))


@lowers("make_partition_view")
def _make_partition_view(em: KernelEmitter, op: Operation) -> None:
    em.set(op.result, PartitionView(op.result.type, em.get(op.operands["tensor_view"])))


def _index_space(em: KernelEmitter, pv: PartitionView) -> list[str]:
    out = []
    for i, t in enumerate(pv.type.tile_shape):
        dim = pv.view.shape[pv.type.dim_map[i]]
        s = em.b.value(f"add i64 {dim}, {t - 1}")
        out.append(em.b.value(f"sdiv i64 {s}, {t}"))
    return out


def _set_scalars(em: KernelEmitter, op: Operation, values: list[str]) -> None:
    for res, v in zip(op.results, values):
        lt = llvm_type(res.type)
        em.set(res, Tile(res.type, None, [v if lt == "i64" else em.b.value(f"trunc i64 {v} to {lt}")]))


@lowers("get_index_space_shape")
def _get_index_space_shape(em: KernelEmitter, op: Operation) -> None:
    _set_scalars(em, op, _index_space(em, em.get(op.operands["src"])))


@lowers("get_tensor_shape")
def _get_tensor_shape(em: KernelEmitter, op: Operation) -> None:
    src = em.get(op.operands["src"])
    view = src if isinstance(src, TensorView) else src.view  # a partition or gather/scatter view
    _set_scalars(em, op, list(view.shape))


def padding_constant(elem: T.Type, padding: int | None) -> str:
    """The value a masked-off element reads as (zero when the view has no padding)."""
    lt = llvm_type(elem)
    if padding in (None, PaddingValue.zero) or not isinstance(elem, T.FloatType) or lt == "i8":
        return "null" if "ptr" in lt else ("false" if lt == "i1" else ("0" if lt.startswith("i") else
                                                                        bits_literal(0, lt)))
    value = {PaddingValue.neg_zero: -0.0, PaddingValue.nan: float("nan"),
             PaddingValue.pos_inf: float("inf"), PaddingValue.neg_inf: float("-inf")}[PaddingValue(padding)]
    if lt == "half":
        return bits_literal(struct.unpack("<H", struct.pack("<e", value))[0], lt)
    if lt == "bfloat":
        return bits_literal(struct.unpack("<I", struct.pack("<f", value))[0] >> 16, lt)
    if lt == "float":
        return bits_literal(struct.unpack("<I", struct.pack("<f", value))[0], lt)
    return bits_literal(struct.unpack("<Q", struct.pack("<d", value))[0], lt)


def _ordering(op: Operation, load: bool) -> str:
    sem = op.attrs.get("memory_ordering_semantics", MO.weak)
    if sem == MO.weak:
        return ""
    scope = _SCOPE[op.attrs.get("memory_scope", MemoryScope.device)]
    return f".{sem.name}{scope}"


def _bits(elem: T.Type) -> int:
    return 8 * elem_bytes(elem)


def _reg_cast(lt: str) -> tuple[str, str]:
    """(into the template's integer register, back out of it) casts for an element of LLVM type lt."""
    if lt == "i1" or (lt.startswith("i") and "ptr" not in lt):
        return "zext", "trunc"
    if "ptr" in lt:
        return "ptrtoint", "inttoptr"
    return "bitcast", "bitcast"


def _to_reg(em: KernelEmitter, value: str, lt: str, bits: int) -> str:
    """An element as the integer register the PTX template takes."""
    rt = "i64" if "ptr" in lt else _REG[bits][1]
    return value if lt == rt else em.b.value(f"{_reg_cast(lt)[0]} {lt} {value} to {rt}")


def _from_reg(em: KernelEmitter, value: str, lt: str, bits: int) -> str:
    """The inverse of _to_reg."""
    rt = "i64" if "ptr" in lt else _REG[bits][1]
    return value if lt == rt else em.b.value(f"{_reg_cast(lt)[1]} {rt} {value} to {lt}")


def predicated_load(em: KernelEmitter, op: Operation, addr: str, pred: str | None, elem: T.Type,
                    fill: str) -> str:
    lt = llvm_type(elem)
    bits = _bits(elem)
    cls, rt = _REG[bits]
    width = "u8" if bits == 8 else f"b{bits}"
    fill_reg = _to_reg(em, fill, lt, bits)
    wide = bits == 16    # into a 32-bit register: a 16-bit one is half of a register ptxas must preserve
    if wide:
        cls, width = "r", "u16"
        fill_reg = em.b.value(f"zext i16 {fill_reg} to i32")
    reg_t = "i32" if wide else rt
    order = _ordering(op, True)
    if pred is None:
        text = f"ld{order}.global.{width} $0, [$1];"
        v = em.b.asm(reg_t, text, f"={cls},l", [(GLOBAL_PTR, addr)])
    else:
        # the predicate as an i32 tested inside the asm, not an asm predicate operand ('b', as the stores
        # take it): with that, ptxas's code for some kernels grew (launch reduce2d_rows_f32_8x64 sm_90: 130
        # -> 409 SASS instructions, 27 -> 50 registers)
        text = (f"{{ .reg .pred p; setp.ne.b32 p, $2, 0; mov.b{32 if wide else max(bits, 16)} $0, $3; "
                f"@p ld{order}.global.{width} $0, [$1]; }}")
        p32 = em.b.value(f"zext i1 {pred} to i32")
        v = em.b.asm(reg_t, text, f"={cls},l,r,{cls}", [(GLOBAL_PTR, addr), ("i32", p32), (reg_t, fill_reg)])
    if wide:
        v = em.b.value(f"trunc i32 {v} to i16")
    return _from_reg(em, v, lt, bits)


def predicated_store(em: KernelEmitter, op: Operation, addr: str, pred: str | None, elem: T.Type,
                     value: str) -> None:
    lt = llvm_type(elem)
    bits = _bits(elem)
    cls, rt = _REG[bits]
    width = "u8" if bits == 8 else f"b{bits}"
    v = _to_reg(em, value, lt, bits)
    order = _ordering(op, False)
    if pred is None:
        em.b.asm("void", f"st{order}.global.{width} [$0], $1;", f"l,{cls}", [(GLOBAL_PTR, addr), (rt, v)])
        return
    em.b.asm("void", f"@$2 st{order}.global.{width} [$0], $1;", f"l,{cls},b",
             [(GLOBAL_PTR, addr), (rt, v), ("i1", pred)])


def _pack_words(em: KernelEmitter, values: list[str], lt: str) -> list[str]:
    """Consecutive elements as the 32-bit words they fill in memory (little-endian, as the vector access
    moves them)."""
    n = len(values)
    vec = "poison"
    for i, v in enumerate(values):
        vec = em.b.value(f"insertelement <{n} x {lt}> {vec}, {lt} {v}, i32 {i}")
    words = len(values) * _element_bits(lt) // 32
    packed = em.b.value(f"bitcast <{n} x {lt}> {vec} to <{words} x i32>")
    return [em.b.value(f"extractelement <{words} x i32> {packed}, i32 {w}") for w in range(words)]


def _unpack_words(em: KernelEmitter, words: list[str], lt: str, n: int) -> list[str]:
    vec = "poison"
    for i, w in enumerate(words):
        vec = em.b.value(f"insertelement <{len(words)} x i32> {vec}, i32 {w}, i32 {i}")
    elems = em.b.value(f"bitcast <{len(words)} x i32> {vec} to <{n} x {lt}>")
    return [em.b.value(f"extractelement <{n} x {lt}> {elems}, i32 {i}") for i in range(n)]


def _element_bits(lt: str) -> int:
    return {"half": 16, "bfloat": 16, "float": 32, "double": 64}.get(lt) or int(lt[1:])


def _vector_operands(first: int, count: int) -> str:
    names = ", ".join(f"${first + i}" for i in range(count))
    return names if count == 1 else "{" + names + "}"


def predicated_vector_load(em: KernelEmitter, addr: str, pred: str | None, elem: T.Type, fill: str,
                           count: int) -> list[str]:
    """`count` consecutive elements from one aligned address, as one ld.global of 32-bit words (the bounds
    predicate covers them all: vectorize-view-accesses proved a run is wholly in or out of bounds)."""
    lt = llvm_type(elem)
    fills = _pack_words(em, [fill] * count, lt)
    w = len(fills)
    ret = "i32" if w == 1 else "{" + ", ".join(["i32"] * w) + "}"
    shape = "" if w == 1 else f".v{w}"
    if pred is None:
        text = f"ld.global{shape}.b32 {_vector_operands(0, w)}, [${w}];"
        out = em.b.asm(ret, text, ",".join(["=r"] * w + ["l"]), [(GLOBAL_PTR, addr)])
    else:
        moves = " ".join(f"mov.b32 ${i}, ${w + 2 + i};" for i in range(w))
        text = (f"{{ .reg .pred p; setp.ne.b32 p, ${w + 1}, 0; {moves} "
                f"@p ld.global{shape}.b32 {_vector_operands(0, w)}, [${w}]; }}")
        p32 = em.b.value(f"zext i1 {pred} to i32")
        out = em.b.asm(ret, text, ",".join(["=r"] * w + ["l", "r"] + ["r"] * w),
                       [(GLOBAL_PTR, addr), ("i32", p32)] + [("i32", f) for f in fills])
    words = [out] if w == 1 else [em.b.value(f"extractvalue {ret} {out}, {i}") for i in range(w)]
    return _unpack_words(em, words, lt, count)


def _pack_words_each(em: KernelEmitter, values: list[str], lt: str) -> list[str]:
    """Consecutive elements as the 32-bit words they fill in memory, each word built from its own elements:
    a whole-vector bitcast (_pack_words) of 16-bit elements goes through 64-bit halves in NVPTX (a
    cvt.u64.u32, shl.b64 and or.b64 per word, a mov.b64 per pair of words), a pair's own bitcast is free."""
    bits = _element_bits(lt)
    if bits > 32:
        return _pack_words(em, values, lt)
    per = 32 // bits
    words = []
    for w in range(0, len(values), per):
        if per == 1:
            words.append(values[w] if lt == "i32" else em.b.value(f"bitcast {lt} {values[w]} to i32"))
            continue
        vec = "poison"
        for i, v in enumerate(values[w:w + per]):
            vec = em.b.value(f"insertelement <{per} x {lt}> {vec}, {lt} {v}, i32 {i}")
        words.append(em.b.value(f"bitcast <{per} x {lt}> {vec} to i32"))
    return words


def predicated_vector_store(em: KernelEmitter, addr: str, pred: str | None, elem: T.Type,
                            values: list[str]) -> None:
    """The inverse of predicated_vector_load: one st.global of the elements packed into 32-bit words."""
    words = _pack_words_each(em, values, llvm_type(elem))
    w = len(words)
    shape = "" if w == 1 else f".v{w}"
    store = f"st.global{shape}.b32 [$0], {_vector_operands(1, w)};"
    args = [(GLOBAL_PTR, addr)] + [("i32", x) for x in words]
    if pred is None:
        em.b.asm("void", store, ",".join(["l"] + ["r"] * w), args)
        return
    em.b.asm("void", f"@${w + 1} {store}", ",".join(["l"] + ["r"] * w + ["b"]), args + [("i1", pred)])


def _and(em: KernelEmitter, a: str | None, b: str | None) -> str | None:
    if a is None:
        return b
    if b is None:
        return a
    return em.b.value(f"and i1 {a}, {b}")


def _view_access(em: KernelEmitter, pv: PartitionView, index: list[Tile], coords: list[str]):
    """(address, in-bounds predicate) of the element at tile coordinates `coords` of tile `index`."""
    view = pv.view
    offset = "0"
    inb = None
    # A tile index widens with zeros when every size is below 2^31: a negative one is then at least 2^32
    # tiles in, out of bounds as a sign-extended one is, and the upper half of the index is a known zero.
    widen = _u64 if all(not str(s).lstrip("-").isdigit() or 0 <= int(s) < 2**31 for s in view.shape) else _i64
    for i, (tile_dim, c) in enumerate(zip(pv.type.tile_shape, coords)):
        d = pv.type.dim_map[i]
        idx = widen(em, index[i].regs[0], index[i].llvm)
        start = em.b.value(f"mul i64 {idx}, {tile_dim}")
        c64 = em.b.value(f"zext i32 {c} to i64")
        pos = em.b.value(f"add i64 {start}, {c64}")
        ok = em.b.value(f"icmp ult i64 {pos}, {view.shape[d]}")
        inb = _and(em, inb, ok)
        term = em.b.value(f"mul i64 {pos}, {view.strides[d]}")
        offset = em.b.value(f"add i64 {offset}, {term}")
    lt = llvm_type(view.type.elem)
    addr = em.b.value(f"getelementptr {lt if lt != 'i1' else 'i8'}, {GLOBAL_PTR} {view.base}, i64 {offset}", "ga")
    return addr, inb


# view value class -> (emitter, access op, view, index tiles) -> the function from an element's tile
# coordinates to its (address, in-bounds predicate); called once per access op (gather/scatter views:
# codegen/lower_gather.py)
VIEW_ACCESSORS: dict[type, Callable] = {
    PartitionView: lambda em, op, pv, index: lambda coords: _view_access(em, pv, index, coords),
}


def _accessor(em: KernelEmitter, op: Operation, what: str):
    pv = em.get(op.operands["view"])
    make = VIEW_ACCESSORS.get(type(pv))
    if make is None:
        raise LoweringError(f"{what} through this view kind are not supported yet")
    return pv, make(em, op, pv, [em.get(v) for v in op.operands["index"]])


@lowers("load_view_tko")
def _load_view(em: KernelEmitter, op: Operation) -> None:
    pv, access = _accessor(em, op, "loads")
    ty: T.TileType = op.results[0].type
    layout = layout_of(ty)
    fill = padding_constant(ty.elem, pv.type.padding)
    dup = 0 if layout is None else layout.duplicate_register_mask()
    run = op.attrs.get("vector_width", 1)
    regs: list[str] = []
    for r in range(0, 1 if layout is None else layout.num_registers, run):
        if r & dup:  # registers that hold the same elements as ones already loaded
            regs += regs[r & ~dup:(r & ~dup) + run]
            continue
        coords = em.coords(layout, r) if layout else ["0"] * len(pv.type.tile_shape)
        addr, inb = access(coords)
        regs += (predicated_vector_load(em, addr, inb, ty.elem, fill, run) if run > 1 else
                 [predicated_load(em, op, addr, inb, ty.elem, fill)])
    em.set(op.results[0], Tile(ty, layout, regs))
    em.set(op.results[1], TOKEN)
    _access_remark(em, op, ty.elem, len(regs), run)


@lowers("tilegpu.repad")
def _repad(em: KernelEmitter, op: Operation) -> None:
    """The source tile's elements where the view's bounds hold them, the view's padding elsewhere (the source
    was loaded through a view of the same elements: merge-repadded-loads)."""
    src: Tile = em.get(op.operands["source"])
    pv, access = _accessor(em, op, "loads")
    ty: T.TileType = op.results[0].type
    layout = layout_of(ty)
    lt = llvm_type(ty.elem)
    fill = padding_constant(ty.elem, pv.type.padding)
    regs: list[str] = []
    for r, reg in enumerate(src.regs):
        coords = em.coords(layout, r) if layout else ["0"] * len(pv.type.tile_shape)
        inb = access(coords)[1]
        regs.append(reg if inb is None else em.b.value(f"select i1 {inb}, {lt} {reg}, {lt} {fill}"))
    em.set(op.results[0], Tile(ty, layout, regs))


def _access_remark(em: KernelEmitter, op: Operation, elem: T.Type, per_thread: int, run: int = 1) -> None:
    """How wide the op's global accesses are (the memory remark)."""
    if run > 1:
        text = (f"{op.name}: {per_thread // run} predicated {run * _bits(elem)}-bit access(es) per thread "
                f"(vectors of {run} elements, bounds-checked per vector: the launch hints promise alignment, a "
                f"unit stride and divisible extents)")
    else:
        text = (f"{op.name}: {per_thread} predicated {_bits(elem)}-bit access(es) per thread (bounds-checked "
                f"element by element; the view's strides are run-time values)")
    em.remark("analysis", "memory", "AccessWidth", text, op)


@lowers("store_view_tko")
def _store_view(em: KernelEmitter, op: Operation) -> None:
    if "tma" in op.attrs:       # select-tile-tensor-stores: staged in shared memory, stored by TMA
        tensor_store(em, op)
        return
    pv, access = _accessor(em, op, "stores")
    t: Tile = em.get(op.operands["tile"])
    n = 1 if t.is_scalar else t.layout.num_registers
    dup = 0 if t.is_scalar else t.layout.duplicate_register_mask()
    run = op.attrs.get("vector_width", 1)
    for r in range(0, n, run):
        if r & dup:  # copies of registers already stored
            continue
        coords = em.coords(t.layout, r) if t.layout else ["0"] * len(pv.type.tile_shape)
        addr, inb = access(coords)
        if run > 1:
            predicated_vector_store(em, addr, inb, t.elem, t.regs[r:r + run])
        else:
            predicated_store(em, op, addr, inb, t.elem, t.regs[r])
    em.set(op.results[0], TOKEN)
    _access_remark(em, op, t.elem, n, run)


@lowers("load_ptr_tko")
def _load_ptr(em: KernelEmitter, op: Operation) -> None:
    ptrs: Tile = em.get(op.operands["source"])
    ty: T.TileType = op.results[0].type
    layout = ptrs.layout
    mask = em.tile(op.operands.get("mask"))
    pad = em.tile(op.operands.get("paddingValue"))
    fill_default = padding_constant(ty.elem, None)
    dup = 0 if layout is None else layout.duplicate_register_mask()
    regs: list[str] = []
    for r, addr in enumerate(ptrs.regs):
        if r & dup:
            regs.append(regs[r & ~dup])
            continue
        pred = mask.regs[r] if mask is not None else None
        fill = pad.regs[r] if pad is not None else fill_default
        regs.append(predicated_load(em, op, addr, pred, ty.elem, fill))
    em.set(op.results[0], Tile(ty, layout, regs))
    em.set(op.results[1], TOKEN)


@lowers("store_ptr_tko")
def _store_ptr(em: KernelEmitter, op: Operation) -> None:
    ptrs: Tile = em.get(op.operands["destination"])
    value = em.expect(op.operands["value"])
    mask = em.tile(op.operands.get("mask"))
    dup = 0 if ptrs.layout is None else ptrs.layout.duplicate_register_mask()
    for r, addr in enumerate(ptrs.regs):
        if r & dup:
            continue
        predicated_store(em, op, addr, mask.regs[r] if mask is not None else None, value.elem, value.regs[r])
    em.set(op.results[0], TOKEN)
