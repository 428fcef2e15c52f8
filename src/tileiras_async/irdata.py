"""A verified kernel as msgspec data: what the parse stage hands to the lower and schedule stages.

The parse stage reads and verifies a module once; each kernel then travels as a `KernelData`
message (to any worker process, for every target), instead of every stage request carrying the
module's bytes and reading them again.  A KernelData holds only what lowering and scheduling need:

* the kernel's ops in pre-order as flat records (no nesting in the data, so encoding, decoding and
  rebuilding take no recursion whatever the input's nesting depth), value references as numbers
  in definition order;
* a pool of the leaf values ops refer to (types and attribute values: frozen dataclasses, enums,
  tuples, ints, bytes), each stored once, in a tagged form only classes of `ir.types`, `ir.attrs`
  and `ir.enums` can be decoded to;
* the debug entries and strings its source locations resolve through (a sparse slice of the
  module's tables, ids unchanged), so locations in diagnostics and line tables come out as before.

`kernel_data(module, fn)` and `kernel_module(data)` convert; the rebuilt module holds the one kernel.
"""
from __future__ import annotations

import dataclasses
import enum

import msgspec

from .ir import attrs as A, enums as E, types as T
from .ir.core import Block, DebugEntry, Function, Module, Operation, Region, Value
from .ir.opdef import opdef



class BlockData(msgspec.Struct, array_like=True, frozen=True):
    args: list[int]                 # pool indices of the argument types
    ops: int                        # how many ops follow (in pre-order) for this block


class OpData(msgspec.Struct, array_like=True, frozen=True):
    name: str
    operands: list[int | list[int] | None]   # in spec order: a value number, a list (variadic), None
    results: list[int]              # pool indices of the result types
    attrs: dict[str, int]           # attribute name -> pool index of its value
    loc: int = 0
    regions: list[list[BlockData]] = []


class KernelData(msgspec.Struct, array_like=True, frozen=True):
    name: bytes
    signature: int                  # pool index of the FunctionType
    args: list[int]                 # pool indices of the body's argument types
    ops: list[OpData]               # the body's ops and everything nested in them, in pre-order
    body_ops: int                   # how many of them are directly in the body
    pool: list                      # encoded leaf values
    version: tuple[int, int, int] = (13, 4, 0)
    flags: int = 0b10
    hints: int = -1                 # pool index of the optimization hints, -1 for none
    loc: int = 0
    has_debug: bool = True
    debug_size: int = 0             # len(module.debug): ids are kept, the slice is sparse
    debug: dict[int, tuple[int, list[int]]] = {}   # debug id -> (tag, fields)
    strings: dict[int, bytes] = {}  # string index -> bytes (the file names of the locations)


# ------------------------------------------------------------------ leaf values

_CLASSES: dict[str, type] = {}
for _module in (T, A):
    for _name, _cls in vars(_module).items():
        if isinstance(_cls, type) and dataclasses.is_dataclass(_cls):
            _CLASSES[_name] = _cls
_ENUMS = {name: cls for name, cls in vars(E).items() if isinstance(cls, type) and issubclass(cls, enum.IntEnum)}


def encode_leaf(value):
    """A type or attribute value as msgspec-encodable data.  Scalars stay as they are; containers
    and objects become lists headed by a tag (so a list always carries one)."""
    if value is None or isinstance(value, (bool, bytes, str, float)):
        return value
    if isinstance(value, enum.IntEnum):
        return ["E", type(value).__name__, int(value)]
    if isinstance(value, int):
        return value
    if isinstance(value, tuple):
        return ["T", [encode_leaf(v) for v in value]]
    if isinstance(value, list):
        return ["L", [encode_leaf(v) for v in value]]
    name = type(value).__name__
    if _CLASSES.get(name) is type(value):
        return ["D", name, [encode_leaf(getattr(value, f.name)) for f in dataclasses.fields(value)]]
    raise TypeError(f"cannot carry a {name} between stages")


def decode_leaf(data):
    if not isinstance(data, list):
        return data
    tag = data[0]
    if tag == "T":
        return tuple(decode_leaf(v) for v in data[1])
    if tag == "L":
        return [decode_leaf(v) for v in data[1]]
    if tag == "E":
        return _ENUMS[data[1]](data[2])
    if tag == "D":
        return _CLASSES[data[1]](*(decode_leaf(v) for v in data[2]))
    raise ValueError(f"unknown leaf tag {tag!r}")


class _Pool:
    def __init__(self):
        self.items: list = []
        self.index: dict = {}

    def add(self, value) -> int:
        try:
            key = (type(value), value)
            found = self.index.get(key)
        except TypeError:   # unhashable: stored once per use
            key, found = None, None
        if found is not None:
            return found
        self.items.append(encode_leaf(value))
        if key is not None:
            self.index[key] = len(self.items) - 1
        return len(self.items) - 1


# ------------------------------------------------------------------ module -> data

