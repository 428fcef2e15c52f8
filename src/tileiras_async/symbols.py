"""Symbol names from the bytecode, checked and spelled before any LLVM text is built.

The bytecode may name a kernel anything (the reader only rejects an empty name, the verifier a
duplicate).  NVIDIA's tileiras then fails to compile a kernel whose name is not a PTX identifier
("failed to compile Tile IR program", exit 5: its NVPTX back end rejects the symbol before ptxas
runs) and one whose name claims LLVM's intrinsic namespace ("llvm intrinsics cannot be defined!").
Codegen asks `symbol_problem` first, then spells names with `llvm_symbol`.
"""
from __future__ import annotations

import re

# PTX: a letter then letters, digits, _ or $; or _ / $ followed by at least one of those
# (% is PTX's register prefix: NVIDIA's back end refuses it in a symbol)
_PTX_IDENTIFIER = re.compile(rb"[A-Za-z][A-Za-z0-9_$]*|[_$][A-Za-z0-9_$]+")
_LLVM_BARE = re.compile(rb"[-A-Za-z$._][-A-Za-z$._0-9]*")
COMPILE_FAILED = "failed to compile Tile IR program"


def symbol_problem(name: bytes) -> str | None:
    """None if a kernel can be emitted under `name`, else the stderr text NVIDIA's tool prints before
    its final "failed to compile Tile IR program" ("" when it prints nothing else)."""
    if name.startswith(b"llvm."):
        return f"llvm intrinsics cannot be defined!\nptr {llvm_symbol(name)}"
    if not _PTX_IDENTIFIER.fullmatch(name):
        return ""
    return None


def llvm_symbol(name: bytes) -> str:
    """`@name` as LLVM IR spells it: bare when it can be, else quoted with \\XX escapes."""
    if _LLVM_BARE.fullmatch(name):
        return "@" + name.decode("ascii")
    escaped = "".join(chr(c) if 0x20 <= c < 0x7F and c not in b'"\\' else f"\\{c:02X}" for c in name)
    return f'@"{escaped}"'
