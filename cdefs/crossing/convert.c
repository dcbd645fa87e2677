/* bridge.convert's fast path: the call users make, in C.
 *
 * bridge.convert(obj, to) is _C.convert. For the common case it never enters
 * Python: `to` is looked up in a registry of destinations (each a record of
 * what it holds, made by bridge.crossing.convert from the capability table,
 * the one place those rules are written); `obj` is read without building a
 * bridge tensor where it can be (a producer's C exchange API, an ndarray's
 * own struct, a bridge tensor's fields); when the record holds it as it is
 * (host memory, a dtype it takes, strides, offset, alignment and read-only
 * as it allows) the managed tensor goes straight to the destination's C
 * exchange API, or the bridge tensor to its import function. Everything
 * else (a fix, a copy, a policy other than the defaults, a destination not
 * registered yet, an object read no other way) goes to the general path,
 * bridge.crossing.convert's Python convert (the convert_slow up-call), with
 * the tensor already imported when it was: the general path decides and
 * explains every fix, so the two paths cannot disagree on a rule that the
 * record does not carry. */

#include "crossing/destination.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* The one judgement of `v` for `d` on this pass (J_*; 0: held as it is,
 * and the fast path takes it), or J_NOT_JUDGED for what the fast path
 * leaves to the general path unjudged: device memory (where streams are
 * ordered), sub-byte and multi-lane values. A bridge tensor's offset is
 * folded into the pointer it exports (no reason here). Never an error. */
static uint32_t judged(const destination *d, const view *v) {
  if (v->device.device_type != kDLCPU || v->dtype.bits < 8 || v->dtype.lanes != 1) return J_NOT_JUDGED;
  return judge(d, v, 0);
}

/* What the fast path does with a tensor `d` does not hold as it is, from its
 * judgement (the same rule as bridge.crossing.convert._plan, which words it):
 * FIX_COPY, one row-major copy into fresh, aligned, writable memory, which
 * settles every reason at once (a layout, an alignment, read-only memory
 * under readonly="copy"); FIX_LEND, read-only memory lent through a writable
 * alias (readonly="share", or a consumer that never writes); FIX_GENERAL for the rest (a
 * refusal, a dtype view, device memory, an offset, an empty tensor, a held
 * layout a compact or row-major-only record leaves to the general path). */
enum { FIX_GENERAL, FIX_COPY, FIX_LEND };
#define J_LAYOUT (J_NEGATIVE | J_ZERO_STRIDE | J_NOT_CONTIGUOUS | J_NOT_COMPACT)
#define J_COPIED (J_LAYOUT | J_ALIGNMENT)
#define J_ELSEWHERE                                                                                              \
  (J_NOT_JUDGED | J_ZERO_D | J_NDIM | J_ND_BOOL | J_ZERO_WIDTH | J_DEVICE | J_DTYPE | J_DTYPE_VIEW | J_OFFSET | \
   J_EMPTY)

static int fix_of(const destination *d, uint32_t why, int share) {
  if (why & J_ELSEWHERE) return FIX_GENERAL;
  if (why & J_COPIED || (why & J_READONLY && !share)) return FIX_COPY;
  if (why & J_STRIDED) return FIX_GENERAL;
  if (why & (J_READONLY | J_ALIAS) && d->take != TAKE_BRIDGE) return FIX_LEND;
  return FIX_GENERAL;
}

/* Reasons that only concern handing memory over (lending read-only memory,
 * an offset, strides a record leaves to the general path): moot when the
 * source is the destination's own object, returned itself. */
#define J_HANDOVER (J_READONLY | J_ALIAS | J_OFFSET | J_STRIDED | J_EMPTY)

static PyObject *batch_marker;

/* Whether convert returns `obj` itself: a same-library call (is_own) whose
 * judgement needs no fix of the memory, as the library's own identity. A
 * batch's leaf never is (the general path, which a sibling may send the
 * batch to, builds every leaf anew). */
static int itself(const destination *d, PyObject *obj, uint32_t why, PyObject *kwnames) {
  /* an empty tensor's strides only concern handing it over too (restrided, nothing copied): a library's
   * own empty tensor, whatever strides it reports, is still its own */
  uint32_t moot = J_HANDOVER | (why & J_EMPTY ? (uint32_t)J_LAYOUT : 0u);
  return kwnames != batch_marker && (why & ~moot) == 0 && is_own(d, obj);
}

/* What the general path is handed for a source `obj` C imported as `t`: the
 * tensor (read once), but a same-library source itself, whose identity the
 * general path decides by its type. */
static PyObject *for_general(const destination *d, PyObject *obj, PyObject *t) { return is_own(d, obj) ? obj : t; }

/* bridge.convert's own calls into Python, counted (_C.stats()["convert_upcalls"]). */
static PyObject *upcall(bridge_upcall_id which) {
  BUMP(STAT_CONVERT_UPCALLS);
  return bridge_upcall(which);
}

static void view_of_dl(const DLTensor *dl, uint64_t flags, view *v) {
  v->data = (const char *)dl->data + dl->byte_offset;
  v->byte_offset = (int64_t)dl->byte_offset;
  v->device = dl->device;
  v->dtype = dl->dtype;
  v->ndim = dl->ndim;
  v->shape = dl->shape;
  v->strides = dl->strides;
  v->readonly = (flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
  v->elements_in = 0;
  if (flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) v->dtype.lanes = 0; /* the general path's */
}

/* An ndarray over a bridge tensor's memory, holding its storage's owner. */
static PyObject *ndarray_of(TensorObject *t) {
  DLDataType dt = {t->dtype->code, t->dtype->bits, t->dtype->lanes};
  return bridge_numpy_array_over(bridge_storage_owner(t->storage), bridge_tensor_data(t), dt, t->ndim, t->shape,
                                 t->strides, t->storage->readonly);
}

/* ------------------------------------------------------------ the call */

/* The general path, with obj (or the tensor already imported from it) and
 * the caller's own arguments. */
/* A batch's leaves are taken (batch_to) with `batch_marker` as their
 * kwnames: a leaf the fast path does not finish makes the whole batch the
 * general path's (one CopyWarning per call, overlapping copies made as one
 * region), so general() only says so (`needs_general`, a unique object). The
 * mark travels with the call, not in a global: a convert made from inside a
 * leaf's import is a call of its own, and torch's probes may release the GIL
 * mid-batch. */
static PyObject *needs_general;
static PyObject *str_copy_kw, *str_readonly_kw, *str_copy_value, *str_share_value;

static PyObject *general(PyObject *obj, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  if (kwnames == batch_marker) return Py_NewRef(needs_general);
  PyObject *slow = upcall(UP_CONVERT_SLOW);
  if (slow == NULL) return NULL;
  if (obj == args[0]) return PyObject_Vectorcall(slow, args, nargsf, kwnames);
  Py_ssize_t n = PyVectorcall_NARGS(nargsf) + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
  PyObject *stack[8];
  if (n > 8) return PyObject_Vectorcall(slow, args, nargsf, kwnames);
  for (Py_ssize_t i = 0; i < n; i++) stack[i] = args[i];
  stack[0] = obj;
  return PyObject_Vectorcall(slow, stack, PyVectorcall_NARGS(nargsf), kwnames);
}

/* The general path with the bridge tensor `t` C read and judged `why` on
 * this pass: the judgement travels with it (the `judged=` keyword of the
 * up-call), so that Python words and makes the fix without judging again. */
static PyObject *str_judged_kw;

static PyObject *general_judged(PyObject *t, uint32_t why, PyObject *const *args, Py_ssize_t nargsf,
                                PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs + nkw + 1 > 8) return general(t, args, nargsf, kwnames);
  PyObject *slow = upcall(UP_CONVERT_SLOW);
  PyObject *names = slow ? PyTuple_New(nkw + 1) : NULL;
  PyObject *bits = names ? PyLong_FromUnsignedLong(why) : NULL;
  if (bits == NULL) {
    Py_XDECREF(names);
    return NULL;
  }
  PyObject *stack[8];
  for (Py_ssize_t i = 0; i < nargs + nkw; i++) stack[i] = args[i];
  stack[0] = t;
  stack[nargs + nkw] = bits;
  for (Py_ssize_t i = 0; i < nkw; i++) PyTuple_SET_ITEM(names, i, Py_NewRef(PyTuple_GET_ITEM(kwnames, i)));
  PyTuple_SET_ITEM(names, nkw, Py_NewRef(str_judged_kw));
  PyObject *out = PyObject_Vectorcall(slow, stack, nargs, names);
  Py_DECREF(names);
  Py_DECREF(bits);
  return out;
}

/* An ndarray over a managed host tensor with strides (versioned or legacy,
 * whose tensor and flags are `dl` and `flags`), its base releasing it when
 * the array dies: no bridge tensor between. */
static PyObject *ndarray_over_managed(void *m, int versioned, const DLTensor *dl, uint64_t flags) {
  PyObject *owner = bridge_dlpack_owner(m, versioned);
  if (owner == NULL) return NULL;
  PyObject *out = bridge_numpy_array_over(owner, (char *)dl->data + dl->byte_offset, dl->dtype, dl->ndim, dl->shape,
                                          dl->strides, (flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0);
  Py_DECREF(owner);
  return out;
}

/* Hand a managed tensor the destination holds to it (the tensor is the
 * destination's after this, whatever happens). */
static PyObject *take_managed(const destination *d, DLManagedTensorVersioned *m) {
  if (d->take == TAKE_API) {
    void *out = NULL;
    int rc = d->api->managed_tensor_to_py_object_no_sync(m, &out);
    if (bridge_exchange_status(rc == 0 && out == NULL ? -1 : rc, "destination",
                               "managed_tensor_to_py_object_no_sync") < 0) {
      if (rc == 0) Py_XDECREF((PyObject *)out);
      return NULL;
    }
    return (PyObject *)out;
  }
  if (d->take == TAKE_NUMPY && m->dl_tensor.device.device_type == kDLCPU && m->dl_tensor.strides != NULL)
    return ndarray_over_managed(m, 1, &m->dl_tensor, m->flags);
  PyObject *t = bridge_dlpack_take_exchanged(m);
  if (t == NULL || d->take == TAKE_BRIDGE) return t;
  PyObject *out = d->take == TAKE_NUMPY ? ndarray_of((TensorObject *)t) : PyObject_CallOneArg(d->keep, t);
  Py_DECREF(t);
  return out;
}

/* A bridge tensor `d` holds as it is, handed to it. */
static PyObject *take_tensor(const destination *d, TensorObject *t) {
  if (d->take == TAKE_BRIDGE) return Py_NewRef((PyObject *)t);
  if (d->take == TAKE_CALL) return PyObject_CallOneArg(d->keep, (PyObject *)t);
  if (d->take == TAKE_NUMPY) return ndarray_of(t);
  DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)bridge_dlpack_build(t, BRIDGE_BUILD_UNIT_STRIDES, 1);
  return m ? take_managed(d, m) : NULL;
}

