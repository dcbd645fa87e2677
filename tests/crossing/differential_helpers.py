"""The worker of ``test_convert_differential.py``: one case of
``bridge.convert(source, destination, copy=..., readonly=...)`` made and
checked in a child process, so that a crash (a destination trusting memory it
cannot hold, a kernel reading misaligned memory) fails the case instead of
killing the test run.

The test (the parent) draws a case as plain data (:func:`run` takes it as a
JSON-able dict) and hands it to a :class:`Worker`: a ``python -c`` child that
imports the libraries once and runs case after case, answering each with the
list of problems found (empty: the case passed). A child that dies is
reported with its signal and the case in flight, and a fresh one serves the
next case.

Each case is built in the source library (numpy, bridge, torch, jax, paddle,
tvm_ffi, pyarrow, polars, nanoarrow, mlx, onnxruntime, Python buffers) over a
layout drawn by the parent, and checked through the destination's own API,
never bridge's (except for the bridge destination itself): its dtype, shape
and values against NumPy's reference; its first element's address against
the source's (a zero-copy result shares it; a copy does not and is warned or
refused); read-only memory kept read-only; a write into a copy not reaching
the source; the destination's own computations on it (in this child); and
the result still right after the source is deleted and garbage collected.

What each destination holds is written here once more, from
``docs/convert.md`` (not read from bridge's table): :data:`RULES`. Where it
and bridge disagree the case fails.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import importlib
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable
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


# ------------------------------------------------------------------ reading a destination's result


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


_ORT_NAMES = {"float": "float32", "double": "float64", "float16": "float16", "bfloat16": "bfloat16",
              "float8e4m3fn": "float8_e4m3fn", "float8e5m2": "float8_e5m2"}  # fmt: skip


def dest_dtype(dest: str, r: Any) -> str:
    """The result's dtype, named as NumPy (and ml_dtypes) name it, through its own library."""
    if dest in ("numpy", "jax"):
        return str(r.dtype.name) if hasattr(r.dtype, "name") else str(r.dtype)
    if dest == "bridge":
        return str(r.dtype.name)
    if dest == "torch":
        return str(r.dtype).removeprefix("torch.")
    if dest == "paddle":
        # its DataType names: str() of UINT16 reads "paddle.bfloat16", a different type (BFLOAT16)
        return str(r.dtype.name).lower() if hasattr(r.dtype, "name") else str(r.dtype).removeprefix("paddle.")
    if dest == "tvm_ffi":
        return str(r.dtype)
    if dest == "mlx":
        return str(r.dtype).removeprefix("mlx.core.")
    if dest == "onnxruntime":
        name = r.data_type().removeprefix("tensor(").removesuffix(")")
        return _ORT_NAMES.get(name, name)
    if dest == "pyarrow":
        t = r.type.value_type if hasattr(r.type, "value_type") else r.type
        return "float16" if str(t) == "halffloat" else "bool" if str(t) in ("bool", "extension<arrow.bool8>") else (
            _np_name(t))  # fmt: skip
    if dest == "polars":
        dt = r.dtype
        inner = getattr(dt, "inner", None)
        while inner is not None:  # an Array column: its values' type
            dt, inner = inner, getattr(inner, "inner", None)
        return {"Float16": "float16", "Float32": "float32", "Float64": "float64", "Boolean": "bool"}.get(
            str(dt), str(dt).lower())  # fmt: skip
    raise AssertionError(dest)


