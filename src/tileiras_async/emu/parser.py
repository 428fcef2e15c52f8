"""PTX text -> a small syntax tree (module, functions, statements with line numbers).

Reads PTX as LLVM's NVPTX back end, NVIDIA's NVVM and our inline asm write it:
module directives, global/const/shared variables with initializers, entry and
device functions (prototypes too), register/variable declarations, brace
scopes (which may declare registers of their own), labels, predicated
instructions with vector operands, address expressions and call argument lists.
Debug sections (`.section .debug_*`) and `.loc`/`.file` lines are skipped.

Only syntax is checked here; what an instruction means is the machine's business.
"""
from __future__ import annotations

import bisect
import re
import struct
from dataclasses import dataclass, field

from .errors import PtxSyntaxError

# ---------------------------------------------------------------------------- operands


@dataclass(frozen=True)
class Reg:
    name: str
    neg: bool = False     # `!%p` (predicate operands only)

    def __str__(self):
        return ("!" if self.neg else "") + self.name


@dataclass(frozen=True)
class Imm:
    value: int

    def __str__(self):
        return str(self.value)


@dataclass(frozen=True)
class FImm:
    bits: int
    width: int            # 32 (0f...) or 64 (0d... and decimal literals)

    @property
    def value(self) -> float:
        if self.width == 32:
            return struct.unpack("<f", struct.pack("<I", self.bits))[0]
        return struct.unpack("<d", struct.pack("<Q", self.bits))[0]

    def __str__(self):
        return f"0f{self.bits:08X}" if self.width == 32 else f"0d{self.bits:016X}"


@dataclass(frozen=True)
class Sym:
    name: str
    offset: int = 0

    def __str__(self):
        return self.name + (f"+{self.offset}" if self.offset else "")


@dataclass(frozen=True)
class Vec:
    items: tuple

    def __str__(self):
        return "{" + ", ".join(map(str, self.items)) + "}"


@dataclass(frozen=True)
class Addr:
    base: object          # Reg | Sym | None
    offset: int = 0

    def __str__(self):
        b = "" if self.base is None else str(self.base)
        if self.base is None:
            return f"[{self.offset}]"
        return f"[{b}{'+' + str(self.offset) if self.offset else ''}]"


@dataclass(frozen=True)
class TensorAddr:
    """`[tmap, {c0, c1, ...}]`: a tensor map's address and the box's coordinates (cp.async.bulk.tensor)."""
    base: Addr
    coords: Vec

    def __str__(self):
        return f"[{str(self.base)[1:-1]}, {self.coords}]"


@dataclass(frozen=True)
class Sink:
    def __str__(self):
        return "_"


@dataclass(frozen=True)
class Pair:
    a: object
    b: object

    def __str__(self):
        return f"{self.a}|{self.b}"


@dataclass(frozen=True)
class ParamList:
    items: tuple

    def __str__(self):
        return "(" + ", ".join(map(str, self.items)) + ")"


# ---------------------------------------------------------------------------- statements


@dataclass
class Instr:
    opcode: str                  # full opcode with modifiers, e.g. "ld.global.v4.b32"
    operands: list
    line: int
    text: str
    pred: Reg | None = None      # guard predicate (Reg.neg for `@!p`)

    @property
    def parts(self) -> list[str]:
        return self.opcode.split(".")


@dataclass
class Label:
    name: str
    line: int


@dataclass
class RegDecl:
    type: str                    # e.g. "b32", "pred"
    names: list                  # list of (name, count|None): "%r<74>" -> ("%r", 74)
    line: int
    vector: int = 1