/* Whether the call says readonly="share" (defined below). */
static int sharing(PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames);

/* One array's CopyWarning, as Python worded it from the judgement: a
 * prototype per (to, why) for the reasons whose words name nothing of the
 * tensor (read-only memory: the one fix most calls make), so that a later
 * call words it without entering Python; each warning is a new instance of
 * it (BaseException's tp_new: its __init__, which only sets the attributes
 * copied here, is not run again), warned at the caller's line (C has no
 * frame: stacklevel 1 is the Python frame that called convert). */
static PyObject *said_cache, *warn_fn, *said_attrs[3];

static PyObject *warnings_mod;
static PyTypeObject *said_type; /* CopyWarning, known from the first prototype (a strong reference) */

static int warnings_ready(void) {
  if (warn_fn != NULL) return 0;
  PyObject *mod = PyImport_ImportModule("warnings");
  warn_fn = mod ? PyObject_GetAttrString(mod, "warn") : NULL;
  if (warn_fn == NULL) {
    Py_XDECREF(mod);
    return -1;
  }
  warnings_mod = mod;
  return 0;
}

#if !defined(Py_GIL_DISABLED) && PY_VERSION_HEX < 0x030E0000
/* Whether warnings.filters ignores every CopyWarning, whatever its words and
 * wherever it is warned: the first filter whose category CopyWarning is of
 * and that names no message, module or line says "ignore", and every such
 * filter before it that names some says "ignore" too (what CPython's
 * warn_explicit decides before it reads anything else, and then does
 * nothing). Then a warning is neither made nor warned: a loop that filters
 * the copy it accepted pays nothing for it (9k instructions a call). The
 * answer is remembered with the list and the filters it read (strong
 * references, compared by identity: a filter tuple is immutable, and
 * catch_warnings and every filterwarnings/simplefilter make a new list or
 * change the ones read); anything unexpected is "not ignored", so Python
 * decides. Not on a free-threaded build (the memo would need a lock) nor
 * 3.14's context-aware warnings (the filters may live in a context
 * variable). What skipping an ignored warning leaves out is unobservable
 * but for two things: the caller's module gets no __warningregistry__ made
 * for it, and a monkeypatched warnings.warn is not called (the engine
 * calls the one it found first anyway). */
#define IGNORE_READ 16
static PyObject *ignore_list, *ignore_read[IGNORE_READ];
static Py_ssize_t ignore_n;
static int ignore_said, ignore_to_end; /* (to_end: no filter decided: the list's length is read too) */

static int said_ignored(void) {
  if (said_type == NULL || warnings_ready() < 0) {
    PyErr_Clear();
    return 0;
  }
  static PyObject *str_filters, *str_warnings, *pattern_type;
  if ((str_filters == NULL && !(str_filters = PyUnicode_InternFromString("filters"))) ||
      (str_warnings == NULL && !(str_warnings = PyUnicode_InternFromString("warnings")))) {
    PyErr_Clear();
    return 0;
  }
  if (pattern_type == NULL) { /* (a filter's message and module are None, a str or a compiled pattern) */
    PyObject *re = PyImport_ImportModule("re");
    pattern_type = re ? PyObject_GetAttrString(re, "Pattern") : NULL;
    Py_XDECREF(re);
    if (pattern_type == NULL) {
      PyErr_Clear();
      return 0;
    }
  }
  /* CPython reads sys.modules["warnings"].filters at each warning: the module
   * it is now (one put in its place, as CPython's own tests do, is Python's
   * to read), an exact module, whose getattr of "filters" is its dict's */
  PyObject *modules = PyImport_GetModuleDict(); /* (its dict read directly: PyImport_GetModule also asks
                                                 * the module's spec whether it is initializing, 670 Ir) */
  PyObject *now = modules != NULL && PyDict_CheckExact(modules) ? PyDict_GetItemWithError(modules, str_warnings) : NULL;
  int same_module = now == warnings_mod && now != NULL && PyModule_CheckExact(now);
  PyObject *filters = same_module ? PyDict_GetItemWithError(PyModule_GetDict(warnings_mod), str_filters) : NULL;
  if (filters == NULL || !PyList_CheckExact(filters)) {
    PyErr_Clear();
    return 0;
  }
  Py_INCREF(filters);
  Py_ssize_t len = PyList_GET_SIZE(filters);
  int same = filters == ignore_list && (ignore_to_end ? len == ignore_n : len >= ignore_n);
  for (Py_ssize_t i = 0; same && i < ignore_n; i++) same = PyList_GET_ITEM(filters, i) == ignore_read[i];
  if (same) {
    Py_DECREF(filters);
    return ignore_said;
  }
  /* read into locals and remembered at the end: a category's __subclasscheck__ is Python code, which may
   * change the list (its length is read each time) or convert, and so come here again */
  PyObject *read[IGNORE_READ];
  int said = 0, decided = 0;
  Py_ssize_t i = 0;
  for (; i < PyList_GET_SIZE(filters) && i < IGNORE_READ; i++) {
    PyObject *f = read[i] = Py_NewRef(PyList_GET_ITEM(filters, i));
    /* Every filter read is one CPython reads without raising or running code: an action that is a
     * str, a message and a module that are None, a str or a compiled pattern (whose match CPython
     * calls on every filter), a line that is an int, a plain class (no __subclasscheck__, whose
     * answer could change while the filter does not: an ABC's register); else Python decides */
    PyObject *msg = PyTuple_CheckExact(f) && PyTuple_GET_SIZE(f) == 5 ? PyTuple_GET_ITEM(f, 1) : NULL;
    PyObject *mod = msg ? PyTuple_GET_ITEM(f, 3) : NULL, *cat = msg ? PyTuple_GET_ITEM(f, 2) : NULL;
    if (msg == NULL || !PyUnicode_CheckExact(PyTuple_GET_ITEM(f, 0)) || !PyLong_CheckExact(PyTuple_GET_ITEM(f, 4)) ||
        !(msg == Py_None || PyUnicode_CheckExact(msg) || Py_TYPE(msg) == (PyTypeObject *)pattern_type) ||
        !(mod == Py_None || PyUnicode_CheckExact(mod) || Py_TYPE(mod) == (PyTypeObject *)pattern_type) ||
        !Py_IS_TYPE(cat, &PyType_Type)) {
      decided = 1;
      break;
    }
    int of = PyObject_IsSubclass((PyObject *)said_type, cat);
    if (of < 0) {
      PyErr_Clear();
      decided = 1;
      break;
    }
    if (!of) continue;
    PyObject *ln = PyTuple_GET_ITEM(f, 4);
    int ignore = PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(f, 0), "ignore") == 0;
    long line = PyLong_AsLong(ln);
    int always = msg == Py_None && mod == Py_None && line == 0;
    if (line == -1 && PyErr_Occurred()) { /* (a line past a long: CPython's Py_ssize_t may hold it; Python's) */
      PyErr_Clear();
      decided = 1;
      break;
    }
    /* an ignore of some words, modules or lines ignores or passes on: either way the next filter is
     * read as if it were not there (torch's and NumPy's own ignores of their messages, of Warning) */
    if (ignore && !always) continue;
    said = ignore;
    decided = 1;
    break;
  }
  Py_ssize_t n = decided ? i + 1 : i;
  int to_end = !decided;
  if (!decided && i < PyList_GET_SIZE(filters)) said = 0, to_end = 0; /* (more than are read: Python's) */
  PyObject *old_read[IGNORE_READ], *old_list = ignore_list;
  Py_ssize_t old_n = ignore_n;
  for (Py_ssize_t k = 0; k < old_n; k++) old_read[k] = ignore_read[k];
  for (Py_ssize_t k = 0; k < n; k++) ignore_read[k] = read[k];
  ignore_n = n;
  ignore_to_end = to_end;
  ignore_list = filters; /* (the reference taken above) */
  ignore_said = said;
  for (Py_ssize_t k = 0; k < old_n; k++) Py_DECREF(old_read[k]); /* (the old let go last) */
  Py_XDECREF(old_list);
  return said;
}
#else
static int said_ignored(void) { return 0; }
#endif

static int warn_prototype(PyObject *proto) {
  PyObject *args = ((PyBaseExceptionObject *)proto)->args;
  PyTypeObject *tp = Py_TYPE(proto);
  PyObject *w = tp->tp_new(tp, args ? args : Py_None, NULL);
  int rc = w ? 0 : -1;
  PyObject *attrs = ((PyBaseExceptionObject *)proto)->dict;
  if (rc == 0 && tp->tp_dictoffset == (Py_ssize_t)offsetof(PyBaseExceptionObject, dict) && attrs != NULL) {
    /* (its attributes, all set by __init__, in one step: an exception's own dict) */
    PyObject *copy = PyDict_Copy(attrs);
    if (copy == NULL) rc = -1;
    else Py_XSETREF(((PyBaseExceptionObject *)w)->dict, copy);
  } else {
    for (int i = 0; rc == 0 && i < 3; i++) {
      PyObject *v = PyObject_GetAttr(proto, said_attrs[i]);
      rc = v ? PyObject_SetAttr(w, said_attrs[i], v) : -1;
      Py_XDECREF(v);
    }
  }
  if (rc == 0 && said_type == NULL) said_type = (PyTypeObject *)Py_NewRef((PyObject *)tp);
  if (rc == 0) rc = warnings_ready();
  PyObject *r = NULL;
  if (rc == 0) {
    PyObject *level = PyLong_FromLong(1);
    PyObject *call[3] = {w, Py_None, level};
    r = level ? PyObject_Vectorcall(warn_fn, call, 3, NULL) : NULL;
    Py_XDECREF(level);
  }
  Py_XDECREF(w);
  Py_XDECREF(r);
  return r == NULL ? -1 : 0;
}

/* One array's strides (in elements), as a tuple of ints. */
static PyObject *strides_of(TensorObject *t) {
  PyObject *out = PyTuple_New(t->ndim);
  for (int i = 0; out != NULL && i < t->ndim; i++) {
    PyObject *s = PyLong_FromLongLong(t->strides[i]);
    if (s == NULL) Py_CLEAR(out);
    else PyTuple_SET_ITEM(out, i, s);
  }
  return out;
}

