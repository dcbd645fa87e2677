/* NumPy and Python buffers: the tensor's buffer protocol (PEP 3118, which
 * NumPy tries first and memoryview uses), __array_struct__, and
 * bridge.from_numpy (NumPy's own DLPack export consumed in C; what that
 * refuses goes to bridge.interop.numpy). Every export holds the storage's
 * owner, so it outlives a later resize_() or set_() of the tensor. */

#include "interop.h"

#include <stdio.h>
#include <stdlib.h>

/* ------------------------------------------------------- buffer protocol */

typedef struct {
  PyObject *keep;        /* the storage's owner */
  Py_ssize_t dims[];     /* shape, then strides in bytes */
} buffer_info;

/* Byte strides of a view. A dim of size 0 or 1 may have any stride (as in
 * torch) and steps nowhere: one that overflows in bytes is exported as 0.
 * The others cannot overflow (the view's byte extent fits its storage). */
static int byte_strides(TensorObject *t, Py_ssize_t *out) {
  for (int i = 0; i < t->ndim; i++) {
    int64_t b;
    if (__builtin_mul_overflow(t->strides[i], (int64_t)t->dtype->itemsize, &b)) {
      if (t->shape[i] > 1) {
        PyErr_Format(PyExc_BufferError, "stride %lld of dim %d overflows in bytes", (long long)t->strides[i], i);
        return -1;
      }
      b = 0;
    }
    out[i] = (Py_ssize_t)b;
  }
  return 0;
}

static int check_host_export(TensorObject *t, const char *what) {
  if (!bridge_host_accessible(t->storage->dev_type)) {
    PyObject *dev = bridge_storage_device(t->storage);
    if (dev != NULL) {
      PyErr_Format(PyExc_BufferError, "a %S tensor has no host %s", dev, what);
      Py_DECREF(dev);
    }
    return -1;
  }
  return bridge_tensor_check_bounds(t, PyExc_BufferError);
}

static int tensor_getbuffer(TensorObject *t, Py_buffer *view, int flags) {
  view->obj = NULL;
  if (check_host_export(t, "buffer") < 0) return -1;
  int lent = bridge_storage_lend(t->storage, BRIDGE_CONSUMER_FLAGGED); /* one read of the bit */
  if ((flags & PyBUF_WRITABLE) && lent == BRIDGE_LEND_READONLY) {
    PyErr_SetString(PyExc_BufferError, "a writable buffer was requested from a read-only tensor");
    return -1;
  }
  if (t->dtype->buffer_format[0] == 0) {
    PyObject *dt = PyObject_Repr((PyObject *)t->dtype);
    if (dt != NULL) {
      PyErr_Format(PyExc_BufferError, "%U has no buffer-protocol format", dt);
      Py_DECREF(dt);
    }
    return -1;
  }
  int contiguous = bridge_is_contiguous(t->ndim, t->shape, t->strides);
  if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && !contiguous) {
    PyErr_SetString(PyExc_BufferError, "the tensor is not C-contiguous; ask for a strided buffer");
    return -1;
  }
  int64_t len;
  if (__builtin_mul_overflow(bridge_numel(t), (int64_t)t->dtype->itemsize, &len)) {
    PyErr_SetString(PyExc_BufferError, "the tensor describes more bytes than a buffer can hold");
    return -1;
  }
  buffer_info *info = (buffer_info *)malloc(sizeof(buffer_info) + 2 * (size_t)t->ndim * sizeof(Py_ssize_t));
  if (info == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  for (int i = 0; i < t->ndim; i++) info->dims[i] = (Py_ssize_t)t->shape[i];
  if (byte_strides(t, info->dims + t->ndim) < 0) {
    free(info);
    return -1;
  }
  info->keep = Py_NewRef(bridge_storage_owner(t->storage));
  view->buf = bridge_tensor_data(t);
  view->obj = Py_NewRef(t);
  view->len = (Py_ssize_t)len;
  view->itemsize = t->dtype->itemsize;
  view->readonly = lent == BRIDGE_LEND_READONLY;
  view->ndim = t->ndim;
  view->format = (flags & PyBUF_FORMAT) ? t->dtype->buffer_format : NULL;
  view->shape = (flags & PyBUF_ND) == PyBUF_ND ? info->dims : NULL;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? info->dims + t->ndim : NULL;
  view->suboffsets = NULL;
  view->internal = info;
  return 0;
}

