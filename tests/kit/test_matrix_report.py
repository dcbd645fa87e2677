"""The matrix's reports: the HTML page (its structure, that it loads nothing,
its escaping, and, in headless Chromium, that a click on a grid cell lists
that cell's cases), the 80-column terminal report, the Markdown's rule column,
the progress lines with the time left, and ``--html`` on a small real run.

The browser is Debian's Chromium through Selenium and ``/usr/bin/chromedriver``,
set up as tests/test_docs_site.py does (``make test`` installs them)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import pytest
from browser import headless_chromium

from bridge.kit.matrix import ProgressLines
from bridge.kit.matrix_grid import Cell
from bridge.kit.matrix_html import to_html, write_html
from bridge.kit.matrix_tables import format_table, print_table, to_markdown, worst
from bridge.kit.rules import RULES

ROOT = Path(__file__).resolve().parents[2]
EVIL = "</script><script>window.pwned = 1</script><!-- & <b>bold</b>"


def _cells() -> list[Cell]:
    """A small hand-made matrix: two protocols, every verdict, a violation with a
    rule and a path, a crash whose detail tries to end the page's script."""
    cells = []
    for layout in ("contiguous", "transposed", "negative"):
        for ro in (False, True):
            cells.append(Cell("numpy", "torch", "dlpack", "float32", layout, ro, verdict="zero-copy",
                              path="__dlpack__"))  # fmt: skip
            cells.append(Cell("numpy", "numpy", "dlpack", "float32", layout, ro, verdict="zero-copy"))
            cells.append(Cell("bridge", "numpy", "buffer", "int64", layout, ro, verdict="refused",
                              detail="BufferError: not contiguous"))  # fmt: skip
    cells += [
        Cell("bridge", "torch", "dlpack", "float32", "negative", False, verdict="crash", detail=EVIL),
        Cell("bridge", "torch", "dlpack", "float32", "contiguous", True, verdict="violation", rule="read-only",
             detail="the result is writable", path="exchange-api"),
        Cell("bridge", "torch", "dlpack", "float32", "contiguous", False, verdict="zero-copy"),
        Cell("bridge", "torch", "dlpack", "bool", "0-d", False, verdict="copy", reason="layout"),
        Cell("bridge", "torch", "dlpack", "bool", "zero-size", False, verdict="empty"),
        Cell("torch", "numpy", "buffer", "float32", "negative", False, verdict="n/a"),
        Cell("numpy", "bridge", "buffer", "float32", "stepped", False, verdict="unverified"),
    ]  # fmt: skip
    return cells


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text of each <script>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.scripts: list[tuple[dict[str, str], str]] = []
        self._in_script: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append((tag, a))
        if tag == "script":
            self._in_script = a
            self.scripts.append((a, ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = None

    def handle_data(self, data: str) -> None:
        if self._in_script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in attrs.items())]


def _parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser


def test_worst_follows_the_documented_order() -> None:
    assert worst(["zero-copy", "refused", "n/a"]) == "refused"
    assert worst(["copy", "violation", "crash"]) == "crash"
    assert worst(["unverified", "copy"]) == "copy"
    assert worst(["n/a"]) == "n/a" and worst([]) == ""


def test_html_structure_grids_and_cells() -> None:
    page = to_html(_cells(), title="t", meta={"date": "2026-01-01", "numpy": "2.4"})
    tags = _parse(page)
    grids = tags.find("table", **{"class": "grid"})
    assert sorted(g["data-protocol"] for g in grids) == ["buffer", "dlpack"]
    cells = {(a["data-producer"], a["data-consumer"], a["data-protocol"]): a
             for a in tags.find("td", **{"class": "cell"})}  # fmt: skip
    assert set(cells) == {("numpy", "torch", "dlpack"), ("numpy", "numpy", "dlpack"), ("bridge", "torch", "dlpack"),
                          ("bridge", "numpy", "buffer"), ("torch", "numpy", "buffer"),
                          ("numpy", "bridge", "buffer")}  # fmt: skip
    assert cells[("bridge", "torch", "dlpack")]["data-worst"] == "crash"
    assert cells[("bridge", "numpy", "buffer")]["data-worst"] == "refused"
    assert cells[("numpy", "torch", "dlpack")]["data-worst"] == "zero-copy"
    # Each grid cell is a real button, reachable by the keyboard.
    assert len(tags.find("button", type="button", aria_pressed="false")) == len(cells)
    assert tags.find("section", id="details")
    assert "2026-01-01" in page and "<dt>numpy</dt><dd>2.4</dd>" in page
    # The summary names the rule, its citation and links the spec.
    rule = RULES["read-only"]
    assert rule.cite() in page and f'href="{rule.url}"' in page


