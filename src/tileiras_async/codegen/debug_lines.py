"""Source line information for the generated code (`--lineinfo`, `-g`): LLVM debug metadata built
from the bytecode's debug locations, which the NVPTX back end turns into `.file`/`.loc`."""
from __future__ import annotations

from ..ir.core import Function, Module
from ..ir.diagnostics import resolve_loc
from .llvmir import IRBuilder, ModuleIR

LINE_TABLES = "DebugDirectivesOnly"  # .loc/.file only: ptxas rejects DWARF sections unless -O0
FULL = "FullDebug"


def _quote(s: str) -> str:
    return '"' + s.replace("\\", "\\5C").replace('"', "\\22") + '"'


class LineInfo:
    """Builds the compile unit and the kernel's subprogram, and a !DILocation per source position."""

    def __init__(self, ir: ModuleIR, module: Module, fn: Function, kind: str, optimized: bool):
        self.ir = ir
        self.module = module
        loc = resolve_loc(module, fn.loc)
        filename = loc.file if loc else "<unknown>"
        self.file = ir.md(f"!DIFile(filename: {_quote(filename)}, directory: \"\")")
        cu = ir.md(f"!DICompileUnit(language: DW_LANG_C_plus_plus, file: {self.file}, producer: "
                   f"\"tileiras-async\", isOptimized: {'true' if optimized else 'false'}, runtimeVersion: 0, "
                   f"emissionKind: {kind})", distinct=True)
        ir.named_metadata.append(f"!llvm.dbg.cu = !{{{cu}}}")
        version = ir.md('!{i32 2, !"Debug Info Version", i32 3}')
        dwarf = ir.md('!{i32 2, !"Dwarf Version", i32 2}')
        ir.named_metadata.append(f"!llvm.module.flags = !{{{version}, {dwarf}}}")
        line = loc.line if loc else 0
        sp_type = ir.md("!DISubroutineType(types: !{})")
        flags = "DISPFlagDefinition | DISPFlagOptimized" if optimized else "DISPFlagDefinition"
        self.subprogram = ir.md(f"!DISubprogram(name: {_quote(fn.name.decode(errors='replace'))}, scope: "
                                f"{self.file}, file: {self.file}, line: {line}, type: {sp_type}, scopeLine: "
                                f"{line}, spFlags: {flags}, unit: {cu})", distinct=True)
        self.function_location = self.location(fn.loc) or self._dilocation(line, 0, self.file)

    def _dilocation(self, line: int, col: int, file_ref: str) -> str:
        scope = self.subprogram
        if file_ref != self.file:  # code from another file: a lexical block file scope
            scope = self.ir.md(f"!DILexicalBlockFile(scope: {self.subprogram}, file: {file_ref}, discriminator: 0)")
        return f", !dbg {self.ir.md(f'!DILocation(line: {line}, column: {col}, scope: {scope})')}"

    def location(self, debug_id: int) -> str:
        """`, !dbg !N` for an op's debug id ("" when it has no known location)."""
        loc = resolve_loc(self.module, debug_id)
        if loc is None:
            return ""
        file_ref = self.ir.md(f"!DIFile(filename: {_quote(loc.file)}, directory: \"\")")
        return self._dilocation(loc.line, loc.col, file_ref)

    def attach(self, b: IRBuilder) -> None:
        b.fn.subprogram = self.subprogram
        b.entry_dbg = self.function_location
        b.dbg = self.function_location