def dest_values(dest: str, r: Any, dtype: str) -> np.ndarray[Any, Any]:
    """The result's values (a copy), through its own library."""
    if dest == "numpy":
        return _ref(r)
    if dest == "bridge":
        return _ref(r.numpy())
    if dest == "torch":
        return _torch_values(r, dtype)
    if dest == "paddle":
        return _paddle_values(r, dtype)
    if dest == "jax":
        return _ref(np.asarray(r))
    if dest == "tvm_ffi":
        return _pointer_values(r.data_ptr(), tuple(r.shape), tuple(r.strides), dtype)
    if dest == "mlx":
        mx = _lib("mlx.core")
        if dtype == "bfloat16":
            return _ref(np.asarray(r.view(mx.uint16)).view(np_dtype(dtype)))
        return _ref(np.asarray(r))
    if dest == "onnxruntime":
        shape = tuple(r.shape())
        return _pointer_values(r.data_ptr(), shape, _c_strides(shape), dtype) if dtype in ML else _ref(r.numpy())
    if dest == "pyarrow":
        if hasattr(r, "to_numpy_ndarray"):
            return _ref(fixed_shape_numpy(r))
        return _ref(r.to_numpy(zero_copy_only=False))
    if dest == "polars":
        return _ref(r.to_numpy())
    raise AssertionError(dest)


def dest_shape(dest: str, r: Any) -> tuple[int, ...]:
    if dest == "onnxruntime":
        return tuple(r.shape())
    if dest == "pyarrow":
        return tuple(fixed_shape_numpy(r).shape) if hasattr(r, "to_numpy_ndarray") else (len(r),)
    if dest == "polars":
        return tuple(r.to_numpy().shape)
    return tuple(int(n) for n in r.shape)


def dest_address(dest: str, r: Any, numel: int) -> int | None:
    """The address of the result's first element, by its own library (None: a
    zero-size result, which has none)."""
    if numel == 0:
        return None
    if dest == "bridge" or dest in ("torch", "paddle", "onnxruntime", "tvm_ffi"):
        return int(r.data_ptr())
    if dest == "numpy":
        return int(r.__array_interface__["data"][0])
    if dest == "jax":
        return int(r.unsafe_buffer_pointer())
    if dest == "mlx":
        return _mlx_address(r)
    if dest == "pyarrow":
        return _arrow_address(r)
    if dest == "polars":
        arrow = r.to_arrow()
        if hasattr(arrow, "num_chunks"):
            if arrow.num_chunks != 1:
                return None
            arrow = arrow.chunk(0)
        return _arrow_address(arrow)
    raise AssertionError(dest)


#: The type each destination's result is.
RESULT_TYPES = {"bridge": "bridge.Tensor", "numpy": "numpy.ndarray", "torch": "torch.Tensor", "jax": "jax.Array",
                "paddle": "paddle.Tensor", "tvm_ffi": "tvm_ffi.Tensor", "mlx": "mlx.core.array",
                "onnxruntime": "onnxruntime.OrtValue", "pyarrow": "pyarrow.Array",
                "polars": "polars.Series"}  # fmt: skip
MODULES = {"jax": "jax.numpy", "mlx": "mlx.core"}


def _dotted(path: str) -> Any:
    module, _, attr = path.rpartition(".")
    return getattr(importlib.import_module(module), attr)


def destination(dest: str, form: str) -> Any:
    """The ``to=`` argument: the destination's name, its module or its type."""
    if form == "name":
        return dest
    if form == "module":
        return importlib.import_module(MODULES.get(dest, dest))
    return _dotted(RESULT_TYPES[dest])


# ------------------------------------------------------------------ the destination's own computations