static void tensor_releasebuffer(TensorObject *t, Py_buffer *view) {
  (void)t;
  buffer_info *info = (buffer_info *)view->internal;
  if (info != NULL) {
    Py_XDECREF(info->keep);
    free(info);
  }
}

PyBufferProcs bridge_tensor_as_buffer = {(getbufferproc)tensor_getbuffer,
                                         (releasebufferproc)tensor_releasebuffer};

/* ------------------------------------------------------ __array_struct__ */

/* NumPy's PyArrayInterface (numpy/ndarraytypes.h), restated so the build
 * needs no NumPy headers. */
typedef struct {
  int two;
  int nd;
  char typekind;
  int itemsize;
  int flags;
  Py_intptr_t *shape;
  Py_intptr_t *strides;
  void *data;
  PyObject *descr;
} bridge_array_interface;

#define NPY_ALIGNED 0x0100
#define NPY_NOTSWAPPED 0x0200
#define NPY_WRITEABLE 0x0400

static void array_struct_destructor(PyObject *capsule) {
  PyObject *keep = (PyObject *)PyCapsule_GetContext(capsule);
  free(PyCapsule_GetPointer(capsule, NULL));
  Py_XDECREF(keep);
}

/* Types NumPy can only name through ml_dtypes, and memory the host cannot
 * read, have no array struct (AttributeError: NumPy then tries __array__). */
static PyObject *tensor_array_struct(TensorObject *t, void *closure) {
  (void)closure;
  if (t->dtype->typekind == 0 || t->storage->dev_type != kDLCPU) {
    PyErr_SetString(PyExc_AttributeError,
                    "__array_struct__ is only defined for host tensors of NumPy-native dtypes");
    return NULL;
  }
  if (bridge_tensor_check_bounds(t, PyExc_BufferError) < 0) return NULL;
  int nd = t->ndim;
  bridge_array_interface *ai =
      (bridge_array_interface *)malloc(sizeof(bridge_array_interface) + 2 * (size_t)nd * sizeof(Py_intptr_t));
  if (ai == NULL) return PyErr_NoMemory();
  Py_intptr_t *dims = (Py_intptr_t *)(ai + 1);
  for (int i = 0; i < nd; i++) dims[i] = (Py_intptr_t)t->shape[i];
  if (byte_strides(t, (Py_ssize_t *)(dims + nd)) < 0) {
    free(ai);
    return NULL;
  }
  ai->two = 2;
  ai->nd = nd;
  ai->typekind = t->dtype->typekind;
  ai->itemsize = t->dtype->itemsize;
  ai->flags = NPY_ALIGNED | NPY_NOTSWAPPED |
              (bridge_storage_lend(t->storage, BRIDGE_CONSUMER_FLAGGED) == BRIDGE_LEND_READONLY ? 0 : NPY_WRITEABLE);
  ai->shape = dims;
  ai->strides = dims + nd;
  ai->data = bridge_tensor_data(t);
  ai->descr = NULL;
  PyObject *result = PyCapsule_New(ai, NULL, array_struct_destructor);
  if (result == NULL) {
    free(ai);
    return NULL;
  }
  /* NumPy keeps the capsule (as part of the new array's base): it holds the
   * owner, so the array outlives a resize_() or set_() of the tensor. */
  if (PyCapsule_SetContext(result, Py_NewRef(bridge_storage_owner(t->storage))) < 0) {
    Py_DECREF(bridge_storage_owner(t->storage));
    Py_DECREF(result);
    return NULL;
  }
  return result;
}

/* __array_interface__ (version 3): shape, typestr, descr, strides in bytes
 * (None when C-contiguous) and data as (address, read_only). The dict holds
 * no reference: NumPy keeps the tensor (and so its storage) as the base. */
