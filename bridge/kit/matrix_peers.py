"""The matrix's peers: how each library *makes* a case (:func:`produce`, the
values and layout defined by :func:`reference`) and how each takes one
through each protocol it speaks (:func:`consumers`, with how to read back
the result's values, address and writability).

Peer libraries are imported only when a producer or consumer of theirs is
asked for, so a run over a few peers never pays for the others.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from bridge.core import dtypes as _dtypes
from bridge.crossing.capabilities import DESTINATIONS
from bridge.kit import matrix_frameworks as _frameworks
from bridge.kit.matrix_frameworks import COMPONENT_ALIGNED
from bridge.kit.matrix_grid import available
from bridge.kit.matrix_holds import CONVERT, CONVERT_BATCH, CONVERT_TABLE, CONVERTS, own_protocol

__all__ = ["reference", "NotMade", "produce", "produce_table", "first_column", "table_values", "RuleBroken",
           "Consumer", "consumers", "arrow_address", "CONSUMES", "Entry", "consumer_entries"]


def _np_dtype(name: str) -> Any:
    return _dtypes.get_dtype(name).numpy_dtype  # bfloat16/float8/6/4 through ml_dtypes


def reference(dtype: str, layout: str) -> np.ndarray[Any, Any]:
    """The NumPy view that defines a case's values and layout (writable)."""
    base = np.arange(48).reshape(4, 12)
    base = (base % 2).astype(bool) if dtype == "bool" else base.astype(_np_dtype(dtype))
    view: np.ndarray[Any, Any] = _frameworks.apply_layout(base, layout, np)
    return view


class NotMade(Exception):
    """A producer cannot make this case (the cell is n/a)."""


