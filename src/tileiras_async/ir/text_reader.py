"""Reads cuda_tile IR text -- what our `tileirdisasm`-compatible disassembler prints (ir/printer.py, the syntax
of the corpus's `*.disasm.txt` goldens) -- back into a Module.

There is no per-op reading code: each op is read by walking its declaration's assembly format (the FORMAT
column of ir/cuda_tile.py, which ir/printer.py prints with) the other way round.  Literals are expected,
`$operand`s name values defined above, `$attribute`s are read by the kind their declaration gives, `type(...)`
directives give result types, and an optional group `[[ ... ]]` is there when its first element is (a
literal or a value: by looking at the text; anything else: by trying it).  What the printer leaves out comes
back as the bytecode reader gives it: elided attributes at their default (unit attributes false), an implicit
terminator at the end of a region that does not show one, result types the format does not show from the
op's traits (`AllTypesMatch`), a token result as a token, and the other results of an op that shows one type
for all (`get_tile_block_id`) with that type.

The input is the module's ops (globals, entries), one after the other; `//` comments are skipped (a pass
test's RUN and CHECK lines).  Source locations (`loc(...)`, `tileirdisasm -g`) are not read.  Errors are
`TextError`s: `<file>:<line>:<col>: <what>`.  The cursor, the type syntax, predicates and dense element
bodies are shared with the tile-GPU IR's reader (tilegpu/parser.py), whose text writes cuda_tile types and
predicates the same way.
"""
from __future__ import annotations

import copy
import enum
import json
import re
from fractions import Fraction

from . import attrs as A
from . import enums as E
from . import types as T
from .core import Block, Function, Global, Module, Operation, Region, Value
from .opdef import UNIT, VARIADIC, AllTypesMatch
from .printer import FLOAT_FORMATS, _element_storage, _format, _round_to_format
from .verify_types import TOKEN


class TextError(Exception):
    """`file:line:col: what` (a command prints it after `error: `)."""


_COMMENT = re.compile(r"//[^\n]*(\n|$)")
_SPACE = re.compile(r"\s+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]*")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER = r"-?(0x[0-9A-Fa-f]+|inf|nan|\d+(\.\d*)?([eE][-+]?\d+)?)"
_ELEMENT = re.compile(r"true|false|" + _NUMBER)


class Cursor:
    """A position in the text, skipping blanks and `//` comments, with positioned errors."""

    def __init__(self, text: str, filename: str, error: type[Exception] = TextError):
        self.text, self.filename, self.pos, self.error_class = text, filename, 0, error

    def error(self, what: str, pos: int | None = None) -> Exception:
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return self.error_class(f"{self.filename}:{line}:{col}: {what}")

    def skip(self) -> None:
        while True:
            m = _SPACE.match(self.text, self.pos)
            if m:
                self.pos = m.end()
            if self.text.startswith("//", self.pos):
                self.pos = _COMMENT.match(self.text, self.pos).end()
                continue
            return

    def at_end(self) -> bool:
        self.skip()
        return self.pos >= len(self.text)

    def peek(self, lit: str) -> bool:
        self.skip()
        return self.text.startswith(lit, self.pos)

    def peek_word(self, word: str) -> bool:
        """`word` as a whole word (not the start of a longer identifier)."""
        if not self.peek(word):
            return False
        end = self.pos + len(word)
        return not (word[-1].isalnum() or word[-1] == "_") or not _WORD.match(self.text, end)

    def accept(self, lit: str) -> bool:
        if self.peek_word(lit):
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
        """A JSON string literal (the tile-GPU text's strings)."""
        self.skip()
        if not self.text.startswith('"', self.pos):
            raise self.error("expected a string")
        try:
            value, end = json.JSONDecoder().raw_decode(self.text, self.pos)
        except json.JSONDecodeError:
            raise self.error("malformed string") from None
        self.pos = end
        return value

    def mlir_string(self) -> bytes:
        """An MLIR string literal: `\\\\`, `\\"`, `\\n`, `\\t` and `\\XX` (a byte in hex) escaped."""
        self.skip()
        start = self.pos
        if not self.text.startswith('"', start):
            raise self.error("expected a string")
        out = bytearray()
        i = start + 1
        text = self.text
        while i < len(text) and text[i] != '"':
            ch = text[i]
            if ch != "\\":
                out += ch.encode("utf-8", "surrogateescape")
                i += 1
                continue
            nxt = text[i + 1:i + 2]
            if nxt in ('\\', '"', "n", "t"):
                out += {"\\": b"\\", '"': b'"', "n": b"\n", "t": b"\t"}[nxt]
                i += 2
            elif re.fullmatch(r"[0-9A-Fa-f]{2}", text[i + 1:i + 3]):
                out.append(int(text[i + 1:i + 3], 16))
                i += 3
            else:
                raise self.error("unknown escape in a string", i)
        if i >= len(text):
            raise self.error("unterminated string", start)
        self.pos = i + 1
        return bytes(out)

    def integer(self) -> int:
        return int(self.match(re.compile(r"-?\d+"), "an integer"))


