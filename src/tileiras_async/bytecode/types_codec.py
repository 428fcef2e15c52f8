"""Type-table entries: tag numbers, version gates and payload encodings."""
from __future__ import annotations

from math import prod

from ..ir import types as T
from ..ir.verify_types import pointee_error, tensor_view_error
from ..ir.enums import PaddingValue, PointerAttr
from .attrs_codec import no_unused_flags, read_enum
from .errors import BytecodeError
from .wire import ByteReader, encode_intlist, encode_varint

# tag -> (type, since minor, MLIR class spelling used in version diagnostics)
SCALAR_TAGS: dict[int, tuple[T.Type, int, str]] = {
    0: (T.I1, 1, "IntegerType"), 1: (T.I8, 1, "IntegerType"), 2: (T.I16, 1, "IntegerType"),
    3: (T.I32, 1, "IntegerType"), 4: (T.I64, 1, "IntegerType"),
    5: (T.F16, 1, "Float16"), 6: (T.BF16, 1, "BFloat16"), 7: (T.F32, 1, "Float32"),
    8: (T.TF32, 1, "FloatTF32"), 9: (T.F64, 1, "Float64"),
    10: (T.F8E4M3FN, 1, "Float8E4M3FN"), 11: (T.F8E5M2, 1, "Float8E5M2"),
    17: (T.TOKEN, 1, "Token"),
    18: (T.F8E8M0FNU, 2, "Float8E8M0FNU"),
    19: (T.F4E2M1FN, 3, "Float4E2M1FN"),
    22: (T.I4, 3, "IntegerType"),
    130: (T.FNV8E5M3FNU, 4, "FloatNV8E5M3FNU"),
}
TAG_POINTER, TAG_TILE, TAG_TENSOR_VIEW, TAG_PARTITION_VIEW, TAG_FUNCTION = 12, 13, 14, 15, 16
TAG_GATHER_SCATTER_VIEW, TAG_STRIDED_VIEW = 20, 21
COMPOSITE_SINCE = {TAG_GATHER_SCATTER_VIEW: (3, "GatherScatterViewType"),
                   TAG_STRIDED_VIEW: (3, "StridedViewType")}
SCALAR_TAG_OF: dict[T.Type, int] = {t: tag for tag, (t, _, _) in SCALAR_TAGS.items()}

MAX_TILE_ELEMENTS = 16777216
_I32_LIMITS = (2**31 - 1, -2**31)


