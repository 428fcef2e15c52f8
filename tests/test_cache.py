"""The compile cache's pieces: keys, the fingerprint, entries, the store (atomicity, corruption, LRU
eviction, statistics, many processes at once), and the Python API."""
from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

import pytest

from tileiras_async.cache import config, entry, fingerprint
from tileiras_async.cache.key import canonical, make_key
from tileiras_async.cache.store import CacheStore

from conftest import PUBLIC, requires_corpus

SAXPY = PUBLIC / "saxpy_f32_t128.v13.4.tileirbc"


# ---------------------------------------------------------------------------- keys


def test_canonical_is_injective_on_tricky_values():
    values = [None, True, False, 0, 1, -1, 1.0, "", "1", b"", b"1", [], [1], [[1]], ["a", "b"], ["ab"],
              {"a": 1}, {"a": "1"}, {"a": [1]}, {"b": 1}, ("a",), ["a"]]
    encoded = [canonical(v) for v in values]
    # tuples and lists are the same sequence; everything else is distinct
    assert len(set(encoded)) == len(values) - 1
    assert canonical(("a",)) == canonical(["a"])
    assert canonical({"x": 1, "y": 2}) == canonical({"y": 2, "x": 1})
    with pytest.raises(TypeError):
        canonical(object())


def test_key_changes_with_every_part():
    base = make_key("k", {"gpu-name": "sm_90", "opt-level": "3"}, b"data", "fp")
    assert base == make_key("k", {"opt-level": "3", "gpu-name": "sm_90"}, b"data", "fp")
    assert len(base) == 64 and int(base, 16) >= 0
    others = [make_key("k2", {"gpu-name": "sm_90", "opt-level": "3"}, b"data", "fp"),
              make_key("k", {"gpu-name": "sm_100", "opt-level": "3"}, b"data", "fp"),
              make_key("k", {"gpu-name": "sm_90", "opt-level": "2"}, b"data", "fp"),
              make_key("k", {"gpu-name": "sm_90", "opt-level": "3", "num-stages": "2"}, b"data", "fp"),
              make_key("k", {"gpu-name": "sm_90", "opt-level": "3"}, b"datA", "fp"),
              make_key("k", {"gpu-name": "sm_90", "opt-level": "3"}, b"data", "fp2")]
    assert len({base, *others}) == 7


def test_module_key_covers_every_compile_option_field():
    """The batch/API key is built from the whole CompileOptions struct: a field added to it is keyed."""
    import msgspec

    from tileiras_async.cache.api import ModuleCache
    from tileiras_async.stages import CompileOptions
    mc = ModuleCache.__new__(ModuleCache)
    mc.fingerprint = fingerprint.Fingerprint("fp", None, None)
    base = CompileOptions("sm_90")
    keys = {mc.key(b"x", base)}
    for field in msgspec.structs.fields(CompileOptions):
        value = getattr(base, field.name)
        changed = {str: lambda v: v + "x", int: lambda v: v + 1, bool: lambda v: not v}[type(value)](value)
        keys.add(mc.key(b"x", msgspec.structs.replace(base, **{field.name: changed})))
    assert len(keys) == 1 + len(msgspec.structs.fields(CompileOptions))


# ---------------------------------------------------------------------------- fingerprint