SCALARS = {t.name if isinstance(t, T.FloatType) else f"i{t.width}": t for t in (
    T.I1, T.I4, T.I8, T.I16, T.I32, T.I64, T.F16, T.BF16, T.F32, T.TF32, T.F64, T.F8E4M3FN, T.F8E5M2,
    T.F8E8M0FNU, T.F4E2M1FN, T.FNV8E5M3FNU)}
TYPE_WORDS = frozenset(SCALARS) | {"tile", "ptr", "token", "tensor_view", "partition_view", "strided_view",
                                   "gather_scatter_view"}


class TypeReader:
    """cuda_tile's type spellings (ir/printer.py `type_str`) and assume predicates, over `self.c`.  A reader
    of a richer text extends `extra_type` (more type words) and `tile_tail` (what may follow a tile's
    element type)."""

    c: Cursor

    def type(self) -> T.Type:
        c = self.c
        c.skip()
        start = c.pos
        word = c.match(_WORD, "a type")
        if word in SCALARS:
            return SCALARS[word]
        if word == "token":
            return T.TOKEN
        if word == "tile":
            c.expect("<")
            shape = self.dims()
            elem = self.type()
            return self.tile_tail(shape, elem)
        if word == "ptr":
            c.expect("<")
            pointee = self.type()
            attr = self.ptr_attr("<") if c.accept(",") else None
            c.expect(">")
            return T.PointerType(pointee, attr)
        if word == "tensor_view":
            return self.tensor_view()
        if word in ("partition_view", "strided_view", "gather_scatter_view"):
            return self.view(word)
        t = self.extra_type(word)
        if t is None:
            raise c.error(f"unknown type '{word}'", start)
        return t

    def extra_type(self, word: str) -> T.Type | None:
        return None

    def tile_tail(self, shape: tuple[int, ...], elem: T.Type) -> T.Type:
        self.c.expect(">")
        return T.TileType(shape, elem)

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

    def predicate(self):
        """`div_by<...>`, `bounded<...>` or `same_elements<[...]>` (ir/printer.py `predicate_str`)."""
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

    def dense_body(self):
        """One element, or nested `[...]` lists of them (strings: the elements, as written)."""
        c = self.c
        if c.accept("["):
            return c.items("]", self.dense_body)
        return c.match(_ELEMENT, "a dense element")


def float_bits(type_name: str, text: str) -> int:
    """The bits of `text` in the float format: a decimal (rounded to the format, as MLIR's parser does),
    `inf`, `-inf`, `nan` (the quiet one) or `0x...` (the bits themselves)."""
    fmt = FLOAT_FORMATS[type_name]
    negative = text.startswith("-")
    body = text.lstrip("-")
    sign = (1 << (fmt.width - 1)) if negative and fmt.signed else 0
    if body.lower().startswith("0x"):
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


