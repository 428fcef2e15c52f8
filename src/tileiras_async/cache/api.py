"""The cache for whole-module compiles (`stages.compile_in_process` results): the Python API's entry
point `compile_cached`, and the helpers the batch pipeline uses for its per-target lookups.

Entries of this kind hold a `CompileResult` (msgpack) and say which optional parts were computed
(schedules, remarks): a request that needs a part the entry lacks is a miss, and the recompile
replaces the entry with one that has both.  The key's request is the whole `CompileOptions` struct
(`msgspec.structs.asdict`), so an option added to it is keyed by construction.  Schedule reports
name the input path; entries store them without it and each lookup fills in its own path.

The batch pipeline and the API share these entries (the same options give the same cubin, PTX and
schedules either way).  Failures are cached when deterministic (parse/verify exit 3, code
generation or ptxas exit 5); the batch replays only successes, since it reports a failure's
diagnostics per stage and kernel.
"""
from __future__ import annotations

import msgspec

from ..stages import CompileOptions, CompileResult, compile_in_process
from . import config
from .fingerprint import compute as compute_fingerprint
from .fingerprint import compiled_with
from .key import make_key
from .store import CacheStore

KIND = "module"

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(CompileResult)


def open_store(cache_dir: str | None = None, *, enabled: bool | None = None) -> CacheStore | None:
    """The store to use: None when disabled (enabled=False, or $TILEIRAS_ASYNC_NO_CACHE and enabled
    not given); the directory defaults to $TILEIRAS_ASYNC_CACHE_DIR or the user cache directory."""
    if enabled is False or (enabled is None and config.disabled_by_env()):
        return None
    return CacheStore(cache_dir or config.default_dir(), config.max_size_from_env())


class ModuleCache:
    """Lookups and stores of module compiles in one store, with the fingerprint computed once."""

    def __init__(self, store: CacheStore):
        self.store = store
        self.fingerprint = compute_fingerprint(store.memo_dir)

    def key(self, data: bytes, options: CompileOptions) -> str:
        return make_key(KIND, msgspec.structs.asdict(options), data, self.fingerprint.digest)

    def get(self, key: str, path: str, *, schedules: bool = False, remarks: bool = False,
            ok_only: bool = False) -> CompileResult | None:
        sections = self.store.get(key, record=False)
        result = None
        if sections is not None:
            try:
                result = _decoder.decode(sections["result"])
            except (KeyError, msgspec.DecodeError):
                result = None
        if result is None or (schedules and sections.get("schedules") != b"1") \
                or (remarks and sections.get("remarks") != b"1") or (ok_only and not result.ok):
            self.store.record("m")  # absent, or without a part this caller needs: it recompiles
            return None
        self.store.record("h")
        if result.schedules:
            result = msgspec.structs.replace(
                result, schedules=[msgspec.structs.replace(r, module=path) for r in result.schedules])
        return result

    def put(self, key: str, result: CompileResult, *, schedules: bool, remarks: bool) -> None:
        if not result.ok and result.transient:
            return
        stored = msgspec.structs.replace(
            result, schedules=[msgspec.structs.replace(r, module="") for r in result.schedules])
        self.store.put(key, {"result": _encoder.encode(stored), "schedules": b"1" if schedules else b"0",
                             "remarks": b"1" if remarks else b"0"})


def compile_cached(path: str, data: bytes | None, options: CompileOptions, *, with_schedules: bool = False,
                   with_remarks: bool = False, cache: CacheStore | bool | None = None) -> tuple[CompileResult, bool]:
    """`stages.compile_in_process` through the cache: (result, whether it came from the cache).

    `data` None reads `path`.  `cache`: a CacheStore, True/None for the default store (None honours
    $TILEIRAS_ASYNC_NO_CACHE), False to compile without the cache."""
    if data is None:
        with open(path, "rb") as f:
            data = f.read()
    store = cache if isinstance(cache, CacheStore) else open_store(enabled=None if cache is None else bool(cache))
    if store is None:
        return compile_in_process(path, data, options, with_schedules=with_schedules, with_remarks=with_remarks), False
    mc = ModuleCache(store)
    key = mc.key(data, options)
    hit = mc.get(key, path, schedules=with_schedules, remarks=with_remarks)
    if hit is not None:
        return _strip(hit, with_schedules, with_remarks), True
    result = compile_in_process(path, data, options, with_schedules=with_schedules, with_remarks=with_remarks)
    if compiled_with(mc.fingerprint):
        mc.put(key, result, schedules=with_schedules, remarks=with_remarks)
    return result, False


def _strip(result: CompileResult, schedules: bool, remarks: bool) -> CompileResult:
    """What compile_in_process would have returned for these flags (an entry may hold more)."""
    return msgspec.structs.replace(result, schedules=result.schedules if schedules else [],
                                   remarks=result.remarks if remarks else [])


__all__ = ["CacheStore", "ModuleCache", "compile_cached", "open_store"]
