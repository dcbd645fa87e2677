/* Values in and out of host memory in C: item(), tolist(), scalar stores
 * (t[i, j] = 1.0), clones (dense: one memcpy; other layouts: the copy
 * kernel of copy.c) and fresh allocations. The conversions follow NumPy's;
 * what is not handled here goes to the Python class (ml_dtypes types, casts
 * NumPy defines differently from C). */

#include "core.h"

#include <float.h>
#include <math.h>

#if PY_VERSION_HEX >= 0x030B0000
#define UNPACK2(p) PyFloat_Unpack2((const char *)(p), 1)
#define PACK2(x, p) PyFloat_Pack2((x), (char *)(p), 1)
#else
#define UNPACK2(p) _PyFloat_Unpack2((const unsigned char *)(p), 1)
#define PACK2(x, p) _PyFloat_Pack2((x), (unsigned char *)(p), 1)
#endif

/* The element at `p` as a Python scalar; NULL without an exception when C
 * has no conversion for the dtype (the Python layer's then). */
static PyObject *load_scalar(const DTypeObject *dt, const char *p) {
  switch (dt->code) {
    case kDLBool:
      return PyBool_FromLong(*(const uint8_t *)p != 0);
    case kDLInt:
      switch (dt->bits) {
        case 8: return PyLong_FromLong(*(const int8_t *)p);
        case 16: { int16_t v; memcpy(&v, p, 2); return PyLong_FromLong(v); }
        case 32: { int32_t v; memcpy(&v, p, 4); return PyLong_FromLong(v); }
        case 64: { int64_t v; memcpy(&v, p, 8); return PyLong_FromLongLong(v); }
      }
      break;
    case kDLUInt:
      switch (dt->bits) {
        case 8: return PyLong_FromLong(*(const uint8_t *)p);
        case 16: { uint16_t v; memcpy(&v, p, 2); return PyLong_FromLong(v); }
        case 32: { uint32_t v; memcpy(&v, p, 4); return PyLong_FromUnsignedLong(v); }
        case 64: { uint64_t v; memcpy(&v, p, 8); return PyLong_FromUnsignedLongLong(v); }
      }
      break;
    case kDLFloat:
      switch (dt->bits) {
        case 16: { double v = UNPACK2(p); return v == -1.0 && PyErr_Occurred() ? NULL : PyFloat_FromDouble(v); }
        case 32: { float v; memcpy(&v, p, 4); return PyFloat_FromDouble(v); }
        case 64: { double v; memcpy(&v, p, 8); return PyFloat_FromDouble(v); }
      }
      break;
    case kDLBfloat:
      if (dt->bits == 16) {
        uint16_t hi;
        memcpy(&hi, p, 2);
        uint32_t bits = (uint32_t)hi << 16;
        float v;
        memcpy(&v, &bits, 4);
        return PyFloat_FromDouble(v);
      }
      break;
    case kDLComplex:
      if (dt->bits == 64) {
        float v[2];
        memcpy(v, p, 8);
        return PyComplex_FromDoubles(v[0], v[1]);
      }
      if (dt->bits == 128) {
        double v[2];
        memcpy(v, p, 16);
        return PyComplex_FromDoubles(v[0], v[1]);
      }
      break;
  }
  return NULL;
}

static int has_c_conversion(const DTypeObject *dt) {
  return dt->code == kDLBool || dt->code == kDLInt || dt->code == kDLUInt ||
         (dt->code == kDLFloat && dt->bits >= 16) || (dt->code == kDLBfloat && dt->bits == 16) ||
         dt->code == kDLComplex;
}

/* 0 when the tensor's bytes can be read from here, else -1 with RuntimeError. */
static int check_readable(TensorObject *t) {
  if (!bridge_host_accessible(t->storage->dev_type)) {
    PyObject *dev = bridge_storage_device(t->storage);
    if (dev != NULL) {
      PyErr_Format(PyExc_RuntimeError, "storage on %S cannot be read or written from the host", dev);
      Py_DECREF(dev);
    }
    return -1;
  }
  return bridge_tensor_check_bounds(t, PyExc_RuntimeError);
}

