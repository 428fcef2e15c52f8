"""Bytecode reading errors carrying the real tool's chained diagnostics."""
from __future__ import annotations


class BytecodeError(Exception):
    """A malformed input. `lines` are diagnostics, innermost first, as the real tool prints them."""

    def __init__(self, message: str | None, offset: int | None = None):
        super().__init__(message or "")
        # a None message is a failure the real reader reports only through its callers' context
        self.lines: list[str] = [] if message is None else [_fmt(message, offset)]

    def add_context(self, message: str, offset: int | None = None) -> "BytecodeError":
        self.lines.append(_fmt(message, offset))
        return self

    def __str__(self) -> str:
        return self.lines[0] if self.lines else "malformed bytecode"


class MalformedConstant(BytecodeError):
    """A constant whose blob cannot be read: reported where an attribute uses it, as the real reader does."""


class NestingTooDeep(BytecodeError):
    """Ops nest deeper than the reader's documented limit (bytecode.reader.MAX_NESTING)."""


class UnsupportedVersion(BytecodeError):
    """The header names a version this reader does not accept."""


def _fmt(message: str, offset: int | None) -> str:
    return message if offset is None else f"error at offset {offset}: {message}"


class NotTileIR(BytecodeError):
    """No TileIR magic: the whole diagnostic is this one line, with no trailer."""
