"""The interop matrix: every installed producer x consumer x protocol, checked.

``python -m bridge matrix`` (and the ``bridge`` console script) finds the peers
installed (numpy, torch, jax, pyarrow, polars, nanoarrow, tvm-ffi, pydlpack,
cupy, and bridge itself), and for each producer hands tensors of a grid of
cases (dtypes x layouts x read-only) to each consumer through each protocol it
speaks. Every cell is checked, not assumed:

* values equal (bit for bit, NaNs included);
* zero-copy proven by address (the consumer's first element is the producer's)
  and, where both sides are writable, by a write seen on the other side;
* read-only not lost (a read-only source must not come back writable);
* for cells with bridge on either side, the DLPack/Arrow deleters balance
  (bridge's C counters) once the consumer's object dies;
* a refusal is an exception of a type the protocols allow.

Verdicts: ``zero-copy``, ``copy``, ``unverified`` (the exchange worked but the
checker cannot observe the result's address or values), ``refused``,
``violation`` (with the rule),
``crash`` (each producer runs in its own subprocess, so a crash ends only the
cell it happened in; the run resumes after it), and ``n/a`` when a producer
cannot make a case (torch has no negative strides, Arrow has no 2-d arrays).

This module is the public face and the command line; the parts live beside
it: :mod:`~bridge.kit.matrix_grid` (names, cells, verdicts),
:mod:`~bridge.kit.matrix_peers` (how each library produces and consumes),
:mod:`~bridge.kit.matrix_cell` (one exchange, judged),
:mod:`~bridge.kit.matrix_run` (the grid, run in child processes) and
:mod:`~bridge.kit.matrix_tables` (the reports).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable

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
from bridge.kit.matrix_peers import Consumer as Consumer
from bridge.kit.matrix_peers import NotMade as NotMade
from bridge.kit.matrix_peers import consumers
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
    bridge produces or consumes)."""
    ap = argparse.ArgumentParser(prog="bridge matrix", description=__doc__.split("\n\n")[0])
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
    ap.add_argument("--list", action="store_true",
                    help="list the valid peer, protocol and dtype names, and which peers are installed")  # fmt: skip
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
    producers = [p for p in (chosen["producer"] or PEERS) if available(p)]
    wanted_consumers = set(chosen["consumer"] or PEERS)
    cons = [c for c in consumers() if c.peer in wanted_consumers]
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
    own = [c for c in results if bridge_at_fault(c)]
    if own and not (args.json or args.markdown):
        print(f"{len(own)} cells are bridge's own failures", file=sys.stderr)
    return 1 if own else 0


def names_listing() -> str:
    """The names the matrix options take (``--list``)."""
    peers = ", ".join(f"{p}{'' if available(p) else ' (not installed)'}" for p in PEERS)
    return (f"peers (--producer, --consumer): {peers}\n"
            f"protocols (--protocol): {', '.join(PROTOCOLS)}\n"
            f"dtypes (--dtype): {', '.join(DTYPES)}\n"
            f"default dtypes: {', '.join(DEFAULT_DTYPES)}")  # fmt: skip



def _run_with_progress(cells: list[Cell], quiet: bool) -> list[Cell]:
    if quiet or not sys.stderr.isatty():
        return run_matrix(cells, _dots(len(cells)) if not quiet else None)
    try:
        from rich.progress import Progress
    except ImportError:
        return run_matrix(cells, _dots(len(cells)))
    with Progress(transient=True) as bar:
        task = bar.add_task("exchanging", total=len(cells))
        return run_matrix(cells, lambda c: bar.advance(task))


def _dots(total: int) -> Callable[[Cell], None]:
    seen = iter(range(1, total + 1))

    def tick(cell: Cell) -> None:
        n = next(seen, total)
        if n % 500 == 0 or n == total:
            print(f"  {n}/{total} cells", file=sys.stderr, flush=True)

    return tick

