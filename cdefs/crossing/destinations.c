/* The registry of bridge.convert's destinations: each `to` a caller names
 * (a module, a name, a type) -> the record of what it holds as it is
 * (destination.h), parsed from the spec bridge.crossing.convert builds from
 * the capability table; and the general path's window on the one judgement
 * (_C.convert_record, _C.convert_judge). */

#include "crossing/destination.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

PyObject *bridge_convert_registry;
uint64_t bridge_convert_registry_gen;

static void destination_free(PyObject *capsule) {
  destination *d = (destination *)PyCapsule_GetPointer(capsule, DEST_NAME);
  if (d == NULL) {
    PyErr_Clear();
    return;
  }
  Py_XDECREF(d->keep);
  Py_XDECREF(d->own);
  free(d);
}

/* ------------------------------------------------------------ registry */

/* The spec's keys, interned at init: a first call registers its
 * destination, and a lookup by C string would make and hash a str each time. */
enum { K_STRIDES, K_NEGATIVE, K_ZERO, K_BYTE_OFFSET, K_ZERO_D, K_MAX_NDIM, K_CONSUMER, K_ALIGNMENT, K_ND_BOOL,
       K_DTYPES, K_ELEMENT_ALIGNED, K_ZERO_WIDTH, K_DEVICES, K_DTYPE_VIEWS, K_OWN, K_OWN_SUBCLASSES, K_COUNT };
static const char *const spec_names[K_COUNT] = {"strides",   "negative", "zero",      "byte_offset",
                                                "zero_d",    "max_ndim", "consumer",  "alignment",
                                                "nd_bool",   "dtypes",   "element_aligned",
                                                "zero_width", "devices", "dtype_views", "own",
                                                "own_subclasses"};
static PyObject *spec_keys[K_COUNT];

static PyObject *spec_item(PyObject *spec, int key) {
  PyObject *v = PyDict_GetItemWithError(spec, spec_keys[key]);
  if (v == NULL && !PyErr_Occurred())
    PyErr_Format(PyExc_ValueError, "convert_register(): spec has no %s", spec_names[key]);
  return v;
}

static int flag(PyObject *spec, int key, int *out) {
  PyObject *v = spec_item(spec, key);
  if (v == NULL) return -1;
  long x = PyLong_AsLong(v);
  if (x == -1 && PyErr_Occurred()) return -1;
  if (x < INT_MIN || x > INT_MAX) {
    PyErr_Format(PyExc_ValueError, "convert_register(): spec['%s'] is out of range", spec_names[key]);
    return -1;
  }
  *out = (int)x;
  return 0;
}

/* A (code, bits, lanes) triple's key. */
static int dtype_of(PyObject *triple, uint32_t *key) {
  long v[3];
  if (!PyTuple_Check(triple) || PyTuple_GET_SIZE(triple) != 3) goto bad;
  for (int i = 0; i < 3; i++) {
    v[i] = PyLong_AsLong(PyTuple_GET_ITEM(triple, i));
    if (v[i] == -1 && PyErr_Occurred()) return -1;
    if (v[i] < 0 || v[i] > (i == 2 ? 0xffff : 0xff)) goto bad;
  }
  DLDataType t = {(uint8_t)v[0], (uint8_t)v[1], (uint16_t)v[2]};
  *key = dtype_key(t);
  return 0;
bad:
  PyErr_SetString(PyExc_ValueError, "convert_register(): a dtype is a (code, bits, lanes) tuple of DLPack's ranges");
  return -1;
}

/* registry[to] = record (a destination capsule, or None: the general path). */
static PyObject *remember(PyObject *to, PyObject *record) {
  bridge_convert_registry_gen++;
  if (PyDict_GET_SIZE(bridge_convert_registry) >= 256) PyDict_Clear(bridge_convert_registry); /* bound it: `to` may be made per call */
  int rc = PyDict_SetItem(bridge_convert_registry, to, record);
  bridge_convert_registry_gen++; /* (again: the write may run code, a key's __eq__, that looked up meanwhile) */
  if (rc < 0) return NULL;
  Py_RETURN_NONE;
}

