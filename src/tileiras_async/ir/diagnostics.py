"""Diagnostics: what the verifier and later stages report, with the op's source location."""
from __future__ import annotations

from dataclasses import dataclass

from .core import DebugEntry, Module

DEBUG_DIFILE, DEBUG_DILOC, DEBUG_CALLSITE = 2, 4, 6


@dataclass(frozen=True)
class SourceLoc:
    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Diagnostic:
    severity: str            # "error", "warning", "remark", "note"
    message: str             # text after the "'cuda_tile.x' op " prefix, if any
    op: str | None = None    # op mnemonic, e.g. "divi"
    loc: SourceLoc | None = None
    debug_id: int = 0        # the op's Debug-section id, for rendering the full debug location
    then: tuple[str, ...] = ()   # further messages MLIR emits on the same op right after this one

    def render(self, message: str | None = None) -> str:
        """One line, formatted as NVIDIA's tileiras prints it on stderr."""
        message = self.message if message is None else message
        body = f"'cuda_tile.{self.op}' op {message}" if self.op else message
        return f"{self.severity}: {body}"

    def render_all(self) -> list[str]:
        """This diagnostic's line and those of the messages that follow it."""
        return [self.render(m) for m in (self.message, *self.then)]

    def render_with_loc(self) -> str:
        """Like render(), prefixed with file:line:col when the op has a location."""
        return f"{self.loc}: {self.render()}" if self.loc else self.render()


def resolve_loc(module: Module, debug_id: int, _depth: int = 0) -> SourceLoc | None:
    """Debug attribute id (1-based; 0 = unknown) -> file:line:col, following call sites to the callee."""
    if debug_id <= 0 or debug_id > len(module.debug) or _depth > 32:
        return None
    e: DebugEntry = module.debug[debug_id - 1]
    if e.tag == DEBUG_DILOC and len(e.fields) >= 4:   # the reader ignores extra fields
        _scope, filename, line, col = e.fields[:4]
        name = module.strings[filename].decode(errors="replace") if filename < len(module.strings) else "?"
        return SourceLoc(name, line, col)
    if e.tag == DEBUG_CALLSITE and len(e.fields) >= 2:
        return resolve_loc(module, e.fields[0], _depth + 1)
    return None