/* The CopyWarning of what the engine copied unasked, worded by Python from
 * C's judgement (the convert_copied up-call): one array (`t`, judged `why`),
 * or the leaves `names` of a batch or a table of `total` (t NULL; a list of
 * (path, why, tensor or None for Arrow values), a path a tuple of keys and
 * indexes). Python returns the warning and what its words depend on besides
 * the destination and the judgements: 1 nothing (remembered by (to, why), or
 * (to, total, the leaves' paths and judgements)), 2 one array's strides
 * (remembered by (to, why, strides)), 0 more; a remembered one is warned
 * again without entering Python (warn_prototype). 0, or -1 with an exception
 * (a warning made an error). */
static int warn_copied(PyObject *to, uint32_t why, TensorObject *t, PyObject *names, Py_ssize_t total) {
  if (said_ignored()) return 0;
  PyObject *key, *by_strides = NULL, *proto = NULL;
  if (names == NULL) {
    key = Py_BuildValue("(OI)", to, (unsigned int)why);
    proto = key && said_cache ? PyDict_GetItemWithError(said_cache, key) : NULL;
    if (key != NULL && proto == NULL && !PyErr_Occurred() && t != NULL) { /* (a layout's words name its strides) */
      PyObject *strides = strides_of(t);
      by_strides = strides ? Py_BuildValue("(OIN)", to, (unsigned int)why, strides) : NULL;
      if (by_strides == NULL) Py_CLEAR(key);
      else if (said_cache != NULL) proto = PyDict_GetItemWithError(said_cache, by_strides);
    }
  } else {
    Py_ssize_t n = PyList_GET_SIZE(names);
    PyObject *said = PyTuple_New(n);
    for (Py_ssize_t i = 0; said != NULL && i < n; i++) {
      PyObject *leaf = PyList_GET_ITEM(names, i); /* (path, why, tensor) */
      PyObject *pair = PyTuple_Pack(2, PyTuple_GET_ITEM(leaf, 0), PyTuple_GET_ITEM(leaf, 1));
      if (pair == NULL) Py_CLEAR(said);
      else PyTuple_SET_ITEM(said, i, pair);
    }
    key = said ? Py_BuildValue("(OnN)", to, total, said) : NULL;
    proto = key && said_cache ? PyDict_GetItemWithError(said_cache, key) : NULL;
  }
  if (key == NULL) return -1; /* (by_strides is made only with a key) */
  if (proto != NULL) {
    Py_XDECREF(by_strides);
    Py_DECREF(key);
    Py_INCREF(proto); /* (a warning's code may clear the cache) */
    int rc = warn_prototype(proto);
    Py_DECREF(proto);
    return rc;
  }
  if (PyErr_Occurred()) {
    Py_XDECREF(by_strides);
    Py_DECREF(key);
    return -1;
  }
  PyObject *fn = upcall(UP_CONVERT_COPIED);
  PyObject *bits = fn ? PyLong_FromUnsignedLong(why) : NULL;
  PyObject *count = bits ? PyLong_FromSsize_t(total) : NULL;
  PyObject *r = NULL;
  if (count != NULL) {
    PyObject *call[5] = {to, bits, t ? (PyObject *)t : Py_None, names ? names : Py_None, count};
    r = PyObject_Vectorcall(fn, call, 5, NULL);
  }
  Py_XDECREF(bits);
  Py_XDECREF(count);
  int rc = r == NULL ? -1 : 0;
  if (rc == 0) { /* (prototype, remember): warned here */
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2) {
      PyErr_SetString(PyExc_SystemError, "convert_copied returned no (warning, remember) pair");
      rc = -1;
    } else {
      proto = PyTuple_GET_ITEM(r, 0);
      long by = PyLong_Check(PyTuple_GET_ITEM(r, 1)) ? PyLong_AsLong(PyTuple_GET_ITEM(r, 1)) : 0;
      PyObject *as = by == 1 ? key : by == 2 ? by_strides : NULL;
      if (by == -1 && PyErr_Occurred()) rc = -1;
      if (as != NULL) {
        if (said_cache == NULL || PyDict_GET_SIZE(said_cache) >= 256) Py_XSETREF(said_cache, PyDict_New());
        if (said_cache == NULL || PyDict_SetItem(said_cache, as, proto) < 0) rc = -1;
      }
      if (rc == 0) rc = warn_prototype(proto);
    }
  }
  Py_XDECREF(by_strides);
  Py_DECREF(key);
  Py_XDECREF(r);
  return rc;
}

/* The results of a batch's leaves so far, by source object: the same array
 * twice is one result (as on the general path), and one import (a
 * destination may not take the same memory twice: paddle releases one of
 * two imports of it). A few compared directly, the rest in a dict by address. */
#define MEMO_DIRECT 16
typedef struct {
  Py_ssize_t n;
  PyObject *keys[MEMO_DIRECT], *values[MEMO_DIRECT]; /* owned (a key cannot die and its address be reused) */
  PyObject *more;                                    /* id -> (leaf, result), past MEMO_DIRECT */
} memo;

static PyObject *memo_get(memo *m, PyObject *leaf) {
  for (Py_ssize_t i = 0; i < m->n && i < MEMO_DIRECT; i++)
    if (m->keys[i] == leaf) return Py_NewRef(m->values[i]);
  if (m->more == NULL) return NULL;
  PyObject *key = PyLong_FromVoidPtr(leaf);
  PyObject *found = key ? PyDict_GetItemWithError(m->more, key) : NULL;
  Py_XDECREF(key);
  return found ? Py_NewRef(PyTuple_GET_ITEM(found, 1)) : NULL;
}

static int memo_put(memo *m, PyObject *leaf, PyObject *result) {
  if (m->n < MEMO_DIRECT) {
    m->keys[m->n] = Py_NewRef(leaf);
    m->values[m->n++] = Py_NewRef(result);
    return 0;
  }
  if (m->more == NULL && (m->more = PyDict_New()) == NULL) return -1;
  PyObject *key = PyLong_FromVoidPtr(leaf), *pair = PyTuple_Pack(2, leaf, result);
  int rc = key && pair ? PyDict_SetItem(m->more, key, pair) : -1;
  Py_XDECREF(key);
  Py_XDECREF(pair);
  return rc;
}

static void memo_clear(memo *m) {
  for (Py_ssize_t i = 0; i < m->n; i++) {
    Py_DECREF(m->keys[i]);
    Py_DECREF(m->values[i]);
  }
  Py_CLEAR(m->more);
}

#define BATCH_MAX_DEPTH 32

typedef struct {
  uintptr_t lo, hi;
} extent;

/* One batch call on the engine's one traversal: its leaves' results so far,
 * how many were taken, whether the call shares read-only memory, the path of
 * the leaf being taken (a dict's key, or NULL and a list's or tuple's index;
 * borrowed from the snapshot batch_to walks), and what was copied unasked:
 * (path, judgement, tensor or None) for the warning, and the bytes each read
 * (copies that overlap are the general path's: it copies them as one region). */
typedef struct {
  memo seen;
  Py_ssize_t arrays;
  int share, depth;
  PyObject *keys[BATCH_MAX_DEPTH];
  Py_ssize_t idx[BATCH_MAX_DEPTH];
  PyObject *copied;
  extent *ext;
  Py_ssize_t next, room;
} batch;

/* The leaf being taken (its source's bytes [lo, hi), `t` the tensor read
 * from it or NULL for Arrow values) was copied unasked for `why`: kept for
 * the batch's one CopyWarning. 0, or -1 with an exception. */
