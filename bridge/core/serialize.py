"""Pickling and copying tensors and storages (within a process or to another).

A tensor travels as ``(storage, dtype, shape, strides, offset)``, so views of
one storage pickled in one ``dumps`` keep sharing memory after ``loads``
(pickle memoizes the storage object). A storage travels by value: at protocol
5 as one :class:`pickle.PickleBuffer` over its bytes, which a
``buffer_callback`` takes out of band without a copy and ``loads`` views
without a copy; below protocol 5 as a bytes copy in the pickle. A view that
reaches less than half of its storage travels alone, over a storage of just
its own bytes (pyarrow's slices ship their whole parent buffers,
apache/arrow#26685; bridge does not), and a sparse view (its elements fill
less than a quarter of its span) travels as a compact copy of its values. Read-only stays read-only. Device memory
is refused (TypeError): copy it to the host first, explicitly.

``multiprocessing`` does better than by value for shared storages: see
:mod:`bridge.interop.processes`.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any

from bridge.core import dtypes as _dtypes
from bridge.core.native import _C
from bridge.core.storage import UntypedStorage

if TYPE_CHECKING:
    from bridge.core.tensor import Tensor

__all__ = ["reduce_tensor", "reduce_storage", "deepcopy_tensor", "tokenize_tensor", "view_span"]


def _check_host(device: Any, what: str) -> None:
    if not device.is_host_accessible:
        raise TypeError(
            f"cannot pickle a {device} {what}: bridge never reads device memory on the host; "
            "copy it explicitly first (.cpu())"
        )


def view_span(t: Tensor) -> tuple[int, int]:
    """The byte range ``[lo, hi)`` of the storage the view reaches ((0, 0) when empty)."""
    if t.numel() == 0:
        return 0, 0
    isz = t.itemsize
    lo = hi = t.storage_offset()
    for n, s in zip(t.shape, t.stride()):
        if s > 0:
            hi += (n - 1) * s
        else:
            lo += (n - 1) * s
    return lo * isz, (hi + 1) * isz


def reduce_tensor(t: Tensor) -> tuple[Any, tuple[Any, ...]]:
    """``Tensor.__reduce_ex__``: the storage (or, for a view reaching less
    than half of it, a storage of the view's own bytes) and the geometry."""
    _check_host(t.device, "tensor")
    t._check_bounds(BufferError)
    st = t.untyped_storage()
    offset = t.storage_offset()
    lo, hi = view_span(t)
    if 4 * t.nbytes < hi - lo:
        # A sparse view (every k-th element): its values, compacted, are far
        # fewer bytes than its span. Copied, as NumPy does for strided arrays.
        t = t.contiguous()
        return _rebuild_tensor, (t.untyped_storage(), t.dtype.name, t.shape, t.stride(), 0)
    if 2 * (hi - lo) < st.nbytes():
        st = UntypedStorage._new(st.data_ptr() + lo, hi - lo, st.owner, readonly=st.is_readonly)
        offset -= lo // t.itemsize
    return _rebuild_tensor, (st, t.dtype.name, t.shape, t.stride(), offset)


def _rebuild_tensor(storage: UntypedStorage, dtype: str, shape: tuple[int, ...],
                    strides: tuple[int, ...], offset: int) -> Tensor:  # fmt: skip
    dt = _dtypes.get_dtype(dtype)
    if storage.nbytes() and storage.data_ptr() % dt.itemsize:
        # A buffer handed back at an address the dtype cannot live at: copied once, aligned.
        aligned = storage.clone()
        if storage.is_readonly:
            aligned._adopt(aligned.data_ptr(), aligned.nbytes(), aligned.owner, readonly=True)
        storage = aligned
    out: Tensor = _C.make_tensor(storage, dt, shape, strides, offset)
    return out


def reduce_storage(s: UntypedStorage, protocol: int) -> tuple[Any, tuple[Any, ...]]:
    """``UntypedStorage.__reduce_ex__``: the bytes by value (a PickleBuffer at
    protocol 5, out of band with a ``buffer_callback``)."""
    _check_host(s.device, "storage")
    readonly = s.is_readonly
    data: Any
    if protocol >= 5:
        data = pickle.PickleBuffer(s)
    else:
        view = memoryview(s)
        data = bytes(view) if readonly else bytearray(view)
    return _rebuild_storage, (data, readonly)


def _rebuild_storage(data: Any, readonly: bool) -> UntypedStorage:
    """A storage over the buffer pickle hands back (no copy): writable only if
    the source was and this buffer is."""
    out = UntypedStorage.from_buffer(data)
    if readonly and not out.is_readonly:
        out._adopt(out.data_ptr(), out.nbytes(), out.owner, readonly=True)
    return out


def deepcopy_tensor(t: Tensor, memo: dict[int, Any]) -> Tensor:
    """``copy.deepcopy``: the storage's bytes copied once per deepcopy (views
    of one storage stay views of one copy), writable as NumPy's deepcopy is."""
    st = t.untyped_storage()
    new = memo.get(id(st))
    if new is None:
        new = st.clone()
        memo[id(st)] = new
        memo.setdefault(id(memo), []).append(st)  # keep the key's object alive, as copy does
    out: Tensor = _C.make_tensor(new, t.dtype, t.shape, t.stride(), t.storage_offset())
    return out


def tokenize_tensor(t: Tensor) -> tuple[Any, ...]:
    """``__dask_tokenize__``: a deterministic token from the dtype, geometry
    and a hash of the values (equal tensors, equal tokens)."""
    _check_host(t.device, "tensor")
    import hashlib  # here: only dask's tokenize needs it (OpenSSL's _hashlib is slow to load)

    values = t.contiguous() if not t.is_contiguous() else t
    digest = hashlib.blake2b(memoryview(values.untyped_storage())[_byte_slice(values)], digest_size=16)
    return ("bridge.Tensor", t.dtype.name, t.shape, t.stride(), digest.hexdigest())


def _byte_slice(t: Tensor) -> slice:
    lo, hi = view_span(t)
    return slice(lo, hi)
