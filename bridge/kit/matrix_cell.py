"""One cell of the matrix: make the case, hand it to the consumer, and judge
what came back (:func:`run_cell`).

The checks, in order: the consumer takes the object or refuses it with an
exception type the protocols allow; the values are equal bit for bit, read
back and, where the library has a kernel to run on its result
(:attr:`~bridge.kit.matrix_peers.Consumer.compute`), computed (a library may
take memory its kernels fault on); a read-only source does not come back
writable; the result's address tells zero-copy from copy (a zero-size tensor
is ``empty``: it has no bytes to share); and bridge's DLPack/Arrow counters
balance once the consumer's object dies. Why a copy copied is told after the
run, from the consumer's other cells
(:func:`bridge.kit.matrix_grid.copy_reasons`).
"""

from __future__ import annotations

import gc
import re
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bridge.kit import matrix_layouts as _layouts
from bridge.kit.matrix_grid import ALIGNMENT, Cell
from bridge.kit.matrix_holds import CONVERT_TABLE
from bridge.kit.matrix_layouts import produce
from bridge.kit.matrix_peers import (
    Consumer,
    NotMade,
    RuleBroken,
    arrow_address,
    first_column,
    produce_table,
)

__all__ = ["run_cell", "address_alignment"]

# The types a refusal may have (the array API's Raises for from_dlpack and
# __dlpack__, PEP 3118's BufferError; subclasses such as pyarrow's ArrowInvalid
# count as their base). The Arrow PyCapsule interface names no exception
# types, so an Arrow consumer may refuse with any.
_REFUSALS = (BufferError, TypeError, ValueError)

def _producer_address(obj: Any) -> int | None:
    for probe in (
        lambda o: o.data_ptr(),
        lambda o: o.__array_interface__["data"][0],
        lambda o: o.unsafe_buffer_pointer(),
        lambda o: arrow_address(o),
        lambda o: o.impl.get_dlpack_data(),  # pydlpack: the data pointer of the tensor it wraps
        # mlx and other buffer exporters: the buffer's first element (memoryview never copies)
        lambda o: np.asarray(memoryview(o)).__array_interface__["data"][0],
        # mlx's bfloat16 (no buffer) and array-api-strict through DLPack, and the Arrow exporters (polars, nanoarrow,
        # pandas, xarray: each export shares the same buffer): as bridge imports them
        _dlpack_address,
        _arrow_address,
    ):
        try:
            value = probe(obj)
        except Exception:
            continue
        if isinstance(value, int):
            return value
    return None


# The libraries whose every __dlpack__ is a new view of the same memory, probed
# that way where nothing else tells an address: not every exporter may be asked
# twice (pydlpack's objects export once), so only those named here are
# (cuda: cuda.core's StridedMemoryView; max: Modular MAX's Buffer).
_REEXPORTERS = ("mlx", "array_api_strict", "cuda", "max")


def _dlpack_address(obj: Any) -> int:
    """The first element's address of a DLPack exporter of :data:`_REEXPORTERS`,
    as bridge's reference importer reads it (bridge's counters are read after
    this, so the import and its release do not count against the cell)."""
    if type(obj).__module__.split(".")[0] not in _REEXPORTERS:
        raise TypeError("not asked: its export may be one-shot")
    from bridge.interop.dlpack import from_dlpack

    address: int = from_dlpack(obj).data_ptr()
    return address


def _arrow_address(obj: Any) -> int:
    """The first value's address of an Arrow PyCapsule exporter, as bridge's
    Arrow importer reads it."""
    from bridge.interop.arrow import from_arrow

    address: int = from_arrow(obj).data_ptr()
    return address


