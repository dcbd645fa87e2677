/* The geometry of a tensor and the one constructor every tensor is made by
 * (views, imports, factories): the stride rules (extent, contiguity, dense
 * tiling, contiguous strides, -1 inference, dim wrapping), the dims a tensor
 * keeps (inline, or on the heap once lent to a consumer), the bounds check
 * against its storage, and the dims parsing the Python entry points share.
 * Strides and offset count elements. Each rule is written once, here: the
 * Python layer calls the same C through the _C functions at the end (its
 * bridge/core/strides.py re-exports them), and tests/core/test_geometry_property.py
 * holds them to NumPy. */

#include "core.h"

#include <stdlib.h>

/* --------------------------------------------------------- arithmetic */

int bridge_view_extent(int ndim, const int64_t *shape, const int64_t *strides, int64_t offset,
                       int64_t *lo_out, int64_t *hi_out) {
  int64_t lo = offset, hi = offset;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == 0) {
      *lo_out = *hi_out = offset;
      return 0;
    }
  }
  for (int i = 0; i < ndim; i++) {
    int64_t span;
    if (__builtin_mul_overflow(shape[i] - 1, strides[i], &span)) return -1;
    if (span > 0 ? __builtin_add_overflow(hi, span, &hi) : __builtin_add_overflow(lo, span, &lo))
      return -1;
  }
  if (__builtin_add_overflow(hi, 1, &hi)) return -1;
  *lo_out = lo;
  *hi_out = hi;
  return 0;
}

int64_t bridge_numel(const TensorObject *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i]; /* the constructor checked it fits */
  return n;
}

int bridge_is_contiguous(int ndim, const int64_t *shape, const int64_t *strides) {
  for (int i = 0; i < ndim; i++)
    if (shape[i] == 0) return 1; /* empty tensors are contiguous (torch's and NumPy's rule) */
  int64_t expected = 1;
  int past = 0; /* the block so far holds more than 2**63 - 1 elements: no stride reaches past it */
  for (int i = ndim - 1; i >= 0; i--) {
    if (shape[i] != 1) {
      if (past || strides[i] != expected) return 0;
      past = __builtin_mul_overflow(expected, shape[i], &expected);
    }
  }
  return 1;
}

int bridge_is_non_overlapping_and_dense(int ndim, const int64_t *shape, const int64_t *strides) {
  int order[BRIDGE_MAX_NDIM], n = 0;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == 0) return 1;
    if (shape[i] != 1) order[n++] = i;
  }
  /* size-1 dims never step; the others by |stride|, ties in dim order (insertion sort: few dims) */
  for (int i = 1; i < n; i++) {
    int d = order[i], j = i - 1;
    uint64_t key = strides[d] < 0 ? -(uint64_t)strides[d] : (uint64_t)strides[d];
    while (j >= 0) {
      int64_t s = strides[order[j]];
      if ((s < 0 ? -(uint64_t)s : (uint64_t)s) <= key) break;
      order[j + 1] = order[j];
      j--;
    }
    order[j + 1] = d;
  }
  int64_t expected = 1;
  int past = 0;
  for (int i = 0; i < n; i++) {
    if (past || strides[order[i]] != expected) return 0; /* a negative stride never matches */
    past = __builtin_mul_overflow(expected, shape[order[i]], &expected);
  }
  return 1;
}

int bridge_contiguous_strides(int ndim, const int64_t *shape, int64_t *out) {
  int64_t acc = 1;
  int past = 0;
  for (int i = ndim - 1; i >= 0; i--) {
    if (past) return -1; /* this stride does not fit in int64 */
    out[i] = acc;
    past = __builtin_mul_overflow(acc, shape[i] > 1 ? shape[i] : 1, &acc);
  }
  return 0;
}