static int batch_copied(batch *b, PyObject *t, uint32_t why, uintptr_t lo, uintptr_t hi) {
  if (b->next == b->room) {
    Py_ssize_t room = b->room ? 2 * b->room : 8;
    extent *more = PyMem_Realloc(b->ext, (size_t)room * sizeof(extent));
    if (more == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    b->ext = more;
    b->room = room;
  }
  if (hi > lo) b->ext[b->next++] = (extent){lo, hi}; /* (an empty one overlaps nothing) */
  PyObject *path = PyTuple_New(b->depth);
  for (int k = 0; path != NULL && k < b->depth; k++) {
    PyObject *key = b->keys[k] ? Py_NewRef(b->keys[k]) : PyLong_FromSsize_t(b->idx[k]);
    if (key == NULL) Py_CLEAR(path);
    else PyTuple_SET_ITEM(path, k, key);
  }
  PyObject *said = path ? Py_BuildValue("(NIO)", path, (unsigned int)why, t ? t : Py_None) : NULL;
  if (said != NULL && b->copied == NULL) b->copied = PyList_New(0);
  int rc = said && b->copied ? PyList_Append(b->copied, said) : -1;
  Py_XDECREF(said);
  return rc;
}

/* The bytes tensor `t` reads, [lo, hi) (lo == hi when empty or past int64). */
static void tensor_extent(TensorObject *t, uintptr_t *lo, uintptr_t *hi) {
  uintptr_t start;
  int64_t nbytes, offset;
  if (bridge_foreign_span((uintptr_t)bridge_tensor_data(t), t->ndim, t->shape, t->strides, t->dtype->itemsize,
                          &start, &nbytes, &offset) < 0)
    nbytes = 0, start = 0;
  *lo = start;
  *hi = start + (uintptr_t)nbytes;
}

/* Read-only host tensor `t` lent to `d` through a writable alias (FIX_LEND):
 * an ndarray over its memory, a managed tensor without the READ_ONLY flag,
 * or (a destination called with a bridge tensor) a writable bridge tensor
 * over it, each keeping `t` (and so its memory) alive. */
static PyObject *lend_tensor(const destination *d, TensorObject *t) {
  DLDataType dt = {t->dtype->code, t->dtype->bits, t->dtype->lanes};
  if (d->take == TAKE_NUMPY)
    return bridge_numpy_array_over((PyObject *)t, bridge_tensor_data(t), dt, t->ndim, t->shape, t->strides, 0);
  if (bridge_tensor_check_bounds(t, PyExc_BufferError) < 0) return NULL;
  DLDevice dev = {(DLDeviceType)t->storage->dev_type, t->storage->dev_id};
  DLManagedTensorVersioned *m = bridge_dlpack_build_owned((PyObject *)t, bridge_tensor_data(t), dev, dt, t->ndim,
                                                          t->shape, t->strides, BRIDGE_BUILD_UNIT_STRIDES);
  if (m == NULL) return NULL;
  if (d->take != TAKE_CALL) return take_managed(d, m);
  PyObject *alias = bridge_dlpack_take(m, 1);
  PyObject *out = alias ? PyObject_CallOneArg(d->keep, alias) : NULL;
  Py_XDECREF(alias);
  return out;
}

/* Whether the leaf or call shares read-only memory (readonly="share"). */
static int shares(batch *b, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  return b ? b->share : sharing(args, nargsf, kwnames);
}

/* A bridge tensor that `d` does not hold as it is (judged `why` on this
 * pass: never judged again) given to it with its fix made here (fix_of),
 * the CopyWarning worded by Python from the judgement (a batch's leaf: kept
 * in `b` for the batch's one warning); else the general path's, handed `obj`
 * (a batch's leaf: the whole batch). */
static PyObject *tensor_fixed(const destination *d, TensorObject *t, uint32_t why, PyObject *obj,
                              PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames, batch *b) {
  if (kwnames == batch_marker && b == NULL) return Py_NewRef(needs_general);
  int how = fix_of(d, why, shares(b, args, nargsf, kwnames));
  /* the judgement travels with the tensor it judged, but for an offset (the
   * import folded it) and a dtype refused (a record's dtypes are those at
   * registration: jax holds 64-bit ones once jax_enable_x64 is set) */
  if (how == FIX_GENERAL && kwnames != batch_marker && obj == (PyObject *)t &&
      !(why & (J_NOT_JUDGED | J_OFFSET | J_DTYPE)))
    return general_judged(obj, why, args, nargsf, kwnames);
  if (how == FIX_GENERAL) return general(obj, args, nargsf, kwnames); /* (a batch's leaf: needs_general) */
  if (how == FIX_LEND) return lend_tensor(d, t);
  PyObject *c = bridge_tensor_rowmajor_copy(t);
  if (c == NULL) return NULL;
  PyObject *out = take_tensor(d, (TensorObject *)c);
  Py_DECREF(c);
  if (out != NULL && b != NULL) {
    uintptr_t lo, hi;
    tensor_extent(t, &lo, &hi);
    if (batch_copied(b, (PyObject *)t, why, lo, hi) < 0) Py_CLEAR(out);
  } else if (out != NULL && warn_copied(args[1], why, t, NULL, 1) < 0) {
    Py_CLEAR(out);
  }
  return out;
}

/* A bridge tensor (the source, or what the source was imported as) into
 * one registered destination; `obj` is what the general path is handed. */
static PyObject *tensor_to(const destination *d, TensorObject *t, PyObject *obj, PyObject *const *args,
                           Py_ssize_t nargsf, PyObject *kwnames, batch *b) {
  view v;
  if (d->take == TAKE_BRIDGE) return Py_NewRef((PyObject *)t);
  view_of_tensor(t, &v);
  uint32_t why = judged(d, &v);
  return why == 0 ? take_tensor(d, t) : tensor_fixed(d, t, why, obj, args, nargsf, kwnames, b);
}

static PyObject *str_dlpack_method, *str_arrow_array, *str_arrow_stream;

/* jaxlib's array type (by name: jax is not imported for this). */
static int is_jax_array(PyTypeObject *tp) {
  static PyTypeObject *seen;
  if (tp == seen) return 1;
  const char *n = tp->tp_name;
  if (strncmp(n, "jaxlib.", 7) != 0 || strlen(n) < 10 || strcmp(n + strlen(n) - 10, ".ArrayImpl") != 0) return 0;
  seen = tp;
  return 1;
}

/* An Arrow array's values into one registered destination: straight to
 * NumPy's C API or the destination's exchange API when it holds them as they
 * are (read-only, 1-d), else as a bridge tensor (which the general path fixes). */
/* Whether the call says readonly="share" (read-only memory lent to a
 * destination that may write it: the caller's word that it will not). A
 * batch's leaves carry no keywords: the batch reads it once (batch.share). */
static int sharing(PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  if (kwnames == NULL || kwnames == batch_marker) return 0;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); i++) {
    PyObject *name = PyTuple_GET_ITEM(kwnames, i), *value = args[nargs + i];
    if (name == str_readonly_kw || PyUnicode_Compare(name, str_readonly_kw) == 0)
      return value == str_share_value || (PyUnicode_Check(value) && PyUnicode_Compare(value, str_share_value) == 0);
  }
  return 0;
}

/* How a destination takes Arrow values (read-only): as they are; lent
 * through a writable alias (readonly="share"); copied into fresh writable
 * memory (the default policy's fix for read-only memory it could write, the
 * one fix made here: its warning is the general path's words); or not here. */
enum { VALUES_GENERAL, VALUES_AS_IS, VALUES_LENT, VALUES_COPIED };

static int values_plan(const destination *d, const bridge_arrow_values *av, int share, int copy, uint32_t *why) {
  view v = {av->data, 0, {kDLCPU, 0}, av->dtype, 1, &av->length, NULL, 1};
  *why = 0;
  if (d->take == TAKE_BRIDGE) return VALUES_GENERAL; /* bridge holds whatever it imports: no judgement */
  *why = judged(d, &v);
  if (*why == 0) return d->take == TAKE_NUMPY || d->take == TAKE_API ? VALUES_AS_IS : VALUES_GENERAL;
  if (*why != J_READONLY || (!share && !copy)) return VALUES_GENERAL; /* read-only must be the one reason */
  if (d->take != TAKE_NUMPY && d->take != TAKE_API) return VALUES_GENERAL;
  return share ? VALUES_LENT : VALUES_COPIED;
}

/* 1-d values at `data` (kept alive by `owner`, which is not taken) as the
 * destination's object. */
static PyObject *values_hand(const destination *d, PyObject *owner, char *data, DLDataType dtype, int64_t length,
                             int readonly) {
  int64_t stride = 1;
  if (d->take == TAKE_NUMPY) return bridge_numpy_array_over(owner, data, dtype, 1, &length, &stride, readonly);
  DLManagedTensorVersioned *m = bridge_dlpack_build_owned(owner, data, (DLDevice){kDLCPU, 0}, dtype, 1, &length,
                                                          &stride, readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0);
  PyObject *out = m ? take_managed(d, m) : NULL;
  if (out == NULL && !PyErr_Occurred()) PyErr_SetString(PyExc_BufferError, "the destination took no tensor");
  return out;
}

/* The bytes of Arrow values; 0 when they do not fit an int64 (the caller
 * leaves them to the general path). */
static int64_t values_bytes(const bridge_arrow_values *av) {
  int64_t n;
  return __builtin_mul_overflow(av->length, (int64_t)(av->dtype.bits / 8) * av->dtype.lanes, &n) ? 0 : n;
}

/* Arrow values (read-only, held by av->guard, which is not taken) as the
 * destination's object, judged once: as they are; lent through a writable
 * alias (readonly="share"); copied into fresh writable memory (the default
 * policy, with its CopyWarning); else as a bridge tensor, with that
 * judgement, for tensor_fixed (a layout or alignment copy) or the general
 * path. */
static PyObject *arrow_to(const destination *d, PyObject *obj, PyObject *const *args, Py_ssize_t nargsf,
                          PyObject *kwnames, batch *b) {
  bridge_arrow_values av;
  int got = bridge_arrow_values_of(obj, &av);
  if (got <= 0) return got < 0 ? NULL : general(obj, args, nargsf, kwnames);
  BUMP(STAT_CONVERT_READS);
  uint32_t why;
  int how = values_plan(d, &av, shares(b, args, nargsf, kwnames), kwnames != batch_marker || b != NULL, &why);
  int64_t nbytes = how == VALUES_COPIED ? values_bytes(&av) : 0;
  if (how == VALUES_COPIED && nbytes > 0) {
    char *data;
    PyObject *owner = bridge_memory_new(nbytes, 0, &data);
    PyObject *out = NULL;
    if (owner != NULL) {
      memcpy(data, av.data, (size_t)nbytes);
      out = values_hand(d, owner, data, av.dtype, av.length, 0);
      Py_DECREF(owner);
    }
    Py_DECREF(av.guard);
    if (out != NULL && (b ? batch_copied(b, NULL, why, (uintptr_t)av.data, (uintptr_t)av.data + (uintptr_t)nbytes)
                          : warn_copied(args[1], why, NULL, NULL, 1)) < 0)
      Py_CLEAR(out);
    return out;
  }
  if (itself(d, obj, why, kwnames)) { /* a same-library call: its input, as the library's own identity */
    Py_DECREF(av.guard);
    return Py_NewRef(obj);
  }
  if (how == VALUES_AS_IS || how == VALUES_LENT) {
    PyObject *out = values_hand(d, av.guard, (char *)av.data, av.dtype, av.length, how == VALUES_AS_IS);
    Py_DECREF(av.guard);
    return out;
  }
  PyObject *t = bridge_arrow_values_tensor(&av);
  if (t == NULL) return NULL;
  PyObject *out = why == 0 ? take_tensor(d, (TensorObject *)t)
                           : tensor_fixed(d, (TensorObject *)t, why, for_general(d, obj, t), args, nargsf, kwnames, b);
  Py_DECREF(t);
  return out;
}

/* A table column's plan (values_plan) and, copied, its new block and owner. */
typedef struct {
  int how;
  char *data;
  PyObject *owner;
} planned;

static int by_start(const void *a, const void *b) {
  uintptr_t x = ((const extent *)a)->lo, y = ((const extent *)b)->lo;
  return (x > y) - (x < y);
}

/* Whether any two of the n extents share a byte (sorts them). */
static int any_overlap(extent *e, Py_ssize_t n) {
  qsort(e, (size_t)n, sizeof(extent), by_start);
  uintptr_t end = n > 0 ? e[0].hi : 0; /* the furthest any earlier one reaches */
  for (Py_ssize_t i = 1; i < n; i++) {
    if (e[i].lo < end) return 1;
    if (e[i].hi > end) end = e[i].hi;
  }
  return 0;
}

/* Copies of at least this many bytes run without the GIL (the copy kernel's bar). */
#define TABLE_NOGIL_MIN_BYTES (1 << 20)

/* The columns planned VALUES_COPIED, copied into fresh writable blocks (one
 * each: a column kept outlives the others' memory), each block and owner
 * set in its plan, on several threads when they are large. 0, or -1 with an
 * exception (the owners made so far are the caller's to release). */