class RawType(T.Type):
    """A type-table entry that was never needed and does not decode; kept for exact round trips."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes):
        self.raw = raw

    def __eq__(self, other):
        return isinstance(other, RawType) and other.raw == self.raw

    def __hash__(self):
        return hash(("raw", self.raw))


class TypeDecoder:
    """Decodes type-table entries lazily (as the real reader does) with a recursion guard."""

    def __init__(self, entries: list[bytes], minor: int):
        self.entries = entries
        self.minor = minor
        self.cache: dict[int, T.Type] = {}
        self._active: set[int] = set()

    def get(self, index: int) -> T.Type:
        if index in self.cache:
            return self.cache[index]
        if index >= len(self.entries) or self.entries[index] is None:   # missing, or sliced out of bounds
            raise BytecodeError(None)
        if index in self._active:
            raise BytecodeError(None)   # a cycle: reported through the referring types' contexts
        self._active.add(index)
        try:
            t = self._decode(ByteReader(self.entries[index]))
        finally:
            self._active.discard(index)
        self.cache[index] = t
        return t

    def _sub(self, r: ByteReader, field: str) -> T.Type:
        context = f"failed to get {field} type"
        try:
            index = r.varint()
        except BytecodeError:
            raise BytecodeError(None).add_context(context, r.offset) from None
        try:
            return self.get(index)
        except BytecodeError as e:
            raise e.add_context(context, r.offset)

    def _gate(self, since: int, spelling: str) -> None:
        if self.minor < since:
            raise BytecodeError(f"type '{spelling}' requires bytecode version 13.{since}+, "
                                f"file version is 13.{self.minor}")

    def _decode(self, r: ByteReader) -> T.Type:
        tag = r.field(None) & 0xFF     # unreadable: reported through the referencing type's context; NVIDIA's
        # reader keeps the tag as a byte (its high bits are dropped, in the dispatch and in the message alike)
        r.base = -r.pos  # the real reader reports offsets relative to the payload after the tag
        if tag in SCALAR_TAGS:
            t, since, spelling = SCALAR_TAGS[tag]
            self._gate(since, spelling)
            return t
        if tag in COMPOSITE_SINCE:
            self._gate(*COMPOSITE_SINCE[tag])
        decoder = _COMPOSITE_DECODERS.get(tag)
        if decoder is None:
            raise BytecodeError(f"unknown type tag: {tag}")
        return decoder(self, r)

    def _flags(self, r: ByteReader, since: int) -> int | None:
        if self.minor < since:
            return None
        return r.field("failed to read optional parameter flags")

    def _ptr_attr(self, r: ByteReader, flags: int | None) -> int | None:
        """The optional pointer attribute (flag bit 0), an enum; then no other flag bit may be set."""
        attr = int(read_enum(r, PointerAttr, self.minor)) if flags is not None and flags & 1 else None
        no_unused_flags(r, flags, 0b1)
        return attr

    def _pointer(self, r: ByteReader) -> T.Type:
        flags = self._flags(r, 4)
        pointee = self._sub(r, "pointeeType")
        err = pointee_error(pointee)
        if err:  # the real reader rejects a non-number pointee while reading the type table
            raise r.fail(err)
        return T.PointerType(pointee, self._ptr_attr(r, flags))

    def _tile(self, r: ByteReader) -> T.Type:
        elem = self._sub(r, "elementType")
        shape = tuple(r.fixed_list(8, "failed to read concreteShapeCache"))   # the real reader's field name
        if not isinstance(elem, (T.IntType, T.FloatType, T.PointerType)):
            raise r.fail(TILE_ELEMENT_ERROR)
        check_tile_shape(shape, r)
        if elem == T.F4E2M1FN and prod(shape) % 2:
            raise r.fail("F4E2M1FN tiles must have an even number of elements")
        return T.TileType(shape, elem)

    def _tensor_view(self, r: ByteReader) -> T.Type:
        flags = self._flags(r, 4)
        elem = self._sub(r, "elementType")
        shape = tuple(r.fixed_list(8, "failed to read shape"))
        strides = tuple(r.fixed_list(8, "failed to read strides"))
        if len(shape) != len(strides):
            raise r.fail(f"expected shape and stride to be of same rank but got shape of rank "
                         f"{len(shape)} and stride of rank {len(strides)}")
        t = T.TensorViewType(elem, shape, strides, self._ptr_attr(r, flags))
        err = tensor_view_error(t)
        if err:
            raise r.fail(err)
        return t

    def _padding(self, r: ByteReader, flags: int | None, view: T.Type, checked: bool = True) -> int | None:
        """The padding value; `checked`: also that it suits the view's element type."""
        if flags is None:  # before 13.3: explicit has-padding varint
            flags = r.field("failed to read OptionalEnum presence flag")
        pad = int(read_enum(r, PaddingValue, self.minor)) if flags & 1 else None
        no_unused_flags(r, flags, 0b1)
        if checked and pad is not None:
            _check_padding(pad, view, r)
        return pad

    def _tile_shape32(self, r: ByteReader) -> tuple[int, ...]:
        shape = tuple(r.fixed_list(4, "failed to read tile_shape data"))
        for v in shape:
            if v in _I32_LIMITS:
                raise r.fail(f"tile shape contains unsupported value {v}")
        return shape

    def _partition_view(self, r: ByteReader) -> T.Type:
        flags = self._flags(r, 3)
        tile_shape = self._tile_shape32(r)
        tv = self._sub(r, "tensor_view")
        if not isinstance(tv, T.TensorViewType):
            from ..ir.printer import mlir_type_str
            raise r.fail(f"expected ::mlir::cuda_tile::TensorViewType but got '{mlir_type_str(tv)}'")
        dim_map = tuple(r.fixed_list(4, "failed to read dim_map"))
        # the type is checked once all of it is read (the offset is past the padding), the padding last
        pad = self._padding(r, flags, tv, checked=False)
        _check_partition(tile_shape, dim_map, r, tv)
        _check_padding(pad, tv, r)
        return T.PartitionViewType(tile_shape, tv, dim_map, pad)

    def _gather_scatter_view(self, r: ByteReader) -> T.Type:
        flags = r.field("failed to read optional parameter flags")
        tile_shape = self._tile_shape32(r)
        tv = self._sub(r, "tensor_view")
        sparse_dim = r.varint()
        pad = self._padding(r, flags, tv)
        return T.GatherScatterViewType(tile_shape, tv, sparse_dim, pad)

    def _strided_view(self, r: ByteReader) -> T.Type:
        flags = r.field("failed to read optional parameter flags")
        tile_shape = self._tile_shape32(r)
        traversal = tuple(r.fixed_list(4, "failed to read traversal_strides data"))
        tv = self._sub(r, "tensor_view")
        dim_map = tuple(r.fixed_list(4, "failed to read dim_map"))
        pad = self._padding(r, flags, tv)
        return T.StridedViewType(tile_shape, traversal, tv, dim_map, pad)

    def _function(self, r: ByteReader) -> T.Type:
        inputs = tuple(self._sub(r, "parameter") for _ in range(r.field("failed to read number of parameters")))
        results = tuple(self._sub(r, "result") for _ in range(r.field("failed to read number of results")))
        return T.FunctionType(inputs, results)


