"""Tensors and storages through ``multiprocessing``, Dask and Ray.

Plain pickling is :mod:`bridge.core.serialize` (by value, out of band at
protocol 5), which is all Dask and Ray need: both pickle with protocol 5 and
a buffer callback, so sending is zero-copy with no registration (Ray hands
back read-only views of its object store). This module adds what only
``multiprocessing`` can do, registered with its ``ForkingPickler`` (Queue,
Pipe, Pool, Process arguments; fork, spawn and forkserver):

- a shared storage (``share_memory_()``, or received from another process)
  travels as a file descriptor (``multiprocessing.reduction.DupFd``) to its
  nameless shared memory, and arrives as a view of the same memory: a write
  in one process is seen by the other. The receiver maps each block once (a
  cache by device, inode, offset and size). Nothing has a name in
  ``/dev/shm``, so nothing is left behind when either side is killed;
- a storage that is not shared goes by value when it is small (at most
  ``SMALL_NBYTES``; file descriptors are a limited resource: pytorch#973); a
  larger one bridge allocated moves into shared memory first, in place, as
  torch does; a larger foreign one (NumPy's memory, say) is copied into a new
  shared block, as its owner cannot follow it;
- a ``from_file(shared=True)`` storage travels by path and is mapped again.

The registration costs nothing at ``import bridge``: ``multiprocessing`` (and
the socket machinery its ``reduction`` module pulls in) is not imported for
it. When ``multiprocessing.reduction`` is already loaded, bridge registers at
once; otherwise a one-shot finder on ``sys.meta_path`` registers right after
that module is first imported, and then removes itself.

As with torch, a process that sends a shared storage must stay alive until
the receiver has unpickled it (``multiprocessing`` hands descriptors over
through the sender); otherwise the receiver gets a RuntimeError saying so.

Dask's hooks: ``sizeof`` (registered through dask's ``dask.sizeof`` entry
point) is the tensor's ``nbytes``; ``__dask_tokenize__`` is on the tensor.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any

from bridge.core import serialize
from bridge.core.owners import SharedMemoryBlock
from bridge.core.storage import UntypedStorage
from bridge.core.tensor import Tensor

if TYPE_CHECKING:  # importlib.abc alone costs more than this module (importlib.resources)
    from collections.abc import Sequence
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["SMALL_NBYTES", "register_dask_sizeof"]

#: Storages up to this size travel through ``multiprocessing`` by value.
SMALL_NBYTES = 1 << 16

# (st_dev, st_ino, offset, nbytes, readonly) -> the storage made in this process
_received: weakref.WeakValueDictionary[tuple[int, ...], UntypedStorage] = weakref.WeakValueDictionary()
_lock = threading.Lock()


def _shared_block(st: UntypedStorage) -> SharedMemoryBlock | None:
    owner = st.owner
    return owner if isinstance(owner, SharedMemoryBlock) else None


def _reduce_storage(st: UntypedStorage) -> tuple[Any, tuple[Any, ...]]:
    # By value at protocol 4: ForkingPickler pickles at the default protocol,
    # which cannot carry a PickleBuffer before Python 3.14.
    if not st._host_accessible:
        return serialize.reduce_storage(st, 4)  # raises the device error
    if st.filename is not None and st.is_shared():
        return _rebuild_file, (st.filename, st.nbytes(), st.is_readonly)
    block = _shared_block(st)
    if block is None:
        if st.nbytes() <= SMALL_NBYTES:
            return serialize.reduce_storage(st, 4)
        if st.resizable():
            st.share_memory_()  # torch's rule: the sender's storage moves to shared memory
        else:
            st = _copy_to_shared(st)
        block = _shared_block(st)
        assert block is not None
    from multiprocessing.reduction import DupFd  # loaded: ForkingPickler is calling

    offset = st.data_ptr() - block.address
    info = os.fstat(block.fd)
    key = (info.st_dev, info.st_ino, offset, st.nbytes(), int(st.is_readonly))
    return _rebuild_shared, (DupFd(block.fd), block.nbytes, key)


def _copy_to_shared(st: UntypedStorage) -> UntypedStorage:
    block = SharedMemoryBlock(st.nbytes())
    out = UntypedStorage._new(block.address, st.nbytes(), block, shared=True)
    memoryview(out)[:] = memoryview(st)
    return out


def _rebuild_shared(df: Any, block_nbytes: int, key: tuple[int, ...]) -> UntypedStorage:
    try:
        fd = df.detach()
    except OSError as e:  # the sender's resource sharer is gone
        raise RuntimeError(
            "a shared bridge storage could not be received: the sending process exited before "
            "this one took its file descriptor (keep the sender alive until the receiver has the "
            f"tensor, as with torch): {e}"
        ) from e
    with _lock:
        hit = _received.get(key)
        if hit is not None:
            os.close(fd)
            return hit
        block = SharedMemoryBlock(block_nbytes, fd=fd)
        _, _, offset, nbytes, readonly = key
        st = UntypedStorage._new(block.address + offset, nbytes, block, shared=True, readonly=bool(readonly))
        _received[key] = st
        return st


def _rebuild_file(path: str, nbytes: int, readonly: bool) -> UntypedStorage:
    st = UntypedStorage.from_file(path, shared=True, nbytes=nbytes)
    if readonly:
        st._adopt(st.data_ptr(), st.nbytes(), st.owner, filename=path, shared=True, readonly=True)
    return st


def _reduce_tensor(t: Tensor) -> tuple[Any, tuple[Any, ...]]:
    st = t.untyped_storage()
    if not st._host_accessible or st.is_shared() or st.nbytes() <= SMALL_NBYTES or st.resizable():
        # the storage itself travels (by fd, by path or by value): views stay aliased
        return serialize._rebuild_tensor, (st, t.dtype.name, t.shape, t.stride(), t.storage_offset())
    return serialize.reduce_tensor(t)  # foreign memory: the view's own bytes, copied to shared memory


_REDUCTION = "multiprocessing.reduction"


def _register(reduction: ModuleType) -> None:
    reduction.ForkingPickler.register(UntypedStorage, _reduce_storage)
    reduction.ForkingPickler.register(Tensor, _reduce_tensor)


class _RegisteringLoader:
    """The real loader of ``multiprocessing.reduction``, registering bridge's
    reducers once the module has run; everything else (``get_source``, which
    tracebacks and ``inspect`` use, ...) goes to the real loader."""

    def __init__(self, inner: Loader) -> None:
        self._inner = inner

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        _register(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _RegisterOnImport:
    """One-shot: finds ``multiprocessing.reduction`` through the other finders
    and wraps its loader; removes itself from ``sys.meta_path`` on that first
    import (not the audit hook ``import``, which fires before the module runs)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != _REDUCTION:
            return None
        spec: ModuleSpec | None = None
        for finder in [f for f in sys.meta_path if f is not self]:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        # Removing itself shifts the list the import system is walking, so it
        # may skip the next finder: harmless, every finder was asked above.
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # nothing to wrap: the import goes on (or fails) as without bridge
        spec.loader = _RegisteringLoader(spec.loader)  # type: ignore[assignment]  # a Loader by duck typing (importlib.abc costs an import)
        return spec


def _install() -> None:
    module = sys.modules.get(_REDUCTION)
    if module is not None:
        _register(module)
    elif not any(isinstance(f, _RegisterOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterOnImport())


_install()


def register_dask_sizeof(sizeof: Any) -> None:
    """Dask's ``dask.sizeof`` entry point: a tensor's size is its ``nbytes``
    and a storage's its byte count."""

    @sizeof.register(Tensor)  # type: ignore[untyped-decorator]
    def _sizeof_tensor(t: Tensor) -> int:
        return int(t.nbytes)

    @sizeof.register(UntypedStorage)  # type: ignore[untyped-decorator]
    def _sizeof_storage(s: UntypedStorage) -> int:
        return int(s.nbytes())
