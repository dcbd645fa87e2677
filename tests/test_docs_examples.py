"""Every fenced code block in README.md and docs/**/*.md runs, and its output is true.

The conventions (docs/getting-started.md states them for writers too):

* ```` ```python ```` blocks run. A page's blocks run in order, in one fresh namespace, in a
  subprocess of their own whose working directory is an empty temporary folder, like one
  script: a block may use what an earlier block of the same page defined. A block whose first
  line starts with ``>>>`` (or a ```` ```pycon ```` block) is a doctest: its shown output is
  compared (``ELLIPSIS`` and ``NORMALIZE_WHITESPACE`` on). Other blocks must just run
  (they check themselves with ``assert``).
* The page runs as a script: ``multiprocessing``'s spawn children import it again with
  ``__name__ == "__mp_main__"`` and re-run its plain blocks (definitions included, the code
  under ``if __name__ == "__main__":`` excluded); doctest blocks are skipped there.
* ```` ```python gpu ```` blocks need CUDA: they are skipped here and run, after the page's
  other blocks, by ``tests/gpu/test_docs_gpu_examples.py`` on a machine with a GPU.
* ```` ```sh ````/```` ```bash ```` blocks: each command runs in the page's folder with the
  test's Python first on PATH, and must exit 0. ```` ```console ```` blocks: ``$ `` lines
  run and the lines after each are its output (compared as doctests compare). Two kinds of
  command cannot run inside a test and are checked instead: ``pip install dlpack-bridge[...]``
  (the extras must exist in pyproject.toml) and ``make TARGET`` (the target must exist in the
  Makefile).
* Blocks that are not code to run: :data:`NOT_CODE` (a short list). Any other language, or
  none, fails :func:`test_every_block_is_known`.
* No page refers to a file outside the repository (``../`` past its root) or to an absolute
  path (other than the few system paths in :data:`SYSTEM_PATHS`).
"""

from __future__ import annotations

