"""Tensors through multiprocessing (bridge.interop.processes): every storage
sent arrives as a view of the same shared memory under fork, spawn and
forkserver, whatever its size; nothing named in /dev/shm, so nothing leaks
after SIGKILL; file descriptors do not run out; hostile pickles are refused."""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import bridge
from bridge.core.owners import ARENA_SLICE_MAX

# Under make test-parallel a test forking this process runs on one thread.
FORKS = pytest.mark.thread_unsafe(
    reason="forks this process: a fork from one of several test threads copies the others mid-test, "
    "with any lock they hold"
)
METHODS = [pytest.param(m, marks=FORKS) if m == "fork" else m
           for m in ("fork", "spawn", "forkserver") if m in mp.get_all_start_methods()]  # fmt: skip
TIMEOUT = 60


# ---- child bodies (module level: spawn and forkserver import them)


def _write_first(q_in, q_out):
    t = q_in.get(timeout=TIMEOUT)
    t[0] = 42.0
    q_out.put((t.is_shared(), t.tolist()[:2]))


def _write_arg(t, q_out):
    t[1] = 7.0
    q_out.put(t.is_shared())


def _two_views(q_in, q_out):
    a, b = q_in.get(timeout=TIMEOUT)
    a[0] = -3.0
    q_out.put((b[0, 0].item(), a.untyped_storage() is b.untyped_storage()))


def _same_storage_twice(q_in, q_out):
    x = q_in.get(timeout=TIMEOUT)
    y = q_in.get(timeout=TIMEOUT)
    q_out.put((x.data_ptr() == y.data_ptr(), x.untyped_storage() is y.untyped_storage()))


def _double(t):
    return t * 2 if hasattr(t, "__mul__") else None


def _fill(t):
    t.fill_(5.0)
    return t.is_shared()


def _send_and_exit(q_in, q_out):
    q_out.put(bridge.zeros(100).share_memory_())


def _count_fds_after(q_in, q_out, n):
    before = len(os.listdir("/proc/self/fd"))
    got = [q_in.get(timeout=TIMEOUT) for _ in range(n)]
    after = len(os.listdir("/proc/self/fd"))
    q_out.put((after - before, sum(t[0].item() for t in got)))


def run_child(method, target, *args):
    ctx = mp.get_context(method)
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=target, args=(q_in, q_out, *args))
    p.start()
    return ctx, p, q_in, q_out


# ---- tests


@pytest.mark.parametrize("method", METHODS)
def test_a_shared_tensor_arrives_as_a_view_of_the_same_memory(method):
    t = bridge.zeros(1000).share_memory_()
    _, p, q_in, q_out = run_child(method, _write_first)
    q_in.put(t)
    assert q_out.get(timeout=TIMEOUT) == (True, [42.0, 0.0])
    p.join(TIMEOUT)
    assert t[0].item() == 42.0  # the child's write, seen here


@pytest.mark.parametrize("method", METHODS)
def test_process_args_and_pipes_carry_shared_tensors(method):
    ctx = mp.get_context(method)
    t = bridge.zeros(4).share_memory_()
    q_out = ctx.Queue()
    p = ctx.Process(target=_write_arg, args=(t, q_out))
    p.start()
    assert q_out.get(timeout=TIMEOUT) is True
    p.join(TIMEOUT)
    assert t[1].item() == 7.0
    a, b = ctx.Pipe()
    a.send(t)
    got = b.recv()  # mapped again in this process: the same memory
    got[2] = 9.0
    assert t[2].item() == 9.0


@pytest.mark.parametrize("method", METHODS)
def test_pool_maps_over_shared_tensors(method):
    ts = [bridge.zeros(8).share_memory_() for _ in range(3)]
    with mp.get_context(method).Pool(2) as pool:
        assert pool.map(_fill, ts, chunksize=1) == [True] * 3
    assert all(t.tolist() == [5.0] * 8 for t in ts)


def test_small_unshared_tensors_are_shared_too():
    t = bridge.arange(10.0)
    _, p, q_in, q_out = run_child("spawn", _write_first)
    q_in.put(t)
    assert q_out.get(timeout=TIMEOUT) == (True, [42.0, 1.0])
    p.join(TIMEOUT)
    assert t[0].item() == 42.0 and t.is_shared()  # the child's write, seen here


@pytest.mark.parametrize("method", METHODS)
def test_pool_writes_to_a_small_tensor_are_kept_as_with_torch(method):
    torch = pytest.importorskip("torch")
    with mp.get_context(method).Pool(1) as pool:
        ours, theirs = bridge.zeros(100), torch.zeros(100)
        assert pool.map(_fill, [ours]) == [True]
        pool.map(_fill, [theirs])
    assert theirs.tolist() == [5.0] * 100  # torch's meaning: sent means shared
    assert ours.tolist() == [5.0] * 100


