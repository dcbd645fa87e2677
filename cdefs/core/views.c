/* The everyday view ops of TensorBase in C: permute, transpose, view/reshape,
 * (un)squeeze, expand, narrow, select, flatten, is_contiguous. Each builds its
 * result with bridge_tensor_new; the stride rules they share (contiguity, -1
 * inference, dim wrapping) are geometry.c's, and view_strides below is the
 * one home of "can this shape be a view". tests/core/test_views_property.py holds
 * every op to NumPy doing the same thing to the same memory. Cases these do
 * not cover (advanced indexing, dtype views, copies, other memory formats) go
 * to the Python class's _*_slow methods. */

#include "views.h"

/* Sizes given as *args of ints or as one sequence; returns the count or -1. */
static int parse_size_args(PyObject *const *args, Py_ssize_t nargs, int64_t *out, const char *what) {
  if (nargs == 1 && !PyLong_Check(args[0]) && !PyIndex_Check(args[0]))
    return bridge_parse_dims(args[0], out, MAXD, what);
  if (nargs > MAXD) {
    PyErr_Format(PyExc_ValueError, "%s has %zd entries; a tensor has at most %d dimensions", what,
                 nargs, MAXD);
    return -1;
  }
  for (Py_ssize_t i = 0; i < nargs; i++) {
    if (PyBool_Check(args[i]) || !PyIndex_Check(args[i])) {
      PyObject *tup = PyTuple_New(nargs);
      for (Py_ssize_t j = 0; tup && j < nargs; j++) PyTuple_SET_ITEM(tup, j, Py_NewRef(args[j]));
      PyErr_Format(PyExc_TypeError, "%s must be a sequence of ints, got %R", what, tup);
      Py_XDECREF(tup);
      return -1;
    }
    int err = 0;
    out[i] = as_int64(args[i], &err);
    if (err) {
      if (PyErr_ExceptionMatches(PyExc_IndexError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s %R does not fit in a 64-bit integer", what, args[i]);
      }
      return -1;
    }
  }
  return (int)nargs;
}

/* Strides for viewing (shape, strides) as new_shape, or 0 when a copy is
 * needed (torch's computeStride). */
static int view_strides(int nd, const int64_t *shape, const int64_t *strides, int nn,
                        const int64_t *new_shape, int64_t *out) {
  if (nd == 0) {
    for (int i = 0; i < nn; i++) out[i] = 1;
    return 1;
  }
  int64_t numel = 1;
  for (int i = 0; i < nd; i++) numel *= shape[i];
  if (numel == 0) {
    int same = nd == nn;
    for (int i = 0; same && i < nd; i++) same = shape[i] == new_shape[i];
    if (same)
      memcpy(out, strides, (size_t)nd * sizeof(int64_t));
    else
      bridge_contiguous_strides(nn, new_shape, out);
    return 1;
  }
  int view_d = nn - 1;
  int64_t chunk_base_stride = strides[nd - 1], tensor_numel = 1, view_numel = 1;
  for (int td = nd - 1; td >= 0; td--) {
    tensor_numel *= shape[td];
    int64_t chunk;
    if (__builtin_mul_overflow(tensor_numel, chunk_base_stride, &chunk)) return 0;
    if (td == 0 || (shape[td - 1] != 1 && strides[td - 1] != chunk)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d] == 1)) {
        /* a stride that does not fit belongs to no real step: copy instead */
        if (__builtin_mul_overflow(view_numel, chunk_base_stride, &out[view_d])) return 0;
        view_numel *= new_shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return 0;
      if (td > 0) {
        chunk_base_stride = strides[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

/* ------------------------------------------------------------- the ops */

static PyObject *tensor_permute(TensorObject *t, PyObject *const *args, Py_ssize_t nargs) {
  int64_t dims[MAXD];
  int n = parse_size_args(args, nargs, dims, "dims");
  if (n < 0) return NULL;
  int nd = t->ndim;
  if (n != nd)
    return PyErr_Format(PyExc_ValueError, "permute: number of dims %d does not match tensor ndim %d",
                        n, nd);
  int64_t shape[MAXD], strides[MAXD];
  uint64_t seen = 0;
  for (int i = 0; i < nd; i++) {
    int d;
    if (bridge_wrap_dim(NULL, dims[i], nd, &d) < 0) return NULL;
    if (seen & ((uint64_t)1 << d)) {
      PyObject *r = bridge_dims_tuple(n, dims);
      PyErr_Format(PyExc_ValueError, "permute: repeated dim in %R", r);
      Py_XDECREF(r);
      return NULL;
    }
    seen |= (uint64_t)1 << d;
    shape[i] = t->shape[d];
    strides[i] = t->strides[d];
  }
  return view_of(t, nd, shape, strides, t->offset);
}

static PyObject *transposed(TensorObject *t, int a, int b) {
  int64_t shape[MAXD], strides[MAXD];
  memcpy(shape, t->shape, (size_t)t->ndim * sizeof(int64_t));
  memcpy(strides, t->strides, (size_t)t->ndim * sizeof(int64_t));
  if (t->ndim) {
    int64_t s = shape[a], st = strides[a];
    shape[a] = shape[b];
    strides[a] = strides[b];
    shape[b] = s;
    strides[b] = st;
  }
  return view_of(t, t->ndim, shape, strides, t->offset);
}

static PyObject *tensor_transpose(TensorObject *t, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2) return PyErr_Format(PyExc_TypeError, "transpose() takes 2 dims (%zd given)", nargs);
  int a, b;
  if (bridge_wrap_dim(args[0], 0, t->ndim, &a) < 0 || bridge_wrap_dim(args[1], 0, t->ndim, &b) < 0)
    return NULL;
  return transposed(t, a, b);
}

static PyObject *tensor_t(TensorObject *t, PyObject *unused) {
  (void)unused;
  if (t->ndim > 2)
    return PyErr_Format(PyExc_ValueError, "t() expects a tensor with <= 2 dimensions, but self is %dD",
                        t->ndim);
  return transposed(t, 0, t->ndim ? t->ndim - 1 : 0);
}

static PyObject *get_T(TensorObject *t, void *c) {
  (void)c;
  int64_t shape[MAXD], strides[MAXD];
  for (int i = 0; i < t->ndim; i++) {
    shape[i] = t->shape[t->ndim - 1 - i];
    strides[i] = t->strides[t->ndim - 1 - i];
  }
  return view_of(t, t->ndim, shape, strides, t->offset);
}

static PyObject *get_mT(TensorObject *t, void *c) {
  (void)c;
  if (t->ndim < 2)
    return PyErr_Format(PyExc_ValueError,
                        "tensor.mT is only supported on matrices or batches of matrices. Got %d-D "
                        "tensor.",
                        t->ndim);
  return transposed(t, t->ndim - 2, t->ndim - 1);
}

static PyObject *tensor_unsqueeze(TensorObject *t, PyObject *dim) {
  int d;
  if (t->ndim >= MAXD)
    return PyErr_Format(PyExc_ValueError, "a tensor has at most %d dimensions", MAXD);
  if (bridge_wrap_dim(dim, 0, t->ndim + 1, &d) < 0) return NULL;
  int64_t shape[MAXD], strides[MAXD];
  for (int i = 0, j = 0; i <= t->ndim; i++) {
    if (i == d) {
      shape[i] = 1;
      strides[i] = d >= t->ndim ? 1 : mul0(t->strides[d], t->shape[d]);
    } else {
      shape[i] = t->shape[j];
      strides[i] = t->strides[j++];
    }
  }
  return view_of(t, t->ndim + 1, shape, strides, t->offset);
}

static PyObject *tensor_squeeze(TensorObject *t, PyObject *const *args, Py_ssize_t nargs) {
  uint64_t drop = 0;
  int nd = t->ndim;
  if (nargs > 1) return PyErr_Format(PyExc_TypeError, "squeeze() takes at most 1 argument");
  if (nargs == 0 || args[0] == Py_None) {
    for (int i = 0; i < nd; i++)
      if (t->shape[i] == 1) drop |= (uint64_t)1 << i;
  } else if (PyTuple_Check(args[0]) || PyList_Check(args[0])) {
    int64_t dims[MAXD];
    int n = bridge_parse_dims(args[0], dims, MAXD, "dim");
    if (n < 0) return NULL;
    for (int i = 0; i < n; i++) {
      int d;
      if (bridge_wrap_dim(NULL, dims[i], nd, &d) < 0) return NULL;
      if (nd && t->shape[d] == 1) drop |= (uint64_t)1 << d;
    }
  } else {
    int d;
    if (bridge_wrap_dim(args[0], 0, nd, &d) < 0) return NULL;
    if (nd && t->shape[d] == 1) drop |= (uint64_t)1 << d;
  }
  int64_t shape[MAXD], strides[MAXD];
  int out = 0;
  for (int i = 0; i < nd; i++) {
    if (drop & ((uint64_t)1 << i)) continue;
    shape[out] = t->shape[i];
    strides[out++] = t->strides[i];
  }
  return view_of(t, out, shape, strides, t->offset);
}

static PyObject *expand_to(TensorObject *t, int n, const int64_t *sizes) {
  int nd = t->ndim;
  if (n < nd) {
    return PyErr_Format(PyExc_ValueError,
                        "expand: the number of sizes provided (%d) must be greater or equal to the "
                        "number of dimensions in the tensor (%d)",
                        n, nd);
  }
  int lead = n - nd;
  int64_t shape[MAXD], strides[MAXD];
  for (int i = 0; i < n; i++) {
    int64_t size = sizes[i];
    if (i < lead) {
      if (size < 0) {
        PyObject *r = bridge_dims_tuple(n, sizes);
        PyErr_Format(PyExc_ValueError, "expand: -1 is not allowed in a new leading dimension (%R)", r);
        Py_XDECREF(r);
        return NULL;
      }
      shape[i] = size;
      strides[i] = 0;
      continue;
    }
    int64_t cur = t->shape[i - lead], st = t->strides[i - lead];
    if (size == -1) size = cur;
    if (size < 0) {
      PyObject *r = bridge_dims_tuple(n, sizes);
      PyErr_Format(PyExc_ValueError, "expand: invalid size %lld in %R", (long long)size, r);
      Py_XDECREF(r);
      return NULL;
    }
    if (cur == size) {
      strides[i] = st;
    } else if (cur == 1) {
      strides[i] = 0;
    } else {
      PyObject *r = bridge_dims_tuple(n, sizes);
      PyErr_Format(PyExc_ValueError,
                   "expand: size %lld of dimension %d cannot be expanded to %lld (target shape "
                   "%R); only size-1 dimensions can be expanded",
                   (long long)cur, i - lead, (long long)size, r);
      Py_XDECREF(r);
      return NULL;
    }
    shape[i] = size;
  }
  return view_of(t, n, shape, strides, t->offset);
}

static PyObject *tensor_expand(TensorObject *t, PyObject *const *args, Py_ssize_t nargs) {
  int64_t sizes[MAXD];
  int n = parse_size_args(args, nargs, sizes, "size");
  return n < 0 ? NULL : expand_to(t, n, sizes);
}

static PyObject *tensor_expand_as(TensorObject *t, PyObject *other) {
  if (!Tensor_Check(other)) return PyErr_Format(PyExc_TypeError, "expand_as() expects a Tensor");
  TensorObject *o = (TensorObject *)other;
  return expand_to(t, o->ndim, o->shape);
}

static PyObject *tensor_broadcast_to(TensorObject *t, PyObject *shape) {
  int64_t sizes[MAXD];
  int n = bridge_parse_dims(shape, sizes, MAXD, "size");
  return n < 0 ? NULL : expand_to(t, n, sizes);
}

/* view(*shape): a dtype argument is the Python class's (_view_dtype). */
static PyObject *reshaped(TensorObject *t, PyObject *const *args, Py_ssize_t nargs, int copy_ok) {
  int64_t shape[MAXD], strides[MAXD];
  int n = parse_size_args(args, nargs, shape, "shape");
  if (n < 0) return NULL;
  if (bridge_infer_size(n, shape, bridge_numel(t)) < 0) return NULL;
  if (view_strides(t->ndim, t->shape, t->strides, n, shape, strides))
    return view_of(t, n, shape, strides, t->offset);
  PyObject *tup = bridge_dims_tuple(n, shape);
  if (tup == NULL) return NULL;
  PyObject *r;
  if (copy_ok) {
    r = bridge_upcall_call(UP_RESHAPE_COPY, t, tup);
  } else {
    PyObject *old = bridge_dims_tuple(t->ndim, t->shape), *ost = bridge_dims_tuple(t->ndim, t->strides);
    PyErr_Format(PyExc_ValueError,
                 "view size %R is not compatible with input tensor's size %R and stride %R (at "
                 "least one dimension spans across two contiguous subspaces); use .reshape(...) "
                 "instead",
                 tup, old, ost);
    Py_XDECREF(old);
    Py_XDECREF(ost);
    r = NULL;
  }
  Py_DECREF(tup);
  return r;
}

/* Whether view(x)'s one argument is a dtype rather than a size: anything not
 * int-like or a sequence is (bridge.get_dtype judges it); an int-like object
 * is a dtype only when its type says __dlpack_data_type__ (paddle's dtypes are
 * int-valued enums: view(paddle.float16) must not read as view(15)). */
static int is_dtype_arg(PyObject *x) {
  static PyObject *str_dlpack_data_type;
  if (PyLong_CheckExact(x) || PyTuple_Check(x) || PyList_Check(x)) return 0;
  if (!PyLong_Check(x) && !PyIndex_Check(x)) return 1;
  if (str_dlpack_data_type == NULL &&
      (str_dlpack_data_type = PyUnicode_InternFromString("__dlpack_data_type__")) == NULL)
    return -1;
  return PyObject_HasAttr((PyObject *)Py_TYPE(x), str_dlpack_data_type);
}

/* view(*shape), view(dtype) or view(dtype=dtype), as torch. */
static PyObject *tensor_view(TensorObject *t, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
    if (nargs != 0 || PyTuple_GET_SIZE(kwnames) != 1 ||
        PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "dtype") != 0)
      return PyErr_Format(PyExc_TypeError, "view() takes sizes or one dtype (view(dtype=...)), got keywords %R",
                          kwnames);
    return bridge_upcall_call(UP_VIEW_DTYPE, t, args[0]);
  }
  if (nargs == 1) {
    int is_dtype = is_dtype_arg(args[0]);
    if (is_dtype < 0) return NULL;
    if (is_dtype) return bridge_upcall_call(UP_VIEW_DTYPE, t, args[0]);
  }
  return reshaped(t, args, nargs, 0);
}

static PyObject *tensor_reshape(TensorObject *t, PyObject *const *args, Py_ssize_t nargs) {
  return reshaped(t, args, nargs, 1);
}

static PyObject *tensor_view_as(TensorObject *t, PyObject *other) {
  if (!Tensor_Check(other)) return PyErr_Format(PyExc_TypeError, "view_as() expects a Tensor");
  PyObject *shape = PyObject_GetAttrString(other, "shape");
  if (shape == NULL) return NULL;
  PyObject *r = reshaped(t, &shape, 1, 0);
  Py_DECREF(shape);
  return r;
}

static PyObject *tensor_reshape_as(TensorObject *t, PyObject *other) {
  if (!Tensor_Check(other)) return PyErr_Format(PyExc_TypeError, "reshape_as() expects a Tensor");
  PyObject *shape = PyObject_GetAttrString(other, "shape");
  if (shape == NULL) return NULL;
  PyObject *r = reshaped(t, &shape, 1, 1);
  Py_DECREF(shape);
  return r;
}

static PyObject *tensor_flatten(TensorObject *t, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames) {
  PyObject *start_obj = NULL, *end_obj = NULL;
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs > 2) return PyErr_Format(PyExc_TypeError, "flatten() takes at most 2 arguments");
  if (nargs > 0) start_obj = args[0];
  if (nargs > 1) end_obj = args[1];
  for (Py_ssize_t i = 0; i < nkw; i++) {
    const char *k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));
    if (k == NULL) return NULL;
    if (strcmp(k, "start_dim") == 0 && start_obj == NULL)
      start_obj = args[nargs + i];
    else if (strcmp(k, "end_dim") == 0 && end_obj == NULL)
      end_obj = args[nargs + i];
    else
      return PyErr_Format(PyExc_TypeError, "flatten() got an unexpected keyword argument '%s'", k);
  }
  int nd = t->ndim;
  if (nd == 0) {
    int64_t one = 1;
    return view_of(t, 1, &one, &one, t->offset);
  }
  int a = 0, b = nd - 1;
  if ((start_obj && bridge_wrap_dim(start_obj, 0, nd, &a) < 0) ||
      (end_obj && bridge_wrap_dim(end_obj, 0, nd, &b) < 0))
    return NULL;
  if (a > b)
    return PyErr_Format(PyExc_ValueError, "flatten() has invalid args: start_dim cannot come after end_dim");
  if (a == b) return Py_NewRef(t);
  int64_t shape[MAXD];
  int n = 0;
  for (int i = 0; i < a; i++) shape[n++] = t->shape[i];
  int64_t merged = 1;
  for (int i = a; i <= b; i++) merged *= t->shape[i];
  shape[n++] = merged;
  for (int i = b + 1; i < nd; i++) shape[n++] = t->shape[i];
  PyObject *tup = bridge_dims_tuple(n, shape);
  if (tup == NULL) return NULL;
  PyObject *r = reshaped(t, &tup, 1, 1);
  Py_DECREF(tup);
  return r;
}

