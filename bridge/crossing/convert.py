"""``bridge.convert``: carry a tensor from any library to any other.

The object is imported with bridge's own importers (zero-copy), compared with
what the destination holds (:mod:`bridge.crossing.capabilities`), and the
smallest fix that makes it holdable is planned (:func:`plan`) and made
(:func:`convert`): nothing when the destination holds it as it is, else a
view (a dtype seen through ml_dtypes, an offset folded into the pointer, a
writable alias of memory a destination never writes) or one copy (contiguous,
aligned and writable at once) whose reasons are named.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import warnings
from collections.abc import Hashable
from typing import TypeVar, cast

import numpy as np

from bridge._native import lib
from bridge.core.device import device
from bridge.core.dtypes import dtype as DType
from bridge.core.dtypes import get_dtype, uint8
from bridge.core.native import _C
from bridge.core.tensor import Tensor, contiguous_format
from bridge.crossing import units
from bridge.crossing.arguments import read_columns, read_flag, read_policy
from bridge.crossing.capabilities import DESTINATIONS, Holds
from bridge.crossing.destinations import narrowed, resolve, resolve_type, take, taker
from bridge.crossing.fixes import NO_WANTS, CopyWarning, Fix, FixKind, Plan, Wants
from bridge.crossing.signature import Convert, ReadOnlyPolicy
from bridge.interop import asarray
from bridge.interop.arrow import from_arrow
from bridge.interop.arrow.imports import ArrowChunksError, ArrowNullsError, concatenate
from bridge.interop.dlpack import CapsuleType, from_dlpack, transfer
from bridge.interop.numpy import frombuffer

__all__ = ["convert", "plan", "Plan", "Fix", "FixKind", "CopyWarning", "ReadOnlyPolicy"]

_T = TypeVar("_T")


_BRIDGE_COPIES = ("requested", "device", "layout", "alignment", "read-only")


# ------------------------------------------------------------------ import


_UNPACK = Fix("unpack", "Arrow bools are bit-packed and a bool tensor holds one byte per value: bridge unpacks "
              "them into new memory", True)  # fmt: skip


_VALUE = Fix("value", "a NumPy scalar is an immutable value, not memory to share: bridge makes a 0-d tensor of it",
             True)  # fmt: skip

#: Python values convert() refuses, in these words for every destination: it
#: moves memory and does not choose dtypes (np.asarray and torch.tensor infer
#: different ones from the same list).
_PYTHON_VALUES = (list, tuple, int, float, complex)

_ARROW_METHODS = ("__arrow_c_array__", "__arrow_c_stream__", "__arrow_c_device_array__")


def _arrow_bools(obj: object) -> bool:
    """Whether ``obj`` is Arrow's bit-packed bools (pyarrow's ``bool``,
    polars' ``Boolean``; not the one-byte ``arrow.bool8``)."""
    kind = getattr(obj, "type", None) if type(obj).__module__.startswith("pyarrow") else getattr(obj, "dtype", None)
    return str(kind).lower() in ("bool", "boolean")


def _chunks(obj: object) -> int:
    """How many chunks a pyarrow ChunkedArray or a polars Series is in (1 for others)."""
    n = getattr(obj, "num_chunks", None)
    if n is None and callable(getattr(obj, "n_chunks", None)) and type(obj).__module__.startswith("polars"):
        n = obj.n_chunks()  # type: ignore[attr-defined]
    return n if isinstance(n, int) else 1


def _concatenated(obj: object, what: str, parts: list[Tensor] | None = None) -> tuple[Tensor, tuple[Fix, ...]]:
    """The chunks of ``obj`` (``what`` says how many) joined into one new
    tensor, and unpacked for bools: the ``parts`` already read where there
    are (a one-shot stream cannot be read again), else read anew."""
    fix = Fix("concatenate", f"{what} and one tensor is one buffer: bridge concatenates them into new memory",
              True)  # fmt: skip
    if parts:
        return concatenate(parts), (fix,)
    return from_arrow(obj, copy=True), (fix, _UNPACK) if _arrow_bools(obj) else (fix,)


def _nulls(obj: object, why: ArrowNullsError) -> ValueError:
    """convert's refusal of data with nulls, naming the ways it does take."""
    return ValueError(f"convert(): {why.args[0].split(';')[0]} and a tensor has no missing values: fill them "
                      "first (pyarrow.compute.fill_null(x, value), polars' x.fill_null(value)), or split off the "
                      "validity with bridge.from_arrow(x, with_mask=True), which returns (values, valid) tensors "
                      "that convert takes")  # fmt: skip


