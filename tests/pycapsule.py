"""PyCapsule calls for the tests, through a private ctypes handle: the argtypes
set here never clash with another user of the shared ``ctypes.pythonapi``
(pydlpack sets its own on it, with a destructor type that refuses None, so a
test that set them there once and called later would depend on test order).
PyDLL keeps the GIL."""

from __future__ import annotations

import ctypes

_PY = ctypes.PyDLL(None)

capsule_name = _PY.PyCapsule_GetName
capsule_name.restype = ctypes.c_char_p
capsule_name.argtypes = (ctypes.py_object,)

capsule_ptr = _PY.PyCapsule_GetPointer
capsule_ptr.restype = ctypes.c_void_p
capsule_ptr.argtypes = (ctypes.py_object, ctypes.c_char_p)

_capsule_new = _PY.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)


def capsule_new(address: int, name: bytes) -> object:
    """A capsule named ``name`` over ``address``, with no destructor."""
    return _capsule_new(address, name, None)