static PyObject *tensor_narrow(TensorObject *t, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 3) return PyErr_Format(PyExc_TypeError, "narrow(dim, start, length) takes 3 arguments");
  if (t->ndim == 0) return PyErr_Format(PyExc_IndexError, "narrow() cannot be applied to a 0-dim tensor");
  int d, err = 0;
  if (bridge_wrap_dim(args[0], 0, t->ndim, &d) < 0) return NULL;
  int64_t start = as_int64(args[1], &err), length = err ? 0 : as_int64(args[2], &err);
  if (err) return NULL;
  int64_t size = t->shape[d];
  if (start < -size || start > size)
    return PyErr_Format(PyExc_IndexError, "start (%lld) out of range for dimension %d of size %lld",
                        (long long)start, d, (long long)size);
  if (start < 0) start += size;
  if (length < 0 || start + length > size)
    return PyErr_Format(PyExc_ValueError, "start (%lld) + length (%lld) exceeds dimension size (%lld)",
                        (long long)start, (long long)length, (long long)size);
  int64_t shape[MAXD], strides[MAXD];
  memcpy(shape, t->shape, (size_t)t->ndim * sizeof(int64_t));
  memcpy(strides, t->strides, (size_t)t->ndim * sizeof(int64_t));
  shape[d] = length;
  return view_of(t, t->ndim, shape, strides, length ? add0(t->offset, mul0(start, t->strides[d])) : t->offset);
}

