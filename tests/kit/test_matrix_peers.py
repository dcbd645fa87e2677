"""The matrix's newer peers, exercised for real: paddle (with its DLPack C
exchange API), mlx, onnxruntime, array-api-strict, pandas, xarray (the test
extra installs them) and tensorflow, warp and Modular MAX (the heavy extra:
tested when present; the newest peers have tests/kit/test_matrix_new_peers.py). Each runs in the matrix's own child processes, as ``python -m bridge matrix``
runs it; the facts asserted are what the installed versions do.
"""

from __future__ import annotations

import pytest

from bridge.kit import matrix_run
from bridge.kit.matrix_grid import HEAVY_PEERS, Cell, available, bridge_at_fault
from bridge.kit.matrix_peers import CONSUMES, consumer_entries, consumers
from bridge.kit.matrix_run import plan, run_matrix, run_worker

NEW = ("paddle", "mlx", "onnxruntime", "array_api_strict", "pandas", "xarray")


# The heavy extra's peers are tested where they are installed (make test's
# default install has no tensorflow or warp).
PEERS_UNDER_TEST = [*NEW, *(pytest.param(p, marks=pytest.mark.skipif(
    not available(p), reason=f"{p} is in the heavy extra, not installed here")) for p in HEAVY_PEERS)]  # fmt: skip


def need(peer: str) -> None:
    assert available(peer), f"{peer} is in the test extra but not importable"


def cells_of(producers: list[str], consumer_peers: set[str], dtypes: tuple[str, ...] = ("float32",),
             protocols: tuple[str, ...] | None = None) -> list[Cell]:  # fmt: skip
    return run_matrix(plan(producers, consumer_entries(consumer_peers), dtypes, protocols))


def where(cells: list[Cell], **kw: object) -> list[Cell]:
    return [c for c in cells if all(getattr(c, k) == v for k, v in kw.items())]


def test_consumes_table_matches_what_consumers_build() -> None:
    """The parent plans from CONSUMES without importing any peer; each child
    builds the real consumers: the two must name the same entries."""
    for peer in (p for p in CONSUMES if available(p) and p != "cupy"):
        built = {c.protocol for c in consumers({peer})}
        assert built == set(CONSUMES[peer]), peer


@pytest.mark.parametrize("peer", PEERS_UNDER_TEST)
def test_peer_exchanges_with_bridge_and_numpy_both_ways(peer: str) -> None:
    need(peer)
    cells = cells_of([peer, "numpy", "bridge"], {peer, "numpy", "bridge"}, protocols=("dlpack", "arrow"))
    mine = [c for c in cells if peer in (c.producer, c.consumer)]
    assert mine and not [c for c in mine if bridge_at_fault(c)], [c for c in mine if bridge_at_fault(c)]
    worked = [c for c in mine if c.verdict in ("zero-copy", "copy", "empty", "unverified")]
    assert any(c.producer == peer for c in worked), f"nothing {peer} made was taken"
    if CONSUMES.get(peer, ()) and set(CONSUMES[peer]) & {"dlpack", "arrow"}:
        assert any(c.consumer == peer for c in worked), f"{peer} took nothing"
    for c in mine:  # every violation names a rule a spec states
        assert c.verdict != "violation" or c.rule, c


def test_paddle_exchange_api_both_ways_with_bridge_and_torch() -> None:
    need("paddle")
    cells = cells_of(["paddle", "bridge", "torch"], {"paddle", "bridge", "torch", "tvm_ffi"},
                     protocols=("dlpack", "dlpack-c-api"))  # fmt: skip
    for producer, consumer in (("paddle", "bridge"), ("bridge", "paddle"), ("torch", "paddle"),
                               ("paddle", "torch"), ("paddle", "tvm_ffi")):  # fmt: skip
        c = where(cells, producer=producer, consumer=consumer, protocol="dlpack-c-api", layout="contiguous",
                  readonly=False)[0]  # fmt: skip
        assert (c.verdict, c.path) == ("zero-copy", "exchange-api"), c
    # bridge's from_dlpack reads paddle's API; paddle's from_dlpack asks __dlpack__.
    plain = where(cells, producer="paddle", consumer="bridge", protocol="dlpack", layout="contiguous")[0]
    assert plain.path == "exchange-api"
    back = where(cells, producer="bridge", consumer="paddle", protocol="dlpack", layout="contiguous")[0]
    assert back.path == "__dlpack__"


