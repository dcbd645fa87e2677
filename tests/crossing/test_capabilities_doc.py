"""docs/convert.md shows the destination table as the code holds it: the block
between ``<!-- capabilities:start -->`` and ``<!-- capabilities:end -->`` is
``markdown_table()``. Run as a script with ``--write`` to regenerate it."""

from __future__ import annotations

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
if __name__ == "__main__":  # run as a script: this checkout's bridge, not an installed one
    sys.path.insert(0, str(ROOT))

from bridge.crossing.capabilities import DESTINATIONS, markdown_table  # noqa: E402

DOC = ROOT / "docs" / "convert.md"
BLOCK = re.compile(r"(<!-- capabilities:start -->\n)(.*?)(<!-- capabilities:end -->)", re.S)
REGENERATE = "python tests/crossing/test_capabilities_doc.py --write"


def _shown() -> str:
    m = BLOCK.search(DOC.read_text())
    assert m, "docs/convert.md has no '<!-- capabilities:start -->' ... '<!-- capabilities:end -->' block"
    return m.group(2)


def test_the_page_shows_the_table() -> None:
    assert _shown() == markdown_table() + "\n", f"docs/convert.md's table is stale: run {REGENERATE}"


def test_the_table_has_a_row_and_a_note_per_destination() -> None:
    table = markdown_table()
    for name, h in DESTINATIONS.items():
        assert f"\n| {name} | `{h.importer}` |" in table
        assert f"- **{name}**: {h.note}." in table


def test_the_block_is_found() -> None:
    # guards the regular expression: the markers are on the page, in order
    text = DOC.read_text()
    assert text.index("<!-- capabilities:start -->") < text.index("<!-- capabilities:end -->")


def write() -> None:
    text = DOC.read_text()
    text, n = BLOCK.subn(lambda m: m.group(1) + markdown_table() + "\n" + m.group(3), text)
    assert n == 1, "docs/convert.md needs exactly one capabilities block"
    DOC.write_text(text)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {REGENERATE}")
    write()
    print(f"rewrote the capabilities table of {DOC.relative_to(ROOT)}")
