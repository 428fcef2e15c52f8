"""Print cuda_tile IR exactly as NVIDIA's ``tileirdisasm`` 13.5 does.

The per-op syntax lives in the `format` of each op's declaration
(``ir/cuda_tile.py``); this module is a generic interpreter of it, plus the
MLIR machinery every op shares: SSA value naming (``SSANameState``), type and
attribute spellings, float formatting (``APFloat::toString``) and regions.

Format column mini-language
===========================

Leading tokens name things (MLIR's ``OpAsmOpInterface``)::

    %a,b,c    results 0, 1, 2 are named a, b, c (only those that exist)
    %@fn      result names come from NAMERS[fn] (constant, assume)
    %-        the op implements OpAsmOpInterface but names no results
    ^fn       block arguments of its regions are named by ARG_NAMERS[fn]
    =word     print the op under this mnemonic instead of the table's
    +type     an op read from bytecode that predates its single result (of
              this type) still has it, as the 13.5 reader adds it
    !fn       the whole op is printed by CUSTOM_PRINTERS[fn] (no template)

Ops with a ``%`` token are "OpAsmOpInterface" ops, which matters for the
``assume_<producer name>`` hint.  The rest of the column is a template of
whitespace-separated elements, spaced by MLIR's OpFormatGen rules (a space
goes before a variable unless it follows ``[``-like punctuation or a glue;
before a literal unless the punctuation forbids it)::

    $x         operand x (one, optional or comma-separated variadic) or
               attribute x; ``$x=d`` declares its default value d
    word       a literal keyword or punctuation:  , : -> = [ ] ( ) dim ...
    ~          MLIR's `` (no space before the next element)
    _          MLIR's ` ` (a forced space)
    [[ ... ]]  optional group, printed iff its anchor (the element suffixed
               ``^``) is present: an operand given, a unit attribute set, an
               attribute present and not its default, a directive non-empty
    name(a,b)  a directive from DIRECTIVES: type(...) prints types; the others
               are the dialect's custom<...> printers (regions, signatures)
    attrs      MLIR's attr-dict (every attribute is in the format, so it only
               affects spacing)

``$results`` means all results.  Optional groups that are not printed still
advance the spacing state as their elements would have, exactly like MLIR's
generated printers.

Locations (``tileirdisasm -g``)
===============================

With ``debug_info=True`` every op (globals, entries and the ops in them) ends
in `` loc(#locN)`` and the alias definitions follow the module, as MLIR's
AsmPrinter writes deferred aliases.  The Debug-section entries become uniqued
attributes (``_DebugAttrs``: equal content is one attribute, one alias); the
alias table is MLIR's ``AliasInitializer``: attributes are recorded in the
order the printer meets them (an op's location before its body, an attribute
before its parameters), each gets a depth (0 without aliased parameters, else
one more than its deepest parameter), and the table is stable-sorted by
(depth, alias name) and numbered per name: ``#loc``, ``#loc1``, ...  Location
attributes (unknown, file:line:col, call sites, ``di_loc``) are all named
``loc``; the scopes are ``di_file``, ``di_compile_unit``, ``di_subprogram``
and ``di_lexical_block``.  The printer runs twice, like MLIR's dummy alias
printing pass: first to record, then to print with the final names.
"""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Callable

from . import attrs as A
from . import types as T
from .core import Block, Function, Global, Module, Operation, Region, Value
from .debuginfo import TAG_CALLSITE, TAG_COMPILE_UNIT, TAG_FILE, TAG_LEXICAL_BLOCK, TAG_LOC, TAG_SUBPROGRAM
from .enums import (ComparisonOrdering, ComparisonPredicate, IntegerOverflow, PaddingValue, PointerAttr,
                    RoundingMode, Signedness, SymbolVisibility, spelling)
from .opdef import OpDef

if TYPE_CHECKING:
    from fractions import Fraction   # imported where floats are printed: the verifier loads this module for
                                     # every kernel with debug information, and fractions costs ~2 ms

INDENT = 2
UNKNOWN_VALUE = "<<UNKNOWN SSA VALUE>>"  # MLIR's spelling for a value it cannot name


# ===================================================================== floats

class _FloatFormat:
    """Bit layout and APFloat semantics of one float type."""

    def __init__(self, exp_bits, mant_bits, bias, signed=True, nonfinite="ieee", denormals=True):
        self.exp_bits, self.mant_bits, self.bias = exp_bits, mant_bits, bias
        self.signed, self.nonfinite, self.denormals = signed, nonfinite, denormals
        self.precision = mant_bits + 1
        self.width = exp_bits + mant_bits + int(signed)
        self.emin = 1 - bias if denormals else -bias

    def decode(self, bits: int):
        """→ (kind, negative, significand, exponent): value = sig * 2**(exponent - precision + 1)."""
        mant = bits & ((1 << self.mant_bits) - 1)
        e = (bits >> self.mant_bits) & ((1 << self.exp_bits) - 1)
        neg = self.signed and bool(bits >> (self.width - 1) & 1)
        top = (1 << self.exp_bits) - 1
        if self.nonfinite == "ieee" and e == top:
            return ("inf" if mant == 0 else "nan"), neg, 0, 0
        if self.nonfinite == "nan" and e == top and mant == (1 << self.mant_bits) - 1:
            return "nan", neg, 0, 0
        if e == 0 and self.denormals:
            return ("zero" if mant == 0 else "normal"), neg, mant, self.emin
        return "normal", neg, mant | (1 << self.mant_bits), e - self.bias


FLOAT_FORMATS = {
    "f16": _FloatFormat(5, 10, 15), "bf16": _FloatFormat(8, 7, 127),
    "f32": _FloatFormat(8, 23, 127), "tf32": _FloatFormat(8, 10, 127),
    "f64": _FloatFormat(11, 52, 1023),
    "f8E4M3FN": _FloatFormat(4, 3, 7, nonfinite="nan"), "f8E5M2": _FloatFormat(5, 2, 15),
    "f8E8M0FNU": _FloatFormat(8, 0, 127, signed=False, nonfinite="nan", denormals=False),
    "f4E2M1FN": _FloatFormat(2, 1, 1, nonfinite="none"),
    "fnv8E5M3FNU": _FloatFormat(5, 3, 15, signed=False, nonfinite="nan"),
}


def _round_digits(buf: list[int], exp: int, prec: int) -> tuple[list[int], int]:
    """APFloat's decimal AdjustToPrecision (round half up); `buf` is least significant first."""
    n = len(buf)
    if n <= prec:
        return buf, exp
    first = n - prec
    if buf[first - 1] < 5:
        while first < n and buf[first] == 0:
            first += 1
        return buf[first:], exp + first
    for i in range(first, n):
        if buf[i] == 9:
            first += 1
        else:
            buf[i] += 1
            break
    if first == n:
        return [1], exp + first
    return buf[first:], exp + first


