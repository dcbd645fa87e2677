/* What the view ops (views.c) and basic indexing (indexing.c) share: the
 * overflow-tolerant stride arithmetic and the step back to Python. */
#ifndef BRIDGE_VIEWS_H
#define BRIDGE_VIEWS_H

#include "core.h"

#define MAXD BRIDGE_MAX_NDIM

/* self.<name>(arg): the Python class's slow path (a tuple argument stays one argument). */
static inline PyObject *call_method1(PyObject *self, const char *name, PyObject *arg) {
  PyObject *n = PyUnicode_InternFromString(name);
  if (n == NULL) return NULL;
  PyObject *r = PyObject_CallMethodOneArg(self, n, arg);
  Py_DECREF(n);
  return r;
}

/* Stride and offset arithmetic of views: a product that does not fit can only
 * come from an empty tensor (whose strides are unconstrained) or a dim of size
 * 0 or 1 (which never steps), where its value does not matter: 0 then. */
static inline int64_t mul0(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_mul_overflow(a, b, &r) ? 0 : r;
}

static inline int64_t add0(int64_t a, int64_t b) {
  int64_t r;
  return __builtin_add_overflow(a, b, &r) ? a : r;
}

static inline PyObject *view_of(TensorObject *t, int ndim, const int64_t *shape, const int64_t *strides,
                         int64_t offset) {
  return bridge_tensor_new(t->storage, t->dtype, ndim, shape, strides, offset, GEOM_DERIVED);
}

static inline int64_t as_int64(PyObject *v, int *err) {
  if (PyLong_CheckExact(v)) {
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow) {
      PyErr_Format(PyExc_IndexError, "index %R is out of range", v);
      *err = 1;
    }
    return x;
  }
  PyObject *i = PyNumber_Index(v);
  if (i == NULL) {
    *err = 1;
    return 0;
  }
  long long x = PyLong_AsLongLong(i);
  Py_DECREF(i);
  if (x == -1 && PyErr_Occurred()) *err = 1;
  return x;
}

#endif
