"""``bridge.convert`` for the units people move (bridge/crossing/units.py and
the C batch loop in cdefs/crossing/convert.c): batches, tables, streams, and
``dtype=``/``device=``/``contiguous=``/``writable=`` on the way. Zero-copy is
proven by address through each library's own API; copies by the plan's named
fixes and the CopyWarning."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np
import pytest
import torch
from convert_helpers import spy

import bridge
from bridge.crossing.convert import plan

pa = pytest.importorskip("pyarrow")


def _ro(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    a.flags.writeable = False
    return a


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """No CopyWarning may be raised inside (an error if one is)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", bridge.CopyWarning)
        yield


class Pair(NamedTuple):
    image: Any
    label: Any


@dataclasses.dataclass(frozen=True)
class Sample:
    x: Any
    meta: Any
    extra: Any = dataclasses.field(default=None, init=False)


# ------------------------------------------------------------------ batches


def test_a_nested_batch_keeps_its_structure_and_shares_every_array() -> None:
    a, b, c = np.ones((2, 3), np.float32), np.arange(4), np.zeros(5, np.int16)
    batch = {"x": a, "pair": Pair(b, "cat"), "more": [c, 3, None, (a.T,)], "sample": Sample(c, {"id": 7})}
    with warnings.catch_warnings():
        warnings.simplefilter("error", bridge.CopyWarning)
        out = bridge.convert(batch, torch)
    assert type(out) is dict and list(out) == ["x", "pair", "more", "sample"]
    assert isinstance(out["x"], torch.Tensor) and out["x"].data_ptr() == a.ctypes.data
    assert type(out["pair"]) is Pair and out["pair"].label == "cat" and out["pair"].image.data_ptr() == b.ctypes.data
    more = out["more"]
    assert type(more) is list and more[1:3] == [3, None] and type(more[3]) is tuple
    assert more[0].data_ptr() == c.ctypes.data and more[3][0].stride() == (1, 3)  # the transpose's view
    assert type(out["sample"]) is Sample and out["sample"].meta == {"id": 7}
    assert out["sample"].x.data_ptr() == c.ctypes.data
    a[0, 0] = 5
    assert out["x"][0, 0] == 5  # shared, not copied


def test_a_batch_of_plain_arrays_takes_the_fast_path_once() -> None:
    d = {f"k{i}": np.full(3, i, np.float32) for i in range(8)}
    bridge.convert(d, torch)
    with spy() as calls:
        out = bridge.convert(d, torch)
        listed = bridge.convert(list(d.values()), np)
        nested = bridge.convert((d, [d["k0"]], "label"), torch)
    assert calls == []
    assert [t.data_ptr() for t in out.values()] == [a.ctypes.data for a in d.values()]
    assert [x.ctypes.data for x in listed] == [a.ctypes.data for a in d.values()]
    assert nested[2] == "label" and nested[1][0].data_ptr() == d["k0"].ctypes.data


def test_a_leaf_the_engine_leaves_makes_the_batch_the_general_paths() -> None:
    d = {"ok": np.ones(3), "bits": pa.array([True, False, True])}  # (bit-packed: unpacked by Python)
    with spy() as calls, pytest.warns(bridge.CopyWarning):
        out = bridge.convert(d, torch)
    assert len(calls) == 1 and calls[0] is d  # the whole batch, once
    assert out["ok"].data_ptr() == d["ok"].ctypes.data and out["bits"].tolist() == [True, False, True]


def test_a_leaf_with_a_fix_is_fixed_on_the_batchs_one_traversal() -> None:
    d = {"ok": np.ones(3), "flipped": np.arange(6.0)[::-1]}
    with spy() as calls, pytest.warns(bridge.CopyWarning) as caught:
        out = bridge.convert(d, torch)
    assert calls == []  # the engine made the copy; Python only worded the warning
    assert len(caught) == 1
    w = caught[0].message
    assert isinstance(w, bridge.CopyWarning) and list(w.leaves) == ["['flipped']"] and w.kind == "layout"
    assert "copied 1 of 2 arrays: ['flipped']: torch cannot hold negative strides" in str(w)
    with pytest.warns(bridge.CopyWarning) as again:
        bridge.convert(d, torch)
    assert again[0].filename == __file__  # at the caller's line
    assert out["ok"].data_ptr() == d["ok"].ctypes.data and out["flipped"].tolist() == d["flipped"].tolist()


