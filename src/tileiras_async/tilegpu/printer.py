"""Text form of the tile-GPU IR (what --print-ir-* show): an assembly meant to be read, and read back.

    #blocked0 = #tilegpu.linear<shape = [64, 32], register = [[0, 1], [0, 2]], lane = [...], warp = [...]>
    #operand0 = #tilegpu.operand<role = "a", load = %d0, chain = [], tile_shape = [64, 32], ...>
    tilegpu.kernel @matmul(%0: tile<ptr<f16>>, %1: tile<i32>) {
      %2 = cuda_tile.assume bounded<0, ?>, %1 : tile<i32>
      %3 = cuda_tile.constant 3 : tile<i32>
      %4 = cuda_tile.constant dense<0.0> : tile<64x64xf32, #blocked0>
      "tilegpu.mma_staged"(%5, %6) {a = #operand0, kc = 32, plan = #tilegpu.geometry<stages = 4, ...>} : ...
      %7, %8 = "cuda_tile.for"(%3, %3, %3, %4) ({
      ^bb(%9: tile<i32>, %10: tile<64x64xf32, #blocked0>):
        ...
      }) {pipelined = true} : (...) -> (...)
    }
    tilegpu.detached {
      %d0, %d1 = "cuda_tile.load_view_tko"(%11, %3, %3) {...} : (...) -> (...)
    }

Layouts are declared once, before the kernel, and named in types; every attribute value is text that says
what it is (no Python reprs): records (the passes' dataclasses) field by field, declared once before the
kernel when several attributes hold the same one; an attribute that refers to an op names the op's first
result.  Ops that
attributes refer to but that are no longer in the kernel (a pass replaced them and kept them as a record)
are printed after it, in `tilegpu.detached`, with names `%dN`.  The printer is iterative (deep nesting is
fine) and deterministic.

Grammar (`'x'`: the literal x; `?` optional; `*` zero or more; `a % ','`: a list of a separated by commas):

    dump        ::= banner? options alias* kernel detached?
    banner      ::= '// -----// IR Dump ' ... ' //----- //'         (--print-ir-* print one per section)
    options     ::= 'tilegpu.options' attr-dict                  (the CodegenOptions: target, warps, stages, ...)
    alias       ::= (layout-name | record-name) '=' struct     (a record several attributes hold: declared once)
    kernel      ::= 'tilegpu.kernel' symbol '(' (value-name ':' type) % ',' ')' '{' op* '}'
    detached    ::= 'tilegpu.detached' '{' op* '}'
    op          ::= (value-name % ',' '=')? (constant | assume | generic) loc?
    constant    ::= 'cuda_tile.constant' (element | dense) attr-dict? ':' type
    assume      ::= 'cuda_tile.assume' predicate ',' value-use attr-dict? ':' type
    generic     ::= '"' op-name '"' '(' value-use % ',' ')' ('(' region % ',' ')')? attr-dict?
                    ':' '(' type % ',' ')' '->' '(' type % ',' ')'
                    (an op with two or more optional or variadic operand groups has `operand_segments =
                    [n, ...]` in its attr-dict: how many of the operands each group holds)
    region      ::= '{' ('^bb(' (value-name ':' type) % ',' '):')? op* '}'
    attr-dict   ::= '{' (name '=' attr) % ',' '}'
    attr        ::= 'true' | 'false' | 'none' | integer | float | string | enum-case
                  | integer ':' type | float ':' type            (typed: cuda_tile's integer/float attributes)
                  | dense | predicate | type | layout-name | value-use
                  | '[' attr % ',' ']' | '{' (key '=' attr) % ',' '}' | struct | record-name | op-ref | hints
    struct      ::= '#tilegpu.' kind '<' (field '=' attr) % ',' '>'   (a record: every field, in order)
    hints       ::= '#tilegpu.hints<' (key '=' hint) % ',' '>'   (cuTile's optimization_hints: per architecture,
                                                                 a dictionary, in the order given)
    hint        ::= integer ':' type | float ':' type | 'true' | 'false' | string | type
                  | '[' hint % ',' ']' | '{' (key '=' hint) % ',' '}'
    key         ::= identifier | string
    op-ref      ::= value-use                                   (the op's first result)
                  | '#tilegpu.op<' string '>'                   (an op without results: its name)
    dense       ::= 'dense<' (element | nested) '>'             (one element: a splat)
    nested      ::= '[' (element | nested) % ',' ']'            (row-major, by the type's shape)
    element     ::= integer | float | 'true' | 'false'
    float       ::= decimal that reads back to the same bits | 'inf' | '-inf' | 'nan'
                  | '0x' hex-digits                              (a NaN other than the quiet one: its bits)
    predicate   ::= 'div_by<' integer (', every' integer 'along' integer)? '>'
                  | 'bounded<' (integer | '?') ',' (integer | '?') '>' | 'same_elements<[' integer % ',' ']>'
    type        ::= cuda_tile's spelling (tile<4x8xf32>, ptr<f16>, token, tensor_view<...>, partition_view<...>)
                  | 'tile<' dims elem ',' layout-name '>' | 'smem<' integer '>'
    layout-name ::= '#' ('blocked' | 'linear') integer             (blocked: the default layout of its shape)
    record-name ::= '#' kind integer                                (#operand0 = #tilegpu.operand<...>)
    value-name  ::= '%' integer | '%d' integer
    value-use   ::= value-name | 'none'                           (none: an absent value)
    loc         ::= 'loc(' string ':' integer ':' integer ')' | 'loc(unknown)'   (with --print-debuginfo)
    string      ::= a JSON string literal (double quotes, backslash escapes)

`tilegpu/parser.py` reads this text back (`tileiras-async opt`); records go through `tilegpu/records.py`.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import re
from collections.abc import Callable

import msgspec

from ..ir import attrs as A
from ..ir import types as T
from ..ir.core import Block, Operation, Value
from ..ir.printer import (FLOAT_FORMATS, attr_str, dense_values, format_float, predicate_str, symbol_str,
                          type_str)
# cuda_tile's printer must print exactly what NVIDIA's does, so it stays as it is; its helpers are reused here
from ..ir.printer import _nested, _round_trips, _signed, _value
from .layout import LinearLayout
from .ir import KernelIR, walk_ops
from .records import kind_of
from .types import LayoutTile


class _Names:
    """SSA names: the kernel's values numbered in text order before anything is printed (so an attribute may
    name an op further down), detached ops numbered `%dN` as attributes first refer to them."""

    def __init__(self):
        self.values: dict[int, tuple[Value, str]] = {}   # the Value is kept: its id must stay unique
        self.counts = {"%": 0, "%d": 0}
        self.pending: list[Operation] = []

    def define(self, v: Value, prefix: str) -> None:
        self.values[id(v)] = (v, f"{prefix}{self.counts[prefix]}")
        self.counts[prefix] += 1

    def number(self, body: Block, prefix: str) -> None:
        """Name the block's arguments and every result inside it, in the order the text shows them."""
        stack = [("block", body)]
        while stack:
            kind, item = stack.pop()
            if kind == "block":
                for a in item.args:
                    if id(a) not in self.values:   # an op detached before the op around it keeps its name
                        self.define(a, prefix)
                stack.extend(("op", op) for op in reversed(item.ops))
                continue
            for r in item.results:
                if r is not None and id(r) not in self.values:
                    self.define(r, prefix)
            stack.extend(("block", b) for r in reversed(item.regions) for b in reversed(r.blocks))

    def use(self, v: Value | None) -> str:
        if v is None:
            return "none"
        known = self.values.get(id(v))
        if known is None:
            owner = v.owner
            if isinstance(owner, Operation):
                self.detach(owner)
            else:   # an argument of a block no printed op holds: named, never defined
                self.define(v, "%d")
            known = self.values[id(v)]
        return known[1]

    def detach(self, op: Operation) -> None:
        """Name an op that is not in the kernel; it is printed in `tilegpu.detached`."""
        holder = Block()
        holder.ops = [op]
        self.number(holder, "%d")
        self.pending.append(op)


