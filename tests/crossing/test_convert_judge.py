"""The one judgement of a destination (``_C.convert_judge``, cdefs/crossing/convert.c):
each reason a record does not hold a tensor as it is, as data, which the fast
path and the general path both take (tests/crossing/test_convert_fast.py holds
the two paths to the same results)."""

from __future__ import annotations

import numpy as np
import pytest

import bridge
from bridge.core.native import _C
from bridge.crossing import convert as conv
from bridge.crossing.capabilities import DESTINATIONS


def judged(t: bridge.Tensor, name: str) -> set[str]:
    why = conv._judged(t, DESTINATIONS[name])
    return {k.removeprefix("JUDGE_") for k in dir(_C) if k.startswith("JUDGE_") and why & getattr(_C, k)}


def _readonly() -> bridge.Tensor:
    t = bridge.arange(12.0)  # bridge's memory: 64-byte aligned, so no alignment reason
    t.untyped_storage()._make_readonly()
    return t


def _on_cuda() -> bridge.Tensor:
    """A tensor that says it is CUDA memory (never read: the judgement reads no memory)."""
    a = np.zeros(4, np.float32)
    return _C.from_memory(a.ctypes.data, bridge.float32, (4,), (4,), a, False, (2, 0))


CASES = [
    ("row-major into torch", lambda: bridge.arange(6.0).reshape(2, 3), "torch", set()),
    ("negative strides into tvm_ffi", lambda: bridge.arange(6.0).flip(0), "tvm_ffi", set()),
    ("negative strides into torch", lambda: bridge.arange(6.0).flip(0), "torch", {"NEGATIVE", "OFFSET"}),
    ("transposed into onnxruntime", lambda: bridge.arange(6.0).reshape(2, 3).t(), "onnxruntime",
     {"NOT_CONTIGUOUS"}),
    ("a broadcast into jax", lambda: bridge.arange(3.0).expand(2, 3), "jax", {"ZERO_STRIDE", "NOT_COMPACT"}),
    ("negative strides into mlx", lambda: bridge.arange(6.0).flip(0), "mlx", {"NEGATIVE"}),
    ("bfloat16 into numpy", lambda: bridge.zeros(4, dtype=bridge.bfloat16), "numpy", {"DTYPE_VIEW"}),
    ("complex128 into tvm_ffi", lambda: bridge.zeros(4, dtype=bridge.complex128), "tvm_ffi", {"DTYPE"}),
    ("0-d into pyarrow", lambda: bridge.tensor(1.0), "pyarrow", {"ZERO_D"}),
    ("3-d into polars", lambda: bridge.zeros(2, 2, 2), "polars", {"NDIM"}),
    ("2-d bool into pyarrow", lambda: bridge.zeros(2, 2, dtype=bridge.bool), "pyarrow", {"ND_BOOL"}),
    ("rows of nothing into polars", lambda: bridge.zeros(2, 0), "polars", {"ZERO_WIDTH"}),
    ("read-only into torch", _readonly, "torch", {"READONLY"}),
    ("read-only into onnxruntime", _readonly, "onnxruntime", {"READONLY"}),
    ("read-only into jax", _readonly, "jax", {"ALIAS"}),
    ("read-only into numpy", _readonly, "numpy", set()),
    ("an offset into paddle", lambda: bridge.arange(6.0)[1:], "paddle", {"OFFSET"}),
    ("complex128 at 8 bytes into torch", lambda: bridge.from_numpy(np.ones(13)[1:].view(np.complex128)),
     "torch", {"ALIGNMENT"}),
    ("CUDA memory into numpy", _on_cuda, "numpy", {"DEVICE"}),
    ("a transposed read-only view into onnxruntime",
     lambda: _readonly().reshape(3, 4).t()[1:], "onnxruntime", {"NOT_CONTIGUOUS", "READONLY"}),
]  # fmt: skip


@pytest.mark.parametrize(("case", "make", "dest", "want"), CASES, ids=[c[0] for c in CASES])
def test_each_reason(case: str, make: object, dest: str, want: set[str]) -> None:
    assert judged(make(), dest) == want, case  # type: ignore[operator]


def test_bad_arguments() -> None:
    record = conv._SPECS["torch"]["record"]
    with pytest.raises(TypeError, match="convert_judge"):
        _C.convert_judge(record, np.zeros(3))  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        _C.convert_judge(object(), bridge.zeros(3))
    with pytest.raises(TypeError, match="spec: dict"):
        _C.convert_record([])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="spec has no devices"):
        _C.convert_record({k: v for k, v in conv._SPECS["torch"].items() if k != "devices"})
