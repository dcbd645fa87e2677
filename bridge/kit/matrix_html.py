"""The matrix as one self-contained HTML page (``python -m bridge matrix --html PATH``).

The page needs nothing but itself: the style and a small script are inline,
no font, image or script is fetched, and the cells travel inside it as JSON
(a ``<script type="application/json">`` block, every ``<``, ``>`` and ``&``
escaped so that no detail text can end the block). It shows, top to bottom:

* the title, what ``meta`` holds (versions, date, machine, the command) and
  the legend of the verdicts and their colours;
* per library held responsible (:func:`~bridge.kit.matrix_grid.culprits`),
  its crashes and violations with the rules broken (each rule's name, its
  spec citation linked to the spec);
* per consumer, its own import's counts beside ``bridge-convert``'s
  (``table#versus``), and the destination table's check against the cells;
* per protocol, a producer x consumer grid (``table.grid[data-protocol=...]``,
  the ``dlpack`` and ``bridge-convert`` grids side by side in a ``div.pair``)
  whose cells (``td.cell[data-producer=...][data-consumer=...]``) are coloured
  by their worst verdict (:data:`bridge.kit.matrix_tables.SEVERITY`) and show
  the count of each verdict; each holds a button that shows its cases (dtype,
  layout, read-only, verdict, rule and citation, detail, path) in the panel
  ``#details``, built with ``textContent`` so details are shown, never parsed;
  a copy's verdict says why it copied where that is known (``copy (layout)``);
  with ``repro`` (``--repro DIR``), each crash and violation case links to its
  reproducer script (``a.repro``, a link relative to the page).

Peers and protocols come from the cells (in the order of
:data:`~bridge.kit.matrix_grid.PEERS` and
:data:`~bridge.kit.matrix_grid.PROTOCOLS`, others after them), so a peer added
later shows without a change here.
"""

from __future__ import annotations

import html
import json
import pathlib
from collections import Counter, defaultdict
from collections.abc import Mapping

from bridge.kit.matrix_grid import PEERS, PROTOCOLS, VERDICTS, Cell, bridge_at_fault, culprits
from bridge.kit.matrix_holds import CONVERT
from bridge.kit.matrix_tables import SEVERITY, Side, ordered, table_check, versus, worst
from bridge.kit.rules import RULES

__all__ = ["to_html", "write_html", "COLOURS", "LETTERS"]

#: The background colour of each verdict on the page (the legend says which).
COLOURS: dict[str, str] = {
    "zero-copy": "#b7e4c7", "copy": "#ffe08a", "empty": "#d8f3dc", "unverified": "#fff3bf", "refused": "#c5d8f7",
    "violation": "#ffa8a8", "crash": "#c92a2a", "n/a": "#e9ecef",
}  # fmt: skip
_MEANING = {
    "zero-copy": "the consumer reads the producer's memory (proven by address)",
    "copy": "the values crossed intact, in new memory (why, where the consumer's other cells tell: "
            "requested, read-only, alignment, dtype, layout)",
    "empty": "a zero-size tensor crossed intact: no bytes to share, so neither copy nor zero-copy",
    "unverified": "the exchange worked; the checker cannot observe the result's address or values",
    "refused": "the consumer refused with an exception the protocol allows",
    "violation": "a spec rule was broken (the rule is named)",
    "crash": "the process died (a signal or an abort), with its last words",
    "n/a": "the producer cannot make this case",
}  # fmt: skip
#: The letter a grid cell shows before each verdict's count.
LETTERS: dict[str, str] = {"crash": "X", "violation": "V", "copy": "c", "unverified": "u", "refused": "r",
                           "zero-copy": "z", "empty": "e", "n/a": "-"}  # fmt: skip
# Unknown verdicts (added to the grid after this page) get a neutral colour.
_OTHER_COLOUR = "#dee2e6"