def test_large_tensors_bridge_allocated_move_to_shared_memory_as_in_torch():
    t = bridge.zeros(ARENA_SLICE_MAX)  # 4x the arena slice limit in bytes
    ptr = t.data_ptr()
    _, p, q_in, q_out = run_child("spawn", _write_first)
    q_in.put(t)
    assert q_out.get(timeout=TIMEOUT)[0] is True
    p.join(TIMEOUT)
    assert t.is_shared() and t.data_ptr() != ptr and t[0].item() == 42.0


def test_large_foreign_tensors_are_copied_into_shared_memory():
    arr = np.zeros(ARENA_SLICE_MAX, dtype=np.float32)
    t = bridge.from_numpy(arr)
    _, p, q_in, q_out = run_child("spawn", _write_first)
    q_in.put(t)
    assert q_out.get(timeout=TIMEOUT) == (True, [42.0, 0.0])
    p.join(TIMEOUT)
    assert arr[0] == 0.0 and not t.is_shared()  # NumPy's memory cannot follow: a copy went


def test_views_of_one_shared_storage_stay_aliased():
    base = bridge.zeros(100).share_memory_()
    _, p, q_in, q_out = run_child("spawn", _two_views)
    q_in.put((base[:50], base.view(10, 10)))
    assert q_out.get(timeout=TIMEOUT) == (-3.0, True)
    p.join(TIMEOUT)


def test_the_receiver_maps_each_storage_once():
    t = bridge.zeros(64).share_memory_()
    _, p, q_in, q_out = run_child("spawn", _same_storage_twice)
    q_in.put(t)
    q_in.put(t[8:])
    assert q_out.get(timeout=TIMEOUT) == (False, True)  # one storage; the views differ
    p.join(TIMEOUT)


@pytest.mark.thread_unsafe(
    reason="counts the shared-memory arenas its 10,000 small tensors span: the arenas are "
    "the process's, and the other test threads' tensors carved from them meanwhile "
    "spread this thread's over more (more descriptors in the child)"
)
def test_ten_thousand_small_tensors_do_not_exhaust_file_descriptors():
    n = 10_000
    _, p, q_in, q_out = run_child("spawn", _count_fds_after, n)
    for i in range(n):
        q_in.put(bridge.full((4,), float(i)))
    grew, total = q_out.get(timeout=120)
    p.join(TIMEOUT)
    assert grew <= 2 and total == sum(range(n))


def test_many_shared_views_of_one_storage_cost_one_descriptor():
    base = bridge.zeros(10_000).share_memory_()
    n = 2_000
    _, p, q_in, q_out = run_child("spawn", _count_fds_after, n)
    for i in range(n):
        q_in.put(base[i:])
    grew, _ = q_out.get(timeout=120)
    p.join(TIMEOUT)
    assert grew <= 2


def test_shared_file_storages_travel_by_path(tmp_path):
    path = tmp_path / "data.bin"
    s = bridge.UntypedStorage.from_file(str(path), shared=True, nbytes=16)
    ft = bridge.zeros(0).set_(s, 0, (4,), (1,))
    assert ft.is_shared() and ft.untyped_storage().filename == str(path)
    _, p, q_in, q_out = run_child("spawn", _write_first)
    q_in.put(ft)
    assert q_out.get(timeout=TIMEOUT)[0] is True
    p.join(TIMEOUT)
    assert np.fromfile(path, dtype=np.float32)[0] == 42.0


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this system")
def test_nothing_named_in_dev_shm_even_after_sigkill_of_both_sides(tmp_path):
    before = {n for n in os.listdir("/dev/shm") if "bridge" in n}
    code = textwrap.dedent(
        """
        import multiprocessing as mp, os, signal, sys, time
        import bridge

        def child(q):
            t = bridge.zeros(1 << 20).share_memory_()
            q.put(t)
            time.sleep(60)

        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            q = ctx.Queue()
            p = ctx.Process(target=child, args=(q,))
            p.start()
            t = q.get(timeout=60)
            mine = bridge.zeros(1 << 20).share_memory_()
            print(p.pid, flush=True)
            os.kill(p.pid, signal.SIGKILL)
            p.join()
            assert t[0].item() == 0.0  # the killed child's memory stays valid here
            print("ready", flush=True)
            time.sleep(60)
        """
    )
    script = tmp_path / "sides.py"  # a file: spawn re-imports the parent's main module
    script.write_text(code)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        assert proc.stdout.readline().strip() == "ready"
        during = {n for n in os.listdir("/dev/shm") if "bridge" in n}
        assert during == before
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert {n for n in os.listdir("/dev/shm") if "bridge" in n} == before


