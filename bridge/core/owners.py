"""The owners of memory: the objects whose lives keep a storage's bytes valid.

A storage's ownership record (``bridge._C.StorageBase``: pointer, size,
device, read-only bit, owner) names one owner, and every exporter (DLPack,
buffers, NumPy, Arrow) holds that owner, never the storage, so what was lent
outlives a later ``resize_()``. The owner kinds are:

- bridge's own allocations: a C capsule (``"bridge.memory"``) that frees the
  block in its destructor without releasing the GIL (made in C);
- an exporter's buffer (``from_buffer``, ``frombuffer``): a NumPy byte array
  holding the buffer export, so the exporter cannot resize under it;
- :class:`FileMapping` (``from_file``) and :class:`SharedMemoryBlock`
  (``share_memory_``), below;
- for a DLPack import, none: the storage owns the producer's managed tensor
  itself and its destructor calls the deleter exactly once (``owner`` is
  then the storage);
- an imported Arrow guard (made in C), whose destructor calls the producer's
  release exactly once;
- a foreign object described by an interface (a NumPy array, a pyarrow
  Buffer, the object behind ``__cuda_array_interface__``).
"""

from __future__ import annotations

import mmap
import os
import secrets
import weakref

from bridge._native import ffi

__all__ = ["FileMapping", "SharedMemoryBlock", "address_of"]


def address_of(buffer: object) -> int:
    """The address of a writable-or-not buffer's first byte (it stays valid while
    the buffer is exported)."""
    return int(ffi.cast("uintptr_t", ffi.from_buffer(buffer, require_writable=False)))


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
    """Owner of a POSIX shared-memory block (mode 0600).

    The name is unlinked when this object dies, that is when the last storage
    or view of the block lets go (or at interpreter exit); the mapping itself
    lives as long as any view does.
    """

    __slots__ = ("__weakref__", "mmap", "name", "pin")

    def __init__(self, nbytes: int) -> None:
        try:
            import _posixshmem  # type: ignore[import-not-found]
        except ImportError:
            raise RuntimeError("POSIX shared memory is not available on this platform") from None
        self.name = "/bridge_" + secrets.token_hex(8)
        fd = _posixshmem.shm_open(self.name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        weakref.finalize(self, _shm_unlink, self.name)
        try:
            os.ftruncate(fd, max(nbytes, 1))
            self.mmap = mmap.mmap(fd, max(nbytes, 1))
        finally:
            os.close(fd)
        self.pin = ffi.from_buffer(self.mmap)

    @property
    def address(self) -> int:
        """The first byte's address."""
        return int(ffi.cast("uintptr_t", self.pin))


def _shm_unlink(name: str) -> None:
    import _posixshmem  # type: ignore[import-not-found]

    try:
        _posixshmem.shm_unlink(name)
    except FileNotFoundError:
        pass
