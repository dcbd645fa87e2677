"""DLPack conformance checks for other libraries' producers and consumers.

:func:`check` runs one check per rule of the DLPack protocol (dlpack.h v1.3
and the Python array API's ``__dlpack__`` signature) against a third party's
*producer* (an object with ``__dlpack__``), and optionally against its
*consumer* (a ``from_dlpack``-like function), and returns a :class:`Report`
with one :class:`RuleResult` per rule: passed, failed (with what was
observed), warning (the rule's intent is met in a form the rules do not
recommend) or not applicable (with why).

Producer checks run in this process: they call ``__dlpack__`` and read the
returned capsules through ``bridge._drivers.capsule_info`` and cffi, trusting the
capsule's *name* to say which struct it holds (never its bytes). Consumer
checks feed hand-made capsules (:class:`Handmade`), good and malformed, to the
consumer in a subprocess when the consumer can be named as ``module:expr``, so
that a crash is reported instead of killing the caller.

``python -m bridge check module:expr`` is the command line for the same
checks, and ``bridge.pytest_plugin`` the pytest face (docs/conformance.md).
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import json
import os
import signal
import subprocess
import sys
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bridge._native import ffi
from bridge.core.native import _C, _drivers
from bridge.interop.dlpack import from_dlpack as _bridge_from_dlpack


def counting_deleter(versioned: bool) -> Any:
    """A DLPack deleter (a cffi function pointer) that only counts its calls
    (``bridge._C.stats()["test_deleters"]``): for structs the caller owns."""
    kind = "DLManagedTensorVersioned" if versioned else "DLManagedTensor"
    return ffi.cast(f"void (*)({kind} *)", _drivers.test_deleter_address(versioned))

__all__ = [
    "PASSED",
    "FAILED",
    "WARNING",
    "NOT_APPLICABLE",
    "RuleResult",
    "Report",
    "CapsuleView",
    "Handmade",
    "PRODUCER_RULES",
    "CONSUMER_CASES",
    "check",
    "inspect_capsule",
    "load",
]

PASSED = "passed"
FAILED = "failed"
WARNING = "warning"
NOT_APPLICABLE = "not applicable"
_STATUSES = (PASSED, FAILED, WARNING, NOT_APPLICABLE)

LEGACY = "dltensor"
VERSIONED = "dltensor_versioned"
FLAG_READ_ONLY = 1
FLAG_IS_COPIED = 2

#: DLDeviceType values defined by dlpack.h v1.3.
DEVICE_TYPES = {1: "CPU", 2: "CUDA", 3: "CUDAHost", 4: "OpenCL", 7: "Vulkan", 8: "Metal", 9: "VPI",
                10: "ROCM", 11: "ROCMHost", 12: "ExtDev", 13: "CUDAManaged", 14: "oneAPI",
                15: "WebGPU", 16: "Hexagon", 17: "MAIA", 18: "Trn"}  # fmt: skip
_HOST_DEVICES = (1, 3, 11)

#: DLDataTypeCode -> the bit widths a producer may use with it.
DTYPE_BITS: dict[int, tuple[int, ...]] = {
    0: (1, 2, 4, 8, 16, 32, 64),  # Int
    1: (1, 2, 4, 8, 16, 32, 64),  # UInt
    2: (16, 32, 64),  # Float
    3: (8, 16, 32, 64),  # OpaqueHandle
    4: (16,),  # Bfloat
    5: (64, 128),  # Complex
    6: (8,),  # Bool
    **{code: (8,) for code in range(7, 15)},  # Float8 variants
    15: (6,),  # Float6_e2m3fn
    16: (6,),  # Float6_e3m2fn
    17: (4,),  # Float4_e2m1fn
}

_MAX = (1, 3)
_IMPOSSIBLE_DEVICE = (99, 0)


# ------------------------------------------------------------------ report


@dataclass(frozen=True, slots=True)
class RuleResult:
    """The outcome of one rule: ``name``, ``status`` (one of :data:`PASSED`,
    :data:`FAILED`, :data:`WARNING`, :data:`NOT_APPLICABLE`) and ``detail``
    (what was observed, or why the rule does not apply)."""

    name: str
    status: str
    detail: str

    def to_dict(self) -> dict[str, str]:
        """``{"name", "status", "detail"}``, JSON-ready."""
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass(slots=True)
class Report:
    """What :func:`check` found: one :class:`RuleResult` per rule, in order.

    ``bool(report)`` is true when no rule failed (warnings and
    not-applicable entries do not count against it). ``str(report)`` is a
    readable table (rich when installed, plain text otherwise);
    :meth:`to_dict` is the JSON form.
    """

    subject: str
    entries: list[RuleResult] = field(default_factory=list)

    def _with(self, status: str) -> list[RuleResult]:
        return [e for e in self.entries if e.status == status]

    @property
    def passed(self) -> list[RuleResult]:
        """The entries that passed."""
        return self._with(PASSED)

    @property
    def failed(self) -> list[RuleResult]:
        """The entries that failed; empty when the subject conforms."""
        return self._with(FAILED)

    @property
    def warnings(self) -> list[RuleResult]:
        """Entries whose rule is met in a form the rules do not recommend."""
        return self._with(WARNING)

    @property
    def not_applicable(self) -> list[RuleResult]:
        """Entries for rules that do not apply to this subject (detail says why)."""
        return self._with(NOT_APPLICABLE)

    def __bool__(self) -> bool:
        return not self.failed

    def __getitem__(self, name: str) -> RuleResult:
        """The entry for rule ``name``; KeyError when there is none."""
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return any(e.name == name for e in self.entries)

    def summary(self) -> str:
        """One line: the counts per status."""
        counts = [f"{len(self._with(s))} {s}" for s in _STATUSES]
        verdict = "conforms" if self else "DOES NOT CONFORM"
        return f"{self.subject}: {verdict} ({', '.join(counts)})"

    def to_dict(self) -> dict[str, Any]:
        """``{"subject", "ok", "counts", "entries"}``, JSON-ready."""
        return {
            "subject": self.subject,
            "ok": bool(self),
            "counts": {s: len(self._with(s)) for s in _STATUSES},
            "entries": [e.to_dict() for e in self.entries],
        }

    def format(self, use_rich: bool | None = None, width: int = 120) -> str:
        """The report as a table; ``use_rich`` None uses rich when it is
        importable, False forces plain text. Never contains colour codes."""
        if use_rich is not False:
            try:
                from rich.console import Console
                from rich.table import Table
            except ImportError:
                if use_rich:
                    raise
            else:
                table = Table(title=f"DLPack conformance: {self.subject}", title_justify="left")
                table.add_column("rule", no_wrap=True)
                table.add_column("status", no_wrap=True)
                table.add_column("detail", overflow="fold")
                for e in self.entries:
                    table.add_row(e.name, e.status, e.detail)
                out = io.StringIO()
                console = Console(file=out, width=width, color_system=None, force_terminal=False)
                console.print(table)
                console.print(self.summary())
                return "\n".join(line.rstrip() for line in out.getvalue().splitlines())
        name_w = max([len(e.name) for e in self.entries] + [4])
        lines = [
            f"DLPack conformance: {self.subject}",
            f"{'rule':<{name_w}}  {'status':<14}  detail",
        ]
        lines += [f"{e.name:<{name_w}}  {e.status:<14}  {e.detail}" for e in self.entries]
        lines.append(self.summary())
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


# --------------------------------------------------------- reading capsules


@dataclass(frozen=True, slots=True)
class CapsuleView:
    """The fields of the managed tensor behind an unconsumed DLPack capsule.

    ``version`` and ``flags`` are None for a legacy capsule; ``shape`` is None
    when the shape pointer is NULL (or ndim is out of range), ``strides`` None
    when the strides pointer is NULL. ``data`` excludes ``byte_offset``.
    """

    name: str
    address: int
    version: tuple[int, int] | None
    flags: int | None
    data: int
    byte_offset: int
    device: tuple[int, int]
    ndim: int
    dtype: tuple[int, int, int]
    shape: tuple[int, ...] | None
    strides: tuple[int, ...] | None

    @property
    def versioned(self) -> bool:
        """Whether the capsule is named ``dltensor_versioned``."""
        return self.name == VERSIONED

    @property
    def start(self) -> int:
        """Address of the first element (``data + byte_offset``)."""
        return self.data + self.byte_offset

    def span(self) -> tuple[int, int]:
        """``[lo, hi)``: the bytes the tensor's elements occupy (empty for size 0)."""
        _, bits, lanes = self.dtype
        itemsize = max(bits * lanes // 8, 1)
        shape = self.shape or ()
        if any(n == 0 for n in shape):
            return self.start, self.start
        strides = self.strides if self.strides is not None else _contiguous(shape)
        lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
        hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides))
        return self.start + lo * itemsize, self.start + (hi + 1) * itemsize


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def inspect_capsule(capsule: Any) -> CapsuleView | None:
    """Read the managed tensor behind ``capsule`` without consuming it.

    The struct type is chosen by the capsule's name: ``dltensor_versioned``
    -> DLManagedTensorVersioned, ``dltensor`` -> DLManagedTensor. Any other
    name (including a consumed ``used_*`` capsule) gives None and nothing is
    read. Raises TypeError for a non-capsule. The capsule must stay alive
    while the returned values are used only as numbers (they are copies).
    """
    name, addr = _drivers.capsule_info(capsule)
    if name == VERSIONED:
        mv = ffi.cast("DLManagedTensorVersioned *", addr)
        version: tuple[int, int] | None = (int(mv.version.major), int(mv.version.minor))
        flags: int | None = int(mv.flags)
        dl = mv.dl_tensor
    elif name == LEGACY:
        dl = ffi.cast("DLManagedTensor *", addr).dl_tensor
        version = flags = None
    else:
        return None
    ndim = int(dl.ndim)
    sane = 0 <= ndim <= 64
    shape = None
    strides = None
    if sane and dl.shape != ffi.NULL:
        shape = tuple(int(dl.shape[i]) for i in range(ndim))
    if sane and dl.strides != ffi.NULL:
        strides = tuple(int(dl.strides[i]) for i in range(ndim))
    return CapsuleView(
        name=name,
        address=int(addr),
        version=version,
        flags=flags,
        data=int(ffi.cast("uintptr_t", dl.data)),
        byte_offset=int(dl.byte_offset),
        device=(int(dl.device.device_type), int(dl.device.device_id)),
        ndim=ndim,
        dtype=(int(dl.dtype.code), int(dl.dtype.bits), int(dl.dtype.lanes)),
        shape=shape,
        strides=strides,
    )