def _import_fixed(obj: object) -> tuple[Tensor, tuple[Fix, ...]]:
    """:func:`_import`, and the fixes made while importing, each a copy:
    Arrow's bit-packed bools (which DLPack and a zero-copy Arrow import
    refuse) unpacked, one byte per value; Arrow data in several chunks
    concatenated into one; a NumPy array of non-native byte order swapped; a
    NumPy scalar made a 0-d tensor. Arrow nulls are a ValueError naming what
    convert does take; tables (DataFrames, pyarrow Tables and RecordBatches)
    a TypeError naming their columns."""
    if units.is_table(obj):  # its columns are not one array (and a 1-column one would lose a dim)
        names = getattr(obj, "column_names", None)
        cols = [str(c) for c in (getattr(obj, "columns", ()) if names is None else names)]
        shown = ", ".join(repr(c) for c in cols[:5]) + (", ..." if len(cols) > 5 else "")
        raise TypeError(f"convert(): a {type(obj).__module__.split('.')[0]}.{type(obj).__name__} is a table "
                        f"({len(cols)} column{'s' if len(cols) != 1 else ''}: {shown}); plan() takes one array: "
                        f"plan one column (x[{cols[0] if cols else 'name'!r}])")  # fmt: skip
    if isinstance(obj, np.generic):  # before the byte order: a scalar's is always native
        return asarray(np.asarray(obj), copy=False), (_VALUE,)
    if isinstance(obj, np.ndarray) and not obj.dtype.isnative:
        return asarray(obj, copy=True), (Fix("byte-order", f"NumPy dtype {obj.dtype.str!r} has non-native byte "
                                             "order and a tensor holds native values: bridge byte-swaps them into "
                                             "new memory", True),)  # fmt: skip
    try:
        if type(obj).__module__.startswith("pyarrow") and _arrow_bools(obj):
            # (its __dlpack__ refuses bools with a TypeError, which reads as "no max_version")
            chunks = _chunks(obj)
            if chunks > 1:
                return _concatenated(obj, f"the Arrow {type(obj).__name__} has {chunks} chunks")
            return from_arrow(obj, copy=True), (_UNPACK,)
        try:
            return _import(obj), ()
        except (ArrowChunksError, ArrowNullsError):
            raise  # (read already: a one-shot stream cannot be read again)
        except (TypeError, ValueError, BufferError):
            if not any(hasattr(obj, m) for m in _ARROW_METHODS):
                raise
            try:
                return from_arrow(obj, copy=False), ()  # its DLPack export refused what Arrow shares
            except ValueError as why:
                if "bit-packed" not in str(why) or isinstance(why, (ArrowChunksError, ArrowNullsError)):
                    raise
            chunks = _chunks(obj)
            if chunks > 1:
                return _concatenated(obj, f"the Arrow data of a {type(obj).__name__} is in {chunks} chunks")
            return from_arrow(obj, copy=True), (_UNPACK,)
    except ArrowChunksError as why:
        return _concatenated(obj, why.args[0].split(";")[0], why.parts)
    except ArrowNullsError as why:
        raise _nulls(obj, why) from None


def _import(obj: object) -> Tensor:
    """A bridge tensor over ``obj``'s memory, by bridge's importers (the
    bridge tensor itself, DLPack, Arrow, the array interfaces and buffers).
    TypeError for an object bridge cannot import; bridge.from_dlpack's
    BufferError for a DLPack export the producer refuses (a torch tensor
    that requires grad, a lazy conjugate, sparse or quantized ones)."""
    if isinstance(obj, Tensor):
        return obj
    _C.convert_read()  # (counted: a source is read once per call)
    if isinstance(obj, np.ndarray):  # from_numpy: ml_dtypes types too, which NumPy's DLPack refuses
        return asarray(obj, copy=False)
    if isinstance(obj, bytes):  # its bytes, read-only, as a bytearray's or a memoryview's are
        return frombuffer(obj, dtype=uint8)
    if isinstance(obj, _PYTHON_VALUES):
        raise TypeError(f"convert(): a Python {type(obj).__name__} holds values, not memory; make an array of it "
                        "first (np.asarray(x), torch.tensor(x), ...), which chooses its dtype: convert moves "
                        "memory and chooses none")  # fmt: skip
    # Arrow objects by their Arrow structs, before their DLPack (pyarrow's __dlpack__ of a
    # FixedShapeTensorArray ignores the values' offset and most permutations: wrong values)
    if any(hasattr(obj, m) for m in _ARROW_METHODS):
        return from_arrow(obj)
    # (a producer may offer only the C exchange API: from_dlpack reads it, as the fast path does)
    if hasattr(obj, "__dlpack__") or hasattr(type(obj), "__dlpack_c_exchange_api__") or type(obj) is CapsuleType:
        return from_dlpack(obj)
    if type(obj).__module__.split(".")[0] == "pyarrow":  # pyarrow Buffers, Tensors, ...
        return from_arrow(obj)
    try:
        return asarray(obj, copy=False)
    except ValueError as err:
        if "exposes no memory" not in str(err):
            raise
    raise TypeError(f"convert(): bridge cannot import a {type(obj).__module__}.{type(obj).__qualname__}: it "
                    "exposes no memory (DLPack, Arrow, the array interfaces or a buffer)")  # fmt: skip


# ------------------------------------------------------------------ planning


def _judged(t: Tensor, h: Holds) -> int:
    """The one judgement of ``h`` (C's ``convert_judge``, which the fast path
    also asks): the ``_C.JUDGE_*`` bits of every reason ``h`` does not hold
    ``t`` as it is."""
    spec = _SPECS.get(h.name)
    if spec is None or spec["holds"] is not h:
        spec = _SPECS[h.name] = _spec(h)
    return _C.convert_judge(spec["record"], t)


