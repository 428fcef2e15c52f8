"""Reads the tile-GPU IR text (`tilegpu/printer.py`, whose docstring has the grammar) back into a KernelIR.

One dump section: an optional `// -----// IR Dump ... //----- //` banner, the `tilegpu.options` line, the
layout and record declarations, the kernel and its detached ops.  Attributes are read in two steps: first as
syntax (they may name ops further down, or detached ops after the kernel), then, once every value is defined,
as Python values of the kinds the op's declaration or the record's field annotation asks for (tuples, enums,
cuda_tile attributes).  Errors are `ParseError`s: `<file>:<line>:<col>: <what>`.

What the text does not hold, and so what a parsed kernel lacks: the module's globals (a kernel that uses
them compiles on with the original module's, `driver.resumed_kernel_ptx`), the function's optimization hints
(already folded into the options; an op's own hints are in the text, `#tilegpu.hints<...>`), and an attribute naming an op that has no results (`#tilegpu.op<"name">`:
no pass makes one; it is refused).  Everything the passes decide is on the IR (tilegpu/decisions.py), so a
parsed kernel carries it.
"""
from __future__ import annotations

import dataclasses
import enum
import json
import re
import sys
from fractions import Fraction

import msgspec

from ..ir import attrs as A
from ..ir import enums as E
from ..ir import types as T
from ..ir.core import Block, DebugEntry, Function, Module, Operation, Region, Value
from ..ir.diagnostics import DEBUG_DILOC
from ..ir.opdef import opdef
from ..ir.printer import FLOAT_FORMATS, _round_to_format
from . import ops as _tilegpu_ops  # noqa: F401  (registers the tile-GPU ops)
from .ir import KernelIR
from .layout import LinearLayout
from .options import CodegenOptions
from .printer import SEGMENTS
from .records import RECORDS, canonical
from .types import LayoutTile, SmemType


class ParseError(Exception):
    """`file:line:col: what` (the command prints it after `error: `)."""


_SCALARS = {t.name if isinstance(t, T.FloatType) else f"i{t.width}": t for t in (
    T.I1, T.I4, T.I8, T.I16, T.I32, T.I64, T.F16, T.BF16, T.F32, T.TF32, T.F64, T.F8E4M3FN, T.F8E5M2,
    T.F8E8M0FNU, T.F4E2M1FN, T.FNV8E5M3FNU)}
_ENUMS = {name: cls for name, cls in vars(E).items() if isinstance(cls, type) and issubclass(cls, enum.Enum)}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]*")
_NUMBER = re.compile(r"-?(0x[0-9A-Fa-f]+|inf|nan|\d+(\.\d*)?([eE][-+]?\d+)?)")
_BANNER = re.compile(r"^// -----// IR Dump", re.M)
_COMMENT = re.compile(r"//[^\n]*\n")   # the dump's banner; a pass test's RUN and CHECK lines


# -- attribute syntax (resolved once every value is named) ----------------------------------------------

@dataclasses.dataclass
class _Syn:
    """An attribute as written: `kind` is int, float, typed_int, typed_float, bool, none, str, ident (an enum
    case), dense, pred, type, value (`%N`), list, dict, struct (`extra`: its fields), alias or opname."""
    kind: str
    value: object
    extra: object = None
    pos: int = 0


class _Cursor:
    def __init__(self, text: str, filename: str):
        self.text, self.filename, self.pos = text, filename, 0

    def error(self, what: str, pos: int | None = None) -> ParseError:
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return ParseError(f"{self.filename}:{line}:{col}: {what}")

    def skip(self) -> None:
        while True:
            m = re.compile(r"\s+").match(self.text, self.pos)
            if m:
                self.pos = m.end()
            if self.text.startswith("//", self.pos):
                m = _COMMENT.match(self.text, self.pos)
                self.pos = m.end() if m else len(self.text)
                continue
            return

    def peek(self, lit: str) -> bool:
        self.skip()
        return self.text.startswith(lit, self.pos)

    def accept(self, lit: str) -> bool:
        if self.peek(lit):
            self.pos += len(lit)
            return True
        return False

    def expect(self, lit: str) -> None:
        if not self.accept(lit):
            found = self.text[self.pos:self.pos + 12].split("\n")[0] or "end of input"
            raise self.error(f"expected '{lit}', found '{found}'")

    def match(self, rx: re.Pattern, what: str) -> str:
        self.skip()
        m = rx.match(self.text, self.pos)
        if not m:
            raise self.error(f"expected {what}")
        self.pos = m.end()
        return m.group(0)

    def items(self, close: str, item, sep: str = ",") -> list:
        """`item()` separated by `sep` up to `close` (the opening bracket already read)."""
        out: list = []
        while not self.accept(close):
            if out:
                self.expect(sep)
            out.append(item())
        return out

    def string(self) -> str:
        self.skip()
        if not self.text.startswith('"', self.pos):
            raise self.error("expected a string")
        try:
            value, end = json.JSONDecoder().raw_decode(self.text, self.pos)
        except json.JSONDecodeError:
            raise self.error("malformed string") from None
        self.pos = end
        return value

    def integer(self) -> int:
        return int(self.match(re.compile(r"-?\d+"), "an integer"))