def test_running_out_of_shared_memory_is_an_error_not_sigbus(monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError, match="not enough shared memory"):
        bridge.zeros(1 << 20).share_memory_()


def test_shared_memory_is_reserved_up_front():
    t = bridge.zeros(1 << 20).share_memory_()
    fd = t.untyped_storage().owner.fd
    blocks = os.fstat(fd).st_blocks * 512
    assert blocks >= t.nbytes  # the pages exist before any write


def test_a_sender_that_exits_too_early_is_a_clear_error():
    _, p, _q_in, q_out = run_child("spawn", _send_and_exit)
    p.join(TIMEOUT)  # gone before the descriptor was taken
    with pytest.raises(RuntimeError, match="sending process exited"):
        q_out.get(timeout=TIMEOUT)


# ---- what arrives keeps its meaning


def _report_readonly(q_in, q_out):
    t = q_in.get(timeout=TIMEOUT)
    try:
        t[0] = 1.0
        wrote = True
    except ValueError:
        wrote = False
    q_out.put((t.is_readonly, wrote, t[1].item()))


@pytest.mark.parametrize("n", [8, ARENA_SLICE_MAX])
def test_read_only_foreign_tensors_arrive_read_only(n):
    arr = np.arange(n, dtype=np.float32)
    arr.flags.writeable = False
    _, p, q_in, q_out = run_child("spawn", _report_readonly)
    q_in.put(bridge.from_numpy(arr))
    assert q_out.get(timeout=TIMEOUT) == (True, False, 1.0)
    p.join(TIMEOUT)


def _sum_all(q_in, q_out):
    got = q_in.get(timeout=TIMEOUT)
    q_out.put(sum(sum(t.tolist()) for t in got))


def test_file_storage_slices_travel_with_their_offset(tmp_path):
    path = tmp_path / "data.bin"
    np.arange(16, dtype=np.float32).tofile(path)
    s = bridge.UntypedStorage.from_file(str(path), shared=True)
    part = bridge.zeros(0).set_(s[32:48], 0, (4,), (1,))  # elements 8..11
    _, p, q_in, q_out = run_child("spawn", _write_first)
    q_in.put(part)
    assert q_out.get(timeout=TIMEOUT) == (True, [42.0, 9.0])
    p.join(TIMEOUT)
    assert np.fromfile(path, dtype=np.float32)[8] == 42.0 and path.stat().st_size == 64


def _keep_writing_while_sent(n_sends):
    """The sender writes 1, 2, 3, ... into its tensor while a Queue's feeder
    thread moves it into shared memory: no write may be lost and no read may
    see bytes never written (the move copies first, then switches)."""
    import threading

    ctx = mp.get_context("fork")
    q = ctx.Queue()
    bad = []
    for _ in range(n_sends):
        t = bridge.zeros(1 << 15)
        t.fill_(-1.0)
        done = threading.Event()

        def writer(t=t, done=done):
            k = 0
            while not done.is_set() or k < 200:
                k += 1
                t[0] = float(k)
                if t[0].item() != float(k) or t[5].item() != -1.0:
                    bad.append(k)
                    return

        w = threading.Thread(target=writer)
        w.start()
        q.put(t)
        q.get(timeout=TIMEOUT)
        done.set()
        w.join()
    return bad


@FORKS
def test_writes_made_while_a_queue_moves_the_tensor_are_kept():
    import sys as _sys

    old = _sys.getswitchinterval()
    _sys.setswitchinterval(1e-6)
    try:
        assert _keep_writing_while_sent(50) == []
    finally:
        _sys.setswitchinterval(old)


# ---- hostile pickles: nothing in them is trusted


class _FakeDupFd:
    def __init__(self, fd):
        self.fd = fd

    def detach(self):
        return self.fd


def _handle(fd):
    """What a hostile pickle can hand the rebuild: a block handle over any descriptor."""
    from bridge.interop.processes import _BlockFd

    return _BlockFd(_FakeDupFd(fd))


def _memfd(nbytes):
    fd = os.memfd_create("bridge-test")
    os.ftruncate(fd, nbytes)
    return fd


needs_memfd = pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs memfd_create")


@needs_memfd
def test_a_pickled_offset_past_the_block_is_refused():
    from bridge.interop.processes import _rebuild_shared

    with pytest.raises(ValueError, match="reaches past its block"):
        _rebuild_shared(_handle(_memfd(4096)), 4096, 4000, 200, False)