static PyObject *tensor_item(TensorObject *t, PyObject *unused) {
  (void)unused;
  int64_t n = bridge_numel(t);
  if (n != 1)
    return PyErr_Format(PyExc_ValueError, "a Tensor with %lld elements cannot be converted to Scalar",
                        (long long)n);
  if (!has_c_conversion(t->dtype)) return bridge_upcall_call(UP_ITEM_SLOW, t, NULL);
  if (check_readable(t) < 0) return NULL;
  return load_scalar(t->dtype, bridge_tensor_data(t));
}

static PyObject *tolist_dim(TensorObject *t, int d, const char *p) {
  if (d == t->ndim) return load_scalar(t->dtype, p);
  /* a dim of size 0 or 1 never steps (its stride may be anything); the others
   * step inside the storage, so their byte stride fits */
  int64_t n = t->shape[d], step = 0;
  if (n > 1 && __builtin_mul_overflow(t->strides[d], (int64_t)t->dtype->itemsize, &step)) step = 0;
  PyObject *list = PyList_New((Py_ssize_t)n);
  if (list == NULL) return NULL;
  for (int64_t i = 0; i < n; i++) {
    PyObject *v = tolist_dim(t, d + 1, p + i * step);
    if (v == NULL) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, v);
  }
  return list;
}

static PyObject *tensor_tolist(TensorObject *t, PyObject *unused) {
  (void)unused;
  if (!has_c_conversion(t->dtype)) return bridge_upcall_call(UP_TOLIST_SLOW, t, NULL);
  if (check_readable(t) < 0) return NULL;
  return tolist_dim(t, 0, bridge_tensor_data(t));
}

/* Store a Python bool/int/float/complex at `addr` as NumPy's unsafe cast
 * would. 1 stored, 0 not handled here (the caller goes to NumPy), -1 error. */
int bridge_store_scalar(TensorObject *t, char *addr, PyObject *value) {
  const DTypeObject *dt = t->dtype;
  int is_bool = PyBool_Check(value), is_int = PyLong_CheckExact(value) || is_bool;
  int is_float = PyFloat_CheckExact(value), is_complex = PyComplex_CheckExact(value);
  if (!is_int && !is_float && !is_complex) return 0;
  double re = 0.0, im = 0.0;
  long long iv = 0;
  if (is_int) {
    int overflow;
    iv = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) return 0; /* NumPy's object-to-int rules: its business */
    re = (double)iv;
  } else if (is_float) {
    re = PyFloat_AS_DOUBLE(value);
  } else {
    re = PyComplex_RealAsDouble(value);
    im = PyComplex_ImagAsDouble(value);
  }
  if (is_complex && dt->code != kDLComplex) return 0; /* NumPy warns and drops the imaginary part */
  switch (dt->code) {
    case kDLBool:
      *(uint8_t *)addr = is_int ? iv != 0 : re != 0.0;
      return 1;
    case kDLInt:
    case kDLUInt: {
      if (!is_int) {
        /* C's float-to-int conversion is undefined out of range: NumPy's then */
        if (!(re > -9.2e18 && re < 9.2e18)) return 0;
        iv = (long long)re;
      }
      uint64_t u = (uint64_t)iv; /* wraps modulo 2**bits, as NumPy's integer casts */
      switch (dt->bits) {
        case 8: *(uint8_t *)addr = (uint8_t)u; return 1;
        case 16: { uint16_t v = (uint16_t)u; memcpy(addr, &v, 2); return 1; }
        case 32: { uint32_t v = (uint32_t)u; memcpy(addr, &v, 4); return 1; }
        case 64: memcpy(addr, &u, 8); return 1;
      }
      return 0;
    }
    case kDLFloat:
      switch (dt->bits) {
        case 16:
          if (PACK2(re, addr) < 0) {
            PyErr_Clear(); /* overflow: NumPy gives inf */
            return 0;
          }
          return 1;
        case 32: {
          float v = isfinite(re) && fabs(re) > FLT_MAX ? (re > 0 ? INFINITY : -INFINITY) : (float)re;
          memcpy(addr, &v, 4);
          return 1;
        }
        case 64:
          memcpy(addr, &re, 8);
          return 1;
      }
      return 0;
    case kDLComplex:
      if (dt->bits == 64) {
        float v[2] = {(float)re, (float)im};
        if ((isfinite(re) && fabs(re) > FLT_MAX) || (isfinite(im) && fabs(im) > FLT_MAX)) return 0;
        memcpy(addr, v, 8);
        return 1;
      }
      if (dt->bits == 128) {
        double v[2] = {re, im};
        memcpy(addr, v, 16);
        return 1;
      }
      return 0;
  }
  return 0;
}