_CSS = """
:root { color-scheme: light; }
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 1rem 1.5rem 0;
       color: #212529; }
h1 { font-size: 1.5rem; margin: 0 0 .5rem; } h2 { font-size: 1.2rem; margin: 1.5rem 0 .5rem; }
dl.meta { display: grid; grid-template-columns: max-content 1fr; gap: .1rem 1rem; margin: 0; }
dl.meta dt { font-weight: 600; } dl.meta dd { margin: 0; font-family: ui-monospace, monospace; }
ul.legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: .4rem 1rem; }
.swatch { display: inline-block; min-width: 3.2em; padding: 0 .3em; border: 1px solid #0003;
          border-radius: 3px; text-align: center; font-weight: 600; margin-right: .3em; }
table { border-collapse: collapse; }
table.summary td, table.summary th, table.cases td, table.cases th {
  border: 1px solid #ced4da; padding: .2rem .45rem; text-align: left; vertical-align: top; }
table.summary td.n { text-align: right; }
div.pair { display: flex; flex-wrap: wrap; gap: 0 2rem; align-items: flex-start; }
.scroll { overflow-x: auto; max-width: 100%; }
table.grid { margin-bottom: .5rem; }
table.grid th { font-weight: 600; padding: .15rem .3rem; }
table.grid thead th { writing-mode: vertical-rl; transform: rotate(180deg); text-align: left;
                      vertical-align: bottom; white-space: nowrap; }
table.grid tbody th { text-align: right; white-space: nowrap; }
table.grid td { border: 1px solid #fff; padding: 0; min-width: 3.6rem; height: 2.4rem; }
td.none { background: repeating-linear-gradient(45deg, #f8f9fa, #f8f9fa 4px, #fff 4px, #fff 8px); }
td.cell button { all: unset; box-sizing: border-box; display: block; width: 100%; height: 100%;
                 cursor: pointer; padding: .1rem .25rem; font: 11px/1.15 ui-monospace, monospace;
                 text-align: center; }
td.cell button:focus-visible { outline: 3px solid #1c7ed6; outline-offset: -3px; }
td.cell button[aria-pressed="true"] { outline: 3px solid #212529; outline-offset: -3px; }
td.cell .c { display: inline-block; margin: 0 .1rem; }
p.counts { margin: .2rem 0 .4rem; }
td.cell[data-worst="crash"] button, td.verdict[data-verdict="crash"], .swatch[data-verdict="crash"] { color: #fff; }
#details { position: sticky; bottom: 0; background: #fff; border-top: 3px solid #495057;
           max-height: 45vh; overflow: auto; padding: .5rem 0 1rem; margin-top: 1rem; }
#details[hidden] { display: none; }
#details h2 { margin-top: 0; }
#details .close { float: right; }
table.cases td.detail { font-family: ui-monospace, monospace; white-space: pre-wrap; max-width: 60rem;
                        overflow-wrap: anywhere; }
table.cases td.rule { max-width: 28rem; }
.muted { color: #6c757d; }
"""

