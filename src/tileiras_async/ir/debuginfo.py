"""Debug-section attributes rendered in cuda_tile's textual syntax (used in diagnostics)."""
from __future__ import annotations

from .core import Module

TAG_COMPILE_UNIT, TAG_FILE, TAG_LEXICAL_BLOCK, TAG_LOC, TAG_SUBPROGRAM, TAG_CALLSITE = 1, 2, 3, 4, 5, 6
_MAX_DEPTH = 64


def _s(module: Module, i: int) -> str:
    raw = module.strings[i] if 0 <= i < len(module.strings) else b"?"
    return '"' + raw.decode(errors="replace").replace("\\", "\\\\").replace('"', '\\"') + '"'


def _body(module: Module, debug_id: int, depth: int) -> str | None:
    """The attribute's parameters, without its `#cuda_tile.name` prefix."""
    if depth > _MAX_DEPTH or not 0 < debug_id <= len(module.debug):
        return None
    e = module.debug[debug_id - 1]
    f = e.fields
    sub = lambda i: _body(module, i, depth + 1) or "?"  # noqa: E731
    if e.tag == TAG_FILE and len(f) == 2:
        return f"<{_s(module, f[0])} in {_s(module, f[1])}>"
    if e.tag == TAG_COMPILE_UNIT and len(f) == 1:
        return f"<file = {sub(f[0])}>"
    if e.tag == TAG_SUBPROGRAM and len(f) >= 6:
        file_, line, name, linkage, cu, scope_line = f[:6]
        return (f"<file = {sub(file_)}, line = {line}, name = {_s(module, name)}, "
                f"linkageName = {_s(module, linkage)}, compileUnit = {sub(cu)}, scopeLine = {scope_line}>")
    if e.tag == TAG_LEXICAL_BLOCK and len(f) == 4:
        scope, file_, line, col = f
        return f"<scope = {_ref(module, scope, depth)}, file = {sub(file_)}, line = {line}, column = {col}>"
    if e.tag == TAG_LOC and len(f) == 4:
        scope, filename, line, col = f
        return f"<loc({_s(module, filename)}:{line}:{col}) in {_ref(module, scope, depth)}>"
    return None


_NAMES = {TAG_COMPILE_UNIT: "di_compile_unit", TAG_FILE: "di_file", TAG_LEXICAL_BLOCK: "di_lexical_block",
          TAG_LOC: "di_loc", TAG_SUBPROGRAM: "di_subprogram"}


def _ref(module: Module, debug_id: int, depth: int) -> str:
    text = render_debug_attr(module, debug_id, depth + 1)
    return text or "?"


def render_debug_attr(module: Module, debug_id: int, depth: int = 0) -> str | None:
    """`#cuda_tile.di_loc<loc("f.py":18:33) in #cuda_tile.di_subprogram<...>>`, or None if unknown."""
    if depth > _MAX_DEPTH or not 0 < debug_id <= len(module.debug):
        return None
    e = module.debug[debug_id - 1]
    if e.tag == TAG_CALLSITE and len(e.fields) == 2:
        callee = render_debug_attr(module, e.fields[0], depth + 1) or "unknown"
        caller = render_debug_attr(module, e.fields[1], depth + 1) or "unknown"
        return f"callsite({callee} at {caller})"
    body = _body(module, debug_id, depth)
    name = _NAMES.get(e.tag)
    return f"#cuda_tile.{name}{body}" if body and name else None
