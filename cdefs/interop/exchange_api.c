/* bridge's DLPack C exchange API (dlpack.h v1.3): the static table behind
 * Tensor.__dlpack_c_exchange_api__, which torch and tvm-ffi use to take
 * bridge tensors without a capsule. Every entry reads the tensor's C struct;
 * the GIL is held by the caller, as the API requires. */

#include "interop.h"

#include <stdlib.h>

static int api_from_py_object(void *py_object, DLManagedTensorVersioned **out) {
  PyObject *obj = (PyObject *)py_object;
  if (!Tensor_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "expected a bridge.Tensor, got %.200s", Py_TYPE(obj)->tp_name);
    return -1;
  }
  /* No sync is asked of us, but the consumer will wait for our current work
   * stream: the memory's own stream is ordered before it first. */
  StorageObject *st = ((TensorObject *)obj)->storage;
  if (st->dev_type == kDLCUDA && bridge_cuda_order(st->dev_id, st->stream, bridge_current_stream()) < 0)
    return -1;
  void *block = bridge_dlpack_build((TensorObject *)obj, 0, 1);
  if (block == NULL) return -1;
  *out = (DLManagedTensorVersioned *)block;
  BUMP(STAT_API_EXPORTS);
  return 0;
}

static int api_to_py_object(DLManagedTensorVersioned *tensor, void **out_py_object) {
  PyObject *obj = bridge_dlpack_take(tensor, 1);
  if (obj == NULL) return -1;
  *out_py_object = obj;
  return 0;
}

/* A non-owning DLTensor: shape and strides point into the tensor, which
 * keeps them (unchanged and allocated) for as long as it lives, whatever
 * set_() does later. A bare DLTensor has no flags: read-only tensors, and
 * sub-byte ones of one value per byte (padded), are refused. */
static int api_dltensor_from_py_object(void *py_object, DLTensor *out) {
  PyObject *obj = (PyObject *)py_object;
  if (!Tensor_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "expected a bridge.Tensor, got %.200s", Py_TYPE(obj)->tp_name);
    return -1;
  }
  TensorObject *t = (TensorObject *)obj;
  if (bridge_storage_lend(t->storage, BRIDGE_CONSUMER_UNFLAGGED) == BRIDGE_LEND_REFUSED) {
    PyErr_SetString(PyExc_BufferError,
                    "a read-only tensor cannot be lent as a bare DLTensor, which has no READ_ONLY "
                    "flag; use managed_tensor_from_py_object_no_sync (or __dlpack__) instead");
    return -1;
  }
  if (t->dtype->bits < 8 && t->dtype->lanes == 1) {
    PyErr_SetString(PyExc_BufferError,
                    "a sub-byte tensor of one value per byte cannot be lent as a bare DLTensor, which "
                    "has no IS_SUBBYTE_TYPE_PADDED flag (its values would read as packed); use "
                    "managed_tensor_from_py_object_no_sync (or __dlpack__) instead");
    return -1;
  }
  if (bridge_tensor_check_bounds(t, PyExc_BufferError) < 0) return -1;
  t->lent |= t->shape == t->inline_dims ? BRIDGE_LENT_INLINE : BRIDGE_LENT_HEAP;
  out->data = bridge_tensor_data(t);
  out->device.device_type = (DLDeviceType)t->storage->dev_type;
  out->device.device_id = t->storage->dev_id;
  out->ndim = t->ndim;
  out->dtype.code = t->dtype->code;
  out->dtype.bits = t->dtype->bits;
  out->dtype.lanes = t->dtype->lanes;
  out->shape = t->shape;
  out->strides = t->strides;
  out->byte_offset = 0;
  return 0;
}

typedef struct {
  DLManagedTensorVersioned m;
  int64_t dims[]; /* shape then strides */
} alloc_block;

static void alloc_deleter(DLManagedTensorVersioned *self) {
  if (self == NULL) return;
  bridge_aligned_free(self->manager_ctx);
  free(self);
}

