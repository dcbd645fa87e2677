"""A user's script: what mypy --strict sees of bridge's public API (tests/test_typing.py)."""

from __future__ import annotations

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

# bridge.convert: a type as the destination types the result; a module or a name gives an object.
assert_type(bridge.convert(np.zeros(3), np.ndarray), np.ndarray[Any, Any])
assert_type(bridge.convert(np.zeros(3), bridge.Tensor), bridge.Tensor)
assert_type(bridge.convert(t, "numpy", copy=False, readonly="error"), object)
assert_type(bridge.convert(t, np), object)
warning_kind: str = bridge.CopyWarning("copied", "layout", ()).kind