def test_overlapping_leaves_copied_for_one_reason_still_share_memory() -> None:
    base = _ro(np.arange(12.0).reshape(3, 4))
    batch = {"inputs": base[:, :-1], "targets": base[:, 1:], "all": base}
    with pytest.warns(bridge.CopyWarning, match="copied 3 of 3 arrays") as caught:
        out = bridge.convert(batch, torch)
    assert {f.kind for f in caught[0].message.fixes if f.copies} == {"read-only"}  # type: ignore[union-attr]
    assert out["all"].data_ptr() != base.ctypes.data  # torch writes: a copy ...
    assert out["inputs"].data_ptr() == out["all"].data_ptr()  # ... one copy, which they all view
    assert out["targets"].data_ptr() == out["all"].data_ptr() + 8
    out["all"][0, 1] = 100.0
    assert out["inputs"][0, 1] == 100.0 and out["targets"][0, 0] == 100.0
    assert base[0, 1] == 1.0


def test_the_same_array_twice_is_one_result() -> None:
    a = _ro(np.arange(3.0))
    with pytest.warns(bridge.CopyWarning):
        out = bridge.convert({"a": a, "again": a, "b": [a]}, torch)
    assert out["a"] is out["again"] is out["b"][0]


def test_copy_false_and_copy_true_apply_to_every_leaf() -> None:
    base = np.arange(6.0)
    with pytest.raises(BufferError, match="copy=False"):
        bridge.convert({"x": base, "y": base[::-1]}, torch, copy=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", bridge.CopyWarning)
        out = bridge.convert({"x": base, "y": base[2:]}, torch, copy=True)
    assert out["x"].data_ptr() != base.ctypes.data
    assert out["y"].data_ptr() == out["x"].data_ptr() + 16  # copied as one region: still one memory


def test_containers_keep_their_types() -> None:
    a = np.ones(2)
    od = collections.OrderedDict(b=a, a=a)
    dd: collections.defaultdict[str, Any] = collections.defaultdict(list, x=a)
    out = bridge.convert({"od": od, "dd": dd}, np)
    assert type(out["od"]) is collections.OrderedDict and list(out["od"]) == ["b", "a"]
    assert type(out["dd"]) is collections.defaultdict and out["dd"].default_factory is list
    assert out["dd"]["x"].ctypes.data == a.ctypes.data


def test_a_batch_without_arrays_is_refused_as_python_values_are() -> None:
    for values in ([1, 2, 3], (1.0, "x"), {"a": 1}, [[1], [2]]):
        with pytest.raises(TypeError, match="holds values, not memory"):
            bridge.convert(values, torch)


def test_batch_arguments_of_tables_only_are_refused() -> None:
    with pytest.raises(TypeError, match="columns= and stack= are for tables"):
        bridge.convert({"a": np.ones(2)}, np, columns=["a"])
    with pytest.raises(TypeError, match="stack must be True or False"):
        bridge.convert({"a": np.ones(2)}, np, stack="yes")


# ------------------------------------------------------------------ tables


def _buffer_address(col: Any) -> int:
    chunk = col.chunk(0) if hasattr(col, "chunk") else col
    return int(chunk.buffers()[1].address) + chunk.offset * chunk.type.bit_width // 8


@pytest.mark.parametrize("kind", ["table", "record-batch"])
def test_a_pyarrow_table_is_a_dict_of_zero_copy_columns(kind: str) -> None:
    t = pa.table({"a": [1.0, 2.0, 3.0], "b": pa.array([1, 2, 3], pa.int32())})
    if kind == "record-batch":
        t = t.to_batches()[0]
    with _quiet():
        out = bridge.convert(t, np)
    assert list(out) == ["a", "b"] and out["b"].dtype == np.int32
    for name in out:
        assert out[name].ctypes.data == _buffer_address(t.column(name))
        assert not out[name].flags.writeable  # Arrow's memory stays read-only
    with _quiet():
        jx = bridge.convert(t, "jax", columns=["b"])
    assert list(jx) == ["b"] and np.asarray(jx["b"]).tolist() == [1, 2, 3]


def test_polars_and_pandas_frames() -> None:
    pl = pytest.importorskip("polars")
    pd = pytest.importorskip("pandas")
    df = pl.DataFrame({"a": [1.0, 2.0], "n": [3, 4]})
    with _quiet():
        out = bridge.convert(df, np)
    assert out["a"].tolist() == [1.0, 2.0] and out["n"].tolist() == [3, 4]
    assert out["a"].ctypes.data == df["a"].to_numpy().ctypes.data  # polars' own zero-copy view
    frame = pd.DataFrame(np.arange(6.0).reshape(3, 2), columns=["x", "y"])
    with _quiet():
        cols = bridge.convert(frame, np)
    assert np.shares_memory(cols["x"], frame.to_numpy()) and cols["y"].tolist() == [1.0, 3.0, 5.0]


def test_stack_is_a_view_where_columns_lie_one_stride_apart() -> None:
    pd = pytest.importorskip("pandas")
    block = np.arange(12.0).reshape(4, 3)
    frame = pd.DataFrame(block, columns=["a", "b", "c"], copy=False)
    with _quiet():
        out = bridge.convert(frame, np, stack=True)
    assert out.shape == (4, 3) and np.shares_memory(out, frame.to_numpy()) and out.tolist() == block.tolist()
    with _quiet():
        two = bridge.convert(frame, torch, stack=True, columns=["a", "c"], readonly="share")
    assert two.tolist() == block[:, [0, 2]].tolist() and two.data_ptr() == block.ctypes.data  # a view of the block
    with _quiet():  # a view torch cannot hold (negative strides): the asked stack copy instead, no warning
        back = bridge.convert(frame, torch, stack=True, columns=["c", "a"], readonly="share")
    assert back.tolist() == block[:, [2, 0]].tolist() and back.data_ptr() != block.ctypes.data


def test_stack_copies_separate_columns_once_straight_into_the_result() -> None:
    t = pa.table({"a": [1.0, 2.0], "b": [3.0, 4.0], "n": [5, 6]})
    with _quiet():  # asked for: named in the plan, no warning
        out = bridge.convert(t, torch, stack=True, columns=["a", "b", "n"], dtype=torch.float32)
    assert out.dtype == torch.float32 and out.tolist() == [[1.0, 3.0, 5.0], [2.0, 4.0, 6.0]]
    assert out.stride() == (1, 2)  # column by column (each a contiguous run), as polars' to_torch lays it out
    with _quiet():
        arrow = bridge.convert(t, "pyarrow", stack=True, columns=["a", "b"])  # row-major only: row-major
    assert arrow.to_numpy_ndarray().tolist() == [[1.0, 3.0], [2.0, 4.0]]
    with pytest.raises(ValueError, match="dtypes float64, int64; pass dtype="):
        bridge.convert(t, torch, stack=True)


def test_table_refusals_name_the_problem() -> None:
    t = pa.table({"a": [1.0, None]})
    with pytest.raises(ValueError, match="fill_null"):
        bridge.convert(t, np)
    with pytest.raises(ValueError, match=r"no column 'z'; the table has 'a'"):
        bridge.convert(t, np, columns=["z"])
    with pytest.raises(TypeError, match="columns must be a list of column names"):
        bridge.convert(t, np, columns="a")


def test_a_chunked_column_is_concatenated_and_named() -> None:
    t = pa.Table.from_batches([pa.record_batch({"a": [1.0]}), pa.record_batch({"a": [2.0]})])
    with pytest.warns(bridge.CopyWarning, match=r"\['a'\]: .*2 chunks") as caught:
        out = bridge.convert(t, np)
    assert caught[0].message.leaves["['a']"][0].kind == "concatenate"  # type: ignore[union-attr]
    assert out["a"].tolist() == [1.0, 2.0]


# ------------------------------------------------------------------ streams


def test_a_stream_is_read_one_batch_per_next() -> None:
    pulled: list[int] = []

    def batches() -> Any:
        for i in range(3):
            pulled.append(i)
            yield pa.record_batch({"v": pa.array([float(i)] * 4)})

    it = bridge.convert(batches(), torch, readonly="share")
    assert pulled == []  # lazy: nothing read yet
    first = next(it)
    assert pulled == [0] and first["v"].tolist() == [0.0] * 4
    assert [d["v"][0].item() for d in it] == [1.0, 2.0] and pulled == [0, 1, 2]


def test_record_batch_readers_and_parquet_batches(tmp_path: Any) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    t = pa.table({"x": np.arange(1000.0), "y": np.arange(1000, dtype=np.int32)})
    pq.write_table(t, tmp_path / "f.parquet", row_group_size=300)
    f = pq.ParquetFile(tmp_path / "f.parquet")
    with _quiet():
        got = [(d["x"].ctypes.data, d["x"].shape[0]) for d in bridge.convert(f.iter_batches(batch_size=300), np)]
    assert [n for _, n in got] == [300, 300, 300, 100]
    reader = pa.RecordBatchReader.from_batches(t.schema, t.to_batches(max_chunksize=400))
    with _quiet():
        stacked = list(bridge.convert(reader, np, stack=True, dtype=np.float64))
    assert [s.shape for s in stacked] == [(400, 2), (400, 2), (200, 2)] and stacked[2][-1].tolist() == [999.0, 999.0]
    with pytest.raises(TypeError, match=r"a stream's items must be tables or record batches .*got a int"):
        next(bridge.convert(iter([1, 2]), np))


_STREAM_PEAK = """
import sys, warnings, numpy as np, pyarrow as pa, bridge
warnings.simplefilter("ignore", bridge.CopyWarning)
MiB = 1 << 20

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))

def batches():
    for i in range(32):
        yield pa.record_batch({"v": pa.array(np.full(32 * MiB // 8, float(i)))})

def peak(source, read):
    # the high-water mark of resident memory over the loop, above where it began
    # (reset through clear_refs: ru_maxrss is inherited from the parent across exec)
    start = status("VmRSS:")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    total = 0.0
    for d in source:
        total += read(d)
    assert total == sum(range(32)), total
    return (status("VmHWM:") - start) / MiB

to = sys.argv[1]
if to == "torch":
    import torch
if sys.argv[2] == "alone":
    print(peak(batches(), lambda b: b.column(0)[0].as_py()))
else:
    print(peak(bridge.convert(batches(), to), lambda d: float(d["v"][0])))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="the peak is read from Linux's /proc")
@pytest.mark.parametrize("to", ["numpy", "torch"])
def test_a_stream_holds_one_batch_at_a_time(to: str) -> None:
    """Over a 1 GiB stream of 32 MiB batches, converting holds at most one
    batch beyond what reading the stream alone holds (the source's own
    batches, the previous one still named by the loop): zero-copy into NumPy
    about nothing, into torch, which copies Arrow's read-only memory, the one
    batch being copied. Measured in a fresh interpreter, as the high-water
    mark of resident memory."""
    peaks = []
    for how in ("alone", "converted"):  # each in an interpreter of its own: the same start
        out = subprocess.run([sys.executable, "-c", _STREAM_PEAK, to, how], capture_output=True, text=True,
                             timeout=300, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})  # fmt: skip
        assert out.returncode == 0, out.stderr
        peaks.append(float(out.stdout))
    alone, through = peaks
    assert alone > 32, f"the stream alone peaked {alone:.0f} MiB above its start: the measure did not see it"
    assert through - alone < 2 * 32, f"converting held {through - alone:.0f} MiB beyond the stream's own {alone:.0f}"
    if to == "numpy":
        assert through - alone < 8, f"a zero-copy stream held {through - alone:.0f} MiB beyond the stream's own"


# ------------------------------------------------------------------ dtype, device and the other asks


def test_dtype_casts_only_when_it_differs() -> None:
    a = np.arange(6.0).reshape(2, 3)
    with _quiet():
        same = bridge.convert(a, torch, dtype=torch.float64)
        same_np = bridge.convert(a, np, dtype="float64")
    assert same.data_ptr() == a.ctypes.data and same_np.ctypes.data == a.ctypes.data
    with _quiet():  # asked for: no warning
        f32 = bridge.convert(a.T, torch, dtype=np.float32)
    assert f32.dtype == torch.float32 and f32.is_contiguous() and f32.tolist() == a.T.tolist()
    p = plan(a.T, torch, dtype=torch.float32)
    assert [(f.kind, f.copies, f.asked) for f in p.fixes] == [("dtype", True, True)]  # one copy, layout included


def test_lossy_casts_only_when_asked() -> None:
    a = np.array([1.7, -2.5, 300.0])
    with _quiet():
        out = bridge.convert(a, torch, dtype=torch.int16)
    assert out.tolist() == torch.tensor(a).to(torch.int16).tolist()  # torch's own cast, the reference
    with pytest.raises(BufferError, match="pyarrow cannot hold complex128"):
        bridge.convert(np.ones(2, np.complex128), "pyarrow")  # never cast on its own
    with _quiet(), pytest.warns(np.exceptions.ComplexWarning):  # asked: NumPy's cast says what it drops
        real = bridge.convert(np.array([1 + 2j]), "pyarrow", dtype="float64")
    assert real.to_pylist() == [1.0]


def test_asks_are_checked_against_the_destination() -> None:
    a = np.arange(3.0)
    with pytest.raises(ValueError, match=r"convert\(dtype=complex64\): pyarrow cannot hold complex64"):
        bridge.convert(a, "pyarrow", dtype="complex64")
    with pytest.raises(TypeError, match="cannot interpret"):
        bridge.convert(a, torch, dtype=object())
    with pytest.raises(ValueError, match=r"convert\(device=cuda\): numpy holds cpu memory, not cuda"):
        bridge.convert(a, np, device="cuda")
    with pytest.raises(ValueError, match="unknown DLPack device type 99"):
        bridge.convert(a, np, device=(99, 0))
    assert bridge.convert(a, np, device=(1, 0)).ctypes.data == a.ctypes.data  # a __dlpack_device__() pair
    with pytest.raises(ValueError, match="jax's arrays are immutable"):
        bridge.convert(a, "jax", writable=True)
    with pytest.raises(TypeError, match="contiguous must be True or False"):
        bridge.convert(a, np, contiguous=1)
    with pytest.raises(BufferError, match=r"convert\(copy=False\): dtype=float32 asks for a cast"):
        bridge.convert(a, torch, dtype=torch.float32, copy=False)


def test_device_cpu_contiguous_and_writable() -> None:
    a = np.arange(6.0).reshape(2, 3)
    with _quiet():
        here = bridge.convert(a, torch, device="cpu")
        dev = bridge.convert(a, torch, device=torch.device("cpu"), contiguous=True)
    assert here.data_ptr() == dev.data_ptr() == a.ctypes.data
    with _quiet():
        c = bridge.convert(a.T, np, contiguous=True)
    assert c.flags.c_contiguous and c.tolist() == a.T.tolist() and not np.shares_memory(c, a)
    ro = _ro(np.arange(3.0))
    with _quiet():
        w = bridge.convert(ro, np, writable=True)
        kept = bridge.convert(ro, np)
    assert w.flags.writeable and not np.shares_memory(w, ro)
    assert not kept.flags.writeable and kept.ctypes.data == ro.ctypes.data


def test_read_ipc_in_batches_is_a_stream(tmp_path: Any) -> None:
    t = pa.table({"x": np.arange(10.0), "n": np.arange(10)})
    with pa.OSFile(str(tmp_path / "f.arrow"), "wb") as sink, pa.ipc.new_file(sink, t.schema) as w:
        for b in t.to_batches(max_chunksize=4):
            w.write_batch(b)
    it = bridge.arrow.read_ipc(tmp_path / "f.arrow", batches=True, columns=["x"])
    parts = [d["x"].tolist() for d in it]
    assert parts == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0], [8.0, 9.0]]
    with _quiet():
        got = [d["n"] for d in bridge.convert(bridge.arrow.read_ipc(tmp_path / "f.arrow", batches=True), np)]
    assert [g.tolist() for g in got] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]] and not got[0].flags.writeable
    with pytest.raises(ValueError, match="no column named 'z'"):
        bridge.arrow.read_ipc(tmp_path / "f.arrow", batches=True, columns=["z"])  # checked before any batch
    with pytest.raises(TypeError, match="batches must be bool"):
        bridge.arrow.read_ipc(tmp_path / "f.arrow", batches=1)  # type: ignore[call-overload]


def test_stack_never_views_across_separate_buffers() -> None:
    """Two columns whose gap a stride could span are still separate memory: a
    view across them would lend the destination memory nobody lent (torch
    reads a storage's whole span)."""
    a, big = np.arange(3.0), np.arange(4_000_000.0)
    t = pa.table({"a": a, "b": big[:3]})
    with _quiet():
        s = bridge.convert(t, torch, stack=True, readonly="share")
    assert s.tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]] and s.untyped_storage().nbytes() == 48


