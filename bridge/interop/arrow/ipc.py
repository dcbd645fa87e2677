"""Arrow IPC: tensors to an IPC file or stream and back, memory-mapped.

:func:`write_ipc` writes named tensors as the columns of one record batch (an
N-d tensor as an ``arrow.fixed_shape_tensor`` column, a 1-d tensor as a
primitive column); :func:`read_ipc` reads them back as read-only tensors that
view the memory-mapped file. See docs/arrow.md, "Arrow IPC: tensors across
machines", for the measured alignment and the ownership rules.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Literal, overload

from bridge.core import strides as S
from bridge.core.layout import _empty
from bridge.core.native import _C
from bridge.core.storage import UntypedStorage
from bridge.core.tensor import Tensor
from bridge.interop.arrow import imports as _imports  # noqa: F401 (registers from_arrow's general path)
from bridge.interop.arrow.export import to_array, to_fixed_shape_tensor
from bridge.interop.arrow.types import COLUMN_NAME, _pyarrow

_FORMATS = ("file", "stream")
_FILE_MAGIC = b"ARROW1"


# ----------------------------------------------------------------- checks


def _check_format(format: Any, *, allow_none: bool) -> str | None:
    if format is None and allow_none:
        return None
    if not isinstance(format, str):
        raise TypeError(f"format must be 'file' or 'stream', got {type(format).__name__}")
    if format not in _FORMATS:
        raise ValueError(f"unknown Arrow IPC format {format!r}: use 'file' or 'stream'")
    return format


def _check_alignment(alignment: Any) -> int:
    """The alignment in bytes (1 for None); TypeError / ValueError otherwise."""
    if alignment is None:
        return 1
    if isinstance(alignment, bool) or not isinstance(alignment, int):
        raise TypeError(f"alignment must be an int (bytes) or None, got {type(alignment).__name__}")
    if alignment < 1 or alignment & (alignment - 1):
        raise ValueError(f"alignment must be a power of two >= 1, got {alignment}")
    return alignment


def _check_names(names: Any, what: str) -> list[str]:
    if isinstance(names, (str, bytes)) or not isinstance(names, Sequence):
        raise TypeError(f"{what} must be a sequence of str, got {type(names).__name__}")
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise TypeError(
            f"{what} must be a sequence of str; {bad[0]!r} is a {type(bad[0]).__name__}"
        )
    return list(names)


def _named_tensors(tensors: Any) -> dict[str, Tensor]:
    if isinstance(tensors, Tensor):
        return {COLUMN_NAME: tensors}
    if not isinstance(tensors, Mapping):
        raise TypeError(
            f"write_ipc() takes a Tensor or a mapping of column names to Tensors, got "
            f"{type(tensors).__name__}"
        )
    out: dict[str, Tensor] = {}
    for name, t in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"column names must be str, got {name!r} ({type(name).__name__})")
        if not isinstance(t, Tensor):
            raise TypeError(f"column {name!r} must be a bridge Tensor, got {type(t).__name__}")
        out[name] = t
    if not out:
        raise ValueError("write_ipc() needs at least one tensor")
    return out


def _dim_names_by_column(
    dim_names: Any, single: bool, named: dict[str, Tensor]
) -> dict[str, list[str]]:
    """``dim_names`` as {column: names of its element dims}, checked against the tensors."""
    if dim_names is None:
        return {}
    if single:
        if isinstance(dim_names, Mapping):
            raise TypeError(
                "with a single tensor, dim_names is a sequence of str (one per element dim)"
            )
        by_col = {COLUMN_NAME: _check_names(dim_names, "dim_names")}
    else:
        if not isinstance(dim_names, Mapping):
            raise TypeError(
                "with a mapping of tensors, dim_names is a mapping of column names to sequences "
                f"of str, got {type(dim_names).__name__}"
            )
        by_col = {}
        for col, names in dim_names.items():
            if col not in named:
                raise ValueError(
                    f"dim_names names column {col!r}, which is not among the tensors {list(named)}"
                )
            by_col[col] = _check_names(names, f"dim_names[{col!r}]")
    for col, names in by_col.items():
        t = named[col]
        if t.ndim == 1:
            raise ValueError(
                f"column {col!r} is 1-d, a primitive Arrow column with no element dims to name"
            )
        if len(names) != t.ndim - 1:
            raise ValueError(
                f"column {col!r} ({t.ndim}-d) has {t.ndim - 1} element dims (the first dim is the "
                f"batch), so dim_names needs {t.ndim - 1} names, got {len(names)}"
            )
    return by_col


# ------------------------------------------------------------------ write


def _column(name: str, t: Tensor, dim_names: list[str] | None) -> Any:
    """The pyarrow array of one column, zero-copy over ``t`` when its layout has
    an Arrow form, else over a contiguous copy (the file holds bytes, not strides)."""
    if t.ndim == 0:
        raise ValueError(
            f"column {name!r} is 0-d; a column needs a first (batch) dim: reshape(1) it"
        )
    if not t._storage._host_accessible:
        raise ValueError(
            f"column {name!r} is in {t.device} memory; write_ipc() writes host memory (.cpu() first)"
        )

    def export(x: Tensor) -> Any:
        return to_array(x) if x.ndim == 1 else to_fixed_shape_tensor(x, dim_names=dim_names)

    try:
        return export(t)
    except ValueError:
        pass  # a layout Arrow cannot express (strided, not dense, misaligned): write a copy
    dense = _empty(tuple(t.shape), t.dtype)
    dense.copy_(t)
    return export(dense)


@contextlib.contextmanager
def _open_sink(sink: Any) -> Iterator[Any]:
    pa = _pyarrow("write_ipc()")

    if isinstance(sink, (str, os.PathLike)):
        with pa.OSFile(os.fsdecode(sink), "wb") as f:
            yield f
        return
    if isinstance(sink, pa.NativeFile):
        if not sink.writable():
            raise ValueError(
                "write_ipc() needs a writable sink; this NativeFile is open for reading"
            )
        yield sink
        return
    if callable(getattr(sink, "write", None)):
        yield sink  # pyarrow wraps it (pa.PythonFile) and leaves it open
        return
    raise TypeError(
        f"write_ipc() writes to a path (str, os.PathLike), a pyarrow NativeFile or a binary file "
        f"object with .write(), got {type(sink).__name__}"
    )


def write_ipc(
    sink: Any,
    tensors: Tensor | Mapping[str, Tensor],
    *,
    format: str = "file",
    dim_names: Sequence[str] | Mapping[str, Sequence[str]] | None = None,
) -> None:
    """Write tensors to an Arrow IPC file or stream as one record batch.

    ``tensors``: a mapping of column names to tensors, or one tensor (the column
    ``"tensor"``). An N-d tensor (N >= 2) becomes an ``arrow.fixed_shape_tensor``
    column whose rows are its first dim (element dims stored in a permuted dense
    order keep their layout through the extension's ``permutation``); a 1-d
    tensor becomes the primitive Arrow column of its dtype (bool as
    ``arrow.bool8``). Every tensor must have the same first dim, the batch's
    length. Layouts with no Arrow form (strided, overlapping) are written from a
    contiguous copy; the tensors themselves are not changed.

    ``sink``: a path (str or os.PathLike; created or truncated, and closed
    afterwards), a writable ``pa.NativeFile`` or a binary file object with
    ``write`` (both left open, positioned after the data). ``format``:
    ``"file"`` (random access, the form to memory-map) or ``"stream"``.
    ``dim_names``: the names of the element dims, stored in the
    fixed_shape_tensor metadata; a sequence for a single tensor, else a mapping
    from column names to sequences.

    pyarrow exposes no buffer alignment for IPC writes (``IpcWriteOptions`` has
    no ``alignment``): its writer starts every buffer at a multiple of 8 bytes
    from the start of the file, and no more is promised. Require more when
    reading (``read_ipc(alignment=...)``).

    Errors (raised before the sink is opened): TypeError for a sink, ``tensors``,
    column name, tensor or ``dim_names`` of the wrong type, and for dtypes with
    no Arrow type (complex, bfloat16, float8); ValueError for an unknown
    ``format``, no tensors, 0-d tensors, first dims that differ, device memory
    and ``dim_names`` that do not fit, or a NativeFile open for reading.
    """
    pa = _pyarrow("write_ipc()")

    fmt = _check_format(format, allow_none=False)
    named = _named_tensors(tensors)
    by_col = _dim_names_by_column(dim_names, isinstance(tensors, Tensor), named)
    rows = {name: t.shape[0] for name, t in named.items() if t.ndim}
    if len(set(rows.values())) > 1:
        sizes = ", ".join(f"{n!r} has {r}" for n, r in rows.items())
        raise ValueError(
            "write_ipc() writes one record batch, so every tensor needs the same first dim "
            f"(the batch length): {sizes}"
        )
    arrays = [_column(name, t, by_col.get(name)) for name, t in named.items()]
    batch = pa.RecordBatch.from_arrays(arrays, names=list(named))
    with _open_sink(sink) as out:
        new = pa.ipc.new_file if fmt == "file" else pa.ipc.new_stream
        with new(out, batch.schema) as writer:
            writer.write_batch(batch)


# ------------------------------------------------------------------- read


def _reader_format(f: Any) -> str:
    """'file' when ``f`` starts with the IPC file magic, else 'stream' (also for
    sources that cannot seek back)."""
    if not f.seekable():
        return "stream"
    pos = f.tell()
    head = f.read(len(_FILE_MAGIC))
    f.seek(pos)
    return "file" if bytes(head) == _FILE_MAGIC else "stream"


def _reader(f: Any, fmt: str | None) -> Any:
    """pyarrow's IPC reader of ``f`` (a file's or a stream's)."""
    pa = _pyarrow("read_ipc()")

    if fmt is None:
        fmt = _reader_format(f)
    return pa.ipc.open_file(f) if fmt == "file" else pa.ipc.open_stream(f)


def _record_batches(reader: Any) -> Iterator[Any]:
    """The record batches of an IPC reader, one at a time."""
    if hasattr(reader, "num_record_batches"):  # a file: its batches by index
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)
    else:
        yield from reader