def dense_elements(body, t, cursor: Cursor, pos: int) -> A.DenseElements:
    """A dense constant of tile type `t` from its elements as written (one: a splat)."""
    if not isinstance(t, T.TileType):
        raise cursor.error("a dense constant needs a tile result", pos)
    bare = T.TileType(t.shape, t.elem)
    elems = flatten(body)
    elem = t.elem
    if not isinstance(elem, (T.FloatType, T.IntType)):
        raise cursor.error("a dense constant of numbers", pos)
    try:
        bits = [_element_bits(elem, x) for x in elems]
    except (ValueError, ZeroDivisionError):
        raise cursor.error(f"an element that is not a {elem}", pos) from None
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
    size = _element_storage(elem)
    return A.DenseElements(bare, b"".join(b.to_bytes(size, "little") for b in bits))


def _element_bits(elem: T.Type, text: str) -> int:
    if isinstance(elem, T.FloatType):
        if text in ("true", "false"):
            raise ValueError(text)
        return float_bits(elem.name, text)
    if text in ("true", "false"):
        return int(text == "true")
    return int(text, 16 if "0x" in text else 10) & ((1 << elem.width) - 1)


def flatten(body) -> list[str]:
    out, stack = [], [body]
    while stack:
        x = stack.pop()
        if isinstance(x, list):
            stack.extend(reversed(x))
        else:
            out.append(x)
    return out


# -- the ops --------------------------------------------------------------------------------------------------

def _mnemonics() -> dict[str, object]:
    """The cuda_tile ops by the word the text names them with (`pow` prints as `fpowf`)."""
    from .cuda_tile import CUDA_TILE
    return {_format(spec).mnemonic: spec for spec in CUDA_TILE}


_VALUE = re.compile(r"%[A-Za-z0-9_$.\-]+")
_USE = re.compile(r"%[A-Za-z0-9_$.\-]+(#\d+)?")


def _enum_kind(kind) -> type[enum.IntEnum] | None:
    """The enum class an attribute kind names (ir/enums.py), or None."""
    if isinstance(kind, type):
        return kind
    cls = getattr(E, kind, None) if isinstance(kind, str) else None
    return cls if isinstance(cls, type) and issubclass(cls, enum.Enum) else None


class _Op:
    """What has been read of one op so far (copied before an optional group is tried)."""

    def __init__(self, spec, names: list[tuple[str, int, int]], pos: int):
        self.spec, self.names, self.pos = spec, names, pos
        self.count = sum(n for _, n, _ in names)
        self.operands: dict[str, object] = {}
        self.attrs: dict[str, object] = {}
        self.result_types: list[T.Type | None] = [None] * self.count
        self.regions = [Region() for _ in spec.regions]
        self.region_args: dict[int, list[tuple[str, int, T.Type | None]]] = {}
        self.defaults: dict[str, str] = {}

    def copy(self) -> "_Op":
        other = copy.copy(self)
        other.operands = {k: (list(v) if isinstance(v, list) else v) for k, v in self.operands.items()}
        other.attrs, other.defaults = dict(self.attrs), dict(self.defaults)
        other.result_types, other.regions = list(self.result_types), list(self.regions)
        other.region_args = {k: list(v) for k, v in self.region_args.items()}
        return other


# Regions the text may nest (each takes a few Python frames: well inside the default recursion limit); deeper
# kernels exist only as bytecode (bytecode.reader.MAX_NESTING), which is read without recursion.
MAX_NESTING = 200


