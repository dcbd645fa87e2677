"""The units people move, for :func:`bridge.convert`: batches, tables and
streams, each array in them converted as convert converts one.

- A **batch** is a nested structure of dicts (any Mapping), lists, tuples,
  named tuples and dataclasses; every array leaf is converted and every other
  leaf kept as it is (as torch's ``default_convert`` does), into the same
  structure. Leaves whose memory overlaps and that must be copied are copied
  as one region, so that they still share memory afterwards.
- A **table** (a pyarrow Table or RecordBatch, a polars or pandas
  DataFrame, anything with ``__dataframe__``) is a dict of column name ->
  converted column; ``columns=`` chooses them, ``stack=True`` gives one 2-D
  array (rows x columns) instead.
- A **stream** (a pyarrow RecordBatchReader, another ``__arrow_c_stream__``
  object of record batches that is not a table, or an iterator of tables,
  such as ``pyarrow.parquet.ParquetFile.iter_batches()``) is a lazy iterator
  of converted tables: one batch is read and converted per ``next()``.

This module decides what a unit is and walks it; the steps for one array are
convert's own (:class:`bridge.crossing.convert.Leaf`).
"""

from __future__ import annotations

import copy as _copy_module
import dataclasses
from collections import defaultdict
from collections.abc import Hashable, Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from bridge.core.native import _C
from bridge.core.tensor import Tensor
from bridge.crossing.capabilities import Holds
from bridge.crossing.fixes import Fix, Plan
from bridge.crossing.fixes import Steps as Leaf

__all__ = ["Batches", "convert_unit", "is_unit"]

_TABLES = ("DataFrame", "LazyFrame", "Table", "RecordBatch")
_ARRAY_METHODS = ("__dlpack__", "__dlpack_c_exchange_api__", "__arrow_c_array__", "__arrow_c_device_array__",
                  "__cuda_array_interface__", "__array_interface__", "__array_struct__", "__array__")  # fmt: skip
#: The kinds of copy one region can make for all the overlapping leaves at
#: once (what a layout or contiguity fix cannot: each leaf has its strides).
_REGION_KINDS = frozenset({"requested", "device", "alignment", "read-only", "dtype", "writable"})


# ------------------------------------------------------------------ what a unit is


_TABLE_TYPES: dict[type, bool] = {}  # what a type is says it of every object of it: asked once per type


def is_table(obj: object) -> bool:
    """Whether ``obj`` is a table of columns: the dataframe interchange
    protocol, or a DataFrame/Table/RecordBatch of pandas, polars, pyarrow and
    the like (polars 2 dropped ``__dataframe__``)."""
    tp = type(obj)
    known = _TABLE_TYPES.get(tp)
    if known is None:
        known = _TABLE_TYPES[tp] = hasattr(tp, "__dataframe__") or (
            tp.__name__ in _TABLES and (hasattr(tp, "columns") or hasattr(tp, "column_names")))  # fmt: skip
    return known


_ARRAY_TYPES: dict[type, bool] = {}


def _is_array(obj: object) -> bool:
    """Whether ``obj`` is one array convert imports (a leaf to convert)."""
    tp = type(obj)
    known = _ARRAY_TYPES.get(tp)
    if known is None:
        known = _ARRAY_TYPES[tp] = issubclass(tp, (Tensor, np.ndarray, np.generic)) or any(
            hasattr(tp, m) for m in _ARRAY_METHODS)  # fmt: skip
    if known:
        return True
    # pyarrow's ChunkedArray and polars' or pandas' Series: one column, several chunks
    return hasattr(tp, "__arrow_c_stream__") and not is_table(obj) and not _is_record_stream(obj)


