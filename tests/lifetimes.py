"""Lifetime helpers shared by the tests: bridge's C counters, resident memory,
and views that outlive their bytes."""

from __future__ import annotations

import gc
import importlib
import os
import resource
import sys
import threading
import warnings
from collections.abc import Callable, Iterator

import bridge
from bridge.core.native import _C

DLPACK_KEYS = ("exports", "export_deleters", "imports", "import_releases")
ARROW_KEYS = ("arrow_exports", "arrow_releases", "arrow_imports", "arrow_import_releases")


def snapshot() -> dict[str, int]:
    """The C counters, after collecting garbage that earlier tests left behind."""
    gc.collect()
    return _C.stats()


def delta(before: dict[str, int], keys: tuple[str, ...] = DLPACK_KEYS + ARROW_KEYS) -> dict[str, int]:
    """How far each counter in ``keys`` moved since ``before``."""
    now = _C.stats()
    return {k: now[k] - before[k] for k in keys}


def counting_alone() -> bool:
    """Whether the C counters move for this test's own work only. They are the
    process's: while pytest-run-parallel runs a test on several threads at once
    (make test-parallel), the other threads' work moves them too. A test that
    checks its values on every thread checks its counts where this is true
    (the plain run); a test that is all counts is marked thread_unsafe."""
    return threading.current_thread() is threading.main_thread()


def balanced(before: dict[str, int]) -> dict[str, int]:
    """The counters' movement since ``before``, asserting that every export was
    released and every import's producer called back (after collecting garbage)."""
    gc.collect()
    d = delta(before)
    assert d["exports"] == d["export_deleters"], d
    assert d["imports"] == d["import_releases"], d
    assert d["arrow_exports"] == d["arrow_releases"], d
    assert d["arrow_imports"] == d["arrow_import_releases"], d
    return d


# The resident growth a leak-free round-trip loop may show: 1 MiB (allocator
# noise). Under AddressSanitizer (make test-sanitize) freed memory is held in
# its quarantine, 256 MiB by default, to catch use-after-free: RSS grows by up
# to that much without any leak, and the counters alone show leaks there.
RSS_BUDGET = (1 << 20) + ((256 << 20) if "libasan" in os.environ.get("LD_PRELOAD", "") else 0)


def rss_bytes() -> int:
    """Resident set size (peak RSS where /proc is missing, which must not grow either)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def round_trips(trip: Callable[[], object], n: int, warm: int) -> tuple[dict[str, int], int]:
    """Run ``trip`` ``warm`` times (caches, free lists, arenas), then ``n`` times:
    the balanced counter movement over the ``n`` and the resident memory growth.

    The growth is measured over each half of the ``n`` and the smaller one,
    doubled, is returned: a leak grows both halves alike, while the allocator
    can step once (glibc, after earlier tests freed large blocks, raises its
    mmap threshold and serves the next blocks from a heap it keeps)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for _ in range(warm):
            trip()
        gc.collect()
        rss = [rss_bytes()]
        before = snapshot()
        for half in (n // 2, n - n // 2):
            for _ in range(half):
                trip()
            gc.collect()
            rss.append(rss_bytes())
    return balanced(before), 2 * min(rss[1] - rss[0], rss[2] - rss[1])


def frozen_heap(*peers: str) -> Iterator[None]:
    """Body of a module fixture: import ``peers`` and freeze the heap, so the
    tests' many gc.collect() calls walk only the objects the tests make (about
    0.1 s each otherwise once torch or jax is loaded; frozen objects still die
    by refcount)."""
    for name in peers:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def shrunk(view: Callable[[bridge.Tensor], bridge.Tensor] | None = None) -> bridge.Tensor:
    """``view`` (default: the tensor itself) of a 1000-element int64 tensor, made
    before its storage shrank to 8 bytes: a view past the bytes it reads."""
    t = bridge.arange(1000, dtype=bridge.int64)
    v = t if view is None else view(t)
    t.untyped_storage().resize_(8)
    return v
