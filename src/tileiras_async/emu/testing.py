"""Run a few PTX instructions per thread on numpy inputs (unit tests, debugging).

    >>> run_ptx_op("add.s32 %d0, %a0, %a1;", [("s32", a), ("s32", b)], ["s32"])
    [array([...], dtype=int32)]

Thread i loads element i of every input into %a0, %a1, ... (registers of the
input's type; predicates travel as bytes), runs `body`, and stores %d0, %d1,
... into fresh output arrays.  `regs` declares extra registers for the body.
"""
from __future__ import annotations

import numpy as np

from . import DeviceMemory, emulate_ptx
from .parser import TYPE_SIZES

_NP = {"b8": np.uint8, "u8": np.uint8, "s8": np.int8, "b16": np.uint16, "u16": np.uint16, "s16": np.int16,
       "f16": np.float16, "bf16": np.uint16, "b32": np.uint32, "u32": np.uint32, "s32": np.int32,
       "f32": np.float32, "f16x2": np.uint32, "bf16x2": np.uint32, "tf32": np.uint32, "b64": np.uint64,
       "u64": np.uint64, "s64": np.int64, "f64": np.float64, "pred": np.uint8, "e4m3x2": np.uint16,
       "e5m2x2": np.uint16, "f32x2": np.uint64}


def _regtype(t: str) -> str:
    if t == "pred":
        return "pred"
    return {1: "b16", 2: "b16", 4: "b32", 8: "b64"}[TYPE_SIZES[t]]


def _memtype(t: str) -> str:
    return {1: "b8", 2: "b16", 4: "b32", 8: "b64"}[TYPE_SIZES[t]]


def op_ptx(body: str, in_types: list, out_types: list, *, regs: str = "", target: str = "sm_100a",
           version: str = "8.6") -> str:
    params = [f".param .u64 pin{i}" for i in range(len(in_types))] + \
             [f".param .u64 pout{i}" for i in range(len(out_types))] + [".param .u32 pn"]
    lines = [f".version {version}", f".target {target}", ".address_size 64", "",
             ".visible .entry op_test(", ",\n".join("\t" + p for p in params), ")", "{",
             "\t.reg .pred %guard;", "\t.reg .b32 %tix, %ctax, %ntx, %nn;", "\t.reg .b64 %idx, %ad, %base;",
             "\t.reg .b16 %byte;"]
    for i, t in enumerate(in_types):
        lines.append(f"\t.reg .{_regtype(t)} %a{i};")
    for i, t in enumerate(out_types):
        lines.append(f"\t.reg .{_regtype(t)} %d{i};")
    if regs:
        lines.append("\t" + regs)
    lines += ["\tmov.u32 %tix, %tid.x;", "\tmov.u32 %ctax, %ctaid.x;", "\tmov.u32 %ntx, %ntid.x;",
              "\tmad.lo.s32 %tix, %ctax, %ntx, %tix;", "\tld.param.u32 %nn, [pn];",
              "\tsetp.ge.u32 %guard, %tix, %nn;", "\t@%guard bra $DONE;", "\tcvt.u64.u32 %idx, %tix;"]
    for i, t in enumerate(in_types):
        size = 1 if t == "pred" else TYPE_SIZES[t]
        lines += [f"\tld.param.u64 %base, [pin{i}];", f"\tmad.lo.s64 %ad, %idx, {size}, %base;"]
        if t == "pred":
            lines += ["\tld.global.u8 %byte, [%ad];", f"\tsetp.ne.b16 %a{i}, %byte, 0;"]
        elif size == 1:
            lines.append(f"\tld.global.{'s8' if t == 's8' else 'u8'} %a{i}, [%ad];")
        else:
            lines.append(f"\tld.global.{_memtype(t)} %a{i}, [%ad];")
    lines += ["\t" + ln.strip() for ln in body.strip().split("\n")]
    for i, t in enumerate(out_types):
        size = 1 if t == "pred" else TYPE_SIZES[t]
        lines += [f"\tld.param.u64 %base, [pout{i}];", f"\tmad.lo.s64 %ad, %idx, {size}, %base;"]
        if t == "pred":
            lines += [f"\tselp.u16 %byte, 1, 0, %d{i};", "\tst.global.u8 [%ad], %byte;"]
        elif size == 1:
            lines.append(f"\tst.global.u8 [%ad], %d{i};")
        else:
            lines.append(f"\tst.global.{_memtype(t)} [%ad], %d{i};")
    lines += ["$DONE:", "\tret;", "}", ""]
    return "\n".join(lines)