def _decimal_digits(sig: int, exp2: int, prec: int) -> tuple[list[int], int]:
    """Digits (least significant first) and power of ten of sig * 2**exp2, as APFloat computes them."""
    tz = (sig & -sig).bit_length() - 1
    sig >>= tz
    exp = exp2 + tz
    if exp > 0:
        sig, exp = sig << exp, 0
    elif exp < 0:
        sig *= 5 ** -exp  # N * 2^-e == N * 5^e * 10^-e
    bits_required = (prec * 196 + 58) // 59
    if sig.bit_length() > bits_required:  # truncate (not round) surplus digits first
        tens = (sig.bit_length() - bits_required) * 59 // 196
        if tens:
            exp += tens
            sig //= 10 ** tens
    buf: list[int] = []
    while sig:
        sig, d = divmod(sig, 10)
        if buf or d:
            buf.append(d)
        else:
            exp += 1
    return _round_digits(buf, exp, prec)


def _format_digits(buf: list[int], exp: int, prec: int, max_pad: int, truncate_zero: bool) -> str:
    nd = len(buf)
    if not max_pad:
        scientific = True
    elif exp >= 0:
        scientific = exp > max_pad or nd + exp > prec
    else:
        msd = exp + nd - 1
        scientific = msd < 0 and -msd > max_pad
    digits = "".join(str(d) for d in reversed(buf))
    if scientific:
        e = exp + nd - 1
        mant = digits[0] + "." + ("0" if nd == 1 and truncate_zero else digits[1:])
        if not truncate_zero and prec > nd - 1:
            mant += "0" * (prec - nd + 1)
        es = str(abs(e)).rjust(1 if truncate_zero else 2, "0")
        return f"{mant}{'E' if truncate_zero else 'e'}{'+' if e >= 0 else '-'}{es}"
    if exp >= 0:
        return digits + "0" * exp
    whole = exp + nd
    if whole > 0:
        return digits[:whole] + "." + digits[whole:]
    return "0." + "0" * -whole + digits


def apfloat_to_string(fmt: _FloatFormat, bits: int, prec: int = 0, max_pad: int = 3,
                      truncate_zero: bool = True) -> str:
    """llvm::APFloat::toString for a finite value."""
    kind, neg, sig, exponent = fmt.decode(bits)
    sign = "-" if neg else ""
    if kind == "zero":
        if max_pad:
            return sign + "0"
        if truncate_zero:
            return sign + "0.0E+0"
        return sign + "0.0" + "0" * max(prec - 1, 0) + "e+00"
    if not prec:
        prec = 2 + fmt.precision * 59 // 196
    buf, exp = _decimal_digits(sig, exponent - fmt.precision + 1, prec)
    return sign + _format_digits(buf, exp, prec, max_pad, truncate_zero)


def _value(fmt: _FloatFormat, bits: int) -> Fraction:
    from fractions import Fraction
    _, neg, sig, exponent = fmt.decode(bits)
    v = Fraction(sig) * Fraction(2) ** (exponent - fmt.precision + 1)
    return -v if neg else v


def _round_to_format(fmt: _FloatFormat, x: Fraction) -> Fraction:
    """Nearest value of the format (ties to even), ignoring overflow."""
    from fractions import Fraction
    if x == 0:
        return x
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if x < Fraction(2) ** e:
        e -= 1
    if fmt.denormals:
        e = max(e, fmt.emin)
    q = Fraction(2) ** (e - fmt.precision + 1)
    m = round(x / q)  # Python rounds half to even
    return m * q


def _round_trips(fmt: _FloatFormat, bits: int, text: str) -> bool:
    from fractions import Fraction
    exact = _value(fmt, bits)
    parsed = Fraction(text)
    return _round_to_format(fmt, abs(parsed)) == abs(exact)


def format_float(type_name: str, bits: int) -> tuple[str, bool]:
    """MLIR's printFloatValue → (text, printed as hex)."""
    fmt = FLOAT_FORMATS.get(type_name)
    if fmt is None:  # a float attribute with a non-float type, only in unverified IR
        return f"0x{bits & (1 << 64) - 1:X}", True
    bits &= (1 << fmt.width) - 1
    if fmt.decode(bits)[0] in ("normal", "zero"):
        text = apfloat_to_string(fmt, bits, 6, 0, False)
        if _round_trips(fmt, bits, text):
            return text, False
        text = apfloat_to_string(fmt, bits)
        if "." in text:
            return text, False
    return f"0x{bits:X}", True


def float_is_nan(type_name: str, bits: int) -> bool:
    return FLOAT_FORMATS[type_name].decode(bits)[0] == "nan"


def float_exact_u64(type_name: str, bits: int) -> int | None:
    """APFloat::convertToInteger(64-bit unsigned, toward zero) when exact, else None."""
    fmt = FLOAT_FORMATS[type_name]
    kind, neg, _, _ = fmt.decode(bits)
    if kind not in ("normal", "zero") or neg:
        return None
    v = _value(fmt, bits)
    if v.denominator != 1 or v >= 1 << 64:
        return None
    return int(v)


# ====================================================================== types



def ptr_attr_name(value: int) -> str:
    return PointerAttr(value).name


def _dims(shape) -> str:
    return "".join(("?" if d == T.DYNAMIC else str(d)) + "x" for d in shape)


def _view_tail(t) -> str:
    pad = "" if t.padding is None else f"padding_value = {spelling(PaddingValue(t.padding))}, "
    return pad + type_str(t.tensor_view)


def _dim_map(dim_map) -> str:
    if list(dim_map) == list(range(len(dim_map))):
        return ""
    return ", dim_map=[" + ", ".join(map(str, dim_map)) + "]"


def _tensor_view_str(t: T.TensorViewType) -> str:
    s = "tensor_view<" + _dims(t.shape) + type_str(t.elem)
    if t.shape:
        s += ", strides=[" + ",".join("?" if d == T.DYNAMIC else str(d) for d in t.strides) + "]"
    if t.ptr_attr is not None:
        s += f", #cuda_tile.ptr_attr<{ptr_attr_name(t.ptr_attr)}>"
    return s + ">"


def mlir_type_str(t: T.Type) -> str:
    """A type as MLIR prints it in a diagnostic: builtin types bare, cuda_tile's with the dialect."""
    if isinstance(t, (T.IntType, T.FloatType, T.FunctionType)):
        return type_str(t)
    return "!cuda_tile." + type_str(t)


def type_str(t: T.Type) -> str:
    """The cuda_tile spelling of a type (dialect prefix stripped, as printCudaTileType does)."""
    if isinstance(t, T.TileType):
        return "tile<" + _dims(t.shape) + type_str(t.elem) + ">"
    if isinstance(t, T.PointerType):
        attr = "" if t.ptr_attr is None else f", <{ptr_attr_name(t.ptr_attr)}>"
        return f"ptr<{type_str(t.pointee)}{attr}>"
    if isinstance(t, T.TensorViewType):
        return _tensor_view_str(t)
    if isinstance(t, T.PartitionViewType):
        tile = "x".join(map(str, t.tile_shape))
        return f"partition_view<tile=({tile}), {_view_tail(t)}{_dim_map(t.dim_map)}>"
    if isinstance(t, T.StridedViewType):
        tile = "x".join(map(str, t.tile_shape))
        strides = ",".join(map(str, t.traversal_strides))
        return (f"strided_view<tile=({tile}), traversal_strides=[{strides}], "
                f"{_view_tail(t)}{_dim_map(t.dim_map)}>")
    if isinstance(t, T.GatherScatterViewType):
        tile = "x".join(map(str, t.tile_shape))
        return f"gather_scatter_view<tile=({tile}), {_view_tail(t)}, sparse_dim={t.sparse_dim}>"
    if isinstance(t, T.FunctionType):
        return "(" + ", ".join(map(type_str, t.inputs)) + ") -> (" + ", ".join(map(type_str, t.results)) + ")"
    return str(t)