@contextlib.contextmanager
def _opened(source: Any, memory_map: bool) -> Iterator[Any]:
    """``source`` as a readable pyarrow file, closed on leaving when it was
    opened here (a path). Closing the file (its descriptor) leaves the
    mapping to the buffers that slice it: the mapping goes when the last of
    them does."""
    pa = _pyarrow("read_ipc()")

    if isinstance(source, (str, os.PathLike)):
        path = os.fsdecode(source)
        with pa.memory_map(path, "r") if memory_map else pa.OSFile(path, "rb") as f:
            yield f
    elif isinstance(source, pa.NativeFile):
        if not source.readable():
            raise ValueError(
                "read_ipc() needs a readable source; this NativeFile is open for writing"
            )
        yield source
    elif isinstance(source, (pa.Buffer, bytes, bytearray, memoryview)):
        yield pa.BufferReader(source)
    elif callable(getattr(source, "read", None)):
        yield pa.PythonFile(source, mode="r")
    else:
        raise TypeError(
            "read_ipc() reads a path (str, os.PathLike), a pyarrow NativeFile or Buffer, bytes or a "
            f"binary file object with .read(), got {type(source).__name__}"
        )


def _read_table(source: Any, fmt: str | None, memory_map: bool) -> Any:
    with _opened(source, memory_map) as f:
        return _reader(f, fmt).read_all()


