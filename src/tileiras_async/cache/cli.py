"""`tileiras-async cache stats|clear|prune`: look at and tidy the compile cache.

    stats [--json]         entries, size, cap, hits / misses / stores / corrupt / evicted, hit rate
    clear                  remove every entry and the statistics
    prune [--max-size S]   evict least recently used entries down to S (default: the cap), remove
                           temporary files left by killed writers, fold the statistics log
"""
from __future__ import annotations

import sys

from ..inputs import EXIT_CONFIG, EXIT_USAGE, exit_table
from . import config

EXIT_CODES = exit_table({   # README's `cache` table lists them (tests/test_exit_codes.py)
    EXIT_USAGE: "usage errors",
    EXIT_CONFIG: "an invalid --max-size"})


def add_cache_parser(subparsers) -> None:
    c = subparsers.add_parser("cache", help="show, clear or prune the compile cache",
                              description="The compile cache shared by the tileiras drop-in, `compile` and the "
                                          "Python API (content-addressed: input, options and toolchain).")
    c.add_argument("--cache-dir", metavar="D", default=None,
                   help=f"the cache (default: ${config.ENV_DIR}, else {config.default_dir()})")
    sub = c.add_subparsers(dest="cache_command", required=True)
    st = sub.add_parser("stats", help="entries, size and hit/miss counts")
    st.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    st.set_defaults(func=_stats)
    cl = sub.add_parser("clear", help="remove every entry and the statistics")
    cl.set_defaults(func=_clear)
    pr = sub.add_parser("prune", help="evict least recently used entries down to the size cap")
    pr.add_argument("--max-size", metavar="SIZE", default=None,
                    help=f"bytes, or with K/M/G (default: ${config.ENV_MAX_SIZE}, else "
                         f"{config.DEFAULT_MAX_SIZE >> 30}G)")
    pr.set_defaults(func=_prune)


def _store(args):
    from .store import CacheStore
    return CacheStore(args.cache_dir or config.default_dir(), config.max_size_from_env())


def _stats(args) -> int:
    s = _store(args).stats()
    if args.json:
        import json
        print(json.dumps(s, sort_keys=True))
        return 0
    print(f"cache directory  {s['dir']}\n"
          f"entries          {s['entries']}\n"
          f"size             {_human(s['size_bytes'])} of {_human(s['max_size_bytes'])}\n"
          f"hits             {s['hits']}\n"
          f"misses           {s['misses']}\n"
          f"hit rate         {100 * s['hit_rate']:.1f} %\n"
          f"stores           {s['stores']}\n"
          f"corrupt entries  {s['corrupt']} (removed and recompiled)\n"
          f"evicted          {s['evicted']}")
    return 0


def _clear(args) -> int:
    removed, freed = _store(args).clear()
    print(f"removed {removed} entries ({_human(freed)})")
    return 0


def _prune(args) -> int:
    limit = None
    if args.max_size is not None:
        try:
            limit = config.parse_size(args.max_size)
        except ValueError:
            print(f"error: invalid size '{args.max_size}' (bytes, or a number with K, M or G)", file=sys.stderr)
            return EXIT_CONFIG
    removed, freed = _store(args).prune(limit)
    print(f"evicted {removed} entries ({_human(freed)})")
    return 0


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"
