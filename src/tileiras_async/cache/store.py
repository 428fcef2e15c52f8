"""The on-disk store: one file per key, written atomically, evicted least recently used first.

    <dir>/v1/entries/<2 hex>/<62 hex>   the entries (entry.py), named by their key
    <dir>/v1/memo/                      memoized fingerprint digests (fingerprint.py)
    <dir>/v1/stats.log                  one byte per event, appended: h hit, m miss, s store,
                                        c corrupt entry found, e entry evicted ("#h=N ..." lines:
                                        counts folded by `prune`)
    <dir>/v1/size                       the entries' total size in bytes (kept by put / prune)
    <dir>/v1/lock                       flock()ed while the size is updated or entries evicted
    <dir>/CACHEDIR.TAG                  tells backup tools to skip the directory

Safe with many processes at once: entries appear by rename (a reader sees a whole entry or none),
readers verify the checksum and the key inside the entry, and deleting an entry that another
process is reading does not disturb it (POSIX keeps the open file).  A hit sets the entry's
modification time, which is the LRU order eviction follows.  A lookup needs no lock.
"""
from __future__ import annotations

import os

from . import entry as _entry
from .files import listdir as _listdir
from .files import scandir as _scandir
from .files import write_atomic
from .config import DEFAULT_MAX_SIZE

LAYOUT = "v1"
EVICT_TO = 0.8            # eviction frees down to this fraction of the cap (not just under it)
STALE_TEMP_S = 3600.0     # prune removes temp files this old (left by killed writers)
CACHEDIR_TAG = ("Signature: 8a477f597d28d172789f06886806bc55\n"
                "# This file is a cache directory tag created by tileiras-async.\n")
EVENTS = {"h": "hits", "m": "misses", "s": "stores", "c": "corrupt", "e": "evicted"}