def compute(dest: str, r: Any, dtype: str, ref: np.ndarray[Any, Any]) -> list[str]:
    """Run the destination's own arithmetic on ``r`` (doubling, or negating
    bools, and a sum), compared with NumPy's on the reference. An operation
    the library does not implement for the dtype (its own TypeError,
    RuntimeError, ...) is skipped: only crashes and wrong values count."""
    problems: list[str] = []
    ops = _ops(dest, r, dtype)
    for what, op in ops:
        try:
            out = op()
        except Exception:  # the library does not implement it for this dtype
            continue
        if what == "double":
            want = ~ref if dtype == "bool" else as_float(ref) * 2
            got = np.asarray(out)
            ok = np.array_equal(got.astype(bool), want) if dtype == "bool" else (
                got.shape == want.shape and np.array_equal(as_float(got), want))  # fmt: skip
        elif what == "copy":
            got, want = np.asarray(out), ref
            ok = same_values(got, want)
        else:
            if dtype == "bool":
                continue  # libraries sum bools as counts, or as bools
            want_sum = complex(as_float(ref).sum()) if ref.size else 0.0
            got_sum = complex(np.asarray(out).astype(np.complex128).reshape(-1)[0]) if np.asarray(out).size else 0.0
            # (libraries may sum in the dtype itself: float8 and half precision round as they go)
            rtol = 0.25 if dtype.startswith("float8") else 0.02 if dtype in ("float16", "bfloat16") else 1e-5
            ok = abs(got_sum - want_sum) <= rtol * (float(np.abs(as_float(ref)).sum()) + 1.0)
            if dtype in INTS:  # some libraries sum in the dtype itself, wrapping around
                ok = ok or (int(got_sum.real) - int(want_sum.real)) % (1 << (8 * ITEMSIZE[dtype])) == 0
            got, want = got_sum, want_sum
        if not ok:
            problems.append(f"{dest}'s own {what} of the result is wrong: got {got!r}, want {want!r}")
    return problems


def _ops(dest: str, r: Any, dtype: str) -> list[tuple[str, Callable[[], Any]]]:
    is_bool = dtype == "bool"
    if dest == "numpy":
        return [("double", lambda: ~r if is_bool else r * 2), ("sum", lambda: np.sum(r))]
    if dest == "bridge":
        return [("copy", lambda: r.clone().numpy())]
    if dest == "torch":
        return [("double", lambda: _torch_np(~r if is_bool else r * 2, dtype)), ("sum", lambda: r.sum().item())]
    if dest == "paddle":
        paddle = _lib("paddle")
        return [("double", lambda: _paddle_values(paddle.logical_not(r) if is_bool else r * 2, dtype)),
                ("sum", lambda: paddle.sum(r).item())]  # fmt: skip
    if dest == "jax":
        jnp = _lib("jax.numpy")
        return [("double", lambda: np.asarray(~r if is_bool else r * 2)), ("sum", lambda: np.asarray(jnp.sum(r)))]
    if dest == "mlx":
        mx = _lib("mlx.core")
        return [("double", lambda: np.asarray(mx.logical_not(r) if is_bool else r * 2)),
                ("sum", lambda: np.asarray(mx.sum(r)))]  # fmt: skip
    if dest == "pyarrow":
        pc = _lib("pyarrow.compute")
        if hasattr(r, "to_numpy_ndarray"):
            return [("copy", lambda: fixed_shape_numpy(r))]
        return [("double", lambda: (pc.invert(r) if is_bool else pc.multiply(r, 2)).to_numpy(zero_copy_only=False)),
                ("sum", lambda: pc.sum(r, min_count=0).as_py())]  # fmt: skip
    if dest == "polars":
        if not r.dtype.is_numeric():
            return [("copy", lambda: r.to_numpy())]
        return [("double", lambda: (r * 2).to_numpy()), ("sum", lambda: r.sum())]
    return [("copy", lambda: dest_values(dest, r, dtype))]  # tvm_ffi, onnxruntime: no arithmetic of their own


def _torch_np(t: Any, dtype: str) -> np.ndarray[Any, Any]:
    return _torch_values(t, dtype) if str(t.dtype).removeprefix("torch.") == dtype else t.resolve_conj().numpy()


# ------------------------------------------------------------------ writing


def _new_value(ref: np.ndarray[Any, Any], dtype: str) -> Any:
    first = ref.reshape(-1)[0]
    if dtype == "bool":
        return not bool(first)
    if dtype in COMPLEX:
        return complex(first) + 1
    return float(first) + 1 if dtype in FLOATS or dtype in ML else int(first) + 1