static int copy_columns(const bridge_arrow_values *cols, planned *pl, Py_ssize_t n) {
  bridge_span *spans = PyMem_Malloc((size_t)n * sizeof(bridge_span));
  if (spans == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  int k = 0;
  int64_t total = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    if (pl[i].how != VALUES_COPIED) continue;
    int64_t nbytes = values_bytes(&cols[i]);
    pl[i].owner = bridge_memory_new(nbytes, 0, &pl[i].data);
    if (pl[i].owner == NULL) {
      PyMem_Free(spans);
      return -1;
    }
    spans[k++] = (bridge_span){pl[i].data, cols[i].data, nbytes};
    if (__builtin_add_overflow(total, nbytes, &total)) total = INT64_MAX;
  }
  if (total >= TABLE_NOGIL_MIN_BYTES) {
    /* the guards (the caller's) and the new owners keep every block alive */
    Py_BEGIN_ALLOW_THREADS
    bridge_copy_spans(spans, k);
    Py_END_ALLOW_THREADS
  } else {
    bridge_copy_spans(spans, k);
  }
  PyMem_Free(spans);
  return 0;
}

/* The columns planned VALUES_COPIED, of the k at `idx`, as warn_copied
 * takes copied leaves: a new list of ((name,), J_READONLY, None). */
static PyObject *copied_names(PyObject *names, const planned *pl, const Py_ssize_t *idx, Py_ssize_t k) {
  PyObject *copied = PyList_New(0);
  for (Py_ssize_t c = 0; copied != NULL && c < k; c++) {
    if (pl[idx[c]].how != VALUES_COPIED) continue;
    PyObject *said = Py_BuildValue("((O)IO)", PyTuple_GET_ITEM(names, idx[c]), (unsigned int)J_READONLY, Py_None);
    if (said == NULL || PyList_Append(copied, said) < 0) Py_CLEAR(copied);
    Py_XDECREF(said);
  }
  return copied;
}

/* The positions of the `chosen` columns (a list or tuple of str; NULL: all
 * n) among `names`, in idx (room for max(n, len(chosen))): their count, or
 * -1 when the general path must say or decide it (a name the table lacks
 * or has twice, a name chosen twice, a label that is not a str). */
static Py_ssize_t chosen_columns(PyObject *names, Py_ssize_t n, PyObject *chosen, Py_ssize_t *idx) {
  if (chosen == NULL) {
    for (Py_ssize_t i = 0; i < n; i++) idx[i] = i;
    return n;
  }
  Py_ssize_t k = PySequence_Fast_GET_SIZE(chosen);
  for (Py_ssize_t c = 0; c < k; c++) {
    PyObject *want = PySequence_Fast_GET_ITEM(chosen, c);
    if (!PyUnicode_CheckExact(want)) return -1;
    idx[c] = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
      int eq = PyUnicode_Compare(PyTuple_GET_ITEM(names, i), want);
      if (eq == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
      }
      if (eq != 0) continue;
      if (idx[c] >= 0) return -1; /* the table has it twice */
      idx[c] = i;
    }
    if (idx[c] < 0) return -1;
    for (Py_ssize_t e = 0; e < c; e++)
      if (idx[e] == idx[c]) return -1;
  }
  return k;
}

/* A table (bridge_arrow_columns_of) as a dict of column name -> the
 * destination's object, when it holds every column as it is, or with the
 * default policy's one fix (read-only columns copied: one block each, one
 * CopyWarning for the table); else the general path's, whole (its fixes per
 * column). Columns whose memory overlaps are the general path's too: they
 * are copied as one region there, so they still share memory after. */
static PyObject *table_to(const destination *d, PyObject *obj, PyObject *const *args, Py_ssize_t nargsf,
                          PyObject *kwnames, PyObject *chosen) {
  PyObject *names;
  bridge_arrow_values *cols;
  Py_ssize_t n;
  int got = bridge_arrow_columns_of(obj, &names, &cols, &n);
  if (got <= 0) return got < 0 ? NULL : general(obj, args, nargsf, kwnames);
  int share = sharing(args, nargsf, kwnames), copy = !share && kwnames != batch_marker;
  Py_ssize_t room = chosen && PySequence_Fast_GET_SIZE(chosen) > n ? PySequence_Fast_GET_SIZE(chosen) : n;
  /* the plans, then the extents of the columns to copy, then the chosen positions, in one block */
  planned *pl = PyMem_Calloc((size_t)room + 1, sizeof(planned) + sizeof(extent) + sizeof(Py_ssize_t));
  extent *ext = pl ? (extent *)(pl + room + 1) : NULL;
  Py_ssize_t *idx = pl ? (Py_ssize_t *)(ext + room + 1) : NULL;
  PyObject *out = NULL;
  int fallback = 0;
  Py_ssize_t ncopied = 0, k = 0;
  if (pl == NULL) {
    PyErr_NoMemory();
    goto done;
  }
  k = chosen_columns(names, n, chosen, idx);
  fallback = k < 0;
  for (Py_ssize_t c = 0; !fallback && c < k; c++) BUMP(STAT_CONVERT_READS); /* a column each */
  for (Py_ssize_t c = 0; !fallback && c < k; c++) {
    Py_ssize_t i = idx[c];
    uint32_t why;
    pl[i].how = values_plan(d, &cols[i], share, copy, &why);
    if (pl[i].how == VALUES_COPIED) {
      int64_t nbytes = values_bytes(&cols[i]);
      ext[ncopied++] = (extent){(uintptr_t)cols[i].data, (uintptr_t)cols[i].data + (uintptr_t)nbytes};
      fallback = nbytes == 0;
    }
    fallback |= pl[i].how == VALUES_GENERAL;
  }
  if (fallback || (ncopied > 1 && any_overlap(ext, ncopied))) goto done;
  if (ncopied > 0 && copy_columns(cols, pl, n) < 0) goto done;
  out = PyDict_New();
  for (Py_ssize_t c = 0; out != NULL && c < k; c++) {
    Py_ssize_t i = idx[c];
    int copied = pl[i].how == VALUES_COPIED;
    PyObject *col = values_hand(d, copied ? pl[i].owner : cols[i].guard, copied ? pl[i].data : (char *)cols[i].data,
                                cols[i].dtype, cols[i].length, pl[i].how == VALUES_AS_IS);
    int rc = col == NULL ? -1 : PyDict_SetItem(out, PyTuple_GET_ITEM(names, i), col);
    Py_XDECREF(col);
    if (rc < 0) Py_CLEAR(out);
  }
  if (out != NULL && PyDict_GET_SIZE(out) != k) /* a name twice: the general path says which */
    Py_CLEAR(out);
  if (out != NULL && ncopied > 0) {
    PyObject *copied = copied_names(names, pl, idx, k);
    if (copied == NULL || warn_copied(args[1], 0, NULL, copied, k) < 0) Py_CLEAR(out);
    Py_XDECREF(copied);
  }
done:
  for (Py_ssize_t i = 0; i < n; i++) {
    Py_DECREF(cols[i].guard);
    if (pl != NULL) Py_XDECREF(pl[i].owner);
  }
  PyMem_Free(cols);
  PyMem_Free(pl);
  Py_DECREF(names);
  if (out != NULL || PyErr_Occurred()) return out;
  return general(obj, args, nargsf, kwnames); /* a column it does not hold as it is, or with the one fix */
}

/* The fast path into one registered destination. */
static PyObject *batch_call(const destination *d, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames);