void bridge_unit_strides(int ndim, const int64_t *shape, int64_t *strides) {
  for (int d = 0; d < ndim; d++)
    if (shape[d] == 0) { /* no bytes: any stride is a row-major one's equal (mlx refuses negative ones) */
      int64_t rowmajor[BRIDGE_MAX_NDIM];
      if (bridge_contiguous_strides(ndim, shape, rowmajor) == 0) memcpy(strides, rowmajor, (size_t)ndim * sizeof(int64_t));
      return;
    }
  for (int d = ndim - 1; d >= 0; d--)
    if (shape[d] == 1) {
      int64_t s = 1;
      if (d + 1 < ndim && __builtin_mul_overflow(strides[d + 1], shape[d + 1] > 1 ? shape[d + 1] : 1, &s)) s = 1;
      strides[d] = s;
    }
}

PyObject *bridge_dims_tuple(int n, const int64_t *v) {
  PyObject *t = PyTuple_New(n);
  for (int i = 0; t && i < n; i++) {
    PyObject *x = PyLong_FromLongLong(v[i]);
    if (x == NULL) Py_CLEAR(t);
    else PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

int bridge_infer_size(int n, int64_t *shape, int64_t numel) {
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < n; i++) {
    if (shape[i] == -1) {
      if (infer >= 0) {
        PyObject *s = bridge_dims_tuple(n, shape);
        if (s != NULL)
          PyErr_Format(PyExc_ValueError, "only one dimension can be inferred, got shape %R", s);
        Py_XDECREF(s);
        return -1;
      }
      infer = i;
    } else if (shape[i] < 0) {
      PyObject *s = bridge_dims_tuple(n, shape);
      if (s != NULL)
        PyErr_Format(PyExc_ValueError, "invalid shape dimension %lld in %R", (long long)shape[i], s);
      Py_XDECREF(s);
      return -1;
    } else if (known >= 0 && __builtin_mul_overflow(known, shape[i], &known)) {
      known = -1; /* matches no numel; later dims are still checked */
    }
  }
  if (infer >= 0 ? (known <= 0 || numel % known != 0) : known != numel) {
    PyObject *s = bridge_dims_tuple(n, shape);
    if (s != NULL)
      PyErr_Format(PyExc_ValueError, "shape %R is invalid for input of size %lld", s, (long long)numel);
    Py_XDECREF(s);
    return -1;
  }
  if (infer >= 0) shape[infer] = numel / known;
  return 0;
}

/* ------------------------------------------------------- dims storage */

/* Dims lent to an exchange API consumer (the tensor's `lent` bit) are never
 * rewritten or freed while the tensor lives: a geometry change moves to new
 * dims and keeps the old heap block on the `retired` list. */
typedef struct retired_block {
  struct retired_block *next;
  int64_t dims[];
} retired_block;

static int64_t *heap_dims(TensorObject *t) {
  return t->shape != t->inline_dims ? t->shape : NULL;
}

void bridge_tensor_free_dims(TensorObject *t) {
  int64_t *heap = heap_dims(t);
  if (heap != NULL) free((char *)heap - offsetof(retired_block, dims));
  while (t->retired != NULL) {
    retired_block *b = (retired_block *)t->retired;
    t->retired = b->next;
    free(b);
  }
}

static int set_dims(TensorObject *t, int ndim, const int64_t *shape, const int64_t *strides) {
  int64_t *old_heap = heap_dims(t);
  int64_t *dst;
  int inline_ok = ndim <= BRIDGE_INLINE_NDIM && !(t->lent & BRIDGE_LENT_INLINE);
  if (inline_ok) {
    dst = t->inline_dims;
  } else {
    retired_block *b = (retired_block *)malloc(sizeof(retired_block) + 2 * (size_t)(ndim ? ndim : 1) * sizeof(int64_t));
    if (b == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    b->next = NULL;
    dst = b->dims;
  }
  /* shape and strides may point into the dims being replaced: copy first */
  int64_t tmp[2 * BRIDGE_MAX_NDIM];
  memcpy(tmp, shape, (size_t)ndim * sizeof(int64_t));
  memcpy(tmp + ndim, strides, (size_t)ndim * sizeof(int64_t));
  memcpy(dst, tmp, 2 * (size_t)ndim * sizeof(int64_t));
  if (old_heap != NULL && old_heap != dst) {
    retired_block *ob = (retired_block *)((char *)old_heap - offsetof(retired_block, dims));
    if (t->lent & BRIDGE_LENT_HEAP) {
      ob->next = (retired_block *)t->retired;
      t->retired = ob;
    } else {
      free(ob);
    }
  }
  t->ndim = ndim;
  t->shape = dst;
  t->strides = dst + ndim;
  t->lent &= (uint8_t)~BRIDGE_LENT_HEAP; /* new dims are not lent yet; lent inline dims stay frozen */
  Py_CLEAR(t->shape_tuple);
  Py_CLEAR(t->strides_tuple);
  return 0;
}

/* ---------------------------------------------------------- validation */

static PyObject *geometry_error(int mode) {
  return mode == GEOM_IMPORT ? PyExc_BufferError : mode == GEOM_DERIVED ? PyExc_RuntimeError
                                                                         : PyExc_ValueError;
}

static int format_dims(char *buf, size_t cap, int ndim, const int64_t *v) {
  size_t n = (size_t)snprintf(buf, cap, "(");
  for (int i = 0; i < ndim && n < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, i ? ", %lld" : "%lld", (long long)v[i]);
  if (n < cap) n += (size_t)snprintf(buf + n, cap - n, ndim == 1 ? ",)" : ")");
  return 0;
}

/* Checks a geometry against a storage; fills the element extent. */
static int check_geometry(StorageObject *storage, DTypeObject *dtype, int ndim,
                          const int64_t *shape, const int64_t *strides, int64_t offset, int mode,
                          int64_t *lo_out, int64_t *hi_out) {
  PyObject *exc = geometry_error(mode);
  if (ndim < 0 || ndim > BRIDGE_MAX_NDIM) {
    PyErr_Format(exc, "a tensor has at most %d dimensions, got %d", BRIDGE_MAX_NDIM, ndim);
    return -1;
  }
  int64_t numel = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) {
      PyErr_Format(exc, "negative dimension %lld in size", (long long)shape[i]);
      return -1;
    }
    if (__builtin_mul_overflow(numel, shape[i], &numel)) {
      char s[512];
      format_dims(s, sizeof s, ndim, shape);
      PyErr_Format(exc, "a tensor of size %s has more than 2**63 - 1 elements", s);
      return -1;
    }
  }
  int64_t lo, hi, hi_bytes;
  if (bridge_view_extent(ndim, shape, strides, offset, &lo, &hi) < 0) {
    PyErr_SetString(exc, "the tensor's shape and strides overflow a 64-bit range of elements");
    return -1;
  }
  int empty = numel == 0;
  /* An empty view reaches nothing: a view derived from another may sit
   * anywhere (indexing an empty dim with a negative stride moves it below 0) */
  if (offset < 0 && !(empty && mode == GEOM_DERIVED)) {
    PyErr_Format(exc, "storage offset must be non-negative, got %lld", (long long)offset);
    return -1;
  }
  /* the storage's size in elements: a division, made only where it is read */
  if (empty ? (mode == GEOM_USER && offset > storage->nbytes / dtype->itemsize)
            : (lo < 0 || __builtin_mul_overflow(hi, (int64_t)dtype->itemsize, &hi_bytes) ||
               hi_bytes > storage->nbytes)) {
    int64_t cap = storage->nbytes / dtype->itemsize;
    char s[512], st[512];
    format_dims(s, sizeof s, ndim, shape);
    format_dims(st, sizeof st, ndim, strides);
    if (mode == GEOM_DERIVED)
      PyErr_Format(exc,
                   "the view of size %s with strides %s views bytes [%lld, %lld) of a storage that "
                   "now holds %lld bytes (the storage was resized after the view was made)",
                   s, st, (long long)(lo * dtype->itemsize), (long long)(hi * dtype->itemsize),
                   (long long)storage->nbytes);
    else if (empty)
      PyErr_Format(exc, "storage offset %lld is past the end of a storage of %lld elements",
                   (long long)offset, (long long)cap);
    else
      PyErr_Format(exc,
                   "view of size %s with strides %s and offset %lld reaches elements [%lld, %lld) "
                   "but the storage holds %lld elements",
                   s, st, (long long)offset, (long long)lo, (long long)hi, (long long)cap);
    return -1;
  }
  *lo_out = lo;
  *hi_out = hi;
  return 0;
}

