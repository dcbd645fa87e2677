"""Devices, named as PyTorch names them, mapped to and from DLPack device types."""

from __future__ import annotations

import operator
from typing import Any

from bridge._native import ffi, lib
from bridge.core.native import _C

__all__ = ["device"]

def _device_table() -> dict[str, int]:
    """bridge's device names and their DLPack device types, from the C device
    table (cdefs/core/devices.c), the one description of a device kind."""
    out: dict[str, int] = {}
    i = 0
    while code := lib.bridge_device_type_at(i):
        out[ffi.string(lib.bridge_device_name(code)).decode()] = code
        i += 1
    return out


_DL_TYPES: dict[str, int] = _device_table()
_ALIASES = {"xpu": "oneapi", "hip": "rocm", "mps": "metal", "gpu": "cuda"}
_BY_DL: dict[int, str] = {v: k for k, v in _DL_TYPES.items()}
# Device types whose memory the host can read and write directly.
_HOST_ACCESSIBLE = frozenset(name for name, code in _DL_TYPES.items() if lib.bridge_host_accessible(code))


#: The largest device index: DLPack's ``device_id`` is an ``int32_t``.
_MAX_INDEX = 2**31 - 1


def _int_of(v: object) -> int | None:
    """``v`` as an int when it is an integer (a Python or NumPy one, through
    ``__index__``), not a bool; else None."""
    if isinstance(v, bool) or not hasattr(type(v), "__index__"):
        return None
    try:
        return operator.index(v)  # type: ignore[arg-type]
    except TypeError:  # (NumPy's bool_ has the slot and refuses)
        return None


class device:
    """Where a tensor's memory lives: ``device("cpu")``, ``device("cuda")``,
    ``device("cuda:1")``, ``device("cuda", 1)``, ``device(("cuda", 1))``, a
    bare int meaning that CUDA ordinal (PyTorch's legacy form), or another
    library's device object: one with ``__dlpack_device__()`` (the device
    exchange protocol, data-apis/array-api#972: paddle's places, bridge's own),
    a ``torch.device``, a tvm-ffi or jax device. This is the one place a device
    argument is read; nothing is imported to recognise foreign devices.

    ``type`` is the device type name and ``index`` the ordinal (None when not
    given; CPU has no index). Equality and hashing are by (type, index).
    Unknown type names (a foreign device bridge has no name for: torch's
    ``meta``), unknown DLPack device types and negative or malformed indices
    raise ValueError; arguments of the wrong type (a tensor among them: pass its
    device) raise TypeError.
    """

    __slots__ = ("_index", "_type")
    _type: str
    _index: int | None

    def __new__(cls, type: Any, index: int | None = None) -> device:
        if isinstance(type, device):
            if index is not None:
                raise TypeError("device(device, index) is not allowed: the device has its own index")
            return type
        if type.__class__ is not str and _foreign_kind(type) is not None:
            # Before the str/int/tuple forms: paddle's devices are str subclasses
            # ("gpu:0") that say what they are through the protocol.
            if index is not None:
                raise TypeError(f"device({type!r}, index) is not allowed: the device has its own index")
            return _foreign(type)
        if isinstance(type, tuple):
            if index is not None or len(type) != 2:
                raise TypeError(f"device tuple must be (type, index), got {type!r}")
            type, index = type
            code, dev_id = _int_of(type), _int_of(index)
            if code is not None and dev_id is not None:  # a DLPack (device_type, device_id) pair
                if code not in _BY_DL:
                    raise ValueError(f"unknown DLPack device type {code}")
                type, index = _BY_DL[code], dev_id
        ordinal = _int_of(type)
        if ordinal is not None:
            if index is not None:
                raise TypeError("device(int) takes no index")
            type, index = "cuda", ordinal
        elif _int_of(index) is not None:
            index = _int_of(index)
        if not isinstance(type, str):
            return _foreign(type)  # TypeError: a tensor, or no device at all
        name = type.strip().lower()
        if ":" in name:
            if index is not None:
                raise ValueError(f"device string {type!r} already has an index")
            name, _, idx = name.partition(":")
            if not idx.isdigit():
                raise ValueError(f"invalid device index in {type!r}: expected a non-negative integer")
            index = int(idx)
        name = _ALIASES.get(name, name)
        if name not in _DL_TYPES:
            raise ValueError(
                f"unknown device type {type!r}; expected one of {', '.join(_DL_TYPES)}"
            )
        if index is not None:
            if not isinstance(index, int) or isinstance(index, bool):
                raise TypeError(f"device index must be an int, got {index!r}")
            if index < 0:
                raise ValueError(f"device index must be non-negative, got {index}")
            if index > _MAX_INDEX:  # DLPack's device_id is an int32_t
                raise ValueError(f"device index {index} is out of range (at most {_MAX_INDEX})")
            if name == "cpu" and index != 0:
                raise ValueError(f"cpu has only index 0, got {index}")
        self = object.__new__(cls)
        self._type = name
        self._index = None if name == "cpu" else index
        return self

    @property
    def type(self) -> str:
        """The device type name, e.g. ``"cpu"`` or ``"cuda"``."""
        return self._type

    @property
    def index(self) -> int | None:
        """The device ordinal, or None (CPU, or an unspecified ordinal)."""
        return self._index

    @property
    def is_host_accessible(self) -> bool:
        """Whether the CPU can read and write this memory directly."""
        return self._type in _HOST_ACCESSIBLE

    def to_dlpack(self) -> tuple[int, int]:
        """``(DLDeviceType, device_id)``; an unspecified index maps to 0."""
        return _DL_TYPES[self._type], self._index or 0

    def __dlpack_device__(self) -> tuple[int, int]:
        """``(DLDeviceType, device_id)`` (as :meth:`to_dlpack`): the device
        exchange protocol, through which libraries that take foreign devices
        (tvm-ffi, bridge itself) read this one."""
        return self.to_dlpack()

    @classmethod
    def from_dlpack(cls, device_type: int, device_id: int) -> device:
        """The device for a DLPack ``(device_type, device_id)``; ValueError if unknown."""
        name = _BY_DL.get(int(device_type))
        if name is None:
            raise ValueError(f"unknown DLPack device type {device_type}")
        if name == "cpu":
            return CPU
        return cls(name, int(device_id))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            try:
                other = device(other)
            except ValueError:
                return False
        if not isinstance(other, device):
            return NotImplemented
        return self._type == other._type and self._index == other._index

    def __hash__(self) -> int:
        return hash((self._type, self._index))

    def __str__(self) -> str:
        return self._type if self._index is None else f"{self._type}:{self._index}"

    def __repr__(self) -> str:
        if self._index is None:
            return f"device(type={self._type!r})"
        return f"device(type={self._type!r}, index={self._index})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (device, (self._type, self._index))