def types_str(ts) -> str:
    return ", ".join(type_str(t) for t in ts)


# ================================================================= attributes

def escape_string(data: bytes) -> str:
    """llvm::printEscapedString."""
    out = []
    for c in data:
        if c == 0x5C:
            out.append("\\\\")
        elif 0x20 <= c < 0x7F and c != 0x22:
            out.append(chr(c))
        else:
            out.append(f"\\{c:02X}")
    return "".join(out)


def _is_bare_identifier(name: bytes) -> bool:
    if not name or not (chr(name[0]).isalpha() or name[0] == 0x5F) or name[0] > 0x7F:
        return False
    return all(c < 0x80 and (chr(c).isalnum() or c in b"_$.") for c in name[1:])


def symbol_str(name: bytes) -> str:
    if _is_bare_identifier(name):
        return "@" + name.decode()
    return '@"' + escape_string(name) + '"'


_RAW_NEWLINE = "\ud801"   # a newline written verbatim inside an op (see _dedent_module_body)


def raw_text(data: bytes) -> str:
    """Bytes MLIR writes verbatim (dictionary keys); undecodable bytes survive as surrogates, and a
    newline is marked so print_module can lay out the lines it starts as tileirdisasm does."""
    return data.decode("utf-8", "surrogateescape").replace("\n", _RAW_NEWLINE)


def _dedent_module_body(body: str) -> str:
    """tileirdisasm prints the module's ops indented by 2 and removes the indentation all of its
    lines share.  A line that a verbatim newline starts has no indentation of its own, so then
    less (or nothing) is removed and every op line keeps the rest."""
    if _RAW_NEWLINE not in body:
        return body
    continued = [seg for line in body.split("\n") for seg in line.split(_RAW_NEWLINE)[1:]]
    shared = min([2] + [len(seg) - len(seg.lstrip(" ")) for seg in continued if seg.strip()])
    out = []
    for line in body.split("\n"):
        first, *rest = line.split(_RAW_NEWLINE)
        out.append("\n".join([" " * (2 - shared) + first if first else first] + [seg[shared:] for seg in rest]))
    return "\n".join(out)


def _signed(value: int, width: int) -> int:
    value &= (1 << width) - 1
    return value - (1 << width) if width > 1 and value >> (width - 1) else value


def _int_attr_str(a: A.IntegerAttr, elide_i64: bool) -> str:
    width = getattr(a.type, "width", 64)
    if width == 1:
        return "true" if a.value & 1 else "false"  # i1 always elides its type
    text = str(_signed(a.value, width))
    return text if elide_i64 and width == 64 else f"{text} : {type_str(a.type)}"


def _float_attr_str(a: A.FloatAttr, elide_f64: bool) -> str:
    text, hexed = format_float(getattr(a.type, "name", ""), a.bits)
    return text if elide_f64 and getattr(a.type, "name", "") == "f64" and not hexed else f"{text} : {type_str(a.type)}"


def attr_str(a, elide: str = "never") -> str:
    """AsmPrinter::printAttribute; `elide` is MLIR's AttrTypeElision (never/may/must)."""
    if isinstance(a, A.IntegerAttr):
        if elide == "must" and getattr(a.type, "width", 64) != 1:
            return str(_signed(a.value, getattr(a.type, "width", 64)))
        return _int_attr_str(a, elide == "may")
    if isinstance(a, A.FloatAttr):
        return format_float(getattr(a.type, "name", ""), a.bits)[0] if elide == "must" else _float_attr_str(a, elide == "may")
    if isinstance(a, A.BoolAttr):
        return "true" if a.value else "false"
    if isinstance(a, A.StringAttr):
        return '"' + escape_string(a.value) + '"'
    if isinstance(a, A.TypeAttr):
        return type_str(a.value)
    if isinstance(a, A.ArrayAttr):
        return "[" + ", ".join(attr_str(x, "may") for x in a.items) + "]"
    if isinstance(a, (A.DivByAttr, A.SameElementsAttr, A.BoundedAttr)):
        return predicate_str(a)
    if isinstance(a, A.OptimizationHintsAttr):
        return hints_str(a)
    if isinstance(a, A.DictAttr):
        return "{" + ", ".join(f"{raw_text(k)} = {attr_str(v, 'must')}" for k, v in _sorted(a.items)) + "}"
    raise TypeError(f"cannot print attribute {a!r}")


def _sorted(items):
    return sorted(items, key=lambda kv: kv[0])  # DictionaryAttr keeps its entries sorted by name


def hints_str(h: A.OptimizationHintsAttr) -> str:
    arches = []
    for arch, d in _sorted(h.items):
        if not isinstance(d, A.DictAttr):  # unverified IR
            arches.append(f"{raw_text(arch)} = {attr_str(d)}")
            continue
        entries = ", ".join(f"{raw_text(k)} = {attr_str(v, 'must')}" for k, v in _sorted(d.items))
        arches.append(f"{raw_text(arch)} = {{{entries}}}")
    return "<" + ", ".join(arches) + ">"


def diagnostic_attr_str(a) -> str:
    """An attribute as MLIR prints one in a diagnostic: cuda_tile's with their `#cuda_tile.` prefix."""
    if isinstance(a, (A.DivByAttr, A.SameElementsAttr, A.BoundedAttr)):
        return "#cuda_tile." + predicate_str(a)
    if isinstance(a, A.OptimizationHintsAttr):
        return "#cuda_tile.optimization_hints" + hints_str(a)
    return attr_str(a)


def predicate_str(p) -> str:
    """custom<AssumePredicate>: the attribute without its #cuda_tile. prefix."""
    if isinstance(p, A.DivByAttr):
        # an `every` read without its `along` prints along 0, as the real printer does
        tail = "" if p.every is None else f", every {p.every} along {p.along or 0}"
        return f"div_by<{p.divisor}{tail}>"
    if isinstance(p, A.SameElementsAttr):
        return "same_elements<[" + ", ".join(map(str, p.values)) + "]>"
    if isinstance(p, A.BoundedAttr):
        lb = "?" if p.lb is None else str(p.lb)
        ub = "?" if p.ub is None else str(p.ub)
        return f"bounded<{lb}, {ub}>"
    return attr_str(p)  # not a predicate: unverified IR


# ------------------------------------------------------------- dense elements

def _element_storage(elem: T.Type) -> int:
    width = getattr(elem, "width", 8)  # a non-scalar element only occurs in unverified IR
    return 1 if width == 1 else (width + 7) // 8


