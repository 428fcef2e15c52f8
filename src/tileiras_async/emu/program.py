"""Link one kernel of a parsed PTX module into a flat, resolved instruction list.

* Registers are resolved through brace scopes (inline asm declares its own
  `.reg .pred p;`) to slots of four register files: 16-, 32-, 64-bit and
  predicate (8-bit registers live in the 16-bit file).
* Variables get addresses: `.shared` in the CTA's shared window (the first
  `SHARED_START` bytes are reserved, like the 1 KiB the hardware reserves, so a
  null shared pointer faults), `.local` and call-sequence `.param` variables in
  the thread's local window, kernel parameters in the parameter buffer,
  `.global`/`.const` variables in device memory (allocated at launch).
* Calls are inlined (device functions get their own registers and labels for
  every call site; `ret` becomes a branch to the call's continuation), so the
  whole kernel is one instruction list whose order the scheduler uses for
  reconvergence.  Recursion is reported as unsupported.
* The list is cut into basic blocks: a block ends at a label, a branch, an
  exit, a barrier or a yield point (an `mbarrier` wait or `nanosleep`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

from .errors import LaunchError, PtxSyntaxError, UnsupportedInstruction
from .parser import (
    Addr,
    FImm,
    Imm,
    Instr,
    Label,
    Module,
    Pair,
    ParamList,
    Reg,
    RegDecl,
    ScopeClose,
    ScopeOpen,
    Sink,
    Sym,
    TensorAddr,
    VarDecl,
    Vec,
    type_size,
)

SHARED_START = 1024
LOCAL_START = 16

REG_CLASS = {1: "16", 2: "16", 4: "32", 8: "64"}

SPECIAL_REGS = {
    "%tid.x", "%tid.y", "%tid.z", "%ntid.x", "%ntid.y", "%ntid.z",
    "%ctaid.x", "%ctaid.y", "%ctaid.z", "%nctaid.x", "%nctaid.y", "%nctaid.z",
    "%laneid", "%warpid", "%nwarpid", "%smid", "%nsmid", "%gridid",
    "%lanemask_eq", "%lanemask_le", "%lanemask_lt", "%lanemask_ge", "%lanemask_gt",
    "%clock", "%clock_hi", "%clock64", "%globaltimer", "%globaltimer_lo", "%globaltimer_hi",
    "%clusterid.x", "%clusterid.y", "%clusterid.z", "%nclusterid.x", "%nclusterid.y", "%nclusterid.z",
    "%cluster_ctaid.x", "%cluster_ctaid.y", "%cluster_ctaid.z",
    "%cluster_nctaid.x", "%cluster_nctaid.y", "%cluster_nctaid.z",
    "%cluster_ctarank", "%cluster_nctarank", "%is_explicit_cluster",
    "%dynamic_smem_size", "%total_smem_size", "%aggr_smem_size",
}


@dataclass(frozen=True)
class RegRef:
    cls: str          # "16" | "32" | "64" | "p"
    idx: int
    type: str         # declared type
    name: str

    @property
    def width(self) -> int:
        return {"16": 2, "32": 4, "64": 8, "p": 0}[self.cls] if self.type not in ("b8", "u8", "s8") else 1

    def __str__(self):
        return self.name


@dataclass(frozen=True)
class SpecialRef:
    name: str

    def __str__(self):
        return self.name


@dataclass(frozen=True)
class SymRef:
    kind: str          # shared | dynshared | local | global | kparam | label | func
    value: object      # offset / name / label key
    name: str
    offset: int = 0

    def __str__(self):
        return self.name + (f"+{self.offset}" if self.offset else "")


@dataclass
class LinIns:
    ins: Instr
    ops: list               # resolved operands
    pred: RegRef | None
    pred_neg: bool
    func: str               # the PTX function it came from

    @property
    def opcode(self) -> str:
        return self.ins.opcode

    @property
    def line(self) -> int:
        return self.ins.line

    @property
    def text(self) -> str:
        return self.ins.text


@dataclass
class BlockSpec:
    start: int              # index into Program.code of the first instruction
    body: list              # [LinIns] executed as straight-line code
    term: LinIns | None     # the control instruction ending the block (None: falls through)
    kind: str               # fall | bra | exit | bar | yield | trap


@dataclass
class KParam:
    name: str
    type: str
    offset: int
    size: int
    align: int


@dataclass
class Program:
    kernel: str
    module: Module
    nregs: dict
    reg_types: dict                  # cls -> list of declared types (for messages)
    code: list                       # [LinIns | ("label", key)]
    blocks: list                     # [BlockSpec]
    label_block: dict                # label key -> block index
    shared_vars: dict                # name -> (offset, nbytes)
    shared_static: int               # end of static shared memory (bytes, incl. the reserved start)
    dyn_shared_align: int
    has_dyn_shared: bool
    local_size: int
    kparams: list                    # [KParam]
    kparam_size: int
    globals: dict                    # name -> VarDecl (.global/.const variables to allocate)
    attrs: dict                      # entry attributes (reqntid, maxntid, ...)
    inlined: dict = field(default_factory=dict)   # callee -> number of inlined copies

    @functools.cached_property
    def opcodes(self) -> frozenset:
        """The distinct opcodes (with their modifiers) the kernel uses."""
        return frozenset(li.opcode for li in self.code if not isinstance(li, tuple))

    @property
    def reqntid(self):
        v = self.attrs.get("reqntid") or None
        return tuple(v) + (1,) * (3 - len(v)) if v else None

    @property
    def maxntid(self):
        v = self.attrs.get("maxntid") or None
        return tuple(v) + (1,) * (3 - len(v)) if v else None


def _align(x: int, a: int) -> int:
    a = max(1, a)
    return (x + a - 1) // a * a


CONTROL_BASE = {"bra", "ret", "exit", "brx", "trap", "brkpt"}
YIELD_OPS = ("mbarrier.try_wait", "mbarrier.test_wait", "nanosleep")


def _is_barrier(opcode: str) -> bool:
    parts = opcode.split(".")
    if parts[0] == "bar":
        return parts[1] != "warp" if len(parts) > 1 else True
    if parts[0] == "barrier":
        return not (len(parts) > 1 and parts[1] == "cluster")
    return False


class Linker:
    def __init__(self, module: Module, kernel: str):
        self.mod = module
        if kernel not in module.functions or module.functions[kernel].kind != "entry":
            raise LaunchError(f"no entry function '{kernel}' in the PTX (entries: {', '.join(module.entries)})")
        self.kernel = kernel
        self.nregs = {"16": 0, "32": 0, "64": 0, "p": 0}
        self.reg_types = {"16": [], "32": [], "64": [], "p": []}
        self.code: list = []
        self.shared_vars: dict = {}
        self.shared_end = SHARED_START
        self.local_end = LOCAL_START
        self.has_dyn = False
        self.dyn_align = 16
        self.globals: dict = {}
        self.kparams: list = []
        self.kparam_size = 0
        self.ns_counter = 0
        self.inlined: dict = {}
        self.module_scope: dict = {}
        for v in module.globals:
            self._declare_static(v, self.module_scope, owner="")

    # ------------------------------------------------------------------ declarations
    def _declare_static(self, v: VarDecl, scope: dict, owner: str) -> None:
        if v.space == "shared":
            key = (owner, v.name)
            if v.extern or (v.dims and v.dims[-1] == 0):
                self.has_dyn = True
                self.dyn_align = max(self.dyn_align, v.align or 16)
                scope[v.name] = SymRef("dynshared", 0, v.name)
                return
            if key not in self.shared_vars:
                off = _align(self.shared_end, v.align or v.elem_size)
                self.shared_vars[key] = (off, v.nbytes)
                self.shared_end = off + v.nbytes
            scope[v.name] = SymRef("shared", self.shared_vars[key][0], v.name)
        elif v.space in ("global", "const"):
            if v.extern:
                raise UnsupportedInstruction(f"extern {v.space} variable '{v.name}' has no definition",
                                             line=v.line)
            self.globals[v.name] = v
            scope[v.name] = SymRef("global", v.name, v.name)
        elif v.space == "local":
            off = _align(self.local_end, v.align or v.elem_size)
            self.local_end = off + v.nbytes
            scope[v.name] = SymRef("local", off, v.name)
        elif v.space == "param":
            off = _align(self.local_end, v.align or v.elem_size)
            self.local_end = off + max(v.nbytes, 1)
            scope[v.name] = SymRef("local", off, v.name)
        else:
            raise UnsupportedInstruction(f"variables in .{v.space} space are not supported", line=v.line)

    def _declare_regs(self, d: RegDecl, scope: dict) -> None:
        if d.vector != 1:
            raise UnsupportedInstruction("vector registers (.reg .vN) are not supported", line=d.line)
        if d.type == "pred":
            cls = "p"
        else:
            size = type_size(d.type)
            cls = REG_CLASS.get(size)
            if cls is None:
                raise UnsupportedInstruction(f"{8 * size}-bit registers (.reg .{d.type}) are not supported",
                                             line=d.line)
        for name, count in d.names:
            names = [name] if count is None else [f"{name}{i}" for i in range(count)]
            base = self.nregs[cls]
            self.nregs[cls] += len(names)
            self.reg_types[cls].extend([d.type] * len(names))
            for i, nm in enumerate(names):
                scope[nm] = RegRef(cls, base + i, d.type, nm)

    # ------------------------------------------------------------------ resolution
    @staticmethod
    def _lookup(chain: list, name: str):
        for sc in reversed(chain):
            v = sc.get(name)
            if v is not None:
                return v
        return None

    def _resolve(self, op, chain: list, ns: int, line: int):
        if isinstance(op, Reg):
            if op.name in SPECIAL_REGS:
                return SpecialRef(op.name)
            r = self._lookup(chain, op.name)
            if isinstance(r, RegRef):
                if op.neg:
                    if r.cls != "p":
                        raise PtxSyntaxError(f"'!' on non-predicate register {op.name}", line=line)
                    return ("not", r)
                return r
            if op.name.startswith("%envreg") or op.name.startswith("%pm"):
                return SpecialRef(op.name)
            raise PtxSyntaxError(f"undeclared register {op.name}", line=line)
        if isinstance(op, Sym):
            r = self._lookup(chain, op.name)
            if isinstance(r, RegRef):
                if op.offset:
                    raise PtxSyntaxError(f"offset on register {op.name}", line=line)
                return r
            if isinstance(r, SymRef):
                return SymRef(r.kind, r.value, r.name, op.offset)
            if op.name in self.mod.functions:
                return SymRef("func", op.name, op.name, op.offset)
            # a label (resolved once every block is known)
            return SymRef("label", (ns, op.name), op.name, op.offset)
        if isinstance(op, (Imm, FImm, Sink)):
            return op
        if isinstance(op, Vec):
            return Vec(tuple(self._resolve(x, chain, ns, line) for x in op.items))
        if isinstance(op, Addr):
            base = None if op.base is None else self._resolve(op.base, chain, ns, line)
            if isinstance(base, SymRef) and base.kind == "label":
                raise PtxSyntaxError(f"undeclared variable '{base.name}' in address", line=line)
            if isinstance(base, SymRef):
                return Addr(SymRef(base.kind, base.value, base.name, 0), op.offset + base.offset)
            return Addr(base, op.offset)
        if isinstance(op, TensorAddr):
            return TensorAddr(self._resolve(op.base, chain, ns, line), self._resolve(op.coords, chain, ns, line))
        if isinstance(op, Pair):
            return Pair(self._resolve(op.a, chain, ns, line), self._resolve(op.b, chain, ns, line))
        if isinstance(op, ParamList):
            return ParamList(tuple(self._resolve(x, chain, ns, line) for x in op.items))
        raise PtxSyntaxError(f"cannot resolve operand {op}", line=line)

    # ------------------------------------------------------------------ expansion
    def link(self) -> Program:
        fn = self.mod.functions[self.kernel]
        if fn.body is None:
            raise PtxSyntaxError(f"entry '{self.kernel}' has no body")
        fscope: dict = {}
        off = 0
        for p in fn.params:
            size = max(p.nbytes, 1)
            align = p.align or min(type_size(p.type) * p.vector, 8) or 1
            off = _align(off, min(align, 8))
            self.kparams.append(KParam(p.name, p.type, off, size, align))
            fscope[p.name] = SymRef("kparam", off, p.name)
            off += size
        self.kparam_size = off
        self._expand(fn, [self.module_scope, fscope], ns=self._new_ns(), stack=[fn.name], ret_label=None)
        return self._finish(fn)

    def _new_ns(self) -> int:
        self.ns_counter += 1
        return self.ns_counter

    def _expand(self, fn, chain: list, ns: int, stack: list, ret_label):
        chain = list(chain)
        fscope = chain[-1]
        for item in fn.body:
            if isinstance(item, ScopeOpen):
                chain.append({})
            elif isinstance(item, ScopeClose):
                chain.pop()
            elif isinstance(item, RegDecl):
                self._declare_regs(item, chain[-1])
            elif isinstance(item, VarDecl):
                self._declare_static(item, chain[-1] if item.space in ("local", "param") else fscope,
                                     owner=fn.name)
            elif isinstance(item, Label):
                self.code.append(("label", (ns, item.name)))
            elif isinstance(item, Instr):
                base = item.opcode.split(".")[0]
                if base == "call":
                    self._inline_call(item, chain, ns, stack, fn.name)
                    continue
                ops = [self._resolve(o, chain, ns, item.line) for o in item.operands]
                pred, neg = None, False
                if item.pred is not None:
                    pr = self._lookup(chain, item.pred.name)
                    if not isinstance(pr, RegRef) or pr.cls != "p":
                        raise PtxSyntaxError(f"guard {item.pred.name} is not a predicate register",
                                             line=item.line)
                    pred, neg = pr, item.pred.neg
                if base == "ret" and ret_label is not None:
                    # return from an inlined device function: jump to the call's continuation
                    ins = Instr("bra.uni", [], item.line, item.text, item.pred)
                    self.code.append(LinIns(ins, [SymRef("label", ret_label, "<return>")], pred, neg, fn.name))
                    continue
                self.code.append(LinIns(item, ops, pred, neg, fn.name))

    def _inline_call(self, ins: Instr, chain: list, ns: int, stack: list, caller: str):
        ops = list(ins.operands)
        rets: tuple = ()
        if ops and isinstance(ops[0], ParamList):
            rets = ops.pop(0).items
        if not ops or not isinstance(ops[0], Sym):
            raise UnsupportedInstruction("indirect calls are not supported", line=ins.line, text=ins.text)
        fname = ops.pop(0).name
        args: tuple = ()
        if ops and isinstance(ops[0], ParamList):
            args = ops.pop(0).items
        if ops:
            raise UnsupportedInstruction("calls through a prototype / jump table are not supported",
                                         line=ins.line, text=ins.text)
        if ins.pred is not None:
            raise UnsupportedInstruction("predicated calls are not supported", line=ins.line, text=ins.text)
        callee = self.mod.functions.get(fname)
        if callee is None or callee.body is None:
            raise UnsupportedInstruction(f"call to '{fname}', which has no definition in this PTX",
                                         line=ins.line, text=ins.text)
        if fname in stack:
            raise UnsupportedInstruction(f"recursive call to '{fname}' is not supported",
                                         line=ins.line, text=ins.text)
        if len(args) != len(callee.params) or len(rets) != len(callee.rets):
            raise PtxSyntaxError(f"call to '{fname}' with {len(args)} arguments / {len(rets)} results; "
                                 f"it takes {len(callee.params)} / {len(callee.rets)}", line=ins.line)
        fscope: dict = {}
        for formal, actual in list(zip(callee.params, args)) + list(zip(callee.rets, rets)):
            r = self._resolve(actual, chain, ns, ins.line)
            if not (isinstance(r, SymRef) and r.kind == "local"):
                raise UnsupportedInstruction(f"call argument '{actual}' is not a .param variable",
                                             line=ins.line, text=ins.text)
            fscope[formal.name] = r
        self.inlined[fname] = self.inlined.get(fname, 0) + 1
        cns = self._new_ns()
        ret_key = (cns, "<return>")
        self._expand(callee, [self.module_scope, fscope], ns=cns, stack=stack + [fname], ret_label=ret_key)
        self.code.append(("label", ret_key))

    # ------------------------------------------------------------------ blocks
    def _finish(self, fn) -> Program:
        blocks: list = []
        label_block: dict = {}
        cur: list = []
        start = 0

        def close(term, kind):
            nonlocal cur
            blocks.append(BlockSpec(start, cur, term, kind))
            cur = []

        for i, item in enumerate(self.code):
            if isinstance(item, tuple):
                if cur:
                    close(None, "fall")
                label_block[item[1]] = len(blocks)
                start = i + 1
                continue
            if not cur:
                start = i
            base = item.opcode.split(".")[0]
            if base in CONTROL_BASE:
                kind = {"bra": "bra", "ret": "exit", "exit": "exit", "brx": "brx",
                        "trap": "trap", "brkpt": "trap"}[base]
                close(item, kind)
                start = i + 1
            elif _is_barrier(item.opcode):
                close(item, "bar")
                start = i + 1
            elif item.opcode.startswith(YIELD_OPS):
                cur.append(item)
                close(None, "yield")
                start = i + 1
            else:
                cur.append(item)
        # the end of the body: an implicit exit
        close(None, "exit")
        # check every branch target exists
        for b in blocks:
            if b.kind == "bra":
                tgt = b.term.ops[0] if b.term.ops else None
                if not (isinstance(tgt, SymRef) and tgt.kind == "label"):
                    raise UnsupportedInstruction("branch to a non-label target", line=b.term.line,
                                                 text=b.term.text)
                if tgt.value not in label_block:
                    raise PtxSyntaxError(f"branch to undefined label '{tgt.name}'", line=b.term.line)
        dyn_align = self.dyn_align
        return Program(
            kernel=self.kernel, module=self.mod, nregs=dict(self.nregs), reg_types=self.reg_types,
            code=self.code, blocks=blocks, label_block=label_block,
            shared_vars={k[1] if not k[0] else f"{k[0]}::{k[1]}": v for k, v in self.shared_vars.items()},
            shared_static=self.shared_end, dyn_shared_align=dyn_align, has_dyn_shared=self.has_dyn,
            local_size=_align(self.local_end, 16), kparams=self.kparams, kparam_size=self.kparam_size,
            globals=self.globals, attrs=dict(fn.attrs), inlined=dict(self.inlined))


def link(module: Module, kernel: str) -> Program:
    return Linker(module, kernel).link()
