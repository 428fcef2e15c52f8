"""Reading compiled kernels without cuobjdump: nvdisasm's SASS text and the cubin's ELF attributes.

Pure functions over text and bytes (no processes), so the tests can check them on fixed inputs:

* `parse_sass(text)`: nvdisasm output -> one `SassFunction` per code section (a kernel and the internal
  functions ptxas placed in its section), instructions with address, guard predicate, opcode and operands.
* `static_count`, `opcode_classes`: the static instruction count (NOPs and the unreachable self-branch
  ptxas pads every kernel with are not instructions that run) and counts per instruction class.
* `natural_loops(fn)`: loops from the control-flow graph (basic blocks, dominators, back-edges whose target
  dominates the source).  An address test (a branch to a lower address) is not enough: ptxas moves
  mbarrier retry blocks out of line after EXIT and jumps back from them, which is no loop.
* `cubin_resources(data)`: per kernel, registers (EIATTR_REGCOUNT), stack frame (EIATTR_FRAME_SIZE) and
  static shared memory (the kernel's `.nv.shared.<kernel>` section) from the ELF.

Why the ELF and not `ptxas -v`: it reads the same way for both compilers' cubins, for every target, while
the real tool's PTX exists only where the corpus kept it (sm_90, sm_100).  The shared-memory section of an
sm_90+ cubin also holds the 1 KiB the driver reserves per CTA; `ptxas -v` leaves it out, and so does
`cubin_resources` (tests/test_bench_sass.py checks the figures against `ptxas -v` on real PTX).  Spills
have no ELF attribute: they show up as local-memory instructions (`STL`/`LDL`) and a non-zero frame, which
is how they are reported here.
"""
from __future__ import annotations

import bisect
import re
import struct
from dataclasses import dataclass, field

from tileiras_async.toolchain import cubin
from tileiras_async.toolchain.cubin import EIATTR_FRAME_SIZE, EIATTR_REGCOUNT  # noqa: F401  (tests build cubins)

# ---------------------------------------------------------------- SASS text


@dataclass(frozen=True)
class Instr:
    addr: int
    guard: str          # "" or e.g. "@!P0", "@UP1"
    opcode: str         # with modifiers, e.g. "BAR.SYNC.DEFER_BLOCKING"
    operands: str

    @property
    def base(self) -> str:
        """The opcode without modifiers ("IMAD" for "IMAD.WIDE.U32")."""
        return self.opcode.split(".", 1)[0]


@dataclass
class SassFunction:
    section: str                                        # the kernel's name (its .text.<name> section)
    instrs: list[Instr] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)  # label -> address
    entries: list[str] = field(default_factory=list)       # function symbols defined in the section


_SECTION = re.compile(r"^\s*\.section\s+\.text\.([^,\s]+)")
_INSTR = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+(.*?)\s*;")
_LABEL = re.compile(r"^([.$\w]+):\s*$")
_FUNC = re.compile(r"^\s*\.type\s+([^,\s]+)\s*,\s*@function")
_GUARD = re.compile(r"^(@!?U?P(?:T|\d+))\s+(.*)$")
_TARGET = re.compile(r"`\(([^)]+)\)")


def parse_sass(text: str) -> list[SassFunction]:
    """nvdisasm (`-c`) output -> one SassFunction per .text section, in file order."""
    funcs: list[SassFunction] = []
    cur: SassFunction | None = None
    pending: list[str] = []
    for line in text.splitlines():
        m = _SECTION.match(line)
        if m:
            cur = SassFunction(m.group(1))
            funcs.append(cur)
            pending = []
            continue
        if cur is None:
            continue
        m = _FUNC.match(line)
        if m:
            cur.entries.append(m.group(1))
            continue
        m = _INSTR.match(line)
        if m:
            addr = int(m.group(1), 16)
            body = m.group(2)
            guard = ""
            g = _GUARD.match(body)
            if g:
                guard, body = g.group(1), g.group(2)
            opcode, _, operands = body.partition(" ")
            cur.instrs.append(Instr(addr, guard, opcode, operands.strip()))
            for name in pending:
                cur.labels[name] = addr
            pending = []
            continue
        m = _LABEL.match(line.strip())
        if m:
            pending.append(m.group(1))
    return funcs


def branch_target(ins: Instr) -> str | None:
    """The label a branch or call names (`BRA `(.L_x_3)`), if any."""
    m = _TARGET.search(ins.operands)
    return m.group(1) if m else None


def _is_padding(fn: SassFunction, ins: Instr) -> bool:
    """NOPs, and the `BRA` to itself that ptxas puts after the last EXIT (never reached)."""
    if ins.base == "NOP":
        return True
    return ins.base == "BRA" and not ins.guard and fn.labels.get(branch_target(ins) or "") == ins.addr