/* convert_register(to, take, spec): see the method's docstring. */
/* A triple tuple of spec[key] into keys[] (at most MAX_DTYPES); its count, or -1. */
static int dtype_keys(PyObject *spec, int key, uint32_t *keys) {
  PyObject *t = spec_item(spec, key);
  if (t == NULL) return -1;
  if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) > MAX_DTYPES) {
    PyErr_Format(PyExc_ValueError, "convert_register(): spec['%s'] is a tuple of at most 64 triples",
                 spec_names[key]);
    return -1;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++)
    if (dtype_of(PyTuple_GET_ITEM(t, i), &keys[i]) < 0) return -1;
  return (int)PyTuple_GET_SIZE(t);
}

/* A destination record (take unset) from a spec dict; NULL with an error. */
static destination *parse_spec(PyObject *spec) {
  destination *d = (destination *)calloc(1, sizeof *d);
  if (d == NULL) return (destination *)PyErr_NoMemory();
  int alignment = 0;
  uint32_t aligned[MAX_DTYPES];
  if (flag(spec, K_STRIDES, &d->strides) < 0 || flag(spec, K_NEGATIVE, &d->negative) < 0 ||
      flag(spec, K_ZERO, &d->zero) < 0 || flag(spec, K_BYTE_OFFSET, &d->byte_offset) < 0 ||
      flag(spec, K_ZERO_D, &d->zero_d) < 0 || flag(spec, K_MAX_NDIM, &d->max_ndim) < 0 ||
      flag(spec, K_CONSUMER, &d->consumer) < 0 || flag(spec, K_ALIGNMENT, &alignment) < 0 ||
      flag(spec, K_ND_BOOL, &d->nd_bool) < 0 || flag(spec, K_ZERO_WIDTH, &d->zero_width) < 0 ||
      flag(spec, K_OWN_SUBCLASSES, &d->own_subclasses) < 0)
    goto fail;
  PyObject *own = spec_item(spec, K_OWN);
  if (own == NULL) goto fail;
  if (own != Py_None && !PyType_Check(own)) {
    PyErr_SetString(PyExc_TypeError, "convert_register(): spec['own'] is a type or None");
    goto fail;
  }
  d->own = own == Py_None ? NULL : (PyTypeObject *)Py_NewRef(own);
  d->alignment = alignment;
  int naligned;
  if ((d->ndtypes = dtype_keys(spec, K_DTYPES, d->dtypes)) < 0 ||
      (d->nviews = dtype_keys(spec, K_DTYPE_VIEWS, d->dtype_views)) < 0 ||
      (naligned = dtype_keys(spec, K_ELEMENT_ALIGNED, aligned)) < 0)
    goto fail;
  for (int i = 0; i < naligned; i++) {
    int k = dtype_index(d->dtypes, d->ndtypes, aligned[i]);
    if (k == d->ndtypes) {
      PyErr_SetString(PyExc_ValueError, "convert_register(): spec['element_aligned'] names a dtype not in dtypes");
      goto fail;
    }
    d->element_aligned[k] = 1;
  }
  PyObject *devices = spec_item(spec, K_DEVICES); /* a tuple of DLPack device types */
  if (devices == NULL) goto fail;
  if (!PyTuple_Check(devices) || PyTuple_GET_SIZE(devices) > MAX_DEVICE_KINDS) {
    PyErr_SetString(PyExc_ValueError, "convert_register(): spec['devices'] is a tuple of DLPack device types");
    goto fail;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(devices); i++) {
    long v = PyLong_AsLong(PyTuple_GET_ITEM(devices, i));
    if (v == -1 && PyErr_Occurred()) goto fail;
    if (v < 0 || v >= MAX_DEVICE_KINDS) {
      PyErr_Format(PyExc_ValueError, "convert_register(): spec['devices'] names device type %ld, not one of DLPack's", v);
      goto fail;
    }
    d->devices |= (uint64_t)1 << v;
  }
  return d;
fail:
  Py_XDECREF(d->own);
  free(d);
  return NULL;
}

