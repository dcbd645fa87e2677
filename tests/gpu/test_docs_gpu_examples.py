"""The documentation's ```` ```python gpu ```` blocks, on a real GPU. Skipped without CUDA.

``tests/test_docs_examples.py`` runs every other block and leaves these out; here each page
that has one runs all its Python blocks in order (the GPU ones included) as one script, with
the same runner and conventions.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import test_docs_examples as docs  # the shared extractor and runner (tests/ is on the path)

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():  # pragma: no cover - CPU-only machines
    pytest.skip("no CUDA device", allow_module_level=True)


def _gpu_pages() -> list[str]:
    pages = []
    for p in docs.pages():
        rel = str(p.relative_to(docs.REPO))
        if any(b.gpu for b in docs.extract_blocks(p.read_text(encoding="utf-8"), rel)):
            pages.append(rel)
    return pages


@pytest.mark.parametrize("page", _gpu_pages())
def test_gpu_blocks_run(page: str, tmp_path: Path) -> None:
    """Every Python block of a page with GPU blocks runs, in order, as one script."""
    blocks = [b for b in docs.extract_blocks((docs.REPO / page).read_text(encoding="utf-8"), page)
              if b.lang in docs.PYTHON_LANGS]
    docs.run_python_blocks(blocks, tmp_path)


def test_some_page_has_gpu_blocks() -> None:
    """The GPU examples exist (ownership.md shows the CUDA array interface with one)."""
    assert _gpu_pages()
