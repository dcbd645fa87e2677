"""The cases of ``test_convert_differential.py`` (part of its worker, see
``differential_helpers.py``): the dtypes drawn and their reference values, what
each destination holds (:data:`RULES`, written from ``docs/convert.md``), the
source objects built in their own library (:func:`build`) and the values of a
source or result read back through its library's own API.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib
import math
from typing import Any

import numpy as np

# ------------------------------------------------------------------ dtypes

#: Every dtype the cases draw: NumPy's own, and ml_dtypes' bfloat16 and float8.
INTS = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
FLOATS = ("float16", "float32", "float64")
COMPLEX = ("complex64", "complex128")
ML = ("bfloat16", "float8_e4m3fn", "float8_e5m2")
BASE = ("bool", *INTS, *FLOATS)
ALL = (*BASE, *COMPLEX, *ML)
#: The 64-bit dtypes: jax holds (and makes) them only with jax_enable_x64.
WIDE = ("int64", "uint64", "float64", "complex128")
ITEMSIZE = {n: (1 if n in ("bool", "int8", "uint8") or n.startswith("float8") else
                16 if n == "complex128" else 8 if n in ("int64", "uint64", "float64", "complex64") else
                4 if n in ("int32", "uint32", "float32") else 2) for n in ALL}  # fmt: skip


def np_dtype(name: str) -> np.dtype[Any]:
    """NumPy's dtype of ``name`` (ml_dtypes' for bfloat16 and float8)."""
    if name in ML:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _bits(name: str) -> np.dtype[Any]:
    """The unsigned integer dtype of ``name``'s size (its bits)."""
    return np.dtype(f"u{ITEMSIZE[name]}") if name != "bool" else np.dtype("u1")


def pattern(name: str, n: int) -> np.ndarray[Any, Any]:
    """``n`` distinct-looking values of dtype ``name``, small enough that
    ``x * 2`` and sums are exact in every dtype (float8 included)."""
    i = np.arange(n, dtype=np.int64)
    if name == "bool":
        return (i % 3) == 1
    if name.startswith("float8"):
        return (((i * 3 + 1) % 15) - 7).astype(np.float32).astype(np_dtype(name))
    if name.startswith("uint"):
        return ((i * 7 + 3) % 101).astype(name)
    if name.startswith("int"):
        return (((i * 7 + 3) % 101) - 50).astype(name)
    real = (((i * 7 + 3) % 97) - 48) * 0.5
    if name in COMPLEX:
        return (real + 1j * ((((i * 5 + 1) % 31) - 15) * 0.25)).astype(name)
    return real.astype(np.float32).astype(np_dtype(name))


