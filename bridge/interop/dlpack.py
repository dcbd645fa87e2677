"""DLPack: zero-copy export and import of tensors (dlpack.h v1.3).

Export: ``Tensor.__dlpack__`` / ``__dlpack_device__`` are C methods
(``cdefs/dlpack_export.c``) that build one managed tensor (struct, shape and
strides in one allocation) from the tensor's C struct, with ``manager_ctx``
holding the storage's owner; the deleter and capsule destructor are C.
``Tensor.__dlpack_c_exchange_api__`` is the v1.3 C exchange API capsule
(``cdefs/exchange_api.c``). This module is the keyword policy of the export
(streams, ``dl_device``, ``copy``): :func:`to_dlpack`.

Import: :func:`from_dlpack` is C (``cdefs/dlpack_import.c``): it consumes a
capsule (or asks an object for one, or uses its type's C exchange API),
renames it ``used_*`` and hands the managed tensor to a new storage, which owns
it and calls the producer's deleter exactly once, when the last view lets go.
For a CUDA producer it passes the thread's consumer stream
(:func:`bridge.cuda_stream`, 1 by default) so the producer orders its work
before it; an export to stream S makes S wait for the stream the memory's work
was last ordered on.
Its ``device=``/``copy=`` policy is :func:`_from_dlpack_policy` here.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from bridge.core.device import device
from bridge.core.native import _C
from bridge.core.tensor import Tensor, contiguous_format

if TYPE_CHECKING:
    from typing_extensions import CapsuleType as _Capsule

__all__ = ["from_dlpack", "to_dlpack", "DLPACK_VERSION", "FLAG_READ_ONLY", "FLAG_IS_COPIED",
           "FLAG_IS_SUBBYTE_TYPE_PADDED"]  # fmt: skip

DLPACK_VERSION = (1, 3)
FLAG_READ_ONLY = 1
FLAG_IS_COPIED = 2
FLAG_IS_SUBBYTE_TYPE_PADDED = 4

CapsuleType = types.CapsuleType if hasattr(types, "CapsuleType") else type(_C.exchange_api)


def _check_stream(dev: device, stream: Any) -> None:
    """The array API's stream argument. Host memory has no streams: None and
    -1 (no synchronisation) are accepted. A stream that is not an int is a
    TypeError; an int the device cannot take is a ValueError (BufferError is
    for data that cannot be exported). NumPy raises RuntimeError for any
    stream and torch AssertionError for a host int; the spec's types win."""
    if stream is None:
        return
    if not isinstance(stream, int) or isinstance(stream, bool):
        raise TypeError(f"stream must be an int or None, got {type(stream).__name__}")
    if dev.is_host_accessible and dev.type != "cuda_managed":
        if stream != -1:
            raise ValueError(f"stream must be None or -1 for a {dev} tensor, got {stream}")
        return
    if stream == 0:
        raise ValueError("stream 0 is ambiguous and forbidden by the DLPack spec; use 1 or 2")
    if stream < -1:
        raise ValueError(f"invalid stream {stream}")


def _tensor_arg(x: Any, fn: str) -> Tensor:
    """``x`` when it is a bridge Tensor; else TypeError naming its type and
    what is accepted (torch's and paddle's ``to_dlpack`` raise TypeError too)."""
    if not isinstance(x, Tensor):
        cls = type(x)
        kind = cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
        raise TypeError(
            f"{fn}() expects a bridge.Tensor, got {kind}; bridge.asarray(obj) makes a tensor of it "
            "(zero-copy where the object exposes its memory)"
        )
    return x


def to_dlpack(
    tensor: Tensor,
    *,
    stream: Any = None,
    max_version: tuple[int, int] | None = None,
    dl_device: Any = None,
    copy: bool | None = None,
) -> _Capsule:
    """A DLPack capsule for ``tensor`` (the policy behind ``Tensor.__dlpack__``).

    ``max_version`` None or major < 1 gives a legacy ``"dltensor"`` capsule,
    else ``"dltensor_versioned"`` (v1.3) with READ_ONLY / IS_COPIED flags.
    Raises BufferError for a read-only tensor asked for a legacy capsule (it
    cannot carry the flag), for ``copy=False`` when a copy would be needed, for
    a ``dl_device`` bridge cannot reach, and for a view that reaches past its
    storage; TypeError for anything but a bridge Tensor, TypeError/ValueError
    for malformed arguments (a host tensor takes stream None or -1 only).
    """
    t = _tensor_arg(tensor, "to_dlpack")
    t._check_bounds(BufferError)
    want = t.__dlpack_device__() if dl_device is None else _as_dl_device(dl_device)
    if stream is not None:  # the consumer's stream, on the device it asks for
        _check_stream(device.from_dlpack(*want), stream)
    versioned = False
    if max_version is not None:
        try:
            versioned = max_version[0] >= 1
        except (TypeError, IndexError):
            raise TypeError(f"max_version must be a (major, minor) tuple, got {max_version!r}") from None
    flags = 0
    if copy is not None and not isinstance(copy, bool):
        raise TypeError(f"copy must be True, False or None, got {copy!r}")
    if want != t.__dlpack_device__():
        if copy is False:
            raise BufferError(f"exporting a {t.device} tensor to DLPack device {want} needs a copy, "
                              "and copy=False forbids it")  # fmt: skip
        t, flags = transfer(t, want), FLAG_IS_COPIED
    if copy and not flags:
        t = transfer(t, t.__dlpack_device__()) if t.is_cuda else t.clone(memory_format=contiguous_format)
        flags = FLAG_IS_COPIED
    if t.is_cuda and stream != -1:
        # The consumer's stream waits for the memory's (None: the legacy default stream).
        _C.cuda_wait(t, 1 if stream is None else stream)
    return _C.dlpack_export(t, flags, versioned)


