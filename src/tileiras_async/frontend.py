"""The input stage shared by every front door: bytes -> verified cuda_tile Module.

Failures become `InputError` carrying the diagnostic lines the real tool
prints and its exit code, so the CLIs only print and exit.
"""
from __future__ import annotations

from .bytecode.errors import BytecodeError, NotTileIR
from .bytecode.opspec import BASE_MINOR, MAX_MINOR
from .bytecode.reader import peek_version, read_module
from .inputs import (EXIT_BAD_INPUT, EXIT_CODEGEN, EXIT_CONFIG, EXIT_PTXAS, EXIT_USAGE,  # noqa: F401  (re-exported)
                     InputError, read_input_file)
from .ir.core import Module

VERIFY_FAILED = "verification failed for deserialized cuda_tile::ModuleOp"
SUPPORTED_VERSIONS = [f"13.{m}" for m in range(BASE_MINOR, MAX_MINOR + 1)]


def check_version_like_driver(data: bytes) -> tuple[int, int] | None:
    """tileiras looks at the version bytes before parsing and reports only that line."""
    v = peek_version(data)
    if v is not None and f"{v[0]}.{v[1]}" not in SUPPORTED_VERSIONS:
        raise InputError([f"error: unsupported Tile IR bytecode version: {v[0]}.{v[1]}"])
    return v


def parse(data: bytes, trailer: str) -> Module:
    """Parse bytecode; diagnostics end with `trailer`, which each real tool words differently."""
    try:
        return read_module(data)
    except NotTileIR as e:
        raise InputError([f"error: {e.lines[0]}"]) from None
    except BytecodeError as e:
        raise InputError([f"error: {line}" for line in e.lines] + [f"error: {trailer}"]) from None
    except RecursionError:
        raise InputError(["error: bytecode nesting is too deep", f"error: {trailer}"]) from None


def verify(module: Module, trailer: str | None, with_debug_locations: bool,
           hint_warnings: list[str] | None = None, error_on_hints: bool = False) -> None:
    """Run the verifier; its errors (the first of each entry function, as the real tool) are fatal.
    `hint_warnings` (tileiras -Wunsupported-hints) receives the warning lines about optimization hints,
    which also lead the error lines when the module fails."""
    from .ir.verifier import FORMAT_INVARIANTS_FAILED, format_invariant_error, reported_errors
    from .ir.printer import render_location

    warnings = [] if hint_warnings is not None else None
    errors = reported_errors(module, hint_warnings=warnings, error_on_hints=error_on_hints)
    if warnings:
        hint_warnings += [text for w in warnings for text in w.render_all()]
    if not errors:
        broken = format_invariant_error(module)
        if broken:
            raise InputError([f"error: {broken}", f"error: {FORMAT_INVARIANTS_FAILED}"]
                             + ([f"error: {trailer}"] if trailer else []), EXIT_BAD_INPUT)
        return
    lines = list(hint_warnings or [])
    for diag in errors:
        where = render_location(module, diag.debug_id) if with_debug_locations and diag.debug_id else None
        lines += [f"{where}: {text}" if where else text for text in diag.render_all()]
    lines.append(f"error: {VERIFY_FAILED}")
    if trailer:
        lines.append(f"error: {trailer}")
    raise InputError(lines, EXIT_BAD_INPUT)


def load(data: bytes, trailer: str, *, with_debug_locations: bool, hint_warnings: list[str] | None = None,
         error_on_hints: bool = False) -> Module:
    module = parse(data, trailer)
    verify(module, trailer, with_debug_locations, hint_warnings, error_on_hints)
    return module