/* -------------------------------------------------------------- copies */

PyObject *bridge_tensor_rowmajor_copy(TensorObject *t) {
  if (bridge_tensor_check_bounds(t, PyExc_RuntimeError) < 0) return NULL;
  int64_t strides[BRIDGE_MAX_NDIM], numel = bridge_numel(t), nbytes;
  if (__builtin_mul_overflow(numel, (int64_t)t->dtype->itemsize, &nbytes))
    return PyErr_NoMemory(); /* unreachable: the view lies in a storage */
  StorageObject *s = bridge_storage_alloc(nbytes, 0);
  if (s == NULL) return NULL;
  bridge_contiguous_strides(t->ndim, t->shape, strides);
  PyObject *out = bridge_tensor_new(s, t->dtype, t->ndim, t->shape, strides, 0, GEOM_DERIVED);
  Py_DECREF(s);
  if (out == NULL) return NULL;
  if (bridge_is_contiguous(t->ndim, t->shape, t->strides) && nbytes < (1 << 20)) {
    if (nbytes) memcpy(s->data, bridge_tensor_data(t), (size_t)nbytes); /* (out holds s) */
  } else if (bridge_copy_tensor((TensorObject *)out, t) < 0) {
    Py_CLEAR(out);
  }
  return out;
}

/* clone(memory_format=None | contiguous_format) of host memory: a dense
 * tensor is one memcpy into fresh memory with the same strides; any other
 * layout asked for contiguous_format goes through the copy kernel (copy.c)
 * into fresh contiguous memory. Other formats, preserve_format of a
 * non-dense tensor and device memory are the Python class's (_clone_slow). */
static PyObject *tensor_clone(TensorObject *t, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames) {
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  PyObject *format = nargs + nkw == 1 ? args[0] : Py_None;
  int named = nargs + nkw == 0 ||
              (nargs + nkw == 1 &&
               (nkw == 0 || PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "memory_format") == 0));
  PyObject *contiguous = bridge_upcall_peek(UP_CONTIGUOUS_FORMAT);
  int to_contiguous = named && format != Py_None && format == contiguous && contiguous != NULL;
  int dense = bridge_is_non_overlapping_and_dense(t->ndim, t->shape, t->strides);
  int host = bridge_host_accessible(t->storage->dev_type);
  if (host && to_contiguous && !bridge_is_contiguous(t->ndim, t->shape, t->strides)) return bridge_tensor_rowmajor_copy(t);
  if (!host || !dense || !named || (format != Py_None && !to_contiguous)) {
    /* (tensor, *args, **kwargs): the tensor goes in front of the arguments */
    PyObject *fn = bridge_upcall(UP_CLONE_SLOW);
    if (fn == NULL) return NULL;
    PyObject **stack = PyMem_New(PyObject *, nargs + nkw + 1);
    if (stack == NULL) return PyErr_NoMemory();
    stack[0] = (PyObject *)t;
    for (Py_ssize_t i = 0; i < nargs + nkw; i++) stack[i + 1] = args[i];
    PyObject *r = PyObject_Vectorcall(fn, stack, (size_t)nargs + 1, kwnames);
    PyMem_Free(stack);
    return r;
  }
  /* dense (and C-contiguous when contiguous_format was asked): the bytes it spans, as they are */
  if (bridge_tensor_check_bounds(t, PyExc_RuntimeError) < 0) return NULL;
  int64_t isz = t->dtype->itemsize, n = t->hi - t->lo;
  StorageObject *s = bridge_storage_alloc(n * isz, 0);
  if (s == NULL) return NULL;
  /* a small one is one memcpy here; a large one is the kernel's (without
   * the GIL, split between threads) */
  int small = n * isz < (1 << 20);
  if (n && small) memcpy(s->data, t->storage->data + t->lo * isz, (size_t)(n * isz));
  /* contiguous_format: row-major strides, also for dims of one element (whose
   * strides a contiguous view may carry from anywhere: x.flip(0)[:1]) */
  int64_t rowmajor[BRIDGE_MAX_NDIM];
  if (to_contiguous) bridge_contiguous_strides(t->ndim, t->shape, rowmajor);
  PyObject *out = bridge_tensor_new(s, t->dtype, t->ndim, t->shape, to_contiguous ? rowmajor : t->strides,
                                    n ? t->offset - t->lo : 0, GEOM_DERIVED);
  Py_DECREF(s);
  if (out != NULL && !small && bridge_copy_tensor((TensorObject *)out, t) < 0) Py_CLEAR(out);
  return out;
}