def _foreign_kind(obj: Any) -> str | None:
    """How a foreign device object is read: "exchange" (``__dlpack_device__``),
    "torch", "tvm_ffi" or "jax"; None for anything else (tensors included,
    which have ``__dlpack_device__`` too)."""
    tp = type(obj)
    if tp is str or isinstance(obj, device) or hasattr(tp, "__dlpack__"):
        return None
    if hasattr(tp, "__dlpack_device__"):
        return "exchange"
    top = tp.__module__.partition(".")[0]
    if top == "torch" and tp.__name__ == "device":
        return "torch"
    if top == "tvm_ffi" and hasattr(obj, "dlpack_device_type"):
        return "tvm_ffi"
    if top in ("jax", "jaxlib") and hasattr(obj, "platform"):
        return "jax"
    return None


def is_device_like(obj: Any) -> bool:
    """Whether ``obj`` is a device object that :class:`device` reads (a bridge
    device or a foreign one), as opposed to a dtype, a tensor or a string; so
    that ``to(x)`` can tell a device from a dtype without guessing by failure."""
    return isinstance(obj, device) or _foreign_kind(obj) is not None


def _foreign(spec: Any) -> device:
    """The bridge device for another library's device object (see :class:`device`)."""
    tp = type(spec)
    kind = _foreign_kind(spec)
    if kind is None:
        if hasattr(tp, "__dlpack__"):
            raise TypeError(f"device() got a tensor ({tp.__module__}.{tp.__qualname__}), not a device; "
                            "pass its device")  # fmt: skip
        raise TypeError(f"device() expects a string, tuple, int or device object, got {spec!r}")
    if kind == "torch":  # torch.device: its type name and index
        return device(str(spec.type), spec.index)
    if kind == "jax":  # a jax Device: "cpu:0", "cuda:0"
        return CPU if spec.platform == "cpu" else device(str(spec))
    if kind == "tvm_ffi":
        pair: Any = (spec.dlpack_device_type(), spec.index)
    else:
        try:
            pair = tp.__dlpack_device__(spec)
        except Exception as e:
            raise TypeError(f"{spec!r} cannot be read as a device: its __dlpack_device__() raised "
                            f"{type(e).__name__}: {e}") from e  # fmt: skip
    ok = isinstance(pair, tuple) and len(pair) == 2
    if not ok or not all(isinstance(v, int) and not isinstance(v, bool) for v in pair):
        raise TypeError(f"__dlpack_device__() of {spec!r} gave {pair!r}, not a (device_type, device_id) "
                        "tuple of ints")  # fmt: skip
    code, dev_id = int(pair[0]), int(pair[1])
    if code not in _BY_DL:
        raise ValueError(f"{spec!r} is on DLPack device type {code}, which bridge has no name for")
    if dev_id < 0:
        raise ValueError(f"{spec!r} has a negative device id {dev_id}")
    return device.from_dlpack(code, dev_id)


CPU = device("cpu")
# Storages name their device by DLPack (type, id); C asks for the object here.
_C._register("device", device.from_dlpack)
