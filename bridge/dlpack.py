"""DLPack: zero-copy export and import of tensors (dlpack.h v1.3).

Export: ``Tensor.__dlpack__`` / ``__dlpack_device__`` build one managed tensor
in C (struct, shape and strides in one allocation) whose ``manager_ctx``
holds a strong reference to the storage's keep-alive object; the deleter and
capsule destructor are C (cdefs/bridge.c). ``Tensor.__dlpack_c_exchange_api__``
is the v1.3 C exchange API capsule.

Import: :func:`from_dlpack` consumes a capsule (or asks an object for one, or
uses its type's C exchange API), renames it ``used_*`` and wraps the managed
tensor in a guard whose destructor calls the producer's deleter exactly once,
when the last bridge view lets go.
"""

from __future__ import annotations

import types
from typing import Any

from bridge import _capi, _dtypes
from bridge._device import device
from bridge._storage import UntypedStorage
from bridge._tensor import Tensor, contiguous_format

__all__ = ["from_dlpack", "to_dlpack", "DLPACK_VERSION", "FLAG_READ_ONLY", "FLAG_IS_COPIED",
           "FLAG_IS_SUBBYTE_TYPE_PADDED"]  # fmt: skip

DLPACK_VERSION = (1, 3)
FLAG_READ_ONLY = 1
FLAG_IS_COPIED = 2
FLAG_IS_SUBBYTE_TYPE_PADDED = 4

_CapsuleType = types.CapsuleType if hasattr(types, "CapsuleType") else type(_capi.exchange_api)
_export = _capi.export
_import_capsule = _capi.import_capsule
_fast_from_dlpack = _capi.fast_from_dlpack
_check_torch_export = _capi.check_torch_export
_BY_DLPACK = _dtypes._BY_DLPACK
_DEVICES: dict[tuple[int, int], device] = {}
_OUR_API = _capi.exchange_api
_MAX_VERSION = DLPACK_VERSION


def _check_stream(t: Tensor, stream: Any) -> None:
    """The array API's stream argument. Host memory has no streams: None and
    -1 (no synchronisation) are accepted. A stream that is not an int is a
    TypeError; an int the device cannot take is a ValueError (BufferError is
    for data that cannot be exported). NumPy raises RuntimeError for any
    stream and torch AssertionError for a host int; the spec's types win."""
    if stream is None:
        return
    if not isinstance(stream, int) or isinstance(stream, bool):
        raise TypeError(f"stream must be an int or None, got {type(stream).__name__}")
    dev = t._storage._device
    if dev.type in ("cpu", "cuda_host", "rocm_host"):
        if stream != -1:
            raise ValueError(f"stream must be None or -1 for a {dev} tensor, got {stream}")
        return
    if stream == 0:
        raise ValueError("stream 0 is ambiguous and forbidden by the DLPack spec; use 1 or 2")
    if stream < -1:
        raise ValueError(f"invalid stream {stream}")


def _export_values(t: Tensor, flags: int) -> tuple[Any, ...]:
    t._check_bounds(BufferError)
    st = t._storage
    code, bits, _ = t._dtype.dlpack
    if bits < 8:
        flags |= FLAG_IS_SUBBYTE_TYPE_PADDED
    if st._readonly:
        flags |= FLAG_READ_ONLY
    dev_type, dev_id = st._device.to_dlpack()
    data = st._ptr + t._offset * t._dtype.itemsize
    return (st._keepalive(), data, dev_type, dev_id, code, bits, t._shape, t._strides, flags)