static PyObject *convert_to(const destination *d, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames,
                            batch *b) {
  PyObject *obj = args[0];
  if (Tensor_Check(obj)) return tensor_to(d, (TensorObject *)obj, obj, args, nargsf, kwnames, b);
  PyTypeObject *tp = Py_TYPE(obj);
  DLManagedTensorVersioned *m = NULL;
  int got = 0;
  view v;
  if (tp == (PyTypeObject *)bridge_upcall_peek(UP_NDARRAY)) {
    DLTensor dl;
    int64_t shape[BRIDGE_MAX_NDIM], strides[BRIDGE_MAX_NDIM];
    int readonly;
    if (!bridge_numpy_describe(obj, &dl, shape, strides, &readonly)) return general(obj, args, nargsf, kwnames);
    BUMP(STAT_CONVERT_READS);
    view_of_dl(&dl, readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0, &v);
    uint32_t why = d->take == TAKE_BRIDGE ? 0 : judged(d, &v); /* (bridge holds whatever it imports) */
    if (itself(d, obj, why, kwnames)) return Py_NewRef(obj);
    if (why != 0) { /* a fix made here: the array as a bridge tensor, its judgement kept */
      if (fix_of(d, why, shares(b, args, nargsf, kwnames)) == FIX_GENERAL || (kwnames == batch_marker && b == NULL))
        return general(obj, args, nargsf, kwnames);
      m = bridge_dlpack_build_owned(obj, dl.data, dl.device, dl.dtype, dl.ndim, shape, strides,
                                    readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0);
      PyObject *t = m ? bridge_dlpack_take(m, 1) : NULL;
      PyObject *out = t ? tensor_fixed(d, (TensorObject *)t, why, t, args, nargsf, kwnames, b) : NULL;
      Py_XDECREF(t);
      return out;
    }
    if (d->take == TAKE_NUMPY) return bridge_numpy_array_over(obj, dl.data, dl.dtype, dl.ndim, shape, strides, readonly);
    m = bridge_dlpack_build_owned(obj, dl.data, dl.device, dl.dtype, dl.ndim, shape, strides,
                                  readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0);
    return m ? take_managed(d, m) : NULL;
  }
  if (tp == &PyDict_Type || tp == &PyList_Type || tp == &PyTuple_Type) /* a batch: after the hot types, which pay nothing for it */
    return batch_call(d, args, nargsf, kwnames); /* (batch_to takes a batch's inner containers itself) */
  if (tp != &PyCapsule_Type) {
    PyObject *api = bridge_exchange_api_of(tp);
    if (api == NULL) return NULL;
    if (api != Py_None && d->take == TAKE_BRIDGE) { /* bridge.from_dlpack's import, torch's borrowed one too */
      PyObject *t = bridge_exchange_import(obj);
      if (t != NULL) BUMP(STAT_CONVERT_READS);
      return t != NULL || PyErr_Occurred() ? t : general(obj, args, nargsf, kwnames);
    } else if (api != Py_None) {
      got = bridge_exchange_managed(api, obj, &m);
    } else if (_PyType_Lookup(tp, str_arrow_array) != NULL ||
               (_PyType_Lookup(tp, str_arrow_stream) != NULL && _PyType_Lookup(tp, str_dlpack_method) == NULL)) {
      /* Arrow (pyarrow, nanoarrow, polars): a plain primitive array is read
       * here; bit-packed bools, nulls, chunks, nested types go to the general
       * path, which names the fix or the refusal */
      return bridge_arrow_is_table(tp) ? table_to(d, obj, args, nargsf, kwnames, NULL)
                                       : arrow_to(d, obj, args, nargsf, kwnames, b);
    } else if (_PyType_Lookup(tp, str_dlpack_method) != NULL) {
      /* a jax array on the host: its buffer (the buffer protocol waits for the
       * array to be computed, as its __dlpack__ does; read-only), without
       * jax's Python __dlpack__ and __dlpack_device__; on a GPU it refuses
       * (CPU buffers only) and DLPack is asked instead */
      int jax = is_jax_array(tp);
      if (kwnames == batch_marker && !jax) /* asking may use a one-shot producer up: the general path asks it, once */
        return Py_NewRef(needs_general);
      PyObject *t = jax ? bridge_buffer_tensor(obj) : NULL;
      uint32_t why = UINT32_MAX; /* not judged yet */
      if (t == NULL && kwnames == batch_marker) {
        PyErr_Clear();
        return Py_NewRef(needs_general);
      }
      if (t == NULL && d->take != TAKE_BRIDGE) {
        /* a DLPack producer without the C API: asked once, as bridge.from_dlpack
         * asks it; a valid host tensor the destination holds goes to it as it
         * is (no bridge tensor between), any other is imported */
        PyErr_Clear();
        void *raw;
        int versioned;
        /* a managed tensor only where it goes on as one (an exchange API, NumPy's
         * array over it); a destination called with a bridge tensor gets the import */
        int managed = d->take == TAKE_API || d->take == TAKE_NUMPY;
        if (bridge_dlpack_ask_managed(obj, managed, &raw, &versioned, &t) > 0) {
          /* a legacy tensor cannot say it may be written: read-only, as from_dlpack reads it */
          DLManagedTensorVersioned *vm = versioned ? (DLManagedTensorVersioned *)raw : NULL;
          const DLTensor *dl = vm ? &vm->dl_tensor : &((DLManagedTensor *)raw)->dl_tensor;
          uint64_t flags = vm ? vm->flags : DLPACK_FLAG_BITMASK_READ_ONLY;
          view_of_dl(dl, flags, &v);
          why = judged(d, &v);
          if (itself(d, obj, why, kwnames)) {
            BUMP(STAT_CONVERT_READS);
            bridge_dlpack_call_deleter(raw, versioned);
            return Py_NewRef(obj);
          }
          if (why == 0 && (vm != NULL || d->take == TAKE_NUMPY)) {
            BUMP(STAT_CONVERT_READS);
            return vm ? take_managed(d, vm) : ndarray_over_managed(raw, 0, dl, flags);
          }
          if (why & J_OFFSET) why = UINT32_MAX; /* the import folds it into the pointer: judged again */
          t = bridge_dlpack_take(raw, versioned);
        }
      } else if (t == NULL) {
        PyErr_Clear();
        /* a DLPack producer without the C API: asked once, as bridge.from_dlpack asks it */
        t = bridge_dlpack_ask(obj, 0);
      }
      if (t == NULL) { /* the general path explains it, or imports it another way (Arrow's bools) */
        PyErr_Clear();
        return general(obj, args, nargsf, kwnames);
      }
      BUMP(STAT_CONVERT_READS);
      if (why == UINT32_MAX && d->take != TAKE_BRIDGE) {
        view_of_tensor((TensorObject *)t, &v);
        why = judged(d, &v);
      }
      PyObject *out = itself(d, obj, why, kwnames) ? Py_NewRef(obj)
                      : why == 0 || d->take == TAKE_BRIDGE
                          ? take_tensor(d, (TensorObject *)t)
                          : tensor_fixed(d, (TensorObject *)t, why, for_general(d, obj, t), args, nargsf, kwnames, b);
      Py_DECREF(t);
      return out;
    }
  }
  if (got <= 0) return got < 0 ? NULL : general(obj, args, nargsf, kwnames);
  BUMP(STAT_CONVERT_READS);
  if (d->take == TAKE_BRIDGE) return take_managed(d, m); /* bridge holds whatever it imports: no fix */
  view_of_dl(&m->dl_tensor, m->flags, &v);
  uint32_t why = judged(d, &v);
  if (itself(d, obj, why, kwnames)) { /* a same-library call: its input, as the library's own identity */
    if (m->deleter) m->deleter(m);
    return Py_NewRef(obj);
  }
  if (why == 0) return take_managed(d, m);
  PyObject *t = bridge_dlpack_take_exchanged(m); /* imported once: fixed here, or by the general path */
  if (t == NULL) return NULL;
  PyObject *out = tensor_fixed(d, (TensorObject *)t, why & J_OFFSET ? J_OFFSET : why, for_general(d, obj, t), args,
                               nargsf, kwnames, b);
  Py_DECREF(t);
  return out;
}

/* ------------------------------------------------------------ batches */

/* A leaf kept as it is (a value, not memory: as torch's default_convert keeps it). */
static int is_value(PyObject *o) {
  PyTypeObject *tp = Py_TYPE(o);
  return o == Py_None || tp == &PyUnicode_Type || tp == &PyLong_Type || tp == &PyFloat_Type || tp == &PyBool_Type ||
         tp == &PyBytes_Type;
}

/* `obj` (a dict, list or tuple, nested) with each array leaf taken into
 * `d` on the one pass (as it is, or with its fix: tensor_fixed keeps what it
 * copied in `b`) and every value kept; `needs_general` when a leaf or a
 * container is the general path's (bridge.crossing.units decides those).
 * `args` is the call's (args[0] replaced per leaf). */
static PyObject *batch_to(const destination *d, PyObject *obj, PyObject *const *args, Py_ssize_t nargsf,
                          PyObject *kwnames, int depth, batch *b) {
  PyTypeObject *tp = Py_TYPE(obj);
  int dict = tp == &PyDict_Type, list = tp == &PyList_Type, tuple = tp == &PyTuple_Type;
  if (!dict && !list && !tuple) {
    if (is_value(obj)) return Py_NewRef(obj);
    if (tp == &PyCapsule_Type) return Py_NewRef(needs_general); /* one-shot: read once, by the general path */
    PyObject *again = memo_get(&b->seen, obj);
    if (again != NULL || PyErr_Occurred()) return again;
    PyObject *stack[3] = {obj, args[1], Py_None}; /* (obj, to, a value for the mark: never read) */
    b->depth = depth;
    PyObject *out = convert_to(d, stack, 2, batch_marker, b);
    if (out != NULL && out != needs_general) {
      ++b->arrays;
      if (memo_put(&b->seen, obj, out) < 0) Py_CLEAR(out);
    }
    return out;
  }
  if (depth >= BATCH_MAX_DEPTH) return Py_NewRef(needs_general);
  /* A leaf's import runs Python (a __dlpack__, an __arrow_c_array__), which
   * may change a list or dict under the loop: the loop walks a snapshot taken
   * here, which holds its items (and the keys b->keys borrows), and converts
   * what the container held when the call read it. (A tuple cannot change;
   * what it holds is snapshotted in turn.) */
  PyObject *items = dict ? PyDict_Copy(obj) : list ? PyList_GetSlice(obj, 0, PyList_GET_SIZE(obj)) : Py_NewRef(obj);
  if (items == NULL) return NULL;
  Py_ssize_t n = dict ? PyDict_GET_SIZE(items) : Py_SIZE(items);
  PyObject *out = dict ? PyDict_New() : list ? PyList_New(n) : PyTuple_New(n);
  if (out == NULL) {
    Py_DECREF(items);
    return NULL;
  }
  Py_ssize_t pos = 0, i = 0;
  PyObject *key, *leaf;
  while (dict ? PyDict_Next(items, &pos, &key, &leaf) : i < n) {
    if (!dict) leaf = list ? PyList_GET_ITEM(items, i) : PyTuple_GET_ITEM(items, i);
    b->keys[depth] = dict ? key : NULL;
    b->idx[depth] = i;
    PyObject *r = batch_to(d, leaf, args, nargsf, kwnames, depth + 1, b);
    if (r == NULL || r == needs_general) {
      Py_DECREF(out);
      Py_DECREF(items);
      return r;
    }
    if (dict) {
      int rc = PyDict_SetItem(out, key, r);
      Py_DECREF(r);
      if (rc < 0) {
        Py_DECREF(out);
        Py_DECREF(items);
        return NULL;
      }
    } else if (list) {
      PyList_SET_ITEM(out, i, r);
    } else {
      PyTuple_SET_ITEM(out, i, r);
    }
    i++;
  }
  Py_DECREF(items);
  return out;
}

/* A batch into `d` on the one traversal: every leaf taken as it is or with
 * its fix, and one CopyWarning for the leaves copied unasked (worded by
 * Python from each judgement); the general path's, whole, when a leaf or a
 * container is (bridge.crossing.units), when copies overlap (one region
 * there, so that they still share memory), or when it holds no array. */
static PyObject *batch_call(const destination *d, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  batch b = {.share = sharing(args, nargsf, kwnames)};
  PyObject *out = batch_to(d, args[0], args, nargsf, kwnames, 0, &b);
  memo_clear(&b.seen);
  if (out != NULL && out != needs_general && (b.arrays == 0 || (b.next > 1 && any_overlap(b.ext, b.next))))
    Py_SETREF(out, Py_NewRef(needs_general));
  if (out != NULL && out != needs_general && b.copied != NULL &&
      warn_copied(args[1], 0, NULL, b.copied, b.arrays) < 0)
    Py_CLEAR(out);
  Py_XDECREF(b.copied);
  PyMem_Free(b.ext);
  if (out != needs_general) return out;
  Py_DECREF(out);
  return general(args[0], args, nargsf, kwnames);
}

/* convert(obj, to, *, copy=None, readonly="copy", dtype=None, device=None,
 * contiguous=False, writable=False, columns=None, stack=False) */
static PyObject *str_obj_kw, *str_to_kw, *kwnames_of[4]; /* kwnames_of: (), (copy,), (readonly,), both */
/* The keywords only the general path reads (what the caller asks besides the destination). */
static const char *const asks_names[] = {"dtype", "device", "contiguous", "writable", "columns", "stack"};
#define N_ASKS (sizeof asks_names / sizeof asks_names[0])
static PyObject *asks_kw[N_ASKS];

/* Which ask (ASK_*) a keyword is; -1 for none. */
static int ask_index(PyObject *name) {
  for (size_t i = 0; i < N_ASKS; i++)
    if (name == asks_kw[i]) return (int)i;
  for (size_t i = 0; i < N_ASKS; i++)
    if (PyUnicode_Compare(name, asks_kw[i]) == 0) return (int)i;
  return -1;
}

