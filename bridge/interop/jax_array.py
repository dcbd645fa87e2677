"""JAX's array protocol: ``Tensor.__jax_array__`` (JEP 28661).

What jax (0.10) does with the protocol: ``jnp.asarray``/``jnp.array``, a
``jax.Array``'s operators (``jax_array + t``, ``t * jax_array``) and the
``jax.numpy`` functions that convert their arguments before tracing
(``jnp.stack``, ``jnp.concatenate``, ``jnp.einsum``) call ``x.__jax_array__()``
and use the ``jax.Array`` it returns. Abstractification does not: most
``jax.numpy`` functions are jitted (``jnp.sin``, ``jnp.sum``, ``jnp.add``), and a
bridge tensor passed to them, to a ``jax.jit``/``vmap``/``grad`` function or to
a ``lax`` primitive is jax's ValueError ("Triggering __jax_array__() during
abstractification is no longer supported"); convert it first with
``jnp.asarray``.

:func:`to_jax` makes that ``jax.Array``: zero-copy through DLPack
(``jax.dlpack.from_dlpack``, which asks ``Tensor.__dlpack__`` for a legacy
capsule) where jax can take the memory as it is, else a copy. jax cannot take
read-only memory zero-copy (it asks for a legacy capsule, which cannot say
read-only, and jax may reuse an imported buffer it is given), memory that is
not a permutation of a compact layout, or sub-byte types; those are copied
(through NumPy on the host, a device clone on CUDA). jax's own rules then
apply: without ``jax_enable_x64`` 64-bit types arrive as 32-bit ones (a copy,
as ``jnp.asarray`` of a NumPy array), and jax copies memory it finds
misaligned.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bridge.core import strides as S
from bridge.core.layout import contiguous_format
from bridge.core.native import _C
from bridge.core.tensor import Tensor

__all__ = ["to_jax"]


def _shareable(t: Tensor) -> bool:
    """Whether jax's DLPack import can take ``t``'s memory as it is."""
    _, bits, lanes = t.dtype.dlpack
    return (
        _C.lend(t.is_readonly, _C.CONSUMER_UNFLAGGED) != _C.LEND_REFUSED  # jax's arrays cannot say read-only
        and bits >= 8
        and lanes == 1
        and S.is_non_overlapping_and_dense(t.shape, t.stride())
    )


def to_jax(t: Tensor) -> Any:
    """``t`` as a ``jax.Array`` (what ``t.__jax_array__()`` returns): sharing its
    memory through DLPack where jax can take it as it is, else a copy (see the
    module's docstring). ImportError without jax; TypeError for a dtype that
    neither jax's DLPack nor NumPy can carry (``float4_e2m1fn_x2``);
    RuntimeError for device memory jax cannot reach (a CUDA tensor with a
    CPU-only jax)."""
    import jax.dlpack
    import jax.numpy as jnp

    if _shareable(t):
        try:
            return jax.dlpack.from_dlpack(t)
        except (BufferError, RuntimeError, TypeError, ValueError):
            pass  # refused by jax (a layout or dtype it does not take): copied below
    if t.device.is_host_accessible:
        return jnp.asarray(np.asarray(t))
    return jax.dlpack.from_dlpack(t.clone(memory_format=contiguous_format))


_C._register("jax_array", to_jax)
