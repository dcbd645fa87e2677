"""The matrix's newer peers: paddle, mlx, onnxruntime, array-api-strict,
pandas, xarray, arro3, narwhals, datafusion, duckdb, cuda.core, and the heavy
extra's tensorflow, warp and Modular MAX. How each makes a case
(:func:`produce`) and takes one (:func:`consumers`); the older peers live in
:mod:`bridge.kit.matrix_peers`, which calls into this module.

Each library is imported only when one of its producers or consumers is asked
for. What each speaks (checked against the installed versions):

- paddle: ``__dlpack__``, ``from_dlpack(device=, copy=)`` and the DLPack C
  exchange API (``paddle.Tensor.__dlpack_c_exchange_api__``);
- mlx: ``__dlpack__``, the buffer protocol, ``mx.from_dlpack(copy=)``;
- onnxruntime: ``OrtValue.__dlpack__`` and ``OrtValue.from_dlpack``;
- array-api-strict: the array API's ``from_dlpack``/``asarray``, the buffer;
- pandas 3 and xarray: ``__arrow_c_stream__`` (pandas also ``Series.from_arrow``);
- tensorflow: ``__dlpack__`` and ``tf.experimental.dlpack`` (legacy capsules);
- warp: ``__dlpack__``, ``__array_interface__`` and ``wp.from_dlpack``;
- arro3 (arro3-core): ``Array.from_numpy`` (zero-copy) and its
  ``__arrow_c_array__``; ``Array.from_arrow`` of any Arrow PyCapsule object;
- narwhals: a Series' ``__arrow_c_stream__``, ``nw.from_arrow`` (streams
  of record batches only);
- datafusion and duckdb: a one-column table's ``__arrow_c_stream__`` (a
  DataFrame, a relation), ``SessionContext.from_arrow`` /
  ``DuckDBPyConnection.from_arrow``, each read back as a table;
- cuda.core (cuda-core): ``StridedMemoryView.from_dlpack`` (a view, zero-copy),
  its ``__dlpack__`` and its DLPack C exchange API;
- Modular MAX: ``max.driver.Buffer.from_numpy`` (zero-copy), its slices'
  ``__dlpack__`` and ``Buffer.from_dlpack(copy=)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from bridge.kit import matrix_layouts as _layouts

__all__ = ["NEW_PEERS", "ARROW_MAKERS", "Make", "produce", "consumers", "dtype_name", "api_convert", "apply_layout",
           "COMPONENT_ALIGNED", "COMPONENT_SHAPE", "place_component_aligned"]

# onnxruntime spells the float8 types without bridge's underscore (and e8m0 without "fnu").
_ORT_FLOAT8 = {"float8e4m3fn": "float8_e4m3fn", "float8e4m3fnuz": "float8_e4m3fnuz", "float8e5m2": "float8_e5m2",
               "float8e5m2fnuz": "float8_e5m2fnuz", "float8e8m0": "float8_e8m0fnu"}  # fmt: skip

NEW_PEERS = ("paddle", "mlx", "onnxruntime", "array_api_strict", "pandas", "xarray", "tensorflow", "warp",
             "arro3", "narwhals", "datafusion", "duckdb", "cuda_core", "max")  # fmt: skip
#: The newer peers whose objects are Arrow arrays, streams or tables of one
#: column: the case's values flat (the caller flattens the expected values).
ARROW_MAKERS = ("pandas", "xarray", "arro3", "narwhals", "datafusion", "duckdb")


def dtype_name(dtype: Any) -> str:
    """A library's dtype as bridge's name (``torch.bfloat16``, ``paddle.float32``,
    ``mlx.core.uint8``, ``tensor(float)``, ``<dtype: 'int64'>``, ``halffloat[pyarrow]`` -> ``bfloat16``,
    ``float32``, ``uint8``, ``float32``, ``int64``, ``float16``)."""
    name = getattr(dtype, "__name__", None) if isinstance(dtype, type) else None
    text = str(name or getattr(dtype, "name", None) or dtype)
    text = text.rsplit(".", 1)[-1].strip("<>'\" ").replace("dtype: '", "").lower()
    if text.startswith("tensor(") and text.endswith(")"):  # onnxruntime's names (float8e4m3fn, float8e8m0)
        text = {"float": "float32", "double": "float64", **_ORT_FLOAT8}.get(text[7:-1], text[7:-1])
    text = text.removesuffix("[pyarrow]")  # pandas' Arrow-backed dtypes (float[pyarrow]: Arrow's names)
    return {"bool_": "bool", "float": "float32", "double": "float64", "half": "float16",
            "halffloat": "float16"}.get(text, text)  # fmt: skip


#: The layout whose first element sits half an element past an element
#: boundary: complex at its component's alignment (complex128 at 8 bytes mod
#: 16), any other dtype of two bytes or more misaligned to its item size.
COMPONENT_ALIGNED = "component-aligned"
#: Its shape: 15 elements, an odd count that is 3 mod 4, so that every
#: vectorised loop over it ends in a scalar tail. torch's and paddle's complex128
#: kernels fault on this memory only for such lengths (measured on torch 2.13 and
#: paddle 3.3: ``x.clone()`` on odd lengths, ``x * 2`` on lengths 2 and 3 mod 4;
#: never on the 48 elements of the 4x12 base).
COMPONENT_SHAPE = (3, 5)


def place_component_aligned(values: np.ndarray[Any, Any],
                            raw: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:  # fmt: skip
    """A C-contiguous copy of ``values`` whose first element is half an
    element past an element boundary, in the bytes of ``raw`` (a writable
    1-d uint8 array over the memory to use, at least two elements longer
    than ``values``; new NumPy memory when None). One-byte items have no
    half: ``values`` must have two bytes or more an element."""
    size = values.dtype.itemsize
    if size < 2:
        raise ValueError(f"{values.dtype}: a one-byte element has no half to sit at")
    if raw is None:
        raw = np.zeros(values.nbytes + 2 * size, np.uint8)
    at = next(k for k in range(2 * size) if (raw.ctypes.data + k) % size == size // 2)
    out: np.ndarray[Any, Any] = np.ndarray(values.shape, values.dtype, buffer=raw, offset=at)
    out[...] = values
    return out


def apply_layout(x: Any, layout: str, lib: Any) -> Any:
    """``layout`` applied to the 4x12 base ``x`` of ``lib`` (numpy, torch,
    bridge or mlx: libraries with NumPy-like views; each layout a view, never
    a copy), except :data:`COMPONENT_ALIGNED`: no view of an aligned base
    can sit half an element off, so it is NumPy's alone, a copy of the base's
    first 15 elements placed so (:func:`place_component_aligned`); the
    producers of other libraries wrap that memory themselves. For one-byte
    items (every address is element-aligned) it is those 15 elements as a
    view, which gives the layout's shape and strides and no producer makes.
    The layouts of :mod:`bridge.kit.matrix_layouts` (byte-misaligned,
    big-endian, chunked, DLPack main's codes) are NumPy's alone too
    (:func:`bridge.kit.matrix_layouts.apply`); their producers live there."""
    if layout in _layouts.NEW_LAYOUTS:
        if lib is not np:
            raise ValueError(f"{layout} is made from NumPy memory (see bridge.kit.matrix_layouts)")
        return _layouts.apply(x, layout)
    if layout == COMPONENT_ALIGNED:
        if lib is not np:
            raise ValueError(f"{layout} is made from NumPy memory (see place_component_aligned)")
        first = x.reshape(-1)[: int(np.prod(COMPONENT_SHAPE))].reshape(COMPONENT_SHAPE)
        return first if x.dtype.itemsize < 2 else place_component_aligned(first)
    if layout == "contiguous":
        return x
    if layout == "transposed":
        return x.T
    if layout == "stepped":
        return x[::2, 1::3]
    if layout == "negative":
        return x[::-1, ::-2]
    if layout == "broadcast":
        row = x[0]
        return lib.broadcast_to(row, (3, 12)) if lib is np or _is_mlx(lib) else row.expand(3, 12)
    if layout == "size1-odd":
        if lib is np:
            return np.lib.stride_tricks.as_strided(x, (4, 1), (12 * x.itemsize, 7 * x.itemsize))
        return lib.as_strided(x, (4, 1), (12, 7)) if _is_mlx(lib) else x.as_strided((4, 1), (12, 7))
    if layout == "0-d":
        return x[1:2, 1:2].reshape(()) if lib is np else x[1, 1]
    if layout == "zero-size":
        return x[:, 5:5]
    raise ValueError(f"unknown layout {layout!r}")


def _is_mlx(lib: Any) -> bool:
    return getattr(lib, "__name__", "") == "mlx.core"


def _contiguous(ref: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    out: np.ndarray[Any, Any] = np.ascontiguousarray(ref).reshape(ref.shape)
    return out


class Make:
    """A case to make: its dtype and layout, the NumPy view ``ref`` that
    defines it, the compact 4x12 ``base`` it is a view of, and the exception
    that says the producer cannot make it."""

    def __init__(self, dtype: str, layout: str, ref: np.ndarray[Any, Any], base: np.ndarray[Any, Any],
                 not_made: type[Exception]):  # fmt: skip
        self.dtype, self.layout, self.ref, self.base, self.not_made = dtype, layout, ref, base, not_made

    def only(self, layouts: tuple[str, ...], why: str) -> None:
        """Refuse (``not_made``) every layout but ``layouts``."""
        if self.layout not in layouts:
            raise self.not_made(why)

    def without(self, dtypes: tuple[str, ...], lib: str) -> None:
        """Refuse (``not_made``) the ``dtypes`` ``lib`` does not have."""
        if self.dtype in dtypes:
            raise self.not_made(f"{lib} has no {self.dtype}")


def produce(peer: str, m: Make) -> Any:
    """The object ``peer`` makes for the case in ``m`` (its expected values are
    ``m.ref``, or a flat copy for the Arrow producers, which the caller
    arranges); raises ``m.not_made`` when the library cannot make it."""
    ref, layout = m.ref, m.layout
    if peer == "paddle":
        import paddle

        m.only(("contiguous", "transposed", "stepped", "0-d", "zero-size", COMPONENT_ALIGNED),
               "paddle has no negative, zero or arbitrary strides in its views")  # fmt: skip
        if layout == COMPONENT_ALIGNED:
            # paddle's own allocations are aligned: it wraps NumPy's memory, through its
            # one zero-copy constructor (NumPy has no DLPack bfloat16: its bits as int16).
            if m.dtype == "bfloat16":
                return paddle.from_dlpack(ref.view(np.int16)).view(paddle.bfloat16)
            return paddle.from_dlpack(ref)
        if m.dtype == "bfloat16":
            return paddle.to_tensor(_contiguous(ref.astype(np.float32))).astype("bfloat16")
        if layout == "transposed":
            return paddle.to_tensor(_contiguous(ref.T)).T  # a strided view of paddle's memory
        return paddle.to_tensor(_contiguous(ref))
    if peer == "mlx":
        import mlx.core as mx

        if layout == COMPONENT_ALIGNED:
            raise m.not_made("mlx copies what it is given into its own (aligned) memory")
        base = m.base
        x = mx.array(base.astype(np.float32)).astype(mx.bfloat16) if m.dtype == "bfloat16" else mx.array(base)
        if dtype_name(x.dtype) != m.dtype:  # mx.array narrows what mlx lacks (float64, complex128)
            raise m.not_made(f"mlx has no {m.dtype} (mx.array makes {dtype_name(x.dtype)})")
        return apply_layout(x, layout, mx)
    if peer == "onnxruntime":
        import onnxruntime as ort

        # (ortvalue_from_numpy shares NumPy's memory, wherever it starts)
        m.only(("contiguous", "0-d", "zero-size", COMPONENT_ALIGNED), "an OrtValue is always compact")
        m.without(("bfloat16",), "onnxruntime (from NumPy)")
        return ort.OrtValue.ortvalue_from_numpy(_contiguous(ref))
    if peer == "array_api_strict":
        import array_api_strict as xp

        m.without(("bfloat16", "float16"), "array-api-strict")
        return xp.asarray(ref)  # wraps the NumPy view: strides, negative ones included, kept
    if peer in ("pandas", "xarray"):
        m.only(("contiguous",), "a pandas/xarray Arrow stream is one 1-d column")
        m.without(("bfloat16", "complex64", "complex128", "float16"), peer)  # (Arrow has no complex)
        flat = _contiguous(ref).reshape(-1)
        if peer == "pandas":
            import pandas as pd

            return pd.Series(flat)
        import xarray as xr

        return xr.DataArray(flat, dims=["x"])
    if peer == "tensorflow":
        import tensorflow as tf

        if layout == COMPONENT_ALIGNED:
            raise m.not_made("tf.constant copies into tensorflow's own (aligned) memory")
        m.only(("contiguous", "0-d", "zero-size"), "a tf.Tensor is always compact")
        if m.dtype == "bfloat16":
            return tf.cast(tf.constant(_contiguous(ref.astype(np.float32))), tf.bfloat16)
        return tf.constant(_contiguous(ref))
    if peer == "warp":
        import warp as wp

        if layout == COMPONENT_ALIGNED:
            raise m.not_made("wp.array copies into warp's own (aligned) memory")
        m.only(("contiguous", "transposed", "stepped"), "warp arrays have 1 to 4 dims, no negative strides")
        m.without(("bfloat16", "complex64", "complex128"), "warp")
        wp.config.quiet = True
        return wp.array(_contiguous(ref), device="cpu")
    if peer in ("arro3", "narwhals", "datafusion", "duckdb"):
        return _arrow_maker(peer, m)
    if peer == "cuda_core":
        from cuda.core.utils import StridedMemoryView

        # A view of NumPy's memory, every layout as it is (stream_ptr=-1: no
        # synchronisation; None is refused as ambiguous). NumPy's DLPack export
        # has no ml_dtypes types (bfloat16, float8/6/4): those cases are bridge's
        # export of the same NumPy memory.
        if ref.dtype.kind == "V":
            import bridge

            return StridedMemoryView.from_dlpack(bridge.from_numpy(ref), stream_ptr=-1)
        return StridedMemoryView.from_dlpack(ref, stream_ptr=-1)
    if peer == "max":
        from max.driver import Buffer

        m.only(("contiguous", "stepped", "negative", "0-d", "zero-size"),
               "a MAX Buffer's views are its slices (no transpose, broadcast or as_strided)")  # fmt: skip
        m.without(("complex64", "complex128"), "MAX")
        base = np.array(m.base, copy=True)
        if m.dtype == "bfloat16":
            # from_numpy refuses ml_dtypes' types: the bits, viewed as MAX's bfloat16. MAX
            # reads no strided bfloat16 view back (to_numpy has no bfloat16, view() wants
            # packed rows), so what it holds there cannot be checked: compact ones only.
            from max.dtype import DType

            m.only(("contiguous", "0-d", "zero-size"), "MAX reads no strided bfloat16 view back")
            b = Buffer.from_numpy(base.view(np.uint16)).view(DType.bfloat16)
        else:
            b = Buffer.from_numpy(base)  # wraps NumPy's memory
        view = apply_layout(b, layout, Buffer)
        _held_by_max(view, m)
        return view
    raise m.not_made(f"unknown producer {peer}")


def _held_by_max(view: Any, m: Make) -> None:
    """Raise :class:`~bridge.kit.matrix_layouts.MadeWrong` when MAX's own
    reader (``Buffer.to_numpy``) reads other values from the view it made than
    the case's (every cell of the case is then the producer's violation)."""
    try:
        held = _max_values(view)
    except Exception:  # no reader for this view: the consumers judge it
        return
    want = m.ref
    if held.shape == want.shape and held.tobytes() == np.ascontiguousarray(want).tobytes():
        return
    rule = "values" if m.layout == "contiguous" else ("shape" if m.layout in ("0-d", "zero-size") else "strides")
    raise _layouts.MadeWrong(rule, f"MAX's own Buffer.to_numpy() reads {held.reshape(-1)[:4].tolist()} from the "
                                   f"{m.layout} {held.dtype} view it made, which holds "
                                   f"{want.reshape(-1)[:4].tolist()} (its strides {tuple(view.strides)})",
                             view, np.array(want, copy=True))  # fmt: skip


def _arrow_maker(peer: str, m: Make) -> Any:
    """The case, flat, as an arro3 Array (over NumPy's memory), a narwhals
    Series over pyarrow, or a one-column table: a datafusion DataFrame (over
    NumPy's memory) or a duckdb relation over a pyarrow Table."""
    m.only(("contiguous",), f"{peer}'s Arrow data is 1-d")
    m.without(("bfloat16", "complex64", "complex128"), f"{peer} (Arrow has no such type)")
    flat = _contiguous(m.ref).reshape(-1)
    if peer == "arro3":
        from arro3.core import Array

        return Array.from_numpy(flat)
    if peer == "narwhals":
        import narwhals as nw

        return nw.new_series("a", flat, backend="pyarrow")
    if peer == "datafusion":
        import datafusion

        return datafusion.SessionContext().from_pydict({"a": flat})
    import duckdb
    import pyarrow as pa

    return duckdb.connect().from_arrow(pa.table({"a": flat}))  # (the relation keeps its connection)


def _poke_index(x: Any) -> Any:
    return (0,) * len(x.shape)


def _set_item(x: Any, value: Any) -> None:
    x[_poke_index(x)] = value


def consumers(want: Callable[[str], bool], make: Callable[..., Any]) -> list[Any]:
    """The consumers of the newer peers that ``want`` admits, built with
    ``make`` (:class:`bridge.kit.matrix_peers.Consumer`)."""
    out: list[Any] = []
    if want("paddle"):
        import paddle

        def p_vals(x: Any) -> np.ndarray[Any, Any]:
            if x.dtype == paddle.bfloat16:
                import ml_dtypes

                return np.array(x.astype("float32").numpy().astype(ml_dtypes.bfloat16), copy=True)
            return np.array(x.numpy(), copy=True)

        api = paddle.Tensor.__dlpack_c_exchange_api__
        # x * 1, not clone: paddle's clone is a plain memory copy; its arithmetic
        # kernels are what fault on complex128 aligned to 8 bytes.
        common = dict(values=p_vals, address=lambda x: x.data_ptr(), writable=lambda x: True,
                      poke=_set_item, dtype_of=lambda x: dtype_name(x.dtype), compute=lambda x: x * 1,
                      computes="x * 1")  # fmt: skip
        out += [
            make("paddle", "dlpack", paddle.from_dlpack, **common),
            make("paddle", "dlpack-copy", lambda o: paddle.from_dlpack(o, copy=True), **common),
            make("paddle", "dlpack-device", lambda o: paddle.from_dlpack(o, device="cpu"), **common),
            make("paddle", "dlpack-c-api", lambda o: api_convert(o, api), **common),
            make("paddle", "array-interface", paddle.to_tensor, **common),
        ]
    if want("mlx"):
        import mlx.core as mx

        def m_vals(x: Any) -> np.ndarray[Any, Any]:
            if x.dtype == mx.bfloat16:
                import ml_dtypes

                return np.array(x.astype(mx.float32), copy=True).astype(ml_dtypes.bfloat16)
            return np.array(x, copy=True)

        def m_addr(x: Any) -> int | None:
            return None if x.dtype == mx.bfloat16 else int(np.asarray(x).__array_interface__["data"][0])

        common = dict(values=m_vals, address=m_addr, writable=lambda x: True, poke=_set_item,
                      dtype_of=lambda x: dtype_name(x.dtype))  # fmt: skip
        out += [
            make("mlx", "dlpack", mx.from_dlpack, **common),
            make("mlx", "dlpack-copy", lambda o: mx.from_dlpack(o, copy=True), **common),
            make("mlx", "buffer", lambda o: mx.array(memoryview(o)), **common),  # type: ignore[arg-type]
            make("mlx", "array-interface", mx.array, **common),
        ]
    if want("onnxruntime"):
        import onnxruntime as ort

        def o_poke(x: Any, value: Any) -> None:
            now = x.numpy().copy()
            now[_poke_index(now)] = value
            x.update_inplace(now)  # OrtValue's one way to write: the whole tensor from NumPy

        out.append(make("onnxruntime", "dlpack", ort.OrtValue.from_dlpack,
                        values=lambda x: np.array(x.numpy(), copy=True), address=lambda x: x.data_ptr(),
                        writable=lambda x: True, poke=o_poke, dtype_of=lambda x: dtype_name(x.data_type())))  # fmt: skip
    if want("array_api_strict"):
        import array_api_strict as xp

        cpu = xp.asarray(0).device
        common = dict(values=lambda x: np.array(x._array, copy=True),
                      address=lambda x: int(x._array.__array_interface__["data"][0]),
                      writable=lambda x: bool(x._array.flags.writeable), poke=_set_item,
                      dtype_of=lambda x: dtype_name(x.dtype))  # fmt: skip
        out += [
            make("array_api_strict", "dlpack", xp.from_dlpack, **common),
            make("array_api_strict", "dlpack-copy", lambda o: xp.from_dlpack(o, copy=True), **common),
            make("array_api_strict", "dlpack-device", lambda o: xp.from_dlpack(o, device=cpu), **common),
            make("array_api_strict", "buffer", lambda o: xp.asarray(memoryview(o)), **common),
        ]
    if want("pandas"):
        import pandas as pd

        def pd_vals(s: Any) -> np.ndarray[Any, Any]:
            # A record-batch stream arrives as a Series of structs (dicts) and a
            # tensor extension array as a Series of rows: both read as arrays.
            values = s.to_numpy()
            if values.dtype == object and len(values):
                first = values[0]
                if isinstance(first, dict) and len(first) == 1:
                    values = np.array([next(iter(v.values())) for v in values])
                elif isinstance(first, np.ndarray):
                    values = np.stack(list(values))
            return np.array(values, copy=True)

        out.append(make("pandas", "arrow", pd.Series.from_arrow, values=pd_vals, address=lambda s: None,
                        writable=lambda s: False))  # fmt: skip
    if want("xarray"):
        import xarray as xr

        out.append(make("xarray", "array-interface", xr.DataArray,
                        values=lambda a: np.array(a.values, copy=True),
                        address=lambda a: int(np.asarray(a.values).__array_interface__["data"][0]),
                        writable=lambda a: bool(a.values.flags.writeable), poke=_set_item,
                        dtype_of=lambda a: dtype_name(a.dtype)))  # fmt: skip
    if want("tensorflow"):
        import tensorflow as tf

        def tf_vals(x: Any) -> np.ndarray[Any, Any]:
            if x.dtype == tf.bfloat16:
                import ml_dtypes

                return np.array(tf.cast(x, tf.float32).numpy().astype(ml_dtypes.bfloat16), copy=True)
            return np.array(x.numpy(), copy=True)

        # tf.experimental.dlpack takes only a legacy capsule: __dlpack__ asked without max_version.
        out.append(make("tensorflow", "dlpack", lambda o: tf.experimental.dlpack.from_dlpack(o.__dlpack__()),
                        values=tf_vals, address=lambda x: None, writable=lambda x: False,
                        dtype_of=lambda x: dtype_name(x.dtype.name)))  # fmt: skip
    if want("warp"):
        import warp as wp

        wp.config.quiet = True
        wp.init()  # as a user does first; warp's DLPack import refuses an uninitialised runtime
        common = dict(values=lambda x: np.array(x.numpy(), copy=True), address=lambda x: int(x.ptr),
                      writable=lambda x: True, poke=lambda x, v: _set_item(x.numpy(), v),
                      dtype_of=lambda x: dtype_name(x.dtype))  # fmt: skip
        out += [
            make("warp", "dlpack", wp.from_dlpack, **common),
            make("warp", "array-interface", lambda o: wp.array(o, device="cpu", copy=False), **common),
        ]
    return out + _newest_consumers(want, make)


def _newest_consumers(want: Callable[[str], bool], make: Callable[..., Any]) -> list[Any]:
    """The consumers of arro3, narwhals, datafusion, duckdb, cuda.core and MAX."""
    out: list[Any] = []
    if want("arro3"):
        from arro3.core import Array

        # Read back through pyarrow (which imports its capsule without a copy).
        out.append(make("arro3", "arrow", Array.from_arrow, values=lambda a: _column_values(_to_pyarrow(a)),
                        address=lambda a: _column_address(_to_pyarrow(a)), writable=lambda a: False))  # fmt: skip
    tables: dict[str, Callable[[Any], Any]] = {}
    if want("narwhals"):
        import narwhals as nw

        tables["narwhals"] = lambda o: nw.from_arrow(o, backend="pyarrow")
    if want("datafusion"):
        import datafusion

        tables["datafusion"] = lambda o: datafusion.SessionContext().from_arrow(o)
    if want("duckdb"):
        import duckdb

        tables["duckdb"] = lambda o: duckdb.connect().from_arrow(o)
    for peer, take in tables.items():  # a table of one column: the values are its first column's
        out.append(make(peer, "arrow", take, values=lambda t: _column_values(_first_column(t)),
                        address=lambda t: _column_address(_first_column(t)), writable=lambda t: False))  # fmt: skip
    if want("cuda_core"):
        from cuda.core.utils import StridedMemoryView

        api = StridedMemoryView.__dlpack_c_exchange_api__
        # The view's values are read from what it says it holds (pointer, shape,
        # strides, dtype), not through its own export.
        views: dict[str, Any] = dict(values=_smv_values, address=lambda v: int(v.ptr),
                                     writable=lambda v: not v.readonly, dtype_of=lambda v: dtype_name(v.dtype))
        out += [
            make("cuda_core", "dlpack", lambda o: StridedMemoryView.from_dlpack(o, stream_ptr=-1), **views),
            make("cuda_core", "dlpack-c-api", lambda o: api_convert(o, api), **views),
        ]
    if want("max"):
        from max.driver import Buffer

        buffers: dict[str, Any] = dict(values=_max_values, address=lambda b: int(b._data_ptr()),
                                       writable=lambda b: True, poke=_set_item, dtype_of=lambda b: dtype_name(b.dtype))
        out += [
            make("max", "dlpack", Buffer.from_dlpack, **buffers),
            make("max", "dlpack-copy", lambda o: Buffer.from_dlpack(o, copy=True), **buffers),
        ]
    return out


def _to_pyarrow(obj: Any) -> Any:
    import pyarrow as pa

    return pa.array(obj)


def _first_column(table: Any) -> Any:
    """The first column of a table (narwhals DataFrame, datafusion DataFrame,
    duckdb relation) as pyarrow reads its ``__arrow_c_stream__``: its one
    chunk, or its chunks joined."""
    import pyarrow as pa

    column = pa.table(table).column(0)
    return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()


def _column_values(a: Any) -> np.ndarray[Any, Any]:
    """A pyarrow Array's values: an N-d tensor (``arrow.fixed_shape_tensor``)
    in its shape, a fixed-size list as rows, bool8 as its int8 storage."""
    import pyarrow as pa

    if isinstance(a.type, pa.FixedShapeTensorType):
        return np.array(a.to_numpy_ndarray(), copy=True)
    a = _one_array(a)
    if pa.types.is_fixed_size_list(a.type):
        flat = a.flatten()
        return np.array(flat.to_numpy(zero_copy_only=False), copy=True).reshape(len(a), a.type.list_size)
    return np.array(a.to_numpy(zero_copy_only=False), copy=True)


def _column_address(a: Any) -> int | None:
    """The address of the first value of a pyarrow Array (of a fixed-size list's values)."""
    import pyarrow as pa

    a = _one_array(a)
    if pa.types.is_fixed_size_list(a.type):
        a = a.flatten()
    buf = a.buffers()[1]
    return None if buf is None else int(buf.address + a.offset * a.type.bit_width // 8)


def _one_array(a: Any) -> Any:
    """An extension array's storage; a struct of one field (a stream of
    record batches taken as one array) that field."""
    import pyarrow as pa

    if isinstance(a, pa.ExtensionArray):
        a = a.storage
    if pa.types.is_struct(a.type) and a.type.num_fields == 1:
        a = a.field(0)
    return a


def _smv_values(v: Any) -> np.ndarray[Any, Any]:
    """The values a cuda.core StridedMemoryView (host memory) says it holds:
    NumPy over its pointer, with its shape, strides (in elements) and dtype."""
    import ctypes

    dtype, shape = np.dtype(v.dtype), tuple(v.shape)
    if int(np.prod(shape)) == 0:
        return np.empty(shape, dtype)
    strides = tuple(v.strides) if v.strides is not None else tuple(
        int(np.prod(shape[k + 1:])) for k in range(len(shape)))  # fmt: skip
    low = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    size = dtype.itemsize
    raw = (ctypes.c_char * ((high - low + 1) * size)).from_address(int(v.ptr) + low * size)
    view: np.ndarray[Any, Any] = np.ndarray(shape, dtype, buffer=raw, offset=-low * size,
                                            strides=tuple(s * size for s in strides))  # fmt: skip
    return np.array(view, copy=True)


def _max_values(b: Any) -> np.ndarray[Any, Any]:
    """A MAX Buffer's values (its bfloat16 as ml_dtypes', read as its bits)."""
    from max.dtype import DType

    if b.dtype == DType.bfloat16:  # (to_numpy has no bfloat16; view() needs the shape of a 0-d buffer)
        import ml_dtypes

        bits = b.view(DType.uint16, tuple(b.shape)).to_numpy()
        return np.array(bits.view(ml_dtypes.bfloat16), copy=True)
    return np.array(b.to_numpy(), copy=True)


def api_convert(obj: Any, dst_api: Any) -> Any:
    """``obj`` handed to the library of ``dst_api`` through the C exchange API
    of both sides (TypeError when ``obj``'s type has none)."""
    from bridge import _drivers

    src_api = getattr(type(obj), "__dlpack_c_exchange_api__", None)
    if src_api is None:
        raise TypeError(f"{type(obj).__name__} has no DLPack C exchange API")
    return _drivers.api_convert(src_api, dst_api, obj)
