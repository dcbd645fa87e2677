"""bridge tensors through real Dask and Ray clusters (issue 11).

Each engine gets one local cluster per module, started by a fixture and
stopped at the end: Dask a two-worker ``LocalCluster`` of processes, Ray a
local instance of two CPUs. Starting them is the slow part (about 2 s for
Dask, 5 s for Ray); the tests themselves are short, so the file runs in
plain ``pytest`` (``make test``).

What is checked: tensors survive the trip (values, dtypes including
bfloat16, shapes, the strides of permuted views, the read-only flag), the
sending side does not copy (distributed's own serializer hands out a frame
over the tensor's memory; Ray's ``get`` views its object store), and Dask's
hooks (``sizeof``, ``tokenize``, ``da.from_array``) work in the workers as
well as here.
"""

from __future__ import annotations

import operator
import pickle
import shutil

import numpy as np
import pytest

import bridge

pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")
ray = pytest.importorskip("ray")
ml_dtypes = pytest.importorskip("ml_dtypes")

import dask.array as da  # noqa: E402
import dask.base  # noqa: E402
import dask.sizeof  # noqa: E402
from distributed.protocol import deserialize, serialize  # noqa: E402

BIG = 1 << 18  # float32 elements: 1 MiB, above every inline/small-object threshold


def address(buf) -> int:
    """The address of the first byte of a buffer (PickleBuffer, memoryview, bytes...)."""
    return np.frombuffer(memoryview(buf).cast("B"), dtype=np.uint8).__array_interface__["data"][0]


def values(t: bridge.Tensor) -> np.ndarray:
    """The tensor's values as a float64 (or bool/int) NumPy array, whatever its dtype."""
    a = np.asarray(t)
    return a.astype(np.float64) if a.dtype == ml_dtypes.bfloat16 else a


def assert_same_tensor(got, want: bridge.Tensor) -> None:
    assert isinstance(got, bridge.Tensor)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.stride() == want.stride()
    assert np.array_equal(values(got), values(want))