PyObject *bridge_tensor_new(StorageObject *storage, DTypeObject *dtype, int ndim,
                            const int64_t *shape, const int64_t *strides, int64_t offset,
                            int mode) {
  int64_t lo, hi;
  if (check_geometry(storage, dtype, ndim, shape, strides, offset, mode, &lo, &hi) < 0) return NULL;
  TensorObject *t = (TensorObject *)bridge_tensor_class->tp_alloc(bridge_tensor_class, 0);
  if (t == NULL) return NULL;
  t->shape = t->strides = t->inline_dims;
  if (ndim <= BRIDGE_INLINE_NDIM) { /* a new tensor's own inline dims: none to retire, none to alias */
    for (int i = 0; i < ndim; i++) {
      t->inline_dims[i] = shape[i];
      t->inline_dims[ndim + i] = strides[i];
    }
    t->ndim = ndim;
    t->strides = t->inline_dims + ndim;
  } else if (set_dims(t, ndim, shape, strides) < 0) {
    Py_DECREF(t);
    return NULL;
  }
  t->storage = (StorageObject *)Py_NewRef(storage);
  t->dtype = (DTypeObject *)Py_NewRef(dtype);
  t->offset = offset;
  t->lo = lo;
  t->hi = hi;
  return (PyObject *)t;
}