def _aligned_empty(shape: tuple[int, ...], dt: Any, alignment: int) -> Tensor:
    """A new contiguous, writable tensor whose data starts at a multiple of
    ``alignment`` bytes (bridge allocates at _C.ALIGNMENT; beyond that, the
    storage is over-allocated and the tensor starts inside it)."""
    if alignment <= _C.ALIGNMENT:
        return _empty(shape, dt)
    storage = UntypedStorage(S.prod(shape) * dt.itemsize + alignment)
    skip = -storage.data_ptr() % alignment
    made: Tensor = _C.make_tensor(
        storage, dt, shape, S.contiguous_strides(shape), skip // dt.itemsize
    )
    return made


def _check_extent(name: str, arr: Any) -> None:
    """ValueError when a column chunk says it holds more than its buffers do.

    pyarrow's IPC reader trusts the lengths in a record batch's metadata: a
    file that says a column is longer than its data buffer gives an array
    whose values run past the buffer (past the end of the file, when that
    buffer is last), and a negative length gives an array whose ``len()``
    fails. The buffers' sizes are known, so each chunk's extents (offset and
    length against its validity and data buffers at the type's width, a
    fixed-size list's values child against its list size, extension storage,
    struct children) are checked before anything is viewed. pyarrow's cheap
    validation is that check: O(1) per node, reading no values.
    """
    pa = _pyarrow("read_ipc()")

    try:
        arr.validate()
    except pa.ArrowInvalid as e:
        raise ValueError(
            f"column {name!r}: the IPC data is corrupt or truncated (its record batch describes "
            f"more than its buffers hold): {e}"
        ) from None


