"""Export signatures shared by examples/kernels.py and examples/suite/kernels.py.

Parameter specs follow the ``cutile_python_v1`` calling convention: an array becomes
``(base pointer, shape..., strides...)`` entry parameters, a scalar one parameter, and a
constant disappears into the mangled symbol name.
"""
from __future__ import annotations

from dataclasses import dataclass

import cuda.tile as ct
from cuda.tile.compilation import (ArrayConstraint, CallingConvention, KernelSignature,
                                   ScalarConstraint)

_DT = {
    "bool": ct.bool_, "int8": ct.int8, "int16": ct.int16, "int32": ct.int32, "int64": ct.int64,
    "uint8": ct.uint8, "float16": ct.float16, "bfloat16": ct.bfloat16, "float32": ct.float32,
    "float64": ct.float64, "float8_e4m3fn": ct.float8_e4m3fn, "float8_e5m2": ct.float8_e5m2,
    "float8_e8m0fnu": ct.float8_e8m0fnu,
}


def arr(dtype: str, ndim: int, index: str = "int32"):
    """An array parameter (stride lower bound 0, no aliasing), indexed with `index` integers."""
    return ArrayConstraint(_DT[dtype], ndim, index_dtype=_DT[index], stride_lower_bound_incl=0,
                           alias_groups=(), may_alias_internally=False)


def scal(dtype: str):
    return ScalarConstraint(_DT[dtype])


@dataclass(frozen=True)
class Case:
    name: str            # file stem: <name>.v<ver>.tileirbc (and, for the suite, the key of refs.py)
    kernel: object       # a @ct.kernel
    params: tuple        # one entry per Python parameter: constraint or constant value
    gpu_code: str = "sm_100"

    def signature(self) -> KernelSignature:
        return KernelSignature(list(self.params), CallingConvention.cutile_python_v1())