def _is_record_stream(obj: object) -> bool:
    """A stream of record batches that is not a table object: pyarrow's
    RecordBatchReader, or an ``__arrow_c_stream__`` object whose schema
    (``__arrow_c_schema__``) is a struct, read without consuming it."""
    tp = type(obj)
    if tp.__name__ == "RecordBatchReader" and tp.__module__.startswith("pyarrow"):
        return True
    if not hasattr(tp, "__arrow_c_stream__") or hasattr(tp, "__arrow_c_array__") or is_table(obj):
        return False
    if tp.__module__.startswith(("pyarrow", "polars", "pandas")):  # their columns: ChunkedArray, Series
        return False
    schema = getattr(obj, "__arrow_c_schema__", None)
    if schema is None:
        return False
    try:
        return bool(_C.arrow_describe_schema(schema())[0] == "+s")
    except Exception:  # a schema it cannot give is the single-array path's to explain
        return False


def is_stream(obj: object) -> bool:
    """Whether ``obj`` is a stream of tables (:class:`Batches` converts it)."""
    if _is_record_stream(obj):
        return True
    return isinstance(obj, Iterator) and not _is_array(obj) and not is_table(obj)


def _is_tree(obj: object) -> bool:
    return (isinstance(obj, (Mapping, list, tuple)) or
            (dataclasses.is_dataclass(obj) and not isinstance(obj, type)))  # fmt: skip


def is_unit(obj: object) -> bool:
    """Whether convert takes ``obj`` as a batch, a table or a stream, not as one array."""
    return _is_tree(obj) or is_table(obj) or is_stream(obj)


# ------------------------------------------------------------------ converting


def convert_unit(obj: object, h: Holds, leaf: Leaf, *, columns: list[Hashable] | None = None,
                 stack: bool = False) -> object:  # fmt: skip
    """``obj`` (a batch, a table or a stream) converted into ``h``, each array
    as ``leaf`` converts one, with one CopyWarning for the call. ``columns``
    and ``stack`` (read by :mod:`bridge.crossing.arguments`) are a table's
    (TypeError for anything else)."""
    if is_stream(obj):
        return Batches(obj, leaf, columns, stack)
    if is_table(obj):
        return convert_table(obj, leaf, columns, stack)
    if columns is not None or stack:
        raise TypeError(f"convert(): columns= and stack= are for tables, not a {type(obj).__name__}")
    return convert_tree(obj, leaf)


def convert_tree(obj: object, leaf: Leaf) -> object:
    """A batch converted: read once into a snapshot of its structure (a leaf's
    import runs Python, which may change the containers meanwhile: the result
    is what they held when the call read them, and the input is never
    changed), its array leaves through :func:`convert_leaves`, the same
    structure built anew around them. TypeError for a batch without arrays
    (a list of numbers is values, not memory)."""
    found: list[tuple[str, object]] = []
    tree = _read_tree(obj, "", found, set(), 0)
    if not found:
        raise TypeError(f"convert(): a Python {type(obj).__name__} holds values, not memory; make an array of it "
                        "first (np.asarray(x), torch.tensor(x), ...), which chooses its dtype: convert moves memory "
                        "and chooses none (a batch converts the arrays in it, and this one has none)")  # fmt: skip
    results = convert_leaves(found, leaf)
    return _rebuild(tree, results)


#: How deep a batch may nest (a container that holds itself would recurse forever).
MAX_DEPTH = 200


class _Node(NamedTuple):
    """One place of a batch as it was read: ``kind`` is ``"array"`` (a leaf
    to convert, or a table), ``"value"`` (kept), ``"map"``, ``"seq"`` or
    ``"fields"`` (a dataclass), with ``items`` (key, index or field name ->
    node) read once."""

    kind: str
    obj: object
    items: tuple[tuple[object, _Node], ...] = ()