static PyObject *tensor_select(TensorObject *t, PyObject *const *args, Py_ssize_t nargs) {
  if (nargs != 2) return PyErr_Format(PyExc_TypeError, "select(dim, index) takes 2 arguments");
  if (t->ndim == 0) return PyErr_Format(PyExc_IndexError, "select() cannot be applied to a 0-dim tensor");
  int d, err = 0;
  if (bridge_wrap_dim(args[0], 0, t->ndim, &d) < 0) return NULL;
  int64_t i = as_int64(args[1], &err), size = t->shape[d];
  if (err) return NULL;
  if (i < -size || i >= size)
    return PyErr_Format(PyExc_IndexError, "index %lld is out of bounds for dimension %d with size %lld",
                        (long long)i, d, (long long)size);
  int64_t shape[MAXD], strides[MAXD];
  for (int k = 0, j = 0; k < t->ndim; k++) {
    if (k == d) continue;
    shape[j] = t->shape[k];
    strides[j++] = t->strides[k];
  }
  return view_of(t, t->ndim - 1, shape, strides, add0(t->offset, mul0(i < 0 ? i + size : i, t->strides[d])));
}

static PyObject *registered_contiguous_format(void);

static PyObject *tensor_is_contiguous(TensorObject *t, PyObject *const *args, Py_ssize_t nargs,
                                      PyObject *kwnames) {
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs + nkw > 1) return PyErr_Format(PyExc_TypeError, "is_contiguous() takes at most 1 argument");
  if (nkw && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "memory_format") != 0)
    return PyErr_Format(PyExc_TypeError, "is_contiguous() got an unexpected keyword argument '%U'",
                        PyTuple_GET_ITEM(kwnames, 0));
  PyObject *fmt = nargs + nkw ? args[0] : NULL;
  /* None means contiguous_format: it lets the text signature show a default */
  if (fmt == NULL || fmt == Py_None || fmt == registered_contiguous_format())
    return PyBool_FromLong(bridge_is_contiguous(t->ndim, t->shape, t->strides));
  return bridge_upcall_call(UP_IS_CONTIGUOUS_SLOW, t, fmt);
}

