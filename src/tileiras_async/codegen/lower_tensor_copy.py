"""Tensor copies (TMA) of a pipelined loop's stage buffers: the mbarriers and the copies select-tensor-copies
chose (tilegpu.tensor_maps).  Everything was decided by the passes; this module spells it in PTX.

* `tilegpu.tma_barriers`: one 8-byte mbarrier per stage buffer in a shared global of the kernel; thread 0
  initialises them (`count` arrivals a phase: one `arrive.expect_tx` per TMA operand) and prefetches the
  maps; a barrier publishes the initialisation before anyone waits.
* the copy of one K chunk (from `tilegpu.async_copy` with `tma`): one lane of warp 0 (`elect.sync`) expects
  the chunk's bytes on the slot's mbarrier, then issues one `cp.async.bulk.tensor.2d` per box into the stage
  buffer (the map's swizzle writes the layout wgmma reads); out-of-bounds elements arrive as zeros and count
  as bytes.
* `tilegpu.tma_wait`: every thread spins on `mbarrier.try_wait.parity` for the unit's phase.
* `tilegpu.tma_release`: a barrier (every wait done), then thread 0 invalidates the mbarriers.

A map is a kernel parameter: its generic address is `cvta.param` of the parameter's symbol.  The PTX forms
are those of PTX ISA 8.0 (`.shared::cluster` destination), which sm_90's PTX declares.
"""
from __future__ import annotations

from ..ir.core import Operation
from .emitter import KernelEmitter, lowers
from .values import SHARED_PTR, Tile

MBAR_BYTES = 8


def _bars(em: KernelEmitter, op: Operation) -> str:
    return em.get(op.operands["barriers"]).regs[0]


def _thread0(em: KernelEmitter, lines: list[str], args: list[tuple[str, str]], regs: str = "") -> None:
    """PTX `lines` (operands from $1) executed by thread 0 alone."""
    body = " ".join(f"@p {line};" for line in lines)
    em.b.asm("void", f"{{ .reg .pred p; {regs}setp.eq.u32 p, $0, 0; {body} }}",
             ",".join(["r"] + [("l" if t == "i64" else "r") for t, _ in args] + ["~{memory}"]),
             [("i32", em.tid)] + args)


def _elected(em: KernelEmitter, lines: list[str], args: list[tuple[str, str]], regs: str = "") -> None:
    """PTX `lines` (operands from $1) executed by one lane of warp 0, chosen by `elect.sync`: ptxas then knows a
    single thread issues them and moves their operands to uniform registers once, where a per-thread test
    (`_thread0`) makes it loop over the warp's lanes around every tensor copy in case several issue."""
    body = " ".join(f"@p {line};" for line in lines)
    em.b.asm("void", f"{{ .reg .pred p; .reg .b32 e; {regs}setp.lt.u32 p, $0, 32; @!p bra $$tce${{:uid}}; "
                     f"elect.sync e|p, -1; {body} $$tce${{:uid}}: }}",
             ",".join(["r"] + [("l" if t == "i64" else "r") for t, _ in args] + ["~{memory}"]),
             [("i32", em.tid)] + args)


def map_address(em: KernelEmitter, param: int) -> str:
    """i64: the generic address of the tensor map in entry parameter `param`."""
    return em.b.asm("i64", f"mov.b64 $0, {em.b.fn.name}_param_{param}; cvta.param.u64 $0, $0;", "=l", [],
                    sideeffect=False, hint="tmap")


