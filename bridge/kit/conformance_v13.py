"""Producer rules of DLPack v1.3 past the basics, and of the protocols next to
DLPack: strides never NULL on any export path, packed sub-byte types, the C
exchange API's version chain, ``__jax_array__``, the Arrow C Device Stream
and cuda.core's CUDA stream protocol.

Each check is not applicable where the producer does not speak what it
judges (a dtype of 8 bits or more, no ``__dlpack_c_exchange_api__``, no
``__jax_array__``, no ``__arrow_c_device_stream__``, host memory for streams),
so a library is held only to what it offers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bridge._native import ffi
from bridge.core.native import _drivers
from bridge.interop.dlpack import from_dlpack as _bridge_from_dlpack
from bridge.kit.capsules import inspect_capsule, same_values
from bridge.kit.conformance_report import FAILED, NOT_APPLICABLE, PASSED, WARNING, exc_text, short
from bridge.kit.conformance_subject import Outcome, Rule, Subject, call_dlpack, registrar

__all__ = ["RULES"]

#: The rules of this module, in the order they run.
RULES: list[Rule] = []
_rule = registrar(RULES)

_PADDED = 4  # DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
_API_NAME = "dlpack_exchange_api"
_MAX_CHAIN = 64
_MAX_BATCHES = 1024


# ------------------------------------------------------------------ strides


@_rule(
    "non-null-strides",
    "no export path (versioned, legacy, copy=True, the C exchange API) gives NULL strides for ndim > 0",
    "non-null-strides",
)
def _r_non_null_strides(s: Subject) -> Outcome:
    obj = s.fresh()
    cap, err = s.export(obj)
    if err is not None:
        return NOT_APPLICABLE, f"the export raised {exc_text(err)} (see the protocol rules)"
    view = inspect_capsule(cap)
    if view is None or view.ndim <= 0:
        return NOT_APPLICABLE, "ndim is 0: strides may be NULL" if view is not None else "no DLPack capsule"
    modern = view.version is not None and view.version >= (1, 2)
    version = f"v{view.version[0]}.{view.version[1]}" if view.version else "legacy"
    checked, lenient = [], []
    exports: list[tuple[str, Any]] = [("versioned" if view.versioned else "legacy", cap)]
    legacy, err = call_dlpack(s.fresh())
    if err is None and legacy is not None:
        exports.append(("__dlpack__()", legacy))
    copied, err = s.export(s.fresh(), copy=True)
    if err is None and copied is not None:
        exports.append(("copy=True", copied))
    for what, c in exports:
        v = inspect_capsule(c)
        if v is None:
            continue
        checked.append(what)
        if v.strides is None:
            own = v.version is not None and v.version >= (1, 2)
            if own or (modern and v.version is None):
                return FAILED, (f"{what} gave NULL strides for ndim {v.ndim} from a producer of {version} "
                                "(v1.2+ requires them; cupy#2095)")  # fmt: skip
            lenient.append(what)
    api = getattr(type(obj), "__dlpack_c_exchange_api__", None)
    if api is not None:
        outcome = _api_strides(api, s.fresh(), modern)
        if outcome is not None:
            return outcome
        checked.append("the C exchange API")
    if lenient:
        return WARNING, (f"{', '.join(lenient)} gave NULL strides (compact; allowed before v1.2, and the "
                         f"producer declares {version})")  # fmt: skip
    return PASSED, f"strides set on every path: {', '.join(checked)}"


def _api_strides(api: Any, obj: Any, modern: bool) -> Outcome | None:
    """A failure of the exchange API's paths to set strides, or None."""
    try:
        peek = _drivers.api_peek(api, obj)
    except Exception as e:  # the table may have no peek, or refuse this object
        peek = None
        if "NULL" in str(e) and "strides" in str(e):
            return FAILED, f"dltensor_from_py_object_no_sync: {exc_text(e)}"
    if peek is not None and peek[3] > 0 and peek[8] is None and modern:
        return FAILED, "dltensor_from_py_object_no_sync gave NULL strides for ndim > 0"
    try:
        _drivers.api_convert(api, _bridge_api(), obj)  # bridge refuses NULL strides from v1.2+
    except BufferError as e:
        if "NULL strides" in str(e):
            return FAILED, f"managed_tensor_from_py_object_no_sync gave NULL strides: {exc_text(e)}"
    except Exception:
        pass  # not this rule's concern (the exchange-api-chain rule judges the table)
    return None


def _bridge_api() -> Any:
    from bridge.core.tensor import Tensor

    return Tensor.__dlpack_c_exchange_api__


# ------------------------------------------------------- packed sub-byte types


def _read_subbyte(cap: Any) -> Any:
    """The values of a sub-byte capsule as the spec says to read them (packed
    unless flagged padded), through bridge (which unpacks with copy=True)."""
    t = _bridge_from_dlpack(cap, copy=True)
    return t.tolist()