def write_first(dest: str, r: Any, dtype: str, value: Any, want: np.ndarray[Any, Any]) -> bool:
    """Write ``value`` into the result's first element through its own library
    (``want`` updated to match); False where it has no way to write."""
    index = (0,) * want.ndim
    if dest == "numpy":
        if not r.flags.writeable:
            return False
        r[index] = value
    elif dest == "torch":
        r[index] = value
    elif dest == "paddle":
        r[index] = value
    elif dest == "bridge":
        if r.is_readonly:
            return False
        r[index] = value
    elif dest == "tvm_ffi":
        _pointer_values(r.data_ptr(), tuple(r.shape), tuple(r.strides), dtype, writable=True)[index] = value
    elif dest == "onnxruntime":
        new = want.copy()
        new[index] = value
        r.update_inplace(new)
    elif dest == "mlx":
        r[index] = value
    else:
        return False  # jax, pyarrow, polars: immutable
    want[index] = value
    return True


# ------------------------------------------------------------------ the oracle


@dataclasses.dataclass
class Expect:
    """What convert must do: refuse (``error``: the exception type and the
    words its message must hold, any of them), or succeed with the copying
    fixes ``copies`` (empty: zero-copy), ``may`` more of them where the
    layout after a fix made while importing is bridge's to choose."""

    error: type[BaseException] | None = None
    words: tuple[str, ...] = ()
    copies: tuple[str, ...] = ()
    may: tuple[str, ...] = ()


def _live(src: Source) -> list[tuple[int, int]]:
    return [(n, s) for n, s in zip(src.shape, src.strides) if n > 1]


def _row_major(src: Source) -> bool:
    acc = 1
    for n, s in reversed(list(zip(src.shape, src.strides))):
        if n > 1 and s != acc:
            return False
        acc *= n
    return True


def _compact(src: Source) -> bool:
    live = sorted((abs(s), n, s) for n, s in _live(src))
    acc = 1
    for a, n, s in live:
        if s <= 0 or a != acc:
            return False
        acc *= n
    return True


def layout_problem(src: Source, rule: Rule) -> str:
    """Why ``rule``'s destination cannot hold ``src``'s strides, in the words
    bridge's reason uses ("" when it can)."""
    live = _live(src)
    if not rule.negative and any(s < 0 for _, s in live):
        return "negative strides"
    if not rule.zero and any(s == 0 for _, s in live):
        return "zero strides"
    if rule.strides == "contiguous" and not _row_major(src):
        return "row-major"
    if rule.strides == "compact" and not _compact(src):
        return "compact"
    return ""


def expect(case: dict[str, Any], src: Source) -> Expect:
    """What bridge.convert must do with ``src`` into the case's destination,
    by the rules of docs/convert.md."""
    dest, copy, readonly = case["dest"], case["copy"], case["readonly_policy"]
    rule = RULES[dest]
    ndim = len(src.shape)
    if ndim == 0 and not rule.zero_d:
        return Expect(BufferError, ("0-d",))
    if rule.max_ndim is not None and ndim > rule.max_ndim:
        return Expect(BufferError, (f"at most {rule.max_ndim} dims",))
    if not rule.zero_width and ndim > 1 and 0 in src.shape[1:]:
        return Expect(BufferError, ("rows of no elements",))
    if not rule.nd_bool and ndim > 1 and src.dtype == "bool":
        return Expect(BufferError, ("bool tensors of one dim only",))
    if src.dtype not in dest_dtypes(dest, case.get("x64", False)):
        return Expect(BufferError, (src.dtype,))
    copies: list[str] = []
    may: list[str] = []
    if src.import_fix:
        copies += src.import_fix
        may += ["layout", "alignment"]  # the import's new memory is laid out as bridge chooses
    if copy and not rule.always_copies:
        copies.append("requested")
    readonly_src = src.readonly and not src.import_fix
    if not src.import_fix and src.numel:
        if layout_problem(src, rule):
            copies.append("layout")
        align = max(rule.alignment, ITEMSIZE[src.dtype] if src.dtype in rule.element_aligned else 1, 1)
        if src.addr is not None and src.addr % align:
            copies.append("alignment")
    if readonly_src and not copies and not rule.always_copies and rule.readonly == "writes":
        if readonly == "error":
            return Expect(BufferError, ("read-only",))
        if readonly == "copy":
            copies.append("read-only")
    if rule.always_copies:
        copies.append("destination")
    if copy is False and copies:
        return Expect(BufferError, tuple(w for k in copies for w in _WORDS[k]))
    return Expect(None, (), tuple(copies), tuple(may))


