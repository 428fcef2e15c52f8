"""Reads the tile-GPU IR text (`tilegpu/printer.py`, whose docstring has the grammar) back into a KernelIR.

One dump section: an optional `// -----// IR Dump ... //----- //` banner, the `tilegpu.options` line, the
layout and record declarations, the kernel and its detached ops.  Attributes are read in two steps: first as
syntax (they may name ops further down, or detached ops after the kernel), then, once every value is defined,
as Python values of the kinds the op's declaration or the record's field annotation asks for (tuples, enums,
cuda_tile attributes).  Types, predicates and dense elements are cuda_tile's spellings, read as the cuda_tile
text reader reads them (ir/text_reader.py).  Errors are `ParseError`s: `<file>:<line>:<col>: <what>`.

What the text does not hold, and so what a parsed kernel lacks: the module's globals (a kernel that uses
them compiles on with the original module's, `driver.resumed_kernel_ptx`), the function's optimization hints
(already folded into the options; an op's own hints are in the text, `#tilegpu.hints<...>`), and an
attribute naming an op that has no results (`#tilegpu.op<"name">`: no pass makes one; it is refused).  Everything the passes decide is on the IR (tilegpu/decisions.py), so a
parsed kernel carries it.
"""
from __future__ import annotations

import dataclasses
import enum
import re
import sys

import msgspec

from ..ir import attrs as A
from ..ir import enums as E
from ..ir import types as T
from ..ir.core import Block, DebugEntry, Function, Module, Operation, Region, Value
from ..ir.diagnostics import DEBUG_DILOC
from ..ir.opdef import opdef
from ..ir.text_reader import TYPE_WORDS, Cursor, TypeReader, dense_elements, float_bits
from . import ops as _tilegpu_ops  # noqa: F401  (registers the tile-GPU ops)
from .ir import KernelIR
from .layout import LinearLayout
from .options import CodegenOptions
from .printer import SEGMENTS
from .records import RECORDS, canonical
from .types import LayoutTile, SmemType


class ParseError(Exception):
    """`file:line:col: what` (the command prints it after `error: `)."""


_ENUMS = {name: cls for name, cls in vars(E).items() if isinstance(cls, type) and issubclass(cls, enum.Enum)}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]*")
_NUMBER = re.compile(r"-?(0x[0-9A-Fa-f]+|inf|nan|\d+(\.\d*)?([eE][-+]?\d+)?)")
_BANNER = re.compile(r"^// -----// IR Dump", re.M)


# -- attribute syntax (resolved once every value is named) ----------------------------------------------

@dataclasses.dataclass
class _Syn:
    """An attribute as written: `kind` is int, float, typed_int, typed_float, bool, none, str, ident (an enum
    case), dense, pred, type, value (`%N`), list, dict, struct (`extra`: its fields), alias or opname."""
    kind: str
    value: object
    extra: object = None
    pos: int = 0