def test_fingerprint_finds_the_toolchain_discovery_finds(tmp_path):
    """The lean re-implementation of toolchain.discovery's search order agrees with it."""
    from tileiras_async.toolchain import ToolNotFound, discovery
    assert fingerprint.ENV_ROOT_VARS == discovery.ENV_ROOT_VARS
    assert fingerprint.WHEEL_ROOT_NAMES == discovery.WHEEL_ROOT_NAMES
    assert fingerprint.LIBDEVICE_REL == str(discovery.LIBDEVICE_REL)

    def fake_root(name: str, *, tool=True, lib=True) -> Path:
        root = tmp_path / name
        if tool:
            (root / "bin").mkdir(parents=True)
            (root / "bin" / "ptxas").write_text("#!/bin/sh\n")
            (root / "bin" / "ptxas").chmod(0o755)
        if lib:
            (root / "nvvm" / "libdevice").mkdir(parents=True)
            (root / "nvvm" / "libdevice" / "libdevice.10.bc").write_bytes(b"BC")
        return root

    a, b, c = fake_root("a", lib=False), fake_root("b", tool=False), fake_root("c")
    wheel = tmp_path / "site" / "nvidia" / "cu13"
    wheel.mkdir(parents=True)
    fake_root("site/nvidia/cu13")
    on_path = fake_root("p")
    link_dir = tmp_path / "usrbin"
    link_dir.mkdir()
    (link_dir / "ptxas").symlink_to(on_path / "bin" / "ptxas")
    setups = [
        ({"CUDA_HOME": str(a), "CUDA_PATH": str(b)}, []),
        ({"CUDA_ROOT": "", "CUDA_HOME": str(tmp_path / "missing"), "CUDA_PATH": str(c)}, []),
        ({}, [str(tmp_path / "site")]),
        ({"PATH": str(on_path / "bin")}, []),
        ({"PATH": str(link_dir)}, []),
        ({"PATH": f"{tmp_path / 'nothing'}{os.pathsep}{link_dir}"}, [str(tmp_path / "site")]),
        ({}, []),
    ]
    for env, sys_path in setups:
        for ours, theirs in ((fingerprint.resolve_tool("ptxas", env, sys_path),
                              lambda: discovery.find_tool("ptxas", env=env, sys_path=sys_path)),
                             (fingerprint.resolve_libdevice(env, sys_path),
                              lambda: discovery.find_libdevice(env=env, sys_path=sys_path))):
            try:
                expected = str(theirs())
            except ToolNotFound:
                expected = None
            assert ours == expected, (env, sys_path)


def test_fingerprint_is_memoized_and_follows_the_toolchain(tmp_path):
    memo = tmp_path / "memo"
    first = fingerprint.compute(str(memo))
    assert first.digest == fingerprint.compute(None).digest  # the memo only saves work
    assert len(list(memo.iterdir())) == 1
    assert fingerprint.compute(str(memo)).digest == first.digest
    if first.ptxas is None:
        pytest.skip("no ptxas in this environment")
    # another ptxas (same search, different binary) gives another fingerprint
    root = tmp_path / "cuda"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "ptxas").write_bytes(Path(first.ptxas).read_bytes()[:1000])
    (root / "bin" / "ptxas").chmod(0o755)
    other = fingerprint.compute(str(memo), env={**os.environ, "CUDA_ROOT": str(root)})
    assert other.ptxas == str(root / "bin" / "ptxas") and other.digest != first.digest