/* What the importer pass takes: any source, as a bridge tensor (bridge holds
 * whatever it imports: its record is never judged). */
static const destination importer = {.take = TAKE_BRIDGE};

/* The general path, with the call as the caller made it. */
static PyObject *slow_call(PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  PyObject *slow = upcall(UP_CONVERT_SLOW);
  return slow ? PyObject_Vectorcall(slow, args, nargsf, kwnames) : NULL;
}

enum { ASK_DTYPE, ASK_DEVICE, ASK_CONTIGUOUS, ASK_WRITABLE, ASK_COLUMNS, ASK_STACK };

/* A fresh row-major tensor of dtype `dt` and t's shape holding t's values
 * cast (the copy kernel); None (new reference) when the cast is one C leaves
 * to NumPy; NULL with an exception. */
static PyObject *cast_copy(TensorObject *t, DTypeObject *dt) {
  int64_t strides[BRIDGE_MAX_NDIM], nbytes;
  if (__builtin_mul_overflow(bridge_numel(t), (int64_t)dt->itemsize, &nbytes)) return PyErr_NoMemory();
  StorageObject *s = bridge_storage_alloc(nbytes, 0);
  if (s == NULL) return NULL;
  bridge_contiguous_strides(t->ndim, t->shape, strides);
  PyObject *out = bridge_tensor_new(s, dt, t->ndim, t->shape, strides, 0, GEOM_DERIVED);
  Py_DECREF(s);
  int done = out ? bridge_copy_tensor((TensorObject *)out, t) : -1;
  if (done == 1) return out;
  Py_XDECREF(out);
  return done == 0 ? Py_NewRef(Py_None) : NULL;
}

/* convert(obj, to, *, copy=None|True, dtype=, contiguous=, writable=) of one
 * array, on the one pass: the asks read once by Python (cached per kind of
 * call: bad ones raise there), the source read once (the importer pass),
 * judged once against `to`, and what is asked (a cast, row-major or
 * writable memory, copy=True) made in one copy that the destination holds
 * as it is (a fresh, aligned, writable row-major block of a dtype it
 * holds), else the judged fix as without asks. Units, device=, copy=False,
 * readonly="error", what the copy kernel does not cast and what the
 * destination would not hold go to the general path with the call as made. */
static PyObject *asked_call(const destination *d, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames,
                            PyObject *const *ask, int copy) {
  PyObject *obj = args[0];
  PyObject *read;
  if (ask[ASK_DTYPE] || ask[ASK_DEVICE] || ask[ASK_CONTIGUOUS] || ask[ASK_WRITABLE]) {
    PyObject *fn = upcall(UP_CONVERT_ASKS);
    if (fn == NULL) return NULL;
    PyObject *call[5] = {args[1], ask[ASK_DTYPE] ? ask[ASK_DTYPE] : Py_None,
                         ask[ASK_DEVICE] ? ask[ASK_DEVICE] : Py_None,
                         ask[ASK_CONTIGUOUS] ? ask[ASK_CONTIGUOUS] : Py_False,
                         ask[ASK_WRITABLE] ? ask[ASK_WRITABLE] : Py_False};
    read = PyObject_Vectorcall(fn, call, 5, NULL);
    if (read == NULL) return NULL;
  } else {
    read = PyTuple_Pack(3, Py_None, Py_False, Py_False); /* copy=True alone */
    if (read == NULL) return NULL;
  }
  if (!PyTuple_Check(read) || PyTuple_GET_SIZE(read) != 3) { /* None: the general path's */
    Py_DECREF(read);
    return slow_call(args, nargsf, kwnames);
  }
  PyObject *want_dtype = PyTuple_GET_ITEM(read, 0);
  int contiguous = PyTuple_GET_ITEM(read, 1) == Py_True, writable = PyTuple_GET_ITEM(read, 2) == Py_True;
  PyObject *imp[2] = {obj, args[1]};
  PyObject *t = convert_to(&importer, imp, 2, batch_marker, NULL);
  PyObject *out = NULL;
  if (t == needs_general) {
    Py_DECREF(t);
    out = slow_call(args, nargsf, kwnames);
  } else if (t != NULL) {
    TensorObject *tt = (TensorObject *)t;
    DTypeObject *dt = DType_Check(want_dtype) ? (DTypeObject *)want_dtype : tt->dtype;
    view v;
    view_of_tensor(tt, &v);
    uint32_t why = judged(d, &v);
    int asked = copy || dt != tt->dtype || (contiguous && !bridge_is_contiguous(tt->ndim, tt->shape, tt->strides)) ||
                (writable && tt->storage->readonly);
    DLDataType key = {dt->code, dt->bits, dt->lanes};
    if (!asked) { /* (an ask, even one met as it is, is no same-library identity: the general path's rule) */
      out = why == 0 ? take_tensor(d, tt) : tensor_fixed(d, tt, why, obj, args, nargsf, kwnames, NULL);
    } else if (why & (J_NOT_JUDGED | J_ZERO_D | J_NDIM | J_ND_BOOL | J_ZERO_WIDTH | J_EMPTY | J_DEVICE) ||
               dtype_index(d->dtypes, d->ndtypes, dtype_key(key)) == d->ndtypes) {
      out = slow_call(args, nargsf, kwnames); /* a copy it would not hold as it is: the general path explains */
    } else {
      PyObject *made = dt == tt->dtype ? bridge_tensor_rowmajor_copy(tt) : cast_copy(tt, dt);
      if (made == Py_None) {
        out = slow_call(args, nargsf, kwnames); /* a cast NumPy makes */
      } else if (made != NULL) {
        out = take_tensor(d, (TensorObject *)made);
      }
      Py_XDECREF(made);
    }
    Py_DECREF(t);
  }
  Py_DECREF(read);
  return out;
}

#ifndef Py_GIL_DISABLED
/* The last destination looked up (strong references: `to` cannot die and
 * another take its address; the capsule keeps its record), valid while the
 * registry's generation stands: a loop into one destination skips the
 * registry's dict. The GIL guards them; a free-threaded build has none. */
static PyObject *last_to, *last_cap;
static const destination *last_d; /* last_cap's record, once read (NULL: not yet) */
static uint64_t last_gen;
#endif

/* registry[to], a new reference (held for the call: torch's probes release
 * the GIL, and another thread, or code run by a release, may empty the
 * registry meanwhile); NULL with or without an exception when absent. */
static PyObject *registered(PyObject *to) {
#ifndef Py_GIL_DISABLED
  if (to == last_to && last_gen == bridge_convert_registry_gen) return Py_NewRef(last_cap);
#endif
  PyObject *cap = PyDict_GetItemWithError(bridge_convert_registry, to);
  if (cap == NULL) return NULL;
  Py_INCREF(cap); /* (before any release below, which may run code that empties the registry) */
#ifndef Py_GIL_DISABLED
  /* (the old ones let go last: a release may run code, which sees the new entry whole) */
  PyObject *old_cap = last_cap, *old_to = last_to;
  last_cap = Py_NewRef(cap);
  last_d = NULL;
  last_to = Py_NewRef(to);
  last_gen = bridge_convert_registry_gen;
  Py_XDECREF(old_cap);
  Py_XDECREF(old_to);
#endif
  return cap;
}

/* The destination a registry capsule holds (NULL with an exception). */
static const destination *record_of(PyObject *cap) {
#ifndef Py_GIL_DISABLED
  if (cap == last_cap && last_d != NULL) return last_d;
#endif
  const destination *d = (const destination *)PyCapsule_GetPointer(cap, DEST_NAME);
#ifndef Py_GIL_DISABLED
  if (cap == last_cap) last_d = d;
#endif
  return d;
}

