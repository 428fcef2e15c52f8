"""cuda_tile enumerations; member names are the textual spellings, values the bytecode encodings."""
from __future__ import annotations

import enum


class Signedness(enum.IntEnum):
    unsigned = 0
    signed = 1


class IntegerOverflow(enum.IntEnum):
    none = 0
    no_signed_wrap = 1
    no_unsigned_wrap = 2
    no_wrap = 3


class RoundingMode(enum.IntEnum):
    nearest_even = 0
    zero = 1
    negative_inf = 2
    positive_inf = 3
    approx = 4
    full = 5
    nearest_int_to_zero = 6
    nearest_away = 7  # 13.4+ (ENUM_VALUE_SINCE)


class ComparisonOrdering(enum.IntEnum):
    unordered = 0
    ordered = 1


class ComparisonPredicate(enum.IntEnum):
    equal = 0
    not_equal = 1
    less_than = 2
    less_than_or_equal = 3
    greater_than = 4
    greater_than_or_equal = 5


class AtomicRMWMode(enum.IntEnum):
    and_ = 0
    or_ = 1
    xor = 2
    add = 3
    addf = 4
    max = 5
    min = 6
    umax = 7
    umin = 8
    xchg = 9

    @property
    def spelling(self) -> str:
        return self.name.rstrip("_")


class MemoryOrderingSemantics(enum.IntEnum):
    weak = 0
    relaxed = 1
    acquire = 2
    release = 3
    acq_rel = 4


class MemoryScope(enum.IntEnum):
    tl_blk = 0
    device = 1
    sys = 2


class PaddingValue(enum.IntEnum):
    zero = 0
    neg_zero = 1
    nan = 2
    pos_inf = 3
    neg_inf = 4


class PointerAttr(enum.IntEnum):
    """A pointer's (and a tensor_view's) #cuda_tile.ptr_attr: a 13.4 module may carry only `none`."""
    none = 0
    unicast = 1
    multicast = 2


class SymbolVisibility(enum.IntEnum):
    public = 0
    private = 1


# enum values newer than the first bytecode version: member -> the minor version (13.x) that introduced it.
# NVIDIA's reader refuses such a value in an older module ("enum value 7 is not available in bytecode
# version 13.3"), so ours does too.
# keyed by (enum class, value): IntEnum members of different enums with the same number compare equal
ENUM_VALUE_SINCE: dict[tuple[type, int], int] = {(RoundingMode, RoundingMode.nearest_away.value): 4,
                                                  (PointerAttr, PointerAttr.unicast.value): 5,
                                                  (PointerAttr, PointerAttr.multicast.value): 5}

ENUMS: dict[str, type[enum.IntEnum]] = {
    cls.__name__: cls
    for cls in (Signedness, IntegerOverflow, RoundingMode, ComparisonOrdering, ComparisonPredicate,
                AtomicRMWMode, MemoryOrderingSemantics, MemoryScope, PaddingValue, SymbolVisibility)
}


def spelling(value: enum.IntEnum) -> str:
    return getattr(value, "spelling", value.name)
