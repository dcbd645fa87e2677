"""The CPython fast paths compiled in cdefs/bridge.c.

They are installed by :mod:`bridge._builtins`; this module gives them names
inside the package and hands the C side the core's classes.
"""

from __future__ import annotations

from bridge import _dtypes
from bridge._builtins import NS as _ns
from bridge._device import CPU
from bridge._native import ffi, lib
from bridge._storage import UntypedStorage
from bridge._tensor import Tensor

export = _ns["export"]
import_capsule = _ns["import_capsule"]
set_callbacks = _ns["set_callbacks"]
set_dlpack_fallbacks = _ns["set_dlpack_fallbacks"]
setup_numpy = _ns["setup_numpy"]
fast_from_dlpack = _ns["fast_from_dlpack"]
check_torch_export = _ns["check_torch_export"]
make_capsule = _ns["make_capsule"]
exchange_api = _ns["exchange_api"]
api_to_object = _ns["api_to_object"]
api_peek = _ns["api_peek"]
api_alloc = _ns["api_alloc"]
api_stream = _ns["api_stream"]
capsule_info = _ns["capsule_info"]
mark_consumed = _ns["mark_consumed"]
arrow_export_schema = _ns["arrow_export_schema"]
arrow_export_array = _ns["arrow_export_array"]
arrow_export_device_array = _ns["arrow_export_device_array"]
arrow_export_stream = _ns["arrow_export_stream"]
arrow_import = _ns["arrow_import"]
arrow_import_stream = _ns["arrow_import_stream"]
arrow_describe_schema = _ns["arrow_describe_schema"]
setup_arrow = _ns["setup_arrow"]
make_from_arrow = _ns["make_from_arrow"]


# The C fast paths read and build the core's objects through their __slots__
# descriptors; this hands them the classes. The returned descriptor is the C
# Tensor.__dlpack__, installed by bridge.dlpack with its Python fallbacks.
dlpack_method = _ns["setup"](Tensor, UntypedStorage, _dtypes.dtype, _dtypes._BY_DLPACK, CPU)


def stats() -> dict[str, int]:
    """Counters kept in C: exports made and their deleters run, imports made
    and their guards released, test-deleter calls."""
    out = ffi.new("uint64_t[9]")
    lib.bridge_stats(out)
    keys = ("exports", "export_deleters", "imports", "import_releases", "test_deleters",
            "arrow_exports", "arrow_releases", "arrow_imports", "arrow_import_releases")  # fmt: skip
    return dict(zip(keys, (int(v) for v in out)))
