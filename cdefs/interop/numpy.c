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
  if ((flags & PyBUF_WRITABLE) && t->storage->readonly) {
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
  view->readonly = t->storage->readonly;
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
  ai->flags = NPY_ALIGNED | NPY_NOTSWAPPED | (t->storage->readonly ? 0 : NPY_WRITEABLE);
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
                       t->storage->readonly ? Py_True : Py_False);
}

PyGetSetDef bridge_numpy_getset[] = {
    {"__array_interface__", (getter)tensor_array_interface, NULL,
     "NumPy's array interface, version 3 (host tensors of NumPy-native dtypes).", NULL},
    {"__array_struct__", (getter)tensor_array_struct, NULL,
     "NumPy's array struct interface (a PyCapsule of PyArrayInterface), zero-copy.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyMethodDef bridge_numpy_methods[] = {{NULL, NULL, 0, NULL}};

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
    {"from_numpy", (PyCFunction)py_from_numpy, METH_O,
     "from_numpy(ndarray, /)\n--\n\n"
     "A tensor sharing the array's memory (zero-copy; the array is kept alive). Read-only arrays\n"
     "give read-only tensors; negative strides are kept. TypeError for non-arrays and\n"
     "object/structured dtypes; ValueError for non-native byte order and byte strides that are\n"
     "not a multiple of the item size."},
    {NULL, NULL, 0, NULL},
};

int bridge_numpy_init(PyObject *mod) { return PyModule_AddFunctions(mod, numpy_functions); }