int bridge_tensor_assign(TensorObject *t, StorageObject *storage, DTypeObject *dtype, int ndim,
                         const int64_t *shape, const int64_t *strides, int64_t offset, int mode) {
  int64_t lo, hi;
  if (check_geometry(storage, dtype, ndim, shape, strides, offset, mode, &lo, &hi) < 0) return -1;
  if (set_dims(t, ndim, shape, strides) < 0) return -1;
  Py_SETREF(t->storage, (StorageObject *)Py_NewRef(storage));
  Py_SETREF(t->dtype, (DTypeObject *)Py_NewRef(dtype));
  t->offset = offset;
  t->lo = lo;
  t->hi = hi;
  return 0;
}

int bridge_tensor_check_bounds(TensorObject *t, PyObject *exc) {
  if (t->lo == t->hi) return 0;
  int64_t isz = t->dtype->itemsize;
  if (t->hi * isz <= t->storage->nbytes) return 0; /* lo >= 0 and hi*isz fit: checked when made */
  PyErr_Format(exc,
               "the tensor views bytes [%lld, %lld) of a storage that now holds %lld bytes (the "
               "storage was resized after the view was made)",
               (long long)(t->lo * isz), (long long)(t->hi * isz), (long long)t->storage->nbytes);
  return -1;
}

/* ------------------------------------------------------ Python helpers */

/* One size: 0 (in *out), -1 with the error (`what` names the value), or 1
 * when v is not an int (bools included), for the caller to name the whole
 * sequence. An exact int runs no Python code; any other runs its __index__. */
static int parse_dim(PyObject *v, int64_t *out, const char *what) {
  int overflow = 0;
  if (PyLong_CheckExact(v)) {
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) {
      PyErr_Format(PyExc_ValueError, "%s %R does not fit in a 64-bit integer", what, v);
      return -1;
    }
    *out = x;
    return 0;
  }
  if (PyBool_Check(v) || !PyIndex_Check(v)) return 1;
  PyObject *idx = PyNumber_Index(v);
  if (idx == NULL) return -1;
  long long x = PyLong_AsLongLongAndOverflow(idx, &overflow);
  if (overflow) PyErr_Format(PyExc_ValueError, "%s %R does not fit in a 64-bit integer", what, idx);
  Py_DECREF(idx);
  if (overflow || (x == -1 && PyErr_Occurred())) return -1;
  *out = x;
  return 0;
}

static int too_many_dims(Py_ssize_t n, int max, const char *what) {
  PyErr_Format(PyExc_ValueError, "%s has %zd entries; a tensor has at most %d dimensions", what, n, max);
  return -1;
}

