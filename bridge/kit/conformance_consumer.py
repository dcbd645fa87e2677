"""Consumer checks: hand-made capsules, good and malformed, fed to a
``from_dlpack``-like function, each judged on what it returned or raised and
on how often it called the struct's deleter.

:data:`CONSUMER_CASES` lists the cases. With isolation they run in a child
process (:mod:`bridge.kit.isolation`), so a consumer that crashes on a case
fails that case and the rest run in a fresh child.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bridge.core.native import _drivers
from bridge.kit import rules as spec_rules
from bridge.kit.capsules import Handmade, same_values, test_deleter_calls, young_gc
from bridge.kit.conformance_report import FAILED, PASSED, WARNING, RuleResult, exc_text, short
from bridge.kit.isolation import emit, load, run_child, spec_of

__all__ = ["CONSUMER_CASES", "ISOLATION", "ISOLATION_RULE", "run_case", "consumer_main", "check_consumer"]

_KEEP: list[Handmade] = []  # structs fed to consumers live as long as the process


class _CapsuleProducer:
    """Hands a fixed capsule to a consumer through the ``__dlpack__`` protocol."""

    def __init__(self, capsule: Any, device: tuple[int, int], old_signature: bool = False) -> None:
        self.capsule = capsule
        self.device = device
        self.old_signature = old_signature

    def __dlpack__(self, **kwargs: Any) -> Any:
        unknown = sorted(set(kwargs) - {"stream"})
        if self.old_signature and unknown:
            raise TypeError(f"__dlpack__() got an unexpected keyword argument {unknown[0]!r}")
        cap, self.capsule = self.capsule, None
        if cap is None:
            raise BufferError("this producer's capsule was already handed out")
        return cap

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


class _ChainedProducer:
    """An object whose type publishes a C exchange API version chain (a major
    2 table whose prev_api is a major 1 table; ``bridge._drivers``): the major
    1 table hands out ``tensor`` (a bridge tensor over the hand-made struct),
    the major 2 table counts any call and fails. ``__dlpack__`` is there for
    consumers that do not use the C API (or find no table they know)."""

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def _chained(h: Handmade) -> Any:
    from bridge.interop.dlpack import from_dlpack

    tp = type("ChainedProducer", (_ChainedProducer,),
              {"__dlpack_c_exchange_api__": _drivers.exchange_chain((2, 1))})  # fmt: skip
    return tp(from_dlpack(h.capsule()))


# float4_e2m1fn's codes 1..6 and their values (e2m1: 0.5 steps up to 2, then 3, 4).
_F4_CODES = np.array([1, 2, 3, 4, 5, 6], np.uint8)
_F4_VALUES = [[0.5, 1.0, 1.5], [2.0, 3.0, 4.0]]


def _packed_f4(**kw: Any) -> Handmade:
    """Six float4 values (2, 3) packed two per byte, low nibble first: 3 bytes."""
    packed = (_F4_CODES[0::2] | (_F4_CODES[1::2] << 4)).astype(np.uint8)
    return Handmade(packed, shape=(2, 3), strides=(3, 1), code=17, bits=4, **kw)


@dataclass(frozen=True, slots=True)
class _Case:
    kind: str  # "good": correct values; "may-refuse": values or a clean exception; "bad": exception
    doc: str
    make: Callable[[], Handmade]
    name: str | None = None  # capsule name override
    old_signature: bool = False
    deleter_calls: int = 1
    rule: str = ""  # the key of bridge.kit.rules.RULES the case judges
    expected: Any = None  # the values a correct consumer sees, when the struct's buffer does not say
    producer: Callable[[Handmade], Any] | None = None  # the object handed to the consumer, made of the struct


def _f32(n: int) -> Any:
    return np.arange(n, dtype=np.float32) + 0.5


_CASES: dict[str, _Case] = {
    "consumer-accepts-versioned": _Case(
        "good", "a v1.3 float32 (2, 3) C-contiguous capsule", lambda: Handmade(), rule="values"),
    "consumer-accepts-legacy": _Case(
        "good", "a legacy capsule returned even when max_version is asked (allowed)",
        lambda: Handmade(versioned=False), rule="max_version"),
    "consumer-accepts-old-signature": _Case(
        "good", "a producer whose __dlpack__ takes no max_version: retry without keywords",
        lambda: Handmade(versioned=False), old_signature=True, rule="signature"),
    "consumer-accepts-strided": _Case(
        "good", "transposed strides (1, 3)", lambda: Handmade(_f32(6), shape=(3, 2), strides=(1, 3)), rule="strides"),
    "consumer-accepts-byte-offset": _Case(
        "good", "byte_offset 8 is honoured (pytorch#168177)",
        lambda: Handmade(_f32(8)[2:].reshape(2, 3), byte_offset=8), rule="values"),
    "consumer-accepts-zero-size": _Case(
        "good", "shape (0, 3) with NULL data (onnxruntime#27450)",
        lambda: Handmade(_f32(0), shape=(0, 3), null_data=True), rule="shape"),
    "consumer-accepts-negative-strides": _Case(
        "may-refuse", "strides (-1,) from the last element: values, or a clean refusal",
        lambda: Handmade(_f32(6)[::-1]), rule="strides"),
    "consumer-rejects-wrong-name": _Case(
        "bad", "a capsule named neither 'dltensor' nor 'dltensor_versioned'", lambda: Handmade(),
        name="not_a_dltensor", deleter_calls=0, rule="capsule"),
    "consumer-rejects-major-2": _Case("bad", "version 2.0", lambda: Handmade(major=2, minor=0), rule="capsule"),
    "consumer-rejects-ndim-negative": _Case("bad", "ndim -1", lambda: Handmade(ndim=-1), rule="shape"),
    "consumer-rejects-lanes-4": _Case("bad", "lanes 4", lambda: Handmade(lanes=4), rule="dtype"),
    "consumer-rejects-unknown-code": _Case(
        "bad", "dtype code 99", lambda: Handmade(np.zeros(6, np.uint8), code=99, bits=8), rule="dtype"),
    "consumer-rejects-bits-7": _Case("bad", "float with 7 bits", lambda: Handmade(bits=7), rule="dtype"),
    "consumer-rejects-null-shape": _Case("bad", "ndim 2 with a NULL shape", lambda: Handmade(null_shape=True), rule="shape"),
    "consumer-rejects-null-strides": _Case(
        "bad", "v1.3, ndim 2, NULL strides (v1.2+ requires strides)",
        lambda: Handmade(null_strides=True), rule="strides"),
    "consumer-rejects-null-data": _Case(
        "bad", "NULL data with 6 elements", lambda: Handmade(null_data=True), rule="values"),
    "consumer-packed-subbyte": _Case(
        "may-refuse", "v1.3 float4 (2, 3), no IS_SUBBYTE_TYPE_PADDED: six values packed in 3 bytes",
        lambda: _packed_f4(), rule="packed-subbyte", expected=_F4_VALUES),
    "consumer-packed-subbyte-legacy": _Case(
        "may-refuse", "a legacy float4 (2, 3) capsule (jax's): packed, 3 bytes",
        lambda: _packed_f4(versioned=False), rule="packed-subbyte", expected=_F4_VALUES),
    "consumer-padded-subbyte": _Case(
        "may-refuse", "v1.3 float4 (2, 3) flagged IS_SUBBYTE_TYPE_PADDED: one value per byte",
        lambda: Handmade(_F4_CODES, shape=(2, 3), code=17, bits=4, flags=4), rule="packed-subbyte",
        expected=_F4_VALUES),
    "consumer-accepts-null-strides-v1.1": _Case(
        "good", "v1.1, ndim 2, NULL strides: compact row-major before v1.2",
        lambda: Handmade(minor=1, null_strides=True), rule="non-null-strides"),
    "consumer-accepts-null-strides-legacy": _Case(
        "good", "a legacy capsule with NULL strides: compact row-major",
        lambda: Handmade(versioned=False, null_strides=True), rule="non-null-strides"),
    "consumer-walks-exchange-chain": _Case(
        "good", "a type whose exchange API is major 2 with prev_api major 1: never the unknown table",
        lambda: Handmade(), rule="exchange-api-chain", producer=_chained),
}  # fmt: skip

#: rule name -> what it feeds the consumer (consumer side), in the order they run.
CONSUMER_CASES: dict[str, str] = {name: case.doc for name, case in _CASES.items()}
for _case in _CASES.values():
    spec_rules.rule(_case.rule)  # a case cites only a rule of the one table (KeyError at import)

#: The entry saying where the cases ran; it cites the exceptions rule, since
#: only a consumer run in a child can have a crash (no exception at all)
#: reported instead of killing the caller.
ISOLATION = "consumer-isolation"
ISOLATION_RULE = "exceptions"


def _result(name: str, status: str, detail: str) -> RuleResult:
    """Case ``name``'s result, citing the case's rule."""
    return RuleResult(name, status, detail, _CASES[name].rule)


def _to_list(out: Any) -> Any:
    tolist = getattr(out, "tolist", None)
    if callable(tolist):
        return tolist()
    return np.asarray(out).tolist()


def run_case(consumer: Callable[[Any], Any], name: str) -> RuleResult:
    """Feed case ``name`` to ``consumer``; return its RuleResult (never raises)."""
    case = _CASES[name]
    h = case.make()
    _KEEP.append(h)
    gc.collect()
    start = test_deleter_calls()
    unknown_calls = _drivers.exchange_chain_calls()[1]
    if case.producer is not None:
        producer: Any = case.producer(h)
    else:
        producer = _CapsuleProducer(h.capsule(case.name), (1, 0), case.old_signature)
    out: Any = None
    err: Exception | None = None
    values: Any = None
    read_error: Exception | None = None
    try:
        out = consumer(producer)
    except Exception as e:
        err = e
    if err is None and case.kind != "bad":
        try:
            values = _to_list(out)
        except Exception as e:
            read_error = e
    del out, producer
    err_text = exc_text(err) if err is not None else ""
    err = None
    gc.collect()
    calls = test_deleter_calls() - start
    problem_note = ""
    if calls != case.deleter_calls:
        what = "leaked (never called)" if calls == 0 else f"called {calls} times"
        problem_note = f"; the deleter was {what}, expected {case.deleter_calls}"
    unknown_calls = _drivers.exchange_chain_calls()[1] - unknown_calls
    if unknown_calls:
        problem_note += (f"; it called a function of the major version 2 table {unknown_calls} time(s) "
                         "instead of walking prev_api to the major 1 table")  # fmt: skip
    if case.kind == "bad":
        if not err_text:
            return _result(name, FAILED, f"accepted {case.doc}" + problem_note)
        status = FAILED if problem_note else PASSED
        return _result(name, status, f"raised {err_text}" + problem_note)
    if err_text:
        if case.kind == "may-refuse":
            return _result(name, FAILED if problem_note else PASSED,
                              f"refused cleanly: {err_text}" + problem_note)  # fmt: skip
        return _result(name, FAILED, f"raised {err_text} for {case.doc}" + problem_note)
    if read_error is not None:
        return _result(name, FAILED, f"result unreadable: {exc_text(read_error)}" + problem_note)
    want = h.expected() if case.expected is None else case.expected
    if not same_values(values, want):
        return _result(
            name, FAILED, f"values {short(values)}, expected {short(want)}" + problem_note
        )
    status = FAILED if problem_note else PASSED
    return _result(name, status, f"values {short(want, 40)} correct" + problem_note)



_CHILD = (
    "import sys; from bridge.kit.conformance_consumer import consumer_main; "
    "sys.exit(consumer_main(sys.argv[1:]))"
)


def consumer_main(argv: list[str]) -> int:
    """Child entry: ``argv`` is ``spec case...``; loads the consumer from
    ``spec`` and runs each case, emitting a ``start`` event (the case name)
    before it and a ``result`` event (the RuleResult as a dict) after it."""
    spec, names = argv[0], argv[1:]
    consumer = load(spec)
    out = sys.stdout  # the consumer may replace sys.stdout; events go to the parent's pipe
    with young_gc():
        for name in names:
            emit("start", name, out)
            result = run_case(consumer, name)
            emit("result", result.to_dict(), out)
    return 0


def _stderr_clue(stderr: str) -> str:
    """``": line"``: the stderr line most likely to say why the child died
    (a C++ exception's ``what()``, Python's fatal error, an exception), else
    its last line; empty for no stderr."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for key in ("what():", "Fatal Python error", "Error"):
        for ln in lines:
            if key in ln:
                return f": {ln[:160]}"
    return f": {lines[-1][:160]}" if lines else ""


