"""UntypedStorage: a flat run of bytes on a device, kept alive by one owner object.

The model is ``torch.UntypedStorage``: tensors are views of a storage, and a
storage is one ownership record ``(data pointer, nbytes, device, read-only,
owner)`` held in C (``bridge._C.StorageBase``). The owner is the single
Python object whose life keeps the memory valid (see
:mod:`bridge.core.owners`); exporters hold it, never the storage.
"""

from __future__ import annotations

import errno
import mmap
import operator
import os
from typing import Any, SupportsIndex

import numpy as np

from bridge._native import lib
from bridge.core import dtypes as _dtypes
from bridge.core.device import device
from bridge.core.native import _C
from bridge.core.owners import BufferExport, FileMapping, shared_block

__all__ = ["UntypedStorage", "MAX_NBYTES", "check_nbytes", "empty_cache"]

_U8 = np.dtype(np.uint8)

# The largest byte count a storage can have: sizes are int64 in DLPack and
# Arrow, and Py_ssize_t in CPython's buffers (cdefs/bridge.h).
MAX_NBYTES: int = lib.BRIDGE_MAX_NBYTES


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


def empty_cache() -> int:
    """Give back to the system the freed host blocks bridge keeps for reuse,
    and return their bytes (0 when it keeps none).

    A block of 128 KiB or more that bridge allocated (a copy, a new storage)
    is not freed at once when its last owner lets go: it is kept for the next
    allocation of about its size, up to ``BRIDGE_HOST_CACHE`` bytes in all
    (256 MiB by default; ``0`` turns the cache off; ``k``, ``m``, ``g``
    suffixes read as powers of 1024), so that a loop converting the same
    shapes step after step does not fault its pages in again each step (as
    ``torch.cuda.empty_cache`` releases what torch's CUDA allocator keeps).
    Blocks in use are never touched; memory other libraries allocated is not
    bridge's to keep. Safe from any thread."""
    freed: int = _C.empty_host_cache()
    return freed


