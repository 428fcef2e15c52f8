"""Type helpers for the verifier: MLIR-style type printing for diagnostics,
ODS type constraints (with their exact summaries) and the type-level rules
(tile shapes, tensor/partition views) that NVIDIA's tool checks when a type is
built.

Diagnostics quote a type the way MLIR's ``Diagnostic << Type`` does:
``'!cuda_tile.tile<4x8xf32>'``; nested types drop the dialect prefix
(``!cuda_tile.tile<ptr<f32>>``).
"""
from __future__ import annotations

from . import types as T
from .enums import PaddingValue
from .opdef import TypeConstraint

MAX_TILE_ELEMENTS = 16777216


# ---------------------------------------------------------------------------
# printing
# ---------------------------------------------------------------------------

def _dims(shape) -> str:
    return "".join(("?" if d == T.DYNAMIC else str(d)) + "x" for d in shape)


def _pad(p: int | None) -> str:
    if p is None:
        return ""
    try:
        return f"padding_value = {PaddingValue(p).name}, "
    except ValueError:
        return f"padding_value = {p}, "


def _dim_map(dim_map) -> str:
    if tuple(dim_map) == tuple(range(len(dim_map))):
        return ""
    return ", dim_map=[" + ", ".join(str(d) for d in dim_map) + "]"


def _view_str(p: str, kind: str, t, params: str, tail: str) -> str:
    """A tile view type: its tile, `params` (text ending in ", "), padding, tensor_view, then `tail`."""
    tile = "x".join(str(d) for d in t.tile_shape)
    return f"{p}{kind}<tile=({tile}), {params}{_pad(t.padding)}{type_str(t.tensor_view, True)}{tail}>"


def type_str(t: T.Type, nested: bool = False) -> str:
    """The MLIR spelling of `t`; cuda_tile types get the `!cuda_tile.` prefix unless nested."""
    p = "" if nested else "!cuda_tile."
    if t is None:
        return "<<NULL TYPE>>"
    if isinstance(t, (T.IntType, T.FloatType)):
        return str(t)
    if isinstance(t, T.TokenType):
        return p + "token"
    if isinstance(t, T.PointerType):
        return f"{p}ptr<{type_str(t.pointee, True)}>"
    if isinstance(t, T.TileType):
        return f"{p}tile<{_dims(t.shape)}{type_str(t.elem, True)}>"
    if isinstance(t, T.TensorViewType):
        body = _dims(t.shape) + type_str(t.elem, True)
        if t.shape:
            body += ", strides=[" + ",".join("?" if s == T.DYNAMIC else str(s) for s in t.strides) + "]"
        return f"{p}tensor_view<{body}>"
    if isinstance(t, T.PartitionViewType):
        return _view_str(p, "partition_view", t, "", _dim_map(t.dim_map))
    if isinstance(t, T.StridedViewType):
        strides = ",".join(str(s) for s in t.traversal_strides)
        return _view_str(p, "strided_view", t, f"traversal_strides=[{strides}], ", _dim_map(t.dim_map))
    if isinstance(t, T.GatherScatterViewType):
        return _view_str(p, "gather_scatter_view", t, "", f", sparse_dim={t.sparse_dim}")
    if isinstance(t, T.FunctionType):
        ins = ", ".join(type_str(x) for x in t.inputs)
        outs = ", ".join(type_str(x) for x in t.results)
        return f"({ins}) -> ({outs})" if len(t.results) != 1 else f"({ins}) -> {outs}"
    return str(t)


def q(t: T.Type) -> str:
    """A type as MLIR diagnostics print it: quoted."""
    return f"'{type_str(t)}'"


def qlist(types) -> str:
    """A TypeRange as MLIR diagnostics print it: quoted types joined by ', '."""
    return ", ".join(q(t) for t in types)


def shape_str(shape) -> str:
    """An ArrayRef<int64_t> as MLIR diagnostics print it: '16, 8'."""
    return ", ".join(str(d) for d in shape)


# ---------------------------------------------------------------------------
# element-type classes
# ---------------------------------------------------------------------------

INT_NAMES = ("i1", "i8", "i16", "i32", "i64")
BASE_FLOAT_NAMES = ("f16", "bf16", "f32", "f64")
FLOAT_NAMES = ("f16", "bf16", "f32", "f64", "tf32", "f8E4M3FN", "f8E5M2", "f8E8M0FNU", "f4E2M1FN",
               "fnv8E5M3FNU")
NUMBER_NAMES = INT_NAMES + FLOAT_NAMES


def elem_name(t: T.Type) -> str | None:
    if isinstance(t, (T.IntType, T.FloatType)):
        return str(t)
    if isinstance(t, T.PointerType):
        return "ptr"
    return None


def is_tile(t) -> bool:
    return isinstance(t, T.TileType)


def is_view(t) -> bool:
    """A TileView (partition/strided/gather-scatter view)."""
    return isinstance(t, (T.PartitionViewType, T.StridedViewType, T.GatherScatterViewType))


def is_int(t) -> bool:
    return isinstance(t, T.IntType)