int bridge_parse_dims(PyObject *seq, int64_t *out, int max, const char *what) {
  PyObject *fast = PySequence_Check(seq) ? PySequence_Fast(seq, what) : NULL;
  if (fast == NULL) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s must be a sequence of ints, got %R", what, seq);
    return -1;
  }
  /* A list whose items are not all exact ints is read from a snapshot of its
   * items (as the Python layer's tuple(list)): an item's __index__ may change
   * the list, and move or free the array the items were read from. */
  for (Py_ssize_t i = 0; PyList_Check(fast) && i < PyList_GET_SIZE(fast); i++)
    if (!PyLong_CheckExact(PyList_GET_ITEM(fast, i))) {
      Py_SETREF(fast, PyList_AsTuple(fast));
      if (fast == NULL) return -1;
    }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  if (n > max) {
    Py_DECREF(fast);
    return too_many_dims(n, max, what);
  }
  PyObject **items = PySequence_Fast_ITEMS(fast);
  for (Py_ssize_t i = 0; i < n; i++) {
    int rc = parse_dim(items[i], &out[i], what);
    if (rc == 0) continue;
    if (rc > 0) {
      PyObject *tup = PySequence_Tuple(fast);
      PyErr_Format(PyExc_TypeError, "%s must be a sequence of ints, got %R", what, tup ? tup : seq);
      Py_XDECREF(tup);
    }
    Py_DECREF(fast);
    return -1;
  }
  Py_DECREF(fast);
  return (int)n;
}

int bridge_parse_dim_args(PyObject *const *args, Py_ssize_t n, int64_t *out, int max, const char *what) {
  if (n > max) return too_many_dims(n, max, what);
  for (Py_ssize_t i = 0; i < n; i++) {
    int rc = parse_dim(args[i], &out[i], what);
    if (rc == 0) continue;
    if (rc > 0) { /* named as the tuple of the arguments, as bridge_parse_dims names a tuple */
      PyObject *tup = PyTuple_New(n);
      for (Py_ssize_t j = 0; tup != NULL && j < n; j++) PyTuple_SET_ITEM(tup, j, Py_NewRef(args[j]));
      if (tup != NULL) PyErr_Format(PyExc_TypeError, "%s must be a sequence of ints, got %R", what, tup);
      Py_XDECREF(tup);
    }
    return -1;
  }
  return (int)n;
}

int bridge_wrap_dim(PyObject *dim_obj, int64_t dim, int ndim, int *out) {
  int64_t lo = ndim ? -ndim : -1, hi = ndim ? ndim - 1 : 0;
  int overflow = 0;
  if (dim_obj != NULL) {
    if (PyBool_Check(dim_obj) || !PyIndex_Check(dim_obj)) {
      PyErr_Format(PyExc_TypeError, "dim must be an int, got %.100s", Py_TYPE(dim_obj)->tp_name);
      return -1;
    }
    dim = PyLong_AsLongLongAndOverflow(dim_obj, &overflow); /* calls __index__ */
    if (dim == -1 && PyErr_Occurred()) return -1;
  }
  if (overflow || dim < lo || dim > hi) {
    if (overflow)
      PyErr_Format(PyExc_IndexError,
                   "Dimension out of range (expected to be in range of [%lld, %lld], but got %R)",
                   (long long)lo, (long long)hi, dim_obj);
    else
      PyErr_Format(PyExc_IndexError,
                   "Dimension out of range (expected to be in range of [%lld, %lld], but got %lld)",
                   (long long)lo, (long long)hi, (long long)dim);
    return -1;
  }
  *out = (int)(dim < 0 ? dim + (ndim ? ndim : 1) : dim);
  return 0;
}

int bridge_parse_int64(PyObject *v, int64_t *out, const char *what) {
  if (PyBool_Check(v) || !PyIndex_Check(v)) {
    PyErr_Format(PyExc_TypeError, "%s must be an int, got %.100s", what, Py_TYPE(v)->tp_name);
    return -1;
  }
  PyObject *idx = PyNumber_Index(v);
  if (idx == NULL) return -1;
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(idx, &overflow);
  if (overflow) PyErr_Format(PyExc_ValueError, "%s %R does not fit in a 64-bit integer", what, idx);
  Py_DECREF(idx);
  if (PyErr_Occurred()) return -1;
  *out = x;
  return 0;
}

