"""Tensors and storages through ``multiprocessing``, Dask and Ray.

Plain pickling is :mod:`bridge.core.serialize` (by value, out of band at
protocol 5), which is all Dask and Ray need: both pickle with protocol 5 and
a buffer callback, so sending is zero-copy with no registration (Ray hands
back read-only views of its object store). This module adds what only
``multiprocessing`` can do, registered with its ``ForkingPickler`` (Queue,
Pipe, Pool, Process arguments; fork, spawn and forkserver):

- **sent means shared, at any size** (torch's rule): a storage handed to
  another process travels as shared memory and arrives as a view of the same
  memory, so a write in one process is seen by the other. A storage bridge
  allocated moves into shared memory first, in place (``share_memory_()``:
  the bytes are copied before the storage switches blocks); a foreign one
  (NumPy's memory, an import) is copied into new shared memory, as its owner
  cannot follow it, and stays read-only if it was;
- shared memory travels as a file descriptor (``multiprocessing.reduction.DupFd``)
  to a nameless block (``memfd``), so nothing is left in ``/dev/shm`` when
  either side is killed. Small storages are slices of shared arenas
  (:func:`bridge.core.owners.shared_block`), and the receiver maps each block
  once (a cache by inode), so ten thousand small tensors cost a few
  descriptors, not one each (pytorch#973);
- a ``from_file(shared=True)`` storage travels by path and is mapped again;
  the receiver never creates or extends the file.

The receiver trusts nothing in the pickle: the descriptor must be a shared
memory file whose size (``fstat``) covers the block, offsets and sizes must
lie inside it, and a wrong argument is a TypeError/ValueError, never a read
outside the mapping.

The move into shared memory happens while pickling, which for a Queue is its
feeder thread: call ``share_memory_()`` before sending a tensor you keep
writing, so that no write lands in the old block while it moves.

The registration costs nothing at ``import bridge``: ``multiprocessing`` (and
the socket machinery its ``reduction`` module pulls in) is not imported for
it. When ``multiprocessing.reduction`` is already loaded, bridge registers at
once; otherwise a one-shot finder on ``sys.meta_path`` registers right after
that module is first imported, and then removes itself.

As with torch, a process that sends a shared storage must stay alive until
the receiver has unpickled it (``multiprocessing`` hands descriptors over
through the sender); otherwise the receiver gets a RuntimeError saying so.

torch's DataLoader: ``torch.utils.data.default_collate`` batches bridge
tensors into a bridge tensor (:func:`collate_tensors`, registered in torch's
``default_collate_fn_map``), as it batches torch's own: stacked along a new
first dimension, and in a worker process written straight into shared
memory, so the batch reaches the main process as a descriptor, with no copy
on the way (``share_memory_()`` has nothing to move). bridge does not import
torch for this: the registration happens when
``torch.utils.data._utils.collate`` is (or has been) imported, by the same
one-shot finder as ``multiprocessing.reduction``'s.

Dask's hooks: ``sizeof`` (registered through dask's ``dask.sizeof`` entry
point) is the tensor's ``nbytes``; ``__dask_tokenize__`` is on the tensor.
"""

from __future__ import annotations

import os
import stat
import sys
import threading
import weakref
from typing import TYPE_CHECKING, Any

from bridge.core import serialize
from bridge.core import strides as S
from bridge.core.factories import empty
from bridge.core.native import _C
from bridge.core.owners import FileMapping, SharedMemoryBlock, address_of, shared_block
from bridge.core.storage import UntypedStorage
from bridge.core.tensor import Tensor

if TYPE_CHECKING:  # importlib.abc alone costs more than this module (importlib.resources)
    from collections.abc import Callable, Sequence
    from importlib.abc import Loader
    from importlib.machinery import ModuleSpec
    from types import ModuleType

__all__ = ["register_dask_sizeof", "collate_tensors"]

