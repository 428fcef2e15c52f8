"""cuda_tile types as immutable, hashable values."""
from __future__ import annotations

from dataclasses import dataclass

DYNAMIC = -(1 << 63)  # INT64_MIN marks a dynamic dimension/stride ("?")


class Type:
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class IntType(Type):
    width: int

    def __str__(self) -> str:
        return f"i{self.width}"


@dataclass(frozen=True, slots=True)
class FloatType(Type):
    name: str  # MLIR spelling: f16, bf16, f32, tf32, f64, f8E4M3FN, ...
    width: int

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class TokenType(Type):
    def __str__(self) -> str:
        return "token"


@dataclass(frozen=True, slots=True)
class PointerType(Type):
    pointee: Type
    ptr_attr: int | None = None  # 13.4+: optional pointer attribute byte

    def __str__(self) -> str:
        return f"ptr<{self.pointee}>"


@dataclass(frozen=True, slots=True)
class TileType(Type):
    shape: tuple[int, ...]
    elem: Type

    @property
    def rank(self) -> int:
        return len(self.shape)

    def num_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __str__(self) -> str:
        dims = "".join(f"{d}x" for d in self.shape)
        return f"tile<{dims}{self.elem}>"


@dataclass(frozen=True, slots=True)
class TensorViewType(Type):
    elem: Type
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    ptr_attr: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionViewType(Type):
    tile_shape: tuple[int, ...]
    tensor_view: Type
    dim_map: tuple[int, ...]
    padding: int | None = None  # PaddingValue enum value


@dataclass(frozen=True, slots=True)
class GatherScatterViewType(Type):
    tile_shape: tuple[int, ...]
    tensor_view: Type
    sparse_dim: int
    padding: int | None = None


@dataclass(frozen=True, slots=True)
class StridedViewType(Type):
    tile_shape: tuple[int, ...]
    traversal_strides: tuple[int, ...]
    tensor_view: Type
    dim_map: tuple[int, ...]
    padding: int | None = None


@dataclass(frozen=True, slots=True)
class FunctionType(Type):
    inputs: tuple[Type, ...]
    results: tuple[Type, ...]


VIEW_TYPES = (TensorViewType, PartitionViewType, GatherScatterViewType, StridedViewType)

I1 = IntType(1)
I4 = IntType(4)
I8 = IntType(8)
I16 = IntType(16)
I32 = IntType(32)
I64 = IntType(64)
F16 = FloatType("f16", 16)
BF16 = FloatType("bf16", 16)
F32 = FloatType("f32", 32)
TF32 = FloatType("tf32", 19)
F64 = FloatType("f64", 64)
F8E4M3FN = FloatType("f8E4M3FN", 8)
F8E5M2 = FloatType("f8E5M2", 8)
F8E8M0FNU = FloatType("f8E8M0FNU", 8)
F4E2M1FN = FloatType("f4E2M1FN", 4)
FNV8E5M3FNU = FloatType("fnv8E5M3FNU", 8)
TOKEN = TokenType()


def storage_bytes(t: Type) -> int:
    """Bytes one element takes in a dense constant buffer (tf32 is 3 bytes, i1 is packed)."""
    if isinstance(t, IntType):
        return max(1, (t.width + 7) // 8)
    if isinstance(t, FloatType):
        return (t.width + 7) // 8
    raise TypeError(f"no element storage for {t}")


def is_int(t: Type) -> bool:
    return isinstance(t, IntType)


def is_float(t: Type) -> bool:
    return isinstance(t, FloatType)


def elem_of(t: Type) -> Type:
    return t.elem if isinstance(t, TileType) else t
