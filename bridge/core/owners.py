"""The owners of memory: the objects whose lives keep a storage's bytes valid.

A storage's ownership record (``bridge._C.StorageBase``, the struct
``StorageObject`` in ``cdefs/core/core.h``: pointer, size, device, read-only bit,
owner) names one owner, and every exporter (DLPack, buffers, NumPy, Arrow)
holds that owner, never the storage (``bridge_storage_owner`` in C answers
"what must an exporter hold"), so what was lent outlives a later
``resize_()``. A record is set in one place, ``bridge_storage_adopt`` (C;
``StorageBase._adopt`` from Python): "adopt" means exactly that. Each source
kind always gets the same owner kind. This module defines the owners made in
Python; the ones made in C are listed with the file that makes them:

=====================================  =========================================================
source                                 owner
=====================================  =========================================================
bridge's own allocation (``empty``,    a ``"bridge.memory"`` capsule that frees the block without
``clone``, ``resize_``, ...)           releasing the GIL (``cdefs/core/memory.c``)
any buffer-protocol object             :class:`BufferExport`: the buffer's export, held, so the
(``from_buffer``, ``frombuffer``)      exporter cannot resize under it
a file (``from_file``)                 :class:`FileMapping`
shared memory (``share_memory_``,      :class:`SharedMemoryBlock` (small storages share one:
a storage received from a process)     :func:`shared_block`)
a DLPack producer (``from_dlpack``,    none: the storage itself owns the producer's managed
``from_numpy``: NumPy arrays of every  tensor and calls its deleter exactly once when it dies
dtype travel through DLPack)           (``owner`` is then the storage; ``cdefs/core/storage.c``)
an Arrow C array (``from_arrow``)      an import guard whose destructor calls the producer's
                                       release exactly once (``cdefs/interop/arrow_import.c``)
``__cuda_array_interface__``           :class:`CudaArrayInterfaceOwner`
``__array_interface__`` / a pyarrow    the described object itself (it keeps its memory)
Buffer
CUDA memory bridge allocated (a copy   a ``CudaBlock`` that frees it with ``cuMemFree``
to the device)                         (``cdefs/interop/cuda.c``)
=====================================  =========================================================
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import weakref

from bridge._native import ffi
from bridge.core.native import _C

__all__ = ["ARENA_NBYTES", "ARENA_SLICE_MAX", "BufferExport", "CudaArrayInterfaceOwner", "FileMapping",
           "SharedMemoryBlock", "address_of", "shared_block"]  # fmt: skip


def address_of(buffer: object) -> int:
    """The address of a writable-or-not buffer's first byte (it stays valid while
    the buffer is exported)."""
    return int(ffi.cast("uintptr_t", ffi.from_buffer(buffer, require_writable=False)))


class BufferExport:
    """Owner of memory lent through the buffer protocol: the export itself
    (a ``memoryview``), held for as long as any view of the bytes lives, so
    the exporter (a ``bytearray``, an ``mmap``, ...) cannot resize or close
    under it."""

    __slots__ = ("_address", "export", "readonly")

    def __init__(self, view: memoryview) -> None:
        # A C capsule holds the export (_C.buffer_export): the garbage collector
        # clears a memoryview in a cycle even while it has exports, and the views
        # of its bytes in that cycle then point into released memory.
        self.export, self._address, self.readonly = _C.buffer_export(view)

    @property
    def address(self) -> int:
        """The first byte's address."""
        return self._address


class CudaArrayInterfaceOwner:
    """Owner of device memory imported through ``__cuda_array_interface__``:
    the source object, kept alive. ``stream`` is the stream the producer
    named (None: nothing pending), kept for inspection; what orders later
    exports is the storage's ``_stream``, set from it at import."""

    __slots__ = ("source", "stream")

    def __init__(self, source: object, stream: int | None) -> None:
        self.source = source
        self.stream = stream

    def __repr__(self) -> str:
        return f"CudaArrayInterfaceOwner({type(self.source).__name__}, stream={self.stream})"


class FileMapping:
    """Owner of a file-backed mapping; the mmap closes when the last view lets go."""

    __slots__ = ("mmap", "path", "pin")

    def __init__(self, mm: mmap.mmap, path: str) -> None:
        self.mmap = mm
        self.pin = ffi.from_buffer(mm, require_writable=False)  # keeps mm exported: no close
        self.path = path

    @property
    def address(self) -> int:
        """The first byte's address."""
        return int(ffi.cast("uintptr_t", self.pin))