_COMPOSITE_DECODERS = {
    TAG_POINTER: TypeDecoder._pointer,
    TAG_TILE: TypeDecoder._tile,
    TAG_TENSOR_VIEW: TypeDecoder._tensor_view,
    TAG_PARTITION_VIEW: TypeDecoder._partition_view,
    TAG_GATHER_SCATTER_VIEW: TypeDecoder._gather_scatter_view,
    TAG_STRIDED_VIEW: TypeDecoder._strided_view,
    TAG_FUNCTION: TypeDecoder._function,
}


# the real reader's constraint on a tile's element type, verbatim
TILE_ELEMENT_ERROR = ("failed to verify 'elementType': f16 or bf16 or f32 or tf32 or f64 or f8E4M3FN or f8E5M2 or "
                      "f8E8M0FNU or f4E2M1FN or fnv8E5M3FNU or i1 or i8 or i16 or i32 or i64 or Pointer type or i4 "
                      "or A not-yet-resolved (parametric) dtype usable as an element type")


def _check_padding(pad: int | None, view: T.Type, r: ByteReader) -> None:
    elem = getattr(view, "elem", None)
    if pad and not isinstance(elem, T.FloatType):
        names = ["zero", "neg_zero", "nan", "pos_inf", "neg_inf"]
        raise r.fail(f"padding_value {names[pad]} can only be used with floating point element "
                     f"types, got '{elem}'")


def _check_partition(tile_shape, dim_map, r: ByteReader, tv: T.Type) -> None:
    if any(d <= 0 or d & (d - 1) for d in tile_shape):
        shown = ", ".join(str(d) for d in tile_shape)
        raise r.fail(f"tile shape dimensions must have power of two length but got [{shown}]")
    rank = len(tv.shape) if isinstance(tv, T.TensorViewType) else None
    first_use: dict[int, int] = {}
    for tile_dim, target in enumerate(dim_map):
        if target < 0:
            raise r.fail(f"target dimension must not be negative, got {target}")
        if rank is not None and target >= rank:
            raise r.fail(f"target dimension is outside of tensor view dimensions, expected strictly less than "
                         f"{rank}, got {target}")
        if target in first_use:
            raise r.fail(f"target dimension {target} mapped at least twice (for tile dimensions "
                         f"{first_use[target]} and {tile_dim})")
        first_use[target] = tile_dim