def _layout_problem(t: Tensor, h: Holds, why: int) -> str:
    """Why ``h`` cannot hold ``t``'s strides, in words ("" when it can)."""
    if why & _C.JUDGE_NEGATIVE:
        return f"{h.name} cannot hold negative strides {t.stride()}"
    if why & _C.JUDGE_ZERO_STRIDE:
        return f"{h.name} cannot hold zero strides {t.stride()} (a broadcast view)"
    if why & _C.JUDGE_NOT_CONTIGUOUS:
        return f"{h.name} holds only row-major (contiguous) tensors, not strides {t.stride()}"
    if why & _C.JUDGE_NOT_COMPACT:
        return f"{h.name} holds only compact tensors (a permutation of dense memory), not strides {t.stride()}"
    return ""


def _refuse_shape(t: Tensor, h: Holds, why: int) -> None:
    if why & _C.JUDGE_ZERO_D:
        raise BufferError(f"convert(): {h.name} cannot hold a 0-d tensor (reshape(1) it)")
    if why & _C.JUDGE_NDIM:
        raise BufferError(f"convert(): {h.name} holds at most {h.max_ndim} dims, got a {t.ndim}-d tensor")
    if why & _C.JUDGE_ND_BOOL:
        raise BufferError(f"convert(): {h.name} holds bool tensors of one dim only, got a {t.ndim}-d one")
    if why & _C.JUDGE_ZERO_WIDTH:
        raise BufferError(f"convert(): {h.name} cannot hold rows of no elements (shape {tuple(t.shape)})")
    if why & _C.JUDGE_DEVICE and not _reachable(t, h):
        raise BufferError(f"convert(): {h.name} holds {', '.join(sorted(h.devices))} memory; this tensor is on "
                          f"{t.device} and bridge does not copy between them")  # fmt: skip


def _reachable(t: Tensor, h: Holds) -> bool:
    """Whether bridge can copy ``t`` onto the device ``_copy`` picks for ``h``
    (the C device table's one rule, as ``__dlpack__(dl_device=...)`` uses it)."""
    target = "cuda" if "cuda" in h.devices else "cpu"
    return target in h.devices and bool(lib.bridge_device_copyable(t.device.to_dlpack()[0], device(target).to_dlpack()[0]))


def _dtype_fix(t: Tensor, h: Holds, why: int) -> Fix | None:
    if not why & (_C.JUDGE_DTYPE_VIEW | _C.JUDGE_DTYPE):
        return None
    name = t.dtype.name
    if why & _C.JUDGE_DTYPE_VIEW:
        return Fix("dtype-view", f"{h.name}'s DLPack import refuses {name}: the same bytes are viewed as "
                                 f"ml_dtypes' {name}", False)  # fmt: skip
    if not why & _C.JUDGE_DTYPE:
        return None
    setting = h.wide_setting
    hint = f" (it holds 64-bit dtypes only with {setting[1].rpartition('.')[2]} set)" if setting and name in (
        "int64", "uint64", "float64", "complex128") else ""  # fmt: skip
    raise BufferError(f"convert(): {h.name} cannot hold {name}{hint}; convert x.to(a dtype it holds) instead")


def _read_only(h: Holds) -> Fix:
    """The default policy's fix for read-only memory ``h`` could write: a copy."""
    return Fix("read-only", f"the memory is read-only and {h.name} cannot say so (its tensors are writable)", True)


def _plan(t: Tensor, h: Holds, copy: bool | None, readonly: ReadOnlyPolicy, why: int | None = None) -> Plan:
    """The fixes ``h`` needs of ``t``, in order, from the one judgement
    (``why``, the C engine's on this pass; judged here when None), worded;
    BufferError for what ``h`` cannot hold at all. ``t`` is read only for
    the words of reasons that name it (None where ``why`` has none)."""
    if why is None:
        why = _judged(t, h)
    _refuse_shape(t, h, why)
    fixes: list[Fix] = []
    view = _dtype_fix(t, h, why)
    if view is not None:
        fixes.append(view)
    if copy and not h.always_copies:  # (the destination's own copy is the one asked for)
        fixes.append(Fix("requested", "copy=True asks for a copy", True))
    if why & _C.JUDGE_DEVICE:
        fixes.append(Fix("device", f"{h.name} holds {', '.join(sorted(h.devices))} memory, not {t.device}", True))
    layout = _layout_problem(t, h, why)
    if layout:  # (a zero-size tensor has no bytes to share: re-laying it out copies nothing)
        fixes.append(Fix("layout", layout, t.numel() > 0))
    if why & _C.JUDGE_ALIGNMENT:
        align = h.alignment_of(t.dtype.name, t.itemsize)
        whole = f" (whole {t.dtype.name} elements)" if align > h.alignment else ""
        fixes.append(Fix("alignment", f"{h.name} needs its data {align}-byte aligned{whole}; this view starts at "
                                      f"{t.data_ptr() % align} bytes past a boundary", True))  # fmt: skip
    if not fixes and not why and not h.always_copies:
        return _as_is(h.name)  # the common case, without building a plan
    copied = any(f.copies for f in fixes)
    if why & (_C.JUDGE_READONLY | _C.JUDGE_ALIAS) and not copied and not h.always_copies:
        if why & _C.JUDGE_READONLY:
            if readonly == "error":
                raise BufferError(f"convert(readonly='error'): {h.name} writes through the memory it takes and "
                                  "this tensor's memory is read-only")  # fmt: skip
            if readonly == "copy":
                fixes.append(_read_only(h))
                copied = True
            else:
                fixes.append(Fix("read-only-share", f"readonly='share': {h.name} may write this read-only memory",
                                 False))  # fmt: skip
        else:
            fixes.append(Fix("alias", f"{h.name} asks for a legacy capsule, which cannot say read-only; it never "
                                      "writes its arrays, so the memory is lent through a writable alias", False))
    if h.always_copies:
        fixes.append(Fix("destination", f"{h.name} copies every import", True))
    elif not copied and why & _C.JUDGE_OFFSET:
        fixes.append(Fix("offset", f"{h.name} ignores DLPack's byte_offset: the view's offset is folded into "
                                   "the data pointer", False))  # fmt: skip
    return Plan(h.name, tuple(fixes))


