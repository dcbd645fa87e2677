"""The views every CUDA copy test runs through: name -> (bridge view, NumPy view).

Shared by the copy engine's tests against the fake driver
(tests/interop/cuda/test_cuda_copy.py) and against the real one
(tests/gpu/test_copy_engine.py), so that both check the same cases.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

View = Callable[[Any], Any]

#: The dtypes each layout is copied in: a float, a short int, the widest complex, bytes.
DTYPES: tuple[type, ...] = (np.float32, np.int16, np.complex128, np.uint8)

LAYOUTS: dict[str, tuple[View, View]] = {
    "contiguous": (lambda x: x.reshape(2, 3, 4, 5), lambda a: a.reshape(2, 3, 4, 5)),
    "transposed": (lambda x: x.reshape(10, 12).t(), lambda a: a.reshape(10, 12).T),
    "rows": (lambda x: x.reshape(10, 12)[:, 2:9], lambda a: a.reshape(10, 12)[:, 2:9]),
    "step": (lambda x: x.reshape(10, 12)[1:, ::3], lambda a: a.reshape(10, 12)[1:, ::3]),
    "reversed": (lambda x: x[::-1], lambda a: a[::-1]),
    "reversed-rows": (lambda x: x.reshape(10, 12)[::-2], lambda a: a.reshape(10, 12)[::-2]),
    "reversed-cols": (lambda x: x.reshape(10, 12)[:, ::-1], lambda a: a.reshape(10, 12)[:, ::-1]),
    "3d-inner-contiguous": (lambda x: x.reshape(2, 3, 4, 5)[:, 1:, :, 1:4],
                            lambda a: a.reshape(2, 3, 4, 5)[:, 1:, :, 1:4]),
    "permuted": (lambda x: x.reshape(2, 3, 4, 5).permute(3, 1, 0, 2),
                 lambda a: a.reshape(2, 3, 4, 5).transpose(3, 1, 0, 2)),
    "permuted-inner-kept": (lambda x: x.reshape(2, 3, 4, 5).permute(1, 0, 2, 3),
                            lambda a: a.reshape(2, 3, 4, 5).transpose(1, 0, 2, 3)),
    "0-d": (lambda x: x[7], lambda a: a[7, ...]),
    "one-element": (lambda x: x[7:8], lambda a: a[7:8]),
    "zero-size": (lambda x: x[:0], lambda a: a[:0]),
    "zero-size-2d": (lambda x: x.reshape(10, 12)[:, 5:5], lambda a: a.reshape(10, 12)[:, 5:5]),
}
