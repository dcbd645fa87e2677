"""Generate cdefs/_native.c, the cffi (API mode) source of ``bridge._native``.

The C declarations are real files, read in this order: ``dlpack.h`` (the DLPack
v1.3 ABI), ``dlpack_next.h`` (values DLPack's main branch added since),
``arrow_c_data.h`` (the Arrow C data and device interfaces), then
``bridge.h`` (our C functions). The generated file is committed
and compiled by ``pip install .`` through ``[[tool.setuptools.ext-modules]]`` in
pyproject.toml, so installing needs a C compiler but not cffi's build hook or a
setup.py. ``make gen`` reruns this script; ``make gen-check`` fails when the
committed file differs from what this script writes.

Usage: python cdefs/build.py [OUTPUT]   (default: cdefs/_native.c)
"""

from __future__ import annotations

import pathlib
import sys

import cffi

HERE = pathlib.Path(__file__).resolve().parent
CDEF_FILES = ("dlpack.h", "dlpack_next.h", "arrow_c_data.h", "bridge.h")


def make_ffi() -> cffi.FFI:
    """Return the FFI builder for ``bridge._native`` (declarations + source)."""
    ffibuilder = cffi.FFI()
    for name in CDEF_FILES:
        ffibuilder.cdef((HERE / name).read_text())
    ffibuilder.set_source(
        "bridge._native",
        "#include <stdint.h>\n#include <stddef.h>\n"
        '#include "dlpack.h"\n#include "dlpack_next.h"\n#include "arrow_c_data.h"\n#include "bridge.h"\n'
        # last: it wraps cffi's module init so that the module declares it
        # needs the GIL on a free-threaded build (the header says why)
        '#include "cffi_gil.h"\n',
    )
    return ffibuilder


#: The generated file's first line. cffi's header defines Py_LIMITED_API unless
#: this is defined before it; bridge needs the full API (``PyUnstable_Module_SetGIL``
#: in cffi_gil.h, docs/build.md). It sits in the source, not in pyproject.toml's
#: define-macros: setuptools 81 passes those to the compiler as TOML's lists,
#: which distutils refuses ("each element of 'macros' list must be a 1- or 2-tuple").
NO_LIMITED_API = "#define _CFFI_NO_LIMITED_API 1\n"


def main(argv: list[str]) -> int:
    out = pathlib.Path(argv[1]) if len(argv) > 1 else HERE / "_native.c"
    make_ffi().emit_c_code(str(out))
    out.write_text(NO_LIMITED_API + out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
