/* Basic indexing of TensorBase in C: t[key] and t[key] = value for keys of
 * ints, slices, None and Ellipsis (strides.apply_index is the reference the
 * tests hold it to). Advanced keys, and stores that are not one host scalar,
 * go to the Python class's _getitem_slow/_setitem_slow. */

#include "views.h"

static int is_basic_key(PyObject *k) {
  return PyLong_CheckExact(k) || PySlice_Check(k) || k == Py_None || k == Py_Ellipsis ||
         (!PyBool_Check(k) && PyIndex_Check(k) && !PyObject_CheckBuffer(k) && !Tensor_Check(k));
}

/* Apply a basic key (strides.apply_index). Returns 1 and the geometry, 0 when
 * the key is not basic (the caller goes to Python), -1 on error. */
static int apply_index(TensorObject *t, PyObject *key, int *nd_out, int64_t *shape,
                       int64_t *strides, int64_t *offset_out) {
  PyObject *single[1] = {key};
  PyObject *const *keys = single;
  Py_ssize_t nkeys = 1;
  if (PyTuple_Check(key)) {
    keys = &PyTuple_GET_ITEM(key, 0);
    nkeys = PyTuple_GET_SIZE(key);
  }
  Py_ssize_t consumed = 0, nell = 0;
  for (Py_ssize_t i = 0; i < nkeys; i++) {
    if (!is_basic_key(keys[i])) return 0;
    if (keys[i] == Py_Ellipsis)
      nell++;
    else if (keys[i] != Py_None)
      consumed++;
  }
  if (nell > 1) {
    PyErr_SetString(PyExc_IndexError, "an index can only have a single ellipsis ('...')");
    return -1;
  }
  int nd = t->ndim;
  if (consumed > nd) {
    PyErr_Format(PyExc_IndexError, "too many indices for tensor of dimension %d", nd);
    return -1;
  }
  int out = 0, d = 0;
  int64_t offset = t->offset;
  for (Py_ssize_t i = 0; i < nkeys; i++) {
    PyObject *k = keys[i];
    if (out >= MAXD && k != Py_Ellipsis) goto too_many;
    if (k == Py_None) {
      shape[out] = 1;
      strides[out++] = d >= nd ? 1 : mul0(t->strides[d], t->shape[d]);
    } else if (k == Py_Ellipsis) {
      Py_ssize_t skip = nd - consumed;
      if (out + skip > MAXD) goto too_many;
      for (Py_ssize_t j = 0; j < skip; j++, d++) {
        shape[out] = t->shape[d];
        strides[out++] = t->strides[d];
      }
    } else if (PySlice_Check(k)) {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(k, &start, &stop, &step) < 0) return -1;
      Py_ssize_t n = PySlice_AdjustIndices((Py_ssize_t)t->shape[d], &start, &stop, step);
      shape[out] = n;
      strides[out++] = mul0(t->strides[d], (int64_t)step);
      if (n) offset = add0(offset, mul0((int64_t)start, t->strides[d]));
      d++;
    } else {
      int err = 0;
      int64_t i64 = as_int64(k, &err);
      if (err) return -1;
      int64_t size = t->shape[d];
      if (i64 < -size || i64 >= size) {
        PyErr_Format(PyExc_IndexError, "index %lld is out of bounds for dimension %d with size %lld",
                     (long long)i64, d, (long long)size);
        return -1;
      }
      offset = add0(offset, mul0(i64 < 0 ? i64 + size : i64, t->strides[d]));
      d++;
    }
  }
  if (out + (nd - d) > MAXD) goto too_many;
  for (; d < nd; d++) {
    shape[out] = t->shape[d];
    strides[out++] = t->strides[d];
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
  int nd, rc = apply_index(t, key, &nd, shape, strides, &offset);
  if (rc < 0) return NULL;
  if (rc == 0) return call_method1((PyObject *)t, "_getitem_slow", key);
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
  int nd, rc = apply_index(t, key, &nd, shape, strides, &offset);
  if (rc < 0) return -1;
  /* One element, in bytes that exist, of writable host memory: stored here. */
  int64_t isz = t->dtype->itemsize;
  if (rc == 1 && nd == 0 && !t->storage->readonly && bridge_host_accessible(t->storage->dev_type) &&
      offset >= 0 && offset < t->storage->nbytes / isz) {
    int done = bridge_store_scalar(t, t->storage->data + offset * isz, value);
    if (done < 0) return -1;
    if (done > 0) return 0;
  }
  PyObject *r = PyObject_CallMethod((PyObject *)t, "_setitem_slow", "OO", key, value);
  if (r == NULL) return -1;
  Py_DECREF(r);
  return 0;
}

PyMappingMethods bridge_tensor_as_mapping = {
    NULL, /* mp_length: set by tensor.c */
    (binaryfunc)tensor_getitem,
    (objobjargproc)tensor_setitem,
};