class ModuleReader(TypeReader):
    def __init__(self, text: str, filename: str, version: tuple[int, int, int]):
        self.c = Cursor(text, filename)
        self.version = version
        self.scopes: list[dict[str, list[Value]]] = [{}]
        self.ops = _mnemonics()

    # -- values ---------------------------------------------------------------------------------------------

    def define(self, name: str, values: list[Value], pos: int) -> None:
        if name in self.scopes[-1]:
            raise self.c.error(f"'{name}' defined twice", pos)
        self.scopes[-1][name] = values

    def use(self) -> Value:
        c = self.c
        c.skip()
        pos = c.pos
        text = c.match(_USE, "a value")
        name, _, index = text.partition("#")
        for scope in reversed(self.scopes):
            if name in scope:
                values = scope[name]
                i = int(index) if index else 0
                if i >= len(values) or (not index and len(values) > 1):
                    raise c.error(f"'{text}' names no single value", pos)
                return values[i]
        raise c.error(f"use of undefined value '{name}'", pos)

    def uses(self) -> list[Value]:
        """Values separated by commas, as long as another value follows a comma."""
        c = self.c
        out: list[Value] = []
        if not c.peek("%"):
            return out
        out.append(self.use())
        while True:
            save = c.pos
            if c.accept(",") and c.peek("%"):
                out.append(self.use())
                continue
            c.pos = save
            return out

    def types(self, n: int) -> list[T.Type]:
        out = []
        for i in range(n):
            if i:
                self.c.expect(",")
            out.append(self.type())
        return out

    # -- the module -----------------------------------------------------------------------------------------

    def module(self) -> Module:
        module = Module(self.version)
        while not self.c.at_end():
            pos = self.c.pos
            op = self.op()
            if op.name == "entry":
                body = op.regions[0].blocks[0]
                module.functions.append(Function(op.attrs["sym_name"], op.attrs["function_type"], body,
                                                 hints=op.attrs.get("optimization_hints")))
            elif op.name == "global":
                value = op.attrs["value"]
                module.globals.append(Global(op.attrs["sym_name"], value.type, value, op.attrs["alignment"],
                                             int(op.attrs.get("symbol_visibility", 0)), op.attrs["constant"]))
            else:
                raise self.c.error(f"'{op.spec.mnemonic}' at the top of the module (expected entry or global)", pos)
        return module

    # -- one op ---------------------------------------------------------------------------------------------

    def op(self) -> Operation:
        c = self.c
        c.skip()
        start = c.pos
        names: list[tuple[str, int, int]] = []
        if c.peek("%"):
            while True:
                c.skip()
                pos = c.pos
                name = c.match(_VALUE, "a value name")
                count = 1
                if c.text.startswith(":", c.pos) and c.text[c.pos + 1:c.pos + 2].isdigit():
                    c.pos += 1
                    count = c.integer()
                names.append((name, count, pos))
                if not c.accept(","):
                    break
            c.expect("=")
        c.skip()
        pos = c.pos
        word = c.match(_WORD, "an op")
        spec = self.ops.get(word)
        if spec is None:
            if word == "loc" and c.peek("("):
                raise c.error("source locations (tileirdisasm -g) are not read: print without them", pos)
            raise c.error(f"unknown op '{word}'", pos)
        st = _Op(spec, names, start)
        fmt = _format(spec)
        if fmt.custom == "loop":
            self.loop(st)
        else:
            self.elems(fmt.elems, st)
        return self.build(st)

    def build(self, st: _Op) -> Operation:
        spec = st.spec
        for a in spec.attrs:
            if a.name in st.attrs or self.version[1] < a.since:   # (an older module has no such attribute)
                continue
            if a.kind == UNIT:
                st.attrs[a.name] = False
            elif a.name in st.defaults:
                st.attrs[a.name] = self.spelled(a.kind, st.defaults[a.name], st.pos)
            elif a.kind == "boolarr" and not a.optional:   # all false is not printed: one per index
                indices = next((v for v in st.operands.values() if isinstance(v, list)), [])
                st.attrs[a.name] = (False,) * len(indices)
        types = self.result_types(st)
        op = Operation(spec, st.operands, st.attrs, types, st.regions)
        i = 0
        for name, count, pos in st.names:
            self.define(name, op.results[i:i + count], pos)
            i += count
        return op

    def result_types(self, st: _Op) -> list[T.Type]:
        """The types the format showed, then those the op's traits and result kinds imply."""
        spec, types = st.spec, st.result_types
        slots = self.result_slots(st)
        for trait in spec.traits:
            if not isinstance(trait, AllTypesMatch):
                continue
            known = [self.known_types(st, n) for n in trait.names]
            source = next((k for k in known if k is not None), None)
            if source is None:
                continue
            for n in trait.names:
                for i, t in zip(slots.get(n, ()), source if len(slots.get(n, ())) > 1 or
                                isinstance(source, list) else [source]):
                    if types[i] is None:
                        types[i] = t
        for r in spec.results:
            for i in slots.get(r.name, ()):
                if types[i] is None and r.constraint is TOKEN:
                    types[i] = T.TOKEN
        first = next((t for t in types if t is not None), None)
        if any(t is None for t in types) and first is None:
            raise self.c.error(f"the types of '{spec.mnemonic}''s results are not shown", st.pos)
        return [first if t is None else t for t in types]

    def result_slots(self, st: _Op) -> dict[str, list[int]]:
        """Each declared result's positions among the op's results."""
        spec = st.spec
        fixed = sum(1 for r in spec.results if r.form == "one")
        out, i = {}, 0
        for r in spec.results:
            n = 1 if r.form == "one" else max(0, st.count - fixed) if r.form == VARIADIC else \
                (1 if st.count > fixed else 0)
            out[r.name] = list(range(i, min(i + n, st.count)))
            i += n
        return out

    def known_types(self, st: _Op, name: str):
        """The type(s) of an operand or result already known (a list for a variadic group), or None."""
        if name in st.operands:
            v = st.operands[name]
            if isinstance(v, list):
                return [x.type for x in v]
            return v.type if v is not None else None
        slots = self.result_slots(st).get(name)
        if slots:
            ts = [st.result_types[i] for i in slots]
            if all(t is not None for t in ts):
                return ts if st.spec.results[[r.name for r in st.spec.results].index(name)].form == VARIADIC \
                    else ts[0]
        return None

    # -- the format -----------------------------------------------------------------------------------------

    def elems(self, elems, st: _Op) -> None:
        for e in elems:
            if e.kind == "opt":
                self.optional(e, st)
            elif e.kind == "lit":
                self.c.expect(e.text)
            elif e.kind == "var":
                self.var(e, st)
            elif e.kind == "dir":
                getattr(self, "d_" + e.text)(st, *e.args)
            # glue, space, attrs: nothing to read (the printer writes no attribute dictionary)

    def optional(self, e, st: _Op) -> None:
        anchor = next(x for x in e.children if x.anchor)
        unit = anchor.kind == "var" and getattr(st.spec.attr(anchor.text), "kind", None) == UNIT
        children = [x for x in e.children if not (unit and x is anchor)]
        if anchor.kind == "var" and anchor.args:
            st.defaults[anchor.text] = anchor.args[0]
        first = children[0]
        c = self.c
        if first.kind == "lit":
            present = c.peek_word(first.text)
        elif first.kind == "var" and st.spec.operand(first.text) is not None:
            present = c.peek("%")
        else:   # an attribute or a directive: try it
            save, before = c.pos, st.copy()
            try:
                self.elems(children, st)
            except TextError:
                c.pos = save
                st.__dict__.update(before.__dict__)
                return
            present = None
        if present:
            self.elems(children, st)
        if present is not False and unit:
            st.attrs[anchor.text] = True

    def var(self, e, st: _Op) -> None:
        spec, name = st.spec, e.text
        operand = spec.operand(name)
        if operand is not None:
            st.operands[name] = self.uses() if operand.form == VARIADIC else self.use()
            return
        adef = spec.attr(name)
        if adef is None:
            raise self.c.error(f"internal: '{spec.mnemonic}' format names ${name}")
        if e.args:
            st.defaults[name] = e.args[0]
        st.attrs[name] = self.attribute(adef.kind)

    def attribute(self, kind):
        c = self.c
        kind = _enum_kind(kind) or kind
        if isinstance(kind, type):
            bracketed = c.accept("<")
            c.skip()
            pos = c.pos
            value = self.spelled(kind, c.match(_IDENT, f"a {kind.__name__}"), pos)
            if bracketed:
                c.expect(">")
            return value
        if kind == "int":
            return c.integer()
        if kind == "str":
            return c.mlir_string()
        if kind == "bool":
            return self.boolean()
        if kind == "i32arr":
            c.expect("[")
            return tuple(c.items("]", c.integer))
        if kind == "boolarr":
            c.expect("[")
            return tuple(c.items("]", self.boolean))
        if kind == "array":
            c.expect("[")
            return tuple(c.items("]", lambda: self.typed_attr(T.I64, T.F64, A.IntegerAttr)))
        if kind == "hints":
            return self.hints()
        if kind == "type":
            return self.type()
        raise c.error(f"internal: cannot read a '{kind}' attribute")

    def spelled(self, kind, word: str, pos: int):
        """An enum case by its spelling (`and`: AtomicRMWMode.and_), or a default written in the format."""
        kind = _enum_kind(kind) or kind
        if isinstance(kind, type):
            for member in kind:
                if E.spelling(member) == word:
                    return member
            raise self.c.error(f"unknown {kind.__name__} '{word}'", pos)
        return int(word) if kind == "int" else word

    def boolean(self) -> bool:
        c = self.c
        c.skip()
        pos = c.pos
        word = c.match(_WORD, "true or false")
        if word not in ("true", "false"):
            raise c.error(f"expected true or false, found '{word}'", pos)
        return word == "true"

    def typed_attr(self, int_type: T.Type, float_type: T.Type, bool_kind) -> A.Attr:
        """A number with its type (`: i32`; without one: `int_type` / `float_type`), true/false, a string,
        or a list of them."""
        c = self.c
        c.skip()
        pos = c.pos
        if c.accept("["):
            return A.ArrayAttr(tuple(c.items("]", lambda: self.typed_attr(int_type, float_type, bool_kind))))
        if c.peek('"'):
            return A.StringAttr(c.mlir_string())
        if c.peek_word("true") or c.peek_word("false"):
            value = self.boolean()
            return A.IntegerAttr(T.I1, int(value)) if bool_kind is A.IntegerAttr else A.BoolAttr(value)
        text = c.match(re.compile(_NUMBER), "a number")
        t = self.type() if c.accept(":") else None
        integral = re.fullmatch(r"-?\d+", text) is not None
        if t is None:
            t = int_type if integral else float_type
        if isinstance(t, T.IntType):
            if not integral:
                raise c.error(f"'{text}' is not an integer", pos)
            return A.IntegerAttr(t, int(text) & ((1 << t.width) - 1))
        if not isinstance(t, T.FloatType):
            raise c.error(f"a number of type {t}", pos)
        return A.FloatAttr(t, float_bits(t.name, text))

    def hints(self) -> A.OptimizationHintsAttr:
        """`<sm_100 = {latency = 2, allow_tma = false}, ...>` (ir/printer.py `hints_str`)."""
        c = self.c
        c.expect("<")

        def entry(value):
            def read():
                key = c.match(_IDENT, "a name").encode()
                c.expect("=")
                return key, value()
            return read

        def table():
            c.expect("{")
            return A.DictAttr(tuple(c.items("}", entry(lambda: self.typed_attr(T.I32, T.F32, A.BoolAttr)))))
        return A.OptimizationHintsAttr(tuple(c.items(">", entry(table))))

    # -- directives (ir/printer.py DIRECTIVES, read) -----------------------------------------------------------

    def d_type(self, st: _Op, ref: str) -> None:
        name = ref[1:]
        if name == "results":
            st.result_types[:] = self.types(st.count)
            return
        slots = self.result_slots(st).get(name)
        if slots is not None:
            for i, t in zip(slots, self.types(len(slots))):
                st.result_types[i] = t
            return
        value = st.operands.get(name)
        self.types(len(value) if isinstance(value, list) else int(value is not None))

    def d_firsttype(self, st: _Op, ref: str) -> None:
        if st.count:
            t = self.type()
            st.result_types[:] = [t] * st.count

    def d_kw(self, st: _Op, ref: str) -> None:
        name = ref[1:]
        c = self.c
        c.skip()
        pos = c.pos
        st.attrs[name] = self.spelled(st.spec.attr(name).kind, c.match(_IDENT, "a keyword"), pos)

    def d_rounding(self, st: _Op, ref: str) -> None:
        name, _, default = ref[1:].partition("=")
        st.defaults[name] = default
        if self.c.accept("rounding"):
            st.attrs[name] = self.attribute(st.spec.attr(name).kind)

    def d_pred(self, st: _Op, ref: str) -> None:
        st.attrs[ref[1:]] = self.predicate()

    def d_dense(self, st: _Op, ref: str) -> None:
        """`<elem: body> : type`: the body one element, nested lists, or `"0x..."` (the raw buffer)."""
        c = self.c
        c.skip()
        pos = c.pos
        c.expect("<")
        self.type()
        c.expect(":")
        c.skip()
        raw = c.mlir_string() if c.peek('"') else None
        body = None if raw is not None else self.dense_body()
        c.expect(">")
        c.expect(":")
        t = self.type()
        if raw is not None:
            value = self.hex_dense(raw, t, pos)
        else:
            value = dense_elements(body, t, c, pos)
        st.attrs[ref[1:]] = value
        if st.spec.name == "constant" and st.count:
            st.result_types[0] = t

    def hex_dense(self, raw: bytes, t: T.Type, pos: int) -> A.DenseElements:
        text = raw.decode("latin-1")
        if not re.fullmatch(r"0x([0-9A-Fa-f]{2})*", text) or not isinstance(t, T.TileType):
            raise self.c.error("a dense constant's hex string is 0x and whole bytes", pos)
        data = bytes.fromhex(text[2:])
        if getattr(t.elem, "width", 8) == 1:   # one byte per i1 element in the text, bits in memory
            packed = bytearray((len(data) + 7) // 8)
            for i, b in enumerate(data):
                packed[i // 8] |= (b & 1) << (i % 8)
            data = bytes(packed)
        return A.DenseElements(T.TileType(t.shape, t.elem), data)

    def d_sym(self, st: _Op, ref: str) -> None:
        c = self.c
        c.expect("@")
        st.attrs[ref[1:]] = c.mlir_string() if c.peek('"') else c.match(_IDENT, "a symbol").encode()

    def d_vis(self, st: _Op, ref: str) -> None:
        for member in E.SymbolVisibility:
            if self.c.accept(E.spelling(member)):
                st.attrs[ref[1:]] = member
                return

    def d_idxtypes(self, st: _Op, ref: str) -> None:
        while self.c.accept(","):
            self.type()

    def d_mixed(self, st: _Op, ref: str, which: str) -> None:
        """Static sizes inline, dynamic ones as values (the result type, read later, holds the static)."""
        c = self.c
        values = st.operands.setdefault(ref[1:], [])
        if c.peek("]"):
            return
        while True:
            if c.peek("%"):
                values.append(self.use())
            else:
                c.integer()
            if not c.accept(","):
                return

    def d_viewsrc(self, st: _Op, base: str, *dynamic: str) -> None:
        self.types(1)
        while self.c.accept(","):
            self.type()

    def d_signature(self, st: _Op, index: str) -> None:
        c = self.c
        c.expect("(")

        def argument():
            c.skip()
            pos = c.pos
            name = c.match(_VALUE, "an argument")
            c.expect(":")
            return name, pos, self.type()
        st.region_args[int(index)] = c.items(")", argument)
        if st.spec.name == "entry":
            st.attrs["function_type"] = T.FunctionType(tuple(t for _, _, t in st.region_args[0]), ())

    def d_region(self, st: _Op, index: str) -> None:
        self.region(st, int(index), None)

    def d_cfregion(self, st: _Op, index: str, implicit: str) -> None:
        self.region(st, int(index), implicit)

    def d_argregion(self, st: _Op, index: str) -> None:
        self.d_signature(st, index)
        self.region(st, int(index), None)

    def d_ivar(self, st: _Op, index: str) -> None:
        c = self.c
        c.skip()
        pos = c.pos
        st.region_args.setdefault(int(index), []).insert(0, (c.match(_VALUE, "an induction variable"), pos, None))

    def d_iterinit(self, st: _Op, index: str, ref: str) -> None:
        c = self.c
        args = st.region_args.setdefault(int(index), [])
        values = st.operands.setdefault(ref[1:], [])
        while True:
            c.skip()
            pos = c.pos
            name = c.match(_VALUE, "an iteration argument")
            c.expect("=")
            v = self.use()
            args.append((name, pos, v.type))
            values.append(v)
            if not c.accept(","):
                return

    def loop(self, st: _Op) -> None:
        """LoopOp's own syntax (ir/printer.py `_print_loop`)."""
        c = self.c
        st.operands["initValues"] = []
        if c.accept("iter_values"):
            c.expect("(")
            self.d_iterinit(st, "0", "$initValues")
            c.expect(")")
        inits = st.operands["initValues"]
        if c.accept(":"):
            if inits:
                self.types(len(inits))
            if st.count and (not inits or c.accept("->")):
                st.result_types[:] = self.types(st.count)
        self.region(st, 0, "continue")

    def region(self, st: _Op, index: int, implicit: str | None) -> None:
        """`{ op* }` with the arguments read before it; an implicit terminator where none is shown."""
        c = self.c
        if len(self.scopes) > MAX_NESTING:   # a fixed limit: the reader recurses per region, and the process's
            raise c.error(f"regions nested more than {MAX_NESTING} deep")   # recursion limit may have been raised
        c.expect("{")
        args = st.region_args.get(index, [])
        first = st.spec.operands[0].name if st.spec.operands else None
        types = [t if t is not None else getattr(st.operands.get(first), "type", None) for _, _, t in args]
        if any(t is None for t in types):
            raise c.error("internal: a region argument without a type")
        block = Block(types)
        self.scopes.append({})
        for (name, pos, _), v in zip(args, block.args):
            self.define(name, [v], pos)
        while not c.accept("}"):
            if c.at_end():
                raise c.error("expected '}'")
            block.ops.append(self.op())
        self.scopes.pop()
        if implicit is not None and not (block.ops and block.ops[-1].spec.is_terminator):
            block.ops.append(Operation(implicit))
        st.regions[index] = Region([block])


def read_text_module(text: str, filename: str = "<input>", version: tuple[int, int, int] = (13, 4, 0)) -> Module:
    """A module from cuda_tile IR text (globals and entries, as our disassembler prints them); the text does
    not say its bytecode version: `version` (what an attribute newer than it lacks)."""
    reader = ModuleReader(text, filename, version)
    try:
        return reader.module()
    except RecursionError:   # regions are read recursively
        raise reader.c.error("regions nested too deeply") from None


def looks_like_cuda_tile(text: str) -> bool:
    """Whether `text` (past blanks and comments) starts as our disassembler's output: `entry` or `global`."""
    c = Cursor(text, "")
    c.skip()
    m = _WORD.match(text, c.pos)
    return m is not None and m.group(0) in ("entry", "global")

