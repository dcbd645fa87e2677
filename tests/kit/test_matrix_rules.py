"""Each rule the matrix checks catches a deliberately broken producer and a
deliberately broken consumer, and passes a correct pair (bridge.kit.rules,
bridge.kit.matrix_cell.run_cell).

The broken parties are small Python objects and functions defined here: the
producer is swapped in for the cell's through ``matrix_cell.produce``, the
consumer is a :class:`Consumer` built around the broken function.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest

from bridge.kit import matrix_cell
from bridge.kit.matrix_grid import ALIGNMENT, Cell, copy_reasons
from bridge.kit.matrix_peers import Consumer, reference
from bridge.kit.rules import RULES, rule


def _np_consumer(take: Any, protocol: str = "dlpack", peer: str = "numpy") -> Consumer:
    def poke(a: Any, value: Any) -> None:
        a[(0,) * a.ndim] = value

    return Consumer(peer, protocol, take, lambda a: np.array(a, copy=True),
                    lambda a: int(a.__array_interface__["data"][0]), lambda a: bool(a.flags.writeable),
                    poke=poke, dtype_of=lambda a: a.dtype.name)  # fmt: skip


def _run(monkeypatch: pytest.MonkeyPatch, consumer: Consumer, *, dtype: str = "float32", layout: str = "contiguous",
         readonly: bool = False, producer: Any = None) -> Cell:  # fmt: skip
    """One cell: numpy's case (or ``producer(ref)`` wrapping it) into ``consumer``."""
    if producer is not None:

        def produce(peer: str, dt: str, lay: str, ro: bool) -> tuple[Any, np.ndarray[Any, Any]]:
            ref = reference(dt, lay)
            if ro:
                ref.flags.writeable = False
            return producer(ref), ref.copy()

        monkeypatch.setattr(matrix_cell, "produce", produce)
    cell = Cell("numpy", consumer.peer, consumer.protocol, dtype, layout, readonly)
    return matrix_cell.run_cell(cell, consumer)


def _ok(cell: Cell) -> None:
    assert cell.verdict in ("zero-copy", "copy", "empty", "unverified"), (cell.verdict, cell.rule, cell.detail)


def _broken(cell: Cell, name: str) -> None:
    assert (cell.verdict, cell.rule) == ("violation", name), (cell.verdict, cell.rule, cell.detail)
    assert cell.rule in RULES


class _Exporter:
    """A producer that hands out an array through ``__dlpack__`` (and, where
    asked, ``__array_interface__``), with hooks to break it."""

    def __init__(self, arr: np.ndarray[Any, Any], dlpack: Any = None, interface: Any = None) -> None:
        self.arr = arr
        self._dlpack = dlpack
        self._interface = interface

    def __dlpack__(self, **kw: Any) -> Any:
        return (self._dlpack or (lambda a, **k: a.__dlpack__(**k)))(self.arr, **kw)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)

    @property
    def __array_interface__(self) -> dict[str, Any]:
        d = dict(self.arr.__array_interface__)
        return self._interface(d) if self._interface else d

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray[Any, Any]:
        return self.arr


# ------------------------------------------------------------------ read-only


def _writable_alias(x: Any) -> np.ndarray[Any, Any]:
    """A broken consumer: a writable array over the producer's memory,
    whatever its read-only flag says (the bug pytorch and paddle have)."""
    a = np.from_dlpack(x)
    if a.size == 0:
        return a
    iface = a.__array_interface__
    nbytes = a.nbytes if a.flags.c_contiguous else (a.base.nbytes if a.base is not None else a.nbytes)
    buf = (ctypes.c_char * max(nbytes, a.itemsize)).from_address(iface["data"][0])
    return np.ndarray(a.shape, a.dtype, buffer=buf, strides=a.strides)  # type: ignore[call-overload]


def test_read_only_rule_catches_a_consumer_that_writes_through(monkeypatch: pytest.MonkeyPatch) -> None:
    _broken(_run(monkeypatch, _np_consumer(_writable_alias, peer="broken"), readonly=True), "read-only")
    _ok(_run(monkeypatch, _np_consumer(np.from_dlpack), readonly=True))


def test_read_only_rule_catches_a_producer_that_drops_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    def writable_export(a: np.ndarray[Any, Any], **kw: Any) -> Any:
        return _writable_alias(a).__dlpack__(**kw)  # the READ_ONLY flag lost on the way out

    cell = _run(monkeypatch, _np_consumer(np.from_dlpack), readonly=True,
                producer=lambda ref: _Exporter(ref, dlpack=writable_export))  # fmt: skip
    _broken(cell, "read-only")


