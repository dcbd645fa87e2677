"""Helpers of the Arrow tests (``test_arrow_*.py``): the Arrow type and format of
each dtype's 1-d export, the C struct behind a PyCapsule-interface capsule,
the address of an array's first value, and small makers of tensors and
pyarrow arrays. Importing it skips the importing module where pyarrow is
not installed."""

from __future__ import annotations

import gc
import sys
from typing import Any

import numpy as np
import pytest
from bridge._native import ffi
from pycapsule import capsule_ptr

import bridge

pa = pytest.importorskip("pyarrow")

#: The peers the tests import: loaded before the heap is frozen (lifetimes.frozen_heap).
PEERS = ("pyarrow", "polars", "nanoarrow", "duckdb", "torch")

# bridge dtype -> the Arrow type of its 1-d export
ARROW_TYPES: dict[str, tuple[Any, Any]] = {
    "int8": (bridge.int8, pa.int8()),
    "int16": (bridge.int16, pa.int16()),
    "int32": (bridge.int32, pa.int32()),
    "int64": (bridge.int64, pa.int64()),
    "uint8": (bridge.uint8, pa.uint8()),
    "uint16": (bridge.uint16, pa.uint16()),
    "uint32": (bridge.uint32, pa.uint32()),
    "uint64": (bridge.uint64, pa.uint64()),
    "float16": (bridge.float16, pa.float16()),
    "float32": (bridge.float32, pa.float32()),
    "float64": (bridge.float64, pa.float64()),
    "bool": (bridge.bool, pa.bool8()),
}
FORMATS = {
    "int8": "c",
    "int16": "s",
    "int32": "i",
    "int64": "l",
    "uint8": "C",
    "uint16": "S",
    "uint32": "I",
    "uint64": "L",
    "float16": "e",
    "float32": "f",
    "float64": "g",
    "bool": "c",
}

_STRUCT_OF = {
    b"arrow_schema": "struct ArrowSchema *",
    b"arrow_array": "struct ArrowArray *",
    b"arrow_device_array": "struct ArrowDeviceArray *",
    b"arrow_array_stream": "struct ArrowArrayStream *",
    b"arrow_device_array_stream": "struct ArrowDeviceArrayStream *",
}


def c_struct(capsule, name: bytes):
    """The C struct a PyCapsule-interface capsule points at, as a cffi pointer
    (the capsule stays the owner: its destructor still releases and frees it)."""
    return ffi.cast(_STRUCT_OF[name], capsule_ptr(capsule, name))


def exported_structs(t: bridge.Tensor, device: bool) -> tuple[Any, Any, Any, Any]:
    """``t``'s Arrow export (the device array's when ``device``): the two
    capsules, and the ArrowSchema and ArrowArray structs they point at."""
    schema, array = t.__arrow_c_device_array__() if device else t.__arrow_c_array__()
    s = c_struct(schema, b"arrow_schema")
    if device:
        a = ffi.addressof(c_struct(array, b"arrow_device_array").array)
    else:
        a = c_struct(array, b"arrow_array")
    return schema, array, s, a


def keepalive(t: bridge.Tensor) -> Any:
    """The object every Arrow export of ``t`` holds a reference to."""
    keep = t.untyped_storage().owner
    assert keep is not None
    return keep


def refs(obj: Any) -> int:
    gc.collect()
    return sys.getrefcount(obj)


def values_address(arr) -> int:
    """The address of a primitive (or bool8) array's first value: Array.buffers() ignores the offset."""
    if isinstance(arr.type, pa.BaseExtensionType):
        arr = arr.storage
    return arr.buffers()[1].address + arr.offset * arr.type.byte_width


def fst_values_address(arr) -> int:
    """The address of a FixedShapeTensorArray's (or FixedSizeListArray's) first value,
    both the list's offset and its values child's own offset applied."""
    lists = arr.storage if isinstance(arr.type, pa.BaseExtensionType) else arr
    values = lists.values  # ignores the list's offset, keeps its own
    if isinstance(values.type, pa.BaseExtensionType):
        values = values.storage
    first = values.offset + lists.offset * lists.type.list_size
    return values.buffers()[1].address + first * values.type.byte_width


def sample(dt, n: int = 7) -> bridge.Tensor:
    if dt is bridge.bool:
        return bridge.tensor([i % 3 != 1 for i in range(n)])
    return bridge.arange(n, dtype=bridge.int64).to(dt)


def spec_logical(physical: np.ndarray, perm) -> np.ndarray:
    """arrow.fixed_shape_tensor (CanonicalExtensions.rst): ``shape`` is the physical
    shape and logical dim i is physical dim ``permutation[i]``; dim 0 is the batch."""
    return physical.transpose(0, *(p + 1 for p in perm))


def fst_array(value_type, shape, values, permutation=None, dim_names=None, mask=None):
    typ = pa.fixed_shape_tensor(value_type, shape, permutation=permutation, dim_names=dim_names)
    size = int(np.prod(shape))
    storage = pa.FixedSizeListArray.from_arrays(values, size, mask=mask)
    return pa.ExtensionArray.from_storage(typ, storage)


class StreamOnly:
    """Forwards only ``__arrow_c_stream__``, as a DataFrame-like producer would."""

    def __init__(self, t: bridge.Tensor) -> None:
        self.t = t

    def __arrow_c_stream__(self, requested_schema=None):
        return self.t.__arrow_c_stream__(requested_schema)