def test_refusals_of_units_that_are_not_memory() -> None:
    pl = pytest.importorskip("polars")
    with pytest.raises(TypeError, match="a polars LazyFrame is a query, not memory: collect"):
        bridge.convert(pl.DataFrame({"a": [1.0]}).lazy(), np)
    with pytest.raises(TypeError, match="plan\\(\\) takes one array, not a dict"):
        plan({"a": np.ones(2)}, torch)


def test_the_same_array_twice_is_one_import_on_the_fast_path_too() -> None:
    """One source object, one result: a destination is never handed the same
    memory twice (paddle releases only one of two imports of it)."""
    a = np.arange(3.0)
    many = {f"k{i}": np.full(2, float(i)) for i in range(20)}  # past the loop's 16 direct entries
    with spy() as calls:
        out = bridge.convert({"a": a, "again": [a], **many, "tail": [many["k19"]]}, torch)
    assert calls == [] and out["a"] is out["again"][0] and out["k19"] is out["tail"][0]


def test_a_one_shot_dlpack_producer_in_a_batch_is_asked_once() -> None:
    dlpack = pytest.importorskip("dlpack")  # pydlpack: its exporter answers one __dlpack__ call
    x = dlpack.asdlpack(np.arange(6, dtype=np.int32))
    with _quiet():
        out = bridge.convert({"x": x, "label": "cat"}, np)
    assert out["x"].tolist() == list(range(6)) and out["label"] == "cat"


