"""Producer rules on the protocol itself: the ``__dlpack__`` signature and
what the capsules it returns say.

``__dlpack_device__``, capsule names and ``max_version`` negotiation,
unknown keywords, strides, dtypes and byte order, the READ_ONLY and
IS_COPIED flags, ``copy``, ``dl_device`` and ``stream``. Each rule reads the
capsules with :func:`bridge.kit.capsules.inspect_capsule`; the lifetime rules
(deleters, keep-alive) are in :mod:`bridge.kit.conformance_lifetime`.
"""

from __future__ import annotations

from typing import Any

from bridge.core.native import _drivers
from bridge.kit.capsules import (
    DEVICE_TYPES,
    DTYPE_BITS,
    FLAG_IS_COPIED,
    FLAG_READ_ONLY,
    LEGACY,
    inspect_capsule,
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
WITHOUT_EXPORT = ("dlpack-device", "unknown-keyword", "dtype-native-known", "dl-device-impossible")

_IMPOSSIBLE_DEVICE = (99, 0)


def _legacy_only(s: Subject) -> Outcome | None:
    if s.speaks_versioned:
        return None
    return NOT_APPLICABLE, "the producer raises TypeError for max_version (legacy-only signature)"


@_rule(
    "dlpack-device", "__dlpack_device__() returns an (int, int) tuple with a dlpack.h device type"
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


@_rule("capsule-name-legacy", '__dlpack__() with no arguments returns a capsule named "dltensor"')
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
    "capsule-name-versioned", 'max_version=(1, 0) and (1, 3) give "dltensor_versioned" with major 1'
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
    "max-version-negotiation", "max_version=(0, 8) gives legacy, max_version=(2, 0) versioned 1.x"
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


@_rule("unknown-keyword", "__dlpack__(bogus=1) raises TypeError")
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


@_rule(
    "strides-non-null", "a versioned capsule of version >= 1.2 with ndim > 0 has non-NULL strides"
)
def _r_strides(s: Subject) -> Outcome:
    skip = _legacy_only(s)
    if skip:
        return skip
    cap, err = s.export(s.fresh())
    if err is not None:
        return FAILED, f"{kwargs_text({'max_version': MAX_VERSION})} raised {exc_text(err)}"
    view = inspect_capsule(cap)
    if view is None or not view.versioned or view.version is None:
        return NOT_APPLICABLE, "no versioned capsule (see capsule-name-versioned)"
    if view.ndim == 0:
        return NOT_APPLICABLE, "ndim is 0: strides may be NULL"
    v = f"v{view.version[0]}.{view.version[1]}"
    if view.strides is not None:
        return PASSED, f"{v}, ndim {view.ndim}, strides {view.strides}"
    if view.version < (1, 2):
        return NOT_APPLICABLE, f"{v} with NULL strides: allowed before 1.2"
    return FAILED, f"{v}, ndim {view.ndim}: strides is NULL (v1.2+ requires them, cupy#2095)"


@_rule(
    "dtype-native-known",
    "dtype code/bits defined by dlpack.h, lanes 1, native byte order, values right",
)
def _r_dtype(s: Subject) -> Outcome:
    obj = s.fresh()
    if s.native is False:
        cap, err = s.export(obj)
        if err is None:
            return FAILED, "the source is in non-native byte order and was exported anyway"
        if isinstance(err, BufferError):
            return PASSED, f"non-native byte order source refused with {exc_text(err)}"
        return WARNING, f"non-native byte order source refused with {exc_text(err)}, not BufferError"
    cap, err = s.export(obj)
    if err is not None:
        return FAILED, f"export raised {exc_text(err)}"
    view = inspect_capsule(cap)
    if view is None:
        return FAILED, f"capsule named {_drivers.capsule_info(cap)[0]!r}"
    code, bits, lanes = view.dtype
    if code not in DTYPE_BITS:
        return FAILED, f"dtype code {code} is not defined by dlpack.h"
    if bits not in DTYPE_BITS[code]:
        return FAILED, f"dtype code {code} with {bits} bits is not a dlpack.h type"
    if lanes != 1:
        return FAILED, f"lanes={lanes}; array libraries exchange lanes == 1 only"
    detail = f"(code={code}, bits={bits}, lanes=1)"
    tolist = getattr(obj, "tolist", None)
    if not callable(tolist) or not s.host:
        return PASSED, detail + "; values not compared (no tolist() on host memory)"
    try:
        got = read_values(cap)
    except Exception as e:
        return PASSED, detail + f"; values not compared (bridge cannot import: {exc_text(e)})"
    want = tolist()
    if not same_values(got, want):
        return FAILED, f"{detail}: read {short(got)}, but tolist() is {short(want)} (byte order?)"
    return PASSED, detail + "; values read through DLPack equal tolist()"


@_rule("read-only-flag", "READ_ONLY is set exactly when the source is read-only")
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
    if flag == s.readonly:
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


@_rule("read-only-legacy", "read-only memory is never exported as a legacy capsule (BufferError)")
def _r_read_only_legacy(s: Subject) -> Outcome:
    if s.readonly is None:
        return (
            NOT_APPLICABLE,
            "the source reports no read-only state (no flags.writeable/is_readonly)",
        )
    if not s.readonly:
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


@_rule("copy-true", "copy=True sets IS_COPIED, does not alias the source, keeps the values")
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


@_rule("copy-false", "copy=False never copies: same data pointer as copy=None, IS_COPIED clear")
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


@_rule("dl-device-own", "dl_device=__dlpack_device__() is accepted and honoured")
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
    "dl-device-impossible", "an impossible dl_device raises BufferError or ValueError, not a crash"
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


