"""On a free-threaded CPython, bridge says that it needs the GIL.

No free-threaded interpreter is installed here, so these tests compile instead
of import: against the headers of a CPython >= 3.13 (the first with
``PyUnstable_Module_SetGIL``) with ``Py_GIL_DISABLED`` defined, as a
free-threaded build's pyconfig.h defines it. They check that every C file
compiles for such a build as pyproject.toml compiles it, and that
``PyInit__native`` then goes through ``cdefs/cffi_gil.h``'s wrapper, which
takes back cffi's "no GIL needed" (docs/build.md, "Free-threaded CPython").
What the interpreter does on import (re-enable the GIL, with its
RuntimeWarning) is CPython's documented behaviour, not run here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import wheels

if sys.version_info >= (3, 11):
    import tomllib
else:  # the test extra installs tomli there
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
CDEFS = ROOT / "cdefs"
_INIT = re.compile(r"PyInit__native\(void\)\s*\{\s*return\s+(\w+)\(")


def _python_313_headers() -> Path:
    """The include directory of a CPython >= 3.13: the running one's, else
    one that tests/wheels.py finds (pyenv's, python3.13 on PATH)."""
    if sys.version_info >= (3, 13):
        return Path(sysconfig.get_paths()["include"])
    for py in wheels.find_pythons():
        if py.version >= (3, 13):
            out = subprocess.run(
                [py.path, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                capture_output=True, text=True, check=True, env=wheels.clean_env(),
            )
            return Path(out.stdout.strip())
    pytest.skip("needs the headers of a CPython >= 3.13 (PyUnstable_Module_SetGIL); none found")


@pytest.fixture(scope="module")
def compile_ft() -> tuple[str, Path]:
    """A C compiler and the 3.13+ include directory."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler on PATH")
    return cc, _python_313_headers()


def _macros() -> list[str]:
    """The -D flags pyproject.toml's extension declares (none: the one define
    bridge needs is the first line of _native.c itself)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (ext,) = project["tool"]["setuptools"]["ext-modules"]
    return [f"-D{name}={value}" for name, value in ext.get("define-macros", [])]


def _cc(cc: str, inc: Path, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [cc, "-Wall", "-Wno-unused-function", "-Werror", f"-I{CDEFS}", f"-I{inc}", *map(str, args)],
        capture_output=True, text=True, timeout=120,
    )


def test_native_is_built_without_the_limited_api() -> None:
    """The define is the generated file's first line, before cffi's header,
    and not a define-macros entry: setuptools 81 hands TOML's lists to
    distutils, which refuses them (an install fails there)."""
    assert (CDEFS / "_native.c").read_text().startswith("#define _CFFI_NO_LIMITED_API 1\n")
    assert _macros() == []


def test_every_c_file_compiles_for_a_free_threaded_build(compile_ft: tuple[str, Path]) -> None:
    cc, inc = compile_ft
    for src in sorted(CDEFS.rglob("*.c")):
        proc = _cc(cc, inc, "-fsyntax-only", "-DPy_GIL_DISABLED=1", *_macros(), src)
        assert proc.returncode == 0, f"{src.relative_to(ROOT)}:\n{proc.stderr[-3000:]}"


def test_native_module_init_declares_it_needs_the_gil(compile_ft: tuple[str, Path]) -> None:
    cc, inc = compile_ft
    native = CDEFS / "_native.c"
    free = _cc(cc, inc, "-E", "-DPy_GIL_DISABLED=1", *_macros(), native)
    assert free.returncode == 0, free.stderr[-3000:]
    assert _INIT.search(free.stdout)[1] == "bridge_cffi_init_needing_gil"
    assert "PyUnstable_Module_SetGIL(m, ((void *)0))" in free.stdout  # Py_MOD_GIL_USED
    # with the GIL the header adds nothing: cffi's own init, as generated
    gil = _cc(cc, inc, "-E", *_macros(), native)
    assert gil.returncode == 0, gil.stderr[-3000:]
    assert _INIT.search(gil.stdout)[1] == "_cffi_init"
    assert "bridge_cffi_init_needing_gil" not in gil.stdout


def test_without_the_define_a_free_threaded_build_is_refused(compile_ft: tuple[str, Path],
                                                            tmp_path: Path) -> None:
    """cffi's header would define Py_LIMITED_API, which a free-threaded
    Python.h refuses (and cffi_gil.h too): the build fails at once instead of
    making a module that claims to run without the GIL."""
    cc, inc = compile_ft
    text = (CDEFS / "_native.c").read_text()
    bare = tmp_path / "_native.c"
    bare.write_text(text.split("\n", 1)[1])  # the generated file without its first line
    proc = _cc(cc, inc, "-fsyntax-only", "-DPy_GIL_DISABLED=1", bare)
    assert proc.returncode != 0
    assert "limited API" in proc.stderr, proc.stderr[-3000:]