class _Parser(TypeReader):
    def __init__(self, text: str, filename: str):
        self.c = Cursor(text, filename, ParseError)
        self.layouts: dict[str, LinearLayout] = {}
        self.aliases: dict[str, _Syn] = {}
        self.values: dict[str, Value] = {}
        self.pending: list[tuple[Operation, dict[str, _Syn]]] = []
        self.block_args: list[tuple[list[str], Block, int]] = []
        self.uses: list[tuple[Operation, list[tuple[str, int]], int]] = []
        self.resolved_aliases: dict[str, object] = {}
        self.module = Module(functions=[])   # holds the locations the text names (its debug table)
        self.locs: dict[tuple[str, int, int], int] = {}

    # -- types: cuda_tile's (ir/text_reader.py), a tile's layout, shared memory ----------------------------

    def extra_type(self, word: str):
        if word != "smem":
            return None
        c = self.c
        c.expect("<")
        n = c.integer()
        c.expect(">")
        return SmemType(n)

    def tile_tail(self, shape, elem):
        layout = self.layout_ref() if self.c.accept(",") else None
        self.c.expect(">")
        return LayoutTile(shape, elem, layout) if layout is not None else T.TileType(shape, elem)

    def layout_ref(self) -> LinearLayout:
        c = self.c
        c.skip()
        start = c.pos
        name = c.match(re.compile(r"#(blocked|linear)\d+"), "a layout name")
        if name not in self.layouts:
            raise c.error(f"undeclared layout '{name}'", start)
        return self.layouts[name]

    # -- attribute syntax ---------------------------------------------------------------------------------

    def attr(self) -> _Syn:
        c = self.c
        c.skip()
        pos = c.pos
        text = c.text
        if c.accept("["):
            return _Syn("list", c.items("]", self.attr), pos=pos)
        if c.accept("{"):
            return _Syn("dict", c.items("}", self.entry), pos=pos)
        if text.startswith('"', pos):
            return _Syn("str", c.string(), pos=pos)
        if text.startswith("%", pos):
            return _Syn("value", c.match(re.compile(r"%d?\d+"), "a value name"), pos=pos)
        if text.startswith("#tilegpu.op<", pos):
            c.expect("#tilegpu.op<")
            name = c.string()
            c.expect(">")
            return _Syn("opname", name, pos=pos)
        if text.startswith("#tilegpu.hints<", pos):
            c.expect("#tilegpu.hints<")
            return _Syn("hints", c.items(">", self.entry), pos=pos)
        if text.startswith("#tilegpu.", pos):
            return self.struct()
        if text.startswith("#", pos):
            name = c.match(re.compile(r"#[a-z_0-9]+"), "a name")
            if name in self.layouts:
                return _Syn("type", self.layouts[name], pos=pos)
            if name not in self.aliases:
                raise c.error(f"undeclared name '{name}'", pos)
            return _Syn("alias", name, pos=pos)
        if text.startswith("dense<", pos):
            c.expect("dense<")
            body = self.dense_body()
            c.expect(">")
            return _Syn("dense", body, pos=pos)
        for pred in ("div_by<", "bounded<", "same_elements<"):
            if text.startswith(pred, pos):
                return _Syn("pred", self.predicate(), pos=pos)
        m = _NUMBER.match(text, pos)
        if m and not _IDENT.match(text, pos) or (m and m.group(0) in ("inf", "nan")):
            c.pos = m.end()
            number = m.group(0)
            if c.peek(":") and not c.peek("::"):
                c.expect(":")
                t = self.type()
                return _Syn("typed_int" if isinstance(t, T.IntType) and _is_int(number) else "typed_float",
                            number, t, pos=pos)
            return _Syn("int" if _is_int(number) else "float", number, pos=pos)
        word = c.match(_IDENT, "an attribute")
        if word in ("true", "false"):
            if c.peek(":") and not c.peek("::"):
                c.expect(":")
                return _Syn("typed_int", "1" if word == "true" else "0", self.type(), pos=pos)
            return _Syn("bool", word == "true", pos=pos)
        if word == "none":
            return _Syn("none", None, pos=pos)
        if word in TYPE_WORDS or word == "smem":
            c.pos = pos
            return _Syn("type", self.type(), pos=pos)
        return _Syn("ident", word, pos=pos)

    def struct(self) -> _Syn:
        c = self.c
        c.skip()
        pos = c.pos
        kind = c.match(re.compile(r"#tilegpu\.[a-z_0-9]+"), "a record")[len("#tilegpu."):]
        c.expect("<")
        return _Syn("struct", kind, c.items(">", self.entry), pos=pos)

    def entry(self) -> tuple[str, _Syn]:
        """`name = attr` in a dictionary or a record (a dictionary's key may be a string)."""
        c = self.c
        c.skip()
        key = c.string() if c.peek('"') else c.match(_IDENT, "a name")
        c.expect("=")
        return key, self.attr()

    # -- the dump -----------------------------------------------------------------------------------------

    def dump(self) -> KernelIR:
        c = self.c
        banners = [m.start() for m in _BANNER.finditer(c.text)]
        if len(banners) > 1:
            raise c.error(f"a second dump section (of {len(banners)}): one section is read at a time", banners[1])
        c.expect("tilegpu.options")
        options = self.options(self.attr())
        while c.peek("#"):
            c.skip()
            pos = c.pos
            name = c.match(re.compile(r"#[a-z_0-9]+"), "a declaration")
            c.expect("=")
            body = self.struct()
            if re.fullmatch(r"#(blocked|linear)\d+", name):
                self.layouts[name] = self.layout(body)
            elif name in self.aliases:
                raise c.error(f"'{name}' declared twice", pos)
            else:
                self.aliases[name] = body
        c.expect("tilegpu.kernel")
        symbol = self.symbol()
        c.expect("(")
        body = self.arguments()
        c.expect("{")
        self.ops_until(body, "}")
        if c.accept("tilegpu.detached"):
            c.expect("{")
            self.ops_until(Block(), "}")
        c.skip()
        if c.pos != len(c.text):
            raise c.error("expected the end of the dump")
        self.link()
        fn = Function(symbol, T.FunctionType(tuple(a.type for a in body.args), ()), body)
        self.module.functions.append(fn)
        return KernelIR(self.module, fn, options)

    def arguments(self) -> Block:
        """`%N: type, ...)`: a block with those arguments, named."""
        def argument():
            name = self.define_name()
            self.c.expect(":")
            return name, self.type()
        names_types = self.c.items(")", argument)
        block = Block([t for _, t in names_types])
        self.bind([n for n, _ in names_types], block.args)
        return block

    def options(self, syn: _Syn) -> CodegenOptions:
        if syn.kind != "dict":
            raise self.c.error("expected the options' '{...}'", syn.pos)
        known = {f.name for f in dataclasses.fields(CodegenOptions)}
        values = {}
        for key, v in syn.value:
            if key not in known or v.kind not in ("int", "str"):
                raise self.c.error(f"unknown option '{key}'", v.pos)
            values[key] = int(v.value) if v.kind == "int" else v.value
        if "target" not in values:
            raise self.c.error("the options do not name the target", syn.pos)
        return CodegenOptions(**values)

    def layout(self, body: _Syn) -> LinearLayout:
        fields = dict(body.extra)
        if body.value != "linear" or set(fields) != {"shape", "register", "lane", "warp"}:
            raise self.c.error("a layout is #tilegpu.linear<shape, register, lane, warp>", body.pos)

        def ints(syn: _Syn):
            if syn.kind == "list":
                return tuple(ints(x) for x in syn.value)
            if syn.kind != "int":
                raise self.c.error("expected an integer", syn.pos)
            return int(syn.value)
        try:
            return LinearLayout(ints(fields["shape"]), (ints(fields["register"]), ints(fields["lane"]),
                                                         ints(fields["warp"])))
        except (ValueError, TypeError) as e:
            raise self.c.error(f"bad layout: {e}", body.pos) from None

    def symbol(self) -> bytes:
        c = self.c
        c.expect("@")
        if c.peek('"'):
            return c.string().encode("utf-8", "surrogateescape")
        return c.match(re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*"), "a symbol").encode()

    def define_name(self) -> str:
        c = self.c
        c.skip()
        pos = c.pos
        name = c.match(re.compile(r"%d?\d+"), "a value name")
        if name in self.values:
            raise c.error(f"'{name}' defined twice", pos)
        self.values[name] = None   # reserved; bound when its op is built
        return name

    def bind(self, names: list[str], values: list[Value]) -> None:
        for n, v in zip(names, values):
            self.values[n] = v

    def ops_until(self, block: Block, close: str) -> None:
        """The ops of `block` up to `close`; iterative over nested regions."""
        c = self.c
        stack: list[tuple[Block, object]] = [(block, None)]
        while stack:
            blk, frame = stack[-1]
            if c.accept(close):
                stack.pop()
                if frame is not None:
                    self.region_end(frame, stack)
                continue
            op_frame = self.op_head()
            if op_frame["regions_open"]:
                stack.append(self.region_start(op_frame))
                continue
            blk.ops.append(self.op_finish(op_frame))

    def region_start(self, frame: dict) -> tuple[Block, dict]:
        c = self.c
        if c.accept("^bb("):
            b = self.arguments()
            c.expect(":")
        else:
            b = Block()
        frame["blocks"].append(b)
        return b, frame

    def region_end(self, frame: dict, stack: list) -> None:
        c = self.c
        if c.accept(", {"):
            stack.append(self.region_start(frame))
            return
        c.expect(")")
        op = self.op_finish(frame)
        stack[-1][0].ops.append(op)

    def op_head(self) -> dict:
        c = self.c
        c.skip()
        start = c.pos
        results = []
        if c.peek("%"):
            results.append(self.define_name())
            while c.accept(","):
                results.append(self.define_name())
            c.expect("=")
        frame = {"pos": start, "results": results, "blocks": [], "regions_open": False}
        if c.accept("cuda_tile.constant"):
            value = _Syn("dense", self.dense_body(), pos=c.pos) if not c.peek("dense<") else self.attr()
            frame.update(name="constant", attrs=self.attr_dict(), special=("value", value))
            c.expect(":")
            frame["types"] = ([], [self.type()])
            return frame
        if c.accept("cuda_tile.assume"):
            pred = _Syn("pred", self.predicate(), pos=c.pos)
            c.expect(",")
            operand = self.use_name()
            frame.update(name="assume", operands=[operand], attrs=self.attr_dict(), special=("predicate", pred))
            c.expect(":")
            t = self.type()
            frame["types"] = ([t], [t])
            return frame
        c.skip()
        name_pos = c.pos
        qualified = c.string()
        name = qualified.removeprefix("cuda_tile.")
        try:
            opdef(name)
        except KeyError:
            raise c.error(f"unknown op '{qualified}'", name_pos) from None
        c.expect("(")
        operands = c.items(")", self.use_name)
        frame.update(name=name, operands=operands)
        if c.accept("({"):
            frame["regions_open"] = True
        return frame

    def use_name(self) -> tuple[str, int]:
        c = self.c
        c.skip()
        pos = c.pos
        if c.accept("none"):
            return ("none", pos)
        return (c.match(re.compile(r"%d?\d+"), "a value name"), pos)

    def attr_dict(self) -> dict[str, _Syn]:
        c = self.c
        if not c.peek("{"):
            return {}
        syn = self.attr()
        return dict(syn.value)

    def op_finish(self, frame: dict) -> Operation:
        c = self.c
        if "types" not in frame:
            frame["attrs"] = self.attr_dict()
            c.expect(":")
            ins = self.type_list()
            c.expect("->")
            outs = self.type_list()
            frame["types"] = (ins, outs)
        ins, outs = frame["types"]
        if len(outs) != len(frame["results"]):
            raise c.error(f"{len(frame['results'])} results named, {len(outs)} types", frame["pos"])
        loc = self.loc()
        spec = opdef(frame["name"])
        attrs = dict(frame["attrs"])
        if "special" in frame:
            key, syn = frame["special"]
            attrs[key] = syn
        regions = [Region([b]) for b in frame["blocks"]]
        op = Operation(spec, {}, {}, outs, regions, loc)
        operands = frame.get("operands", [])
        if len(operands) != len(ins) and frame["name"] not in ("constant", "assume"):
            raise c.error(f"{len(operands)} operands, {len(ins)} types", frame["pos"])
        segments = attrs.pop(SEGMENTS, None)
        self.uses.append((op, operands, frame["pos"], segments, ins))
        self.pending.append((op, attrs))
        self.bind(frame["results"], op.results)
        return op

    def type_list(self) -> list[T.Type]:
        c = self.c
        c.expect("(")
        return c.items(")", self.type)

    def loc(self) -> int:
        """An op's `loc(...)` (--print-debuginfo) as a debug attribute id of the parsed module (0: none)."""
        c = self.c
        if not c.accept("loc("):
            return 0
        if c.accept("unknown"):
            c.expect(")")
            return 0
        filename = c.string()
        c.expect(":")
        line = c.integer()
        c.expect(":")
        col = c.integer()
        c.expect(")")
        key = (filename, line, col)
        if key not in self.locs:
            strings = self.module.strings
            name = filename.encode("utf-8", "surrogateescape")
            if name not in strings:
                strings.append(name)
            self.module.debug.append(DebugEntry(DEBUG_DILOC, (0, strings.index(name), line, col)))
            self.locs[key] = len(self.module.debug)
        return self.locs[key]

    # -- the second step: operands and attributes ---------------------------------------------------------

    def value(self, name: str, pos: int, t: T.Type | None = None) -> Value | None:
        if name == "none":
            return None
        v = self.values.get(name)
        if v is None and t is not None and name.startswith("%d") and name not in self.values:
            # the argument of a block no printed op holds (a detached op's old loop variable): the printer
            # names it without defining it; its type is the one the use shows
            v = self.values[name] = Block([t]).args[0]
        if v is None:
            raise self.c.error(f"use of undefined value '{name}'", pos)
        return v

    def link(self) -> None:
        for op, names, pos, segments, ins in self.uses:
            values = [self.value(n, p, t) for (n, p), t in zip(names, ins)]
            op.operands = self.group(op, values, segments, pos)
            for v, t in zip(values, ins):
                if v is not None and v.type != t:
                    raise self.c.error(f"operand type {t} does not match its value's", pos)
        for op, attrs in self.pending:
            kinds = {a.name: a.kind for a in op.spec.attrs}
            op.attrs = {k: self.resolve(v, kinds.get(k), op) for k, v in attrs.items()}

    def group(self, op: Operation, values: list, segments: _Syn | None, pos: int) -> dict:
        groups = op.spec.operands
        if segments is not None:
            if segments.kind != "list" or any(x.kind != "int" for x in segments.value):
                raise self.c.error("operand_segments is a list of integers", segments.pos)
            sizes = [int(x.value) for x in segments.value]
        else:
            fixed = sum(o.form == "one" for o in groups)
            rest = len(values) - fixed
            sizes = [1 if o.form == "one" else rest for o in groups]
            if rest < 0 or sum(o.form != "one" for o in groups) > 1:
                raise self.c.error(f"'{op.spec.qualified_name}' needs operand_segments", pos)
        if len(sizes) != len(groups) or sum(sizes) != len(values):
            raise self.c.error("operand_segments do not match the operands", pos)
        out, i = {}, 0
        for o, n in zip(groups, sizes):
            chunk = values[i:i + n]
            i += n
            if o.form == "variadic":
                out[o.name] = chunk
            elif o.form == "optional":
                if n > 1:
                    raise self.c.error(f"optional operand '{o.name}' given {n} values", pos)
                if n:
                    out[o.name] = chunk[0]
            else:
                out[o.name] = chunk[0]
        return out

    def resolve(self, syn: _Syn, hint, op: Operation | None = None):
        """A Python value from attribute syntax; `hint` is an AttrDef kind, an enum class, or a record field
        annotation (a string)."""
        k = syn.kind
        if isinstance(hint, str) and hint.endswith(" | None"):
            hint = hint[:-len(" | None")]
        enum_cls = hint if isinstance(hint, type) and issubclass(hint, enum.Enum) else _enum_named(hint)
        if k == "none":   # an enum's case `none` (IntegerOverflow) or an absent value
            return enum_cls["none"] if enum_cls is not None and "none" in enum_cls.__members__ else None
        if k == "bool":
            return syn.value
        if k == "int":
            return int(syn.value)
        if k == "float":
            return float(syn.value)
        if k == "typed_int":
            width = syn.extra.width
            return A.IntegerAttr(syn.extra, int(syn.value) & ((1 << width) - 1))
        if k == "typed_float":
            return A.FloatAttr(syn.extra, float_bits(syn.extra.name, syn.value))
        if k == "str":
            return syn.value.encode("utf-8", "surrogateescape") if hint == "bytes" else syn.value
        if k in ("type", "pred"):
            return syn.value
        if k == "dense":
            t = op.results[0].type if op is not None and op.results else None
            return dense_elements(syn.value, t, self.c, syn.pos)
        if k == "ident":
            cls = enum_cls
            if cls is None or syn.value not in cls.__members__:
                raise self.c.error(f"unknown value '{syn.value}'", syn.pos)
            return cls[syn.value]
        if k == "value":
            v = self.value(syn.value, syn.pos)
            if hint in ("Value", "Value | None"):
                return v
            return v.owner if isinstance(v.owner, Operation) else v
        if k == "opname":
            raise self.c.error("an op reference without results cannot be read back", syn.pos)
        if k == "alias":
            if syn.value not in self.resolved_aliases:
                self.resolved_aliases[syn.value] = self.resolve(self.aliases[syn.value], hint)
            return self.resolved_aliases[syn.value]
        if k == "struct":
            return self.record(syn)
        if k == "hints":
            return A.OptimizationHintsAttr(tuple((_bytes(arch), self.cuda_tile_attr(v)) for arch, v in syn.value))
        if k == "dict":
            return {key: self.resolve(v, None) for key, v in syn.value}
        # a list: the container and its items by the hint
        container, item = _container(hint)
        items = [self.resolve(x, item) for x in syn.value]
        if hint == "array":
            return tuple(A.IntegerAttr(T.I1, int(x)) if isinstance(x, bool) else x for x in items)
        return container(items)

    def cuda_tile_attr(self, syn: _Syn) -> A.Attr:
        """A hint's value as the cuda_tile attribute it spells (printer.py: `hint`)."""
        k = syn.kind
        if k == "dict":
            return A.DictAttr(tuple((_bytes(key), self.cuda_tile_attr(v)) for key, v in syn.value))
        if k == "list":
            return A.ArrayAttr(tuple(self.cuda_tile_attr(v) for v in syn.value))
        if k == "bool":
            return A.BoolAttr(syn.value)
        if k == "str":
            return A.StringAttr(_bytes(syn.value))
        if k == "type":
            return A.TypeAttr(syn.value)
        if k in ("typed_int", "typed_float", "pred"):
            return self.resolve(syn, None)
        raise self.c.error("a hint is a typed number, a boolean, a string, a type, a list or a dictionary",
                           syn.pos)

    def record(self, syn: _Syn):
        cls = RECORDS.get(syn.value)
        if cls is None:
            raise self.c.error(f"unknown record kind '{syn.value}'", syn.pos)
        fields = _record_fields(cls)
        given = dict(syn.extra)
        if not set(fields) - _defaulted(cls) <= set(given) <= set(fields):
            raise self.c.error(f"#tilegpu.{syn.value} needs the fields {', '.join(fields)}", syn.pos)
        module = sys.modules[cls.__module__]
        values = {name: self.resolve(v, _hint(fields[name][0], module)) for name, v in given.items()}
        init = {n: v for n, v in values.items() if fields[n][1]}
        try:
            obj = cls(**init)
        except (TypeError, ValueError) as e:
            raise self.c.error(f"bad #tilegpu.{syn.value}: {e}", syn.pos) from None
        for n, v in values.items():
            if not fields[n][1]:
                object.__setattr__(obj, n, v)
        return canonical(obj)


def _record_fields(cls: type) -> dict[str, tuple[object, bool]]:
    """A record class's fields: name -> (annotation, whether the constructor takes it), in order (the passes'
    dataclasses, and the msgspec structs of schedule reports and launch hooks)."""
    if issubclass(cls, msgspec.Struct):
        hints = {}
        for base in reversed(cls.__mro__):
            hints.update(getattr(base, "__annotations__", {}))
        return {name: (hints.get(name, ""), True) for name in cls.__struct_fields__}
    return {f.name: (f.type, f.init) for f in dataclasses.fields(cls)}


def _defaulted(cls: type) -> set[str]:
    """The fields a record's text may leave out: a schedule report's or dataclass record's fields with
    defaults (a dump written before they existed reads back with their defaults)."""
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls) if f.init and (f.default is not dataclasses.MISSING
                                                                      or f.default_factory is not dataclasses.MISSING)}
    if not issubclass(cls, msgspec.Struct):
        return set()
    fields = cls.__struct_fields__
    return set(fields[len(fields) - len(cls.__struct_defaults__):])