class _Printer:
    def __init__(self, k: KernelIR, debuginfo: bool):
        self.k = k
        self.debuginfo = debuginfo
        self.names = _Names()
        self.layouts: dict[LinearLayout, str] = {}
        self.shared: dict[int, int] = {}        # id of a record -> how many times the kernel's attributes hold it
        self.records: dict[int, tuple[object, str]] = {}   # id of a shared record -> (it, its alias)
        self.record_bodies: dict[str, str] = {}

    # -- types and layouts ---------------------------------------------------------------------------

    def layout(self, layout: LinearLayout) -> str:
        name = self.layouts.get(layout)
        if name is None:
            kind = "blocked" if layout == _default_layout(self.k, layout.shape) else "linear"
            name = f"#{kind}{sum(n.startswith('#' + kind) for n in self.layouts.values())}"
            self.layouts[layout] = name
        return name

    def type(self, t) -> str:
        if isinstance(t, LayoutTile) and t.layout is not None:
            return f"tile<{''.join(f'{d}x' for d in t.shape)}{type_str(t.elem)}, {self.layout(t.layout)}>"
        return type_str(t)

    # -- attributes ----------------------------------------------------------------------------------

    def attr(self, v) -> str:
        if isinstance(v, enum.Enum):   # before int: cuda_tile's enums are IntEnums
            return v.name
        for cls in type(v).__mro__:
            printer = _ATTR_PRINTERS.get(cls)
            if printer is not None:
                return printer(self, v)
        if _is_record(v):
            return self.record(v)
        return f"#tilegpu.opaque<{_string(type(v).__name__)}>"

    def record(self, v) -> str:
        """A record held by one attribute is printed where it is; one several hold (the same object: passes
        share a pipelined operand between its copies and its mmas) is declared once, before the kernel."""
        fields = _record_fields(v)
        kind = _kind(type(v))
        if self.shared.get(id(v), 0) < 2:
            return self.struct(kind, fields)
        known = self.records.get(id(v))
        if known is None:
            body = self.struct(kind, fields)   # the shared records inside it are declared before it
            alias = f"#{kind}{sum(a.startswith('#' + kind) for a in self.record_bodies)}"
            known = self.records[id(v)] = (v, alias)
            self.record_bodies[alias] = body
        return known[1]

    def count_records(self, body: Block) -> None:
        """How often the kernel's attributes hold each record (an explicit stack: records may nest)."""
        stack = [v for op in walk_ops(body) for v in op.attrs.values()]
        seen: dict[int, object] = {}
        while stack:
            v = stack.pop()
            if isinstance(v, (list, tuple, frozenset)):
                stack.extend(v)
            elif isinstance(v, dict):
                stack.extend(v.values())
            elif _is_record(v):
                self.shared[id(v)] = self.shared.get(id(v), 0) + 1
                if id(v) not in seen:
                    seen[id(v)] = v
                    stack.extend(value for _, value in _record_fields(v))

    def struct(self, kind: str, fields) -> str:
        return f"#tilegpu.{kind}<" + ", ".join(f"{name} = {self.attr(value)}" for name, value in fields) + ">"

    def op_ref(self, op: Operation) -> str:
        results = [r for r in op.results if r is not None]
        return self.names.use(results[0]) if results else f"#tilegpu.op<{_string(op.spec.qualified_name)}>"

    def attr_dict(self, attrs: dict, skip: str = "") -> str:
        items = [(k, v) for k, v in sorted(attrs.items()) if k != skip]
        if not items:
            return ""
        return " {" + ", ".join(f"{k} = {self.attr(v)}" for k, v in items) + "}"

    # -- ops -----------------------------------------------------------------------------------------

    def loc(self, op: Operation) -> str:
        if not self.debuginfo:
            return ""
        from ..ir.diagnostics import resolve_loc
        where = resolve_loc(self.k.module, op.loc)
        return " loc(unknown)" if where is None else f" loc({_string(where.file)}:{where.line}:{where.col})"

    def op_line(self, op: Operation) -> tuple[str, str]:
        """(the op up to its regions, the rest after them)."""
        results = [r for r in op.results if r is not None]
        lhs = ", ".join(self.names.use(r) for r in results)
        lhs = f"{lhs} = " if lhs else ""
        custom = _CUSTOM_FORMS.get(op.spec.qualified_name)
        if custom is not None and not op.regions:
            text = custom(self, op)
            if text is not None:
                return lhs + text + self.loc(op), ""
        operands = ", ".join(self.names.use(v) for v in op.operand_values())
        otypes = ", ".join(self.type(v.type) for v in op.operand_values())
        rtypes = ", ".join(self.type(r.type) for r in results)
        head = f'{lhs}"{op.spec.qualified_name}"({operands})'
        attrs = dict(op.attrs)
        segments = operand_segments(op)
        if segments is not None:
            attrs[SEGMENTS] = segments
        return head, f"{self.attr_dict(attrs)} : ({otypes}) -> ({rtypes}){self.loc(op)}"

    def ops(self, body: Block, out: list[str], indent: int) -> None:
        """Iterative: a stack of frames ("ops", block, next op, indent), ("args", block, indent) starting a
        region block, ("sep", indent) between regions and ("close", tail, indent) ending a region op."""
        frames: list = [("ops", body, 0, indent)]
        while frames:
            frame = frames.pop()
            if frame[0] == "close":
                _, tail, indent = frame
                out.append("  " * indent + "})" + tail)
                continue
            if frame[0] == "sep":
                out.append("  " * frame[1] + "}, {")
                continue
            if frame[0] == "args":
                _, block, indent = frame
                if block.args:
                    out.append("  " * indent + "^bb(" + ", ".join(f"{self.names.use(a)}: {self.type(a.type)}"
                                                               for a in block.args) + "):")
                frames.append(("ops", block, 0, indent + 1))
                continue
            _, block, i, indent = frame
            if i >= len(block.ops):
                continue
            op = block.ops[i]
            frames.append(("ops", block, i + 1, indent))
            head, tail = self.op_line(op)
            if not op.regions:
                out.append("  " * indent + head + tail)
                continue
            out.append("  " * indent + head + " ({")
            frames.append(("close", tail, indent))
            blocks = [b for r in op.regions for b in r.blocks]
            for j, b in enumerate(reversed(blocks)):
                frames.append(("args", b, indent))
                if j < len(blocks) - 1:
                    frames.append(("sep", indent))

    def kernel(self) -> str:
        fn = self.k.fn
        self.names.number(fn.body, "%")
        self.count_records(fn.body)
        args = ", ".join(f"{self.names.use(a)}: {self.type(a.type)}" for a in fn.body.args)
        body: list[str] = []
        self.ops(fn.body, body, 1)
        detached = self.detached_ops()
        head = [f"{name} = {self.layout_body(lay)}" for lay, name in self.layouts.items()]
        head += [f"{alias} = {body}" for alias, body in self.record_bodies.items()]
        lines = [self.options_line()] + head + [f"tilegpu.kernel {symbol_str(self.k.fn.name)}({args}) {{"] + body + ["}"]
        if detached:
            lines += ["tilegpu.detached {"] + detached + ["}"]
        return "\n".join(lines + [""])

    def detached_ops(self) -> list[str]:
        """The ops attributes name that are not in the kernel, each once: an op inside another detached op's
        regions (a pipelined loop's original load, and the original loop a plan also names) is printed there."""
        found: list[Operation] = []
        while self.names.pending:   # printing a detached op may name more of them: print until none is new
            found.append(self.names.pending.pop(0))
            self.print_detached(found[-1], [])
        nested = {id(o) for op in found for r in op.regions for b in r.blocks for o in walk_ops(b)}
        lines: list[str] = []
        for op in found:
            if id(op) not in nested:
                self.print_detached(op, lines)
        return lines

    def print_detached(self, op: Operation, out: list[str]) -> None:
        holder = Block()
        holder.ops = [op]
        self.ops(holder, out, 1)

    def options_line(self) -> str:
        """What the passes are told besides the IR (the target first): the parser builds the options from it."""
        opts = self.k.options
        fields = [(f.name, getattr(opts, f.name)) for f in dataclasses.fields(opts)] if _is_options(opts) else []
        fields.sort(key=lambda kv: kv[0] != "target")
        return "tilegpu.options {" + ", ".join(f"{name} = {self.attr(v)}" for name, v in fields) + "}"

    def layout_body(self, layout: LinearLayout) -> str:
        reg, lane, warp = layout.bases
        return self.struct("linear", [("shape", list(layout.shape)), ("register", reg), ("lane", lane),
                                      ("warp", warp)])


