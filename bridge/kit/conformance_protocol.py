"""Producer rules on the protocol itself: the ``__dlpack__`` signature and
what the capsules it returns say.

``__dlpack_device__``, capsule names and ``max_version`` negotiation,
unknown keywords, the tensor's fields (shape, strides, dtype and byte order,
each against what the object says about itself) and its values, the READ_ONLY
and IS_COPIED flags, ``copy``, ``dl_device`` and ``stream``. Each rule reads the
capsules with :func:`bridge.kit.capsules.inspect_capsule`; the lifetime rules
(deleters, keep-alive) are in :mod:`bridge.kit.conformance_lifetime`.
"""

from __future__ import annotations

import ctypes
import itertools
import operator
from typing import Any

import numpy as np

from bridge.core.native import _C, _drivers
from bridge.core.strides import compact_strides, extent
from bridge.kit.capsules import (
    DEVICE_TYPES,
    DTYPE_BITS,
    FLAG_IS_COPIED,
    FLAG_READ_ONLY,
    LEGACY,
    CapsuleView,
    dlpack_code_of,
    inspect_capsule,
    numpy_dtype_of,
    read_values,
    same_values,
)
from bridge.kit.conformance_report import FAILED, NOT_APPLICABLE, PASSED, WARNING, exc_text, short
from bridge.kit.conformance_subject import (
    MAX_VERSION,
    Outcome,
    Rule,
    Subject,
    call_dlpack,
    kwargs_text,
    registrar,
)

__all__ = ["RULES", "WITHOUT_EXPORT"]

#: The protocol rules, in the order they run.
RULES: list[Rule] = []
_rule = registrar(RULES)

#: The rules that still apply to a source that cannot be exported at all.
WITHOUT_EXPORT = ("dlpack-device", "unknown-keyword", "dtype", "dl-device-impossible")

_IMPOSSIBLE_DEVICE = (99, 0)


def _legacy_only(s: Subject) -> Outcome | None:
    if s.speaks_versioned:
        return None
    return NOT_APPLICABLE, "the producer raises TypeError for max_version (legacy-only signature)"


@_rule(
    "dlpack-device", "__dlpack_device__() returns an (int, int) tuple with a dlpack.h device type",
    "device",
)
def _r_device(s: Subject) -> Outcome:
    obj = s.fresh()
    method = getattr(obj, "__dlpack_device__", None)
    if method is None:
        return FAILED, "no __dlpack_device__ method"
    dev = method()
    ints = (
        isinstance(dev, tuple)
        and len(dev) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in dev)
    )
    if not ints:
        return FAILED, f"returned {dev!r} ({type(dev).__name__}), not a tuple of two ints"
    dtype, dev_id = int(dev[0]), int(dev[1])
    if dtype not in DEVICE_TYPES:
        return FAILED, f"returned {dev!r}: device type {dtype} is not defined by dlpack.h"
    if dev_id < 0:
        return FAILED, f"returned {dev!r}: negative device id"
    note = "" if type(dev[0]) is int else f" (device type is a {type(dev[0]).__name__})"
    return PASSED, f"returned ({dtype}, {dev_id}) = {DEVICE_TYPES[dtype]}{note}"


@_rule("capsule-name-legacy", '__dlpack__() with no arguments returns a capsule named "dltensor"', "capsule")
def _r_name_legacy(s: Subject) -> Outcome:
    cap, err = call_dlpack(s.fresh())
    if err is not None:
        if s.readonly and isinstance(err, BufferError):
            return NOT_APPLICABLE, (
                f"the source is read-only and __dlpack__() refused a legacy capsule with "
                f"{exc_text(err)}, as it must (see read-only-legacy)"
            )
        return FAILED, f"__dlpack__() raised {exc_text(err)}"
    name = _drivers.capsule_info(cap)[0] if _is_capsule(cap) else None
    if name is None:
        return FAILED, f"__dlpack__() returned a {type(cap).__name__}, not a capsule"
    if name != LEGACY:
        return FAILED, f"__dlpack__() returned a capsule named {name!r}, expected 'dltensor'"
    return PASSED, "__dlpack__() returned 'dltensor'"