def test_fingerprint_changes_when_a_source_file_changes(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("A = 1\n")
    (pkg / "sub" / "b.py").write_text("B = 1\n")
    (pkg / "sub" / "__pycache__").mkdir()
    monkeypatch.setattr(fingerprint, "PACKAGE_DIR", str(pkg))
    memo = str(tmp_path / "memo")
    one = fingerprint.compute(memo).digest
    (pkg / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"junk")  # byte code is not source
    (pkg / ".b.py.swp").write_bytes(b"junk")                                 # nor are hidden files
    assert fingerprint.compute(memo).digest == one
    (pkg / "sub" / "b.py").write_text("B = 2\n")
    two = fingerprint.compute(memo).digest
    assert two != one
    (pkg / "sub" / "b.py").write_text("B = 1\n")  # same content again (new mtime): same fingerprint
    assert fingerprint.compute(memo).digest == one


def test_the_installation_keeps_its_own_digest(tmp_path, monkeypatch):
    """A new cache directory does not make a call read every source file: the digest of the process's
    own environment is kept with the installation (written by `make setup`, or where byte code is)."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("A = 1\n")
    monkeypatch.setattr(fingerprint, "PACKAGE_DIR", str(pkg))
    first = fingerprint.compute(str(tmp_path / "memo1"), write_install_memo=True)
    assert len(list((pkg / "__pycache__" / "fingerprint").iterdir())) == 1
    reads = []
    monkeypatch.setattr(fingerprint, "_read", lambda path: reads.append(path) or b"")
    assert fingerprint.compute(str(tmp_path / "memo2")).digest == first.digest and reads == []
    assert len(list((tmp_path / "memo2").iterdir())) == 1          # and the cache directory learns it
    # another environment is not this process's own: its digest is computed (from the stubbed reads: another
    # digest) and not kept with the installation
    other = fingerprint.compute(str(tmp_path / "memo3"), env=dict(os.environ), sys_path=list(sys.path))
    assert other.digest != first.digest and reads
    assert len(list((pkg / "__pycache__" / "fingerprint").iterdir())) == 1
    # a changed source is a new state: computed again
    reads.clear()
    (pkg / "a.py").write_text("A = 2\n")
    fingerprint.compute(None, write_install_memo=False)
    assert reads


# ---------------------------------------------------------------------------- entries and the store


def test_entry_round_trip_and_corruption():
    sections = {"cubin": b"\x7fELF" + bytes(range(256)), "stderr": b"", "rc": b"0"}
    blob = entry.encode(sections)
    assert entry.decode(blob) == sections
    for bad in (blob[:-1], blob[:20], b"", blob.replace(b"ELF", b"ELG"), b"X" + blob[1:]):
        with pytest.raises(entry.CorruptEntry):
            entry.decode(bad)


def test_store_get_put_stats(tmp_path):
    store = CacheStore(str(tmp_path))
    key = "ab" * 32
    assert store.get(key) is None
    store.put(key, {"cubin": b"123"})
    assert store.get(key)["cubin"] == b"123"
    assert (tmp_path / "CACHEDIR.TAG").read_text().startswith("Signature: 8a477f597d28d172789f06886806bc55")
    s = store.stats()
    assert (s["entries"], s["hits"], s["misses"], s["stores"]) == (1, 1, 1, 1)
    assert s["hit_rate"] == 0.5
    assert store.clear() == (1, s["size_bytes"])
    assert store.get(key) is None and store.stats()["entries"] == 0


def test_corrupt_entry_is_a_miss_and_is_removed(tmp_path):
    store = CacheStore(str(tmp_path))
    key = "cd" * 32
    store.put(key, {"cubin": b"x" * 100})
    path = Path(store.path_for(key))
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    assert store.get(key) is None
    assert not path.exists()
    assert store.stats()["corrupt"] == 1
    # an intact entry filed under another key's name is not served either
    store.put(key, {"cubin": b"y"})
    other = "ef" * 32
    Path(store.path_for(other)).parent.mkdir(parents=True, exist_ok=True)
    os.link(store.path_for(key), store.path_for(other))
    assert store.get(other) is None and store.get(key)["cubin"] == b"y"


def test_eviction_is_least_recently_used(tmp_path):
    store = CacheStore(str(tmp_path), max_size=10_000)
    keys = [f"{i:02x}" * 32 for i in range(12)]
    for i, key in enumerate(keys):
        store.put(key, {"cubin": bytes(1000)})
        if os.path.exists(store.path_for(key)):
            os.utime(store.path_for(key), ns=(i * 10**9, i * 10**9))  # a clear order, whatever the clock
    # 12 x ~1.1 KB > 10 KB: the oldest were evicted down to 80 % of the cap
    present = [k for k in keys if os.path.exists(store.path_for(k))]
    assert present and keys[-1] in present and keys[0] not in present
    total = sum(os.path.getsize(store.path_for(k)) for k in present)
    assert total <= 10_000
    # a hit makes an entry the most recently used: prune then keeps it over newer ones
    survivor = present[0]
    assert store.get(survivor) is not None
    removed, freed = store.prune(max_size=2500)
    assert removed >= 1 and freed > 0
    assert os.path.exists(store.path_for(survivor))
    assert store.stats()["evicted"] >= removed
    assert int((tmp_path / "v1" / "size").read_text()) == sum(
        os.path.getsize(store.path_for(k)) for k in keys if os.path.exists(store.path_for(k)))


def test_prune_removes_temp_files_of_killed_writers_and_folds_stats(tmp_path):
    store = CacheStore(str(tmp_path))
    key = "12" * 32
    store.put(key, {"a": b"1"})
    store.get(key)
    stale = Path(store.path_for(key)).parent / f".{key[2:]}.999.0.1.tmp"
    stale.write_bytes(b"partial")
    os.utime(stale, (1, 1))
    fresh = Path(store.path_for(key)).parent / f".{key[2:]}.998.0.2.tmp"
    fresh.write_bytes(b"being written")
    store.prune()
    assert not stale.exists() and fresh.exists()
    assert (tmp_path / "v1" / "stats.log").read_text().startswith("#")
    assert store.stats()["hits"] == 1 and store.stats()["stores"] == 1


def _hammer(args):
    root, seed = args
    store = CacheStore(root, max_size=200_000)
    served = 0
    for i in range(60):
        key = f"{(seed * 7 + i) % 16:02x}" * 32
        blob = bytes([(seed * 7 + i) % 16]) * 5000
        got = store.get(key)
        if got is None:
            store.put(key, {"cubin": blob})
        elif got["cubin"] != bytes([got["cubin"][0]]) * 5000 or got["cubin"] != blob:
            return -1  # a torn or foreign entry was served
        else:
            served += 1
    return served


def test_many_processes_share_one_store(tmp_path):
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        results = pool.map(_hammer, [(str(tmp_path), s) for s in range(4)])
    assert -1 not in results and sum(results) > 0
    s = CacheStore(str(tmp_path)).stats()
    assert s["hits"] + s["misses"] == 240
    assert not [p for p in (tmp_path / "v1" / "entries").rglob(".*.tmp")]


def test_sizes_and_settings(monkeypatch):
    assert config.parse_size("512M") == 512 << 20 and config.parse_size("2G") == 2 << 30
    assert config.parse_size("1.5GiB") == int(1.5 * (1 << 30)) and config.parse_size("100") == 100
    for bad in ("", "G", "-1", "lots", "inf", "nan"):
        with pytest.raises(ValueError):
            config.parse_size(bad)
    assert config.max_size_from_env({"TILEIRAS_ASYNC_CACHE_SIZE": "1M"}) == 1 << 20
    assert config.max_size_from_env({"TILEIRAS_ASYNC_CACHE_SIZE": "junk"}) == config.DEFAULT_MAX_SIZE
    assert config.disabled_by_env({"TILEIRAS_ASYNC_NO_CACHE": "1"})
    assert not config.disabled_by_env({"TILEIRAS_ASYNC_NO_CACHE": "0"}) and not config.disabled_by_env({})
    assert config.default_dir({"TILEIRAS_ASYNC_CACHE_DIR": "/x"}) == "/x"
    if sys.platform.startswith("linux"):
        assert config.default_dir({"XDG_CACHE_HOME": "/c"}) == "/c/tileiras-async"


# ---------------------------------------------------------------------------- the Python API


@requires_corpus
def test_compile_cached_api(tmp_path):
    from tileiras_async.cache.api import compile_cached
    from tileiras_async.stages import CompileOptions, compile_in_process
    store = CacheStore(str(tmp_path / "cache"))
    data = SAXPY.read_bytes()
    first, hit1 = compile_cached(str(SAXPY), data, CompileOptions("sm_90"), cache=store)
    again, hit2 = compile_cached(str(SAXPY), None, CompileOptions("sm_90"), cache=store)
    assert (hit1, hit2) == (False, True) and first.ok
    assert again.cubin == first.cubin == compile_in_process(str(SAXPY), data, CompileOptions("sm_90")).cubin
    _, hit3 = compile_cached(str(SAXPY), data, CompileOptions("sm_90", lineinfo=True), cache=store)
    _, hit4 = compile_cached(str(SAXPY), data, CompileOptions("sm_90"), with_remarks=True, cache=store)
    _, hit5 = compile_cached(str(SAXPY), data, CompileOptions("sm_90"), with_remarks=True, cache=store)
    assert (hit3, hit4, hit5) == (False, False, True)  # remarks were not in the entry, then they are
    plain, hit6 = compile_cached(str(SAXPY), data, CompileOptions("sm_90"), cache=store)
    assert hit6 and plain.remarks == []                   # and a request without them gets none
    _, off = compile_cached(str(SAXPY), data, CompileOptions("sm_90"), cache=False)
    assert off is False


@requires_corpus
def test_api_caches_deterministic_failures_not_transient_ones(tmp_path):
    from tileiras_async.cache.api import compile_cached
    from tileiras_async.stages import CompileOptions
    store = CacheStore(str(tmp_path / "cache"))
    bad = b"\x7fTileIR\x00" + bytes([13, 4]) + b"\x00" * 16
    r1, h1 = compile_cached("bad.tileirbc", bad, CompileOptions("sm_90"), cache=store)
    r2, h2 = compile_cached("bad.tileirbc", bad, CompileOptions("sm_90"), cache=store)
    assert not r1.ok and r1.exit_code == 3 and (h1, h2) == (False, True)
    assert r2.diagnostics == r1.diagnostics
