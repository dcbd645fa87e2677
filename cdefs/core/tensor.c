/* TensorBase, the type: a typed, strided view of a storage, its metadata
 * methods and getters, and the module functions that make tensors over
 * memory. bridge.Tensor is the Python class on top; the one constructor and
 * the geometry checks are geometry.c's. */

#include "core.h"

#include <stdio.h>
#include <stdlib.h>

PyTypeObject *bridge_tensor_class = &BridgeTensor_Type;

/* A storage offset from Python: ValueError naming it when it does not fit int64. */
static int parse_offset(PyObject *obj, long long *out) {
  int overflow;
  PyObject *i = PyNumber_Index(obj);
  if (i == NULL) return -1;
  *out = PyLong_AsLongLongAndOverflow(i, &overflow);
  if (overflow) PyErr_Format(PyExc_ValueError, "storage offset %R does not fit in a 64-bit integer", i);
  Py_DECREF(i);
  return PyErr_Occurred() ? -1 : 0;
}

static PyObject *dims_tuple(int n, const int64_t *v) {
  PyObject *t = PyTuple_New(n);
  if (t == NULL) return NULL;
  for (int i = 0; i < n; i++) {
    PyObject *x = PyLong_FromLongLong(v[i]);
    if (x == NULL) {
      Py_DECREF(t);
      return NULL;
    }
    PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

static PyObject *shape_tuple(TensorObject *t) {
  if (t->shape_tuple == NULL && (t->shape_tuple = dims_tuple(t->ndim, t->shape)) == NULL) return NULL;
  return Py_NewRef(t->shape_tuple);
}

static PyObject *strides_tuple(TensorObject *t) {
  if (t->strides_tuple == NULL && (t->strides_tuple = dims_tuple(t->ndim, t->strides)) == NULL)
    return NULL;
  return Py_NewRef(t->strides_tuple);
}

/* ------------------------------------------------------------- methods */

static PyObject *tensor_size(TensorObject *t, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs == 0 || args[0] == Py_None) return shape_tuple(t);
  int d;
  if (nargs > 1) return PyErr_Format(PyExc_TypeError, "size() takes at most 1 argument");
  if (bridge_wrap_dim(args[0], 0, t->ndim, &d) < 0) return NULL;
  return PyLong_FromLongLong(t->ndim ? t->shape[d] : 1);
}

static PyObject *tensor_stride(TensorObject *t, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs == 0 || args[0] == Py_None) return strides_tuple(t);
  int d;
  if (nargs > 1) return PyErr_Format(PyExc_TypeError, "stride() takes at most 1 argument");
  if (bridge_wrap_dim(args[0], 0, t->ndim, &d) < 0) return NULL;
  return PyLong_FromLongLong(t->ndim ? t->strides[d] : 1);
}

static PyObject *tensor_dim(TensorObject *t, PyObject *unused) {
  (void)unused;
  return PyLong_FromLong(t->ndim);
}

static PyObject *tensor_numel(TensorObject *t, PyObject *unused) {
  (void)unused;
  return PyLong_FromLongLong(bridge_numel(t));
}

static PyObject *tensor_element_size(TensorObject *t, PyObject *unused) {
  (void)unused;
  return PyLong_FromLong(t->dtype->itemsize);
}

static PyObject *tensor_data_ptr(TensorObject *t, PyObject *unused) {
  (void)unused;
  return PyLong_FromVoidPtr(bridge_tensor_data(t));
}

static PyObject *tensor_storage_offset(TensorObject *t, PyObject *unused) {
  (void)unused;
  return PyLong_FromLongLong(t->offset);
}

static PyObject *tensor_untyped_storage(TensorObject *t, PyObject *unused) {
  (void)unused;
  return Py_NewRef(t->storage);
}

