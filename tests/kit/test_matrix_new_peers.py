"""The matrix's newest peers, exercised for real: arro3, narwhals, datafusion
and duckdb (Arrow PyCapsules), cuda.core's StridedMemoryView (DLPack and its C
exchange API), installed by the test extra, and Modular MAX's ``Buffer`` (the
heavy extra: tested where it is installed). Each makes a case and takes one as
the matrix says, checked through the library's own API; then the matrix's
child processes run a few cells, and the findings asserted are what the
installed versions do (the grid's own rules find them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bridge.kit.matrix_grid import Cell, available, bridge_at_fault, culprits
from bridge.kit.matrix_layouts import produce
from bridge.kit.matrix_peers import CONSUMES, NotMade, consumer_entries, consumers
from bridge.kit.matrix_run import plan, run_matrix

ARROW = ("arro3", "narwhals", "datafusion", "duckdb")
NEWEST = (*ARROW, "cuda_core")

# MAX is in the heavy extra: tested where it is installed (make test's default
# install has no max), as tests/kit/test_matrix_peers.py tests tensorflow and warp.
heavy_max = pytest.mark.skipif(not available("max"), reason="max is in the heavy extra, not installed here")


def need(peer: str) -> None:
    assert available(peer), f"{peer} is in the test extra but not importable"


def cells_of(producers: list[str], consumer_peers: set[str], dtypes: tuple[str, ...] = ("float32",),
             protocols: tuple[str, ...] | None = None) -> list[Cell]:  # fmt: skip
    return run_matrix(plan(producers, consumer_entries(consumer_peers), dtypes, protocols))


def one(cells: list[Cell], **kw: object) -> Cell:
    found = [c for c in cells if all(getattr(c, k) == v for k, v in kw.items())]
    assert len(found) == 1, (kw, found)
    return found[0]


def take(peer: str, protocol: str, obj: Any) -> Any:
    return next(c for c in consumers({peer}) if c.protocol == protocol).take(obj)


def test_what_each_newest_peer_consumes_through() -> None:
    for peer in ARROW:
        assert CONSUMES[peer] == ("arrow",), peer
    assert CONSUMES["cuda_core"] == ("dlpack", "dlpack-c-api")
    assert CONSUMES["max"] == ("dlpack", "dlpack-copy")


@pytest.mark.parametrize("peer", ARROW)
def test_arrow_peers_make_the_case_flat(peer: str) -> None:
    """Each Arrow peer's object holds the case's 48 values, read with its own API."""
    need(peer)
    obj, expected = produce(peer, "float32", "contiguous", False)
    assert expected.shape == (48,)
    if peer == "arro3":
        from arro3.core import Array

        assert isinstance(obj, Array) and hasattr(obj, "__arrow_c_array__")
        got = obj.to_numpy()
    elif peer == "narwhals":
        assert hasattr(obj, "__arrow_c_stream__")
        got = obj.to_numpy()
    elif peer == "datafusion":
        got = obj.to_arrow_table().column("a").to_numpy()
    else:
        got = obj.fetchnumpy()["a"]
    assert np.array_equal(got, expected)
    with pytest.raises(NotMade, match="1-d"):  # Arrow data is 1-d: other layouts are n/a
        produce(peer, "float32", "transposed", False)


def test_arro3_wraps_numpy_memory_and_takes_any_capsule() -> None:
    need("arro3")
    import pyarrow as pa

    import bridge

    obj, _ = produce("arro3", "int64", "contiguous", False)
    assert pa.array(obj).buffers()[1].address == bridge.from_arrow(obj).data_ptr()  # one buffer, no copy
    t = bridge.tensor(np.arange(6.0))
    got = take("arro3", "arrow", t)
    assert np.array_equal(got.to_numpy(), np.arange(6.0)) and pa.array(got).buffers()[1].address == t.data_ptr()


def test_table_consumers_read_the_first_column() -> None:
    """narwhals, datafusion and duckdb take a table's stream; the first column is the case."""
    for peer in ("narwhals", "datafusion", "duckdb"):
        need(peer)
    source, expected = produce("datafusion", "float32", "contiguous", False)
    assert np.array_equal(take("narwhals", "arrow", source).to_native().column(0).to_numpy(), expected)
    assert np.array_equal(take("duckdb", "arrow", source).fetchnumpy()["a"], expected)
    assert np.array_equal(take("datafusion", "arrow", source).to_arrow_table().column(0).to_numpy(), expected)


def test_cuda_core_views_numpy_memory_in_every_layout() -> None:
    need("cuda_core")
    from cuda.core.utils import StridedMemoryView

    for layout in ("contiguous", "transposed", "stepped", "negative", "broadcast", "0-d", "zero-size"):
        obj, expected = produce("cuda_core", "float32", layout, False)
        assert isinstance(obj, StridedMemoryView) and tuple(obj.shape) == expected.shape, layout
        back = np.from_dlpack(obj)  # its own export, the same memory
        assert np.array_equal(back, expected) and (not expected.size or back.ctypes.data == obj.ptr), layout
    view, _ = produce("cuda_core", "float32", "negative", False)
    assert tuple(view.strides) == (-12, -2)  # (in elements, as DLPack's)


