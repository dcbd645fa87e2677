"""bridge.convert reads the sources data pipelines start with in C: a plain
primitive Arrow array (pyarrow, nanoarrow, a one-chunk ChunkedArray, a polars
Series) straight from its Arrow C structs, and a jax array on the host
through its buffer. Each is zero-copy by address, read-only, alive after the
source is gone, with the import counters balanced, and never enters the
general path (the convert_slow up-call); what such a source cannot be read as
(bools, nulls, chunks, nested types, a one-shot stream) goes to the general
path, which fixes or refuses it. Values are checked through each library's
own API.
"""

from __future__ import annotations

import gc
import warnings
from typing import Any

import numpy as np
import pytest
from convert_helpers import spy

import bridge
from bridge.core.native import _C

pa = pytest.importorskip("pyarrow")


def _arrow_sources() -> dict[str, Any]:
    base = np.arange(37, dtype=np.float32) * 1.5
    out: dict[str, Any] = {"pyarrow": pa.array(base), "pyarrow-slice": pa.array(base)[5:20],
                           "chunked-1": pa.chunked_array([pa.array(base)])}  # fmt: skip
    try:
        import nanoarrow as na

        out["nanoarrow"] = na.c_array(pa.array(base))
    except ImportError:
        pass
    try:
        import polars as pl

        out["polars"] = pl.Series(base)
    except ImportError:
        pass
    return out


def _address(x: Any) -> int:
    """The first value's address, through the source's own API."""
    if type(x).__module__.startswith("polars"):
        return int(x.to_numpy().__array_interface__["data"][0])
    if hasattr(x, "unsafe_buffer_pointer"):
        return int(x.unsafe_buffer_pointer())
    arr = pa.array(x) if not isinstance(x, (pa.Array, pa.ChunkedArray)) else x
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.chunk(0)
    return int(arr.buffers()[1].address + arr.offset * arr.type.bit_width // 8)


@pytest.mark.parametrize("name", list(_arrow_sources()))
@pytest.mark.parametrize("to", ["numpy", "bridge"])
def test_plain_arrow_arrays_are_read_in_c_zero_copy(name: str, to: str) -> None:
    x = _arrow_sources()[name]
    want = np.array(pa.array(x).to_numpy() if name == "nanoarrow" else x.to_numpy(), copy=True)
    ptr = _address(x)
    bridge.convert(x, to)  # registers the destination
    gc.collect()
    before = _C.stats()
    with spy() as calls, warnings.catch_warnings():
        warnings.simplefilter("error")
        out = bridge.convert(x, to)
    assert calls == []
    got = out if to == "numpy" else out.numpy()
    assert got.__array_interface__["data"][0] == ptr and np.array_equal(got, want)
    assert not got.flags.writeable  # Arrow data is immutable
    del x
    gc.collect()
    assert np.array_equal(got, want)  # alive without the source
    del out, got
    gc.collect()
    after = _C.stats()
    assert after["arrow_imports"] - before["arrow_imports"] == 1
    assert after["arrow_import_releases"] - before["arrow_import_releases"] == 1


def test_from_arrow_reads_the_same_way() -> None:
    for name, x in _arrow_sources().items():
        t = bridge.from_arrow(x)
        assert t.data_ptr() == _address(x) and t.is_readonly, name
        assert type(t.untyped_storage().owner).__name__ == "PyCapsule"  # the guard of the moved structs


def test_what_c_does_not_read_goes_to_the_general_path() -> None:
    cases = {
        "bools": (pa.array([True, False]), "unpack"),
        "chunks": (pa.chunked_array([[1.0], [2.0]]), "concatenate"),
        "fixed-shape": (pa.FixedSizeListArray.from_arrays(pa.array(np.arange(6, dtype=np.float32)), 3), None),
    }
    bridge.convert(pa.array([1.0]), np)
    for name, (x, kind) in cases.items():
        with spy() as calls, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            bridge.convert(x, np)
        assert len(calls) == 1, name
        kinds = [w.message.kind for w in caught if isinstance(w.message, bridge.CopyWarning)]  # type: ignore[union-attr]
        assert kinds == ([kind] if kind else []), name
    with pytest.raises(ValueError, match="nulls"):
        bridge.convert(pa.array([1, None]), np)


def test_a_one_shot_stream_is_read_once() -> None:
    """A RecordBatchReader's stream can be read once: from_arrow reads it whole
    (one column); convert reads it batch by batch (a stream of tables)."""
    b = pa.record_batch({"a": pa.array([1.0, 2.0])})
    one = pa.RecordBatchReader.from_batches(b.schema, [b])
    assert bridge.from_arrow(one).tolist() == [1.0, 2.0]
    three = pa.RecordBatchReader.from_batches(b.schema, [b, b, b])
    assert [d["a"].tolist() for d in bridge.convert(three, np)] == [[1.0, 2.0]] * 3
    assert list(bridge.convert(three, np)) == []  # read already


@pytest.mark.parametrize("dtype", ["float32", "int8", "bool", "float16", "complex64", "bfloat16"])
@pytest.mark.parametrize("to", ["numpy", "bridge"])
def test_host_jax_arrays_are_read_through_their_buffer(dtype: str, to: str) -> None:
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    x = jax.device_put(jnp.ones((4, 6), dtype=dtype) * 3, jax.devices("cpu")[0]).T
    want = np.asarray(x).copy()
    ptr = x.unsafe_buffer_pointer()
    bridge.convert(x, to)
    with spy() as calls, warnings.catch_warnings():
        warnings.simplefilter("error")
        out = bridge.convert(x, to)
    # (NumPy's bfloat16 is ml_dtypes' view of the bytes: a general-path fix, no copy)
    assert calls == [] or (to == "numpy" and dtype == "bfloat16")
    if to == "bridge":
        assert out.data_ptr() == ptr and out.is_readonly and out.shape == (6, 4)
    else:
        assert out.__array_interface__["data"][0] == ptr and not out.flags.writeable and out.shape == (6, 4)
    del x
    gc.collect()
    assert np.array_equal(np.asarray(out if to == "numpy" else out.numpy()), want)