@needs_memfd
def test_a_pickled_block_size_larger_than_the_memory_is_refused():
    from bridge.interop.processes import _rebuild_shared

    fd = _memfd(4096)
    ino = os.fstat(fd).st_ino
    with pytest.raises(ValueError, match="its memory holds 4096"):
        _rebuild_shared(_handle(fd), 1 << 20, 0, 1 << 20, False)
    # the refused descriptor was closed, not leaked: its number names nothing, or
    # (another thread's, under make test-parallel: numbers are reused at once) another file
    try:
        assert os.fstat(fd).st_ino != ino
    except OSError:
        pass


@needs_memfd
def test_a_block_mapped_already_bounds_later_slices():
    from bridge.interop.processes import _rebuild_shared

    fd = _memfd(4096)
    first = _rebuild_shared(_handle(os.dup(fd)), 4096, 0, 64, False)
    os.ftruncate(fd, 1 << 20)  # the file grew; the mapping here did not
    with pytest.raises(ValueError, match="mapped here"):
        _rebuild_shared(_handle(fd), 1 << 20, 8192, 64, False)
    assert first.nbytes() == 64


def test_a_descriptor_of_minus_one_is_refused():
    from bridge.interop.processes import _rebuild_shared

    with pytest.raises(ValueError, match="valid file descriptor"):
        _rebuild_shared(_handle(-1), 64, 0, 64, False)


def test_a_descriptor_that_is_not_shared_memory_is_refused():
    from bridge.interop.processes import _rebuild_shared

    r, w = os.pipe()
    os.close(w)
    with pytest.raises(ValueError, match="not a shared-memory file"):
        _rebuild_shared(_handle(r), 64, 0, 64, False)


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        ((object(), 64, 0, 64, False), TypeError, "block's descriptor"),
        ((_FakeDupFd(0), 64, 0, 64, False), TypeError, "block's descriptor"),
        ((0, -1, 0, 0, False), ValueError, "block size"),
        ((0, 64, -8, 8, False), ValueError, "offset"),
        ((0, 64, 0, "64", False), ValueError, "size"),
    ],
)
def test_bad_shared_storage_arguments_are_refused(args, exc, match):
    from bridge.interop.processes import _BlockFd, _rebuild_shared

    if type(args[0]) is int:
        args = (_handle(args[0]), *args[1:])
    with pytest.raises(exc, match=match):
        _rebuild_shared(*args)
    with pytest.raises(TypeError, match="DupFd"):
        _rebuild_shared(_BlockFd(object()), 64, 0, 64, False)


def test_a_pickled_file_storage_never_creates_or_grows_the_file(tmp_path):
    from bridge.interop.processes import _rebuild_file

    path = tmp_path / "small.bin"
    path.write_bytes(b"x" * 16)
    with pytest.raises(ValueError, match="does not create or extend"):
        _rebuild_file(str(path), 0, 1 << 20, False)
    with pytest.raises(ValueError, match="does not create or extend"):
        _rebuild_file(str(path), 12, 8, False)
    assert path.stat().st_size == 16
    missing = tmp_path / "missing.bin"
    with pytest.raises(FileNotFoundError):
        _rebuild_file(str(missing), 0, 16, False)
    assert not missing.exists()
    with pytest.raises(TypeError, match="path as a str"):
        _rebuild_file(3, 0, 16, False)
    ok = _rebuild_file(str(path), 4, 8, True)
    assert ok.tolist() == [ord("x")] * 8 and ok.is_readonly


def test_a_pickled_tensor_over_something_else_than_a_storage_is_refused():
    from bridge.core.serialize import _rebuild_tensor

    with pytest.raises(TypeError, match="needs an UntypedStorage"):
        _rebuild_tensor(b"\x00" * 64, "float32", (4,), (1,), 0)
    with pytest.raises(TypeError, match="dtype by a str"):
        _rebuild_tensor(bridge.UntypedStorage(16), 7, (4,), (1,), 0)
    with pytest.raises(ValueError):
        _rebuild_tensor(bridge.UntypedStorage(16), "float32", (5,), (1,), 0)  # past the storage


def test_a_batch_of_small_tensors_sends_one_descriptor_per_arena(monkeypatch):
    import multiprocessing.reduction as reduction

    made = []
    real = reduction.DupFd

    def counting(fd):
        made.append(fd)
        return real(fd)

    monkeypatch.setattr(reduction, "DupFd", counting)
    batch = [bridge.full((25,), float(i)) for i in range(1000)]  # 100 bytes each: one or two arenas
    _, p, q_in, q_out = run_child("spawn", _sum_all)
    q_in.put(batch)
    assert q_out.get(timeout=TIMEOUT) == 25 * sum(range(1000))
    p.join(TIMEOUT)
    blocks = {t.untyped_storage().owner.fd for t in batch}
    sent = [fd for fd in made if fd in blocks]  # (the child's start sends its queues' pipes too)
    assert len(sent) == len(blocks) <= 2
