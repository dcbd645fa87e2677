"""The one reading of :func:`bridge.convert`'s keyword arguments: each is read
here once per call, into the value every later step uses, so that the check
and the use cannot disagree (``copy=numpy.False_`` once passed a check written
``== False`` and was then used as ``is False``). ``dtype=`` and ``device=`` are
read by the core's own readers (:func:`bridge.core.dtypes.get_dtype`,
:class:`bridge.core.device.device`); ``BRIDGE_HOST_CACHE`` by the C core, once
per process."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from bridge.crossing.signature import ReadOnlyPolicy

__all__ = ["read_columns", "read_flag", "read_policy"]

_READONLY: dict[str, ReadOnlyPolicy] = {"copy": "copy", "error": "error", "share": "share"}


def _bool_of(value: object) -> bool | None:
    """``value`` as a bool when it is one (Python's or NumPy's), else None."""
    if value is True or value is False:
        return value  # type: ignore[return-value]
    if type(value) is np.bool_:
        return bool(value)
    return None


def read_flag(name: str, value: object) -> bool:
    """A True/False keyword (``contiguous``, ``writable``, ``stack``): a
    Python or NumPy bool. TypeError naming ``name`` for anything else, 0 and
    1 included (a flag is not a number)."""
    flag = _bool_of(value)
    if flag is None:
        raise TypeError(f"convert(): {name} must be True or False, got {value!r}")
    return flag


def read_policy(copy: object, readonly: object) -> tuple[bool | None, ReadOnlyPolicy]:
    """``copy`` and ``readonly`` as every later step reads them: ``copy``
    None or a bool (Python's or NumPy's; an int, even 0 or 1, is TypeError,
    as the array API's ``copy`` is ``Optional[bool]``); ``readonly`` one of
    the policies' own strings (ValueError otherwise)."""
    flag = None if copy is None else _bool_of(copy)
    if copy is not None and flag is None:
        raise TypeError(f"convert(): copy must be None, True or False, got {copy!r}")
    policy = _READONLY.get(readonly) if isinstance(readonly, str) else None
    if policy is None:
        raise ValueError(f"convert(): readonly must be 'copy', 'error' or 'share', got {readonly!r}")
    return flag, policy


def read_columns(columns: object) -> list[Hashable] | None:
    """``columns=``: None, or a list or tuple of column labels, as the table
    names them (str; a pandas frame's labels may be ints or tuples). A str
    alone, a label that cannot be a key, or a repeated label is TypeError or
    ValueError naming it. (Whether the table has them is the table's
    reader's to say.)"""
    if columns is None:
        return None
    if isinstance(columns, str) or not isinstance(columns, (list, tuple)):
        raise TypeError(f"convert(): columns must be a list of column names, got {columns!r}")
    out: list[Hashable] = []
    for c in columns:
        if c is None or not isinstance(c, Hashable):
            raise TypeError(f"convert(): columns must be a list of column names, got {c!r} among them")
        out.append(c)
    seen: set[Hashable] = set()
    twice = [c for c in out if c in seen or seen.add(c)]  # type: ignore[func-returns-value]
    if twice:
        raise ValueError(f"convert(columns=...): {', '.join(map(repr, dict.fromkeys(twice)))} named twice")
    return out