def is_float(t) -> bool:
    return isinstance(t, T.FloatType)


def bit_width(t: T.Type) -> int:
    """getIntOrFloatBitWidth (tf32 counts 19 bits, as in MLIR)."""
    return t.width


# ---------------------------------------------------------------------------
# ODS type constraints
# ---------------------------------------------------------------------------

def _join(names) -> str:
    return " or ".join(names)


def tile_of(names, ranks=None, summary: str | None = None) -> TypeConstraint:
    """CudaTile_TileOf / CudaTile_RankedTileOf: `tile of i1 or i8 values`, `0D tile of ...`."""
    names = tuple(names)
    prefix = summary or ("tile" if ranks is None else "/".join(f"{r}D" for r in ranks) + " tile")
    text = f"{prefix} of {_join(n if n != 'ptr' else 'Pointer type' for n in names)} values"

    def pred(t: T.Type) -> bool:
        return (isinstance(t, T.TileType) and elem_name(t.elem) in names
                and (ranks is None or t.rank in ranks))
    return TypeConstraint(text, pred)


ANY_TILE = TypeConstraint("Tile type", lambda t: isinstance(t, T.TileType))
INT_TILE = tile_of(INT_NAMES)
INT4_TILE = tile_of(INT_NAMES + ("i4",))
I64_TILE = tile_of(("i64",))
I1_TILE = tile_of(("i1",))
I8_TILE = tile_of(("i8",))
BASE_FLOAT_TILE = tile_of(BASE_FLOAT_NAMES)
FLOAT_TILE = tile_of(FLOAT_NAMES)
NUMBER_TILE = tile_of(NUMBER_NAMES)
NUMBER4_TILE = tile_of(NUMBER_NAMES + ("i4",))
PTR_TILE = tile_of(("ptr",))
SCALAR_PTR = tile_of(("ptr",), ranks=(0,))
SCALAR_I1 = tile_of(("i1",), ranks=(0,))
SCALAR_I32 = tile_of(("i32",), ranks=(0,))
SCALAR_INT = tile_of(INT_NAMES, ranks=(0,))
MMAF_OPERAND = tile_of(("f16", "bf16", "f32", "f64", "tf32", "f8E4M3FN", "f8E5M2"), summary="mmaf operand tile type")
MMAF_RESULT = tile_of(("f16", "f32", "f64"), summary="mmaf acc/result tile type")
MMAI_OPERAND = tile_of(("i8",), summary="mmai operand tile type")
MMAI_ACC = tile_of(("i32",), summary="mmai acc tile type")
MMAI_RESULT = tile_of(("i32",), summary="mmai result tile type")
TOKEN = TypeConstraint("cuda tile token type", lambda t: isinstance(t, T.TokenType))
TENSOR_VIEW = TypeConstraint("tensor view type", lambda t: isinstance(t, T.TensorViewType))
PARTITION_VIEW = TypeConstraint("partition view type", lambda t: isinstance(t, T.PartitionViewType))
STRIDED_VIEW = TypeConstraint("strided view type", lambda t: isinstance(t, T.StridedViewType))
GATHER_SCATTER_VIEW = TypeConstraint("gather/scatter view type",
                                     lambda t: isinstance(t, T.GatherScatterViewType))
TILE_VIEW = TypeConstraint("TileView instance", is_view)
ANY = TypeConstraint("any type", lambda t: True)


# ---------------------------------------------------------------------------
# type-level rules (checked by NVIDIA's tool when the type is built)
# ---------------------------------------------------------------------------

def tile_shape_error(shape) -> str | None:
    """verifyTileSize: positive, power-of-two dims, at most 16777216 elements."""
    n = 1
    for d in shape:
        if d <= 0:
            return f"all dimensions must be positive constants, got {shape_str(shape)}"
        if d & (d - 1):
            return f"all dimensions must be powers of two, got {shape_str(shape)}"
        if n > MAX_TILE_ELEMENTS // d:
            return f"tile would exceed the maximum of {MAX_TILE_ELEMENTS} elements"
        n *= d
    return None


def tile_type_error(shape, elem: T.Type) -> str | None:
    if isinstance(elem, T.FloatType) and elem.name == "f4E2M1FN":
        if not shape or all(d % 2 for d in shape):
            return "F4E2M1FN tiles must have an even number of elements"
    return tile_shape_error(shape)


def _dyn(values) -> str:
    return "[" + ", ".join("?" if v == T.DYNAMIC else str(v) for v in values) + "]"


def tensor_view_error(t: T.TensorViewType) -> str | None:
    if len(t.shape) != len(t.strides):
        return (f"expected shape and stride to be of same rank but got shape of rank {len(t.shape)} "
                f"and stride of rank {len(t.strides)}")
    if any(d <= 0 and d != T.DYNAMIC for d in t.shape):
        return f"dimensions must have strictly positive constant sizes but got {_dyn(t.shape)}"
    if any(d <= 0 and d != T.DYNAMIC for d in t.strides):
        return f"dimensions must have strictly positive constant strides but got {_dyn(t.strides)}"
    return None


