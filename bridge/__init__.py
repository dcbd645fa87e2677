"""dlpack-bridge: move tensor memory between frameworks without copying it.

The core is a strided tensor with PyTorch's storage model: an
:class:`UntypedStorage` (bytes kept alive by one owner object) viewed by
:class:`Tensor` objects (dtype, shape, strides and offset in elements).

The package has four layers, as folders: :mod:`bridge.core` (types,
storages, tensors, factories; Python classes over the C objects of
``bridge._C``), :mod:`bridge.interop` (one module per protocol: DLPack,
NumPy and buffers, CUDA, Arrow), :mod:`bridge.crossing` (:func:`convert`:
from any library to any other, with what each destination can hold as
data) and :mod:`bridge.kit` (the interop matrix, the conformance checks,
the CLI and the pytest plugin). The modules
``bridge.arrow``, ``bridge.dlpack``, ``bridge.matrix`` and
``bridge.conformance`` are the public names of the protocol and kit modules.
"""

from typing import TYPE_CHECKING

from bridge.core.device import device
from bridge.core.dtypes import (
    all_dtypes,
    bfloat16,
    bool,
    can_cast,
    cdouble,
    cfloat,
    complex64,
    complex128,
    double,
    dtype,
    float,
    float4_e2m1fn,
    float6_e2m3fn,
    float6_e3m2fn,
    float8_e3m4,
    float8_e4m3,
    float8_e4m3b11fnuz,
    float8_e4m3fn,
    float8_e4m3fnuz,
    float8_e5m2,
    float8_e5m2fnuz,
    float8_e8m0fnu,
    float16,
    float32,
    float64,
    get_dtype,
    half,
    int,
    int8,
    int16,
    int32,
    int64,
    long,
    promote_types,
    result_type,
    short,
    uint8,
    uint16,
    uint32,
    uint64,
)
from bridge.core.factories import (
    arange,
    as_strided,
    empty,
    empty_like,
    empty_strided,
    full,
    full_like,
    ones,
    ones_like,
    tensor,
    zeros,
    zeros_like,
)
from bridge.core.functional import (
    broadcast_shapes,
    broadcast_tensors,
    broadcast_to,
    chunk,
    diagonal,
    equal,
    expand_copy,
    finfo,
    flatten,
    flip,
    from_file,
    iinfo,
    imag,
    is_complex,
    is_floating_point,
    is_signed,
    is_storage,
    is_tensor,
    moveaxis,
    movedim,
    narrow,
    numel,
    permute,
    ravel,
    real,
    reshape,
    select,
    split,
    squeeze,
    swapaxes,
    swapdims,
    t,
    tensor_split,
    transpose,
    unbind,
    unflatten,
    unsqueeze,
    view_as_complex,
    view_as_real,
)
from bridge.core.storage import UntypedStorage
from bridge.core.tensor import (
    Tensor,
    channels_last,
    channels_last_3d,
    contiguous_format,
    memory_format,
    preserve_format,
)
from bridge.crossing.convert import CopyWarning, convert
from bridge.interop import as_tensor, asarray
from bridge.interop.arrow import from_arrow
from bridge.interop.cuda import cuda_stream, current_cuda_stream, from_cuda_array_interface
from bridge.interop.dlpack import from_dlpack, to_dlpack
from bridge.interop.numpy import from_numpy, frombuffer

__version__ = "0.1.0"

if TYPE_CHECKING:  # what __getattr__ loads lazily, as a type checker should see it
    from bridge.kit.conformance import check


def __getattr__(name: str) -> object:
    # The kit (bridge.check and its modules) loads on first use, not at import.
    if name == "check":
        from bridge.kit.conformance import check

        return check
    if name in ("arrow", "dlpack", "matrix", "conformance"):
        import importlib

        return importlib.import_module(f"bridge.{name}")
    raise AttributeError(f"module 'bridge' has no attribute {name!r}")

__all__ = [
    "as_tensor",
    "broadcast_shapes",
    "broadcast_tensors",
    "broadcast_to",
    "chunk",
    "diagonal",
    "equal",
    "expand_copy",
    "finfo",
    "flatten",
    "flip",
    "from_file",
    "iinfo",
    "imag",
    "is_complex",
    "is_floating_point",
    "is_signed",
    "is_storage",
    "is_tensor",
    "moveaxis",
    "movedim",
    "narrow",
    "numel",
    "permute",
    "ravel",
    "real",
    "reshape",
    "select",
    "split",
    "squeeze",
    "swapaxes",
    "swapdims",
    "t",
    "tensor_split",
    "transpose",
    "unbind",
    "unflatten",
    "unsqueeze",
    "view_as_complex",
    "view_as_real",
    "Tensor",
    "UntypedStorage",
    "all_dtypes",
    "arange",
    "asarray",
    "as_strided",
    "bfloat16",
    "bool",
    "can_cast",
    "cdouble",
    "cfloat",
    "channels_last",
    "channels_last_3d",
    "check",
    "complex64",
    "complex128",
    "contiguous_format",
    "convert",
    "CopyWarning",
    "device",
    "double",
    "dtype",
    "empty",
    "empty_like",
    "empty_strided",
    "float",
    "float4_e2m1fn",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float16",
    "float32",
    "float64",
    "arrow",
    "from_arrow",
    "from_cuda_array_interface",
    "cuda_stream",
    "current_cuda_stream",
    "from_dlpack",
    "from_numpy",
    "frombuffer",
    "full",
    "full_like",
    "get_dtype",
    "half",
    "int",
    "int8",
    "int16",
    "int32",
    "int64",
    "long",
    "memory_format",
    "ones",
    "ones_like",
    "preserve_format",
    "promote_types",
    "result_type",
    "short",
    "tensor",
    "to_dlpack",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "zeros",
    "zeros_like",
]