def to_dlpack(
    tensor: Tensor,
    *,
    stream: Any = None,
    max_version: tuple[int, int] | None = None,
    dl_device: Any = None,
    copy: bool | None = None,
) -> Any:
    """A DLPack capsule for ``tensor`` (the body of ``Tensor.__dlpack__``).

    ``max_version`` None or major < 1 gives a legacy ``"dltensor"`` capsule,
    else ``"dltensor_versioned"`` (v1.3) with READ_ONLY / IS_COPIED flags.
    Raises BufferError for a read-only tensor asked for a legacy capsule (it
    cannot carry the flag), for ``copy=False`` when a copy would be needed, for
    a ``dl_device`` bridge cannot reach, and for a stream on a host tensor;
    TypeError/ValueError for malformed arguments.
    """
    t = tensor
    t._check_bounds(BufferError)
    st = t._storage
    if stream is not None:
        _check_stream(t, stream)
    versioned = False
    if max_version is not None:
        try:
            versioned = max_version[0] >= 1
        except (TypeError, IndexError):
            raise TypeError(f"max_version must be a (major, minor) tuple, got {max_version!r}") from None
    flags = 0
    if dl_device is not None:
        want = _as_dl_device(dl_device)
        if want != st._device.to_dlpack():
            raise BufferError(
                f"cannot export a {st._device} tensor to DLPack device {want}: bridge copies "
                "only within host memory"
            )
    if copy is not None and not isinstance(copy, bool):
        raise TypeError(f"copy must be True, False or None, got {copy!r}")
    if copy:
        t = t.clone(memory_format=contiguous_format)
        st = t._storage
        flags = FLAG_IS_COPIED
    if st._readonly and not versioned:
        raise BufferError(
            "a read-only tensor cannot be exported as a legacy DLPack capsule, which has no "
            "READ_ONLY flag; ask for max_version >= (1, 0) or export a copy"
        )
    return _export(*_export_values(t, flags), versioned)


def _as_dl_device(dl_device: Any) -> tuple[int, int]:
    if isinstance(dl_device, device):
        return dl_device.to_dlpack()
    try:
        dev_type, dev_id = dl_device
        return int(dev_type), int(dev_id)
    except (TypeError, ValueError):
        raise TypeError(f"dl_device must be a (device_type, device_id) pair, got {dl_device!r}") from None


def _dlpack_device(self: Tensor) -> tuple[int, int]:
    """``(DLDeviceType, device_id)`` of the tensor's memory (``__dlpack_device__``)."""
    return self._storage._device.to_dlpack()


# ------------------------------------------------------------------ import


def _finish(parsed: tuple[Any, ...]) -> Tensor:
    guard, ptr, nbytes, dev_type, dev_id, code, bits, shape, strides, offset, flags = parsed
    dt = _BY_DLPACK.get((code, bits))
    if dt is None:
        raise BufferError(f"DLPack dtype (code={code}, bits={bits}) has no bridge dtype")
    dev = _DEVICES.get((dev_type, dev_id))
    if dev is None:
        try:
            dev = device.from_dlpack(dev_type, dev_id)
        except ValueError as e:
            raise BufferError(str(e)) from None
        _DEVICES[(dev_type, dev_id)] = dev
    storage = UntypedStorage._wrap(ptr, nbytes, dev, guard, readonly=bool(flags & FLAG_READ_ONLY))
    return Tensor._make(storage, dt, shape, strides, offset)


