"""mmaf_scaled (cuTile's `ct.mma_scaled`): block-scaled MMA on MX/NV formats.

    result[.., i, j] = acc[.., i, j] + sum_k lhs[.., i, k] * lhs_scale[.., i, k // B]
                                           * rhs[.., k, j] * rhs_scale[.., k // B, j]

with B = K / (the scales' K extent): fp8 (e4m3/e5m2) or fp4 (e2m1) elements, e8m0 (a power of two,
2^(code - 127); code 255 is NaN) or e4m3 scales.  The target check (ir/capabilities.py) lets it through
wherever the real tool does (the sm_100 family and sm_120/121).

Lowering (the same on every target): each operand element is decoded and multiplied by its block's scale in
f32, which is exact for every element/scale pair short of f32 overflow (at most 6 significant bits, exponents
within f32's subnormal range); the two f32 tiles then go through the ordinary mmaf lowering, an f32 FMA chain
accumulating in the accumulator.  The scale tiles are staged in shared memory, where every operand element
reads its block's scale.
"""
from __future__ import annotations

from ..bytecode.opspec import OPS_BY_NAME
from ..ir import types as T
from ..ir.core import Operation, Value
from .emitter import LOWERINGS, KernelEmitter, LoweringError, lowers
from .lower_elementwise import FP8, fp8_to_f32
from .values import SHARED_PTR, Tile


def _f32_bits(em: KernelEmitter, bits: str) -> str:
    return em.b.value(f"bitcast i32 {bits} to float")


def _e8m0_to_f32(em: KernelEmitter, code: str) -> str:
    """2^(code - 127): code 0 is the f32 subnormal 2^-127, code 255 NaN."""
    c = em.b.value(f"zext i8 {code} to i32")
    normal = em.b.value(f"shl i32 {c}, 23")
    tiny = em.b.value(f"select i1 {em.b.value(f'icmp eq i32 {c}, 0')}, i32 4194304, i32 {normal}")
    bits = em.b.value(f"select i1 {em.b.value(f'icmp eq i32 {c}, 255')}, i32 2143289344, i32 {tiny}")
    return _f32_bits(em, bits)


def _e2m1_to_f32(em: KernelEmitter, code: str) -> str:
    """S.EE.M with bias 1: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives (no NaN, no infinity)."""
    c = em.b.value(f"zext i8 {code} to i32")
    e = em.b.value(f"and i32 {em.b.value(f'lshr i32 {c}, 1')}, 3")
    m = em.b.value(f"and i32 {c}, 1")
    exp = em.b.value(f"shl i32 {em.b.value(f'add i32 {e}, 126')}, 23")
    normal = em.b.value(f"or i32 {exp}, {em.b.value(f'shl i32 {m}, 22')}")
    half = em.b.value(f"mul i32 {m}, 1056964608")  # 0.5 or +0
    mag = em.b.value(f"select i1 {em.b.value(f'icmp eq i32 {e}, 0')}, i32 {half}, i32 {normal}")
    sign = em.b.value(f"shl i32 {em.b.value(f'and i32 {c}, 8')}, 28")
    return _f32_bits(em, em.b.value(f"or i32 {mag}, {sign}"))


def _to_f32(em: KernelEmitter, reg: str, elem: T.Type) -> str:
    name = getattr(elem, "name", "")
    if name in FP8:
        return fp8_to_f32(em, reg, name)
    if name == "f8E8M0FNU":
        return _e8m0_to_f32(em, reg)
    if name == "f4E2M1FN":
        return _e2m1_to_f32(em, reg)
    raise LoweringError(f"mmaf_scaled with {elem} elements is not supported")


def _scaled(em: KernelEmitter, x: Tile, scale: Tile, k_axis: int, byte_base: int) -> Tile:
    """x decoded to f32 and multiplied by its block's scale (the scale tile staged at byte_base)."""
    k = x.type.shape[k_axis]
    block = k // scale.type.shape[k_axis]
    if block & (block - 1):
        raise LoweringError(f"mmaf_scaled block size {block} is not a power of two")
    shift = block.bit_length() - 1
    regs = []
    for r, reg in enumerate(x.regs):
        coords = list(em.coords(x.layout, r))
        coords[k_axis] = em.b.value(f"lshr i32 {coords[k_axis]}, {shift}")
        slot = em.shared_slot(em.linear_index(coords, scale.type.shape), scale.elem, byte_base)
        s = _to_f32(em, em.b.value(f"load i8, {SHARED_PTR} {slot}"), scale.elem)
        regs.append(em.b.value(f"fmul float {_to_f32(em, reg, x.elem)}, {s}"))
    return Tile(T.TileType(x.type.shape, T.F32), x.layout, regs)


@lowers("mmaf_scaled")
def _mmaf_scaled(em: KernelEmitter, op: Operation) -> None:
    lhs, rhs = em.get(op.operands["lhs"]), em.get(op.operands["rhs"])
    lscale, rscale = em.get(op.operands["lhs_scale"]), em.get(op.operands["rhs_scale"])
    rhs_base = -(-lscale.type.num_elements() // 16) * 16
    em.barrier()  # whoever used the scratch before is done with it
    em.store_to_shared(lscale)
    em.store_to_shared(rscale, rhs_base)
    em.barrier()
    a = _scaled(em, lhs, lscale, -1, 0)
    b = _scaled(em, rhs, rscale, -2, rhs_base)
    # the ordinary mmaf lowering on the f32 operands (the accumulator is the op's own)
    va, vb = Value(a.type), Value(b.type)
    em.set(va, a)
    em.set(vb, b)
    spec = OPS_BY_NAME["mmaf"]
    attrs = {x.name: False for x in spec.attrs if x.kind == "unit"}
    mma = Operation(spec, {"lhs": va, "rhs": vb, "acc": op.operands["acc"]}, attrs, [op.result.type], loc=op.loc)
    LOWERINGS["mmaf"](em, mma)
    em.set(op.result, em.get(mma.result))
