"""The destinations of ``test_convert_differential.py`` (part of its worker, see
``differential_helpers.py``): a result read through its destination's own API
(dtype, values, shape, first element's address), the destination's own
computations on it, writes into it, and the oracle: what ``bridge.convert``
must do with a source, by the rules of ``docs/convert.md``
(:data:`differential_sources.RULES`).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
from differential_sources import (
    COMPLEX,
    FLOATS,
    INTS,
    ITEMSIZE,
    ML,
    RULES,
    Rule,
    Source,
    _arrow_address,
    _c_strides,
    _lib,
    _mlx_address,
    _np_name,
    _paddle_values,
    _pointer_values,
    _ref,
    _torch_values,
    as_float,
    dest_dtypes,
    fixed_shape_numpy,
    np_dtype,
    same_values,
)

# ------------------------------------------------------------------ reading a destination's result


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
#: The destinations whose own identity keeps a subclass of their type as it
#: is (torch.as_tensor(parameter), jnp.asarray(jax array), pa.array(a
#: DoubleArray)); np.asarray makes any subclass a plain ndarray.
KEEPS_SUBCLASSES = frozenset({"torch", "jax", "pyarrow"})


def same_library(dest: str, obj: Any) -> bool:
    """Whether ``obj`` is ``dest``'s own object: what its own identity
    (``np.asarray``, ``torch.as_tensor``, ...) returns as it is."""
    own = _dotted(RESULT_TYPES[dest])
    return type(obj) is own or (dest in KEEPS_SUBCLASSES and isinstance(obj, own))


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
            # (libraries may sum in the dtype itself: float8 and half precision round as they go, and a
            # sum that is not pairwise, as NumPy's over a broadcast view, errs by up to n roundings)
            half = {"float16": 2.0**-11, "bfloat16": 2.0**-8}
            rtol = 0.25 if dtype.startswith("float8") else max(0.02, ref.size * half[dtype]) if dtype in half else 1e-5
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


def expect(case: dict[str, Any], src: Source, own: bool = False) -> Expect:
    """What bridge.convert must do with ``src`` into the case's destination,
    by the rules of docs/convert.md; ``own``: the source is the
    destination's own object (a same-library call, which returns its input
    wherever its memory needs no fix and no copy is asked for)."""
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
    if own and not copies and not copy:  # (read-only memory, an offset: nothing is handed over)
        return Expect(None, (), (), ())
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