#: The words a refusal names each copying fix with.
_WORDS = {"byte-order": ("byte order",), "value": ("scalar",), "unpack": ("bit-packed",),
          "concatenate": ("chunks", "batches"), "requested": ("copy=True",), "layout": ("strides",),
          "alignment": ("aligned",), "read-only": ("read-only",), "destination": ("copies every import",)}  # fmt: skip


# ------------------------------------------------------------------ one case


def _scribble(nbytes: int) -> list[np.ndarray[Any, Any]]:
    """Fresh allocations of about ``nbytes`` filled with a pattern: memory
    freed too early is likely reused by them, and then reads wrong."""
    size = max(nbytes + 256, 64)
    return [np.full(size, 0xA5, np.uint8) for _ in range(8)] + [np.full(size * 2, 0x5A, np.uint8)]


#: The modules each source and destination imports.
_NEEDS = {"numpy-scalar": ("numpy",), "buffer": ("numpy",), "python": ("numpy",), "table": ("pyarrow", "polars"),
          "pyarrow": ("pyarrow", "pyarrow.compute"), "pyarrow-chunked": ("pyarrow",), "pyarrow-tensor": ("pyarrow",),
          "nanoarrow": ("nanoarrow", "pyarrow"), "jax": ("jax", "jax.numpy"), "mlx": ("mlx.core",),
          "polars": ("polars", "pyarrow")}  # fmt: skip
_frozen = 0


def _prepare(case: dict[str, Any]) -> None:
    """Import what the case needs, then freeze everything the imports made
    out of the collector's sight: a full collection (two a case) over torch,
    paddle and jax's objects would take a quarter of a second."""
    global _frozen
    for who in ("bridge", "ml_dtypes", case["src"], case.get("dest", "numpy")):
        for module in _NEEDS.get(who, (who,)):
            with contextlib.suppress(ImportError):
                importlib.import_module(module)
    if len(sys.modules) != _frozen:
        gc.collect()
        gc.freeze()
        _frozen = len(sys.modules)


def run(case: dict[str, Any]) -> dict[str, Any]:
    """Make and check one case: ``{"skip": why}`` where its source library
    cannot make it, else ``{"problems": [...], "notes": [...]}``."""
    _prepare(case)
    if _serving:
        import faulthandler

        faulthandler.dump_traceback_later(HANG, exit=True)  # a hang: where it hangs, then the child ends
    if "jax" in (case["src"], case.get("dest")):
        import jax

        jax.config.update("jax_enable_x64", bool(case.get("x64")))
    if case["src"] == "python":
        return _refusal(case, case["value"] if case["value_kind"] != "tuple" else tuple(case["value"]),
                        TypeError, ("holds values, not memory",))  # fmt: skip
    if case["src"] == "table":
        return _refusal(case, _table(case["table"]), TypeError, ("table", "column"))
    try:
        obj, src, ref = build(case)
    except CannotMake as why:
        return {"skip": str(why)}
    if case.get("nulls"):
        return _refusal(case, obj, ValueError, ("null",))
    STATS.clear()
    problems = _check(case, obj, src, ref)
    return {"problems": problems, "notes": [f"source: {src}"], "stats": dict(STATS)}


#: What the last case did (for the notes): refused, shared or copied, and whether a write was tried.
STATS: dict[str, Any] = {}