def dense_values(d: A.DenseElements) -> list[int]:
    """Every element's raw bits (a one-element buffer is a splat)."""
    t = d.type
    n = t.num_elements() if isinstance(t, T.TileType) else 1
    elem = T.elem_of(t)
    raw = d.raw
    if getattr(elem, "width", 8) == 1:
        if len(raw) == 1 and raw[0] in (0, 0xFF):
            return [raw[0] & 1] * n
        raw = raw.ljust((n + 7) // 8, b"\0")
        return [raw[i // 8] >> (i % 8) & 1 for i in range(n)]
    size = _element_storage(elem)
    count = len(raw) // size
    vals = [int.from_bytes(raw[i * size:(i + 1) * size], "little") for i in range(count)]
    # NVIDIA's reader rejects other buffer sizes; pad so a malformed module still prints
    return vals * n if count == 1 else (vals + [0] * n)[:n]


def _element_str(elem: T.Type, bits: int) -> str:
    if isinstance(elem, T.FloatType):
        return format_float(elem.name, bits)[0]
    if not isinstance(elem, T.IntType):
        return f"0x{bits:X}"
    if elem.width == 1:
        return "true" if bits & 1 else "false"
    return str(_signed(bits, elem.width))


def _nested(shape, items: list[str]) -> str:
    """printDenseElementsAttrImpl: nested brackets over a row-major list."""
    if not shape:
        return items[0]
    step = len(items) // shape[0] if shape[0] else 0
    return "[" + ", ".join(_nested(shape[1:], items[i * step:(i + 1) * step]) for i in range(shape[0])) + "]"


# MLIR prints larger non-splat elements attributes as a hex string of their raw buffer.
HEX_ELEMENT_LIMIT = 100


def dense_body(d: A.DenseElements) -> str:
    elem = T.elem_of(d.type)
    vals = dense_values(d)
    if all(v == vals[0] for v in vals):
        return _element_str(elem, vals[0])
    if len(vals) > HEX_ELEMENT_LIMIT:
        # In memory MLIR keeps i1 one byte per element; the bytecode packs bits.
        raw = bytes(vals) if getattr(elem, "width", 8) == 1 else d.raw
        return '"0x' + raw.hex().upper() + '"'
    shape = d.type.shape if isinstance(d.type, T.TileType) else ()
    return _nested(list(shape), [_element_str(elem, v) for v in vals])


def dense_str(d: A.DenseElements) -> str:
    """custom<DenseTypedElementsAttr>: ``<elem: values> : type``."""
    return f"<{type_str(T.elem_of(d.type))}: {dense_body(d)}> : {type_str(d.type)}"


# ================================================================ SSA naming

def _sanitize(name: str) -> str:
    """MLIR's sanitizeIdentifier for SSA names."""
    def ok(ch):
        return (ch.isascii() and ch.isalnum()) or ch in "$._-"

    def copy():
        return "".join(ch if ok(ch) else "_" if ch == " " else format(ord(ch), "X") for ch in name)

    if name[0].isdigit():
        return "_" + copy()
    return name if all(ok(ch) for ch in name) else copy()


class _Scope:
    """One level of MLIR's scoped used-names table."""

    def __init__(self, parent: "_Scope | None"):
        self.parent, self.names = parent, set()

    def __contains__(self, name: str) -> bool:
        scope = self
        while scope is not None:
            if name in scope.names:
                return True
            scope = scope.parent
        return False


class Naming:
    """SSANameState: names and numbers every value under one top-level op.

    Each region is numbered completely before its nested regions; every
    nested region then restarts from the counters (value id, argument id,
    conflict id) its parent region ended with, in a child used-names scope.
    """

    def __init__(self, top: Operation):
        self.names: dict[Value, str] = {}
        self.ids: dict[Value, int] = {}
        self.groups: dict[Operation, list[int]] = {}
        self.implied: dict[Operation, list[Value]] = {}
        self.next_value = self.next_arg = self.next_conflict = 0
        root = _Scope(None)
        # a region's numbering depends only on its parent's end state (counters, scope), so an
        # explicit stack (pre-order, as MLIR's recursion) numbers any nesting depth
        work = [(region, top, (0, 0, 0), root) for region in reversed(top.regions)]
        while work:
            work.extend(reversed(self._region(*work.pop())))

    # -- numbering
    def _region(self, region: Region, parent: Operation, counters, parent_scope: _Scope) -> list:
        """Number one region; returns its nested regions' jobs, in order."""
        self.next_value, self.next_arg, self.next_conflict = counters
        self.scope = _Scope(parent_scope)
        for value, name in _arg_names(parent, region):
            self._set(value, name)
        for i, block in enumerate(region.blocks):
            self._block(block, entry=i == 0)
        counters = (self.next_value, self.next_arg, self.next_conflict)
        scope = self.scope
        return [(nested, op, counters, scope) for block in region.blocks for op in block.ops
                for nested in op.regions]

    def _block(self, block: Block, entry: bool) -> None:
        for arg in block.args:
            if arg in self.names or arg in self.ids:
                continue
            if entry:
                self._set(arg, f"arg{self.next_arg}")
                self.next_arg += 1
            else:
                self._set(arg, "")
        for op in block.ops:
            self._op(op)

    def results(self, op: Operation) -> list[Value]:
        """The op's results, plus one the 13.5 reader would add to old bytecode."""
        implied = _format(op.spec).implied_result
        if op.results or implied is None:
            return op.results
        if op not in self.implied:
            self.implied[op] = [Value(implied, op, 0)]
        return self.implied[op]

    def _op(self, op: Operation) -> None:
        results = self.results(op)
        groups = [0]
        for i, name in result_names(op) or ():
            self._set(results[i], name)
            if i:
                groups.append(i)
        if results and results[0] not in self.names and results[0] not in self.ids:
            self.ids[results[0]] = self.next_value
            self.next_value += 1
        self.groups[op] = sorted(groups)

    def _set(self, value: Value, name: str) -> None:
        if not name:
            self.ids[value] = self.next_value
            self.next_value += 1
        else:
            self.names[value] = self._unique(name)

    def _unique(self, name: str) -> str:
        name = _sanitize(name)
        if name in self.scope:
            while True:
                probe = f"{name}_{self.next_conflict}"
                self.next_conflict += 1
                if probe not in self.scope:
                    name = probe
                    break
        self.scope.names.add(name)
        return name

    # -- printing
    def _head(self, value: Value) -> str:
        if value in self.names:
            return "%" + self.names[value]
        return "%" + str(self.ids[value]) if value in self.ids else UNKNOWN_VALUE

    def ref(self, value: Value) -> str:
        """A use of `value`: %name, %N, or %group#k inside a multi-result group."""
        op = value.owner
        if not isinstance(op, Operation) or len(self.results(op)) == 1:
            return self._head(value)
        results = self.results(op)
        groups = self.groups[op]
        start = max(g for g in groups if g <= value.index)
        later = [g for g in groups if g > start]
        size = (later[0] if later else len(results)) - start
        suffix = f"#{value.index - start}" if size != 1 else ""
        return self._head(results[start]) + suffix

    def lhs(self, op: Operation) -> str:
        """The `%a, %b:2 = ` prefix of an op with results."""
        results = self.results(op)
        if not results:
            return ""
        groups = self.groups[op] + [len(results)]
        parts = []
        for start, end in zip(groups, groups[1:]):
            count = end - start
            parts.append(self._head(results[start]) + (f":{count}" if count > 1 else ""))
        return ", ".join(parts) + " = "


# ------------------------------------------------------------------ namers

def _constant_name(op: Operation) -> str:
    d: A.DenseElements = op.attrs["value"]
    elem = T.elem_of(d.type)
    vals = dense_values(d)
    if isinstance(elem, T.IntType) and elem.width == 1:
        if all(vals):
            return "true"
        return "false" if not any(vals) else "cst_i1"
    name = "cst"
    if all(v == vals[0] for v in vals):
        if isinstance(elem, T.IntType):
            name += f"_{_signed(vals[0], elem.width)}"
        elif not isinstance(elem, T.FloatType):
            pass
        elif float_is_nan(elem.name, vals[0]):
            name += "_NaN"
        elif (n := float_exact_u64(elem.name, vals[0])) is not None:
            name += f"_{n}"
    return f"{name}_{type_str(elem)}"


def _assume_name(op: Operation) -> str:
    """`assume_` + the producer's own name hint when the producer is an OpAsmOpInterface op."""
    value = op.operands["value"]
    producer = value.owner
    if not isinstance(producer, Operation) or not _format(producer.spec).asm_interface:
        return "assume"
    hint = dict(result_names(producer) or ()).get(value.index, "")
    return "assume_" + hint


NAMERS: dict[str, Callable[[Operation], str]] = {
    "constant": _constant_name,
    "assume": _assume_name,
}


def _for_arg_names(region: Region):
    args = region.blocks[0].args if region.blocks else []
    return [(a, "loopIdx" if i == 0 else f"iterArg{i - 1}") for i, a in enumerate(args)]


def _reduce_arg_names(region: Region):
    args = region.blocks[0].args if region.blocks else []
    suffix = len(args) > 2
    return [(a, ("reduce_lhs" if i % 2 == 0 else "reduce_rhs") + (str(i // 2) if suffix else ""))
            for i, a in enumerate(args)]


ARG_NAMERS: dict[str, Callable[[Region], list]] = {
    "for": _for_arg_names,
    "reduce": _reduce_arg_names,
}


def result_names(op: Operation) -> list[tuple[int, str]] | None:
    """getAsmResultNames: [(result index, hint)], or None when the op has no OpAsmOpInterface."""
    fmt = _format(op.spec)
    if not fmt.asm_interface:
        return None
    if fmt.namer:
        return [(0, NAMERS[fmt.namer](op))] if op.results else []
    return [(i, n) for i, n in enumerate(fmt.result_names) if i < len(op.results)]


def _arg_names(op: Operation, region: Region):
    namer = _format(op.spec).arg_namer
    return ARG_NAMERS[namer](region) if namer else []


# ================================================================ templates

class _Elem:
    __slots__ = ("kind", "text", "args", "children", "anchor")

    def __init__(self, kind, text="", args=(), children=None, anchor=False):
        self.kind, self.text, self.args, self.children, self.anchor = kind, text, args, children, anchor


class _Format:
    """A parsed FORMAT column."""

    def __init__(self, spec: OpDef):
        self.mnemonic = spec.name
        self.result_names: list[str] = []
        self.namer = self.arg_namer = self.custom = self.implied_result = None
        self.asm_interface = False
        tokens = spec.format.split()
        while tokens and tokens[0][0] in "%^=!+":
            self._head_token(tokens.pop(0))
        self.elems = _parse_elems(tokens, spec)

    def _head_token(self, tok: str) -> None:
        mark, body = tok[0], tok[1:]
        if mark == "%":
            self.asm_interface = True
            if body.startswith("@"):
                self.namer = body[1:]
            elif body != "-":
                self.result_names = body.split(",")
        elif mark == "^":
            self.arg_namer = body
        elif mark == "=":
            self.mnemonic = body
        elif mark == "+":
            self.implied_result = {"token": T.TOKEN}[body]
        else:
            self.custom = body


def _parse_elems(tokens: list[str], spec: OpDef) -> list[_Elem]:
    out: list[_Elem] = []
    while tokens:
        tok = tokens.pop(0)
        if tok == "]]":
            return out
        if tok == "[[":
            children = _parse_elems(tokens, spec)
            out.append(_Elem("opt", children=children))
            continue
        out.append(_parse_elem(tok, spec))
    return out


def _parse_elem(tok: str, spec: OpDef) -> _Elem:
    anchor = tok.endswith("^") and len(tok) > 1
    tok = tok.rstrip("^") if anchor else tok
    if tok == "~":
        return _Elem("glue")
    if tok == "_":
        return _Elem("space")
    if tok == "attrs":
        return _Elem("attrs")
    if tok.startswith("$"):
        name, _, default = tok[1:].partition("=")
        return _Elem("var", name, (default,) if default else (), anchor=anchor)
    if "(" in tok and tok.endswith(")") and tok[0].isalpha():
        name, _, rest = tok.partition("(")
        args = tuple(a for a in rest[:-1].split(",") if a)
        if name not in DIRECTIVES:
            raise ValueError(f"{spec.name}: unknown directive {name}")
        return _Elem("dir", name, args, anchor=anchor)
    return _Elem("lit", tok)


_FORMATS: dict[str, _Format] = {}


def _format(spec: OpDef) -> _Format:
    fmt = _FORMATS.get(spec.name)
    if fmt is None:
        fmt = _FORMATS[spec.name] = _Format(spec)
    return fmt


class _Out:
    """OpFormatGen's spacing state machine over an output buffer."""

    def __init__(self):
        self.parts: list[str] = []
        self.emit_space, self.last_punct = True, False

    def literal(self, text: str, emit: bool) -> None:
        if emit:
            if self.emit_space and _space_before(text, self.last_punct):
                self.parts.append(" ")
            self.parts.append(text)
        self.emit_space = not (len(text) == 1 and text in "<({[")
        self.last_punct = text[0] != "_" and not text[0].isalpha()

    def variable(self, text: str, emit: bool) -> None:
        if emit:
            if self.emit_space or not self.last_punct:
                self.parts.append(" ")
            self.parts.append(text)
        self.emit_space, self.last_punct = True, False

    def space(self, forced: bool, emit: bool) -> None:
        if forced and emit:
            self.parts.append(" ")
        self.emit_space, self.last_punct = False, not forced


def _space_before(text: str, last_punct: bool) -> bool:
    if len(text) != 1 and text != "->":
        return True
    if last_punct:
        return text[0] not in ">)}],"
    return text[0] not in "<>(){}[],"


class _Ctx:
    """What directives need: the op, the value names and the current indentation."""

    def __init__(self, printer: "_Printer", op: Operation):
        self.printer, self.op, self.naming = printer, op, printer.naming

    def ref(self, v: Value) -> str:
        return self.naming.ref(v)

    def refs(self, vs) -> str:
        return ", ".join(self.ref(v) for v in vs)

    def lookup(self, name: str):
        """Operand, result or attribute `name` → (kind, value)."""
        op = self.op
        results = self.naming.results(op)
        if name == "results":
            return "results", results
        spec_results = op.spec.result_names
        if name in spec_results:
            i = spec_results.index(name)
            return "result", results[i] if i < len(results) else None
        if any(o.name == name for o in op.spec.operands):
            return "operand", op.operands.get(name)
        return "attr", op.attrs.get(name)


def _render(ctx: _Ctx, elems: list[_Elem], out: _Out, emit: bool) -> None:
    for e in elems:
        if e.kind == "opt":
            anchor = next(c for c in e.children if c.anchor)
            present = emit and _present(ctx, anchor)
            elided = anchor if _is_unit_attr(ctx, anchor) else None
            _render(ctx, [c for c in e.children if c is not elided], out, present)
        elif e.kind == "lit":
            out.literal(e.text, emit)
        elif e.kind in ("glue", "space"):
            out.space(e.kind == "space", emit)
        elif e.kind == "attrs":
            out.last_punct = False  # printOptionalAttrDict prints nothing here
        else:
            out.variable(_element_text(ctx, e) if emit else "", emit)


def _is_unit_attr(ctx: _Ctx, e: _Elem) -> bool:
    if e.kind != "var":
        return False
    spec = ctx.op.spec.attr(e.text)
    return spec is not None and spec.kind == "unit"


def _present(ctx: _Ctx, e: _Elem) -> bool:
    if e.kind == "dir":
        return bool(DIRECTIVES[e.text](ctx, *e.args))
    kind, value = ctx.lookup(e.text)
    if value is None or value is False:
        return False
    if isinstance(value, (list, tuple)):
        return any(value) if kind == "attr" else bool(value)
    if isinstance(value, A.OptimizationHintsAttr):
        return bool(value.items)
    if e.args:
        return _attr_text(ctx, e.text, value).strip("<>") != e.args[0]
    return True


def _element_text(ctx: _Ctx, e: _Elem) -> str:
    if e.kind == "dir":
        return DIRECTIVES[e.text](ctx, *e.args)
    kind, value = ctx.lookup(e.text)
    if kind == "operand":
        return ctx.refs(value) if isinstance(value, list) else ctx.ref(value)
    if kind == "attr":
        return _attr_text(ctx, e.text, value)
    raise ValueError(f"{ctx.op.name}: ${e.text} is a result; use type(...)")


# Enum attributes whose own assembly format is `<` $value `>`.
_BRACKETED_ENUMS = (Signedness, IntegerOverflow, RoundingMode, ComparisonOrdering, ComparisonPredicate,
                    SymbolVisibility)


def _attr_text(ctx: _Ctx, name: str, value) -> str:
    if isinstance(value, enum.IntEnum):
        text = spelling(value)
        return f"<{text}>" if isinstance(value, _BRACKETED_ENUMS) else text
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, bytes):
        return '"' + escape_string(value) + '"'
    if isinstance(value, T.Type):
        return type_str(value)
    if isinstance(value, tuple):
        kind = ctx.op.spec.attr(name).kind
        if kind == "boolarr":
            return "[" + ", ".join("true" if v else "false" for v in value) + "]"
        if kind == "i32arr":
            return "[" + ", ".join(map(str, value)) + "]"
        return "[" + ", ".join(attr_str(v, "may") for v in value) + "]"
    return attr_str(value)


# ================================================================ directives

def _d_type(ctx: _Ctx, ref: str) -> str:
    _, value = ctx.lookup(ref[1:])
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return types_str(v.type for v in value)
    return type_str(value.type)


def _d_firsttype(ctx: _Ctx, ref: str) -> str:
    _, value = ctx.lookup(ref[1:])
    return type_str(value[0].type) if value else ""


def _d_kw(ctx: _Ctx, ref: str) -> str:
    return spelling(ctx.lookup(ref[1:])[1])


def _d_rounding(ctx: _Ctx, ref: str) -> str:
    """The *RoundingMode custom printers: `rounding<mode>` unless the op's default."""
    name, _, default = ref[1:].partition("=")
    value = ctx.op.attrs.get(name)
    if value is None or spelling(value) == default:
        return ""
    return f"rounding<{spelling(value)}>"


def _d_pred(ctx: _Ctx, ref: str) -> str:
    return predicate_str(ctx.lookup(ref[1:])[1])


def _d_dense(ctx: _Ctx, ref: str) -> str:
    return dense_str(ctx.lookup(ref[1:])[1])


def _d_sym(ctx: _Ctx, ref: str) -> str:
    return symbol_str(ctx.lookup(ref[1:])[1])


def _d_vis(ctx: _Ctx, ref: str) -> str:
    value = ctx.lookup(ref[1:])[1]
    if value is None or value == SymbolVisibility.public:
        return ""
    return (spelling(value) if isinstance(value, enum.Enum) else str(value)) + " "


def _d_idxtypes(ctx: _Ctx, ref: str) -> str:
    """printIndexTypes: one type when all indices share it, else every type."""
    indices = ctx.lookup(ref[1:])[1] or []
    if not indices:
        return ""
    ts = [v.type for v in indices]
    if all(t == ts[0] for t in ts):
        ts = ts[:1]
    return "".join(", " + type_str(t) for t in ts)


def _d_mixed(ctx: _Ctx, ref: str, which: str) -> str:
    """make_tensor_view's static/dynamic list: constants inline, `?` entries from operands."""
    values = ctx.lookup(ref[1:])[1] or []
    dims = getattr(ctx.op.results[0].type, which, None) if ctx.op.results else None
    if dims is None or sum(d == T.DYNAMIC for d in dims) != len(values):  # unverified IR
        return ctx.refs(values)
    dynamic = iter(values)
    return ", ".join(ctx.ref(next(dynamic)) if d == T.DYNAMIC else str(d) for d in dims)


def _d_viewsrc(ctx: _Ctx, base: str, *dynamic: str) -> str:
    """make_tensor_view's source types: the base when it carries a ptr_attr, then the dynamic operands'."""
    shown = []
    base_type = ctx.lookup(base[1:])[1].type
    if getattr(T.elem_of(base_type), "ptr_attr", None) is not None:
        shown.append(type_str(base_type))
    for ref in dynamic:
        values = ctx.lookup(ref[1:])[1]
        if values:
            shown.append(type_str(values[0].type))
            break
    return ", ".join(shown)


def _entry_args(op: Operation, index: str) -> list[Value]:
    region = op.regions[int(index)] if int(index) < len(op.regions) else None
    return region.blocks[0].args if region is not None and region.blocks else []


def _d_signature(ctx: _Ctx, index: str) -> str:
    return "(" + ", ".join(f"{ctx.ref(a)}: {type_str(a.type)}" for a in _entry_args(ctx.op, index)) + ")"


def _d_region(ctx: _Ctx, index: str) -> str:
    return ctx.printer.region(ctx.op.regions[int(index)], terminators=True)


def _d_cfregion(ctx: _Ctx, index: str, implicit: str) -> str:
    """printControlFlowRegion: an operand-less implicit terminator is not printed."""
    region = ctx.op.regions[int(index)]
    if not region.blocks:
        return ""
    ops = region.blocks[0].ops
    term = ops[-1] if ops else None
    keep = term is None or term.name != implicit or bool(term.operand_values())
    return ctx.printer.region(region, terminators=keep)


def _d_argregion(ctx: _Ctx, index: str) -> str:
    """printArgumentRegion: a newline, the block signature, then the region."""
    region = ctx.op.regions[int(index)]
    pad = " " * ctx.printer.indent
    return "\n" + pad + _d_signature(ctx, index) + " " + ctx.printer.region(region, terminators=True)


def _d_ivar(ctx: _Ctx, index: str) -> str:
    args = _entry_args(ctx.op, index)
    return ctx.ref(args[0]) if args else UNKNOWN_VALUE


def _d_iterinit(ctx: _Ctx, index: str, ref: str) -> str:
    inits = ctx.lookup(ref[1:])[1] or []
    args = _entry_args(ctx.op, index)[-len(inits):] if inits else []
    return ", ".join(f"{ctx.ref(a)} = {ctx.ref(v)}" for a, v in zip(args, inits))


DIRECTIVES: dict[str, Callable[..., str]] = {
    "type": _d_type, "firsttype": _d_firsttype, "kw": _d_kw, "rounding": _d_rounding,
    "pred": _d_pred, "dense": _d_dense, "sym": _d_sym, "vis": _d_vis, "idxtypes": _d_idxtypes,
    "mixed": _d_mixed, "viewsrc": _d_viewsrc, "signature": _d_signature, "region": _d_region,
    "cfregion": _d_cfregion, "argregion": _d_argregion, "ivar": _d_ivar, "iterinit": _d_iterinit,
}


# ============================================================ custom printers

def _print_loop(ctx: _Ctx) -> str:
    """LoopOp::print: its `:` and `->` depend on both iter values and results."""
    op = ctx.op
    inits = op.operands.get("initValues") or []
    parts = [" "]
    if inits:
        parts.append("iter_values(" + _d_iterinit(ctx, "0", "$initValues") + ") ")
    if inits or op.results:
        parts.append(": ")
    if inits:
        parts.append(types_str(v.type for v in inits) + " " + ("-> " if op.results else ""))
    if op.results:
        parts.append(types_str(v.type for v in op.results) + " ")
    parts.append(_d_cfregion(ctx, "0", "continue"))
    return "".join(parts)


CUSTOM_PRINTERS: dict[str, Callable[[_Ctx], str]] = {
    "loop": _print_loop,
}


# ================================================================= locations

_UNKNOWN_LOC = ("unknown",)
_NULL_ATTR = ("null",)     # a dangling reference: printed as MLIR prints a null attribute, never aliased
_LOC_KINDS = frozenset({"unknown", "file_line_col", "callsite", "di_loc"})
_MAX_DEBUG_DEPTH = 64


class _DebugAttrs:
    """The Debug section as uniqued MLIR attributes, and MLIR's alias table over them.

    An attribute is a tuple ``(kind, *parameters)``; the parameters that are
    themselves attributes are tuples, in the order they are printed.
    """

    def __init__(self, module: Module):
        self.module = module
        self._keys: dict[tuple[int, bool], tuple] = {}
        self.depth: dict[tuple, int] = {}   # insertion order = the order the printer meets them
        self.names: dict[tuple, str] | None = None

    # -- the attributes
    def _string(self, index: int) -> bytes:
        strings = self.module.strings
        return strings[index] if 0 <= index < len(strings) else b""

    def attr(self, debug_id: int, location: bool = True, _depth: int = 0) -> tuple:
        """The attribute behind a debug id; in a location position, anything else is unknown."""
        key = self._keys.get((debug_id, location))
        if key is None:
            key = self._build(debug_id, location, _depth)
            self._keys[(debug_id, location)] = key
        return key

    def _build(self, debug_id: int, location: bool, depth: int) -> tuple:
        fallback = _UNKNOWN_LOC if location else _NULL_ATTR
        if depth > _MAX_DEBUG_DEPTH or not 0 < debug_id <= len(self.module.debug):
            return fallback
        e = self.module.debug[debug_id - 1]
        f = e.fields   # like the 13.5 reader, ignore fields past the ones an attribute needs
        loc = lambda i: self.attr(i, True, depth + 1)
        scope = lambda i: self.attr(i, False, depth + 1)
        if e.tag == TAG_LOC and len(f) >= 4:
            filename = self._string(f[1]) or b"-"   # the reader names an empty file "-"
            return ("di_loc", ("file_line_col", filename, f[2], f[3]), scope(f[0]))
        if e.tag == TAG_CALLSITE and len(f) >= 2:
            return ("callsite", loc(f[0]), loc(f[1]))
        if location:
            return fallback
        if e.tag == TAG_FILE and len(f) >= 2:
            return ("di_file", self._string(f[0]), self._string(f[1]))
        if e.tag == TAG_COMPILE_UNIT and len(f) >= 1:
            return ("di_compile_unit", scope(f[0]))
        if e.tag == TAG_SUBPROGRAM and len(f) >= 5:
            return ("di_subprogram", scope(f[0]), f[1], self._string(f[2]), self._string(f[3]), scope(f[4]),
                    f[5] if len(f) > 5 else 0)
        if e.tag == TAG_LEXICAL_BLOCK and len(f) >= 4:
            return ("di_lexical_block", scope(f[0]), scope(f[1]), f[2], f[3])
        return fallback

    # -- AliasInitializer
    def visit(self, attr: tuple) -> int:
        """Record `attr` (then its parameters) if new; → its alias depth."""
        if attr in self.depth:
            return self.depth[attr]
        self.depth[attr] = 0   # inserted before its parameters are visited
        depth = 0
        for child in attr[1:]:
            if isinstance(child, tuple) and child != _NULL_ATTR:
                depth = max(depth, self.visit(child) + 1)
        self.depth[attr] = depth
        return depth

    @staticmethod
    def alias_name(attr: tuple) -> str | None:
        kind = attr[0]
        if kind in _LOC_KINDS:
            return "loc"
        return None if kind == "null" else kind

    def finish(self) -> None:
        """initializeAliases: stable sort by (depth, name), then number each name."""
        order = sorted((a for a in self.depth if self.alias_name(a)),
                       key=lambda a: (self.depth[a], self.alias_name(a)))
        counts: dict[str, int] = {}
        self.names = {}
        for a in order:
            name = self.alias_name(a)
            n = counts.get(name, 0)
            counts[name] = n + 1
            self.names[a] = "#" + name + ((("_" if name[-1].isdigit() else "") + str(n)) if n else "")

    # -- printing
    def ref(self, attr: tuple) -> str:
        if attr == _NULL_ATTR:
            return "<<NULL ATTRIBUTE>>"
        return self.names.get(attr, "") if self.names is not None else ""

    def definition(self, attr: tuple) -> str:
        """The right-hand side of `#alias = ...`: nested attributes by their alias names."""
        if attr[0] == "callsite":
            return f"loc(callsite({self.ref(attr[1])} at {self.ref(attr[2])}))"
        return self._spell(attr, lambda child, stripped: self.ref(child), stripped=False)

    def inline(self, attr: tuple, stripped: bool = False) -> str:
        """The attribute spelled out in full, as diagnostics print an op's location; a parameter of a
        specific attribute type (a file, a compile unit) is printed `stripped`, without its mnemonic."""
        if attr[0] == "callsite":
            return f"callsite({self.inline(attr[1])} at {self.inline(attr[2])})"
        return self._spell(attr, self.inline, stripped)

    @staticmethod
    def _spell(attr: tuple, nested, stripped: bool) -> str:
        """One spelling for both forms; `nested(child, stripped)` prints a parameter that is an attribute."""
        kind, p = attr[0], attr[1:]
        q = lambda data: '"' + escape_string(data) + '"'
        name = "" if stripped else f"#cuda_tile.{kind}"
        if kind == "unknown":
            return "loc(unknown)"
        if kind == "file_line_col":
            return f"loc({q(p[0])}:{p[1]}:{p[2]})"
        if kind == "di_loc":
            return f"#cuda_tile.di_loc<{nested(p[0], False)} in {nested(p[1], False)}>"
        if kind == "di_file":
            return f"{name}<{q(p[0])} in {q(p[1])}>"
        if kind == "di_compile_unit":
            return f"{name}<file = {nested(p[0], True)}>"
        if kind == "di_subprogram":
            scope_line = f", scopeLine = {p[5]}" if p[5] else ""   # optional parameters equal to 0 are elided
            return (f"{name}<file = {nested(p[0], True)}, line = {p[1]}, name = {q(p[2])}, linkageName = "
                    f"{q(p[3])}, compileUnit = {nested(p[4], True)}{scope_line}>")
        if kind == "di_lexical_block":
            column = f", column = {p[3]}" if p[3] else ""
            return (f"{name}<scope = {nested(p[0], False)}, file = {nested(p[1], True)}, "
                    f"line = {p[2]}{column}>")
        return "<<NULL ATTRIBUTE>>"

    def definitions(self) -> str:
        assert self.names is not None
        return "".join(f"{name} = {self.definition(a)}\n" for a, name in self.names.items())


# ==================================================================== driver

_HOLE = "\ud800"   # marks a region in an op's text: no decoded string can hold a lone high surrogate


class _Printer:
    """Prints one top-level op.  `op()` prints a single op, leaving a hole for each of its regions;
    `render()` fills the holes with an explicit stack, so the nesting depth is not bounded by
    Python's recursion.  Ops are met in pre-order, as MLIR's printer meets them."""

    def __init__(self, naming: Naming, locs: _DebugAttrs | None = None):
        self.naming = naming
        self.indent = 0
        self.locs = locs
        self.holes: list[tuple[Region, bool, int]] = []

    def render(self, top: Operation) -> str:
        out: list[str] = []
        stack: list[tuple[int, object, int]] = [(_R_OP, top, self.indent)]
        while stack:
            kind, item, indent = stack.pop()
            if kind == _R_TEXT:
                out.append(item)
            elif kind == _R_OP:
                self.indent = indent
                pieces = self.op(item).split(_HOLE)   # text, hole, text, hole, ..., text
                for i in range(len(pieces) - 1, -1, -1):
                    if i % 2:
                        stack.append((_R_REGION, int(pieces[i]), 0))
                    elif pieces[i]:
                        stack.append((_R_TEXT, pieces[i], 0))
            else:
                region, terminators, indent = self.holes[item]
                ops = region.blocks[0].ops if region.blocks else []
                if not terminators and ops:
                    ops = ops[:-1]
                inner = indent + INDENT
                out.append("{")
                stack.append((_R_TEXT, "\n" + " " * indent + "}", 0))
                for op in reversed(ops):
                    stack.append((_R_OP, op, inner))
                    stack.append((_R_TEXT, "\n" + " " * inner, 0))
        return "".join(out)

    def op(self, op: Operation) -> str:
        loc = None
        if self.locs is not None:   # the location is met before anything inside the op
            loc = self.locs.attr(op.loc)
            self.locs.visit(loc)
        fmt = _format(op.spec)
        ctx = _Ctx(self, op)
        if fmt.custom:
            body = CUSTOM_PRINTERS[fmt.custom](ctx)
        else:
            out = _Out()
            _render(ctx, fmt.elems, out, True)
            body = "".join(out.parts)
        text = self.naming.lhs(op) + fmt.mnemonic + body
        return text if loc is None else f"{text} loc({self.locs.ref(loc)})"

    def region(self, region: Region, terminators: bool) -> str:
        """A hole that render() fills with the region's ops (its first block's; without the
        terminator unless `terminators`), one per line, indented below the current op."""
        self.holes.append((region, terminators, self.indent))
        return f"{_HOLE}{len(self.holes) - 1}{_HOLE}"


_R_TEXT, _R_OP, _R_REGION = range(3)   # render() stack entries


def _enum_or_int(cls, value: int):
    try:
        return cls(value)
    except ValueError:  # out of range: the reader does not check globals' visibility
        return value


def _global_op(g: Global) -> Operation:
    attrs = {"constant": g.constant, "sym_name": g.name, "value": g.value, "alignment": g.alignment,
             "symbol_visibility": _enum_or_int(SymbolVisibility, g.visibility)}
    return Operation("global", attrs=attrs)   # bytecode globals have no location: unknown


def _entry_op(fn: Function) -> Operation:
    attrs = {"sym_name": fn.name, "function_type": fn.type}
    if fn.hints is not None:
        attrs["optimization_hints"] = fn.hints
    return Operation("entry", attrs=attrs, regions=[Region([fn.body])], loc=fn.loc)


def print_op(op: Operation) -> str:
    """One top-level op (entry, global) with its own SSA names."""
    return _Printer(Naming(op)).render(op)


def print_function(fn: Function) -> str:
    return print_op(_entry_op(fn))


def render_attribute(module: Module, debug_id: int, stripped: bool = False) -> str:
    """A debug scope attribute (subprogram, lexical block, file, compile unit) spelled out, as diagnostics do."""
    return _DebugAttrs(module).inline(_DebugAttrs(module).attr(debug_id, False), stripped)


def debug_attribute_key(module: Module, debug_id: int) -> tuple:
    """The structural identity of a debug attribute: ids with equal content are the same attribute."""
    return _DebugAttrs(module).attr(debug_id, False)


def render_location(module: Module, debug_id: int) -> str | None:
    """An op's debug location spelled out (the prefix of a located diagnostic), or None if unknown."""
    attr = _DebugAttrs(module).attr(debug_id, True)
    if attr == _UNKNOWN_LOC:
        return None
    text = _DebugAttrs(module).inline(attr)
    # a call-site location is one of MLIR's own: printed whole as `loc(...)` (a di_loc prints bare)
    return f"loc({text})" if attr[0] == "callsite" else text


def print_module(module: Module, debug_info: bool = False) -> str:
    """The module body as tileirdisasm prints it: globals, then entries, one per line.

    With `debug_info` (``tileirdisasm -g``), each op carries ``loc(#alias)`` and
    the location aliases are defined after the module.
    """
    tops = [_global_op(g) for g in module.globals] + [_entry_op(f) for f in module.functions]
    if not tops:   # tileirdisasm prints an empty module as one empty line (-g: and the module's location)
        return "\n#loc = loc(unknown)\n" if debug_info else "\n"
    if not debug_info:
        return _dedent_module_body("".join(print_op(op) + "\n" for op in tops))
    locs = _DebugAttrs(module)
    namings = [Naming(op) for op in tops]
    for op, naming in zip(tops, namings):       # MLIR's alias-collecting dummy print
        _Printer(naming, locs).render(op)
    locs.finish()
    body = "".join(_Printer(naming, locs).render(op) + "\n" for op, naming in zip(tops, namings))
    return _dedent_module_body(body) + locs.definitions()