class _Parser:
    def __init__(self, text: str, filename: str):
        self.c = _Cursor(text, filename)
        self.layouts: dict[str, LinearLayout] = {}
        self.aliases: dict[str, _Syn] = {}
        self.values: dict[str, Value] = {}
        self.pending: list[tuple[Operation, dict[str, _Syn]]] = []
        self.block_args: list[tuple[list[str], Block, int]] = []
        self.uses: list[tuple[Operation, list[tuple[str, int]], int]] = []
        self.resolved_aliases: dict[str, object] = {}
        self.module = Module(functions=[])   # holds the locations the text names (its debug table)
        self.locs: dict[tuple[str, int, int], int] = {}

    # -- types --------------------------------------------------------------------------------------------

    def type(self) -> T.Type:
        c = self.c
        c.skip()
        start = c.pos
        word = c.match(re.compile(r"[A-Za-z_][A-Za-z0-9_]*"), "a type")
        if word in _SCALARS:
            return _SCALARS[word]
        if word == "token":
            return T.TOKEN
        if word == "tile":
            c.expect("<")
            shape = self.dims()
            elem = self.type()
            layout = None
            if c.accept(","):
                layout = self.layout_ref()
            c.expect(">")
            return LayoutTile(shape, elem, layout) if layout is not None else T.TileType(shape, elem)
        if word == "ptr":
            c.expect("<")
            pointee = self.type()
            attr = self.ptr_attr("<") if c.accept(",") else None
            c.expect(">")
            return T.PointerType(pointee, attr)
        if word == "smem":
            c.expect("<")
            n = c.integer()
            c.expect(">")
            return SmemType(n)
        if word == "tensor_view":
            return self.tensor_view()
        if word in ("partition_view", "strided_view", "gather_scatter_view"):
            return self.view(word)
        raise c.error(f"unknown type '{word}'", start)

    def ptr_attr(self, opener: str) -> int:
        self.c.expect(opener)
        value = self.case(E.PointerAttr)
        self.c.expect(">")
        return value

    def case(self, cls: type[enum.IntEnum]) -> int:
        """An enum case by its name (a pointer attribute, a padding value)."""
        c = self.c
        c.skip()
        pos = c.pos
        name = c.match(_IDENT, f"a {cls.__name__}")
        if name not in cls.__members__:
            raise c.error(f"unknown {cls.__name__} '{name}'", pos)
        return cls[name].value

    def dims(self) -> tuple[int, ...]:
        """`4x8x` before an element type (none for a rank-0 tile)."""
        c = self.c
        shape = []
        while True:
            c.skip()
            m = re.compile(r"(\d+|\?)x").match(c.text, c.pos)
            if not m:
                return tuple(shape)
            shape.append(T.DYNAMIC if m.group(1) == "?" else int(m.group(1)))
            c.pos = m.end()

    def int_list(self, open_: str, close: str, sep: str = ",") -> tuple[int, ...]:
        c = self.c
        c.expect(open_)
        return tuple(c.items(close, lambda: T.DYNAMIC if c.accept("?") else c.integer(), sep))

    def tensor_view(self) -> T.TensorViewType:
        c = self.c
        c.expect("<")
        shape = self.dims()
        elem = self.type()
        strides: tuple[int, ...] = ()
        attr = None
        while c.accept(","):
            if c.accept("strides="):
                strides = self.int_list("[", "]")
            else:
                attr = self.ptr_attr("#cuda_tile.ptr_attr<")
        c.expect(">")
        return T.TensorViewType(elem, shape, strides, attr)

    def view(self, word: str) -> T.Type:
        c = self.c
        c.expect("<")
        c.expect("tile=")
        tile = self.int_list("(", ")", "x")
        c.expect(",")
        traversal = None
        if word == "strided_view":
            c.expect("traversal_strides=")
            traversal = self.int_list("[", "]")
            c.expect(",")
        padding = None
        if c.accept("padding_value"):
            c.expect("=")
            padding = self.case(E.PaddingValue)
            c.expect(",")
        c.expect("tensor_view")
        tv = self.tensor_view()
        dim_map = tuple(range(len(tv.shape)))
        sparse = 0
        if c.accept(","):
            if word == "gather_scatter_view":
                c.expect("sparse_dim=")
                sparse = c.integer()
            else:
                c.expect("dim_map=")
                dim_map = self.int_list("[", "]")
        c.expect(">")
        if word == "partition_view":
            return T.PartitionViewType(tile, tv, dim_map, padding)
        if word == "strided_view":
            return T.StridedViewType(tile, traversal, tv, dim_map, padding)
        return T.GatherScatterViewType(tile, tv, sparse, padding)

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
        if word in _SCALARS or word in ("tile", "ptr", "token", "smem", "tensor_view", "partition_view",
                                        "strided_view", "gather_scatter_view"):
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

    def dense_body(self):
        c = self.c
        if c.accept("["):
            return c.items("]", self.dense_body)
        return c.match(re.compile(r"true|false|-?(0x[0-9A-Fa-f]+|inf|nan|\d+(\.\d*)?([eE][-+]?\d+)?)"),
                       "a dense element")

    def predicate(self):
        c = self.c
        if c.accept("div_by<"):
            divisor = c.integer()
            every = along = None
            if c.accept(","):
                c.expect("every")
                every = c.integer()
                c.expect("along")
                along = c.integer()
            c.expect(">")
            return A.DivByAttr(divisor, every, along)
        if c.accept("bounded<"):
            lb = None if c.accept("?") else c.integer()
            c.expect(",")
            ub = None if c.accept("?") else c.integer()
            c.expect(">")
            return A.BoundedAttr(lb, ub)
        c.expect("same_elements<")
        values = self.int_list("[", "]")
        c.expect(">")
        return A.SameElementsAttr(values)

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
            return A.FloatAttr(syn.extra, _float_bits(syn.extra.name, syn.value))
        if k == "str":
            return syn.value.encode("utf-8", "surrogateescape") if hint == "bytes" else syn.value
        if k in ("type", "pred"):
            return syn.value
        if k == "dense":
            t = op.results[0].type if op is not None and op.results else None
            return _dense(syn.value, t, self.c, syn.pos)
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
        if set(given) != set(fields):
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


