"""Element types: the DLPack v1.3 type codes that have a byte-addressable form.

Each :class:`dtype` knows its item size, its category (bool, integral, floating,
complex), its DLPack ``(code, bits, lanes)``, its NumPy dtype (bfloat16 and the
float8/6/4 types come from ``ml_dtypes`` when it is installed) and its Arrow C
data format. Promotion follows PyTorch's rules (``torch.promote_types``,
``torch.result_type``, ``torch.can_cast``), including the cases PyTorch refuses.
"""

from __future__ import annotations

import builtins
import difflib
import warnings
from typing import Any

import numpy as np

from bridge.core.native import _C

__all__ = [
    "dtype",
    "promote_types",
    "result_type",
    "can_cast",
    "get_dtype",
    "all_dtypes",
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
    "half",
    "float",
    "double",
    "cfloat",
    "cdouble",
    "short",
    "int",
    "long",
]

# DLPack type codes (dlpack.h v1.3, DLDataTypeCode).
_INT, _UINT, _FLOAT, _BFLOAT, _COMPLEX, _BOOL = 0, 1, 2, 4, 5, 6

_BOOL_K, _INT_K, _FLOAT_K, _COMPLEX_K = 0, 1, 2, 3  # promotion categories


class dtype(_C.DTypeBase):
    """A tensor element type (``bridge.float32``, ``bridge.bfloat16``, ...).

    Instances are singletons compared by identity. Attributes:
    ``itemsize`` (bytes one element occupies in memory), ``is_floating_point``,
    ``is_complex``, ``is_signed``, ``dlpack`` (``(code, bits, lanes)`` as in
    DLPack's ``DLDataType``; sub-byte float6/float4 types report their logical
    bits and are stored padded to one byte each), ``arrow_format`` (Arrow C data
    format string of the zero-copy Arrow type, or None when Arrow has none),
    ``numpy_dtype`` (a ``numpy.dtype``; raises TypeError naming ml_dtypes when
    the type needs it and it is missing) and ``bit_numpy_dtype`` (an unsigned
    integer dtype of the same size, used to move bits without interpreting them).
    The C part (``bridge._C.DTypeBase``) holds what the C core reads.
    """

    __slots__ = ("__weakref__", "_np", "_np_name", "_rank", "name")

    name: str
    _np_name: str
    _np: np.dtype[Any] | None
    _rank: builtins.int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Instances come from _make only (DTypeBase.__new__ registers them).
        if not hasattr(self, "_rank"):
            raise TypeError("bridge.dtype cannot be instantiated; use bridge.float32 etc.")

    @classmethod
    def _make(
        cls,
        name: str,
        itemsize: builtins.int,
        code: builtins.int,
        bits: builtins.int,
        kind: builtins.int,
        signed: builtins.bool,
        np_name: str,
        arrow_format: str | None,
        rank: builtins.int,
        buffer_format: str = "",
        typekind: str = "",
    ) -> dtype:
        self: dtype = _C.DTypeBase.__new__(cls, code, bits, itemsize, kind, signed, buffer_format,
                                           typekind, arrow_format or "")  # fmt: skip
        self.name = name
        self._np_name = np_name
        self._np = None
        self._rank = rank
        return self

    @property
    def is_floating_point(self) -> builtins.bool:
        """True for real floating types (float16/32/64, bfloat16, float8/6/4)."""
        return self._kind == _FLOAT_K

    @property
    def is_complex(self) -> builtins.bool:
        """True for complex64 and complex128."""
        return self._kind == _COMPLEX_K

    @property
    def is_signed(self) -> builtins.bool:
        """True when the type can hold negative values (as torch.dtype.is_signed)."""
        return self._signed

    @property
    def is_bool(self) -> builtins.bool:
        """True for bool."""
        return self._kind == _BOOL_K

    @property
    def is_integral(self) -> builtins.bool:
        """True for the integer types (bool excluded)."""
        return self._kind == _INT_K

    @property
    def numpy_dtype(self) -> np.dtype[Any]:
        """The NumPy dtype of this type; TypeError if it needs ml_dtypes and that is missing."""
        np_dt = self._np
        if np_dt is None:
            np_dt = self._np = _resolve_numpy(self)
        return np_dt

    @property
    def dtype(self) -> np.dtype[Any]:
        """The NumPy dtype (as :attr:`numpy_dtype`), so that ``np.dtype(bridge.float32)``
        works: NumPy converts any object with a ``.dtype`` attribute, as dask,
        xarray and ``da.from_array`` do with ``np.dtype(x.dtype)``."""
        return self.numpy_dtype

    @property
    def has_numpy_dtype(self) -> builtins.bool:
        """Whether :attr:`numpy_dtype` is available in this environment."""
        try:
            _ = self.numpy_dtype
        except TypeError:
            return False
        return True

    @property
    def bit_numpy_dtype(self) -> np.dtype[Any]:
        """An unsigned integer NumPy dtype of the same item size (bit-exact copies)."""
        return _BIT_DTYPES[self.itemsize]

    def to_real(self) -> DType:
        """The real counterpart of a complex type; other types return themselves."""
        return {"complex64": float32, "complex128": float64}.get(self.name, self)

    def to_complex(self) -> DType:
        """The complex type that holds this real floating type (complex64 at least)."""
        if self._kind == _COMPLEX_K:
            return self
        if self._kind != _FLOAT_K:
            raise TypeError(f"to_complex() is only defined for floating types, not {self}")
        return complex128 if self is float64 else complex64

    def __dlpack_data_type__(self) -> tuple[builtins.int, builtins.int, builtins.int]:
        """``(code, bits, lanes)`` as in DLPack's ``DLDataType``: the dtype exchange
        protocol (data-apis/array-api#972), through which libraries that take
        foreign dtypes (tvm-ffi, bridge itself) read this one."""
        code, bits, lanes = self.dlpack
        return code, bits, lanes

    def __repr__(self) -> str:
        return f"bridge.{self.name}"

    def __reduce__(self) -> str:
        return self.name