def test_cuda_core_takes_dlpack_and_the_exchange_api() -> None:
    need("cuda_core")
    import bridge

    t = bridge.tensor(np.arange(12.0).reshape(3, 4))[:, ::2]
    for protocol in ("dlpack", "dlpack-c-api"):
        v = take("cuda_core", protocol, t)
        assert v.ptr == t.data_ptr() and tuple(v.shape) == (3, 2) and tuple(v.strides) == (4, 2), protocol
    cells = cells_of(["bridge", "cuda_core"], {"cuda_core", "bridge"}, protocols=("dlpack", "dlpack-c-api"))
    c = one(cells, producer="bridge", consumer="cuda_core", protocol="dlpack-c-api", layout="negative", readonly=False)
    assert (c.verdict, c.path) == ("zero-copy", "exchange-api"), c
    back = one(cells, producer="cuda_core", consumer="bridge", protocol="dlpack", layout="stepped", readonly=False)
    assert (back.verdict, back.path) == ("zero-copy", "exchange-api"), back  # bridge reads the view's API
    assert not [c for c in cells if bridge_at_fault(c)]


def test_cuda_core_findings() -> None:
    """What the grid finds in cuda-core 1.2.2: its __dlpack__ refuses dl_device
    even for its own device (BufferError), it does not re-export the bfloat16
    it imported, and its exchange API's managed_tensor_from_py_object_no_sync
    then fails without setting a Python error (held to be cuda_core's)."""
    need("cuda_core")
    cells = cells_of(["cuda_core"], {"numpy", "bridge"}, dtypes=("float32", "bfloat16"),
                     protocols=("dlpack", "dlpack-device", "dlpack-c-api"))  # fmt: skip
    own_device = one(cells, consumer="numpy", protocol="dlpack-device", dtype="float32", layout="contiguous")
    assert own_device.verdict == "refused" and "dl_device" in own_device.detail, own_device
    bf16 = one(cells, consumer="bridge", protocol="dlpack", dtype="bfloat16", layout="contiguous")
    assert bf16.verdict == "refused" and "bfloat16" in bf16.detail, bf16
    api = one(cells, consumer="bridge", protocol="dlpack-c-api", dtype="bfloat16", layout="contiguous")
    assert (api.verdict, api.rule) == ("violation", "exceptions") and "[raised by cuda_core]" in api.detail, api
    assert culprits([api]) == ["cuda_core"] and not bridge_at_fault(api)


def test_arrow_findings() -> None:
    """arro3 reads a big-endian buffer as native (byte-order); datafusion and
    narwhals take record-batch streams only (a plain array is refused); duckdb
    copies what it takes."""
    for peer in ARROW:
        need(peer)
    cells = cells_of(["numpy", "arro3", "datafusion"], set(ARROW), protocols=("arrow",))
    swapped = one(cells, producer="numpy", consumer="arro3", layout="big-endian", readonly=False)
    assert (swapped.verdict, swapped.rule) == ("violation", "byte-order"), swapped
    assert culprits(cells)[cells.index(swapped)] == "arro3"
    for peer in ("datafusion", "narwhals"):
        assert one(cells, producer="arro3", consumer=peer, layout="contiguous").verdict == "refused", peer
        assert one(cells, producer="datafusion", consumer=peer, layout="contiguous").verdict == "zero-copy", peer
    assert one(cells, producer="arro3", consumer="arro3", layout="contiguous").verdict == "zero-copy"
    assert one(cells, producer="arro3", consumer="duckdb", layout="contiguous").verdict == "copy"
    assert not [c for c in cells if bridge_at_fault(c)]


@heavy_max
def test_max_wraps_numpy_memory_and_slices_it() -> None:
    from max.driver import Buffer

    obj, expected = produce("max", "float32", "contiguous", False)
    assert isinstance(obj, Buffer) and np.array_equal(obj.to_numpy(), expected)
    zero_d, expected = produce("max", "bfloat16", "0-d", False)
    assert zero_d.shape == () and str(zero_d.dtype).endswith("bfloat16")
    got = take("max", "dlpack", np.arange(12.0))
    assert np.array_equal(got.to_numpy(), np.arange(12.0))
    got[0] = 7.0  # (its own API writes through)
    assert float(got.to_numpy()[0]) == 7.0


@heavy_max
def test_max_findings() -> None:
    """What the grid finds in MAX 26.7: its slices export compact strides (its
    own to_numpy reads other values: the producer's violation, whatever the
    consumer), its import ignores the strides of producers it does not refuse
    by type (cuda.core's views), and it copies read-only NumPy memory."""
    need("cuda_core")
    cells = cells_of(["max", "numpy", "cuda_core"], {"max", "numpy", "bridge"}, protocols=("dlpack",))
    stepped = one(cells, producer="max", consumer="bridge", layout="stepped")
    assert (stepped.verdict, stepped.rule) == ("violation", "strides"), stepped
    assert stepped.detail.startswith("the producer misread") and not bridge_at_fault(stepped)
    assert culprits(cells)[cells.index(stepped)] == "max"
    ignored = one(cells, producer="cuda_core", consumer="max", layout="transposed")
    assert (ignored.verdict, ignored.rule) == ("violation", "strides"), ignored
    assert culprits(cells)[cells.index(ignored)] == "max"
    ro = one(cells, producer="numpy", consumer="max", layout="contiguous", readonly=True)
    assert (ro.verdict, ro.reason) == ("copy", "read-only"), ro
    assert one(cells, producer="numpy", consumer="max", layout="contiguous", readonly=False).verdict == "zero-copy"
    assert not [c for c in cells if bridge_at_fault(c)]