def _table(kind: str) -> Any:
    if kind == "polars":
        return _lib("polars").DataFrame({"a": [1.0, 2.0], "b": [1, 2]})
    pa = _lib("pyarrow")
    return pa.table({"a": [1.0, 2.0]}) if kind == "pyarrow" else pa.record_batch({"a": [1.0, 2.0]})


def _refusal(case: dict[str, Any], obj: Any, kind: type[BaseException], words: tuple[str, ...]) -> dict[str, Any]:
    import bridge

    problems: list[str] = []
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            out = bridge.convert(obj, destination(case["dest"], case["to"]), copy=case["copy"],
                                 readonly=case["readonly_policy"])  # fmt: skip
    except Exception as err:
        err.__traceback__ = None
        problems += _judge_error(err, kind, words)
    else:
        problems.append(f"accepted {type(obj).__name__} (gave a {type(out).__name__}); want {kind.__name__} naming "
                        f"{words}")  # fmt: skip
    return {"problems": problems, "notes": []}


def _judge_error(err: BaseException, kind: type[BaseException] | None, words: tuple[str, ...]) -> list[str]:
    msg = str(err)
    said = f"{type(err).__name__}: {msg}"
    if not isinstance(err, (TypeError, ValueError, BufferError)):
        return [f"refused with {said} (a refusal must be a TypeError, ValueError or BufferError)"]
    if not msg.strip():
        return [f"refused with an empty {type(err).__name__}"]
    if kind is None:
        return [f"refused what the destination holds: {said}"]
    out = []
    if not isinstance(err, kind):
        out.append(f"refused with {said}; want a {kind.__name__}")
    if not any(w.lower() in msg.lower() for w in words):
        out.append(f"refused with {said}, which names none of {words}")
    return out


