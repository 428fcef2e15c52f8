"""Helpers for the interpreter tests: build small kernels that follow cuTile's calling convention.

    tk = TK()
    x = tk.array(T.F32, 1)          # a 1-D f32 array parameter (ptr, shape, stride)
    y = tk.array(T.F32, 1)
    with tk.body() as b:
        v = b.load(x, (128,))
        b.store(y, (128,), b.op("negf", [tile(T.F32, 128)], source=v).result)
    tk.run((1,), [xs, ys])

The module is written to bytecode and read back (so the reader and verifier see it too).
"""
from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from tileiras_async.bytecode.writer import write_module
from tileiras_async.interp.runner import run_kernel
from tileiras_async.ir import types as T
from tileiras_async.ir.attrs import FloatAttr, IntegerAttr
from tileiras_async.ir.builder import ModuleBuilder, tile
from tileiras_async.ir.enums import MemoryOrderingSemantics as MO

DYN = T.DYNAMIC


class ArrayParam:
    def __init__(self, elem, ndim, index):
        self.elem, self.ndim, self.index = elem, ndim, index


class ScalarParam:
    def __init__(self, elem):
        self.elem = elem


class Body:
    def __init__(self, tk, k):
        self.tk = tk
        self.k = k
        self.values = {}
        self.token = k.op("make_token", [T.TOKEN]).result
        i = 0
        for p in tk.params:
            if isinstance(p, ArrayParam):
                args = k.args[i:i + 1 + 2 * p.ndim]
                i += 1 + 2 * p.ndim
                tv_t = T.TensorViewType(p.elem, (DYN,) * p.ndim, (DYN,) * p.ndim)
                tv = k.op("make_tensor_view", [tv_t], base=args[0], dynamicShape=list(args[1:1 + p.ndim]),
                          dynamicStrides=list(args[1 + p.ndim:])).result
                self.values[id(p)] = (args[0], tv)
            else:
                self.values[id(p)] = k.args[i]
                i += 1

    # plumbing
    def op(self, opname, result_types=(), regions=(), **fields):
        if "name" not in fields:
            return self.k.op(opname, list(result_types), list(regions), **fields)
        # BlockBuilder.op's first parameter is called `name` too (get_global has a `name` attribute)
        from tileiras_async.bytecode.opspec import OPS_BY_NAME
        from tileiras_async.ir.core import Operation
        spec = OPS_BY_NAME[opname]
        operands = {o.name: fields.get(o.name, [] if o.form == "variadic" else None) for o in spec.operands}
        attrs = {a.name: fields[a.name] for a in spec.attrs if a.name in fields}
        op = Operation(spec, operands, attrs, list(result_types), list(regions))
        self.k.block.ops.append(op)
        return op

    def region(self, arg_types=()):
        return self.k.region(list(arg_types))

    def ptr(self, p):
        return self.values[id(p)][0]

    def tv(self, p):
        return self.values[id(p)][1]

    def scalar(self, p):
        return self.values[id(p)]

    def const(self, value, elem, shape=()):
        return self.k.constant(np.asarray(value), tile(elem, *shape))

    def i32(self, v):
        return self.const(np.int32(v), T.I32)

    def bid(self):
        return self.op("get_tile_block_id", [tile(T.I32)] * 3).results

    def pview_type(self, p, shape, padding=None, dim_map=None):
        tv_t = self.tv(p).type
        return T.PartitionViewType(tuple(shape), tv_t, tuple(dim_map or range(len(shape))), padding)

    def load(self, p, shape, index=None, padding=None, dim_map=None, result_shape=None):
        pv_t = self.pview_type(p, shape, padding, dim_map)
        pv = self.op("make_partition_view", [pv_t], tensor_view=self.tv(p)).result
        index = [self.i32(0)] * len(shape) if index is None else [
            self.i32(i) if isinstance(i, int) else i for i in index]
        rs = result_shape or shape
        return self.op("load_view_tko", [tile(p.elem, *rs), T.TOKEN], view=pv, index=index,
                       token=self.token, memory_ordering_semantics=MO.weak,
                       **self._inb(len(shape))).results[0]

    def store(self, p, shape, value, index=None, dim_map=None):
        pv_t = self.pview_type(p, shape, None, dim_map)
        pv = self.op("make_partition_view", [pv_t], tensor_view=self.tv(p)).result
        index = [self.i32(0)] * len(shape) if index is None else [
            self.i32(i) if isinstance(i, int) else i for i in index]
        self.op("store_view_tko", [T.TOKEN], tile=value, view=pv, index=index, token=self.token,
                memory_ordering_semantics=MO.weak, **self._inb(len(shape)))

    def _inb(self, r):
        return {"inbounds": (False,) * r} if self.tk.version >= (13, 4, 0) else {}

    def unary(self, name, x, rtype, **attrs):
        return self.op(name, [rtype], source=x, **attrs).result

    def binary(self, name, a, b, rtype, **attrs):
        return self.op(name, [rtype], lhs=a, rhs=b, **attrs).result


