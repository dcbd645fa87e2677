"""Running the matrix: :func:`plan` lays out the cells, :func:`run_matrix`
runs them, each producer in its own child process (:mod:`bridge.kit.isolation`)
and the producers in parallel, so a crash ends only the cell it happened in.

The child (:func:`worker`) emits ``start`` before each cell, ``made`` once the
producer has made its object and ``done`` with the judged cell; when it dies,
the last event tells whether the producer or the consumer crashed.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import json
import os
import re
import signal
import tempfile
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bridge.kit import matrix_layouts as _layouts
from bridge.kit.isolation import emit, run_child
from bridge.kit.matrix_cell import run_cell
from bridge.kit.matrix_grid import _MODULE, LAYOUTS, TABLE_PRODUCERS, Cell, copy_reasons
from bridge.kit.matrix_holds import CONVERT_TABLE
from bridge.kit.matrix_peers import Consumer, consumers

__all__ = ["plan", "run_matrix", "worker", "run_worker", "crash_line"]


# Keyword protocols check the keyword, not every layout: a smaller grid.
_KEYWORD_PROTOCOLS = ("dlpack-copy", "dlpack-device")
_KEYWORD_DTYPES = ("bool", "uint8", "float32", "bfloat16")
_KEYWORD_LAYOUTS = ("contiguous", "stepped", "negative", "0-d")
# Seconds to import each library (measured on the 2-core dev machine): a child
# process imports the libraries of its cells once, so the cells are grouped by
# the heaviest library they touch and each heavy import happens in one child.
_IMPORT_COST = {"tensorflow": 9.0, "paddle": 6.3, "torch": 3.4, "jax": 1.3, "xarray": 1.2, "warp": 1.2,
                "pandas": 1.0, "ray": 1.0}  # fmt: skip


def plan(
    producers: Iterable[str], consumer_list: Iterable[Any], dtypes: Iterable[str],
    protocols: Iterable[str] | None = None,
) -> list[Cell]:  # fmt: skip
    """Every cell for the given producers, consumers (objects with ``peer``
    and ``protocol``: :class:`~bridge.kit.matrix_peers.Consumer` or
    :class:`~bridge.kit.matrix_peers.Entry`), dtypes and protocols. The
    keyword protocols (dlpack-copy, dlpack-device) cross a smaller grid; a
    table (``bridge-convert-table``) is made by the producers that make
    tables (:data:`~bridge.kit.matrix_grid.TABLE_PRODUCERS`), of each dtype,
    its columns contiguous and writable; the layouts of
    :mod:`bridge.kit.matrix_layouts` cross their own dtypes when several are
    asked for, and DLPack main's codes come from the ``handmade`` producer
    alone (:func:`~bridge.kit.matrix_layouts.planned`)."""
    cells = []
    wanted = set(protocols) if protocols else None
    dtypes, consumer_list = list(dtypes), list(consumer_list)
    for p in producers:
        for c in consumer_list:
            if wanted and c.protocol not in wanted:
                continue
            keyword = c.protocol in _KEYWORD_PROTOCOLS
            table = c.protocol == CONVERT_TABLE
            if table and p not in TABLE_PRODUCERS:
                continue
            for dt in dtypes:
                if keyword and dt not in _KEYWORD_DTYPES and len(dtypes) > 1:
                    continue
                for layout in LAYOUTS:
                    if (keyword and layout not in _KEYWORD_LAYOUTS) or (table and layout != "contiguous"):
                        continue
                    if not _layouts.planned(p, dt, layout, c.protocol, len(dtypes) > 1):
                        continue
                    for ro in (False, True):
                        if ro and (table or p not in ("numpy", "bridge")):
                            continue
                        cells.append(Cell(p, c.peer, c.protocol, dt, layout, ro))
    return cells


# Producers whose libraries keep no threads of their own, so a fork of a worker
# can make their objects (mlx, jax, paddle and tensorflow run work on threads a
# fork does not have, and hang there).
_FORK_SAFE = ("numpy", "bridge", "pydlpack", "tvm_ffi", "array_api_strict", "pyarrow", "nanoarrow",
              "onnxruntime", "cuda_core", _layouts.HANDMADE)  # fmt: skip
_FORK_TIMEOUT = 60.0


# What a dying library writes that says why, most telling first: a C++
# check or uncaught exception, CPython's fatal error, the native backtrace
# handler's (paddle and tvm-ffi install one), then any error line (a stack
# trace's frames come after these and say less).
_WHY = ("Check failed", "terminate called", "what():", "Fatal Python error", "Segfault encountered",
        "Segmentation fault", "Abort", "Error", "error")  # fmt: skip


_GLOG_PREFIX = re.compile(r"^[FEWI]\d{4} [\d:.]+\s+\d+ ")
# A native backtrace's frame: `File "<unknown>", line 0, in phi::ScaleKernel<...>(...)`.
_NATIVE_FRAME = re.compile(r'^File "[^"]*", line \d+, in (.+)$')
_NESTED = re.compile(r"<[^<>]*>|\([^()]*\)")


def _native_culprit(lines: list[str]) -> str:
    """The function a native backtrace faulted in, without its template
    arguments and parameters: the innermost frame named a kernel (torch's and
    paddle's compute functions are), else the innermost with a name."""
    names = []
    for ln in lines:
        m = _NATIVE_FRAME.match(ln.strip())
        if m is None or "sigaction" in ln or m.group(1).startswith("0x"):
            continue
        name = m.group(1)
        while _NESTED.search(name):
            name = _NESTED.sub("", name)
        names.append(name.split()[-1] if name.split() else name)
    return next((n for n in names if "kernel" in n.lower()), names[0] if names else "")


def crash_line(lines: list[str]) -> str:
    """The line of a dead child's stderr that best says why it died; for a
    fatal signal, with the innermost Python frame faulthandler printed (which
    library's code was running), or, where a library's own handler printed a
    native backtrace, the function it faulted in."""
    why = next((ln for marker in _WHY for ln in lines if marker in ln), lines[-1] if lines else "")
    why = _GLOG_PREFIX.sub("", why)  # absl/glog's "F0000 00:00:1795.9 4029 " says nothing
    if "Fatal Python error" in why:
        # The kit's own frames only call into the library that faulted: they name no culprit.
        frame = next((ln.strip() for ln in lines if ln.strip().startswith('File "/')
                      and "/bridge/kit/" not in ln), "")  # fmt: skip
        if frame:
            path, _, rest = frame[6:].partition('"')
            where = "/".join(path.split("/")[-3:])
            why = f"{why.strip()} in {where}{rest.split(' in ')[0]}"
    elif "Segfault encountered" in why:
        culprit = _native_culprit(lines)
        why = "Segfault encountered" + (f" in {culprit}" if culprit else "")
    return why


def _risky_key(cell: Cell) -> tuple[str, str, str]:
    return (cell.consumer, cell.protocol, cell.layout)


def _risky(cell: Cell, forked: set[tuple[str, ...]]) -> bool:
    """Whether ``cell`` runs in a fork: its consumer, protocol and layout
    crashed before, or its layout is one consumers fault on."""
    return _risky_key(cell) in forked or _layouts.risky(cell.layout, cell.producer, cell.consumer)


def _forkable(cell: Cell) -> bool:
    """Whether a fork of a worker can make ``cell``'s object: its producer
    keeps no threads, or only wraps NumPy memory for this layout
    (:data:`~bridge.kit.matrix_layouts.FORK_SAFE_MAKERS`)."""
    return cell.producer in _FORK_SAFE or cell.producer in _layouts.FORK_SAFE_MAKERS.get(cell.layout, ())


def _run_forked(cell: Cell, consumer: Consumer) -> Cell:
    """Run one cell in a forked child of this worker (after a crash of the
    same consumer, protocol and layout): a second crash ends the fork, not
    the worker, and is recorded with the fork's own message."""
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # the fork: run the cell, send it back, leave without cleanup
            os.close(read_fd)
            os.dup2(err.fileno(), 2)
            status = 0

            def send(event: str, payload: Any) -> None:
                os.write(write_fd, json.dumps([event, payload]).encode() + b"\n")

            try:
                done = run_cell(cell, consumer, lambda: send("made", _placed(cell)), lambda: send("computing", True))
                send("done", dataclasses.asdict(done))
            except BaseException:
                status = 1
            os._exit(status)
        os.close(write_fd)
        chunks = []
        timer = threading.Timer(_FORK_TIMEOUT, lambda: os.kill(pid, signal.SIGKILL))
        timer.start()
        while chunk := os.read(read_fd, 1 << 16):
            chunks.append(chunk)
        os.close(read_fd)
        _, status = os.waitpid(pid, 0)
        timer.cancel()
        events = dict(json.loads(line) for line in b"".join(chunks).splitlines() if line.endswith(b"]"))
        if "done" in events:
            return Cell(**events["done"])
        err.seek(0)
        lines = [ln for ln in err.read().decode(errors="replace").splitlines() if ln.strip()]
    why = crash_line(lines)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    cell.verdict = "crash"
    cell.aligned, cell.alignment = events.get("made", (None, None))
    cell.detail = f"process died (exit {code}){_computing(consumer.computes if 'computing' in events else '')}: " \
                  f"{why.strip()[:140]}"  # fmt: skip
    return cell


def _placed(cell: Cell) -> tuple[bool | None, int | None]:
    """How the producer's first element is aligned, as the cell says once
    made: what a crash after it keeps (the dead child's cell is lost)."""
    return cell.aligned, cell.alignment


def _computing(op: str) -> str:
    """The words that say a crash came as the consumer computed ``op`` on its result ("" for none)."""
    return f" computing {op} on the result" if op else ""


def worker(cells: list[dict[str, Any]], risky: list[list[str]] | None = None,
           preload: list[str] | None = None) -> None:  # fmt: skip
    """Child body: run ``cells`` (as :class:`Cell` dicts), emitting ``start``
    before each, ``made`` once its producer has made the object and ``done``
    (the judged cell as a dict) after it. A consumer library is imported when
    its first cell comes, between ``importing`` and ``imported`` events (a
    crash there is the import's). Cells whose (consumer, protocol, layout)
    is in ``risky`` (it crashed before), or whose layout is one consumers
    fault on (:data:`~bridge.kit.matrix_layouts.RISKY_LAYOUTS`), run in a
    fork of this process (where the producer can be forked). The
    ``preload`` peers' libraries are imported first, in that order (some
    libraries crash when imported after another, and not before it)."""
    table: dict[tuple[str, str], Consumer] = {}
    loaded: set[str] = set()
    made_by: set[str] = set()
    for peer in preload or ():
        emit("importing", peer)
        _import_peer(peer)
        emit("imported", peer)
        made_by.add(peer)
    forked = {tuple(k) for k in risky or ()}
    for raw in cells:
        cell = Cell(**raw)
        emit("start", cell.key())  # first: a crash importing a library below is this cell's
        if cell.producer not in made_by and cell.producer not in loaded:
            made_by.add(cell.producer)
            emit("importing", cell.producer)
            _import_peer(cell.producer)
            emit("imported", cell.producer)
        if cell.consumer not in loaded:
            loaded.add(cell.consumer)
            emit("importing", cell.consumer)
            table.update({(c.peer, c.protocol): c for c in consumers({cell.consumer})})
            emit("imported", cell.consumer)
            # Freezing what the import made keeps each cell's gc.collect() from
            # walking torch's and jax's heaps.
            gc.collect()
            gc.freeze()
        consumer = table.get((cell.consumer, cell.protocol))
        if consumer is None:
            cell.verdict, cell.detail = "n/a", "consumer not installed"
        elif _risky(cell, forked) and _forkable(cell) and hasattr(os, "fork"):
            cell = _run_forked(cell, consumer)
        else:
            run_cell(cell, consumer, functools.partial(_emit_made, cell),
                     functools.partial(emit, "computing", consumer.computes))  # fmt: skip
        emit("done", dataclasses.asdict(cell))


def _emit_made(cell: Cell) -> None:
    """Tell the parent the producer made ``cell``'s object, and how its first element is aligned."""
    emit("made", _placed(cell))


def _import_peer(peer: str) -> None:
    """Import ``peer``'s library (so that a crash on import is seen as one)."""
    import importlib

    try:
        importlib.import_module(_MODULE.get(peer, peer))
    except ImportError:
        pass  # the cells say what is missing


def _group_of(cell: Cell) -> str:
    heavy = max((cell.producer, cell.consumer), key=lambda p: _IMPORT_COST.get(p, 0.0))
    return heavy if _IMPORT_COST.get(heavy, 0.0) >= 3 else f"light-{sum(map(ord, cell.producer)) % 2}"


def run_matrix(cells: list[Cell], progress: Callable[[Cell], None] | None = None, code: str | None = None) -> list[Cell]:
    """Run ``cells`` in child processes, in parallel (one per CPU). The cells
    are grouped by the heaviest library they involve (each heavy import is
    paid once) and run in (producer, consumer) order, each library imported
    as its first cell comes. A crash marks the cell it happened in and the
    rest run in a fresh child, which runs cells like it (same consumer,
    protocol and layout) in forks of itself; when the producer itself crashed
    making a case, the other cells of that case are marked without being run
    again (making the case does not depend on the consumer); when importing a
    consumer crashed, that consumer's cells in the group are marked so. Each
    copy's reason is filled in at the end (:func:`~bridge.kit.matrix_grid.copy_reasons`)."""
    groups: dict[str, list[Cell]] = defaultdict(list)
    for c in sorted(cells, key=lambda c: (c.producer, c.consumer)):
        groups[_group_of(c)].append(c)
    order = sorted(groups.values(), key=len, reverse=True)  # the longest start first
    risky: set[tuple[str, str, str]] = set()
    with ThreadPoolExecutor(max_workers=max(os.cpu_count() or 1, 1)) as pool:
        parts = list(pool.map(lambda todo: _run_group(todo, progress, risky, code or _WORKER), order))
    done = {c.key(): c for part in parts for c in part}
    results = [done[c.key()] for c in cells]
    copy_reasons(results)
    return results


def _run_group(todo: list[Cell], progress: Callable[[Cell], None] | None,
               risky: set[tuple[str, str, str]], code: str) -> list[Cell]:  # fmt: skip
    done: list[Cell] = []
    broken: dict[tuple[str, str, str, bool], str] = {}  # cases a producer crashed making
    # Pairs of peers whose libraries crashed when imported into one process
    # (after one retry with the crashing library imported first).
    unimportable: dict[frozenset[str], str] = {}
    preload: list[str] = []

    def settle(c: Cell, verdict: str, detail: str) -> None:
        c.verdict, c.detail = verdict, detail
        done.append(c)
        if progress:
            progress(c)

    while todo:
        rest = []
        for c in todo:
            case = (c.producer, c.dtype, c.layout, c.readonly)
            if case in broken:
                settle(c, "crash", "the producer crashed making this case: " + broken[case])
            elif frozenset((c.producer, c.consumer)) in unimportable:
                settle(c, "crash", unimportable[frozenset((c.producer, c.consumer))])
            else:
                rest.append(c)
        todo = rest
        if not todo:
            break
        finished, crash = run_worker(todo, progress, code, risky=sorted(risky), preload=preload)
        done += finished
        todo = todo[len(finished):]
        if crash is None or not todo:
            continue
        crashed = todo.pop(0)
        made, why, importing = crash
        if importing and importing[0] not in preload:
            preload.insert(0, importing[0])  # the retry imports it before the others
            settle(crashed, "crash", why)
        elif importing:
            for other in importing[1:] or ["bridge"]:
                unimportable[frozenset((importing[0], other))] = why
            settle(crashed, "crash", why)
        elif made:
            risky.add(_risky_key(crashed))
            settle(crashed, "crash", why)
        else:
            broken[(crashed.producer, crashed.dtype, crashed.layout, crashed.readonly)] = why
            settle(crashed, "crash", "the producer crashed making this case: " + why)
    return done


_WORKER = "import sys, json, bridge.kit.matrix_run as m; m.worker(**json.loads(sys.stdin.read()))"


@dataclasses.dataclass
class _ChildRun:
    """What one child reported: the cells it finished, and whether the
    producer of the cell in flight had made its object."""

    progress: Callable[[Cell], None] | None
    finished: list[Cell] = dataclasses.field(default_factory=list)
    made: bool = False
    placed: tuple[bool | None, int | None] = (None, None)
    computing: str = ""
    importing: str = ""
    loaded: list[str] = dataclasses.field(default_factory=list)

    def on_event(self, event: str, payload: Any) -> None:
        """Record one event from the child (see :func:`bridge.kit.isolation.run_child`)."""
        if event == "importing":
            self.importing = str(payload)
        elif event == "imported":
            self.importing = ""
            self.loaded.append(str(payload))
        elif event == "start":
            self.made, self.placed, self.computing = False, (None, None), ""
        elif event == "made":
            self.made = True
            if isinstance(payload, list) and len(payload) == 2:
                self.placed = (payload[0], payload[1])
        elif event == "computing":
            self.computing = str(payload)
        elif event == "done":
            cell = Cell(**payload)
            self.finished.append(cell)
            if self.progress:
                self.progress(cell)


def run_worker(
    cells: list[Cell], progress: Callable[[Cell], None] | None, code: str = _WORKER,
    risky: list[tuple[str, str, str]] | None = None, preload: list[str] | None = None,
) -> tuple[list[Cell], tuple[bool, str, list[str]] | None]:  # fmt: skip
    """Run ``cells`` in one child process (``python -c code``, reading
    ``{"cells": [...], "risky": [...], "preload": [...]}`` as JSON on stdin, :func:`worker` by
    default), calling ``progress`` with each finished cell; returns the
    finished cells and, when the child died before the end, whether the
    producer had made its object, why, and, when it died importing a peer's
    library, that peer and the peers imported before it (else empty). A cell
    in flight whose producer had made its object is given the alignment of
    that object's first element (its ``aligned`` and ``alignment``)."""
    payload = json.dumps({"cells": [dataclasses.asdict(c) for c in cells], "risky": list(risky or ()),
                          "preload": list(preload or ())})  # fmt: skip
    # faulthandler: a fatal signal prints the Python frame it hit (crash_line).
    env = {"PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu", "PYTHONFAULTHANDLER": "1"}
    run = _ChildRun(progress)
    end = run_child(code, on_event=run.on_event, stdin=payload, env=env)
    if len(run.finished) == len(cells):
        return run.finished, None
    if run.made:  # the cell in flight keeps how its producer's memory was aligned
        cells[len(run.finished)].aligned, cells[len(run.finished)].alignment = run.placed
    lines = [ln for ln in end.stderr.strip().splitlines() if ln.strip()]
    why = crash_line(lines)
    why = f"process died (exit {end.returncode}){_computing(run.computing)}: {why.strip()[:140]}"
    if run.importing:
        beside = [p for p in run.loaded if p not in ("bridge", "numpy")]
        return run.finished, (run.made, f"importing {run.importing} beside {', '.join(beside) or 'bridge'} crashed: {why}",
                              [run.importing, *beside])  # fmt: skip
    return run.finished, (run.made, why, [])