# Blocks this process has mapped, by (st_dev, st_ino) of their descriptor, and
# storages made here, by (id(block), offset, nbytes, readonly): a block sent
# again arrives as the same mapping, a storage sent again as the same one.
_blocks: weakref.WeakValueDictionary[tuple[int, int], SharedMemoryBlock] = weakref.WeakValueDictionary()
_received: weakref.WeakValueDictionary[tuple[int, ...], UntypedStorage] = weakref.WeakValueDictionary()
_lock = threading.Lock()


def _new_lock_in_child() -> None:
    # A lock another thread held at fork stays held in the child, where that
    # thread does not exist: the child's next receive would wait forever. The
    # mappings themselves are inherited and stay valid.
    global _lock
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)


def _shared_block(st: UntypedStorage) -> SharedMemoryBlock | None:
    owner = st.owner
    return owner if isinstance(owner, SharedMemoryBlock) else None


def _reduce_storage(st: UntypedStorage) -> tuple[Any, tuple[Any, ...]]:
    if not st._host_accessible:
        return serialize.reduce_storage(st, 4)  # raises the device error
    if st.filename is not None and st.is_shared():
        owner = st.owner
        offset = st.data_ptr() - owner.address if isinstance(owner, FileMapping) else 0
        return _rebuild_file, (st.filename, offset, st.nbytes(), st.is_readonly)
    if _shared_block(st) is None:
        if st.resizable():
            st.share_memory_()  # torch's rule: the sender's storage moves to shared memory
        else:
            st = _copy_to_shared(st)
    block = _shared_block(st)
    if block is None:  # another thread gave the storage a new record meanwhile
        raise RuntimeError("the storage changed owner while it was being sent; send it again")
    view = memoryview(st)  # address, size and read-only bit in one step
    offset = address_of(view) - block.address
    return _rebuild_shared, (_block_fd(block), block.nbytes, offset, view.nbytes, view.readonly)


class _BlockFd:
    """One shared block's descriptor in one message. The sender makes one per
    block per ``dumps`` (pickle's memo holds it for that long), so a batch of
    storages carved from one arena sends one descriptor, not one each; the
    receiver detaches it once and maps the block once for all of them."""

    __slots__ = ("__weakref__", "block", "dupfd")

    def __init__(self, dupfd: Any, block: SharedMemoryBlock | None = None) -> None:
        self.dupfd = dupfd
        self.block = block  # the sender's block; on arrival, the block mapped here

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return _BlockFd, (self.dupfd,)

    def receive(self, block_nbytes: int) -> SharedMemoryBlock:
        """The block this descriptor reaches, mapped here (once)."""
        if self.block is None:
            detach = getattr(self.dupfd, "detach", None)
            if not callable(detach):
                raise TypeError(f"a shared bridge storage travels with a DupFd, got {type(self.dupfd).__name__}")
            try:
                fd = detach()
            except OSError as e:  # the sender's resource sharer is gone
                raise RuntimeError(
                    "a shared bridge storage could not be received: the sending process exited "
                    "before this one took its file descriptor (keep the sender alive until the "
                    f"receiver has the tensor, as with torch): {e}"
                ) from e
            if type(fd) is not int or fd < 0:
                raise ValueError(f"a shared bridge storage needs a valid file descriptor, got {fd!r}")
            try:
                self.block = _map_block(fd, block_nbytes)
            except BaseException:
                os.close(fd)
                raise
        return self.block


# (id(block), thread) -> the _BlockFd of the dumps running in that thread
_sending: weakref.WeakValueDictionary[tuple[int, int], _BlockFd] = weakref.WeakValueDictionary()


def _block_fd(block: SharedMemoryBlock) -> _BlockFd:
    from multiprocessing.reduction import DupFd  # loaded: ForkingPickler is calling

    key = (id(block), threading.get_ident())
    handle = _sending.get(key)
    if handle is None or handle.block is not block:
        handle = _sending[key] = _BlockFd(DupFd(block.fd), block)
    return handle


def _copy_to_shared(st: UntypedStorage) -> UntypedStorage:
    src = memoryview(st)
    block, offset = shared_block(src.nbytes)
    out = UntypedStorage._new(block.address + offset, src.nbytes, block, shared=True)
    memoryview(out)[:] = src
    if src.readonly:  # a copy of memory lent read-only stays read-only
        out._make_readonly()
    return out