def test_html_is_self_contained_and_escapes_details() -> None:
    page = to_html(_cells())
    tags = _parse(page)
    assert not [a for _, a in tags.tags if "src" in a], "nothing may be loaded from anywhere"
    assert not tags.find("link")
    hrefs = [a["href"] for t, a in tags.tags if "href" in a]
    assert hrefs and all(h in {r.url for r in RULES.values()} for h in hrefs), hrefs
    assert [t for t, a in tags.tags if t != "a" and "href" in a] == []
    assert "url(" not in page and "@import" not in page
    # The data is embedded, and the crash's detail cannot end the script block.
    data_blocks = [text for a, text in tags.scripts if a.get("type") == "application/json"]
    assert len(data_blocks) == 1 and len(tags.scripts) == 2
    assert "window.pwned" in data_blocks[0] and "</" not in data_blocks[0]
    assert page.count("</script>") == 2 and "<b>bold</b>" not in page
    data = json.loads(data_blocks[0])
    assert EVIL in data["strings"]
    assert "bridge\0torch\0dlpack" in data["cells"]


def test_write_html_returns_the_absolute_path(tmp_path: Path) -> None:
    out = write_html(_cells(), tmp_path / "sub" / "m.html", meta={"command": "x"})
    assert out.is_absolute() and out.is_file() and out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def _many_cells() -> list[Cell]:
    """A wide matrix: long peer and protocol names, many refusals, many failures."""
    peers = ["array_api_strict", "onnxruntime", "tensorflow", "numpy", "a_peer_named_at_great_length"]
    cells = []
    for p in peers:
        for c in peers:
            for proto in ("dlpack", "cuda-array-interface", "a-protocol-with-a-very-long-name"):
                for layout in ("contiguous", "negative", "stepped", "broadcast"):
                    for dt in ("float32", "int64", "bfloat16"):
                        verdict = {"contiguous": "zero-copy", "negative": "refused", "stepped": "copy"}.get(
                            layout, "violation" if c == "numpy" else "n/a")  # fmt: skip
                        cells.append(Cell(p, c, proto, dt, layout, False, verdict=verdict,
                                          rule="strides" if verdict == "violation" else "",
                                          detail="x" * 300 if verdict == "violation" else "refused: BufferError"))  # fmt: skip
    cells.append(Cell("tensorflow", "onnxruntime", "dlpack", "float32", "0-d", True, verdict="crash",
                      detail="process died (exit -11) " + "y" * 200))  # fmt: skip
    return cells


def test_terminal_table_fits_80_columns_unexpected_first() -> None:
    cells = _many_cells()
    lines = [line for line, _ in format_table(cells, 80)]
    assert max(map(len, lines)) <= 80
    text = "\n".join(lines)
    # Crashes and violations come first, then copies, the refusals last.
    assert text.index("CRASH tensorflow -> onnxruntime") < text.index("VIOL") < text.index("Copies")
    assert text.index("Copies") < text.index("refused (by")
    assert "rule strides" in text and RULES["strides"].cite() in text
    # Expected refusals are one short line per protocol, not a row per pair.
    refusal_lines = [line for line in lines if "refused (by" in line]
    assert len(refusal_lines) <= 3 * 2
    assert len(lines) < 200, len(lines)


def test_print_table_with_rich_at_80_columns(capsys: pytest.CaptureFixture[str]) -> None:
    print_table(_many_cells(), width=80)
    out = capsys.readouterr().out
    assert out.strip()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert out.index("VIOL") < out.index("refused (by")


def test_copy_reasons_and_empty_cells_in_every_report() -> None:
    """A copy's reason shows in the 80-column report, the Markdown and the
    HTML page's data; an empty cell is its own verdict in each."""
    cells = _cells()
    text = "\n".join(line for line, _ in format_table(cells, 80))
    assert "dlpack: bridge->torch 1 (layout 1)" in text
    assert "empty" in text.split("Cells per protocol and verdict")[1].splitlines()[1]
    md = to_markdown(cells)
    assert "## Copies, and why" in md and "| bridge | torch | dlpack | 1 | layout 1 |" in md
    assert "| producer | consumer | protocol | zero-copy | copy | empty |" in md
    data = json.loads(next(t for a, t in _parse(to_html(cells)).scripts if a.get("type") == "application/json"))
    rows = data["cells"]["bridge\0torch\0dlpack"]
    s = data["strings"]
    assert [(s[r[3]], s[r[7]]) for r in rows if s[r[3]] in ("copy", "empty")] == [("copy", "layout"), ("empty", "")]
    assert 'data-verdict="empty"' in to_html(cells)


