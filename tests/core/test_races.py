"""Storages changed while other threads read them (issue 19): a span taken from
a storage is computed and checked in one C step against the block it reads,
and a storage switches blocks only once the new block holds its bytes.

Each race runs in a child process with real threads (a mutator and readers)
for a fixed time and a tiny switch interval, so that a crash is a failed test
rather than a dead test run; under ``make test-sanitize`` the child inherits
the sanitizer build, so a wild read is a report there too."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SECONDS = 1.5

PRELUDE = f"""
import pickle, sys, threading, time
import bridge
from bridge import UntypedStorage
sys.setswitchinterval(1e-6)
SECONDS = {SECONDS}
errors = []

def race(mutate, *readers):
    stop = time.monotonic() + SECONDS
    def loop(fn):
        try:
            while time.monotonic() < stop:
                fn()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=loop, args=(f,)) for f in (mutate, *readers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        print("\\n".join(sorted(set(errors))[:5]))
        sys.exit(3)
    print("ok")
"""


def run_race(body: str) -> None:
    code = PRELUDE + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (
        f"exit {proc.returncode}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-2000:]}"
    )


def test_resize_copies_before_it_switches_blocks():
    # A fresh 1 MiB block is zero pages: a reader that saw the new block before
    # its bytes were copied would read zeros instead of sevens.
    run_race("""
        N = 1 << 20
        s = UntypedStorage(N).fill_(7)
        t = bridge.zeros(0, dtype=bridge.uint8).set_(s)
        def mutate():
            s.resize_(N)  # same size, a new block each time
        def read_storage():
            head = bytes(memoryview(s)[:64])
            if head != b"\\x07" * 64:
                raise AssertionError(f"read bytes never written: {head[:8]!r}")
        def read_tensor():
            v = t[:16].tolist()
            if v != [7] * 16:
                raise AssertionError(f"tensor read bytes never written: {v}")
        race(mutate, read_storage, read_tensor)
    """)


def test_share_memory_copies_before_it_switches_blocks():
    run_race("""
        N = 1 << 17
        box = [UntypedStorage(N).fill_(7)]
        def mutate():
            s = UntypedStorage(N).fill_(7)
            box[0] = s
            s.share_memory_()
        def read():
            s = box[0]
            head = s[0:64].tolist()
            if head != [7] * 64:
                raise AssertionError(f"read bytes never written: {head[:8]}")
        race(mutate, read)
    """)


def test_pickling_a_tensor_while_another_thread_repoints_it():
    # set_() between reading the storage and reading the geometry used to pair
    # the small storage with the big view and pickle bytes past its block.
    run_race("""
        big = UntypedStorage(1 << 20).fill_(1)
        small = UntypedStorage(16).fill_(2)
        t = bridge.zeros(0, dtype=bridge.uint8)
        flip = [0]
        def mutate():
            flip[0] ^= 1
            if flip[0]:
                t.set_(big, 0, (1 << 20,), (1,))
            else:
                t.set_(small, 0, (16,), (1,))
        def pickle_it():
            u = pickle.loads(pickle.dumps(t, protocol=5))
            n = u.numel()
            if (n, u.untyped_storage().nbytes()) not in ((1 << 20, 1 << 20), (16, 16), (0, 0)):
                raise AssertionError(f"a view of {n} elements over {u.untyped_storage().nbytes()} bytes")
            if n and set(u[:8].tolist()) != {1 if n > 16 else 2}:
                raise AssertionError("values of the other storage")
        race(mutate, pickle_it)
    """)


def test_slicing_a_storage_while_another_thread_shrinks_it():
    run_race("""
        BIG = 1 << 20
        s = UntypedStorage(BIG).fill_(3)
        sizes = {}  # block address -> its size (big blocks are mapped, small ones on the heap)
        flip = [0]
        def mutate():
            flip[0] ^= 1
            s.resize_(BIG if flip[0] else 64)
            sizes[s.data_ptr()] = s.nbytes()
        def slice_it():
            part = s[0:BIG]
            n = part.nbytes()
            if n not in (BIG, 64):
                raise AssertionError(f"a slice of {n} bytes")
            block = sizes.get(part.data_ptr())
            if block is not None and n > block:
                raise AssertionError(f"a slice of {n} bytes over a block of {block}")
            bytes(memoryview(part)[n - 8:])  # the last bytes the slice claims
        def index_it():
            try:
                s[BIG - 1]
            except IndexError:
                pass  # shrunk: out of range, never a read past the block
        race(mutate, slice_it, index_it)
    """)


def test_deepcopy_and_tokenize_while_another_thread_repoints():
    pytest.importorskip("dask")
    run_race("""
        import copy
        from dask.base import tokenize
        big = UntypedStorage(1 << 16).fill_(1)
        small = UntypedStorage(8).fill_(2)
        t = bridge.zeros(0, dtype=bridge.uint8)
        flip = [0]
        def mutate():
            flip[0] ^= 1
            t.set_(big) if flip[0] else t.set_(small)
        def deep():
            u = copy.deepcopy(t)
            if u.numel() > u.untyped_storage().nbytes():
                raise AssertionError("deepcopy paired a geometry with the wrong storage")
        def token():
            tokenize(t)
        race(mutate, deep, token)
    """)
