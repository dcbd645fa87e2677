"""The type of :func:`bridge.convert` as a user's type checker sees it: one
overload per form (an array, a typed batch, a table, a stream), so that
``convert(dict_of_arrays, torch.Tensor)`` is a ``dict[str, torch.Tensor]``.
Nothing here runs: ``bridge.crossing.convert.convert`` is the C function,
cast to :class:`Convert`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Literal, Protocol, TypeVar, overload

__all__ = ["Convert", "ReadOnlyPolicy"]

_T = TypeVar("_T")
#: ``convert(readonly=...)``: what read-only memory becomes in a destination
#: that writes its tensors.
ReadOnlyPolicy = Literal["copy", "error", "share"]


_K = TypeVar("_K")


class _DLPackArray(Protocol):
    """An array by the DLPack protocol (torch, NumPy, jax, bridge, ...): what a
    typed batch's leaves are."""

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any: ...


class _ArrowTable(Protocol):
    """A pyarrow Table or RecordBatch (for typing only)."""

    @property
    def column_names(self) -> list[str]: ...


class _Frame(Protocol):
    """A polars or pandas DataFrame (for typing only)."""

    @property
    def columns(self) -> Any: ...

    @property
    def shape(self) -> tuple[int, int]: ...


class Convert(Protocol):
    """The type of :func:`convert` (a C function: ``_C.convert``): a type as
    the destination types the result, per form (a typed batch of DLPack
    arrays keeps its container; a table is a dict of columns, or one array
    with ``stack=True``; a stream of tables an iterator of those); a module
    or a name gives an object."""

    @overload
    def __call__(self, obj: _ArrowTable | _Frame, to: type[_T], *, copy: bool | None = ...,
                 readonly: ReadOnlyPolicy = ..., dtype: object = ..., device: object = ..., contiguous: bool = ...,
                 writable: bool = ..., columns: list[str] | None = ..., stack: Literal[False] = ...
                 ) -> dict[str, _T]: ...  # fmt: skip
    @overload
    def __call__(self, obj: _ArrowTable | _Frame, to: type[_T], *, copy: bool | None = ...,
                 readonly: ReadOnlyPolicy = ..., dtype: object = ..., device: object = ..., contiguous: bool = ...,
                 writable: bool = ..., columns: list[str] | None = ..., stack: Literal[True]) -> _T: ...  # fmt: skip
    @overload
    def __call__(self, obj: Iterator[_ArrowTable | _Frame], to: type[_T], *, copy: bool | None = ...,
                 readonly: ReadOnlyPolicy = ..., dtype: object = ..., device: object = ..., contiguous: bool = ...,
                 writable: bool = ..., columns: list[str] | None = ..., stack: Literal[False] = ...
                 ) -> Iterator[dict[str, _T]]: ...  # fmt: skip
    @overload
    def __call__(self, obj: Iterator[_ArrowTable | _Frame], to: type[_T], *, copy: bool | None = ...,
                 readonly: ReadOnlyPolicy = ..., dtype: object = ..., device: object = ..., contiguous: bool = ...,
                 writable: bool = ..., columns: list[str] | None = ..., stack: Literal[True]
                 ) -> Iterator[_T]: ...  # fmt: skip
    @overload
    def __call__(self, obj: Mapping[_K, _DLPackArray], to: type[_T], *, copy: bool | None = ...,
                 readonly: ReadOnlyPolicy = ..., dtype: object = ..., device: object = ..., contiguous: bool = ...,
                 writable: bool = ...) -> dict[_K, _T]: ...  # fmt: skip
    @overload
    def __call__(self, obj: list[_DLPackArray], to: type[_T], *, copy: bool | None = ...,
                 readonly: ReadOnlyPolicy = ..., dtype: object = ..., device: object = ..., contiguous: bool = ...,
                 writable: bool = ...) -> list[_T]: ...  # fmt: skip
    @overload
    def __call__(self, obj: tuple[_DLPackArray, ...], to: type[_T], *, copy: bool | None = ...,
                 readonly: ReadOnlyPolicy = ..., dtype: object = ..., device: object = ..., contiguous: bool = ...,
                 writable: bool = ...) -> tuple[_T, ...]: ...  # fmt: skip
    @overload
    def __call__(self, obj: Mapping[Any, Any] | list[Any] | tuple[Any, ...] | Iterator[Any], to: object, *,
                 copy: bool | None = ..., readonly: ReadOnlyPolicy = ..., dtype: object = ..., device: object = ...,
                 contiguous: bool = ..., writable: bool = ..., columns: list[str] | None = ...,
                 stack: bool = ...) -> object: ...  # fmt: skip
    @overload
    def __call__(self, obj: object, to: type[_T], *, copy: bool | None = ..., readonly: ReadOnlyPolicy = ...,
                 dtype: object = ..., device: object = ..., contiguous: bool = ...,
                 writable: bool = ...) -> _T: ...  # fmt: skip
    @overload
    def __call__(self, obj: object, to: object, *, copy: bool | None = ..., readonly: ReadOnlyPolicy = ...,
                 dtype: object = ..., device: object = ..., contiguous: bool = ..., writable: bool = ...,
                 columns: list[str] | None = ..., stack: bool = ...) -> object: ...  # fmt: skip