def test_array_likes_by_their_own_array_method_are_leaves() -> None:
    xr = pytest.importorskip("xarray")
    da = xr.DataArray(np.arange(4.0))
    out = bridge.convert({"x": da, "name": "a"}, np)
    assert out["x"].tolist() == [0.0, 1.0, 2.0, 3.0] and out["name"] == "a"


def test_batches_leak_nothing_on_either_path() -> None:
    """The C loop's memo and the general path's regions hold their leaves only
    for the call: refcounts come back, exports and imports balance."""
    import gc

    from bridge.core.native import _C

    a, b = np.arange(6.0), _ro(np.arange(4.0))
    fast = {"a": a, "again": [a], "n": 3}
    slow = {"a": a, "flipped": a[::-1], "ro": b, "ro2": b[1:]}
    for batch in (fast, slow):
        bridge.convert(batch, torch)  # (registration, caches)
    gc.collect()
    before = (sys.getrefcount(a), sys.getrefcount(b), _C.stats())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bridge.CopyWarning)
        for _ in range(50):
            bridge.convert(fast, torch)
            bridge.convert(slow, torch)
            bridge.convert(fast, np)
    gc.collect()
    after = (sys.getrefcount(a), sys.getrefcount(b), _C.stats())
    assert after[:2] == before[:2]
    for key in ("exports", "imports"):
        done = {"exports": "export_deleters", "imports": "import_releases"}[key]
        assert after[2][key] - before[2][key] == after[2][done] - before[2][done], key


