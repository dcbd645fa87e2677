"""bridge.check's rules of DLPack v1.3 past the basics and of the protocols next
to DLPack (bridge.kit.conformance_v13, and the consumer cases that judge the
same rules): each passes bridge and the peers that speak it, fails a
deliberately broken producer or consumer, and is not applicable where the
producer does not speak what it judges."""

from __future__ import annotations

import numpy as np
import pytest
from bridge._native import ffi

import bridge
from bridge.core.native import _drivers
from bridge.kit import conformance_v13
from bridge.kit.conformance import FAILED, NOT_APPLICABLE, PASSED, WARNING, Handmade, check
from bridge.kit.conformance_consumer import run_case
from bridge.kit.rules import RULES

V13 = [r.name for r in conformance_v13.RULES]
_KEEP: list[Handmade] = []  # hand-made structs live for the session (their capsules may outlive a test)


def v13(report) -> dict[str, str]:
    return {e.name: e.status for e in report.entries if e.name in V13}


def test_every_new_rule_is_in_the_table_and_judged():
    assert V13 == ["non-null-strides", "packed-subbyte", "exchange-api-chain", "jax-array",
                   "arrow-device-stream", "cuda-stream"]  # fmt: skip
    for name in V13:
        assert name in RULES and RULES[name].url.startswith("https://")


def test_bridge_passes_what_it_speaks():
    report = check(lambda: bridge.arange(6.0).reshape(2, 3))
    assert v13(report) == {"non-null-strides": PASSED, "packed-subbyte": NOT_APPLICABLE,
                           "exchange-api-chain": PASSED, "jax-array": PASSED,
                           "arrow-device-stream": PASSED, "cuda-stream": NOT_APPLICABLE}  # fmt: skip
    f4 = check(lambda: bridge.tensor([1, 2, 3, 4, 5, 6], dtype=bridge.uint8).view(bridge.float4_e2m1fn))
    assert f4["packed-subbyte"].status == PASSED and "legacy: packed" in f4["packed-subbyte"].detail
    # float4 has no Arrow type: the device stream's refusal is not this rule's to judge
    assert f4["arrow-device-stream"].status == NOT_APPLICABLE


def test_numpy_is_held_only_to_what_it_speaks():
    assert v13(check(lambda: np.arange(6.0))) == {name: NOT_APPLICABLE for name in V13} | {
        "non-null-strides": PASSED}


def test_peers_that_speak_the_rules(torch):
    report = check(lambda: torch.arange(6.0))
    assert report["exchange-api-chain"].status == PASSED and "chain 1.3" in report["exchange-api-chain"].detail
    x2 = check(lambda: torch.tensor([33, 67], dtype=torch.uint8).view(torch.float4_e2m1fn_x2))
    assert x2["packed-subbyte"].status == PASSED and x2["dtype"].status == PASSED  # lanes 2: a packed pair
    jnp = pytest.importorskip("jax.numpy")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    jax_f4 = check(lambda: jnp.asarray(np.array([1, 2, 3, 4], np.uint8).view(ml_dtypes.float4_e2m1fn)))
    assert jax_f4["packed-subbyte"].status == PASSED  # jax's legacy float4 capsules are packed


# ------------------------------------------------------------ broken producers


class Exporter:
    """A producer handing out a hand-made capsule per call (``make(versioned)``)."""

    def __init__(self, make, values, device=(1, 0)):
        self.make, self.values, self.device = make, values, device

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        h = self.make(max_version is not None and max_version[0] >= 1)
        _KEEP.append(h)
        return h.capsule()

    def __dlpack_device__(self):
        return self.device

    def tolist(self):
        return self.values


def test_null_strides_from_a_v13_producer_fail():
    report = check(lambda: Exporter(lambda v: Handmade(versioned=v, null_strides=True), [[0.0, 1, 2], [3, 4, 5]]))
    assert report["non-null-strides"].status == FAILED and "v1.3" in report["non-null-strides"].detail
    old = check(lambda: Exporter(lambda v: Handmade(versioned=v, minor=1, null_strides=True), [[0.0, 1, 2], [3, 4, 5]]))
    assert old["non-null-strides"].status == WARNING  # allowed before v1.2


F4_CODES = np.array([1, 2, 3, 4, 5, 6], np.uint8)
F4_VALUES = [0.5, 1.0, 1.5, 2.0, 3.0, 4.0]


def test_padded_values_in_a_legacy_capsule_fail():
    """What bridge did before issue 22: one value per byte in a legacy capsule,
    which every consumer reads as packed."""

    def make(versioned):
        flags = 4 if versioned else 0
        return Handmade(F4_CODES, versioned=versioned, code=17, bits=4, flags=flags)

    report = check(lambda: Exporter(make, F4_VALUES))
    assert report["packed-subbyte"].status == FAILED and "legacy" in report["packed-subbyte"].detail


def test_unflagged_padded_values_fail():
    report = check(lambda: Exporter(lambda v: Handmade(F4_CODES, versioned=v, code=17, bits=4), F4_VALUES))
    assert report["packed-subbyte"].status == FAILED and "packed (no IS_SUBBYTE_TYPE_PADDED)" in report[
        "packed-subbyte"].detail


