"""Arrow IPC (bridge.arrow.write_ipc / read_ipc): tensors as the columns of one
record batch, read back as views of the memory-mapped file.

Zero-copy is checked by address: a view's data lies inside the file's mapping
as ``/proc/self/maps`` lists it (Linux; those checks skip elsewhere) and at the
file offset that pyarrow's own reader gives the column's buffer. Lifetimes by
the mapping itself: it stays listed while a view lives, after every pyarrow
object is gone, and goes with the last view.
"""

from __future__ import annotations

import gc
import io
import itertools
import os
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from lifetimes import counting_alone

import bridge
from bridge.arrow import read_ipc, to_fixed_shape_tensor, write_ipc
from bridge.core.native import _C

pa = pytest.importorskip("pyarrow")

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps")

DTYPES = [bridge.bool, bridge.int8, bridge.uint16, bridge.int32, bridge.int64, bridge.uint64,
          bridge.float16, bridge.float32, bridge.float64]  # fmt: skip
FORMATS = ["file", "stream"]


def sample(shape: tuple[int, ...], dt: Any, seed: int = 0) -> Any:
    rng = np.random.default_rng(seed)
    vals = rng.integers(0, 100, size=shape)
    if dt is bridge.bool:
        return bridge.from_numpy((vals % 2).astype(bool))
    return bridge.from_numpy(vals.astype(bridge.empty(1, dtype=dt).numpy().dtype))


def same(a: Any, b: Any) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.numpy(), b.numpy())