def kernel_data(module: Module, fn: Function) -> KernelData:
    """One kernel of a (verified) module as data."""
    pool = _Pool()
    numbers: dict[int, int] = {}    # id(Value) -> its number

    def define(values) -> None:
        for v in values:
            numbers[id(v)] = len(numbers)

    def ref(v) -> int:
        try:
            return numbers[id(v)]
        except KeyError:
            raise ValueError("operand used before its definition") from None

    def operand(v):
        if v is None:
            return None
        if isinstance(v, list):
            return [ref(x) for x in v]
        return ref(v)

    define(fn.body.args)
    ops: list[OpData] = []
    locs: list[int] = [fn.loc]
    stack = [iter(fn.body.ops)]
    while stack:
        op = next(stack[-1], None)
        if op is None:
            stack.pop()
            continue
        regions = []
        for region in op.regions:
            regions.append([BlockData([pool.add(a.type) for a in b.args], len(b.ops)) for b in region.blocks])
        ops.append(OpData(op.name, [operand(op.operands.get(o.name)) for o in op.spec.operands],
                          [pool.add(r.type) for r in op.results],
                          {k: pool.add(v) for k, v in op.attrs.items()}, op.loc, regions))
        locs.append(op.loc)
        define(op.results)
        # nested blocks next, in order; each block's arguments numbered as it is entered
        nested = [b for region in op.regions for b in region.blocks]
        for b in reversed(nested):
            stack.append(_entering(b, define))
    debug, strings = _location_slice(module, locs)
    return KernelData(fn.name, pool.add(fn.type), [pool.add(a.type) for a in fn.body.args], ops,
                      len(fn.body.ops), pool.items, tuple(module.version), fn.flags,
                      -1 if fn.hints is None else pool.add(fn.hints), fn.loc, fn.has_debug, len(module.debug),
                      debug, strings)


def _entering(block: Block, define):
    """The block's ops, its arguments numbered when the walk reaches it (not when it is pushed)."""
    define(block.args)
    yield from block.ops


def _location_slice(module: Module, locs: list[int]) -> tuple[dict, dict]:
    """The debug entries (and strings) a located diagnostic may render from these ids: everything reachable
    from them.  A field may be a line, a string index or another entry's id (call sites, scopes, subprograms,
    compile units, files); each is followed as both -- a few extra entries cost less than a location printed
    without its scope."""
    debug: dict[int, tuple[int, list[int]]] = {}
    strings: dict[int, bytes] = {}
    work = [x for x in set(locs) if 0 < x <= len(module.debug)]
    while work:
        debug_id = work.pop()
        if debug_id in debug:
            continue
        e = module.debug[debug_id - 1]
        debug[debug_id] = (e.tag, list(e.fields))
        for f in e.fields:
            if isinstance(f, int):
                if 0 <= f < len(module.strings):
                    strings[f] = module.strings[f]
                if 0 < f <= len(module.debug) and f not in debug:
                    work.append(f)
    return debug, strings


# ------------------------------------------------------------------ data -> module

_ABSENT = DebugEntry(-1)


def kernel_module(data: KernelData) -> Module:
    """A module holding the one kernel (its debug and string tables sparse: ids unchanged)."""
    leaves = [decode_leaf(x) for x in data.pool]
    body = Block([leaves[i] for i in data.args])
    values: list[Value] = list(body.args)   # by number: definition order, as kernel_data numbered them
    ops = iter(data.ops)
    # [block being filled, ops still to read into it, whether its arguments are numbered yet]
    stack: list[list] = [[body, data.body_ops, True]]
    while stack:
        frame = stack[-1]
        if not frame[2]:   # entering the block: its arguments are defined here, as when encoded
            frame[2] = True
            values.extend(frame[0].args)
        if frame[1] == 0:
            stack.pop()
            continue
        frame[1] -= 1
        d = next(ops)
        spec = opdef(d.name)   # any dialect's op, by the name Operation.name spells
        operands = {}
        for o, v in zip(spec.operands, d.operands):
            operands[o.name] = None if v is None else [values[i] for i in v] if isinstance(v, list) else values[v]
        op = Operation(spec, operands, {k: leaves[i] for k, i in d.attrs.items()}, [leaves[i] for i in d.results],
                       loc=d.loc)
        frame[0].ops.append(op)
        values.extend(op.results)
        nested = []
        for region_data in d.regions:
            region = Region()
            for b in region_data:
                block = Block([leaves[i] for i in b.args])
                region.blocks.append(block)
                nested.append([block, b.ops, False])
            op.regions.append(region)
        stack.extend(reversed(nested))
    fn = Function(data.name, leaves[data.signature], body, data.flags,
                  None if data.hints < 0 else leaves[data.hints], data.loc, data.has_debug)
    debug = [_ABSENT] * data.debug_size
    for debug_id, (tag, fields) in data.debug.items():
        debug[debug_id - 1] = DebugEntry(tag, tuple(fields))
    strings = [b""] * (max(data.strings, default=-1) + 1)
    for index, text in data.strings.items():
        strings[index] = text
    return Module(version=tuple(data.version), functions=[fn], strings=strings, debug=debug)
