"""Keep numpy's BLAS on one thread while a kernel runs.

Tile-sized matrix products (64x64 .. 128x128) are far slower with OpenBLAS's
thread pool than on one thread (10-50x on a 2-core machine), and the pipeline
may run several interpreters side by side.  No dependency: the thread count is
set through the bundled OpenBLAS's own entry points when they can be found.
"""
from __future__ import annotations

import ctypes
import glob
import os
from contextlib import contextmanager
from functools import lru_cache

_NAMES = [("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
          ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
          ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
          ("openblas_get_num_threads", "openblas_set_num_threads")]


@lru_cache(maxsize=1)
def _openblas():
    try:
        import numpy
        base = os.path.dirname(numpy.__file__)
        paths = glob.glob(os.path.join(base, "..", "numpy.libs", "*openblas*")) + \
            glob.glob(os.path.join(base, ".dylibs", "*openblas*"))
        for path in paths:
            lib = ctypes.CDLL(path)
            for get, set_ in _NAMES:
                if hasattr(lib, get) and hasattr(lib, set_):
                    g, s = getattr(lib, get), getattr(lib, set_)
                    g.restype = ctypes.c_int
                    s.argtypes = [ctypes.c_int]
                    return g, s
    except (OSError, AttributeError, ImportError):
        pass
    return None


@contextmanager
def single_threaded_blas():
    fns = _openblas()
    if fns is None:
        yield
        return
    get, set_ = fns
    before = get()
    set_(1)
    try:
        yield
    finally:
        set_(max(1, before))