/* ---------------------------------------------------------- factories */

/* A contiguous tensor of `shape` in fresh, 64-byte aligned host memory
 * (zero-filled when zeroed). ValueError for a negative size, a tensor past
 * the bytes a storage addresses, and contiguous strides past int64 (only an
 * empty tensor's can be: a tensor that fits has strides below its size). */
static PyObject *new_contiguous(int n, const int64_t *shape, DTypeObject *dt, int zeroed) {
  int64_t numel = 1, nbytes, strides[BRIDGE_MAX_NDIM];
  for (int i = 0; i < n; i++) {
    if (shape[i] < 0)
      return PyErr_Format(PyExc_ValueError, "negative dimension %lld in size", (long long)shape[i]);
    if (__builtin_mul_overflow(numel, shape[i], &numel)) numel = -1;
  }
  if (numel < 0 || __builtin_mul_overflow(numel, (int64_t)dt->itemsize, &nbytes)) {
    /* name the size: the product in Python ints */
    PyObject *tup = PyTuple_New(n), *total = PyLong_FromLong(dt->itemsize);
    for (int i = 0; tup && total && i < n; i++) {
      PyObject *dim = PyLong_FromLongLong(shape[i]);
      PyTuple_SET_ITEM(tup, i, Py_NewRef(dim));
      Py_SETREF(total, dim ? PyNumber_Multiply(total, dim) : NULL);
      Py_XDECREF(dim);
    }
    if (tup && total)
      PyErr_Format(PyExc_ValueError,
                   "a tensor of size %R needs %S bytes, larger than the %lld bytes (2**63 - 1) a "
                   "storage can address",
                   tup, total, (long long)BRIDGE_MAX_NBYTES);
    Py_XDECREF(tup);
    Py_XDECREF(total);
    return NULL;
  }
  if (bridge_contiguous_strides(n, shape, strides) < 0) { /* _C.contiguous_strides's words */
    PyObject *tup = bridge_dims_tuple(n, shape);
    if (tup != NULL)
      PyErr_Format(PyExc_ValueError, "the contiguous strides of size %R do not fit in a 64-bit integer", tup);
    Py_XDECREF(tup);
    return NULL;
  }
  StorageObject *s = bridge_storage_alloc(nbytes, zeroed);
  if (s == NULL) return NULL;
  PyObject *out = bridge_tensor_new(s, dt, n, shape, strides, 0, GEOM_USER);
  Py_DECREF(s);
  return out;
}

/* new_empty(size, dtype, zeroed): a contiguous tensor in fresh memory. */
static PyObject *py_new_empty(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 3 || !DType_Check(args[1]))
    return PyErr_Format(PyExc_TypeError, "new_empty(size, dtype, zeroed)");
  int64_t shape[BRIDGE_MAX_NDIM];
  PyObject *size = args[0];
  if (PyTuple_Check(size) && PyTuple_GET_SIZE(size) == 1 && !PyIndex_Check(PyTuple_GET_ITEM(size, 0)))
    size = PyTuple_GET_ITEM(size, 0); /* empty((2, 3)) as well as empty(2, 3) */
  int n = bridge_parse_dims(size, shape, BRIDGE_MAX_NDIM, "size");
  if (n < 0) return NULL;
  int zeroed = PyObject_IsTrue(args[2]);
  if (zeroed < 0) return NULL;
  return new_contiguous(n, shape, (DTypeObject *)args[1], zeroed);
}

/* bridge.empty and bridge.zeros. The C path takes the common call: sizes
 * as ints or one sequence of them, dtype None or a bridge dtype, device None
 * or "cpu", memory_format contiguous_format (empty). Every other call (other
 * dtype spellings and devices, the other layouts, an unknown keyword) goes
 * as it came to the Python general path (the up-calls empty_slow and
 * zeros_slow: bridge/core/factories.py), whose errors are the reference. */
static PyObject *str_dtype, *str_device, *str_memory_format;

