"""Packaging: `python -m build` makes an sdist and, from it, a wheel; each is
installed into a fresh venv (numpy and cffi only, no pyarrow) where a smoke
script imports the installed bridge and round-trips through NumPy and DLPack
zero-copy. The sdist carries the C sources and no tests (MANIFEST.in says
why); the wheel's metadata has pyarrow only as the `arrow` extra.

Network: one `pip download` of the installs' dependencies (numpy, cffi and
setuptools for the sdist's isolated build; from pip's cache when there), then
every install is `--no-index` from that folder. About a minute, mostly the
two C builds; deselect with `-m "not packaging"`."""

from __future__ import annotations

import email
import os
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # the test extra installs tomli there
    import tomli as tomllib

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parent.parent
STEP_TIMEOUT = 300  # seconds for one build, download or install

SMOKE = textwrap.dedent(
    """
    import importlib.metadata, sys
    import numpy as np
    import bridge
    assert "site-packages" in bridge.__file__, bridge.__file__  # the installed copy
    assert bridge.__version__ == importlib.metadata.version("dlpack-bridge"), bridge.__version__
    t = bridge.arange(12, dtype=bridge.float32).reshape(3, 4)
    a = np.asarray(t)
    a[0, 0] = 42.0
    assert t[0, 0].item() == 42.0  # NumPy sees the tensor's memory
    assert bridge.from_numpy(a).data_ptr() == t.data_ptr()
    n = np.from_dlpack(t)
    assert n.ctypes.data == t.data_ptr() and n.tolist() == t.tolist()
    assert bridge.from_dlpack(n).data_ptr() == t.data_ptr()
    try:
        bridge.arrow.to_array(t)
    except ImportError as e:  # pyarrow is the `arrow` extra, not installed here
        assert "pip install dlpack-bridge[arrow]" in str(e), e
    else:
        raise AssertionError("pyarrow is installed although only numpy and cffi were asked for")
    print("smoke ok", bridge.__version__)
    """
)


def _sh(*cmd: str | Path, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT
    )
    assert proc.returncode == 0, f"{cmd} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel `python -m build` makes (the wheel built from the
    unpacked sdist, so it also shows the sdist is enough to build), plus a
    folder of the dependencies' wheels for offline installs."""
    pytest.importorskip("build")
    out = tmp_path_factory.mktemp("dist")
    # --no-isolation: .venv's setuptools builds, with no download
    _sh(sys.executable, "-m", "build", "--no-isolation", "--outdir", out, ROOT, cwd=out)
    (sdist,) = out.glob("dlpack_bridge-*.tar.gz")
    (wheel,) = out.glob("dlpack_bridge-*.whl")
    wheelhouse = tmp_path_factory.mktemp("wheelhouse")
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    _sh(sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", wheelhouse,
        "numpy>=1.26", "cffi>=1.17", *requires, cwd=out)
    return {"sdist": sdist, "wheel": wheel, "wheelhouse": wheelhouse}


def _ext_sources() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (ext,) = project["tool"]["setuptools"]["ext-modules"]
    return set(ext["sources"]) | set(ext["depends"])


def test_sdist_has_the_c_sources_and_no_tests(dists: dict[str, Path]) -> None:
    with tarfile.open(dists["sdist"]) as tar:
        top = dists["sdist"].name.removesuffix(".tar.gz")
        names = {n.removeprefix(top + "/") for n in tar.getnames()}
    missing = (_ext_sources() | {"cdefs/build.py", "LICENSE", "pyproject.toml", "README.md"}) - names
    assert not missing, f"the sdist lacks {sorted(missing)}"
    assert not [n for n in names if n.startswith("tests")], "the sdist carries no tests (MANIFEST.in)"
    assert "bridge/py.typed" in names


def test_wheel_metadata(dists: dict[str, Path]) -> None:
    with zipfile.ZipFile(dists["wheel"]) as whl:
        names = set(whl.namelist())
        (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_bytes(whl.read(meta_name))
        license_text = whl.read(meta_name.replace("METADATA", "licenses/LICENSE")).decode()
    assert license_text == (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert meta["License-Expression"] == "Apache-2.0"
    requires = meta.get_all("Requires-Dist")
    always = sorted(r for r in requires if "extra ==" not in r)
    assert [r.split(">")[0] for r in always] == ["cffi", "numpy"], always
    assert any(r.startswith("pyarrow") and 'extra == "arrow"' in r for r in requires), requires
    assert "arrow" in meta.get_all("Provides-Extra")
    assert not [n for n in names if n.startswith("tests/")]
    assert any(n.startswith("bridge/_native") and n.endswith(".so") for n in names)


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_install_into_a_fresh_venv_and_smoke(
    kind: str, dists: dict[str, Path], tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    _sh(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    # the sdist builds in pip's isolated environment, from the wheelhouse's setuptools
    _sh(python, "-m", "pip", "install", "-q", "--no-index", "--find-links", dists["wheelhouse"],
        dists[kind], cwd=tmp_path)
    out = _sh(python, "-c", SMOKE, cwd=tmp_path)  # cwd: not the checkout, whose bridge/ would shadow
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert out.strip() == f"smoke ok {version}", out
