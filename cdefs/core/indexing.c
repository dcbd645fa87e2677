/* Basic indexing: t[key] and t[key] = value for keys of ints, slices, None
 * and Ellipsis. apply_index is the one home of the rule; the tensor's own
 * __getitem__/__setitem__ use it directly, and the Python class reaches it as
 * _C.apply_index (bridge/core/strides.py) for the basic keys this fast path
 * passes on (NumPy integer scalars, stores that are not one host scalar).
 * Advanced keys go to the Python class's _getitem_slow/_setitem_slow.
 * tests/core/test_geometry_property.py holds apply_index to NumPy's indexing and
 * tests/core/test_views_property.py does the same through t[key]. */

#include "views.h"

/* A key the fast path takes without asking Python: NumPy scalars and 0-d
 * arrays have the buffer protocol and go to the Python class, which sorts
 * advanced keys (arrays, tensors, lists, bools) from basic ones. */
static int is_basic_key(PyObject *k) {
  return PyLong_CheckExact(k) || PySlice_Check(k) || k == Py_None || k == Py_Ellipsis ||
         (!PyBool_Check(k) && PyIndex_Check(k) && !PyObject_CheckBuffer(k) && !Tensor_Check(k));
}

/* Apply a basic key to the geometry (nd, in_shape, in_strides, offset);
 * shape and strides must not alias the inputs. With `fast` (the tensor's
 * own indexing) returns 0 for a key that is_basic_key does not take, so the
 * caller goes to Python; otherwise every part must be an int, slice, None or
 * Ellipsis (TypeError). Returns 1 and the geometry, or -1 with IndexError
 * (out of range, too many indices, several ellipses). */
static int apply_index(int nd, const int64_t *in_shape, const int64_t *in_strides, int64_t offset,
                       PyObject *key, int fast, int *nd_out, int64_t *shape, int64_t *strides,
                       int64_t *offset_out) {
  PyObject *single[1] = {key};
  PyObject *const *keys = single;
  Py_ssize_t nkeys = 1;
  if (PyTuple_Check(key)) {
    keys = &PyTuple_GET_ITEM(key, 0);
    nkeys = PyTuple_GET_SIZE(key);
  }
  Py_ssize_t consumed = 0, nell = 0;
  for (Py_ssize_t i = 0; i < nkeys; i++) {
    PyObject *k = keys[i];
    if (!is_basic_key(k)) {
      if (fast) return 0;
      if (PyBool_Check(k)) {
        PyErr_SetString(PyExc_TypeError, "boolean scalar indices are not basic indices");
        return -1;
      }
      if (!PyIndex_Check(k)) {
        PyErr_Format(PyExc_TypeError,
                     "only integers, slices, None, Ellipsis and tensors/arrays/lists are valid "
                     "indices, got %R",
                     k);
        return -1;
      }
    }
    if (k == Py_Ellipsis)
      nell++;
    else if (k != Py_None)
      consumed++;
  }
  if (nell > 1) {
    PyErr_SetString(PyExc_IndexError, "an index can only have a single ellipsis ('...')");
    return -1;
  }
  if (consumed > nd) {
    PyErr_Format(PyExc_IndexError, "too many indices for tensor of dimension %d", nd);
    return -1;
  }
  int out = 0, d = 0;
  for (Py_ssize_t i = 0; i < nkeys; i++) {
    PyObject *k = keys[i];
    if (out >= MAXD && k != Py_Ellipsis) goto too_many;
    if (k == Py_None) {
      /* PyTorch's unsqueeze stride: the size * stride of the dim it lands before */
      shape[out] = 1;
      strides[out++] = d >= nd ? 1 : mul0(in_strides[d], in_shape[d]);
    } else if (k == Py_Ellipsis) {
      Py_ssize_t skip = nd - consumed;
      if (out + skip > MAXD) goto too_many;
      for (Py_ssize_t j = 0; j < skip; j++, d++) {
        shape[out] = in_shape[d];
        strides[out++] = in_strides[d];
      }
    } else if (PySlice_Check(k)) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(k, &start, &stop, &step) < 0) return -1;
      Py_ssize_t n = PySlice_AdjustIndices((Py_ssize_t)in_shape[d], &start, &stop, step);
      shape[out] = n;
      strides[out++] = mul0(in_strides[d], (int64_t)step);
      if (n) offset = add0(offset, mul0((int64_t)start, in_strides[d]));
      d++;
    } else {
      int err = 0;
      int64_t i64 = as_int64(k, &err);
      if (err) return -1;
      int64_t size = in_shape[d];
      if (i64 < -size || i64 >= size) {
        PyErr_Format(PyExc_IndexError, "index %lld is out of bounds for dimension %d with size %lld",
                     (long long)i64, d, (long long)size);
        return -1;
      }
      offset = add0(offset, mul0(i64 < 0 ? i64 + size : i64, in_strides[d]));
      d++;
    }
  }
  if (out + (nd - d) > MAXD) goto too_many;
  for (; d < nd; d++) {
    shape[out] = in_shape[d];
    strides[out++] = in_strides[d];
  }
  *nd_out = out;
  *offset_out = offset;
  return 1;