_AS_IS: dict[str, Plan] = {}


def _as_is(name: str) -> Plan:
    """The plan with no fix for destination ``name`` (one per destination)."""
    p = _AS_IS.get(name)
    if p is None:
        p = _AS_IS[name] = Plan(name, ())
    return p




def wants(h: Holds, dtype: object = None, device_: object = None, contiguous: object = False,
          writable: object = False) -> Wants:  # fmt: skip
    """The caller's asks, read and checked against destination ``h``: a
    ``dtype`` (bridge's, the destination's, NumPy's, a name, anything with
    ``__dlpack_data_type__``) it must hold; a ``device`` (a string, a bridge
    or foreign device object, a ``__dlpack_device__`` tuple) it must hold;
    ``writable=True`` only where its arrays can be written. TypeError for an
    argument of the wrong kind, ValueError for an ask ``h`` cannot meet."""
    contiguous, writable = read_flag("contiguous", contiguous), read_flag("writable", writable)
    if dtype is None and device_ is None and not contiguous and not writable:
        return NO_WANTS
    dt = None if dtype is None else get_dtype(dtype)
    if dt is not None and not h.holds_dtype(dt.name):
        raise ValueError(f"convert(dtype={dt.name}): {h.name} cannot hold {dt.name}")
    dev = None if device_ is None else device(device_)  # (a __dlpack_device__() pair too)
    if dev is not None and dev.type not in h.devices:
        raise ValueError(f"convert(device={dev}): {h.name} holds {', '.join(sorted(h.devices))} memory, "
                         f"not {dev.type}")  # fmt: skip
    if writable and not h.gives_writable():
        raise ValueError(f"convert(writable=True): {h.name}'s arrays are immutable (it never writes them)")
    return Wants(dt, dev, bool(contiguous), bool(writable))


def _wanted(t: Tensor, w: Wants) -> tuple[Fix, ...]:
    """The copies ``w`` asks of ``t`` (none when it already is what is asked)."""
    if w is NO_WANTS:
        return ()
    fixes = []
    if w.dtype is not None and t.dtype is not w.dtype:
        fixes.append(Fix("dtype", f"dtype={w.dtype.name} asks for a cast from {t.dtype.name}", True, True))
    if w.device is not None and t.device != w.device:
        fixes.append(Fix("device", f"device={w.device} asks for the memory on {w.device}, not {t.device}", True, True))
    if w.contiguous and not t.is_contiguous():
        fixes.append(Fix("contiguous", f"contiguous=True asks for row-major memory, not strides {t.stride()}", True,
                         True))
    if w.writable and t.is_readonly:
        fixes.append(Fix("writable", "writable=True asks for writable memory and this memory is read-only", True, True))
    return tuple(fixes)


def _make_wanted(t: Tensor, w: Wants) -> Tensor:
    """``t`` as ``w`` asks: new row-major memory of the dtype asked for, filled
    by ``copy_`` on the host (the copy kernel and its casts), moved by the
    CUDA copy engine (``transfer``, its stream rules) when a device is asked
    for: one copy for a move or a cast, two for both. bridge has no device
    kernels: a cast of device memory goes through the host."""
    dt = w.dtype or t.dtype
    dev = w.device or t.device

    def on_host(x: Tensor) -> Tensor:
        out: Tensor = _C.new_empty(x.shape, dt, False)
        return out.copy_(x)

    if t.untyped_storage()._host_accessible:
        if dev == t.device or dev.type == "cpu":
            return on_host(t)
        shaped = dt is t.dtype and t.is_contiguous()
        return transfer(t if shaped else on_host(t), dev.to_dlpack())
    host = transfer(t, (1, 0))
    if dt is not t.dtype or not host.is_contiguous():
        host = on_host(host)
    return host if dev.type == "cpu" else transfer(host, dev.to_dlpack())