class RuleBroken(Exception):
    """What a consumer's ``take`` raises when what it got back breaks a rule
    of its own before any array is judged (a batch that does not come back in
    its structure, a table whose columns are not its own): the cell is a
    violation of ``rule``, with ``detail`` (never a refusal)."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"{rule}: {detail}")
        self.rule, self.detail = rule, detail


# ------------------------------------------------------------ producers


def produce(peer: str, dtype: str, layout: str, readonly: bool) -> tuple[Any, np.ndarray[Any, Any]]:
    """``(object, expected values)`` for a case from ``peer``; NotMade if it cannot.

    The :data:`~bridge.kit.matrix_frameworks.COMPONENT_ALIGNED` case is made
    over memory that starts half an element past an element boundary: bridge
    views its own storage so (``bridge.frombuffer``); libraries whose own
    allocations are always aligned wrap NumPy's memory where they have a
    zero-copy constructor (``torch.from_numpy``, ``paddle.from_dlpack``,
    ``OrtValue.ortvalue_from_numpy``, and the wrappers tvm-ffi, pydlpack and
    array-api-strict); the others (jax, mlx, tensorflow, warp, cupy, the
    Arrow producers) cannot make it. No producer makes it of a one-byte dtype:
    every address is aligned to one byte."""
    ref = reference(dtype, layout)
    if layout == COMPONENT_ALIGNED and ref.dtype.itemsize < 2:
        raise NotMade("a one-byte element has no half: every address is element-aligned")
    if peer == "numpy":
        if readonly:
            ref = ref.view()
            ref.flags.writeable = False
        return ref, ref.copy()
    if peer == "bridge":
        import bridge

        if readonly:  # bridge tensors are read-only when their memory was lent read-only
            frozen = ref.view()
            frozen.flags.writeable = False
            return bridge.from_numpy(frozen), ref.copy()
        if layout == COMPONENT_ALIGNED:
            return _bridge_component_aligned(ref, dtype), ref.copy()
        base = bridge.tensor(reference(dtype, "contiguous"))  # memory bridge allocated
        return _frameworks.apply_layout(base, layout, bridge), ref.copy()
    if readonly:
        raise NotMade(f"{peer} has no read-only tensors")
    if peer == "torch":
        import torch

        if dtype in ("uint64",) and not hasattr(torch, "uint64"):
            raise NotMade("no uint64")
        if layout == "negative":
            raise NotMade("torch has no negative strides")
        if layout == COMPONENT_ALIGNED:  # torch's allocations are aligned: NumPy's memory, wrapped
            if dtype == "bfloat16":
                return torch.from_numpy(ref.view(np.uint16)).view(torch.bfloat16), ref.copy()
            return torch.from_numpy(ref), ref.copy()
        if dtype == "bfloat16":
            base = torch.from_numpy(reference("float32", "contiguous").copy()).to(torch.bfloat16)
        else:
            base = torch.from_numpy(reference(dtype, "contiguous").copy())
        return _frameworks.apply_layout(base, layout, torch), ref.copy()
    if peer == "jax":
        import jax.numpy as jnp

        if layout == COMPONENT_ALIGNED:
            raise NotMade("jax copies into its own (64-byte aligned) memory")
        if layout not in ("contiguous", "0-d", "zero-size"):
            raise NotMade("jax arrays are always compact")
        import jax

        if dtype in ("int64", "uint64", "float64", "complex128") and not jax.config.jax_enable_x64:
            raise NotMade("jax makes 32-bit arrays unless jax_enable_x64 is set")
        return jnp.asarray(np.array(ref, copy=True)), ref.copy()  # (ascontiguousarray makes 0-d 1-d)
    if peer in ("pyarrow", "polars", "nanoarrow"):
        if layout != "contiguous" or dtype in ("bfloat16", "complex64", "complex128"):
            raise NotMade("Arrow arrays are 1-d, of Arrow's types")
        flat = np.ascontiguousarray(ref).reshape(-1)
        import pyarrow as pa

        arr = pa.array(flat)
        if peer == "polars":
            import polars as pl

            return pl.Series(flat), flat.copy()
        if peer == "nanoarrow":
            import nanoarrow as na

            return na.c_array(arr), flat.copy()
        return arr, flat.copy()
    if peer == "tvm_ffi":
        import tvm_ffi

        if dtype == "bfloat16":
            raise NotMade("tvm-ffi takes bfloat16 only from DLPack producers that have it")
        return tvm_ffi.from_dlpack(ref), ref.copy()
    if peer == "pydlpack":
        import dlpack

        return dlpack.asdlpack(ref), ref.copy()
    if peer == "cupy":
        import cupy

        if layout == COMPONENT_ALIGNED:
            raise NotMade("cupy copies host memory into its own (aligned) device memory")
        return cupy.asarray(ref), ref.copy()
    if peer in _frameworks.NEW_PEERS:
        case = _frameworks.Make(dtype, layout, ref, reference(dtype, "contiguous"), NotMade)
        obj = _frameworks.produce(peer, case)
        arrow_stream = peer in _frameworks.ARROW_MAKERS
        return obj, (np.ascontiguousarray(ref).reshape(-1) if arrow_stream else ref.copy())
    raise NotMade(f"unknown producer {peer}")


#: The columns of a matrix table: the case's values, and the same reversed.
TABLE_COLUMNS = ("a", "b")


def produce_table(peer: str, dtype: str, layout: str, readonly: bool) -> tuple[Any, np.ndarray[Any, Any]]:
    """``(table, expected values of its first column)`` from a producer that
    makes tables (pyarrow's Table, polars' and pandas' DataFrame): the
    columns :data:`TABLE_COLUMNS`, the case's values flat and the same
    reversed, each in its own buffer; NotMade for a case a table cannot be."""
    if layout != "contiguous" or readonly:
        raise NotMade("a table's columns are contiguous and writable")
    a = np.ascontiguousarray(reference(dtype, "contiguous")).reshape(-1)
    b = a[::-1].copy()
    if peer in ("pyarrow", "polars"):
        if dtype in ("bfloat16", "complex64", "complex128"):
            raise NotMade("Arrow arrays are of Arrow's types")
        if peer == "pyarrow":
            import pyarrow as pa

            return pa.table({"a": pa.array(a), "b": pa.array(b)}), a.copy()
        import polars as pl

        if dtype == "float16":
            raise NotMade("polars has no float16")
        return pl.DataFrame({"a": a, "b": b}), a.copy()
    if peer == "pandas":
        import pandas as pd

        if dtype == "bfloat16":
            raise NotMade("pandas has no bfloat16")
        return pd.DataFrame({"a": a, "b": b}), a.copy()
    raise NotMade(f"{peer} makes no tables")


def first_column(table: Any) -> Any:
    """A table's first column as convert imports it (a pyarrow Array of its
    one chunk, a polars Series, a pandas column's ndarray): whose first
    value's address the cell compares with the result's."""
    top = type(table).__module__.partition(".")[0]
    name = TABLE_COLUMNS[0]
    if top == "pyarrow":
        return table.column(name).chunk(0)
    if top == "polars":
        return table.get_column(name)
    return table[name].to_numpy(copy=False)


def table_values(table: Any) -> dict[str, np.ndarray[Any, Any]]:
    """Each column of a table, in order, read through its own library."""
    top = type(table).__module__.partition(".")[0]
    if top == "pyarrow":
        return {n: np.array(table.column(n).to_numpy(), copy=True) for n in table.column_names}
    if top == "polars":
        return {n: np.array(table.get_column(n).to_numpy(), copy=True) for n in table.columns}
    return {str(n): np.array(table[n].to_numpy(), copy=True) for n in table.columns}


def _bridge_component_aligned(ref: np.ndarray[Any, Any], dtype: str) -> Any:
    """``ref``'s values (of bridge's ``dtype``) in memory bridge allocated,
    viewed from half an element in: a view of bridge's (aligned) storage at a
    byte offset, which only ``bridge.frombuffer`` makes (``Tensor.view(dtype)``
    keeps element offsets)."""
    import bridge

    store = bridge.empty(ref.nbytes + 2 * ref.itemsize, dtype=bridge.uint8)
    raw = np.asarray(store.memoryview())
    placed = _frameworks.place_component_aligned(ref, raw)
    offset = placed.ctypes.data - raw.ctypes.data
    flat = bridge.frombuffer(store.memoryview(), dtype=_dtypes.get_dtype(dtype), count=placed.size, offset=offset)
    return flat.reshape(placed.shape)


# ------------------------------------------------------------ consumers


@dataclasses.dataclass
class Consumer:
    """How one library takes an object through one protocol, and how to
    inspect the result: its values, address, whether it says it is writable,
    how to write one element through it with the library's own API
    (``poke(result, value)``, None where the library has no way to write),
    and its dtype as bridge names it (``dtype_of``, None: the dtype of the
    values read back)."""

    peer: str
    protocol: str
    take: Callable[[Any], Any]
    values: Callable[[Any], np.ndarray[Any, Any]]
    address: Callable[[Any], int | None]
    writable: Callable[[Any], bool]
    poke: Callable[[Any, Any], None] | None = None
    dtype_of: Callable[[Any], str] | None = None
    #: What the last ``take`` said of itself: ``(reason, detail)``, the
    #: reason a copy was made and how the exchange went, in words (the
    #: ``bridge-convert`` consumers: the :class:`bridge.CopyWarning`'s kind
    #: and the plan's fixes); None where the consumer says nothing.
    told: Callable[[], tuple[str, str]] | None = None
    #: One operation of the library's own kernels over every element of the
    #: result, returning a new result of the same values (read with
    #: ``values``), and ``computes``, that operation in words; None where
    #: reading the values back already runs the library's kernels, or the
    #: library has none. A library may import memory its kernels cannot
    #: compute on (torch's and paddle's complex128 kernels fault on memory
    #: aligned to 8 bytes, not 16), and torch's and paddle's value readers
    #: hand their memory to NumPy without running a kernel: only this finds it.
    compute: Callable[[Any], Any] | None = None
    computes: str = ""


def _np_address(a: Any) -> int:
    return int(np.asarray(a).__array_interface__["data"][0])


def arrow_address(a: Any) -> int | None:
    """Address of a pyarrow array's first value (its data buffer, past its
    offset), or None when it has no data buffer."""
    buf = a.buffers()[1]
    return None if buf is None else buf.address + a.offset * a.type.bit_width // 8


#: The protocols each peer consumes through (the entries :func:`consumers`
#: builds), known without importing the peer: the parent of the matrix's child
#: processes plans with it and imports no peer library itself.
CONSUMES: dict[str, tuple[str, ...]] = {
    "bridge": ("dlpack", "dlpack-copy", "dlpack-device", "dlpack-c-api", "array-interface", "arrow",
               "arrow-device-stream"),
    "numpy": ("dlpack", "dlpack-copy", "dlpack-device", "array-interface", "buffer"),
    "torch": ("dlpack", "dlpack-copy", "dlpack-device", "dlpack-c-api", "array-interface"),
    "jax": ("dlpack", "dlpack-copy", "dlpack-device", "jax-array"),
    "pyarrow": ("arrow",),
    "polars": ("arrow",),
    "nanoarrow": ("arrow",),
    "tvm_ffi": ("dlpack", "dlpack-c-api"),
    "paddle": ("dlpack", "dlpack-copy", "dlpack-device", "dlpack-c-api", "array-interface"),
    "mlx": ("dlpack", "dlpack-copy", "buffer", "array-interface"),
    "onnxruntime": ("dlpack",),
    "array_api_strict": ("dlpack", "dlpack-copy", "dlpack-device", "buffer"),
    "pandas": ("arrow",),
    "xarray": ("array-interface",),
    "tensorflow": ("dlpack",),
    "warp": ("dlpack", "array-interface"),
    "arro3": ("arrow",),
    "narwhals": ("arrow",),
    "datafusion": ("arrow",),
    "duckdb": ("arrow",),
    "cuda_core": ("dlpack", "dlpack-c-api"),
    "max": ("dlpack", "dlpack-copy"),
    "cupy": ("dlpack", "cuda-array-interface"),
}
# Every destination of bridge.convert also consumes through it (read from the
# destination table, so a destination added there joins the matrix).
for _name in DESTINATIONS:
    CONSUMES[_name] = (*CONSUMES.get(_name, ()), *CONVERTS)


@dataclasses.dataclass(frozen=True)
class Entry:
    """A consumer's name and protocol, without the library (for planning)."""

    peer: str
    protocol: str