def print_kernel(k: KernelIR, debuginfo: bool = False) -> str:
    """The kernel as text: layouts first, then the kernel, then the detached ops its attributes name;
    `debuginfo`: each op with its source location."""
    return _Printer(k, debuginfo).kernel()


def _default_layout(k: KernelIR, shape) -> LinearLayout | None:
    default = getattr(k.options, "default_layout", None)
    try:
        return default(tuple(shape)) if default is not None else None
    except (ValueError, ZeroDivisionError):   # shapes the blocked layout cannot cover
        return None


SEGMENTS = "operand_segments"   # printed where the flat operand list alone does not say which group is which


def operand_segments(op: Operation) -> list[int] | None:
    """How many values each operand group of the op holds, when the op has two or more optional or variadic
    groups (else the number of operands decides)."""
    groups = op.spec.operands
    if sum(o.form != "one" for o in groups) < 2:
        return None
    sizes = []
    for o in groups:
        v = op.operands.get(o.name)
        sizes.append(len(v) if isinstance(v, list) else int(v is not None))
    return sizes


def _is_options(v) -> bool:
    return dataclasses.is_dataclass(v) and not isinstance(v, type)


def _is_record(v) -> bool:
    """A dataclass or msgspec struct instance (the passes' records: plans, geometries, schedule reports) that
    is not one of the IR's own values (types, cuda_tile attributes, layouts)."""
    if isinstance(v, msgspec.Struct):
        return True
    return (dataclasses.is_dataclass(v) and not isinstance(v, type)
            and not isinstance(v, (T.Type, A.Attr, A.DenseElements, LinearLayout)))