# ---------------------------------------------------------------------- dtype


def test_dtype_rule_catches_uint16_arriving_as_bfloat16(monkeypatch: pytest.MonkeyPatch) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    as_bf16 = _np_consumer(lambda x: np.from_dlpack(x).view(ml_dtypes.bfloat16), peer="broken")
    _broken(_run(monkeypatch, as_bf16, dtype="uint16"), "dtype")
    _ok(_run(monkeypatch, _np_consumer(np.from_dlpack), dtype="uint16"))


def test_dtype_rule_catches_a_producer_exporting_another_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    cell = _run(monkeypatch, _np_consumer(np.from_dlpack), dtype="uint16",
                producer=lambda ref: _Exporter(ref, dlpack=lambda a, **k: a.view(np.int16).__dlpack__(**k)))  # fmt: skip
    _broken(cell, "dtype")


# ----------------------------------------------------------------- exceptions


def test_exceptions_rule_catches_a_consumer_refusing_with_runtime_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(x: Any) -> Any:
        raise RuntimeError("/build/src/lib/convert.cc:207 cannot take this")

    cell = _run(monkeypatch, _np_consumer(refuse, peer="broken"))
    _broken(cell, "exceptions")
    assert "convert.cc:207 cannot take this" in cell.detail and "/build" not in cell.detail

    def refuse_right(x: Any) -> Any:
        raise BufferError("cannot take this")

    cell = _run(monkeypatch, _np_consumer(refuse_right))
    assert cell.verdict == "refused" and cell.rule == ""


def test_exceptions_rule_catches_a_producer_refusing_with_runtime_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def export(a: np.ndarray[Any, Any], **kw: Any) -> Any:
        raise RuntimeError("no export today")

    cell = _run(monkeypatch, _np_consumer(np.from_dlpack), producer=lambda ref: _Exporter(ref, dlpack=export))
    _broken(cell, "exceptions")


