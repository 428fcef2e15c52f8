"""Attribute encodings: self-contained (tagged) attributes and the untagged inline op attributes."""
from __future__ import annotations

from typing import Callable

from ..ir import attrs as A
from ..ir import types as T
from ..ir.enums import ENUM_VALUE_SINCE, ENUMS
from ..ir.verify_ops import hints_shape
from .errors import BytecodeError, MalformedConstant
from .wire import ByteReader, encode_intlist, encode_svarint, encode_varint

TAG_INTEGER, TAG_FLOAT, TAG_BOOL, TAG_TYPE, TAG_STRING, TAG_ARRAY = 1, 2, 3, 4, 5, 6
TAG_DENSE_STRING, TAG_DIVBY, TAG_SAME_ELEMENTS, TAG_DICT, TAG_HINTS, TAG_BOUNDED = 7, 8, 9, 10, 11, 12

_UNSUPPORTED_ARRAY_VALUES = {4: (2**31 - 1, -2**31), 8: (2**63 - 1, -2**63)}


class AttrContext:
    """What attribute decoding needs from the module being read."""

    def __init__(self, string: Callable[[int], bytes], type_: Callable[[int], T.Type],
                 constant: Callable[[int], bytes], minor: int | None = None):
        self.string = string
        self.type = type_
        self.constant = constant
        self.minor = minor   # the module's bytecode version 13.<minor> (None: any enum value is accepted)


def _int_width(t: T.Type) -> int:
    return t.width if isinstance(t, (T.IntType, T.FloatType)) else 64


def read_tagged(r: ByteReader, ctx: AttrContext) -> A.Attr:
    full_tag = r.field("failed to read AttributeTag for self-contained attribute.")
    tag = full_tag & 0xFF     # NVIDIA's reader switches on the tag as a byte; its error names the whole value
    if tag == TAG_INTEGER:
        t = _typed(r, ctx, T.IntType, "failed to read valid IntegerType for IntegerAttr")
        return A.IntegerAttr(t, r.varint())
    if tag == TAG_FLOAT:
        t = _typed(r, ctx, T.FloatType, "failed to read valid FloatType for FloatAttr")
        width = _int_width(t)
        if width <= 8:
            return A.FloatAttr(t, r.u8())
        if width <= 64:
            value = r.field("failed to read signed varint for APInt (<= 64 bits).", signed=True)
            if not 0 <= value < 1 << width:     # the bits, taken as an unsigned 64-bit value
                raise r.fail(f"value {value & (1 << 64) - 1} does not fit in {width} bits")
            return A.FloatAttr(t, value)
        raise r.fail(f"unsupported float width {width}")
    if tag == TAG_BOOL:
        return A.BoolAttr(bool(r.u8()))
    if tag == TAG_TYPE:
        try:
            return A.TypeAttr(ctx.type(r.varint()))
        except BytecodeError as e:
            raise e.add_context("failed to get referenced type for TypeAttr", r.offset)
    if tag == TAG_STRING:
        try:
            return A.StringAttr(ctx.string(r.varint()))
        except BytecodeError as e:
            raise e.add_context("failed to read StringAttr.", r.offset)
    if tag == TAG_ARRAY:
        return A.ArrayAttr(read_array(r, ctx))
    if tag == TAG_DENSE_STRING:
        try:
            t = ctx.type(r.varint())
        except BytecodeError as e:
            if e.lines:
                raise
            t = None
        if not isinstance(t, T.TileType):
            raise r.fail("failed to read valid MLIR Type for self-contained DenseElementsAttr")
        return A.DenseStringAttr(t, tuple(ctx.string(r.varint()) for _ in range(r.varint())))
    if tag == TAG_DIVBY:
        divisor = r.varint()
        flags = _parameter_flags(r)   # a varint (NVIDIA's writer never sets a bit that makes it longer than a byte)
        every = r.svarint() if flags & 1 else None
        along = r.svarint() if flags & 2 else None
        no_unused_flags(r, flags, 0b11)
        return A.DivByAttr(divisor, every, along)
    if tag == TAG_SAME_ELEMENTS:
        return A.SameElementsAttr(tuple(r.intlist(8)))
    if tag == TAG_DICT:
        return A.DictAttr(read_dict(r, ctx))
    if tag == TAG_HINTS:
        hints = A.OptimizationHintsAttr(read_dict(r, ctx))
        problem = hints_shape(hints)      # checked as the attribute is built
        if problem:
            raise r.fail(problem)
        return hints
    if tag == TAG_BOUNDED:
        flags = _parameter_flags(r)
        lb = _signed(r, "lb_val") if flags & 1 else None
        ub = _signed(r, "ub_val") if flags & 2 else None
        no_unused_flags(r, flags, 0b11)
        return A.BoundedAttr(lb, ub)
    raise r.fail(f"unsupported AttributeTag {full_tag} for self-contained attribute")