def static_count(fn: SassFunction) -> int:
    return sum(1 for i in fn.instrs if not _is_padding(fn, i))


# Instruction classes the issues' figures are stated in.  Each maps a base opcode to a class.
TENSOR_CORE = re.compile(r"^(HMMA|IMMA|DMMA|BMMA|HGMMA|IGMMA|QGMMA|BGMMA|UTC\w*MMA)$")
ADDRESS_MATH = ("IMAD", "IADD3", "SEL", "ISETP")
CLASSES: dict[str, tuple[str, ...]] = {
    "BAR": ("BAR",),
    "SHFL": ("SHFL",),
    "REDUX": ("REDUX", "CREDUX"),
    "HMMA": ("HMMA", "IMMA", "DMMA"),
    "HGMMA": ("HGMMA", "IGMMA", "QGMMA", "BGMMA"),
    "UTCMMA": (),                         # tcgen05: UTCHMMA, UTCQMMA, UTCIMMA, ... (matched by pattern)
    "LDS": ("LDS", "LDSM"),
    "STS": ("STS",),
    "LDG": ("LDG",),
    "STG": ("STG",),
    "LDGSTS": ("LDGSTS",),
    "LOCAL": ("LDL", "STL"),              # spills (or local arrays): local-memory traffic
    "ADDR": ADDRESS_MATH,
}
_CLASS_OF = {base: name for name, bases in CLASSES.items() for base in bases}


def class_of(base: str) -> str | None:
    if base.startswith("UTC") and base.endswith("MMA"):
        return "UTCMMA"
    return _CLASS_OF.get(base)


def opcode_counts(instrs, fn: SassFunction | None = None) -> dict[str, int]:
    """Base opcode -> static count (padding left out when `fn` is given)."""
    out: dict[str, int] = {}
    for i in instrs:
        if fn is not None and _is_padding(fn, i):
            continue
        out[i.base] = out.get(i.base, 0) + 1
    return dict(sorted(out.items()))


def class_counts(opcodes: dict[str, int]) -> dict[str, int]:
    """Per-class totals (every class present, zero when absent) from base-opcode counts."""
    out = {name: 0 for name in CLASSES}
    for base, n in opcodes.items():
        c = class_of(base)
        if c is not None:
            out[c] += n
    return out


def tensor_core_ops(opcodes: dict[str, int]) -> dict[str, int]:
    return {b: n for b, n in opcodes.items() if TENSOR_CORE.match(b)}


# ---------------------------------------------------------------- control flow and loops


@dataclass
class Block:
    start: int          # index into fn.instrs
    end: int            # one past the last instruction
    succs: list[int] = field(default_factory=list)


@dataclass
class Loop:
    header: int                 # address of the header's first instruction
    blocks: frozenset[int]      # block indices
    instrs: list[Instr]         # the loop body's instructions (padding left out), in address order
    depth: int = 1              # 1 = outermost

    @property
    def static(self) -> int:
        return len(self.instrs)


def _ends_block(ins: Instr) -> bool:
    return ins.base in ("BRA", "BRX", "JMP", "JMX", "EXIT", "RET", "KILL")


_PRED_OPERAND = re.compile(r"^!?U?P(?:T|\d)\b")


def _falls_through(ins: Instr) -> bool:
    """Whether control can reach the next instruction: guarded or divergence-tested branches can."""
    if not _ends_block(ins):
        return True
    if ins.guard and ins.guard not in ("@PT", "@UPT"):
        return True
    # a predicate operand before the target (`BRA.U !UP0, `(.L)`) or a divergence test makes a branch conditional
    return ins.base == "BRA" and (".DIV" in ins.opcode or bool(_PRED_OPERAND.match(ins.operands)))


