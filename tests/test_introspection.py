"""inspect.signature and help() for every public callable, C ones included.

The C methods and functions (cdefs/*.c) carry CPython's text-signature form
(``name($self, a, /)\\n--\\n\\n``) at the head of their docstrings, so
``inspect.signature`` reads them; the keyword spot-checks call with the names
the signatures give, so a signature cannot drift from what the C parses.
"""

from __future__ import annotations

import inspect
import pydoc
import types
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch

import bridge
from bridge.core.native import _C, _drivers

# Python 3.11's inspect accepts only literal defaults in a text signature; these
# defaults are objects (an exception class, a memory_format), so the signature
# is the docstring's first line (as torch writes it for the same methods) and
# inspect cannot parse it. Each name with the text signature's start.
NON_LITERAL_DEFAULT = {
    "TensorBase._check_bounds": "($self, error=BufferError",
    "empty": "(*size, dtype=None, device=None, memory_format=bridge.contiguous_format",
}


def _public_callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    for name in bridge.__all__:
        obj = getattr(bridge, name)
        if isinstance(obj, types.ModuleType):
            continue
        if isinstance(obj, type):
            yield name, obj
            for attr in dir(obj):
                if attr.startswith("_") and not attr.startswith(("__dlpack", "__arrow_c")):
                    continue
                if issubclass(obj, BaseException) and hasattr(BaseException, attr):
                    continue  # CPython's own exception methods (add_note, with_traceback)
                member = getattr(obj, attr)
                if callable(member) and not isinstance(member, type):
                    yield f"{name}.{attr}", member
        elif callable(obj):
            yield name, obj


def _c_callables() -> Iterator[tuple[str, Callable[..., Any]]]:
    for mod in (_C, _drivers):
        for name in dir(mod):
            obj = getattr(mod, name)
            if isinstance(obj, type):
                for attr, member in vars(obj).items():
                    if type(member).__name__ == "method_descriptor":
                        yield f"{name}.{attr}", getattr(obj, attr)
            elif isinstance(obj, types.BuiltinFunctionType):
                yield name, obj


def _owner_name(obj: Callable[..., Any]) -> str | None:
    owner = getattr(obj, "__objclass__", None)
    return None if owner is None else f"{owner.__name__}.{obj.__name__}"


PUBLIC = list(_public_callables())


def test_enumeration_reaches_the_c_methods() -> None:
    names = {n for n, _ in PUBLIC}
    assert {"Tensor.size", "Tensor.__dlpack__", "UntypedStorage.nbytes", "from_numpy", "from_arrow"} <= names


@pytest.mark.parametrize(("name", "obj"), PUBLIC, ids=[n for n, _ in PUBLIC])
def test_public_signature_and_help(name: str, obj: Callable[..., Any]) -> None:
    assert pydoc.render_doc(obj)
    key = _owner_name(obj) or name
    if key in NON_LITERAL_DEFAULT:
        assert (obj.__text_signature__ or "").startswith(NON_LITERAL_DEFAULT[key])
        return
    if obj is bridge.Tensor:
        # No public constructor (as the factories make tensors), so no signature.
        with pytest.raises(ValueError):
            inspect.signature(obj)
        with pytest.raises(TypeError, match="no public constructor"):
            bridge.Tensor()
        return
    inspect.signature(obj)


@pytest.mark.parametrize(("name", "obj"), list(_c_callables()), ids=[n for n, _ in _c_callables()])
def test_every_c_callable_has_a_text_signature(name: str, obj: Callable[..., Any]) -> None:
    # CPython strips the signature line from __doc__ into __text_signature__
    # only when the docstring starts with the well-formed name(...)--- form.
    sig = obj.__text_signature__
    assert sig is not None and sig.startswith("(") and sig.endswith(")"), obj.__doc__
    assert obj.__doc__, f"{name} has a signature but no description"
    if name in NON_LITERAL_DEFAULT:
        assert sig.startswith(NON_LITERAL_DEFAULT[name])
    else:
        inspect.signature(obj)


def test_c_signatures_match_their_keywords() -> None:
    t = bridge.arange(6).view(2, 3)
    sig = inspect.signature(bridge.Tensor.flatten)
    assert list(sig.parameters)[1:] == ["start_dim", "end_dim"]
    assert t.flatten(start_dim=0, end_dim=-1).shape == torch.arange(6).view(2, 3).flatten(start_dim=0, end_dim=-1).shape
    sig = inspect.signature(bridge.Tensor.__dlpack__)
    assert all(p.kind is p.KEYWORD_ONLY for p in list(sig.parameters.values())[1:])
    cap = t.__dlpack__(stream=None, max_version=(1, 0), dl_device=None, copy=False)
    assert torch.from_dlpack(cap).tolist() == t.tolist()
    with pytest.raises(TypeError):
        t.__dlpack__(None)  # keyword-only, as the signature says
    assert inspect.signature(bridge.Tensor.__arrow_c_array__).parameters["requested_schema"].default is None
    schema, _array = t.flatten().__arrow_c_array__(requested_schema=None)
    assert type(schema).__name__ == "PyCapsule"


def test_c_positional_only_refuses_keywords() -> None:
    t = bridge.arange(6).view(2, 3)
    sig = inspect.signature(bridge.Tensor.transpose)
    assert [p.kind for p in sig.parameters.values()][1:] == [inspect.Parameter.POSITIONAL_ONLY] * 2
    with pytest.raises(TypeError):
        t.transpose(dim0=0, dim1=1)
    sig = inspect.signature(bridge.Tensor.size)
    assert sig.parameters["dim"].default is None
    assert t.size(None) == (2, 3)


def test_c_functions_take_their_keywords() -> None:
    sig = inspect.signature(bridge.from_arrow)
    assert [p.name for p in sig.parameters.values()] == ["obj", "copy", "with_mask"]
    values, valid = bridge.from_arrow(obj=pa.array([1, None, 3]), copy=True, with_mask=True)
    assert values.shape == (3,) and valid.tolist() == [True, False, True]
    sig = inspect.signature(bridge.from_dlpack)
    assert sig.parameters["x"].kind is inspect.Parameter.POSITIONAL_ONLY
    assert bridge.from_dlpack(np.arange(3), device=None, copy=True).tolist() == [0, 1, 2]
    assert inspect.signature(bridge.from_numpy).parameters["ndarray"].kind is inspect.Parameter.POSITIONAL_ONLY


def test_help_renders_the_classes() -> None:
    for cls in (bridge.Tensor, bridge.UntypedStorage, bridge.dtype):
        text = pydoc.plain(pydoc.render_doc(cls))
        assert cls.__name__ in text
    assert "size(self, dim=None, /)" in pydoc.plain(pydoc.render_doc(bridge.Tensor))


def test_help_of_tensor_shows_no_private_names() -> None:
    """help(bridge.Tensor) names no private helper (issue 23): annotations say
    builtins.bool, not a module's _Bool alias, and the C base is TensorBase,
    not bridge._C.TensorBase."""
    import re

    text = pydoc.render_doc(bridge.Tensor, renderer=pydoc.plaintext)
    assert set(re.findall(r"(?<![\w.])_[A-Za-z]\w*", text)) == set()
    assert "bridge._C" not in text and "class Tensor(TensorBase)" in text
    assert bridge.Tensor.__mro__[1] is _C.TensorBase