# The class under a name its own body does not shadow (``dtype.dtype`` is the
# NumPy dtype property, for np.dtype(x)).
DType = dtype


def _resolve_numpy(dt: dtype) -> np.dtype[Any]:
    if not dt._np_name.startswith("ml_dtypes."):
        return np.dtype(dt._np_name)
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(
            f"{dt} needs the ml_dtypes package for a NumPy dtype; "
            "install it with `pip install dlpack-bridge[ml]` or `pip install ml_dtypes`"
        ) from None
    attr = dt._np_name.split(".", 1)[1]
    if not hasattr(ml_dtypes, attr):
        raise TypeError(f"{dt} needs ml_dtypes.{attr}, which this ml_dtypes version lacks")
    found: np.dtype[Any] = np.dtype(getattr(ml_dtypes, attr))
    return found


_BIT_DTYPES: dict[builtins.int, np.dtype[Any]] = {
    1: np.dtype(np.uint8),
    2: np.dtype(np.uint16),
    4: np.dtype(np.uint32),
    8: np.dtype(np.uint64),
    16: np.dtype([("lo", np.uint64), ("hi", np.uint64)]),
}

_D = dtype._make
# name, itemsize, dlpack code, bits, kind, signed, numpy name, arrow format, rank,
# PEP 3118 buffer format, NumPy array-interface kind
bool = _D("bool", 1, _BOOL, 8, _BOOL_K, False, "bool", "c", 0, "?", "b")
uint8 = _D("uint8", 1, _UINT, 8, _INT_K, False, "uint8", "C", 1, "B", "u")
int8 = _D("int8", 1, _INT, 8, _INT_K, True, "int8", "c", 1, "b", "i")
int16 = _D("int16", 2, _INT, 16, _INT_K, True, "int16", "s", 2, "h", "i")
int32 = _D("int32", 4, _INT, 32, _INT_K, True, "int32", "i", 3, "i", "i")
int64 = _D("int64", 8, _INT, 64, _INT_K, True, "int64", "l", 4, "q", "i")
uint16 = _D("uint16", 2, _UINT, 16, _INT_K, False, "uint16", "S", 2, "H", "u")
uint32 = _D("uint32", 4, _UINT, 32, _INT_K, False, "uint32", "I", 3, "I", "u")
uint64 = _D("uint64", 8, _UINT, 64, _INT_K, False, "uint64", "L", 4, "Q", "u")
float16 = _D("float16", 2, _FLOAT, 16, _FLOAT_K, True, "float16", "e", 1, "e", "f")
bfloat16 = _D("bfloat16", 2, _BFLOAT, 16, _FLOAT_K, True, "ml_dtypes.bfloat16", None, 1)
float32 = _D("float32", 4, _FLOAT, 32, _FLOAT_K, True, "float32", "f", 2, "f", "f")
float64 = _D("float64", 8, _FLOAT, 64, _FLOAT_K, True, "float64", "g", 3, "d", "f")
complex64 = _D("complex64", 8, _COMPLEX, 64, _COMPLEX_K, True, "complex64", None, 2, "Zf", "c")
complex128 = _D("complex128", 16, _COMPLEX, 128, _COMPLEX_K, True, "complex128", None, 3, "Zd", "c")