def _is_capsule(x: Any) -> bool:
    return type(x).__name__ == "PyCapsule"


def _versioned_outcome(cap: Any, request: tuple[int, int]) -> tuple[bool, str]:
    if not _is_capsule(cap):
        return False, f"max_version={request} returned a {type(cap).__name__}, not a capsule"
    view = inspect_capsule(cap)
    name = _drivers.capsule_info(cap)[0]
    if view is None:
        return False, f"max_version={request} gave a capsule named {name!r}"
    if not view.versioned:
        return False, (
            f"max_version={request} gave a legacy 'dltensor' capsule; a producer that takes "
            "max_version must answer >= (1, 0) with 'dltensor_versioned'"
        )
    assert view.version is not None
    if view.version[0] != 1:
        return False, f"max_version={request} gave version {view.version}, major must be 1"
    return (
        True,
        f"max_version={request} -> 'dltensor_versioned' v{view.version[0]}.{view.version[1]}",
    )


@_rule(
    "capsule-name-versioned", 'max_version=(1, 0) and (1, 3) give "dltensor_versioned" with major 1',
    "max_version",
)
def _r_name_versioned(s: Subject) -> Outcome:
    if not s.speaks_versioned:
        return WARNING, (
            "__dlpack__ raises TypeError for max_version: a legacy-only producer (pre-2023 "
            "signature); it cannot signal READ_ONLY or IS_COPIED and versioned rules do not apply"
        )
    notes = []
    for request in ((1, 0), MAX_VERSION):
        obj = s.fresh()
        cap, err = call_dlpack(obj, max_version=request)
        if err is not None:
            return FAILED, f"max_version={request} raised {exc_text(err)}"
        ok, note = _versioned_outcome(cap, request)
        if not ok:
            return FAILED, note
        notes.append(note)
    return PASSED, "; ".join(notes)


@_rule(
    "max-version-negotiation", "max_version=(0, 8) gives legacy, max_version=(2, 0) versioned 1.x",
    "max_version",
)
def _r_negotiation(s: Subject) -> Outcome:
    skip = _legacy_only(s)
    if skip:
        return skip
    notes = []
    cap, err = call_dlpack(s.fresh(), max_version=(0, 8))
    if err is not None:
        if not (s.readonly and isinstance(err, BufferError)):
            return FAILED, f"max_version=(0, 8) raised {exc_text(err)}"
        notes.append("max_version=(0, 8) refused (read-only source, BufferError)")
    else:
        name = _drivers.capsule_info(cap)[0] if _is_capsule(cap) else type(cap).__name__
        if name != LEGACY:
            return FAILED, (
                f"max_version=(0, 8) gave {name!r}; a consumer below 1.0 needs 'dltensor' "
                "(a versioned struct must never reach it)"
            )
        notes.append("max_version=(0, 8) -> 'dltensor'")
    del cap
    cap, err = call_dlpack(s.fresh(), max_version=(2, 0))
    if err is not None:
        return FAILED, f"max_version=(2, 0) raised {exc_text(err)}"
    ok, note = _versioned_outcome(cap, (2, 0))
    if not ok:
        return FAILED, note
    notes.append(note)
    return PASSED, "; ".join(notes)


@_rule("unknown-keyword", "__dlpack__(bogus=1) raises TypeError", "signature")
def _r_unknown_keyword(s: Subject) -> Outcome:
    _, err = call_dlpack(s.fresh(), bogus=1)
    if err is None:
        return FAILED, (
            "__dlpack__(bogus=1) returned a capsule: consumers cannot tell which keywords "
            "a producer understands"
        )
    if isinstance(err, TypeError):
        return PASSED, f"raised {exc_text(err)}"
    return FAILED, f"raised {exc_text(err)}, not TypeError"


# ------------------------------------------------------ the tensor's fields
#
# Each field of the exported tensor (shape, strides, dtype) is judged by its
# own check, against what the object says about itself; the values check
# fails only where no field explains a difference, so a wrong field is
# reported under its rule and nowhere else.