def mappings(path: Path) -> list[tuple[int, int, str]]:
    """(start, end, permissions) of the mappings of ``path`` in this process."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and parts[5] == str(path):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                out.append((lo, hi, parts[1]))
    return out


def inside(t: Any, maps: list[tuple[int, int, str]]) -> bool:
    lo, hi = t.data_ptr(), t.data_ptr() + t.nbytes
    return any(a <= lo and hi <= b for a, b, _ in maps)


def file_offsets(path: Path) -> dict[str, int]:
    """The file offset of each column's data buffer, as pyarrow's reader of the
    mapped file places it (the value buffer of a list type)."""
    with pa.memory_map(str(path)) as m:
        base = m.read_buffer(1).address
        m.seek(0)
        fmt = "file" if m.read(6) == b"ARROW1" else "stream"
        m.seek(0)
        table = (pa.ipc.open_file(m) if fmt == "file" else pa.ipc.open_stream(m)).read_all()
        out = {}
        for name, col in zip(table.column_names, table.columns):
            arr = col.chunks[0]
            arr = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
            if pa.types.is_fixed_size_list(arr.type):
                arr = arr.values
            arr = arr.storage if isinstance(arr, pa.ExtensionArray) else arr
            out[name] = arr.buffers()[1].address - base
        return out


# -------------------------------------------------------------- round trips


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_round_trip_dtypes(tmp_path: Path, fmt: str, dt: Any) -> None:
    tensors = {"m": sample((5, 3, 2), dt), "v": sample((5,), dt, 1)}
    path = tmp_path / f"t.{fmt}"
    write_ipc(path, tensors, format=fmt)
    back = read_ipc(path)
    assert list(back) == ["m", "v"]
    for name, t in tensors.items():
        assert same(back[name], t), name


@pytest.mark.parametrize("shape", [(4, 3), (4, 3, 2), (2, 3, 4, 5), (1, 1), (0, 2, 3)])
def test_round_trip_ranks(tmp_path: Path, shape: tuple[int, ...]) -> None:
    t = sample(shape, bridge.float32)
    write_ipc(tmp_path / "t.arrow", t)
    back = read_ipc(tmp_path / "t.arrow")
    assert list(back) == ["tensor"]
    assert same(back["tensor"], t)


def test_zero_rows_round_trip(tmp_path: Path) -> None:
    t = bridge.zeros(0, 3, 4, dtype=bridge.int16)
    for fmt in FORMATS:
        write_ipc(tmp_path / fmt, {"x": t, "y": bridge.zeros(0, dtype=bridge.uint8)}, format=fmt)
        back = read_ipc(tmp_path / fmt)
        assert back["x"].shape == (0, 3, 4) and back["y"].shape == (0,)


@pytest.mark.parametrize("perm", [p for p in itertools.permutations(range(3)) if p != (0, 1, 2)])
def test_permuted_dense_layouts_keep_their_strides(tmp_path: Path, perm: tuple[int, ...]) -> None:
    base = sample((4, 2, 3, 5), bridge.float64)
    t = base.permute(0, *(p + 1 for p in perm))  # element dims permuted, batch first
    path = tmp_path / "p.arrow"
    write_ipc(path, {"t": t})
    # the spec's rule: logical dim i is physical dim permutation[i] (pyarrow's own
    # to_numpy_ndarray misreads 3-cycles: see tests/interop/arrow/test_arrow_pyarrow.py)
    col = pa.ipc.open_file(str(path)).read_all().column("t").chunks[0]
    assert col.type.permutation == list(perm)
    assert col.type.shape == list(base.shape[1:])  # physical: base's
    back = read_ipc(path)["t"]
    assert same(back, t)
    assert back.stride() == t.stride()  # a view with the permuted layout, not a copy


def test_layouts_with_no_arrow_form_are_written_from_a_copy(tmp_path: Path) -> None:
    base = sample((6, 8), bridge.int32)
    strided = base[::2, ::3]  # not dense: Arrow has no form for it
    col = base[:, 1]  # 1-d with a stride of 8
    write_ipc(tmp_path / "s.arrow", {"s": strided, "c": col[:3]})
    back = read_ipc(tmp_path / "s.arrow")
    assert same(back["s"], strided) and same(back["c"], col[:3])


@pytest.mark.parametrize("fmt", FORMATS)
def test_file_object_and_native_file_sinks_and_sources(tmp_path: Path, fmt: str) -> None:
    t = sample((3, 4), bridge.float32)
    bio = io.BytesIO()
    write_ipc(bio, {"x": t}, format=fmt)
    assert not bio.closed  # left to its owner
    bio.seek(0)
    assert same(read_ipc(bio)["x"], t)
    assert not bio.closed
    assert same(read_ipc(bio.getvalue())["x"], t)  # bytes: viewed through a pa.Buffer

    sink = pa.BufferOutputStream()
    write_ipc(sink, {"x": t}, format=fmt)
    buf = sink.getvalue()
    assert same(read_ipc(buf, format=fmt)["x"], t)
    assert same(read_ipc(pa.BufferReader(buf))["x"], t)

    with open(tmp_path / "f", "wb") as f:
        write_ipc(f, {"x": t}, format=fmt)
        assert not f.closed
    with open(tmp_path / "f", "rb") as f:
        assert same(read_ipc(f)["x"], t)
    with pa.OSFile(str(tmp_path / "g"), "wb") as f:
        write_ipc(f, {"x": t}, format=fmt)
    assert same(read_ipc(str(tmp_path / "g"), memory_map=False)["x"], t)


def test_dim_names_are_stored(tmp_path: Path) -> None:
    write_ipc(tmp_path / "a", {"img": bridge.zeros(2, 3, 4), "v": bridge.zeros(2)},
              dim_names={"img": ["H", "W"]})  # fmt: skip
    schema = pa.ipc.open_file(str(tmp_path / "a")).schema
    assert schema.field("img").type.dim_names == ["H", "W"]
    write_ipc(tmp_path / "b", bridge.zeros(2, 3, 4, 5), dim_names=("C", "H", "W"))
    ty = pa.ipc.open_file(str(tmp_path / "b")).schema.field("tensor").type
    assert ty.dim_names == ["C", "H", "W"]


def test_reads_ipc_written_by_pyarrow(tmp_path: Path) -> None:
    """Any IPC data of fixed_shape_tensor, FixedSizeList or primitive columns."""
    vals = np.arange(24, dtype=np.float32)
    fst = pa.FixedShapeTensorArray.from_numpy_ndarray(vals.reshape(4, 2, 3))
    fsl = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(8, dtype=np.int16)), 2)
    table = pa.table({"fst": fst, "fsl": fsl, "p": pa.array([1.5, 2.5, 3.5, 4.5])})
    with pa.OSFile(str(tmp_path / "x"), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    back = read_ipc(tmp_path / "x")
    assert back["fst"].tolist() == vals.reshape(4, 2, 3).tolist()
    assert back["fsl"].shape == (4, 2) and back["fsl"].dtype == bridge.int16
    assert back["p"].tolist() == [1.5, 2.5, 3.5, 4.5]
    assert list(read_ipc(tmp_path / "x", columns=["p", "fst"])) == ["p", "fst"]


# ------------------------------------------------------------ memory mapping


@linux
@pytest.mark.parametrize("fmt", FORMATS)
def test_memory_mapped_reads_are_views_of_the_mapping(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "m.arrow"
    write_ipc(path, {"a": sample((64, 3, 5), bridge.float32), "b": sample((64,), bridge.int64)},
              format=fmt)  # fmt: skip
    offsets = file_offsets(path)
    before = _C.stats()
    back = read_ipc(path)
    after = _C.stats()
    maps = mappings(path)
    assert maps and all(perm.startswith("r-") for _, _, perm in maps)  # mapped read-only
    for name, t in back.items():
        assert inside(t, maps), name
        # at the file offset pyarrow gives the buffer: the bytes of the file, not a copy
        assert any(t.data_ptr() - lo == offsets[name] for lo, _, _ in maps), name
    # one Arrow import guard a column (the fixed_shape_tensor, and the primitive
    # column read in C) and no DLPack import: no bridge copy (counted where no
    # other test thread imports meanwhile: lifetimes.counting_alone)
    if counting_alone():
        assert after["arrow_imports"] - before["arrow_imports"] == 2
        assert after["imports"] - before["imports"] == 0


@linux
def test_the_mapping_lives_as_long_as_a_view(tmp_path: Path) -> None:
    path = tmp_path / "life.arrow"
    t = sample((16, 4, 4), bridge.int32)
    expected = t.tolist()
    write_ipc(path, {"a": t, "b": bridge.arange(16, dtype=bridge.float64)})
    fds = len(os.listdir("/proc/self/fd"))
    back = read_ipc(path)
    a, b = back["a"], back["b"]
    del back
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == fds  # the file is closed; the mapping is not
    assert inside(a, mappings(path)) and inside(b, mappings(path))
    assert a.tolist() == expected and b.tolist() == list(range(16))
    sub = a[3:5, 1]  # a view of the view keeps it too
    del a
    gc.collect()
    assert sub.tolist() == [expected[3][1], expected[4][1]]
    del b, sub
    gc.collect()
    assert mappings(path) == []  # the last view took the mapping with it


@linux
def test_copy_true_keeps_nothing_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "c.arrow"
    t = sample((8, 3), bridge.float16)
    write_ipc(path, t)
    back = read_ipc(path, copy=True)["tensor"]
    gc.collect()
    assert mappings(path) == []
    assert not back.is_readonly and same(back, t)
    back[0, 0] = 7  # writable new memory
    assert read_ipc(path)["tensor"][0, 0].item() == t[0, 0].item()


def test_views_are_read_only(tmp_path: Path) -> None:
    write_ipc(tmp_path / "r", {"m": bridge.ones(3, 2), "v": bridge.ones(3, dtype=bridge.bool)})
    for memory_map in (True, False):
        back = read_ipc(tmp_path / "r", memory_map=memory_map)
        for t in back.values():
            assert t.is_readonly
            with pytest.raises(ValueError, match="read-only"):
                t[0] = 0
            assert not np.asarray(t).flags.writeable


def test_memory_map_false_reads_into_pyarrow_memory(tmp_path: Path) -> None:
    path = tmp_path / "n.arrow"
    t = sample((4, 5), bridge.uint16)
    write_ipc(path, t)
    back = read_ipc(path, memory_map=False)["tensor"]
    if sys.platform.startswith("linux"):
        assert mappings(path) == []
    assert same(back, t) and back.is_readonly


# ------------------------------------------------------------- multi-batch


def _two_batches(path: Path, fmt: str) -> tuple[Any, Any]:
    a, b = sample((3, 2, 2), bridge.int32), sample((2, 2, 2), bridge.int32, 1)
    fa, fb = to_fixed_shape_tensor(a), to_fixed_shape_tensor(b)
    schema = pa.schema([pa.field("x", fa.type), pa.field("v", pa.float32())])
    new = pa.ipc.new_file if fmt == "file" else pa.ipc.new_stream
    with pa.OSFile(str(path), "wb") as f, new(f, schema) as w:
        w.write_batch(pa.record_batch([fa, pa.array([1, 2, 3], pa.float32())], schema=schema))
        w.write_batch(pa.record_batch([fb, pa.array([4, 5], pa.float32())], schema=schema))
    return a, b


@pytest.mark.parametrize("fmt", FORMATS)
def test_several_batches_concatenate_only_as_a_copy(tmp_path: Path, fmt: str) -> None:
    a, b = _two_batches(tmp_path / "mb", fmt)
    with pytest.raises(ValueError, match=r"column 'x' spans 2 record batches.*copy=True"):
        read_ipc(tmp_path / "mb")
    back = read_ipc(tmp_path / "mb", copy=True)
    assert back["x"].shape == (5, 2, 2)
    assert back["x"].tolist() == a.tolist() + b.tolist()
    assert back["v"].tolist() == [1, 2, 3, 4, 5]
    assert not back["x"].is_readonly


# --------------------------------------------------------------- alignment


def test_pyarrow_writes_buffers_at_multiples_of_8_only(tmp_path: Path) -> None:
    """What the alignment option is for, measured: pyarrow's writer (whose
    IpcWriteOptions has no alignment) starts each buffer at a multiple of 8
    bytes of the file, and no more: of three columns 16 bytes apart, at most
    one can start at a multiple of 64."""
    assert not hasattr(pa.ipc.IpcWriteOptions(), "alignment")
    path = tmp_path / "al.arrow"
    write_ipc(path, {"a": bridge.zeros(2, 3, dtype=bridge.int8),
                     "b": bridge.zeros(2, 5, dtype=bridge.int8),
                     "c": bridge.zeros(2, 7, dtype=bridge.int8)})  # fmt: skip
    offsets = file_offsets(path)
    assert all(off % 8 == 0 for off in offsets.values()), offsets
    assert sorted(offsets.values()) == [offsets["a"], offsets["a"] + 8, offsets["a"] + 24]
    assert sum(off % 64 == 0 for off in offsets.values()) <= 1, offsets


def test_alignment_checks_views_and_places_copies(tmp_path: Path) -> None:
    path = tmp_path / "al.arrow"
    t = sample((4, 3), bridge.int8)
    write_ipc(path, {"a": t, "b": bridge.zeros(4, 5, dtype=bridge.int8)})
    views = read_ipc(path, alignment=8)  # what the writer gives: always met
    assert all(v.data_ptr() % 8 == 0 for v in views.values())
    misaligned = [n for n, v in views.items() if v.data_ptr() % 64]
    assert misaligned  # measured above: pyarrow does not place them at 64
    with pytest.raises(ValueError, match=rf"column '{misaligned[0]}'.*copy=True"):
        read_ipc(path, alignment=64)
    for al in (64, 128, 4096):
        copies = read_ipc(path, copy=True, alignment=al)
        assert all(c.data_ptr() % al == 0 for c in copies.values()), al
        assert same(copies["a"], t)
        assert not copies["a"].is_readonly
        copies["a"][0, 0] = 1


def test_views_must_meet_their_item_size(tmp_path: Path) -> None:
    sink = pa.BufferOutputStream()
    write_ipc(sink, bridge.arange(8, dtype=bridge.float64).reshape(4, 2), format="stream")
    raw = sink.getvalue().to_pybytes()
    shifted = memoryview(bytearray(b"\0" + raw))[1:]  # every buffer 1 byte off 8
    with pytest.raises(ValueError, match="item size 8"):
        read_ipc(shifted)
    assert read_ipc(shifted, copy=True)["tensor"].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]


# ------------------------------------------------------------------ errors


def test_write_errors(tmp_path: Path) -> None:
    p = tmp_path / "e"
    with pytest.raises(ValueError, match=r"same first dim.*'a' has 3, 'b' has 4"):
        write_ipc(p, {"a": bridge.zeros(3, 2), "b": bridge.zeros(4)})
    with pytest.raises(ValueError, match="unknown Arrow IPC format 'feather'"):
        write_ipc(p, bridge.zeros(3, 2), format="feather")
    with pytest.raises(TypeError, match="format must be"):
        write_ipc(p, bridge.zeros(3, 2), format=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="0-d"):
        write_ipc(p, bridge.zeros(()))
    with pytest.raises(ValueError, match="at least one tensor"):
        write_ipc(p, {})
    with pytest.raises(TypeError, match="Tensor or a mapping"):
        write_ipc(p, np.zeros((3, 2)))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="column 'a' must be a bridge Tensor"):
        write_ipc(p, {"a": np.zeros(3)})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="column names must be str"):
        write_ipc(p, {1: bridge.zeros(3)})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="writes to a path"):
        write_ipc(42, bridge.zeros(3, 2))
    with pytest.raises(TypeError, match="complex64 has no zero-copy Arrow type"):
        write_ipc(p, bridge.zeros(3, 2, dtype=bridge.complex64))
    with pytest.raises(ValueError, match="needs 2 names, got 1"):
        write_ipc(p, bridge.zeros(3, 2, 2), dim_names=["x"])
    with pytest.raises(ValueError, match="1-d"):
        write_ipc(p, {"v": bridge.zeros(3)}, dim_names={"v": ["x"]})
    with pytest.raises(ValueError, match="not among the tensors"):
        write_ipc(p, {"v": bridge.zeros(3, 2)}, dim_names={"w": ["x"]})
    with pytest.raises(TypeError, match="sequence of str"):
        write_ipc(p, bridge.zeros(3, 2), dim_names="x")
    with pytest.raises(TypeError, match="mapping of column names"):
        write_ipc(p, {"v": bridge.zeros(3, 2)}, dim_names=["x"])
    with pytest.raises(ValueError, match="open for reading"):
        write_ipc(pa.BufferReader(b"x"), bridge.zeros(3, 2))
    assert not p.exists()  # every check runs before the sink is opened


def test_read_errors(tmp_path: Path) -> None:
    p = tmp_path / "r"
    write_ipc(p, {"a": bridge.zeros(3, 2)})
    with pytest.raises(ValueError, match="power of two"):
        read_ipc(p, alignment=48)
    with pytest.raises(ValueError, match="power of two"):
        read_ipc(p, alignment=0)
    with pytest.raises(TypeError, match="alignment must be an int"):
        read_ipc(p, alignment=64.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown Arrow IPC format"):
        read_ipc(p, format="parquet")
    with pytest.raises(ValueError, match=r"no column named 'z'.*\['a'\]"):
        read_ipc(p, columns=["z"])
    with pytest.raises(TypeError, match="columns must be a sequence of str"):
        read_ipc(p, columns="a")
    with pytest.raises(TypeError, match="reads a path"):
        read_ipc(3.5)
    with pytest.raises(TypeError, match="must be bool"):
        read_ipc(p, copy=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="open for writing"):
        read_ipc(pa.BufferOutputStream())
    with pytest.raises(pa.ArrowInvalid):  # a ValueError
        read_ipc(p, format="stream")
    assert issubclass(pa.ArrowInvalid, ValueError)


def test_read_errors_name_the_column(tmp_path: Path) -> None:
    table = pa.table({"ok": pa.array([1, 2]), "s": pa.array(["x", "y"]),
                      "n": pa.array([1.0, None])})  # fmt: skip
    with pa.OSFile(str(tmp_path / "x"), "wb") as f, pa.ipc.new_file(f, table.schema) as w:
        w.write_table(table)
    assert read_ipc(tmp_path / "x", columns=["ok"])["ok"].tolist() == [1, 2]
    with pytest.raises(TypeError, match="column 's'"):
        read_ipc(tmp_path / "x", columns=["s"])
    with pytest.raises(ValueError, match=r"column 'n'.*nulls"):
        read_ipc(tmp_path / "x", columns=["n"])
    dup = pa.Table.from_arrays([pa.array([1]), pa.array([2])], names=["d", "d"])
    with pa.OSFile(str(tmp_path / "d"), "wb") as f, pa.ipc.new_file(f, dup.schema) as w:
        w.write_table(dup)
    with pytest.raises(ValueError, match=r"\['d'\] occur more than once"):
        read_ipc(tmp_path / "d")


def test_metadata_is_the_canonical_extension(tmp_path: Path) -> None:
    """Other readers see arrow.fixed_shape_tensor with the canonical metadata."""
    write_ipc(tmp_path / "x", bridge.zeros(2, 3, 4, dtype=bridge.float32))
    field = pa.ipc.open_file(str(tmp_path / "x")).schema.field("tensor")
    assert field.type.extension_name == "arrow.fixed_shape_tensor"
    assert field.type.shape == [3, 4] and field.type.permutation in (None, [0, 1])
    assert field.type.value_type == pa.float32()


# ----------------------------------------------------- files that lie


def _lie(data: bytes, old: int, new: int) -> bytes:
    """``data`` with every 8-aligned int64 ``old`` (the lengths of a record batch
    and of its field nodes, which pyarrow checks against each other) set to
    ``new``: a record batch that says its columns are longer than their buffers."""
    out = bytearray(data)
    hits = [p for p in range(0, len(out) - 7, 8) if struct.unpack_from("<q", out, p)[0] == old]
    assert hits, f"no int64 {old} in the IPC data"
    for p in hits:
        struct.pack_into("<q", out, p, new)
    return bytes(out)


ROWS = 37  # a row count no buffer length or offset of these files shares


def _lying(fmt: str, kind: str) -> bytes:
    sink = io.BytesIO()
    if kind == "1-d":
        write_ipc(sink, {"x": bridge.arange(ROWS)}, format=fmt)
        return _lie(sink.getvalue(), ROWS, 1000)
    write_ipc(sink, {"x": bridge.arange(ROWS * 6, dtype=bridge.float32).reshape(ROWS, 2, 3)},
              format=fmt)  # fmt: skip
    # the list's length and its values child's, so that the two agree
    return _lie(_lie(sink.getvalue(), ROWS, 1000), ROWS * 6, 6000)


@pytest.mark.parametrize("kind", ["1-d", "fixed_shape_tensor"])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("source", ["mapped-path", "read-path", "bytes", "buffer"])
@pytest.mark.parametrize("copy", [False, True], ids=["view", "copy"])
def test_a_column_longer_than_its_buffer_is_refused(
    tmp_path: Path, kind: str, fmt: str, source: str, copy: bool
) -> None:
    """pyarrow's reader trusts the record batch's lengths: a column said to hold
    1000 rows over a buffer of 37 would be a tensor over the bytes past the
    buffer, past the end of the file (the stream's buffer is the last thing in
    it: SIGBUS on a mapping, a heap over-read from bytes). Each extent is
    checked against its buffer before anything is viewed or copied."""
    data = _lying(fmt, kind)
    values = 1000 * (1 if kind == "1-d" else 6)
    assert values * (8 if kind == "1-d" else 4) > len(data)  # the lie reaches past the file
    (tmp_path / "lie").write_bytes(data)
    src: Any = {"mapped-path": tmp_path / "lie", "read-path": tmp_path / "lie", "bytes": data,
                "buffer": pa.py_buffer(data)}[source]  # fmt: skip
    # pyarrow reads the lie without complaint: the check is bridge's to make
    table = (pa.ipc.open_file if fmt == "file" else pa.ipc.open_stream)(data).read_all()
    assert len(table) == 1000
    with pytest.raises(ValueError, match=r"column 'x': the IPC data is corrupt or truncated.*"
                                         r"too small"):  # fmt: skip
        read_ipc(src, memory_map=source != "read-path", copy=copy)


def test_a_negative_length_is_refused() -> None:
    """A negative length, which pyarrow reads without complaint (its ``len()`` of
    the column then fails with SystemError), is a clear ValueError."""
    sink = io.BytesIO()
    write_ipc(sink, {"x": bridge.arange(ROWS)}, format="stream")
    with pytest.raises(ValueError, match=r"column 'x': the IPC data is corrupt.*negative"):
        read_ipc(_lie(sink.getvalue(), ROWS, -1))


# Run in a subprocess, so that a crash is a failed test and not a dead pytest.
# Each variant of a few valid IPC files is cut short, has bytes overwritten, an
# aligned int64 set to a large value, or one length of its metadata made larger
# everywhere it occurs (a consistent lie); read_ipc of it must raise one of the
# clear exceptions or give tensors that lie inside the Arrow buffers of their
# column (the tables read_ipc reads are recorded to know those buffers).
_FUZZ = r"""
import collections, faulthandler, io, os, random, struct, sys, time
import numpy as np
import pyarrow as pa
import bridge
import bridge.interop.arrow.ipc as ipc
from bridge.arrow import read_ipc, write_ipc

