"""The cffi layer: generated source in sync, DLPack layout checked against upstream."""

from __future__ import annotations

import importlib.util
import pathlib
import sys

from bridge._native import ffi, lib

ROOT = pathlib.Path(__file__).resolve().parents[1]
CDEFS = ROOT / "cdefs"


def _load_build_script():
    spec = importlib.util.spec_from_file_location("bridge_cdefs_build", CDEFS / "build.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_generated_source_is_in_sync(tmp_path):
    """`make gen` output must equal the committed cdefs/_native.c."""
    out = tmp_path / "_native.c"
    _load_build_script().main(["build.py", str(out)])
    assert out.read_text() == (CDEFS / "_native.c").read_text(), (
        "cdefs/_native.c is stale: run `make gen` and commit the result"
    )


def _upstream_header() -> pathlib.Path | None:
    candidates = []
    for mod, rel in [("tvm_ffi", "include/dlpack/dlpack.h"), ("torch", "include/ATen/dlpack.h")]:
        spec = importlib.util.find_spec(mod)
        if spec and spec.submodule_search_locations:
            candidates.append(pathlib.Path(next(iter(spec.submodule_search_locations))) / rel)
    for path in candidates:
        if path.exists() and "DLPACK_MINOR_VERSION 3" in path.read_text():
            return path
    return None


def test_layout_matches_upstream_dlpack_h(tmp_path):
    """Compile our cdef against the upstream v1.3 header: cffi checks every field offset,
    struct size and enum value, so any drift from dlpack.h fails here."""
    import cffi

    header = _upstream_header()
    # The test extra installs torch and apache-tvm-ffi, which both ship dlpack.h v1.3.
    assert header is not None, "no upstream dlpack.h v1.3 installed (torch or apache-tvm-ffi)"
    checker = cffi.FFI()
    checker.cdef((CDEFS / "dlpack.h").read_text())
    checker.set_source(
        "_bridge_layout_check",
        f'#include <stdint.h>\n#include "{header}"\n',
    )
    so = checker.compile(tmpdir=str(tmp_path), verbose=False)
    spec = importlib.util.spec_from_file_location("_bridge_layout_check", so)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name in ("DLTensor", "DLManagedTensor", "DLManagedTensorVersioned", "DLPackExchangeAPI"):
        assert mod.ffi.sizeof(name) == ffi.sizeof(name)
    assert mod.lib.DLPACK_MINOR_VERSION == 3
    sys.modules.pop("_bridge_layout_check", None)


def test_arrow_layout_matches_pyarrow_abi_h(tmp_path):
    """Compile our Arrow C data declarations against pyarrow's arrow/c/abi.h."""
    import cffi

    spec = importlib.util.find_spec("pyarrow")  # a required dependency
    assert spec is not None and spec.submodule_search_locations
    header = pathlib.Path(next(iter(spec.submodule_search_locations))) / "include/arrow/c/abi.h"
    assert header.exists(), "pyarrow ships no arrow/c/abi.h"
    checker = cffi.FFI()
    checker.cdef((CDEFS / "arrow_c_data.h").read_text())
    checker.set_source("_bridge_arrow_layout_check", f'#include "{header}"\n')
    so = checker.compile(tmpdir=str(tmp_path), verbose=False)
    mod_spec = importlib.util.spec_from_file_location("_bridge_arrow_layout_check", so)
    assert mod_spec is not None and mod_spec.loader is not None
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    for name in ("struct ArrowSchema", "struct ArrowArray", "struct ArrowDeviceArray",
                 "struct ArrowArrayStream", "struct ArrowDeviceArrayStream"):  # fmt: skip
        assert mod.ffi.sizeof(name) == ffi.sizeof(name)
    sys.modules.pop("_bridge_arrow_layout_check", None)


def test_struct_layout_facts():
    assert ffi.sizeof("DLTensor") == 48
    assert ffi.offsetof("DLManagedTensorVersioned", "dl_tensor") == 32
    assert ffi.offsetof("DLManagedTensorVersioned", "flags") == 24
    assert lib.DLPACK_MAJOR_VERSION == 1 and lib.DLPACK_MINOR_VERSION == 3
    assert lib.DLPACK_FLAG_BITMASK_READ_ONLY == 1
    assert lib.DLPACK_FLAG_BITMASK_IS_COPIED == 2
    assert lib.DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED == 4
    assert lib.kDLCUDAManaged == 13 and lib.kDLTrn == 18
    assert lib.kDLFloat8_e8m0fnu == 14 and lib.kDLFloat4_e2m1fn == 17


def test_aligned_alloc():
    for n in (0, 1, 100, 1 << 22):
        for zeroed in (0, 1):
            p = lib.bridge_aligned_alloc(n, zeroed)
            assert p != ffi.NULL
            assert int(ffi.cast("uintptr_t", p)) % 64 == 0
            if zeroed and n:
                assert bytes(ffi.buffer(p, min(n, 4096))) == bytes(min(n, 4096))
            lib.bridge_aligned_free(p)
    lib.bridge_aligned_free(ffi.NULL)
    assert lib.bridge_aligned_alloc(2**64 - 8, 0) == ffi.NULL