# Builds the details panel from the embedded data, by the clicked cell's key.
# Every value goes in through textContent (or an <a>'s href, for the rules'
# spec links, which come from bridge.kit.rules, not from cells).
_JS = """
(() => {
  const data = JSON.parse(document.getElementById('matrix-data').textContent);
  const S = data.strings;
  const panel = document.getElementById('details');
  const el = (tag, text, cls) => {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  };
  let pressed = null;
  const show = (button) => {
    const td = button.closest('td.cell');
    const p = td.dataset.producer, c = td.dataset.consumer, pr = td.dataset.protocol;
    const rows = data.cells[[p, c, pr].join('\\u0000')] || [];
    if (pressed) pressed.setAttribute('aria-pressed', 'false');
    pressed = button; button.setAttribute('aria-pressed', 'true');
    panel.replaceChildren();
    const close = el('button', 'close', 'close');
    close.type = 'button';
    close.addEventListener('click', () => { panel.hidden = true; button.focus(); });
    panel.append(close, el('h2', `${p} \\u2192 ${c} via ${pr}: ${rows.length} cases`));
    const withPath = rows.some((r) => r[6] !== 0);
    const withRepro = rows.some((r) => r[8] !== 0);
    const table = el('table', null, 'cases');
    const head = table.createTHead().insertRow();
    for (const h of ['dtype', 'layout', 'read-only', 'verdict', 'rule', 'detail'].concat(withPath ? ['path'] : [],
                                                                                         withRepro ? ['reproducer'] : [])) {
      head.append(el('th', h));
    }
    const body = table.createTBody();
    for (const r of rows) {
      const tr = body.insertRow();
      const verdict = S[r[3]];
      tr.className = 'case';
      tr.dataset.verdict = verdict;
      tr.append(el('td', S[r[0]]), el('td', S[r[1]]), el('td', r[2] ? 'yes' : 'no'));
      const v = el('td', r[7] ? `${verdict} (${S[r[7]]})` : verdict, 'verdict');
      v.dataset.verdict = verdict;
      v.style.background = data.colours[verdict] || data.other;
      tr.append(v);
      const rule = el('td', null, 'rule');
      const name = S[r[4]];
      if (name) {
        const info = data.rules[name];
        rule.append(el('strong', name));
        if (info) {
          const a = el('a', info.cite); a.href = info.url;
          rule.append(document.createElement('br'), a, el('div', info.text, 'muted'));
        }
      }
      tr.append(rule, el('td', S[r[5]], 'detail'));
      if (withPath) tr.append(el('td', S[r[6]], 'path'));
      if (withRepro) {
        const td = el('td', null, 'repro');
        if (r[8]) { const a = el('a', S[r[8]].split('/').pop(), 'repro'); a.href = S[r[8]]; td.append(a); }
        tr.append(td);
      }
    }
    panel.append(table);
    panel.hidden = false;
  };
  document.querySelectorAll('td.cell button').forEach((b) => b.addEventListener('click', () => show(b)));
})();
"""


def _attr(value: str) -> str:
    return html.escape(value, quote=True)


def _text(value: str) -> str:
    return html.escape(value, quote=False)