def _read_tree(obj: object, path: str, found: list[tuple[str, object]], seen: set[int], depth: int) -> _Node:
    """``obj``'s structure, each container's items read once, and every array
    leaf with its path in ``found``, each object once; tables are leaves of
    their own (converted to dicts)."""
    if _is_array(obj) or is_table(obj):
        if id(obj) not in seen:
            seen.add(id(obj))
            found.append((path, obj))
        return _Node("array", obj)
    if depth >= MAX_DEPTH and _is_tree(obj):
        raise ValueError(f"convert(): the batch nests deeper than {MAX_DEPTH} levels at {path or 'its top'} "
                         "(a container that holds itself?)")  # fmt: skip
    if isinstance(obj, Mapping):
        pairs = list(obj.items())
        return _Node("map", obj, tuple((k, _read_tree(v, f"{path}[{k!r}]", found, seen, depth + 1))
                                       for k, v in pairs))  # fmt: skip
    if isinstance(obj, (list, tuple)):
        names = getattr(obj, "_fields", None)
        values = list(obj)
        return _Node("seq", obj, tuple((i, _read_tree(v, f"{path}.{names[i]}" if names else f"{path}[{i}]", found,
                                                      seen, depth + 1))
                                       for i, v in enumerate(values)))  # fmt: skip
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]
        return _Node("fields", obj, tuple((n, _read_tree(v, f"{path}.{n}", found, seen, depth + 1))
                                          for n, v in fields))  # fmt: skip
    return _Node("value", obj)


def _rebuild(node: _Node, results: dict[int, object]) -> object:
    """The structure ``node`` read, built anew with each converted leaf (by
    ``id``) in place: never the input's containers, changed."""
    kind, obj, items = node
    if kind == "array":
        return results[id(obj)]
    if kind == "value":
        return obj
    if kind == "map":
        return _mapping_like(obj, {k: _rebuild(n, results) for k, n in items})
    if kind == "seq":
        values: list[Any] = [_rebuild(n, results) for _, n in items]
        tp: Any = type(obj)
        if tp in (list, tuple):
            return tp(values)
        if hasattr(obj, "_fields"):  # a named tuple
            return tp(*values)
        try:
            return tp(values)
        except TypeError:
            return tuple(values) if isinstance(obj, tuple) else values
    made: Any = _copy_module.copy(obj)  # a dataclass (frozen ones too, and fields outside __init__)
    if made is obj:  # (a __copy__ that returns itself: its fields are the input's)
        made = dataclasses.replace(obj)  # type: ignore[type-var]
    for name, n in items:
        object.__setattr__(made, str(name), _rebuild(n, results))
    return made


def _mapping_like(obj: object, items: dict[Any, object]) -> object:
    """A new mapping of ``obj``'s type holding ``items`` (a defaultdict keeps
    its factory), made by its constructor; a plain dict where the type
    cannot be made so. Never a copy of ``obj`` cleared and refilled: a
    Mapping that keeps its items in an attribute shares them with its copy,
    and the input would be rewritten."""
    tp: Any = type(obj)
    if tp is dict:
        return items
    try:
        made = tp(obj.default_factory, items) if isinstance(obj, defaultdict) else tp(items)
    except Exception:  # a constructor that takes something else: the items, as a dict
        return items
    return made if isinstance(made, Mapping) and len(made) == len(items) and made is not obj else items


def convert_leaves(found: list[tuple[str, object]], leaf: Leaf) -> dict[int, object]:
    """Each ``(path, object)`` converted (tables to dicts of columns), by
    ``id`` of the object, with one CopyWarning naming the copied ones.
    Arrays whose memory overlaps and that must all be copied for reasons one
    region can settle (read-only, device, dtype, alignment, ``copy=True``)
    are copied as one region, so they still share memory afterwards."""
    said: dict[str, tuple[Fix, ...]] = {}
    out: dict[int, object] = {}
    arrays: list[tuple[str, object, Tensor, tuple[Fix, ...]]] = []
    for path, obj in found:
        if is_table(obj):  # (its own call: its own CopyWarning)
            out[id(obj)] = convert_table(obj, leaf, None, False)
        else:
            t, made = leaf.imported(obj)
            arrays.append((path, obj, t, made))
    shared = _share_regions(arrays, leaf, said) if len(arrays) > 1 else {}
    for path, obj, t, made in arrays:
        if id(obj) in shared:
            out[id(obj)] = shared[id(obj)]
            continue
        t, p = leaf.prepare_imported(t, made)
        said[path] = p.fixes
        out[id(obj)] = leaf.make(t, p)
    leaf.warn(said)
    return out