static PyObject *factory_general(int zeroed, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  PyObject *fn = bridge_upcall(zeroed ? UP_ZEROS_SLOW : UP_EMPTY_SLOW);
  return fn != NULL ? PyObject_Vectorcall(fn, args, (size_t)nargsf, kwnames) : NULL;
}

/* device="cpu" goes the general path's other way (bridge/core/factories.py
 * _new: the sizes read by strides.as_shape, checked by Python), which reads
 * some sizes differently from the C parser and words its errors otherwise.
 * So C takes it only where both agree: exact ints within int64, given as
 * arguments or as one tuple or list (or a tuple subclass that iterates as a
 * tuple: torch.Size), for a tensor that fits; -1 for the general path. */
static int plain_dims(PyObject *const *args, Py_ssize_t nargs, int itemsize, int64_t *shape) {
  PyObject *const *items = args;
  Py_ssize_t n = nargs;
  if (nargs == 1 && !PyLong_CheckExact(args[0])) {
    PyObject *seq = args[0];
    int tuple = PyTuple_CheckExact(seq) || PyList_CheckExact(seq) ||
                (PyTuple_Check(seq) && Py_TYPE(seq)->tp_iter == PyTuple_Type.tp_iter && !PyIndex_Check(seq));
    if (!tuple) return -1;
    items = PySequence_Fast_ITEMS(seq);
    n = PySequence_Fast_GET_SIZE(seq);
  }
  if (n > BRIDGE_MAX_NDIM) return -1;
  int64_t numel = 1, nbytes, strides[BRIDGE_MAX_NDIM];
  for (Py_ssize_t i = 0; i < n; i++) { /* exact ints: no Python code runs, a list stays as it is */
    int overflow = 0;
    if (!PyLong_CheckExact(items[i])) return -1;
    long long x = PyLong_AsLongLongAndOverflow(items[i], &overflow);
    if (overflow || x < 0 || __builtin_mul_overflow(numel, (int64_t)x, &numel)) return -1;
    shape[i] = x;
  }
  if (__builtin_mul_overflow(numel, (int64_t)itemsize, &nbytes) ||
      bridge_contiguous_strides((int)n, shape, strides) < 0)
    return -1;
  return (int)n;
}

static PyObject *factory(int zeroed, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames != NULL ? PyTuple_GET_SIZE(kwnames) : 0;
  PyObject *dtype = Py_None, *device = Py_None, *format = NULL;
  for (Py_ssize_t i = 0; i < nkw; i++) {
    /* a name in the source is interned: the same object; one made at run time is compared */
    PyObject *name = PyTuple_GET_ITEM(kwnames, i),
             **slot = name == str_dtype ? &dtype : name == str_device ? &device : name == str_memory_format ? &format : NULL;
    if (slot == NULL && PyUnicode_Check(name))
      slot = PyUnicode_Compare(name, str_dtype) == 0    ? &dtype
             : PyUnicode_Compare(name, str_device) == 0 ? &device
             : PyUnicode_Compare(name, str_memory_format) == 0 ? &format
                                                                : NULL;
    if (slot == NULL || (zeroed && slot == &format)) /* zeros has no memory_format */
      return factory_general(zeroed, args, nargsf, kwnames); /* Python's own TypeError */
    *slot = args[nargs + i];
  }
  /* float32: the default; its class, bridge.dtype, is every bridge dtype's
   * (an exact match, as the general path's fast test). Kept once found: the
   * registry holds it for good (a dtype is never replaced). */
  static DTypeObject *f32;
  if (f32 == NULL) f32 = bridge_dtype_from_dlpack(kDLFloat, 32, 1);
  DTypeObject *dt = dtype == Py_None ? f32 : f32 != NULL && Py_TYPE(dtype) == Py_TYPE(f32) ? (DTypeObject *)dtype : NULL;
  int cpu = device != Py_None;
  if (dt == NULL || (cpu && !(PyUnicode_CheckExact(device) && PyUnicode_CompareWithASCIIString(device, "cpu") == 0)) ||
      (format != NULL && format != bridge_upcall_peek(UP_CONTIGUOUS_FORMAT)))
    return factory_general(zeroed, args, nargsf, kwnames);
  int64_t shape[BRIDGE_MAX_NDIM];
  int n;
  if (cpu) {
    n = plain_dims(args, nargs, dt->itemsize, shape);
    if (n < 0) return factory_general(zeroed, args, nargsf, kwnames);
  } else {
    /* empty((2, 3)) as well as empty(2, 3): one argument that is not an int is the sequence */
    n = nargs == 1 && !PyIndex_Check(args[0]) ? bridge_parse_dims(args[0], shape, BRIDGE_MAX_NDIM, "size")
                                              : bridge_parse_dim_args(args, nargs, shape, BRIDGE_MAX_NDIM, "size");
    if (n < 0) return NULL;
  }
  return new_contiguous(n, shape, dt, zeroed);
}

