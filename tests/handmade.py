"""Hand-made DLPack structs for the DLPack tests: a DLManagedTensor(Versioned)
built with cffi over a NumPy buffer, whose deleter only counts its calls
(``deleter_calls``), wrapped in a capsule by ``bridge._drivers``."""

from __future__ import annotations

import numpy as np
from bridge._native import ffi

from bridge.core.native import _C, _drivers
from bridge.kit.conformance import counting_deleter

# Every Handmade struct lives until the end of the session: bridge keeps a
# consumed struct (and reads it, and calls its deleter) for as long as a view
# of it lives, which a test's temporary Handmade(...) would not outlast.
_KEEP_ALIVE: list[object] = []


class Handmade:
    """A DLManagedTensor(Versioned) built with cffi whose deleter only counts,
    over ``buf`` (a NumPy array; by default 64 float64 0..63)."""

    def __init__(self, versioned=True, shape=(2, 3), strides=None, code=2, bits=32, lanes=1,
                 ndim=None, data=True, major=1, minor=3, flags=0, device=(1, 0), byte_offset=0,
                 null_shape=False, null_strides=False, buf=None):  # fmt: skip
        n = len(shape)
        self.buf = np.arange(64, dtype=np.float64) if buf is None else buf
        self.shape = ffi.new("int64_t[]", list(shape) or [0])
        self.strides = ffi.new("int64_t[]", list(strides or contig(shape)) or [0])
        if versioned:
            self.m = ffi.new("DLManagedTensorVersioned *")
            self.m.version.major, self.m.version.minor = major, minor
            self.m.flags = flags
            self.m.deleter = counting_deleter(True)
        else:
            self.m = ffi.new("DLManagedTensor *")
            self.m.deleter = counting_deleter(False)
        dl = self.m.dl_tensor
        dl.data = ffi.cast("void *", self.buf.ctypes.data) if data else ffi.NULL
        dl.device.device_type, dl.device.device_id = device
        dl.ndim = n if ndim is None else ndim
        dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = code, bits, lanes
        dl.shape = ffi.NULL if null_shape else self.shape
        dl.strides = ffi.NULL if null_strides else self.strides
        dl.byte_offset = byte_offset
        self.versioned = versioned
        _KEEP_ALIVE.append(self)

    def capsule(self, kind=None):
        addr = int(ffi.cast("uintptr_t", self.m))
        return _drivers.make_capsule(addr, int(self.versioned) if kind is None else kind)


#: Malformed managed tensors: Handmade's keyword arguments, and what bridge's
#: BufferError says of each. Every entry point meets them alike: a capsule for
#: bridge.from_dlpack (tests/interop/dlpack/test_dlpack.py), a producer's exchange API
#: and a capsule for bridge.convert (tests/crossing/test_convert_hostile.py).
MALFORMED: list[tuple[dict[str, object], str]] = [
    ({"major": 2}, "version 2"),
    ({"ndim": -1}, "invalid ndim -1"),
    ({"ndim": 1000}, "invalid ndim 1000"),
    ({"lanes": 4}, "lanes=4"),
    ({"code": 99, "bits": 8}, "code=99"),
    ({"code": 18, "bits": 32}, r"bcomplex32 \(code=18: complex numbers of two bfloat16 halves"),
    ({"device": (22, 0)}, "unknown DLPack device type 22"),
    ({"code": 2, "bits": 7}, r"\(code=2, bits=7, lanes=1\) has no bridge dtype"),
    ({"code": 2, "bits": 12}, "byte-addressable"),
    ({"null_shape": True}, "NULL shape"),
    ({"null_strides": True}, "NULL strides"),
    ({"data": False}, "NULL data"),
    ({"shape": (2, -3)}, "negative size"),
    ({"shape": (2, 3), "strides": (2**62, 1)}, "overflow"),
    # hi - lo + 1 elements is 2**63: the extent itself overflows int64
    ({"shape": (2**62, 2), "strides": (2, 1), "code": 1, "bits": 8}, "overflow"),
    ({"shape": (2**62, 2), "strides": (-2, -1), "code": 1, "bits": 8}, "overflow"),
    ({"shape": (2**61, 4), "strides": (4, 1), "bits": 64}, "overflow"),
    ({"shape": (2, 2), "byte_offset": 2**64 - 8}, "overflow"),
    ({"versioned": False, "shape": (2**40, 2**40), "null_strides": True}, "overflow"),
]


def contig(shape):
    """C-order element strides of ``shape``."""
    out, acc = [], 1
    for s in reversed(shape):
        out.insert(0, acc)
        acc *= max(s, 1)
    return out


def deleter_calls() -> int:
    """How many times the counting deleters ran (bridge._C's counter)."""
    return _C.stats()["test_deleters"]
