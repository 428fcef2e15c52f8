"""In-memory cuda_tile IR: values, operations, blocks, regions, functions and modules."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

from . import cuda_tile  # noqa: F401  (declares the cuda_tile ops, so op names resolve)
from .attrs import DenseElements, OptimizationHintsAttr
from .opdef import OpDef, opdef
from .types import FunctionType, Type


class Value:
    """An SSA value: an op result or a block argument."""

    __slots__ = ("type", "owner", "index")

    def __init__(self, type: Type, owner: "Operation | Block | None" = None, index: int = 0):
        self.type = type
        self.owner = owner
        self.index = index

    def __repr__(self) -> str:
        return f"<Value {self.type} #{self.index}>"


class Block:
    __slots__ = ("args", "ops")

    def __init__(self, arg_types: list[Type] | tuple = (), ops: list["Operation"] | None = None):
        self.args = [Value(t, self, i) for i, t in enumerate(arg_types)]
        self.ops = ops if ops is not None else []

    def walk(self) -> Iterator["Operation"]:
        return _walk_ops(self.ops)


class Region:
    __slots__ = ("blocks",)

    def __init__(self, blocks: list[Block] | None = None):
        self.blocks = blocks if blocks is not None else []

    @property
    def block(self) -> Block:
        return self.blocks[0]


class Operation:
    """One op of any dialect; `spec` is its definition (ir/opdef.py), given as an OpDef or by name.

    `operands` maps each operand name of the op's spec to a Value, None (an
    absent optional operand) or a list of Values (variadic); `attrs` maps
    attribute names to values (enums as IntEnum members, unit attributes as
    bools, absent optional attributes are missing).
    """

    __slots__ = ("spec", "operands", "attrs", "results", "regions", "loc")

    def __init__(self, spec: OpDef | str, operands: dict[str, Any] | None = None,
                 attrs: dict[str, Any] | None = None, result_types: list[Type] | tuple = (),
                 regions: list[Region] | None = None, loc: int = 0):
        self.spec = opdef(spec) if isinstance(spec, str) else spec
        self.operands = operands if operands is not None else {}
        self.attrs = attrs if attrs is not None else {}
        self.results = [Value(t, self, i) for i, t in enumerate(result_types)]
        self.regions = regions if regions is not None else []
        self.loc = loc  # debug attribute id (0 = unknown location)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def result(self) -> Value:
        return self.results[0]

    def operand_values(self) -> list[Value]:
        """All operands, flattened in spec order."""
        out: list[Value] = []
        for o in self.spec.operands:
            v = self.operands.get(o.name)
            if v is None:
                continue
            if isinstance(v, list):
                out.extend(v)
            else:
                out.append(v)
        return out

    def walk(self) -> Iterator["Operation"]:
        """Pre-order: this op, then the ops of its regions (the order locations are consumed in)."""
        return _walk_ops((self,))

    def __repr__(self) -> str:
        return f"<Operation {self.name}>"


def _walk_ops(ops) -> Iterator[Operation]:
    """Pre-order over `ops` and everything nested in them, with an explicit stack: nesting depth is
    the input's to choose, so no traversal may recurse on it."""
    stack = [iter(ops)]
    while stack:
        op = next(stack[-1], None)
        if op is None:
            stack.pop()
            continue
        yield op
        if op.regions:
            stack.append(_region_ops(op))


def _region_ops(op: Operation) -> Iterator[Operation]:
    for region in op.regions:
        for block in region.blocks:
            yield from block.ops


@dataclass
class Function:
    name: bytes
    type: FunctionType
    body: Block
    flags: int = 0b10          # bit 1: kernel entry
    hints: OptimizationHintsAttr | None = None
    loc: int = 0               # debug attribute id of the function itself
    has_debug: bool = True     # whether the function has an entry in the Debug section

    @property
    def is_kernel(self) -> bool:
        return bool(self.flags & 0b10)

    def walk(self) -> Iterator[Operation]:
        return self.body.walk()


@dataclass
class Global:
    name: bytes
    type: Type
    value: DenseElements
    alignment: int = 0
    visibility: int = 0
    constant: bool = False


@dataclass
class DebugEntry:
    """One Debug-section attribute: `tag` and its varint fields (raw bytes kept for unknown tags)."""
    tag: int
    fields: tuple[int, ...] = ()
    raw: bytes = b""


@dataclass
class Module:
    version: tuple[int, int, int] = (13, 4, 0)
    functions: list[Function] = field(default_factory=list)
    globals: list[Global] = field(default_factory=list)
    # Tables in file order.  Ops refer to types/strings/constants by value;
    # the writer re-interns them, keeping these orders so round trips are exact.
    strings: list[bytes] = field(default_factory=list)
    types: list[Type] = field(default_factory=list)
    constants: list[bytes] = field(default_factory=list)
    debug: list[DebugEntry] = field(default_factory=list)

    @property
    def minor(self) -> int:
        return self.version[1]

    def kernel(self, name: str | bytes | None = None) -> Function:
        if name is None:
            if len(self.functions) != 1:
                names = ", ".join(f.name.decode(errors="replace") for f in self.functions)
                raise KeyError(f"module has {len(self.functions)} kernels ({names}); pick one")
            return self.functions[0]
        key = name.encode() if isinstance(name, str) else name
        for f in self.functions:
            if f.name == key:
                return f
        raise KeyError(f"no kernel named {key.decode(errors='replace')}")
