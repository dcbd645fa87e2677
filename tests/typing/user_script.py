"""A user's script: what mypy --strict sees of bridge's public API (tests/test_typing.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, assert_type

import numpy as np
import pyarrow as pa

import bridge
import bridge.arrow
from bridge.kit.conformance_report import Report
from bridge.kit.plugin import ConformanceCheck

if TYPE_CHECKING:
    from typing_extensions import CapsuleType

    from bridge._C import NestedList, Scalar

t = bridge.arange(6).view(2, 3)
assert_type(t, bridge.Tensor)
assert_type(t.size(), tuple[int, ...])
assert_type(t.size(0), int)
assert_type(t.stride(), tuple[int, ...])
assert_type(t.stride(1), int)
assert_type(t[0, 0].item(), Scalar)
assert_type(t.tolist(), NestedList)
assert_type(t.__dlpack__(), CapsuleType)

n = bridge.from_numpy(np.zeros(3))
assert_type(n, bridge.Tensor)
assert_type(bridge.from_dlpack(np.zeros(3)), bridge.Tensor)

arr = pa.array([1, 2, 3])
assert_type(bridge.from_arrow(arr), bridge.Tensor)
assert_type(bridge.from_arrow(arr, with_mask=True), tuple[bridge.Tensor, bridge.Tensor])
assert_type(bridge.arrow.to_array(n), pa.Array[Any])
assert_type(bridge.arrow.to_buffer(n), pa.Buffer)
assert_type(bridge.arrow.to_tensor(n), pa.Tensor)
assert_type(bridge.arrow.to_fixed_shape_tensor(t), pa.FixedShapeTensorArray[Any])


def test_producer(dlpack_conformance: ConformanceCheck) -> None:
    report = dlpack_conformance(lambda: np.arange(6))
    assert_type(report, Report)


assert_type(bridge.check(lambda: np.arange(6)), Report)
assert_type(bridge.to_dlpack(t), CapsuleType)
assert_type(t.type(), str)
assert_type(t.type(bridge.float64), bridge.Tensor)
assert_type(t.is_contiguous(), bool)

# bridge.empty and bridge.zeros are C functions (cdefs/core/values.c), typed by bridge/_C.pyi.
assert_type(bridge.empty(2, 3), bridge.Tensor)
assert_type(bridge.empty((2, 3), dtype=bridge.int8, device="cpu", memory_format=bridge.contiguous_format), bridge.Tensor)
assert_type(bridge.zeros([2, 3], dtype="float64"), bridge.Tensor)

# bridge.convert: a type as the destination types the result; a module or a name gives an object.
assert_type(bridge.convert(np.zeros(3), np.ndarray), np.ndarray[Any, Any])
assert_type(bridge.convert(np.zeros(3), bridge.Tensor), bridge.Tensor)
assert_type(bridge.convert(t, "numpy", copy=False, readonly="error"), object)
assert_type(bridge.convert(t, np), object)
warning_kind: str = bridge.CopyWarning("copied", "layout", ()).kind

# bridge.convert's units (issue 34): a batch keeps its container, a table is a dict of columns
# (one array with stack=True), a stream of tables an iterator of those; mixed batches are objects.
arrays = {"x": np.zeros(3), "y": np.ones(3)}
assert_type(bridge.convert(arrays, bridge.Tensor), dict[str, bridge.Tensor])
assert_type(bridge.convert([np.zeros(3), n], np.ndarray), list[np.ndarray[Any, Any]])
assert_type(bridge.convert((n, n), bridge.Tensor, dtype="float32"), tuple[bridge.Tensor, ...])
assert_type(bridge.convert({"x": n, "label": "cat"}, bridge.Tensor), object)
table = pa.table({"a": [1.0]})
assert_type(bridge.convert(table, np.ndarray), dict[str, np.ndarray[Any, Any]])
assert_type(bridge.convert(table, bridge.Tensor, stack=True, dtype=np.float32), bridge.Tensor)
assert_type(bridge.convert(iter(table.to_batches()), bridge.Tensor), Iterator[dict[str, bridge.Tensor]])
assert_type(bridge.convert(iter(table.to_batches()), bridge.Tensor, stack=True), Iterator[bridge.Tensor])
assert_type(bridge.convert(n, np.ndarray, device="cpu", contiguous=True, writable=True), np.ndarray[Any, Any])
assert_type(bridge.arrow.read_ipc(b""), dict[str, bridge.Tensor])
assert_type(bridge.arrow.read_ipc(b"", batches=True), Iterator[dict[str, bridge.Tensor]])
