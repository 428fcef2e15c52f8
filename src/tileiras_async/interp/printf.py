"""`print_tko` output, formatted like the device printf of a tile kernel.

Each conversion specification (``%[flags][width][.precision][length]conv``)
consumes one tile operand.  A 0-d tile prints as one value; a tile of rank >= 1
prints as nested brackets with ``, `` between elements (``[1, 2, 3]``,
``[[6], [22]]``), every element formatted with the specification, as cuTile's
``ct.printf`` does.  Integers print signed for ``%d``/``%i`` (i1 as 0/1) and unsigned in
their element width for ``%u %x %X %o``; f16/bf16 are promoted to double.
"""
from __future__ import annotations

import math
import re

import numpy as np

from ..ir import types as T
from . import numerics as N

_SPEC = re.compile(r"%([-+ #0]*)(\d+)?(?:\.(\d*))?(hh|h|ll|l|j|z|t|L|q)?([diouxXeEfFgGaAcsp%])")


def _hexfloat(x: float, upper: bool, prec: str | None, flags: str) -> str:
    if math.isnan(x) or math.isinf(x):
        s = ("-" if x < 0 or (math.isnan(x) and math.copysign(1, x) < 0) else "") + \
            ("nan" if math.isnan(x) else "inf")
    else:
        h = float(x).hex()  # '-0x1.8000000000000p+1'
        sign = "-" if h.startswith("-") else ""
        h = h.lstrip("-")
        mant, exp = h[2:].split("p")
        if "." in mant:
            lead, frac = mant.split(".")
        else:
            lead, frac = mant, ""
        if prec is None:
            frac = frac.rstrip("0")
        else:
            p = int(prec or 0)
            frac = (frac + "0" * p)[:p]
        body = lead + ("." + frac if frac or "#" in flags else "")
        s = f"{sign}0x{body}p{int(exp):+d}"
        if sign == "" and "+" in flags:
            s = "+" + s
        elif sign == "" and " " in flags:
            s = " " + s
    return s.upper() if upper else s


def _one(value, elem: T.Type, flags: str, width: str | None, prec: str | None, conv: str) -> str:
    spec = "%" + flags + (width or "") + ("." + prec if prec is not None else "")
    is_int = isinstance(elem, T.IntType)
    if conv in "di":
        if is_int:  # i1 prints 0 / 1 (cuTile bools), wider integers as signed numbers
            v = int(N.as_signed(np.asarray(value), elem.width)) if elem.width > 1 else int(bool(value))
        else:
            v = int(np.trunc(float(value))) if np.isfinite(float(value)) else 0
        return (spec + "d") % v
    if conv in "uoxX":
        if is_int:
            v = int(N.as_unsigned(np.asarray(value), elem.width))
        else:
            f = float(value)
            v = int(np.trunc(f)) & ((1 << 64) - 1) if np.isfinite(f) else 0
        return (spec + ("d" if conv == "u" else conv)) % v
    if conv == "c":
        return (spec + "c") % chr(int(np.asarray(value).astype(np.int64)) & 0xFF)
    if conv == "p":
        return (spec + "s") % hex(int(np.asarray(value).astype(np.uint64)))
    if conv == "s":
        return (spec + "s") % str(value)
    # floating conversions
    f = float(N.as_signed(np.asarray(value), elem.width) if elem.width > 1 else bool(value)) if is_int \
        else float(value)
    if conv in "aA":
        s = _hexfloat(f, conv == "A", prec, flags)
        w = int(width) if width else 0
        return s.ljust(w) if "-" in flags else s.rjust(w)
    if math.isnan(f) and math.copysign(1.0, f) < 0:
        s = "-nan" if conv.islower() else "-NAN"
        w = int(width) if width else 0
        return s.ljust(w) if "-" in flags else s.rjust(w)
    return (spec + conv) % f


def _tile(arr: np.ndarray, elem: T.Type, parts) -> str:
    if arr.ndim == 0:
        return _one(arr[()], elem, *parts)
    return "[" + ", ".join(_tile(arr[i], elem, parts) for i in range(arr.shape[0])) + "]"


def format_print(fmt: str, args: list[tuple[np.ndarray, T.Type]]) -> str:
    out = []
    pos = 0
    k = 0
    for m in _SPEC.finditer(fmt):
        out.append(fmt[pos:m.start()])
        pos = m.end()
        flags, width, prec, _length, conv = m.groups()
        if conv == "%":
            out.append("%")
            continue
        if k >= len(args):
            out.append(m.group(0))
            continue
        arr, elem = args[k]
        k += 1
        out.append(_tile(np.asarray(arr), elem, (flags, width, prec, conv)))
    out.append(fmt[pos:])
    return "".join(out)