def samples() -> list[bridge.Tensor]:
    """Tensors of several dtypes and layouts (a permuted view among them)."""
    bf16 = np.arange(-8, 8, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(4, 4)
    return [
        bridge.arange(24, dtype=bridge.float32).reshape(2, 3, 4),
        bridge.arange(24, dtype=bridge.float64).reshape(2, 3, 4).permute(2, 0, 1),
        bridge.arange(10, dtype=bridge.int64),
        bridge.from_numpy(np.array([True, False, True])),
        bridge.from_numpy(bf16),
        bridge.from_numpy(bf16).t(),
        bridge.arange(BIG, dtype=bridge.float32),
        bridge.zeros(0, 3),
        bridge.tensor(2.5),
    ]


def readonly_tensor(n: int = 16) -> bridge.Tensor:
    a = np.arange(n, dtype=np.float32)
    a.flags.writeable = False
    t = bridge.from_numpy(a)
    assert t.is_readonly
    return t


# ---------------------------------------------------------------- functions run in workers
# (module-level: the workers import this module, as they import any other)


def describe(t: bridge.Tensor) -> tuple:
    return type(t).__name__, t.dtype.name, t.shape, t.stride(), t.is_readonly, values(t).tolist()


def doubled(t: bridge.Tensor) -> bridge.Tensor:
    out = t.clone()
    a = np.asarray(out)
    a *= 2
    return out


def make_on_worker(n: int) -> bridge.Tensor:
    return bridge.arange(n, dtype=bridge.float32)


def consume_on_worker(t: bridge.Tensor) -> tuple[str, float, float]:
    return distributed.get_worker().address, t[1].item(), t[-1].item()


def try_write(t: bridge.Tensor) -> str:
    try:
        t[0] = 1.0
    except ValueError as e:
        return str(e)
    return "written"


# ------------------------------------------------------------------------------------ Dask


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    c = distributed.Client(cluster)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


@pytest.fixture(scope="module")
def workers(client) -> list[str]:
    addrs = sorted(client.scheduler_info()["workers"])
    assert len(addrs) == 2
    return addrs


def test_dask_scatter_gather_round_trip(client):
    ts = samples()
    futures = client.scatter(ts, hash=False)
    back = client.gather(futures)
    for got, want in zip(back, ts):
        assert_same_tensor(got, want)
        assert not got.is_readonly
        if want.numel():
            assert got.data_ptr() != want.data_ptr()  # it did travel


def test_dask_submit_sees_the_same_tensor(client):
    for t in samples():
        assert client.submit(describe, t).result() == describe(t)
        got = client.submit(doubled, t).result() if t.dtype != bridge.bool else None
        if got is not None:
            assert_same_tensor(got, doubled(t))


def test_dask_permuted_strides_survive(client):
    t = bridge.arange(2 * 3 * 4, dtype=bridge.float32).reshape(2, 3, 4).permute(1, 2, 0)
    assert not t.is_contiguous()
    (f,) = client.scatter([t], hash=False)  # (a key of its own, as below)
    name, dtype, shape, strides, _, vals = client.submit(describe, f).result()
    assert (name, dtype, shape, strides) == ("Tensor", "float32", (3, 4, 2), (4, 1, 12))
    assert vals == values(t).tolist()


def test_dask_read_only_flag_travels(client):
    ro, rw = readonly_tensor(), bridge.arange(16, dtype=bridge.float32)
    # pure=False: equal values tokenize equal whatever the flag (as NumPy's
    # arrays do), so these tasks would otherwise share one key and one result
    run = lambda f, x: client.submit(f, x, pure=False).result()  # noqa: E731
    assert run(operator.attrgetter("is_readonly"), ro) is True
    assert run(operator.attrgetter("is_readonly"), rw) is False
    assert "read-only" in run(try_write, ro)
    assert run(try_write, rw) == "written"
    # hash=False for the same reason: scatter names data by its token
    assert client.gather(client.scatter(ro, hash=False)).is_readonly
    assert not client.gather(client.scatter(rw, hash=False)).is_readonly


def test_dask_serializer_sends_the_tensors_own_memory():
    """distributed pickles at protocol 5 with a buffer callback: the frame that
    goes on the wire is a view of the tensor's memory, not a copy of it."""
    t = bridge.arange(BIG, dtype=bridge.float32)
    header, frames = serialize(t)
    assert header["serializer"] == "pickle"
    (frame,) = [f for f in frames if memoryview(f).nbytes == t.nbytes]
    assert address(frame) == t.data_ptr()
    assert sum(memoryview(f).nbytes for f in frames) < t.nbytes + 1024  # no second copy in band

    # distributed.protocol.pickle.dumps directly, with the callback it uses itself
    buffers: list[pickle.PickleBuffer] = []
    distributed.protocol.pickle.dumps(t, buffer_callback=buffers.append)
    assert [address(b) for b in buffers] == [t.data_ptr()]

    # a permuted tensor ships its whole (contiguous) storage, geometry in band
    p = t.reshape(512, 512).t()
    _, frames = serialize(p)
    assert address(frames[-1]) == p.untyped_storage().data_ptr()

    # a small view of a big tensor ships its storage (views keep sharing), still
    # without a copy; its clone() ships just its own bytes
    v = t[1000:1010]
    _, frames = serialize(v)
    assert memoryview(frames[-1]).nbytes == t.nbytes and address(frames[-1]) == t.data_ptr()
    c = v.clone()
    _, frames = serialize(c)
    assert memoryview(frames[-1]).nbytes == c.nbytes and address(frames[-1]) == c.data_ptr()


def test_dask_deserializer_views_the_received_frames():
    """The receiving side does not copy either: the tensor views the frame."""
    t = bridge.arange(BIG, dtype=bridge.float32).reshape(512, 512).t()
    header, frames = serialize(t)
    received = [bytearray(memoryview(f)) for f in frames]  # as the comm hands them over
    out = deserialize(header, received)
    assert_same_tensor(out, t)
    assert out.untyped_storage().data_ptr() == address(received[-1])
    assert not out.is_readonly


def test_dask_sizeof_is_nbytes(client):
    t = bridge.arange(BIG, dtype=bridge.float32)
    for x in (t, t[:100], t.reshape(512, 512).t(), bridge.zeros(0), bridge.tensor(1.0)):
        assert dask.sizeof.sizeof(x) == x.nbytes
    assert dask.sizeof.sizeof(t.untyped_storage()) == t.nbytes
    # the entry point is loaded in the workers too (they report sizes to the scheduler)
    assert client.submit(dask.sizeof.sizeof, t).result() == t.nbytes
    # hash=False: a key of its own, so that a run of this test on another
    # thread (make test-parallel), scattering equal data under the same token,
    # cannot release the key while this one reads it
    (f,) = client.scatter([t], hash=False)
    info = client.run_on_scheduler(
        lambda dask_scheduler, key=f.key: dask_scheduler.tasks[key].nbytes
    )
    assert info == t.nbytes


def test_dask_tokenize_is_by_value():
    tok = dask.base.tokenize
    a = bridge.arange(100, dtype=bridge.float32)
    assert tok(a) == tok(a) == tok(bridge.arange(100, dtype=bridge.float32))
    assert tok(a) == tok(bridge.from_numpy(np.arange(100, dtype=np.float32)))
    b = a.clone()
    b[3] = -1.0
    assert tok(b) != tok(a)
    assert tok(a) != tok(bridge.arange(100, dtype=bridge.float64))
    assert tok(a) != tok(a.reshape(10, 10))
    assert tok(a.reshape(10, 10)) != tok(a.reshape(20, 5))
    assert tok(a[:50]) != tok(a[50:]) and tok(a[:50]) == tok(a.clone()[:50])
    bf = np.arange(8, dtype=np.float32)
    assert tok(bridge.from_numpy(bf.astype(ml_dtypes.bfloat16))) != tok(bridge.from_numpy(bf))


def test_dask_tokenize_is_stable_across_processes(client):
    for t in samples():
        assert client.submit(dask.base.tokenize, t).result() == dask.base.tokenize(t)


def test_dask_array_from_tensor(client):
    t = bridge.arange(64 * 48, dtype=bridge.float64).reshape(64, 48)
    a = np.arange(64 * 48, dtype=np.float64).reshape(64, 48)
    x = da.from_array(t, chunks=(16, 12))
    assert np.dtype(x.dtype) == np.float64 and x.shape == (64, 48) and x.npartitions == 16
    assert x.sum().compute() == a.sum()  # on the cluster: `client` is the default scheduler
    np.testing.assert_allclose(x.mean(axis=0).compute(), a.mean(axis=0))
    np.testing.assert_allclose(x.T[::2].sum(axis=1).compute(), a.T[::2].sum(axis=1))


def test_dask_worker_to_worker(client, workers):
    wa, wb = workers
    made = client.submit(make_on_worker, BIG, workers=[wa], allow_other_workers=False, pure=False)
    used = client.submit(consume_on_worker, made, workers=[wb], allow_other_workers=False)
    where, second, last = used.result()
    assert where == wb and (second, last) == (1.0, float(BIG - 1))
    assert set(client.who_has([made])[made.key]) == {wa, wb}  # B fetched it from A
    back = made.result()
    assert_same_tensor(back, bridge.arange(BIG, dtype=bridge.float32))


# ------------------------------------------------------------------------------------- Ray

RAY_STORE = 512 << 20


@pytest.fixture(scope="module")
def ray_session():
    with pytest.MonkeyPatch.context() as mp:
        if shutil.disk_usage("/dev/shm").free < RAY_STORE:
            # Ray falls back to /tmp for a store this small anyway; this only
            # silences its refusal for stores larger than its threshold.
            mp.setenv("RAY_OBJECT_STORE_ALLOW_SLOW_STORAGE", "1")
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=RAY_STORE,
                 ignore_reinit_error=True, log_to_driver=False)  # fmt: skip
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def remote_fns(ray_session):
    # Ray's workers do not have tests/ on sys.path: send this module's
    # functions by value instead of by import.
    import sys

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    return (ray.remote(describe), ray.remote(doubled), ray.remote(make_on_worker),
            ray.remote(try_write))  # fmt: skip