static PyObject *py_convert_register(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 3 || !(PyDict_Check(args[2]) || args[2] == Py_None))
    return PyErr_Format(PyExc_TypeError, "convert_register(to, take, spec: dict | None)");
  PyObject *to = args[0], *take = args[1], *spec = args[2];
  if (spec == Py_None) return remember(to, Py_None); /* always the general path: asked once */
  destination *d = parse_spec(spec);
  if (d == NULL) return NULL;
  if (take == Py_None) {
    d->take = TAKE_BRIDGE;
  } else if (take == bridge_upcall_peek(UP_NDARRAY)) {
    d->take = TAKE_NUMPY;
  } else if (PyCapsule_IsValid(take, BRIDGE_NAME_API)) {
    DLPackExchangeAPIHeader *h = (DLPackExchangeAPIHeader *)PyCapsule_GetPointer(take, BRIDGE_NAME_API);
    d->api = bridge_exchange_api_known(h);
    if (d->api == NULL || d->api->managed_tensor_to_py_object_no_sync == NULL) {
      PyErr_SetString(PyExc_ValueError, "convert_register(): the exchange API has no managed_tensor_to_py_object");
      goto fail;
    }
    d->take = TAKE_API;
    d->keep = Py_NewRef(take);
  } else if (PyCallable_Check(take)) {
    d->take = TAKE_CALL;
    d->keep = Py_NewRef(take);
  } else {
    PyErr_SetString(PyExc_TypeError, "convert_register(): take is None, an exchange API capsule or a callable");
    goto fail;
  }
  PyObject *cap = PyCapsule_New(d, DEST_NAME, destination_free);
  if (cap == NULL) goto fail;
  PyObject *done = remember(to, cap);
  Py_DECREF(cap);
  return done;
fail:
  Py_XDECREF(d->keep);
  Py_XDECREF(d->own);
  free(d);
  return NULL;
}

/* convert_record(spec) -> a capsule of the record (no import): what
 * convert_judge judges against. */
static PyObject *py_convert_record(PyObject *mod, PyObject *spec) {
  (void)mod;
  if (!PyDict_Check(spec)) return PyErr_Format(PyExc_TypeError, "convert_record(spec: dict)");
  destination *d = parse_spec(spec);
  if (d == NULL) return NULL;
  d->take = TAKE_NONE;
  PyObject *cap = PyCapsule_New(d, DEST_NAME, destination_free);
  if (cap == NULL) {
    Py_XDECREF(d->own);
    free(d);
  }
  return cap;
}

/* convert_judge(record, tensor) -> the J_* reasons the record does not hold the tensor as it is. */
static PyObject *py_convert_judge(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2 || !Tensor_Check(args[1]))
    return PyErr_Format(PyExc_TypeError, "convert_judge(record, tensor: bridge.Tensor)");
  const destination *d = (const destination *)PyCapsule_GetPointer(args[0], DEST_NAME);
  if (d == NULL) return NULL;
  view v;
  view_of_tensor((TensorObject *)args[1], &v);
  return PyLong_FromUnsignedLong(judge(d, &v, 1) & ~(uint32_t)(J_EMPTY | J_STRIDED));
}

static PyObject *py_convert_forget(PyObject *mod, PyObject *unused) {
  (void)mod;
  (void)unused;
  bridge_convert_registry_gen++;
  PyDict_Clear(bridge_convert_registry);
  bridge_convert_registry_gen++; /* (again: the releases may run code that looked up meanwhile) */
  Py_RETURN_NONE;
}