@_rule(
    "packed-subbyte",
    "a sub-byte export reads right by the spec: packed unless IS_SUBBYTE_TYPE_PADDED, legacy always packed",
    "packed-subbyte",
)
def _r_packed_subbyte(s: Subject) -> Outcome:
    obj = s.fresh()
    cap, err = s.export(obj)
    if err is not None:
        return NOT_APPLICABLE, f"the export raised {exc_text(err)} (see the protocol rules)"
    view = inspect_capsule(cap)
    if view is None:
        return NOT_APPLICABLE, "no DLPack capsule"
    _, bits, lanes = view.dtype
    if bits >= 8:
        return NOT_APPLICABLE, f"{bits}-bit elements: not a sub-byte type"
    flags = view.flags or 0
    if lanes > 1:
        if flags & _PADDED:
            return FAILED, f"a packed type (bits {bits}, lanes {lanes}) flagged IS_SUBBYTE_TYPE_PADDED"
        return PASSED, f"a packed type of {lanes} {bits}-bit values per element, not flagged padded"
    tolist = getattr(obj, "tolist", None)
    if not s.host or not callable(tolist):
        return NOT_APPLICABLE, "values not compared: no tolist() on host memory"
    want = tolist()
    notes = []
    kind = "padded (flagged)" if flags & _PADDED else "packed (no IS_SUBBYTE_TYPE_PADDED)"
    got = _read_subbyte(cap)
    if not same_values(got, want):
        return FAILED, f"the {view.name} capsule read as {kind} holds {short(got)}, tolist() is {short(want)}"
    notes.append(f"{view.name}: {kind}, values right")
    legacy, err = call_dlpack(s.fresh())
    if err is None and legacy is not None and inspect_capsule(legacy) is not None:
        got = _read_subbyte(legacy)
        if not same_values(got, want):
            return FAILED, (f"the legacy capsule (which cannot say padded: its values are packed) reads as "
                            f"{short(got)}, tolist() is {short(want)}")  # fmt: skip
        notes.append("legacy: packed, values right")
    elif err is not None:
        notes.append(f"legacy refused ({exc_text(err)})")
    return PASSED, "; ".join(notes)


# ------------------------------------------------- the exchange API's chain


@_rule(
    "exchange-api-chain",
    "__dlpack_c_exchange_api__'s version chain is finite and older down prev_api; its v1 table is complete",
    "exchange-api-chain",
)
def _r_exchange_chain(s: Subject) -> Outcome:
    obj = s.fresh()
    api = getattr(type(obj), "__dlpack_c_exchange_api__", None)
    if api is None:
        return NOT_APPLICABLE, "the type has no __dlpack_c_exchange_api__"
    if type(api).__name__ != "PyCapsule":
        return FAILED, f"__dlpack_c_exchange_api__ is a {type(api).__name__}, not a PyCapsule"
    name, addr = _drivers.capsule_info(api)
    if name != _API_NAME:
        return FAILED, f"the exchange API capsule is named {name!r}, not {_API_NAME!r}"
    h = ffi.cast("DLPackExchangeAPIHeader *", addr)
    chain: list[tuple[int, int]] = []
    known = None
    while h != ffi.NULL:
        if len(chain) == _MAX_CHAIN:
            return FAILED, f"prev_api does not end within {_MAX_CHAIN} tables (a loop?)"
        version = (int(h.version.major), int(h.version.minor))
        if chain and version >= chain[-1]:
            return FAILED, f"prev_api of version {chain[-1]} is version {version}, not an older one"
        chain.append(version)
        if version[0] == 1 and known is None:
            known = ffi.cast("DLPackExchangeAPI *", h)
        h = h.prev_api
    text = " -> ".join(f"{a}.{b}" for a, b in chain)
    if known is None:
        return WARNING, f"chain {text} holds no major version 1 table: DLPack 1 consumers fall back to __dlpack__"
    missing = [f for f in ("managed_tensor_allocator", "managed_tensor_from_py_object_no_sync",
                           "managed_tensor_to_py_object_no_sync", "current_work_stream")
               if getattr(known, f) == ffi.NULL]  # fmt: skip
    if missing:
        return FAILED, f"the major version 1 table leaves {', '.join(missing)} NULL (never NULL in v1.3)"
    try:
        out = _drivers.api_convert(api, _bridge_api(), obj)
    except Exception as e:
        return FAILED, f"chain {text}: managed_tensor_from_py_object_no_sync of the object failed: {exc_text(e)}"
    if s.snapshot is not None and not same_values(out.tolist(), s.snapshot):
        return FAILED, f"chain {text}: the exchanged tensor holds {short(out.tolist())}, not the object's values"
    return PASSED, f"chain {text}; the v1 table is complete and exchanges the object"


# ----------------------------------------------------------------- __jax_array__


