"""The matrix's results for people: as Markdown (:func:`to_markdown`), as text
for a terminal of 80 columns (:func:`format_table`, printed by
:func:`print_table`), and the shared ordering of the verdicts by how much they
need a reader's eye (:data:`SEVERITY`, :func:`worst`).

The terminal report puts the unexpected first: crashes and violations,
grouped (one line per producer, consumer, protocol and rule, with one example
of the detail), then copies; the verdicts the specs expect (``refused``: the
spec lets a consumer refuse; ``n/a``: the producer cannot make the case) take
one line per protocol. The full per-pair picture is the HTML report's
(:mod:`bridge.kit.matrix_html`).
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from bridge.kit.matrix_grid import PEERS, PROTOCOLS, VERDICTS, Cell, bridge_at_fault, culprits
from bridge.kit.matrix_holds import CONVERT, contradictions, own_protocol, record
from bridge.kit.rules import RULES

__all__ = ["SEVERITY", "SHORT", "worst", "ordered", "summarise", "Side", "versus", "table_check",
           "to_markdown", "format_table", "print_table"]  # fmt: skip

#: The verdicts from the one a reader must see first to the one they can skip:
#: a crash (the process died) outranks a violation (a broken spec rule); a
#: copy (a cost the reader may not expect) outranks ``unverified`` (it worked,
#: the checker could not observe how); a refusal is allowed by the specs but
#: still a gap, so it outranks ``zero-copy``; ``empty`` (a zero-size tensor
#: crossed intact, with no bytes to share) follows it; ``n/a`` (nothing was
#: exchanged) is last. A group of cells shows its worst verdict by this order.
SEVERITY: tuple[str, ...] = ("crash", "violation", "copy", "unverified", "refused", "zero-copy", "empty", "n/a")
#: Verdict names short enough for a column of an 80-column table; the
#: unexpected ones in capitals.
SHORT: dict[str, str] = {"zero-copy": "0copy", "copy": "copy", "empty": "empty", "unverified": "unver",
                         "refused": "refus", "violation": "VIOL", "crash": "CRASH", "n/a": "n/a"}  # fmt: skip
# A verdict this list does not know (added after it) sorts just before n/a.
_RANK = {v: i for i, v in enumerate(SEVERITY)}


def _rank(verdict: str) -> float:
    return _RANK.get(verdict, _RANK["n/a"] - 0.5)


def worst(verdicts: Iterable[str]) -> str:
    """The most severe of ``verdicts`` by :data:`SEVERITY` (``""`` for none)."""
    return min(verdicts, key=_rank, default="")


def ordered(names: Iterable[str], known: Iterable[str]) -> list[str]:
    """``names`` without repeats, those in ``known`` first in its order, then
    the rest in the order first seen (a peer or protocol this version of the
    lists does not name still shows)."""
    seen = list(dict.fromkeys(names))
    order = {n: i for i, n in enumerate(known)}
    return sorted(seen, key=lambda n: (order.get(n, len(order)), seen.index(n) if n not in order else 0))


def summarise(cells: list[Cell]) -> list[dict[str, Any]]:
    """One row per (producer, consumer, protocol) with the count of each verdict."""
    rows: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    for c in cells:
        rows[(c.producer, c.consumer, c.protocol)][c.verdict] += 1
    return [{"producer": p, "consumer": c, "protocol": pr, **{v: n[v] for v in VERDICTS}}
            for (p, c, pr), n in sorted(rows.items())]  # fmt: skip


@dataclasses.dataclass
class Side:
    """One consumer's cells through one way in (its own import, or
    ``bridge-convert``), counted: ``cells`` exchanged (all but ``n/a``),
    each verdict, ``named`` (copies whose reason is known) and the
    zero-copy ``share`` of the cells with bytes to share (all but ``n/a``
    and ``empty``; None when there are none)."""

    cells: int = 0
    crash: int = 0
    violation: int = 0
    refused: int = 0
    copy: int = 0
    named: int = 0
    zero_copy: int = 0
    unverified: int = 0
    empty: int = 0

    def add(self, c: Cell) -> None:
        """Count cell ``c``."""
        if c.verdict == "n/a":
            return
        self.cells += 1
        name = c.verdict.replace("-", "_")
        if hasattr(self, name) and name != "cells":
            setattr(self, name, getattr(self, name) + 1)
        if c.verdict == "copy" and c.reason:
            self.named += 1

    @property
    def share(self) -> float | None:
        """Zero-copy cells over the cells with bytes to share."""
        n = self.cells - self.empty
        return self.zero_copy / n if n else None

    def percent(self) -> str:
        """The zero-copy share as ``"41%"`` (``"-"`` when there is none)."""
        return "-" if self.share is None else f"{self.share:.0%}"


def versus(cells: list[Cell]) -> list[tuple[str, str, Side, Side]]:
    """Per consumer that ``bridge-convert`` reaches (and ``"all"``, the
    total), side by side: ``(consumer, its own import's protocol, its own
    import's cells, its bridge-convert cells)``. A consumer's own import is
    the one its record in the destination table names (``dlpack``:
    ``from_dlpack``; ``arrow`` for pyarrow and polars: ``pa.array``,
    ``pl.Series``)."""
    rows: dict[str, tuple[str, Side, Side]] = {}
    for c in cells:
        h = record(c.consumer)
        if h is None:
            continue
        if c.consumer not in rows:
            rows[c.consumer] = (own_protocol(h), Side(), Side())
        own, direct, via = rows[c.consumer]
        if c.protocol == own:
            direct.add(c)
        elif c.protocol == CONVERT:
            via.add(c)
    out = [(name, own, direct, via) for name in ordered(rows, PEERS)
           for own, direct, via in [rows[name]] if via.cells or direct.cells]  # fmt: skip
    if out:
        total_direct, total_via = Side(), Side()
        for c in cells:
            h = record(c.consumer)
            if h is not None and c.protocol == own_protocol(h) and c.consumer in rows:
                total_direct.add(c)
            elif h is not None and c.protocol == CONVERT:
                total_via.add(c)
        out.append(("all", "", total_direct, total_via))
    return out


def table_check(cells: list[Cell]) -> tuple[int, list[str]]:
    """The destination table against the cells of bridge's tensors through
    each destination's own import (:func:`bridge.kit.matrix_holds.contradictions`
    with bridge as the producer: what ``convert`` hands each import):
    how many such cells there are, and each contradiction in words."""
    judged = sum(1 for c in cells if c.producer == "bridge" and c.verdict != "n/a"
                 and (h := record(c.consumer)) is not None and h.capsule != "none" and c.protocol == own_protocol(h))  # fmt: skip
    return judged, [str(x) for x in contradictions(cells, producers=("bridge",))] if judged else []


def _rule_markdown(name: str) -> str:
    rule = RULES.get(name)
    if rule is None:
        return name
    return f"[{name}]({rule.url}) ({rule.cite()})"


def to_markdown(cells: list[Cell]) -> str:
    """A Markdown report: the summary table, then the violations and crashes,
    one row per (library held responsible, verdict, producer, consumer,
    rule) with the rule (name, linked to the spec, and the spec's section),
    the protocols, the number of cells, the cases and one example detail;
    then the copies (copy=True cells aside) per producer, consumer and
    protocol with their reasons (:func:`~bridge.kit.matrix_grid.copy_reasons`)."""
    lines = ["| producer | consumer | protocol | " + " | ".join(VERDICTS) + " |",
             "|---|---|---|" + "---|" * len(VERDICTS)]  # fmt: skip
    for r in summarise(cells):
        lines.append(f"| {r['producer']} | {r['consumer']} | {r['protocol']} | "
                     + " | ".join(str(r[v] or "") for v in VERDICTS) + " |")  # fmt: skip
    groups: dict[tuple[str, str, str, str, str], list[Cell]] = defaultdict(list)
    for c, who in zip(cells, culprits(cells)):
        if who:
            groups[(who, c.verdict, c.producer, c.consumer, c.rule)].append(c)
    if groups:
        lines += ["", "## Violations and crashes", "",
                  "| held responsible | verdict | producer | consumer | rule | protocols | cells | cases | example |",
                  "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for key in sorted(groups, key=lambda k: (k[0], _rank(k[1]), -len(groups[k]), k)):
            who, verdict, producer, consumer, rule = key
            members = groups[key]
            protocols = ", ".join(dict.fromkeys(c.protocol for c in members))
            cases = ", ".join(dict.fromkeys(c.case for c in members[:3])) + (
                f" (+{len(members) - 3} more)" if len(members) > 3 else "")  # fmt: skip
            example = f"{members[0].protocol} {members[0].case}: {members[0].detail}"
            lines.append(f"| {who} | {verdict} | {producer} | {consumer} | {_rule_markdown(rule).replace('|', '/')} | "
                         f"{protocols} | {len(members)} | {cases} | {example.replace('|', '/')} |")  # fmt: skip
    lines += _versus_markdown(cells)
    why: dict[tuple[str, str, str], Counter[str]] = defaultdict(Counter)
    for c in cells:
        if c.verdict == "copy" and c.protocol != "dlpack-copy":
            why[(c.producer, c.consumer, c.protocol)][c.reason] += 1
    if why:
        lines += ["", "## Copies, and why", "",
                  "| producer | consumer | protocol | copies | why (where the consumer's other cells tell) |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for (producer, consumer, protocol), n in sorted(why.items()):
            reasons = _reasons(n).strip(" ()") or "not told"
            lines.append(f"| {producer} | {consumer} | {protocol} | {sum(n.values())} | {reasons} |")
    return "\n".join(lines) + "\n"


def _versus_markdown(cells: list[Cell]) -> list[str]:
    """The Markdown section of :func:`versus` and :func:`table_check` (none
    without ``bridge-convert`` cells)."""
    rows = versus(cells)
    if not any(via.cells for _, _, _, via in rows):
        return []

    def side(s: Side, copies: str) -> str:
        return f"{s.cells} | {s.crash or ''} | {s.violation or ''} | {s.refused or ''} | {copies} | " \
               f"{s.zero_copy} ({s.percent()})"  # fmt: skip

    out = ["", "## Direct and via bridge.convert, per consumer", "",
           "Each consumer's own import (`from_dlpack`; `pa.array` and `pl.Series` for pyarrow and polars) "
           "beside `bridge.convert(x, consumer)`, from the same producers. Zero-copy is the share of the "
           "cells with bytes to share (not n/a, not empty); a convert copy names its reason (the "
           "`CopyWarning`'s kind).", "",
           "| consumer | own import | cells | crash | violation | refused | copy | zero-copy | "
           "via bridge-convert: cells | crash | violation | refused | copy (reason named) | zero-copy |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for name, own, direct, via in rows:
        label = f"**{name}**" if name == "all" else name
        out.append(f"| {label} | {own} | {side(direct, str(direct.copy or ''))} | "
                   f"{side(via, f'{via.copy} ({via.named})' if via.copy else '')} |")  # fmt: skip
    judged, found = table_check(cells)
    if judged:
        out += ["", f"The destination table (`bridge/crossing/capabilities.py`) against the {judged} cells of "
                    f"bridge's tensors through each library's own DLPack import: "
                    + (f"{len(found)} contradictions:" if found else "no contradiction.")]  # fmt: skip
        out += [f"- {line}" for line in found]
    return out


# A line of the terminal report and the rich style it is printed in ("" plain).
_Line = tuple[str, str]
_STYLE = {"zero-copy": "green", "copy": "yellow", "empty": "green", "unverified": "yellow", "refused": "blue",
          "violation": "red", "crash": "bold red", "n/a": "dim"}  # fmt: skip
# How many groups of crashes and violations the terminal report lists before
# it points at the full reports.
_MAX_GROUPS = 25


def _wrap(text: str, width: int, indent: str, max_lines: int = 0) -> list[str]:
    """``text`` wrapped to ``width`` under ``indent``; at most ``max_lines`` (0: all), the last ending in "..."."""
    lines = textwrap.wrap(" ".join(text.split()), width=max(width - len(indent), 20),
                          break_long_words=True, break_on_hyphens=False) or [""]  # fmt: skip
    if max_lines and len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = lines[-1][: max(width - len(indent) - 3, 0)].rstrip() + "..."
    return [indent + line for line in lines]


def _fit_list(prefix: str, items: list[str], width: int) -> str:
    """``prefix`` and as many of ``items`` as fit in ``width``, then how many more there are."""
    line = prefix
    for i, item in enumerate(items):
        more = f" (+{len(items) - i - 1} more)" if i < len(items) - 1 else ""
        candidate = line + ("" if i == 0 else ", ") + item
        if len(candidate + more) > width:
            return line + f" (+{len(items) - i} more)" if i else line + item[: width - len(line)]
        line = candidate
    return line


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _reasons(counter: Counter[str]) -> str:
    """`` (layout 8, alignment 2)``: the copies' known reasons, most first; empty when none is known."""
    known = [(r, n) for r, n in counter.most_common() if r]
    return f" ({', '.join(f'{r} {n}' for r, n in known)})" if known else ""


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{n} {v}" for v, n in sorted(counter.items(), key=lambda kv: (_rank(kv[0]), kv[0])) if n)


def format_table(cells: list[Cell], width: int = 80) -> list[tuple[str, str]]:
    """The terminal report as ``(line, rich style)`` pairs, no line longer
    than ``width`` (at least 40): a headline of counts; the crashes and
    violations, counted per library as producer and as consumer, then grouped
    by verdict, producer, consumer and rule, each group with its protocols,
    its count, its cases and one example detail, bridge's own failures first (at most 25 groups, then a count of the rest); the copies,
    one line per protocol, each pair's count with its known reasons; a table of the verdicts per protocol; the expected
    ``refused`` and ``n/a`` cells, one line per protocol."""
    width = max(width, 40)
    out: list[_Line] = []
    total = Counter(c.verdict for c in cells)
    protocols = ordered((c.protocol for c in cells), PROTOCOLS)
    producers = ordered((c.producer for c in cells), PEERS)
    consumer_names = ordered((c.consumer for c in cells), PEERS)
    head = (f"bridge interop matrix: {_plural(len(cells), 'cell')}, {_plural(len(producers), 'producer')} x "
            f"{_plural(len(consumer_names), 'consumer')}, {_plural(len(protocols), 'protocol')}")  # fmt: skip
    out += [(line, "bold") for line in _wrap(head, width, "")]
    out += [(line, "") for line in _wrap(_counts(total) or "no cells", width, "  ")]

    groups: dict[tuple[str, str, str, str], list[Cell]] = defaultdict(list)
    for c in cells:
        if c.verdict in ("crash", "violation"):
            groups[(c.verdict, c.producer, c.consumer, c.rule)].append(c)
    if groups:
        own = sum(1 for c in cells if bridge_at_fault(c))
        bad = total["crash"] + total["violation"]
        ours = f", {own} of them bridge's own" if own else ""
        out += [("", ""), (f"Crashes and violations: {bad} cells in {len(groups)} groups{ours}", "bold red")]
        per = Counter(who for who in culprits(cells) if who)
        listing = ", ".join(f"{peer} {n}" for peer, n in per.most_common())
        out += [(line, "") for line in _wrap(f"held responsible: {listing}", width, "  ", 3)]
        keys = sorted(groups, key=lambda k: (not any(bridge_at_fault(c) for c in groups[k]), _rank(k[0]),
                                             -len(groups[k]), k))  # fmt: skip
        for key in keys[:_MAX_GROUPS]:
            verdict, producer, consumer, rule = key
            members = groups[key]
            via = ", ".join(ordered((c.protocol for c in members), protocols))
            head = f"{SHORT.get(verdict, verdict):<5} {producer} -> {consumer} ({via})"
            if rule:
                head += f", rule {rule}"
            head += f": {len(members)} cell{'s' * (len(members) != 1)}"
            if any(bridge_at_fault(c) for c in members):
                head += ", bridge's own"
            out += [(line, _STYLE.get(verdict, "")) for line in _wrap(head, width, "  ", 2)]
            if rule in RULES:
                out += [(line, "") for line in _wrap(f"{RULES[rule].cite()}: {RULES[rule].text}", width, "        ", 2)]
            out.append((_fit_list("        cases: ", [c.case for c in members], width), "dim"))
            example = members[0]
            out += [(line, "") for line in _wrap(f"e.g. {example.protocol} {example.case}: "
                                                  f"{example.detail or '(no detail)'}", width, "        ", 2)]  # fmt: skip
        if len(keys) > _MAX_GROUPS:
            rest = sum(len(groups[k]) for k in keys[_MAX_GROUPS:])
            out += [(line, "") for line in _wrap(
                f"... and {len(keys) - _MAX_GROUPS} more groups ({rest} cells): see --html or --markdown",
                width, "  ")]  # fmt: skip

    copies: dict[str, Counter[str]] = defaultdict(Counter)
    why: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for c in cells:
        if c.verdict == "copy" and c.protocol != "dlpack-copy":  # there a copy is what was asked for
            copies[c.protocol][f"{c.producer}->{c.consumer}"] += 1
            why[(c.protocol, f"{c.producer}->{c.consumer}")][c.reason] += 1
    if copies:
        n_copies = sum(sum(v.values()) for v in copies.values())
        head = (f"Copies: {n_copies} cells (copy=True cells not counted), with why where the consumer's "
                "other cells tell")  # fmt: skip
        out += [("", "")] + [(line, "bold yellow") for line in _wrap(head, width, "")]
        for protocol in ordered(copies, protocols):
            pairs = ", ".join(f"{pair} {n}{_reasons(why[(protocol, pair)])}"
                              for pair, n in copies[protocol].most_common())  # fmt: skip
            out += [(line, "") for line in _wrap(f"{protocol}: {pairs}", width, "  ", 3)]

    out += [("", ""), ("Cells per protocol and verdict", "bold")]
    names = [v for v in VERDICTS if total[v]] + [v for v in total if v not in VERDICTS]
    first = max([len("protocol"), *map(len, protocols)])
    first = min(first, width - 6 * len(names) - 2)
    out.append(("  " + "protocol"[:first].ljust(first) + "".join(f"{SHORT.get(v, v)[:5]:>6}" for v in names), "bold"))
    for protocol in protocols:
        n = Counter(c.verdict for c in cells if c.protocol == protocol)
        label = protocol if len(protocol) <= first else protocol[: first - 1] + "~"
        row = "  " + label.ljust(first) + "".join(f"{n[v] or '':>6}" for v in names)
        out.append((row.rstrip(), "red" if n["crash"] or n["violation"] else ""))

    out += _versus_lines(cells, width)

    if total["refused"] or total["n/a"]:
        out.append(("", ""))
        out += [(line, "bold blue") for line in _wrap(
            "Expected by design: refused (a spec allows refusing), n/a (the producer cannot make the case)",
            width, "")]  # fmt: skip
        for protocol in protocols:
            mine = [c for c in cells if c.protocol == protocol]
            refused = Counter(c.consumer for c in mine if c.verdict == "refused")
            na = Counter(c.producer for c in mine if c.verdict == "n/a")
            parts = []
            if refused:
                by = ", ".join(f"{k} {v}" for k, v in refused.most_common())
                parts.append(f"{sum(refused.values())} refused (by {by})")
            if na:
                by = ", ".join(f"{k} {v}" for k, v in na.most_common())
                parts.append(f"{sum(na.values())} n/a (from {by})")
            if parts:
                out += [(line, "") for line in _wrap(f"{protocol}: " + "; ".join(parts), width, "  ", 2)]
    # The lines are built to fit; this guards the contract against a long name.
    return [(line if len(line) <= width else line[: width - 3] + "...", style) for line, style in out]


def _versus_lines(cells: list[Cell], width: int) -> list[_Line]:
    """The terminal lines of :func:`versus`: per consumer, crashes,
    violations, refusals and the zero-copy share through its own import and
    through ``bridge-convert``, and convert's copies with their reasons named."""
    rows = versus(cells)
    if not any(via.cells for _, _, _, via in rows):
        return []
    out: list[_Line] = [("", ""), ("Own import and via bridge-convert, per consumer", "bold")]
    out.append((f"{'':13}{' own import ':-^25}   {' via bridge-convert ':-^36}", "dim"))
    out.append(("  consumer     crash  viol refus 0copy   crash  viol refus 0copy copies named", "bold"))
    for name, _, d, v in rows:
        row = (f"  {name[:11]:<11}{d.crash:>7}{d.violation:>6}{d.refused:>6}{d.percent():>6}"
               f"   {v.crash:>5}{v.violation:>6}{v.refused:>6}{v.percent():>6}{v.copy:>7}{v.named:>6}")  # fmt: skip
        out.append((row, "red" if v.crash or v.violation else ("bold" if name == "all" else "")))
    judged, found = table_check(cells)
    if judged:
        words = f"{len(found)} contradictions" if found else "no contradiction"
        out += [(line, "red" if found else "") for line in _wrap(
            f"destination table vs {judged} cells of bridge's tensors through each own import: {words}",
            width, "  ")]  # fmt: skip
        out += [(line, "") for text in found[:5] for line in _wrap(text, width, "    ", 2)]
    return out


def print_table(cells: list[Cell], width: int | None = None) -> None:
    """Print :func:`format_table` for a terminal: ``width`` columns (default:
    the terminal's, at most 100), in colour with rich when it is installed
    and the output is a terminal."""
    try:
        from rich.console import Console
        from rich.text import Text
    except ImportError:
        import shutil

        for line, _ in format_table(cells, width or min(shutil.get_terminal_size().columns, 100)):
            print(line)
        return
    console = Console(highlight=False, soft_wrap=False)
    if width is None:
        width = min(console.width, 100)
    console = Console(highlight=False, width=width)
    for line, style in format_table(cells, width):
        console.print(Text(line, style=style, no_wrap=True, overflow="ellipsis"))