def _f8(name: str, code: builtins.int, bits: builtins.int = 8, signed: builtins.bool = True) -> dtype:
    return _D(name, 1, code, bits, _FLOAT_K, signed, "ml_dtypes." + name, None, 0)


float8_e3m4 = _f8("float8_e3m4", 7)
float8_e4m3 = _f8("float8_e4m3", 8)
float8_e4m3b11fnuz = _f8("float8_e4m3b11fnuz", 9)
float8_e4m3fn = _f8("float8_e4m3fn", 10)
float8_e4m3fnuz = _f8("float8_e4m3fnuz", 11)
float8_e5m2 = _f8("float8_e5m2", 12)
float8_e5m2fnuz = _f8("float8_e5m2fnuz", 13)
float8_e8m0fnu = _f8("float8_e8m0fnu", 14, signed=False)
float6_e2m3fn = _f8("float6_e2m3fn", 15, bits=6)
float6_e3m2fn = _f8("float6_e3m2fn", 16, bits=6)
float4_e2m1fn = _f8("float4_e2m1fn", 17, bits=4)

# The unsigned type of each item size, to move bits without interpreting them
# (complex128 for 16 bytes: NumPy copies it bit for bit).
_BITS: dict[builtins.int, dtype] = {1: uint8, 2: uint16, 4: uint32, 8: uint64, 16: complex128}

# PyTorch's aliases.
half, float, double = float16, float32, float64
cfloat, cdouble = complex64, complex128
short, int, long = int16, int32, int64

_ALL: tuple[dtype, ...] = (
    bool, uint8, int8, int16, int32, int64, uint16, uint32, uint64,
    float16, bfloat16, float32, float64, complex64, complex128,
    float8_e3m4, float8_e4m3, float8_e4m3b11fnuz, float8_e4m3fn, float8_e4m3fnuz,
    float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn,
)  # fmt: skip

_BY_NAME: dict[str, dtype] = {d.name: d for d in _ALL}
_BY_NAME.update(
    half=half, float=float32, double=float64, cfloat=complex64, cdouble=complex128,
    short=int16, int=int32, long=int64, bool_=bool,
)  # fmt: skip
_BY_DLPACK: dict[tuple[builtins.int, builtins.int], dtype] = {d.dlpack[:2]: d for d in _ALL}
_BY_NUMPY: dict[np.dtype[Any], dtype] = {}
for _d in _ALL:
    if not _d._np_name.startswith("ml_dtypes."):
        _BY_NUMPY[np.dtype(_d._np_name)] = _d


def all_dtypes() -> tuple[dtype, ...]:
    """Every dtype bridge knows, in a stable order."""
    return _ALL


def from_dlpack_code(code: builtins.int, bits: builtins.int) -> dtype | None:
    """The dtype with DLPack ``(code, bits)``, or None when bridge has no such type."""
    return _BY_DLPACK.get((code, bits))


