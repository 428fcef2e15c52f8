"""The error every pass and code-generation pattern raises for IR it cannot handle."""
from __future__ import annotations


class LoweringError(Exception):
    """The compiler cannot lower an op; carries the op for the diagnostic."""

    def __init__(self, message: str, op=None):
        super().__init__(message)
        self.op = op