def _parameter_flags(r: ByteReader) -> int:
    return r.field("failed to read optional parameter flags")


def _typed(r: ByteReader, ctx: AttrContext, kind: type, message: str) -> T.Type:
    """The attribute's type, which must be a `kind` (a missing type is no valid one either)."""
    index = r.field(message)
    try:
        t = ctx.type(index)
    except BytecodeError as e:
        if e.lines:
            raise
        t = None
    if not isinstance(t, kind):
        raise r.fail(message)
    return t


def _signed(r: ByteReader, name: str) -> int:
    try:
        return r.svarint(name)
    except BytecodeError:
        raise r.fail(f"failed to read {name}") from None


def no_unused_flags(r: ByteReader, flags: int | None, known: int) -> None:
    """The flags that said which optional parameters (of an attribute or a type) follow may have no other bit
    set (checked, as the real reader does, once the parameters are read); None: the version has no flags."""
    if flags is not None and flags & ~known:
        raise r.fail("unused bits set in optional parameter flags")


def read_array(r: ByteReader, ctx: AttrContext) -> tuple[A.Attr, ...]:
    items = []
    for i in range(r.field("failed to read size for ArrayAttr.")):
        try:
            items.append(read_tagged(r, ctx))
        except BytecodeError as e:
            raise e.add_context(f"failed to parse ArrayAttr element {i}", r.offset)
    return tuple(items)


def read_dict(r: ByteReader, ctx: AttrContext) -> tuple[tuple[bytes, A.Attr], ...]:
    items = []
    seen = set()
    for i in range(r.count("failed to read size for DictionaryAttr")):
        try:
            key = ctx.string(r.varint())
        except BytecodeError as e:
            raise e.add_context(f"failed to read key for DictionaryAttr element {i}", r.offset)
        if not key:
            raise r.fail(f"invalid empty attribute name for DictionaryAttr element {i}")
        if key in seen:
            raise r.fail(f"duplicate attribute name '{key.decode(errors='replace')}' in DictionaryAttr")
        seen.add(key)
        try:
            items.append((key, read_tagged(r, ctx)))
        except BytecodeError as e:
            raise e.add_context(f"failed to parse DictionaryAttr value for key {key.decode(errors='replace')}",
                                r.offset)
    return tuple(items)


