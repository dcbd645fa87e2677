"""DLPack capsules as the conformance checks see them, without trusting them.

:func:`inspect_capsule` reads the managed tensor behind an unconsumed capsule
(the struct type chosen by the capsule's *name*, never its bytes);
:class:`CountingDeleter` swaps a struct's deleter for bridge's counting test
deleter, so a second call is seen instead of freeing twice; :class:`Handmade`
builds structs, good or wrong on purpose, to feed consumers. Also the
dlpack.h facts the rules check against (names, flags, device types, dtypes)
and how values are read through a capsule and compared.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from bridge._native import ffi
from bridge.core.native import _C, _drivers
from bridge.core.strides import compact_strides, extent
from bridge.interop.dlpack import from_dlpack as _bridge_from_dlpack

__all__ = ["LEGACY", "VERSIONED", "FLAG_READ_ONLY", "FLAG_IS_COPIED", "DEVICE_TYPES", "HOST_DEVICES",
           "DTYPE_BITS", "CapsuleView", "inspect_capsule", "counting_deleter", "test_deleter_calls",
           "CountingDeleter", "young_gc", "Handmade", "read_values", "same_values", "dlpack_code_of",
           "numpy_dtype_of"]  # fmt: skip

LEGACY = "dltensor"
VERSIONED = "dltensor_versioned"
FLAG_READ_ONLY = 1
FLAG_IS_COPIED = 2

#: DLDeviceType values defined by dlpack.h v1.3.
DEVICE_TYPES = {1: "CPU", 2: "CUDA", 3: "CUDAHost", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI",
                10: "ROCM", 11: "ROCMHost", 12: "ExtDev", 13: "CUDAManaged", 14: "oneAPI",
                15: "WebGPU", 16: "Hexagon", 17: "MAIA", 18: "Trn"}  # fmt: skip
#: The DLDeviceType values of memory the host can read (CPU, CUDAHost, ROCMHost).
HOST_DEVICES = (1, 3, 11)

#: DLDataTypeCode -> the bit widths a producer may use with it.
DTYPE_BITS: dict[int, tuple[int, ...]] = {
    0: (1, 2, 4, 8, 16, 32, 64),  # Int
    1: (1, 2, 4, 8, 16, 32, 64),  # UInt
    2: (16, 32, 64),  # Float
    3: (8, 16, 32, 64),  # OpaqueHandle
    4: (16,),  # Bfloat
    5: (64, 128),  # Complex
    6: (8,),  # Bool
    **{code: (8,) for code in range(7, 15)},  # Float8 variants
    15: (6,),  # Float6_e2m3fn
    16: (6,),  # Float6_e3m2fn
    17: (4,),  # Float4_e2m1fn
}


def counting_deleter(versioned: bool) -> Any:
    """A DLPack deleter (a cffi function pointer) that only counts its calls
    (``bridge._C.stats()["test_deleters"]``): for structs the caller owns."""
    kind = "DLManagedTensorVersioned" if versioned else "DLManagedTensor"
    return ffi.cast(f"void (*)({kind} *)", _drivers.test_deleter_address(versioned))


# --------------------------------------------------------- reading capsules


@dataclass(frozen=True, slots=True)
class CapsuleView:
    """The fields of the managed tensor behind an unconsumed DLPack capsule.

    ``version`` and ``flags`` are None for a legacy capsule; ``shape`` is None
    when the shape pointer is NULL (or ndim is out of range), ``strides`` None
    when the strides pointer is NULL. ``data`` excludes ``byte_offset``.
    """

    name: str
    address: int
    version: tuple[int, int] | None
    flags: int | None
    data: int
    byte_offset: int
    device: tuple[int, int]
    ndim: int
    dtype: tuple[int, int, int]
    shape: tuple[int, ...] | None
    strides: tuple[int, ...] | None

    @property
    def versioned(self) -> bool:
        """Whether the capsule is named ``dltensor_versioned``."""
        return self.name == VERSIONED

    @property
    def start(self) -> int:
        """Address of the first element (``data + byte_offset``)."""
        return self.data + self.byte_offset

    def span(self) -> tuple[int, int]:
        """``[lo, hi)``: the bytes the tensor's elements occupy (empty for size 0)."""
        _, bits, lanes = self.dtype
        itemsize = max(bits * lanes // 8, 1)
        shape = self.shape or ()
        if 0 in shape:  # no element: NULL strides need no compact ones
            return self.start, self.start
        # NULL strides are C order; with a NULL shape there are no dims to stride.
        strides = self.strides if self.shape is not None else None
        if strides is None:
            strides = compact_strides(shape)
        # The fields are unchecked, and the core's extent takes no negative size:
        # such a dim reaches as far as its mirror, (n - 1) * s == ((2 - n) - 1) * -s.
        dims = [(n, s) if n >= 0 else (2 - n, -s) for n, s in zip(shape, strides)]
        lo, hi = extent([n for n, _ in dims], [s for _, s in dims], 0)
        return self.start + lo * itemsize, self.start + hi * itemsize


def inspect_capsule(capsule: Any) -> CapsuleView | None:
    """Read the managed tensor behind ``capsule`` without consuming it.

    The struct type is chosen by the capsule's name: ``dltensor_versioned``
    -> DLManagedTensorVersioned, ``dltensor`` -> DLManagedTensor. Any other
    name (including a consumed ``used_*`` capsule) gives None and nothing is
    read. Raises TypeError for a non-capsule. The capsule must stay alive
    while the returned values are used only as numbers (they are copies).
    """
    name, addr = _drivers.capsule_info(capsule)
    if name == VERSIONED:
        mv = ffi.cast("DLManagedTensorVersioned *", addr)
        version: tuple[int, int] | None = (int(mv.version.major), int(mv.version.minor))
        flags: int | None = int(mv.flags)
        dl = mv.dl_tensor
    elif name == LEGACY:
        dl = ffi.cast("DLManagedTensor *", addr).dl_tensor
        version = flags = None
    else:
        return None
    ndim = int(dl.ndim)
    sane = 0 <= ndim <= 64
    shape = None
    strides = None
    if sane and dl.shape != ffi.NULL:
        shape = tuple(int(dl.shape[i]) for i in range(ndim))
    if sane and dl.strides != ffi.NULL:
        strides = tuple(int(dl.strides[i]) for i in range(ndim))
    return CapsuleView(
        name=name,
        address=int(addr),
        version=version,
        flags=flags,
        data=int(ffi.cast("uintptr_t", dl.data)),
        byte_offset=int(dl.byte_offset),
        device=(int(dl.device.device_type), int(dl.device.device_id)),
        ndim=ndim,
        dtype=(int(dl.dtype.code), int(dl.dtype.bits), int(dl.dtype.lanes)),
        shape=shape,
        strides=strides,
    )


def test_deleter_calls() -> int:
    """How many times bridge's counting test deleter has run in this process."""
    return _C.stats()["test_deleters"]


class CountingDeleter:
    """Swaps a managed tensor's deleter for bridge's counting test deleter.

    While swapped, every call anyone makes to the deleter only bumps a
    counter, so a second call (a double free in real life) is seen and is
    harmless. :meth:`release` puts the producer's deleter back and runs it
    exactly once, through a fresh capsule with bridge's destructor (GIL held).
    """

    def __init__(self, view: CapsuleView) -> None:
        self.versioned = view.versioned
        kind = "DLManagedTensorVersioned *" if self.versioned else "DLManagedTensor *"
        self.address = view.address
        self.managed = ffi.cast(kind, view.address)
        self.original = self.managed.deleter
        gc.collect()
        self.start = test_deleter_calls()
        self.managed.deleter = counting_deleter(self.versioned)

    @property
    def calls(self) -> int:
        """Deleter calls since the swap."""
        return test_deleter_calls() - self.start

    @property
    def has_deleter(self) -> bool:
        """Whether the producer set a deleter at all (NULL is allowed)."""
        return bool(self.original != ffi.NULL)

    def release(self) -> None:
        """Restore the producer's deleter and call it once (via a capsule)."""
        self.managed.deleter = self.original
        cap = _drivers.make_capsule(self.address, int(self.versioned))
        del cap


@contextlib.contextmanager
def young_gc() -> Iterator[None]:
    """Freeze what exists now so that the many gc.collect() calls of the
    checks scan only the objects the checks make (torch alone brings ~10^6
    tracked objects). Not done when the caller already froze objects."""
    mine = gc.get_freeze_count() == 0
    if mine:
        gc.freeze()
    try:
        yield
    finally:
        if mine:
            gc.unfreeze()

# ------------------------------------------------------ hand-made capsules


class Handmade:
    """A DLManagedTensor[Versioned] built with cffi over a NumPy buffer.

    The deleter is bridge's counting test deleter (it frees nothing, so a
    consumer that calls it twice is observable, not fatal; count with
    ``bridge._C.stats()["test_deleters"]``). Every field can be set
    wrong on purpose: ``versioned`` (struct kind), ``major``/``minor``,
    ``flags``, ``device``, ``code``/``bits``/``lanes`` (default: from
    ``buffer``'s dtype), ``ndim`` (default ``len(shape)``), ``shape`` and
    ``strides`` (in elements; default ``buffer``'s own), ``byte_offset``,
    ``null_data``/``null_shape``/``null_strides``.

    Ownership: the struct, shape and strides live in this object. Keep it
    alive while any capsule from :meth:`capsule` or any tensor imported from
    one exists; the capsule does not keep it alive.
    """

    __slots__ = ("_dims", "buffer", "byte_offset", "managed", "shape", "strides", "versioned")

    def __init__(
        self,
        buffer: Any = None,
        *,
        versioned: bool = True,
        shape: tuple[int, ...] | None = None,
        strides: tuple[int, ...] | None = None,
        byte_offset: int = 0,
        code: int | None = None,
        bits: int | None = None,
        lanes: int = 1,
        ndim: int | None = None,
        major: int = 1,
        minor: int = 3,
        flags: int = 0,
        device: tuple[int, int] = (1, 0),
        null_data: bool = False,
        null_shape: bool = False,
        null_strides: bool = False,
    ) -> None:
        arr = np.arange(6, dtype=np.float32).reshape(2, 3) if buffer is None else np.asarray(buffer)
        self.buffer = arr
        self.shape = tuple(arr.shape) if shape is None else tuple(shape)
        if strides is None:
            strides = (
                compact_strides(self.shape)
                if shape is not None
                else tuple(s // arr.itemsize for s in arr.strides)
            )
        self.strides = tuple(strides)
        self.byte_offset = byte_offset
        self.versioned = versioned
        n = len(self.shape)
        self._dims = ffi.new("int64_t[]", [*self.shape, *self.strides] or [0])
        if code is None or bits is None:
            dcode, dbits = _numpy_dlpack_dtype(arr.dtype)
            code = dcode if code is None else code
            bits = dbits if bits is None else bits
        if versioned:
            m = ffi.new("DLManagedTensorVersioned *")
            m.version.major, m.version.minor = major, minor
            m.flags = flags
            m.deleter = counting_deleter(True)
        else:
            m = ffi.new("DLManagedTensor *")
            m.deleter = counting_deleter(False)
        dl = m.dl_tensor
        base = arr.ctypes.data - byte_offset
        dl.data = ffi.NULL if null_data else ffi.cast("void *", base)
        dl.device.device_type, dl.device.device_id = device
        dl.ndim = n if ndim is None else ndim
        dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = code, bits, lanes
        dl.shape = ffi.NULL if null_shape else self._dims
        dl.strides = ffi.NULL if null_strides else self._dims + n
        dl.byte_offset = byte_offset
        self.managed = m

    @property
    def address(self) -> int:
        """Address of the managed struct."""
        return int(ffi.cast("uintptr_t", self.managed))

    def capsule(self, name: str | None = None) -> Any:
        """A new capsule over the struct with bridge's standard destructor.

        ``name`` None gives the right name for the struct kind; ``"dltensor"``
        or ``"dltensor_versioned"`` force one (a mismatch with the struct is
        unsafe to consume); any other string gives a capsule with a wrong,
        non-DLPack name (whose destructor then leaves the struct alone).
        """
        if name is None:
            kind = int(self.versioned)
        else:
            kind = {LEGACY: 0, VERSIONED: 1}.get(name, 2)
        return _drivers.make_capsule(self.address, kind)

    def expected(self) -> list[Any]:
        """The values a correct consumer sees (for well-formed structs only)."""
        from numpy.lib.stride_tricks import as_strided

        item = self.buffer.itemsize
        flat = self.buffer.reshape(-1) if self.buffer.ndim else self.buffer.reshape(1)
        view = as_strided(flat, self.shape, tuple(s * item for s in self.strides))
        return view.tolist()  # type: ignore[no-any-return]


_KIND_CODES = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}


def _numpy_dlpack_dtype(dt: Any) -> tuple[int, int]:
    kind = _KIND_CODES.get(dt.kind)
    if kind is None:
        raise TypeError(f"Handmade: no DLPack code for NumPy dtype {dt}")
    return kind, dt.itemsize * 8


def dlpack_code_of(name: str) -> tuple[int, int] | None:
    """The dlpack.h ``(code, bits)`` of the NumPy dtype called ``name``
    (bool, ints, floats, complex), or None for another name."""
    try:
        dt = np.dtype(name)
    except TypeError:
        return None
    kind = _KIND_CODES.get(dt.kind)
    return (kind, dt.itemsize * 8) if kind is not None else None


def numpy_dtype_of(code: int, bits: int) -> np.dtype[Any] | None:
    """The NumPy dtype of dlpack.h ``(code, bits)`` for bool, ints, floats
    and complex (None for another type, or a width NumPy lacks)."""
    kind = {c: k for k, c in _KIND_CODES.items()}.get(code)
    if kind is None or bits % 8:
        return None
    try:
        return np.dtype(f"{kind}{bits // 8}") if kind != "b" else np.dtype(np.bool_)
    except TypeError:
        return None


# ------------------------------------------------------------------ values


def read_values(capsule: Any) -> list[Any]:
    """Import ``capsule`` with bridge and return its values as lists (consumes it)."""
    t = _bridge_from_dlpack(capsule)
    values = t.tolist()
    del t
    return values  # type: ignore[return-value]  # a 0-d tensor gives a scalar; callers only compare


def same_values(a: Any, b: Any) -> bool:
    """Equality of nested lists of scalars, with NaN equal to NaN."""
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        if not isinstance(a, (list, tuple)) or not isinstance(b, (list, tuple)) or len(a) != len(b):
            return False
        return all(same_values(x, y) for x, y in zip(a, b))
    try:
        if a == b:
            return True
        return bool(a != a and b != b)
    except Exception:
        return False

