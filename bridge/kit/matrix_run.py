"""Running the matrix: :func:`plan` lays out the cells, :func:`run_matrix`
runs them, each producer in its own child process (:mod:`bridge.kit.isolation`)
and the producers in parallel, so a crash ends only the cell it happened in.

The child (:func:`worker`) emits ``start`` before each cell, ``made`` once the
producer has made its object and ``done`` with the judged cell; when it dies,
the last event tells whether the producer or the consumer crashed.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bridge.kit.isolation import emit, run_child
from bridge.kit.matrix_cell import run_cell
from bridge.kit.matrix_grid import LAYOUTS, Cell
from bridge.kit.matrix_peers import Consumer, consumers

__all__ = ["plan", "run_matrix", "worker", "run_worker"]


def plan(
    producers: Iterable[str], consumer_list: list[Consumer], dtypes: Iterable[str],
    protocols: Iterable[str] | None = None,
) -> list[Cell]:  # fmt: skip
    """Every cell for the given producers, consumers, dtypes and protocols."""
    cells = []
    protocols = set(protocols) if protocols else None
    for p in producers:
        for c in consumer_list:
            if protocols and c.protocol not in protocols:
                continue
            for dt in dtypes:
                for layout in LAYOUTS:
                    for ro in (False, True):
                        if ro and p not in ("numpy", "bridge"):
                            continue
                        cells.append(Cell(p, c.peer, c.protocol, dt, layout, ro))
    return cells


def worker(cells: list[dict[str, Any]]) -> None:
    """Child body: run ``cells`` (as :class:`Cell` dicts), emitting ``start``
    before each, ``made`` once its producer has made the object and ``done``
    (the judged cell as a dict) after it. Consumer libraries are imported
    when their first cell comes."""
    table: dict[tuple[str, str], Consumer] = {}
    loaded: set[str] = set()
    for raw in cells:
        cell = Cell(**raw)
        if cell.consumer not in loaded:
            loaded.add(cell.consumer)
            table.update({(c.peer, c.protocol): c for c in consumers({cell.consumer})})
            # Freezing what the import made keeps each cell's gc.collect() from
            # walking torch's and jax's heaps.
            gc.collect()
            gc.freeze()
        emit("start", cell.key())
        consumer = table.get((cell.consumer, cell.protocol))
        if consumer is None:
            cell.verdict, cell.detail = "n/a", "consumer not installed"
        else:
            run_cell(cell, consumer, lambda: emit("made", True))
        emit("done", dataclasses.asdict(cell))


def run_matrix(cells: list[Cell], progress: Callable[[Cell], None] | None = None) -> list[Cell]:
    """Run ``cells``: one subprocess per producer, producers in parallel (one
    per CPU), consumer libraries imported as their cells come. A crash marks
    the cell it happened in and the rest run in a fresh process; when the
    producer itself crashed making a case, the other cells of that case are
    marked without being run again (making the case does not depend on the
    consumer)."""
    groups: dict[str, list[Cell]] = defaultdict(list)
    for c in cells:
        groups[c.producer].append(c)
    with ThreadPoolExecutor(max_workers=max(os.cpu_count() or 1, 1)) as pool:
        parts = list(pool.map(lambda todo: _run_group(todo, progress), groups.values()))
    return [c for part in parts for c in part]


def _run_group(todo: list[Cell], progress: Callable[[Cell], None] | None) -> list[Cell]:
    done: list[Cell] = []
    broken: dict[tuple[str, str, bool], str] = {}  # cases the producer crashed making
    while todo:
        ready = []
        while todo and (todo[0].dtype, todo[0].layout, todo[0].readonly) in broken:
            c = todo.pop(0)
            c.verdict = "crash"
            c.detail = "the producer crashed making this case: " + broken[(c.dtype, c.layout, c.readonly)]
            ready.append(c)
        for c in ready:
            done.append(c)
            if progress:
                progress(c)
        if not todo:
            break
        finished, crash = run_worker(todo, progress)
        done += finished
        todo = todo[len(finished):]
        if crash is not None and todo:
            crashed = todo.pop(0)
            made, why = crash
            crashed.verdict = "crash"
            crashed.detail = why if made else "the producer crashed making this case: " + why
            if not made:
                broken[(crashed.dtype, crashed.layout, crashed.readonly)] = why
            done.append(crashed)
            if progress:
                progress(crashed)
    return done


_WORKER = "import sys, json, bridge.kit.matrix_run as m; m.worker(json.loads(sys.stdin.read()))"


@dataclasses.dataclass
class _ChildRun:
    """What one child reported: the cells it finished, and whether the
    producer of the cell in flight had made its object."""

    progress: Callable[[Cell], None] | None
    finished: list[Cell] = dataclasses.field(default_factory=list)
    made: bool = False

    def on_event(self, event: str, payload: Any) -> None:
        """Record one event from the child (see :func:`bridge.kit.isolation.run_child`)."""
        if event == "start":
            self.made = False
        elif event == "made":
            self.made = True
        elif event == "done":
            cell = Cell(**payload)
            self.finished.append(cell)
            if self.progress:
                self.progress(cell)


def run_worker(
    cells: list[Cell], progress: Callable[[Cell], None] | None, code: str = _WORKER
) -> tuple[list[Cell], tuple[bool, str] | None]:
    """Run ``cells`` in one child process (``python -c code``, reading the cells
    as JSON on stdin, :func:`worker` by default), calling ``progress`` with
    each finished cell; returns the finished cells and, when the child died
    before the end, whether the producer had made its object and why."""
    payload = json.dumps([dataclasses.asdict(c) for c in cells])
    env = {"PYTHONUNBUFFERED": "1", "TF_CPP_MIN_LOG_LEVEL": "3", "JAX_PLATFORMS": "cpu"}
    run = _ChildRun(progress)
    end = run_child(code, on_event=run.on_event, stdin=payload, env=env)
    if len(run.finished) == len(cells):
        return run.finished, None
    lines = [ln for ln in end.stderr.strip().splitlines() if ln.strip()]
    why = next((ln for ln in lines if "Error" in ln or "error" in ln or "Abort" in ln), lines[-1] if lines else "")
    return run.finished, (run.made, f"process died (exit {end.returncode}): {why.strip()[:140]}")