def _check_dense_size(raw: bytes, t: T.TileType) -> None:
    """A dense buffer holds one element (a splat) or all of them; i1 tensors are bit-packed."""
    n = t.num_elements()
    prefix = bytearray()
    encode_varint(len(raw), prefix)
    offset = len(prefix) + len(raw)  # the real reader reports the end of the constant's blob
    if isinstance(t.elem, T.IntType) and t.elem.width == 1:
        if len(raw) not in (1, (n + 7) // 8):
            raise BytecodeError(f"i1 dense attribute payload size {len(raw)} is not a recognized encoding "
                                f"for {n} elements", offset)
        return
    size = 3 if t.elem == T.TF32 else max(1, getattr(t.elem, "width", 8) // 8)
    if isinstance(t.elem, T.FloatType) and t.elem.width == 4:
        size = 1  # fp4 values take a byte each in dense buffers
    if not raw or len(raw) not in (size, n * size):
        raise BytecodeError("failed to validate buffer size and format", offset)


def read_dense_array(r: ByteReader, width: int) -> tuple[int, ...]:
    values = r.fixed_list(width, f"failed to read DenseI{8 * width}ArrayAttr values.")
    bad = _UNSUPPORTED_ARRAY_VALUES.get(width, ())
    for v in values:
        if v in bad:
            raise r.fail(f"array contains unsupported value {v}")
    return tuple(values)


def read_inline(r: ByteReader, kind: str, ctx: AttrContext, result_types: list[T.Type]):
    """Decode one untagged op attribute of the given spec kind."""
    if kind == "int":
        v = r.varint()
        if v >= 1 << 32:
            raise r.fail(f"value {v} does not fit in 32 bits")
        return v
    if kind == "bool":
        try:
            return bool(r.u8())
        except BytecodeError:
            raise r.fail("failed to read byte for inline bool (i1)") from None
    if kind == "str":
        try:
            return ctx.string(r.varint())
        except BytecodeError as e:
            raise e.add_context("failed to read StringAttr.", r.offset)
    if kind == "type":
        return ctx.type(r.varint())
    if kind == "dense":
        index = r.field("failed to read constant index")
        try:
            raw = ctx.constant(index)
        except MalformedConstant:
            raise
        except BytecodeError:
            raise r.fail(f"constant index {index} out of bounds") from None
        t = result_types[0] if result_types else None
        if not (isinstance(t, T.TileType) and isinstance(t.elem, (T.IntType, T.FloatType))):
            # the constant's own reader, whose offsets start at 0, needs a tile of numbers
            from ..ir.printer import mlir_type_str
            got = mlir_type_str(t) if isinstance(t, T.TileType) else "<<NULL TYPE>>"
            raise BytecodeError(f"expect Cuda Tile integer or float type but got: '{got}'", 0)
        _check_dense_size(raw, t)
        return A.DenseElements(t, raw)
    if kind == "i32arr":
        return read_dense_array(r, 4)
    if kind == "boolarr":
        return tuple(bool(v) for v in r.fixed_list(1, "failed to read DenseBoolArrayAttr values."))
    if kind == "array":
        return read_array(r, ctx)
    if kind == "hints":
        return A.OptimizationHintsAttr(read_dict(r, ctx))
    if kind == "pred":
        try:
            attr = read_tagged(r, ctx)
        except BytecodeError as e:
            raise e.add_context("failed to parse self-contained attribute for AssumePredicateAttrInterface",
                                r.offset)
        if not isinstance(attr, (A.DivByAttr, A.SameElementsAttr, A.BoundedAttr)):
            raise r.fail("failed to cast parsed attribute to AssumePredicateAttrInterface")
        return attr
    return read_enum(r, ENUMS[kind], ctx.minor)


def read_enum(r: ByteReader, enum_cls: type, minor: int | None):
    """An enum value (op attributes, a type's padding or pointer attribute), refused when unknown or newer
    than the module's version 13.`minor` (None: any known value)."""
    try:
        v = r.varint() & 0xFFFF_FFFF   # the real reader keeps an enum's varint as a uint32_t
    except BytecodeError:
        raise r.fail("failed to read VarInt for enum attribute.") from None
    try:
        value = enum_cls(v)
    except ValueError:
        raise r.fail(f"invalid integer value for enum type: {v}") from None
    since = ENUM_VALUE_SINCE.get((enum_cls, int(value)))
    if since is not None and minor is not None and minor < since:
        raise r.fail(f"enum value {v} is not available in bytecode version 13.{minor}")
    return value


# ---------------------------------------------------------------- writing

class AttrSink:
    """What attribute encoding needs from the module being written."""

    def __init__(self, string: Callable[[bytes], int], type_: Callable[[T.Type], int],
                 constant: Callable[[bytes], int]):
        self.string = string
        self.type = type_
        self.constant = constant


def write_tagged(a: A.Attr, out: bytearray, s: AttrSink) -> None:
    if isinstance(a, A.IntegerAttr):
        encode_varint(TAG_INTEGER, out)
        encode_varint(s.type(a.type), out)
        encode_varint(a.value, out)
    elif isinstance(a, A.FloatAttr):
        encode_varint(TAG_FLOAT, out)
        encode_varint(s.type(a.type), out)
        if _int_width(a.type) <= 8:
            out.append(a.bits)
        else:
            encode_svarint(a.bits, out)
    elif isinstance(a, A.BoolAttr):
        encode_varint(TAG_BOOL, out)
        out.append(int(a.value))
    elif isinstance(a, A.TypeAttr):
        encode_varint(TAG_TYPE, out)
        encode_varint(s.type(a.value), out)
    elif isinstance(a, A.StringAttr):
        encode_varint(TAG_STRING, out)
        encode_varint(s.string(a.value), out)
    elif isinstance(a, A.ArrayAttr):
        encode_varint(TAG_ARRAY, out)
        write_array(a.items, out, s)
    elif isinstance(a, A.DenseStringAttr):
        encode_varint(TAG_DENSE_STRING, out)
        encode_varint(s.type(a.type), out)
        encode_varint(len(a.values), out)
        for v in a.values:
            encode_varint(s.string(v), out)
    elif isinstance(a, A.DivByAttr):
        encode_varint(TAG_DIVBY, out)
        encode_varint(a.divisor, out)
        out.append((a.every is not None) | ((a.along is not None) << 1))
        if a.every is not None:
            encode_svarint(a.every, out)
        if a.along is not None:
            encode_svarint(a.along, out)
    elif isinstance(a, A.SameElementsAttr):
        encode_varint(TAG_SAME_ELEMENTS, out)
        encode_intlist(a.values, 8, out)
    elif isinstance(a, A.DictAttr):
        encode_varint(TAG_DICT, out)
        write_dict(a.items, out, s)
    elif isinstance(a, A.OptimizationHintsAttr):
        encode_varint(TAG_HINTS, out)
        write_dict(a.items, out, s)
    elif isinstance(a, A.BoundedAttr):
        encode_varint(TAG_BOUNDED, out)
        out.append((a.lb is not None) | ((a.ub is not None) << 1))
        if a.lb is not None:
            encode_svarint(a.lb, out)
        if a.ub is not None:
            encode_svarint(a.ub, out)
    else:
        raise TypeError(f"cannot encode attribute {a!r}")


def write_array(items, out: bytearray, s: AttrSink) -> None:
    encode_varint(len(items), out)
    for item in items:
        write_tagged(item, out, s)


def write_dict(items, out: bytearray, s: AttrSink) -> None:
    encode_varint(len(items), out)
    for key, value in items:
        encode_varint(s.string(key), out)
        write_tagged(value, out, s)


def write_inline(value, kind: str, out: bytearray, s: AttrSink) -> None:
    if kind == "int":
        encode_varint(value, out)
    elif kind == "bool":
        out.append(int(bool(value)))
    elif kind == "str":
        encode_varint(s.string(value), out)
    elif kind == "type":
        encode_varint(s.type(value), out)
    elif kind == "dense":
        encode_varint(s.constant(value.raw), out)
    elif kind == "i32arr":
        encode_intlist(value, 4, out)
    elif kind == "boolarr":
        encode_intlist([int(bool(v)) for v in value], 1, out)
    elif kind == "array":
        write_array(value, out, s)
    elif kind == "hints":
        write_dict(value.items, out, s)
    elif kind == "pred":
        write_tagged(value, out, s)
    else:  # enum
        encode_varint(int(value), out)


def require(cond: bool, msg: str) -> None:
    if not cond:
        raise BytecodeError(msg)
