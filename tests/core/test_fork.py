"""Fork safety: every piece of process-wide state bridge keeps (the copy
pool's threads, locks and condition variables, the host block cache, the
shared-memory arena, the processes registry's lock, the CUDA driver state) is
in a defined state in a forked child, whatever other threads were doing at
the fork, and the child can do every kind of work several times.

Each case runs in a subprocess of its own with a timeout: a hang (the failure
these tests exist for) is a failed test, not a stuck suite.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import bridge

ROOT = pathlib.Path(bridge.__file__).resolve().parent.parent

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX's"),
    pytest.mark.thread_unsafe(reason="forks: a fork from one of several test threads copies them mid-test"),
]

# The work a child does, each kind several times: large copies on the pool's
# threads (a transpose and a plain one), allocations the cache serves, the
# cache asked and emptied, a storage moved to shared memory (the arena and
# the processes registry), a conversion into NumPy and one that copies.
CHILD_WORK = r'''
def child_work(rounds=3):
    import pickle, warnings
    import numpy as np
    import bridge
    from bridge.core.native import _C
    for r in range(rounds):
        t = bridge.arange(1 << 21, dtype=bridge.float32)
        m = t.reshape((1024, 2048))
        c = m.t().contiguous()
        assert c[5, 7].item() == m[7, 5].item()
        d = t.clone()
        assert d[12345].item() == 12345.0
        del t, m, c, d
        _C.host_cache()
        bridge.empty_cache()
        s = bridge.arange(100, dtype=bridge.int64)
        s.share_memory_()
        back = pickle.loads(pickle.dumps(s))
        assert back[99].item() == 99
        a = np.arange(1 << 20, dtype=np.float64)
        assert bridge.convert(a, np)[17] == 17.0
        ro = a.copy()
        ro.flags.writeable = False
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = bridge.convert({"x": ro, "y": [ro[:10]]}, "numpy", writable=True)
        assert out["x"].flags.writeable and out["y"][0][3] == 3.0


def fork_while(loops, times, child):
    # Fork `times` children, each running child() and exiting 0 when it
    # passed, while a thread runs each of `loops` until the last has exited.
    import os, threading
    stop = threading.Event()
    def forever(loop):
        while not stop.is_set():
            loop()
    threads = [threading.Thread(target=forever, args=(loop,)) for loop in loops]
    for th in threads:
        th.start()
    try:
        for i in range(times):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    child()
                    code = 0
                finally:
                    os._exit(code)
            _, status = os.waitpid(pid, 0)
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    finally:
        stop.set()
        for th in threads:
            th.join()
'''


def run(body: str, timeout: float = 120) -> str:
    """Run CHILD_WORK + body in a fresh interpreter; fail on a non-zero exit
    or a hang (the timeout)."""
    code = CHILD_WORK + textwrap.dedent(body)
    try:
        proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"hung (killed after {timeout} s): {e.stdout!r} {e.stderr!r}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_forked_pool_copies_again_and_again() -> None:
    """The parent's copy pool ran (its workers now sleep on its condition
    variables); every worker of a fork Pool then makes several large copies.
    The child's second copy hung before the pool's condition variables were
    made anew in the child."""
    out = run(r'''
        import multiprocessing as mp
        import bridge
        from bridge.core.native import _C
        _C.copy_threads(4)
        t = bridge.empty(16 << 20, dtype=bridge.uint8)
        for _ in range(3):
            t.as_strided((4096, 4096), (1, 4096)).contiguous()
        import time; time.sleep(0.01)  # the workers stop spinning and sleep on the condition variable
        def work(i):
            child_work(2)
            return i
        with mp.get_context("fork").Pool(2) as p:
            print(sorted(p.map(work, range(4))))
    ''')
    assert out.strip() == "[0, 1, 2, 3]"


def test_a_child_forked_mid_traffic_does_every_kind_of_work() -> None:
    """Threads copy on the pool, allocate and free cached blocks, ask and
    empty the cache and share storages while the main thread forks again and
    again; every child does all of that work itself, several times, and
    exits. (bridge.empty_cache() spun forever in a child forked while another
    thread held the cache's lock.)"""
    out = run(r'''
        import bridge
        from bridge.core.native import _C
        _C.copy_threads(3)
        big = bridge.empty(12 << 20, dtype=bridge.uint8)
        def copier():
            big.as_strided((3072, 4096), (1, 3072)).contiguous()
        def allocator():
            for n in (200_000, 300_000, 1 << 20):
                bridge.empty(n, dtype=bridge.uint8)
        def cache_owner():
            _C.host_cache()
            bridge.empty_cache()
        def sharer():
            bridge.zeros(64, dtype=bridge.uint8).share_memory_()
        fork_while((copier, allocator, cache_owner, cache_owner, sharer), 12, lambda: child_work(2))
        print("ok")
    ''', timeout=240)
    assert out.strip() == "ok"


def test_a_torch_dataloader_with_fork_workers_after_the_parent_copied() -> None:
    """The torch DataLoader pattern: the parent copied on the pool, then fork
    workers each convert and copy batch after batch."""
    pytest.importorskip("torch")
    out = run(r'''
        import numpy as np
        import torch
        import bridge
        from bridge.core.native import _C
        _C.copy_threads(4)
        big = bridge.empty(16 << 20, dtype=bridge.uint8)
        big.as_strided((4096, 4096), (1, 4096)).contiguous()

        class Data(torch.utils.data.Dataset):
            def __len__(self):
                return 8
            def __getitem__(self, i):
                m = bridge.full((1024, 1024), float(i), dtype=bridge.float64)
                return bridge.convert(m.t().contiguous(), torch)

        loader = torch.utils.data.DataLoader(Data(), batch_size=2, num_workers=2, multiprocessing_context="fork")
        sums = [float(b.sum()) for epoch in range(2) for b in loader]
        print(len(sums), sums[:4] == [1024.0 * 1024, 5 * 1024.0 * 1024, 9 * 1024.0 * 1024, 13 * 1024.0 * 1024])
    ''', timeout=240)
    assert out.split() == ["8", "True"]


def test_a_child_forked_while_another_thread_holds_the_cache_lock_empties_the_cache() -> None:
    """Threads without the GIL (as a DLPack deleter or the exchange API's
    allocator runs on another library's thread) take the host cache's lock
    most of the time, allocating and freeing blocks, while the main thread
    forks again and again; each child empties the cache, asks it and
    allocates. A child forked while the lock was held spun forever (GIL held)
    before fork took the lock first."""
    out = run(r'''
        import bridge
        from bridge.core.native import _C, _drivers
        def child():
            bridge.empty_cache()
            _C.host_cache()
            bridge.empty(300_000, dtype=bridge.uint8)
        fork_while((lambda: _drivers.churn_host_blocks(20),) * 2, 60, child)
        print("ok")
    ''', timeout=60)
    assert out.strip() == "ok"