@lowers("tilegpu.tma_barriers")
def _tma_barriers(em: KernelEmitter, op: Operation) -> None:
    stages, count = op.attrs["stages"], op.attrs["count"]
    name = em.unique_global("tma_bars")
    em.module_ir.add_global(f"{name} = internal addrspace(3) global [{stages} x i64] undef, align 8")
    bars = em.b.entry_value(f"ptrtoint {SHARED_PTR} {name} to i32")
    maps = [(("i64", map_address(em, p))) for p in op.attrs["maps"]]
    lines = [f"mbarrier.init.shared.b64 [$1+{MBAR_BYTES * s}], {count}" for s in range(stages)]
    lines.append("fence.mbarrier_init.release.cluster")
    lines += [f"prefetch.tensormap [${2 + i}]" for i in range(len(maps))]
    _thread0(em, lines, [("i32", bars)] + maps)
    if op.attrs.get("barrier_follows"):     # the elected lane issuing the first copies is one of warp 0's
        em.b.asm("void", "bar.warp.sync -1;", "~{memory}", [])
    else:
        em.barrier()
    em.set(op.result, Tile(op.result.type, None, [bars]))


def tensor_copy(em: KernelEmitter, op: Operation, buf_off: str) -> None:
    """The copy of one K chunk by TMA (an `async_copy` with `tma`) into the stage buffer at `buf_off`."""
    x, tc = op.attrs["operand"], op.attrs["tma"]
    slot = op.attrs["slot"] if "slot" in op.attrs else em.get(op.operands["slot"]).regs[0]
    bar = (em.b.value(f"add i32 {_bars(em, op)}, {slot * MBAR_BYTES}") if isinstance(slot, int)
           else em.b.value(f"add i32 {_bars(em, op)}, {em.b.value(f'mul i32 {slot}, {MBAR_BYTES}')}"))
    starts = []
    for d, v in enumerate(op.operands["indices"]):
        idx = em.get(v)
        i32 = idx.regs[0] if idx.llvm == "i32" else em.b.value(f"trunc {idx.llvm} {idx.regs[0]} to i32")
        start = em.b.value(f"mul i32 {i32}, {x.tile_shape[d]}")
        if d == x.kdim and op.attrs["chunk"]:
            start = em.b.value(f"add i32 {start}, {op.attrs['chunk'] * op.attrs['kc']}")
        starts.append(start)
    scratch = em.b.entry_value(f"ptrtoint {SHARED_PTR} {em.scratch} to i32")
    dst = em.b.value(f"add i32 {em.b.value(f'add i32 {scratch}, {buf_off}')}, {x.smem.base}")
    lines = [f"mbarrier.arrive.expect_tx.shared.b64 st, [$1], {tc.chunk_bytes}"]
    args = [("i32", bar), ("i64", map_address(em, tc.map.param)), ("i32", dst), ("i32", starts[0])]
    for j in range(tc.columns):
        inner = starts[1] if j == 0 else em.b.value(f"add i32 {starts[1]}, {j * tc.box[1]}")
        args.append(("i32", inner))
        lines.append(f"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                     f"[$3+{j * tc.column_bytes}], [$2, {{${len(args)}, $4}}], [$1]")
    _elected(em, lines, args, ".reg .b64 st; ")


@lowers("tilegpu.tma_wait")
def _tma_wait(em: KernelEmitter, op: Operation) -> None:
    stages = op.attrs["stages"]
    unit = em.get(op.operands["unit"]).regs[0]
    slot = em.b.value(f"urem i32 {unit}, {stages}")
    parity = em.b.value(f"and i32 {em.b.value(f'udiv i32 {unit}, {stages}')}, 1")
    bar = em.b.value(f"add i32 {_bars(em, op)}, {em.b.value(f'mul i32 {slot}, {MBAR_BYTES}')}")
    em.b.asm("void", "{ .reg .pred w; $$tmw${:uid}: mbarrier.try_wait.parity.shared.b64 w, [$0], $1; "
                     "@!w bra $$tmw${:uid}; }", "r,r,~{memory}", [("i32", bar), ("i32", parity)])


@lowers("tilegpu.tma_release")
def _tma_release(em: KernelEmitter, op: Operation) -> None:
    em.barrier()
    _thread0(em, [f"mbarrier.inval.shared.b64 [$1+{MBAR_BYTES * s}]" for s in range(op.attrs["stages"])],
             [("i32", _bars(em, op))])