too_many:
  PyErr_Format(PyExc_IndexError, "indexing would give more than %d dimensions", MAXD);
  return -1;
}

static PyObject *tensor_getitem(TensorObject *t, PyObject *key) {
  int64_t shape[MAXD], strides[MAXD], offset;
  int nd, rc = apply_index(t->ndim, t->shape, t->strides, t->offset, key, 1, &nd, shape, strides,
                           &offset);
  if (rc < 0) return NULL;
  if (rc == 0) return bridge_upcall_call(UP_GETITEM_SLOW, t, key);
  return view_of(t, nd, shape, strides, offset);
}

/* Scalar stores are values.c's; everything else is the Python class's. */
int bridge_store_scalar(TensorObject *t, char *addr, PyObject *value); /* 1 done, 0 not handled */

static int tensor_setitem(TensorObject *t, PyObject *key, PyObject *value) {
  if (value == NULL) {
    PyErr_SetString(PyExc_TypeError, "tensor elements cannot be deleted");
    return -1;
  }
  int64_t shape[MAXD], strides[MAXD], offset;
  int nd, rc = apply_index(t->ndim, t->shape, t->strides, t->offset, key, 1, &nd, shape, strides,
                           &offset);
  if (rc < 0) return -1;
  /* One element, in bytes that exist, of writable host memory: stored here. */
  int64_t isz = t->dtype->itemsize;
  if (rc == 1 && nd == 0 && !t->storage->readonly && bridge_host_accessible(t->storage->dev_type) &&
      offset >= 0 && offset < t->storage->nbytes / isz) {
    int done = bridge_store_scalar(t, t->storage->data + offset * isz, value);
    if (done < 0) return -1;
    if (done > 0) return 0;
  }
  PyObject *fn = bridge_upcall(UP_SETITEM_SLOW);
  PyObject *r = fn ? PyObject_CallFunctionObjArgs(fn, (PyObject *)t, key, value, NULL) : NULL;
  if (r == NULL) return -1;
  Py_DECREF(r);
  return 0;
}

PyMappingMethods bridge_tensor_as_mapping = {
    NULL, /* mp_length: set by tensor.c */
    (binaryfunc)tensor_getitem,
    (objobjargproc)tensor_setitem,
};

/* apply_index(shape, strides, offset, key): the rule above for the Python
 * class, over a geometry given as ints; every part of key must be basic. */
static PyObject *py_apply_index(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 4)
    return PyErr_Format(PyExc_TypeError, "apply_index(shape, strides, offset, key) takes 4 arguments (%zd given)", nargs);
  int64_t in_shape[MAXD], in_strides[MAXD], offset, shape[MAXD], strides[MAXD];
  int nd = bridge_parse_geometry(args[0], args[1], in_shape, in_strides);
  if (nd < 0 || bridge_parse_int64(args[2], &offset, "storage offset") < 0) return NULL;
  int out;
  if (apply_index(nd, in_shape, in_strides, offset, args[3], 0, &out, shape, strides, &offset) < 0)
    return NULL;
  PyObject *sh = bridge_dims_tuple(out, shape), *st = sh ? bridge_dims_tuple(out, strides) : NULL;
  PyObject *r = st ? Py_BuildValue("(OOL)", sh, st, (long long)offset) : NULL;
  Py_XDECREF(sh);
  Py_XDECREF(st);
  return r;
}

static PyMethodDef indexing_functions[] = {
    {"apply_index", (PyCFunction)(void (*)(void))py_apply_index, METH_FASTCALL,
     "apply_index(shape, strides, offset, key, /)\n--\n\n(shape, strides, offset) of the view a "
     "basic key (ints, slices, None, Ellipsis, or a tuple of them) selects, NumPy's semantics with "
     "PyTorch's strides for new dims. IndexError for out-of-range ints, too many indices or "
     "several ellipses; TypeError for keys that are not basic."},
    {NULL, NULL, 0, NULL},
};

int bridge_indexing_init(PyObject *mod) { return PyModule_AddFunctions(mod, indexing_functions); }
