"""The CPython builtins compiled in cdefs/bridge.c, installed once at import.

``bridge._native`` is a cffi module, and cffi cannot pass or return Python
objects, so bridge.c defines ordinary CPython builtins (METH_FASTCALL, GIL
held, no cffi conversion) and ``bridge_install`` puts them into ``NS``. This
module imports nothing of the core, so every core module can use them.
"""

from __future__ import annotations

import platform
from typing import Any

from bridge._native import lib

if platform.python_implementation() != "CPython":  # pragma: no cover
    raise ImportError("bridge's native layer needs CPython (it uses the CPython C API)")

NS: dict[str, Any] = {}
# id() is the object's address in CPython; the dict is alive for the whole call.
if lib.bridge_install(id(NS)) != 0:  # pragma: no cover
    raise ImportError("bridge._native failed to install its fast paths")