def test_paddle_writes_through_read_only_memory() -> None:
    """paddle 3.3 imports a READ_ONLY DLPack tensor as a writable one."""
    need("paddle")
    cells = cells_of(["numpy"], {"paddle"}, protocols=("dlpack",))
    ro = where(cells, layout="contiguous", readonly=True)[0]
    assert (ro.verdict, ro.rule) == ("violation", "read-only"), ro


def test_array_api_strict_is_a_clean_control() -> None:
    """The array API's reference library breaks no DLPack rule with NumPy or bridge."""
    need("array_api_strict")
    cells = cells_of(["array_api_strict", "numpy"], {"array_api_strict", "numpy", "bridge"},
                     dtypes=("float32", "int64", "bool"), protocols=("dlpack",))  # fmt: skip
    mine = [c for c in cells if "array_api_strict" in (c.producer, c.consumer)]
    bad = [c for c in mine if c.verdict in ("violation", "crash")]
    assert mine and not bad, bad


@pytest.mark.parametrize("peer", ["pandas", "xarray"])
def test_dataframe_arrow_streams_reach_bridge(peer: str) -> None:
    need(peer)
    c = cells_of([peer], {"bridge"}, protocols=("arrow",))
    got = where(c, layout="contiguous")[0]
    assert got.verdict in ("zero-copy", "unverified"), got


def test_an_import_crash_is_the_peers_and_the_run_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """A library that crashes when imported beside another is recorded as a
    crash of that pair, with its message, and the run goes on: the retry
    imports it first (the order in which such pairs usually work)."""
    code = (
        "import os, sys, json, bridge.kit.matrix_run as m\n"
        "real = m._import_peer\n"
        "def crashy(peer):\n"
        "    if peer == 'tvm_ffi' and 'dlpack' in sys.modules:\n"
        "        sys.stderr.write('Fatal Python error: Segmentation fault (simulated)\\n'); sys.stderr.flush()\n"
        "        os.abort()\n"
        "    real(peer)\n"
        "m._import_peer = crashy\n"
        "m.worker(**json.loads(sys.stdin.read()))\n"
    )
    cells = [Cell("pydlpack", "bridge", "dlpack", "int64", "contiguous", False),
             Cell("tvm_ffi", "bridge", "dlpack", "int64", "contiguous", False),
             Cell("tvm_ffi", "numpy", "dlpack", "int64", "contiguous", False)]  # fmt: skip
    finished, crash = run_worker(cells, None, code)
    assert [c.producer for c in finished] == ["pydlpack"]
    assert crash is not None and not crash[0] and crash[2][:2] == ["tvm_ffi", "pydlpack"]
    assert "importing tvm_ffi beside pydlpack crashed" in crash[1] and "Segmentation fault" in crash[1]
    monkeypatch.setattr(matrix_run, "_group_of", lambda cell: "one")  # one child, as in a heavy group
    out = run_matrix(cells, code=code)
    verdicts = {(c.producer, c.consumer): c for c in out}
    first = verdicts[("tvm_ffi", "bridge")]
    assert first.verdict == "crash" and "importing tvm_ffi beside pydlpack" in first.detail
    assert verdicts[("pydlpack", "bridge")].verdict in ("zero-copy", "unverified")
    assert verdicts[("tvm_ffi", "numpy")].verdict in ("zero-copy", "unverified")  # retried, tvm_ffi imported first


def test_crash_line_picks_the_telling_line() -> None:
    from bridge.kit.matrix_run import crash_line

    tf = ["I0000 cpu_feature_guard.cc:227] This TensorFlow binary is optimized",
          "F0000 00:00:1795454656.995748    4029 tensor.cc:899] Check failed: IsAligned() ptr = 0x5635ef34b2da",
          "*** Check failure stack trace: ***", "    @     0x7f75  cfunction_call"]  # fmt: skip
    assert crash_line(tf).startswith("tensor.cc:899] Check failed: IsAligned()")
    torch = ["terminate called after throwing an instance of 'c10::Error'", "  what():  negative strides"]
    assert crash_line(torch).startswith("terminate called")
    segv = ["Fatal Python error: Segmentation fault", "", "Current thread 0x1 (most recent call first):",
            '  File "<frozen importlib._bootstrap>", line 241 in _call_with_frames_removed',
            '  File "/v/site-packages/paddle/base/core.py", line 301 in <module>']  # fmt: skip
    assert crash_line(segv) == "Fatal Python error: Segmentation fault in paddle/base/core.py, line 301"
    assert crash_line([]) == ""