def _embed(payload: object) -> str:
    """``payload`` as JSON safe inside ``<script>``: ``<``, ``>`` and ``&`` as
    ``\\u`` escapes (they occur only inside JSON strings), so no ``</script>``
    or ``<!--`` in a detail can end or confuse the block."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _payload(cells: list[Cell], repro: Mapping[tuple[str, str, str, str, str, bool], str] | None = None,
             ) -> dict[str, object]:  # fmt: skip
    """The cells grouped by ``producer\\0consumer\\0protocol``, each case as
    indices into one table of strings (a full matrix has ~100k cells whose
    dtypes, layouts, verdicts and details repeat), worst verdict first; a
    case's last index is its reproducer's link in ``repro`` (0: none)."""
    strings: dict[str, int] = {"": 0}

    def sid(s: str) -> int:
        return strings.setdefault(s, len(strings))

    rank = {v: i for i, v in enumerate(SEVERITY)}
    grouped: dict[str, list[list[int]]] = defaultdict(list)
    for c in sorted(cells, key=lambda c: (rank.get(c.verdict, len(rank)), c.dtype, c.layout, c.readonly)):
        key = "\0".join((c.producer, c.consumer, c.protocol))
        grouped[key].append([sid(c.dtype), sid(c.layout), int(c.readonly), sid(c.verdict), sid(c.rule),
                             sid(c.detail), sid(c.path), sid(c.reason), sid((repro or {}).get(c.key(), ""))])  # fmt: skip
    used_rules = {c.rule for c in cells if c.rule}
    return {
        "strings": list(strings),
        "cells": grouped,
        "rules": {n: {"cite": RULES[n].cite(), "url": RULES[n].url, "text": RULES[n].text}
                  for n in sorted(used_rules) if n in RULES},
        "colours": COLOURS,
        "other": _OTHER_COLOUR,
    }


def _letter(verdict: str) -> str:
    return LETTERS.get(verdict, verdict[:1] or "?")


def _legend(verdicts: list[str]) -> str:
    items = []
    for v in verdicts:
        colour = COLOURS.get(v, _OTHER_COLOUR)
        items.append(f'<li data-verdict="{_attr(v)}"><span class="swatch" data-verdict="{_attr(v)}" style="background:{colour}">'
                     f'{_text(_letter(v))}</span>{_text(v)}: {_text(_MEANING.get(v, ""))}</li>')  # fmt: skip
    return '<ul class="legend">' + "".join(items) + "</ul>"


def _rule_link(name: str, count: int) -> str:
    rule = RULES.get(name)
    label = f"{_text(name)} &times;{count}"
    if rule is None:
        return f'<span class="rule">{label}</span>'
    return (f'<span class="rule" title="{_attr(rule.text)}">{label} '
            f'(<a href="{_attr(rule.url)}">{_text(rule.cite())}</a>)</span>')  # fmt: skip


def _failures(cells: list[Cell], peers: list[str]) -> str:
    """The crashes and violations per library held responsible
    (:func:`~bridge.kit.matrix_grid.culprits`), with the rules broken."""
    blamed: dict[str, list[Cell]] = {}
    for cell, who in zip(cells, culprits(cells)):
        if who:
            blamed.setdefault(who, []).append(cell)
    rows = []
    for peer in [p for p in peers if p in blamed] + sorted(set(blamed) - set(peers)):
        mine = blamed[peer]
        n = Counter(c.verdict for c in mine)
        rules = Counter(c.rule for c in mine if c.verdict == "violation" and c.rule)
        unnamed = sum(1 for c in mine if c.verdict == "violation" and not c.rule)
        links = ", ".join(_rule_link(r, k) for r, k in rules.most_common())
        if unnamed:
            links += (", " if links else "") + f"no rule named &times;{unnamed}"
        roles = Counter("producer" if c.producer == peer else "consumer" for c in mine)
        as_ = ", ".join(f"{role} {k}" for role, k in roles.most_common())
        own = sum(1 for c in mine if bridge_at_fault(c))
        rows.append(f'<tr data-library="{_attr(peer)}"><td>{_text(peer)}</td><td>{_text(as_)}</td>'
                    f'<td class="n">{n["violation"] or ""}</td><td class="n">{n["crash"] or ""}</td>'
                    f'<td class="n">{own or ""}</td><td>{links}</td></tr>')  # fmt: skip
    if not rows:
        return '<p class="ok">No crashes and no violations.</p>'
    return ('<table class="summary" id="failures"><thead><tr><th>library held responsible</th><th>as</th>'
            "<th>violations</th><th>crashes</th><th>bridge's own</th><th>rules broken (spec)</th></tr></thead>"
            "<tbody>" + "".join(rows) + "</tbody></table>")  # fmt: skip


def _grid(cells: list[Cell], protocol: str, producers: list[str], consumer_names: list[str]) -> str:
    """One protocol's producer x consumer table; a pair with no cells is an empty, hatched ``td.none``."""
    by_pair: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for cell in cells:
        if cell.protocol == protocol:
            by_pair[(cell.producer, cell.consumer)][cell.verdict] += 1
    rows_used = [p for p in producers if any((p, c) in by_pair for c in consumer_names)]
    cols_used = [c for c in consumer_names if any((p, c) in by_pair for p in producers)]
    head = "".join(f'<th scope="col">{_text(c)}</th>' for c in cols_used)
    body = []
    for p in rows_used:
        tds = []
        for c in cols_used:
            n = by_pair.get((p, c))
            if not n:
                tds.append('<td class="none" title="no cells"></td>')
                continue
            w = worst(n)
            counts = sorted(n.items(), key=lambda kv: SEVERITY.index(kv[0]) if kv[0] in SEVERITY else 99)
            spans = "".join(f'<span class="c" data-verdict="{_attr(v)}">{k}{_text(_letter(v))}</span>'
                            for v, k in counts)  # fmt: skip
            words = ", ".join(f"{k} {v}" for v, k in counts)
            label = f"{p} to {c} via {protocol}: {words}"
            tds.append(f'<td class="cell" data-producer="{_attr(p)}" data-consumer="{_attr(c)}" '
                       f'data-protocol="{_attr(protocol)}" data-worst="{_attr(w)}" '
                       f'style="background:{COLOURS.get(w, _OTHER_COLOUR)}">'
                       f'<button type="button" aria-pressed="false" title="{_attr(label)}" '
                       f'aria-label="{_attr(label)}">{spans}</button></td>')  # fmt: skip
        body.append(f'<tr><th scope="row">{_text(p)}</th>{"".join(tds)}</tr>')
    total = Counter(c.verdict for c in cells if c.protocol == protocol)
    summary = ", ".join(f"{total[v]} {v}" for v in SEVERITY if total[v])
    return (f'<section class="protocol" id="protocol-{_attr(protocol)}"><h3>{_text(protocol)}</h3>'
            f'<p class="counts">{_text(summary)}</p>'
            f'<div class="scroll"><table class="grid" data-protocol="{_attr(protocol)}">'
            f"<caption hidden>{_text(protocol)}: producer (rows) &times; consumer (columns)</caption>"
            f'<thead><tr><th scope="col">producer \\ consumer</th>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div></section>')  # fmt: skip