def test_ray_put_get_round_trip(ray_session):
    for t in samples():
        assert_same_tensor(ray.get(ray.put(t)), t)


def test_ray_get_is_read_only_over_the_store(ray_session):
    t = bridge.arange(BIG, dtype=bridge.float32)
    ref = ray.put(t)
    got, again = ray.get(ref), ray.get(ref)
    assert got.is_readonly and again.is_readonly
    assert got.data_ptr() == again.data_ptr() != t.data_ptr()  # both view the store
    assert got.data_ptr() % 64 == 0
    with pytest.raises(ValueError, match="read-only"):
        got[0] = 1.0
    with pytest.raises(ValueError, match="read-only"):
        got.fill_(0.0)
    mine = got.clone()
    assert not mine.is_readonly
    mine[0] = -1.0
    assert mine[0].item() == -1.0 and got[0].item() == 0.0
    assert np.asarray(got).flags.writeable is False


def test_ray_tasks_take_and_return_tensors(ray_session, remote_fns):
    describe_r, doubled_r, make_r, try_write_r = remote_fns
    for t in samples():
        assert ray.get(describe_r.remote(t))[:4] == describe(t)[:4]
        if t.dtype != bridge.bool:
            assert_same_tensor(ray.get(doubled_r.remote(t)), doubled(t))
    made = ray.get(make_r.remote(BIG))
    assert_same_tensor(made, bridge.arange(BIG, dtype=bridge.float32))
    assert made.is_readonly  # returned through the object store
    # a large argument reaches the task as a read-only view of the store
    assert "read-only" in ray.get(try_write_r.remote(bridge.arange(BIG, dtype=bridge.float32)))
    ref = ray.put(bridge.arange(BIG, dtype=bridge.float32))
    assert_same_tensor(ray.get(doubled_r.remote(ref)), doubled(ray.get(ref)))
