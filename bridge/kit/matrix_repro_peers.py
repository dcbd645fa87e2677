"""The code templates a matrix reproducer is written from
(:mod:`bridge.kit.matrix_repro`): how each peer makes a case's tensor
(:data:`PRODUCERS`), how each takes it through each protocol and how its
result is read back (:data:`CONSUMERS`), and how each layout is spelled in
each library's indexing (:data:`LAYOUTS`).

They are data, not code: a template is a line of Python with names the
reproducer defines before it (``np``; ``base``, the 4x12 NumPy tensor of the
case's dtype; ``ref``, the case as a NumPy view of it; ``b``, the producer's
own base; ``x``, the producer's tensor; ``y``, the consumer's result; ``v``, a
value to write). A peer joins the reproducers by adding its records here; a
cell whose peer or protocol has no record (or whose record lacks what its
rule needs) gets the reproducer that re-runs the cell through bridge's kit
(:func:`bridge.kit.matrix_repro.reproducer` says which).

Each template mirrors the matrix's own code for the same peer
(:func:`bridge.kit.matrix_peers.produce`, :func:`bridge.kit.matrix_peers.consumers`,
:mod:`bridge.kit.matrix_frameworks`): a reproducer that makes its tensor
otherwise would reproduce another cell. ``tests/kit/test_matrix_repro.py`` runs
the reproducers of a real run, each must fail as its cell says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Producer", "Consumer", "PRODUCERS", "CONSUMERS", "LAYOUTS", "LAYOUT_WORDS", "MODULES", "HELPERS"]


@dataclass(frozen=True)
class Producer:
    """How a peer makes ``x``, the case's tensor.

    ``make`` is an expression over NumPy's ``base`` for the library's own 4x12
    base tensor (``b``), which the case's layout is then applied to in the
    indexing of ``family`` (a key of :data:`LAYOUTS`' spellings); with
    ``family`` empty, ``make`` is ``x`` itself, an expression over ``ref``
    (libraries that wrap or copy the NumPy view: its layout comes with it).
    ``special`` replaces the whole ``x = ...`` line for a read-only source,
    the component-aligned layout, one dtype or one other layout (keys ``"ro"``,
    ``"component-aligned"``, a dtype, a layout: the first that matches, in
    that order, as the matrix's producers branch; ``{view}`` in it is the
    layout applied to ``b``, ``{dtype}`` the dtype's name). ``flat``: an Arrow producer,
    whose tensor is the case's values flat (``expected`` is flattened too).
    ``address`` is the first element's address, for the ``copy`` rule; empty
    where the library does not tell it. ``shares``: ``x`` is NumPy's memory
    (``base``'s), so the script places ``base`` where the matrix's tensor lay
    (the same alignment: jax, for one, shares 64-byte aligned memory only)."""

    imports: tuple[str, ...]
    make: str
    family: str = ""
    special: Mapping[str, str] = field(default_factory=dict)
    flat: bool = False
    address: str = ""
    shares: bool = False


@dataclass(frozen=True)
class Consumer:
    """How a peer takes ``x`` (``takes``: protocol -> expression) and what it
    can say of its result ``y``: its values as a NumPy array (``values``),
    its dtype as bridge names it (``dtype``), one element written with the
    library's own API (``poke``, writes ``v``), whether it says it is
    writable (``writable``: judged as the matrix judges it, for the reference
    consumers NumPy and bridge only, so only they have it), its first element's address (``address``) and
    one computation of the library's own kernels on it (``compute``, an
    expression giving a new result read back with ``values``). An empty
    template: the library has no such thing, and a rule that needs it gets
    the kit's reproducer. ``notes``: protocol -> why its call needs bridge
    (a protocol that has no Python call of its own)."""

    imports: tuple[str, ...]
    takes: Mapping[str, str]
    values: str = "np.asarray(y)"
    dtype: str = 'str(y.dtype).rsplit(".", 1)[-1]'
    poke: str = "y[(0,) * y.ndim] = v"
    writable: str = ""
    address: str = ""
    compute: str = ""
    notes: Mapping[str, str] = field(default_factory=dict)


#: A layout applied to the name ``b``, per library family (``numpy``; ``torch``:
#: torch and bridge; ``mlx``); a family not listed spells it as ``numpy`` does.
#: component-aligned is NumPy memory placed so (the script's ``placed``), which
#: the producers wrap (``special``), so it has no spelling here but NumPy's.
LAYOUTS: dict[str, dict[str, str]] = {
    "contiguous": {"numpy": "b"},
    "transposed": {"numpy": "b.T"},
    "stepped": {"numpy": "b[::2, 1::3]"},
    "negative": {"numpy": "b[::-1, ::-2]"},
    "broadcast": {"numpy": "np.broadcast_to(b[0], (3, 12))", "torch": "b[0].expand(3, 12)",
                  "mlx": "mx.broadcast_to(b[0], (3, 12))"},
    "size1-odd": {"numpy": "np.lib.stride_tricks.as_strided(b, (4, 1), (12 * b.itemsize, 7 * b.itemsize))",
                  "torch": "b.as_strided((4, 1), (12, 7))", "mlx": "mx.as_strided(b, (4, 1), (12, 7))"},
    "component-aligned": {"numpy": "placed(b.reshape(-1)[:15].reshape(3, 5))"},
    "0-d": {"numpy": "b[1:2, 1:2].reshape(())", "torch": "b[1, 1]", "mlx": "b[1, 1]"},
    "zero-size": {"numpy": "b[:, 5:5]"},
    # the new layouts (bridge.kit.matrix_layouts.apply): NumPy makes each; the producers that
    # make them from it say so in their ``special``
    "byte-misaligned": {"numpy": "misaligned(b.reshape(-1)[:15].reshape(3, 5))"},
    "big-endian": {"numpy": "b.astype(b.dtype.newbyteorder('>'))"},
    "chunked": {"numpy": "b.reshape(-1)"},
    **{layout: {"numpy": "b"} for layout in ("device-tpu", "device-tpu-host", "device-ascend", "code-bcomplex")},
}  # fmt: skip

#: A layout in words, for an issue's text.
LAYOUT_WORDS = {
    "contiguous": "a C-contiguous 4x12 tensor",
    "transposed": "the transpose of a 4x12 tensor (strides reversed)",
    "stepped": "the view [::2, 1::3] of a 4x12 tensor (stepped strides)",
    "negative": "the view [::-1, ::-2] of a 4x12 tensor (negative strides)",
    "broadcast": "row 0 of a 4x12 tensor broadcast to 3x12 (stride 0)",
    "size1-odd": "a 4x1 view with the odd stride 7 on its size-1 dim",
    "component-aligned": "15 contiguous elements whose first sits half an element past an element boundary "
                         "(complex: aligned to its component, not its element)",
    "0-d": "a 0-d tensor (one element of a 4x12 tensor)",
    "zero-size": "the zero-size 4x0 view [:, 5:5] of a 4x12 tensor",
    "byte-misaligned": "15 contiguous elements (3x5) whose first sits at an odd address, one byte past an "
                       "element boundary",
    "big-endian": "a C-contiguous 4x12 tensor in big-endian byte order",
    "chunked": "the 48 values of a 4x12 tensor in two Arrow chunks of 24 (an Arrow stream)",
    "device-tpu": "a 4x12 host tensor in a DLPack capsule made by hand that says device type 19 (kDLTPU)",
    "device-tpu-host": "a 4x12 host tensor in a DLPack capsule made by hand that says device type 20 (kDLTPUHost)",
    "device-ascend": "a 4x12 host tensor in a DLPack capsule made by hand that says device type 21 (kDLAscend)",
    "code-bcomplex": "a 4x6 tensor of bcomplex32 (DLPack type code 18: (real, imag) bfloat16 pairs) in a "
                     "capsule made by hand",
}  # fmt: skip

#: Definitions a layout's script makes before its case (the names its
#: spellings and producers use): ``misaligned`` places NumPy memory at an odd
#: address; ``Handmade`` is a DLPack producer over a NumPy array's memory whose
#: capsules are built with ctypes (DLPack main's codes, which no library makes).
_MISALIGNED = '''def misaligned(values, raw=None):
    """A copy of values whose first element sits at an odd address (one byte past an element boundary)."""
    size = values.dtype.itemsize
    if size < 2:  # a one-byte element is aligned at every address
        return values
    raw = np.zeros(values.nbytes + 2 * size, np.uint8) if raw is None else raw
    at = next(k for k in range(2 * size) if (raw.ctypes.data + k) % size == 1)
    out = np.ndarray(values.shape, values.dtype, buffer=raw, offset=at)
    out[...] = values
    return out
'''
_HANDMADE = '''import ctypes


class DLTensor(ctypes.Structure):  # dlpack.h, DLDevice and DLDataType inlined
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


capsule_new = ctypes.pythonapi.PyCapsule_New
capsule_new.restype, capsule_new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
KEEP = []  # every struct lives as long as the process (its deleter is NULL, as dlpack.h allows)


class Handmade:
    """A DLPack v1.3 producer lending a C-contiguous array's memory under a type code and device type of its own."""

    def __init__(self, a, device_type, code=None):
        self.a, self.device_type = a, device_type
        self.code = code if code is not None else 4 if a.dtype.name == "bfloat16" else "iuf..cb".index(a.dtype.kind)

    def __dlpack_device__(self):
        return (self.device_type, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if copy or (dl_device is not None and tuple(dl_device) != self.__dlpack_device__()):
            raise BufferError("lends its memory, on its own device, only")
        versioned = max_version is not None and max_version[0] >= 1
        m = DLManagedTensorVersioned(major=1, minor=3) if versioned else DLManagedTensor()
        dims = (ctypes.c_int64 * (2 * self.a.ndim))(*self.a.shape, *(s // self.a.itemsize for s in self.a.strides))
        t, int64p = m.dl_tensor, ctypes.POINTER(ctypes.c_int64)
        t.data, t.device_type, t.ndim = self.a.ctypes.data, self.device_type, self.a.ndim
        t.code, t.bits, t.lanes = self.code, 8 * self.a.itemsize, 1
        t.shape, t.strides = ctypes.cast(dims, int64p), ctypes.cast(ctypes.byref(dims, 8 * self.a.ndim), int64p)
        KEEP.append((m, dims, self.a))
        return capsule_new(ctypes.addressof(m), b"dltensor_versioned" if versioned else b"dltensor", None)
'''
HELPERS = {"byte-misaligned": _MISALIGNED,
           **{layout: _HANDMADE for layout in ("device-tpu", "device-tpu-host", "device-ascend", "code-bcomplex")}}

#: A peer's import name where it is not the peer's name (the modules a
#: reproducer may import: its two peers', NumPy's and ml_dtypes').
MODULES = {"pydlpack": "dlpack", "mlx": "mlx", "array_api_strict": "array_api_strict", "cuda_core": "cuda"}

_NUMPY_RO = "x = ref; x.flags.writeable = False"
# bridge's read-only tensors are read-only NumPy memory it was lent.
_BRIDGE_RO = "frozen = ref.view(); frozen.flags.writeable = False; x = bridge.from_numpy(frozen)"
# bridge views its own (aligned) storage from half an element in, as the matrix does.
_BRIDGE_ALIGNED = (
    "store = bridge.empty(ref.nbytes + 2 * ref.itemsize, dtype=bridge.uint8); raw = np.asarray(store.memoryview()); "
    "at = placed(ref, raw).ctypes.data - raw.ctypes.data; "
    "x = bridge.frombuffer(store.memoryview(), dtype=bridge.{dtype}, count=ref.size, offset=at).reshape(ref.shape)"
)  # fmt: skip
_BRIDGE_MISALIGNED = _BRIDGE_ALIGNED.replace("placed(ref, raw)", "misaligned(ref, raw)")
_ARROW_FLAT = "np.ascontiguousarray(ref).reshape(-1)"
# chunked: two chunks of 24, each a copy of its half (the matrix's own Arrow producers)
_HALVES = ("ref[:24].copy()", "ref[24:].copy()")

PRODUCERS: dict[str, Producer] = {
    "numpy": Producer((), "ref", special={"ro": _NUMPY_RO}, address="x.ctypes.data", shares=True),
    "bridge": Producer(("import bridge",), "bridge.tensor(base)", "torch",
                       special={"ro": _BRIDGE_RO, "component-aligned": _BRIDGE_ALIGNED,
                                "byte-misaligned": _BRIDGE_MISALIGNED},
                       address="x.data_ptr()"),
    "torch": Producer(("import torch",), "torch.from_numpy(base)", "torch", shares=True, special={
        "component-aligned": "x = torch.from_numpy(ref.view(np.uint16)).view(torch.bfloat16) "
                             "if ref.dtype.name == 'bfloat16' else torch.from_numpy(ref)",
        "bfloat16": "b = torch.from_numpy(base.astype(np.float32)).to(torch.bfloat16); x = {view}",
        "byte-misaligned": "x = torch.from_numpy(ref)",
    }, address="x.data_ptr()"),
    "jax": Producer(("import jax.numpy as jnp",), "jnp.asarray(np.array(ref, copy=True))",
                    address="x.unsafe_buffer_pointer()"),
    "pyarrow": Producer(("import pyarrow as pa",), f"pa.array({_ARROW_FLAT})", flat=True, special={
        "chunked": "x = pa.chunked_array([{}])".format(", ".join(f"pa.array({h})" for h in _HALVES))},
        address="x.buffers()[1].address + x.offset * x.type.bit_width // 8", shares=True),  # (numbers: NumPy's memory)
    "polars": Producer(("import polars as pl",), f"pl.Series({_ARROW_FLAT})", flat=True, special={
        "chunked": "x = pl.concat([{}], rechunk=False)".format(", ".join(f"pl.Series({h})" for h in _HALVES))}),
    "nanoarrow": Producer(("import nanoarrow as na",), f"na.c_array({_ARROW_FLAT})", flat=True),
    # pandas: chunked is a Series of Arrow's type whose two chunks concat keeps (no pyarrow import)
    "pandas": Producer(("import pandas as pd",), f"pd.Series({_ARROW_FLAT})", flat=True, special={
        "chunked": "x = pd.concat([{}], ignore_index=True)".format(
            ", ".join(f'pd.Series({h}, dtype="{{dtype}}[pyarrow]")' for h in _HALVES))}),
    "xarray": Producer(("import xarray as xr",), f'xr.DataArray({_ARROW_FLAT}, dims=["x"])', flat=True),
    # these three wrap NumPy's memory as it is: their first element is ref's (none of them says its address)
    "tvm_ffi": Producer(("import tvm_ffi",), "tvm_ffi.from_dlpack(ref)", shares=True, address="ref.ctypes.data"),
    "pydlpack": Producer(("import dlpack",), "dlpack.asdlpack(ref)", shares=True, address="ref.ctypes.data"),
    "array_api_strict": Producer(("import array_api_strict as xp",), "xp.asarray(ref)", shares=True,
                                 address="ref.ctypes.data"),
    "onnxruntime": Producer(("import onnxruntime as ort",),
                            "ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(ref).reshape(ref.shape))",
                            address="x.data_ptr()", shares=True),
    # paddle: its own strided views where it has them, else compact copies; its bfloat16 by a cast;
    # the misaligned layout its one zero-copy constructor over NumPy's memory.
    "paddle": Producer(("import paddle",), "paddle.to_tensor(np.ascontiguousarray(ref).reshape(ref.shape))", special={
        "component-aligned": "x = paddle.from_dlpack(ref.view(np.int16)).view(paddle.bfloat16) "
                             "if ref.dtype.name == 'bfloat16' else paddle.from_dlpack(ref)",
        "bfloat16": "x = paddle.to_tensor(np.ascontiguousarray(ref.astype(np.float32)).reshape(ref.shape))"
                    ".astype('bfloat16')",
        "transposed": "x = paddle.to_tensor(np.ascontiguousarray(ref.T)).T",
        "byte-misaligned": "x = paddle.from_dlpack(ref)",
    }, address="x.data_ptr()"),
    "mlx": Producer(("import mlx.core as mx",), "mx.array(base)", "mlx", special={
        "bfloat16": "b = mx.array(base.astype(np.float32)).astype(mx.bfloat16); x = {view}",
    }),
    "arro3": Producer(("from arro3.core import Array",), f"Array.from_numpy({_ARROW_FLAT})", flat=True),
    "narwhals": Producer(("import narwhals as nw",), f'nw.new_series("a", {_ARROW_FLAT}, backend="pyarrow")',
                         flat=True),
    "datafusion": Producer(("import datafusion",), f'datafusion.SessionContext().from_pydict({{"a": {_ARROW_FLAT}}})',
                           flat=True),
    # duckdb: the matrix's relation is over a pyarrow Table; the script scans a dict of NumPy arrays
    # (DuckDB's replacement scan), the same one float column, without a third library.
    "duckdb": Producer(("import duckdb",), 'duckdb.connect().sql("select * from d")', special={
        "contiguous": f'd = {{"a": {_ARROW_FLAT}}}; x = duckdb.connect().sql("select * from d")',
    }, flat=True),
    # cuda.core: a StridedMemoryView of NumPy's memory; NumPy's DLPack export has no bfloat16, so that
    # case is a view of bridge's export of the same memory, as in the matrix.
    "cuda_core": Producer(("from cuda.core.utils import StridedMemoryView",),
                          "StridedMemoryView.from_dlpack(ref, stream_ptr=-1)", address="x.ptr", shares=True, special={
        "bfloat16": "import bridge; x = StridedMemoryView.from_dlpack(bridge.from_numpy(ref), stream_ptr=-1)",
    }),
    # MAX: a Buffer over the 4x12 base (a fresh copy, as the matrix's is), laid out by slicing (as torch
    # indexes: b[1, 1] is 0-d); it wraps NumPy's memory, so the base is placed as the matrix's lay.
    "max": Producer(("from max.driver import Buffer", "from max.dtype import DType"), "Buffer.from_numpy(base)",
                    "torch", special={
        "bfloat16": "b = Buffer.from_numpy(base.view(np.uint16)).view(DType.bfloat16); x = {view}",
    }, address="x._data_ptr()", shares=True),
    # the kit's hand-made capsules (DLPack main's codes) over the case's memory: HELPERS' Handmade
    "handmade": Producer((), "Handmade(ref, 1)", shares=True, special={
        "device-tpu": "x = Handmade(ref, 19)", "device-tpu-host": "x = Handmade(ref, 20)",
        "device-ascend": "x = Handmade(ref, 21)", "code-bcomplex": "x = Handmade(ref.view(np.uint32), 1, code=18)",
    }, address="x.a.ctypes.data"),
}  # fmt: skip

_D = "dlpack"
_C_API = "dlpack-c-api"
# The C exchange API has no Python call: bridge's test driver hands the
# producer type's table to the consumer type's, both sides' own C functions.
_API_NOTE = ("the DLPack C exchange API has no Python call of its own: bridge's test driver "
             "(`bridge._drivers.api_convert`) calls the producer type's and the consumer type's tables")  # fmt: skip
_API = "_drivers.api_convert(type(x).__dlpack_c_exchange_api__, {lib}.Tensor.__dlpack_c_exchange_api__, x)"


def _dlpack(fn: str, device: str = '"cpu"') -> dict[str, str]:
    return {_D: f"{fn}(x)", "dlpack-copy": f"{fn}(x, copy=True)", "dlpack-device": f"{fn}(x, device={device})"}


CONSUMERS: dict[str, Consumer] = {
    "numpy": Consumer((), {**_dlpack("np.from_dlpack"), "array-interface": "np.asarray(x)",
                           "buffer": "np.asarray(memoryview(x))"},
                      writable="y.flags.writeable", address="y.ctypes.data"),
    "bridge": Consumer(("import bridge",), {**_dlpack("bridge.from_dlpack"), "array-interface": "bridge.asarray(x)",
                                            "arrow": "bridge.from_arrow(x)",
                                            "arrow-device-stream": "bridge.from_arrow(x.__arrow_c_device_stream__())",
                                            _C_API: _API.format(lib="bridge")},
                       values="y.numpy()", dtype="y.dtype.name", writable="not y.is_readonly",
                       address="y.data_ptr()", notes={_C_API: _API_NOTE}),
    "torch": Consumer(("import torch",), {**_dlpack("torch.from_dlpack"), "array-interface": "torch.as_tensor(x)",
                                          _C_API: _API.format(lib="torch")},
                      values="(y.float() if y.dtype == torch.bfloat16 else y).numpy()", address="y.data_ptr()",
                      compute="y.clone()", notes={_C_API: _API_NOTE}),
    "jax": Consumer(("import jax",), {**_dlpack("jax.dlpack.from_dlpack", 'jax.devices("cpu")[0]'),
                                      "jax-array": "jax.numpy.asarray(x)"},
                    poke="", address="y.unsafe_buffer_pointer()"),
    "paddle": Consumer(("import paddle",), {**_dlpack("paddle.from_dlpack"), "array-interface": "paddle.to_tensor(x)",
                                            _C_API: _API.format(lib="paddle")},
                       values="(y.astype('float32') if y.dtype == paddle.bfloat16 else y).numpy()",
                       address="y.data_ptr()", compute="y * 1", notes={_C_API: _API_NOTE}),
    "mlx": Consumer(("import mlx.core as mx",), {_D: "mx.from_dlpack(x)", "dlpack-copy": "mx.from_dlpack(x, copy=True)",
                                                 "buffer": "mx.array(memoryview(x))", "array-interface": "mx.array(x)"},
                    values="np.array(y.astype(mx.float32) if y.dtype == mx.bfloat16 else y)"),
    "onnxruntime": Consumer(("import onnxruntime as ort",), {_D: "ort.OrtValue.from_dlpack(x)"},
                            values="y.numpy()", dtype="", poke="", address="y.data_ptr()"),
    "array_api_strict": Consumer(("import array_api_strict as xp",),
                                 {**_dlpack("xp.from_dlpack", "xp.asarray(0).device"),
                                  "buffer": "xp.asarray(memoryview(x))"},
                                 values="np.asarray(y._array)"),
    "tvm_ffi": Consumer(("import tvm_ffi",), {_D: "tvm_ffi.from_dlpack(x)", _C_API: "tvm_ffi.from_dlpack(x)"},
                        values="np.from_dlpack(y)", dtype="str(y.dtype)", poke=""),
    "pyarrow": Consumer(("import pyarrow as pa",), {"arrow": "pa.array(x)"},
                        values="y.to_numpy(zero_copy_only=False)", dtype="", poke=""),
    "polars": Consumer(("import polars as pl",), {"arrow": "pl.Series(x)"}, values="y.to_numpy()", dtype="", poke=""),
    "nanoarrow": Consumer(("import nanoarrow as na",), {"arrow": "na.c_array(x)"},
                          values="np.array(na.Array(y).to_pylist())", dtype="", poke=""),
    "pandas": Consumer(("import pandas as pd",), {"arrow": "pd.Series.from_arrow(x)"}, values="y.to_numpy()",
                       dtype="", poke=""),
    "xarray": Consumer(("import xarray as xr",), {"array-interface": "xr.DataArray(x)"}, values="y.values"),
    # arro3: an N-d array arrives as a fixed-size list (one row per list), which its to_numpy does not read
    "arro3": Consumer(("from arro3.core import Array",), {"arrow": "Array.from_arrow(x)"},
                      values='np.array(y.to_pylist()) if "FixedSizeList" in str(y.type) else y.to_numpy()',
                      dtype="", poke=""),
    # the table consumers: the values are the first column's
    "narwhals": Consumer(("import narwhals as nw",), {"arrow": 'nw.from_arrow(x, backend="pyarrow")'},
                         values="y[y.columns[0]].to_numpy()", dtype="", poke=""),
    "datafusion": Consumer(("import datafusion",), {"arrow": "datafusion.SessionContext().from_arrow(x)"},
                           values="y.to_arrow_table().column(0).to_numpy()", dtype="", poke=""),
    "duckdb": Consumer(("import duckdb",), {"arrow": "duckdb.connect().from_arrow(x)"},
                       values="y.fetchnumpy()[y.columns[0]]", dtype="", poke=""),
    # cuda.core's view read back through its own DLPack export
    "cuda_core": Consumer(("from cuda.core.utils import StridedMemoryView",),
                          {_D: "StridedMemoryView.from_dlpack(x, stream_ptr=-1)",
                           _C_API: "_drivers.api_convert(type(x).__dlpack_c_exchange_api__, "
                                   "StridedMemoryView.__dlpack_c_exchange_api__, x)"},
                          values="np.from_dlpack(y)", dtype="str(y.dtype)", poke="", address="y.ptr",
                          notes={_C_API: _API_NOTE}),
    # MAX: to_numpy has no bfloat16: its bits, read as uint16 (view() needs a 0-d buffer's shape)
    "max": Consumer(("from max.driver import Buffer", "from max.dtype import DType"),
                    {_D: "Buffer.from_dlpack(x)", "dlpack-copy": "Buffer.from_dlpack(x, copy=True)"},
                    values="y.view(DType.uint16, tuple(y.shape)).to_numpy().view(ml_dtypes.bfloat16) "
                           "if y.dtype == DType.bfloat16 else y.to_numpy()",
                    poke="y[(0,) * y.rank] = v", address="y._data_ptr()"),
}  # fmt: skip
