"""What each destination of :func:`bridge.convert` can hold: one table, as data.

One :class:`Holds` record per destination library says which layouts (negative,
zero and arbitrary strides, byte offsets, alignment), which dtypes, 0-d and
zero-size tensors, devices and read-only memory it takes as they are, and how
its own DLPack import is called. :func:`bridge.convert` compares a tensor with
its destination's record and makes the smallest fix the record asks for; the
interop matrix (``bridge.kit``) reads the same records.

The entries come from the libraries' behaviour, checked against the versions
the interop matrix runs (``docs/interop-matrix.md``): each record's ``note``
names what was seen. ``tests/crossing/test_convert.py`` holds every installed
destination to its record.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal

from bridge.core.native import _C

__all__ = ["Holds", "DESTINATIONS", "ML_DTYPES", "SUB_BYTE", "WIDE", "markdown_table", "Strides", "ReadOnly",
           "Capsule", "Route"]  # fmt: skip

#: Which strides a destination takes as they are: ``"any"`` (any positive
#: strides, overlapping ones too), ``"compact"`` (a permutation of a dense
#: tensor: no gaps, no overlap, as jax), ``"contiguous"`` (row-major only).
Strides = Literal["any", "compact", "contiguous"]
#: What a destination does with memory lent read-only: ``"keeps"`` (its
#: result says read-only: NumPy, pyarrow, bridge), ``"never-writes"`` (its
#: arrays are immutable: jax, polars, tensorflow), ``"writes"`` (its result is
#: writable and ignores DLPack's READ_ONLY flag: torch, paddle, ...).
ReadOnly = Literal["keeps", "never-writes", "writes"]
#: The DLPack capsule a destination's import asks for: ``"versioned"``
#: (``max_version`` >= 1: it can carry READ_ONLY), ``"legacy"`` (``"dltensor"``
#: only), or ``"none"`` (the destination does not take DLPack: Arrow).
Capsule = Literal["versioned", "legacy", "none"]
#: How ``convert`` hands a destination a tensor it holds as it is: ``"self"``
#: (bridge: the tensor itself), ``"dlpack"`` (its ``importer`` called on the
#: tensor; a dtype of ``dtype_views`` as NumPy's view of the same bytes),
#: ``"capsule"`` (its importer called on a capsule: it takes no object),
#: ``"arrow"`` (bridge's Arrow export: a primitive array for 1-d, a
#: FixedShapeTensorArray for N-d) and ``"arrow-column"`` (its ``result``
#: type made from that Arrow column: polars' Series).
Route = Literal["self", "dlpack", "capsule", "arrow", "arrow-column"]

_BASE = frozenset({"bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
                   "float16", "float32", "float64"})  # fmt: skip
#: The 64-bit dtypes (what jax holds only with ``jax_enable_x64``).
WIDE = frozenset({"int64", "uint64", "float64", "complex128"})
_COMPLEX = frozenset({"complex64", "complex128"})
#: The dtypes NumPy's DLPack import refuses and ml_dtypes names: exact names,
#: never a prefix (``float6`` is not ``float64``).
ML_DTYPES = frozenset({"bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
                       "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn",
                       "float6_e3m2fn", "float4_e2m1fn"})  # fmt: skip
#: The sub-byte dtypes (bridge stores them padded, one element a byte).
SUB_BYTE = frozenset({"float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"})
_FLOAT8_OCP = frozenset({"float8_e4m3fn", "float8_e5m2"})
_FLOAT8_TORCH = _FLOAT8_OCP | {"float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"}
_FLOAT8_ALL = ML_DTYPES - SUB_BYTE - {"bfloat16"}
_EVERY = _BASE | _COMPLEX | ML_DTYPES


@dataclasses.dataclass(frozen=True)
class Holds:
    """What one destination library can hold, and how its import is called.

    ``name``: the destination's name (``convert(x, "torch")``); ``module``: its
    import name; ``importer``: the call that takes a DLPack object (or the
    route, for the libraries without one); ``result``: the dotted name of
    the type ``convert`` returns; ``types``: the dotted names of types that
    name the destination (``convert(x, np.ndarray)``).

    Layout: ``strides`` (:data:`Strides`), ``negative_strides``,
    ``zero_strides`` (broadcast views), ``byte_offset`` (whether it honours
    DLPack's ``byte_offset``: bridge's exports always fold the offset into the
    data pointer), ``alignment`` (bytes the first element must be aligned to,
    0 for none), ``element_aligned`` (the dtypes whose first element must be
    aligned to the whole element's size: torch's and paddle's complex kernels
    crash on complex128 aligned to 8 bytes; Arrow asks every buffer to be
    aligned to its item size), ``nd_bool`` (whether it holds bool tensors of
    more than one dim: pyarrow's FixedShapeTensor of ``arrow.bool8`` values
    is not one pyarrow reads as a tensor); ``zero_d``; ``max_ndim`` (None: no limit); ``zero_width`` (whether
    it holds N-d tensors whose rows have no elements, a zero-size dim after the first).

    Memory: ``readonly`` (:data:`ReadOnly`), ``capsule`` (:data:`Capsule`),
    ``always_copies`` (its import never shares memory), ``devices`` (bridge
    device types it holds).

    Host memory: ``host_importer`` (the dotted path of a call taking a
    bridge tensor of host memory that is cheaper than ``importer`` and
    gives the same result; None: ``importer``).

    Identity: ``own_subclasses`` (whether an instance of a subclass of
    ``result`` is the destination's own object, which a same-library call
    returns itself as the library's own identity does: ``torch.as_tensor``
    keeps a Parameter, ``pa.array`` any Array, ``jnp.asarray`` any jax
    Array; ``np.asarray`` makes a memmap or a masked array a plain ndarray).

    Types: ``dtypes`` (bridge dtype names it holds as they are), ``dtype_views``
    (those it holds through another dtype of the same bits: NumPy's bfloat16
    and float8 through ml_dtypes). ``note``: what was seen, in a sentence.
    """

    name: str
    module: str
    importer: str
    result: str
    types: tuple[str, ...]
    strides: Strides
    negative_strides: bool
    zero_strides: bool
    byte_offset: bool
    alignment: int
    zero_d: bool
    max_ndim: int | None
    zero_width: bool
    readonly: ReadOnly
    capsule: Capsule
    always_copies: bool
    devices: frozenset[str]
    dtypes: frozenset[str]
    dtype_views: frozenset[str] = frozenset()
    element_aligned: frozenset[str] = frozenset()
    nd_bool: bool = True
    own_subclasses: bool = False
    host_importer: str | None = None
    note: str = ""
    route: Route = "dlpack"
    wide_setting: tuple[str, str] | None = None  # (module, attribute path): a flag without which no WIDE dtype

    def alignment_of(self, name: str, itemsize: int) -> int:
        """The bytes a tensor of dtype ``name`` (``itemsize`` bytes an element)
        must start at a multiple of, to be held as it is (1: any address)."""
        need = itemsize if name in self.element_aligned else 1
        return max(need, self.alignment, 1)

    def consumer(self) -> int:
        """What kind of consumer of lent memory this destination is, for the
        one lending decision (``_C.lend``): one that says read-only itself
        (``"keeps"``, or never writes and takes a versioned capsule or a
        struct), one that never writes but cannot be told (a legacy capsule:
        lent through a writable alias), or one that may write and cannot be
        told (``"writes"``: read-only memory is refused, then copied). A
        destination reached through Arrow (``route``) never writes by Arrow's
        rules (its buffers are immutable to both sides)."""
        if self.readonly == "writes":
            return _C.CONSUMER_UNFLAGGED
        if self.route in ("arrow", "arrow-column"):
            return _C.CONSUMER_IMMUTABLE
        if self.capsule == "legacy":
            return _C.CONSUMER_NEVER_WRITES
        return _C.CONSUMER_FLAGGED

    def gives_writable(self) -> bool:
        """Whether the arrays it gives can be written (``convert(writable=True)``
        can be met): not Arrow's (immutable to both sides), not those of a
        library that never writes its arrays (jax, tensorflow, polars)."""
        return self.readonly != "never-writes" and self.route not in ("arrow", "arrow-column")

    def holds_dtype(self, name: str) -> bool:
        """Whether the destination holds dtype ``name`` (as is or as a view)."""
        return name in self.dtypes or name in self.dtype_views


_CPU = frozenset({"cpu"})
_CPU_CUDA = frozenset({"cpu", "cuda"})


def _holds(name: str, module: str, importer: str, result: str, types: tuple[str, ...], **kw: object) -> Holds:
    defaults: dict[str, object] = dict(strides="any", negative_strides=True, zero_strides=True, byte_offset=True,
                                       alignment=0, zero_d=True, max_ndim=None, zero_width=True, readonly="writes",
                                       capsule="versioned", always_copies=False, devices=_CPU)  # fmt: skip
    defaults.update(kw)
    return Holds(name, module, importer, result, types, **defaults)  # type: ignore[arg-type]


_TABLE = (
    _holds("bridge", "bridge", "bridge.from_dlpack", "bridge.Tensor", ("bridge.Tensor",),
           readonly="keeps", devices=_CPU_CUDA, dtypes=_EVERY,
           route="self", note="every layout and dtype; read-only memory stays read-only"),
    _holds("numpy", "numpy", "numpy.from_dlpack", "numpy.ndarray", ("numpy.ndarray",),
           readonly="keeps", dtypes=_BASE | _COMPLEX, dtype_views=ML_DTYPES,
           note="refuses bfloat16, float8/6/4 (RuntimeError): viewed through ml_dtypes instead"),
    _holds("torch", "torch", "torch.from_dlpack", "torch.Tensor", ("torch.Tensor",),
           negative_strides=False, byte_offset=False, devices=_CPU_CUDA, own_subclasses=True,
           dtypes=_BASE | _COMPLEX | {"bfloat16"} | _FLOAT8_TORCH, element_aligned=_COMPLEX,
           note="aborts the process on negative strides; refuses a non-zero byte_offset (ValueError); writes "
                "through read-only memory; its complex kernels crash (SIGSEGV) on complex128 aligned to 8 "
                "bytes, not 16"),
    _holds("jax", "jax", "jax.dlpack.from_dlpack", "jax.Array", ("jax.Array", "jaxlib._jax.ArrayImpl"),
           strides="compact", negative_strides=False, zero_strides=False, alignment=64,
           readonly="never-writes", capsule="legacy", devices=_CPU_CUDA, own_subclasses=True,
           host_importer="bridge.crossing.destinations.jax_host_import",
           dtypes=_BASE | _COMPLEX | {"bfloat16"} | _FLOAT8_ALL,
           wide_setting=("jax", "config.jax_enable_x64"), note="refuses non-compact strides; copies views not 64-byte aligned; asks for legacy "
                "capsules only; 64-bit dtypes only with jax_enable_x64 (else int64 arrives as int32)"),
    _holds("paddle", "paddle", "paddle.from_dlpack", "paddle.Tensor", ("paddle.Tensor",),
           negative_strides=False, byte_offset=False, devices=_CPU_CUDA,
           dtypes=_BASE | _COMPLEX | {"bfloat16"} | _FLOAT8_OCP, element_aligned=_COMPLEX,
           note="ignores byte_offset; fails on negative strides (a bogus allocation); holds uint16/32/64 "
                "but has no kernels for them (its uint16 prints as paddle.bfloat16); writes through "
                "read-only memory; its complex kernels crash (SIGSEGV) on complex128 aligned to 8 bytes"),
    _holds("tvm_ffi", "tvm_ffi", "tvm_ffi.from_dlpack", "tvm_ffi.Tensor", ("tvm_ffi.Tensor",),
           devices=_CPU_CUDA, dtypes=_BASE | {"bfloat16"} | _FLOAT8_ALL,
           note="every layout; no complex; writable result over read-only memory"),
    _holds("mlx", "mlx.core", "mlx.core.from_dlpack", "mlx.core.array", ("mlx.core.array",),
           negative_strides=False, always_copies=True,
           dtypes=(_BASE - {"float64"}) | {"complex64", "bfloat16"},
           note="copies every import; refuses negative strides and float8; float64 arrives as float32"),
    _holds("onnxruntime", "onnxruntime", "onnxruntime.OrtValue.from_dlpack", "onnxruntime.OrtValue",
           ("onnxruntime.OrtValue",), strides="contiguous", negative_strides=False, zero_strides=False,
           capsule="legacy", devices=_CPU_CUDA, dtypes=_BASE | {"bfloat16"} | _FLOAT8_TORCH,
           note="refuses strides that are not row-major, and complex; asks for legacy capsules"),
    _holds("pyarrow", "pyarrow", "bridge.arrow.to_array / to_fixed_shape_tensor", "pyarrow.Array",
           ("pyarrow.Array",), strides="contiguous", negative_strides=False, zero_strides=False, zero_d=False,
           readonly="keeps", capsule="none", dtypes=_BASE, element_aligned=_BASE, nd_bool=False,
           own_subclasses=True, route="arrow", note="1-d as a primitive Array, N-d as a FixedShapeTensorArray (first dim the batch; not bool, "
                "whose arrow.bool8 values pyarrow's tensor API refuses); Arrow data is immutable and aligned "
                "to its item size"),
    _holds("polars", "polars", "polars.Series over bridge.arrow.to_array", "polars.Series", ("polars.Series",),
           strides="contiguous", negative_strides=False, zero_strides=False, zero_d=False, max_ndim=2,
           zero_width=False, readonly="never-writes", capsule="none", dtypes=_BASE - {"bool"},
           element_aligned=_BASE - {"bool"},
           route="arrow-column", note="1-d as a Series, 2-d as an Array column; booleans are bits in polars (no bool); its Arrow "
                "import panics on rows of zero elements"),
    _holds("tensorflow", "tensorflow", "tensorflow.experimental.dlpack.from_dlpack", "tensorflow.Tensor",
           ("tensorflow.Tensor",), strides="contiguous", negative_strides=False, zero_strides=False,
           alignment=64, readonly="never-writes", capsule="legacy", devices=_CPU_CUDA,
           dtypes=_BASE | _COMPLEX | {"bfloat16"},
           route="capsule", note="refuses strides (InvalidArgumentError); takes legacy capsules only; aborts later on "
                "unaligned memory"),
    _holds("cupy", "cupy", "cupy.from_dlpack", "cupy.ndarray", ("cupy.ndarray",),
           devices=frozenset({"cuda"}), dtypes=_BASE | _COMPLEX,
           note="CUDA memory only"),
)

#: Every destination :func:`bridge.convert` knows, by name.
DESTINATIONS: Mapping[str, Holds] = MappingProxyType({h.name: h for h in _TABLE})


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _dtype_cell(h: Holds) -> str:
    missing = sorted(_EVERY - h.dtypes - h.dtype_views)
    kept = "all" if not missing else "all but " + ", ".join(missing)
    if h.dtype_views:
        views = "bfloat16 and the float8/6/4 types" if h.dtype_views == ML_DTYPES else ", ".join(sorted(h.dtype_views))
        kept += f" ({views} through ml_dtypes)"
    return kept


def _alignment_cell(h: Holds) -> str:
    parts = [str(h.alignment)] if h.alignment else []
    if h.element_aligned:
        parts.append("item size" if h.element_aligned == h.dtypes else
                     "element for " + ", ".join(sorted(h.element_aligned)))  # fmt: skip
    return "; ".join(parts) or "-"


def markdown_table() -> str:
    """The table as Markdown: one row per destination, one column per
    capability (what ``docs/convert.md`` shows between its
    ``capabilities`` markers)."""
    head = ("| destination | import | strides | negative | zero | byte_offset | alignment | 0-d | ndim | "
            "read-only | capsule | shares | devices | dtypes |")  # fmt: skip
    rows = [head, "|" + "---|" * 14]
    for h in _TABLE:
        rows.append(
            f"| {h.name} | `{h.importer}` | {h.strides} | {_yes(h.negative_strides)} | {_yes(h.zero_strides)} | "
            f"{_yes(h.byte_offset)} | {_alignment_cell(h)} | {_yes(h.zero_d)} | "
            f"{'any' if h.max_ndim is None else '<= ' + str(h.max_ndim)} | {h.readonly} | {h.capsule} | "
            f"{'never (copies)' if h.always_copies else 'yes'} | {', '.join(sorted(h.devices))} | "
            f"{_dtype_cell(h)} |"
        )
    rows.append("")
    rows += [f"- **{h.name}**: {h.note}." for h in _TABLE]
    return "\n".join(rows)