def consumer_entries(only: set[str] | None = None) -> list[Entry]:
    """The (peer, protocol) consumer entries of the installed peers (of the
    ``only`` peers, when given), without importing any of them."""
    return [Entry(peer, proto) for peer, protos in CONSUMES.items()
            if (only is None or peer in only) and available(peer) for proto in protos]  # fmt: skip


def _set_first(x: Any, value: Any) -> None:
    """Write ``value`` to the first element of ``x`` with ``x``'s own indexing."""
    x[(0,) * len(x.shape)] = value


def consumers(only: set[str] | None = None) -> list[Consumer]:
    """Every (library, protocol) entry point installed here (of the ``only``
    libraries, when given: the others are not even imported)."""
    out: list[Consumer] = []

    def want(peer: str) -> bool:
        return (only is None or peer in only) and available(peer)

    if want("bridge"):
        import bridge

        def b_vals(t: Any) -> np.ndarray[Any, Any]:
            return np.array(t.numpy(), copy=True)

        b_api = bridge.Tensor.__dlpack_c_exchange_api__

        def b(protocol: str, take: Callable[[Any], Any]) -> Consumer:
            return Consumer("bridge", protocol, take, b_vals, lambda t: t.data_ptr(), lambda t: not t.is_readonly,
                            poke=_set_first, dtype_of=lambda t: t.dtype.name)  # fmt: skip

        out += [
            b("dlpack", bridge.from_dlpack),
            b("dlpack-copy", lambda o: bridge.from_dlpack(o, copy=True)),
            b("dlpack-device", lambda o: bridge.from_dlpack(o, device="cpu")),
            b("dlpack-c-api", lambda o: _frameworks.api_convert(o, b_api)),
            b("array-interface", bridge.asarray),
            b("arrow", bridge.from_arrow),
            b("arrow-device-stream", lambda o: bridge.from_arrow(o.__arrow_c_device_stream__())),
        ]
    if want("numpy"):

        def n(protocol: str, take: Callable[[Any], Any]) -> Consumer:
            return Consumer("numpy", protocol, take, lambda a: np.array(a, copy=True), _np_address,
                            lambda a: bool(a.flags.writeable), poke=_set_first,
                            dtype_of=lambda a: _frameworks.dtype_name(a.dtype))  # fmt: skip

        out += [
            n("dlpack", np.from_dlpack),
            n("dlpack-copy", lambda o: np.from_dlpack(o, copy=True)),
            n("dlpack-device", lambda o: np.from_dlpack(o, device="cpu")),
            n("array-interface", np.asarray),
            n("buffer", lambda o: np.asarray(memoryview(o))),
        ]
    if want("torch"):
        import torch

        def t_vals(x: Any) -> np.ndarray[Any, Any]:
            if x.dtype == torch.bfloat16:
                import ml_dtypes

                return np.array(x.float().numpy().astype(ml_dtypes.bfloat16), copy=True)
            return np.array(x.detach().cpu().numpy(), copy=True)

        t_api = torch.Tensor.__dlpack_c_exchange_api__

        def t(protocol: str, take: Callable[[Any], Any]) -> Consumer:
            # clone: torch's copy kernel, which every torch dtype has
            return Consumer("torch", protocol, take, t_vals, lambda x: x.data_ptr(), lambda x: True,
                            poke=_set_first, dtype_of=lambda x: _frameworks.dtype_name(x.dtype),
                            compute=lambda x: x.clone(), computes="x.clone()")  # fmt: skip

        out += [
            t("dlpack", torch.from_dlpack),
            t("dlpack-copy", lambda o: torch.from_dlpack(o, copy=True)),
            t("dlpack-device", lambda o: torch.from_dlpack(o, device="cpu")),
            t("dlpack-c-api", lambda o: _frameworks.api_convert(o, t_api)),
            t("array-interface", torch.as_tensor),
        ]
    if want("jax"):
        import jax
        import jax.numpy

        cpu = jax.devices("cpu")[0]

        def j(protocol: str, take: Callable[[Any], Any]) -> Consumer:
            return Consumer("jax", protocol, take, lambda x: np.array(x, copy=True),
                            lambda x: x.unsafe_buffer_pointer(), lambda x: False,
                            dtype_of=lambda x: _frameworks.dtype_name(x.dtype))  # fmt: skip

        out += [
            j("dlpack", jax.dlpack.from_dlpack),
            j("dlpack-copy", lambda o: jax.dlpack.from_dlpack(o, copy=True)),
            j("dlpack-device", lambda o: jax.dlpack.from_dlpack(o, device=cpu)),
            # __jax_array__ gives what jax's own dtype rules make (int64 -> int32 without
            # x64): the values are judged, not the dtype.
            Consumer("jax", "jax-array", jax.numpy.asarray, lambda x: np.array(x, copy=True),
                     lambda x: x.unsafe_buffer_pointer(), lambda x: False),
        ]
    if want("pyarrow"):
        import pyarrow as pa

        def pa_vals(a: Any) -> np.ndarray[Any, Any]:
            if hasattr(a, "to_numpy_ndarray"):  # FixedShapeTensorArray: N-d
                return np.array(a.to_numpy_ndarray(), copy=True)
            if isinstance(a, pa.ExtensionArray):  # arrow.bool8: its int8 storage
                return np.array(a.storage.to_numpy(zero_copy_only=False), copy=True)
            return np.array(a.to_numpy(zero_copy_only=False), copy=True)

        def pa_addr(a: Any) -> int | None:
            storage = getattr(a, "storage", None)
            if storage is not None:  # extension array: the values of its FixedSizeList
                values = storage.values
                return arrow_address(values)
            return arrow_address(a)

        out.append(Consumer("pyarrow", "arrow", pa.array, pa_vals, pa_addr, lambda a: False))
    if want("polars"):
        import polars as pl

        out.append(Consumer("polars", "arrow", pl.Series, lambda s: np.array(s.to_numpy(), copy=True),
                            lambda s: None, lambda s: False))  # fmt: skip
    if want("nanoarrow"):
        import nanoarrow as na

        def na_vals(c: Any) -> np.ndarray[Any, Any]:
            import pyarrow as pa

            a = pa.array(c)
            if hasattr(a, "to_numpy_ndarray"):
                return np.array(a.to_numpy_ndarray(), copy=True)
            if isinstance(a, pa.ExtensionArray):
                return np.array(a.storage.to_numpy(zero_copy_only=False), copy=True)
            return np.array(a.to_numpy(zero_copy_only=False), copy=True)

        def na_addr(c: Any) -> int | None:
            view = c.view()
            width: int = view.layout.element_size_bits[1] // 8
            return int(view.buffer(1).address) + int(c.offset) * width

        out.append(Consumer("nanoarrow", "arrow", na.c_array, na_vals, na_addr, lambda c: False))
    if want("tvm_ffi"):
        import tvm_ffi

        def tv(protocol: str) -> Consumer:
            # tvm_ffi.from_dlpack reads a type's C exchange API when it has one: the
            # dlpack-c-api cells are the producers that do.
            return Consumer("tvm_ffi", protocol, tvm_ffi.from_dlpack, lambda x: np.array(np.from_dlpack(x), copy=True),
                            lambda x: _np_address(np.from_dlpack(x)), lambda x: True,
                            dtype_of=lambda x: _frameworks.dtype_name(x.dtype))  # fmt: skip

        out += [tv("dlpack"), tv("dlpack-c-api")]
    out += _frameworks.consumers(want, Consumer)
    if want("cupy"):
        import cupy

        out += [
            Consumer("cupy", "dlpack", cupy.from_dlpack, cupy.asnumpy, lambda x: x.data.ptr,
                     lambda x: True),
            Consumer("cupy", "cuda-array-interface", cupy.asarray, cupy.asnumpy,
                     lambda x: x.data.ptr, lambda x: True),
        ]  # fmt: skip
    direct = {(c.peer, c.protocol): c for c in out}
    for name, h in DESTINATIONS.items():
        own = direct.get((name, own_protocol(h)))
        if want(name) and own is not None:
            out += [_through_convert(own, protocol) for protocol in CONVERTS]
    return out


