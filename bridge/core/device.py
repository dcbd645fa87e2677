"""Devices, named as PyTorch names them, mapped to and from DLPack device types."""

from __future__ import annotations

from typing import Any

from bridge._native import lib
from bridge.core.native import _C

__all__ = ["device"]

# DLPack v1.3 DLDeviceType values and the names bridge gives them.
_DL_TYPES: dict[str, int] = {
    "cpu": 1,
    "cuda": 2,
    "cuda_host": 3,
    "opencl": 4,
    "vulkan": 7,
    "metal": 8,
    "vpi": 9,
    "rocm": 10,
    "rocm_host": 11,
    "ext_dev": 12,
    "cuda_managed": 13,
    "oneapi": 14,
    "webgpu": 15,
    "hexagon": 16,
    "maia": 17,
    "trn": 18,
}
_ALIASES = {"xpu": "oneapi", "hip": "rocm", "mps": "metal", "gpu": "cuda"}
_BY_DL: dict[int, str] = {v: k for k, v in _DL_TYPES.items()}
# Device types whose memory the host can read and write directly.
# The C core's one list (bridge_host_accessible in cdefs/core/storage.c).
_HOST_ACCESSIBLE = frozenset(name for name, code in _DL_TYPES.items() if lib.bridge_host_accessible(code))


class device:
    """Where a tensor's memory lives: ``device("cpu")``, ``device("cuda")``,
    ``device("cuda:1")``, ``device("cuda", 1)``, ``device(("cuda", 1))``, or a
    bare int meaning that CUDA ordinal (PyTorch's legacy form).

    ``type`` is the device type name and ``index`` the ordinal (None when not
    given; CPU has no index). Equality and hashing are by (type, index).
    Unknown type names and negative or malformed indices raise ValueError;
    arguments of the wrong type raise TypeError.
    """

    __slots__ = ("_index", "_type")
    _type: str
    _index: int | None

    def __new__(cls, type: Any, index: int | None = None) -> device:
        if isinstance(type, device):
            if index is not None:
                raise TypeError("device(device, index) is not allowed: the device has its own index")
            return type
        if isinstance(type, tuple):
            if index is not None or len(type) != 2:
                raise TypeError(f"device tuple must be (type, index), got {type!r}")
            type, index = type
        if isinstance(type, int) and not isinstance(type, bool):
            if index is not None:
                raise TypeError("device(int) takes no index")
            type, index = "cuda", type
        if not isinstance(type, str):
            raise TypeError(f"device() expects a string, tuple, int or device, got {type!r}")
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


CPU = device("cpu")
# Storages name their device by DLPack (type, id); C asks for the object here.
_C._register("device", device.from_dlpack)
