"""Valid but extreme modules, built with the IR builder API (for the scaling bench and tests).

Every builder returns bytecode bytes that NVIDIA's tools accept:

    many_kernels(n)        n copies of a small elementwise kernel (distinct names)
    straight_line(n)       one kernel with n dependent addf ops between a load and a store
    nested_if(depth)       `if` nested `depth` deep, a store in the innermost region
    nested_for(depth)      `for` nested `depth` deep (`trip` iterations each), a store in the innermost body
    big_tile(elements)     load / addf / store of a one-dimensional tile of `elements` f32
"""
from __future__ import annotations

import numpy as np

from ..bytecode.writer import write_module
from ..ir import types as T
from ..ir.attrs import BoundedAttr
from ..ir.builder import BlockBuilder, ModuleBuilder, tile
from ..ir.enums import ComparisonPredicate, MemoryOrderingSemantics as MO, RoundingMode, Signedness

DYN = T.DYNAMIC
I32 = tile(T.I32)
PTR = tile(T.PointerType(T.F32))
VERSION = (13, 4, 0)


ARGS = [PTR, I32, I32, PTR, I32, I32]   # two 1-D f32 arrays as cuTile passes them: pointer, shape, stride


def _views(k: BlockBuilder, elements: int):
    """(x partition view, y partition view, block id) over two contiguous f32 arrays."""
    x_ptr, xn, _xs, y_ptr, yn, _ys = k.args
    tv_t = T.TensorViewType(T.F32, (DYN,), (1,))
    pv_t = T.PartitionViewType((elements,), tv_t, (0,))
    xn = k.op("assume", [I32], value=xn, predicate=BoundedAttr(0, None)).result
    yn = k.op("assume", [I32], value=yn, predicate=BoundedAttr(0, None)).result
    tvx = k.op("make_tensor_view", [tv_t], base=x_ptr, dynamicShape=[xn], dynamicStrides=[]).result
    tvy = k.op("make_tensor_view", [tv_t], base=y_ptr, dynamicShape=[yn], dynamicStrides=[]).result
    bid = k.op("get_tile_block_id", [I32, I32, I32]).results[0]
    pvx = k.op("make_partition_view", [pv_t], tensor_view=tvx).result
    pvy = k.op("make_partition_view", [pv_t], tensor_view=tvy).result
    return pvx, pvy, bid


def _load(k: BlockBuilder, view, index, elements: int):
    op = k.op("load_view_tko", [tile(T.F32, elements), T.TOKEN], view=view, index=[index],
              memory_ordering_semantics=MO.weak, inbounds=(False,))
    return op.results[0]


def _store(k: BlockBuilder, value, view, index) -> None:
    k.op("store_view_tko", [T.TOKEN], tile=value, view=view, index=[index],
         memory_ordering_semantics=MO.weak, inbounds=(False,))


def _addf(k: BlockBuilder, a, b, elements: int):
    return k.op("addf", [tile(T.F32, elements)], lhs=a, rhs=b, rounding_mode=RoundingMode.nearest_even).result


def _elementwise_kernel(mb: ModuleBuilder, name: str, elements: int, chain: int) -> None:
    with mb.kernel(name, ARGS) as k:
        pvx, pvy, bid = _views(k, elements)
        x = _load(k, pvx, bid, elements)
        one = k.constant(np.float32(1.0), tile(T.F32, elements))
        for _ in range(chain):
            x = _addf(k, x, one, elements)
        _store(k, x, pvy, bid)
        k.op("return")


def many_kernels(n: int, elements: int = 128) -> bytes:
    mb = ModuleBuilder(VERSION)
    for i in range(n):
        _elementwise_kernel(mb, f"k{i}", elements, 1)
    return write_module(mb.module)


def straight_line(ops: int, elements: int = 128) -> bytes:
    mb = ModuleBuilder(VERSION)
    _elementwise_kernel(mb, "straight", elements, ops)
    return write_module(mb.module)


def big_tile(elements: int) -> bytes:
    mb = ModuleBuilder(VERSION)
    _elementwise_kernel(mb, "big", elements, 1)
    return write_module(mb.module)


def _cond(k: BlockBuilder, bid):
    zero = k.constant(np.int32(0), I32)
    return k.op("cmpi", [tile(T.I1)], lhs=bid, rhs=zero, comparison_predicate=ComparisonPredicate.greater_than_or_equal,
                signedness=Signedness.signed).result


def nested_if(depth: int, elements: int = 128) -> bytes:
    mb = ModuleBuilder(VERSION)
    with mb.kernel("nested_if", ARGS) as k:
        pvx, pvy, bid = _views(k, elements)
        cond = _cond(k, bid)
        _nest(k, depth, lambda inner: _if_region(inner, cond),
              lambda inner: _store(inner, _load(inner, pvx, bid, elements), pvy, bid), "yield")
        k.op("return")
    return write_module(mb.module)


def nested_for(depth: int, trip: int = 1, elements: int = 128) -> bytes:
    mb = ModuleBuilder(VERSION)
    with mb.kernel("nested_for", ARGS) as k:
        pvx, pvy, bid = _views(k, elements)
        lo = k.constant(np.int32(0), I32)
        hi = k.constant(np.int32(trip), I32)
        step = k.constant(np.int32(1), I32)
        _nest(k, depth, lambda inner: _for_region(inner, lo, hi, step),
              lambda inner: _store(inner, _load(inner, pvx, bid, elements), pvy, bid), "continue")
        k.op("return")
    return write_module(mb.module)


def _if_region(k: BlockBuilder, cond):
    return ("if", (), dict(condition=cond))


def _for_region(k: BlockBuilder, lo, hi, step):
    return ("for", (I32,), dict(lowerBound=lo, upperBound=hi, step=step, initValues=[]))


def _nest(k: BlockBuilder, depth: int, head, leaf, terminator: str) -> None:
    """`depth` nested one-region ops built without recursion: innermost first, then wrapped outwards."""
    from ..ir.core import Block, Operation, Region
    from ..bytecode.opspec import OPS_BY_NAME
    heads = [head(k) for _ in range(depth)]
    body = Block(list(heads[-1][1]) if heads else [])
    inner = BlockBuilder(body, k.module)
    leaf(inner)
    inner.op(terminator)
    for level in range(depth - 1, -1, -1):
        name, _args, fields = heads[level]
        spec = OPS_BY_NAME[name]
        regions = [Region([body])]
        if name == "if":
            regions.append(Region([]))  # no else
        operands = {o.name: fields.get(o.name, [] if o.form == "variadic" else None) for o in spec.operands}
        attrs = {a.name: False for a in spec.attrs if a.kind == "unit"}
        op = Operation(spec, operands, attrs, [], regions)
        if level == 0:
            k.block.ops.append(op)
            break
        body = Block(list(heads[level - 1][1]))
        body.ops.append(op)
        body.ops.append(Operation(OPS_BY_NAME[terminator]))