static PyObject *tensor_array_interface(TensorObject *t, void *closure) {
  (void)closure;
  if (t->dtype->typekind == 0 || !bridge_host_accessible(t->storage->dev_type)) {
    PyErr_SetString(PyExc_AttributeError,
                    "__array_interface__ is only defined for host tensors of NumPy-native dtypes");
    return NULL;
  }
  if (bridge_tensor_check_bounds(t, PyExc_BufferError) < 0) return NULL;
  char typestr[8];
  snprintf(typestr, sizeof typestr, "%c%c%d", t->dtype->itemsize == 1 ? '|' : '<', t->dtype->typekind,
           t->dtype->itemsize);
  Py_ssize_t bs[BRIDGE_MAX_NDIM];
  if (byte_strides(t, bs) < 0) return NULL;
  PyObject *shape = PyTuple_New(t->ndim), *strides = NULL;
  for (int i = 0; shape && i < t->ndim; i++) PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(t->shape[i]));
  if (bridge_is_contiguous(t->ndim, t->shape, t->strides)) {
    strides = Py_NewRef(Py_None);
  } else {
    strides = PyTuple_New(t->ndim);
    for (int i = 0; strides && i < t->ndim; i++) PyTuple_SET_ITEM(strides, i, PyLong_FromSsize_t(bs[i]));
  }
  if (shape == NULL || strides == NULL || PyErr_Occurred()) {
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return NULL;
  }
  return Py_BuildValue("{sisNsss[(ss)]sNs(NO)}", "version", 3, "shape", shape, "typestr", typestr,
                       "descr", "", typestr, "strides", strides, "data",
                       PyLong_FromVoidPtr(bridge_tensor_data(t)),
                       bridge_storage_lend(t->storage, BRIDGE_CONSUMER_FLAGGED) == BRIDGE_LEND_READONLY ? Py_True
                                                                                                   : Py_False);
}

