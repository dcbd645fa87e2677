"""Instructions per call of every ``make bench`` row, counted by callgrind.

Run ``make bench-ir`` (or ``python tests/bench_ir.py [-k SUBSTRING] [--json PATH]``).
Timings on shared machines swing by 25% and more between identical runs;
instruction counts do not, so every timing claim is reported beside them.

The script re-runs itself under ``valgrind --tool=callgrind``: inside, for each
row of tests/bench.py and each column (bridge, numpy, torch, tvm-ffi, and the plain
copy of the copy rows), it calls
the operation once to warm it, then calls ``os.getppid`` (libc's ``getppid``: (callgrind zeroes
its counters there), the operation N times, and ``os.getpgrp`` (callgrind dumps
there). Each dump's total, less the same measurement of an empty loop, divided
by N, is the row's instructions per call. Not a pytest file.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
COLUMNS = ("bridge", "numpy", "torch", "tvm", "plain")
_ZERO, _DUMP = os.getppid, os.getpgrp  # callgrind zeroes at the one and dumps at the other


def _measure(fn: Callable[[], Any], n: int) -> None:
    _ZERO()
    for _ in range(n):
        fn()
    _DUMP()


def _calls(fn: Callable[[], Any]) -> int:
    """How many calls to count: about half a second of (instrumented) work, at least one."""
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    return max(1, min(200, int(0.5 / max(once, 1e-9))))


def inside(k: str | None, columns: tuple[str, ...], plan_path: str) -> None:
    """Run under callgrind: measure each (row, column) and write the plan, in dump order."""
    sys.path.insert(0, HERE)
    import bench

    # The first zero does not take (the call resolves its PLT entry first): a throwaway dump.
    plan: list[dict[str, Any]] = [{"name": "(warm-up)", "column": "", "n": 1}]
    _ZERO()
    _DUMP()
    noop = lambda: None  # noqa: E731
    _measure(noop, 200)
    plan.append({"name": "(empty loop)", "column": "", "n": 200})
    for group in bench.GROUPS:
        for row in group():
            if k and k not in row.name:
                continue
            fns = {"bridge": row.bridge_fn, "numpy": row.numpy_fn, "torch": row.torch_fn, "tvm": row.tvm_fn,
                   "plain": row.plain_fn}
            for column in columns:
                fn = fns[column]
                if fn is None:
                    continue
                n = _calls(fn)
                for _ in range(2):  # the lower of two counts: a first pass may pay one-off costs
                    _measure(fn, n)
                    plan.append({"name": row.name, "column": column, "n": n})
    with open(plan_path, "w") as f:
        json.dump(plan, f)


def _total(path: str) -> int:
    with open(path) as f:
        for line in f:
            m = re.match(r"(?:summary|totals):\s+(\d+)", line)
            if m:
                return int(m.group(1))
    raise ValueError(f"no totals in {path}")


def outside(k: str | None, columns: tuple[str, ...]) -> list[dict[str, Any]]:
    """Run this script under callgrind and return instructions per call for each row and column."""
    with tempfile.TemporaryDirectory() as tmp:
        plan_path = os.path.join(tmp, "plan.json")
        cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=yes",
               f"--callgrind-out-file={tmp}/cg.out.%p", "--zero-before=getppid",
               "--dump-before=getpgrp", sys.executable, os.path.abspath(__file__),
               "--inside", plan_path, "--columns", ",".join(columns)]  # fmt: skip
        if k:
            cmd += ["-k", k]
        env = dict(os.environ, PYTHONHASHSEED="0")
        subprocess.run(cmd, check=True, env=env, stderr=subprocess.DEVNULL)
        with open(plan_path) as f:
            plan = json.load(f)
        dumps = sorted(glob.glob(f"{tmp}/cg.out.*.*"), key=lambda p: int(p.rsplit(".", 1)[1]))
        if len(dumps) < len(plan):
            raise RuntimeError(f"{len(dumps)} callgrind dumps for {len(plan)} measurements")
        totals = [_total(p) for p in dumps[: len(plan)]]
    empty_per_iter = totals[1] / plan[1]["n"]
    rows: dict[str, dict[str, Any]] = {}
    for entry, total in zip(plan[2:], totals[2:]):
        per_call = max(0.0, (total - empty_per_iter * entry["n"]) / entry["n"])
        row = rows.setdefault(entry["name"], {"name": entry["name"]})
        key = f"{entry['column']}_ir"
        row[key] = min(row.get(key, round(per_call)), round(per_call))  # whole instructions
    return list(rows.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-k", metavar="SUBSTRING", help="only rows whose name contains this")
    p.add_argument("--columns", default=",".join(COLUMNS), help="comma-separated columns to count")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument("--inside", metavar="PLAN", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    columns = tuple(c for c in args.columns.split(",") if c)
    if args.inside:
        inside(args.k, columns, args.inside)
        return 0
    rows = outside(args.k, columns)
    print(f"{'benchmark (instructions per call)':<66}" + "".join(f"{c:>12}" for c in columns))
    for r in rows:
        cells = "".join(f"{r[f'{c}_ir']:>12,}" if f"{c}_ir" in r else f"{'n/a':>12}" for c in columns)
        print(f"{r['name']:<66}{cells}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