def _as_type(v, t: str) -> np.ndarray:
    """Inputs as storage of PTX type t: float types take values (or same-width unsigned bit patterns),
    integer types take values modulo 2**bits."""
    dt = np.dtype(_NP[t])
    if not isinstance(v, np.ndarray):
        items = list(v) if hasattr(v, "__iter__") else [v]
        if all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in items) and dt.kind != "f":
            bits = 8 * dt.itemsize
            flat = [int(x) & ((1 << bits) - 1) for x in items]
            return np.array(flat, dtype={8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]).view(dt)
        v = np.asarray(items, dtype=np.float64 if dt.kind == "f" else None)
    a = np.asarray(v)
    if a.dtype.kind == "u" and a.dtype.itemsize == dt.itemsize:
        return a.view(dt)
    if dt.kind == "f":
        return a.astype(np.float64).astype(dt)
    if a.dtype.kind == "f":
        raise TypeError(f"float values for integer type .{t}")
    return a.astype(dt)


def run_ptx_op(body: str, inputs: list, out_types: list, *, regs: str = "", block: int = 64,
               target: str = "sm_100a", **kw) -> list:
    """Run `body` once per element of the inputs; returns one numpy array per output type."""
    n = None
    arrs = []
    for t, v in inputs:
        a = _as_type(v, t)
        a = np.ascontiguousarray(a.reshape(-1))
        n = len(a) if n is None else n
        if len(a) != n:
            raise ValueError("inputs differ in length")
        arrs.append(a)
    if n is None:
        n = int(kw.pop("n", 1))
    ptx = op_ptx(body, [t for t, _ in inputs], list(out_types), regs=regs, target=target)
    mem = DeviceMemory()
    params = [mem.alloc_array(a, f"in{i}") for i, a in enumerate(arrs)]
    outs = [np.zeros(n, dtype=_NP[t]) for t in out_types]
    oaddr = [mem.alloc_array(o, f"out{i}") for i, o in enumerate(outs)]
    params += oaddr + [n]
    grid = (max(1, -(-n // block)), 1, 1)
    emulate_ptx(ptx, "op_test", grid, (block, 1, 1), params, mem, **kw)
    for a, o in zip(oaddr, outs):
        mem.copy_back(a, o)
    return [o.astype(bool) if t == "pred" else o for o, t in zip(outs, out_types)]


def copy_to_shared_ptx(src: str, nwords: str, smem: str, nthreads: int) -> str:
    """PTX (a brace scope with its own registers) by which the threads of a CTA copy `nwords` 32-bit words
    from the global address in register `src` to the shared variable `smem`, word i by thread
    i % nthreads, then meet at `bar.sync 0` -- how the tensor-core tests stage an operand image."""
    return f"""    {{
    .reg .pred %cpdone;
    .reg .b32 %cpi, %cpw, %cpa, %cps;
    .reg .b64 %cpg;
    mov.u32 %cpi, %tid.x;
    mov.u32 %cps, {smem};
$CP_LOOP:
    setp.ge.u32 %cpdone, %cpi, {nwords};
    @%cpdone bra $CP_DONE;
    mul.wide.u32 %cpg, %cpi, 4;
    add.s64 %cpg, {src}, %cpg;
    ld.global.b32 %cpw, [%cpg];
    shl.b32 %cpa, %cpi, 2;
    add.u32 %cpa, %cpa, %cps;
    st.shared.b32 [%cpa], %cpw;
    add.u32 %cpi, %cpi, {nthreads};
    bra.uni $CP_LOOP;
$CP_DONE:
    bar.sync 0;
    }}
"""