faulthandler.enable()
tmp, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tables = []
_read_table = ipc._read_table

def recording(*args, **kwargs):
    tables.append(_read_table(*args, **kwargs))
    return tables[-1]

ipc._read_table = recording

def base_files():
    n = 37
    columns = [{"v": bridge.arange(n), "h": bridge.arange(n, dtype=bridge.int16)},
               {"m": bridge.arange(n * 6, dtype=bridge.float32).reshape(n, 2, 3)},
               {"b": bridge.arange(n, dtype=bridge.int8).to(bridge.bool)}]
    out = []
    for cols in columns:
        for fmt in ("file", "stream"):
            sink = io.BytesIO()
            write_ipc(sink, cols, format=fmt)
            out.append(sink.getvalue())
    values = pa.array(np.arange(8, dtype=np.uint16))
    t = pa.table({"l": pa.FixedSizeListArray.from_arrays(values, 2),
                  "u": pa.array(np.arange(4, dtype=np.uint32))})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, t.schema) as w:
        w.write_table(t)
    out.append(sink.getvalue().to_pybytes())
    return out

def mutate(rng, data):
    d = bytearray(data)
    kind = rng.randrange(5)
    if kind in (0, 3):
        for _ in range(rng.randint(1, 4)):
            d[rng.randrange(len(d))] = rng.randrange(256)
    if kind == 1:
        pos = rng.randrange(0, len(d) - 8) & ~7
        d[pos:pos + 8] = struct.pack("<q", rng.choice([1000, 2**20, 2**31, 2**40, 2**62, -1, 0]))
    if kind in (2, 3):
        del d[rng.randrange(len(d)):]
    if kind == 4:
        words = {p: struct.unpack_from("<q", d, p)[0] for p in range(0, len(d) - 7, 8)}
        counts = collections.Counter(v for v in words.values() if 0 < v <= 4096)
        old = rng.choice(sorted(v for v, k in counts.items() if k > 1) or sorted(counts))
        new = old + rng.choice([1, 8, 1000, 2**20])
        for p, v in words.items():
            if v == old:
                d[p:p + 8] = struct.pack("<q", new)
    return bytes(d)

