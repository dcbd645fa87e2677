"""What :func:`bridge.convert` does to an array, as values: the
:class:`Fix` es of a :class:`Plan`, the :class:`CopyWarning` that names
them, what the caller asks of every array (:class:`Wants`), and the steps
a unit converts each of its arrays with (:class:`Steps`, which
:class:`bridge.crossing.convert.Leaf` makes). A module of its own so that
:mod:`bridge.crossing.convert` and :mod:`bridge.crossing.units`, which
both use them, import it and not each other.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Mapping
from types import MappingProxyType
from typing import Literal, NamedTuple, Protocol

from bridge.core.device import device as Device
from bridge.core.dtypes import dtype as DType
from bridge.core.tensor import Tensor
from bridge.crossing.capabilities import Holds

__all__ = ["CopyWarning", "Fix", "FixKind", "NO_WANTS", "Plan", "Steps", "Wants"]

#: What a fix does. Copies: ``"requested"`` (``copy=True``), ``"device"`` (the
#: memory is on a device the destination does not hold), ``"layout"``
#: (strides it cannot hold: negative, zero, not compact, not row-major),
#: ``"alignment"`` (its first element is not aligned as it requires),
#: ``"read-only"`` (read-only memory into a destination that writes),
#: ``"destination"`` (the destination copies every import), ``"unpack"`` (Arrow's
#: bit-packed bools, one byte per value in bridge's copy), ``"concatenate"``
#: (Arrow data in several chunks or batches, joined in bridge's copy),
#: ``"byte-order"`` (a NumPy array of non-native byte order, swapped in
#: bridge's copy), ``"value"`` (a NumPy scalar, made a 0-d tensor). Views:
#: ``"dtype-view"`` (the dtype seen as ml_dtypes' type of the same bytes),
#: ``"offset"`` (the view's offset folded into the data pointer for a
#: destination that ignores ``byte_offset``), ``"alias"`` (read-only memory
#: handed as a legacy capsule to a destination that never writes), and
#: ``"read-only-share"`` (``readonly="share"``: shared with a destination
#: that may write it). What the caller asks for: ``"dtype"`` (``dtype=``, a
#: cast), ``"contiguous"`` (``contiguous=True``), ``"writable"``
#: (``writable=True`` of read-only memory); ``device=`` is a ``"device"`` copy;
#: ``"stack"`` (``stack=True`` of a table whose columns are separate memory).
FixKind = Literal["requested", "device", "layout", "alignment", "read-only", "destination", "unpack", "concatenate",
                  "byte-order", "value", "dtype-view", "offset", "alias", "read-only-share", "dtype", "contiguous",
                  "writable", "stack"]  # fmt: skip


_NO_LEAVES: Mapping[str, tuple[Fix, ...]] = MappingProxyType({})


class CopyWarning(UserWarning):
    """:func:`bridge.convert` copied (``copy=None``) where the destination
    cannot hold the memory as it is. ``kind`` is the first reason's
    :data:`FixKind`; ``fixes`` every fix made; ``leaves``, for a batch or a
    table (one warning per call), each copied leaf's path (``"['x']"``,
    ``"[0].mask"``) and its fixes (empty for a single array). Filter it with
    ``warnings.filterwarnings("ignore", category=bridge.CopyWarning)``."""

    def __init__(self, message: str, kind: FixKind, fixes: tuple[Fix, ...],
                 leaves: Mapping[str, tuple[Fix, ...]] | None = None) -> None:  # fmt: skip
        super().__init__(message)
        self.kind: FixKind = kind
        self.fixes: tuple[Fix, ...] = fixes
        self.leaves: Mapping[str, tuple[Fix, ...]] = MappingProxyType(dict(leaves)) if leaves else _NO_LEAVES


@dataclasses.dataclass(frozen=True)
class Fix:
    """One change :func:`convert` makes: its ``kind``, the ``reason`` in words
    (naming the destination's rule), whether it ``copies`` the data, and
    whether the caller ``asked`` for it (``dtype=``, ``device=``,
    ``contiguous=``, ``writable=``, ``stack=``: named in the plan, never
    warned about)."""

    kind: FixKind
    reason: str
    copies: bool
    asked: bool = False


@dataclasses.dataclass(frozen=True)
class Plan:
    """What :func:`convert` would do: the ``destination``'s name and the
    ``fixes``, in the order they are made (none: zero-copy as it is)."""

    destination: str
    fixes: tuple[Fix, ...]

    @property
    def copies(self) -> bool:
        """Whether the result will not share the source's memory."""
        return any(f.copies for f in self.fixes)

    @property
    def reasons(self) -> str:
        """The copying fixes' reasons, in one sentence ("" when none copies)."""
        return "; ".join(f.reason for f in self.fixes if f.copies)

    @property
    def unasked(self) -> tuple[Fix, ...]:
        """The copying fixes the caller did not ask for (what a CopyWarning names)."""
        return tuple(f for f in self.fixes if f.copies and not f.asked)


class Wants(NamedTuple):
    """What the caller asks of every converted array besides the destination
    (``convert``'s ``dtype=``, ``device=``, ``contiguous=``, ``writable=``),
    read once per call."""

    dtype: DType | None
    device: Device | None
    contiguous: bool
    writable: bool


NO_WANTS = Wants(None, None, False, False)


class Steps(Protocol):
    """How a unit (:mod:`bridge.crossing.units`) converts each of its arrays:
    into ``h``, with the caller's asks ``w``; convert's own steps (import and
    plan, then make), which :class:`bridge.crossing.convert.Leaf` makes."""

    @property
    def h(self) -> Holds:
        """The destination."""
        ...

    @property
    def w(self) -> Wants:
        """What the caller asks of every array."""
        ...

    def again(self, unit: object, columns: list[Hashable] | None = None) -> object:
        """``convert(unit, to)`` with this call's arguments (and ``columns``)."""
        ...

    def imported(self, obj: object) -> tuple[Tensor, tuple[Fix, ...]]:
        """``obj`` imported, and the fixes its import made."""
        ...

    def prepare_imported(self, t: Tensor, made: tuple[Fix, ...]) -> tuple[Tensor, Plan]:
        """Imported ``t`` planned, the caller's asks made (one copy)."""
        ...

    def dry_plan(self, t: Tensor, made: tuple[Fix, ...]) -> Plan:
        """What :meth:`prepare_imported` would plan, copying nothing."""
        ...

    def region_copy(self, region: Tensor) -> Tensor:
        """One copy of ``region`` that settles what the caller asks and the destination needs."""
        ...

    def replan(self, t: Tensor) -> Plan:
        """The plan of a tensor the caller's asks were already made for."""
        ...

    def make(self, t: Tensor, p: Plan) -> object:
        """The destination's object for ``t`` planned as ``p`` (no warning)."""
        ...

    def warn(self, leaves: dict[str, tuple[Fix, ...]]) -> None:
        """One CopyWarning naming every array copied without being asked."""
        ...