def test_arrow_refusals_may_have_any_type(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Arrow PyCapsule interface names no exception types."""

    def refuse(x: Any) -> Any:
        raise NotImplementedError("no such Arrow type")

    cell = _run(monkeypatch, _np_consumer(refuse, protocol="arrow", peer="broken"))
    assert cell.verdict == "refused"


# ------------------------------------------------------------ 0-d, zero-size


@pytest.mark.parametrize("layout", ["0-d", "zero-size"])
def test_shape_rule_catches_a_consumer_that_reshapes(monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    def reshaped(x: Any) -> Any:
        a = np.from_dlpack(x)
        return a.reshape(1, *a.shape) if layout == "zero-size" else np.atleast_1d(a)

    _broken(_run(monkeypatch, _np_consumer(reshaped, peer="broken"), layout=layout), "shape")
    _ok(_run(monkeypatch, _np_consumer(np.from_dlpack), layout=layout))


def test_shape_rule_catches_a_producer_exporting_0d_as_1d(monkeypatch: pytest.MonkeyPatch) -> None:
    cell = _run(monkeypatch, _np_consumer(np.from_dlpack), layout="0-d",
                producer=lambda ref: _Exporter(ref, dlpack=lambda a, **k: a.reshape(1).__dlpack__(**k)))  # fmt: skip
    _broken(cell, "shape")


# ---------------------------------------------------- negative and zero strides


def _compact_reader(x: Any) -> np.ndarray[Any, Any]:
    """A broken consumer: reads the memory as compact, ignoring the strides."""
    iface = x.__array_interface__
    a = np.asarray(x)
    buf = (ctypes.c_char * (a.size * a.itemsize)).from_address(iface["data"][0])
    return np.frombuffer(buf, a.dtype).reshape(a.shape)


@pytest.mark.parametrize("layout", ["negative", "broadcast"])
def test_strides_rule_catches_a_consumer_ignoring_strides(monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    consumer = _np_consumer(_compact_reader, protocol="array-interface", peer="broken")
    _broken(_run(monkeypatch, consumer, layout=layout), "strides")
    _ok(_run(monkeypatch, _np_consumer(np.asarray, protocol="array-interface"), layout=layout))


@pytest.mark.parametrize("layout", ["negative", "broadcast"])
def test_strides_rule_catches_a_producer_dropping_strides(monkeypatch: pytest.MonkeyPatch, layout: str) -> None:
    def no_strides(d: dict[str, Any]) -> dict[str, Any]:
        return {**d, "strides": None}  # claims C-contiguous memory it does not have

    consumer = _np_consumer(np.asarray, protocol="array-interface")
    cell = _run(monkeypatch, consumer, layout=layout, producer=lambda ref: _Exporter(ref, interface=no_strides))
    _broken(cell, "strides")


# ------------------------------------------------------------ copy, dl_device


def test_copy_rule_catches_a_consumer_ignoring_copy_true(monkeypatch: pytest.MonkeyPatch) -> None:
    ignoring = _np_consumer(np.from_dlpack, protocol="dlpack-copy", peer="broken")  # copy=True dropped
    _broken(_run(monkeypatch, ignoring), "copy")
    _ok(_run(monkeypatch, _np_consumer(lambda x: np.from_dlpack(x, copy=True), protocol="dlpack-copy")))


def test_copy_rule_catches_a_producer_without_the_copy_keyword(monkeypatch: pytest.MonkeyPatch) -> None:
    def old_export(a: np.ndarray[Any, Any], *, stream: Any = None, max_version: Any = None, dl_device: Any = None) -> Any:
        return a.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device)

    consumer = _np_consumer(lambda x: np.from_dlpack(x, copy=True), protocol="dlpack-copy")
    cell = _run(monkeypatch, consumer, producer=lambda ref: _Exporter(ref, dlpack=old_export))
    _broken(cell, "copy")


def test_copy_rule_catches_a_producer_ignoring_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    def shares(a: np.ndarray[Any, Any], copy: Any = None, **kw: Any) -> Any:
        return a.__dlpack__(**kw)  # copy=True taken and ignored, no IS_COPIED flag, no copy

    consumer = _np_consumer(lambda x: np.from_dlpack(x, copy=True), protocol="dlpack-copy")
    cell = _run(monkeypatch, consumer, producer=lambda ref: _Exporter(ref, dlpack=shares))
    # NumPy leaves copy=True to the producer (it passes the keyword on): the
    # consumer's array is the producer's memory, which the rule catches.
    _broken(cell, "copy")


def test_dl_device_rule_catches_a_producer_without_the_keyword(monkeypatch: pytest.MonkeyPatch) -> None:
    def old_export(a: np.ndarray[Any, Any], *, stream: Any = None, max_version: Any = None) -> Any:
        return a.__dlpack__(stream=stream, max_version=max_version)

    consumer = _np_consumer(lambda x: np.from_dlpack(x, device="cpu"), protocol="dlpack-device")
    _broken(_run(monkeypatch, consumer, producer=lambda ref: _Exporter(ref, dlpack=old_export)), "dl_device")
    _ok(_run(monkeypatch, consumer, producer=lambda ref: _Exporter(ref)))


# --------------------------------------------------- empty tensors, copy reasons


def _copies(x: Any) -> np.ndarray[Any, Any]:
    return np.from_dlpack(x).copy()


def test_a_zero_size_tensor_is_empty_whoever_takes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither copy nor zero-copy: there are no bytes to share."""
    shares = _run(monkeypatch, _np_consumer(np.from_dlpack), layout="zero-size")
    copies = _run(monkeypatch, _np_consumer(_copies, peer="copier"), layout="zero-size")
    assert (shares.verdict, copies.verdict) == ("empty", "empty"), (shares, copies)
    assert "no bytes to share" in shares.detail


@pytest.mark.parametrize("peer", ["copier", "numpy"])
def test_read_only_cannot_be_lost_on_a_zero_size_tensor(monkeypatch: pytest.MonkeyPatch, peer: str) -> None:
    """A writable result of a read-only zero-size source has no element to
    write through: no read-only loss, no violation (numpy's results are held
    to the rule strictly), no copy."""
    cell = _run(monkeypatch, _np_consumer(_copies, peer=peer), layout="zero-size", readonly=True)
    assert (cell.verdict, cell.rule) == ("empty", ""), cell
    assert "read-only" not in cell.detail


def _placed(misalign: int) -> Any:
    """A producer: the reference array's layout, values and read-only flag,
    its first element ``misalign`` bytes past an :data:`ALIGNMENT`-byte boundary."""

    def place(ref: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        lo, hi = np.lib.array_utils.byte_bounds(ref)
        first = ref.__array_interface__["data"][0]
        raw = np.zeros(hi - lo + 3 * ALIGNMENT, np.uint8)
        at = (-raw.ctypes.data) % ALIGNMENT + ALIGNMENT * (1 + (first - lo) // ALIGNMENT) + misalign
        start = at - (first - lo)  # where the lowest byte goes
        raw[start : start + hi - lo] = np.frombuffer(ctypes.string_at(lo, hi - lo), np.uint8)
        out = np.ndarray(ref.shape, ref.dtype, buffer=raw, offset=at, strides=ref.strides)
        assert out.__array_interface__["data"][0] % ALIGNMENT == misalign and np.array_equal(out, ref)
        out.flags.writeable = ref.flags.writeable
        return out

    return place


def _copying(when: Any) -> Any:
    """A consumer that shares the producer's memory unless ``when(array)``."""

    def take(x: Any) -> np.ndarray[Any, Any]:
        a = np.from_dlpack(x)
        return a.copy() if when(a) else a

    return take


def _reasons_of(monkeypatch: pytest.MonkeyPatch, take: Any, *cases: dict[str, Any]) -> list[tuple[str, str]]:
    """Each case (``_run``'s keywords) through the consumer ``take``, then
    :func:`copy_reasons` over them all: (verdict, reason) per case."""
    cells = [_run(monkeypatch, _np_consumer(take, peer="picky"), **case) for case in cases]
    copy_reasons(cells)
    return [(c.verdict, c.reason) for c in cells]


def test_a_copy_of_an_unaligned_source_says_alignment(monkeypatch: pytest.MonkeyPatch) -> None:
    """XLA's rule: memory not 64-byte aligned is copied."""
    take = _copying(lambda a: a.__array_interface__["data"][0] % ALIGNMENT)
    assert _reasons_of(monkeypatch, take, {"producer": _placed(0)}, {"producer": _placed(8)}) == [
        ("zero-copy", ""), ("copy", "alignment")]  # fmt: skip


def test_a_copy_of_a_strided_source_says_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    take = _copying(lambda a: not a.flags.c_contiguous)
    cases = [{"producer": _placed(0), "layout": lay} for lay in ("contiguous", "transposed", "negative")]
    assert _reasons_of(monkeypatch, take, *cases) == [("zero-copy", ""), ("copy", "layout"), ("copy", "layout")]


def test_a_copy_of_one_dtype_says_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    take = _copying(lambda a: a.dtype == np.bool_)
    cases = [{"producer": _placed(0), "dtype": dt, "layout": lay} for dt in ("float32", "bool")
             for lay in ("contiguous", "transposed")]  # fmt: skip
    assert _reasons_of(monkeypatch, take, *cases) == [("zero-copy", ""), ("zero-copy", ""), ("copy", "dtype"),
                                                      ("copy", "dtype")]  # fmt: skip


def test_a_copy_of_a_read_only_source_says_read_only(monkeypatch: pytest.MonkeyPatch) -> None:
    take = _copying(lambda a: not a.flags.writeable)
    cases = [{"producer": _placed(0)}, {"producer": _placed(0), "readonly": True}]
    assert _reasons_of(monkeypatch, take, *cases) == [("zero-copy", ""), ("copy", "read-only")]


def test_a_copy_the_other_cells_do_not_explain_has_no_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every case copied: nothing tells why, so nothing is claimed."""
    cases = [{"producer": _placed(0)}, {"producer": _placed(8), "layout": "transposed"}]
    assert _reasons_of(monkeypatch, _copies, *cases) == [("copy", ""), ("copy", "")]


def test_copy_true_copies_because_it_was_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = _np_consumer(lambda x: np.from_dlpack(x, copy=True), protocol="dlpack-copy")
    cells = [_run(monkeypatch, consumer)]
    copy_reasons(cells)
    assert (cells[0].verdict, cells[0].reason) == ("copy", "requested")


# ------------------------------------------------------------------- registry


def test_every_rule_names_its_spec_and_section() -> None:
    for r in RULES.values():
        assert r.spec and r.section and r.text.endswith(".") and r.url.startswith("https://")
        assert r.cite() == f"{r.spec}, {r.section}"
    with pytest.raises(KeyError, match="unknown rule 'nope'"):
        rule("nope")


def test_the_docs_list_every_rule_with_its_spec() -> None:
    """docs/conformance.md lists the one table whole; docs/matrix.md's rules
    are rules of that table, cited with their spec."""
    import re
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs"
    conformance_page = (docs / "conformance.md").read_text()
    for name, r in RULES.items():
        assert f"| `{name}` | {r.spec}, {r.section} |" in conformance_page, name
    matrix_page = (docs / "matrix.md").read_text().split("## Rules", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\| `([^`]+)` \| ([^,|]+)", matrix_page, re.M)
    assert len(listed) >= 10
    for name, spec in listed:
        assert name in RULES and RULES[name].spec == spec.strip(), name


def test_culprits_name_the_library_that_broke_the_rule() -> None:
    from bridge.kit.matrix_grid import culprits

    def v(producer: str, consumer: str, rule: str, detail: str = "", verdict: str = "violation") -> Cell:
        return Cell(producer, consumer, "dlpack", "float32", "contiguous", True, verdict, detail, rule)

    cells = [
        v("numpy", "torch", "read-only"),                      # only torch writes through: torch's
        v("bad", "numpy", "read-only"), v("bad", "bridge", "read-only"),
        v("bad", "torch", "read-only"),                        # the references fail too: the producer's
        v("tf", "numpy", "exceptions", "refused with RuntimeError [raised by tf]: x"),
        v("numpy", "jax", "exceptions", "refused with JaxRuntimeError: x"),
        v("old", "numpy", "dl_device", "__dlpack__ does not take dl_device=: TypeError"),
        v("numpy", "torch", "", "the producer crashed making this case: x", "crash"),
        v("tf", "paddle", "", "importing paddle beside tf crashed: x", "crash"),
        v("numpy", "torch", "", "process died (exit -6): terminate called", "crash"),
        v("numpy", "torch", "", "", "zero-copy"),
    ]  # fmt: skip
    assert culprits(cells) == ["torch", "bad", "bad", "bad", "tf", "jax", "old", "numpy", "paddle", "torch", ""]


# ------------------------------------- the rules of issue 22's protocols


def _bridge_producer(ref: np.ndarray[Any, Any]) -> Any:
    import bridge

    return bridge.from_numpy(np.ascontiguousarray(ref))


def test_jax_array_rule_catches_a_consumer_misreading_the_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    jnp = pytest.importorskip("jax.numpy")
    wrong = _np_consumer(lambda o: np.asarray(jnp.asarray(o)) + 1, protocol="jax-array", peer="broken")
    _broken(_run(monkeypatch, wrong, producer=_bridge_producer), "jax-array")
    right = _np_consumer(lambda o: np.asarray(jnp.asarray(o)), protocol="jax-array", peer="jax")
    _ok(_run(monkeypatch, right, producer=_bridge_producer))
    # a producer without __jax_array__ is not held to it (its cells are n/a)
    assert not matrix_cell._SPEAKS["jax-array"](np.arange(3)) and matrix_cell._SPEAKS["jax-array"](_bridge_producer(np.arange(3)))


def test_arrow_device_stream_rule_catches_a_wrong_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    import bridge

    def read(o: Any) -> np.ndarray[Any, Any]:
        return np.asarray(bridge.from_arrow(o.__arrow_c_device_stream__()))

    wrong = _np_consumer(lambda o: read(o)[::-1].copy(), protocol="arrow-device-stream", peer="broken")
    _broken(_run(monkeypatch, wrong, producer=_bridge_producer, layout="contiguous"), "arrow-device-stream")
    _ok(_run(monkeypatch, _np_consumer(read, protocol="arrow-device-stream", peer="bridge"),
             producer=_bridge_producer))  # fmt: skip


def test_packed_subbyte_rule_judges_sub_byte_values(monkeypatch: pytest.MonkeyPatch) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import bridge

    def misread(x: Any) -> np.ndarray[Any, Any]:  # a consumer that gets the nibbles wrong
        a = np.asarray(bridge.from_dlpack(x, copy=True))
        return (a.view(np.uint8) ^ 1).view(ml_dtypes.float4_e2m1fn)

    broken = _np_consumer(misread, peer="broken")
    _broken(_run(monkeypatch, broken, dtype="float4_e2m1fn", producer=_bridge_producer), "packed-subbyte")
    fine = _np_consumer(lambda x: np.asarray(bridge.from_dlpack(x, copy=True)), peer="bridge")
    _ok(_run(monkeypatch, fine, dtype="float4_e2m1fn", producer=_bridge_producer))


def test_a_told_copy_without_addresses_is_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """A consumer whose result's address cannot be read (nanoarrow, pandas)
    but that says it copied and why (bridge.convert's CopyWarning) gives a
    ``copy`` cell with that reason, not ``unverified``; saying nothing leaves
    it unverified."""
    for told, want in ((("unpack", "convert() copied"), "copy"), (("", ""), "unverified")):
        consumer = Consumer("numpy", "bridge-convert", lambda a: np.array(a, copy=True),
                            lambda a: np.array(a, copy=True), lambda a: None, lambda a: True,
                            dtype_of=lambda a: a.dtype.name, told=lambda told=told: told)  # fmt: skip
        cell = _run(monkeypatch, consumer)
        assert cell.verdict == want, (cell.verdict, cell.detail)
        if want == "copy":
            assert cell.reason == "unpack"