def _arrow_values(a: Any) -> np.ndarray[Any, Any]:
    """A pyarrow Array's or FixedShapeTensorArray's values (bool8 as bool)."""
    import pyarrow as pa

    if isinstance(a.type, pa.FixedShapeTensorType):
        flat = a.storage.flatten()  # (past the array's offset)
        return np.array(flat.to_numpy(zero_copy_only=False), copy=True).reshape((len(a), *a.type.shape))
    return np.array(a.to_numpy(zero_copy_only=False), copy=True)


def _arrow_first(a: Any) -> int | None:
    """The address of the first value of a pyarrow Array or FixedShapeTensorArray."""
    import pyarrow as pa

    if isinstance(a.type, pa.FixedShapeTensorType):
        a = a.storage.flatten()
    if isinstance(a, pa.ExtensionArray):  # arrow.bool8: its int8 storage
        a = a.storage
    return arrow_address(a)


def _through_convert(own: Consumer, protocol: str = CONVERT) -> Consumer:
    """The ``bridge-convert`` consumer of destination ``own.peer``:
    ``bridge.convert(x, peer)``, its result read as the destination's own
    import's result is (``own``), and what it ``told``: the kind of the
    :class:`bridge.CopyWarning` it emitted (the reason of its copy) and the
    fixes of its plan. ``protocol`` ``bridge-convert-batch``: ``x`` crossed
    inside a batch (:func:`_batch_leaf` judges the batch, the cell its
    ``"x"``); ``bridge-convert-table``: ``x`` is a table (:func:`_table_first`
    judges the columns, the cell the first)."""
    import warnings

    import bridge
    from bridge.crossing.convert import plan

    peer = own.peer
    last = {"reason": "", "detail": ""}

    def converted(unit: Any, obj: Any) -> tuple[Any, list[Any]]:
        last["reason"] = last["detail"] = ""
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", bridge.CopyWarning)
            result = bridge.convert(unit, peer)
        said = [w.message for w in caught if isinstance(w.message, bridge.CopyWarning)]
        if said:
            last["reason"], last["detail"] = said[0].kind, str(said[0])
        elif obj is not None:
            try:  # the fixes that copy nothing, planned again: a one-shot exporter (pydlpack) refuses
                fixes = plan(obj, peer).fixes
            except Exception:
                fixes = ()
            if fixes:
                last["detail"] = "convert: " + "; ".join(f"{f.kind} ({f.reason})" for f in fixes)
        return result, said

    values, address, dtype_of = own.values, own.address, own.dtype_of
    if peer == "pyarrow":
        values, address = _arrow_values, _arrow_first
    elif peer == "polars":
        # a Series over bridge's memory reads back zero-copy (to_numpy shares a single numeric chunk)
        address = lambda s: _np_address(s.to_numpy())  # noqa: E731
    if dtype_of is None:
        dtype_of = lambda r: _frameworks.dtype_name(np.asarray(values(r)).dtype)  # noqa: E731
    read = _or_bridge(values, lambda t: np.array(t.numpy(), copy=True))
    where = _or_bridge(address, lambda t: t.data_ptr())

    def take(obj: Any) -> Any:
        if protocol == CONVERT_BATCH:
            label = "".join(("c", "at"))  # a str of its own (not interned): kept means the very object
            result, said = converted({"x": obj, "label": label, "again": [obj]}, obj)
            return _batch_leaf(result, label, said, where)
        if protocol == CONVERT_TABLE:
            before = table_values(obj)
            return _table_first(converted(obj, None)[0], before, read)
        return converted(obj, obj)[0]

    return Consumer(peer, protocol, take, read, where, own.writable,
                    poke=own.poke, dtype_of=_or_bridge(dtype_of, lambda t: t.dtype.name),
                    told=lambda: (last["reason"], last["detail"]), compute=own.compute,
                    computes=own.computes)  # fmt: skip