def _hint(annotation, module):
    """A record field's annotation as a hint: an enum class where it names one, else its text."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    bare = text.removesuffix(" | None")
    named = getattr(module, bare, None)
    if isinstance(named, type) and issubclass(named, enum.Enum):
        return named
    return text


def _container(hint):
    """(the list's Python type, its items' hint) for a hint."""
    if hint in ("shape", "widths", "i32arr", "boolarr", "array"):
        return tuple, None
    if not isinstance(hint, str):
        return list, None
    m = re.match(r"(tuple|list|frozenset|Tuple|List)\[(.*)\]$", hint)
    if m:
        kind, inner = m.groups()
        item = inner.removesuffix(", ...") if kind.lower() == "tuple" else inner
        return {"tuple": tuple, "list": list, "frozenset": frozenset}[kind.lower()], item
    if hint in ("tuple", "list", "frozenset"):
        return {"tuple": tuple, "list": list, "frozenset": frozenset}[hint], None
    return list, None


def _enum_named(hint):
    return _ENUMS.get(hint) if isinstance(hint, str) else None


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def _is_int(text: str) -> bool:
    return re.fullmatch(r"-?\d+", text) is not None


def parse_kernel(text: str, filename: str = "<input>") -> KernelIR:
    """One dump section as a KernelIR (its module holds the function and the locations the text names; no
    globals: the dump does not show them)."""
    parser = _Parser(text, filename)
    try:
        return parser.dump()
    except RecursionError:   # attributes and types are read recursively (ops and regions are not)
        raise parser.c.error("attributes or types nested too deeply") from None


def split_sections(text: str) -> list[str]:
    """The sections of a --print-ir-* dump, each with its banner."""
    starts = [m.start() for m in _BANNER.finditer(text)]
    if not starts:
        return [text]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]