def _same(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    if a.shape != b.shape:
        return False
    if a.dtype == object and b.dtype != object:  # e.g. polars' object columns
        try:
            a = np.asarray(a.tolist(), dtype=b.dtype).reshape(b.shape)
        except (TypeError, ValueError):
            return False
    if a.size == 0:
        return True
    # (values, not bytes: a big-endian source or result holds its values in other bytes)
    a, b = (np.ascontiguousarray(x if x.dtype.isnative else x.astype(x.dtype.newbyteorder("="))) for x in (a, b))
    if a.dtype.itemsize != b.dtype.itemsize:
        return bool(np.array_equal(a.astype(np.float64), b.astype(np.float64)))
    return a.tobytes() == b.tobytes()


def _counters() -> tuple[int, int, int, int]:
    if "bridge" not in sys.modules:
        return (0, 0, 0, 0)
    from bridge.core.native import _C

    s = _C.stats()
    return (s["exports"] - s["export_deleters"], s["imports"] - s["import_releases"],
            s["arrow_exports"] - s["arrow_releases"], s["arrow_imports"] - s["arrow_import_releases"])  # fmt: skip


def _has_dlpack(o: Any) -> bool:
    return hasattr(o, "__dlpack__")


_SPEAKS: dict[str, Callable[[Any], bool]] = {
    "dlpack": _has_dlpack,
    "dlpack-copy": _has_dlpack,
    "dlpack-device": _has_dlpack,
    "dlpack-c-api": lambda o: hasattr(type(o), "__dlpack_c_exchange_api__"),
    "arrow": lambda o: any(hasattr(o, m) for m in (
        "__arrow_c_array__", "__arrow_c_stream__", "__arrow_c_device_array__")),
    "arrow-device-stream": lambda o: hasattr(o, "__arrow_c_device_stream__"),
    "cuda-array-interface": lambda o: hasattr(o, "__cuda_array_interface__"),
    "jax-array": lambda o: hasattr(o, "__jax_array__"),
}  # fmt: skip
# Protocols whose values a rule of their own judges (not DLPack's values rule).
_OWN_VALUES_RULE = ("jax-array", "arrow-device-stream")
# The dtypes of fewer than 8 bits (one value per byte in memory), whose values
# DLPack's packed sub-byte rule judges.
_SUBBYTE = ("float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn")

# A keyword the producer's __dlpack__ does not take shows as a TypeError
# naming it: the array API (2023.12) makes dl_device and copy part of the method.
_KEYWORD_RULES = {"dlpack-copy": "copy", "dlpack-device": "dl_device"}


def _violate(cell: Cell, rule: str, detail: str) -> Cell:
    cell.verdict, cell.rule, cell.detail = "violation", rule, detail
    return cell


def _values_rule(cell: Cell) -> str:
    if cell.protocol in _OWN_VALUES_RULE:
        return cell.protocol
    if cell.layout in _layouts.RULE_OF:  # (byte-misaligned, big-endian, chunked: a rule of their own)
        return _layouts.RULE_OF[cell.layout]
    if cell.dtype in _SUBBYTE and cell.protocol.startswith("dlpack"):
        return "packed-subbyte"  # read one value per byte where they are packed, or the other way
    if cell.layout in ("0-d", "zero-size"):
        return "shape"
    return "values" if cell.layout == "contiguous" else "strides"


class _DlpackCalls:
    """Counts calls of ``type(obj).__dlpack__`` while a counting wrapper is
    installed on the type (where the type lets its attributes be set: Python
    classes, bridge's and torch's among them), to tell which DLPack path a
    consumer took."""

    def __init__(self, obj: Any) -> None:
        self.calls = 0
        self.installed = False
        self.cls = type(obj)
        self.own = "__dlpack__" in self.cls.__dict__
        orig = getattr(self.cls, "__dlpack__", None)
        self.orig = orig
        if orig is None:
            return

        def counted(this: Any, *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return orig(this, *args, **kwargs)

        try:
            self.cls.__dlpack__ = counted  # type: ignore[attr-defined]
            self.installed = True
        except (TypeError, AttributeError):  # a C type with an immutable dict
            pass

    def remove(self) -> None:
        """Put the type's own ``__dlpack__`` back."""
        if self.installed:
            if self.own:
                self.cls.__dlpack__ = self.orig  # type: ignore[attr-defined]
            else:
                del self.cls.__dlpack__  # type: ignore[attr-defined]
            self.installed = False


def _api_counters() -> tuple[int, int]:
    if "bridge" not in sys.modules:
        return (0, 0)
    from bridge.core.native import _C

    s = _C.stats()
    return s["api_exports"], s["api_imports"]


def _path(cell: Cell, obj: Any, calls: _DlpackCalls, api_before: tuple[int, int]) -> str:
    if _api_counters() != api_before or (cell.protocol == "dlpack-c-api" and cell.consumer != "tvm_ffi"):
        return "exchange-api"
    if calls.calls or not hasattr(type(obj), "__dlpack_c_exchange_api__"):
        return "__dlpack__"  # (a type without the API has no other DLPack path)
    if cell.consumer == "tvm_ffi":
        return "exchange-api"  # tvm_ffi.from_dlpack reads the type's API whenever it has one
    if calls.installed:
        return "exchange-api"  # __dlpack__ was not asked, and the type has the API
    return ""


def _poke_value(expected: np.ndarray[Any, Any]) -> Any:
    first = expected[(0,) * expected.ndim]
    return (not bool(first)) if expected.dtype == bool else (first + 1).item()


def run_cell(cell: Cell, consumer: Consumer, on_made: Callable[[], None] | None = None,
             on_compute: Callable[[], None] | None = None) -> Cell:  # fmt: skip
    """Run one exchange and fill in its verdict, detail, rule and path, and
    how the producer's first element is aligned (``on_made`` is called once
    the producer has made its object and its address is read, before the
    consumer runs: a crash after it is the consumer's, and the cell already
    says its alignment; ``on_compute`` before the consumer's library computes
    on its result, :attr:`Consumer.compute`, so that a crash there is told as
    one)."""
    table = cell.protocol == CONVERT_TABLE
    wrong: _layouts.MadeWrong | None = None
    try:
        make = produce_table if table else produce
        obj, expected = make(cell.producer, cell.dtype, cell.layout, cell.readonly)
    except NotMade as e:
        cell.verdict, cell.detail = "n/a", str(e)
        return cell
    except _layouts.MadeWrong as e:  # the producer's library misread the case making it: the producer's
        obj, expected, wrong = e.made, e.expected, e
    except Exception as e:  # the producer library refuses to make this case
        cell.verdict = "n/a"
        cell.detail = f"{cell.producer} refused to make it: {type(e).__name__}: {str(e)[:100]}"
        return cell
    speaks = _SPEAKS.get(cell.protocol)
    if speaks is not None and not speaks(obj) and not (
        cell.protocol == "arrow" and isinstance(obj, np.ndarray)  # Arrow consumers take buffers
    ):
        cell.verdict, cell.detail = "n/a", f"{cell.producer} does not speak {cell.protocol}"
        return cell
    src_addr = _producer_address(first_column(obj) if table else obj)  # (a table's: its first column's)
    if src_addr is None and cell.layout == _layouts.CHUNKED:
        src_addr = _layouts.first_chunk_address(obj)
    if src_addr is not None:
        cell.aligned = src_addr % ALIGNMENT == 0
        cell.alignment = address_alignment(src_addr)
    if on_made is not None:
        on_made()
    gc.collect(0)  # settle earlier cells' objects before counting this one's
    before = _counters()
    api_before = _api_counters()
    calls = _DlpackCalls(obj) if cell.protocol.startswith("dlpack") else None
    try:
        result = consumer.take(obj)
    except Exception as e:
        return _refusal(cell, e)
    finally:
        if calls is not None:
            calls.remove()
    if calls is not None:
        cell.path = _path(cell, obj, calls, api_before)
    judged = (_layouts.judged_on_taking(cell, consumer, result)  # (DLPack main's codes: taken as what?)
              or _judge(cell, consumer, obj, result, expected, src_addr, on_compute))  # fmt: skip
    if wrong is not None:  # whatever the consumer made of it, the object held other values than the case
        judged = _violate(judged, wrong.rule, f"the producer misread the case making it: {wrong.detail}")
    del result  # the producer stays alive: only the consumer's references must go
    if consumer.told is not None:
        reason, said = consumer.told()
        if judged.verdict == "unverified" and reason and not judged.detail.startswith("the values crossed"):
            # no address to compare, but the consumer says it copied and why: a copy
            judged.verdict, judged.detail = "copy", ""
        if judged.verdict == "copy":
            judged.reason = reason
        judged.detail = "; ".join(d for d in (judged.detail, said) if d)
    if judged.verdict == "violation":
        return judged
    gc.collect(0)
    after = _counters()
    for _ in range(20):  # some consumers (jax) free their buffers asynchronously
        if after == before:
            break
        time.sleep(0.005)
        gc.collect()
        after = _counters()
    if after != before:
        rule = "arrow-release" if cell.protocol.startswith("arrow") else "deleter"
        return _violate(cell, rule, f"bridge deleters unbalanced after the consumer died: {before} -> {after}")
    return cell


# A library's build path in its message (/onnxruntime_src/.../dlpack_converter.cc:207)
# says no more than the file's name.
_SOURCE_PATH = re.compile(r"(?<![\w.])/(?:[\w.+-]+/)+([\w.+-]+)")


def _refusal(cell: Cell, e: Exception) -> Cell:
    """A consumer's exception: a refusal of an allowed type, or a violation of
    the exceptions rule (or of the keyword's rule, for a keyword the producer
    does not take; or of the rule a :class:`RuleBroken` names)."""
    if isinstance(e, RuleBroken):  # what came back broke a rule before any array was judged
        return _violate(cell, e.rule, e.detail)
    kind, text = type(e).__name__, _SOURCE_PATH.sub(r"\1", str(e).splitlines()[0])[:120] if str(e) else ""
    keyword = _KEYWORD_RULES.get(cell.protocol)
    if keyword and isinstance(e, TypeError) and keyword in text and "keyword" in text:
        return _violate(cell, keyword, f"__dlpack__ does not take {keyword}=: {kind}: {text}")
    if isinstance(e, _REFUSALS) or cell.protocol.startswith("arrow"):  # the PyCapsule interface names no type
        cell.verdict, cell.detail = "refused", f"{kind}: {text}"
        return cell
    origin = _raised_in(e)
    by = f" [raised by {cell.producer}]" if origin and origin == _top_module(cell.producer) else ""
    if cell.protocol == "dlpack-c-api" and _PRODUCER_API_FAILED in text:
        # bridge's test driver raised it for the producer type's own function, which failed
        # without setting a Python error (the exchange API asks for one): the producer's
        by = f" [raised by {cell.producer}]"
    return _violate(cell, "exceptions", f"refused with {kind}, not BufferError/TypeError/ValueError{by}: {text}")


# What bridge's test driver (bridge._drivers.api_convert) says when the
# producer type's exchange API function returned -1 and set no Python error.
_PRODUCER_API_FAILED = "exchange API managed_tensor_from_py_object_no_sync failed"


def _top_module(peer: str) -> str:
    from bridge.kit.matrix_grid import _MODULE

    return _MODULE.get(peer, peer).split(".")[0]


def _raised_in(e: BaseException) -> str:
    """The top-level package of the Python frame that raised ``e`` (empty when
    unknown): a consumer passing on the producer's exception, as the array
    API asks, is not the one that chose its type."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    name = str(tb.tb_frame.f_globals.get("__name__", "")) if tb is not None else ""
    # The kit's own frames call the consumer: an exception raised in C shows there.
    return "" if name.startswith("bridge.kit") else name.split(".")[0]


def _judge(cell: Cell, consumer: Consumer, obj: Any, result: Any, expected: np.ndarray[Any, Any],
           src_addr: int | None, on_compute: Callable[[], None] | None = None) -> Cell:  # fmt: skip
    """The checks on a result the consumer returned, in the order the rules go."""
    try:
        got = np.asarray(consumer.values(result))
    except Exception as e:  # the exchange worked; the checker cannot read this result type
        cell.verdict = "unverified"
        cell.detail = f"result not readable by the checker: {type(e).__name__}: {str(e)[:80]}"
        return cell
    if got.dtype == object and got.shape == () and expected.dtype != object:
        cell.verdict = "refused"
        cell.detail = "not an array to this consumer: it was wrapped as a Python object"
        return cell
    if got.ndim != expected.ndim and got.size == expected.size and consumer.protocol == "arrow":
        # Arrow consumers without a tensor type take N-d input as a flat array.
        cell.detail = f"taken as a {got.ndim}-d array of {got.size} values"
        expected = expected.reshape(got.shape)
    unnamed = ""
    if consumer.dtype_of is not None and cell.protocol != "arrow":
        try:
            arrived = consumer.dtype_of(result)
        except Exception as e:  # the library has no name for the dtype it holds (tvm-ffi's complex)
            arrived, unnamed = cell.dtype, f"{type(e).__name__}: {str(e)[:80]}"
        if arrived != cell.dtype:
            return _violate(cell, "dtype", f"{cell.dtype} arrived as {arrived}")
    judged = _judge_memory(cell, consumer, obj, result, got, expected, src_addr, on_compute)
    if unnamed and judged.verdict in ("zero-copy", "copy", "empty"):
        judged.verdict = "unverified"
        judged.detail = f"the values crossed, but the result's dtype is not readable: {unnamed}"
    return judged


def _judge_memory(cell: Cell, consumer: Consumer, obj: Any, result: Any, got: np.ndarray[Any, Any],
                  expected: np.ndarray[Any, Any], src_addr: int | None,
                  on_compute: Callable[[], None] | None = None) -> Cell:  # fmt: skip
    """The checks after the dtype's, on the values ``got`` read back: shape,
    values, the values the library's own kernels compute from the result,
    read-only, and the address that tells zero-copy from copy."""
    if got.shape != expected.shape:
        rule = "chunks" if cell.layout == _layouts.CHUNKED else "shape"  # (the first chunk alone?)
        return _violate(cell, rule, f"shape {expected.shape} arrived as {got.shape}")
    if not _same(got, expected):
        return _violate(cell, _values_rule(cell), "values differ")
    if expected.size == 0:
        # No bytes to share: neither a copy nor zero-copy, whatever the
        # addresses; and read-only cannot be lost through a write that has no
        # element to land on.
        cell.verdict = "empty"
        cell.detail = cell.detail or "zero-size tensor: no bytes to share, shape and dtype intact"
        return cell
    miscomputed = _computed_wrong(cell, consumer, result, expected, on_compute)
    if miscomputed:
        return miscomputed
    try:
        dst_addr = consumer.address(result)
    except Exception:
        dst_addr = None
    if cell.readonly:
        copied = src_addr is not None and dst_addr is not None and dst_addr != src_addr
        broken = _read_only_broken(cell, consumer, obj, result, expected, copied)
        if broken:
            return broken
    if src_addr is None or dst_addr is None:
        cell.verdict = "unverified"
        cell.detail = cell.detail or "addresses not observable; values equal"
    elif dst_addr == src_addr:
        if cell.protocol == "dlpack-copy":
            return _violate(cell, "copy", "copy=True returned the producer's own memory")
        cell.verdict = "zero-copy"
    else:
        cell.verdict = "copy"
        if cell.detail.startswith("read-only lost"):
            cell.detail = ""  # a copy is new memory: writable is right
    return cell


def address_alignment(address: int) -> int:
    """The largest power of two, up to :data:`ALIGNMENT`, that ``address`` is
    a multiple of (a null address counts as aligned)."""
    return min(address & -address, ALIGNMENT) if address else ALIGNMENT


def _computed_wrong(cell: Cell, consumer: Consumer, result: Any, expected: np.ndarray[Any, Any],
                    on_compute: Callable[[], None] | None) -> Cell | None:  # fmt: skip
    """The consumer's library computes on its result (:attr:`Consumer.compute`)
    and must find the values the result holds: other values break the values
    rule (the library misreads the memory it took), and a fault there ends the
    process as the cell's crash. A library without that operation for the
    dtype (an exception) is not judged."""
    if consumer.compute is None:
        return None
    if on_compute is not None:
        on_compute()
    try:
        computed = np.asarray(consumer.values(consumer.compute(result)))
    except Exception:
        return None
    if not _same(computed, expected):
        return _violate(cell, _values_rule(cell), f"{consumer.computes} on the result computed other values")
    return None


def _read_only_broken(cell: Cell, consumer: Consumer, obj: Any, result: Any,
                      expected: np.ndarray[Any, Any], copied: bool = False) -> Cell | None:  # fmt: skip
    """The read-only rule: write one element through the consumer's result
    with the consumer's own API; if that lands in the read-only source, the
    consumer made it writable. (The matrix runs each producer in a child
    process: a write that faults ends only this cell.) A result that is a
    copy (``copied``: its address is not the source's) is new memory:
    writable is right."""
    if consumer.poke is not None:
        try:
            consumer.poke(result, _poke_value(expected))
        except Exception:
            pass  # the consumer protected the memory (or cannot write at all): the rule holds
        else:
            if not _same(np.asarray(obj), expected):
                return _violate(cell, "read-only",
                                f"a write through {consumer.peer}'s result changed the read-only source")  # fmt: skip
    if cell.protocol == "dlpack-copy" or copied:
        return None  # a copy is new memory: writable is right
    if consumer.writable(result) and consumer.peer in ("numpy", "bridge"):
        return _violate(cell, "read-only", "read-only source came back writable")
    if consumer.writable(result):
        cell.detail = f"read-only lost: {consumer.peer} says its result is writable"
    return None