int bridge_parse_geometry(PyObject *shape_obj, PyObject *strides_obj, int64_t *shape,
                          int64_t *strides) {
  int n = bridge_parse_dims(shape_obj, shape, BRIDGE_MAX_NDIM, "shape");
  if (n < 0) return -1;
  for (int i = 0; i < n; i++)
    if (shape[i] < 0) {
      PyErr_Format(PyExc_ValueError, "negative dimension %lld in size", (long long)shape[i]);
      return -1;
    }
  if (strides_obj == NULL) return n;
  int m = bridge_parse_dims(strides_obj, strides, BRIDGE_MAX_NDIM, "strides");
  if (m < 0) return -1;
  if (m != n) {
    PyErr_Format(PyExc_ValueError, "shape and strides have different lengths (%d and %d)", n, m);
    return -1;
  }
  return n;
}

/* ------------------------------------------- the rules, for Python */

/* Each takes a geometry as sequences of ints (sizes >= 0, values in int64:
 * ValueError otherwise) and returns what the rule above computes. */

static int nargs_is(Py_ssize_t nargs, Py_ssize_t want, const char *signature) {
  if (nargs == want) return 1;
  PyErr_Format(PyExc_TypeError, "%s takes %zd arguments (%zd given)", signature, want, nargs);
  return 0;
}

static PyObject *py_contiguous_strides(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (!nargs_is(nargs, 1, "contiguous_strides(shape)")) return NULL;
  int64_t shape[BRIDGE_MAX_NDIM], strides[BRIDGE_MAX_NDIM];
  int n = bridge_parse_geometry(args[0], NULL, shape, NULL);
  if (n < 0) return NULL;
  if (bridge_contiguous_strides(n, shape, strides) < 0) {
    PyObject *s = bridge_dims_tuple(n, shape);
    if (s != NULL)
      PyErr_Format(PyExc_ValueError, "the contiguous strides of size %R do not fit in a 64-bit integer", s);
    Py_XDECREF(s);
    return NULL;
  }
  return bridge_dims_tuple(n, strides);
}

static PyObject *py_is_contiguous(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (!nargs_is(nargs, 2, "is_contiguous(shape, strides)")) return NULL;
  int64_t shape[BRIDGE_MAX_NDIM], strides[BRIDGE_MAX_NDIM];
  int n = bridge_parse_geometry(args[0], args[1], shape, strides);
  return n < 0 ? NULL : PyBool_FromLong(bridge_is_contiguous(n, shape, strides));
}

static PyObject *py_is_non_overlapping_and_dense(PyObject *mod, PyObject *const *args,
                                                 Py_ssize_t nargs) {
  (void)mod;
  if (!nargs_is(nargs, 2, "is_non_overlapping_and_dense(shape, strides)")) return NULL;
  int64_t shape[BRIDGE_MAX_NDIM], strides[BRIDGE_MAX_NDIM];
  int n = bridge_parse_geometry(args[0], args[1], shape, strides);
  return n < 0 ? NULL : PyBool_FromLong(bridge_is_non_overlapping_and_dense(n, shape, strides));
}

static PyObject *py_extent(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (!nargs_is(nargs, 3, "extent(shape, strides, offset)")) return NULL;
  int64_t shape[BRIDGE_MAX_NDIM], strides[BRIDGE_MAX_NDIM], offset, lo, hi;
  int n = bridge_parse_geometry(args[0], args[1], shape, strides);
  if (n < 0 || bridge_parse_int64(args[2], &offset, "storage offset") < 0) return NULL;
  if (bridge_view_extent(n, shape, strides, offset, &lo, &hi) < 0) {
    PyErr_SetString(PyExc_ValueError, "the tensor's shape and strides overflow a 64-bit range of elements");
    return NULL;
  }
  return Py_BuildValue("(LL)", (long long)lo, (long long)hi);
}

