"""distribute-add-over-select's identity, checked in IEEE arithmetic (numpy's, round to nearest): where the
mask picks K, (x + 0.0) + K has the bits of x + K for every special x and every K the pass accepts; and its
acceptance test on constants: +0.0 is the zero arm, zeros and subnormals are never K."""
from __future__ import annotations

import numpy as np
import pytest

from tileiras_async.ir import types as T
from tileiras_async.ir.attrs import DenseElements
from tileiras_async.ir.core import Operation
from tileiras_async.tilegpu.passes.distribute_select import _constant_kind


def _specials(dtype) -> np.ndarray:
    info = np.finfo(dtype)
    values = [0.0, -0.0, 1.0, -1.5, info.max, -info.max, info.tiny, -info.tiny, info.smallest_subnormal,
              -info.smallest_subnormal, np.inf, -np.inf, np.nan]
    return np.array(values, dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_sum_of_the_kept_arm_is_the_masked_sum(dtype):
    info = np.finfo(dtype)
    x = _specials(dtype)
    for k in [-np.inf, np.inf, np.nan, 1.0, -3.0, info.max, -info.tiny]:
        kk = dtype(k)
        with np.errstate(all="ignore"):
            want = x + kk
            got = (x + dtype(0.0)) + kk
        assert np.array_equal(np.isnan(want), np.isnan(got))
        keep = ~np.isnan(want)
        assert np.array_equal(want[keep].view(np.uint8), got[keep].view(np.uint8)), k


def test_a_zero_k_would_not_be_exact():
    """Why zeros are no K: -0 + -0 is -0, (-0 + 0) + -0 is +0."""
    x = np.float32(-0.0)
    assert np.signbit(x + np.float32(-0.0)) and not np.signbit((x + np.float32(0.0)) + np.float32(-0.0))


def _constant(value: float, dtype=np.float32, elem=T.F32):
    tile = T.TileType((), elem)
    raw = np.array([value], dtype=dtype).tobytes()
    return Operation("constant", {}, {"value": DenseElements(tile, raw)}, [tile]).results[0]


@pytest.mark.parametrize("value, kind", [
    (0.0, "zero"), (-0.0, None), (-np.inf, "nonzero"), (np.nan, "nonzero"), (2.5, "nonzero"),
    (np.finfo(np.float32).smallest_subnormal, None), (np.finfo(np.float32).tiny, "nonzero"),
])
def test_constant_kinds(value, kind):
    assert _constant_kind(_constant(value)) == kind
