"""The host object NVIDIA's tileiras hands to ptxas (`--nv-host=x.o`): which kernels it has launch hooks for.

An x86-64 ELF relocatable; per kernel N it holds `__CUDA_TILEIR_FUNC_NAME_N` (the entry's name, a C string)
and `__CUDA_TILEIR_FUNC_ON_ARGUMENTS_CHANGE_N` (the hook that fills the kernel's tensor maps in its
parameter buffer; README.md, "NVIDIA's launch-time hook").  `fill_tensor_maps` runs a kernel's hook, as the
CUDA driver does at launch: its machine code (position independent, no relocations, no calls) is copied into
an executable page and called on a parameter buffer laid out like constant bank 0 -- so only on an x86-64
host, and only with host objects one would also hand to the driver.
"""
from __future__ import annotations

import ctypes
import mmap
import platform
import re
import struct
import sys
from dataclasses import dataclass

from ..codegen.host_object import MAP_ALIGN, MAP_BYTES, bank_offsets
from ..targets import HOOK_PARAM_BANK_BASE
from .errors import LaunchError, UnsupportedLaunch

_EM_X86_64 = 62
_ET_REL = 1
_SHT_SYMTAB = 2
_SHT_RELA = 4
_NAME = re.compile(r"__CUDA_TILEIR_FUNC_NAME_(\d+)")
_HOOK = "__CUDA_TILEIR_FUNC_ON_ARGUMENTS_CHANGE_{}"


# Where the hook's parameter buffer starts as a constant-bank address, by the PTX's target: alignment is
# computed on these addresses (read from the hooks' code: sm_90 starts its offsets at 0x210, sm_100 at 0).
BANK_BASE = HOOK_PARAM_BANK_BASE


@dataclass(frozen=True)
class HostObject:
    path: str
    hooks: dict          # kernel name -> the symbol of its launch hook
    code: dict           # kernel name -> the hook's machine code, or None when relocations patch it