def _test_deleter_calls() -> int:
    return _C.stats()["test_deleters"]


class _CountingDeleter:
    """Swaps a managed tensor's deleter for bridge's counting test deleter.

    While swapped, every call anyone makes to the deleter only bumps a
    counter, so a second call (a double free in real life) is seen and is
    harmless. :meth:`release` puts the producer's deleter back and runs it
    exactly once, through a fresh capsule with bridge's destructor (GIL held).
    """

    def __init__(self, view: CapsuleView) -> None:
        self.versioned = view.versioned
        kind = "DLManagedTensorVersioned *" if self.versioned else "DLManagedTensor *"
        self.address = view.address
        self.managed = ffi.cast(kind, view.address)
        self.original = self.managed.deleter
        gc.collect()
        self.start = _test_deleter_calls()
        self.managed.deleter = counting_deleter(self.versioned)

    @property
    def calls(self) -> int:
        """Deleter calls since the swap."""
        return _test_deleter_calls() - self.start

    @property
    def has_deleter(self) -> bool:
        """Whether the producer set a deleter at all (NULL is allowed)."""
        return bool(self.original != ffi.NULL)

    def release(self) -> None:
        """Restore the producer's deleter and call it once (via a capsule)."""
        self.managed.deleter = self.original
        cap = _drivers.make_capsule(self.address, int(self.versioned))
        del cap


# ------------------------------------------------------ hand-made capsules

_KEEP: list[Handmade] = []  # structs fed to consumers live as long as the process