@_rule("jax-array", "__jax_array__() gives a jax.Array of the object's shape and values", "jax-array")
def _r_jax_array(s: Subject) -> Outcome:
    obj = s.fresh()
    method = getattr(obj, "__jax_array__", None)
    if method is None:
        return NOT_APPLICABLE, "no __jax_array__"
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return NOT_APPLICABLE, "jax is not installed"
    try:
        a = jnp.asarray(obj)
    except Exception as e:
        return FAILED, f"jnp.asarray raised {exc_text(e)}"
    if not isinstance(a, jax.Array):
        return FAILED, f"jnp.asarray gave a {type(a).__name__}, not a jax.Array"
    shape = tuple(getattr(obj, "shape", a.shape))
    if tuple(a.shape) != shape:
        return FAILED, f"jnp.asarray gave shape {tuple(a.shape)}, the object's is {shape}"
    if s.snapshot is None:
        return PASSED, f"a jax.Array of shape {shape} ({s.snapshot_error or 'values not read'})"
    got = np.asarray(a)
    want = np.asarray(s.snapshot).astype(got.dtype)  # under jax's dtype rules (no x64: 32-bit)
    if not np.array_equal(got, want, equal_nan=got.dtype.kind in "fc"):
        return FAILED, f"jnp.asarray holds {short(got.tolist())}, the object {short(s.snapshot)}"
    return PASSED, f"a jax.Array of shape {shape}, dtype {a.dtype}, the object's values"


# ------------------------------------------------------- Arrow C Device Stream


@_rule(
    "arrow-device-stream",
    "__arrow_c_device_stream__ gives a C Device Stream whose arrays are on its device, then ends",
    "arrow-device-stream",
)
def _r_arrow_device_stream(s: Subject) -> Outcome:
    obj = s.fresh()
    method = getattr(obj, "__arrow_c_device_stream__", None)
    if method is None:
        return NOT_APPLICABLE, "no __arrow_c_device_stream__"
    try:
        cap = method()
    except Exception as e:  # the PyCapsule interface names no exception type for a refusal
        return NOT_APPLICABLE, f"__arrow_c_device_stream__() refused this object: {exc_text(e)}"
    if type(cap).__name__ != "PyCapsule":
        return FAILED, f"__arrow_c_device_stream__() returned a {type(cap).__name__}, not a PyCapsule"
    name, addr = _drivers.capsule_info(cap)
    if name != "arrow_device_array_stream":
        return FAILED, f"__arrow_c_device_stream__() returned a capsule named {name!r}"
    st = ffi.cast("struct ArrowDeviceArrayStream *", addr)
    if st.release == ffi.NULL:
        return FAILED, "the stream is already released"
    try:
        return _drain(st)
    finally:
        if st.release != ffi.NULL:
            st.release(st)


def _drain(st: Any) -> Outcome:
    def error(what: str, rc: int) -> Outcome:
        msg = st.get_last_error(st) if st.get_last_error != ffi.NULL else ffi.NULL
        text = ffi.string(msg).decode("utf-8", "replace") if msg != ffi.NULL else "no message"
        return FAILED, f"{what} returned {rc}: {text}"

    schema = ffi.new("struct ArrowSchema *")
    rc = st.get_schema(st, schema)
    if rc != 0:
        return error("get_schema", rc)
    if schema.release == ffi.NULL:
        return FAILED, "get_schema succeeded with a released schema"
    fmt = ffi.string(schema.format).decode("utf-8", "replace") if schema.format != ffi.NULL else "?"
    schema.release(schema)
    n = 0
    while n <= _MAX_BATCHES:
        d = ffi.new("struct ArrowDeviceArray *")
        rc = st.get_next(st, d)
        if rc != 0:
            return error("get_next", rc)
        if d.array.release == ffi.NULL:
            break
        problem = ""
        if d.device_type != st.device_type:
            problem = f"array {n} is on device type {d.device_type}, the stream's is {st.device_type}"
        elif list(d.reserved) != [0, 0, 0]:
            problem = f"array {n} has reserved fields {list(d.reserved)}, not zeroed"
        d.array.release(ffi.addressof(d.array))
        if not problem and d.array.release != ffi.NULL:
            problem = f"array {n}'s release left its release pointer set"
        if problem:
            return FAILED, problem
        n += 1
    else:
        return FAILED, f"the stream did not end within {_MAX_BATCHES} arrays"
    st.release(st)
    if st.release != ffi.NULL:
        return FAILED, "the stream's release left its release pointer set"
    return PASSED, f"schema {fmt!r}, {n} array(s) on device type {st.device_type}, then the end; released"


# ------------------------------------------------------- CUDA stream protocol


class _ProtocolStream:
    """A stream object of cuda.core's protocol: the legacy default stream."""

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, 1)


@_rule(
    "cuda-stream",
    "a CUDA producer takes a __cuda_stream__ object as stream= (or refuses it with TypeError)",
    "cuda-stream",
)
def _r_cuda_stream(s: Subject) -> Outcome:
    if s.device is None or s.device[0] not in (2, 13):  # CUDA, CUDA managed
        return NOT_APPLICABLE, f"device {s.device} is not CUDA memory: streams do not apply"
    _, err = s.export(s.fresh(), stream=_ProtocolStream())
    if err is None:
        return PASSED, "stream=<an object with __cuda_stream__ () -> (0, 1)> accepted"
    if isinstance(err, TypeError):
        return PASSED, f"stream objects refused with {exc_text(err)} (ints only: the array API's type)"
    return FAILED, f"stream=<an object with __cuda_stream__> raised {exc_text(err)}, not TypeError"