static PyObject *py_convert_registered(PyObject *mod, PyObject *to) {
  (void)mod;
  int rc = PyDict_Contains(bridge_convert_registry, to);
  if (rc < 0) {
    PyErr_Clear();
    rc = 0;
  }
  return PyBool_FromLong(rc);
}

static PyMethodDef destination_functions[] = {
    {"convert_register", (PyCFunction)(void (*)(void))py_convert_register, METH_FASTCALL,
     "convert_register(to, take, spec, /)\n--\n\n"
     "Register destination `to` (a module, name or type, as convert() takes it) for the fast path\n"
     "(private: bridge.crossing.convert does it from the capability table). take: None (bridge\n"
     "itself), numpy.ndarray (arrays made through NumPy's C API), the destination's\n"
     "__dlpack_c_exchange_api__ capsule, or a callable importing a bridge tensor. spec: a dict\n"
     "of what it holds as it is: strides (0 any, 1 compact, 2 contiguous), negative, zero,\n"
     "byte_offset, zero_d, max_ndim (-1: any), nd_bool, consumer (a CONSUMER_* kind), alignment, dtypes (a tuple of (code,\n"
     "bits, lanes)), element_aligned (those of dtypes whose first element must be aligned to its\n"
     "size); spec None: `to` always takes the general path (take is ignored). ValueError/TypeError\n"
     "for a malformed spec."},
    {"convert_record", (PyCFunction)py_convert_record, METH_O,
     "convert_record(spec, /)\n--\n\nA destination's record from its spec (as convert_register takes it), "
     "for convert_judge (private)."},
    {"convert_judge", (PyCFunction)(void (*)(void))py_convert_judge, METH_FASTCALL,
     "convert_judge(record, tensor, /)\n--\n\nThe one judgement of a destination: the JUDGE_* bits of every "
     "reason the record does not hold the tensor as it is (0: it does). The general path words them "
     "(private)."},
    {"convert_forget", (PyCFunction)py_convert_forget, METH_NOARGS,
     "convert_forget()\n--\n\nEmpty the fast path's registry (private; for tests)."},
    {"convert_registered", (PyCFunction)py_convert_registered, METH_O,
     "convert_registered(to, /)\n--\n\nWhether `to` is in the fast path's registry (private)."},
    {NULL, NULL, 0, NULL},
};

int bridge_destinations_init(PyObject *mod) {
  if (!(bridge_convert_registry = PyDict_New())) return -1;
  for (int i = 0; i < K_COUNT; i++)
    if (!(spec_keys[i] = PyUnicode_InternFromString(spec_names[i]))) return -1;
  static const struct {
    const char *name;
    int bit;
  } reasons[] = {{"JUDGE_ZERO_D", J_ZERO_D},         {"JUDGE_NDIM", J_NDIM},
                 {"JUDGE_ND_BOOL", J_ND_BOOL},       {"JUDGE_ZERO_WIDTH", J_ZERO_WIDTH},
                 {"JUDGE_DEVICE", J_DEVICE},         {"JUDGE_DTYPE", J_DTYPE},
                 {"JUDGE_DTYPE_VIEW", J_DTYPE_VIEW}, {"JUDGE_NEGATIVE", J_NEGATIVE},
                 {"JUDGE_ZERO_STRIDE", J_ZERO_STRIDE}, {"JUDGE_NOT_CONTIGUOUS", J_NOT_CONTIGUOUS},
                 {"JUDGE_NOT_COMPACT", J_NOT_COMPACT}, {"JUDGE_ALIGNMENT", J_ALIGNMENT},
                 {"JUDGE_READONLY", J_READONLY},     {"JUDGE_ALIAS", J_ALIAS},
                 {"JUDGE_OFFSET", J_OFFSET}};
  for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
    if (PyModule_AddIntConstant(mod, reasons[i].name, reasons[i].bit) < 0) return -1;
  return PyModule_AddFunctions(mod, destination_functions);
}