def _versus_cells() -> list[Cell]:
    """torch through its own import and through bridge.convert."""
    cells = []
    for layout in ("contiguous", "transposed", "negative", "zero-size"):
        direct = {"negative": "crash", "zero-size": "empty"}.get(layout, "zero-copy")
        via = {"negative": "copy", "zero-size": "empty"}.get(layout, "zero-copy")
        cells.append(Cell("numpy", "torch", "dlpack", "float32", layout, False, verdict=direct))
        cells.append(Cell("numpy", "torch", "bridge-convert", "float32", layout, False, verdict=via,
                          reason="layout" if via == "copy" else ""))  # fmt: skip
    cells.append(Cell("numpy", "torch", "dlpack", "float32", "contiguous", True, verdict="violation",
                      rule="read-only"))  # fmt: skip
    cells.append(Cell("numpy", "torch", "bridge-convert", "float32", "contiguous", True, verdict="copy"))
    cells.append(Cell("numpy", "warp", "dlpack", "float32", "contiguous", False, verdict="zero-copy"))
    return cells


def test_direct_and_bridge_convert_side_by_side_in_every_report() -> None:
    """Per consumer: its own import's crashes, violations and zero-copy share
    beside bridge-convert's, and how many of convert's copies name a reason."""
    from bridge.kit.matrix_tables import versus

    cells = _versus_cells()
    rows = {name: (own, d, v) for name, own, d, v in versus(cells)}
    assert set(rows) == {"torch", "all"}  # warp is no destination of convert
    own, d, v = rows["torch"]
    assert own == "dlpack" and (d.cells, d.crash, d.violation, d.zero_copy) == (5, 1, 1, 2)
    assert (v.cells, v.crash, v.copy, v.named, v.zero_copy) == (5, 0, 2, 1, 2)
    assert (d.percent(), v.percent()) == ("50%", "50%")
    md = to_markdown(cells)
    assert "## Direct and via bridge.convert, per consumer" in md
    assert "| torch | dlpack | 5 | 1 | 1 |  |  | 2 (50%) | 5 |  |  |  | 2 (1) | 2 (50%) |" in md
    lines = [line for line, _ in format_table(cells, 80)]
    assert max(map(len, lines)) <= 80
    text = "\n".join(lines)
    assert "Own import and via bridge-convert, per consumer" in text
    assert any(line.strip().startswith("-") and line.rstrip().endswith("-") and "via bridge-convert" in line
               for line in lines), "the column heads were cut"  # fmt: skip
    torch_row = next(line for line in lines if line.startswith("  torch "))
    assert torch_row.split() == ["torch", "1", "1", "0", "50%", "0", "0", "0", "50%", "2", "1"]
    tags = _parse(to_html(cells))
    assert tags.find("table", id="versus") and tags.find("tr", data_consumer="torch")
    assert tags.find("div", **{"class": "pair"})
    assert sorted(g["data-protocol"] for g in tags.find("table", **{"class": "grid"})) == ["bridge-convert", "dlpack"]


def test_markdown_names_the_rule() -> None:
    md = to_markdown(_cells())
    row = next(line for line in md.splitlines() if "| violation |" in line and "[read-only]" in line)
    assert "read-only" in row and RULES["read-only"].url in row and RULES["read-only"].cite() in row
    assert "| rule |" in md