static PyObject *py_convert(PyObject *mod, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  (void)mod;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  /* The signature's own checks, in Python's words (the general path has a
   * name of its own). obj and to may come as keywords too: then the call is
   * laid out again as (obj, to, copy=..., readonly=...). */
  if (nargs > 2)
    return PyErr_Format(PyExc_TypeError, "convert() takes 2 positional arguments but %zd were given", nargs);
  PyObject *pos[2] = {nargs > 0 ? args[0] : NULL, nargs > 1 ? args[1] : NULL}, *kw[2] = {NULL, NULL};
  int moved = 0, asks = 0;
  PyObject *ask[N_ASKS] = {NULL};
  for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); i++) {
    PyObject *name = PyTuple_GET_ITEM(kwnames, i), *value = args[nargs + i];
    int which = name == str_copy_kw || name == str_readonly_kw ? -1 : ask_index(name); /* (interned: no compare) */
    if (which >= 0) {
      asks = 1;
      ask[which] = value;
      continue;
    }
    PyObject **slot = name == str_copy_kw || PyUnicode_Compare(name, str_copy_kw) == 0           ? &kw[0]
                      : name == str_readonly_kw || PyUnicode_Compare(name, str_readonly_kw) == 0 ? &kw[1]
                      : PyUnicode_Compare(name, str_obj_kw) == 0                                  ? &pos[0]
                      : PyUnicode_Compare(name, str_to_kw) == 0                                   ? &pos[1]
                                                                                                  : NULL;
    if (PyErr_Occurred()) return NULL;
    if (slot == NULL) return PyErr_Format(PyExc_TypeError, "convert() got an unexpected keyword argument '%U'", name);
    if (*slot != NULL)
      return PyErr_Format(PyExc_TypeError, "convert() got multiple values for argument '%U'", name);
    *slot = value;
    moved |= slot == &pos[0] || slot == &pos[1];
  }
  if (pos[0] == NULL || pos[1] == NULL)
    return PyErr_Format(PyExc_TypeError, "convert() missing %d required positional argument%s: %s",
                        (pos[0] == NULL) + (pos[1] == NULL), pos[0] == NULL && pos[1] == NULL ? "s" : "",
                        pos[0] == NULL && pos[1] == NULL ? "'obj' and 'to'" : pos[0] == NULL ? "'obj'" : "'to'");
  if (kw[0] == Py_True) asks = 1; /* copy=True: a copy asked for, made on the one pass */
  if (asks) {
    /* one array with dtype=, contiguous=, writable= (and copy=None or True): the one
     * pass below; the rest is the general path's, which reads them (and binds the
     * call itself) */
    PyTypeObject *tp = Py_TYPE(pos[0]);
    PyObject *chosen = ask[ASK_COLUMNS];
    int plain_policy = (kw[0] == NULL || kw[0] == Py_None) &&
                       (kw[1] == NULL || kw[1] == str_copy_value || kw[1] == str_share_value);
    if (chosen && !moved && plain_policy && !ask[ASK_DTYPE] && !ask[ASK_DEVICE] && !ask[ASK_CONTIGUOUS] &&
        !ask[ASK_WRITABLE] && !ask[ASK_STACK] && (PyList_CheckExact(chosen) || PyTuple_CheckExact(chosen)) &&
        bridge_arrow_is_table(tp)) {
      /* a table's columns= on the same pass as the table (a name it lacks or has twice: the general path's words) */
      PyObject *cap = registered(pos[1]);
      if (cap == NULL || cap == Py_None) {
        Py_XDECREF(cap);
        PyErr_Clear();
        return slow_call(args, nargsf, kwnames);
      }
      const destination *d = record_of(cap);
      PyObject *out = d ? table_to(d, pos[0], args, nargsf, kwnames, chosen) : NULL;
      Py_DECREF(cap);
      return out;
    }
    int one = !moved && !ask[ASK_COLUMNS] && !ask[ASK_STACK] && tp != &PyDict_Type && tp != &PyList_Type &&
              tp != &PyTuple_Type && !bridge_arrow_is_table(tp) && (kw[0] == NULL || kw[0] == Py_None || kw[0] == Py_True) &&
              (kw[1] == NULL || kw[1] == str_copy_value || kw[1] == str_share_value);
    PyObject *cap = one ? registered(pos[1]) : NULL;
    if (cap == NULL || cap == Py_None) {
      Py_XDECREF(cap);
      PyErr_Clear();
      return slow_call(args, nargsf, kwnames);
    }
    const destination *d = record_of(cap);
    PyObject *out = d ? asked_call(d, args, nargsf, kwnames, ask, kw[0] == Py_True) : NULL;
    Py_DECREF(cap);
    return out;
  }
  PyObject *laid[4];
  if (moved) {
    int which = (kw[0] != NULL) | (kw[1] != NULL) << 1;
    Py_ssize_t n = 2;
    laid[0] = pos[0];
    laid[1] = pos[1];
    if (kw[0]) laid[n++] = kw[0];
    if (kw[1]) laid[n++] = kw[1];
    args = laid;
    nargs = 2;
    nargsf = 2;
    kwnames = which ? kwnames_of[which] : NULL;
  }
  for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); i++) {
    PyObject *name = PyTuple_GET_ITEM(kwnames, i), *value = args[nargs + i];
    int is_copy = name == str_copy_kw || (name != str_readonly_kw && PyUnicode_Compare(name, str_copy_kw) == 0);
    int plain = (is_copy && value == Py_None) ||
                (!is_copy && (name == str_readonly_kw || PyUnicode_Compare(name, str_readonly_kw) == 0) &&
                 PyUnicode_Check(value) &&
                 (value == str_copy_value || value == str_share_value || PyUnicode_Compare(value, str_copy_value) == 0 ||
                  PyUnicode_Compare(value, str_share_value) == 0));
    if (!plain) return general(args[0], args, nargsf, kwnames);
  }
  PyObject *cap = registered(args[1]); /* (unhashable: the general path explains) */
  if (__builtin_expect(cap == NULL, 0) && !PyErr_Occurred()) {
    /* A destination not seen before: registered (when it can be) and taken
     * on the fast path at once, so that the first call costs what a later
     * one does plus the registration, not a trip through the general path. */
    PyObject *reg = upcall(UP_CONVERT_REGISTER);
    PyObject *done = reg ? PyObject_CallOneArg(reg, args[1]) : NULL;
    Py_XDECREF(done);
    cap = done != NULL ? registered(args[1]) : NULL;
  }
  if (cap == NULL || cap == Py_None) {
    Py_XDECREF(cap);
    PyErr_Clear();
    return general(args[0], args, nargsf, kwnames);
  }
  const destination *d = record_of(cap); /* (cap held for the call: registered's reference) */
  PyObject *out = d ? convert_to(d, args, nargsf, kwnames, NULL) : NULL;
  Py_DECREF(cap);
  return out;
}

/* convert_read(): counts one source read by the general path (_C.stats()["convert_reads"]). */
static PyObject *py_convert_read(PyObject *mod, PyObject *unused) {
  (void)mod;
  (void)unused;
  BUMP(STAT_CONVERT_READS);
  Py_RETURN_NONE;
}

/* copy_warning_ignored(category): whether the warnings filters ignore every
 * warning of `category` (CopyWarning) wherever it is warned (said_ignored). */
static PyObject *py_copy_warning_ignored(PyObject *mod, PyObject *category) {
  (void)mod;
  if (!PyType_Check(category) || !PyType_IsSubtype((PyTypeObject *)category, (PyTypeObject *)PyExc_Warning)) {
    PyErr_SetString(PyExc_TypeError, "copy_warning_ignored() takes a Warning class");
    return NULL;
  }
  if (said_type == NULL) said_type = (PyTypeObject *)Py_NewRef(category);
  if ((PyTypeObject *)category != said_type) Py_RETURN_FALSE; /* (one category is remembered) */
  return PyBool_FromLong(said_ignored());
}

static PyMethodDef crossing_functions[] = {
    {"copy_warning_ignored", (PyCFunction)py_copy_warning_ignored, METH_O,
     "copy_warning_ignored(category)\n--\n\nWhether warnings.filters ignores every warning of category wherever it "
     "is warned (private: convert's general path skips making it)."},
    {"convert_read", (PyCFunction)py_convert_read, METH_NOARGS,
     "convert_read()\n--\n\nCounts one source read by bridge.convert's general path (private: _C.stats())."},
    {"convert", (PyCFunction)(void (*)(void))py_convert, METH_FASTCALL | METH_KEYWORDS,
     "convert(obj, to, *, copy=None, readonly='copy', dtype=None, device=None, contiguous=False,\n"
     "        writable=False, columns=None, stack=False)\n--\n\n"
     "obj as destination to's own object (a torch.Tensor, numpy.ndarray, jax.Array, paddle.Tensor,\n"
     "tvm_ffi.Tensor, mlx array, OrtValue, pyarrow Array or FixedShapeTensorArray, polars Series,\n"
     "tf.Tensor, cupy ndarray or bridge.Tensor), sharing obj's memory wherever to can hold it.\n\n"
     "obj: anything bridge imports (a DLPack object or capsule, Arrow PyCapsule objects, the array\n"
     "interfaces, buffers). to: a module (torch), its name (\"torch\") or a type (torch.Tensor).\n\n"
     "Where to cannot hold the memory as it is, the smallest fix is made (see\n"
     "bridge.crossing.convert.plan): copy=None makes it and warns bridge.CopyWarning when it\n"
     "copies; copy=False raises BufferError naming the reason instead of copying; copy=True always\n"
     "copies. Read-only memory into a destination whose tensors are writable: readonly=\"copy\"\n"
     "gives a writable copy, \"error\" raises BufferError, \"share\" shares it as the destination's\n"
     "own import would (unsafe: a write through the result changes memory lent read-only).\n\n"
     "Memory the destination holds as it is goes through the destination's C exchange API where\n"
     "it has one (torch, paddle) or NumPy's C API, read from the source's exchange API, an\n"
     "ndarray's own struct or a bridge tensor without a capsule; the result keeps the source\n"
     "alive. Arrow's bit-packed bools are unpacked into one named copy (kind \"unpack\").\n\n"
     "Asks, each met with at most one named copy: dtype= (a cast, only when the dtype differs;\n"
     "lossy casts only this way), device= (a move between host and CUDA), contiguous=True\n"
     "(row-major), writable=True (a copy of read-only memory; ValueError for immutable\n"
     "destinations).\n\n"
     "Units: a batch (nested dicts, lists, tuples, named tuples, dataclasses) gives the same\n"
     "structure, each array leaf converted and other leaves kept, one CopyWarning for the call;\n"
     "a table (pyarrow Table/RecordBatch, polars/pandas DataFrame, __dataframe__) a dict of\n"
     "column -> array (columns= chooses, stack=True gives one 2-D array); a stream\n"
     "(RecordBatchReader, an Arrow stream of record batches, an iterator of tables) a lazy\n"
     "iterator of converted batches. See docs/convert.md.\n\n"
     "Raises ValueError for an unknown or uninstalled to (listing the installed ones) and a bad\n"
     "readonly; TypeError for an obj bridge cannot import and a bad copy; BufferError for data the\n"
     "destination cannot hold at all (a dtype it lacks, a 0-d tensor into Arrow) and for the\n"
     "producer's refusals (a torch tensor that requires grad)."},
    {NULL, NULL, 0, NULL},
};

int bridge_crossing_init(PyObject *mod) {
  if (!(str_copy_kw = PyUnicode_InternFromString("copy")) || !(str_judged_kw = PyUnicode_InternFromString("judged")) ||
      !(str_obj_kw = PyUnicode_InternFromString("obj")) || !(str_to_kw = PyUnicode_InternFromString("to")) ||
      !(str_dlpack_method = PyUnicode_InternFromString("__dlpack__")) ||
      !(str_arrow_array = PyUnicode_InternFromString("__arrow_c_array__")) ||
      !(str_arrow_stream = PyUnicode_InternFromString("__arrow_c_stream__")) ||
      !(str_readonly_kw = PyUnicode_InternFromString("readonly")) ||
      !(str_copy_value = PyUnicode_InternFromString("copy")) || !(str_share_value = PyUnicode_InternFromString("share")) ||
      !(said_attrs[0] = PyUnicode_InternFromString("kind")) || !(said_attrs[1] = PyUnicode_InternFromString("fixes")) ||
      !(said_attrs[2] = PyUnicode_InternFromString("leaves")))
    return -1;
  for (size_t i = 0; i < N_ASKS; i++)
    if (!(asks_kw[i] = PyUnicode_InternFromString(asks_names[i]))) return -1;
  if (!(needs_general = PyCapsule_New(&needs_general, "bridge.convert.needs_general", NULL)) ||
      !(batch_marker = PyTuple_Pack(1, needs_general)))
    return -1;
  if (!(kwnames_of[1] = PyTuple_Pack(1, str_copy_kw)) || !(kwnames_of[2] = PyTuple_Pack(1, str_readonly_kw)) ||
      !(kwnames_of[3] = PyTuple_Pack(2, str_copy_kw, str_readonly_kw)))
    return -1;
  return bridge_destinations_init(mod) < 0 ? -1 : PyModule_AddFunctions(mod, crossing_functions);
}