def _check(case: dict[str, Any], obj: Any, src: Source, ref: np.ndarray[Any, Any]) -> list[str]:
    import bridge

    dest, copy, policy = case["dest"], case["copy"], case["readonly_policy"]
    want = expect(case, src)
    to = destination(dest, case["to"])
    _choose_path(to, case.get("path", "fast"))
    err: BaseException | None = None
    r: Any = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            r = bridge.convert(obj, to, copy=copy, readonly=policy)
        except Exception as e:
            err = e
            err.__traceback__ = None  # (it would hold this frame, and the source, in a cycle)
    copy_warnings = [w.message for w in caught if isinstance(w.message, bridge.CopyWarning)]
    others = [f"{w.category.__name__}: {w.message}" for w in caught if not isinstance(w.message, bridge.CopyWarning)]
    problems: list[str] = [f"convert() let a warning of its own through: {o}" for o in others]
    if err is not None:
        STATS["outcome"] = "refused"
        problems += _judge_error(err, want.error, want.words)
        if copy_warnings:
            problems.append(f"refused ({type(err).__name__}) yet warned of a copy: {copy_warnings[0]}")
        return problems
    if want.error is not None:
        return [*problems, f"accepted; want a {want.error.__name__} naming one of {want.words}"]

    # -- the result's type, dtype, shape and values (its own API)
    result_type = _dotted(RESULT_TYPES[dest])
    if not isinstance(r, result_type):
        return [*problems, f"returned a {type(r).__module__}.{type(r).__qualname__}, not a {RESULT_TYPES[dest]}"]
    got_dtype = dest_dtype(dest, r)
    if got_dtype != src.dtype:
        problems.append(f"the result's dtype is {got_dtype}, the source's {src.dtype}")
    got_shape = dest_shape(dest, r)
    if got_shape != ref.shape:
        return [*problems, f"the result's shape is {got_shape}, the source's {ref.shape}"]
    try:
        values = dest_values(dest, r, src.dtype)
    except Exception as e:
        return [*problems, f"{dest}'s own API cannot read the result: {type(e).__name__}: {e}"]
    if dest == "pyarrow" and hasattr(r, "to_numpy_ndarray") and len(r):
        try:
            r.to_numpy_ndarray()
        except Exception as e:
            problems.append(f"pyarrow's own FixedShapeTensorArray.to_numpy_ndarray() refuses the result ({r.type}): "
                            f"{type(e).__name__}: {e}")  # fmt: skip
    if not same_values(values, ref):
        problems.append(f"the result's values differ from the source's:\n got {values!r}\nwant {ref!r}")

    # -- warnings against the copies made
    kinds = [f.kind for f in copy_warnings[0].fixes if f.copies] if copy_warnings else []
    if copy is None:
        if want.copies and len(copy_warnings) != 1:
            problems.append(f"copied for {list(want.copies)} with {len(copy_warnings)} CopyWarnings (want one)")
        if not want.copies and copy_warnings:
            problems.append(f"warned of a copy ({copy_warnings[0]}) where the destination holds the source as it is")
        if want.copies and copy_warnings:
            w = copy_warnings[0]
            if w.kind != want.copies[0]:
                problems.append(f"the CopyWarning's kind is {w.kind!r}; the first copy is {want.copies[0]!r} "
                                f"({w})")  # fmt: skip
            unexpected = set(kinds) - set(want.copies) - set(want.may)
            missing = set(want.copies) - set(kinds)
            if unexpected or missing:
                problems.append(f"the CopyWarning's copying fixes are {kinds}, want {list(want.copies)} ({w})")
    elif copy_warnings:
        problems.append(f"copy={copy} warned: {copy_warnings[0]}")

    # -- zero-copy by address
    numel = math.prod(ref.shape)
    addr = dest_address(dest, r, numel)
    shares = addr is not None and src.addr is not None and addr == src.addr
    STATS["outcome"] = "shared" if shares else "copied" if numel and addr is not None else "unknown"
    if numel and src.addr is not None and addr is not None:
        if not want.copies and not shares:
            problems.append(f"a silent copy: no CopyWarning (copy={copy}) but the result is at {addr:#x}, the "
                            f"source's first element at {src.addr:#x}")  # fmt: skip
        if want.copies and shares:
            problems.append(f"said it copies ({list(want.copies)}) but the result shares the source's memory")
    # -- read-only stays read-only
    if src.readonly and policy != "share" and shares:
        if RULES[dest].readonly == "writes":
            problems.append(f"read-only memory shared writable: {dest} writes through its result")
        problems += _still_read_only(dest, r)
    if src.readonly and policy == "share" and not want.copies and numel and not shares and src.addr is not None:
        problems.append("readonly='share' copied")

    # -- the destination's own computations on the result, against the values it holds (checked above)
    problems += compute(dest, r, src.dtype, values)

    # -- a write into a copy does not reach the source
    expected = values.copy()
    if numel and not shares and (want.copies or copy):
        before = read_source(src.kind, obj, src.dtype)
        value = _new_value(ref, src.dtype)
        try:
            wrote = write_first(dest, r, src.dtype, value, expected)
        except Exception:  # the library refuses the write (its own error, not a crash): nothing to compare
            wrote, expected = False, values.copy()
        STATS["wrote"] = wrote
        if wrote:
            after = dest_values(dest, r, src.dtype)
            if not same_values(after, expected):
                problems.append(f"a write into {dest}'s copy did not land: got {after!r}, want {expected!r}")
                expected = after
            if not same_values(read_source(src.kind, obj, src.dtype), before):
                problems.append("a write into the copy reached the source's memory")

    # -- the result outlives the source
    kind, dtype, nbytes = src.kind, src.dtype, max(ref.nbytes, 64)
    ring: list[Any] = [obj]
    ring.append(ring)  # the source dies in a reference cycle: freed by the collector, not by its count
    del obj, src, caught, copy_warnings, ring
    gc.collect()
    junk = _scribble(nbytes * 4)
    gc.collect()
    later = dest_values(dest, r, dtype)
    if not same_values(later, expected):  # (what it held before, right or wrong)
        problems.append(f"the result changed after the {kind} source was deleted (memory freed under it):\n got "
                        f"{later!r}\nwant {expected!r}")  # fmt: skip
    del junk
    return problems