class _Chained:
    def __init__(self):
        self.tensor = bridge.arange(6.0)

    def __dlpack__(self, **kw):
        return self.tensor.__dlpack__(**kw)

    def __dlpack_device__(self):
        return (1, 0)

    def tolist(self):
        return self.tensor.tolist()


@pytest.mark.parametrize(
    "majors, loop, status, words",
    [((2, 1), False, PASSED, "chain 2.0 -> 1.0"), ((2,), False, WARNING, "no major version 1"),
     ((1, 2), False, FAILED, "not an older one"), ((3, 2), True, FAILED, "not an older one")],
    ids=["walkable", "no-v1", "newer-prev", "loop"],
)  # fmt: skip
def test_exchange_api_chains(majors, loop, status, words):
    tp = type("Chained", (_Chained,), {"__dlpack_c_exchange_api__": _drivers.exchange_chain(majors, loop)})
    result = check(tp)["exchange-api-chain"]
    assert result.status == status and words in result.detail, result


class WrongJax:
    def __init__(self):
        self.a = np.arange(4.0)

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return (1, 0)

    def __jax_array__(self):
        import jax.numpy as jnp

        return jnp.zeros(4)


def test_a_jax_array_of_other_values_fails():
    pytest.importorskip("jax")
    result = check(WrongJax)["jax-array"]
    assert result.status == FAILED and "holds" in result.detail


class DeviceStream:
    """A producer whose device stream puts its arrays on another device type."""

    def __init__(self, array_device_type=None, name_ok=True):
        self.a = np.arange(4.0)
        self.array_device_type, self.name_ok = array_device_type, name_ok

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return (1, 0)

    def __arrow_c_device_stream__(self, requested_schema=None, **kwargs):
        pa = pytest.importorskip("pyarrow")
        plain = pa.chunked_array([pa.array(self.a)]).__arrow_c_stream__()
        if not self.name_ok:
            return plain
        return _drivers.device_stream(plain, 1, -1, 0, self.array_device_type)


def test_device_streams():
    assert check(DeviceStream)["arrow-device-stream"].status == PASSED
    bad = check(lambda: DeviceStream(array_device_type=2))["arrow-device-stream"]
    assert bad.status == FAILED and "device type 2, the stream's is 1" in bad.detail
    named = check(lambda: DeviceStream(name_ok=False))["arrow-device-stream"]
    assert named.status == FAILED and "'arrow_array_stream'" in named.detail


class FakeCudaProducer:
    """A CUDA producer (a fake device pointer) with a choice of answer to stream objects."""

    def __init__(self, refuse=None):
        cai = {"shape": (4,), "typestr": "<f4", "data": (0xDEAD0000, False), "version": 3, "strides": None,
               "stream": None}  # fmt: skip
        self.t = bridge.from_cuda_array_interface(type("C", (), {"__cuda_array_interface__": cai})(), device_id=0)
        self.refuse = refuse

    def __dlpack__(self, *, stream=None, **kw):
        if self.refuse is not None and hasattr(stream, "__cuda_stream__"):
            raise self.refuse("not a stream I take")
        return self.t.__dlpack__(stream=stream, **kw)

    def __dlpack_device__(self):
        return (2, 0)


@pytest.mark.parametrize("refuse, status", [(None, PASSED), (TypeError, PASSED), (RuntimeError, FAILED)])
def test_cuda_stream_objects_as_stream(refuse, status):
    result = check(lambda: FakeCudaProducer(refuse))["cuda-stream"]
    assert result.status == status, result
    assert check(lambda: FakeCudaProducer().t)["cuda-stream"].status == PASSED  # bridge's own CUDA tensors


# ------------------------------------------------------------ consumer cases


def _one_per_byte(x):
    """A broken consumer: reads a sub-byte capsule one value per byte, whatever the flag says."""
    from bridge.kit.capsules import inspect_capsule

    cap = x.__dlpack__(max_version=(1, 3))
    view = inspect_capsule(cap)
    n = int(np.prod(view.shape))
    codes = np.frombuffer(ffi.buffer(ffi.cast("uint8_t *", view.start), n), np.uint8).copy()
    table = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6])
    return table[codes & 15].reshape(view.shape)  # (the unconsumed capsule's destructor runs the deleter)


def _naive_exchange(x):
    """A broken consumer: uses the first table of the type's exchange API chain
    whatever its major version (a driver call: the tables want the GIL held)."""
    return _drivers.api_from_head(type(x).__dlpack_c_exchange_api__, x)


def test_consumer_cases_catch_broken_consumers():
    packed = run_case(_one_per_byte, "consumer-packed-subbyte")
    assert packed.status == FAILED and packed.rule == "packed-subbyte"
    assert run_case(_one_per_byte, "consumer-padded-subbyte").status == PASSED
    chain = run_case(_naive_exchange, "consumer-walks-exchange-chain")
    assert chain.status == FAILED and "major version 2 table" in chain.detail
    for name in ("consumer-packed-subbyte", "consumer-packed-subbyte-legacy", "consumer-padded-subbyte",
                 "consumer-accepts-null-strides-v1.1", "consumer-accepts-null-strides-legacy",
                 "consumer-walks-exchange-chain"):  # fmt: skip
        assert run_case(bridge.from_dlpack, name).status == PASSED, name