def _side(s: Side, copies: bool) -> str:
    named = f' title="{s.named} with their reason named"' if copies and s.copy else ""
    return (f'<td class="n">{s.cells}</td><td class="n">{s.crash or ""}</td><td class="n">{s.violation or ""}</td>'
            f'<td class="n">{s.refused or ""}</td><td class="n"{named}>'
            f'{(f"{s.copy} ({s.named} named)" if copies else s.copy) if s.copy else ""}</td>'
            f'<td class="n">{s.zero_copy} ({_text(s.percent())})</td>')  # fmt: skip


def _versus(cells: list[Cell]) -> str:
    """The direct grid's and the ``bridge-convert`` grid's counts per consumer,
    side by side (:func:`~bridge.kit.matrix_tables.versus`), and the
    destination table's check (:func:`~bridge.kit.matrix_tables.table_check`)."""
    rows = versus(cells)
    if not any(via.cells for _, _, _, via in rows):
        return ""
    body = "".join(f'<tr data-consumer="{_attr(name)}"><th scope="row">{_text(name)}</th><td>{_text(own)}</td>'
                   f"{_side(direct, False)}{_side(via, True)}</tr>" for name, own, direct, via in rows)  # fmt: skip
    judged, found = table_check(cells)
    check = ""
    if judged:
        items = "".join(f"<li>{_text(line)}</li>" for line in found)
        check = (f'<p id="table-check">The destination table (<code>bridge/crossing/capabilities.py</code>) '
                 f"against the {judged} cells of bridge's tensors through each library's own DLPack import: "
                 f'{f"{len(found)} contradictions" if found else "no contradiction"}.</p>'
                 + (f"<ul>{items}</ul>" if items else ""))  # fmt: skip
    head = "<th>cells</th><th>crash</th><th>violation</th><th>refused</th><th>copy</th><th>zero-copy</th>"
    return ('<h2>Direct and via bridge.convert, per consumer</h2>'
            "<p>Each consumer's own import (<code>from_dlpack</code>; <code>pa.array</code> and "
            "<code>pl.Series</code> for pyarrow and polars) beside <code>bridge.convert(x, consumer)</code>. "
            "Zero-copy is the share of the cells with bytes to share; a convert copy names its reason.</p>"
            '<table class="summary" id="versus"><thead><tr><th rowspan="2">consumer</th>'
            '<th rowspan="2">own import</th><th colspan="6">direct</th><th colspan="6">via bridge-convert</th></tr>'
            f"<tr>{head}{head}</tr></thead><tbody>{body}</tbody></table>{check}")  # fmt: skip