def _choose_path(to: Any, path: str) -> None:
    """Send the case down convert's general path (``"general"``: the C fast
    path forgets every destination, as on a first call) or let the fast path
    take it where it can (``"fast"``: ``to`` is registered by converting a
    plain tensor first, as any later call finds it)."""
    import bridge
    from bridge.core.native import _C

    if path == "general":
        _C.convert_forget()
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bridge.convert(bridge.zeros(2, dtype=bridge.float32), to)


def _still_read_only(dest: str, r: Any) -> list[str]:
    """The result over read-only memory says read-only, and cannot be made writable."""
    if dest == "numpy":
        if r.flags.writeable:
            return ["read-only memory shared as a writable NumPy array"]
        try:
            r.flags.writeable = True
        except ValueError:
            return []
        return ["read-only memory shared as a NumPy array that can be made writable (flags.writeable = True)"]
    if dest == "bridge" and not r.is_readonly:
        return ["read-only memory shared as a writable bridge tensor"]
    return []


# ------------------------------------------------------------------ the child and its parent

_MARK = "@@differential@@"
#: Seconds a case may run in the child, once its libraries are imported.
HANG = 10
_serving = False


def serve() -> None:
    """The child: run each JSON case read from stdin, answer each on stdout."""
    import faulthandler

    global _serving
    _serving = True
    faulthandler.enable()  # a crash prints where it happened, for the parent to show
    out = sys.stdout
    sys.stdout = sys.stderr  # libraries' chatter goes to stderr
    for line in sys.stdin:
        case = json.loads(line)
        try:
            answer = run(case)
        except Exception as e:
            import traceback

            answer = {"problems": [f"the check itself failed: {type(e).__name__}: {e}\n{traceback.format_exc()}"],
                      "notes": []}  # fmt: skip
        gc.collect()
        faulthandler.cancel_dump_traceback_later()
        print(_MARK, json.dumps(answer, default=repr), file=out, flush=True)


class Worker:
    """The parent's handle on the child: :meth:`run` a case, get its answer;
    a child that dies is answered as a crash and replaced on the next case."""

    def __init__(self, timeout: float = 120.0) -> None:
        self.timeout = timeout
        self.proc: subprocess.Popen[str] | None = None
        self.err: Any = None

    def _start(self) -> subprocess.Popen[str]:
        here = os.path.dirname(os.path.abspath(__file__))
        self.err = tempfile.TemporaryFile()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
        env.setdefault("JAX_PLATFORMS", "cpu")
        env.setdefault("CUDA_VISIBLE_DEVICES", "")
        env.setdefault("GLOG_minloglevel", "2")
        return subprocess.Popen([sys.executable, "-c", "import differential_helpers as d; d.serve()"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, text=True,
                                env=env)  # fmt: skip

    def run(self, case: dict[str, Any]) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin is not None and proc.stdout is not None
        timer = threading.Timer(self.timeout, proc.kill)
        timer.daemon = True
        timer.start()
        try:
            proc.stdin.write(json.dumps(case) + "\n")
            proc.stdin.flush()
            for line in proc.stdout:
                mark, _, rest = line.partition(" ")
                if mark == _MARK:
                    return dict(json.loads(rest))
        except (BrokenPipeError, OSError):
            pass
        finally:
            timer.cancel()
        rc = proc.wait()
        self.proc = None
        self.err.seek(0)
        tail = self.err.read().decode(errors="replace")[-3000:]
        self.err.close()
        self.err = None
        how = f"signal {-rc}" if rc < 0 else f"exit status {rc}"
        with contextlib.suppress(ValueError):
            import signal

            how = f"signal {signal.Signals(-rc).name}" if rc < 0 else how
        return {"problems": [f"the process crashed ({how}) in this case; its stderr ends:\n{tail}"], "notes": []}

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.err is not None:
            self.err.close()
            self.err = None