def check_tile_shape(shape, r: ByteReader | None = None) -> None:
    def fail(msg):
        return r.fail(msg) if r is not None else BytecodeError(msg)
    shown = ", ".join(str(d) for d in shape)
    if any(d <= 0 for d in shape):
        raise fail(f"all dimensions must be positive constants, got {shown}")
    if any(d & (d - 1) for d in shape):
        raise fail(f"all dimensions must be powers of two, got {shown}")
    n = 1
    for d in shape:
        n *= d
        if n > MAX_TILE_ELEMENTS:
            raise fail(f"tile would exceed the maximum of {MAX_TILE_ELEMENTS} elements")


def encode_type(t: T.Type, index_of, minor: int) -> bytes:
    """Encode one type-table entry; `index_of(type)` gives (and interns) a component's index."""
    if isinstance(t, RawType):
        return t.raw
    out = bytearray()
    tag = SCALAR_TAG_OF.get(t)
    if tag is not None:
        encode_varint(tag, out)
        return bytes(out)
    if isinstance(t, T.PointerType):
        encode_varint(TAG_POINTER, out)
        if minor >= 4:
            encode_varint(int(t.ptr_attr is not None), out)
        encode_varint(index_of(t.pointee), out)
        if minor >= 4 and t.ptr_attr is not None:
            encode_varint(t.ptr_attr, out)
    elif isinstance(t, T.TileType):
        encode_varint(TAG_TILE, out)
        encode_varint(index_of(t.elem), out)
        encode_intlist(t.shape, 8, out)
    elif isinstance(t, T.TensorViewType):
        encode_varint(TAG_TENSOR_VIEW, out)
        if minor >= 4:
            encode_varint(int(t.ptr_attr is not None), out)
        encode_varint(index_of(t.elem), out)
        encode_intlist(t.shape, 8, out)
        encode_intlist(t.strides, 8, out)
        if minor >= 4 and t.ptr_attr is not None:
            encode_varint(t.ptr_attr, out)
    elif isinstance(t, T.PartitionViewType):
        encode_varint(TAG_PARTITION_VIEW, out)
        has_pad = int(t.padding is not None)
        if minor >= 3:
            encode_varint(has_pad, out)
        encode_intlist(t.tile_shape, 4, out)
        encode_varint(index_of(t.tensor_view), out)
        encode_intlist(t.dim_map, 4, out)
        if minor < 3:
            encode_varint(has_pad, out)
        if has_pad:
            encode_varint(t.padding, out)
    elif isinstance(t, T.GatherScatterViewType):
        encode_varint(TAG_GATHER_SCATTER_VIEW, out)
        encode_varint(int(t.padding is not None), out)
        encode_intlist(t.tile_shape, 4, out)
        encode_varint(index_of(t.tensor_view), out)
        encode_varint(t.sparse_dim, out)
        if t.padding is not None:
            encode_varint(t.padding, out)
    elif isinstance(t, T.StridedViewType):
        encode_varint(TAG_STRIDED_VIEW, out)
        encode_varint(int(t.padding is not None), out)
        encode_intlist(t.tile_shape, 4, out)
        encode_intlist(t.traversal_strides, 4, out)
        encode_varint(index_of(t.tensor_view), out)
        encode_intlist(t.dim_map, 4, out)
        if t.padding is not None:
            encode_varint(t.padding, out)
    elif isinstance(t, T.FunctionType):
        encode_varint(TAG_FUNCTION, out)
        encode_varint(len(t.inputs), out)
        for x in t.inputs:
            encode_varint(index_of(x), out)
        encode_varint(len(t.results), out)
        for x in t.results:
            encode_varint(index_of(x), out)
    else:
        raise TypeError(f"cannot encode type {t!r}")
    return bytes(out)