def _rebuild_shared(handle: Any, block_nbytes: int, offset: int, nbytes: int, readonly: bool) -> UntypedStorage:
    if not isinstance(handle, _BlockFd):
        raise TypeError(f"a shared bridge storage travels with its block's descriptor, got {type(handle).__name__}")
    for name, value in (("block size", block_nbytes), ("offset", offset), ("size", nbytes)):
        if type(value) is not int or value < 0:
            raise ValueError(f"a shared bridge storage's {name} must be an int >= 0, got {value!r}")
    if offset + nbytes > block_nbytes:
        raise ValueError(
            f"a shared bridge storage of {nbytes} bytes at offset {offset} reaches past its "
            f"block of {block_nbytes} bytes"
        )
    block = handle.receive(block_nbytes)
    if offset + nbytes > block.nbytes:
        raise ValueError(
            f"a shared bridge storage of {nbytes} bytes at offset {offset} reaches past the "
            f"{block.nbytes} bytes of its block mapped here"
        )
    key = (id(block), offset, nbytes, int(bool(readonly)))
    with _lock:
        hit = _received.get(key)
        if hit is not None and hit.owner is block:
            return hit
        st = UntypedStorage._new(block.address + offset, nbytes, block, shared=True, readonly=bool(readonly))
        _received[key] = st
        return st


