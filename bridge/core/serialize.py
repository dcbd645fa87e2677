"""Pickling and copying tensors and storages (within a process or to another).

A tensor travels as ``(storage, dtype, shape, strides, offset)``, whatever
part of its storage it views, and its storage travels whole: pickle memoizes
the storage object, so it is written once per ``dumps`` and every view of it
still shares it after ``loads`` (torch's rule, and the storage model's
promise: a dict of weights that are views of one flat buffer keeps its
aliasing). A user who wants only a view's bytes calls ``clone()`` first. A
storage travels by value: at protocol 5 as one :class:`pickle.PickleBuffer`
over its bytes, which a ``buffer_callback`` takes out of band without a copy
and ``loads`` views without a copy; below protocol 5 as a bytes copy in the
pickle. Read-only stays read-only. Device memory is refused (TypeError): copy
it to the host first, explicitly.

Everything read from a tensor or a storage to pickle it is read in one C step
(``Tensor._parts``, the storage's buffer export), so a ``set_()`` or
``resize_()`` in another thread cannot pair one block's address with another
block's size. Rebuilding checks its arguments: a pickle that is not a bridge
storage, a dtype bridge does not know, or geometry outside the storage is a
TypeError/ValueError, never a read outside the memory.

``multiprocessing`` does better than by value: see
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

__all__ = ["reduce_tensor", "reduce_storage", "deepcopy_tensor", "tokenize_tensor"]


def _check_host(device: Any, what: str) -> None:
    if not device.is_host_accessible:
        raise TypeError(
            f"cannot pickle a {device} {what}: bridge never reads device memory on the host; "
            "copy it explicitly first (.cpu())"
        )


def reduce_tensor(t: Tensor) -> tuple[Any, tuple[Any, ...]]:
    """``Tensor.__reduce_ex__``: the whole storage (memoized by pickle) and the
    geometry, read together in one step."""
    _check_host(t.device, "tensor")
    st, dt, shape, strides, offset = t._parts(BufferError)
    return _rebuild_tensor, (st, dt.name, shape, strides, offset)


def _rebuild_tensor(storage: UntypedStorage, dtype: str, shape: tuple[int, ...],
                    strides: tuple[int, ...], offset: int) -> Tensor:  # fmt: skip
    if not isinstance(storage, UntypedStorage):
        raise TypeError(f"a pickled bridge tensor needs an UntypedStorage, got {type(storage).__name__}")
    if not isinstance(dtype, str):
        raise TypeError(f"a pickled bridge tensor names its dtype by a str, got {type(dtype).__name__}")
    dt = _dtypes.get_dtype(dtype)
    if storage.nbytes() and storage.data_ptr() % dt.itemsize:
        # A buffer handed back at an address the dtype cannot live at: copied once, aligned.
        aligned = storage.clone()
        if storage.is_readonly:
            aligned._make_readonly()
        storage = aligned
    out: Tensor = _C.make_tensor(storage, dt, shape, strides, offset)
    return out


def reduce_storage(s: UntypedStorage, protocol: int) -> tuple[Any, tuple[Any, ...]]:
    """``UntypedStorage.__reduce_ex__``: the bytes by value (a PickleBuffer at
    protocol 5, out of band with a ``buffer_callback``)."""
    _check_host(s.device, "storage")
    view = memoryview(s)  # address, size and read-only bit in one step; holds the block
    readonly = view.readonly
    data: Any
    if protocol >= 5:
        data = pickle.PickleBuffer(view)
    else:
        data = bytes(view) if readonly else bytearray(view)
    return _rebuild_storage, (data, readonly)


def _rebuild_storage(data: Any, readonly: bool) -> UntypedStorage:
    """A storage over the buffer pickle hands back (no copy): writable only if
    the source was and this buffer is."""
    out = UntypedStorage.from_buffer(data)
    if readonly and not out.is_readonly:
        out._make_readonly()
    return out


def deepcopy_tensor(t: Tensor, memo: dict[int, Any]) -> Tensor:
    """``copy.deepcopy``: the storage's bytes copied once per deepcopy (views
    of one storage stay views of one copy), writable as NumPy's deepcopy is."""
    st, dt, shape, strides, offset = t._parts(RuntimeError)
    new = memo.get(id(st))
    if new is None:
        new = st.clone()
        memo[id(st)] = new
        memo.setdefault(id(memo), []).append(st)  # keep the key's object alive, as copy does
    out: Tensor = _C.make_tensor(new, dt, shape, strides, offset)
    return out


def tokenize_tensor(t: Tensor) -> tuple[Any, ...]:
    """``__dask_tokenize__``: a deterministic token from the dtype, geometry
    and a hash of the values (equal tensors, equal tokens)."""
    _check_host(t.device, "tensor")
    import hashlib  # here: only dask's tokenize needs it (OpenSSL's _hashlib is slow to load)

    values = t.contiguous()
    st, _, _, _, offset = values._parts(RuntimeError)
    lo = offset * values.itemsize
    # Sliced from one snapshot of the block (a memoryview slice never reads past it).
    digest = hashlib.blake2b(memoryview(st)[lo : lo + values.nbytes], digest_size=16)
    return ("bridge.Tensor", t.dtype.name, t.shape, t.stride(), digest.hexdigest())
