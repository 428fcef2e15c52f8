"""A Python API to build cuda_tile modules by hand (for tests, examples and later stages).

    mb = ModuleBuilder(version=(13, 4, 0))
    with mb.kernel("add_one", [tile(PointerType(F32))]) as k:
        ...
        one = k.constant(np.float32(1.0), tile(F32))
        k.op("addf", [tile(F32)], lhs=x, rhs=one, rounding_mode=RoundingMode.nearest_even)
        k.op("return")
    data = write_module(mb.module)

Every op is created from its definition (ir/cuda_tile.py) by name, so the builder needs no per-op code.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import numpy as np

from . import types as T
from .attrs import DenseElements, OptimizationHintsAttr
from .core import Block, Function, Module, Operation, Region, Value
from .opdef import opdef


def tile(elem: T.Type, *shape: int) -> T.TileType:
    return T.TileType(tuple(shape), elem)


class BlockBuilder:
    """Appends ops to one block; nested regions are built with `region()`."""

    def __init__(self, block: Block, module: Module):
        self.block = block
        self.module = module
        self.loc = 0  # debug id given to new ops

    @property
    def args(self) -> list[Value]:
        return self.block.args

    def op(self, op_name: str, /, result_types: Sequence[T.Type] = (), regions: Sequence[Region] = (),
           **fields: Any) -> Operation:
        """Create op `op_name`; keyword arguments are its operands and attributes by spec name
        (the op name is positional-only so a field may be called `name`, as get_global's is)."""
        spec = opdef(op_name)
        name = op_name
        operand_names = {o.name for o in spec.operands}
        attr_names = {a.name for a in spec.attrs}
        unknown = set(fields) - operand_names - attr_names
        if unknown:
            raise TypeError(f"{name}: unknown fields {sorted(unknown)}")
        operands = {o.name: fields.get(o.name, [] if o.form == "variadic" else None) for o in spec.operands}
        attrs = {a.name: fields[a.name] for a in spec.attrs if a.name in fields}
        for a in spec.attrs:
            if a.kind == "unit":
                attrs.setdefault(a.name, False)
        op = Operation(spec, operands, attrs, list(result_types), list(regions), loc=self.loc)
        self.block.ops.append(op)
        return op

    def constant(self, value, type_: T.TileType) -> Value:
        """A dense constant; a scalar becomes a one-element splat, as the producer writes it."""
        raw = encode_dense(value, type_)
        return self.op("constant", [type_], value=DenseElements(type_, raw)).result

    @contextmanager
    def region(self, arg_types: Sequence[T.Type] = ()) -> Iterator["BlockBuilder"]:
        """Build a one-block region; the Region is available as `.built_region` afterwards."""
        block = Block(list(arg_types))
        child = BlockBuilder(block, self.module)
        child.loc = self.loc
        yield child
        child.built_region = Region([block])


def encode_dense(value, type_: T.TileType) -> bytes:
    """numpy-compatible value -> the raw dense buffer (splat = one element, i1 bit-packed otherwise)."""
    elem = type_.elem
    arr = np.asarray(value)
    if isinstance(elem, T.IntType) and elem.width == 1:
        flat = arr.astype(bool).ravel()
        if flat.size == 1:
            return b"\xff" if flat[0] else b"\x00"
        return np.packbits(flat, bitorder="little").tobytes()
    dtype = _NUMPY_STORAGE.get(elem)
    if dtype is None:
        raise TypeError(f"encode_dense: use raw bytes for element type {elem}")
    return arr.astype(dtype).ravel().tobytes()


_NUMPY_STORAGE = {T.I8: "<i1", T.I16: "<i2", T.I32: "<i4", T.I64: "<i8", T.F16: "<f2", T.F32: "<f4", T.F64: "<f8"}


class ModuleBuilder:
    def __init__(self, version: tuple[int, int, int] = (13, 4, 0)):
        # the producer always predefines i1 and i32 as types 0 and 1
        self.module = Module(version=version, types=[T.I1, T.I32])

    @contextmanager
    def kernel(self, name: str, arg_types: Sequence[T.Type],
               hints: OptimizationHintsAttr | None = None) -> Iterator[BlockBuilder]:
        fn_type = T.FunctionType(tuple(arg_types), ())
        block = Block(list(arg_types))
        yield BlockBuilder(block, self.module)
        self.module.functions.append(Function(name.encode(), fn_type, block, hints=hints))