def transfer(t: Tensor, dl_device: tuple[int, int]) -> Tensor:
    """A copy of ``t`` on ``dl_device`` (CPU or CUDA), made by the CUDA copy
    engine when device memory is involved (the view's byte span, its strides
    kept); BufferError for devices bridge cannot copy between, TypeError for
    anything but a bridge Tensor."""
    t = _tensor_arg(t, "transfer")
    kind = dl_device[0]
    if not (t.is_cuda or kind == 2) or kind not in (1, 2, 3):
        raise BufferError(
            f"cannot copy a {t.device} tensor to DLPack device {dl_device}: bridge copies within "
            "host memory and between host and CUDA memory"
        )
    if kind == 3:  # CUDA host memory is host memory to the copy
        dl_device = (1, 0)
    out: Tensor = _C.cuda_transfer(t, *dl_device)
    return out


def _as_dl_device(dl_device: Any) -> tuple[int, int]:
    if isinstance(dl_device, device):
        return dl_device.to_dlpack()
    try:
        dev_type, dev_id = dl_device
        return int(dev_type), int(dev_id)
    except (TypeError, ValueError):
        raise TypeError(f"dl_device must be a (device_type, device_id) pair, got {dl_device!r}") from None


# ------------------------------------------------------------------ import

from_dlpack = _C.from_dlpack


def _to_device(spec: Any) -> device:
    if isinstance(spec, tuple) and len(spec) == 2 and all(isinstance(v, int) for v in spec):
        return device.from_dlpack(*spec)
    return device(spec)


def _producer_device(x: Any) -> tuple[int, int]:
    try:
        dev_type, dev_id = x.__dlpack_device__()
        return int(dev_type), int(dev_id)
    except Exception:  # no usable __dlpack_device__: not a device producer
        return (1, 0)


def _from_dlpack_policy(x: Any, /, *, device: Any = None, copy: bool | None = None) -> Tensor:
    """``from_dlpack`` with ``device=``/``copy=``, and of bridge's own tensors (the
    C function handles the plain call): see :func:`bridge.from_dlpack`."""
    if isinstance(x, Tensor):
        if device is not None and _to_device(device) != x.device:
            if copy is False:
                raise ValueError(f"from_dlpack(copy=False): moving a {x.device} tensor to {device!r} needs a copy")
            return transfer(x, _as_dl_device(_to_device(device)))
        if copy and x.is_cuda:
            return transfer(x, x.__dlpack_device__())
        if copy:
            return x.clone(memory_format=contiguous_format)
        return x[...]
    if type(x) is CapsuleType:
        if device is not None:
            raise ValueError("device= cannot be honoured for a bare capsule; pass the array")
        out: Tensor = _C.dlpack_import(x)
        return out.clone(memory_format=contiguous_format) if copy else out
    _C.check_torch_export(x)
    method = getattr(x, "__dlpack__", None)
    if method is None:
        raise TypeError(f"{type(x).__name__} does not support DLPack (no __dlpack__ method)")
    kwargs: dict[str, Any] = {"max_version": DLPACK_VERSION}
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
            method(**kwargs)
            raise ValueError(f"from_dlpack(copy=False): the producer needs a copy: {e}") from e
        if want_dev is not None and (want_dev[0] == 2 or _producer_device(x)[0] == 2):
            # The producer cannot reach the device: bridge copies (the copy engine).
            return transfer(_from_dlpack_policy(x), want_dev)
        raise
    flags = _C.dlpack_flags(capsule) if type(capsule) is CapsuleType else 0
    out = _C.dlpack_import(capsule)
    if want_dev is not None and out.__dlpack_device__() != want_dev:
        raise BufferError(f"the producer gave a {out.device} tensor, not the requested device {device!r}")
    if copy and not (honoured_copy and flags & FLAG_IS_COPIED):
        # The producer did not say it copied (a legacy capsule cannot; some
        # producers accept copy= and ignore it): copying is ours to do.
        out = out.clone(memory_format=contiguous_format)
    return out


_C._register("dlpack_export", to_dlpack)
_C._register("dlpack_import", _from_dlpack_policy)