def test_a_stacked_view_keeps_its_block_alive() -> None:
    pd = pytest.importorskip("pandas")
    import gc
    import weakref

    block = np.arange(12.0).reshape(4, 3)
    frame = pd.DataFrame(block, columns=["a", "b", "c"], copy=False)
    with _quiet():
        out = bridge.convert(frame, bridge, stack=True)
    assert out.data_ptr() == block.ctypes.data
    gone = weakref.ref(frame)
    del frame, block
    gc.collect()
    assert gone() is None and out.tolist() == np.arange(12.0).reshape(4, 3).tolist()


def test_stack_takes_one_dim_columns_only() -> None:
    t = pa.table({"m": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(4.0)), 2)})
    with pytest.raises(ValueError, match="column 'm' is 2-d; stacking takes 1-d columns"):
        bridge.convert(t, np, stack=True)


# ------------------------------------------------------- tables in C (convert.c: table_to)


def test_a_table_of_plain_columns_takes_the_fast_path() -> None:
    """pyarrow Tables and RecordBatches and polars frames of one chunk of
    plain numbers are read in C through one __arrow_c_stream__ (no general
    path call), each column zero-copy (by address, through pyarrow's and
    polars' own APIs) and read-only where the destination can say so."""
    pl = pytest.importorskip("polars")
    t = pa.table({"a": [1.0, 2.0, 3.0], "b": pa.array([1, 2, 3], pa.int32())})
    frame = pl.DataFrame({"a": [1.0, 2.0], "n": [3, 4]})
    for src, names in ((t, t.column_names), (t.to_batches()[0], t.column_names), (frame, frame.columns)):
        bridge.convert(src, np)  # (the destination's registration)
        with spy() as seen, _quiet():
            out = bridge.convert(src, np)
        assert seen == [], type(src)
        assert list(out) == names
        assert all(not v.flags.writeable for v in out.values())
    out = bridge.convert(t, np)
    assert all(out[n].ctypes.data == _buffer_address(t.column(n)) for n in out)
    assert bridge.convert(frame, np)["n"].ctypes.data == frame["n"].to_numpy().ctypes.data


