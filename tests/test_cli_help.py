"""``python -m bridge ... --help``: plain text (no reStructuredText markup) that
lists the valid names wherever a choice is taken; ``python -m bridge check`` names the
producer by its public path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bridge.core.dtypes import all_dtypes
from bridge.kit.cli import main, plain
from bridge.kit.matrix_grid import PEERS, PROTOCOLS

ROOT = Path(__file__).resolve().parent.parent
_MARKUP = re.compile(r"``|:[a-z]+:`")


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--help"])
    assert stop.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("argv", [[], ["tour"], ["check"], ["matrix"]], ids=["top", "tour", "check", "matrix"])
def test_help_is_plain_text(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(argv, capsys)
    assert text.startswith("usage: python -m bridge")
    assert not _MARKUP.search(text), text
    # Every subcommand says what it does, not only its usage line.
    assert len(text.splitlines()) > 4


def test_top_help_lists_subcommands_peers_and_protocols(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(_help([], capsys).split())  # argparse wraps lines anywhere
    for name in ("tour", "check", "matrix", *PEERS, *PROTOCOLS):
        assert name in text, name


def test_matrix_help_lists_protocols_and_dtypes(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(_help(["matrix"], capsys).split())
    for name in (*PROTOCOLS, *(d.name for d in all_dtypes())):
        assert name in text, name


def test_check_help_explains_the_spec_and_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    text = " ".join(_help(["check"], capsys).split())
    assert "module:expr" in text and "Exit status: 0 conforms, 1 a rule failed, 2 could not load" in text
    assert "bridge.Tensor" in text


@pytest.mark.parametrize("argv0", ["/venv/bin/dlpack-bridge", "C:\\venv\\Scripts\\dlpack-bridge.exe"])
def test_console_script_help_names_the_script(
    argv0: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Started as the console script, usage lines say ``dlpack-bridge`` (its
    name in pyproject.toml, not ``bridge``, iproute2's command)."""
    monkeypatch.setattr("sys.argv", [argv0])
    assert _help([], capsys).startswith("usage: dlpack-bridge")
    assert _help(["matrix"], capsys).startswith("usage: dlpack-bridge matrix")


def test_console_script_is_dlpack_bridge() -> None:
    try:
        import tomllib
    except ImportError:  # Python 3.10: the test extra installs tomli
        import tomli as tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"dlpack-bridge": "bridge.kit.cli:main"}


def test_plain_removes_rst() -> None:
    assert plain("``x`` and :func:`bridge.check`, :class:`~bridge.kit.conformance.Report`") == (
        "x and bridge.check, Report"
    )
    assert plain("no markup") == "no markup"


def test_unknown_subcommand_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["nosuch"])
    assert stop.value.code == 2
    assert "invalid choice: 'nosuch'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ("numpy:numpy.arange(6.0)", "numpy.ndarray"),
        ("bridge:bridge.arange(6)", "bridge.Tensor"),
        ("torch:lambda: torch.arange(6)", "torch.Tensor"),
    ],
)
def test_check_names_subjects_by_public_path(spec: str, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    # The exit status is the verdict (torch 2.13 fails a rule); the name is the point here.
    assert main(["check", spec, "--in-process", "--json"]) in (0, 1)
    out = capsys.readouterr().out
    assert f'"subject": "{name}' in out
    assert "bridge.core" not in out.split('"entries"')[0]
