"""UntypedStorage: a flat run of bytes on a device, kept alive by one owner object.

The model is ``torch.UntypedStorage``: tensors are views of a storage, and a
storage is ``(data pointer, nbytes, device, owner)``. The owner is the single
Python object whose life keeps the memory valid: bridge's own aligned
allocation, a NumPy array, a buffer-protocol exporter, an mmap, a POSIX
shared-memory block, or (from other modules) an imported DLPack/Arrow guard.
"""

from __future__ import annotations

import errno
import mmap
import operator
import os
import secrets
import weakref
from typing import Any

import numpy as np

from bridge import _dtypes
from bridge._builtins import NS
from bridge._device import CPU, device
from bridge._native import ffi

__all__ = ["UntypedStorage"]

_U8 = np.dtype(np.uint8)
_alloc = NS["alloc"]


class _ArrayInterface:
    """A minimal ``__array_interface__`` exporter that keeps ``owner`` alive.

    NumPy arrays made from it have it as their base, so every NumPy view of a
    storage keeps the storage's owner (and so its memory) alive.
    """

    __slots__ = ("__array_interface__", "owner")

    def __init__(self, ptr: int, nbytes: int, readonly: bool, owner: object) -> None:
        self.__array_interface__ = {
            "version": 3,
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (ptr, readonly),
        }
        self.owner = owner


def byte_array(ptr: int, nbytes: int, readonly: bool, owner: object) -> np.ndarray[Any, Any]:
    """A 1-D uint8 NumPy array over host memory ``[ptr, ptr + nbytes)`` that keeps ``owner`` alive."""
    arr: np.ndarray[Any, Any] = np.asarray(_ArrayInterface(ptr, nbytes, readonly, owner))
    return arr


def _address(cdata: Any) -> int:
    return int(ffi.cast("uintptr_t", cdata))


# The largest byte count a storage can have: sizes are int64 in DLPack and
# Arrow, and Py_ssize_t in CPython's buffers.
MAX_NBYTES = 2**63 - 1


def check_nbytes(nbytes: int, what: str = "storage size") -> int:
    """``nbytes`` when it is a valid byte count; ValueError naming it otherwise."""
    if nbytes < 0:
        raise ValueError(f"{what} must be non-negative, got {nbytes}")
    if nbytes > MAX_NBYTES:
        raise ValueError(
            f"{what} of {nbytes} bytes is larger than the {MAX_NBYTES} bytes (2**63 - 1) a "
            "storage can address"
        )
    return nbytes


def _allocate(nbytes: int, zeroed: bool) -> tuple[int, Any, np.ndarray[Any, Any]]:
    """A fresh 64-byte aligned block: (address, owner, uint8 array).

    The owner is a C capsule that frees the block in its destructor without
    ever releasing the GIL, so dropping it is safe on any thread, also while
    the interpreter finalises."""
    owner, ptr = _alloc(check_nbytes(nbytes), zeroed)
    return ptr, owner, byte_array(ptr, nbytes, False, owner)


class _FileMapping:
    """Owner of a file-backed mapping; the mmap closes when the last view lets go."""

    __slots__ = ("mmap", "path", "pin")

    def __init__(self, mm: mmap.mmap, path: str) -> None:
        self.mmap = mm
        self.pin = ffi.from_buffer(mm, require_writable=False)
        self.path = path