class CacheStore:
    def __init__(self, root: str, max_size: int = DEFAULT_MAX_SIZE):
        self.root = root
        self.max_size = max_size
        self.base = os.path.join(root, LAYOUT)
        self.entries_dir = os.path.join(self.base, "entries")
        self.memo_dir = os.path.join(self.base, "memo")

    def path_for(self, key: str) -> str:
        return os.path.join(self.entries_dir, key[:2], key[2:])

    # ------------------------------------------------------------------ lookups and stores

    def get(self, key: str, *, record: bool = True) -> dict[str, bytes] | None:
        """The entry's sections, or None (absent or corrupt: a corrupt entry is removed)."""
        path = self.path_for(key)
        try:
            with open(path, "rb") as f:
                blob = f.read()
                ino = os.fstat(f.fileno()).st_ino
        except OSError:
            if record:
                self.record("m")
            return None
        try:
            sections = _entry.decode(blob)
            if sections.get("key") != key.encode():
                raise _entry.CorruptEntry("entry stored under another key")
        except _entry.CorruptEntry:
            self._remove_if_same(path, ino)
            self.record("cm" if record else "c")
            return None
        try:
            os.utime(path)  # most recently used
        except OSError:
            pass
        if record:
            self.record("h")
        return sections

    def put(self, key: str, sections: dict[str, bytes]) -> None:
        """Store (or replace) an entry; keeps the total under the cap.  Never raises for I/O:
        a cache that cannot be written only costs the next compile its hit."""
        blob = _entry.encode({**sections, "key": key.encode()})
        path = self.path_for(key)
        try:
            self._ensure_dirs(os.path.dirname(path))
            with self._locked():
                old = _size_of(path)
                write_atomic(path, blob)
                total = self._read_total() + len(blob) - old
                if total > self.max_size:
                    total = self._evict_locked(int(self.max_size * EVICT_TO))
                self._write_total(total)
            self.record("s")
        except OSError:
            pass

    def record(self, events: str) -> None:
        """Append statistics events (see EVENTS); one small O_APPEND write, no lock."""
        log = os.path.join(self.base, "stats.log")
        try:
            fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except FileNotFoundError:  # a new cache: its directory comes with the first event
            try:
                os.makedirs(self.base, exist_ok=True)
                fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            except OSError:
                return
        except OSError:
            return
        try:
            os.write(fd, events.encode())
        except OSError:
            pass
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ maintenance

    def stats(self) -> dict:
        counts = self._counts()
        entries = self._scan()
        out = {"dir": self.root, "entries": len(entries), "size_bytes": sum(s for _, s, _ in entries),
               "max_size_bytes": self.max_size}
        out.update({name: counts.get(code, 0) for code, name in EVENTS.items()})
        lookups = out["hits"] + out["misses"]
        out["hit_rate"] = out["hits"] / lookups if lookups else 0.0
        return out

    def clear(self) -> tuple[int, int]:
        """Remove every entry and the statistics; returns (entries removed, bytes freed)."""
        removed = freed = 0
        with self._locked():
            for _mtime, size, path in self._scan():
                if _unlink(path):
                    removed += 1
                    freed += size
            for name in ("stats.log", "size"):
                _unlink(os.path.join(self.base, name))
            for name in _listdir(self.memo_dir):
                _unlink(os.path.join(self.memo_dir, name))
        return removed, freed

    def prune(self, max_size: int | None = None) -> tuple[int, int]:
        """Evict least recently used entries down to `max_size` (default: the cap), remove temp files
        left by killed writers, fold the statistics log; returns (entries removed, bytes freed)."""
        limit = self.max_size if max_size is None else max_size
        with self._locked():
            before = self._scan()
            self._remove_stale_temps()
            total = sum(s for _, s, _ in before)
            if total > limit:
                total = self._evict_locked(limit)
            self._write_total(total)
            self._fold_stats()
        return len(before) - len(self._scan()), sum(s for _, s, _ in before) - total

    # ------------------------------------------------------------------ internals

    def _evict_locked(self, target: int) -> int:
        entries = sorted(self._scan())  # oldest modification time first
        total = sum(s for _, s, _ in entries)
        evicted = 0
        for _mtime, size, path in entries:
            if total <= target:
                break
            if _unlink(path):
                total -= size
                evicted += 1
        if evicted:
            self.record("e" * evicted)
        return total

    def _scan(self) -> list[tuple[int, int, str]]:
        """(mtime_ns, size, path) of every entry."""
        out = []
        for sub in _scandir(self.entries_dir):
            if not sub.is_dir():
                continue
            for e in _scandir(sub.path):
                if e.name.startswith("."):
                    continue
                try:
                    st = e.stat()
                except OSError:
                    continue
                out.append((st.st_mtime_ns, st.st_size, e.path))
        return out

    def _remove_stale_temps(self) -> None:
        import time
        now = time.time()
        for sub in _scandir(self.entries_dir):
            if not sub.is_dir():
                continue
            for e in _scandir(sub.path):
                if e.name.startswith(".") and e.name.endswith(".tmp"):
                    try:
                        if now - e.stat().st_mtime > STALE_TEMP_S:
                            os.unlink(e.path)
                    except OSError:
                        pass

    def _counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        try:
            with open(os.path.join(self.base, "stats.log"), "rb") as f:
                data = f.read()
        except OSError:
            return counts
        for line in data.split(b"\n"):
            if line.startswith(b"#"):
                for item in line[1:].decode("ascii", "replace").split():
                    code, _, n = item.partition("=")
                    if n.isdigit():
                        counts[code] = counts.get(code, 0) + int(n)
                continue
            for code in line.decode("ascii", "replace"):
                counts[code] = counts.get(code, 0) + 1
        return counts

    def _fold_stats(self) -> None:
        counts = self._counts()
        text = "#" + " ".join(f"{c}={counts[c]}" for c in sorted(counts)) + "\n"
        try:
            write_atomic(os.path.join(self.base, "stats.log"), text.encode())
        except OSError:
            pass

    def _read_total(self) -> int:
        try:
            with open(os.path.join(self.base, "size"), "rb") as f:
                return int(f.read().strip() or b"0")
        except (OSError, ValueError):
            return sum(s for _, s, _ in self._scan())

    def _write_total(self, total: int) -> None:
        write_atomic(os.path.join(self.base, "size"), b"%d\n" % max(total, 0))

    def _ensure_dirs(self, entry_dir: str) -> None:
        if os.path.isdir(entry_dir):
            return
        os.makedirs(entry_dir, exist_ok=True)
        tag = os.path.join(self.root, "CACHEDIR.TAG")
        if not os.path.exists(tag):
            try:
                write_atomic(tag, CACHEDIR_TAG.encode())
            except OSError:
                pass

    def _locked(self):
        return _FileLock(os.path.join(self.base, "lock"))

    @staticmethod
    def _remove_if_same(path: str, ino: int) -> None:
        """Remove a corrupt entry unless another process has replaced it meanwhile."""
        try:
            if os.stat(path).st_ino == ino:
                os.unlink(path)
        except OSError:
            pass


class _FileLock:
    """An exclusive flock() on a file, for the few read-modify-write steps (size, eviction)."""

    def __init__(self, path: str):
        self.path = path
        self.fd = -1

    def __enter__(self):
        import fcntl
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)  # closing releases the lock
        return False


def _size_of(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _unlink(path: str) -> bool:
    try:
        os.unlink(path)
        return True
    except OSError:
        return False


