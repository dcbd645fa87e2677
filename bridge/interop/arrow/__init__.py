"""Apache Arrow: buffers, arrays, tensors and the Arrow C Data Interface.

Export through the Arrow PyCapsule interface (C structs built and released in
cdefs/arrow_export.c from the tensor's C struct): ``Tensor.__arrow_c_schema__``,
``__arrow_c_array__``, ``__arrow_c_device_array__`` and ``__arrow_c_stream__``
(one chunk of the same array: a tensor is a column). A 1-d tensor is the primitive
Arrow type of its dtype (bool as the ``arrow.bool8`` extension, one byte per
value); an N-d tensor is an ``arrow.fixed_shape_tensor`` over a
FixedSizeList, the first dim being the batch. Every exported node holds its own
reference to the storage's owner; the release callbacks take the GIL and leave
Python alone once it is finalising.

Import: :func:`from_arrow` takes pyarrow objects (Buffer, Array, ChunkedArray,
Tensor, FixedShapeTensorArray, Table, RecordBatch), anything with
``__arrow_c_array__`` / ``__arrow_c_stream__`` / ``__arrow_c_device_array__``
(polars, nanoarrow, DuckDB results) and bare capsules. Imported structs are
moved into a guard whose release runs exactly once, when the last view dies.
Arrow data is immutable: imported tensors are read-only (mutable pyarrow
Buffers excepted).

pyarrow-object helpers: :func:`to_buffer`, :func:`to_array`, :func:`to_tensor`,
:func:`to_fixed_shape_tensor`.

pyarrow is optional (the ``arrow`` extra) and imported only on first use: the
C Data Interface above works without it; the pyarrow-object helpers and the
IPC functions raise ImportError naming ``pip install dlpack-bridge[arrow]``
when it is missing.

Arrow IPC (files and streams, the route across machines): :func:`write_ipc`
writes named tensors as the columns of one record batch; :func:`read_ipc` reads
them back as read-only views of the memory-mapped file (or as copies).
"""

from __future__ import annotations

from bridge.core.native import _C
from bridge.interop.arrow import imports as _imports  # noqa: F401 (registers from_arrow's general path)
from bridge.interop.arrow.export import to_array, to_buffer, to_fixed_shape_tensor, to_tensor
from bridge.interop.arrow.ipc import read_ipc, write_ipc
from bridge.interop.arrow.types import COLUMN_NAME

__all__ = [
    "from_arrow", "to_buffer", "to_array", "to_tensor", "to_fixed_shape_tensor", "COLUMN_NAME",
    "write_ipc", "read_ipc",
]

from_arrow = _C.from_arrow  # plain primitive pyarrow arrays in C; the rest in .imports