def _extent(t: Tensor) -> tuple[int, int]:
    """The bytes ``t`` reads: [first, end)."""
    lo = hi = t.data_ptr()
    for n, s in zip(t.shape, t.stride()):
        if n > 1:
            step = (n - 1) * s * t.itemsize
            lo, hi = (lo + step, hi) if step < 0 else (lo, hi + step)
    return lo, hi + t.itemsize


def _overlapping(spans: list[tuple[tuple[int, int], str, int]]) -> list[list[int]]:
    """The groups (of two or more) of indexes whose extents, on one device,
    overlap one another in a chain."""
    groups: list[list[int]] = []
    end, dev = -1, ""
    for (lo, hi), d, i in sorted(spans, key=lambda e: (e[1], e[0])):
        if groups and d == dev and lo < end:
            groups[-1].append(i)
            end = max(end, hi)
        else:
            groups.append([i])
            end, dev = hi, d
    return [g for g in groups if len(g) > 1]


def _share_regions(arrays: list[tuple[str, object, Tensor, tuple[Fix, ...]]], leaf: Leaf,
                   said: dict[str, tuple[Fix, ...]]) -> dict[int, object]:  # fmt: skip
    """The converted arrays of every group whose memory overlaps, which must
    all be copied, and which one region's copy settles (each then a view of
    that copy), by ``id``. An array held as it is stays the source's memory
    (never copied because a copied one overlaps it): the C engine's rule."""
    spans = [(_extent(t), str(t.device), i) for i, (_, _, t, _) in enumerate(arrays) if t.numel() > 0]
    out: dict[int, object] = {}
    for g in _overlapping(spans):  # (planned only where memory overlaps: one judgement each elsewhere)
        planned = {i: leaf.dry_plan(arrays[i][2], arrays[i][3]) for i in g}
        copying = [(_extent(arrays[i][2]), str(arrays[i][2].device), i) for i in g if planned[i].copies]
        for sub in _overlapping(copying):
            out.update(_share_one(sub, arrays, [planned[i] for i in sub], leaf, said))
    return out