#: The reasons that only concern handing memory over (lending read-only
#: memory, an offset): moot when a same-library call returns its input
#: (convert.c's J_HANDOVER).
_HANDOVER = _C.JUDGE_READONLY | _C.JUDGE_ALIAS | _C.JUDGE_OFFSET
_LAYOUT = _C.JUDGE_NEGATIVE | _C.JUDGE_ZERO_STRIDE | _C.JUDGE_NOT_CONTIGUOUS | _C.JUDGE_NOT_COMPACT

_OWN: dict[str, type | None] = {}

_C.copy_warning_ignored(CopyWarning)  # (the category the engine asks the warnings filters about: the first one asked)


def _itself(obj: object, t: Tensor, made: tuple[Fix, ...], h: Holds, copy: bool | None, w: Wants,
            why: int | None = None) -> int | None:  # fmt: skip
    """The judgement of ``t`` (imported from ``obj``; ``why`` when the C engine
    made it on this pass), or None when ``obj`` is
    returned itself: a same-library call (``obj`` of the type ``h`` returns,
    or of a subclass where ``h.own_subclasses``) that needs no fix of its
    memory, no copy and no ask, as the library's own identity
    (``np.asarray(a)``, ``torch.as_tensor(t)``); the C engine's ``itself``."""
    if why is None or made:
        why = _judged(t, h)
    if made or copy or w is not NO_WANTS or why & ~(_HANDOVER | (_LAYOUT if t.numel() == 0 else 0)):
        return why  # (an empty tensor's strides are restrided, nothing copied: a handover matter too)
    own = _OWN.get(h.name, _OWN)
    if own is _OWN:
        found = resolve_type(h)
        own = _OWN[h.name] = found if isinstance(found, type) else None
    if own is not None and (type(obj) is own or (h.own_subclasses and isinstance(obj, own))):  # type: ignore[arg-type]
        return None
    return why


def _prepare(t: Tensor, made: tuple[Fix, ...], h: Holds, copy: bool | None, readonly: ReadOnlyPolicy,
             w: Wants, why: int | None = None) -> tuple[Tensor, Plan]:  # fmt: skip
    """Imported ``t`` (whose import made ``made``, judged ``why`` when it
    was) and the :class:`Plan` of what ``h`` needs of it: the import's fixes,
    the caller's asks (``w``, made here: one copy, after which ``copy=True``
    asks for no other) and the destination's."""
    asked = _wanted(t, w)
    if asked:
        if copy is False:
            raise BufferError(f"convert(copy=False): {'; '.join(f.reason for f in asked)}")
        t = _make_wanted(t, w)
        copy, why = None, None
    p = _plan(t, h, copy, readonly, why)
    return t, (Plan(p.destination, made + asked + p.fixes) if made or asked else p)


def plan(obj: object, to: object, *, copy: bool | None = None, readonly: ReadOnlyPolicy = "copy",
         dtype: object = None, device: object = None, contiguous: bool = False, writable: bool = False) -> Plan:
    """What ``convert(obj, to, ...)`` would do to one array, without doing it:
    the :class:`Plan` of fixes (none: zero-copy as it is). Imports ``obj``
    (zero-copy) to read its layout. Raises what :func:`convert` raises before
    it would copy, except ``copy=False``'s BufferError (the plan shows the
    copy instead)."""
    copy, readonly = read_policy(copy, readonly)
    h = resolve(to)
    w = wants(h, dtype, device, contiguous, writable)
    if not units.is_table(obj) and units.is_unit(obj):  # (a table's refusal names its columns)
        raise TypeError(f"plan() takes one array, not a {type(obj).__name__}: plan each array of it")
    t, made = _import_fixed(obj)
    if _itself(obj, t, made, h, copy, w) is None:
        return _as_is(h.name)  # a same-library call: its input
    asked = _wanted(t, w)
    if asked:  # planned as if made: a fresh row-major copy of the dtype, on the device, asked for
        t = _C.new_empty(t.shape, w.dtype or t.dtype, False)
        if w.device is not None and w.device != t.device:
            return Plan(h.name, made + asked)
        copy = None
    p = _plan(t, h, copy, readonly)
    return Plan(p.destination, made + asked + p.fixes) if made or asked else p


# ------------------------------------------------------------------ making


def _copy(t: Tensor, h: Holds) -> Tensor:
    """A row-major copy of ``t`` in fresh (64-byte aligned, writable) memory,
    on a device ``h`` holds."""
    if t.device.type not in h.devices:
        target = (2, t.device.index or 0) if "cuda" in h.devices else (1, 0)
        t = transfer(t, target)  # a fresh copy already: make it row-major only if needed
        if t.is_contiguous():
            return t
    if t.numel() == 0:  # clone() keeps an empty view's strides; Arrow wants the row-major ones
        empty: Tensor = _C.new_empty(t.shape, t.dtype, False)
        return empty
    out: Tensor = t.clone(memory_format=contiguous_format)
    return out