def _partition_like_error(tile_shape, tv, dim_map, padding) -> str | None:
    if not isinstance(tv, T.TensorViewType):
        return f"expected 'tensor_view' type, but got {q(tv)}"
    if not tile_shape:
        return "0-dimension tile shape is not supported"
    if len(tile_shape) != len(tv.shape):
        return (f"expected tensor_view rank and tile rank to match, got tensor_view of rank "
                f"{len(tv.shape)} and tiles of rank {len(tile_shape)}")
    if len(dim_map) != len(tile_shape):
        return (f"expected dim_map to map exactly all {len(tile_shape)} dimensions of the tile, "
                f"got {len(dim_map)} mappings")
    if any(d <= 0 for d in tile_shape):
        return f"tile shape dimensions must have positive length but got [{shape_str(tile_shape)}]"
    if any(d & (d - 1) for d in tile_shape):
        return f"tile shape dimensions must have power of two length but got [{shape_str(tile_shape)}]"
    used: dict[int, int] = {}
    for tile_dim, tv_dim in enumerate(dim_map):
        if tv_dim < 0:
            return f"target dimension must not be negative, got {tv_dim}"
        if tv_dim >= len(tv.shape):
            return (f"target dimension is outside of tensor view dimensions, expected strictly less "
                    f"than {len(tv.shape)}, got {tv_dim}")
        if tv_dim in used:
            return (f"target dimension {tv_dim} mapped at least twice (for tile dimensions "
                    f"{used[tv_dim]} and {tile_dim})")
        used[tv_dim] = tile_dim
    err = tile_type_error(tuple(tile_shape), tv.elem)
    if err:
        return err
    if padding is not None and padding != PaddingValue.zero and not isinstance(tv.elem, T.FloatType):
        try:
            name = PaddingValue(padding).name
        except ValueError:
            name = str(padding)
        return (f"padding_value {name} can only be used with floating point element types, "
                f"got {q(tv.elem)}")
    return None


def pointee_error(pointee: T.Type) -> str | None:
    """Why `pointee` cannot be a pointer's pointee (None: it can); the bytecode reader checks it too."""
    if elem_name(pointee) in NUMBER_NAMES:
        return None
    # the real tool's order: floats first (tf32 after f64), then the integers
    allowed = ("f16", "bf16", "f32", "tf32", "f64", "f8E4M3FN", "f8E5M2", "f8E8M0FNU", "f4E2M1FN",
               "fnv8E5M3FNU") + INT_NAMES
    return f"failed to verify 'pointeeType': {' or '.join(allowed)}"


def type_error(t: T.Type, _seen=None) -> str | None:
    """The first type-construction error inside `t` (None when `t` is well formed)."""
    if isinstance(t, T.TileType):
        if isinstance(t.elem, T.PointerType):
            err = type_error(t.elem)
            if err:
                return err
        return tile_type_error(t.shape, t.elem)
    if isinstance(t, T.PointerType):
        return pointee_error(t.pointee)
    if isinstance(t, T.TensorViewType):
        return tensor_view_error(t)
    if isinstance(t, T.PartitionViewType):
        return (type_error(t.tensor_view) if isinstance(t.tensor_view, T.TensorViewType) else None) or \
            _partition_like_error(t.tile_shape, t.tensor_view, t.dim_map, t.padding)
    if isinstance(t, T.StridedViewType):
        err = (type_error(t.tensor_view) if isinstance(t.tensor_view, T.TensorViewType) else None) or \
            _partition_like_error(t.tile_shape, t.tensor_view, t.dim_map, t.padding)
        if err:
            return err
        if len(t.tile_shape) != len(t.traversal_strides):
            return f"expected {len(t.tile_shape)} traversal strides, got {len(t.traversal_strides)}"
        if any(s <= 0 for s in t.traversal_strides):
            return (f"traversal strides must be strictly positive but got "
                    f"[{shape_str(t.traversal_strides)}]")
        return None
    if isinstance(t, T.GatherScatterViewType):
        tv = t.tensor_view
        if isinstance(tv, T.TensorViewType):
            err = type_error(tv)
            if err:
                return err
            if not t.tile_shape:
                return "0-dimension tile shape is not supported"
            if len(t.tile_shape) != len(tv.shape):
                return (f"expected tensor_view rank and tile rank to match, got tensor_view of rank "
                        f"{len(tv.shape)} and tiles of rank {len(t.tile_shape)}")
        return None
    if isinstance(t, T.FunctionType):
        for x in (*t.inputs, *t.results):
            err = type_error(x)
            if err:
                return err
    return None


# ---------------------------------------------------------------------------
# view helpers (the TileView interface)
# ---------------------------------------------------------------------------

def view_index_rank(v: T.Type) -> int:
    if isinstance(v, (T.PartitionViewType, T.StridedViewType)):
        return len(v.tile_shape)
    if isinstance(v, T.GatherScatterViewType):
        return len(v.tile_shape)
    return 0


def view_tile_type(v: T.Type) -> T.TileType:
    return T.TileType(tuple(v.tile_shape), v.tensor_view.elem)