def _record_fields(v) -> list[tuple[str, object]]:
    """A record's fields in declaration order."""
    if isinstance(v, msgspec.Struct):
        return [(name, getattr(v, name)) for name in v.__struct_fields__]
    return [(f.name, getattr(v, f.name)) for f in dataclasses.fields(v)]


def _kind(cls: type) -> str:
    """A record's kind in the text (records.py: the registry the parser reads them back through)."""
    return kind_of(cls)


def _string(text: str | bytes) -> str:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "backslashreplace")
    return json.dumps(text, ensure_ascii=False)


# -- scalars and dense constants ---------------------------------------------------------------------

def _float_or_bits(t: T.Type, bits: int) -> str:
    name = getattr(t, "name", "")
    return _float(name, bits) if name in FLOAT_FORMATS else format_float(name, bits)[0]


def _element(elem: T.Type, bits: int) -> str:
    """One element in decimal: integers signed (i1 as true/false), floats in their shortest exact form."""
    if isinstance(elem, T.FloatType):
        return _float_or_bits(elem, bits)
    width = getattr(elem, "width", 64)
    if width == 1:
        return "true" if bits & 1 else "false"
    return str(_signed(bits, width))


def _float(type_name: str, bits: int) -> str:
    """The shortest decimal that reads back to the same bits (`1.0`, `0.1`, `6.5e-05`); `inf`, `-inf`,
    `nan` (the format's quiet NaN; any other NaN as its bits, as MLIR writes them)."""
    fmt = FLOAT_FORMATS[type_name]
    bits &= (1 << fmt.width) - 1
    kind, negative = fmt.decode(bits)[:2]
    if kind == "zero":
        return "-0.0" if negative else "0.0"
    if kind == "inf":
        return "-inf" if negative else "inf"
    if kind == "nan":
        return "nan" if bits == _quiet_nan(fmt) else format_float(type_name, bits)[0]
    value = float(_value(fmt, bits))
    text = repr(value)
    for digits in range(1, 17):
        shorter = f"{value:.{digits}g}"
        if _round_trips(fmt, bits, shorter):
            text = shorter
            break
    return text if any(c in text for c in ".en") else text + ".0"


