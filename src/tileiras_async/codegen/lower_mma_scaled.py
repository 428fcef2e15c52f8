"""mmaf_scaled (cuTile's `ct.mma_scaled`): block-scaled MMA on MX/NV formats.

    result[.., i, j] = acc[.., i, j] + sum_b lhs_scale[.., i, b] * rhs_scale[.., b, j]
                                           * sum_{k in block b} lhs[.., i, k] * rhs[.., k, j]

with blocks of B = K / (the scales' K extent) elements along K: fp8 (e4m3/e5m2) or fp4 (e2m1) elements, e8m0
(a power of two, 2^(code - 127); code 255 is NaN) or e4m3 scales.  The target check (ir/capabilities.py) lets
it through wherever the real tool does (the sm_100 family and sm_120/121).

Lowering (the same on every such target), as block-scaled tensor cores compute it: per K block, the
unscaled product of the block's fp8 operands on the tensor cores (the ordinary mmaf lowering: mma.sync
.e4m3/.e5m2, exact products accumulated in f32), then acc = fma(product, lhs_scale * rhs_scale, acc) in the
product's layout.  e2m1 elements are widened to e4m3 first (exactly: every e2m1 value is an e4m3 value).
The operands and the scales are staged in the op's scratch once (tilegpu/analysis/scaled_mma.py says where); every
block's operands are read back into registers before the first product, whose own staging reuses the
operands' bytes.  assign-layouts put the accumulator and the result in the block products' layout.
"""
from __future__ import annotations

from ..ir import types as T
from ..ir.core import Operation
from .emitter import LOWERINGS, KernelEmitter, LoweringError, lowers
from .lower_elementwise import FP8, fp8_to_f32
from .llvmir import float_literal
from ..tilegpu.analysis import scaled_mma
from ..tilegpu.analysis.mma import FMA_PLAN, MMA_PLAN, result_layout
from ..tilegpu.types import with_layout
from .values import SHARED_PTR, Tile


def _e8m0_to_f32(em: KernelEmitter, code: str) -> str:
    """2^(code - 127): code 0 is the f32 subnormal 2^-127, code 255 NaN."""
    c = em.b.value(f"zext i8 {code} to i32")
    normal = em.b.value(f"shl i32 {c}, 23")
    tiny = em.b.value(f"select i1 {em.b.value(f'icmp eq i32 {c}, 0')}, i32 4194304, i32 {normal}")
    bits = em.b.value(f"select i1 {em.b.value(f'icmp eq i32 {c}, 255')}, i32 2143289344, i32 {tiny}")
    return em.b.value(f"bitcast i32 {bits} to float")


def _scale_to_f32(em: KernelEmitter, code: str, elem: T.Type) -> str:
    name = getattr(elem, "name", "")
    if name == "f8E8M0FNU":
        return _e8m0_to_f32(em, code)
    if name in FP8:
        return fp8_to_f32(em, code, name)
    raise LoweringError(f"mmaf_scaled with {elem} scales is not supported")


def _e2m1_to_e4m3(em: KernelEmitter, code: str) -> str:
    """S.EE.M (bias 1) -> the e4m3 code of the same value: 0.5 is 0x30, 2^(E-1) * 1.M is (E+6).M00."""
    mag = em.b.value(f"and i8 {code}, 7")
    e = em.b.value(f"lshr i8 {mag}, 1")
    m = em.b.value(f"and i8 {mag}, 1")
    normal = _e2m1_normal(em, e, m)
    half = em.b.value(f"mul i8 {m}, 48")  # 0.5 or +0
    out = em.b.value(f"select i1 {em.b.value(f'icmp eq i8 {e}, 0')}, i8 {half}, i8 {normal}")
    sign = em.b.value(f"shl i8 {em.b.value(f'and i8 {code}, 8')}, 4")
    return em.b.value(f"or i8 {out}, {sign}")


def _e2m1_normal(em: KernelEmitter, e: str, m: str) -> str:
    exp = em.b.value(f"shl i8 {em.b.value(f'add i8 {e}, 6')}, 3")
    return em.b.value(f"or i8 {exp}, {em.b.value(f'shl i8 {m}, 2')}")