def _float_bits(type_name: str, text: str) -> int:
    """The bits of `text` in the float format (the printer wrote the shortest decimal that reads back)."""
    fmt = FLOAT_FORMATS[type_name]
    negative = text.startswith("-")
    body = text.lstrip("-")
    sign = (1 << (fmt.width - 1)) if negative and fmt.signed else 0
    if body.startswith("0x"):
        return int(body, 16)
    top = (1 << fmt.exp_bits) - 1
    if body == "inf":
        return sign | top << fmt.mant_bits
    if body == "nan":
        if fmt.nonfinite == "nan":
            return (1 << (fmt.exp_bits + fmt.mant_bits)) - 1
        return top << fmt.mant_bits | 1 << (fmt.mant_bits - 1)
    value = _round_to_format(fmt, Fraction(body))
    if value == 0:
        return sign
    e = value.numerator.bit_length() - value.denominator.bit_length()
    if value < Fraction(2) ** e:
        e -= 1
    if fmt.denormals and e < fmt.emin:
        return sign | int(value / Fraction(2) ** (fmt.emin - fmt.precision + 1))
    mant = int(value / Fraction(2) ** (e - fmt.precision + 1)) - (1 << fmt.mant_bits)
    return sign | (e + fmt.bias) << fmt.mant_bits | mant


def _dense(body, t, cursor: _Cursor, pos: int) -> A.DenseElements:
    if not isinstance(t, T.TileType):
        raise cursor.error("a dense constant needs a tile result", pos)
    bare = T.TileType(t.shape, t.elem)
    elems = _flatten(body)
    elem = t.elem
    if isinstance(elem, T.FloatType):
        bits = [_float_bits(elem.name, x) for x in elems]
    elif isinstance(elem, T.IntType):
        bits = [(1 if x == "true" else 0) if x in ("true", "false") else int(x) & ((1 << elem.width) - 1)
                for x in elems]
    else:
        raise cursor.error("a dense constant of numbers", pos)
    n = bare.num_elements()
    if len(bits) not in (1, n):
        raise cursor.error(f"{len(bits)} elements for {n}", pos)
    if isinstance(elem, T.IntType) and elem.width == 1:
        if len(bits) == 1:
            return A.DenseElements(bare, bytes([0xFF if bits[0] else 0]))
        raw = bytearray((n + 7) // 8)
        for i, b in enumerate(bits):
            raw[i // 8] |= b << (i % 8)
        return A.DenseElements(bare, bytes(raw))
    size = 4 if elem == T.TF32 else max(1, (elem.width + 7) // 8)
    if elem == T.TF32:
        size = 3 if len(bits) == 1 else 4
    return A.DenseElements(bare, b"".join(b.to_bytes(size, "little") for b in bits))


def _flatten(body) -> list[str]:
    out, stack = [], [body]
    while stack:
        x = stack.pop()
        if isinstance(x, list):
            stack.extend(reversed(x))
        else:
            out.append(x)
    return out


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