def _column_tensor(name: str, col: Any, *, copy: bool, alignment: int) -> Tensor:
    chunks = col.chunks or [col.combine_chunks()]  # no batches: an empty array of the type
    if len(chunks) > 1 and not copy:
        raise ValueError(
            f"column {name!r} spans {len(chunks)} record batches; a zero-copy tensor views one "
            "(pass copy=True to concatenate them into new memory)"
        )
    for c in chunks:
        _check_extent(name, c)
    try:
        parts: list[Tensor] = [_C.from_arrow(c) for c in chunks]
    except TypeError as e:
        raise TypeError(f"column {name!r}: {e}") from e
    except ValueError as e:
        raise ValueError(f"column {name!r}: {e}") from e
    if not copy:
        t = parts[0]
        need = max(alignment, t.itemsize)
        if t.numel() and t.data_ptr() % need:
            raise ValueError(
                f"column {name!r}: its data starts at {t.data_ptr() % need} bytes past a multiple of "
                f"{need} (alignment={alignment}, item size {t.itemsize}); a zero-copy view cannot "
                "move it (pass copy=True for aligned new memory)"
            )
        return t
    first = parts[0]
    out = _aligned_empty((sum(p.shape[0] for p in parts), *first.shape[1:]), first.dtype,
                         max(alignment, first.itemsize))  # fmt: skip
    row = 0
    for p in parts:
        n = p.shape[0]
        if n:
            out[row : row + n].copy_(p)
        row += n
    return out


@overload
def read_ipc(source: Any, *, memory_map: bool = ..., copy: bool = ..., alignment: int | None = ...,
             format: str | None = ..., columns: Sequence[str] | None = ...,
             batches: Literal[False] = ...) -> dict[str, Tensor]: ...  # fmt: skip
@overload
def read_ipc(source: Any, *, memory_map: bool = ..., copy: bool = ..., alignment: int | None = ...,
             format: str | None = ..., columns: Sequence[str] | None = ...,
             batches: Literal[True]) -> Iterator[dict[str, Tensor]]: ...  # fmt: skip


