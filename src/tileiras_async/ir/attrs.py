"""cuda_tile attribute values (the self-contained, tagged kinds and the dense payloads)."""
from __future__ import annotations

from dataclasses import dataclass

from .types import Type


class Attr:
    __slots__ = ()


@dataclass(frozen=True, slots=True)
class IntegerAttr(Attr):
    type: Type
    value: int  # raw unsigned bit pattern as stored (masked to the type's width)


@dataclass(frozen=True, slots=True)
class FloatAttr(Attr):
    type: Type
    bits: int  # IEEE bit pattern of the value in `type`


@dataclass(frozen=True, slots=True)
class BoolAttr(Attr):
    value: bool


@dataclass(frozen=True, slots=True)
class TypeAttr(Attr):
    value: Type


@dataclass(frozen=True, slots=True)
class StringAttr(Attr):
    value: bytes


@dataclass(frozen=True, slots=True)
class ArrayAttr(Attr):
    items: tuple[Attr, ...]


@dataclass(frozen=True, slots=True)
class DenseStringAttr(Attr):
    type: Type
    values: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class DivByAttr(Attr):
    divisor: int
    every: int | None = None
    along: int | None = None


@dataclass(frozen=True, slots=True)
class SameElementsAttr(Attr):
    values: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DictAttr(Attr):
    items: tuple[tuple[bytes, Attr], ...]

    def get(self, key: str | bytes, default=None):
        k = key.encode() if isinstance(key, str) else key
        for name, value in self.items:
            if name == k:
                return value
        return default


@dataclass(frozen=True, slots=True)
class OptimizationHintsAttr(Attr):
    """Hints keyed by architecture (sm_100, default, ...), each a DictAttr."""
    items: tuple[tuple[bytes, Attr], ...]


@dataclass(frozen=True, slots=True)
class BoundedAttr(Attr):
    lb: int | None
    ub: int | None


@dataclass(frozen=True, slots=True)
class DenseElements:
    """A dense tile constant: the raw little-endian buffer (one element if splat)."""
    type: Type  # the TileType it is read as
    raw: bytes