def basic_blocks(fn: SassFunction) -> tuple[list[Instr], list[Block], list[int]]:
    """The section's instructions without padding, its basic blocks over them (index ranges), and the
    entry blocks (the section start and every CALL target)."""
    fn_instrs = [i for i in fn.instrs if not _is_padding(fn, i)]

    addrs = [i.addr for i in fn_instrs]

    def index_of_label(label: str | None) -> int | None:
        if label is None or label not in fn.labels:
            return None
        k = bisect.bisect_left(addrs, fn.labels[label])  # a label on padding resolves to the next instruction
        return k if k < len(addrs) else None

    leaders = {0} if fn_instrs else set()
    calls: list[int] = []
    for k, ins in enumerate(fn_instrs):
        tgt = index_of_label(branch_target(ins)) if ins.base in ("BRA", "CALL", "JMP") else None
        if ins.base in ("BRA", "JMP") and tgt is not None:
            leaders.add(tgt)
        if ins.base == "CALL" and tgt is not None:
            leaders.add(tgt)
            calls.append(tgt)
        if _ends_block(ins) and k + 1 < len(fn_instrs):
            leaders.add(k + 1)
    starts = sorted(leaders)
    block_of = {}
    blocks: list[Block] = []
    for n, s in enumerate(starts):
        e = starts[n + 1] if n + 1 < len(starts) else len(fn_instrs)
        blocks.append(Block(s, e))
        block_of[s] = n
    for b in blocks:
        last = fn_instrs[b.end - 1]
        if last.base in ("BRA", "JMP"):
            tgt = index_of_label(branch_target(last))
            if tgt is not None:
                b.succs.append(block_of[tgt])
        if _falls_through(last) and b.end < len(fn_instrs):
            if block_of[b.end] not in b.succs:
                b.succs.append(block_of[b.end])
    entries = [0] + sorted({block_of[c] for c in calls}) if blocks else []
    return fn_instrs, blocks, entries


def _dominators(succs: list[list[int]], preds: list[list[int]], entries: list[int]) -> list[int]:
    """Dominator sets as bitmasks (iterative data flow; a virtual root precedes every entry)."""
    n = len(succs)
    full = (1 << n) - 1
    dom = [full] * n
    for e in entries:
        dom[e] = 1 << e
    changed = True
    while changed:
        changed = False
        for i in range(n):
            if i in entries:
                continue
            new = full
            for p in preds[i]:
                new &= dom[p]
            if not preds[i]:
                new = 0          # unreachable block: dominated by nothing
            new |= 1 << i
            if new != dom[i]:
                dom[i] = new
                changed = True
    return dom


def loop_bodies(succs: list[list[int]], entries: list[int]) -> dict[int, set[int]]:
    """Natural loops of a control-flow graph given as successor lists over blocks 0..n-1: header -> body
    blocks.  An edge u -> h is a back-edge when h dominates u; back-edges to one header make one loop."""
    preds: list[list[int]] = [[] for _ in succs]
    for i, ss in enumerate(succs):
        for s in ss:
            preds[s].append(i)
    dom = _dominators(succs, preds, entries)
    bodies: dict[int, set[int]] = {}
    for u, ss in enumerate(succs):
        for h in ss:
            if dom[u] >> h & 1:
                body = bodies.setdefault(h, {h})
                stack = [u]
                while stack:
                    x = stack.pop()
                    if x not in body:
                        body.add(x)
                        stack.extend(preds[x])
    return bodies


def natural_loops(fn: SassFunction) -> list[Loop]:
    """Every natural loop of a code section, outermost first by address."""
    instrs, blocks, entries = basic_blocks(fn)
    if not blocks:
        return []
    loops = []
    for h, body in loop_bodies([b.succs for b in blocks], entries).items():
        ins = [instrs[k] for bi in sorted(body) for k in range(blocks[bi].start, blocks[bi].end)]
        ins.sort(key=lambda i: i.addr)
        loops.append(Loop(instrs[blocks[h].start].addr, frozenset(body), ins))
    for lp in loops:
        lp.depth = sum(1 for other in loops if lp.blocks < other.blocks) + 1
    loops.sort(key=lambda lp: (lp.header, -len(lp.blocks)))
    return loops


def innermost(loops: list[Loop]) -> list[Loop]:
    """Loops that contain no other loop."""
    return [lp for lp in loops if not any(o.blocks < lp.blocks for o in loops)]


def main_loop(loops: list[Loop]) -> Loop | None:
    """The loop a kernel spends its time in, statically: the innermost loop holding the most tensor-core
    instructions; without any, the innermost loop with the most instructions (a spin-wait loop of a few
    instructions never wins against a real one)."""
    if not loops:
        return None

    def mma(lp: Loop) -> int:
        return sum(1 for i in lp.instrs if TENSOR_CORE.match(i.base))

    best_mma = max(mma(lp) for lp in loops)
    if best_mma:
        cands = [lp for lp in loops if mma(lp) == best_mma]
        return min(cands, key=lambda lp: (len(lp.blocks), lp.header))
    return max(innermost(loops), key=lambda lp: (lp.static, -lp.header))


# ---------------------------------------------------------------- cubin ELF


@dataclass(frozen=True)
class Resources:
    registers: int
    frame_bytes: int
    shared_bytes: int


cubin_arch = cubin.cubin_arch


def cubin_resources(data: bytes) -> dict[str, Resources]:
    """Per kernel (by name): registers, stack frame bytes and static shared memory as `ptxas -v` states it."""
    return {k: Resources(c.registers, c.frame_bytes, c.shared_bytes) for k, c in cubin.kernel_code(data).items()}
