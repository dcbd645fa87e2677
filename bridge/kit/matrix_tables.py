"""The matrix's results for people: a summary row per (producer, consumer,
protocol) with the count of each verdict, then every violation and crash, as
Markdown (:func:`to_markdown`) or a terminal table (:func:`print_table`)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from bridge.kit.matrix_grid import VERDICTS, Cell

__all__ = ["summarise", "to_markdown", "print_table"]


def summarise(cells: list[Cell]) -> list[dict[str, Any]]:
    """One row per (producer, consumer, protocol) with the count of each verdict."""
    rows: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    for c in cells:
        rows[(c.producer, c.consumer, c.protocol)][c.verdict] += 1
    return [{"producer": p, "consumer": c, "protocol": pr, **{v: n[v] for v in VERDICTS}}
            for (p, c, pr), n in sorted(rows.items())]  # fmt: skip


def to_markdown(cells: list[Cell]) -> str:
    """A Markdown report: the summary table, then every violation and crash."""
    lines = ["| producer | consumer | protocol | " + " | ".join(VERDICTS) + " |",
             "|---|---|---|" + "---|" * len(VERDICTS)]  # fmt: skip
    for r in summarise(cells):
        lines.append(f"| {r['producer']} | {r['consumer']} | {r['protocol']} | "
                     + " | ".join(str(r[v] or "") for v in VERDICTS) + " |")  # fmt: skip
    bad = [c for c in cells if c.verdict in ("violation", "crash")]
    if bad:
        lines += ["", "## Violations and crashes", "", "| producer | consumer | protocol | case | verdict | detail |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        for c in bad:
            lines.append(f"| {c.producer} | {c.consumer} | {c.protocol} | {c.case} | {c.verdict} | "
                         f"{c.detail.replace('|', '/')} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def print_table(cells: list[Cell]) -> None:
    """The summary for a terminal (rich when installed), then violations and crashes."""
    rows = summarise(cells)
    bad = [c for c in cells if c.verdict in ("violation", "crash")]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(to_markdown(cells))
        return
    colours = {"zero-copy": "green", "copy": "yellow", "unverified": "yellow", "refused": "blue",
               "violation": "red", "crash": "bold red", "n/a": "dim"}  # fmt: skip
    table = Table(title="bridge interop matrix: cells per verdict")
    for col in ("producer", "consumer", "protocol"):
        table.add_column(col)
    for v in VERDICTS:
        table.add_column(v, justify="right", style=colours[v])
    for r in rows:
        table.add_row(r["producer"], r["consumer"], r["protocol"], *(str(r[v] or "") for v in VERDICTS))
    console = Console(width=max(Console().width, 140))
    console.print(table)
    if bad:
        detail = Table(title="violations and crashes")
        for col in ("producer", "consumer", "protocol", "case", "verdict", "detail"):
            detail.add_column(col)
        for c in bad:
            detail.add_row(c.producer, c.consumer, c.protocol, c.case, c.verdict, c.detail)
        console.print(detail)