def from_numpy_dtype(np_dtype: Any) -> dtype:
    """The bridge dtype for a NumPy dtype (native byte order, no structured/object types).

    Raises TypeError for dtypes bridge cannot represent and ValueError for a
    non-native byte order.
    """
    nd = np.dtype(np_dtype)
    found = _BY_NUMPY.get(nd)
    if found is not None:
        return found
    if not nd.isnative:
        raise ValueError(f"NumPy dtype {nd.str!r} has non-native byte order; byteswap it first")
    if nd.fields is not None or nd.hasobject or nd.subdtype is not None:
        raise TypeError(f"NumPy dtype {nd!r} (structured/object/subarray) has no tensor dtype")
    if type(nd).__module__.startswith("ml_dtypes") or nd.type.__module__.startswith("ml_dtypes"):
        found = _BY_NAME.get(nd.name)
        if found is not None:
            _BY_NUMPY[nd] = found
            return found
    raise TypeError(f"NumPy dtype {nd!r} has no bridge dtype")


# Python's own types as torch reads them in dtype=: the types of Python's
# scalars at full width (torch.empty(2, dtype=float) is float64), unlike the
# default dtype a Python float *value* gets (float32, see result_type).
_PYTHON_TYPES: dict[type, dtype] = {
    builtins.bool: bool, builtins.int: int64, builtins.float: float64, builtins.complex: complex128,
}


def _top_module(spec: Any) -> str:
    return type(spec).__module__.partition(".")[0]


def _by_name(spec: str, shown: Any) -> dtype:
    name = spec.strip()
    found = _BY_NAME.get(name.removeprefix("torch.").removeprefix("bridge."))
    if found is not None:
        return found
    try:
        with warnings.catch_warnings():  # NumPy warns for its deprecated codes; they fail here anyway
            warnings.simplefilter("ignore")
            # A NumPy type string ("<f4", "i8", an array interface's typestr).
            nd = np.dtype(name)
    except (TypeError, ValueError, SyntaxError):
        nd = None
    if nd is not None and nd.kind in "biufc" and nd.fields is None:
        return from_numpy_dtype(nd)  # ValueError for a non-native byte order
    close = difflib.get_close_matches(name, _BY_NAME, n=3, cutoff=0.6)
    if close:
        hint = f"did you mean {' or '.join(close)}?" if len(close) == 1 else (
            f"did you mean {', '.join(close[:-1])} or {close[-1]}?")  # fmt: skip
    else:
        hint = f"known: {', '.join(d.name for d in _ALL)}"
    raise TypeError(f"unknown dtype {shown!r}; {hint}")


def _from_dlpack_triple(spec: Any, triple: Any, how: str) -> dtype:
    ok = isinstance(triple, tuple) and len(triple) == 3
    ok = ok and all(isinstance(v, builtins.int) and not isinstance(v, builtins.bool) for v in triple)
    if not ok:
        raise TypeError(f"{how} of {spec!r} gave {triple!r}, not a (code, bits, lanes) tuple of ints")
    code, bits, lanes = (builtins.int(v) for v in triple)
    if lanes > 1:
        raise TypeError(f"{spec!r} is a vector type of {lanes} lanes (DLPack code {code}, {bits} bits); "
                        "bridge dtypes have one lane")  # fmt: skip
    found = from_dlpack_code(code, bits) if lanes == 1 else None
    if found is None:
        raise TypeError(f"{spec!r} (DLPack code {code}, {bits} bits, {lanes} lanes) has no bridge dtype")
    return found


