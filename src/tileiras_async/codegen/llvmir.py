"""A small textual LLVM IR builder.

Textual IR is what llvmlite parses fastest, and it keeps the emitter's output
readable in tests.  The builder only names values, tracks basic blocks and
collects declarations; what to emit is decided by the lowering patterns.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field


@dataclass
class Function:
    name: str
    params: list[tuple[str, str]]            # (llvm type, value name)
    attrs: str = ""
    blocks: list[tuple[str, list[str]]] = field(default_factory=list)
    subprogram: str = ""                     # "!N" when the kernel carries debug information

    def render(self) -> str:
        params = ", ".join(f"{t} {n}" for t, n in self.params)
        attrs = f"{self.attrs} !dbg {self.subprogram}" if self.subprogram else self.attrs
        body = []
        for label, lines in self.blocks:
            body.append(f"{label}:")
            body.extend(f"  {ln}" for ln in lines)  # lines may be Phi objects, filled in later
        return f"define ptx_kernel void @{self.name}({params}) {attrs} {{\n" + "\n".join(body) + "\n}\n"


class IRBuilder:
    """Appends instructions to the current block of one function."""

    def __init__(self, module: "ModuleIR", fn: Function):
        self.module = module
        self.fn = fn
        self._counter = 0
        self.dbg = ""          # ", !dbg !N" appended to instructions while a source location is current
        self.entry_dbg = ""    # the function's own location, for the entry block
        self.block_label = self.new_block("entry")

    # -- naming ---------------------------------------------------------
    def fresh(self, hint: str = "v") -> str:
        self._counter += 1
        return f"%{hint}{self._counter}"

    def new_block(self, hint: str = "bb") -> str:
        self._counter += 1
        label = f"{hint}{self._counter}"
        self.fn.blocks.append((label, []))
        self.block_label = label
        return label

    def reserve_block(self, hint: str = "bb") -> str:
        """A label to branch to before the block is started with `start_block`."""
        self._counter += 1
        return f"{hint}{self._counter}"

    def start_block(self, label: str) -> None:
        self.fn.blocks.append((label, []))
        self.block_label = label

    # -- instructions ---------------------------------------------------
    def emit(self, text: str) -> None:
        self.fn.blocks[-1][1].append(text + self.dbg)

    def value(self, expr: str, hint: str = "v") -> str:
        name = self.fresh(hint)
        self.emit(f"{name} = {expr}")
        return name

    def call(self, ret: str, fn: str, args: list[tuple[str, str]], decl_args: list[str] | None = None,
             hint: str = "c", attrs: str = "") -> str | None:
        self.module.declare(ret, fn, decl_args if decl_args is not None else [t for t, _ in args], attrs)
        arglist = ", ".join(f"{t} {v}" for t, v in args)
        if ret == "void":
            self.emit(f"call void @{fn}({arglist})")
            return None
        return self.value(f"call {ret} @{fn}({arglist})", hint)

    def asm(self, ret: str, template: str, constraints: str, args: list[tuple[str, str]],
            sideeffect: bool = True, hint: str = "a") -> str | None:
        arglist = ", ".join(f"{t} {v}" for t, v in args)
        se = "sideeffect " if sideeffect else ""
        text = f'call {ret} asm {se}"{_escape(template)}", "{constraints}"({arglist})'
        if ret == "void":
            self.emit(text)
            return None
        return self.value(text, hint)

    def phi(self, llvm_type: str, hint: str = "phi") -> Phi:
        p = Phi(self.fresh(hint), llvm_type, self.dbg)
        self.fn.blocks[-1][1].append(p)
        return p

    def emit_entry(self, text: str) -> None:
        """Append to the entry block (which dominates everything); it is closed by `finish`."""
        self.fn.blocks[0][1].append(text + self.entry_dbg)

    def entry_value(self, expr: str, hint: str = "v") -> str:
        name = self.fresh(hint)
        self.emit_entry(f"{name} = {expr}")
        return name

    def br(self, label: str) -> None:
        self.emit(f"br label %{label}")

    def cond_br(self, cond: str, true_label: str, false_label: str) -> None:
        self.emit(f"br i1 {cond}, label %{true_label}, label %{false_label}")


class Phi:
    """A phi whose incoming values are added as the predecessors are emitted."""

    def __init__(self, name: str, llvm_type: str, dbg: str = ""):
        self.name = name
        self.type = llvm_type
        self.dbg = dbg
        self.incoming: list[tuple[str, str]] = []  # (value, block label)

    def add(self, value: str, label: str) -> None:
        self.incoming.append((value, label))

    def __str__(self) -> str:
        inc = ", ".join(f"[ {v}, %{b} ]" for v, b in self.incoming)
        return f"{self.name} = phi {self.type} {inc}{self.dbg}"


def _escape(s: str) -> str:
    return s.replace("\\", "\\5C").replace('"', "\\22").replace("\n", "\\0A").replace("\t", "\\09")


class ModuleIR:
    TRIPLE = "nvptx64-nvidia-cuda"
    DATALAYOUT = ("e-p:64:64:64-p3:32:32:32-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-"
                  "f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64")

    def __init__(self):
        self.decls: dict[str, str] = {}
        self.globals: list[str] = []
        self.functions: list[Function] = []
        self.metadata: list[str] = []        # "!N = ..." definitions, N = index
        self.named_metadata: list[str] = []
        self._md_index: dict[str, str] = {}

    def md(self, text: str, distinct: bool = False) -> str:
        """A metadata node (uniqued unless distinct); returns its reference `!N`."""
        if not distinct and text in self._md_index:
            return self._md_index[text]
        ref = f"!{len(self.metadata)}"
        self.metadata.append(f"{ref} = {'distinct ' if distinct else ''}{text}")
        if not distinct:
            self._md_index[text] = ref
        return ref

    def no_unroll_loop(self) -> str:
        """A fresh `!llvm.loop` node that tells LLVM not to unroll the loop whose back edge carries it."""
        off = self.md('!{!"llvm.loop.unroll.disable"}')
        ref = f"!{len(self.metadata)}"
        got = self.md(f"!{{{ref}, {off}}}", distinct=True)
        assert got == ref
        return ref

    def declare(self, ret: str, name: str, arg_types: list[str], attrs: str = "") -> None:
        if name not in self.decls:
            self.decls[name] = f"declare {ret} @{name}({', '.join(arg_types)}) {attrs}".rstrip()

    def add_global(self, text: str) -> None:
        self.globals.append(text)

    def function(self, name: str, params: list[tuple[str, str]], attrs: str = "") -> IRBuilder:
        fn = Function(name, params, attrs)
        self.functions.append(fn)
        return IRBuilder(self, fn)

    def render(self) -> str:
        parts = [f'target triple = "{self.TRIPLE}"', f'target datalayout = "{self.DATALAYOUT}"', ""]
        parts += self.globals
        parts += [""] + sorted(self.decls.values()) + [""]
        parts += [fn.render() for fn in self.functions]
        parts += self.named_metadata + self.metadata
        return "\n".join(parts) + "\n"


# -- constants ----------------------------------------------------------------

def float_literal(value: float, llvm_type: str) -> str:
    """LLVM's exact hexadecimal spelling of a float constant of the given type."""
    if llvm_type in ("float", "double"):
        # LLVM writes float constants as the double with the same value
        return "0x%016X" % struct.unpack("<Q", struct.pack("<d", float(value)))[0]
    if llvm_type == "half":
        return "0xH%04X" % struct.unpack("<H", struct.pack("<e", float(value)))[0]
    raise ValueError(llvm_type)


def bits_literal(bits: int, llvm_type: str) -> str:
    """A float constant from its raw bit pattern in the given type."""
    if llvm_type == "half":
        return "0xH%04X" % bits
    if llvm_type == "bfloat":
        return "0xR%04X" % bits
    if llvm_type == "float":
        value = struct.unpack("<f", struct.pack("<I", bits))[0]
        return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]
    if llvm_type == "double":
        return "0x%016X" % bits
    raise ValueError(llvm_type)