# Dimension orders tried when a producer reports no strides of its own (ndim! each).
_MAX_PERMUTED_NDIM = 4


def _own_shape(obj: Any) -> tuple[int, ...] | None:
    """The shape ``obj`` reports: its ``shape`` (a sequence of ints), else the
    nesting of its ``tolist()``; None when neither tells (a zero extent hides
    the dims after it in a nested list)."""
    try:
        shape = getattr(obj, "shape", None)
        if shape is not None and not callable(shape):
            return tuple(operator.index(n) for n in shape)
    except Exception:
        pass
    tolist = getattr(obj, "tolist", None)
    if not callable(tolist):
        return None
    try:
        x = tolist()
    except Exception:
        return None
    dims = []
    while isinstance(x, list):
        dims.append(len(x))
        if not x:
            return None
        x = x[0]
    return tuple(dims)


def _own_strides(obj: Any, itemsize: int) -> tuple[int, ...] | None:
    """The element strides ``obj`` reports: ``stride()`` (torch, bridge), else
    its ``__array_interface__`` (bytes; None there means C order); None when
    it reports neither."""
    stride = getattr(obj, "stride", None)
    if callable(stride):
        try:
            return tuple(operator.index(n) for n in stride())
        except Exception:
            pass
    try:
        iface = obj.__array_interface__
        shape = tuple(operator.index(n) for n in iface["shape"])
        strides = iface.get("strides")
    except Exception:
        return None
    if strides is None:
        return compact_strides(shape)
    if itemsize <= 0 or any(b % itemsize for b in strides):
        return None
    return tuple(b // itemsize for b in strides)


def _own_dtype(obj: Any) -> tuple[str, tuple[int, int]] | None:
    """The dtype ``obj`` reports, by name (NumPy's and bridge's ``name``,
    torch's ``torch.float32``), with its dlpack.h (code, bits); None when it
    reports none, or one NumPy has no plain name for (bool, ints, floats and
    complex are compared)."""
    try:
        dt = getattr(obj, "dtype", None)
    except Exception:
        return None
    if dt is None:
        return None
    name = getattr(dt, "name", None)
    if not isinstance(name, str):
        name = str(dt).rsplit(".", 1)[-1]
    code = dlpack_code_of(name)
    return (name, code) if code is not None else None


def _matters(shape: tuple[int, ...], a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Whether strides ``a`` and ``b`` address different elements of ``shape``
    (a dim of extent 1 has any stride; a zero-size array has no element)."""
    if 0 in shape or len(a) != len(b):
        return len(a) != len(b)
    return any(n > 1 and x != y for n, x, y in zip(shape, a, b))


def _reads_as(view: CapsuleView, strides: tuple[int, ...], want: Any) -> bool:
    """Whether the capsule's memory, read with ``strides`` from its first
    element, holds ``want``; only layouts inside the bytes the capsule itself
    claims are read."""
    code, bits, _ = view.dtype
    npdt = numpy_dtype_of(code, bits)
    shape = view.shape or ()
    if npdt is None or any(st < 0 for st in strides):
        return False
    lo, hi = view.span()
    _, end = extent(shape, strides, 0)  # past the last element these strides read
    if view.start + end * npdt.itemsize > hi or hi <= lo:
        return False
    buf = memoryview((ctypes.c_char * (hi - lo)).from_address(lo)).cast("B")
    a = np.ndarray(shape, npdt, buffer=buf, offset=view.start - lo,
                   strides=tuple(st * npdt.itemsize for st in strides))  # fmt: skip
    return same_values(a.tolist(), want)


class _Fields:
    """One export of the subject, judged field by field: ``problems`` maps
    ``"shape"``, ``"strides"``, ``"dtype"`` to what is wrong with that field
    (empty when nothing), ``got``/``want`` are the values read through the
    capsule and ``tolist()`` (None when not available), and ``evidence`` what
    each field was compared with."""

    def __init__(self, s: Subject, view: CapsuleView, obj: Any, got: Any, want: Any) -> None:
        self.view, self.got, self.want = view, got, want
        self.evidence: dict[str, str] = {}
        self.problems = {
            "shape": self._shape(obj),
            "dtype": self._dtype(s, obj),
        }
        self.problems["strides"] = self._strides(obj)

    @property
    def strides(self) -> tuple[int, ...]:
        """The capsule's strides (C order for NULL, which a legacy capsule may have)."""
        shape = self.view.shape or ()
        return self.view.strides if self.view.strides is not None else compact_strides(shape)

    def values_differ(self) -> bool:
        """Whether values were read and differ from ``tolist()``."""
        return self.got is not None and self.want is not None and not same_values(self.got, self.want)

    def _shape(self, obj: Any) -> str:
        view = self.view
        if view.ndim < 0 or (view.shape is None and view.ndim > 0):
            return f"ndim {view.ndim} with {'a NULL shape' if view.ndim > 0 else 'no shape'}"
        shape = view.shape or ()
        own = _own_shape(obj)
        if own is None:
            self.evidence["shape"] = "the object reports no shape to compare with"
        elif shape != own:
            return f"the capsule's shape {shape} is not the object's {own}"
        else:
            self.evidence["shape"] = "the object's own"
        return ""

    def _dtype(self, s: Subject, obj: Any) -> str:
        code, bits, lanes = self.view.dtype
        if code not in DTYPE_BITS:
            return f"dtype code {code} is not defined by dlpack.h"
        if bits not in DTYPE_BITS[code]:
            return f"dtype code {code} with {bits} bits is not a dlpack.h type"
        if lanes != 1 and not (bits < 8 and bits * lanes == 8):  # a packed pair (torch's float4_e2m1fn_x2)
            return f"lanes={lanes}; array libraries exchange lanes == 1 only (or a packed sub-byte byte)"
        if s.native is False:
            return "the source is in non-native byte order and was exported anyway"
        own = _own_dtype(obj)
        if own is None:
            self.evidence["dtype"] = "the object reports no dtype to compare with"
        elif own[1] != (code, bits):
            return (f"the capsule's (code={code}, bits={bits}) is not the object's dtype {own[0]} "
                    f"(code={own[1][0]}, bits={own[1][1]})")  # fmt: skip
        else:
            self.evidence["dtype"] = f"the object's {own[0]}"
        return ""

    def _strides(self, obj: Any) -> str:
        view = self.view
        if view.ndim <= 0 or view.shape is None:
            return ""
        if view.strides is None and view.version is not None and view.version >= (1, 2):
            v = f"v{view.version[0]}.{view.version[1]}"
            return f"{v}, ndim {view.ndim}: strides is NULL (v1.2+ requires them, cupy#2095)"
        shape, strides = view.shape, self.strides
        wrong = [field for field in ("shape", "dtype") if self.problems[field]]
        if wrong:
            # Strides of another shape or item size cannot be compared.
            self.evidence["strides"] = f"not compared with the object's: see {', '.join(wrong)}"
            return ""
        _, bits, lanes = view.dtype
        own = _own_strides(obj, bits * lanes // 8 if bits * lanes % 8 == 0 else 0)
        if own is not None:
            if _matters(shape, strides, own):
                return f"the capsule's strides {strides} are not the object's {own} (in elements)"
            self.evidence["strides"] = f"the object's own {own}"
            return ""
        if not self.values_differ():
            self.evidence["strides"] = (
                "the values read through them equal tolist()" if self.got is not None and self.want is not None
                else "the object reports no strides and no values to compare with")  # fmt: skip
            return ""
        # No strides of its own, and the values are wrong: is the memory
        # another compact layout than the one the capsule claims?
        if view.ndim <= _MAX_PERMUTED_NDIM:
            for order in itertools.permutations(range(view.ndim)):
                candidate = compact_strides(shape, order)
                if _matters(shape, candidate, strides) and _reads_as(view, candidate, self.want):
                    return (f"the capsule's strides {strides} are not its memory's layout: read with "
                            f"strides {candidate} the memory holds tolist()'s values")  # fmt: skip
        return ""


def _fields(s: Subject) -> _Fields | Outcome:
    """Export the subject once and judge its fields (an Outcome when the export itself fails)."""
    obj = s.fresh()
    cap, err = s.export(obj)
    if err is not None:
        return FAILED, f"export raised {exc_text(err)}"
    view = inspect_capsule(cap)
    if view is None:
        return FAILED, f"capsule named {_drivers.capsule_info(cap)[0]!r}"
    got = want = None
    tolist = getattr(obj, "tolist", None)
    if s.host and callable(tolist):
        try:
            want = tolist()
            got = read_values(cap)
        except Exception:
            got = None
    return _Fields(s, view, obj, got, want)


@_rule("shape", "ndim and shape are the object's own (shape, or the nesting of tolist())", "shape")
def _r_shape(s: Subject) -> Outcome:
    f = _fields(s)
    if not isinstance(f, _Fields):
        return f
    if f.problems["shape"]:
        return FAILED, f.problems["shape"]
    return PASSED, f"shape {f.view.shape or ()} (ndim {f.view.ndim}): {f.evidence['shape']}"


@_rule(
    "strides",
    "strides are the memory's layout (the object's own, else what its values show), non-NULL at v1.2+",
    "strides",
)
def _r_strides(s: Subject) -> Outcome:
    f = _fields(s)
    if not isinstance(f, _Fields):
        return f
    if f.view.ndim == 0:
        return NOT_APPLICABLE, "ndim is 0: no strides"
    if f.problems["strides"]:
        return FAILED, f.problems["strides"]
    if f.problems["shape"] or f.problems["dtype"]:
        return NOT_APPLICABLE, f"strides {f.strides} {f.evidence['strides']}"
    null = " (NULL: C order, allowed before v1.2)" if f.view.strides is None else ""
    return PASSED, f"strides {f.strides}{null}: {f.evidence.get('strides', '')}"


@_rule(
    "dtype",
    "dtype code/bits defined by dlpack.h, lanes 1, native byte order, the object's own dtype",
    "dtype",
)
def _r_dtype(s: Subject) -> Outcome:
    if s.native is False:
        _, err = s.export(s.fresh())
        if err is None:
            return FAILED, "the source is in non-native byte order and was exported anyway"
        if isinstance(err, BufferError):
            return PASSED, f"non-native byte order source refused with {exc_text(err)}"
        return WARNING, f"non-native byte order source refused with {exc_text(err)}, not BufferError"
    f = _fields(s)
    if not isinstance(f, _Fields):
        return f
    if f.problems["dtype"]:
        return FAILED, f.problems["dtype"]
    code, bits, _ = f.view.dtype
    return PASSED, f"(code={code}, bits={bits}, lanes=1): {f.evidence['dtype']}"


@_rule("values", "the values read through the capsule equal tolist() (where the object has one)", "values")
def _r_values(s: Subject) -> Outcome:
    f = _fields(s)
    if not isinstance(f, _Fields):
        return f
    if f.want is None:
        return NOT_APPLICABLE, "values not compared: no tolist() on host memory"
    if f.got is None:
        return NOT_APPLICABLE, "values not compared: bridge cannot import the capsule"
    if not f.values_differ():
        return PASSED, "values read through DLPack equal tolist()"
    wrong = [name for name, problem in f.problems.items() if problem]
    if wrong:
        return NOT_APPLICABLE, (
            f"values differ because a field is wrong: see {', '.join(wrong)} "
            f"(read {short(f.got)}, tolist() is {short(f.want)})"
        )
    return FAILED, f"read {short(f.got)}, but tolist() is {short(f.want)}"

@_rule("read-only-flag", "READ_ONLY is set exactly when the source is read-only", "read-only")
def _r_read_only(s: Subject) -> Outcome:
    if s.readonly is None:
        return (
            NOT_APPLICABLE,
            "the source reports no read-only state (no flags.writeable/is_readonly)",
        )
    skip = _legacy_only(s)
    if skip:
        return skip
    cap, err = s.export(s.fresh())
    if err is not None:
        return FAILED, f"export raised {exc_text(err)}"
    view = inspect_capsule(cap)
    if view is None or view.flags is None:
        return NOT_APPLICABLE, "no versioned capsule, so no flags (see capsule-name-versioned)"
    flag = bool(view.flags & FLAG_READ_ONLY)
    state = "read-only" if s.readonly else "writable"
    # what bridge's one lending decision gives a consumer that is told (a versioned capsule)
    if flag == (_C.lend(s.readonly, _C.CONSUMER_FLAGGED) == _C.LEND_READONLY):
        return (
            PASSED,
            f"source {state}, READ_ONLY {'set' if flag else 'clear'} (flags={view.flags})",
        )
    if s.readonly:
        return (
            FAILED,
            "source is read-only but READ_ONLY is clear: consumers may write (numpy#28599)",
        )
    return FAILED, f"source is writable but READ_ONLY is set (flags={view.flags})"


@_rule("read-only-legacy", "read-only memory is never exported as a legacy capsule (BufferError)",
       "read-only")  # fmt: skip
def _r_read_only_legacy(s: Subject) -> Outcome:
    if s.readonly is None:
        return (
            NOT_APPLICABLE,
            "the source reports no read-only state (no flags.writeable/is_readonly)",
        )
    if _C.lend(s.readonly, _C.CONSUMER_UNFLAGGED) != _C.LEND_REFUSED:  # a legacy capsule cannot be told
        return NOT_APPLICABLE, "the source is writable"
    _, err = call_dlpack(s.fresh())
    if err is None:
        return FAILED, (
            "__dlpack__() exported read-only memory as a legacy capsule, which cannot carry "
            "READ_ONLY: a consumer will treat it as writable"
        )
    if isinstance(err, BufferError):
        return PASSED, f"__dlpack__() raised {exc_text(err)}"
    return WARNING, f"__dlpack__() refused with {exc_text(err)}, not BufferError"


@_rule("copy-true", "copy=True sets IS_COPIED, does not alias the source, keeps the values", "copy")
def _r_copy_true(s: Subject) -> Outcome:
    skip = _legacy_only(s)
    if skip:
        return skip
    obj = s.fresh()
    base, err = s.export(obj)
    if err is not None:
        return FAILED, f"{kwargs_text({'max_version': MAX_VERSION})} raised {exc_text(err)}"
    copy, err = s.export(obj, copy=True)
    if err is not None:
        return FAILED, f"{kwargs_text({'max_version': MAX_VERSION, 'copy': True})} raised {exc_text(err)}"
    bview, cview = inspect_capsule(base), inspect_capsule(copy)
    if bview is None or cview is None or cview.flags is None:
        return NOT_APPLICABLE, "no versioned capsule, so no IS_COPIED flag"
    problems = []
    if not cview.flags & FLAG_IS_COPIED:
        problems.append(f"IS_COPIED is clear (flags={cview.flags})")
    blo, bhi = bview.span()
    clo, chi = cview.span()
    if blo < chi and clo < bhi:
        problems.append(
            f"the copy's bytes [{clo:#x}, {chi:#x}) overlap the source's [{blo:#x}, {bhi:#x})"
        )
    if s.host and not problems and s.snapshot is not None:
        got = read_values(copy)
        if not same_values(got, s.snapshot):
            problems.append(f"the copy holds {short(got)}, the source {short(s.snapshot)}")
    if problems:
        return FAILED, "copy=True: " + "; ".join(problems)
    return PASSED, f"IS_COPIED set, data {cview.start:#x} apart from the source's {bview.start:#x}"


@_rule("copy-false", "copy=False never copies: same data pointer as copy=None, IS_COPIED clear",
       "copy")  # fmt: skip
def _r_copy_false(s: Subject) -> Outcome:
    skip = _legacy_only(s)
    if skip:
        return skip
    obj = s.fresh()
    base, err = s.export(obj)
    if err is not None:
        return FAILED, f"{kwargs_text({'max_version': MAX_VERSION})} raised {exc_text(err)}"
    bview = inspect_capsule(base)
    if bview is None or bview.flags is None:
        return NOT_APPLICABLE, "no versioned capsule, so no IS_COPIED flag"
    base_copied = bool(bview.flags & FLAG_IS_COPIED)
    cap, err = s.export(obj, copy=False)
    if err is not None:
        if base_copied and isinstance(err, BufferError):
            return PASSED, "copy=None needed a copy (IS_COPIED) and copy=False raised BufferError"
        return FAILED, f"copy=False raised {exc_text(err)} though copy=None shares memory"
    view = inspect_capsule(cap)
    if view is None or view.flags is None:
        return FAILED, "copy=False gave no versioned capsule"
    if view.flags & FLAG_IS_COPIED:
        return FAILED, f"copy=False gave a capsule with IS_COPIED set (flags={view.flags})"
    if base_copied:
        return FAILED, "copy=None set IS_COPIED but copy=False succeeded without a copy"
    if view.start != bview.start:
        return FAILED, f"copy=False data {view.start:#x} differs from copy=None's {bview.start:#x}"
    return PASSED, f"copy=False and copy=None share data {view.start:#x}; IS_COPIED clear on both"


@_rule("dl-device-own", "dl_device=__dlpack_device__() is accepted and honoured", "dl_device")
def _r_dl_device_own(s: Subject) -> Outcome:
    skip = _legacy_only(s)
    if skip:
        return skip
    obj = s.fresh()
    dev = obj.__dlpack_device__()
    cap, err = s.export(obj, dl_device=dev)
    if err is not None:
        return FAILED, f"dl_device={dev!r} (its own device) raised {exc_text(err)}"
    view = inspect_capsule(cap)
    if view is None:
        return FAILED, f"capsule named {_drivers.capsule_info(cap)[0]!r}"
    want = (int(dev[0]), int(dev[1]))
    if view.device != want:
        return FAILED, f"dl_device={want} gave a capsule on device {view.device}"
    return PASSED, f"dl_device={want} accepted"


@_rule(
    "dl-device-impossible", "an impossible dl_device raises BufferError or ValueError, not a crash",
    "dl_device",
)
def _r_dl_device_bad(s: Subject) -> Outcome:
    skip = _legacy_only(s)
    if skip:
        return skip
    cap, err = s.export(s.fresh(), dl_device=_IMPOSSIBLE_DEVICE)
    if err is None:
        view = inspect_capsule(cap)
        where = view.device if view is not None else "?"
        return (
            FAILED,
            f"dl_device={_IMPOSSIBLE_DEVICE} (no such device type) returned a capsule on {where}",
        )
    if isinstance(err, (BufferError, ValueError)):
        return PASSED, f"dl_device={_IMPOSSIBLE_DEVICE} raised {exc_text(err)}"
    return WARNING, f"dl_device={_IMPOSSIBLE_DEVICE} raised {exc_text(err)}; BufferError is the rule"


@_rule(
    "stream-cpu",
    "host producers accept stream=None and refuse stream=1 with BufferError/ValueError",
    "stream",
)
def _r_stream(s: Subject) -> Outcome:
    if not s.host:
        return NOT_APPLICABLE, f"device {s.device} is not host memory"
    cap, err = s.export(s.fresh(), stream=None)
    if err is not None:
        return FAILED, f"stream=None raised {exc_text(err)}"
    del cap
    _, err = s.export(s.fresh(), stream=1)
    if err is None:
        return FAILED, "stream=1 was accepted for host memory (only None is allowed)"
    if isinstance(err, (BufferError, ValueError)):
        return PASSED, f"stream=None accepted; stream=1 raised {exc_text(err)}"
    return WARNING, (
        f"stream=None accepted; stream=1 raised {exc_text(err)}; the rules ask for BufferError "
        "or ValueError"
    )