def get_dtype(spec: Any) -> dtype:
    """The bridge dtype that ``spec`` names, from any library. The one place a
    dtype argument is read (factories, ``to``, ``view``, ``new_*``, ...).

    Accepted: a bridge dtype; an object with ``__dlpack_data_type__()``
    (the dtype exchange protocol: paddle's dtypes, bridge's own); a name
    (``"float32"``, torch's aliases ``"half"``, ``"float"`` = float32,
    ``"torch.bfloat16"``, or a NumPy type string such as ``"<f4"``); Python's
    ``bool``, ``int``, ``float``, ``complex`` (bool, int64, float64, complex128,
    as torch reads them); a torch dtype; a tvm-ffi dtype; a NumPy dtype or
    scalar type, including jax's and ml_dtypes' (``jnp.bfloat16``,
    ``ml_dtypes.float8_e4m3fn``); an MLX dtype. Nothing is imported to
    recognise them: foreign types are known by their module and their ``str()``.

    TypeError for an unknown name (naming the close ones: "did you mean
    float16?"), for a foreign dtype bridge has no equivalent for (naming it:
    ``torch.complex32``, a vector type of several lanes) and for anything that
    is not a dtype; ValueError for a NumPy dtype of non-native byte order.
    """
    if isinstance(spec, dtype):
        return spec
    if type(spec) is str:
        found = _BY_NAME.get(spec)  # the common case, before any normalising
        return found if found is not None else _by_name(spec, spec)
    exchange = getattr(type(spec), "__dlpack_data_type__", None)
    if exchange is not None:
        try:
            triple = exchange(spec)
        except Exception as e:  # paddle raises ValueError for its types without a DLPack form
            raise TypeError(f"{spec!r} has no bridge dtype: its __dlpack_data_type__() raised "
                            f"{type(e).__name__}: {e}") from e  # fmt: skip
        return _from_dlpack_triple(spec, triple, "__dlpack_data_type__()")
    if isinstance(spec, type):
        found = _PYTHON_TYPES.get(spec)
        if found is not None:
            return found
    top = _top_module(spec)
    if top == "tvm_ffi" and hasattr(spec, "type_code"):  # a str subclass with the DLPack triple
        return _from_dlpack_triple(spec, (spec.type_code, spec.bits, spec.lanes), "tvm_ffi.dtype")
    if isinstance(spec, str):
        return _by_name(builtins.str(spec), spec)
    if spec is None:
        raise TypeError("dtype None: pass a dtype (bridge.float32, torch.float32, 'float32', ...)")
    if top not in ("numpy", "ml_dtypes", "jax", "jaxlib", "builtins") and "dtype" in type(spec).__name__.lower():
        # torch.dtype ("torch.float32"), mlx.core.Dtype ("mlx.core.float32"): their str()
        # is the module path and the name, which bridge shares where it has the type.
        text = builtins.str(spec)
        name = text.rpartition(".")[2]
        if text.startswith(top + ".") and name.isidentifier():
            found = _BY_NAME.get(name)
            if found is None or name not in _CANONICAL:
                raise TypeError(f"{text} has no bridge dtype")
            return found
    try:
        nd = np.dtype(spec)
    except (TypeError, ValueError):
        raise TypeError(f"cannot interpret {spec!r} as a dtype") from None
    return from_numpy_dtype(nd)


# Names foreign libraries give their types that mean the same type in bridge
# (bridge's aliases are torch's: "float" is float32 in torch, float64 elsewhere).
_CANONICAL = frozenset(d.name for d in _ALL)


# ---------------------------------------------------------------- promotion

_NARROW = frozenset(
    {float8_e3m4, float8_e4m3, float8_e4m3b11fnuz, float8_e4m3fn, float8_e4m3fnuz,
     float8_e5m2, float8_e5m2fnuz, float8_e8m0fnu, float6_e2m3fn, float6_e3m2fn, float4_e2m1fn}
)  # fmt: skip
_WIDE_UNSIGNED = frozenset({uint16, uint32, uint64})
_SIGNED_BY_RANK = {1: int8, 2: int16, 3: int32, 4: int64}
_FLOAT_ORDER = {float16: 1, bfloat16: 1, float32: 2, float64: 3}