def extent(t):
    if t.numel() == 0:
        return None
    hi = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (hi + 1) * t.itemsize

def spans(table, name):
    return [(b.address, b.address + b.size)
            for c in table.column(name).chunks for b in c.buffers() if b is not None]

clear = (ValueError, TypeError, OSError, NotImplementedError, pa.ArrowException)
rng = random.Random(seed)
bases = base_files()
outcomes, bad = collections.Counter(), []
for i in range(count):
    data = mutate(rng, rng.choice(bases))
    copy = rng.random() < 0.25
    source = data
    if i % 10 == 0:  # a memory-mapped file now and then
        source = os.path.join(tmp, "f.arrow")
        with open(source, "wb") as f:
            f.write(data)
    del tables[:]
    try:
        got = read_ipc(source, copy=copy)
    except clear as e:
        outcomes[type(e).__name__] += 1
        continue
    except BaseException as e:
        bad.append(f"variant {i}: {type(e).__name__}: {e}")
        continue
    outcomes["read"] += 1
    for name, t in got.items():
        span = extent(t)
        if copy:
            t.clone()  # every byte read once more
        elif span and not any(lo <= span[0] and span[1] <= hi for lo, hi in spans(tables[-1], name)):
            bad.append(f"variant {i}: column {name!r} views {span} outside its Arrow buffers")
print("outcomes", dict(outcomes))
print("\n".join(bad[:20]))
sys.exit(1 if bad else 0)
"""


def test_truncated_and_corrupted_files_give_clear_errors(tmp_path: Path) -> None:
    """2,000 truncated and byte-flipped variants of a few valid IPC files (a fixed
    seed): only clear exceptions (ValueError, pyarrow's ArrowInvalid and OSError,
    TypeError for a type with no tensor form), never a crash, never a tensor
    over bytes outside its column's buffers."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(_FUZZ), str(tmp_path), "2000", "19"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    # the variants reach every outcome: reads, and refusals by pyarrow and by bridge
    assert "'read'" in r.stdout and "'ValueError'" in r.stdout and "'ArrowInvalid'" in r.stdout