@dataclass
class _ChildRun:
    """What one child reported: the results it finished (into ``results``)
    and the case it had started and not finished (``current``)."""

    results: dict[str, RuleResult]
    current: str | None = None

    def on_event(self, event: str, payload: Any) -> None:
        """Record one event from the child (see :func:`bridge.kit.isolation.run_child`)."""
        if event == "start":
            self.current = payload
        elif event == "result":
            self.results[payload["name"]] = RuleResult(
                payload["name"], payload["status"], payload["detail"], payload.get("rule", "")
            )
            self.current = None


def _consumer_in_subprocess(spec: str, names: list[str], timeout: float) -> list[RuleResult]:
    results: dict[str, RuleResult] = {}
    pending = list(names)
    # The child must import what this process can: modules on sys.path that
    # are not on the default path (a test's tmp_path, a script's directory).
    env = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    while pending:
        run = _ChildRun(results)
        end = run_child(_CHILD, [spec, *pending], on_event=run.on_event, env=env, timeout=timeout)
        current = run.current
        last = _stderr_clue(end.stderr)
        if current is not None:
            why = (
                f"hung for {timeout:.0f} s"
                if end.timed_out
                else f"crashed the process ({end.cause()}{last})"
            )
            results[current] = _result(
                current, FAILED, f"{CONSUMER_CASES[current]}: the consumer {why}"
            )
            pending = [n for n in pending[pending.index(current) + 1 :] if n not in results]
            continue
        left = [n for n in pending if n not in results]
        for n in left:
            results[n] = _result(
                n, FAILED, f"the consumer subprocess failed ({end.cause()}{last})"
            )
        pending = []
    return [results[n] for n in names]


def check_consumer(consumer: Any, isolate: bool, timeout: float) -> list[RuleResult]:
    """Every consumer case fed to ``consumer`` (a function, or a
    ``"module:expr"`` naming one), after a ``consumer-isolation`` entry that
    says where they ran: in a child (``timeout`` seconds per child) when
    ``isolate`` and the consumer can be named, else in this process (a
    warning: a crash kills the caller). Never raises for what the consumer
    does; :func:`~bridge.kit.isolation.load` errors propagate."""
    names = list(_CASES)
    spec = spec_of(consumer) if isolate else None
    if spec is not None:
        return [
            RuleResult(ISOLATION, PASSED, f"ran in a subprocess as {spec!r}", ISOLATION_RULE),
            *_consumer_in_subprocess(spec, names, timeout),
        ]
    fn = load(consumer) if isinstance(consumer, str) else consumer
    why = (
        "isolate=False" if not isolate
        else "the consumer cannot be imported by name (pass a module-level function or 'module:expr')"
    )  # fmt: skip
    return [
        RuleResult(
            ISOLATION,
            WARNING,
            f"ran in this process ({why}): a crash would kill the caller",
            ISOLATION_RULE,
        ),
        *[run_case(fn, n) for n in names],
    ]