def _alias(t: Tensor) -> Tensor:
    """A writable tensor over ``t``'s read-only memory, keeping ``t`` alive:
    how read-only memory reaches a destination asking for a legacy capsule."""
    if t.numel() == 0:  # no bytes to share
        out: Tensor = t.clone()
        return out
    byte_strides = tuple(s * t.dtype.itemsize for s in t.stride())
    alias: Tensor = _C.from_memory(t.data_ptr(), t.dtype, t.shape, byte_strides, t, False,
                                   t.__dlpack_device__())  # fmt: skip
    return alias


def _unit_strides(t: Tensor) -> Tensor:
    """``t`` (a view) with the strides convert hands a destination, the one
    rule's (``_C.unit_strides``, which the C engine applies as it builds the
    managed tensor): a dim of one element says nothing with its stride, and
    a destination may refuse a negative one (mlx)."""
    strides = _C.unit_strides(t.shape, t.stride())
    if strides == t.stride():
        return t
    out: Tensor = t.as_strided(t.shape, strides, t.storage_offset())
    return out


def _make(t: Tensor, p: Plan, h: Holds, copy: bool | None) -> object:
    """The destination's object for ``t`` planned as ``p``: the plan's copy
    made (BufferError for ``copy=False``), a writable alias where planned,
    then handed over. No warning (the caller's)."""
    t = _unit_strides(t)
    if not p.fixes:
        return take(h, t)
    if copy is False and p.copies:
        raise BufferError(f"convert(copy=False): {p.reasons}")
    if any(f.kind in _BRIDGE_COPIES and not f.asked for f in p.fixes):  # (an ask's copy is made already)
        t = _copy(t, h)
    if any(f.kind in ("alias", "read-only-share") for f in p.fixes):
        t = _alias(t)
    return take(h, t)


def _general(obj: object, to: object, *, copy: bool | None = None, readonly: ReadOnlyPolicy = "copy",
             dtype: object = None, device: object = None, contiguous: bool = False, writable: bool = False,
             columns: object = None, stack: bool = False, judged: int | None = None) -> object:  # fmt: skip
    """convert()'s general path (the ``convert_slow`` up-call): every case the
    C fast path (``cdefs/crossing/convert.c``) does not finish, with ``obj``
    already imported when the fast path read it (and its judgement,
    ``judged``, when the engine judged that tensor: never judged again), and
    the batches, tables and streams of :mod:`bridge.crossing.units`.
    Registers ``to`` for the fast path on the way."""
    copy, readonly = read_policy(copy, readonly)
    chosen, stacked = read_columns(columns), read_flag("stack", stack)
    h = resolve(to)
    if not _C.convert_registered(to):
        _register(to, h)
    w = wants(h, dtype, device, contiguous, writable)
    if units.is_unit(obj) or chosen is not None or stacked:
        return units.convert_unit(obj, h, Leaf(h, copy, readonly, w, to), columns=chosen, stack=stacked)
    t, made = _import_fixed(obj)
    why = _itself(obj, t, made, h, copy, w, judged)
    if why is None:
        return obj
    t, p = _prepare(t, made, h, copy, readonly, w, why)
    out = _make(t, p, h, copy)
    unasked = p.unasked
    if copy is None and unasked and not _C.copy_warning_ignored(CopyWarning):
        warnings.warn(CopyWarning(f"convert() to {h.name} copied: {'; '.join(f.reason for f in unasked)}",
                                  unasked[0].kind, p.fixes), stacklevel=_stacklevel())  # fmt: skip
    return out


_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside bridge.crossing: the
    caller's line, however deep the unit being converted made the call."""
    f, level = sys._getframe(1), 1
    while f is not None and f.f_code.co_filename.startswith(_HERE):
        f, level = f.f_back, level + 1  # type: ignore[assignment]
    return level


