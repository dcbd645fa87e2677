"""The matrix's layouts that real peers break on (issue 35): each made by
every producer that can make it (:func:`produce`; the others' cells are
``n/a``), with the rule a broken cell names (:data:`RULE_OF`).

- ``byte-misaligned``: 3x5 contiguous elements whose first sits at an odd
  address, aligned to no item size (``component-aligned`` sits half an
  element off: for two-byte items that is the same address, so their cells
  here are ``n/a``, as are the one-byte dtypes', every address being
  element-aligned). dlpack.h promises a 256-byte aligned ``data`` and says
  in the same breath "it is recommended to not rely on the data pointer
  being correctly aligned"; NumPy exports such memory: the ``alignment``
  rule.
- ``big-endian``: the 4x12 base in big-endian byte order (``'>f4'``).
  DLPack has no byte order ("assumed to follow the native endian-ness. An
  explicit error message should be raised when attempting to export an
  array with non-native endianness"); the buffer protocol and the array
  interface carry it in the format: the ``byte-order`` rule. NumPy makes it,
  and onnxruntime wraps such NumPy memory (reading it as native: its cells
  are its own violation, :class:`MadeWrong`); bridge, torch, jax, paddle,
  mlx and the Arrow producers keep native byte order only.
- ``chunked``: the 48 values in two Arrow chunks of 24 (a pyarrow
  ChunkedArray, a polars Series of two chunks, a pandas Series over the
  ChunkedArray), exported through ``__arrow_c_stream__`` (none of them has
  ``__arrow_c_array__`` or ``__dlpack__`` for it): the ``chunks`` rule.
- ``device-tpu``, ``device-tpu-host``, ``device-ascend``, ``code-bcomplex``:
  DLPack main's codes, after v1.3 (``cdefs/dlpack_next.h``: kDLTPU 19,
  kDLTPUHost 20, kDLAscend 21, kDLBcomplex 18), which no library makes yet:
  the ``handmade`` producer, capsules the kit builds by hand
  (:class:`bridge.kit.capsules.Handmade`) over host memory, is their only
  producer: the ``unknown-code`` rule.

This module imports no other module of the kit at import time
(:mod:`bridge.kit.matrix_frameworks` reads it for :func:`apply`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # (matrix_grid reads this module: the types are imported for the checker only)
    from bridge.kit.matrix_grid import Cell
    from bridge.kit.matrix_peers import Consumer

__all__ = ["BYTE_MISALIGNED", "BIG_ENDIAN", "CHUNKED", "BCOMPLEX", "DEVICE_LAYOUTS", "HANDMADE_LAYOUTS",
           "NEW_LAYOUTS", "HANDMADE", "HANDMADE_PROTOCOLS", "MISALIGNED_SHAPE", "LAYOUT_DTYPES", "RULE_OF",
           "COPY_REASON", "UNRECORDED", "RISKY_LAYOUTS", "FORK_SAFE_MAKERS", "risky", "place_misaligned", "apply", "planned", "produce",
           "first_chunk_address", "HandmadeProducer", "judged_on_taking", "MadeWrong"]  # fmt: skip

BYTE_MISALIGNED = "byte-misaligned"
BIG_ENDIAN = "big-endian"
CHUNKED = "chunked"
BCOMPLEX = "code-bcomplex"
#: The device layouts and the DLDeviceType of each (DLPack main).
DEVICE_LAYOUTS = {"device-tpu": 19, "device-tpu-host": 20, "device-ascend": 21}
_DEVICE_NAMES = {1: "CPU", 19: "TPU", 20: "TPUHost", 21: "Ascend"}
#: DLPack main's device types whose memory the host reads (as bridge's device table says).
_HOST_READABLE = (20,)
#: The layouts of DLPack main's codes: made by the ``handmade`` producer only.
HANDMADE_LAYOUTS = (*DEVICE_LAYOUTS, BCOMPLEX)
NEW_LAYOUTS = (BYTE_MISALIGNED, BIG_ENDIAN, CHUNKED, *HANDMADE_LAYOUTS)
#: The kit's producer of hand-made capsules (a matrix peer that consumes nothing).
HANDMADE = "handmade"
#: The protocols the ``handmade`` producer's objects speak (``__dlpack__``
#: and ``__dlpack_device__``, nothing else) and that judge DLPack's codes:
#: the consumers' own ``from_dlpack`` and ``bridge.convert``.
HANDMADE_PROTOCOLS = ("dlpack", "bridge-convert", "bridge-convert-batch")
#: The ``byte-misaligned`` shape: ``component-aligned``'s 15 elements (an odd
#: count, 3 mod 4, so every vectorised loop over it ends in a scalar tail).
MISALIGNED_SHAPE = (3, 5)
#: The dtypes each layout crosses when several dtypes are asked for (the
#: default grid, kept fit for ``make run``); a single ``--dtype`` crosses
#: every layout. ``byte-misaligned``: an item of 4 bytes and one of 16
#: (complex128 is what torch's and paddle's kernels fault on; int64 and
#: complex64 add a minute of cells and no finding); ``big-endian``: the kinds
#: with a byte order; ``chunked``: Arrow's bit-packed bools and three widths;
#: the device layouts: a plain dtype and one that is not NumPy's own.
LAYOUT_DTYPES: dict[str, tuple[str, ...]] = {
    BYTE_MISALIGNED: ("float32", "complex128"),
    BIG_ENDIAN: ("int64", "float16", "float32", "complex128"),
    CHUNKED: ("bool", "int64", "float16", "float32"),
    **{layout: ("float32", "bfloat16") for layout in DEVICE_LAYOUTS},
    BCOMPLEX: ("bfloat16",),
}
#: The rule a broken cell of each layout names, in place of ``values`` /
#: ``strides`` (and, for ``chunked``, of ``shape``): a key of
#: :data:`bridge.kit.rules.RULES`.
RULE_OF = {BYTE_MISALIGNED: "alignment", BIG_ENDIAN: "byte-order", CHUNKED: "chunks",
           **{layout: "unknown-code" for layout in HANDMADE_LAYOUTS}}  # fmt: skip
#: Why a copy of each layout copied, where the layout says it (the kinds of
#: :class:`bridge.CopyWarning` ``bridge.convert`` names them by).
COPY_REASON = {BIG_ENDIAN: "byte-order", CHUNKED: "concatenate"}
#: Layouts the destination table does not describe (it says what an import
#: does with what ``bridge.convert`` hands it: native byte order, one array,
#: dlpack.h v1.3's codes): :func:`bridge.kit.matrix_holds.contradictions`
#: leaves their cells alone.
UNRECORDED = (BIG_ENDIAN, CHUNKED, *HANDMADE_LAYOUTS)
#: Layouts whose cells a worker runs in a fork of itself from the first
#: (producers that can be forked), and the consumers that may fault on each
#: (None: any): torch's and paddle's kernels on complex128 at an odd
#: address, as on ``component-aligned``; any C reading DLPack main's codes.
#: A fork's crash ends the fork, not the worker and its imports; a fork costs
#: a few ms, so only these run in one.
RISKY_LAYOUTS: dict[str, tuple[str, ...] | None] = {"component-aligned": ("torch", "paddle"),
                                                    BYTE_MISALIGNED: ("torch", "paddle"),
                                                    **{layout: None for layout in HANDMADE_LAYOUTS}}  # fmt: skip
#: Producers a fork can run for a layout though their libraries keep threads
#: of their own: for these layouts they only wrap NumPy memory placed so
#: (``torch.from_numpy``, ``paddle.from_dlpack``), running nothing on those
#: threads (measured: torch 2.13 and paddle 3.3 make and compute in a fork).
#: A crash of their cells then ends a fork, not a worker and its imports.
FORK_SAFE_MAKERS = {"component-aligned": ("torch", "paddle"), BYTE_MISALIGNED: ("torch", "paddle")}
#: The producers that make each risky layout (the others' cells are n/a:
#: nothing runs that could crash, so they are not forked).
_MAKERS = {"component-aligned": ("numpy", "bridge", "torch", "paddle", "onnxruntime", "tvm_ffi", "pydlpack",
                                 "array_api_strict", "cuda_core"),
           BYTE_MISALIGNED: ("numpy", "bridge", "torch", "paddle", "onnxruntime", "tvm_ffi", "pydlpack",
                             "array_api_strict", "cuda_core"),
           **{layout: (HANDMADE,) for layout in HANDMADE_LAYOUTS}}  # fmt: skip
#: Consumers whose libraries hang in a fork of a process that imported them
#: (their threads are not in the fork): never forked from the first.
_HANG_IN_FORKS = ("jax", "tensorflow")


class MadeWrong(Exception):
    """The producer's library misread the case as it made its object (its
    own API reads other values back): every cell of the case is a violation
    of ``rule``, the producer's, whatever the consumer (raised by
    :func:`produce`, with the object ``made`` and the values the case holds,
    ``expected``; the cell's detail starts ``the producer misread``, on the
    protocols the object speaks)."""

    def __init__(self, rule: str, detail: str, made: Any, expected: np.ndarray[Any, Any]) -> None:
        super().__init__(f"{rule}: {detail}")
        self.rule, self.detail, self.made, self.expected = rule, detail, made, expected


def place_misaligned(values: np.ndarray[Any, Any], raw: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:
    """A C-contiguous copy of ``values`` whose first element sits at an odd
    address (one byte past an element boundary), in the bytes of ``raw`` (a
    writable 1-d uint8 array at least two elements longer than ``values``;
    new NumPy memory when None). Items of two bytes or more only."""
    size = values.dtype.itemsize
    if size < 2:
        raise ValueError(f"{values.dtype}: a one-byte element is aligned at every address")
    if raw is None:
        raw = np.zeros(values.nbytes + 2 * size, np.uint8)
    at = next(k for k in range(2 * size) if (raw.ctypes.data + k) % size == 1)
    out: np.ndarray[Any, Any] = np.ndarray(values.shape, values.dtype, buffer=raw, offset=at)
    out[...] = values
    return out


def apply(x: np.ndarray[Any, Any], layout: str) -> np.ndarray[Any, Any]:
    """The NumPy array that defines ``layout`` of the 4x12 base ``x`` (its
    values, shape and memory; for one-byte items, where an odd address is
    still aligned, the layout's shape and strides, which no producer makes).
    ``chunked``: the 48 values flat (their chunks are the producers');
    DLPack main's codes: ``x`` itself (the memory the hand-made capsule
    lends)."""
    if layout == BYTE_MISALIGNED:
        first = x.reshape(-1)[: int(np.prod(MISALIGNED_SHAPE))].reshape(MISALIGNED_SHAPE)
        return first if x.dtype.itemsize < 2 else place_misaligned(first)
    if layout == BIG_ENDIAN:
        if x.dtype.itemsize < 2 or x.dtype.kind not in "iufc":  # no byte order (ml_dtypes' types neither)
            return x
        return x.astype(x.dtype.newbyteorder(">"))
    if layout == CHUNKED:
        return np.ascontiguousarray(x).reshape(-1)
    if layout in HANDMADE_LAYOUTS:
        return x
    raise ValueError(f"unknown layout {layout!r}")


def planned(producer: str, dtype: str, layout: str, protocol: str, several_dtypes: bool) -> bool:
    """Whether :func:`bridge.kit.matrix_run.plan` lays out the cell: DLPack
    main's codes come from the ``handmade`` producer alone, which makes
    nothing else and speaks :data:`HANDMADE_PROTOCOLS` only; with
    ``several_dtypes``, each new layout crosses its :data:`LAYOUT_DTYPES`."""
    if (producer == HANDMADE) != (layout in HANDMADE_LAYOUTS):
        return False
    if producer == HANDMADE and protocol not in HANDMADE_PROTOCOLS:
        return False
    return not (several_dtypes and layout in LAYOUT_DTYPES and dtype not in LAYOUT_DTYPES[layout])


def _frozen(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    out: np.ndarray[Any, Any] = a.view()
    out.flags.writeable = False
    return out


def produce(peer: str, dtype: str, layout: str, readonly: bool) -> tuple[Any, np.ndarray[Any, Any]]:
    """``(object, expected values)`` for a case from ``peer``, as
    :func:`bridge.kit.matrix_peers.produce` makes it, and the new layouts
    here; :class:`~bridge.kit.matrix_peers.NotMade` when ``peer`` cannot make it."""
    from bridge.kit import matrix_peers as peers

    if layout not in NEW_LAYOUTS:
        if peer == HANDMADE:
            raise peers.NotMade("the kit's hand-made capsules carry DLPack main's codes only")
        return peers.produce(peer, dtype, layout, readonly)
    ref = peers.reference(dtype, layout)
    if layout in HANDMADE_LAYOUTS:
        return _handmade(peer, dtype, layout, ref, peers.NotMade)
    if layout == CHUNKED:
        return _chunked(peer, dtype, ref, readonly, peers.NotMade)
    if layout == BIG_ENDIAN:
        return _big_endian(peer, ref, readonly, peers.NotMade)
    return _misaligned(peer, dtype, ref, readonly, peers.NotMade)


# Why each producer that copies what it is given into memory of its own cannot make an address or byte order.
_OWN_MEMORY = {"jax": "jax", "mlx": "mlx", "tensorflow": "tf.constant", "warp": "wp.array", "cupy": "cupy (device memory)",
               "pyarrow": "pa.array", "polars": "pl.Series", "nanoarrow": "nanoarrow", "pandas": "pandas",
               "xarray": "xarray's Arrow stream"}  # fmt: skip


def _misaligned(peer: str, dtype: str, ref: np.ndarray[Any, Any], readonly: bool,
                not_made: type[Exception]) -> tuple[Any, np.ndarray[Any, Any]]:  # fmt: skip
    size = ref.dtype.itemsize
    if size < 2:
        raise not_made("a one-byte element is aligned at every address")
    if size == 2:
        raise not_made("a two-byte element one byte off is the component-aligned case")
    expected = np.array(ref, copy=True)
    if peer == "numpy":
        return (_frozen(ref) if readonly else ref), expected
    if peer == "bridge":
        import bridge

        if readonly:  # bridge tensors are read-only when their memory was lent read-only
            return bridge.from_numpy(_frozen(ref)), expected
        return _bridge_misaligned(ref, dtype), expected
    if readonly:
        raise not_made(f"{peer} has no read-only tensors")
    # Libraries whose own allocations are aligned wrap NumPy's memory placed so.
    if peer == "torch":
        import torch

        return torch.from_numpy(ref), expected
    if peer == "paddle":
        import paddle

        return paddle.from_dlpack(ref), expected
    if peer == "onnxruntime":
        import onnxruntime as ort

        return ort.OrtValue.ortvalue_from_numpy(ref), expected
    if peer == "tvm_ffi":
        import tvm_ffi

        return tvm_ffi.from_dlpack(ref), expected
    if peer == "pydlpack":
        import dlpack

        return dlpack.asdlpack(ref), expected
    if peer == "array_api_strict":
        import array_api_strict as xp

        return xp.asarray(ref), expected
    if peer == "cuda_core":
        from cuda.core.utils import StridedMemoryView

        return StridedMemoryView.from_dlpack(ref, stream_ptr=-1), expected
    raise not_made(f"{_OWN_MEMORY.get(peer, peer)} copies into its own (aligned) memory")


def _bridge_misaligned(ref: np.ndarray[Any, Any], dtype: str) -> Any:
    """``ref``'s values in memory bridge allocated, viewed from one byte in
    (``bridge.frombuffer`` at a byte offset: element offsets cannot)."""
    import bridge
    from bridge.core.dtypes import get_dtype

    store = bridge.empty(ref.nbytes + 2 * ref.itemsize, dtype=bridge.uint8)
    raw = np.asarray(store.memoryview())
    placed = place_misaligned(ref, raw)
    offset = placed.ctypes.data - raw.ctypes.data
    flat = bridge.frombuffer(store.memoryview(), dtype=get_dtype(dtype), count=placed.size, offset=offset)
    return flat.reshape(placed.shape)


def _big_endian(peer: str, ref: np.ndarray[Any, Any], readonly: bool,
                not_made: type[Exception]) -> tuple[Any, np.ndarray[Any, Any]]:  # fmt: skip
    if ref.dtype.isnative:
        raise not_made(f"{ref.dtype} has no byte order here (one-byte items, ml_dtypes' types, a big-endian host)")
    expected = ref.astype(ref.dtype.newbyteorder("="))
    if peer == "numpy":
        return (_frozen(ref) if readonly else ref), expected
    if readonly:
        raise not_made(f"{peer} has no read-only tensors")
    if peer == "onnxruntime":  # ortvalue_from_numpy wraps NumPy's memory, whatever it holds
        import onnxruntime as ort

        value = ort.OrtValue.ortvalue_from_numpy(ref)
        held = np.asarray(value.numpy())
        if held.dtype.isnative and not np.array_equal(held, expected):
            raise MadeWrong("byte-order", f"OrtValue.ortvalue_from_numpy of a '{ref.dtype.str}' array holds "
                                          f"{held.dtype} values read in native byte order (its own numpy() reads "
                                          f"{held.reshape(-1)[1]!r} where the array holds {expected.reshape(-1)[1]!r})",
                            value, expected)  # fmt: skip
        return value, expected
    if peer in ("tvm_ffi", "pydlpack", "paddle", "cuda_core"):
        raise not_made(f"{peer} wraps NumPy memory through its DLPack export, which refuses non-native byte order")
    raise not_made(f"{peer} keeps native byte order only")


def _chunked(peer: str, dtype: str, ref: np.ndarray[Any, Any], readonly: bool,
             not_made: type[Exception]) -> tuple[Any, np.ndarray[Any, Any]]:  # fmt: skip
    if peer not in ("pyarrow", "polars", "pandas") or readonly:
        raise not_made(f"{peer} has no chunked arrays (pyarrow, polars and pandas do)")
    if dtype in ("bfloat16", "complex64", "complex128"):
        raise not_made("Arrow arrays are of Arrow's types")
    half = ref.size // 2
    parts = (np.array(ref[:half], copy=True), np.array(ref[half:], copy=True))
    if peer == "polars":
        import polars as pl

        if dtype == "float16":
            raise not_made("polars has no float16")
        series = pl.concat([pl.Series(p) for p in parts], rechunk=False)
        return series, np.array(ref, copy=True)
    import pyarrow as pa

    chunked = pa.chunked_array([pa.array(p) for p in parts])
    if peer == "pandas":
        import pandas as pd

        return pd.Series(pd.arrays.ArrowExtensionArray(chunked)), np.array(ref, copy=True)
    return chunked, np.array(ref, copy=True)


def risky(layout: str, producer: str, consumer: str) -> bool:
    """Whether a cell of ``layout`` from ``producer`` into ``consumer`` runs
    in a fork of the worker from the first (:data:`RISKY_LAYOUTS`; only the
    producers that make the layout)."""
    if layout not in RISKY_LAYOUTS or consumer in _HANG_IN_FORKS or producer not in _MAKERS[layout]:
        return False
    who = RISKY_LAYOUTS[layout]
    return who is None or consumer in who


def first_chunk_address(obj: Any) -> int | None:
    """The address of the first value of a chunked source's first chunk (a
    pyarrow ChunkedArray's own; a polars or pandas Series' read through its
    ``__arrow_c_stream__``, which pyarrow imports without a copy): what a
    consumer's result is compared with (no one array is the source's memory,
    so concatenating is a ``copy``). None where it is not readable."""
    try:
        import pyarrow as pa

        from bridge.kit.matrix_peers import arrow_address

        chunks = obj if isinstance(obj, pa.ChunkedArray) else pa.chunked_array(obj)
        return arrow_address(chunks.chunk(0))
    except Exception:
        return None


_KEEP: list[Any] = []  # hand-made structs live as long as the process: a consumer may keep a view


class HandmadeProducer:
    """A DLPack producer whose capsules the kit builds by hand
    (:class:`bridge.kit.capsules.Handmade`) over ``buffer`` (host memory),
    with a DLDataType and a DLDeviceType no library makes yet. Each
    ``__dlpack__`` call makes a new struct (versioned when ``max_version``
    asks for 1.x, else legacy); it lends memory only (``copy=True`` and
    another ``dl_device`` are refused with BufferError)."""

    def __init__(self, buffer: np.ndarray[Any, Any], code: int, bits: int, device_type: int) -> None:
        self.buffer, self.code, self.bits, self.device_type = buffer, code, bits, device_type

    def __dlpack__(self, *, stream: Any = None, max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> Any:  # fmt: skip
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"the kit's hand-made tensor is on device type {self.device_type}: not moved")
        if copy:
            raise BufferError("the kit's hand-made producer lends its memory only (no copy=True)")
        from bridge.kit.capsules import Handmade

        versioned = max_version is not None and int(max_version[0]) >= 1
        h = Handmade(self.buffer, versioned=versioned, code=self.code, bits=self.bits,
                     device=(self.device_type, 0))  # fmt: skip
        _KEEP.append(h)
        return h.capsule()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.device_type, 0)

    def data_ptr(self) -> int:
        """The address of the first element (what the cell compares the result's with)."""
        return int(self.buffer.ctypes.data)


def _handmade(peer: str, dtype: str, layout: str, ref: np.ndarray[Any, Any],
              not_made: type[Exception]) -> tuple[Any, np.ndarray[Any, Any]]:  # fmt: skip
    if peer != HANDMADE:
        raise not_made("DLPack main's codes: no library makes them yet (the handmade producer does)")
    base = np.ascontiguousarray(ref)
    if layout == BCOMPLEX:
        if dtype != "bfloat16":
            raise not_made("a bcomplex32 is two bfloat16 halves: made of the bfloat16 case's memory")
        halves = base.astype(np.float32)
        expected = (halves[:, 0::2] + 1j * halves[:, 1::2]).astype(np.complex64)  # (real, imag) pairs
        return HandmadeProducer(base.view(np.uint32), 18, 32, 1), expected
    from bridge.core.dtypes import get_dtype

    code, bits, _ = get_dtype(dtype).__dlpack_data_type__()
    if bits < 8:
        raise not_made("the kit's hand-made capsules carry whole bytes (a sub-byte dtype is packed)")
    return HandmadeProducer(base, code, bits, DEVICE_LAYOUTS[layout]), np.array(base, copy=True)


def _device_type(result: Any) -> int | None:
    try:
        return int(result.__dlpack_device__()[0])
    except Exception:
        return None


def _dtype_name(consumer: Consumer, result: Any) -> str | None:
    try:
        if consumer.dtype_of is not None:
            return str(consumer.dtype_of(result))
        return str(np.asarray(consumer.values(result)).dtype)
    except Exception:
        return None


def _exported_code(result: Any) -> tuple[int, int] | None:
    """The (code, bits) of the result's own DLPack export (the capsule is
    dropped unconsumed: its deleter runs), None where it has none."""
    from bridge.kit.capsules import inspect_capsule

    try:
        try:
            capsule = result.__dlpack__(max_version=(1, 3))
        except TypeError:
            capsule = result.__dlpack__()
        view = inspect_capsule(capsule)
        del capsule
    except Exception:
        return None
    return None if view is None else (view.dtype[0], view.dtype[1])


def judged_on_taking(cell: Cell, consumer: Consumer, result: Any) -> Cell | None:
    """For the cells of DLPack main's codes a consumer took: the cell judged
    (a violation of ``unknown-code``, or ``unverified``) when taking it was
    wrong or cannot be judged further, else None (the values are judged as
    any cell's). A device tensor must arrive on its device (TPU host memory
    may arrive as a CPU array: it is host memory); a bcomplex32 as a type of
    that name, whose values the kit has no reader for."""
    if cell.layout in DEVICE_LAYOUTS:
        made = DEVICE_LAYOUTS[cell.layout]
        arrived = _device_type(result)
        if arrived == made or (arrived == 1 and made in _HOST_READABLE):
            return None
        if arrived is None:
            cell.verdict = "unverified"
            cell.detail = f"took a {_DEVICE_NAMES[made]} tensor; its result names no DLPack device"
            return cell
        cell.verdict, cell.rule = "violation", "unknown-code"
        cell.detail = (f"DLPack device type {made} ({_DEVICE_NAMES[made]}) arrived as device type {arrived}"
                       f"{f' ({_DEVICE_NAMES[arrived]})' if arrived in _DEVICE_NAMES else ''}")  # fmt: skip
        return cell
    if cell.layout == BCOMPLEX:
        name = _dtype_name(consumer, result)
        code = _exported_code(result)
        if code == (18, 32) or (name is not None and "bcomplex" in name.lower()):
            said = name or "DLPack code 18, as its own export says"
            cell.verdict, cell.detail = "unverified", f"taken as {said}: the kit has no reader of bcomplex values"
            return cell
        if name is None and code is not None:
            name = f"DLPack (code {code[0]}, bits {code[1]})"
        cell.verdict, cell.rule = "violation", "unknown-code"
        cell.detail = f"bcomplex32 (DLPack code 18) arrived as {name or 'a dtype the checker cannot name'}"
        return cell
    return None