static PyObject *tensor_check_bounds_py(TensorObject *t, PyObject *const *args, Py_ssize_t nargs) {
  PyObject *exc = nargs > 0 ? args[0] : PyExc_BufferError;
  if (!PyExceptionClass_Check(exc)) return PyErr_Format(PyExc_TypeError, "expected an exception class");
  if (bridge_tensor_check_bounds(t, exc) < 0) return NULL;
  Py_RETURN_NONE;
}

/* _parts(error=None): (storage, dtype, shape, strides, offset), read
 * in one step and checked against the bytes the storage holds now (`error`
 * when the view reaches past them), so that a set_() or resize_() in another
 * thread cannot mix one geometry with another storage (pickling, deepcopy). */
static PyObject *tensor_parts_py(TensorObject *t, PyObject *const *args, Py_ssize_t nargs) {
  PyObject *exc = nargs > 0 && args[0] != Py_None ? args[0] : PyExc_BufferError;
  if (!PyExceptionClass_Check(exc)) return PyErr_Format(PyExc_TypeError, "expected an exception class");
  if (bridge_tensor_check_bounds(t, exc) < 0) return NULL;
  PyObject *shape = shape_tuple(t);
  if (shape == NULL) return NULL;
  PyObject *strides = strides_tuple(t);
  if (strides == NULL) {
    Py_DECREF(shape);
    return NULL;
  }
  return Py_BuildValue("(OONNL)", (PyObject *)t->storage, (PyObject *)t->dtype, shape, strides,
                       (long long)t->offset);
}

/* _set_geometry(storage, dtype, shape, strides, offset): set_() and the
 * in-place view ops; user geometry (ValueError when it leaves the storage). */
static PyObject *tensor_set_geometry(TensorObject *t, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 5 || !Storage_Check(args[0]) || !DType_Check(args[1]))
    return PyErr_Format(PyExc_TypeError, "_set_geometry(storage, dtype, shape, strides, offset)");
  int64_t dims[2 * BRIDGE_MAX_NDIM];
  int n = bridge_parse_dims(args[2], dims, BRIDGE_MAX_NDIM, "size");
  if (n < 0) return NULL;
  int m = bridge_parse_dims(args[3], dims + n, BRIDGE_MAX_NDIM, "stride");
  if (m < 0) return NULL;
  if (m != n) return PyErr_Format(PyExc_ValueError, "size and stride have different lengths (%d and %d)", n, m);
  long long offset;
  if (parse_offset(args[4], &offset) < 0) return NULL;
  if (bridge_tensor_assign(t, (StorageObject *)args[0], (DTypeObject *)args[1], n, dims, dims + n,
                           offset, GEOM_USER) < 0)
    return NULL;
  Py_RETURN_NONE;
}

static Py_ssize_t tensor_len(TensorObject *t) {
  if (t->ndim == 0) {
    PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
    return -1;
  }
  return (Py_ssize_t)t->shape[0];
}