import doctest
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PYTHON_LANGS = frozenset({"python", "pycon"})
SHELL_LANGS = frozenset({"sh", "bash", "console"})
#: Languages of blocks that are not code to run: prose pictures and file formats. MyST
#: directives (```{toctree}, ```{eval-rst}: Sphinx instructions) are not code either, except
#: the code directives below, which count as their language.
NOT_CODE = frozenset({"text", "mermaid", "toml", "c"})
_MYST_CODE = frozenset({"{code-block}", "{code}", "{sourcecode}"})
#: Absolute paths a page may name: parts of the operating system (/dev/shm, a system
#: program), not files of a checkout or a workspace.
SYSTEM_PATHS = ("/dev/", "/proc/", "/usr/", "/bin/")
PAGE_TIMEOUT = 240  # seconds for all the Python blocks of one page
COMMAND_TIMEOUT = 300  # seconds for one shell command: a hang, not a speed check (matrix.md runs the full matrix)


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its info string split into language and tags, its text."""

    page: str  # relative to the repository root
    line: int  # 1-based line of the block's first content line
    lang: str
    tags: tuple[str, ...]
    text: str

    @property
    def is_doctest(self) -> bool:
        """Whether the block shows output: a ``pycon`` block or one opening with ``>>>``."""
        first = next((ln for ln in self.text.splitlines() if ln.strip()), "")
        return self.lang == "pycon" or first.lstrip().startswith(">>>")

    @property
    def gpu(self) -> bool:
        """Whether the block needs CUDA (info string ``python gpu``)."""
        return "gpu" in self.tags

    def __str__(self) -> str:
        return f"{self.page}:{self.line - 1} ({self.lang or 'no language'})"


_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


def pages() -> list[Path]:
    """README.md and every Markdown page under docs/ (build outputs, in ``_*`` folders, left out)."""
    found = [REPO / "README.md"]
    for p in sorted((REPO / "docs").rglob("*.md")):
        if not any(part.startswith(("_", ".")) for part in p.relative_to(REPO / "docs").parts):
            found.append(p)
    return found


def extract_blocks(text: str, page: str) -> list[Block]:
    """The fenced blocks of a Markdown text, in order (an unclosed block runs to the end)."""
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m["fence"], len(m["indent"])
        words = m["info"].strip().split()
        start, body = i + 1, []
        i += 1
        while i < len(lines):
            close = _FENCE.match(lines[i])
            if close and close["fence"].startswith(fence) and not close["info"].strip():
                break
            ln = lines[i]
            body.append(ln[min(indent, len(ln) - len(ln.lstrip())):])
            i += 1
        i += 1
        lang = words[0].lower() if words else ""
        if lang in _MYST_CODE and len(words) > 1:  # ```{code-block} python: a python block
            words = words[1:]
            lang = words[0].lower()
        blocks.append(Block(page, start + 1, lang, tuple(w.lower() for w in words[1:]),
                            "\n".join(body) + "\n"))
    return blocks


def all_blocks() -> list[Block]:
    """Every block of every page."""
    out: list[Block] = []
    for p in pages():
        out += extract_blocks(p.read_text(encoding="utf-8"), str(p.relative_to(REPO)))
    return out


# The page's script. Its own names start with "_doc" so that the blocks, which share its
# globals (they must: spawn children find functions in __main__), cannot clobber them.
_RUNNER = r'''
import doctest as _doc_doctest, json as _doc_json, sys as _doc_sys, traceback as _doc_tb
_doc_blocks = _doc_json.load(open(__file__[:-3] + ".json", encoding="utf-8"))
_doc_child = __name__ != "__main__"
for _doc_b in _doc_blocks:
    if _doc_b["doctest"]:
        if _doc_child:
            continue
        _doc_test = _doc_doctest.DocTestParser().get_doctest(
            _doc_b["text"], globals(), _doc_b["page"], _doc_b["page"], _doc_b["line"] - 1)
        _doc_r = _doc_doctest.DocTestRunner(
            optionflags=_doc_doctest.ELLIPSIS | _doc_doctest.NORMALIZE_WHITESPACE)
        # Checked before the globals are updated: the copy DocTest ran on holds the
        # previous block's _doc_r, whose count would hide this block's failure.
        if _doc_r.run(_doc_test, out=_doc_sys.stderr.write, clear_globs=False).failed:
            _doc_sys.stderr.write(f"doctest block at {_doc_b['page']}:{_doc_b['line'] - 1} failed\n")
            _doc_sys.exit(1)
        globals().update(_doc_test.globs)  # DocTest ran on a copy: keep what it defined
    else:
        _doc_code = compile("\n" * (_doc_b["line"] - 1) + _doc_b["text"], _doc_b["page"], "exec")
        try:
            exec(_doc_code, globals())
        except BaseException:
            if _doc_child:
                raise
            _doc_tb.print_exc()
            _doc_sys.stderr.write(f"block at {_doc_b['page']}:{_doc_b['line'] - 1} failed\n")
            _doc_sys.exit(1)
'''


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("MPLBACKEND", "Agg")
    return env


def run_python_blocks(blocks: list[Block], cwd: Path, name: str = "page_script") -> None:
    """Run ``blocks`` as one script in a subprocess in ``cwd``; fail with its output if it fails."""
    (cwd / f"{name}.json").write_text(json.dumps(
        [dict(asdict(b), doctest=b.is_doctest) for b in blocks]), encoding="utf-8")
    script = cwd / f"{name}.py"
    script.write_text(_RUNNER, encoding="utf-8")
    try:
        proc = subprocess.run([sys.executable, str(script)], cwd=cwd, env=_env(),
                              capture_output=True, text=True, timeout=PAGE_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{blocks[0].page}: the Python blocks took over {PAGE_TIMEOUT} s\n{e.stderr}")
    if proc.returncode != 0:
        pytest.fail(f"{blocks[0].page}: a Python block failed (exit {proc.returncode})\n"
                    f"--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-6000:]}")


def shell_commands(block: Block) -> list[tuple[str, str | None]]:
    """The commands of a shell block and, for ``console`` blocks, the output each shows."""
    out: list[tuple[str, str | None]] = []
    pending = ""
    for raw in block.text.splitlines():
        if block.lang == "console":
            if raw.startswith("$ "):
                out.append((raw[2:].strip(), ""))
            elif out and out[-1][1] is not None:
                out[-1] = (out[-1][0], f"{out[-1][1]}{raw}\n")
            continue
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1].rstrip() + " "
            continue
        pending = ""
        if line and not line.startswith("#"):
            out.append((line, None))
    return out


def _pyproject_extras() -> set[str]:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([A-Za-z0-9_-]+)\s*=", section, re.M))


def check_not_runnable(command: str) -> bool:
    """Check a command that cannot run inside a test; False when the command should run."""
    words = command.split("#", 1)[0].split()
    if words[:2] == ["pip", "install"] or words[:4] == ["python", "-m", "pip", "install"]:
        extras = _pyproject_extras()
        for req in words[2:]:
            m = re.fullmatch(r"""["']?dlpack-bridge(?:\[([\w,-]+)\])?["']?""", req)
            if req.startswith("-") or not m:
                continue
            for extra in (m[1] or "").split(","):
                assert not extra or extra in extras, f"{command!r}: no extra {extra!r} in pyproject"
        return True
    if words and words[0] == "make":
        makefile = (REPO / "Makefile").read_text(encoding="utf-8")
        for target in (w for w in words[1:] if "=" not in w and not w.startswith("-")):
            assert re.search(rf"^{re.escape(target)}\s*:", makefile, re.M), (
                f"{command!r}: no target {target!r} in the Makefile")
        return True
    return False


def run_shell_block(block: Block, cwd: Path) -> None:
    """Run (or check) every command of a shell block in ``cwd``."""
    for command, want in shell_commands(block):
        if check_not_runnable(command):
            continue
        try:
            proc = subprocess.run(["bash", "-c", command], cwd=cwd, env=_env(),
                                  capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{block}: {command!r} took over {COMMAND_TIMEOUT} s")
        assert proc.returncode == 0, (
            f"{block}: {command!r} exited {proc.returncode}\n{proc.stdout[-3000:]}\n"
            f"{proc.stderr[-3000:]}")
        if want is not None:
            checker = doctest.OutputChecker()
            flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
            assert checker.check_output(want, proc.stdout, flags), (
                f"{block}: {command!r} printed\n{proc.stdout}\nnot\n{want}")


def _page_ids() -> list[str]:
    return [str(p.relative_to(REPO)) for p in pages()]


def is_known(block: Block) -> bool:
    """Whether a block's info string is one this test runs or exempts (tags: ``gpu`` on Python)."""
    if block.lang.startswith("{") and block.lang.endswith("}"):
        return True  # a MyST directive other than the code ones (those were unwrapped)
    if block.tags:
        return block.lang in PYTHON_LANGS and set(block.tags) <= {"gpu"}
    return block.lang in PYTHON_LANGS | SHELL_LANGS | NOT_CODE


def test_every_block_is_known() -> None:
    """Every block says its language, and the language is one this test runs or exempts."""
    bad = [str(b) for b in all_blocks() if not is_known(b)]
    assert not bad, f"blocks with no language, an unknown one or unknown tags: {bad}"


def test_extractor_finds_blocks() -> None:
    """The extractor against a page written for it: fences, tags, indents, tildes."""
    text = ("# t\n```python\nx = 1\n```\n\n  ```sh gpu\n  echo a\n  ```\n~~~text\n```\n~~~\n"
            "````python\n```\ninner\n```\n````\n")
    got = extract_blocks(text, "p.md")
    assert [(b.lang, b.tags, b.line, b.text) for b in got] == [
        ("python", (), 3, "x = 1\n"), ("sh", ("gpu",), 7, "echo a\n"),
        ("text", (), 10, "```\n"), ("python", (), 13, "```\ninner\n```\n")]
    assert extract_blocks(">>> 1 + 1\n", "p") == []
    assert Block("p", 1, "python", (), ">>> 1\n1\n").is_doctest
    assert not Block("p", 1, "python", (), "x = 1\n").is_doctest


def test_shell_commands_are_split() -> None:
    """Continuation lines join, comments drop, console output attaches to its command."""
    sh = Block("p", 1, "sh", (), "# a comment\necho a \\\n  b   # note\n\nmake test\n")
    assert shell_commands(sh) == [("echo a b   # note", None), ("make test", None)]
    con = Block("p", 1, "console", (), "$ echo hi\nhi\n$ true\n")
    assert shell_commands(con) == [("echo hi", "hi\n"), ("true", "")]
    assert check_not_runnable("pip install 'dlpack-bridge[ml,test]'") is True
    assert check_not_runnable("make test") is True
    assert check_not_runnable("python -m bridge --help") is False
    with pytest.raises(AssertionError, match="no extra 'nope'"):
        check_not_runnable("pip install dlpack-bridge[nope]")
    with pytest.raises(AssertionError, match="no target 'nope'"):
        check_not_runnable("make nope")


def _python_blocks(page: str) -> list[Block]:
    """The page's Python blocks that run here (GPU blocks left out)."""
    return [b for b in extract_blocks((REPO / page).read_text(encoding="utf-8"), page)
            if b.lang in PYTHON_LANGS and not b.gpu]


def _shell_blocks(page: str) -> list[Block]:
    return [b for b in extract_blocks((REPO / page).read_text(encoding="utf-8"), page)
            if b.lang in SHELL_LANGS]


# Only the pages that have something to run: a page without such a block would be an
# item that checks nothing. test_every_code_fence_is_picked_up keeps a block the
# extractor missed from dropping its page out of these lists unnoticed.
PYTHON_PAGES = [p for p in _page_ids() if _python_blocks(p)]
SHELL_PAGES = [p for p in _page_ids() if _shell_blocks(p)]


@pytest.mark.parametrize("page", PYTHON_PAGES)
def test_python_blocks_run(page: str, tmp_path: Path) -> None:
    """The page's Python blocks (GPU blocks left out) run as one script; doctests match."""
    run_python_blocks(_python_blocks(page), tmp_path)


@pytest.mark.parametrize("page", SHELL_PAGES)
def test_shell_blocks_run(page: str, tmp_path: Path) -> None:
    """The page's shell commands exit 0 (console output matches); pip/make lines are checked."""
    for block in _shell_blocks(page):
        run_shell_block(block, tmp_path)


# An opening fence whose language this test runs, found without the extractor.
_RUNNABLE_FENCE = re.compile(
    r"^[ \t]*(?:`{3,}|~{3,})[ \t]*(?:\{(?:code-block|code|sourcecode)\}[ \t]+)?"
    r"(?:python|pycon|sh|bash|console)\b", re.M | re.I)


def runnable_fences(text: str) -> int:
    """How many fences of a Markdown text open a block of a language this test runs."""
    return len(_RUNNABLE_FENCE.findall(text))


def test_every_code_fence_is_picked_up() -> None:
    """Each page's runnable fences, counted by a plain pattern, are all blocks the
    extractor hands to the runners (the GPU ones to tests/gpu): a fence it missed
    would drop silently out of the pages run above."""
    missed = {}
    for p in pages():
        page, text = str(p.relative_to(REPO)), p.read_text(encoding="utf-8")
        found = [b for b in extract_blocks(text, page) if b.lang in PYTHON_LANGS | SHELL_LANGS]
        if len(found) != runnable_fences(text):
            missed[page] = (runnable_fences(text), len(found))
    assert not missed, f"(runnable fences, blocks extracted) differ: {missed}"
    assert PYTHON_PAGES and SHELL_PAGES
    assert runnable_fences("```python\nx\n```\n  ~~~~ Console\n$ a\n~~~~\n```{code-block} sh\n") == 3
    assert runnable_fences("```text\n```pythonic\n`python`\n") == 0


def test_runner_reports_failures(tmp_path: Path) -> None:
    """A failing assert and a wrong doctest output both fail the page, naming the block."""
    ok = Block("x.md", 2, "python", (), "v = 41 + 1\n")
    shown = Block("x.md", 6, "python", (), ">>> v\n42\n>>> w = v + 1\n")
    run_python_blocks([ok, shown, Block("x.md", 9, "python", (), "assert w == 43\n")], tmp_path)
    for bad in (Block("x.md", 9, "python", (), "assert v == 0\n"),
                Block("x.md", 9, "python", (), ">>> v\n43\n")):
        with pytest.raises(pytest.fail.Exception, match=r"x\.md:8"):
            run_python_blocks([ok, bad], tmp_path)
        # after a doctest block that passed (its runner once hid the next one's failure)
        with pytest.raises(pytest.fail.Exception, match=r"x\.md:8"):
            run_python_blocks([ok, shown, bad], tmp_path)


_UP = re.compile(r"(?<![\w.])((?:\.\./)+[\w./*-]*)")
_ABS = re.compile(r"(?<![\w.:/~\\<>-])(/[A-Za-z_][\w.-]*(?:/[\w.*-]+)+)")
_LINK_ABS = re.compile(r"\]\((/[^)]*)\)")


def outside_references(text: str, page: Path) -> list[str]:
    """The references of a page that leave the repository: ``../`` past the root, absolute paths."""
    found: dict[str, None] = {}
    for m in _UP.finditer(text):
        target = (page.parent / m[1]).resolve()
        if target != REPO and REPO not in target.parents:
            found[m[1]] = None
    for m in [*_ABS.finditer(text), *_LINK_ABS.finditer(text)]:
        if not m[1].startswith(SYSTEM_PATHS):
            found[m[1]] = None
    return list(found)


@pytest.mark.parametrize("page", _page_ids())
def test_no_references_outside_the_repository(page: str) -> None:
    """A page names only files of the repository (relative paths) and operating-system paths."""
    bad = outside_references((REPO / page).read_text(encoding="utf-8"), REPO / page)
    assert not bad, f"{page} refers outside the repository: {bad}"


def test_outside_references_are_found() -> None:
    """The reference check against made-up lines."""
    page = REPO / "docs" / "x.md"
    assert outside_references("see ../README.md and [a](../docs/arrow.md)", page) == []
    assert outside_references("see `../../shared/DESIGN.md`", page) == ["../../shared/DESIGN.md"]
    assert outside_references("in /work/main/x.py or [b](/abs/c)", page) == [
        "/work/main/x.py", "/abs/c"]
    assert outside_references("nothing in /dev/shm; https://a.org/b/c; and/or; 5 MiB/s", page) == []


if __name__ == "__main__":  # pragma: no cover - a quick listing for writers
    for b in all_blocks():
        print(b, "doctest" if b.is_doctest else "", " ".join(b.tags))