def _block(em: KernelEmitter, src: Tile, base: int, k_axis: int, start: int, size: int) -> Tile:
    """Elements [start, start + size) along k_axis of a staged operand, as a tile of its tensor-core type."""
    shape = list(src.type.shape)
    full = tuple(shape)
    shape[k_axis] = size
    if getattr(src.elem, "name", "") not in (*FP8, "f4E2M1FN"):
        raise LoweringError(f"mmaf_scaled with {src.elem} elements is not supported")
    fp8 = scaled_mma.block_elem(src.elem)
    ty = T.TileType(tuple(shape), src.elem)
    layout = em.options.default_layout(ty.shape)

    def index(c):
        c = list(c)
        c[k_axis] = em.b.value(f"add i32 {c[k_axis]}, {start}") if start else c[k_axis]
        return em.linear_index(c, full)
    t = em.load_from_shared(ty, layout, index, base)
    if fp8 != src.elem:
        t = Tile(T.TileType(ty.shape, fp8), layout, [_e2m1_to_e4m3(em, r) for r in t.regs])
    return t


def _product(em: KernelEmitter, a: Tile, b: Tile, op: Operation, scratch: int) -> Tile:
    """a @ b on the tensor cores with a zero f32 accumulator: the ordinary mmaf lowering on the block's
    operands, staging through the start of this op's scratch."""
    mma = scaled_mma.block_product(op)
    for decided in (MMA_PLAN, FMA_PLAN, "fma_unrolled"):   # select-mma, select-access-forms: the block products
        if decided in op.attrs:
            mma.attrs[decided] = op.attrs[decided]
    layout = result_layout(em.options, mma)
    acc_type = with_layout(mma.result.type, layout)
    mma.operands["acc"].type = mma.result.type = acc_type
    mma.attrs.update(scratch_offset=scratch, scratch_bytes=scaled_mma.scale_offset(op))
    zero = Tile(acc_type, layout, [float_literal(0.0, "float")] * layout.num_registers)
    for name, t in (("lhs", a), ("rhs", b), ("acc", zero)):
        em.set(mma.operands[name], t)
    LOWERINGS["mmaf"](em, mma)
    return em.get(mma.result)


@lowers("mmaf_scaled")
def _mmaf_scaled(em: KernelEmitter, op: Operation) -> None:
    lhs, rhs = em.get(op.operands["lhs"]), em.get(op.operands["rhs"])
    out = em.expect(op.operands["acc"])  # in the block products' layout (assign-layouts)
    lscale, rscale = em.get(op.operands["lhs_scale"]), em.get(op.operands["rhs_scale"])
    nblocks = lscale.type.shape[-1]
    size = lhs.type.shape[-1] // nblocks
    base = em.scratch_base(op)      # insert-barriers separated it from the ops before
    rhs_at = scaled_mma.staged_operand_bytes(op)[1]
    scales = base + scaled_mma.scale_offset(op)
    rs_at = scaled_mma.staged_scale_bytes(op)[1]
    em.store_to_shared(lhs, base)
    em.store_to_shared(rhs, base + rhs_at)
    em.store_to_shared(lscale, scales)
    em.store_to_shared(rscale, scales + rs_at)
    em.barrier()
    # every block's operands into registers first: the products reuse the operands' bytes
    blocks = [(_block(em, lhs, base, -1, k * size, size), _block(em, rhs, base + rhs_at, -2, k * size, size))
              for k in range(nblocks)]
    for k, (a, b) in enumerate(blocks):
        em.barrier()    # every warp is done with what the scratch held before this product's staging
        p = _product(em, a, b, op, base)
        if p.layout != out.layout:
            raise LoweringError("internal: the accumulator is not in the block products' layout")
        regs = []
        for r, (preg, areg) in enumerate(zip(p.regs, out.regs)):
            c = em.coords(p.layout, r)
            lc, rc = list(c), list(c)
            lc[-1], rc[-2] = str(k), str(k)
            sa = em.b.value(f"load i8, {SHARED_PTR} "
                            f"{em.shared_slot(em.linear_index(lc, lscale.type.shape), lscale.elem, scales)}")
            sb = em.b.value(f"load i8, {SHARED_PTR} "
                            f"{em.shared_slot(em.linear_index(rc, rscale.type.shape), rscale.elem, scales + rs_at)}")
            s = em.b.value(f"fmul float {_scale_to_f32(em, sa, lscale.elem)}, {_scale_to_f32(em, sb, rscale.elem)}")
            regs.append(em.b.call("float", "llvm.fma.f32", [("float", preg), ("float", s), ("float", areg)]))
        out = Tile(op.result.type, p.layout, regs)
    em.set(op.result, out)