#: The paths a batch's CopyWarning may name: the one array of the batch (the
#: same object again, in ``"again"``, is converted once, under its first path).
_BATCH_LEAVES = {"['x']"}


def _address_or_none(address: Callable[[Any], int | None], result: Any) -> int | None:
    try:
        return address(result)
    except Exception:
        return None


def _batch_leaf(result: Any, label: str, said: list[Any], address: Callable[[Any], int | None]) -> Any:
    """``result["x"]`` of ``bridge.convert({"x": x, "label": label, "again":
    [x]}, peer)``, once the batch rule holds: a dict of the same keys in
    order, ``label`` the very str, ``again`` a list of the very
    ``result["x"]`` (one source object, one result: one import, one copy);
    and at most one CopyWarning, naming ``['x']`` alone. :class:`RuleBroken`
    (``batch``) says what broke."""
    if type(result) is not dict or list(result) != ["x", "label", "again"]:
        keys = list(result) if isinstance(result, dict) else None
        raise RuleBroken("batch", f"the dict came back as a {type(result).__name__}"
                                  f"{f' of keys {keys}' if keys is not None else ''}")  # fmt: skip
    if result["label"] is not label:
        raise RuleBroken("batch", f"the str leaf came back as {type(result['label']).__name__} "
                                  f"{result['label']!r}, not the very object")  # fmt: skip
    again = result["again"]
    if type(again) is not list or len(again) != 1:
        size = len(again) if isinstance(again, (list, tuple)) else "?"
        raise RuleBroken("batch", f"the list [x] came back as a {type(again).__name__} of {size}")
    if again[0] is not result["x"]:  # one source object, one result (and one import), shared or copied
        first, second = _address_or_none(address, result["x"]), _address_or_none(address, again[0])
        how = "copied into two results" if said or first != second else "imported twice (two results)"
        raise RuleBroken("batch", f"the tensor, twice in the batch, was {how}")
    if len(said) > 1:
        raise RuleBroken("batch", f"{len(said)} CopyWarnings for one call")
    if said:
        leaves = set(getattr(said[0], "leaves", None) or ())
        if leaves != _BATCH_LEAVES:
            raise RuleBroken("batch", f"the CopyWarning names the leaves {sorted(leaves)}, not ['x']")
    return result["x"]