PyGetSetDef bridge_numpy_getset[] = {
    {"__array_interface__", (getter)tensor_array_interface, NULL,
     "NumPy's array interface, version 3 (host tensors of NumPy-native dtypes).", NULL},
    {"__array_struct__", (getter)tensor_array_struct, NULL,
     "NumPy's array struct interface (a PyCapsule of PyArrayInterface), zero-copy.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyMethodDef bridge_numpy_methods[] = {{NULL, NULL, 0, NULL}};

/* ------------------------------------------------ ndarrays read in C */

/* NumPy's array and descriptor structs, as far as read here: the array
 * fields are NumPy's public ABI (numpy/ndarraytypes.h, PyArrayObject_fields,
 * unchanged in 2.x), and type_num sits at the same place in the 1.x and 2.x
 * descriptors (what follows it moved in 2.0 and is not read). */
typedef struct {
  PyObject_HEAD
  char *data;
  int nd;
  Py_ssize_t *dimensions;
  Py_ssize_t *strides;
  PyObject *base;
  PyObject *descr;
  int flags;
} np_array;
typedef struct {
  PyObject_HEAD
  PyTypeObject *typeobj;
  char kind, type, byteorder, former_flags;
  int type_num;
} np_descr;
#define NPY_WRITEABLE 0x0400

/* NumPy's built-in type numbers <-> DLPack (code, bits): the one table. */
static const struct {
  int type_num;
  uint8_t code, bits;
} np_types[] = {
    {0, kDLBool, 8},
    {1, kDLInt, 8},
    {2, kDLUInt, 8},
    {3, kDLInt, 16},
    {4, kDLUInt, 16},
    {5, kDLInt, 8 * sizeof(int)},
    {6, kDLUInt, 8 * sizeof(int)},
    {7, kDLInt, 8 * sizeof(long)}, /* NumPy's int64 on LP64 (the first match wins below) */
    {8, kDLUInt, 8 * sizeof(long)},
    {9, kDLInt, 64},
    {10, kDLUInt, 64},
    {23, kDLFloat, 16},
    {11, kDLFloat, 32},
    {12, kDLFloat, 64},
    {14, kDLComplex, 64},
    {15, kDLComplex, 128},
};
#define NP_TYPES ((int)(sizeof np_types / sizeof np_types[0]))

int bridge_numpy_describe(PyObject *x, DLTensor *out, int64_t *shape, int64_t *strides, int *readonly) {
  np_array *a = (np_array *)x;
  np_descr *descr = (np_descr *)a->descr;
  int i = 0;
  while (i < NP_TYPES && np_types[i].type_num != descr->type_num) i++;
  if (i == NP_TYPES || (descr->byteorder != '=' && descr->byteorder != '|')) return 0;
  if (a->nd < 0 || a->nd > BRIDGE_MAX_NDIM) return 0;
  int64_t isz = np_types[i].bits / 8;
  for (int k = 0; k < a->nd; k++) {
    shape[k] = a->dimensions[k];
    if (shape[k] <= 0 || a->strides[k] % isz) return 0;
    strides[k] = a->strides[k] / isz;
  }
  out->data = a->data;
  out->device.device_type = kDLCPU;
  out->device.device_id = 0;
  out->ndim = a->nd;
  out->dtype.code = np_types[i].code;
  out->dtype.bits = np_types[i].bits;
  out->dtype.lanes = 1;
  out->shape = shape;
  out->strides = strides;
  out->byte_offset = 0;
  *readonly = !(a->flags & NPY_WRITEABLE);
  return 1;
}

/* NumPy's C API table (numpy/__multiarray_api.h: the slots below have kept
 * their numbers since NumPy 1.7), read from its _ARRAY_API capsule at first
 * use; the capsule is kept. */
static void **np_api;
static PyObject *np_api_capsule;

static int numpy_capi(void) {
  if (np_api != NULL) return 0;
  PyObject *m = PyImport_ImportModule("numpy._core._multiarray_umath");
  if (m == NULL && PyErr_ExceptionMatches(PyExc_ImportError)) { /* NumPy 1.x */
    PyErr_Clear();
    m = PyImport_ImportModule("numpy.core._multiarray_umath");
  }
  if (m == NULL) return -1;
  PyObject *c = PyObject_GetAttrString(m, "_ARRAY_API");
  Py_DECREF(m);
  if (c == NULL) return -1;
  void **api = PyCapsule_CheckExact(c) ? (void **)PyCapsule_GetPointer(c, NULL) : NULL;
  if (api == NULL) {
    Py_DECREF(c);
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "numpy's _ARRAY_API is not a C API table");
    return -1;
  }
  np_api_capsule = c;
  np_api = api;
  return 0;
}

static const char READONLY_BASE[] = "bridge.readonly_base";

static void readonly_base_release(PyObject *cap) {
  PyObject *owner = (PyObject *)PyCapsule_GetPointer(cap, READONLY_BASE);
  if (owner == NULL) {
    PyErr_Clear();
    return;
  }
  Py_DECREF(owner);
}

PyObject *bridge_numpy_array_over(PyObject *owner, void *data, DLDataType dt, int ndim, const int64_t *shape,
                                  const int64_t *strides, int readonly) {
  if (numpy_capi() < 0) return NULL;
  int i = 0;
  while (i < NP_TYPES && !(np_types[i].code == dt.code && np_types[i].bits == dt.bits && dt.lanes == 1)) i++;
  if (i == NP_TYPES) {
    PyErr_Format(PyExc_BufferError, "NumPy has no built-in type for DLPack (%d, %d, %d)", dt.code, dt.bits,
                 dt.lanes);
    return NULL;
  }
  Py_ssize_t dims[BRIDGE_MAX_NDIM], bstrides[BRIDGE_MAX_NDIM];
  for (int k = 0; k < ndim; k++) {
    dims[k] = (Py_ssize_t)shape[k];
    if (__builtin_mul_overflow(strides[k], (int64_t)(dt.bits / 8), &bstrides[k])) {
      PyErr_SetString(PyExc_BufferError, "a byte stride overflows");
      return NULL;
    }
  }
  PyTypeObject *array_type = (PyTypeObject *)np_api[2];
  PyObject *(*descr_from_type)(int) = (PyObject * (*)(int)) np_api[45];
  PyObject *(*new_from_descr)(PyTypeObject *, PyObject *, int, const Py_ssize_t *, const Py_ssize_t *, void *, int,
                              PyObject *) = (PyObject * (*)(PyTypeObject *, PyObject *, int, const Py_ssize_t *,
                                                            const Py_ssize_t *, void *, int, PyObject *)) np_api[94];
  int (*set_base)(PyObject *, PyObject *) = (int (*)(PyObject *, PyObject *))np_api[282];
  PyObject *descr = descr_from_type(np_types[i].type_num);
  if (descr == NULL) return NULL;
  /* Read-only memory gets a base that is not an array nor a writable buffer: NumPy lets
   * `flags.writeable = True` through when the base chain ends at a writable array (a
   * read-only view of one), and the memory was lent read-only. */
  /* (an owner that is a capsule already, as an Arrow guard or a managed tensor's is, is such a base) */
  PyObject *base = readonly && !PyCapsule_CheckExact(owner)
                       ? PyCapsule_New(Py_NewRef(owner), READONLY_BASE, readonly_base_release)
                       : Py_NewRef(owner);
  if (base == NULL) {
    Py_DECREF(owner); /* the capsule's reference, never taken */
    Py_DECREF(descr);
    return NULL;
  }
  PyObject *arr = new_from_descr(array_type, descr, ndim, dims, bstrides, data, readonly ? 0 : NPY_WRITEABLE, NULL);
  if (arr == NULL) {
    Py_DECREF(base);
    return NULL;
  }
  if (set_base(arr, base) < 0) { /* (steals the reference, also on failure) */
    Py_DECREF(arr);
    return NULL;
  }
  return arr;
}

/* ------------------------------------------------- buffers, in C */

/* The DLPack type of a native struct-module format of `itemsize` bytes
 * ("f", "<d", "=q", "Zf", "?"), as PEP 3118 writes them; 0 for anything else
 * (non-native byte order, records, pointers: the general importers explain). */
static int buffer_type(const char *fmt, Py_ssize_t itemsize, DLDataType *out) {
  if (fmt == NULL) fmt = "B";
  if (*fmt == '@' || *fmt == '=' || (*fmt == '<' && PY_LITTLE_ENDIAN)) fmt++;
  int complex = *fmt == 'Z';
  fmt += complex;
  if (fmt[0] == 0 || fmt[1] != 0 || itemsize <= 0 || itemsize > 16) return 0;
  uint8_t code;
  switch (fmt[0]) {
    case '?': code = kDLBool; break;
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n': code = kDLInt; break;
    case 'B': case 'H': case 'I': case 'L': case 'Q': case 'N': code = kDLUInt; break;
    case 'e': case 'f': case 'd': code = complex ? kDLComplex : kDLFloat; break;
    default: return 0;
  }
  if (complex && code != kDLComplex) return 0;
  out->code = code;
  out->bits = (uint8_t)(itemsize * 8);
  out->lanes = 1;
  return 1;
}

static const char BUFFER_NAME[] = "bridge.buffer_export";

static void buffer_release(PyObject *cap) {
  Py_buffer *view = (Py_buffer *)PyCapsule_GetPointer(cap, BUFFER_NAME);
  if (view == NULL) {
    PyErr_Clear();
    return;
  }
  PyBuffer_Release(view);
  free(view);
}

/* obj's buffer export (`flags` as PyObject_GetBuffer takes them) in a capsule
 * that releases it when it dies; *view points into the capsule's block. */
static PyObject *buffer_capsule(PyObject *obj, int flags, Py_buffer **view) {
  Py_buffer *v = (Py_buffer *)malloc(sizeof *v);
  if (v == NULL) return PyErr_NoMemory();
  if (PyObject_GetBuffer(obj, v, flags) < 0) {
    free(v);
    return NULL;
  }
  PyObject *cap = PyCapsule_New(v, BUFFER_NAME, buffer_release);
  if (cap == NULL) {
    PyBuffer_Release(v);
    free(v);
    return NULL;
  }
  *view = v;
  return cap;
}

/* buffer_export(obj) -> (export, address, readonly): obj's whole buffer (a
 * simple, C-contiguous export), held by `export`, a capsule that releases it
 * when it dies. A capsule, not a memoryview: it takes no part in the garbage
 * collector's cycle clearing, which would release an export while views of
 * its bytes (in the same cycle) still point into them. */
static PyObject *py_buffer_export(PyObject *mod, PyObject *obj) {
  (void)mod;
  Py_buffer *view;
  PyObject *cap = buffer_capsule(obj, PyBUF_SIMPLE, &view);
  if (cap == NULL) return NULL;
  return Py_BuildValue("(NKO)", cap, (unsigned long long)(uintptr_t)view->buf, view->readonly ? Py_True : Py_False);
}

PyObject *bridge_buffer_tensor(PyObject *obj) {
  Py_buffer *view;
  PyObject *owner = buffer_capsule(obj, PyBUF_RECORDS_RO, &view);
  if (owner == NULL) return NULL;
  DLDataType dt;
  DTypeObject *dtype = buffer_type(view->format, view->itemsize, &dt) ? bridge_dtype_from_dlpack(dt.code, dt.bits, 1)
                                                                      : NULL;
  int64_t shape[BRIDGE_MAX_NDIM], strides[BRIDGE_MAX_NDIM], nbytes, offset;
  uintptr_t start;
  int ok = dtype != NULL && view->ndim >= 0 && view->ndim <= BRIDGE_MAX_NDIM && (view->ndim == 0 || view->shape);
  for (int i = 0; ok && i < view->ndim; i++) {
    Py_ssize_t bstride = view->strides ? view->strides[i] : 0;
    shape[i] = view->shape[i];
    ok = shape[i] >= 0 && bstride % view->itemsize == 0;
    strides[i] = bstride / view->itemsize;
  }
  if (ok && view->ndim > 0 && view->strides == NULL) bridge_contiguous_strides(view->ndim, shape, strides);
  if (!ok || bridge_foreign_span((uintptr_t)view->buf, view->ndim, shape, strides, dtype->itemsize, &start, &nbytes,
                                 &offset) < 0) {
    PyErr_Format(PyExc_BufferError, "%.200s's buffer (format %.50s) has no zero-copy tensor form here",
                 Py_TYPE(obj)->tp_name, view->format ? view->format : "B");
    Py_DECREF(owner);
    return NULL;
  }
  StorageObject *st = bridge_storage_new((char *)start, nbytes, kDLCPU, 0, owner, view->readonly);
  Py_DECREF(owner);
  if (st == NULL) return NULL;
  PyObject *out = bridge_tensor_new(st, dtype, view->ndim, shape, strides, offset, GEOM_USER);
  Py_DECREF(st);
  return out;
}

/* ------------------------------------------------------------ from_numpy */

static PyObject *py_from_numpy(PyObject *mod, PyObject *x) {
  (void)mod;
  PyObject *ndarray = bridge_upcall_peek(UP_NDARRAY); /* NULL until bridge.interop.numpy is imported */
  if (ndarray == NULL || !PyObject_TypeCheck(x, (PyTypeObject *)ndarray)) {
    PyObject *slow = bridge_upcall(UP_NUMPY_SLOW);
    return slow ? PyObject_CallOneArg(slow, x) : NULL;
  }
  PyObject *out = bridge_dlpack_ask(x, 1); /* an ndarray: host memory */
  if (out == NULL) {
    /* ml_dtypes types, byte-swapped or odd-strided arrays: the slow path
     * imports them or explains the refusal */
    if (!PyErr_ExceptionMatches(PyExc_BufferError) && !PyErr_ExceptionMatches(PyExc_TypeError))
      return NULL;
    PyErr_Clear();
    PyObject *slow = bridge_upcall(UP_NUMPY_SLOW);
    return slow ? PyObject_CallOneArg(slow, x) : NULL;
  }
  return out;
}

static PyMethodDef numpy_functions[] = {
    {"buffer_export", (PyCFunction)py_buffer_export, METH_O,
     "buffer_export(obj, /)\n--\n\n(export, address, readonly): obj's whole C-contiguous buffer, "
     "held by `export` (a capsule) until it dies. BufferError/TypeError as the buffer protocol raises them."},
    {"from_numpy", (PyCFunction)py_from_numpy, METH_O,
     "from_numpy(ndarray, /)\n--\n\n"
     "A tensor sharing the array's memory (zero-copy; the array is kept alive). Read-only arrays\n"
     "give read-only tensors; negative strides are kept. TypeError for non-arrays and\n"
     "object/structured dtypes; ValueError for non-native byte order and byte strides that are\n"
     "not a multiple of the item size."},
    {NULL, NULL, 0, NULL},
};

int bridge_numpy_init(PyObject *mod) { return PyModule_AddFunctions(mod, numpy_functions); }