class Handmade:
    """A DLManagedTensor[Versioned] built with cffi over a NumPy buffer.

    The deleter is bridge's counting test deleter (it frees nothing, so a
    consumer that calls it twice is observable, not fatal; count with
    ``bridge._C.stats()["test_deleters"]``). Every field can be set
    wrong on purpose: ``versioned`` (struct kind), ``major``/``minor``,
    ``flags``, ``device``, ``code``/``bits``/``lanes`` (default: from
    ``buffer``'s dtype), ``ndim`` (default ``len(shape)``), ``shape`` and
    ``strides`` (in elements; default ``buffer``'s own), ``byte_offset``,
    ``null_data``/``null_shape``/``null_strides``.

    Ownership: the struct, shape and strides live in this object. Keep it
    alive while any capsule from :meth:`capsule` or any tensor imported from
    one exists; the capsule does not keep it alive.
    """

    __slots__ = ("_dims", "buffer", "byte_offset", "managed", "shape", "strides", "versioned")

    def __init__(
        self,
        buffer: Any = None,
        *,
        versioned: bool = True,
        shape: tuple[int, ...] | None = None,
        strides: tuple[int, ...] | None = None,
        byte_offset: int = 0,
        code: int | None = None,
        bits: int | None = None,
        lanes: int = 1,
        ndim: int | None = None,
        major: int = 1,
        minor: int = 3,
        flags: int = 0,
        device: tuple[int, int] = (1, 0),
        null_data: bool = False,
        null_shape: bool = False,
        null_strides: bool = False,
    ) -> None:
        arr = np.arange(6, dtype=np.float32).reshape(2, 3) if buffer is None else np.asarray(buffer)
        self.buffer = arr
        self.shape = tuple(arr.shape) if shape is None else tuple(shape)
        if strides is None:
            strides = (
                _contiguous(self.shape)
                if shape is not None
                else tuple(s // arr.itemsize for s in arr.strides)
            )
        self.strides = tuple(strides)
        self.byte_offset = byte_offset
        self.versioned = versioned
        n = len(self.shape)
        self._dims = ffi.new("int64_t[]", [*self.shape, *self.strides] or [0])
        if code is None or bits is None:
            dcode, dbits = _numpy_dlpack_dtype(arr.dtype)
            code = dcode if code is None else code
            bits = dbits if bits is None else bits
        if versioned:
            m = ffi.new("DLManagedTensorVersioned *")
            m.version.major, m.version.minor = major, minor
            m.flags = flags
            m.deleter = counting_deleter(True)
        else:
            m = ffi.new("DLManagedTensor *")
            m.deleter = counting_deleter(False)
        dl = m.dl_tensor
        base = arr.ctypes.data - byte_offset
        dl.data = ffi.NULL if null_data else ffi.cast("void *", base)
        dl.device.device_type, dl.device.device_id = device
        dl.ndim = n if ndim is None else ndim
        dl.dtype.code, dl.dtype.bits, dl.dtype.lanes = code, bits, lanes
        dl.shape = ffi.NULL if null_shape else self._dims
        dl.strides = ffi.NULL if null_strides else self._dims + n
        dl.byte_offset = byte_offset
        self.managed = m

    @property
    def address(self) -> int:
        """Address of the managed struct."""
        return int(ffi.cast("uintptr_t", self.managed))

    def capsule(self, name: str | None = None) -> Any:
        """A new capsule over the struct with bridge's standard destructor.

        ``name`` None gives the right name for the struct kind; ``"dltensor"``
        or ``"dltensor_versioned"`` force one (a mismatch with the struct is
        unsafe to consume); any other string gives a capsule with a wrong,
        non-DLPack name (whose destructor then leaves the struct alone).
        """
        if name is None:
            kind = int(self.versioned)
        else:
            kind = {LEGACY: 0, VERSIONED: 1}.get(name, 2)
        return _drivers.make_capsule(self.address, kind)

    def expected(self) -> list[Any]:
        """The values a correct consumer sees (for well-formed structs only)."""
        from numpy.lib.stride_tricks import as_strided

        item = self.buffer.itemsize
        flat = self.buffer.reshape(-1) if self.buffer.ndim else self.buffer.reshape(1)
        view = as_strided(flat, self.shape, tuple(s * item for s in self.strides))
        return view.tolist()  # type: ignore[no-any-return]


def _numpy_dlpack_dtype(dt: Any) -> tuple[int, int]:
    kind = {"i": 0, "u": 1, "f": 2, "c": 5, "b": 6}.get(dt.kind)
    if kind is None:
        raise TypeError(f"Handmade: no DLPack code for NumPy dtype {dt}")
    return kind, dt.itemsize * 8


# ------------------------------------------------------------------ helpers


def _same(a: Any, b: Any) -> bool:
    """Equality of nested lists of scalars, with NaN equal to NaN."""
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        if not isinstance(a, (list, tuple)) or not isinstance(b, (list, tuple)) or len(a) != len(b):
            return False
        return all(_same(x, y) for x, y in zip(a, b))
    try:
        if a == b:
            return True
        return bool(a != a and b != b)
    except Exception:
        return False


def _short(values: Any, limit: int = 60) -> str:
    text = repr(values)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _exc(e: BaseException) -> str:
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if len(msg) > 120:
        msg = msg[:117] + "..."
    return f"{type(e).__name__}({msg!r})" if msg else type(e).__name__


def _call(obj: Any, **kwargs: Any) -> tuple[Any, Exception | None]:
    """``obj.__dlpack__(**kwargs)`` -> (capsule, None) or (None, exception)."""
    try:
        return obj.__dlpack__(**kwargs), None
    except Exception as e:
        e.__traceback__ = None  # no frame cycles keeping the producer alive
        return None, e


def _kw(kwargs: dict[str, Any]) -> str:
    return "__dlpack__(" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + ")"


def _source_readonly(obj: Any) -> bool | None:
    """True/False when ``obj`` reports read-only state, None when it does not."""
    try:
        writeable = getattr(getattr(obj, "flags", None), "writeable", None)
        if isinstance(writeable, bool):
            return not writeable
        ro = getattr(obj, "is_readonly", None)
        if isinstance(ro, bool):
            return ro
    except Exception:
        return None
    return None


def _native_order(obj: Any) -> bool | None:
    """False for a NumPy-like dtype in non-native byte order, True for native, None unknown."""
    try:
        order = getattr(getattr(obj, "dtype", None), "byteorder", None)
    except Exception:
        return None
    if not isinstance(order, str):
        return None
    native = "<" if sys.byteorder == "little" else ">"
    return order in ("=", "|", native)


def _read(capsule: Any) -> list[Any]:
    """Import ``capsule`` with bridge and return its values as lists (consumes it)."""
    t = _bridge_from_dlpack(capsule)
    values = t.tolist()
    del t
    return values  # type: ignore[no-any-return]


def _describe(x: Any) -> str:
    tp = type(x)
    return f"{tp.__module__}.{tp.__qualname__}"


# --------------------------------------------------------- producer checks


class _Subject:
    """The producer under test: a fixed object, or a factory of fresh ones."""

    def __init__(self, obj_or_factory: Any) -> None:
        if hasattr(obj_or_factory, "__dlpack__") and not isinstance(obj_or_factory, type):
            self.factory: Callable[[], Any] | None = None
            self.obj = obj_or_factory
            first = obj_or_factory
            self.label = _describe(first)
        elif callable(obj_or_factory):
            self.factory = obj_or_factory
            first = self.fresh()
            name = getattr(obj_or_factory, "__qualname__", repr(obj_or_factory))
            self.label = f"{_describe(first)} from factory {name}"
        else:
            raise TypeError(
                f"check() needs an object with __dlpack__ or a zero-argument factory of them, "
                f"got {type(obj_or_factory).__name__}"
            )
        self.readonly = _source_readonly(first)
        self.native = _native_order(first)
        try:
            dev = first.__dlpack_device__()
            self.device: tuple[int, int] | None = (int(dev[0]), int(dev[1]))
        except Exception:
            self.device = None
        cap, err = _call(first, max_version=_MAX)
        self.speaks_versioned = not isinstance(err, TypeError)
        del cap
        self.host = self.device is not None and self.device[0] in _HOST_DEVICES
        self.unexportable = ""
        if self.native is False:
            cap, err = self.export(first)
            if isinstance(err, BufferError):
                self.unexportable = (
                    f"the source is in non-native byte order and cannot be exported ({_exc(err)})"
                )
            del cap
        self.snapshot_error = ""
        self.snapshot = self.values_of(first)

    def fresh(self) -> Any:
        """A producer for one rule: a new one from the factory, or the object."""
        if self.factory is None:
            return self.obj
        obj = self.factory()
        if not hasattr(obj, "__dlpack__"):
            raise TypeError(f"the factory returned a {_describe(obj)}, which has no __dlpack__")
        return obj

    def export(self, obj: Any, **kwargs: Any) -> tuple[Any, Exception | None]:
        """``__dlpack__`` asking for a versioned capsule when the producer takes max_version."""
        if self.speaks_versioned:
            kwargs.setdefault("max_version", _MAX)
        return _call(obj, **kwargs)

    def values_of(self, obj: Any) -> list[Any] | None:
        """``obj``'s values read through DLPack by bridge, or None (reason kept)."""
        if not self.host:
            self.snapshot_error = f"values not read: device {self.device} is not host memory"
            return None
        cap, err = self.export(obj)
        if err is not None:
            self.snapshot_error = f"values not read: {_kw({})} raised {_exc(err)}"
            return None
        try:
            return _read(cap)
        except Exception as e:
            self.snapshot_error = f"values not read: bridge cannot import it: {_exc(e)}"
            return None


_Outcome = tuple[str, str]
_PRODUCER_CHECKS: list[tuple[str, Callable[[_Subject], _Outcome]]] = []

#: rule name -> what it checks (producer side), in the order they run.
PRODUCER_RULES: dict[str, str] = {}


def _rule(
    name: str, doc: str
) -> Callable[[Callable[[_Subject], _Outcome]], Callable[[_Subject], _Outcome]]:
    def register(fn: Callable[[_Subject], _Outcome]) -> Callable[[_Subject], _Outcome]:
        _PRODUCER_CHECKS.append((name, fn))
        PRODUCER_RULES[name] = doc
        return fn

    return register


# Rules that still apply to a source that cannot be exported at all.
_WITHOUT_EXPORT = ("dlpack-device", "unknown-keyword", "dtype-native-known", "dl-device-impossible")


def _legacy_only(s: _Subject) -> _Outcome | None:
    if s.speaks_versioned:
        return None
    return NOT_APPLICABLE, "the producer raises TypeError for max_version (legacy-only signature)"


@_rule(
    "dlpack-device", "__dlpack_device__() returns an (int, int) tuple with a dlpack.h device type"
)
def _r_device(s: _Subject) -> _Outcome:
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
def _r_name_legacy(s: _Subject) -> _Outcome:
    cap, err = _call(s.fresh())
    if err is not None:
        if s.readonly and isinstance(err, BufferError):
            return NOT_APPLICABLE, (
                f"the source is read-only and __dlpack__() refused a legacy capsule with "
                f"{_exc(err)}, as it must (see read-only-legacy)"
            )
        return FAILED, f"__dlpack__() raised {_exc(err)}"
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
def _r_name_versioned(s: _Subject) -> _Outcome:
    if not s.speaks_versioned:
        return WARNING, (
            "__dlpack__ raises TypeError for max_version: a legacy-only producer (pre-2023 "
            "signature); it cannot signal READ_ONLY or IS_COPIED and versioned rules do not apply"
        )
    notes = []
    for request in ((1, 0), _MAX):
        obj = s.fresh()
        cap, err = _call(obj, max_version=request)
        if err is not None:
            return FAILED, f"max_version={request} raised {_exc(err)}"
        ok, note = _versioned_outcome(cap, request)
        if not ok:
            return FAILED, note
        notes.append(note)
    return PASSED, "; ".join(notes)


@_rule(
    "max-version-negotiation", "max_version=(0, 8) gives legacy, max_version=(2, 0) versioned 1.x"
)
def _r_negotiation(s: _Subject) -> _Outcome:
    skip = _legacy_only(s)
    if skip:
        return skip
    notes = []
    cap, err = _call(s.fresh(), max_version=(0, 8))
    if err is not None:
        if not (s.readonly and isinstance(err, BufferError)):
            return FAILED, f"max_version=(0, 8) raised {_exc(err)}"
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
    cap, err = _call(s.fresh(), max_version=(2, 0))
    if err is not None:
        return FAILED, f"max_version=(2, 0) raised {_exc(err)}"
    ok, note = _versioned_outcome(cap, (2, 0))
    if not ok:
        return FAILED, note
    notes.append(note)
    return PASSED, "; ".join(notes)


@_rule("unknown-keyword", "__dlpack__(bogus=1) raises TypeError")
def _r_unknown_keyword(s: _Subject) -> _Outcome:
    _, err = _call(s.fresh(), bogus=1)
    if err is None:
        return FAILED, (
            "__dlpack__(bogus=1) returned a capsule: consumers cannot tell which keywords "
            "a producer understands"
        )
    if isinstance(err, TypeError):
        return PASSED, f"raised {_exc(err)}"
    return FAILED, f"raised {_exc(err)}, not TypeError"


@_rule(
    "strides-non-null", "a versioned capsule of version >= 1.2 with ndim > 0 has non-NULL strides"
)
def _r_strides(s: _Subject) -> _Outcome:
    skip = _legacy_only(s)
    if skip:
        return skip
    cap, err = s.export(s.fresh())
    if err is not None:
        return FAILED, f"{_kw({'max_version': _MAX})} raised {_exc(err)}"
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
def _r_dtype(s: _Subject) -> _Outcome:
    obj = s.fresh()
    if s.native is False:
        cap, err = s.export(obj)
        if err is None:
            return FAILED, "the source is in non-native byte order and was exported anyway"
        if isinstance(err, BufferError):
            return PASSED, f"non-native byte order source refused with {_exc(err)}"
        return WARNING, f"non-native byte order source refused with {_exc(err)}, not BufferError"
    cap, err = s.export(obj)
    if err is not None:
        return FAILED, f"export raised {_exc(err)}"
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
        got = _read(cap)
    except Exception as e:
        return PASSED, detail + f"; values not compared (bridge cannot import: {_exc(e)})"
    want = tolist()
    if not _same(got, want):
        return FAILED, f"{detail}: read {_short(got)}, but tolist() is {_short(want)} (byte order?)"
    return PASSED, detail + "; values read through DLPack equal tolist()"


@_rule("read-only-flag", "READ_ONLY is set exactly when the source is read-only")
def _r_read_only(s: _Subject) -> _Outcome:
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
        return FAILED, f"export raised {_exc(err)}"
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
def _r_read_only_legacy(s: _Subject) -> _Outcome:
    if s.readonly is None:
        return (
            NOT_APPLICABLE,
            "the source reports no read-only state (no flags.writeable/is_readonly)",
        )
    if not s.readonly:
        return NOT_APPLICABLE, "the source is writable"
    _, err = _call(s.fresh())
    if err is None:
        return FAILED, (
            "__dlpack__() exported read-only memory as a legacy capsule, which cannot carry "
            "READ_ONLY: a consumer will treat it as writable"
        )
    if isinstance(err, BufferError):
        return PASSED, f"__dlpack__() raised {_exc(err)}"
    return WARNING, f"__dlpack__() refused with {_exc(err)}, not BufferError"


@_rule("copy-true", "copy=True sets IS_COPIED, does not alias the source, keeps the values")
def _r_copy_true(s: _Subject) -> _Outcome:
    skip = _legacy_only(s)
    if skip:
        return skip
    obj = s.fresh()
    base, err = s.export(obj)
    if err is not None:
        return FAILED, f"{_kw({'max_version': _MAX})} raised {_exc(err)}"
    copy, err = s.export(obj, copy=True)
    if err is not None:
        return FAILED, f"{_kw({'max_version': _MAX, 'copy': True})} raised {_exc(err)}"
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
        got = _read(copy)
        if not _same(got, s.snapshot):
            problems.append(f"the copy holds {_short(got)}, the source {_short(s.snapshot)}")
    if problems:
        return FAILED, "copy=True: " + "; ".join(problems)
    return PASSED, f"IS_COPIED set, data {cview.start:#x} apart from the source's {bview.start:#x}"


@_rule("copy-false", "copy=False never copies: same data pointer as copy=None, IS_COPIED clear")
def _r_copy_false(s: _Subject) -> _Outcome:
    skip = _legacy_only(s)
    if skip:
        return skip
    obj = s.fresh()
    base, err = s.export(obj)
    if err is not None:
        return FAILED, f"{_kw({'max_version': _MAX})} raised {_exc(err)}"
    bview = inspect_capsule(base)
    if bview is None or bview.flags is None:
        return NOT_APPLICABLE, "no versioned capsule, so no IS_COPIED flag"
    base_copied = bool(bview.flags & FLAG_IS_COPIED)
    cap, err = s.export(obj, copy=False)
    if err is not None:
        if base_copied and isinstance(err, BufferError):
            return PASSED, "copy=None needed a copy (IS_COPIED) and copy=False raised BufferError"
        return FAILED, f"copy=False raised {_exc(err)} though copy=None shares memory"
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
def _r_dl_device_own(s: _Subject) -> _Outcome:
    skip = _legacy_only(s)
    if skip:
        return skip
    obj = s.fresh()
    dev = obj.__dlpack_device__()
    cap, err = s.export(obj, dl_device=dev)
    if err is not None:
        return FAILED, f"dl_device={dev!r} (its own device) raised {_exc(err)}"
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
def _r_dl_device_bad(s: _Subject) -> _Outcome:
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
        return PASSED, f"dl_device={_IMPOSSIBLE_DEVICE} raised {_exc(err)}"
    return WARNING, f"dl_device={_IMPOSSIBLE_DEVICE} raised {_exc(err)}; BufferError is the rule"


@_rule(
    "stream-cpu",
    "host producers accept stream=None and refuse stream=1 with BufferError/ValueError",
)
def _r_stream(s: _Subject) -> _Outcome:
    if not s.host:
        return NOT_APPLICABLE, f"device {s.device} is not host memory"
    cap, err = s.export(s.fresh(), stream=None)
    if err is not None:
        return FAILED, f"stream=None raised {_exc(err)}"
    del cap
    _, err = s.export(s.fresh(), stream=1)
    if err is None:
        return FAILED, "stream=1 was accepted for host memory (only None is allowed)"
    if isinstance(err, (BufferError, ValueError)):
        return PASSED, f"stream=None accepted; stream=1 raised {_exc(err)}"
    return WARNING, (
        f"stream=None accepted; stream=1 raised {_exc(err)}; the rules ask for BufferError "
        "or ValueError"
    )


def _kinds(s: _Subject) -> Iterator[tuple[str, dict[str, Any]]]:
    if s.speaks_versioned:
        yield "versioned", {"max_version": _MAX}
    if not s.readonly:
        yield "legacy", {}


def _worst(outcomes: list[_Outcome]) -> _Outcome:
    for status in (FAILED, WARNING, PASSED, NOT_APPLICABLE):
        hits = [d for st, d in outcomes if st == status]
        if hits:
            return status, "; ".join(hits)
    return NOT_APPLICABLE, "nothing to check"


def _refcount(obj: Any) -> int:
    return sys.getrefcount(obj) - 1


def _deleter_consumed(s: _Subject, kind: str, kwargs: dict[str, Any]) -> _Outcome:
    p = s.fresh()
    want = _own_values(p) if s.factory is not None else s.snapshot
    gc.collect()
    base_rc = _refcount(p)
    cap, err = _call(p, **kwargs)
    if err is not None:
        return FAILED, f"{kind}: {_kw(kwargs)} raised {_exc(err)}"
    view = inspect_capsule(cap)
    if view is None:
        return FAILED, f"{kind}: capsule named {_drivers.capsule_info(cap)[0]!r}"
    kind = view.name
    held_rc = _refcount(p)
    swap = _CountingDeleter(view)
    notes: list[str] = []
    values_ok = True
    t = _bridge_from_dlpack(cap)  # renames the capsule used_*, adopts the struct
    first = t.tolist()
    del cap  # the consumed capsule's destructor must leave the struct alone
    gc.collect()
    by_capsule = swap.calls
    second = t.tolist()
    if not _same(first, second):
        values_ok = False
        notes.append(
            f"values changed from {_short(first)} to {_short(second)} once the capsule died"
        )
    elif want is not None and not _same(first, want):
        values_ok = False
        notes.append(f"values while imported {_short(first)} != {_short(want)}")
    else:
        notes.append("values stayed readable while imported")
    del t
    gc.collect()
    by_consumer = swap.calls - by_capsule
    ref = None
    if s.factory is not None:
        try:
            ref = weakref.ref(p)
        except TypeError:
            ref = None
        del p
        gc.collect()
    total = swap.calls
    late = total - by_consumer - by_capsule
    if not swap.has_deleter:
        notes.append("deleter is NULL")
    if total != 1 or by_consumer != 1:
        notes.append(
            f"deleter ran {total} times: {by_consumer} by the consumer, {by_capsule} by the "
            f"consumed capsule's destructor, {late} later"
            + (" (struct leaked on purpose to avoid a double free)" if total > 1 else "")
        )
        return FAILED, f"{kind}: " + ", ".join(notes)
    swap.release()
    gc.collect()
    notes.append("deleter ran once (by the consumer)")
    if ref is not None:
        alive = "still referenced elsewhere" if ref() is not None else "released"
        notes.append(f"producer object {alive} after it")
    elif s.factory is None:
        after_rc = _refcount(p)
        notes.append(f"producer refcount {base_rc} -> {held_rc} -> {after_rc}")
        if after_rc != base_rc:
            return FAILED, f"{kind}: " + ", ".join(notes)
    return (PASSED if values_ok else FAILED), f"{kind}: " + ", ".join(notes)


def _own_values(obj: Any) -> list[Any] | None:
    """``obj.tolist()`` when it has one (no DLPack export involved), else None."""
    tolist = getattr(obj, "tolist", None)
    if not callable(tolist):
        return None
    try:
        return tolist()  # type: ignore[no-any-return]
    except Exception:
        return None


def _deleter_unconsumed(s: _Subject, kind: str, kwargs: dict[str, Any]) -> _Outcome:
    p = s.fresh()
    gc.collect()
    base_rc = _refcount(p)
    cap, err = _call(p, **kwargs)
    if err is not None:
        return FAILED, f"{kind}: {_kw(kwargs)} raised {_exc(err)}"
    view = inspect_capsule(cap)
    if view is None:
        return FAILED, f"{kind}: capsule named {_drivers.capsule_info(cap)[0]!r}"
    label = view.name
    held_rc = _refcount(p)
    swap = _CountingDeleter(view)
    del cap
    gc.collect()
    calls = swap.calls
    after_drop = _refcount(p)
    rc_note = f"producer refcount {base_rc} -> {held_rc} while the capsule lived"
    if calls == 1:
        swap.release()
        gc.collect()
        after = _refcount(p)
        rc_note += f" -> {after} after"
        if after != base_rc:
            return FAILED, f"{label}: deleter ran once but {rc_note}"
        return PASSED, f"{label}: the destructor ran the deleter once; {rc_note}"
    if calls > 1:
        return FAILED, f"{label}: dropping the unconsumed capsule called the deleter {calls} times"
    # Not called through the struct's pointer. Releasing now could double free
    # unless the producer's refcount proves the capsule still holds it.
    if held_rc > base_rc and after_drop == held_rc:
        swap.release()
        gc.collect()
        return FAILED, (
            f"{label}: dropping the unconsumed capsule never called the deleter and the producer "
            f"stayed referenced (a leak); {rc_note} -> {after_drop} after the drop"
        )
    if held_rc > base_rc:
        return WARNING, (
            f"{label}: the destructor released the producer ({rc_note} -> {after_drop}) without "
            "calling the struct's deleter pointer (it frees the struct itself)"
        )
    return WARNING, (
        f"{label}: the destructor did not call the struct's deleter pointer; the capsule holds "
        "no reference to the producer object, so a leak cannot be told from a destructor that "
        "frees the struct itself (left alone to avoid a double free)"
    )


@_rule(
    "deleter-consumed", "a consumed capsule's deleter runs exactly once, by the consumer, after use"
)
def _r_deleter_consumed(s: _Subject) -> _Outcome:
    if not s.host:
        return NOT_APPLICABLE, f"device {s.device} is not host memory"
    outcomes = [_deleter_consumed(s, kind, kw) for kind, kw in _kinds(s)]
    status, detail = _worst(outcomes)
    if s.factory is None and status == PASSED:
        detail += " (an object, not a factory: a late call when it dies cannot be seen)"
    return status, detail


@_rule(
    "deleter-unconsumed", "dropping an unconsumed capsule runs the deleter exactly once, no crash"
)
def _r_deleter_unconsumed(s: _Subject) -> _Outcome:
    return _worst([_deleter_unconsumed(s, kind, kw) for kind, kw in _kinds(s)])


@_rule("producer-kept-alive", "an imported tensor stays valid after the producer object is deleted")
def _r_kept_alive(s: _Subject) -> _Outcome:
    if s.factory is None:
        return NOT_APPLICABLE, "pass a factory: the caller's reference keeps the object alive"
    if not s.host:
        return NOT_APPLICABLE, f"device {s.device} is not host memory"
    p = s.fresh()
    want = s.values_of(p)
    if want is None:
        return NOT_APPLICABLE, s.snapshot_error
    cap, err = s.export(p)
    if err is not None:
        return FAILED, f"export raised {_exc(err)}"
    t = _bridge_from_dlpack(cap)
    del cap, p
    gc.collect()
    nbytes = max(t.untyped_storage().nbytes(), 1)
    scribble = [np.full(nbytes, 0xA5, dtype=np.uint8) for _ in range(8)]  # reuse freed memory
    got = t.tolist()
    del scribble, t
    if not _same(got, want):
        return (
            FAILED,
            f"after deleting the producer the tensor reads {_short(got)}, not {_short(want)}",
        )
    return PASSED, f"after deleting the producer the tensor still reads {_short(want, 40)}"


# --------------------------------------------------------- consumer checks


class _CapsuleProducer:
    """Hands a fixed capsule to a consumer through the ``__dlpack__`` protocol."""

    def __init__(self, capsule: Any, device: tuple[int, int], old_signature: bool = False) -> None:
        self.capsule = capsule
        self.device = device
        self.old_signature = old_signature

    def __dlpack__(self, **kwargs: Any) -> Any:
        unknown = sorted(set(kwargs) - {"stream"})
        if self.old_signature and unknown:
            raise TypeError(f"__dlpack__() got an unexpected keyword argument {unknown[0]!r}")
        cap, self.capsule = self.capsule, None
        if cap is None:
            raise BufferError("this producer's capsule was already handed out")
        return cap

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


@dataclass(frozen=True, slots=True)
class _Case:
    kind: str  # "good": correct values; "may-refuse": values or a clean exception; "bad": exception
    doc: str
    make: Callable[[], Handmade]
    name: str | None = None  # capsule name override
    old_signature: bool = False
    deleter_calls: int = 1


def _f32(n: int) -> Any:
    return np.arange(n, dtype=np.float32) + 0.5


_CASES: dict[str, _Case] = {
    "consumer-accepts-versioned": _Case(
        "good", "a v1.3 float32 (2, 3) C-contiguous capsule", lambda: Handmade()),
    "consumer-accepts-legacy": _Case(
        "good", "a legacy capsule returned even when max_version is asked (allowed)",
        lambda: Handmade(versioned=False)),
    "consumer-accepts-old-signature": _Case(
        "good", "a producer whose __dlpack__ takes no max_version: retry without keywords",
        lambda: Handmade(versioned=False), old_signature=True),
    "consumer-accepts-strided": _Case(
        "good", "transposed strides (1, 3)", lambda: Handmade(_f32(6), shape=(3, 2), strides=(1, 3))),
    "consumer-accepts-byte-offset": _Case(
        "good", "byte_offset 8 is honoured (pytorch#168177)",
        lambda: Handmade(_f32(8)[2:].reshape(2, 3), byte_offset=8)),
    "consumer-accepts-zero-size": _Case(
        "good", "shape (0, 3) with NULL data (onnxruntime#27450)",
        lambda: Handmade(_f32(0), shape=(0, 3), null_data=True)),
    "consumer-accepts-negative-strides": _Case(
        "may-refuse", "strides (-1,) from the last element: values, or a clean refusal",
        lambda: Handmade(_f32(6)[::-1])),
    "consumer-rejects-wrong-name": _Case(
        "bad", "a capsule named neither 'dltensor' nor 'dltensor_versioned'", lambda: Handmade(),
        name="not_a_dltensor", deleter_calls=0),
    "consumer-rejects-major-2": _Case("bad", "version 2.0", lambda: Handmade(major=2, minor=0)),
    "consumer-rejects-ndim-negative": _Case("bad", "ndim -1", lambda: Handmade(ndim=-1)),
    "consumer-rejects-lanes-4": _Case("bad", "lanes 4", lambda: Handmade(lanes=4)),
    "consumer-rejects-unknown-code": _Case(
        "bad", "dtype code 99", lambda: Handmade(np.zeros(6, np.uint8), code=99, bits=8)),
    "consumer-rejects-bits-7": _Case("bad", "float with 7 bits", lambda: Handmade(bits=7)),
    "consumer-rejects-null-shape": _Case("bad", "ndim 2 with a NULL shape", lambda: Handmade(null_shape=True)),
    "consumer-rejects-null-strides": _Case(
        "bad", "v1.3, ndim 2, NULL strides (v1.2+ requires strides)",
        lambda: Handmade(null_strides=True)),
    "consumer-rejects-null-data": _Case(
        "bad", "NULL data with 6 elements", lambda: Handmade(null_data=True)),
}  # fmt: skip

#: rule name -> what it feeds the consumer (consumer side), in the order they run.
CONSUMER_CASES: dict[str, str] = {name: case.doc for name, case in _CASES.items()}


def _to_list(out: Any) -> Any:
    tolist = getattr(out, "tolist", None)
    if callable(tolist):
        return tolist()
    return np.asarray(out).tolist()


def _run_case(consumer: Callable[[Any], Any], name: str) -> RuleResult:
    """Feed case ``name`` to ``consumer``; return its RuleResult (never raises)."""
    case = _CASES[name]
    h = case.make()
    _KEEP.append(h)
    gc.collect()
    start = _test_deleter_calls()
    producer = _CapsuleProducer(h.capsule(case.name), (1, 0), case.old_signature)
    out: Any = None
    err: Exception | None = None
    values: Any = None
    read_error: Exception | None = None
    try:
        out = consumer(producer)
    except Exception as e:
        err = e
    if err is None and case.kind != "bad":
        try:
            values = _to_list(out)
        except Exception as e:
            read_error = e
    del out, producer
    err_text = _exc(err) if err is not None else ""
    err = None
    gc.collect()
    calls = _test_deleter_calls() - start
    deleter_note = ""
    if calls != case.deleter_calls:
        what = "leaked (never called)" if calls == 0 else f"called {calls} times"
        deleter_note = f"; the deleter was {what}, expected {case.deleter_calls}"
    if case.kind == "bad":
        if not err_text:
            return RuleResult(name, FAILED, f"accepted {case.doc}" + deleter_note)
        status = FAILED if deleter_note else PASSED
        return RuleResult(name, status, f"raised {err_text}" + deleter_note)
    if err_text:
        if case.kind == "may-refuse":
            return RuleResult(name, FAILED if deleter_note else PASSED,
                              f"refused cleanly: {err_text}" + deleter_note)  # fmt: skip
        return RuleResult(name, FAILED, f"raised {err_text} for {case.doc}" + deleter_note)
    if read_error is not None:
        return RuleResult(name, FAILED, f"result unreadable: {_exc(read_error)}" + deleter_note)
    want = h.expected()
    if not _same(values, want):
        return RuleResult(
            name, FAILED, f"values {_short(values)}, expected {_short(want)}" + deleter_note
        )
    status = FAILED if deleter_note else PASSED
    return RuleResult(name, status, f"values {_short(want, 40)} correct" + deleter_note)


_MARK = "@@bridge-conformance@@"
_CHILD = "import sys; from bridge.kit.conformance import _consumer_main; sys.exit(_consumer_main(sys.argv[1:]))"


def _consumer_main(argv: list[str]) -> int:
    """Subprocess entry: ``spec case...``; prints one marked JSON line per case."""
    spec, names = argv[0], argv[1:]
    consumer = load(spec)
    out = sys.stdout
    with _young_gc():
        for name in names:
            print(_MARK, "start", name, file=out, flush=True)
            result = _run_case(consumer, name)
            print(_MARK, "result", json.dumps(result.to_dict()), file=out, flush=True)
    return 0


def _consumer_spec(consumer: Any) -> str | None:
    """``module:qualname`` that a subprocess can load to get ``consumer``, or None."""
    if isinstance(consumer, str):
        return consumer
    module = getattr(consumer, "__module__", None)
    qualname = getattr(consumer, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        return None
    spec = f"{module}:{qualname}"
    try:
        return spec if load(spec) is consumer else None
    except Exception:
        return None


def _died(rc: int) -> str:
    if rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"exit status {rc}"


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _stderr_clue(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for key in ("what():", "Fatal Python error", "Error"):
        for ln in lines:
            if key in ln:
                return f": {ln[:160]}"
    return f": {lines[-1][:160]}" if lines else ""


def _consumer_in_subprocess(spec: str, names: list[str], timeout: float) -> list[RuleResult]:
    results: dict[str, RuleResult] = {}
    pending = list(names)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    while pending:
        timed_out = False
        try:
            proc = subprocess.run(
                [sys.executable, "-c", _CHILD, spec, *pending],
                capture_output=True, text=True, timeout=timeout, env=env,
            )  # fmt: skip
            stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            stdout, stderr, rc, timed_out = _text(e.stdout), _text(e.stderr), -9, True
        current = None
        for line in stdout.splitlines():
            if not line.startswith(_MARK):
                continue
            _, what, payload = line.split(" ", 2)
            if what == "start":
                current = payload
            elif what == "result":
                d = json.loads(payload)
                results[d["name"]] = RuleResult(d["name"], d["status"], d["detail"])
                current = None
        last = _stderr_clue(stderr)
        if current is not None:
            why = (
                f"hung for {timeout:.0f} s"
                if timed_out
                else f"crashed the process ({_died(rc)}{last})"
            )
            results[current] = RuleResult(
                current, FAILED, f"{CONSUMER_CASES[current]}: the consumer {why}"
            )
            pending = [n for n in pending[pending.index(current) + 1 :] if n not in results]
            continue
        left = [n for n in pending if n not in results]
        for n in left:
            results[n] = RuleResult(
                n, FAILED, f"the consumer subprocess failed ({_died(rc)}{last})"
            )
        pending = []
    return [results[n] for n in names]


def _check_consumer(consumer: Any, isolate: bool, timeout: float) -> list[RuleResult]:
    names = list(_CASES)
    spec = _consumer_spec(consumer) if isolate else None
    if spec is not None:
        return [
            RuleResult("consumer-isolation", PASSED, f"ran in a subprocess as {spec!r}"),
            *_consumer_in_subprocess(spec, names, timeout),
        ]
    fn = load(consumer) if isinstance(consumer, str) else consumer
    why = (
        "isolate=False" if not isolate
        else "the consumer cannot be imported by name (pass a module-level function or 'module:expr')"
    )  # fmt: skip
    return [
        RuleResult(
            "consumer-isolation",
            WARNING,
            f"ran in this process ({why}): a crash would kill the caller",
        ),
        *[_run_case(fn, n) for n in names],
    ]


# ------------------------------------------------------------------ public


def load(spec: str) -> Any:
    """Evaluate ``"module:expr"``: import ``module`` and evaluate ``expr`` in
    its namespace, with the module also bound to its own last name and its
    top-level package to its first (``"numpy:lambda: numpy.arange(6.0)"``).

    The split is at the first ``:``, so ``expr`` may contain colons. This
    runs arbitrary code, exactly like ``python -c``. Raises ValueError for a
    spec without ``module:`` or ``expr``, ImportError/any error from the
    evaluation as is.
    """
    module_name, sep, expr = spec.partition(":")
    module_name, expr = module_name.strip(), expr.strip()
    if not sep or not module_name or not expr:
        raise ValueError(f"expected 'module:expr', got {spec!r}")
    module = importlib.import_module(module_name)
    namespace = dict(vars(module))
    top = module_name.split(".")[0]
    namespace.setdefault(module_name.rsplit(".", 1)[-1], module)
    namespace.setdefault(top, importlib.import_module(top))
    return eval(expr, namespace, _ModuleNames(module))


class _ModuleNames(dict[str, Any]):
    """Names the module makes on first use (a module ``__getattr__``, as
    ``bridge.check``) for ``eval``: looked up when the namespace has none."""

    def __init__(self, module: Any) -> None:
        super().__init__()
        self._module = module

    def __missing__(self, name: str) -> Any:
        try:
            return getattr(self._module, name)
        except AttributeError:
            raise KeyError(name) from None


def check(
    obj_or_factory: Any,
    *,
    consumer: Callable[[Any], Any] | str | None = None,
    isolate: bool = True,
    timeout: float = 120.0,
) -> Report:
    """Check a DLPack producer (and optionally a consumer) against the rules.

    ``obj_or_factory`` is an object with ``__dlpack__`` (used as is for every
    rule), or a zero-argument callable returning a fresh one per rule (needed
    for ``producer-kept-alive`` and to see a deleter call when the producer
    dies). :data:`PRODUCER_RULES` lists the rules. The producer checks run in
    this process: they call ``__dlpack__``, read the capsules' structs by
    their names, import some with :func:`bridge.from_dlpack`, and temporarily
    swap a capsule's deleter for a counting one (restored and run exactly
    once afterwards), so a producer that corrupts memory can crash the caller.

    ``consumer`` is a ``from_dlpack``-like function (or a ``"module:expr"``
    naming one); it receives objects whose ``__dlpack__`` returns hand-made
    capsules, good and malformed (:data:`CONSUMER_CASES`). With ``isolate``
    (the default) and a consumer that can be named, it runs in a subprocess
    (``timeout`` seconds per run) so a crash is reported as a failed rule;
    otherwise in this process, with a ``consumer-isolation`` warning.

    Returns a :class:`Report`; never raises for a non-conforming producer
    (a check that raises unexpectedly is reported as failed). Raises
    TypeError when ``obj_or_factory`` is neither a producer nor a callable,
    or the factory's result has no ``__dlpack__``.
    """
    with _young_gc():
        subject = _Subject(obj_or_factory)
        report = Report(subject.label)
        _run_producer_checks(subject, report)
        del subject
        gc.collect()
        if consumer is not None:
            report.entries.extend(_check_consumer(consumer, isolate, timeout))
    return report


@contextlib.contextmanager
def _young_gc() -> Iterator[None]:
    """Freeze what exists now so that the many gc.collect() calls of the
    checks scan only the objects the checks make (torch alone brings ~10^6
    tracked objects). Not done when the caller already froze objects."""
    mine = gc.get_freeze_count() == 0
    if mine:
        gc.freeze()
    try:
        yield
    finally:
        if mine:
            gc.unfreeze()


def _run_producer_checks(subject: _Subject, report: Report) -> None:
    for name, fn in _PRODUCER_CHECKS:
        if subject.unexportable and name not in _WITHOUT_EXPORT:
            report.entries.append(RuleResult(name, NOT_APPLICABLE, subject.unexportable))
            continue
        try:
            status, detail = fn(subject)
        except Exception as e:
            status, detail = FAILED, f"the check stopped on {_exc(e)}"
        report.entries.append(RuleResult(name, status, detail))