@dataclasses.dataclass(frozen=True)
class Leaf:
    """How :mod:`bridge.crossing.units` converts each array of a batch, a
    table or a stream: into ``h``, with the call's ``copy``, ``readonly`` and
    asks ``w``; its steps are convert's own (import and plan, then make)."""

    h: Holds
    copy: bool | None
    readonly: ReadOnlyPolicy
    w: Wants
    to: object

    def again(self, unit: object, columns: list[Hashable] | None = None) -> object:
        """``convert(unit, to)`` with this call's arguments (and ``columns``):
        a unit made here (a table's columns, as a dict) or read here (a
        stream's batch) through convert itself, whose C engine takes a batch
        or a table in one pass."""
        kw: dict[str, object] = {}
        if columns is not None:
            kw["columns"] = columns
        if self.copy is not None:
            kw["copy"] = self.copy
        if self.readonly != "copy":
            kw["readonly"] = self.readonly
        if self.w is not NO_WANTS:
            kw.update(dtype=self.w.dtype, device=self.w.device, contiguous=self.w.contiguous,
                      writable=self.w.writable)  # fmt: skip
        return convert(unit, self.to, **kw)  # type: ignore[call-overload]

    def imported(self, obj: object) -> tuple[Tensor, tuple[Fix, ...]]:
        """``obj`` imported, and the fixes its import made (convert's importers)."""
        return _import_fixed(obj)

    def prepare_imported(self, t: Tensor, made: tuple[Fix, ...]) -> tuple[Tensor, Plan]:
        """Imported ``t`` planned, the caller's asks made (one copy)."""
        return _prepare(t, made, self.h, self.copy, self.readonly, self.w)

    def dry_plan(self, t: Tensor, made: tuple[Fix, ...]) -> Plan:
        """What :meth:`prepare_imported` would plan, copying nothing."""
        asked = _wanted(t, self.w)
        if asked:
            return Plan(self.h.name, made + asked)
        p = _plan(t, self.h, self.copy, self.readonly)
        return Plan(p.destination, made + p.fixes) if made else p

    def region_copy(self, region: Tensor) -> Tensor:
        """One copy of ``region`` that settles what the caller asks and what
        the destination needs of its memory (a cast, a device, fresh writable
        aligned memory), which its views then share."""
        asked = _wanted(region, self.w)
        return _make_wanted(region, self.w) if asked else _copy(region, self.h)

    def replan(self, t: Tensor) -> Plan:
        """The plan of a tensor the caller's asks were already made for."""
        return _plan(t, self.h, None, self.readonly)

    def make(self, t: Tensor, p: Plan) -> object:
        """The destination's object for ``t`` planned as ``p`` (no warning)."""
        return _make(t, p, self.h, self.copy)

    def warn(self, leaves: dict[str, tuple[Fix, ...]]) -> None:
        """One CopyWarning naming every array copied without being asked, and
        why (none: no warning), at the caller's line."""
        copied = {path: fixes for path, fixes in leaves.items() if any(f.copies and not f.asked for f in fixes)}
        if self.copy is None:
            _warn_copied(self.h, copied, len(leaves))


def _warn_copied(h: Holds, copied: dict[str, tuple[Fix, ...]], total: int) -> None:
    """One CopyWarning for the ``copied`` arrays (path -> fixes) of a batch or
    table of ``total``, at the caller's line (none copied: none)."""
    if copied and not _C.copy_warning_ignored(CopyWarning):  # (an ignored one is not made)
        warnings.warn(_copy_warning(h, copied, total), stacklevel=_stacklevel())


def _copy_warning(h: Holds, copied: dict[str, tuple[Fix, ...]], total: int) -> CopyWarning:
    """The CopyWarning of the ``copied`` arrays (path -> fixes, one at least)
    of a batch or table of ``total``: each named with what was copied unasked."""
    every = tuple(f for fixes in copied.values() for f in fixes)
    first = next(f for f in every if f.copies and not f.asked)
    said = "; ".join(f"{path}: " + "; ".join(f.reason for f in fixes if f.copies and not f.asked)
                     for path, fixes in copied.items())  # fmt: skip
    return CopyWarning(f"convert() to {h.name} copied {len(copied)} of {total} arrays: {said}", first.kind, every,
                       copied)  # fmt: skip


#: The judgements whose words name nothing of the tensor (read-only memory,
#: an alias, an offset): their CopyWarning is made once per destination and
#: reason, and the C engine warns a new instance of it at each later call.
_SAID_ONCE = _C.JUDGE_READONLY | _C.JUDGE_ALIAS | _C.JUDGE_OFFSET
#: The judgements whose words name the tensor's strides and nothing else of
#: it (a layout the destination cannot hold): made once per destination,
#: reason and strides.
_SAID_BY_STRIDES = _SAID_ONCE | _LAYOUT


def _copied(to: object, why: int, t: Tensor | None, leaves: list[tuple[tuple[object, ...], int, Tensor | None]] | None,
            total: int) -> tuple[CopyWarning, int]:  # fmt: skip
    """The ``convert_copied`` up-call: the CopyWarning of what the C engine
    copied unasked on its one pass, in the words :func:`_plan` gives its
    judgements (never judged again): of one array ``t`` judged ``why``, or of
    the ``leaves`` of a batch or a table of ``total`` arrays, each ``(path,
    why, tensor)`` (a path is the tuple of keys and indexes that reach it;
    the tensor None for Arrow values, whose one reason is read-only memory).
    Returns the warning, for the engine to warn at the caller's line, and
    what its words depend on besides the destination and the judgements,
    for the engine to remember it by: 1 nothing (none names a tensor), 2 one
    array's strides, 0 more (an address, a dtype: worded each time)."""
    h = resolve(to)
    if leaves is not None:
        said = {"".join(f"[{k!r}]" for k in path): _plan(cast(Tensor, lt), h, None, "copy", lwhy).fixes
                for path, lwhy, lt in leaves}  # fmt: skip
        return _copy_warning(h, said, total), int(all(not lwhy & ~_SAID_ONCE for _, lwhy, _ in leaves))
    p = _plan(cast(Tensor, t), h, None, "copy", why)
    unasked = p.unasked
    one = CopyWarning(f"convert() to {h.name} copied: {'; '.join(f.reason for f in unasked)}", unasked[0].kind,
                      p.fixes)  # fmt: skip
    return one, 1 if not why & ~_SAID_ONCE else 2 if not why & ~_SAID_BY_STRIDES else 0