def read_ipc(
    source: Any,
    *,
    memory_map: bool = True,
    copy: bool = False,
    alignment: int | None = None,
    format: str | None = None,
    columns: Sequence[str] | None = None,
    batches: bool = False,
) -> dict[str, Tensor] | Iterator[dict[str, Tensor]]:
    """Read the columns of an Arrow IPC file or stream as tensors, {name: tensor}
    in the file's column order (or the order of ``columns``); with
    ``batches=True``, an iterator of such dicts, one per record batch, read
    one batch per ``next()`` (the file stays open until the iterator ends;
    what ``bridge.convert`` takes as a stream).

    Reads what :func:`write_ipc` writes, and any IPC data whose columns are
    ``arrow.fixed_shape_tensor`` (an N-d tensor, the batch first; permutation
    honoured), FixedSizeList (2-d) or primitive int/uint/float/``bool8`` types
    (1-d), without nulls.

    ``source``: a path (memory-mapped read-only with ``memory_map=True``, else
    read into pyarrow's memory; the file is closed before returning either
    way), a readable ``pa.NativeFile`` (a ``pa.MemoryMappedFile`` gives views of
    its mapping; left open), a ``pa.Buffer`` or bytes-like object (viewed), or a
    binary file object with ``read`` (read into pyarrow's memory; left open).
    ``format``: ``"file"``, ``"stream"``, or None to tell them apart by the
    file magic (a source that cannot seek is read as a stream). ``columns``:
    the names to read (default all).

    ``copy=False``: each tensor views the Arrow memory (the mapping of a path)
    without a copy and is read-only (writing raises ValueError); the views keep
    that memory alive, so the mapping lasts until the last of them dies, after
    every pyarrow object and the file are gone. A column spanning several
    record batches raises ValueError. ``copy=True``: each tensor is new,
    contiguous, writable memory (several batches are concatenated along the
    first dim) and nothing keeps the file's memory.

    ``alignment`` (bytes, a power of two; None: no requirement): the required
    alignment of each tensor's data address. With ``copy=False`` a view whose
    address is not a multiple of it raises ValueError; with ``copy=True`` the
    copies are placed at a multiple of it (bridge allocates at 64 bytes; larger
    values over-allocate). Files written by pyarrow place buffers only at
    multiples of 8 bytes, so ``alignment`` > 8 with ``copy=False`` fails for
    most files. Views are always checked against their item size.

    Errors: TypeError for a source or argument of the wrong type and for
    columns with no tensor form (strings, dictionaries, nested lists); ValueError
    for an unknown ``format``, a bad ``alignment``, unknown or duplicate column
    names, nulls, several batches without ``copy=True``, misaligned views, a
    NativeFile open for writing, and corrupt or truncated data whose record
    batch describes more than its buffers hold (a column longer than its data
    buffer, a negative length: pyarrow's reader does not check, so every
    column is checked before it is viewed or copied); pyarrow's
    ``ArrowInvalid`` (a ValueError) and OSError for data that is not Arrow IPC
    of the format given.
    """
    fmt = _check_format(format, allow_none=True)
    align = _check_alignment(alignment)
    if not isinstance(memory_map, bool) or not isinstance(copy, bool):
        raise TypeError("memory_map and copy must be bool")
    if not isinstance(batches, bool):
        raise TypeError("batches must be bool")
    wanted = None if columns is None else _check_names(columns, "columns")
    if batches:
        return _read_batches(source, fmt, memory_map, wanted, copy, align)
    table = _read_table(source, fmt, memory_map)
    chosen = _chosen(table.column_names, wanted)
    return {
        name: _column_tensor(name, table.column(name), copy=copy, alignment=align)
        for name in chosen
    }


def _chosen(names: list[str], wanted: list[str] | None) -> list[str]:
    """The columns to read, checked against the data's (ValueError)."""
    if wanted is None:
        wanted = names
    for name in wanted:
        if name not in names:
            raise ValueError(f"no column named {name!r}; the data has columns {names}")
    dup = sorted({n for n in wanted if names.count(n) > 1 or wanted.count(n) > 1})
    if dup:
        raise ValueError(f"column names {dup} occur more than once; a dict holds each name once")
    return wanted


def _read_batches(source: Any, fmt: str | None, memory_map: bool, wanted: list[str] | None, copy: bool,
                  align: int) -> Iterator[dict[str, Tensor]]:  # fmt: skip
    """read_ipc(batches=True): the schema read and the columns checked now,
    each batch read at its ``next()``."""
    pa = _pyarrow("read_ipc()")
    stack = contextlib.ExitStack()
    try:
        reader = _reader(stack.enter_context(_opened(source, memory_map)), fmt)
        chosen = _chosen(list(reader.schema.names), wanted)
    except BaseException:
        stack.close()
        raise

    def batches() -> Iterator[dict[str, Tensor]]:
        with stack:
            for batch in _record_batches(reader):
                yield {name: _column_tensor(name, pa.chunked_array([batch.column(name)]), copy=copy, alignment=align)
                       for name in chosen}  # fmt: skip

    return batches()