def _quiet_nan(fmt) -> int:
    if fmt.nonfinite == "nan":   # one NaN: every exponent and mantissa bit set
        return (1 << (fmt.exp_bits + fmt.mant_bits)) - 1
    return ((1 << fmt.exp_bits) - 1) << fmt.mant_bits | 1 << (fmt.mant_bits - 1)


def _dense(d: A.DenseElements) -> str:
    elem = T.elem_of(d.type)
    vals = dense_values(d)
    if all(v == vals[0] for v in vals):
        return f"dense<{_element(elem, vals[0])}>"
    shape = list(d.type.shape) if isinstance(d.type, T.TileType) else []
    return f"dense<{_nested(shape, [_element(elem, v) for v in vals])}>"


# -- custom op forms (None: the op does not fit its form, print it generically) ------------------------

def _constant_form(p: _Printer, op: Operation) -> str | None:
    value = op.attrs.get("value")
    if not isinstance(value, A.DenseElements) or len(op.results) != 1:
        return None
    text = _dense(value)
    t = op.results[0].type
    if not getattr(t, "shape", ()):   # rank 0: the scalar itself
        text = text.removeprefix("dense<").removesuffix(">")
    return f"cuda_tile.constant {text}{p.attr_dict(op.attrs, skip='value')} : {p.type(t)}"