def test_readonly_share_lends_a_tables_columns_to_torch() -> None:
    t = pa.table({"a": [1.0, 2.0], "b": [3.0, 4.0]})
    bridge.convert(t, torch, readonly="share")
    with spy() as seen, _quiet():
        out = bridge.convert(t, torch, readonly="share")
    assert seen == []
    assert all(out[n].data_ptr() == _buffer_address(t.column(n)) for n in out)
    with spy() as seen, _quiet():  # the same for one Arrow array
        one = bridge.convert(t.column("a").chunk(0), torch, readonly="share")
    assert seen == [] and one.data_ptr() == _buffer_address(t.column("a"))
    with pytest.warns(bridge.CopyWarning, match="read-only"):  # the default still copies, once per table
        copied = bridge.convert(t, torch)
    assert copied["a"].data_ptr() != _buffer_address(t.column("a")) and copied["b"].tolist() == [3.0, 4.0]
    with pytest.raises(BufferError, match="readonly='error'"):
        bridge.convert(t, torch, readonly="error")


def test_tables_the_fast_path_leaves_are_the_general_paths_whole() -> None:
    """Two chunks, nulls, a bool or string column, an offset batch: the C
    path reads the stream and leaves it (releasing what it read), and the
    general path names each fix or refusal as before."""
    chunks = pa.Table.from_batches([pa.record_batch({"a": [1.0]}), pa.record_batch({"a": [2.0]})])
    with pytest.warns(bridge.CopyWarning, match="2 chunks"):
        assert bridge.convert(chunks, np)["a"].tolist() == [1.0, 2.0]
    with pytest.warns(bridge.CopyWarning, match=r"\['f'\]"):
        mixed = bridge.convert(pa.table({"x": [1.0, 2.0], "f": [True, False]}), np)
    assert mixed["f"].tolist() == [True, False] and mixed["x"].tolist() == [1.0, 2.0]
    with pytest.raises(ValueError, match="fill_null"):
        bridge.convert(pa.table({"a": [1.0, None]}), np)
    sliced = pa.table({"a": np.arange(6.0), "b": np.arange(6, 12.0)}).slice(2, 3)
    with _quiet():
        out = bridge.convert(sliced, np)
    assert out["a"].tolist() == [2.0, 3.0, 4.0] and out["b"].tolist() == [8.0, 9.0, 10.0]
    with pytest.raises(TypeError):
        bridge.convert(pa.table({"s": ["x"]}), np)


