"""One line a stage says about a module (error, warning, remark or note), as a message: the stages return them,
failures.py writes the notes, the command lines print them.  A leaf module, so that the notes' writer does not
depend on the stages that call it."""
from __future__ import annotations

import msgspec


class StageDiagnostic(msgspec.Struct, frozen=True):
    severity: str                     # error | warning | remark | note
    message: str                      # one line, as printed on stderr
    location: str | None = None       # file:line:col when the op has one
