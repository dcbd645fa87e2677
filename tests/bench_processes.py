"""Across processes and machines (issue 11): the rows of ``make bench`` that
start processes, side by side with NumPy and torch in one run.

Imported by ``tests/bench.py`` (``-k process`` runs only these); each row is a
dict of the same shape as bench.py's rows. Timings are the best of
``repeat`` trips, each trip timed on its own (a trip is too slow for timeit's
loops, and a cluster is too slow to start per trip):

- a 1 GiB float32 tensor through a ``multiprocessing.Queue`` to a spawned
  child that writes one element and acks: bridge and torch share the memory
  (``share_memory_()``), NumPy pickles the bytes (it has no shared route);
- 1,000 new 400-byte tensors through a Queue, each put on its own (bridge
  and torch share each one: bridge from arenas, one descriptor per message;
  NumPy pickles the bytes), per tensor;
- a pickle-5 round trip (``dumps`` with a ``buffer_callback``, ``loads`` with
  the buffers) of 1 GiB: bytes copied are counted from the addresses;
- Dask worker-to-worker: a 256 MiB tensor made on worker A, used by a task
  pinned to worker B (B fetches it over the comm);
- ``ray.get`` of a 1 GiB object already in the store.
"""

from __future__ import annotations

import multiprocessing as mp
import pickle
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import bridge

try:
    import torch
except ImportError:
    torch = None

GIB = 1 << 30


def _timed(trip: Callable[[], Any], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        trip()
        best = min(best, time.perf_counter() - t0)
    return best


def _row(name: str, b: float | None, n: float | None, th: float | None,
         status: str | None) -> dict[str, Any]:  # fmt: skip
    return {
        "name": name, "bridge_s": b, "numpy_s": n, "torch_s": th, "tvm_s": None,
        "bridge/numpy": b / n if b and n else None, "bridge/torch": b / th if b and th else None,
        "bridge/tvm": None, "target": None, "target_vs": None, "status": status,
    }  # fmt: skip


# ------------------------------------------------------- multiprocessing.Queue


def _child(inbox: Any, acks: Any) -> None:
    """Takes tensors until None; writes element 0 of each and acks."""
    while True:
        x = inbox.get()
        if x is None:
            return
        x[0] = 1
        acks.put(int(x[0]))
        del x


def _queue_trip_time(x: Any, ctx: Any, repeat: int, torch_queues: bool) -> float:
    if torch_queues:
        import torch.multiprocessing as tmp

        ctx = tmp.get_context("spawn")  # registers torch's reductions in the child
    inbox, acks = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_child, args=(inbox, acks))
    child.start()
    try:
        inbox.put(x[:1].clone() if hasattr(x, "clone") else x[:1].copy())  # warm: imports done
        acks.get(timeout=120)

        def trip() -> None:
            inbox.put(x)
            acks.get(timeout=120)

        return _timed(trip, repeat)
    finally:
        inbox.put(None)
        child.join(60)