def test_a_tables_columns_keep_its_memory_and_leak_nothing() -> None:
    """Each column holds its own moved-out child of the stream's batch: the
    table may go, the values stay; and over many calls the Arrow memory
    pyarrow has allocated comes back to where it was."""
    import gc

    def make() -> Any:
        return pa.table({"a": np.arange(1000.0), "b": np.arange(1000.0) * 2})

    t = make()
    a_addr = _buffer_address(t.column("a"))
    out = bridge.convert(t, torch, readonly="share")
    del t
    gc.collect()
    assert out["a"].data_ptr() == a_addr and out["b"][999].item() == 1998.0
    del out
    gc.collect()
    base = pa.total_allocated_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bridge.CopyWarning)  # (the two-batch table's concatenation)
        for _ in range(200):
            t = make()
            bridge.convert(t, np)
            bridge.convert(t, torch, readonly="share")
            bridge.convert(pa.Table.from_batches([t.to_batches()[0]] * 2), np)  # two batches: the C path gives up
    del t
    gc.collect()
    assert pa.total_allocated_bytes() == base


def _warning_of(call: Any) -> tuple[str, Any, Any, str, Any]:
    """The one CopyWarning ``call()`` raises: (message, kind, fixes, the
    file it points at, leaves)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    (w,) = [w for w in caught if issubclass(w.category, bridge.CopyWarning)]
    m = w.message
    assert isinstance(m, bridge.CopyWarning)
    return str(m), m.kind, m.fixes, w.filename, dict(m.leaves)


def test_a_tables_read_only_columns_are_copied_in_c() -> None:
    """The default policy into torch (which writes what it takes): each
    read-only column copied into memory of its own, writable, no Arrow
    address, the values torch reads through its own API; no general-path
    call; one CopyWarning worded as the general path words it (columns=
    takes the general path), pointing at the caller's line."""
    t = pa.table({"a": np.arange(5.0), "b": pa.array(np.arange(5), pa.int32()), "c": np.arange(5.0) * 3})
    bridge.convert(t, torch, readonly="share")  # (the destination's registration)
    with spy() as seen, warnings.catch_warnings():
        warnings.simplefilter("ignore", bridge.CopyWarning)
        out = bridge.convert(t, torch)
    assert seen == []
    assert list(out) == ["a", "b", "c"]
    for n in out:
        assert out[n].data_ptr() != _buffer_address(t.column(n)) and out[n].data_ptr() % 64 == 0
        assert out[n].tolist() == t.column(n).to_pylist()
    assert out["b"].dtype == torch.int32
    out["a"][0] = 42.0  # writable, and a copy: Arrow's memory is untouched
    assert t.column("a")[0].as_py() == 0.0
    assert len({out[n].data_ptr() for n in out}) == 3
    fast = _warning_of(lambda: bridge.convert(t, torch))
    slow = _warning_of(lambda: bridge.convert(t, torch, columns=t.column_names))
    assert fast == slow
    assert fast[0].startswith("convert() to torch copied 3 of 3 arrays: ['a']: the memory is read-only")
    assert fast[3] == __file__


