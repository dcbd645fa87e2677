"""The host block cache (cdefs/core/memory.c): freed blocks of 128 KiB or
more kept for the next allocation of about their size, bounded by
BRIDGE_HOST_CACHE, given back by bridge.empty_cache()."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest

import bridge
from bridge.core.native import _C

N = 100_000  # float64 elements: 800 KB, a block the cache keeps


@pytest.fixture(autouse=True)
def _cache_on() -> Iterator[None]:
    """Each test starts with an empty cache at its default bound, and leaves it so."""
    old, _ = _C.host_cache(256 << 20)
    bridge.empty_cache()
    yield
    _C.host_cache(old)
    bridge.empty_cache()


def _hits() -> int:
    return _C.stats()["host_cache_hits"]


# The cache is the process's: its bound, the bytes it holds and its hit
# counter move with every thread's blocks. Under pytest-run-parallel (make
# test-parallel) the tests that assert on them run on one thread; the others
# run on several at once (the cache shared between threads is what they test).
SHARED_CACHE = pytest.mark.thread_unsafe(
    reason="asserts on the process-wide host cache (which block comes back, the bytes held, "
    "its bound, its hit counter), which the other test threads' blocks move too"
)


@SHARED_CACHE
def test_a_freed_block_is_the_next_allocation_of_its_size() -> None:
    t = bridge.empty(N, dtype=bridge.float64)
    addr = t.data_ptr()
    del t
    assert _C.host_cache()[1] >= N * 8
    before = _hits()
    again = bridge.empty(N, dtype=bridge.float64)
    assert again.data_ptr() == addr and again.data_ptr() % 64 == 0
    assert _hits() == before + 1
    assert _C.host_cache()[1] == 0


@SHARED_CACHE
def test_a_block_is_reused_only_for_about_its_size() -> None:
    """At most a quarter wasted: a 800 KB block is not handed to a 400 KB
    request, nor to a larger one."""
    t = bridge.empty(N, dtype=bridge.float64)
    del t
    before = _hits()
    small = bridge.empty(N // 2, dtype=bridge.float64)
    large = bridge.empty(N + 1, dtype=bridge.float64)
    assert _hits() == before
    del small, large


@SHARED_CACHE
def test_small_blocks_are_mallocs_own() -> None:
    t = bridge.empty(1000, dtype=bridge.float64)
    del t
    assert _C.host_cache()[1] == 0


def test_zeros_are_zero_after_a_dirty_block_was_cached() -> None:
    """A zeroed block never comes from the cache (calloc's lazily zeroed
    pages): a block freed full of ones does not leak into zeros()."""
    t = bridge.full((N,), 1.0, dtype=bridge.float64)
    del t
    z = bridge.zeros(N, dtype=bridge.float64)
    assert not np.asarray(z).any()
    e = bridge.empty(N, dtype=bridge.float64)  # (empty may reuse it: its contents are unspecified)
    del e


@SHARED_CACHE
def test_empty_cache_gives_everything_back() -> None:
    blocks = [bridge.empty(N, dtype=bridge.float64) for _ in range(3)]
    del blocks
    held = _C.host_cache()[1]
    assert held >= 3 * N * 8
    assert bridge.empty_cache() == held
    assert _C.host_cache()[1] == 0
    assert bridge.empty_cache() == 0


@SHARED_CACHE
def test_the_bound_is_kept() -> None:
    """Blocks past the bound are freed, the oldest first; a limit of 0 turns
    the cache off and frees what it held."""
    _C.host_cache(2 * N * 8 + 4096)
    blocks = [bridge.empty(N, dtype=bridge.float64) for _ in range(4)]
    del blocks
    limit, held = _C.host_cache()
    assert limit == 2 * N * 8 + 4096 and 0 < held <= limit
    _C.host_cache(0)
    assert _C.host_cache()[1] == 0
    t = bridge.empty(N, dtype=bridge.float64)
    del t
    assert _C.host_cache()[1] == 0


@SHARED_CACHE
def test_a_block_larger_than_the_bound_is_not_kept() -> None:
    _C.host_cache(N * 8 // 2)
    t = bridge.empty(N, dtype=bridge.float64)
    del t
    assert _C.host_cache()[1] == 0


@pytest.mark.parametrize(("env", "limit"), [("64m", 64 << 20), ("1G", 1 << 30), ("300000", 300000), ("0", 0),
                                            ("lots", 256 << 20), ("", 256 << 20), ("5x", 256 << 20),
                                            # a sign, a space, a bare suffix, past SIZE_MAX: the default, never
                                            # "no bound" (strtoull read -1 as 2**64 - 1)
                                            ("-1", 256 << 20), ("-5", 256 << 20), ("+5", 256 << 20),
                                            (" 5", 256 << 20), ("5 ", 256 << 20), ("k", 256 << 20),
                                            ("18446744073709551616", 256 << 20), ("99999999999999999999", 256 << 20),
                                            ("17179869184g", 256 << 20), ("0x10", 256 << 20)])  # fmt: skip
def test_the_bound_is_read_from_BRIDGE_HOST_CACHE(env: str, limit: int) -> None:
    code = "from bridge.core.native import _C; print(_C.host_cache()[0])"
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "BRIDGE_HOST_CACHE": env},
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert int(out.stdout) == limit


def test_many_threads_allocating_and_freeing_keep_their_values() -> None:
    """Blocks move between threads through the cache (or around it, when one
    finds it taken): each thread's values stay its own."""
    errors: list[str] = []

    def work(k: int) -> None:
        for i in range(200):
            t = bridge.full((N // 4 + (i % 3),), float(k), dtype=bridge.float64)
            a = np.asarray(t)
            if not (a == k).all():
                errors.append(f"thread {k}, round {i}")
            del t, a

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert _C.host_cache()[1] <= 256 << 20


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX")
def test_a_forked_child_allocates_and_frees() -> None:
    """The child inherits the cache's blocks (copy-on-write) and uses them as its own."""
    t = bridge.empty(N, dtype=bridge.float64)
    del t
    code = """
import os, bridge, numpy as np
t = bridge.empty(100_000, dtype=bridge.float64); del t
pid = os.fork()
if pid == 0:
    x = bridge.full((100_000,), 3.0, dtype=bridge.float64)
    ok = bool((np.asarray(x) == 3.0).all())
    del x
    bridge.empty_cache()
    os._exit(0 if ok else 1)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"


def test_the_bound_is_read_once_per_process() -> None:
    """A change of os.environ after the first allocation changes nothing:
    the variable was read once (it was read again on every put while its
    value read as "no bound")."""
    code = ("import os, bridge\nfrom bridge.core.native import _C\n"
            "bridge.empty(1 << 20, dtype=bridge.uint8)\n"
            "os.environ['BRIDGE_HOST_CACHE'] = '1k'\n"
            "del_ = bridge.empty(1 << 20, dtype=bridge.uint8); del del_\n"
            "print(_C.host_cache()[0], _C.host_cache()[1] > 0)")  # fmt: skip
    for env in ("-1", "64m"):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "BRIDGE_HOST_CACHE": env},
                             capture_output=True, text=True, check=True)  # fmt: skip
        limit = 64 << 20 if env == "64m" else 256 << 20
        assert out.stdout.split() == [str(limit), "True"], (env, out.stdout)