def from_dlpack(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Tensor:
    """A bridge tensor sharing the memory of ``x`` (Python array API ``from_dlpack``).

    ``x`` may be any object with ``__dlpack__``, or a bare DLPack capsule. The
    producer is asked for a versioned capsule (``max_version=(1, 3)``) and
    asked again without keywords if it raises TypeError. Types that publish
    ``__dlpack_c_exchange_api__`` (PyTorch >= 2.11, tvm-ffi) are read through
    that C API instead, with no capsule.

    The producer's memory stays alive until the last bridge view of it dies;
    its deleter then runs exactly once. READ_ONLY memory gives a read-only
    tensor. ``copy=True`` always returns a copy, ``copy=False`` never does
    (ValueError when one would be needed). ``device`` asks the producer for
    that device (``"cpu"`` or a ``(device_type, device_id)`` pair).

    torch tensors that are lazy conjugate/negative views are refused with
    BufferError (their memory does not hold their values; torch's own export
    does not always notice).

    Errors: BufferError for capsules bridge cannot represent (unknown dtype,
    lanes != 1, bad ndim, NULL shape, NULL strides from a >= 1.2 producer,
    NULL data for a non-empty tensor, major version != 1) and for consumed
    capsules; ValueError for capsules with a wrong name; TypeError for objects
    without DLPack support.
    """
    if device is None and copy is None:
        out = _fast_from_dlpack(x)
        if out is not NotImplemented:
            return out  # type: ignore[no-any-return]
    if type(x) is _CapsuleType:
        if device is not None:
            raise ValueError("device= cannot be honoured for a bare capsule; pass the array")
        out = _finish(_import_capsule(x))
        return out.clone(memory_format=contiguous_format) if copy else out
    if type(x) is Tensor:
        return _from_own(x, device, copy)
    _check_torch_export(x)
    method = getattr(x, "__dlpack__", None)
    if method is None:
        raise TypeError(f"{type(x).__name__} does not support DLPack (no __dlpack__ method)")
    kwargs: dict[str, Any] = {"max_version": _MAX_VERSION}
    want_dev = None
    if device is not None:
        want_dev = _as_dl_device(_to_device(device))
        kwargs["dl_device"] = want_dev
    if copy is not None:
        kwargs["copy"] = copy
    honoured_copy = copy is not None
    try:
        capsule = method(**kwargs)
    except TypeError:
        # A producer older than the 2023 signature: no keywords at all.
        capsule = method()
        honoured_copy = False
    except BufferError as e:
        if copy is False:
            # A refusal of copy=False or of the export itself? Ask without it:
            # only when that works was a copy the problem (ValueError, as the
            # array API says); otherwise the producer's BufferError stands.
            kwargs.pop("copy")
            method(**kwargs)  # raises the producer's own refusal, if that is what it was
            raise ValueError(f"from_dlpack(copy=False): the producer needs a copy: {e}") from e
        raise
    parsed = _import_capsule(capsule)
    out = _finish(parsed)
    if want_dev is not None and out._storage._device.to_dlpack() != want_dev:
        raise BufferError(f"the producer gave a {out.device} tensor, not the requested device {device!r}")
    if copy and not (honoured_copy and parsed[-1] & FLAG_IS_COPIED):
        # The producer did not say it copied (a legacy capsule cannot; some
        # producers accept copy= and ignore it): copying is ours to do.
        out = out.clone(memory_format=contiguous_format)
    return out


def _to_device(spec: Any) -> device:
    if isinstance(spec, tuple) and len(spec) == 2 and all(isinstance(v, int) for v in spec):
        return device.from_dlpack(*spec)
    return device(spec)


def _from_own(x: Tensor, dev: Any, copy: bool | None) -> Tensor:
    if dev is not None and _to_device(dev) != x.device:
        raise BufferError(f"cannot move a {x.device} tensor to {dev!r}")
    if copy:
        return x.clone(memory_format=contiguous_format)
    return Tensor._make(x._storage, x._dtype, x._shape, x._strides, x._offset)


# ------------------------------------------------ C exchange API callbacks


def _exchange_export_values(t: Any) -> tuple[Any, ...]:
    if not isinstance(t, Tensor):
        raise TypeError(f"expected a bridge.Tensor, got {type(t).__name__}")
    return _export_values(t, 0)


def _exchange_dltensor_values(t: Any) -> tuple[Any, ...]:
    if not isinstance(t, Tensor):
        raise TypeError(f"expected a bridge.Tensor, got {type(t).__name__}")
    if t._storage._readonly:
        raise BufferError(
            "a read-only tensor cannot be lent as a bare DLTensor, which has no READ_ONLY flag; "
            "use managed_tensor_from_py_object_no_sync (or __dlpack__) instead"
        )
    import struct

    try:
        metas = t._dlmeta
    except AttributeError:
        metas = t._dlmeta = {}
    key = (t._shape, t._strides)
    meta = metas.get(key)
    if meta is None:
        # The consumer keeps raw pointers into these bytes for as long as the
        # tensor lives, whatever set_() does to it later: never drop one.
        meta = metas[key] = struct.pack(f"={2 * t.ndim}q", *t._shape, *t._strides)
    vals = _export_values(t, 0)
    return (vals[1], vals[2], vals[3], vals[4], vals[5], meta)


_capi.set_callbacks(_exchange_export_values, _exchange_dltensor_values)

# Tensor.__dlpack__ is a C method descriptor (cdefs/bridge.c: tensor_dlpack):
# the common export runs without a Python frame, and everything else is
# handed to to_dlpack above.
_capi.set_dlpack_fallbacks(to_dlpack, _finish)
Tensor.__dlpack__ = _capi.dlpack_method
Tensor.__dlpack_device__ = _dlpack_device
Tensor.__dlpack_c_exchange_api__ = _OUR_API