def promote_types(type1: Any, type2: Any) -> dtype:
    """The smallest dtype both inputs can be cast to without losing their category,
    as ``torch.promote_types``.

    Like PyTorch, promotion is undefined (TypeError) between distinct float8/6/4
    types, between them and any other type, and between uint16/32/64 and
    anything but themselves and the floating types.
    """
    a, b = get_dtype(type1), get_dtype(type2)
    if a is b:
        return a
    if a in _NARROW or b in _NARROW:
        raise TypeError(f"promotion between {a} and {b} is not defined (as in PyTorch)")
    if a in _WIDE_UNSIGNED or b in _WIDE_UNSIGNED:
        other = b if a in _WIDE_UNSIGNED else a
        if other._kind != _FLOAT_K:
            raise TypeError(f"promotion between {a} and {b} is not defined (as in PyTorch)")
        return other
    ka, kb = a._kind, b._kind
    if ka == _BOOL_K:
        return b
    if kb == _BOOL_K:
        return a
    if ka == _INT_K and kb == _INT_K:
        # Only uint8 is unsigned here: it mixes with signed types into int16 at least.
        rank = builtins.max(a._rank, b._rank)
        if a is uint8 or b is uint8:
            rank = builtins.max(rank, 2)
        return _SIGNED_BY_RANK[rank]
    if ka == _COMPLEX_K or kb == _COMPLEX_K:
        c, other = (a, b) if ka == _COMPLEX_K else (b, a)
        if other._kind == _COMPLEX_K:
            return complex128 if complex128 in (a, b) else complex64
        if other is float64:
            return complex128
        return c
    if ka == _FLOAT_K and kb == _FLOAT_K:
        if {a, b} == {float16, bfloat16}:
            return float32
        return a if _FLOAT_ORDER[a] >= _FLOAT_ORDER[b] else b
    return a if ka == _FLOAT_K else b


def _combine(higher: dtype | None, lower: dtype | None) -> dtype | None:
    # PyTorch's combine_categories: the higher-priority operand wins unless the
    # lower one is of a higher category.
    if higher is None:
        return lower
    if lower is None:
        return higher
    if higher._kind == _COMPLEX_K:
        return higher
    if lower._kind == _COMPLEX_K:
        if higher._kind == _FLOAT_K:
            return higher.to_complex() if higher is not float64 else complex128
        return lower
    if higher._kind == _FLOAT_K:
        return higher
    if higher._kind == _BOOL_K or lower._kind == _FLOAT_K:
        return promote_types(higher, lower)
    return higher


def result_type(*operands: Any) -> dtype:
    """The dtype of an operation on ``operands`` (tensors, dtypes, Python scalars),
    by PyTorch's rules: dimensioned tensors outrank zero-dim tensors, which
    outrank Python scalars, unless a lower operand is of a higher category
    (bool < integral < floating < complex). Python ``float`` counts as float32
    and ``complex`` as complex64. A bare dtype counts as a dimensioned tensor.

    Divergence from PyTorch: bridge has no complex32, so float16 meeting a
    complex scalar gives complex64.
    """
    if not operands:
        raise TypeError("result_type() needs at least one operand")
    dim_r: dtype | None = None
    zero_r: dtype | None = None
    scalar_r: dtype | None = None
    for op in operands:
        if isinstance(op, builtins.bool):
            cur, slot = bool, 2
        elif isinstance(op, builtins.int):
            cur, slot = int64, 2
        elif isinstance(op, builtins.float):
            cur, slot = float32, 2
        elif isinstance(op, builtins.complex):
            cur, slot = complex64, 2
        elif hasattr(op, "dtype") and hasattr(op, "ndim"):
            cur = get_dtype(op.dtype)
            slot = 1 if op.ndim == 0 else 0
        else:
            cur, slot = get_dtype(op), 0
        if slot == 0:
            dim_r = cur if dim_r is None else promote_types(dim_r, cur)
        elif slot == 1:
            zero_r = cur if zero_r is None else promote_types(zero_r, cur)
        else:
            scalar_r = cur if scalar_r is None else promote_types(scalar_r, cur)
    out = _combine(dim_r, _combine(zero_r, scalar_r))
    assert out is not None
    return out


def can_cast(from_: Any, to: Any) -> builtins.bool:
    """Whether a value of ``from_`` may be cast to ``to`` under PyTorch's casting
    rules: complex cannot become real, floating cannot become integral, and only
    bool can become bool."""
    a, b = get_dtype(from_), get_dtype(to)
    if a._kind == _COMPLEX_K and b._kind != _COMPLEX_K:
        return False
    if a._kind == _FLOAT_K and b._kind in (_INT_K, _BOOL_K):
        return False
    if a._kind != _BOOL_K and b._kind == _BOOL_K:
        return False
    return True