static PyObject *registered_contiguous_format(void) { return bridge_upcall_peek(UP_CONTIGUOUS_FORMAT); }

#define FAST(name, fn, doc) {name, (PyCFunction)(void (*)(void))fn, METH_FASTCALL, doc}

PyMethodDef bridge_view_methods[] = {
    FAST("permute", tensor_permute,
         "permute($self, *dims)\n--\n\nA view with the dims reordered; ValueError unless dims is a "
         "permutation."),
    FAST("transpose", tensor_transpose,
         "transpose($self, dim0, dim1, /)\n--\n\nA view with dim0 and dim1 swapped."),
    FAST("swapaxes", tensor_transpose, "swapaxes($self, dim0, dim1, /)\n--\n\nAlias of transpose."),
    FAST("swapdims", tensor_transpose, "swapdims($self, dim0, dim1, /)\n--\n\nAlias of transpose."),
    {"t", (PyCFunction)tensor_t, METH_NOARGS,
     "t($self, /)\n--\n\nTranspose of a tensor of at most 2 dims (ValueError above that)."},
    {"unsqueeze", (PyCFunction)tensor_unsqueeze, METH_O,
     "unsqueeze($self, dim, /)\n--\n\nA view with a size-1 dim inserted at dim."},
    FAST("squeeze", tensor_squeeze,
         "squeeze($self, dim=None, /)\n--\n\nA view without size-1 dims (all of them, or those "
         "among dim)."),
    FAST("expand", tensor_expand,
         "expand($self, *sizes)\n--\n\nA broadcast view: size-1 dims stretched and new leading dims "
         "added with stride 0 (no memory is allocated); -1 keeps a size."),
    {"expand_as", (PyCFunction)tensor_expand_as, METH_O,
     "expand_as($self, other, /)\n--\n\nself.expand(other.shape)."},
    {"broadcast_to", (PyCFunction)tensor_broadcast_to, METH_O,
     "broadcast_to($self, shape, /)\n--\n\nA broadcast view with shape (stride 0 where stretched)."},
    {"view", (PyCFunction)(void (*)(void))tensor_view, METH_FASTCALL | METH_KEYWORDS,
     "view($self, *shape)\n--\n\nA view with a new shape (one size may be -1), or with another "
     "dtype (view(bridge.int32), view(dtype=torch.int32): any dtype bridge.get_dtype reads). "
     "ValueError when the strides do not allow a view (use reshape) or the dtype's size does "
     "not fit the layout."},
    FAST("reshape", tensor_reshape,
         "reshape($self, *shape)\n--\n\nA view with the new shape when the strides allow it, else a "
         "contiguous copy."),
    {"view_as", (PyCFunction)tensor_view_as, METH_O,
     "view_as($self, other, /)\n--\n\nself.view(other.shape)."},
    {"reshape_as", (PyCFunction)tensor_reshape_as, METH_O,
     "reshape_as($self, other, /)\n--\n\nself.reshape(other.shape)."},
    {"flatten", (PyCFunction)(void (*)(void))tensor_flatten, METH_FASTCALL | METH_KEYWORDS,
     "flatten($self, start_dim=0, end_dim=-1)\n--\n\nDims start_dim..end_dim merged into one: a "
     "view when the strides allow, else a copy."},
    FAST("narrow", tensor_narrow,
         "narrow($self, dim, start, length, /)\n--\n\nA view of length entries of dim starting at "
         "start (may be negative)."),
    FAST("select", tensor_select,
         "select($self, dim, index, /)\n--\n\nThe view at index along dim, with that dim removed."),
    {"is_contiguous", (PyCFunction)(void (*)(void))tensor_is_contiguous,
     METH_FASTCALL | METH_KEYWORDS,
     "is_contiguous($self, memory_format=None)\n--\n\nWhether the strides "
     "are those of memory_format (None: contiguous_format; PyTorch's rule: size-1 dims may have any stride and empty "
     "tensors are contiguous)."},
    {NULL, NULL, 0, NULL},
};

PyGetSetDef bridge_view_getset[] = {
    {"T", (getter)get_T, NULL, "All dims reversed.", NULL},
    {"mT", (getter)get_mT, NULL,
     "The last two dims swapped (a batch of matrices transposed); ValueError below 2-d.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};