static PyObject *py_wrap_dim(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (!nargs_is(nargs, 2, "wrap_dim(dim, ndim)")) return NULL;
  int64_t ndim;
  if (bridge_parse_int64(args[1], &ndim, "ndim") < 0) return NULL;
  if (ndim < 0 || ndim > BRIDGE_MAX_NDIM)
    return PyErr_Format(PyExc_ValueError, "ndim must be in [0, %d], got %lld", BRIDGE_MAX_NDIM,
                        (long long)ndim);
  int d;
  return bridge_wrap_dim(args[0], 0, (int)ndim, &d) < 0 ? NULL : PyLong_FromLong(d);
}

static PyObject *py_infer_size(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (!nargs_is(nargs, 2, "infer_size(shape, numel)")) return NULL;
  int64_t shape[BRIDGE_MAX_NDIM], numel;
  int n = bridge_parse_dims(args[0], shape, BRIDGE_MAX_NDIM, "shape");
  if (n < 0 || bridge_parse_int64(args[1], &numel, "numel") < 0) return NULL;
  if (numel < 0) return PyErr_Format(PyExc_ValueError, "numel must be >= 0, got %lld", (long long)numel);
  return bridge_infer_size(n, shape, numel) < 0 ? NULL : bridge_dims_tuple(n, shape);
}

#define FAST(name, fn, doc) {name, (PyCFunction)(void (*)(void))fn, METH_FASTCALL, doc}

static PyObject *py_unit_strides(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (!nargs_is(nargs, 2, "unit_strides(shape, strides)")) return NULL;
  int64_t shape[BRIDGE_MAX_NDIM], strides[BRIDGE_MAX_NDIM];
  int n = bridge_parse_geometry(args[0], args[1], shape, strides);
  if (n < 0) return NULL;
  bridge_unit_strides(n, shape, strides);
  return bridge_dims_tuple(n, strides);
}

static PyMethodDef geometry_functions[] = {
    FAST("unit_strides", py_unit_strides,
         "unit_strides(shape, strides, /)\n--\n\nThe strides bridge.convert hands a destination: each dim of one "
         "element given the row-major stride it would have after the dims that follow it, every dim of an empty "
         "tensor its row-major stride (such strides say nothing, and some destinations refuse a negative one)."),
    FAST("contiguous_strides", py_contiguous_strides,
         "contiguous_strides(shape, /)\n--\n\nRow-major (C order) strides in elements; size-0 and "
         "size-1 dims still get the product of the trailing sizes (max(size, 1)), as PyTorch. "
         "ValueError when a stride does not fit in int64."),
    FAST("is_contiguous", py_is_contiguous,
         "is_contiguous(shape, strides, /)\n--\n\nC-contiguity as PyTorch and NumPy define it: "
         "size-1 dims may have any stride; empty tensors are contiguous."),
    FAST("is_non_overlapping_and_dense", py_is_non_overlapping_and_dense,
         "is_non_overlapping_and_dense(shape, strides, /)\n--\n\nWhether the elements tile "
         "[0, numel) exactly once in some dim order (positive strides; empty tensors: True)."),
    FAST("extent", py_extent,
         "extent(shape, strides, offset, /)\n--\n\n(lowest, highest + 1) element indices "
         "reached; (offset, offset) when empty. ValueError when they overflow int64."),
    FAST("wrap_dim", py_wrap_dim,
         "wrap_dim(dim, ndim, /)\n--\n\ndim in [0, ndim) (negative dims count from the end; a "
         "0-d tensor takes -1 and 0). IndexError (PyTorch's message) when out of range, TypeError "
         "unless dim is an int (bools are not)."),
    FAST("infer_size", py_infer_size,
         "infer_size(shape, numel, /)\n--\n\nshape with its one -1 resolved so that it holds "
         "numel elements; ValueError when it cannot (two -1s, other negative sizes, or no fit)."),
    {NULL, NULL, 0, NULL},
};

int bridge_geometry_init(PyObject *mod) { return PyModule_AddFunctions(mod, geometry_functions); }
