"""Warp-level tensor-core instructions: mma.sync (f16/bf16/tf32/s8/u8/e4m3/e5m2/f64 fragments) and
ldmatrix/stmatrix.
"""
from __future__ import annotations

import numpy as np

from .. import fp
from ..parser import Vec
from .core import (
    Mods, _err, _space, address_fn, bl, check_nops, dst, f16, f32, f64, full_mask, getter, i32, i64, i8,
    op, put, u16, u32, u64, u8,
)
from .warp import _aligned_check


def _frag_a(shape, atype):
    """[(reg, element, row_fn(g,t), col_fn(g,t))] for operand A of mma.sync (row-major)."""
    m, n, k = shape
    if atype in ("f16", "bf16"):
        if k == 16:
            out = []
            for i in range(8):
                r, e = divmod(i, 2)
                out.append((r, e, lambda g, t, i=i: g + 8 * ((i // 2) % 2),
                            lambda g, t, i=i: 2 * t + (i % 2) + 8 * (i // 4)))
            return out, 2
        if k == 8:
            return [(i // 2, i % 2, lambda g, t, i=i: g + 8 * (i // 2), lambda g, t, i=i: 2 * t + i % 2)
                    for i in range(4)], 2
    if atype == "tf32":
        if k == 8:
            return [(i, 0, lambda g, t, i=i: g + 8 * (i % 2), lambda g, t, i=i: t + 4 * (i // 2))
                    for i in range(4)], 1
        if k == 4:
            return [(i, 0, lambda g, t, i=i: g + 8 * i, lambda g, t, i=i: t) for i in range(2)], 1
    if atype in ("s8", "u8", "e4m3", "e5m2"):
        if k == 32:
            out = []
            for i in range(16):
                r, e = divmod(i, 4)
                out.append((r, e, lambda g, t, r=r: g + 8 * (r % 2), lambda g, t, r=r, e=e: 4 * t + e + 16 * (r // 2)))
            return out, 4
        if k == 16:
            out = []
            for i in range(8):
                r, e = divmod(i, 4)
                out.append((r, e, lambda g, t, r=r: g + 8 * r, lambda g, t, e=e: 4 * t + e))
            return out, 4
    if atype == "f64" and (m, n, k) == (8, 8, 4):
        return [(0, 0, lambda g, t: g, lambda g, t: t)], 1
    return None, None


def _frag_b(shape, btype):
    m, n, k = shape
    if btype in ("f16", "bf16"):
        if k == 16:
            return [(i // 2, i % 2, lambda g, t, i=i: 2 * t + i % 2 + 8 * (i // 2), lambda g, t: g)
                    for i in range(4)], 2
        if k == 8:
            return [(0, i, lambda g, t, i=i: 2 * t + i, lambda g, t: g) for i in range(2)], 2
    if btype == "tf32":
        if k == 8:
            return [(i, 0, lambda g, t, i=i: t + 4 * i, lambda g, t: g) for i in range(2)], 1
        if k == 4:
            return [(0, 0, lambda g, t: t, lambda g, t: g)], 1
    if btype in ("s8", "u8", "e4m3", "e5m2"):
        if k == 32:
            return [(i // 4, i % 4, lambda g, t, i=i: 4 * t + i % 4 + 16 * (i // 4), lambda g, t: g)
                    for i in range(8)], 4
        if k == 16:
            return [(0, i, lambda g, t, i=i: 4 * t + i, lambda g, t: g) for i in range(4)], 4
    if btype == "f64" and (m, n, k) == (8, 8, 4):
        return [(0, 0, lambda g, t: t, lambda g, t: g)], 1
    return None, None


def _frag_c(shape, ctype):
    m, n, _k = shape
    if (m, n) == (16, 8):
        if ctype in ("f32", "s32"):
            return [(i, 0, lambda g, t, i=i: g + 8 * (i // 2), lambda g, t, i=i: 2 * t + i % 2)
                    for i in range(4)], 1
        if ctype == "f16":
            return [(i, e, lambda g, t, i=i: g + 8 * i, lambda g, t, e=e: 2 * t + e)
                    for i in range(2) for e in range(2)], 2
    if (m, n) == (8, 8) and ctype == "f64":
        return [(i, 0, lambda g, t: g, lambda g, t, i=i: 2 * t + i) for i in range(2)], 1
    return None, None


def _frag_index(frag, rows, cols):
    """Arrays (reg, elem, row, col) over the 32 lanes for each fragment element."""
    lanes = np.arange(32)
    g, t = lanes >> 2, lanes & 3
    out = []
    for (r, e, rf, cf) in frag:
        out.append((r, e, np.asarray(rf(g, t)), np.asarray(cf(g, t))))
    return out


_FLAT_CACHE: dict = {}


def _frag_flat(which, shape, ty):
    """Flat index arrays (reg, elem, lane, row, col) of every fragment element of an mma operand."""
    key = (which, shape, ty)
    v = _FLAT_CACHE.get(key)
    if v is not None:
        return v
    frag, _ = {"a": _frag_a, "b": _frag_b, "c": _frag_c}[which](shape, ty)
    lanes = np.arange(32)
    g, t = lanes >> 2, lanes & 3
    R, E, LN, RW, CL = [], [], [], [], []
    for (r, e, rf, cf) in frag:
        R.append(np.full(32, r))
        E.append(np.full(32, e))
        LN.append(lanes)
        RW.append(np.broadcast_to(np.asarray(rf(g, t)), (32,)))
        CL.append(np.broadcast_to(np.asarray(cf(g, t)), (32,)))
    v = tuple(np.concatenate(x).astype(np.intp) for x in (R, E, LN, RW, CL))
    _FLAT_CACHE[key] = v
    return v


_PERM_CACHE: dict = {}


def _frag_perm(which, shape, ty):
    """(registers, elements per register, perm): matrix element (row-major) k lives at flat position
    perm[k] of the operand's fragments laid out as [register, lane, element]."""
    key = (which, shape, ty)
    v = _PERM_CACHE.get(key)
    if v is not None:
        return v
    _frag, per = {"a": _frag_a, "b": _frag_b, "c": _frag_c}[which](shape, ty)
    R, E, LN, RW, CL = _frag_flat(which, shape, ty)
    m, n, k = shape
    rows, cols = {"a": (m, k), "b": (k, n), "c": (m, n)}[which]
    perm = np.full(rows * cols, -1, dtype=np.intp)
    perm[RW * cols + CL] = R * 32 * per + LN * per + E
    nregs = int(R.max()) + 1
    assert (perm >= 0).all() and len(np.unique(perm)) == rows * cols == nregs * 32 * per, (which, shape, ty)
    v = (nregs, per, perm)
    _PERM_CACHE[key] = v
    return v


def _decode_mat(raw, ty):
    if ty == "f16":
        return raw.view(f16).astype(f64)
    if ty == "bf16":
        return (raw.astype(u32) << u32(16)).view(f32).astype(f64)
    return _decode_elems(raw, ty)


_ELEM_DT = {"f16": u16, "bf16": u16, "tf32": u32, "f32": u32, "f64": u64, "s8": u8, "u8": u8, "s32": u32,
            "e4m3": u8, "e5m2": u8}


def _decode_elems(raw, ty):
    if ty in ("f16", "bf16", "e4m3", "e5m2"):
        return fp.decode(raw, ty)
    if ty == "tf32":
        return (raw.astype(u32) & u32(0xFFFFE000)).view(f32).astype(f64)
    if ty == "f32":
        return raw.astype(u32).view(f32).astype(f64)
    if ty == "f64":
        return raw.astype(u64).view(f64)
    if ty == "s8":
        return raw.astype(u8).view(i8).astype(i64)
    if ty == "u8":
        return raw.astype(i64)
    if ty == "s32":
        return raw.astype(u32).view(i32).astype(i64)
    raise ValueError(ty)


def encode_accumulator(values, dtype: str, satfinite: bool = False) -> np.ndarray:
    """Exact products-plus-accumulator values (float64, or int64 for .s32) rounded once to the accumulator
    format: the bits of .f32 (u32), .f64 (u64), .f16 (u16) or wrapped/saturated .s32 (u32) results."""
    if dtype == "s32":
        if satfinite:
            values = np.clip(values, -2 ** 31, 2 ** 31 - 1)
        return (values & 0xFFFFFFFF).astype(u32)
    if dtype == "f32":
        return values.astype(f32).view(u32)
    if dtype == "f64":
        return values.view(u64)
    return fp.encode(fp.round_fmt(values, "f16", "rn"), "f16")


@op("mma")
def _mma(mc, li):
    mods = Mods(li)
    if not (mods.has("sync") and mods.has("aligned")):
        raise _err(li, "mma requires .sync.aligned")
    shape = mods.take_prefix("m")
    if shape is None:
        raise _err(li, "mma without a shape")
    import re as _re
    mm_ = _re.match(r"m(\d+)n(\d+)k(\d+)$", shape)
    if not mm_:
        raise _err(li, f"bad mma shape .{shape}")
    M, N, K = (int(x) for x in mm_.groups())
    la = mods.take("row", "col")
    lb = mods.take("row", "col")
    satf = mods.has("satfinite")
    kind = mods.take_prefix("kind::")
    ts = []
    for i, p_ in enumerate(mods.parts):
        if not mods.used[i] and p_ in ("f16", "bf16", "tf32", "f32", "f64", "s8", "u8", "s32", "e4m3", "e5m2"):
            mods.used[i] = True
            ts.append(p_)
    mods.done()
    if kind is not None:
        raise _err(li, f"mma .{kind} is not supported")
    if la != "row" or lb != "col":
        raise _err(li, f"mma .{la}.{lb} layouts are not supported (only .row.col)")
    if len(ts) == 4:
        dty, aty, bty, cty = ts
    elif len(ts) == 2 and ts[0] == ts[1] == "f64":
        dty = aty = bty = cty = "f64"
    elif len(ts) == 3 and (ts[1], ts[2]) in (("s8", "s8"),):
        raise _err(li, "mma types")
    else:
        raise _err(li, f"mma types {ts} are not supported")
    fa, pa = _frag_a((M, N, K), aty)
    fb, pb = _frag_b((M, N, K), bty)
    fc, pc = _frag_c((M, N, K), cty)
    fd, pd = _frag_c((M, N, K), dty)
    if fa is None or fb is None or fc is None or fd is None:
        raise _err(li, f"mma shape .m{M}n{N}k{K} with types {ts} is not supported")
    check_nops(li, 4)
    D, A, B, C = li.ops
    regs = {}
    for nm, o, per, ty in (("d", D, pd, dty), ("a", A, pa, aty), ("b", B, pb, bty), ("c", C, pc, cty)):
        items = list(o.items) if isinstance(o, Vec) else [o]
        regw = 8 if ty == "f64" else 4
        rt = "b64" if regw == 8 else "b32"
        if nm == "d":
            regs[nm] = [dst(mc, x, rt, li) for x in items]
        else:
            regs[nm] = [getter(mc, x, rt, li) for x in items]
    L = mc.L
    nw = L // 32
    is_int = aty in ("s8", "u8")
    perms = {}
    for nm, ty, which in (("a", aty, "a"), ("b", bty, "b"), ("c", cty, "c"), ("d", dty, "c")):
        nregs, per, perm = _frag_perm(which, (M, N, K), ty)
        if nregs != len(regs[nm]):
            raise _err(li, f"mma: operand {nm} needs {nregs} registers, got {len(regs[nm])}")
        perms[nm] = (per, perm)

    def gather(nm, ty, rows, cols):
        gs = regs[nm]
        per, perm = perms[nm]
        raws = np.stack([bl(g(), L) for g in gs])                 # [nregs, lanes]
        x = raws.view(_ELEM_DT[ty]).reshape(len(gs), nw, 32 * per).transpose(1, 0, 2).reshape(nw, -1)
        return _decode_mat(x[:, perm], ty).reshape(nw, rows, cols)

    dregs = regs["d"]
    dper, dperm = perms["d"]
    dedt = _ELEM_DT[dty] if dty != "f16" else u16
    wd = u64 if dty == "f64" else u32
    nd = len(dregs)

    def f(m):
        if m is not True:
            if not m.any():
                return
            _aligned_check(mc, li, m)
        a = gather("a", aty, M, K)
        b = gather("b", bty, K, N)
        c = gather("c", cty, M, N)
        enc = encode_accumulator(np.matmul(a, b) + c, dty, satf)
        out = np.empty((nw, nd * 32 * dper), dtype=dedt)
        out[:, dperm] = enc.reshape(nw, -1)
        out = out.reshape(nw, nd, 32 * dper).transpose(1, 0, 2)
        for r, d in enumerate(dregs):
            if d is not None:
                put(d, m, out[r].reshape(-1).view(wd).view(d.dtype))
    return f


def _matrix_mods(li, name: str, unsupported: str):
    """ldmatrix/stmatrix modifiers: (number of 8x8 matrices, .trans, state space)."""
    mods = Mods(li)
    if not (mods.has("sync") and mods.has("aligned")):
        raise _err(li, f"{name} requires .sync.aligned")
    shape = mods.take("m8n8")
    num = mods.take("x1", "x2", "x4")
    trans = mods.has("trans")
    space = _space(mods)
    mods.type1({"b16"})
    mods.done()
    if shape is None or num is None:
        raise _err(li, f"{li.opcode} is not supported{unsupported}")
    return int(num[1:]), trans, space


def _matrix_address(mc, li, space: str, operand):
    """The address function of a matrix operand and its state space (a generic access through a named
    variable uses the variable's space)."""
    sym_space, afn = address_fn(mc, operand, li)
    if space == "generic" and sym_space is not None:
        space = sym_space
    return space, afn


@op("ldmatrix")
def _ldmatrix(mc, li):
    n, trans, space = _matrix_mods(li, "ldmatrix", " (only .m8n8.x1/.x2/.x4 .b16)")
    d = li.ops[0]
    items = list(d.items) if isinstance(d, Vec) else [d]
    if len(items) != n:
        raise _err(li, f"ldmatrix .x{n} needs {n} destination registers")
    rows = [dst(mc, x, "b32", li) for x in items]
    space, afn = _matrix_address(mc, li, space, li.ops[1])
    lane = np.arange(32)

    def f(m):
        mm = full_mask(mc, m)
        if not mm.any():
            return
        _aligned_check(mc, li, mm)
        widx = np.flatnonzero(mm.reshape(-1, 32).any(1))
        # lanes providing row addresses: 8*i + r for matrix i
        prov = (widx[:, None] * 32 + np.arange(8 * n)[None, :]).reshape(-1)
        addr = afn(prov, False)
        rowsdata = mc.load(space, addr, prov, 2, u16, 8, li)          # [nw*8n, 8] b16 elements
        mat = rowsdata.reshape(len(widx), n, 8, 8)                     # warp, matrix, row, col
        g, t = lane >> 2, lane & 3
        lanes_all = (widx[:, None] * 32 + lane[None, :]).reshape(-1)
        for i, r in enumerate(rows):
            if r is None:
                continue
            if not trans:
                lo = mat[:, i, g, 2 * t]
                hi = mat[:, i, g, 2 * t + 1]
            else:
                lo = mat[:, i, 2 * t, g]
                hi = mat[:, i, 2 * t + 1, g]
            v = lo.astype(u32) | (hi.astype(u32) << u32(16))
            r[lanes_all] = v.reshape(-1)
    return f


@op("stmatrix")
def _stmatrix(mc, li):
    n, trans, space = _matrix_mods(li, "stmatrix", "")
    s = li.ops[1]
    items = list(s.items) if isinstance(s, Vec) else [s]
    gs = [getter(mc, x, "b32", li) for x in items]
    space, afn = _matrix_address(mc, li, space, li.ops[0])
    lane = np.arange(32)

    def f(m):
        mm = full_mask(mc, m)
        if not mm.any():
            return
        _aligned_check(mc, li, mm)
        widx = np.flatnonzero(mm.reshape(-1, 32).any(1))
        nw = len(widx)
        g, t = lane >> 2, lane & 3
        mat = np.zeros((nw, n, 8, 8), dtype=u16)
        lanes_all = (widx[:, None] * 32 + lane[None, :])
        for i, gg in enumerate(gs):
            v = bl(np.asarray(gg()), mc.L)[lanes_all]      # [nw, 32]
            lo = (v & u32(0xFFFF)).astype(u16)
            hi = (v >> u32(16)).astype(u16)
            if not trans:
                mat[:, i, g, 2 * t] = lo
                mat[:, i, g, 2 * t + 1] = hi
            else:
                mat[:, i, 2 * t, g] = lo
                mat[:, i, 2 * t + 1, g] = hi
        prov = (widx[:, None] * 32 + np.arange(8 * n)[None, :]).reshape(-1)
        addr = afn(prov, False)
        mc.store(space, addr, prov, 2, u16, 8, mat.reshape(-1, 8), li)
    return f
