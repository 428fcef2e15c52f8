"""Where the cache lives, how large it may grow, and whether it is used.

    --cache-dir D / $TILEIRAS_ASYNC_CACHE_DIR    the directory (default: the platform's user cache
                                                 directory: $XDG_CACHE_HOME/tileiras-async, else
                                                 ~/.cache/tileiras-async; ~/Library/Caches on macOS)
    --no-cache / $TILEIRAS_ASYNC_NO_CACHE=1      compile without reading or writing the cache
    $TILEIRAS_ASYNC_CACHE_SIZE                   the size cap (bytes, or with K/M/G; default 1G),
                                                 kept by evicting least recently used entries
"""
from __future__ import annotations

import os
import sys

ENV_DIR = "TILEIRAS_ASYNC_CACHE_DIR"
ENV_DISABLE = "TILEIRAS_ASYNC_NO_CACHE"
ENV_MAX_SIZE = "TILEIRAS_ASYNC_CACHE_SIZE"
DEFAULT_MAX_SIZE = 1 << 30
_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def default_dir(env=None) -> str:
    env = os.environ if env is None else env
    if env.get(ENV_DIR):
        return env[ENV_DIR]
    home = os.path.expanduser("~")
    if sys.platform == "darwin":
        return os.path.join(home, "Library", "Caches", "tileiras-async")
    if os.name == "nt":
        return os.path.join(env.get("LOCALAPPDATA") or home, "tileiras-async", "Cache")
    return os.path.join(env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"), "tileiras-async")


def disabled_by_env(env=None) -> bool:
    env = os.environ if env is None else env
    return env.get(ENV_DISABLE, "").strip().lower() not in ("", "0", "false", "no", "off")


def parse_size(text: str) -> int:
    """'1073741824', '512M', '2G', '1.5GiB' -> bytes; ValueError for anything else."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in _UNITS and t[-1:] else ""
    number = t[:-1] if unit else t
    value = float(number)
    if not 0 <= value < float("inf"):  # also rejects nan
        raise ValueError(text)
    return int(value * _UNITS[unit])


def max_size_from_env(env=None) -> int:
    env = os.environ if env is None else env
    raw = env.get(ENV_MAX_SIZE)
    if not raw:
        return DEFAULT_MAX_SIZE
    try:
        return parse_size(raw)
    except ValueError:
        return DEFAULT_MAX_SIZE