def read_host_object(path: str) -> HostObject:
    """The kernels `path` has launch hooks for; a `LaunchError` when it is not such a host object."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise LaunchError(f"cannot read host object '{path}': {e.strerror or e}") from None
    return parse_host_object(data, path)


def parse_host_object(data: bytes, path: str) -> HostObject:
    """The host object in `data` (a `.host.o` file, or the `.nv.host` section ptxas embeds in the cubin, which
    holds the same bytes); `path` names it in errors."""
    if data[:4] != b"\x7fELF":
        raise LaunchError(f"host object '{path}' is not an ELF object file")
    if data[4:6] != b"\x02\x01" or struct.unpack_from("<HH", data, 16) != (_ET_REL, _EM_X86_64):
        raise LaunchError(f"host object '{path}' is not a 64-bit little-endian x86-64 relocatable object")
    try:
        symbols, sections, relocated = _symbols(data)
    except (struct.error, IndexError, ValueError):
        raise LaunchError(f"host object '{path}' is truncated or malformed") from None
    hooks, code = {}, {}
    for name, (shndx, value, size) in symbols.items():
        m = _NAME.fullmatch(name)
        hook = _HOOK.format(m.group(1)) if m else None
        if hook in symbols and shndx < len(sections):
            kernel = _bytes(data, sections, shndx, value, size).split(b"\0", 1)[0].decode(errors="replace")
            hooks[kernel] = hook
            hshndx, hvalue, hsize = symbols[hook]
            patched = any(hvalue <= off < hvalue + hsize for off in relocated.get(hshndx, ()))
            code[kernel] = None if patched else _bytes(data, sections, hshndx, hvalue, hsize)
    return HostObject(path, hooks, code)


def _bytes(data: bytes, sections: list, shndx: int, value: int, size: int) -> bytes:
    off = sections[shndx][0] + value
    return data[off:off + size]


def is_tensor_map(param) -> bool:
    """A PTX entry parameter (parser.VarDecl) that is a tensor map: 128 opaque bytes aligned to 64
    (`CUtensorMap`), filled on the host at launch and read by `cp.async.bulk.tensor`."""
    return param.nbytes == MAP_BYTES and param.align == MAP_ALIGN


def fill_tensor_maps(host: HostObject, kernel: str, target: str, params: list, values: list) -> dict[int, bytes]:
    """Run `kernel`'s launch hook; {parameter index: the 128 bytes of its tensor map}.  `target`: the PTX's
    `.target`; `params`: the PTX entry's parameters (parser.VarDecl), `values`: the bytes of the ordinary
    ones (None for the maps)."""
    if platform.machine().lower() not in ("x86_64", "amd64") or not sys.platform.startswith("linux"):
        raise UnsupportedLaunch(f"the host object's launch hook is x86-64 Linux code; this host is "
                                f"{platform.machine()} {sys.platform}")
    if host.code[kernel] is None:
        raise UnsupportedLaunch(f"the launch hook {host.hooks[kernel]} of '{host.path}' needs relocations; only "
                                "self-contained hooks (as NVIDIA's tool writes them) are run")
    base = BANK_BASE.get(re.sub(r"[a-z]+$", "", target or ""))
    if base is None:
        raise UnsupportedLaunch(f"the parameter layout of launch hooks for target {target} is not known "
                                f"(known: {', '.join(BANK_BASE)})")
    maps = [i for i, p in enumerate(params) if is_tensor_map(p)]
    sizes = [p.nbytes for p in params]
    offsets = bank_offsets([(p.nbytes, MAP_ALIGN if i in maps else max(p.nbytes, 1)) for i, p in enumerate(params)],
                           base)
    buf = (ctypes.c_ubyte * (max((o + n for o, n in zip(offsets, sizes)), default=0) + MAP_ALIGN))()
    for i, (off, v) in enumerate(zip(offsets, values)):
        if i not in maps:
            ctypes.memmove(ctypes.addressof(buf) + off, bytes(v), len(bytes(v)))
    rc = _call(host.code[kernel], buf)
    if rc != 0:
        raise LaunchError(f"the launch hook {host.hooks[kernel]} of '{host.path}' returned {rc}")
    return {i: bytes(buf[offsets[i]:offsets[i] + MAP_BYTES]) for i in maps}


def with_tensor_maps(host: HostObject, kernel: str, target: str, params: list, values: list) -> list[bytes]:
    """What a launch passes the kernel, as the driver builds it: the user's parameter bytes `values` (the
    entry's leading parameters), then the trailing tensor maps the kernel's launch hook writes."""
    hidden = len(params) - len(values)
    maps = fill_tensor_maps(host, kernel, target, params, list(values) + [None] * hidden)
    return [bytes(v) for v in values] + [maps[i] for i in sorted(maps)]


def _call(code: bytes, buf) -> int:
    """Call position-independent x86-64 code as `int f(void*, void*, void*, void *params)` (System V)."""
    try:
        page = mmap.mmap(-1, max(len(code), 1), prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except OSError as e:       # e.g. a system that forbids writable executable memory
        raise UnsupportedLaunch(f"cannot map the launch hook's code executable: {e.strerror or e}") from None
    try:
        page.write(code)
        fn_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
        anchor = ctypes.c_char.from_buffer(page)
        try:
            return fn_type(ctypes.addressof(anchor))(None, None, None, ctypes.addressof(buf))
        finally:
            del anchor      # the page can only be closed once nothing points into it
    finally:
        page.close()


def _symbols(data: bytes) -> tuple[dict, list, dict]:
    """{symbol name: (section index, value, size)}, [(file offset, size)] per section and {section index:
    offsets that relocations patch}."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    sections = [(h[4], h[5]) for h in headers]
    out: dict = {}
    relocated: dict = {}
    for h in headers:
        if h[1] == _SHT_RELA:
            relocated.setdefault(h[7], []).extend(struct.unpack_from("<Q", data, h[4] + 24 * k)[0]
                                                  for k in range(h[5] // 24))
        if h[1] != _SHT_SYMTAB:
            continue
        strings = sections[h[6]][0]
        for k in range(h[5] // 24):
            name_off, _info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, h[4] + 24 * k)
            start = strings + name_off
            out[data[start:data.index(b"\0", start)].decode(errors="replace")] = (shndx, value, size)
    return out, sections, relocated
