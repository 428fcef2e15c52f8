"""The host object NVIDIA's tileiras hands to ptxas (`--nv-host=x.o`): which kernels it has launch hooks for.

An x86-64 ELF relocatable; per kernel N it holds `__CUDA_TILEIR_FUNC_NAME_N` (the entry's name, a C string)
and `__CUDA_TILEIR_FUNC_ON_ARGUMENTS_CHANGE_N` (the hook that fills the kernel's tensor maps in its
parameter buffer; README.md, "NVIDIA's launch-time hook").  This module only reads the symbol table: it
never runs the hook.
"""
from __future__ import annotations

import re
import struct
from dataclasses import dataclass

from .errors import LaunchError

_EM_X86_64 = 62
_ET_REL = 1
_SHT_SYMTAB = 2
_NAME = re.compile(r"__CUDA_TILEIR_FUNC_NAME_(\d+)")
_HOOK = "__CUDA_TILEIR_FUNC_ON_ARGUMENTS_CHANGE_{}"


@dataclass(frozen=True)
class HostObject:
    path: str
    hooks: dict          # kernel name -> the symbol of its launch hook


def read_host_object(path: str) -> HostObject:
    """The kernels `path` has launch hooks for; a `LaunchError` when it is not such a host object."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise LaunchError(f"cannot read host object '{path}': {e.strerror or e}") from None
    if data[:4] != b"\x7fELF":
        raise LaunchError(f"host object '{path}' is not an ELF object file")
    if data[4:6] != b"\x02\x01" or struct.unpack_from("<HH", data, 16) != (_ET_REL, _EM_X86_64):
        raise LaunchError(f"host object '{path}' is not a 64-bit little-endian x86-64 relocatable object")
    try:
        symbols, sections = _symbols(data)
    except (struct.error, IndexError, ValueError):
        raise LaunchError(f"host object '{path}' is truncated or malformed") from None
    hooks = {}
    for name, (shndx, value, size) in symbols.items():
        m = _NAME.fullmatch(name)
        hook = _HOOK.format(m.group(1)) if m else None
        if hook in symbols and shndx < len(sections):
            off = sections[shndx][0] + value
            hooks[data[off:off + size].split(b"\0", 1)[0].decode(errors="replace")] = hook
    return HostObject(path, hooks)


def _symbols(data: bytes) -> tuple[dict, list]:
    """{symbol name: (section index, value, size)} and [(file offset, size)] per section."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    sections = [(h[4], h[5]) for h in headers]
    out = {}
    for h in headers:
        if h[1] != _SHT_SYMTAB:
            continue
        strings = sections[h[6]][0]
        for k in range(h[5] // 24):
            name_off, _info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, h[4] + 24 * k)
            start = strings + name_off
            out[data[start:data.index(b"\0", start)].decode(errors="replace")] = (shndx, value, size)
    return out, sections
