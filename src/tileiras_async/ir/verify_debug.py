"""Debug-info rules of cuda_tile (DebugInfoVerifier) over the module's Debug table.

1. a function location must not be a call site;
2. a function's DILoc scope must be a DISubprogram whose linkage name is the function's name;
3. ops may carry a subprogram scope only if their function has one;
4. an op's subprogram must be its function's.

Debug attributes are compared structurally (MLIR uniques them) and printed as
NVIDIA's tool prints them in these diagnostics.
"""
from __future__ import annotations

from .core import Function, Module
from .diagnostics import DEBUG_CALLSITE, DEBUG_DIFILE, DEBUG_DILOC

DEBUG_COMPILE_UNIT, DEBUG_LEXICAL_BLOCK, DEBUG_SUBPROGRAM = 1, 3, 5


def _entry(module: Module, debug_id: int):
    if 0 < debug_id <= len(module.debug):
        return module.debug[debug_id - 1]
    return None


def _string(module: Module, i: int) -> str:
    raw = module.strings[i] if 0 <= i < len(module.strings) else b"?"
    out = []
    for b in raw:
        c = chr(b)
        if c in '"\\':
            out.append("\\" + c)
        elif 0x20 <= b < 0x7F:
            out.append(c)
        else:
            out.append(f"\\{b:02X}")
    return '"' + "".join(out) + '"'


def attr_str(module: Module, debug_id: int, nested: bool = False, _depth: int = 0) -> str:
    """MLIR spelling of a debug scope attribute (nested struct params drop the `#cuda_tile.x` prefix)."""
    e = _entry(module, debug_id)
    if e is None or _depth > 16:
        return "<<NULL ATTRIBUTE>>"
    f = e.fields
    if e.tag == DEBUG_DIFILE and len(f) == 2:
        body = f"<{_string(module, f[0])} in {_string(module, f[1])}>"
        return body if nested else "#cuda_tile.di_file" + body
    if e.tag == DEBUG_COMPILE_UNIT and len(f) == 1:
        body = f"<file = {attr_str(module, f[0], True, _depth + 1)}>"
        return body if nested else "#cuda_tile.di_compile_unit" + body
    if e.tag == DEBUG_SUBPROGRAM and len(f) >= 5:
        body = (f"<file = {attr_str(module, f[0], True, _depth + 1)}, line = {f[1]}, "
                f"name = {_string(module, f[2])}, linkageName = {_string(module, f[3])}, "
                f"compileUnit = {attr_str(module, f[4], True, _depth + 1)}")
        if len(f) > 5:
            body += f", scopeLine = {f[5]}"
        body += ">"
        return body if nested else "#cuda_tile.di_subprogram" + body
    if e.tag == DEBUG_LEXICAL_BLOCK and len(f) == 4:
        body = (f"<scope = {attr_str(module, f[0], False, _depth + 1)}, "
                f"file = {attr_str(module, f[1], True, _depth + 1)}, line = {f[2]}, column = {f[3]}>")
        return body if nested else "#cuda_tile.di_lexical_block" + body
    return "<<UNKNOWN ATTRIBUTE>>"


def _key(module: Module, debug_id: int, _depth: int = 0):
    """Structural identity of a debug attribute (ids with equal content are the same attribute)."""
    e = _entry(module, debug_id)
    if e is None or _depth > 16:
        return None
    refs = {DEBUG_DIFILE: (), DEBUG_COMPILE_UNIT: (0,), DEBUG_SUBPROGRAM: (0, 4), DEBUG_LEXICAL_BLOCK: (0, 1)}
    strs = {DEBUG_DIFILE: (0, 1), DEBUG_SUBPROGRAM: (2, 3)}
    parts = []
    for i, v in enumerate(e.fields):
        if i in refs.get(e.tag, ()):
            parts.append(_key(module, v, _depth + 1))
        elif i in strs.get(e.tag, ()):
            parts.append(module.strings[v] if 0 <= v < len(module.strings) else None)
        else:
            parts.append(v)
    return (e.tag, tuple(parts))


def _di_loc(module: Module, debug_id: int, _depth: int = 0):
    """getDILoc: the DILoc entry behind a location (call sites use their caller)."""
    e = _entry(module, debug_id)
    if e is None or _depth > 32:
        return None
    if e.tag == DEBUG_DILOC and len(e.fields) == 4:
        return e
    if e.tag == DEBUG_CALLSITE and len(e.fields) == 2:
        return _di_loc(module, e.fields[1], _depth + 1)
    return None


def _subprogram(module: Module, scope_id: int, _depth: int = 0):
    """The DISubprogram id of a local scope (through lexical blocks), or None."""
    e = _entry(module, scope_id)
    if e is None or _depth > 32:
        return None
    if e.tag == DEBUG_SUBPROGRAM:
        return scope_id
    if e.tag == DEBUG_LEXICAL_BLOCK and e.fields:
        return _subprogram(module, e.fields[0], _depth + 1)
    return None


def function_debug(ctx, fn: Function):
    """verifyFuncDebugInfo (rules 1 and 2)."""
    m = ctx.module
    e = _entry(m, fn.loc)
    if e is not None and e.tag == DEBUG_CALLSITE:
        return "invalid function debug info location: <callsite>. Function location must not be a CallSiteLoc."
    loc = _di_loc(m, fn.loc)
    if loc is None:
        return None
    scope = loc.fields[0]
    sp = _entry(m, scope)
    if sp is None or sp.tag != DEBUG_SUBPROGRAM:
        return (f"invalid function debug info scope: {attr_str(m, scope)}. Function location must have "
                f"cuda_tile.di_subprogram debug info scope.")
    linkage = m.strings[sp.fields[3]] if sp.fields[3] < len(m.strings) else b""
    if linkage != fn.name:
        return (f"invalid function debug info scope: {attr_str(m, scope)}. Function name "
                f"\"{fn.name.decode(errors='replace')}\" does not match subprogram scope linkage name "
                f"{_string(m, sp.fields[3])}.")
    return None


def _post_order(block):
    for op in block.ops:
        for region in op.regions:
            for b in region.blocks:
                yield from _post_order(b)
        yield op


def body_debug(ctx, entry_view):
    """verifyFuncBodyDebugInfo (rules 3 and 4), ops in post-order."""
    from .verify_ops import Fail
    m = ctx.module
    fn = entry_view.fn
    fn_loc = _di_loc(m, fn.loc)
    fn_sp = _subprogram(m, fn_loc.fields[0]) if fn_loc is not None else None
    fn_key = _key(m, fn_sp) if fn_sp is not None else None
    for op in _post_order(fn.body):
        loc = _di_loc(m, op.loc)
        if loc is None:
            continue
        sp = _subprogram(m, loc.fields[0])
        if sp is None:
            continue
        if fn_sp is None:
            raise Fail(f"invalid operation debug info scope: {attr_str(m, sp)}. Operation has debug info scope, "
                       f"but function debug info scope is undefined.", op_name=op.name, at=op)
        if _key(m, sp) != fn_key:
            raise Fail(f"invalid operation debug info scope: {attr_str(m, sp)}. Operation debug info scope does "
                       f"not match function debug info scope: {attr_str(m, fn_sp)}.", with_op=False, at=op)
    return None