static PyMethodDef tensor_core_methods[] = {
    {"size", (PyCFunction)(void (*)(void))tensor_size, METH_FASTCALL,
     "size($self, dim=None, /)\n--\n\nThe shape as a tuple, or the size of one dim (IndexError if "
     "out of range)."},
    {"stride", (PyCFunction)(void (*)(void))tensor_stride, METH_FASTCALL,
     "stride($self, dim=None, /)\n--\n\nThe strides in elements as a tuple, or the stride of one dim."},
    {"dim", (PyCFunction)tensor_dim, METH_NOARGS, "dim($self, /)\n--\n\nNumber of dimensions."},
    {"ndimension", (PyCFunction)tensor_dim, METH_NOARGS,
     "ndimension($self, /)\n--\n\nNumber of dimensions (as dim())."},
    {"numel", (PyCFunction)tensor_numel, METH_NOARGS, "numel($self, /)\n--\n\nNumber of elements."},
    {"nelement", (PyCFunction)tensor_numel, METH_NOARGS,
     "nelement($self, /)\n--\n\nNumber of elements (as numel())."},
    {"element_size", (PyCFunction)tensor_element_size, METH_NOARGS,
     "element_size($self, /)\n--\n\nBytes per element."},
    {"data_ptr", (PyCFunction)tensor_data_ptr, METH_NOARGS,
     "data_ptr($self, /)\n--\n\nAddress of the first element."},
    {"storage_offset", (PyCFunction)tensor_storage_offset, METH_NOARGS,
     "storage_offset($self, /)\n--\n\nOffset of the first element in the storage, in elements."},
    {"untyped_storage", (PyCFunction)tensor_untyped_storage, METH_NOARGS,
     "untyped_storage($self, /)\n--\n\nThe storage this tensor views."},
    {"_check_bounds", (PyCFunction)(void (*)(void))tensor_check_bounds_py, METH_FASTCALL,
     "_check_bounds($self, error=BufferError, /)\n--\n\nRaise `error` when the view reaches past "
     "the bytes its storage holds now (private)."},
    {"_parts", (PyCFunction)(void (*)(void))tensor_parts_py, METH_FASTCALL,
     "_parts($self, error=None, /)\n--\n\n(storage, dtype, shape, strides, offset) in "
     "one step; `error` (None: BufferError) when the view reaches past its storage's bytes "
     "(private)."},
    {"_set_geometry", (PyCFunction)(void (*)(void))tensor_set_geometry, METH_FASTCALL,
     "_set_geometry($self, storage, dtype, shape, strides, offset, /)\n--\n\nRepoint this tensor "
     "(private; set_ and the in-place view ops)."},
    {NULL, NULL, 0, NULL},
};

/* ------------------------------------------------------------- getters */

static PyObject *get_shape(TensorObject *t, void *c) {
  (void)c;
  return shape_tuple(t);
}
static PyObject *get_strides(TensorObject *t, void *c) {
  (void)c;
  return strides_tuple(t);
}
static PyObject *get_ndim(TensorObject *t, void *c) {
  (void)c;
  return PyLong_FromLong(t->ndim);
}
static PyObject *get_dtype(TensorObject *t, void *c) {
  (void)c;
  return Py_NewRef(t->dtype);
}
static PyObject *get_storage(TensorObject *t, void *c) {
  (void)c;
  return Py_NewRef(t->storage);
}
static PyObject *get_offset(TensorObject *t, void *c) {
  (void)c;
  return PyLong_FromLongLong(t->offset);
}
static PyObject *get_device(TensorObject *t, void *c) {
  (void)c;
  return bridge_storage_device(t->storage);
}
static PyObject *get_is_cuda(TensorObject *t, void *c) {
  (void)c;
  return PyBool_FromLong(t->storage->dev_type == kDLCUDA);
}
static PyObject *get_is_cpu(TensorObject *t, void *c) {
  (void)c;
  return PyBool_FromLong(t->storage->dev_type == kDLCPU);
}
static PyObject *get_itemsize(TensorObject *t, void *c) {
  (void)c;
  return PyLong_FromLong(t->dtype->itemsize);
}
static PyObject *get_nbytes(TensorObject *t, void *c) {
  (void)c;
  int64_t n;
  if (!__builtin_mul_overflow(bridge_numel(t), (int64_t)t->dtype->itemsize, &n))
    return PyLong_FromLongLong(n);
  /* a broadcast view can describe more bytes than exist */
  PyObject *numel = PyLong_FromLongLong(bridge_numel(t)), *isz = PyLong_FromLong(t->dtype->itemsize);
  PyObject *r = numel && isz ? PyNumber_Multiply(numel, isz) : NULL;
  Py_XDECREF(numel);
  Py_XDECREF(isz);
  return r;
}
static PyObject *get_readonly(TensorObject *t, void *c) {
  (void)c;
  return PyBool_FromLong(t->storage->readonly);
}