def queue_row(repeat: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    n = GIB // 4
    b = bridge.zeros(n, dtype=bridge.float32).share_memory_()
    tb = _queue_trip_time(b, ctx, repeat, False)
    seen = bool(b[0].item() == 1)
    del b
    a = np.zeros(n, dtype=np.float32)
    tn = _queue_trip_time(a, ctx, max(1, repeat // 3), False)  # by value: slow, fewer trips
    del a
    tt = None
    if torch is not None:
        x = torch.zeros(n, dtype=torch.float32).share_memory_()
        tt = _queue_trip_time(x, ctx, repeat, True)
        del x
    ok = seen and tt is not None and tb <= tt and tb < 0.050
    status = (f"{'ok' if ok else 'MISS'} (br/torch <= 1.00x and < 50 ms; "
              f"child's write {'seen' if seen else 'NOT seen'} by the parent)")  # fmt: skip
    return _row("mp.Queue 1 GiB to a spawned child, write + ack (numpy: by value)",
                tb, tn, tt, status)


def _many_child(inbox: Any, acks: Any) -> None:
    """Takes batches: a count, then that many tensors; writes each and acks once."""
    while True:
        n = inbox.get()
        if n is None:
            return
        for _ in range(n):
            x = inbox.get()
            x[0] = 1
            del x
        acks.put(n)


def _many_trip_time(make: Callable[[], Any], ctx: Any, n: int, repeat: int) -> float:
    inbox, acks = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_many_child, args=(inbox, acks))
    child.start()
    try:
        inbox.put(1)
        inbox.put(make())
        acks.get(timeout=120)

        def trip() -> None:
            inbox.put(n)
            for _ in range(n):
                inbox.put(make())  # a fresh tensor, not shared yet: sent means shared
            acks.get(timeout=120)

        return _timed(trip, repeat) / n
    finally:
        inbox.put(None)
        child.join(60)


def small_queue_row(repeat: int) -> dict[str, Any]:
    n = 1000
    tb = _many_trip_time(lambda: bridge.zeros(100), mp.get_context("spawn"), n, repeat)
    tn = _many_trip_time(lambda: np.zeros(100, dtype=np.float32), mp.get_context("spawn"), n, repeat)
    tt = None
    if torch is not None:
        import torch.multiprocessing as tmp

        tt = _many_trip_time(lambda: torch.zeros(100), tmp.get_context("spawn"), n, repeat)
    ok = tt is not None and tb <= tt
    status = f"{'ok' if ok else 'MISS'} (per tensor; br/torch <= 1.00x; numpy: by value, not shared)"
    return _row("mp.Queue 1,000 new 400-byte tensors to a spawned child (each shared)", tb, tn, tt, status)


# ------------------------------------------------------------------- pickle 5


def pickle_row(repeat: int) -> dict[str, Any]:
    n = GIB // 4
    b = bridge.ones(n, dtype=bridge.float32)
    a = np.ones(n, dtype=np.float32)

    def round_trip(x: Any) -> tuple[Any, int]:
        bufs: list[pickle.PickleBuffer] = []
        data = pickle.dumps(x, protocol=5, buffer_callback=bufs.append)
        return pickle.loads(data, buffers=bufs), len(data)

    got, inband = round_trip(b)
    copied = 0 if got.data_ptr() == b.data_ptr() else b.nbytes
    copied += max(0, inband - 4096)  # anything big in band is a copy
    tb = _timed(lambda: round_trip(b), repeat)
    tn = _timed(lambda: round_trip(a), repeat)
    tt = None
    if torch is not None:
        x = torch.ones(n, dtype=torch.float32)
        tt = _timed(lambda: round_trip(x), max(1, repeat // 3))  # torch copies in band: slow
    status = f"{'ok' if copied == 0 else 'MISS'} (bytes copied: {copied}, in band: {inband} B)"
    return _row("pickle-5 round trip of 1 GiB (out-of-band buffers)", tb, tn, tt, status)


# ----------------------------------------------------------------------- Dask


def _make_bridge(n: int) -> Any:
    return bridge.ones(n, dtype=bridge.float32)


def _make_numpy(n: int) -> Any:
    return np.ones(n, dtype=np.float32)


def _make_torch(n: int) -> Any:
    import torch as th

    return th.ones(n, dtype=th.float32)


def _use(x: Any) -> float:
    return float(x[-1])


def dask_row(repeat: int) -> dict[str, Any] | None:
    try:
        import distributed
    except ImportError:
        return None
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/
    n = (256 << 20) // 4
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, memory_limit="6GiB")  # fmt: skip
    client = distributed.Client(cluster)
    try:
        wa, wb = sorted(client.scheduler_info()["workers"])

        def transfer_time(make: Callable[[int], Any]) -> float:
            best = float("inf")
            for _ in range(repeat):
                made = client.submit(make, n, workers=[wa], allow_other_workers=False, pure=False)
                distributed.wait(made)
                t0 = time.perf_counter()
                used = client.submit(_use, made, workers=[wb], allow_other_workers=False,
                                     pure=False)  # fmt: skip
                assert used.result() == 1.0
                best = min(best, time.perf_counter() - t0)
                del made, used
            return best

        tb = transfer_time(_make_bridge)
        tn = transfer_time(_make_numpy)
        tt = transfer_time(_make_torch) if torch is not None else None
    finally:
        client.close()
        cluster.close()
    status = f"{'ok' if tb <= 1.2 * tn else 'MISS'} (br/numpy <= 1.20x)"
    return _row("Dask worker-to-worker 256 MiB (task on B takes A's result)", tb, tn, tt, status)


# ------------------------------------------------------------------------ Ray


def ray_row(repeat: int) -> dict[str, Any] | None:
    try:
        import ray
    except ImportError:
        return None
    n = GIB // 4
    ray.init(num_cpus=1, include_dashboard=False, object_store_memory=4 * GIB,
             log_to_driver=False, ignore_reinit_error=True, logging_level="ERROR")  # fmt: skip
    try:
        def get_time(x: Any, reps: int) -> float:
            ref = ray.put(x)
            ray.get(ref)  # the first get maps the store
            return _timed(lambda: ray.get(ref), reps)

        b = bridge.ones(n, dtype=bridge.float32)
        tb = get_time(b, repeat * 4)
        ref = ray.put(b)
        g1, g2 = ray.get(ref), ray.get(ref)
        same = g1.data_ptr() == g2.data_ptr() and g1.is_readonly
        del g1, g2, ref, b
        tn = get_time(np.ones(n, dtype=np.float32), repeat * 4)
        tt = get_time(torch.ones(n, dtype=torch.float32), max(1, repeat // 3)) if torch else None
    finally:
        ray.shutdown()
    ok = tb < 0.005 and same
    status = (f"{'ok' if ok else 'MISS'} (< 5 ms; read-only view of the store, same address "
              f"on repeated gets: {'yes' if same else 'NO'})")  # fmt: skip
    return _row("ray.get of 1 GiB already in the object store", tb, tn, tt, status)


def process_rows(repeat: int) -> Iterator[dict[str, Any]]:
    """The rows above, one at a time (each takes seconds); engines not installed are left out."""
    for make in (queue_row, small_queue_row, pickle_row, dask_row, ray_row):
        row = make(repeat)
        if row is not None:
            yield row