def same_values(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> bool:
    """Whether ``got`` holds ``want``'s values, bit for bit (shapes equal)."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if want.dtype == bool:
        return bool(np.array_equal(got.astype(bool), want))
    if got.dtype.itemsize != want.dtype.itemsize:
        return False
    bits = np.ascontiguousarray(got).view(_bits_of(got)), np.ascontiguousarray(want).view(_bits_of(want))
    return bool(np.array_equal(*bits))


def _bits_of(a: np.ndarray[Any, Any]) -> np.dtype[Any]:
    return np.dtype(f"u{a.dtype.itemsize}") if a.dtype.itemsize <= 8 else np.dtype("u8")


def as_float(a: Any) -> np.ndarray[Any, Any]:
    """``a``'s values as float64 (complex128 for complex), for arithmetic checks."""
    a = np.asarray(a)
    if a.dtype.kind == "c":
        return a.astype(np.complex128)
    if a.dtype.kind in "biuf":
        return a.astype(np.float64)
    return a.astype(np.float32).astype(np.float64)  # ml_dtypes


# ------------------------------------------------------------------ what each destination holds

@dataclasses.dataclass(frozen=True)
class Rule:
    """What a destination holds as it is, as docs/convert.md says."""

    strides: str = "any"  # "any", "compact" (a permutation of dense memory), "contiguous" (row-major)
    negative: bool = True
    zero: bool = True
    alignment: int = 0
    element_aligned: tuple[str, ...] = ()
    zero_d: bool = True
    max_ndim: int | None = None
    zero_width: bool = True
    readonly: str = "writes"  # "keeps", "never-writes", "writes"
    always_copies: bool = False
    nd_bool: bool = True  # bool tensors of more than one dim
    dtypes: tuple[str, ...] = ALL


RULES: dict[str, Rule] = {
    "bridge": Rule(readonly="keeps"),
    "numpy": Rule(readonly="keeps"),
    "torch": Rule(negative=False, element_aligned=COMPLEX),
    "jax": Rule(strides="compact", negative=False, zero=False, alignment=64, readonly="never-writes"),
    "paddle": Rule(negative=False, element_aligned=COMPLEX,
                   dtypes=(*BASE, *COMPLEX, "bfloat16", "float8_e4m3fn", "float8_e5m2")),
    "tvm_ffi": Rule(dtypes=(*BASE, *ML)),
    "mlx": Rule(negative=False, always_copies=True,
                dtypes=(*(n for n in BASE if n != "float64"), "complex64", "bfloat16")),
    "onnxruntime": Rule(strides="contiguous", negative=False, zero=False, dtypes=(*BASE, *ML)),
    "pyarrow": Rule(strides="contiguous", negative=False, zero=False, zero_d=False, readonly="keeps",
                    element_aligned=BASE, dtypes=BASE, nd_bool=False),
    "polars": Rule(strides="contiguous", negative=False, zero=False, zero_d=False, max_ndim=2, zero_width=False,
                   readonly="never-writes", element_aligned=BASE, dtypes=tuple(n for n in BASE if n != "bool")),
}  # fmt: skip


def dest_dtypes(dest: str, x64: bool) -> tuple[str, ...]:
    """The dtypes ``dest`` holds now (jax: the 64-bit ones only with x64)."""
    held = RULES[dest].dtypes
    return tuple(n for n in held if x64 or n not in WIDE) if dest == "jax" else held


# ------------------------------------------------------------------ the source, as its library sees it

@dataclasses.dataclass
class Source:
    """A source object's layout as its own library reports it: the address of
    its first element (None: it has none, a NumPy scalar), shape, strides in
    elements, whether bridge may write it (``readonly``: its library lends
    it read-only) and the copying fixes bridge makes while importing it."""

    kind: str
    dtype: str
    addr: int | None
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    readonly: bool
    import_fix: tuple[str, ...] = ()
    owns: str = ""  # whose memory, in words (for the notes)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class CannotMake(Exception):
    """The source library cannot make this case (the parent draws another)."""


def _lib(name: str) -> Any:
    return importlib.import_module(name)


def _raw(case: dict[str, Any]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The case's memory: a uint8 segment starting ``shift`` bytes past a
    64-byte boundary, and its elements (``base``) filled with the pattern (in
    the case's byte order)."""
    name, n, shift = case["dtype"], case["base_len"], case["shift"]
    size = ITEMSIZE[name]
    raw = np.zeros(n * size + shift + 192, np.uint8)
    start = (-raw.ctypes.data) % 64
    seg = raw[start + shift : start + shift + n * size]
    dt = np_dtype(name)
    if case.get("byteorder") == "swap":
        dt = dt.newbyteorder()
    base = seg.view(dt)
    base[...] = pattern(name, n)
    return seg, base


def numpy_view(case: dict[str, Any]) -> np.ndarray[Any, Any]:
    """The case's strided view over its memory, as NumPy makes it."""
    _, base = _raw(case)
    size = base.dtype.itemsize
    start = base[case["offset"] :]
    # (as_strided goes through __array_interface__, whose typestr cannot name ml_dtypes' types: strided as bits)
    bits = start.view(_bits(case["dtype"])) if case["dtype"] in ML else start
    view = np.lib.stride_tricks.as_strided(bits, tuple(case["shape"]), tuple(s * size for s in case["strides"]))
    view = view.view(start.dtype)
    assert view.__array_interface__["data"][0] == start.__array_interface__["data"][0]
    return view


def _np_strides(a: np.ndarray[Any, Any]) -> tuple[int, ...]:
    return tuple(s // a.dtype.itemsize for s in a.strides)


def _ref(a: Any) -> np.ndarray[Any, Any]:
    """A native-order C-contiguous copy of ``a``'s values."""
    out = np.array(a, copy=True, order="C")
    if not out.dtype.isnative:
        out = out.astype(out.dtype.newbyteorder("="))
    return out


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def build(case: dict[str, Any]) -> tuple[Any, Source, np.ndarray[Any, Any]]:
    """The case's source object, its :class:`Source` record and its values
    (NumPy's reference). CannotMake where its library cannot make it."""
    kind, name = case["src"], case["dtype"]
    shape = tuple(case.get("shape", ()))
    if kind == "numpy":
        view = numpy_view(case)
        ref = _ref(view)
        if case["readonly"]:
            view.flags.writeable = False
        fix = ("byte-order",) if case.get("byteorder") == "swap" else ()
        return view, Source(kind, name, view.__array_interface__["data"][0], view.shape, _np_strides(view),
                            case["readonly"], fix, "numpy"), ref  # fmt: skip
    if kind == "numpy-scalar":
        value = pattern(name, 3)[case["offset"] % 3]
        assert isinstance(value, np.generic)
        return value, Source(kind, name, None, (), (), False, ("value",), "a NumPy scalar"), _ref(np.asarray(value))
    if kind == "bridge":
        import bridge

        seg, base = _raw(case)
        skip, part = divmod(case["shift"], ITEMSIZE[name])
        if not part and not case["readonly"]:  # bridge's own (64-byte aligned) memory, as bridge.empty makes it
            own = bridge.empty(case["base_len"] + skip, dtype=bridge.get_dtype(name))
            assert own.data_ptr() % 64 == 0
            own.numpy()[skip:] = base
            src = own.as_strided(shape, tuple(case["strides"]), case["offset"] + skip)
        else:  # misaligned or read-only: over a buffer bridge.frombuffer views
            own = bridge.empty(seg.nbytes + case["shift"] + 64, dtype=bridge.uint8)
            assert own.data_ptr() % 64 == 0
            own.numpy()[case["shift"] : case["shift"] + seg.nbytes] = seg
            mv = own.memoryview()
            if case["readonly"]:
                mv = mv.toreadonly()
            flat = bridge.frombuffer(mv, dtype=bridge.get_dtype(name), offset=case["shift"], count=case["base_len"])
            src = flat.as_strided(shape, tuple(case["strides"]), case["offset"])
        ref = _ref(numpy_view(case))
        return src, Source(kind, name, src.data_ptr(), tuple(src.shape), tuple(src.stride()), src.is_readonly,
                           (), "bridge"), ref  # fmt: skip
    if kind == "torch":
        import torch

        if any(s < 0 for s in case["strides"]):
            raise CannotMake("torch makes no negative strides")
        _, base = _raw(case)
        bits = torch.from_numpy(base.view(_bits(name)) if name in ML else base)
        if name in ML:
            bits = bits.view(_torch_dtype(name))
        if case["shift"] == 0 and case.get("own", True):  # torch's own (64-byte aligned) memory
            flat = torch.empty(case["base_len"], dtype=bits.dtype)
            assert flat.data_ptr() % 64 == 0 or flat.numel() == 0
            flat.copy_(bits)
        else:
            flat = bits  # over NumPy's memory, where torch cannot place it itself
        src = torch.as_strided(flat, shape, tuple(case["strides"]), case["offset"])
        ref = _ref(numpy_view(case))
        return src, Source(kind, name, src.data_ptr(), tuple(src.shape), tuple(src.stride()), False, (),
                           "torch" if flat is not bits else "numpy"), ref  # fmt: skip
    if kind == "jax":
        import jax.numpy as jnp

        ref = pattern(name, math.prod(shape)).reshape(shape)
        src = jnp.asarray(ref)
        if src.dtype != ref.dtype:
            raise CannotMake(f"jax makes {src.dtype} of {ref.dtype}")
        return src, Source(kind, name, src.unsafe_buffer_pointer(), shape, _c_strides(shape), True, (), "jax"), ref
    if kind == "paddle":
        import paddle

        if case.get("own") and _is_plain(case):
            ref = pattern(name, math.prod(shape)).reshape(shape)
            try:
                src = paddle.to_tensor(ref)
            except ValueError as why:  # (it refuses some zero-size shapes)
                raise CannotMake(f"paddle.to_tensor: {why}") from None
        else:
            if any(s < 0 for s in case["strides"]):
                raise CannotMake("paddle makes no negative strides")
            view = numpy_view(case)
            ref = _ref(view)
            src = paddle.from_dlpack(view)
        strides = tuple(src.strides) if src.ndim else ()
        return src, Source(kind, name, src.data_ptr(), tuple(src.shape), strides, False, (), "paddle"), ref
    if kind == "tvm_ffi":
        import tvm_ffi

        view = numpy_view(case)
        src = tvm_ffi.from_dlpack(view)
        return src, Source(kind, name, src.data_ptr(), tuple(src.shape), tuple(src.strides), False, (),
                           "numpy"), _ref(view)  # fmt: skip
    if kind in ("pyarrow", "pyarrow-chunked", "pyarrow-tensor", "nanoarrow"):
        return _build_arrow(case)
    if kind == "polars":
        return _build_polars(case)
    if kind == "mlx":
        return _build_mlx(case)
    if kind == "onnxruntime":
        ort = _lib("onnxruntime")
        view = numpy_view(case)
        if not view.flags.c_contiguous:
            raise CannotMake("onnxruntime makes row-major tensors only")
        src = ort.OrtValue.ortvalue_from_numpy(view)
        return src, Source(kind, name, src.data_ptr(), tuple(src.shape()), _c_strides(tuple(src.shape())), True,
                           (), "numpy"), _ref(view)  # fmt: skip
    if kind == "buffer":
        view = numpy_view(case)
        data = bytes(view) if case["readonly"] else bytearray(view)
        obj: Any = memoryview(data)[case["offset"] :] if case.get("memoryview") else data
        if not case.get("memoryview"):
            view = view.copy()
        ref = _ref(np.frombuffer(obj, np.uint8))
        addr = np.frombuffer(obj, np.uint8).__array_interface__["data"][0]
        return obj, Source(kind, name, addr, ref.shape, (1,), case["readonly"], (), type(data).__name__), ref
    raise CannotMake(f"no source {kind!r}")


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def _is_plain(case: dict[str, Any]) -> bool:
    return case["shift"] == 0 and case["offset"] == 0 and tuple(case["strides"]) == _c_strides(tuple(case["shape"]))


def _pa_type(name: str) -> Any:
    import pyarrow as pa

    return {"float16": pa.float16(), "float32": pa.float32(), "float64": pa.float64(), "bool": pa.bool_()}.get(
        name) or getattr(pa, name)()  # fmt: skip


def _pa_values(case: dict[str, Any], n: int, offset: int) -> Any:
    """A pyarrow Array of ``n`` values over the case's memory (shifted), from ``offset``."""
    import pyarrow as pa

    seg, _ = _raw(case)
    return pa.Array.from_buffers(_pa_type(case["dtype"]), n, [None, pa.py_buffer(seg)], offset=offset)


def _pa_address(arr: Any) -> int:
    return int(arr.buffers()[1].address + arr.offset * ITEMSIZE[_np_name(arr.type)])


def _arrow_address(arr: Any) -> int:
    """The first value's address of a pyarrow array: a primitive one, a bool8
    one (its int8 storage), a fixed-size list (its values), a
    FixedShapeTensorArray (its storage's), by pyarrow's own buffers."""
    pa = _lib("pyarrow")
    skip = 0
    while True:
        if isinstance(arr, pa.ExtensionArray):
            arr = arr.storage
        elif isinstance(arr, pa.FixedSizeListArray):
            skip = (skip + arr.offset) * arr.type.list_size
            arr = arr.values  # (values: the child, not sliced by the list's offset)
        else:
            break
    return int(arr.buffers()[1].address + (arr.offset + skip) * (arr.type.bit_width // 8))


def _np_name(t: Any) -> str:
    return str(t.to_pandas_dtype().__name__) if str(t) != "halffloat" else "float16"


def _build_arrow(case: dict[str, Any]) -> tuple[Any, Source, np.ndarray[Any, Any]]:
    import pyarrow as pa

    kind, name = case["src"], case["dtype"]
    shape = tuple(case["shape"])
    if case.get("nulls"):
        values = pattern(name, shape[0]).tolist()
        values[len(values) // 2] = None
        arr = pa.array(values, type=_pa_type(name))
        return arr, Source(kind, name, None, shape, (1,), True, (), "pyarrow"), np.zeros(shape)
    if kind == "pyarrow-tensor":
        perm = list(case["perm"])
        phys = tuple(case["phys"])  # (rows, *the type's shape)
        width = math.prod(phys[1:])
        values = _pa_values(case, phys[0] * width, case["offset"])
        storage = pa.FixedSizeListArray.from_arrays(values, width)
        typ = pa.fixed_shape_tensor(_pa_type(name), list(phys[1:]), permutation=perm)
        src = pa.ExtensionArray.from_storage(typ, storage)
        physical = numpy_view({**case, "shape": phys, "strides": _c_strides(phys)})
        ref = _ref(physical.transpose([0, *(1 + p for p in perm)]))
        if not same_values(np.asarray(storage.flatten().to_numpy(zero_copy_only=False)), _ref(physical).reshape(-1)):
            raise AssertionError("pyarrow's storage does not hold the case's values")
        # The Arrow spec: "the i-th dimension of the logical view corresponds to the dimension with number
        # permutations[i] of the physical tensor" (shape is the physical shape). pyarrow's to_numpy_ndarray agrees
        # where the permutation is its own inverse (it misplaces the others, and misreads a values child with an
        # offset): checked there.
        if case["offset"] == 0 and phys[0] and all(perm[p] == i for i, p in enumerate(perm)):
            own = src.to_numpy_ndarray()
            if own.shape != ref.shape or not same_values(own, ref):
                raise AssertionError(f"pyarrow reads its FixedShapeTensorArray (permutation {perm}) as shape "
                                     f"{own.shape}, the test as {ref.shape}")  # fmt: skip
        strides = tuple(_c_strides(phys)[d] for d in [0, *(1 + p for p in perm)])
        return src, Source(kind, name, _pa_address(values), ref.shape, strides, True, (), "numpy"), ref
    n = shape[0]
    if name == "bool":  # bit-packed: bridge unpacks it
        full = pattern(name, case["base_len"])
        arr = pa.array(full, type=pa.bool_()).slice(case["offset"], n)
        ref = full[case["offset"] : case["offset"] + n].copy()
        if kind == "nanoarrow":
            na = _lib("nanoarrow")
            arr = na.c_array(arr)
        elif kind == "pyarrow-chunked":
            arr = pa.chunked_array(_split(arr, case["chunks"]), type=pa.bool_())
        fix = ("concatenate", "unpack") if kind == "pyarrow-chunked" and case["chunks"] > 1 else ("unpack",)
        return arr, Source(kind, name, None, (n,), (1,), False, fix, "pyarrow"), ref
    ref = _ref(numpy_view(case))
    if kind == "nanoarrow":
        na = _lib("nanoarrow")
        seg, _ = _raw(case)
        ca = na.c_array_from_buffers(getattr(na, name)(), n, [None, na.c_buffer(seg)], offset=case["offset"])
        obj = na.Array(ca) if case.get("wrap") else ca
        return obj, Source(kind, name, int(ca.buffers[1] + ca.offset * ITEMSIZE[name]), (n,), (1,), True, (),
                           "numpy"), ref  # fmt: skip
    arr = _pa_values(case, n, case["offset"])
    if kind == "pyarrow-chunked":
        parts = _split(arr, case["chunks"])
        src = pa.chunked_array(parts, type=arr.type)
        fix = ("concatenate",) if len(parts) > 1 else ()
        return src, Source(kind, name, _pa_address(parts[0]) if parts else None, (n,), (1,), True, fix, "numpy"), ref
    return arr, Source(kind, name, _pa_address(arr), (n,), (1,), True, (), "numpy"), ref


def fixed_shape_numpy(arr: Any) -> np.ndarray[Any, Any]:
    """A FixedShapeTensorArray's values, by pyarrow (its to_numpy_ndarray
    misreads a values child with an offset, and arrays of no rows: its
    storage's flattened values, laid out by its type's shape and permutation)."""
    shape, perm = list(arr.type.shape), arr.type.permutation or list(range(len(arr.type.shape)))
    flat = arr.storage.flatten().to_numpy(zero_copy_only=False)
    physical = np.asarray(flat).reshape(len(arr), *shape)
    return physical.transpose([0, *(1 + p for p in perm)])


def _split(arr: Any, chunks: int) -> list[Any]:
    """``arr`` in ``chunks`` slices (the first ones may be empty)."""
    n = len(arr)
    cuts = [n * k // chunks for k in range(chunks + 1)]
    return [arr.slice(cuts[k], cuts[k + 1] - cuts[k]) for k in range(chunks)]


def _build_polars(case: dict[str, Any]) -> tuple[Any, Source, np.ndarray[Any, Any]]:
    pl = _lib("polars")
    name, shape = case["dtype"], tuple(case["shape"])
    ref = pattern(name, math.prod(shape)).reshape(shape)
    if len(shape) == 1 and case["chunks"] > 1:
        cuts = [shape[0] * k // case["chunks"] for k in range(case["chunks"] + 1)]
        src = pl.concat([pl.Series(ref[cuts[k] : cuts[k + 1]]) for k in range(case["chunks"])], rechunk=False)
        if src.n_chunks() == 1:
            raise CannotMake("polars joined the chunks")
        fix = ("concatenate", "unpack") if name == "bool" else ("concatenate",)
        return src, Source("polars", name, None, shape, (1,), True, fix, "polars"), ref
    skip = case["offset"] if len(shape) == 1 else 0
    if skip:  # a slice: its Arrow data starts past its buffer's first value
        longer = pattern(name, skip + shape[0])
        src, ref = pl.Series(longer).slice(skip, shape[0]), longer[skip:].copy()
    else:
        src = pl.Series(ref)
    fix = ("unpack",) if name == "bool" else ()
    arrow = src.to_arrow()
    if hasattr(arrow, "num_chunks"):
        arrow = arrow.combine_chunks()
    addr = None if name == "bool" else _arrow_address(arrow)
    return src, Source("polars", name, addr, shape, _c_strides(shape), not fix, fix, "polars"), ref


def _build_mlx(case: dict[str, Any]) -> tuple[Any, Source, np.ndarray[Any, Any]]:
    mx = _lib("mlx.core")
    name, shape = case["dtype"], tuple(case["shape"])
    base = pattern(name, math.prod(shape)).reshape(shape)
    x = mx.array(base)
    op, arg = case["mlx_op"], case.get("mlx_arg")
    if op == "transpose":
        x, ref = mx.transpose(x, arg), base.transpose(arg)
    elif op == "slice":
        index = tuple(slice(start, None, step) for start, step in arg)
        x, ref = x[index], base[index]
    elif op == "broadcast":
        x, ref = mx.broadcast_to(x, tuple(arg)), np.broadcast_to(base, tuple(arg))
    else:
        ref = base
    mx.eval(x)
    mv = memoryview(x)
    if mv.shape != ref.shape and not (mv.shape == () and ref.shape == ()):
        raise CannotMake(f"mlx's buffer is {mv.shape}, not {ref.shape}")
    addr = np.asarray(mv).__array_interface__["data"][0] if mv.nbytes else None
    strides = tuple(s // ITEMSIZE[name] for s in mv.strides) if mv.strides else ()
    return x, Source("mlx", name, addr, ref.shape, strides, True, (), "mlx"), _ref(ref)


def _mlx_address(x: Any) -> int:
    """An mlx array's first element's address, by its buffer (mlx has no
    other way to tell); bfloat16's buffer is read as its bits."""
    mx = _lib("mlx.core")
    if x.dtype == mx.bfloat16:
        x = x.view(mx.uint16)
    return int(np.asarray(memoryview(x)).__array_interface__["data"][0])


def read_source(kind: str, src: Any, dtype: str) -> np.ndarray[Any, Any]:
    """The source's values now, through its own library."""
    if kind in ("numpy", "numpy-scalar"):
        return _ref(np.asarray(src))
    if kind == "bridge":
        return _ref(src.numpy())
    if kind == "torch":
        return _torch_values(src, dtype)
    if kind == "jax":
        return _ref(np.asarray(src))
    if kind == "paddle":
        return _paddle_values(src, dtype)
    if kind == "tvm_ffi":
        return _pointer_values(src.data_ptr(), tuple(src.shape), tuple(src.strides), dtype)
    if kind in ("pyarrow", "nanoarrow", "pyarrow-chunked"):
        pa = _lib("pyarrow")
        arr = pa.array(src) if kind == "nanoarrow" else src
        return _ref(arr.to_numpy(zero_copy_only=False))
    if kind == "pyarrow-tensor":
        return _ref(fixed_shape_numpy(src))
    if kind == "polars":
        return _ref(src.to_numpy())
    if kind == "mlx":
        return _ref(np.asarray(memoryview(src)))
    if kind == "onnxruntime":
        return _ref(src.numpy())
    if kind == "buffer":
        return _ref(np.frombuffer(src, np.uint8))
    raise AssertionError(kind)


# ------------------------------------------------------------------ reading values through their own library


def _pointer_values(ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], dtype: str,
                    writable: bool = False) -> np.ndarray[Any, Any]:  # fmt: skip
    """The values at ``ptr`` with ``shape`` and element ``strides`` (what a
    library's own data pointer and strides say), as a NumPy view (a copy
    unless ``writable``)."""
    dt = np_dtype(dtype)
    if math.prod(shape) == 0:
        return np.zeros(shape, dt)
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0) * dt.itemsize
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0) * dt.itemsize
    span = (ctypes.c_char * (hi - lo + dt.itemsize)).from_address(ptr + lo)
    view: np.ndarray[Any, Any] = np.ndarray(shape, dt, buffer=span, offset=-lo,
                                            strides=tuple(s * dt.itemsize for s in strides))  # fmt: skip
    return view if writable else _ref(view)


def _torch_values(r: Any, dtype: str) -> np.ndarray[Any, Any]:
    if dtype in ML:
        import torch

        bits = r.view(torch.int16 if dtype == "bfloat16" else torch.uint8)
        return _ref(bits.numpy().view(np_dtype(dtype)))
    return _ref(r.resolve_conj().numpy())


def _paddle_values(r: Any, dtype: str) -> np.ndarray[Any, Any]:
    got = np.asarray(r.numpy())
    if dtype in ML and got.dtype != np_dtype(dtype):
        got = got.view(np_dtype(dtype))
    return _ref(got)