def _table_first(result: Any, before: dict[str, np.ndarray[Any, Any]], read: Callable[[Any], Any]) -> Any:
    """The first column of ``bridge.convert(table, peer)``, once the table
    rule holds: a dict of the table's columns in its order, each of the other
    columns holding the values the table's own library read from it
    (``before``; a column the checker cannot read is left to the first's
    verdict). :class:`RuleBroken` (``table``) says what broke."""
    if type(result) is not dict or list(result) != list(before):
        keys = list(result) if isinstance(result, dict) else None
        raise RuleBroken("table", f"the table came back as a {type(result).__name__}"
                                  f"{f' of columns {keys}' if keys is not None else ''}, not a dict of "
                                  f"{list(before)}")  # fmt: skip
    names = list(before)
    for name in names[1:]:
        try:
            got = np.asarray(read(result[name]))
        except Exception:
            continue
        want = before[name]
        if not np.array_equal(got, want):  # (the values are small integers: exact in every dtype)
            raise RuleBroken("table", f"column {name!r} arrived with other values than the table's")
    return result[names[0]]


def _or_bridge(read: Callable[[Any], Any], by_bridge: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``read`` of a result, or, where the library's own API cannot read it
    (onnxruntime's and tvm-ffi's bfloat16 have no NumPy type, mlx's no
    buffer), ``by_bridge`` of the result as bridge's reference DLPack
    importer reads it."""

    def either(result: Any) -> Any:
        try:
            got = read(result)
        except Exception:
            got = None
        if got is None and hasattr(result, "__dlpack__"):
            from bridge.interop.dlpack import from_dlpack

            return by_bridge(from_dlpack(result))
        if got is None:
            raise ValueError(f"{type(result).__name__}: not readable by its library nor through DLPack")
        return got

    return either