static PyGetSetDef tensor_core_getset[] = {
    {"shape", (getter)get_shape, NULL, "The shape as a tuple of ints.", NULL},
    {"_shape", (getter)get_shape, NULL, "The shape (for the Python layer).", NULL},
    {"_strides", (getter)get_strides, NULL, "The strides in elements (for the Python layer).", NULL},
    {"_offset", (getter)get_offset, NULL, "The storage offset (for the Python layer).", NULL},
    {"_storage", (getter)get_storage, NULL, "The storage (for the Python layer).", NULL},
    {"_dtype", (getter)get_dtype, NULL, "The dtype (for the Python layer).", NULL},
    {"ndim", (getter)get_ndim, NULL, "Number of dimensions.", NULL},
    {"dtype", (getter)get_dtype, NULL, "The element type.", NULL},
    {"device", (getter)get_device, NULL, "The device of the storage.", NULL},
    {"is_cuda", (getter)get_is_cuda, NULL, "Whether the tensor is in CUDA device memory.", NULL},
    {"is_cpu", (getter)get_is_cpu, NULL, "Whether the tensor is in host memory.", NULL},
    {"itemsize", (getter)get_itemsize, NULL, "Bytes per element.", NULL},
    {"nbytes", (getter)get_nbytes, NULL, "Bytes the elements would occupy if packed (numel * itemsize).",
     NULL},
    {"is_readonly", (getter)get_readonly, NULL,
     "Whether the memory is read-only (borrowed from a read-only producer).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* ------------------------------------------------------------ the type */

static PyObject *tensor_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  (void)type;
  (void)args;
  (void)kwargs;
  PyErr_SetString(PyExc_TypeError,
                  "bridge.Tensor has no public constructor; use bridge.tensor(data), "
                  "bridge.empty(shape), bridge.from_dlpack(x) or another factory");
  return NULL;
}

static int tensor_traverse(TensorObject *t, visitproc visit, void *arg) {
  Py_VISIT(t->storage);
  Py_VISIT(t->dtype);
  return 0;
}

static int tensor_clear(TensorObject *t) {
  Py_CLEAR(t->storage);
  Py_CLEAR(t->dtype);
  Py_CLEAR(t->shape_tuple);
  Py_CLEAR(t->strides_tuple);
  return 0;
}

static void tensor_dealloc(TensorObject *t) {
  PyObject_GC_UnTrack(t);
  if (t->weakreflist != NULL) PyObject_ClearWeakRefs((PyObject *)t);
  tensor_clear(t);
  bridge_tensor_free_dims(t);
  Py_TYPE(t)->tp_free((PyObject *)t);
}

/* Named where bridge.core.tensor re-exports it, so that help(bridge.Tensor)
 * reads "class Tensor(TensorBase)" with no private module path (issue 23);
 * bridge._C.TensorBase is the same object. */
PyTypeObject BridgeTensor_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bridge.core.tensor.TensorBase",
    .tp_basicsize = sizeof(TensorObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C part of bridge.Tensor: storage, dtype, shape, strides and offset.",
    .tp_new = tensor_tp_new,
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_traverse = (traverseproc)tensor_traverse,
    .tp_clear = (inquiry)tensor_clear,
    .tp_weaklistoffset = offsetof(TensorObject, weakreflist),
    .tp_as_mapping = &bridge_tensor_as_mapping,
};

/* Concatenate NULL-terminated method/getset tables into one (static storage). */
static PyMethodDef *join_methods(PyMethodDef **parts, size_t nparts) {
  size_t n = 0;
  for (size_t i = 0; i < nparts; i++)
    for (PyMethodDef *m = parts[i]; m->ml_name; m++) n++;
  PyMethodDef *out = (PyMethodDef *)calloc(n + 1, sizeof(PyMethodDef));
  if (out == NULL) return NULL;
  n = 0;
  for (size_t i = 0; i < nparts; i++)
    for (PyMethodDef *m = parts[i]; m->ml_name; m++) out[n++] = *m;
  return out;
}

static PyGetSetDef *join_getset(PyGetSetDef **parts, size_t nparts) {
  size_t n = 0;
  for (size_t i = 0; i < nparts; i++)
    for (PyGetSetDef *g = parts[i]; g->name; g++) n++;
  PyGetSetDef *out = (PyGetSetDef *)calloc(n + 1, sizeof(PyGetSetDef));
  if (out == NULL) return NULL;
  n = 0;
  for (size_t i = 0; i < nparts; i++)
    for (PyGetSetDef *g = parts[i]; g->name; g++) out[n++] = *g;
  return out;
}

/* Called once by module.c before PyType_Ready: the methods it hands in (the
 * protocol files') join the core's (the table lives as long as the process,
 * as the type). */
int bridge_tensor_prepare_type(PyMethodDef *const *extra_methods, PyGetSetDef *const *extra_getsets,
                               PyBufferProcs *as_buffer) {
  PyMethodDef *methods[16] = {tensor_core_methods, bridge_view_methods, bridge_value_methods};
  PyGetSetDef *getsets[16] = {tensor_core_getset, bridge_view_getset};
  size_t nm = 3, ng = 2;
  for (; extra_methods && *extra_methods; extra_methods++) {
    if (nm == sizeof methods / sizeof *methods) return PyErr_Format(PyExc_SystemError, "too many method tables"), -1;
    methods[nm++] = *extra_methods;
  }
  for (; extra_getsets && *extra_getsets; extra_getsets++) {
    if (ng == sizeof getsets / sizeof *getsets) return PyErr_Format(PyExc_SystemError, "too many getset tables"), -1;
    getsets[ng++] = *extra_getsets;
  }
  BridgeTensor_Type.tp_as_buffer = as_buffer;
  BridgeTensor_Type.tp_methods = join_methods(methods, nm);
  BridgeTensor_Type.tp_getset = join_getset(getsets, ng);
  if (BridgeTensor_Type.tp_methods == NULL || BridgeTensor_Type.tp_getset == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  bridge_tensor_as_mapping.mp_length = (lenfunc)tensor_len;
  return 0;
}

/* ------------------------------------------------- module functions */

/* make_tensor(storage, dtype, shape, strides, offset): a tensor with
 * user-given geometry (ValueError when it leaves the storage). */
static PyObject *py_make_tensor(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs < 5 || nargs > 6 || !Storage_Check(args[0]) || !DType_Check(args[1]))
    return PyErr_Format(PyExc_TypeError, "make_tensor(storage, dtype, shape, strides, offset, derived=False)");
  int derived = nargs == 6 ? PyObject_IsTrue(args[5]) : 0;
  if (derived < 0) return NULL;
  int64_t dims[2 * BRIDGE_MAX_NDIM];
  int n = bridge_parse_dims(args[2], dims, BRIDGE_MAX_NDIM, "size");
  if (n < 0) return NULL;
  int m = bridge_parse_dims(args[3], dims + n, BRIDGE_MAX_NDIM, "stride");
  if (m < 0) return NULL;
  if (m != n) return PyErr_Format(PyExc_ValueError, "size and stride have different lengths (%d and %d)", n, m);
  long long offset;
  if (parse_offset(args[4], &offset) < 0) return NULL;
  return bridge_tensor_new((StorageObject *)args[0], (DTypeObject *)args[1], n, dims, dims + n, offset,
                           derived ? GEOM_DERIVED : GEOM_USER);
}

int bridge_foreign_span(uintptr_t data, int ndim, const int64_t *shape, const int64_t *strides,
                        int64_t itemsize, uintptr_t *start, int64_t *nbytes, int64_t *offset) {
  *start = data;
  *nbytes = 0;
  *offset = 0;
  for (int i = 0; i < ndim; i++)
    if (shape[i] == 0) return 0; /* reaches nothing: an empty storage at data */
  int64_t lo, hi, count, lo_bytes;
  if (bridge_view_extent(ndim, shape, strides, 0, &lo, &hi) < 0 || __builtin_sub_overflow(hi, lo, &count) ||
      __builtin_mul_overflow(count, itemsize, nbytes) || __builtin_mul_overflow(-lo, itemsize, &lo_bytes) ||
      (uint64_t)lo_bytes > (uint64_t)data)
    return -1;
  *start = data - (uintptr_t)lo_bytes;
  if ((uint64_t)*nbytes > UINTPTR_MAX - (uint64_t)*start) return -1;
  *offset = -lo;
  return 0;
}

/* from_memory(data, dtype, shape, byte_strides, owner, readonly, device):
 * a tensor over foreign memory whose element [0, ..., 0] is at `data`, kept
 * alive by `owner`; its storage spans exactly the reachable elements
 * (negative strides included). ValueError for byte strides that are not
 * whole elements and for extents that do not fit the address space. */
static PyObject *py_from_memory(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  int dev_type, dev_id;
  if (nargs != 7 || !DType_Check(args[1]) || !PyArg_ParseTuple(args[6], "ii", &dev_type, &dev_id)) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_TypeError, "from_memory(data, dtype, shape, byte_strides, owner, readonly, device)");
    return NULL;
  }
  unsigned long long data = PyLong_AsUnsignedLongLong(args[0]);
  int readonly = PyObject_IsTrue(args[5]);
  if (PyErr_Occurred() || readonly < 0) return NULL;
  DTypeObject *dt = (DTypeObject *)args[1];
  int64_t shape[BRIDGE_MAX_NDIM], strides[BRIDGE_MAX_NDIM];
  int n = bridge_parse_dims(args[2], shape, BRIDGE_MAX_NDIM, "shape");
  if (n < 0) return NULL;
  int m = bridge_parse_dims(args[3], strides, BRIDGE_MAX_NDIM, "strides");
  if (m < 0) return NULL;
  if (m != n) return PyErr_Format(PyExc_ValueError, "shape and strides have different lengths (%d and %d)", n, m);
  for (int i = 0; i < n; i++) {
    if (strides[i] % dt->itemsize)
      return PyErr_Format(PyExc_ValueError,
                          "stride of %lld bytes in dim %d is not a multiple of the item size (%d "
                          "bytes); a tensor's strides count whole elements",
                          (long long)strides[i], i, dt->itemsize);
    strides[i] /= dt->itemsize;
  }
  int64_t nbytes, offset;
  uintptr_t start;
  if (bridge_foreign_span((uintptr_t)data, n, shape, strides, dt->itemsize, &start, &nbytes, &offset) < 0) {
    char addr[32]; /* PyErr_Format has no '#' flag nor %llx */
    snprintf(addr, sizeof addr, "%#llx", data);
    return PyErr_Format(PyExc_ValueError,
                        "the described memory (address %s, %d dims) does not fit in a 64-bit "
                        "address space",
                        addr, n);
  }
  StorageObject *s = bridge_storage_new((char *)(uintptr_t)start, nbytes, dev_type, dev_id, args[4], readonly);
  if (s == NULL) return NULL;
  /* Device memory handed over is ready on the consumer's stream (the caller
   * sets another when the producer names one). */
  if (dev_type == kDLCUDA) s->stream = bridge_current_stream();
  PyObject *out = bridge_tensor_new(s, dt, n, shape, strides, offset, GEOM_USER);
  Py_DECREF(s);
  return out;
}

static PyMethodDef tensor_functions[] = {
    {"make_tensor", (PyCFunction)(void (*)(void))py_make_tensor, METH_FASTCALL,
     "make_tensor(storage, dtype, shape, strides, offset, derived=False, /)\n--\n\nA tensor with "
     "user-given geometry (ValueError when it reaches outside the storage), or a view derived "
     "from another (RuntimeError: the storage shrank)."},
    {"from_memory", (PyCFunction)(void (*)(void))py_from_memory, METH_FASTCALL,
     "from_memory(data, dtype, shape, byte_strides, owner, readonly, device, /)\n--\n\nA tensor "
     "over foreign memory kept alive by owner, its storage spanning exactly the reachable bytes."},
    {NULL, NULL, 0, NULL},
};

int bridge_tensor_init(PyObject *mod) { return PyModule_AddFunctions(mod, tensor_functions); }