def _map_block(fd: int, block_nbytes: int) -> SharedMemoryBlock:
    """The block behind a received descriptor, checked against ``fstat``: the
    one mapped here already (``fd`` is then closed), or a new mapping that
    takes ``fd``."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("a shared bridge storage's descriptor is not a shared-memory file")
    if block_nbytes > info.st_size:
        raise ValueError(
            f"a shared bridge storage's block claims {block_nbytes} bytes, but its memory holds "
            f"{info.st_size}"
        )
    with _lock:
        block = _blocks.get((info.st_dev, info.st_ino))
        if block is not None:
            os.close(fd)
            return block
        block = _blocks[info.st_dev, info.st_ino] = SharedMemoryBlock(block_nbytes, fd=fd)
        return block


def _rebuild_file(path: str, offset: int, nbytes: int, readonly: bool) -> UntypedStorage:
    if not isinstance(path, str):
        raise TypeError(f"a file-backed bridge storage travels with its path as a str, got {type(path).__name__}")
    for name, value in (("offset", offset), ("size", nbytes)):
        if type(value) is not int or value < 0:
            raise ValueError(f"a file-backed bridge storage's {name} must be an int >= 0, got {value!r}")
    return UntypedStorage._map_file(path, offset, nbytes, shared=True, grow=False, readonly=bool(readonly))


def _reduce_tensor(t: Tensor) -> tuple[Any, tuple[Any, ...]]:
    # The storage itself travels (by descriptor or by path; see _reduce_storage):
    # views stay aliased, and the geometry is read in one step with it.
    st, dt, shape, strides, offset = t._parts(BufferError)
    return serialize._rebuild_tensor, (st, dt.name, shape, strides, offset)


def _register(reduction: ModuleType) -> None:
    reduction.ForkingPickler.register(UntypedStorage, _reduce_storage)
    reduction.ForkingPickler.register(Tensor, _reduce_tensor)


def collate_tensors(batch: Sequence[Any], *, collate_fn_map: Any = None) -> Tensor:
    """torch's ``default_collate`` for bridge tensors (registered in
    ``torch.utils.data._utils.collate.default_collate_fn_map``; a custom
    ``collate_fn_map`` may name it too): the tensors of ``batch`` stacked
    along a new first dimension into a new contiguous bridge tensor. In a
    DataLoader worker process (``torch.utils.data.get_worker_info()`` is set)
    the batch is allocated in shared memory, as torch does for its tensors,
    so sending it to the main process copies nothing. Every element must be a
    bridge tensor in host memory, all of one shape and one dtype: TypeError
    for another type or mixed dtypes, ValueError for mixed shapes, an empty
    batch or a tensor outside host memory."""
    del collate_fn_map  # torch passes it to every collate function; tensors hold no nested items
    if len(batch) == 0:
        raise ValueError("collate_tensors() needs at least one tensor")
    first = batch[0]
    for i, t in enumerate(batch):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"default_collate: a batch of bridge tensors holds a {type(t).__name__} at index {i}"
            )
        if not t._storage._host_accessible:
            raise ValueError(
                f"default_collate batches bridge tensors in host memory; the tensor at index {i} "
                f"is on {t.device}"
            )
        if t.dtype is not first.dtype:
            raise TypeError(
                f"default_collate: a batch of bridge tensors has one dtype; index 0 is "
                f"{first.dtype}, index {i} is {t.dtype}"
            )
        if t.shape != first.shape:
            raise ValueError(
                f"default_collate stacks bridge tensors of equal shape; index 0 has "
                f"{tuple(first.shape)}, index {i} has {tuple(t.shape)}"
            )
    shape = (len(batch), *first.shape)
    data = sys.modules.get("torch.utils.data")  # loaded: torch is the caller
    if data is not None and data.get_worker_info() is not None:
        # A worker: write the batch into shared memory at once, so that the
        # pickler that sends it has nothing to move (torch's collate_tensor_fn).
        nbytes = len(batch) * first.numel() * first.dtype.itemsize
        block, offset = shared_block(nbytes)
        st = UntypedStorage._new(block.address + offset, nbytes, block, shared=True)
        out: Tensor = _C.make_tensor(st, first.dtype, shape, S.contiguous_strides(shape), 0)
    else:
        out = empty(shape, dtype=first.dtype)
    for i, t in enumerate(batch):
        out[i].copy_(t)
    return out


def _register_collate(collate: ModuleType) -> None:
    collate.default_collate_fn_map[Tensor] = collate_tensors


# The modules bridge registers with once they are imported: name -> what to do
# with the module object, right after it has run.
_HOOKS: dict[str, Callable[[ModuleType], None]] = {
    "multiprocessing.reduction": _register,
    "torch.utils.data._utils.collate": _register_collate,
}


class _RegisteringLoader:
    """The real loader of a module of :data:`_HOOKS`, calling its hook once
    the module has run; everything else (``get_source``, which tracebacks and
    ``inspect`` use, ...) goes to the real loader."""

    def __init__(self, inner: Loader, hook: Callable[[ModuleType], None]) -> None:
        self._inner = inner
        self._hook = hook

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        self._hook(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _RegisterOnImport:
    """One finder for every module of :data:`_HOOKS` not imported yet: finds
    one through the other finders and wraps its loader, once per module, and
    removes itself from ``sys.meta_path`` when none is left (not the audit
    hook ``import``, which fires before the module runs)."""

    def __init__(self, pending: set[str]) -> None:
        self.pending = pending

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in self.pending:
            return None
        spec: ModuleSpec | None = None
        for finder in [f for f in sys.meta_path if f is not self]:
            find = getattr(finder, "find_spec", None)
            spec = find(fullname, path, target) if find is not None else None
            if spec is not None:
                break
        self.pending.discard(fullname)
        # Removing itself shifts the list the import system is walking, so it
        # may skip the next finder: harmless, every finder was asked above.
        if not self.pending and self in sys.meta_path:
            sys.meta_path.remove(self)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec  # nothing to wrap: the import goes on (or fails) as without bridge
        spec.loader = _RegisteringLoader(spec.loader, _HOOKS[fullname])  # type: ignore[assignment]  # a Loader by duck typing (importlib.abc costs an import)
        return spec


def _install() -> None:
    pending = set()
    for name, hook in _HOOKS.items():
        module = sys.modules.get(name)
        if module is not None:
            hook(module)
        else:
            pending.add(name)
    if pending and not any(isinstance(f, _RegisterOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterOnImport(pending))


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