_C._register("convert_copied", _copied)


_ASKS: dict[tuple[object, ...], tuple[DType | None, bool, bool] | None] = {}


def _asks(to: object, dtype: object, device_: object, contiguous: object, writable: object) -> object:
    """The ``convert_asks`` up-call: the caller's asks of one array read and
    checked against destination ``to`` (:func:`wants`: TypeError or
    ValueError as it says) for the C engine, as ``(dtype or None,
    contiguous, writable)``; None for what the engine leaves to the general
    path (``device=``). Remembered per kind of call (by the arguments and
    their types: ``1`` is not ``True``), so that a loop pays a lookup."""
    try:
        key: tuple[object, ...] | None = (to, type(dtype), dtype, type(device_), device_, type(contiguous), contiguous,
                                          type(writable), writable)  # fmt: skip
        known = _ASKS[key]  # type: ignore[index]
        return known
    except KeyError:
        pass
    except TypeError:  # an unhashable argument: read each time
        key = None
    h = resolve(to)
    w = wants(h, dtype, device_, contiguous, writable)
    read = None if w.device is not None else (w.dtype, w.contiguous, w.writable)
    if key is not None:
        if len(_ASKS) >= 256:
            _ASKS.clear()
        _ASKS[key] = read
    return read


_C._register("convert_asks", _asks)


_C._register("convert_slow", _general)


def _register_for(to: object) -> None:
    """Register destination ``to`` for the fast path (the ``convert_register_for``
    up-call, made when ``convert`` first meets it); a destination that cannot be
    named is left to the general path, which says why."""
    try:
        h = resolve(to)
    except (TypeError, ValueError):
        return
    if not _C.convert_registered(to):
        _register(to, h)


_C._register("convert_register_for", _register_for)


def _register(to: object, h: Holds) -> None:
    """Hand the C fast path destination ``to``: what ``h`` holds with no fix,
    and how to give it a tensor (its C exchange API, else its import).
    jax's record depends on a setting (``jax_enable_x64``): the fast path
    gets the dtypes it holds either way, and the general path the 64-bit ones
    (which it checks against the setting at each call). Destinations that
    copy every import, or that hold no host memory (CuPy: every source the
    fast path finishes is host memory, which they need moved) are left to the
    general path, remembered as such so that the C path does not ask again."""
    if h.always_copies or "cpu" not in h.devices:
        _C.convert_register(to, None, None)
        return
    if h.wide_setting is not None:
        h = narrowed(h)
    spec = _SPECS.get(h.name)
    if spec is None or spec["holds"] is not h:
        spec = _SPECS[h.name] = _spec(h)
    own = resolve_type(h)
    spec = {**spec, "own": own if isinstance(own, type) else None}
    if h.route == "self":
        _C.convert_register(to, None, spec)
        return
    api = getattr(resolve_type(h), "__dlpack_c_exchange_api__", None) if h.capsule == "versioned" else None
    if api is not None:
        try:
            _C.convert_register(to, api, spec)  # the destination's C exchange API: no capsule, no Python
            return
        except ValueError:  # an API without managed_tensor_to_py_object_no_sync
            pass
    result = resolve_type(h)
    _C.convert_register(to, np.ndarray if result is np.ndarray else taker(h), spec)


def _spec(h: Holds) -> dict[str, object]:
    """What the fast path's record of ``h`` holds (``_C.convert_register``'s
    spec), and that record made once (``"record"``), which the general path
    judges against."""
    spec: dict[str, object] = {
        "holds": h,
        "strides": ("any", "compact", "contiguous").index(h.strides), "negative": h.negative_strides,
        "zero": h.zero_strides, "byte_offset": h.byte_offset, "zero_d": h.zero_d,
        "max_ndim": -1 if h.max_ndim is None else h.max_ndim, "alignment": h.alignment, "nd_bool": h.nd_bool,
        "consumer": h.consumer(), "zero_width": h.zero_width,
        "devices": tuple(device(name).to_dlpack()[0] for name in sorted(h.devices)),
        "dtypes": tuple(get_dtype(name).dlpack for name in sorted(h.dtypes)),
        "dtype_views": tuple(get_dtype(name).dlpack for name in sorted(h.dtype_views - h.dtypes)),
        "element_aligned": tuple(get_dtype(name).dlpack for name in sorted(h.element_aligned & h.dtypes)),
        "own": None, "own_subclasses": h.own_subclasses,  # (the type is the registration's: it imports the library)
    }  # fmt: skip
    spec["record"] = _C.convert_record(spec)  # what convert_judge judges against
    return spec


# Every destination's spec, made when bridge is imported (a few hundred
# microseconds once): the first convert() into a destination then only
# looks its importer up, and costs little more than a later one.
_SPECS: dict[str, dict[str, object]] = {
    name: _spec(narrowed(h) if h.wide_setting is not None else h) for name, h in DESTINATIONS.items()
}


#: ``bridge.convert`` itself: C (``cdefs/crossing/convert.c``), its contract in
#: its docstring; the general path above does what the fast path does not.
convert: Convert = cast(Convert, _C.convert)
