"""The core layer: element types, devices, stride arithmetic, owners, storages,
tensors and factories. It imports no interop or kit module.

The storage and the tensor are Python classes over C objects
(``bridge._C.StorageBase`` and ``bridge._C.TensorBase``, as PyTorch's
``torch.Tensor`` over ``torch._C.TensorBase``); :mod:`bridge.core.native`
loads them.
"""