static PyObject *py_empty(PyObject *mod, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  (void)mod;
  return factory(0, args, nargsf, kwnames);
}

static PyObject *py_zeros(PyObject *mod, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  (void)mod;
  return factory(1, args, nargsf, kwnames);
}

PyMethodDef bridge_value_methods[] = {
    {"item", (PyCFunction)tensor_item, METH_NOARGS,
     "item($self, /)\n--\n\nThe single element as a Python scalar; ValueError unless numel() == 1."},
    {"tolist", (PyCFunction)tensor_tolist, METH_NOARGS,
     "tolist($self, /)\n--\n\nThe elements as (nested) Python lists of Python scalars."},
    {"clone", (PyCFunction)(void (*)(void))tensor_clone, METH_FASTCALL | METH_KEYWORDS,
     "clone($self, memory_format=None)\n--\n\nA copy in new memory with the "
     "layout of memory_format (None or preserve_format: the same strides when dense, else the same dim "
     "order). Device memory is copied on its device (CUDA: CuPy); RuntimeError when no library "
     "can."},
    {NULL, NULL, 0, NULL},
};

/* The contract of both factories after their first paragraph (which is the
 * docstring of their general path in bridge/core/factories.py): the
 * arguments, then the errors. */
#define FACTORY_ARGS                                                                                  \
  "size: ints, or one sequence of ints (a tuple, list or torch.Size); no size gives a 0-d tensor.\n" \
  "dtype: a bridge dtype or any spelling bridge.get_dtype reads (a name, a NumPy or torch dtype,\n"  \
  "Python's bool, int, float, complex); None is float32. device: None or the CPU (bridge\n"          \
  "allocates only host memory)."
#define FACTORY_RAISES                                                                                \
  "Raises TypeError for a size that is not an int (a float, a str, a nested sequence), an unknown\n" \
  "dtype and an unknown keyword; ValueError for a negative size, more than 64 dimensions, a size\n"  \
  "past int64, a tensor of more than 2**63 - 1 bytes, an unknown device and a NumPy dtype of\n"      \
  "non-native byte order; RuntimeError for a device other than the CPU."

static PyMethodDef value_functions[] = {
    {"new_empty", (PyCFunction)(void (*)(void))py_new_empty, METH_FASTCALL,
     "new_empty(size, dtype, zeroed, /)\n--\n\nA contiguous tensor in fresh, 64-byte aligned "
     "host memory (zero-filled when zeroed)."},
    {"empty", (PyCFunction)(void (*)(void))py_empty, METH_FASTCALL | METH_KEYWORDS,
     "empty(*size, dtype=None, device=None, memory_format=bridge.contiguous_format)\n--\n\n"
     "An uninitialised tensor of ``size`` (default dtype float32) in new 64-byte\n"
     "aligned memory, laid out as ``memory_format``.\n\n" FACTORY_ARGS "\n"
     "memory_format: contiguous_format (row-major), channels_last (a 4-d size; ValueError\n"
     "otherwise), channels_last_3d (5-d) or preserve_format (row-major here); TypeError for\n"
     "anything else.\n\n" FACTORY_RAISES},
    {"zeros", (PyCFunction)(void (*)(void))py_zeros, METH_FASTCALL | METH_KEYWORDS,
     "zeros(*size, dtype=None, device=None)\n--\n\n"
     "A tensor of ``size`` filled with zeros (default dtype float32).\n\n" FACTORY_ARGS "\n\n"
     FACTORY_RAISES},
    {NULL, NULL, 0, NULL},
};

int bridge_values_init(PyObject *mod) {
  if (!(str_dtype = PyUnicode_InternFromString("dtype")) || !(str_device = PyUnicode_InternFromString("device")) ||
      !(str_memory_format = PyUnicode_InternFromString("memory_format")))
    return -1;
  return PyModule_AddFunctions(mod, value_functions);
}