class _SharedMemoryBlock:
    """Owner of a POSIX shared-memory block (mode 0600).

    The name is unlinked when this object dies, that is when the last storage
    or NumPy view of the block lets go (or at interpreter exit); the mapping
    itself lives as long as any view does.
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


def _shm_unlink(name: str) -> None:
    import _posixshmem  # type: ignore[import-not-found]

    try:
        _posixshmem.shm_unlink(name)
    except FileNotFoundError:
        pass


class UntypedStorage:
    """A contiguous block of bytes on a device, shared by every tensor that views it.

    ``UntypedStorage(n)`` allocates ``n`` uninitialised bytes (64-byte aligned);
    ``UntypedStorage(seq)`` copies a sequence of byte values. Zero-copy
    constructors: :meth:`from_buffer`, :meth:`from_file`; interop modules make
    storages over foreign memory with an owner that keeps it alive.

    Writes to a read-only storage raise ValueError. Storages bridge allocated
    are resizable; resizing foreign memory raises ValueError.
    """

    __slots__ = (
        "__weakref__",
        "_device",
        "_dldev",
        "_filename",
        "_nbytes",
        "_np",
        "_owner",
        "_ptr",
        "_readonly",
        "_resizable",
        "_shared",
    )

    _ptr: int
    _nbytes: int
    _device: device
    _dldev: tuple[int, int]  # (DLDeviceType, device_id), read by the C export path
    _owner: Any
    _np: np.ndarray[Any, Any] | None
    _readonly: bool
    _resizable: bool
    _filename: str | None
    _shared: bool

    def __init__(self, size: Any = 0, *, device: Any = "cpu") -> None:
        dev = _as_device(device)
        if dev.type != "cpu":
            raise RuntimeError(
                f"bridge allocates only CPU memory; {dev} memory enters through DLPack or "
                "__cuda_array_interface__"
            )
        data: np.ndarray[Any, Any] | None = None
        try:
            nbytes = operator.index(size)
        except TypeError:
            data = _bytes_from_sequence(size)
            nbytes = data.size
        ptr, owner, arr = _allocate(nbytes, zeroed=False)
        if data is not None:
            arr[:] = data
        self._init(ptr, nbytes, CPU, owner, arr, readonly=False, resizable=True)

    def _init(
        self,
        ptr: int,
        nbytes: int,
        dev: device,
        owner: Any,
        arr: np.ndarray[Any, Any] | None,
        *,
        readonly: bool,
        resizable: bool = False,
        filename: str | None = None,
        shared: bool = False,
    ) -> None:
        self._ptr = ptr
        self._nbytes = nbytes
        self._device = dev
        self._dldev = dev.to_dlpack()
        self._owner = owner
        self._np = arr
        self._readonly = readonly
        self._resizable = resizable
        self._filename = filename
        self._shared = shared

    @classmethod
    def _wrap(
        cls,
        ptr: int,
        nbytes: int,
        dev: device,
        owner: Any,
        *,
        readonly: bool,
        arr: np.ndarray[Any, Any] | None = None,
    ) -> UntypedStorage:
        """A storage over foreign memory kept alive by ``owner`` (for interop modules)."""
        self = object.__new__(cls)
        self._init(ptr, nbytes, dev, owner, arr, readonly=readonly)
        return self

    @classmethod
    def _allocate(cls, nbytes: int, *, zeroed: bool = False) -> UntypedStorage:
        """A fresh, resizable, 64-byte aligned CPU storage."""
        ptr, owner, arr = _allocate(nbytes, zeroed)
        self = object.__new__(cls)
        self._init(ptr, nbytes, CPU, owner, arr, readonly=False, resizable=True)
        return self

    # ------------------------------------------------------------ factories

    @classmethod
    def from_buffer(cls, buffer: Any, *, offset: int = 0, count: int = -1) -> UntypedStorage:
        """A zero-copy storage over ``count`` bytes (all by default) of a
        C-contiguous buffer-protocol object, starting ``offset`` bytes in.

        The storage keeps ``buffer`` alive and is read-only when the buffer is
        (``bytes`` stay immutable). Unlike ``torch.UntypedStorage.from_buffer``,
        nothing is copied. Raises TypeError for objects without the buffer
        protocol, ValueError for non-contiguous buffers and out-of-range
        offset/count.
        """
        try:
            mv = memoryview(buffer)
        except TypeError:
            raise TypeError(
                f"from_buffer() needs an object with the buffer protocol, got {type(buffer).__name__}"
            ) from None
        if not mv.c_contiguous:
            raise ValueError("from_buffer() needs a C-contiguous buffer; this one is strided")
        total = mv.nbytes
        offset = operator.index(offset)
        count = operator.index(count)
        if not 0 <= offset <= total:
            raise ValueError(f"offset {offset} is outside a buffer of {total} bytes")
        if count < 0:
            if count != -1:
                raise ValueError(f"count must be -1 or non-negative, got {count}")
            count = total - offset
        if offset + count > total:
            raise ValueError(
                f"offset {offset} + count {count} exceeds the buffer's {total} bytes"
            )
        full = np.frombuffer(mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv, dtype=_U8)
        arr = full[offset : offset + count]
        ptr = arr.__array_interface__["data"][0]
        self = object.__new__(cls)
        self._init(ptr, count, CPU, buffer, arr, readonly=mv.readonly)
        return self

    @classmethod
    def from_file(cls, filename: str | os.PathLike[str], shared: bool = False, size: int = 0) -> UntypedStorage:
        """A storage that memory-maps ``size`` bytes of a file (all of it when ``size`` is 0).

        ``shared=True`` maps the file shared: writes reach the file and other
        mappings, and the file is created or extended to ``size`` bytes when
        needed. ``shared=False`` maps it copy-on-write: writes stay private and
        the file is never modified (it needs to exist and hold ``size`` bytes).
        Raises FileNotFoundError/PermissionError from the OS and ValueError for
        a negative size or a file too small.
        """
        path = os.fspath(filename)
        size = operator.index(size)
        if size < 0:
            raise ValueError(f"size must be non-negative, got {size}")
        if os.path.isdir(path):
            raise IsADirectoryError(
                errno.EISDIR, f"from_file() maps a regular file, but {path!r} is a directory", path
            )
        flags = (os.O_RDWR | os.O_CREAT) if shared else os.O_RDONLY
        fd = os.open(path, flags, 0o644)
        try:
            file_size = os.fstat(fd).st_size
            if size == 0:
                size = file_size
            elif size > file_size:
                if not shared:
                    raise ValueError(
                        f"file {path!r} holds {file_size} bytes, fewer than the {size} asked for "
                        "(shared=False never extends a file)"
                    )
                os.ftruncate(fd, size)
            if size == 0:
                return cls._empty_file_storage(path, shared)
            access = mmap.ACCESS_WRITE if shared else mmap.ACCESS_COPY
            mm = mmap.mmap(fd, size, access=access)
        finally:
            os.close(fd)
        owner = _FileMapping(mm, path)
        ptr = _address(owner.pin)
        self = object.__new__(cls)
        arr = byte_array(ptr, size, False, owner)
        self._init(ptr, size, CPU, owner, arr, readonly=False, filename=path, shared=shared)
        return self

    @classmethod
    def _empty_file_storage(cls, path: str, shared: bool) -> UntypedStorage:
        ptr, owner, arr = _allocate(0, zeroed=False)
        self = object.__new__(cls)
        self._init(ptr, 0, CPU, owner, arr, readonly=False, filename=path, shared=shared)
        return self

    # ---------------------------------------------------------- properties

    def data_ptr(self) -> int:
        """Address of the first byte (0 only for some empty foreign storages)."""
        return self._ptr

    def nbytes(self) -> int:
        """Size in bytes."""
        return self._nbytes

    def size(self) -> int:
        """Size in bytes (an untyped storage's elements are bytes)."""
        return self._nbytes

    def __len__(self) -> int:
        return self._nbytes

    def element_size(self) -> int:
        """Always 1: the elements of an untyped storage are bytes."""
        return 1

    @property
    def device(self) -> device:
        """The device holding the memory."""
        return self._device

    @property
    def is_cuda(self) -> bool:
        """Whether the memory is CUDA device memory."""
        return self._device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        """Whether the memory is ordinary host memory."""
        return self._device.type == "cpu"

    @property
    def owner(self) -> Any:
        """The object whose lifetime keeps this memory valid."""
        return self._owner

    @property
    def is_readonly(self) -> bool:
        """Whether writes are forbidden (memory borrowed read-only)."""
        return self._readonly

    @property
    def filename(self) -> str | None:
        """The mapped file's path for :meth:`from_file` storages, else None."""
        return self._filename

    def resizable(self) -> bool:
        """Whether :meth:`resize_` may reallocate this storage (only memory bridge allocated)."""
        return self._resizable

    def is_shared(self) -> bool:
        """Whether the memory is shared between processes (shared memory or a shared file map)."""
        return self._shared

    def is_pinned(self) -> bool:
        """Always False: bridge does not page-lock memory."""
        return False

    # -------------------------------------------------------------- access

    def _host_array(self) -> np.ndarray[Any, Any]:
        """The uint8 NumPy array over the bytes; RuntimeError off the host."""
        arr = self._np
        if arr is None:
            if not self._device.is_host_accessible:
                raise RuntimeError(
                    f"storage on {self._device} cannot be read or written from the host"
                )
            arr = self._np = byte_array(self._ptr, self._nbytes, self._readonly, self._owner)
        return arr

    def _keepalive(self) -> Any:
        """The object an exporter must hold to keep these bytes valid.

        The NumPy byte view holds the buffer export of from_buffer storages (the
        bare exporter could be resized once unexported) and keeps the owner
        alive for every other kind; device memory has only its owner."""
        arr = self._np
        return self._owner if arr is None else arr

    def _check_writable(self) -> None:
        if self._readonly:
            raise ValueError("cannot write to a read-only storage (the memory was borrowed read-only)")

    def __getitem__(self, idx: Any) -> Any:
        """``s[i]`` is the byte value at ``i``; ``s[a:b]`` is a storage viewing those bytes."""
        arr = self._host_array()
        if isinstance(idx, slice):
            start, stop, step = idx.indices(self._nbytes)
            if step != 1:
                raise ValueError("storage slices must have step 1")
            stop = max(stop, start)
            view = arr[start:stop]
            out = object.__new__(UntypedStorage)
            out._init(
                self._ptr + start, stop - start, self._device, self._owner, view,
                readonly=self._readonly, filename=self._filename, shared=self._shared,
            )  # fmt: skip
            return out
        i = operator.index(idx)
        if not -self._nbytes <= i < self._nbytes:
            raise IndexError(f"index {i} out of range for storage of size {self._nbytes}")
        return int(arr[i])

    def __setitem__(self, idx: Any, value: Any) -> None:
        """Set byte(s): ``s[i] = 7``, ``s[a:b] = 0`` or a sequence of byte values."""
        self._check_writable()
        arr = self._host_array()
        if not isinstance(idx, slice):
            i = operator.index(idx)
            if not -self._nbytes <= i < self._nbytes:
                raise IndexError(f"index {i} out of range for storage of size {self._nbytes}")
        arr[idx] = _byte_values(value)

    def tolist(self) -> list[int]:
        """The bytes as a list of ints."""
        out: list[int] = self._host_array().tolist()
        return out

    # ------------------------------------------------------------- copies

    def fill_(self, value: int) -> UntypedStorage:
        """Set every byte to ``value`` (0..255) in place; returns self."""
        self._check_writable()
        self._host_array()[...] = _byte_values(value)
        return self

    def copy_(self, src: UntypedStorage, non_blocking: bool = False) -> UntypedStorage:
        """Copy the bytes of ``src`` (same size) into this storage; returns self."""
        if not isinstance(src, UntypedStorage):
            raise TypeError(f"copy_() expects an UntypedStorage, got {type(src).__name__}")
        if src._nbytes != self._nbytes:
            raise ValueError(f"copy_(): size mismatch, {src._nbytes} bytes into {self._nbytes}")
        self._check_writable()
        np.copyto(self._host_array(), src._host_array())
        return self

    def clone(self) -> UntypedStorage:
        """A new, resizable CPU storage holding a copy of the bytes."""
        out = UntypedStorage._allocate(self._nbytes)
        np.copyto(out._host_array(), self._host_array())
        return out

    def cpu(self) -> UntypedStorage:
        """This storage when it is on the CPU; RuntimeError otherwise."""
        if self._device.type == "cpu":
            return self
        raise RuntimeError(f"copying {self._device} memory to the host is not supported here")

    def byteswap(self, dtype: Any) -> None:
        """Reverse the byte order of every element of ``dtype`` in place (complex
        types swap each real/imaginary half). ValueError if the size is not a
        multiple of the element size."""
        dt = _dtypes.get_dtype(dtype)
        width = dt.itemsize // 2 if dt.is_complex else dt.itemsize
        if self._nbytes % dt.itemsize:
            raise ValueError(
                f"storage of {self._nbytes} bytes is not a whole number of {dt} elements"
            )
        self._check_writable()
        if width > 1:
            self._host_array().view(_dtypes._BIT_DTYPES[width]).byteswap(inplace=True)

    def resize_(self, nbytes: int) -> UntypedStorage:
        """Resize in place, keeping the first min(old, new) bytes; new bytes are
        uninitialised. The data pointer may change; existing views stay valid
        for the memory they already held. Only storages bridge allocated can be
        resized: foreign, mapped and shared storages raise ValueError."""
        nbytes = check_nbytes(operator.index(nbytes))
        if not self._resizable:
            raise ValueError(
                f"cannot resize a storage that bridge did not allocate (owner: "
                f"{type(self._owner).__name__}); clone() it first"
            )
        ptr, owner, arr = _allocate(nbytes, zeroed=False)
        keep = min(nbytes, self._nbytes)
        arr[:keep] = self._host_array()[:keep]
        self._init(ptr, nbytes, CPU, owner, arr, readonly=False, resizable=True)
        return self

    def share_memory_(self) -> UntypedStorage:
        """Move the bytes into POSIX shared memory (mode 0600) in place; no-op when
        already shared. Like PyTorch, the data pointer changes. Only storages
        bridge allocated move: for foreign memory the move would silently cut
        the link with its owner, so ValueError is raised (clone() first)."""
        if self._shared:
            return self
        if not self._resizable:
            raise ValueError(
                "share_memory_() would copy memory owned by "
                f"{type(self._owner).__name__} and cut the link with it; clone() it first"
            )
        block = _SharedMemoryBlock(self._nbytes)
        ptr = _address(block.pin)
        arr = byte_array(ptr, self._nbytes, False, block)
        arr[:] = self._host_array()
        self._init(ptr, self._nbytes, CPU, block, arr, readonly=False, shared=True)
        return self

    # ---------------------------------------------------------------- repr

    def __repr__(self) -> str:
        head = f"[bridge.UntypedStorage(device={self._device}) of size {self._nbytes}]"
        if not self._device.is_host_accessible:
            return head
        values = self._host_array()
        if self._nbytes > 1000:
            lines = [f" {v}" for v in values[:3].tolist()] + [" ..."]
            lines += [f" {v}" for v in values[-3:].tolist()]
        else:
            lines = [f" {v}" for v in values.tolist()]
        return "\n".join([*lines, head])


def _as_device(spec: Any) -> device:
    return spec if isinstance(spec, device) else device(spec)


def _byte_values(value: Any) -> np.ndarray[Any, Any]:
    arr = np.asarray(value)
    if arr.dtype.kind not in "iub":
        raise TypeError(f"storage bytes must be integers in 0..255, got {value!r}")
    if arr.size and (arr.min() < 0 or arr.max() > 255):
        raise ValueError(f"byte values must be in 0..255, got {value!r}")
    out: np.ndarray[Any, Any] = arr.astype(_U8, copy=False)
    return out


def _bytes_from_sequence(seq: Any) -> np.ndarray[Any, Any]:
    if isinstance(seq, (bytes, bytearray, memoryview)):
        return np.frombuffer(bytes(seq), dtype=_U8)
    if not hasattr(seq, "__iter__"):
        raise TypeError(f"UntypedStorage() expects a size or a sequence of bytes, got {seq!r}")
    arr = _byte_values(list(seq))
    if arr.ndim != 1:
        raise ValueError("UntypedStorage(sequence) expects a flat sequence of byte values")
    return arr
