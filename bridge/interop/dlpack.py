"""DLPack: zero-copy export and import of tensors (dlpack.h v1.3).

Export: ``Tensor.__dlpack__`` / ``__dlpack_device__`` are C methods
(``cdefs/interop/dlpack_export.c``) that parse and check every export keyword
(``stream``, ``max_version``, ``dl_device``, ``copy``) in one place and build
one managed tensor (struct, shape and strides in one allocation) from the
tensor's C struct, with ``manager_ctx`` holding the storage's owner; the
deleter and capsule destructor are C. ``Tensor.__dlpack_c_exchange_api__`` is
the v1.3 C exchange API capsule (``cdefs/interop/exchange_api.c``).
:func:`to_dlpack` is torch's name for ``__dlpack__``.

Import: :func:`from_dlpack` is C (``cdefs/interop/dlpack_import.c``), with its
``device=``/``copy=`` policy: it consumes a capsule, or asks an object for one
(one C function asks every producer, for ``from_dlpack``, ``from_numpy``,
``from_arrow`` and ``asarray`` alike), or uses its type's C exchange API;
it renames the capsule ``used_*`` and hands the managed tensor to a new
storage, which owns it and calls the producer's deleter exactly once, when
the last view lets go. For a CUDA producer (or a copy to CUDA) it passes the
thread's consumer stream (:func:`bridge.cuda_stream`, 1 by default) so the
producer orders its work before it; an export to stream S makes S wait for
the stream the memory's work was last ordered on.
"""

from __future__ import annotations

import types
from typing import TYPE_CHECKING, Any

from bridge._native import lib
from bridge.core.native import _C
from bridge.core.tensor import Tensor

if TYPE_CHECKING:
    from typing_extensions import CapsuleType as _Capsule

__all__ = ["from_dlpack", "to_dlpack", "DLPACK_VERSION", "FLAG_READ_ONLY", "FLAG_IS_COPIED",
           "FLAG_IS_SUBBYTE_TYPE_PADDED"]  # fmt: skip

# From dlpack.h, through the cffi module (written once, in the header).
DLPACK_VERSION: tuple[int, int] = (lib.DLPACK_MAJOR_VERSION, lib.DLPACK_MINOR_VERSION)
FLAG_READ_ONLY: int = lib.DLPACK_FLAG_BITMASK_READ_ONLY
FLAG_IS_COPIED: int = lib.DLPACK_FLAG_BITMASK_IS_COPIED
FLAG_IS_SUBBYTE_TYPE_PADDED: int = lib.DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED

CapsuleType = types.CapsuleType if hasattr(types, "CapsuleType") else type(_C.exchange_api)


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
    """A DLPack capsule for ``tensor``: ``tensor.__dlpack__(...)`` (torch's name).

    ``max_version`` None or major < 1 gives a legacy ``"dltensor"`` capsule,
    else ``"dltensor_versioned"`` (v1.3) with READ_ONLY / IS_COPIED flags.
    Raises BufferError for a read-only tensor asked for a legacy capsule (it
    cannot carry the flag), for ``copy=False`` when a copy would be needed, for
    a ``dl_device`` bridge cannot reach, and for a view that reaches past its
    storage; TypeError for anything but a bridge Tensor, TypeError/ValueError
    for malformed arguments (a host tensor takes stream None or -1 only).
    """
    out: _Capsule = _tensor_arg(tensor, "to_dlpack").__dlpack__(
        stream=stream, max_version=max_version, dl_device=dl_device, copy=copy
    )
    return out


def transfer(t: Tensor, dl_device: tuple[int, int]) -> Tensor:
    """A copy of ``t`` on ``dl_device`` (CPU or CUDA), made by the CUDA copy
    engine when device memory is involved (the view's byte span, its strides
    kept); BufferError for devices bridge cannot copy between, TypeError for
    anything but a bridge Tensor."""
    out: Tensor = _C.transfer(_tensor_arg(t, "transfer"), dl_device)
    return out


# ------------------------------------------------------------------ import

from_dlpack = _C.from_dlpack