class UntypedStorage(_C.StorageBase):
    """A contiguous block of bytes on a device, shared by every tensor that views it.

    ``UntypedStorage(n)`` allocates ``n`` uninitialised bytes (64-byte aligned);
    ``UntypedStorage(seq)`` copies a sequence of byte values. Zero-copy
    constructors: :meth:`from_buffer`, :meth:`from_file`; interop modules make
    storages over foreign memory with an owner that keeps it alive.

    Writes to a read-only storage raise ValueError. Storages bridge allocated
    are resizable; resizing foreign memory raises ValueError.
    """

    __slots__ = ()

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
        self._allocate(check_nbytes(nbytes))
        if data is not None:
            self._host_array()[:] = data

    @classmethod
    def _new(cls, data: int, nbytes: int, owner: Any, **record: Any) -> UntypedStorage:
        """A storage with the given ownership record (see ``StorageBase._adopt``)."""
        self = cls.__new__(cls)
        self._adopt(data, nbytes, owner, **record)
        return self

    # ------------------------------------------------------------ factories

    @classmethod
    def from_buffer(cls, buffer: Any, *, offset: int = 0, count: int = -1) -> UntypedStorage:
        """A zero-copy storage over ``count`` bytes (all by default) of a
        C-contiguous buffer-protocol object, starting ``offset`` bytes in.

        The storage keeps ``buffer`` alive (exported, so it cannot resize) and
        is read-only when the buffer is (``bytes`` stay immutable). Unlike
        ``torch.UntypedStorage.from_buffer``, nothing is copied. Raises
        TypeError for objects without the buffer protocol, ValueError for
        non-contiguous buffers and out-of-range offset/count.
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
            raise ValueError(f"offset {offset} + count {count} exceeds the buffer's {total} bytes")
        owner = BufferExport(mv)
        return cls._new(owner.address + offset, count, owner, readonly=mv.readonly)

    @classmethod
    def from_file(cls, filename: str | os.PathLike[str], shared: bool = False, nbytes: int = 0) -> UntypedStorage:
        """A storage that memory-maps ``nbytes`` bytes of a file (``torch.UntypedStorage.from_file``;
        with ``nbytes=0`` bridge maps the whole file, where torch maps nothing).

        ``shared=True`` maps the file shared: writes reach the file and other
        mappings, and the file is created or extended to ``nbytes`` bytes when
        needed. ``shared=False`` maps it copy-on-write: writes stay private and
        the file is never modified (it needs to exist and hold ``nbytes`` bytes).
        Raises FileNotFoundError/PermissionError from the OS, IsADirectoryError
        for a directory, and ValueError for a negative nbytes or a file too small.
        """
        path = os.fspath(filename)
        nbytes = operator.index(nbytes)
        if nbytes < 0:
            raise ValueError(f"nbytes must be non-negative, got {nbytes}")
        return cls._map_file(path, 0, nbytes or None, shared=shared, grow=shared)

    @classmethod
    def _map_file(cls, path: str, offset: int, nbytes: int | None, *, shared: bool, grow: bool,
                  readonly: bool = False) -> UntypedStorage:  # fmt: skip
        """A storage over bytes ``[offset, offset + nbytes)`` of the file at
        ``path`` (``nbytes=None``: to the end), mapped shared or copy-on-write.
        ``grow=True`` creates or extends the file to reach that far (what
        ``from_file(shared=True)`` promises); otherwise a file too small is a
        ValueError and no file is created or changed, as for a path that came
        from another process. ``readonly`` maps read-only (the file may be)."""
        if os.path.isdir(path):
            raise IsADirectoryError(
                errno.EISDIR, f"from_file() maps a regular file, but {path!r} is a directory", path
            )
        flags = os.O_RDONLY if readonly or not shared else os.O_RDWR
        fd = os.open(path, flags | (os.O_CREAT if grow else 0), 0o644)
        try:
            file_size = os.fstat(fd).st_size
            if nbytes is None:
                nbytes = max(file_size - offset, 0)
            end = offset + nbytes
            if end > file_size:
                if not grow:
                    raise ValueError(
                        f"file {path!r} holds {file_size} bytes, fewer than the {end} asked for "
                        "(shared=False never extends a file)" if not shared else
                        f"file {path!r} holds {file_size} bytes, fewer than the {end} the storage "
                        "reaches (bridge does not create or extend a file it was sent)"
                    )
                os.ftruncate(fd, end)
            if nbytes == 0:
                empty = cls(0)
                empty._adopt(empty.data_ptr(), 0, empty.owner, filename=path, shared=shared,
                             readonly=readonly)  # fmt: skip
                return empty
            access = mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE if shared else mmap.ACCESS_COPY
            mm = mmap.mmap(fd, end, access=access)
        finally:
            os.close(fd)
        owner = FileMapping(mm, path)
        return cls._new(owner.address + offset, nbytes, owner, filename=path, shared=shared, readonly=readonly)

    # ---------------------------------------------------------- properties

    def __len__(self) -> int:
        return self.nbytes()

    def element_size(self) -> int:
        """Always 1: the elements of an untyped storage are bytes."""
        return 1

    @property
    def is_cuda(self) -> bool:
        """Whether the memory is CUDA device memory."""
        return self._dlpack_device[0] == 2

    @property
    def is_cpu(self) -> bool:
        """Whether the memory is ordinary host memory."""
        return self._dlpack_device[0] == 1

    def is_pinned(self) -> bool:
        """Always False: bridge does not page-lock memory."""
        return False

    # -------------------------------------------------------------- access

    def _host_array(self) -> np.ndarray[Any, Any]:
        """A uint8 NumPy array over the bytes (through the storage's buffer,
        which holds the owner); RuntimeError off the host."""
        if not self._host_accessible:
            raise RuntimeError(f"storage on {self.device} cannot be read or written from the host")
        arr: np.ndarray[Any, Any] = np.frombuffer(memoryview(self), dtype=_U8)
        return arr

    def _check_writable(self) -> None:
        if self.is_readonly:
            raise ValueError("cannot write to a read-only storage (the memory was borrowed read-only)")

    def __getitem__(self, idx: Any) -> Any:
        """``s[i]`` is the byte value at ``i``; ``s[a:b]`` is a storage viewing those bytes."""
        if isinstance(idx, slice):
            out: UntypedStorage = self._slice(idx)  # bounds and address in one C step
            return out
        arr = self._host_array()  # one snapshot of the block: its size bounds the index
        i = _byte_index(idx, arr.size)
        return int(arr[i])

    def __setitem__(self, idx: Any, value: Any) -> None:
        """Set byte(s): ``s[i] = 7``, ``s[a:b] = 0`` or a sequence of byte values."""
        self._check_writable()
        arr = self._host_array()
        if not isinstance(idx, slice):
            idx = _byte_index(idx, arr.size)
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
        self._check_writable()
        dst, source = self._bytes(), src._bytes()
        if source.numel() != dst.numel():
            raise ValueError(f"copy_(): size mismatch, {source.numel()} bytes into {dst.numel()}")
        _C.copy_into(dst, source)  # overlapping storages too, as if through a temporary
        return self

    def clone(self) -> UntypedStorage:
        """A new, resizable CPU storage holding a copy of the bytes."""
        src = self._bytes()
        out = UntypedStorage(src.numel())
        _C.copy_into(out._bytes(), src)
        return out

    def _bytes(self) -> Any:
        """The bytes as a 1-d uint8 tensor (what the copy kernel copies); RuntimeError off the host."""
        if not self._host_accessible:
            raise RuntimeError(f"storage on {self.device} cannot be read or written from the host")
        return _C.make_tensor(self, _dtypes.uint8, (self.nbytes(),), (1,), 0)

    def cpu(self) -> UntypedStorage:
        """This storage when it is on the CPU; RuntimeError otherwise."""
        if self.is_cpu:
            return self
        raise RuntimeError(f"copying {self.device} memory to the host is not supported here")

    def byteswap(self, dtype: Any) -> None:
        """Reverse the byte order of every element of ``dtype`` in place (complex
        types swap each real/imaginary half). ValueError if the size is not a
        multiple of the element size."""
        dt = _dtypes.get_dtype(dtype)
        width = dt.itemsize // 2 if dt.is_complex else dt.itemsize
        if self.nbytes() % dt.itemsize:
            raise ValueError(f"storage of {self.nbytes()} bytes is not a whole number of {dt} elements")
        self._check_writable()
        if width > 1:
            self._host_array().view(_dtypes._BIT_DTYPES[width]).byteswap(inplace=True)

    def resize_(self, nbytes: int) -> UntypedStorage:
        """Resize in place, keeping the first min(old, new) bytes; new bytes are
        uninitialised. The data pointer changes; what was exported keeps the
        old bytes alive, and views that now reach past the end raise when used.
        Only storages bridge allocated can be resized: foreign, mapped and
        shared storages raise ValueError."""
        nbytes = check_nbytes(operator.index(nbytes))
        if not self.resizable():
            raise ValueError(
                f"cannot resize a storage that bridge did not allocate (owner: "
                f"{type(self.owner).__name__}); clone() it first"
            )
        self._allocate(nbytes, keep=True)  # the new block gets its bytes before the switch
        return self

    def share_memory_(self) -> UntypedStorage:
        """Move the bytes into nameless shared memory in place; no-op when
        already shared. Like PyTorch, the data pointer changes (small storages
        share a shared arena, see :func:`bridge.core.owners.shared_block`).
        The bytes are copied into the new block before the storage switches
        to it, in one step, so other threads never read unwritten memory; a
        write made through a view taken before the move (a NumPy array over
        the old block) is not carried over. Only storages bridge allocated
        move: for foreign memory the move would silently cut the link with its
        owner, so ValueError is raised (clone() first)."""
        if self.is_shared():
            return self
        if not self.resizable():
            raise ValueError(
                "share_memory_() would copy memory owned by "
                f"{type(self.owner).__name__} and cut the link with it; clone() it first"
            )
        n = self.nbytes()
        block, offset = shared_block(n)
        self._adopt(block.address + offset, n, block, shared=True, keep=True)
        return self

    # ------------------------------------------------------------ pickling

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        """Pickle support: the bytes by value (out of band at protocol 5)."""
        from bridge.core import serialize  # serialize builds on this module

        return serialize.reduce_storage(self, operator.index(protocol))

    def __deepcopy__(self, memo: dict[int, Any]) -> UntypedStorage:
        new = memo.get(id(self))
        if new is None:
            new = memo[id(self)] = self.clone()
        return new  # type: ignore[no-any-return]

    # ---------------------------------------------------------------- repr

    def __repr__(self) -> str:
        n = self.nbytes()
        head = f"[bridge.UntypedStorage(device={self.device}) of size {n}]"
        if not self._host_accessible:
            return head
        values = self._host_array()
        if n > 1000:
            lines = [f" {v}" for v in values[:3].tolist()] + [" ..."]
            lines += [f" {v}" for v in values[-3:].tolist()]
        else:
            lines = [f" {v}" for v in values.tolist()]
        return "\n".join([*lines, head])


_C._register("storage_class", UntypedStorage)


def _as_device(spec: Any) -> device:
    return spec if isinstance(spec, device) else device(spec)


def _byte_index(idx: Any, n: int) -> int:
    i = operator.index(idx)
    if not -n <= i < n:
        raise IndexError(f"index {i} out of range for storage of size {n}")
    return i


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
        raise ValueError("UntypedStorage() expects a flat sequence of byte values")
    return arr

