"""The C core, loaded once: ``bridge._C`` (the object types and the protocol
functions) and ``bridge._drivers`` (test and conformance drivers).

``bridge._native`` is the cffi extension compiled from ``cdefs/``. cffi cannot
pass Python objects, so its only role here is to call ``bridge_init``, which
creates the two CPython modules in ``sys.modules``; everything after that is
ordinary CPython code with no cffi conversion on the way.
"""

from __future__ import annotations

import sys
from typing import Any

from bridge._native import lib

if sys.implementation.name != "cpython":  # pragma: no cover
    raise ImportError("bridge's native layer needs CPython (it uses the CPython C API)")
if lib.bridge_init() != 0:  # pragma: no cover - the C error was printed
    raise ImportError("bridge._native failed to create bridge._C")

from bridge import _C, _drivers

__all__ = ["_C", "_drivers", "stats", "upcall"]


def upcall(name: str) -> Any:
    """The object registered under an up-call name (``_C.UPCALLS``, the one
    list, in ``cdefs/core/upcalls.c``) with ``_C._register``, or None before
    it is registered. How core Python reaches what an interop module provides
    (``"cuda_array_interface"``, ``"arrow_export"``, ...) without importing it;
    ValueError for a name not in the list."""
    return _C.upcall(name)


def stats() -> dict[str, int]:
    """Counters kept in C: DLPack exports made and their deleters run, imports
    made and their guards released, test-deleter calls, and the same for Arrow
    (exports, releases, imports, import releases)."""
    return _C.stats()
