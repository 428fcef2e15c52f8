"""The tile-GPU dialect's ops: what the passes make explicit that cuda_tile leaves implicit.

Each op is declared once here (operands, results, attributes, effects); passes create them with `build`,
the printer prints them generically and codegen has exactly one pattern per op.  cuda_tile ops stay in the
tile-GPU IR unchanged except for their types (tiles gain a layout); these ops are added around them.

| op                         | what it is                                                                 |
|----------------------------|----------------------------------------------------------------------------|
| `tilegpu.convert_layout`   | the same tile in another layout, moving nothing between threads            |
| `tilegpu.local_alloc`      | a shared-memory buffer (`offset` attribute: where allocate-shared-memory put it) |
| `tilegpu.local_store`      | a tile into a buffer, row-major over `shape`, shifted by `shift` + offsets x `scale` |
| `tilegpu.local_load`       | a tile out of a buffer (the same addressing), in the result type's layout  |
| `tilegpu.barrier`          | `bar.sync 0`: every thread of the CTA arrives before any goes on           |
| `tilegpu.async_copy`       | a K chunk of a loop's mma operand, global -> a stage buffer (cp.async)     |
| `tilegpu.async_commit` / `async_wait` | cp.async groups: commit, wait until `pending` remain            |
| `tilegpu.views_aligned`    | a pipelined loop version's run-time condition                              |
| `tilegpu.mma_staged`       | the pipelined mma: A and B of one K chunk read from a stage buffer         |

cuda_tile ops that stage through shared memory themselves (mma operands, cross-warp reductions and scans,
atomics whose results are broadcast, prints, allocas) carry `scratch_bytes` / `scratch_offset` attributes:
they write the scratch first and read it last, with their own barrier in between.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import Operation, Region, Value
from ..ir.opdef import Dialect, OpDef
from ..ir.types import Type

DIALECT = "tilegpu"
TILEGPU = Dialect(DIALECT)


@dataclass(frozen=True)
class OpDecl:
    name: str                        # without the dialect prefix
    operands: tuple[str, ...]        # "x" one value, "xs*" variadic
    results: tuple[str, ...]
    effects: frozenset[str] = frozenset()   # "smem_read", "smem_write", "barrier", "global_read", ...
    doc: str = ""

    @property
    def full_name(self) -> str:
        return f"{DIALECT}.{self.name}"


DECLS: dict[str, OpDecl] = {}
SPECS: dict[str, OpDef] = {}


def declare(name: str, operands: str = "", results: str = "", effects: str = "", doc: str = "") -> OpDecl:
    d = OpDecl(name, tuple(operands.split()), tuple(results.split()), frozenset(effects.split()), doc)
    DECLS[d.full_name] = d
    SPECS[d.full_name] = TILEGPU.op(name, operands=dict.fromkeys(d.operands), results=dict.fromkeys(d.results),
                                    cls="".join(p.title() for p in name.split("_")) + "Op")
    return d


CONVERT_LAYOUT = declare("convert_layout", "source", "result",
                         doc="the source tile in the result type's layout")
LOCAL_ALLOC = declare("local_alloc", "", "buffer", doc="a shared-memory buffer")
LOCAL_STORE = declare("local_store", "value buffer offsets*", "", effects="smem_write",
                      doc="a tile into a buffer")
LOCAL_LOAD = declare("local_load", "buffer offsets*", "result", effects="smem_read", doc="a tile out of a buffer")
BARRIER = declare("barrier", "", "", effects="barrier", doc="bar.sync 0")
ASYNC_COPY = declare("async_copy", "view buffer indices* slot", "", effects="global_read async_write",
                     doc="one K chunk of a pipelined operand tile into a stage buffer (cp.async)")
ASYNC_COMMIT = declare("async_commit", "", "", doc="cp.async.commit_group")
ASYNC_WAIT = declare("async_wait", "", "", doc="cp.async.wait_group `pending`")
VIEWS_ALIGNED = declare("views_aligned", "view_a view_b", "result",
                        doc="whether both views allow copies of the widths in `vb` (a loop version's condition)")
MMA_STAGED = declare("mma_staged", "acc buffer slot", "result", effects="smem_read",
                     doc="the pipelined mma: one K chunk of A and B read from a stage buffer")


def build(decl: OpDecl, operands: dict[str, Value | list[Value]], result_types: list[Type],
          attrs: dict | None = None, regions: list[Region] | None = None, loc: int = 0) -> Operation:
    return Operation(SPECS[decl.full_name], operands, attrs or {}, result_types, regions, loc)


def is_tilegpu(op: Operation) -> bool:
    return op.name.startswith(DIALECT + ".")


def decl_of(op: Operation) -> OpDecl | None:
    return DECLS.get(op.name)