def test_a_tables_copied_columns_outlive_it_and_leak_nothing() -> None:
    """The copies own their memory: the table may go; over many calls Arrow's
    allocation comes back to where it was and the host cache keeps at most
    its bound."""
    import gc

    t = pa.table({"a": np.arange(100_000.0), "b": np.arange(100_000.0) * 2})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", bridge.CopyWarning)
        out = bridge.convert(t, torch)
        del t
        gc.collect()
        assert out["b"][99_999].item() == 199_998.0
        del out
        gc.collect()
        base = pa.total_allocated_bytes()
        for _ in range(50):
            t = pa.table({"a": np.arange(100_000.0), "b": np.arange(100_000.0) * 2})
            bridge.convert(t, torch)
        del t
        gc.collect()
    assert pa.total_allocated_bytes() == base
    from bridge.core.native import _C

    limit, held = _C.host_cache()
    assert held <= limit


def test_a_table_whose_read_only_columns_overlap_is_copied_as_one_region() -> None:
    """Two columns over one buffer (the same array twice) must still share
    memory after the copy: the C path leaves such a table to the general
    path, which copies the region once."""
    arr = pa.array(np.arange(4.0))
    t = pa.table({"x": arr, "y": arr})
    with spy() as seen, warnings.catch_warnings():
        warnings.simplefilter("ignore", bridge.CopyWarning)
        out = bridge.convert(t, torch)
    assert seen != []
    assert out["x"].data_ptr() == out["y"].data_ptr() != _buffer_address(t.column("x"))
    out["x"][1] = 7.0
    assert out["y"][1].item() == 7.0


def test_a_tables_copy_policy_other_than_the_default_is_the_general_paths() -> None:
    """copy=False and readonly='error' refuse, as for one array; copy=True
    copies without a warning."""
    t = pa.table({"a": np.arange(3.0)})
    with pytest.raises(BufferError, match="copy=False"):
        bridge.convert(t, torch, copy=False)
    with pytest.raises(BufferError, match="readonly='error'"):
        bridge.convert(t, torch, readonly="error")
    with _quiet():
        assert bridge.convert(t, torch, copy=True)["a"].tolist() == [0.0, 1.0, 2.0]