/* Needs no Python: a new, contiguous CPU tensor shaped like the prototype. */
static int api_allocator(DLTensor *proto, DLManagedTensorVersioned **out, void *error_ctx,
                         void (*set_error)(void *, const char *, const char *)) {
  if (proto->device.device_type != kDLCPU) {
    set_error(error_ctx, "RuntimeError", "bridge can only allocate CPU tensors");
    return -1;
  }
  int32_t ndim = proto->ndim;
  if (ndim < 0 || ndim > BRIDGE_MAX_NDIM || proto->dtype.lanes == 0 || (ndim > 0 && !proto->shape)) {
    set_error(error_ctx, "ValueError", "bad prototype tensor");
    return -1;
  }
  uint64_t numel = 1;
  for (int32_t i = 0; i < ndim; i++) {
    if (proto->shape[i] < 0 || __builtin_mul_overflow(numel, (uint64_t)proto->shape[i], &numel)) {
      set_error(error_ctx, "ValueError", "bad prototype shape");
      return -1;
    }
  }
  uint64_t bits = (uint64_t)proto->dtype.bits * proto->dtype.lanes;
  uint64_t nbytes;
  if (__builtin_mul_overflow(numel, (bits + 7) / 8, &nbytes) || nbytes > (uint64_t)BRIDGE_MAX_NBYTES) {
    set_error(error_ctx, "MemoryError", "tensor too large");
    return -1;
  }
  alloc_block *b = (alloc_block *)malloc(sizeof(alloc_block) + 2 * (size_t)ndim * sizeof(int64_t));
  void *data = b ? bridge_aligned_alloc((size_t)nbytes, 0) : NULL;
  if (data == NULL) {
    free(b);
    set_error(error_ctx, "MemoryError", "out of memory");
    return -1;
  }
  for (int32_t i = 0; i < ndim; i++) b->dims[i] = proto->shape[i];
  bridge_contiguous_strides(ndim, b->dims, b->dims + ndim);
  b->m.version.major = DLPACK_MAJOR_VERSION;
  b->m.version.minor = DLPACK_MINOR_VERSION;
  b->m.manager_ctx = data;
  b->m.deleter = alloc_deleter;
  b->m.flags = 0;
  b->m.dl_tensor.data = data;
  b->m.dl_tensor.device = proto->device;
  b->m.dl_tensor.ndim = ndim;
  b->m.dl_tensor.dtype = proto->dtype;
  b->m.dl_tensor.shape = b->dims;
  b->m.dl_tensor.strides = b->dims + ndim;
  b->m.dl_tensor.byte_offset = 0;
  *out = &b->m;
  return 0;
}

static int api_current_work_stream(DLDeviceType device_type, int32_t device_id, void **out) {
  (void)device_id;
  /* bridge launches no work of its own: its work is ordered on the thread's
   * consumer stream (1, the legacy default, is NULL to the CUDA API). */
  uintptr_t s = bridge_current_stream();
  *out = device_type == kDLCUDA && s != 1 ? (void *)s : NULL;
  return 0;
}

static DLPackExchangeAPI bridge_exchange_api = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, NULL},
    api_allocator,
    api_from_py_object,
    api_to_py_object,
    api_dltensor_from_py_object,
    api_current_work_stream,
};

/* Sets TensorBase.__dlpack_c_exchange_api__ (and _C.exchange_api). */
int bridge_exchange_api_init(PyObject *mod) {
  PyObject *api = PyCapsule_New(&bridge_exchange_api, BRIDGE_NAME_API, NULL);
  if (api == NULL) return -1;
  int rc = PyDict_SetItemString(BridgeTensor_Type.tp_dict, "__dlpack_c_exchange_api__", api);
  if (rc == 0) rc = PyModule_AddObjectRef(mod, "exchange_api", api);
  Py_DECREF(api);
  PyType_Modified(&BridgeTensor_Type);
  return rc;
}