def _assume_form(p: _Printer, op: Operation) -> str | None:
    operands = op.operand_values()
    pred = op.attrs.get("predicate")
    if len(operands) != 1 or len(op.results) != 1 or pred is None:
        return None
    return (f"cuda_tile.assume {p.attr(pred)}, {p.names.use(operands[0])}{p.attr_dict(op.attrs, skip='predicate')}"
            f" : {p.type(op.results[0].type)}")


_CUSTOM_FORMS: dict[str, Callable[[_Printer, Operation], str | None]] = {
    "cuda_tile.constant": _constant_form,
    "cuda_tile.assume": _assume_form,
}


# -- attribute printers, by the value's type (the most derived registered class wins; other dataclasses
#    print as records, field by field) ---------------------------------------------------------------

def _sequence(p: _Printer, v) -> str:
    return "[" + ", ".join(p.attr(x) for x in v) + "]"


def _mapping(p: _Printer, v: dict) -> str:
    return "{" + ", ".join(f"{_key(k) if isinstance(k, str) else _string(str(k))} = {p.attr(x)}"
                           for k, x in v.items()) + "}"


def _key(k: str | bytes) -> str:
    """A dictionary key: bare where it is an identifier, else a string."""
    if isinstance(k, bytes):
        k = k.decode("utf-8", "backslashreplace")
    return k if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) else _string(k)


def _hints(p: _Printer, h: A.OptimizationHintsAttr) -> str:
    """cuTile's hints by architecture, in the order they were given, every value with its type."""
    return "#tilegpu.hints<" + ", ".join(f"{_key(arch)} = {_typed_attr(p, d)}" for arch, d in h.items) + ">"


def _typed_attr(p: _Printer, v) -> str:
    """A cuda_tile attribute inside hints, spelled so that it reads back as the same kind: integers (i1 too)
    with their type, booleans bare, dictionaries and arrays item by item."""
    if isinstance(v, A.DictAttr):
        return "{" + ", ".join(f"{_key(k)} = {_typed_attr(p, x)}" for k, x in v.items) + "}"
    if isinstance(v, A.ArrayAttr):
        return "[" + ", ".join(_typed_attr(p, x) for x in v.items) + "]"
    if isinstance(v, A.IntegerAttr):
        return f"{_signed(v.value, getattr(v.type, 'width', 64))} : {p.type(v.type)}"
    if isinstance(v, A.BoolAttr):
        return "true" if v.value else "false"
    if isinstance(v, A.StringAttr):
        return _string(v.value)
    if isinstance(v, A.TypeAttr):
        return p.type(v.value)
    return p.attr(v)


def _cuda_tile_attr(p: _Printer, v) -> str:
    if isinstance(v, (A.DivByAttr, A.SameElementsAttr, A.BoundedAttr)):
        return predicate_str(v)
    if isinstance(v, A.ArrayAttr):
        return _sequence(p, v.items)
    return attr_str(v)


_ATTR_PRINTERS: dict[type, Callable[[_Printer, object], str]] = {
    type(None): lambda p, v: "none",
    bool: lambda p, v: "true" if v else "false",
    int: lambda p, v: str(v),
    float: lambda p, v: repr(v),
    str: lambda p, v: _string(v),
    bytes: lambda p, v: _string(v),
    list: _sequence,
    tuple: _sequence,
    frozenset: lambda p, v: _sequence(p, sorted(v, key=repr)),
    dict: _mapping,
    A.Attr: _cuda_tile_attr,
    A.FloatAttr: lambda p, v: f"{_float_or_bits(v.type, v.bits)} : {p.type(v.type)}",
    A.OptimizationHintsAttr: _hints,
    A.DenseElements: lambda p, v: _dense(v),
    T.Type: lambda p, v: p.type(v),
    LinearLayout: lambda p, v: p.layout(v),
    Operation: lambda p, v: p.op_ref(v),
    Value: lambda p, v: p.names.use(v),
}
