"""The drop-in's outcome of one compile (what the cache stores and the server returns) and the option
checks both the lean front door (cli/tileiras.py) and the compile (cli/tileiras_compile.py) need.

Lean: only the input helpers, so that a cache hit imports none of the compiler.
"""
from __future__ import annotations

from ..inputs import EXIT_CONFIG, InputError


class DropInResult:
    """The outcome of one compile, as the drop-in delivers it.

    rc / stderr: exit status and the diagnostics printed before anything is written; cubin: the
    output (rc 0); remarks / trace: the rendered remarks and schedule trace, when asked for.
    `cacheable`: the outcome depends only on the input and options; `ir_dumps`: --print-ir-*
    snapshots (stages.IRDump), printed first (neither is stored in entries).
    """

    __slots__ = ("rc", "stderr", "cubin", "remarks", "trace", "cacheable", "ir_dumps")

    def __init__(self, rc: int, stderr: str = "", cubin: bytes = b"", remarks: str | None = None,
                 trace: str | None = None, cacheable: bool = True, ir_dumps: list | None = None):
        self.rc = rc
        self.stderr = stderr
        self.cubin = cubin
        self.remarks = remarks
        self.trace = trace
        self.cacheable = cacheable
        self.ir_dumps = ir_dumps or []

    def sections(self) -> dict[str, bytes]:
        out = {"rc": b"%d" % self.rc, "stderr": self.stderr.encode(), "cubin": self.cubin}
        if self.remarks is not None:
            out["remarks"] = self.remarks.encode()
        if self.trace is not None:
            out["trace"] = self.trace.encode()
        return out

    @classmethod
    def from_sections(cls, s: dict[str, bytes]) -> "DropInResult":
        remarks, trace = s.get("remarks"), s.get("trace")
        return cls(int(s["rc"]), s["stderr"].decode(), s["cubin"], None if remarks is None else remarks.decode(),
                   None if trace is None else trace.decode(), s.get("cacheable", b"1") != b"0")


def opt_level(opts) -> int:
    level = int(opts.get("opt-level", "3"))    # decimal digits: the option parser read it as LLVM reads integers
    if not 0 <= level <= 3:
        raise InputError([f"error: invalid optimization level: {level}"], EXIT_CONFIG)
    return level
