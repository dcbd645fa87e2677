"""bridge.check: DLPack conformance of producers (the protocol, dtype/device exchange
and lifetime rules). The consumer cases, the report and its helpers, the pytest
plugin and the CLI are in test_conformance_tools.py."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from pycapsule import capsule_new

import bridge
from bridge.core.native import _C, _drivers
from bridge.kit import conformance_exchange, conformance_lifetime, conformance_protocol
from bridge.kit.conformance import (
    FAILED,
    NOT_APPLICABLE,
    PASSED,
    WARNING,
    Handmade,
    Report,
    check,
    inspect_capsule,
)

# The DLPack protocol, dtype/device exchange and lifetime rules; tests/kit/test_conformance_v13.py
# holds the producer rules of conformance_v13 (not applicable to most of the
# producers here, who do not speak what they judge).
ALL_RULES = [r.name for r in (*conformance_protocol.RULES, *conformance_exchange.RULES, *conformance_lifetime.RULES)]

#: NumPy's, torch's and the hand-made producers' dtype and device objects do
#: not speak the dtype/device exchange protocol (yet): those rules do not apply.
NO_EXCHANGE = {"dtype_exchange": NOT_APPLICABLE, "device_exchange": NOT_APPLICABLE}


def statuses(report: Report) -> dict[str, str]:
    return {e.name: e.status for e in report.entries if e.name in ALL_RULES}


def only(report: Report, **expected: str) -> None:
    """Every protocol and lifetime rule passed except those given as rule_name=status."""
    want = {name: PASSED for name in ALL_RULES}
    want.update({k.replace("_", "-"): v for k, v in expected.items()})
    assert statuses(report) == want, str(report)


def read_only_array() -> np.ndarray:
    a = np.arange(6.0)
    a.flags.writeable = False
    return a


# ------------------------------------------------------- conforming producers


def test_numpy_factory():
    report = check(lambda: np.arange(6.0).reshape(2, 3))
    assert report
    # NumPy refuses stream=1 with RuntimeError, not BufferError/ValueError.
    only(report, stream_cpu=WARNING, read_only_legacy=NOT_APPLICABLE, **NO_EXCHANGE)
    assert "RuntimeError" in report["stream-cpu"].detail
    assert "v1.0" in report["capsule-name-versioned"].detail  # NumPy 2.x speaks DLPack 1.0
    assert "refcount 2 -> 3" in report["deleter-unconsumed"].detail  # the capsule holds the array


def test_numpy_object_reuses_it():
    a = np.arange(4, dtype=np.int32)
    report = check(a)
    assert report and report.subject == "numpy.ndarray"
    only(report, stream_cpu=WARNING, read_only_legacy=NOT_APPLICABLE,
         producer_kept_alive=NOT_APPLICABLE, **NO_EXCHANGE)  # fmt: skip
    assert "pass a factory" in report["producer-kept-alive"].detail
    assert "refcount" in report["deleter-consumed"].detail
    assert a.tolist() == [0, 1, 2, 3]


def test_numpy_read_only():
    report = check(read_only_array)
    only(report, stream_cpu=WARNING, capsule_name_legacy=NOT_APPLICABLE, **NO_EXCHANGE)
    assert "READ_ONLY set" in report["read-only-flag"].detail
    assert "BufferError" in report["read-only-legacy"].detail


def test_numpy_non_native_byte_order_is_refused_and_the_rest_not_applicable():
    report = check(lambda: np.arange(3, dtype=np.dtype(np.float64).newbyteorder()))
    assert report
    st = statuses(report)
    assert st["dtype"] == PASSED and "byte order" in report["dtype"].detail
    assert st["copy-true"] == st["deleter-consumed"] == NOT_APPLICABLE


def test_bridge_tensors():
    only(check(lambda: bridge.arange(6, dtype=bridge.float32).reshape(2, 3).t()),
         read_only_legacy=NOT_APPLICABLE)  # fmt: skip
    ro = check(lambda: bridge.from_numpy(read_only_array()))
    only(ro, capsule_name_legacy=NOT_APPLICABLE)
    # bridge's capsule holds the storage's owner, not the Tensor object.
    assert "refcount 2 -> 2" in ro["deleter-unconsumed"].detail


def test_torch_tensors(torch):
    report = check(lambda: torch.arange(6.0).reshape(2, 3))
    # What torch 2.13 really does: copy=True copies but leaves IS_COPIED clear;
    # stream=1 on CPU is an AssertionError; no read-only tensors, so READ_ONLY
    # never applies (torch.from_numpy of a read-only array gives a writable tensor).
    only(report, copy_true=FAILED, stream_cpu=WARNING, read_only_flag=NOT_APPLICABLE,
         read_only_legacy=NOT_APPLICABLE, **NO_EXCHANGE)  # fmt: skip
    assert "IS_COPIED is clear" in report["copy-true"].detail
    assert "overlap" not in report["copy-true"].detail
    assert "AssertionError" in report["stream-cpu"].detail
    assert not report and [e.name for e in report.failed] == ["copy-true"]


# ------------------------------------------------------- broken producers


class Wrapper:
    """Delegates to a NumPy array, passing on only what __dlpack__ is given."""

    def __init__(self, a=None):
        self.a = np.arange(6.0) if a is None else a

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def tolist(self):
        return self.a.tolist()


class AlwaysLegacy(Wrapper):
    """(a) takes max_version but ignores it."""

    def __dlpack__(self, **kwargs):
        kwargs.pop("max_version", None)
        return self.a.__dlpack__(**kwargs)


class AlwaysVersioned(Wrapper):
    """(a') answers a legacy request with a versioned capsule."""

    def __dlpack__(self, **kwargs):
        kwargs["max_version"] = (1, 0)
        return self.a.__dlpack__(**kwargs)


class LeaksReadOnly(Wrapper):
    """(c) read-only data, exported as legacy through a writable alias."""

    def __init__(self):
        super().__init__()
        self.ro = self.a.view()
        self.ro.flags.writeable = False
        self.flags = self.ro.flags

    def __dlpack__(self, **kwargs):
        source = self.ro if (kwargs.get("max_version") or (0,))[0] >= 1 else self.a
        return source.__dlpack__(**kwargs)


class TakesAnything(Wrapper):
    """(d) swallows unknown keywords."""

    def __dlpack__(self, **kwargs):
        known = {"stream", "max_version", "dl_device", "copy"}
        return self.a.__dlpack__(**{k: v for k, v in kwargs.items() if k in known})


def test_always_legacy_fails_versioned_rules():
    report = check(AlwaysLegacy)
    assert not report
    assert report["capsule-name-versioned"].status == FAILED
    assert "legacy 'dltensor' capsule" in report["capsule-name-versioned"].detail
    assert report["max-version-negotiation"].status == FAILED
    assert report["capsule-name-legacy"].status == PASSED


def test_versioned_capsule_for_a_legacy_request_fails():
    report = check(AlwaysVersioned)
    assert report["capsule-name-legacy"].status == FAILED
    assert "'dltensor_versioned'" in report["capsule-name-legacy"].detail
    assert report["max-version-negotiation"].status == FAILED


def test_read_only_exported_as_legacy_fails():
    report = check(LeaksReadOnly)
    assert report["read-only-legacy"].status == FAILED
    assert "cannot carry READ_ONLY" in report["read-only-legacy"].detail
    assert report["read-only-flag"].status == PASSED


def test_unknown_keywords_accepted_fails():
    report = check(TakesAnything)
    assert [e.name for e in report.failed] == ["unknown-keyword"]
    assert "bogus=1" in report["unknown-keyword"].detail


class OldSignature(Wrapper):
    """A pre-2023 producer: no keywords but stream."""

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__(stream=stream)


def test_legacy_only_producer_is_a_warning_not_a_failure():
    report = check(OldSignature)
    assert report
    assert report["capsule-name-versioned"].status == WARNING
    assert report["copy-true"].status == NOT_APPLICABLE
    assert "legacy-only" in report["copy-true"].detail


# Structs handed out by the producers below live for the whole session: their
# capsules may outlive the producers, and their deleters only count.
_HANDMADE: list[Handmade] = []


class HandmadeProducer:
    """A conforming producer built on hand-made capsules (counting deleters)."""

    def __init__(self):
        self.values = np.arange(6, dtype=np.float32).reshape(2, 3)

    def _make(self, versioned, flags=0, values=None):
        h = Handmade(self.values if values is None else values, versioned=versioned, flags=flags)
        _HANDMADE.append(h)
        return h

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if stream is not None:
            raise BufferError("host memory: stream must be None")
        if dl_device is not None and tuple(dl_device) != (1, 0):
            raise BufferError(f"cannot export to {dl_device}")
        versioned = max_version is not None and max_version[0] >= 1
        if copy:
            return self._make(versioned, 2, self.values.copy()).capsule()
        return self._make(versioned).capsule()

    def __dlpack_device__(self):
        return (1, 0)

    def tolist(self):
        return self.values.tolist()


class TwinCapsules(HandmadeProducer):
    """(b) keeps a second live capsule over each exported struct: when the
    producer dies, the twin's destructor calls the deleter a second time (a
    double free with a real deleter; here the deleter only counts)."""

    def __init__(self):
        super().__init__()
        self.twins = []

    def __dlpack__(self, **kwargs):
        cap = super().__dlpack__(**kwargs)
        self.twins.append(_HANDMADE[-1].capsule())
        return cap


def test_handmade_producer_conforms():
    only(check(HandmadeProducer), read_only_flag=NOT_APPLICABLE, read_only_legacy=NOT_APPLICABLE, **NO_EXCHANGE)


def test_deleter_called_twice_is_caught():
    before = _C.stats()["test_deleters"]
    report = check(TwinCapsules)
    assert report["deleter-consumed"].status == FAILED
    detail = report["deleter-consumed"].detail
    assert "deleter ran 2 times: 1 by the consumer, 0 by the consumed capsule's destructor, 1 later" in detail
    assert "leaked on purpose" in detail
    gc.collect()
    assert _C.stats()["test_deleters"] > before


_NAMES = {True: b"dltensor_versioned", False: b"dltensor"}  # must outlive the capsules


class LeaksUnconsumed(np.ndarray):
    """(f) capsules without a destructor: dropped unconsumed, they never call the
    deleter (NumPy's struct, whose manager_ctx holds a reference to the array)."""

    def __dlpack__(self, **kwargs):
        cap = super().__dlpack__(**kwargs)
        view = inspect_capsule(cap)
        _drivers.mark_consumed(cap)  # NumPy's destructor leaves the struct to us now
        return capsule_new(view.address, _NAMES[view.versioned])


def test_unconsumed_capsule_leak_is_caught_and_cleaned_up():
    report = check(lambda: np.arange(6.0).view(LeaksUnconsumed))
    assert report["deleter-unconsumed"].status == FAILED
    assert "never called the deleter" in report["deleter-unconsumed"].detail
    assert "(a leak)" in report["deleter-unconsumed"].detail
    assert report["deleter-consumed"].status == PASSED


class Unreadable(Wrapper):
    def __dlpack_device__(self):
        return ("cpu", 0)


def test_bad_dlpack_device():
    report = check(Unreadable)
    assert report["dlpack-device"].status == FAILED
    assert "not a tuple of two ints" in report["dlpack-device"].detail


def test_not_a_producer():
    with pytest.raises(TypeError, match="__dlpack__"):
        check([1, 2, 3])
    with pytest.raises(TypeError, match="factory returned"):
        check(lambda: [1, 2, 3])


# ------------------------------------- each wrong field under its own rule


class Lying(np.ndarray):
    """A NumPy array (its shape, strides and dtype are what it says about
    itself) whose __dlpack__ exports its memory with one field changed."""

    def __dlpack__(self, **kwargs):
        return self.lie(np.asarray(self)).__dlpack__(**kwargs)


class LyingStrides(Lying):
    def lie(self, a):  # (3, 3): the transposed strides span the same bytes
        return np.lib.stride_tricks.as_strided(a, strides=a.strides[::-1])


class LyingShape(Lying):
    def lie(self, a):
        return a.reshape(a.shape[::-1])


class LyingDtype(Lying):
    def lie(self, a):
        return a.view(np.int64)


class StridesWithoutSelf(Wrapper):
    """Says only its values (tolist): its capsule claims C order over memory
    in F order."""

    def __init__(self):
        super().__init__(np.arange(6.0).reshape(2, 3, order="F"))

    def __dlpack__(self, **kwargs):
        return np.lib.stride_tricks.as_strided(self.a, strides=(24, 8)).__dlpack__(**kwargs)


@pytest.mark.parametrize(
    ("make", "rule", "evidence"),
    [
        (lambda: np.arange(9.0).reshape(3, 3).view(LyingStrides), "strides",
         "the capsule's strides (1, 3) are not the object's (3, 1)"),
        (StridesWithoutSelf, "strides", "read with strides (1, 2) the memory holds tolist()'s values"),
        (lambda: np.arange(6.0).reshape(2, 3).view(LyingShape), "shape",
         "the capsule's shape (3, 2) is not the object's (2, 3)"),
        (lambda: np.arange(6.0).view(LyingDtype), "dtype",
         "the capsule's (code=0, bits=64) is not the object's dtype float64"),
    ],
    ids=["strides", "strides-from-values", "shape", "dtype"],
)  # fmt: skip
def test_a_wrong_field_fails_its_own_rule_and_no_other(make, rule, evidence):
    report = check(make)
    assert [e.name for e in report.failed] == [rule], str(report)
    assert report[rule].rule == rule and evidence in report[rule].detail
    # The values differ because of that field: not a failure of their own.
    assert report["values"].status == NOT_APPLICABLE and f"see {rule}" in report["values"].detail
    assert "byte order" not in str(report)


# ------------------------------------------------- dtype and device exchange


class _Says:
    """A foreign dtype or device object: ``method`` returns ``answer`` (or raises it)."""

    def __init__(self, answer):
        self.answer = answer

    def _say(self):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    def __repr__(self):
        return f"<{type(self).__name__} {self.answer!r}>"


class _DType(_Says):
    def __dlpack_data_type__(self):
        return self._say()


class _Device(_Says):
    def __dlpack_device__(self):
        return self._say()


class ExchangeProducer(Wrapper):
    """A float64 NumPy array behind dtype and device objects that speak the
    exchange protocol, truthfully by default."""

    def __init__(self, dtype=(2, 64, 1), device=(1, 0), attr="device"):
        super().__init__()
        self.dtype = _DType(dtype)
        setattr(self, attr, _Device(device))


def exchange_statuses(producer) -> tuple[str, str]:
    report = check(producer)
    return report["dtype-exchange"].status, report["device-exchange"].status


def test_exchange_objects_that_tell_the_truth_pass():
    report = check(ExchangeProducer)
    assert report["dtype-exchange"].status == PASSED, report["dtype-exchange"].detail
    assert "(2, 64, 1) = the capsule's DLDataType" in report["dtype-exchange"].detail
    assert report["device-exchange"].status == PASSED
    assert "and the tensor's __dlpack_device__()" in report["device-exchange"].detail
    assert report["dtype-exchange"].rule == report["device-exchange"].rule == "dtype-device-exchange"


def test_exchange_paddle_place_attribute_is_read():
    report = check(lambda: ExchangeProducer(attr="place"))
    assert report["device-exchange"].status == PASSED and "place" in report["device-exchange"].detail


def test_exchange_dtype_that_lies_fails():
    report = check(lambda: ExchangeProducer(dtype=(2, 32, 1)))
    assert report["dtype-exchange"].status == FAILED
    assert "says (2, 32, 1), the capsule's DLDataType is (2, 64, 1)" in report["dtype-exchange"].detail


@pytest.mark.parametrize("answer", [(2, 64), ("2", 64, 1), (2, 64, True), None])
def test_exchange_dtype_malformed_answer_fails(answer):
    assert exchange_statuses(lambda: ExchangeProducer(dtype=answer))[0] == FAILED


def test_exchange_dtype_method_that_raises_fails():
    report = check(lambda: ExchangeProducer(dtype=ValueError("undefined")))
    assert report["dtype-exchange"].status == FAILED and "ValueError" in report["dtype-exchange"].detail


def test_exchange_device_that_lies_fails():
    report = check(lambda: ExchangeProducer(device=(2, 0)))
    assert report["device-exchange"].status == FAILED
    assert "says (2, 0), the capsule's DLDevice is (1, 0)" in report["device-exchange"].detail


def test_exchange_device_disagreeing_with_the_tensor_fails():
    class OwnDeviceLies(ExchangeProducer):
        def __dlpack_device__(self):
            return (3, 0)

    report = check(OwnDeviceLies)
    assert report["device-exchange"].status == FAILED
    assert "the tensor's __dlpack_device__() (3, 0)" in report["device-exchange"].detail


@pytest.mark.parametrize("answer", [(1,), (1.0, 0), None, RuntimeError("gone")])
def test_exchange_device_malformed_answer_fails(answer):
    assert exchange_statuses(lambda: ExchangeProducer(device=answer))[1] == FAILED


def test_exchange_not_applicable_without_the_methods():
    report = check(Wrapper)
    assert report["dtype-exchange"].status == report["device-exchange"].status == NOT_APPLICABLE
    assert "has no __dlpack_data_type__" in report["dtype-exchange"].detail


def test_exchange_paddle_tensors():
    """paddle 3.3 speaks the protocol on its dtypes and devices, and both agree
    with its exports; its tensors' own __dlpack_device__() gives a None id."""
    paddle = pytest.importorskip("paddle")
    report = check(lambda: paddle.arange(6).astype("float32"))
    assert report["dtype-exchange"].status == PASSED, report["dtype-exchange"].detail
    assert report["device-exchange"].status == PASSED, report["device-exchange"].detail
    assert report["dlpack-device"].status == FAILED and "None" in report["dlpack-device"].detail