def _grids(cells: list[Cell], protocols: list[str], producers: list[str], consumer_names: list[str]) -> str:
    """Every protocol's grid; ``dlpack`` and ``bridge-convert`` side by side."""
    paired = "dlpack" in protocols and CONVERT in protocols
    out = []
    for pr in protocols:
        if paired and pr == CONVERT:
            continue
        grid = _grid(cells, pr, producers, consumer_names)
        if paired and pr == "dlpack":
            grid = f'<div class="pair">{grid}{_grid(cells, CONVERT, producers, consumer_names)}</div>'
        out.append(grid)
    return "".join(out)


def to_html(cells: list[Cell], *, title: str = "bridge interop matrix", meta: Mapping[str, str] | None = None,
            repro: Mapping[tuple[str, str, str, str, str, bool], str] | None = None) -> str:  # fmt: skip
    """The matrix report as one HTML page (see the module's docstring) that
    loads nothing from anywhere: the only URLs in it are the specs' pages, as
    ``<a href>`` links in the rules. ``meta`` is shown under the title, in
    its order (e.g. date, machine, command, the peers' versions). ``repro``
    maps a cell's :meth:`~bridge.kit.matrix_grid.Cell.key` to its
    reproducer's link (:func:`bridge.kit.matrix_repro.repro_links`)."""
    producers = ordered((c.producer for c in cells), PEERS)
    consumer_names = ordered((c.consumer for c in cells), PEERS)
    protocols = ordered((c.protocol for c in cells), PROTOCOLS)
    peers = ordered([*producers, *consumer_names], PEERS)
    total = Counter(c.verdict for c in cells)
    verdicts = [*SEVERITY, *(v for v in VERDICTS if v not in SEVERITY), *(v for v in total if v not in VERDICTS)]
    verdicts = list(dict.fromkeys(verdicts))
    meta_html = "".join(f"<dt>{_text(k)}</dt><dd>{_text(v)}</dd>" for k, v in (meta or {}).items())
    counts = ", ".join(f"{total[v]} {v}" for v in verdicts if total[v]) or "no cells"
    grids = _grids(cells, protocols, producers, consumer_names)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_text(title)}</title>
<style>{_CSS}</style>
</head>
<body>
<header>
<h1>{_text(title)}</h1>
<dl class="meta">{meta_html}<dt>cells</dt><dd>{len(cells)}: {_text(counts)}</dd>
<dt>grid</dt><dd>{len(producers)} producers, {len(consumer_names)} consumers, {len(protocols)} protocols</dd></dl>
<h2>Verdicts</h2>
<p>A grid cell is coloured by its worst verdict, from worst to best: {_text(", ".join(SEVERITY))};
it shows the count of each verdict followed by the verdict's letter (for example <code>2X 40z</code>:
2 crashes, 40 zero-copy).</p>
{_legend(verdicts)}
</header>
<main>
<h2>Crashes and violations per library</h2>
{_failures(cells, peers)}
{_versus(cells)}
<h2>Grids, per protocol</h2>
<p>Choose a cell to list its cases below. The direct <code>dlpack</code> grid and the
<code>bridge-convert</code> grid (the same producers through <code>bridge.convert</code>) stand side by side.</p>
{grids}
</main>
<section id="details" hidden aria-live="polite"></section>
<script type="application/json" id="matrix-data">{_embed(_payload(cells, repro))}</script>
<script>{_JS}</script>
</body>
</html>
"""


def write_html(cells: list[Cell], path: str | pathlib.Path, meta: Mapping[str, str] | None = None,
               repro: Mapping[tuple[str, str, str, str, str, bool], str] | None = None) -> pathlib.Path:  # fmt: skip
    """Write :func:`to_html` of ``cells`` (with ``repro``'s links) to
    ``path`` (its folder made when missing) and return the absolute path
    written."""
    target = pathlib.Path(path).expanduser().resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(to_html(cells, meta=meta, repro=repro), encoding="utf-8")
    return target