class TK:
    def __init__(self, version=(13, 4, 0), name="k"):
        self.version = version
        self.name = name
        self.params = []
        self.mb = ModuleBuilder(version)
        self.data = None

    def array(self, elem, ndim, index=T.I32):
        p = ArrayParam(elem, ndim, index)
        self.params.append(p)
        return p

    def scalar(self, elem):
        p = ScalarParam(elem)
        self.params.append(p)
        return p

    def param_types(self):
        out = []
        for p in self.params:
            if isinstance(p, ArrayParam):
                out.append(tile(T.PointerType(p.elem)))
                out += [tile(p.index)] * (2 * p.ndim)
            else:
                out.append(tile(p.elem))
        return out

    @contextmanager
    def body(self, name=None):
        with self.mb.kernel(name or self.name, self.param_types()) as k:
            b = Body(self, k)
            yield b
            if not k.block.ops or k.block.ops[-1].name != "return":
                k.op("return")

    def bytes(self):
        return write_module(self.mb.module)

    def run(self, grid, args, **kw):
        return run_kernel(self.bytes(), grid, args, **kw)


def f32attr(v, t=T.F32):
    bits = int(np.asarray(v, dtype={16: np.float16, 32: np.float32, 64: np.float64}[t.width])
               .view({16: np.uint16, 32: np.uint32, 64: np.uint64}[t.width]))
    return FloatAttr(t, bits)


def intattr(v, t=T.I32):
    return IntegerAttr(t, int(v) & ((1 << t.width) - 1))


def elementwise(name, inputs, in_elem, out_elem, *, version=(13, 4, 0), n=None, **attrs):
    """Run one elementwise op over 1-D inputs (numpy arrays of equal length); returns the output array.

    `inputs` maps operand names to numpy arrays (storage representation).
    """
    names = list(inputs)
    from tileiras_async.ir.enums import IntegerOverflow, RoundingMode
    defaults = {"trunci": {"overflow": IntegerOverflow.none}, "ftof": {"rounding_mode": RoundingMode.nearest_even},
                "addi": {"overflow": IntegerOverflow.none}, "subi": {"overflow": IntegerOverflow.none},
                "muli": {"overflow": IntegerOverflow.none}, "shli": {"overflow": IntegerOverflow.none},
                "negi": {"overflow": IntegerOverflow.none}}
    for k, v in defaults.get(name, {}).items():
        attrs.setdefault(k, v)
    n = n or len(next(iter(inputs.values())))
    size = 1 << max(0, int(np.ceil(np.log2(n))))
    tk = TK(version)
    ps = [tk.array(in_elem if not isinstance(in_elem, dict) else in_elem[k], 1) for k in names]
    out = tk.array(out_elem, 1)
    with tk.body() as b:
        vals = {k: b.load(p, (size,), padding=None) for k, p in zip(names, ps)}
        r = b.op(name, [tile(out_elem, size)], **vals, **attrs).result
        b.store(out, (size,), r)
    odt = {T.F32: np.float32, T.F64: np.float64, T.F16: np.float16, T.BF16: np.uint16, T.I1: np.bool_,
           T.I8: np.int8, T.I16: np.int16, T.I32: np.int32, T.I64: np.int64, T.TF32: np.float32,
           T.F8E4M3FN: np.uint8, T.F8E5M2: np.uint8, T.F8E8M0FNU: np.uint8}[out_elem]
    o = np.zeros(n, odt)
    tk.run((1,), [np.ascontiguousarray(inputs[k]) for k in names] + [o])
    return o