def _share_one(g: list[int], arrays: list[tuple[str, object, Tensor, tuple[Fix, ...]]], planned: list[Plan],
               leaf: Leaf, said: dict[str, tuple[Fix, ...]]) -> dict[int, object]:  # fmt: skip
    members = [arrays[i] for i in g]
    dt = members[0][2].dtype
    kinds = {f.kind for p in planned for f in p.fixes if f.copies}
    if not kinds or not kinds <= _REGION_KINDS or any(t.dtype is not dt for _, _, t, _ in members):
        return {}
    lo = min(_extent(t)[0] for _, _, t, _ in members)
    hi = max(_extent(t)[1] for _, _, t, _ in members)
    if any((t.data_ptr() - lo) % dt.itemsize for _, _, t, _ in members):
        return {}
    first = members[0][2]
    region: Tensor = _C.from_memory(lo, dt, ((hi - lo) // dt.itemsize,), (dt.itemsize,),
                                    tuple(t for _, _, t, _ in members), any(t.is_readonly for _, _, t, _ in members),
                                    first.__dlpack_device__())  # fmt: skip
    copied = leaf.region_copy(region)
    out: dict[int, object] = {}
    views = []
    for (path, obj, t, _), p in zip(members, planned):
        v = copied.as_strided(t.shape, t.stride(), (t.data_ptr() - lo) // dt.itemsize)
        again = leaf.replan(v)
        if again.copies:  # (its alignment, say): this group cannot share; each is copied alone
            return {}
        views.append((path, obj, v, p, again))
    for path, obj, v, p, again in views:
        said[path] = tuple(f for f in p.fixes if f.copies) + again.fixes
        out[id(obj)] = leaf.make(v, again)
    return out


# ------------------------------------------------------------------ tables


def _column_labels(table: object) -> list[Hashable]:
    """The table's column labels, in order, as the table has them (pyarrow's
    and polars' are str; a pandas frame's may be ints, or tuples of a
    MultiIndex)."""
    names: Any = getattr(table, "column_names", None)
    if names is None:
        names = getattr(table, "columns", ())
    return list(names)


def _column_at(table: object, i: int, label: Hashable, top: str) -> object:
    """Column ``i`` of a table (of module ``top``), by position (a label may
    be shared by several columns), as the object convert imports (zero-copy
    where the library allows: a NumPy-backed pandas column as its ndarray)."""
    if top == "pyarrow":
        return table.column(i)  # type: ignore[attr-defined]
    if top == "polars":
        return table.to_series(i)  # type: ignore[attr-defined]
    if top == "pandas":
        s = table.iloc[:, i]  # type: ignore[attr-defined]
        if isinstance(s.dtype, np.dtype) and s.dtype.kind in "biufcmM":
            return s.to_numpy(copy=False)
        return s
    return table[label]  # type: ignore[index]


def _table_columns(table: object, top: str, chosen: list[Hashable] | None, keyed: bool) -> list[tuple[Hashable, object]]:
    """The ``chosen`` columns of ``table`` (all when None) as ``(label,
    column)``, read in one step, before any is converted. ValueError naming
    a label the table lacks, or one it has twice where a dict of columns (or
    ``columns=``) would have to choose between them; RuntimeError when the
    table changes while it is read (another thread)."""
    labels = _column_labels(table)
    if chosen is None:
        positions = list(range(len(labels)))
    else:
        missing = [c for c in chosen if c not in labels]
        if missing:
            raise ValueError(f"convert(columns=...): no column{'s' if len(missing) > 1 else ''} "
                             f"{', '.join(map(repr, missing))}; the table has {', '.join(map(repr, labels))}")  # fmt: skip
        positions = [labels.index(c) for c in chosen]
    if keyed or chosen is not None:
        wanted = {labels[i] for i in positions}
        counts: dict[Hashable, int] = {}
        for label in labels:
            counts[label] = counts.get(label, 0) + 1
        twice = [label for label in dict.fromkeys(labels) if counts[label] > 1 and label in wanted]
        if twice:
            raise ValueError(f"convert(): the table has more than one column named {', '.join(map(repr, twice))}, "
                             "and a dict of columns holds one per name: rename them (or stack=True, which "
                             "takes them by position)")  # fmt: skip
    try:
        read = [(labels[i], _column_at(table, i, labels[i], top)) for i in positions]
    except (IndexError, KeyError) as e:
        raise RuntimeError(f"convert(): the {type(table).__name__} changed while its columns were read "
                           f"({type(e).__name__}: {e}); convert it when no other thread changes it") from e
    # pyarrow's tables are immutable; a pandas or polars frame changed by another thread between
    # reading its labels and its columns would pair a label with another column's values
    if top != "pyarrow" and _column_labels(table) != labels:
        raise RuntimeError(f"convert(): the {type(table).__name__} changed while its columns were read; "
                           "convert it when no other thread changes it")  # fmt: skip
    return read


def _as_table(obj: object) -> object:
    """A table convert reads columns of: itself, or an interchange-protocol
    (``__dataframe__``) object read by pyarrow. TypeError for a polars
    LazyFrame, a query and not memory."""
    if type(obj).__name__ == "LazyFrame":
        raise TypeError("convert(): a polars LazyFrame is a query, not memory: collect() it first (or convert "
                        "its batches: lf.collect_batches())")  # fmt: skip
    if type(obj).__module__.split(".")[0] in ("pyarrow", "polars", "pandas"):
        return obj
    try:
        import pyarrow.interchange as pai
    except ImportError as e:  # pragma: no cover (pyarrow is the arrow extra)
        raise TypeError(f"convert(): a {type(obj).__name__} is read through pyarrow (pip install "
                        "dlpack-bridge[arrow])") from e  # fmt: skip
    return pai.from_dataframe(obj)  # type: ignore[attr-defined]


def convert_table(obj: object, leaf: Leaf, columns: list[Hashable] | None, stack: bool) -> object:
    """A table converted: a dict of column label -> converted column (the
    columns as a batch, through convert itself: its C loop takes them when
    every one holds as it is; a table without columns, or ``columns=[]``,
    is an empty dict), or with ``stack`` one 2-D array (rows x columns)."""
    table = _as_table(obj)
    top = type(table).__module__.partition(".")[0]
    read = _table_columns(table, top, columns, not stack)
    if stack:
        return _stack_call(read, table, leaf, top)
    if not read:
        return {}
    return leaf.again(dict(read))


def _stack_call(columns: list[tuple[Hashable, object]], table: object, leaf: Leaf, top: str) -> object:
    """``stack=True``: the 2-D array, and one CopyWarning for what it copied unasked."""
    said: dict[str, tuple[Fix, ...]] = {}
    out = _stacked(columns, table, leaf, said, top)
    leaf.warn(said)
    return out


def _stacked(columns: list[tuple[Hashable, object]], table: object, leaf: Leaf, said: dict[str, tuple[Fix, ...]],
             top: str) -> object:  # fmt: skip
    """The chosen columns as one 2-D array: a view when they lie one stride
    apart (a NumPy-backed frame's block) and the destination holds that view
    as it is, else one copy straight into the result (a cast on the way when
    ``dtype=`` asks), column by column into column-major memory where the
    destination holds such strides (each column one contiguous run, as
    polars' own to_torch makes it), else row-major."""
    if not columns:
        raise ValueError("convert(stack=True): no columns to stack")
    parts: list[Tensor] = []
    made_all: list[Fix] = []
    for c, column in columns:
        t, made = leaf.imported(column)
        if t.ndim != 1:
            raise ValueError(f"convert(stack=True): column {c!r} is {t.ndim}-d; stacking takes 1-d columns")
        parts.append(t)
        made_all += made
    dtypes = {t.dtype.name for t in parts}
    target = leaf.w.dtype
    if target is None and len(dtypes) > 1:
        raise ValueError(f"convert(stack=True): the columns have dtypes {', '.join(sorted(dtypes))}; pass "
                         "dtype= to cast them into one")  # fmt: skip
    rows = parts[0].shape[0]
    if any(t.shape[0] != rows for t in parts):  # (a table's columns never differ; a guard for odd frames)
        raise ValueError("convert(stack=True): the columns differ in length")
    dt = parts[0].dtype
    view = _one_stride_apart(parts, _block_of(table, top)) if target in (None, dt) else None
    if view is not None:
        t, p = leaf.prepare_imported(view, tuple(made_all))
        if not p.unasked:  # (one the destination would copy anyway is copied as asked, below)
            said["[stacked]"] = p.fixes
            return leaf.make(t, p)
    if leaf.h.strides == "contiguous":
        out: Tensor = _C.new_empty((rows, len(parts)), target or dt, False)
        for j, t in enumerate(parts):
            out[:, j].copy_(t)
    else:
        by_column: Tensor = _C.new_empty((len(parts), rows), target or dt, False)
        for j, t in enumerate(parts):
            by_column[j].copy_(t)
        out = by_column.t()
    cast = f" as {target.name}" if target not in (None, dt) else ""
    fix = Fix("stack", f"the {len(parts)} columns lie in separate memory and one 2-D array is one buffer: "
                       f"bridge copies them into it{cast}", True, True)  # fmt: skip
    p = leaf.replan(out)
    p = Plan(p.destination, (*made_all, fix, *p.fixes))
    said["[stacked]"] = p.fixes
    return leaf.make(out, p)


def _block_of(table: object, top: str) -> Any:
    """The one block of memory a table's columns may all lie in, as an
    ndarray that owns it: a pandas frame's own ``to_numpy()`` when that is a
    view of its single NumPy block (never a copy of it), else None. Columns
    of other tables are separate buffers, however they happen to lie."""
    if top != "pandas":
        return None
    try:
        block = table.to_numpy(copy=False)  # type: ignore[attr-defined]
    except (TypeError, ValueError):
        return None
    return block if isinstance(block, np.ndarray) and block.dtype.kind in "biufc" else None


def _one_stride_apart(parts: list[Tensor], block: Any) -> Tensor | None:
    """The 2-D view (rows x columns) of 1-d tensors of one dtype and device
    whose first elements lie one byte stride apart and whose row strides are
    equal, all inside ``block`` (an ndarray, kept alive by the view); None
    when they do not. A view across separate allocations would hand the
    destination memory nobody lent (torch reads a storage's whole span)."""
    first = parts[0]
    rows, dt = first.shape[0], first.dtype
    if block is None or rows == 0 or any(t.dtype is not dt or t.device != first.device for t in parts):
        return None
    step = parts[1].data_ptr() - first.data_ptr() if len(parts) > 1 else dt.itemsize
    row_stride = first.stride()[0] if rows > 1 else 1
    for j, t in enumerate(parts):
        if t.data_ptr() != first.data_ptr() + j * step or (rows > 1 and t.stride()[0] != row_stride):
            return None
    if step % dt.itemsize:
        return None
    lo, hi = block.ctypes.data, block.ctypes.data + block.nbytes
    if any(not (lo <= _extent(t)[0] and _extent(t)[1] <= hi) for t in parts):
        return None
    view: Tensor = _C.from_memory(first.data_ptr(), dt, (rows, len(parts)), (row_stride * dt.itemsize, step),
                                  (block, tuple(parts)), any(t.is_readonly for t in parts),
                                  first.__dlpack_device__())  # fmt: skip
    return view


# ------------------------------------------------------------------ streams


class Batches(Iterator[Any]):
    """A stream converted lazily: each ``next()`` reads the source's next
    batch (a record batch, a table; a dict of arrays, as
    ``bridge.arrow.read_ipc(batches=True)`` yields) and returns it converted as
    a table is (a dict of columns, or one 2-D array with ``stack=True``). It holds no
    batch between calls: memory held is what the caller keeps."""

    def __init__(self, source: object, leaf: Leaf, columns: list[Hashable] | None, stack: bool) -> None:
        self._leaf, self._columns, self._stack = leaf, columns, stack
        self._source: Iterator[Any] = _batches_of(source)

    def __iter__(self) -> Batches:
        return self

    def __next__(self) -> Any:
        batch = next(self._source)
        if is_table(batch) and not self._stack:  # the whole batch through convert's C engine, as a table
            return self._leaf.again(batch, self._columns)
        if is_table(batch):
            return convert_table(batch, self._leaf, self._columns, self._stack)
        if isinstance(batch, Mapping) and not self._stack and self._columns is None:  # read_ipc(batches=True)'s
            return convert_tree(batch, self._leaf)
        raise TypeError(f"convert(): a stream's items must be tables or record batches (or, without columns= "
                        f"and stack=, dicts of arrays), got a {type(batch).__name__}")  # fmt: skip


def _batches_of(source: object) -> Iterator[Any]:
    """The batches of a stream: an iterator as it is; a RecordBatchReader, and
    any other ``__arrow_c_stream__`` of record batches read by pyarrow."""
    tp = type(source)
    if tp.__name__ == "RecordBatchReader" and tp.__module__.startswith("pyarrow"):
        return iter(source)  # type: ignore[call-overload,no-any-return]
    if isinstance(source, Iterator):
        return source
    import pyarrow as pa

    return iter(pa.RecordBatchReader.from_stream(source))  # type: ignore[arg-type]
