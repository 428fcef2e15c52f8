"""A content-addressed compile cache: the same bytecode, options and toolchain give the same outputs,
so a compile that has been done once is served from disk.

    key.py          the key: a canonical, type-tagged encoding of the request, hashed with BLAKE2b
    fingerprint.py  what identifies the compiler itself: our sources, llvmlite, numpy, Python, ptxas,
                    libdevice (stat signatures, content digests memoized per install)
    entry.py        one cache entry: named sections under a checksum (corruption is detected, not served)
    store.py        the on-disk store: atomic writes, LRU eviction under a size cap, hit/miss statistics
    files.py        all-or-nothing file writes (temp file + rename), directory listings
    config.py       where the cache lives and whether it is on (--cache-dir, --no-cache, environment)
    api.py          compile_cached(): the Python API's and the batch pipeline's way in

Everything the drop-in needs on a cache hit (config, key, fingerprint, entry, store, files)
imports only the standard library's light modules, so a hit costs a few milliseconds beyond
Python's own start-up.
"""
