"""The interop matrix: every installed producer x consumer x protocol, checked.

``python -m bridge matrix`` (and the ``bridge`` console script) finds the peers
installed (:data:`~bridge.kit.matrix_grid.PEERS`: bridge, numpy, torch, jax,
pyarrow, polars, nanoarrow, tvm-ffi, pydlpack, paddle, mlx, onnxruntime,
array-api-strict, pandas, xarray, tensorflow, warp, cupy), and for each
producer hands tensors of a grid of cases (dtypes x layouts x read-only) to
each consumer through each protocol it speaks. Every cell is checked against
rules the specs state (:mod:`bridge.kit.rules`), and a violation names its
rule: values, strides and shape intact; the dtype unchanged; a write through
the consumer's result never reaching a read-only source; bridge's deleters
balanced once the consumer's object dies; refusals of the types the array API
names; ``copy``/``dl_device`` honoured. Zero-copy is proven by address (the
consumer's first element is the producer's).

Verdicts: ``zero-copy``, ``copy`` (with why, where the consumer's other cells
tell: requested, read-only, alignment, dtype, layout; ``reason`` in the JSON),
``empty`` (a zero-size tensor crossed intact: no bytes to share, so neither
copy nor zero-copy), ``unverified`` (the exchange worked but the
checker cannot observe the result's address or values), ``refused``,
``violation`` (with the rule), ``crash`` (the cells run in child processes, so
a crash ends only the cell it happened in; the run resumes after it), and
``n/a`` when a producer cannot make a case (torch has no negative strides,
Arrow has no 2-d arrays).

This module is the public face and the command line; the parts live beside
it: :mod:`~bridge.kit.matrix_grid` (names, cells, verdicts, who is held
responsible), :mod:`~bridge.kit.matrix_peers` and
:mod:`~bridge.kit.matrix_frameworks` (how each library produces and
consumes), :mod:`~bridge.kit.matrix_cell` (one exchange, judged),
:mod:`~bridge.kit.rules` (the rules), :mod:`~bridge.kit.matrix_run` (the
grid, run in child processes), :mod:`~bridge.kit.matrix_tables` and
:mod:`~bridge.kit.matrix_html` (the reports).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import platform
import shlex
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TextIO

from bridge.kit.matrix_cell import run_cell as run_cell
from bridge.kit.matrix_grid import (
    DEFAULT_DTYPES,
    DTYPES,
    LAYOUTS,
    PEERS,
    PROTOCOLS,
    Cell,
    available,
    bridge_at_fault,
)
from bridge.kit.matrix_grid import VERDICTS as VERDICTS
from bridge.kit.matrix_grid import iter_cells as iter_cells
from bridge.kit.matrix_html import write_html
from bridge.kit.matrix_peers import Consumer as Consumer
from bridge.kit.matrix_peers import NotMade as NotMade
from bridge.kit.matrix_peers import consumer_entries, consumers
from bridge.kit.matrix_peers import produce as produce
from bridge.kit.matrix_peers import reference as reference
from bridge.kit.matrix_run import plan, run_matrix
from bridge.kit.matrix_tables import print_table, to_markdown
from bridge.kit.matrix_tables import summarise as summarise

# Names imported `as` themselves are kept importable from here (as before the
# kit was split into modules) without joining __all__.
__all__ = ["Cell", "run_matrix", "plan", "consumers", "bridge_at_fault", "main", "PEERS",
           "LAYOUTS", "DTYPES", "DEFAULT_DTYPES", "PROTOCOLS"]  # fmt: skip


def _split(values: list[str] | None) -> list[str] | None:
    if not values:
        return None
    return [v for item in values for v in item.split(",") if v]


def main(argv: list[str] | None = None) -> int:
    """``python -m bridge matrix``: run the matrix and print it. Exit code 1
    only for bridge's own failures (violations or crashes in cells where
    bridge produces or consumes); with ``--baseline``, only for cells that got
    worse than the baseline's (:mod:`bridge.kit.matrix_baseline`). The paths
    it writes (``--html``, ``--repro``, ``--save-baseline``) and the baseline
    it reads are checked before any cell runs: a bad one is a usage error
    naming the option and the problem (exit status 2), and nothing is written."""
    from bridge.kit.cli import HelpFormatter, prog

    ap = argparse.ArgumentParser(prog=f"{prog()} matrix", description=__doc__.split("\n\n")[0],
                                 formatter_class=HelpFormatter)  # fmt: skip
    ap.add_argument("--producer", action="append",
                    help=f"only these producers (comma-separated), from {', '.join(PEERS)}")  # fmt: skip
    ap.add_argument("--consumer", action="append",
                    help=f"only these consumers, from {', '.join(PEERS)}")  # fmt: skip
    ap.add_argument("--protocol", action="append", help=f"only these protocols ({', '.join(PROTOCOLS)})")
    ap.add_argument("--dtype", action="append",
                    help=f"dtypes, from {', '.join(DTYPES)} (default: {', '.join(DEFAULT_DTYPES)})")  # fmt: skip
    ap.add_argument("--json", action="store_true", help="print the cells as JSON on stdout")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown report")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--html", metavar="PATH",
                    help="also write the report as one self-contained HTML page to PATH")  # fmt: skip
    ap.add_argument("--repro", metavar="DIR",
                    help="write a standalone reproducer script and an issue text for every crash and violation "
                         "cell to DIR, run each once, and list them in DIR/index.md")  # fmt: skip
    ap.add_argument("--list", action="store_true",
                    help="list the valid peer, protocol and dtype names, and which peers are installed")  # fmt: skip
    ap.add_argument("--save-baseline", metavar="FILE",
                    help="write every cell's verdict, with the versions and options, to FILE (JSON)")  # fmt: skip
    ap.add_argument("--baseline", metavar="FILE",
                    help="compare with a --save-baseline FILE: exit 1 only for cells that got worse")  # fmt: skip
    args = ap.parse_args(argv)
    if args.list:
        print(names_listing())
        return 0
    chosen = {}
    for option, valid in (("producer", PEERS), ("consumer", PEERS), ("protocol", PROTOCOLS),
                          ("dtype", DTYPES)):  # fmt: skip
        names = _split(getattr(args, option))
        unknown = [n for n in names or () if n not in valid]
        if unknown:
            ap.error(f"unknown {option} {', '.join(map(repr, unknown))}; valid: {', '.join(valid)}")
        chosen[option] = names
    from bridge.kit import matrix_baseline

    # A path that cannot be written, or a bad baseline, fails here, before the
    # run: found after it, minutes of cells would be lost.
    matrix_baseline.check_outputs([("--html", args.html, "file"), ("--repro", args.repro, "folder"),
                                   ("--save-baseline", args.save_baseline, "replaced")], ap.error)  # fmt: skip
    baseline = matrix_baseline.prepare(args.baseline, args.save_baseline, ap.error)
    producers = [p for p in (chosen["producer"] or PEERS) if available(p)]
    wanted_consumers = set(chosen["consumer"] or PEERS)
    cons = consumer_entries(wanted_consumers)  # planned without importing any peer here
    dtypes = chosen["dtype"] or list(DEFAULT_DTYPES)
    cells = plan(producers, cons, dtypes, chosen["protocol"])
    results = _run_with_progress(cells, quiet=args.no_progress or args.json or args.markdown)
    if args.json:
        json.dump([dataclasses.asdict(c) | {"case": c.case} for c in results], sys.stdout, indent=1)
        print()
    elif args.markdown:
        print(to_markdown(results), end="")
    else:
        print_table(results)
    links = None
    if args.repro:  # (after the table: checking runs every script once)
        from bridge.kit.matrix_repro import report_reproducers

        links = report_reproducers(results, args.repro, args.html,
                                   sys.stderr if args.json or args.markdown else sys.stdout)  # fmt: skip
    if args.html:
        # On stdout after the table; on stderr when stdout is JSON or Markdown, which it would spoil.
        print(f"HTML report: {write_html(results, args.html, meta=report_meta(argv), repro=links)}",
              file=sys.stderr if args.json or args.markdown else sys.stdout)  # fmt: skip
    own = [c for c in results if bridge_at_fault(c)]
    if own and not (args.json or args.markdown):
        print(f"{len(own)} cells are bridge's own failures", file=sys.stderr)
    if args.baseline or args.save_baseline:  # with a baseline, only cells that got worse fail
        options = matrix_baseline.matrix_options(chosen["producer"], chosen["consumer"], chosen["protocol"], dtypes)
        return matrix_baseline.finish(results, options, baseline, args.baseline, args.save_baseline,
                                      sys.stderr if args.json or args.markdown else sys.stdout, 1 if own else 0)  # fmt: skip
    return 1 if own else 0


def names_listing() -> str:
    """The names the matrix options take (``--list``)."""
    peers = ", ".join(f"{p}{'' if available(p) else ' (not installed)'}" for p in PEERS)
    return (f"peers (--producer, --consumer): {peers}\n"
            f"protocols (--protocol): {', '.join(PROTOCOLS)}\n"
            f"dtypes (--dtype): {', '.join(DTYPES)}\n"
            f"default dtypes: {', '.join(DEFAULT_DTYPES)}")  # fmt: skip


def _version(peer: str, distributions: Mapping[str, list[str]]) -> str:
    """The installed version of ``peer``: its distribution is the peer's name
    or the one that installs a module of that name (paddle: paddlepaddle)."""
    for name in (peer, *distributions.get(peer, ())):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "version unknown"


def report_meta(argv: list[str] | None = None) -> dict[str, str]:
    """What the HTML report says about the run: the command, the date, the
    machine, Python, and the version of each installed peer."""
    args = sys.argv[1:] if argv is None else argv
    meta = {
        "command": "python -m bridge matrix " + shlex.join(args) if args else "python -m bridge matrix",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.system()} {platform.machine()} ({platform.node()})",
        "python": platform.python_version(),
    }
    distributions = importlib.metadata.packages_distributions()
    meta["peers"] = ", ".join(f"{p} {_version(p, distributions)}" for p in PEERS if available(p))
    return meta


def _run_with_progress(cells: list[Cell], quiet: bool) -> list[Cell]:
    if quiet:
        return run_matrix(cells)
    if not sys.stderr.isatty():
        return run_matrix(cells, ProgressLines(len(cells)))
    try:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
    except ImportError:
        return run_matrix(cells, ProgressLines(len(cells)))
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("cells"),
               TimeElapsedColumn(), TextColumn("elapsed,"), TimeRemainingColumn(), TextColumn("left"))  # fmt: skip
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task("exchanging", total=len(cells))
        return run_matrix(cells, lambda c: bar.advance(task))


def _duration(seconds: float) -> str:
    """``"40 s"``, ``"2 min"``, ``"1 h 05 min"``: a time for a person, as precise as it needs to be."""
    seconds = max(seconds, 0.0)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{round(seconds / 60)} min"
    hours, rest = divmod(round(seconds / 60), 60)
    return f"{hours} h {rest:02d} min"


class ProgressLines:
    """The progress for a log (no terminal): called once per finished cell
    (from the runner's threads), it prints ``  1234/5000 cells, 40 s elapsed,
    about 2 min left`` to ``stream`` (default stderr) every 5% of the cells or
    every ``every_s`` seconds, whichever comes first, and once at the end.
    The time left is the elapsed time per cell so far times the cells left."""

    def __init__(self, total: int, every_s: float = 10.0, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.total = total
        self.every_s = every_s
        self.stream = stream
        self.clock = clock
        self.start = clock()
        self.done = 0
        self._step = max(total // 20, 1)
        self._last_n = 0
        self._last_t = self.start
        self._lock = threading.Lock()

    def line(self, done: int, elapsed: float) -> str:
        """The progress line for ``done`` cells after ``elapsed`` seconds."""
        text = f"  {done}/{self.total} cells, {_duration(elapsed)} elapsed"
        if done >= self.total:
            return text + ", done"
        if done == 0:
            return text
        return text + f", about {_duration(elapsed / done * (self.total - done))} left"

    def __call__(self, cell: Cell) -> None:
        with self._lock:
            self.done += 1
            now = self.clock()
            due = (self.done - self._last_n >= self._step or now - self._last_t >= self.every_s
                   or self.done == self.total)  # fmt: skip
            if not due:
                return
            self._last_n, self._last_t = self.done, now
            print(self.line(self.done, now - self.start), file=self.stream or sys.stderr, flush=True)