class SharedMemoryBlock:
    """Owner of a block of shared memory that has no name, so nothing can leak.

    On Linux the block is a ``memfd`` (anonymous shared memory); elsewhere a
    POSIX shared-memory object unlinked as soon as it is opened. Either way
    only the file descriptor, kept open here, reaches the memory: it is what
    travels to other processes (``multiprocessing`` sends it with
    ``DupFd``), and when the last process holding it lets go the kernel
    frees the pages, also after SIGKILL. The pages are reserved at creation
    (``posix_fallocate``), so a full ``/dev/shm`` or memory limit is an
    OSError here, never a SIGBUS on a later write.
    """

    __slots__ = ("__weakref__", "_close", "fd", "mmap", "nbytes", "pin")

    def __init__(self, nbytes: int, *, fd: int | None = None) -> None:
        """A new zero-filled block of ``nbytes`` bytes, or (``fd`` given) the
        block behind a received descriptor, which this object then owns."""
        size = max(nbytes, 1)
        if fd is None:
            fd = _anonymous_shared_fd()
            try:
                os.ftruncate(fd, size)
                _reserve(fd, size)
            except BaseException:
                os.close(fd)
                raise
        self.fd = fd
        self._close = weakref.finalize(self, os.close, fd)
        self.nbytes = nbytes
        self.mmap = mmap.mmap(fd, size)
        self.pin = ffi.from_buffer(self.mmap)

    @property
    def address(self) -> int:
        """The first byte's address."""
        return int(ffi.cast("uintptr_t", self.pin))


#: Storages of at most this many bytes share arenas when they move to shared memory.
ARENA_SLICE_MAX = 1 << 16
#: The size of one arena of shared memory that small storages are carved from.
ARENA_NBYTES = 1 << 22

_arena_lock = threading.Lock()
_arena: SharedMemoryBlock | None = None
_arena_used = 0


def shared_block(nbytes: int) -> tuple[SharedMemoryBlock, int]:
    """``(block, offset)``: ``nbytes`` bytes of nameless shared memory at
    ``block.address + offset``, 64-byte aligned and zero-filled. A storage of
    more than :data:`ARENA_SLICE_MAX` bytes gets a block of its own; a smaller
    one a slice of a shared arena, so that thousands of small storages sent to
    other processes cost a few file descriptors, not one each (pytorch#973,
    #11201): each arena travels as one descriptor and each receiver maps it
    once. An arena's pages are freed when the last storage carved from it
    dies (slices are never reused while it lives), and a process that
    receives a slice can read the whole arena it belongs to."""
    global _arena, _arena_used
    if nbytes > ARENA_SLICE_MAX:
        return SharedMemoryBlock(nbytes), 0
    with _arena_lock:
        if _arena is None or _arena_used + nbytes > _arena.nbytes:
            _arena, _arena_used = SharedMemoryBlock(ARENA_NBYTES), 0
        offset = _arena_used
        _arena_used += max(-(-nbytes // 64) * 64, 64)
        return _arena, offset


def _forget_arena_in_child() -> None:
    # A forked child maps the parent's arena too: carving from it would hand
    # both processes the same bytes. The child starts its own.
    global _arena, _arena_lock, _arena_used
    _arena, _arena_lock, _arena_used = None, threading.Lock(), 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_arena_in_child)


def _anonymous_shared_fd() -> int:
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None:
        return int(memfd("bridge", getattr(os, "MFD_CLOEXEC", 1)))
    try:
        import _posixshmem  # type: ignore[import-not-found]
    except ImportError:
        raise RuntimeError("shared memory is not available on this platform") from None
    import secrets  # here: only this fallback needs it, and it costs hashlib at import

    name = "/bridge_" + secrets.token_hex(8)
    fd = int(_posixshmem.shm_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600))
    _posixshmem.shm_unlink(name)  # nameless from here on: nothing can leak
    return fd


def _reserve(fd: int, size: int) -> None:
    """Allocate the pages now: running out of shared memory is an error here."""
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is None:
        return
    try:
        fallocate(fd, 0, size)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG):
            raise OSError(
                e.errno,
                f"not enough shared memory for {size} bytes (on Linux: /dev/shm or the memory limit "
                f"is full): {os.strerror(e.errno)}",
            ) from None
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system that cannot reserve
            raise