@dataclass
class VarDecl:
    space: str                   # shared, local, param, global, const
    type: str                    # element type, e.g. "b8", "u32"
    name: str
    line: int
    dims: tuple = ()             # () scalar; (N,) array; (0,) unsized ([])
    align: int | None = None
    init: list | None = None     # flat list of Imm/FImm/Sym
    vector: int = 1
    extern: bool = False
    attrs: tuple = ()            # other qualifiers (.ptr, .global, ...)

    @property
    def elem_size(self) -> int:
        return type_size(self.type) * self.vector

    @property
    def nbytes(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n * self.elem_size


@dataclass
class ScopeOpen:
    line: int


@dataclass
class ScopeClose:
    line: int


@dataclass
class Function:
    name: str
    kind: str                    # "entry" | "func"
    params: list                 # [VarDecl]
    rets: list                   # [VarDecl]
    body: list | None            # None for a prototype
    line: int
    attrs: dict = field(default_factory=dict)


@dataclass
class Module:
    version: str | None = None
    target: str | None = None
    address_size: int = 64
    functions: dict = field(default_factory=dict)   # name -> Function (definition wins)
    globals: list = field(default_factory=list)     # [VarDecl] (.global/.const/.shared at module scope)
    entries: list = field(default_factory=list)     # entry names in order


# ---------------------------------------------------------------------------- types

TYPE_SIZES = {
    "b8": 1, "u8": 1, "s8": 1, "b16": 2, "u16": 2, "s16": 2, "f16": 2, "bf16": 2,
    "b32": 4, "u32": 4, "s32": 4, "f32": 4, "f16x2": 4, "bf16x2": 4, "tf32": 4,
    "b64": 8, "u64": 8, "s64": 8, "f64": 8, "b128": 16, "pred": 1,
    "e4m3x2": 2, "e5m2x2": 2, "e2m3x2": 2, "e3m2x2": 2, "e2m1x2": 1, "u16x2": 4, "s16x2": 4, "f32x2": 8,
}


def type_size(t: str) -> int:
    try:
        return TYPE_SIZES[t]
    except KeyError:
        raise PtxSyntaxError(f"unknown PTX type .{t}") from None


# ---------------------------------------------------------------------------- lexing helpers


def strip_comments(text: str) -> str:
    """Blank out // and /* */ comments (keeping newlines and string literals)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        elif c == "/" and i + 1 < n and text[i + 1] == "/":
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c == "/" and i + 1 < n and text[i + 1] == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        else:
            j = i
            while j < n and text[j] not in '"/':
                j += 1
            if j == i:
                out.append(c)
                j = i + 1
            else:
                out.append(text[i:j])
            i = j
    return "".join(out)


def split_top(s: str, sep: str = ",") -> list[str]:
    """Split at `sep` outside (), [] and {}."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    last = "".join(cur)
    if last.strip() or parts:
        parts.append(last)
    return [p.strip() for p in parts]


_INT_RE = re.compile(r"^[+-]?(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)U?$")
_F32_RE = re.compile(r"^0[fF]([0-9a-fA-F]{8})$")
_F64_RE = re.compile(r"^0[dD]([0-9a-fA-F]{16})$")
_FLT_RE = re.compile(r"^[+-]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$|^[+-]?[0-9]+[eE][+-]?[0-9]+$")
_IDENT_RE = re.compile(r"^[A-Za-z_$%][\w$]*$")
_LABEL_RE = re.compile(r"([A-Za-z_$][\w$]*)[ \t]*:(?!:)")


def parse_int(s: str) -> int | None:
    s = s.strip()
    if not _INT_RE.match(s):
        return None
    neg = s.startswith("-")
    body = s.lstrip("+-").rstrip("U")
    if body.lower().startswith("0x"):
        v = int(body, 16)
    elif body.lower().startswith("0b"):
        v = int(body, 0)
    elif len(body) > 1 and body.startswith("0"):
        v = int(body, 8)
    else:
        v = int(body)
    return -v if neg else v


def parse_number(s: str):
    s = s.strip()
    neg = False
    t = s
    if t.startswith("-") and (_F32_RE.match(t[1:]) or _F64_RE.match(t[1:])):
        neg, t = True, t[1:]
    m = _F32_RE.match(t)
    if m:
        bits = int(m.group(1), 16) ^ (0x80000000 if neg else 0)
        return FImm(bits, 32)
    m = _F64_RE.match(t)
    if m:
        bits = int(m.group(1), 16) ^ (0x8000000000000000 if neg else 0)
        return FImm(bits, 64)
    v = parse_int(s)
    if v is not None:
        return Imm(v)
    if _FLT_RE.match(s):
        return FImm(struct.unpack("<Q", struct.pack("<d", float(s)))[0], 64)
    return None


def parse_operand(s: str, line: int):
    s = s.strip()
    if not s:
        raise PtxSyntaxError("empty operand", line=line)
    if s == "_":
        return Sink()
    c = s[0]
    if c == "[":
        if not s.endswith("]"):
            raise PtxSyntaxError(f"bad address operand '{s}'", line=line)
        parts = split_top(s[1:-1])
        if len(parts) == 2 and parts[1].strip().startswith("{"):
            coords = parse_operand(parts[1], line)
            return TensorAddr(parse_address(parts[0].strip(), line), coords)
        return parse_address(s[1:-1].strip(), line)
    if c == "{":
        if not s.endswith("}"):
            raise PtxSyntaxError(f"bad vector operand '{s}'", line=line)
        return Vec(tuple(parse_operand(p, line) for p in split_top(s[1:-1])))
    if c == "(":
        if not s.endswith(")"):
            raise PtxSyntaxError(f"bad parameter list '{s}'", line=line)
        inner = s[1:-1].strip()
        return ParamList(tuple(parse_operand(p, line) for p in split_top(inner)) if inner else ())
    if c == "!":
        r = parse_operand(s[1:], line)
        if not isinstance(r, Reg):
            raise PtxSyntaxError(f"'!' applies to predicate registers only: '{s}'", line=line)
        return Reg(r.name, True)
    if "|" in s:
        a, b = s.split("|", 1)
        return Pair(parse_operand(a, line), parse_operand(b, line))
    num = parse_number(s)
    if num is not None:
        return num
    if c == "%":
        if not re.match(r"^%[\w$]+(\.[xyz])?$", s):
            raise PtxSyntaxError(f"bad register '{s}'", line=line)
        return Reg(s)
    m = re.match(r"^([A-Za-z_$][\w$]*)\s*(?:([+-])\s*(\S+))?$", s)
    if m:
        off = 0
        if m.group(2):
            v = parse_int(m.group(3))
            if v is None:
                raise PtxSyntaxError(f"bad symbol offset in '{s}'", line=line)
            off = v if m.group(2) == "+" else -v
        return Sym(m.group(1), off)
    raise PtxSyntaxError(f"cannot parse operand '{s}'", line=line)


def parse_address(inner: str, line: int) -> Addr:
    inner = inner.replace(" ", "").replace("\t", "")
    if not inner:
        raise PtxSyntaxError("empty address", line=line)
    v = parse_int(inner)
    if v is not None:
        return Addr(None, v)
    base, off = inner, 0
    for sign_char, sign in (("+", 1), ("-", -1)):
        k = inner.find(sign_char, 1)
        if k > 0:
            base, o = inner[:k], inner[k + 1:]
            v = parse_int(o)
            if v is None:
                raise PtxSyntaxError(f"bad address offset in '[{inner}]'", line=line)
            off = sign * v
            break
    if base.startswith("%"):
        b = Reg(base)
    elif re.match(r"^[A-Za-z_$][\w$]*$", base):
        b = Sym(base)
    else:
        raise PtxSyntaxError(f"bad address '[{inner}]'", line=line)
    return Addr(b, off)


# ---------------------------------------------------------------------------- the parser

_TOP_LINE_RE = re.compile(r"\.(version|target|address_size|file|loc)[ \t]")
_LINE_DIR_RE = re.compile(r"\.(loc|file)[ \t]")


class _Scanner:
    def __init__(self, text: str):
        self.raw = text
        self.text = strip_comments(text)
        self.n = len(self.text)
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        self.raw_lines = text.split("\n")

    def line_of(self, pos: int) -> int:
        return bisect.bisect_right(self.line_starts, pos)

    def skip_ws(self, i: int) -> int:
        t, n = self.text, self.n
        while i < n and t[i] in " \t\r\n":
            i += 1
        return i

    def to_eol(self, i: int) -> int:
        j = self.text.find("\n", i)
        return self.n if j < 0 else j

    def past_string(self, j: int) -> int:
        """Index just past the string literal whose opening '"' is at j (the end of text if unclosed)."""
        k = self.text.find('"', j + 1)
        return self.n if k < 0 else k + 1

    def find_stmt_end(self, i: int, stop_at_brace: bool) -> tuple[int, str]:
        """Index of the ';' (or '{' at nesting depth 0 when `stop_at_brace`) ending a statement."""
        t, n = self.text, self.n
        depth = 0
        j = i
        while j < n:
            ch = t[j]
            if ch == '"':
                j = self.past_string(j)
                continue
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
            elif ch == "{":
                if stop_at_brace and depth == 0:
                    return j, "{"
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == ";" and depth <= 0:
                return j, ";"
            j += 1
        raise PtxSyntaxError("unterminated statement at end of file", line=self.line_of(i))

    def match_brace(self, i: int) -> int:
        """Index just past the '}' matching the '{' at i."""
        t, n = self.text, self.n
        depth = 0
        j = i
        while j < n:
            ch = t[j]
            if ch == '"':
                j = self.past_string(j)
                continue
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        raise PtxSyntaxError("unbalanced '{'", line=self.line_of(i))


def parse_ptx(text: str) -> Module:
    sc = _Scanner(text)
    mod = Module()
    t = sc.text
    i = 0
    while True:
        i = sc.skip_ws(i)
        if i >= sc.n:
            break
        line = sc.line_of(i)
        if _TOP_LINE_RE.match(t, i):
            j = sc.to_eol(i)
            words = t[i:j].replace(",", " ").split()
            if words[0] == ".version":
                mod.version = words[1] if len(words) > 1 else None
            elif words[0] == ".target":
                mod.target = words[1] if len(words) > 1 else None
            elif words[0] == ".address_size":
                mod.address_size = int(words[1])
            i = j
            continue
        if t.startswith(".section", i):
            k = t.find("{", i)
            if k < 0:
                raise PtxSyntaxError("bad .section", line=line)
            i = sc.match_brace(k)
            continue
        j, kind = sc.find_stmt_end(i, stop_at_brace=True)
        chunk = t[i:j]
        if kind == "{" and "=" in chunk:
            j, kind = sc.find_stmt_end(i, stop_at_brace=False)
            chunk = t[i:j]
        if kind == "{":
            if not re.search(r"\.(entry|func)\b", chunk):
                raise PtxSyntaxError(f"unexpected '{{' after '{chunk.strip()[:60]}'", line=line)
            fn = _parse_func_header(chunk, line)
            body, i = _parse_body(sc, j)
            fn.body = body
            mod.functions[fn.name] = fn
            if fn.kind == "entry":
                mod.entries.append(fn.name)
            continue
        i = j + 1
        s = chunk.strip()
        if not s:
            continue
        if re.search(r"\.(entry|func)\b", s) and "(" in s or re.search(r"\.(entry|func)\b", s):
            fn = _parse_func_header(s, line)
            fn.body = None
            mod.functions.setdefault(fn.name, fn)
            continue
        if s.startswith(".pragma"):
            continue
        v = _parse_var(s, line, module_scope=True)
        if v is not None:
            mod.globals.append(v)
            continue
        raise PtxSyntaxError(f"unexpected module-level statement '{s[:80]}'", line=line)
    return mod


def _parse_func_header(s: str, line: int) -> Function:
    s = " ".join(s.split())
    m = re.search(r"\.(entry|func)\b", s)
    kind = m.group(1)
    rest = s[m.end():].strip()
    rets: list = []
    if kind == "func" and rest.startswith("("):
        k = _match_paren(rest, 0)
        rets = _parse_param_list(rest[1:k], line)
        rest = rest[k + 1:].strip()
    mm = re.match(r"([A-Za-z_$][\w$]*)", rest)
    if not mm:
        raise PtxSyntaxError(f"missing function name in '{s[:80]}'", line=line)
    name = mm.group(1)
    rest = rest[mm.end():].strip()
    params: list = []
    if rest.startswith("("):
        k = _match_paren(rest, 0)
        params = _parse_param_list(rest[1:k], line)
        rest = rest[k + 1:].strip()
    attrs: dict = {}
    for am in re.finditer(r"\.(\w+)\s*([0-9,\s]*)", rest):
        vals = [int(x) for x in re.findall(r"\d+", am.group(2))]
        attrs[am.group(1)] = vals
    return Function(name, kind, params, rets, None, line, attrs)


def _match_paren(s: str, i: int) -> int:
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "(":
            depth += 1
        elif s[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    raise PtxSyntaxError("unbalanced '('")


def _parse_param_list(s: str, line: int) -> list:
    out = []
    for p in split_top(s):
        if not p:
            continue
        v = _parse_var(p, line, module_scope=False)
        if v is None or v.space != "param":
            raise PtxSyntaxError(f"bad parameter declaration '{p}'", line=line)
        out.append(v)
    return out


_SPACES = {"shared", "local", "param", "global", "const", "reg"}


def _parse_var(s: str, line: int, module_scope: bool) -> VarDecl | None:
    init = None
    if "=" in s:
        s, init_s = s.split("=", 1)
        init = _parse_init(init_s.strip(), line)
    toks = s.split()
    space = None
    typ = None
    align = None
    vector = 1
    extern = False
    attrs = []
    name = None
    k = 0
    while k < len(toks):
        tk = toks[k]
        if tk.startswith("."):
            q = tk[1:]
            base = q.split("::")[0]
            if base in _SPACES and space is None:
                space = base
            elif q == "align":
                k += 1
                align = int(toks[k])
            elif q in TYPE_SIZES and typ is None:
                typ = q
            elif re.match(r"^v[248]$", q):
                vector = int(q[1:])
            elif q == "extern":
                extern = True
            else:
                attrs.append(q)
        else:
            name = " ".join(toks[k:])
            break
        k += 1
    if space is None or typ is None or name is None:
        return None
    dims: list = []
    m = re.match(r"^([A-Za-z_$%][\w$]*)\s*((?:\[\s*\d*\s*\])*)$", name.strip())
    if not m:
        raise PtxSyntaxError(f"bad variable name '{name}'", line=line)
    for d in re.findall(r"\[\s*(\d*)\s*\]", m.group(2)):
        dims.append(int(d) if d else 0)
    return VarDecl(space, typ, m.group(1), line, tuple(dims), align, init, vector, extern, tuple(attrs))


def _parse_init(s: str, line: int) -> list:
    s = s.replace("{", " ").replace("}", " ")
    out = []
    for p in s.split(","):
        p = p.strip()
        if not p:
            continue
        num = parse_number(p)
        if num is not None:
            out.append(num)
            continue
        m = re.match(r"^(?:generic\()?([A-Za-z_$][\w$]*)\)?(?:\s*\+\s*(\d+))?$", p)
        if m:
            out.append(Sym(m.group(1), int(m.group(2) or 0)))
            continue
        raise PtxSyntaxError(f"cannot parse initializer '{p}'", line=line)
    return out


def _parse_body(sc: _Scanner, i: int) -> tuple[list, int]:
    """Parse a function body starting at its '{'; returns (statements, index past the '}')."""
    t = sc.text
    assert t[i] == "{"
    i += 1
    depth = 0
    items: list = []
    while True:
        i = sc.skip_ws(i)
        if i >= sc.n:
            raise PtxSyntaxError("unterminated function body", line=sc.line_of(i))
        c = t[i]
        line = sc.line_of(i)
        if c == "{":
            items.append(ScopeOpen(line))
            depth += 1
            i += 1
            continue
        if c == "}":
            if depth == 0:
                return items, i + 1
            items.append(ScopeClose(line))
            depth -= 1
            i += 1
            continue
        if _LINE_DIR_RE.match(t, i) or t.startswith("@@", i):
            i = sc.to_eol(i)
            continue
        m = _LABEL_RE.match(t, i)
        if m and not t.startswith(".", i):
            items.append(Label(m.group(1), line))
            i = m.end()
            continue
        j, _ = sc.find_stmt_end(i, stop_at_brace=False)
        stmt = t[i:j].strip()
        i = j + 1
        if not stmt:
            continue
        items.extend(_parse_stmt(stmt, line, sc))
    # unreachable


def _parse_stmt(stmt: str, line: int, sc: _Scanner) -> list:
    text = " ".join(stmt.split())
    if stmt.startswith("."):
        head = stmt.split(None, 1)[0]
        if head == ".reg":
            return [_parse_regdecl(text, line)]
        if head in (".pragma", ".maxnreg", ".maxntid", ".reqntid", ".minnctapersm"):
            return []
        v = _parse_var(text, line, module_scope=False)
        if v is None:
            raise PtxSyntaxError(f"cannot parse declaration '{text[:80]}'", line=line)
        return [v]
    pred = None
    s = text
    if s.startswith("@"):
        m = re.match(r"^@(!?)(%?[A-Za-z_$][\w$]*)\s+", s)
        if not m:
            raise PtxSyntaxError(f"bad guard predicate in '{text}'", line=line)
        pred = Reg(m.group(2), m.group(1) == "!")
        s = s[m.end():]
    parts = s.split(None, 1)
    opcode = parts[0]
    ops_s = parts[1] if len(parts) > 1 else ""
    if not re.match(r"^[a-z][\w.:]*$", opcode):
        raise PtxSyntaxError(f"bad instruction '{text[:80]}'", line=line)
    operands = [parse_operand(p, line) for p in split_top(ops_s)] if ops_s.strip() else []
    return [Instr(opcode, operands, line, text, pred)]


def _parse_regdecl(text: str, line: int) -> RegDecl:
    toks = text.split(None, 1)
    rest = toks[1] if len(toks) > 1 else ""
    quals = []
    while rest.startswith("."):
        q, _, rest = rest.partition(" ")
        quals.append(q[1:])
        rest = rest.strip()
    vector = 1
    typ = None
    for q in quals:
        if re.match(r"^v[248]$", q):
            vector = int(q[1:])
        elif q in TYPE_SIZES:
            typ = q
        else:
            raise PtxSyntaxError(f"unknown register qualifier .{q}", line=line)
    if typ is None:
        raise PtxSyntaxError(f"register declaration without a type: '{text}'", line=line)
    names = []
    for nm in split_top(rest):
        m = re.match(r"^(%?[A-Za-z_$][\w$]*)\s*(?:<\s*(\d+)\s*>)?$", nm)
        if not m:
            raise PtxSyntaxError(f"bad register name '{nm}'", line=line)
        names.append((m.group(1), int(m.group(2)) if m.group(2) else None))
    return RegDecl(typ, names, line, vector)