def test_progress_lines_say_the_time_left() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = ProgressLines(1000, every_s=10.0, stream=out, clock=lambda: now[0])
    cell = Cell("numpy", "numpy", "dlpack", "float32", "contiguous", False)
    for _ in range(250):
        now[0] += 0.16
        progress(cell)
    lines = out.getvalue().splitlines()
    # Every 5% (50 cells, 8 s): 5 lines.
    assert len(lines) == 5, lines
    assert lines[0] == "  50/1000 cells, 8 s elapsed, about 3 min left"
    assert lines[-1] == "  250/1000 cells, 40 s elapsed, about 2 min left"
    now[0] += 30  # a slow cell: a line because 10 s passed, not because of the count
    progress(cell)
    assert out.getvalue().splitlines()[-1].startswith("  251/1000 cells, 70 s elapsed, about 3 min left")
    assert progress.line(1000, 3725) == "  1000/1000 cells, 1 h 02 min elapsed, done"


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    """Headless Chromium that can reach no host at all (a file:// page needs none)."""
    driver = headless_chromium("the report's browser test", "MAP * ~NOTFOUND", {"browser": "ALL"}, 30)
    try:
        yield driver
    finally:
        driver.quit()


def test_report_in_a_browser(browser: object, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.remote.webdriver import WebDriver

    assert isinstance(browser, WebDriver)
    path = write_html(_cells(), tmp_path / "matrix.html", meta={"command": "python -m bridge matrix"})
    browser.get(path.as_uri())
    grid = browser.find_element(By.CSS_SELECTOR, 'table.grid[data-protocol="dlpack"]')
    assert grid.is_displayed()
    details = browser.find_element(By.ID, "details")
    assert not details.is_displayed()

    cell = grid.find_element(By.CSS_SELECTOR, 'td.cell[data-producer="bridge"][data-consumer="torch"] button')
    cell.click()
    assert details.is_displayed()
    text = details.text
    assert "bridge → torch via dlpack: 5 cases" in text
    rows = details.find_elements(By.CSS_SELECTOR, "tr.case")
    assert [r.get_attribute("data-verdict") for r in rows] == ["crash", "violation", "copy", "zero-copy", "empty"]
    assert "copy (layout)" in rows[2].text
    # The violation's row: dtype, layout, read-only, rule with its citation and link, detail, path.
    violation = rows[1].text
    for expected in ("float32", "contiguous", "yes", "read-only", RULES["read-only"].cite(),
                     "the result is writable", "exchange-api"):  # fmt: skip
        assert expected in violation, (expected, violation)
    link = rows[1].find_element(By.CSS_SELECTOR, "td.rule a")
    assert link.get_attribute("href") == RULES["read-only"].url
    # The crash's detail is shown as text, never run or parsed.
    assert "</script><script>window.pwned = 1</script>" in rows[0].text
    assert browser.execute_script("return window.pwned === undefined")

    # Another cell, by the keyboard: the panel now shows that cell's cases.
    other = browser.find_element(
        By.CSS_SELECTOR, 'table.grid[data-protocol="buffer"] td.cell[data-producer="bridge"][data-consumer="numpy"] button'
    )
    browser.execute_script("arguments[0].focus()", other)
    other.send_keys(Keys.ENTER)
    text = details.text
    assert "bridge → numpy via buffer: 6 cases" in text and "int64" in text and "BufferError: not contiguous" in text
    assert "the result is writable" not in text
    assert other.get_attribute("aria-pressed") == "true" and cell.get_attribute("aria-pressed") == "false"

    # Nothing was fetched and nothing went wrong.
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]  # type: ignore[attr-defined]
    assert errors == []


def test_cli_writes_the_html_report(tmp_path: Path) -> None:
    target = tmp_path / "report" / "matrix.html"
    proc = subprocess.run(
        [sys.executable, "-m", "bridge", "matrix", "--producer", "numpy", "--consumer", "numpy",
         "--dtype", "float32", "--html", str(target)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().splitlines()[-1] == f"HTML report: {target.resolve()}"
    assert max(len(line) for line in proc.stdout.splitlines()[:-1]) <= 100
    # stderr is not a terminal here: progress lines with the time, the last one at the end.
    progress = [line for line in proc.stderr.splitlines() if " cells, " in line]
    assert progress and progress[-1].endswith("elapsed, done"), proc.stderr
    page = target.read_text(encoding="utf-8")
    tags = _parse(page)
    protocols = {g["data-protocol"] for g in tags.find("table", **{"class": "grid"})}
    assert "dlpack" in protocols
    assert tags.find("td", **{"class": "cell", "data-producer": "numpy", "data-consumer": "numpy",
                              "data-protocol": "dlpack"})  # fmt: skip
    data = json.loads(next(text for a, text in tags.scripts if a.get("type") == "application/json"))
    assert "numpy\0numpy\0dlpack" in data["cells"] and "float32" in data["strings"]
    assert "python -m bridge matrix --producer numpy" in page
