/* DLPack import through a producer's C exchange API
 * (__dlpack_c_exchange_api__): the per-type record, torch's refusals read
 * through its own probes, the managed route (a DLManagedTensorVersioned the
 * producer hands over) and torch's borrowed one (a DLTensor read in place;
 * the storage's owner is the torch tensor itself). Every tensor passes
 * bridge_dlpack_parse, as a capsule does. */

#include "dlpack_import.h"

const char BRIDGE_NAME_API[] = "dlpack_exchange_api";

/* type -> its record (type_record): the exchange API capsule or None, and
 * for torch's types the probes of torch's refusals. One lookup per import. */
static PyObject *api_cache;
static PyObject *str_api, *str_is_conj, *str_is_neg, *str_requires_grad, *str_dlpack;

static void read_record(PyObject *entry, type_record *out) {
  PyObject *const *items = &PyTuple_GET_ITEM(entry, 0);
  out->api = items[0];
  out->is_torch = items[1] == Py_True;
  out->requires_grad = items[2] == Py_None ? NULL : items[2];
  out->is_conj = items[3] == Py_None ? NULL : items[3];
  out->is_neg = items[4] == Py_None ? NULL : items[4];
}

static int is_torch_type(PyTypeObject *tp) {
  PyObject *modname = PyObject_GetAttrString((PyObject *)tp, "__module__");
  const char *m = modname && PyUnicode_Check(modname) ? PyUnicode_AsUTF8(modname) : NULL;
  PyErr_Clear();
  int yes = m != NULL && strncmp(m, "torch", 5) == 0;
  Py_XDECREF(modname);
  return yes;
}

#ifndef Py_GIL_DISABLED
/* The last type looked up and its entry (strong references: the type cannot
 * die and another take its address): a run of imports of one type skips the
 * dict. The GIL guards them; a free-threaded build has no such cache. */
static PyObject *last_type, *last_entry;
#endif

/* The record of tp (0), made on first sight; -1 with an exception. */
int bridge_type_record_of(PyTypeObject *tp, type_record *out) {
#ifndef Py_GIL_DISABLED
  if ((PyObject *)tp == last_type) {
    read_record(last_entry, out);
    return 0;
  }
#endif
  PyObject *entry = PyDict_GetItemWithError(api_cache, (PyObject *)tp);
  if (entry != NULL) {
#ifndef Py_GIL_DISABLED
    Py_XSETREF(last_entry, Py_NewRef(entry));
    Py_XSETREF(last_type, Py_NewRef((PyObject *)tp));
#endif
    read_record(entry, out);
    return 0;
  }
  if (PyErr_Occurred()) return -1;
  PyObject *api = PyObject_GetAttr((PyObject *)tp, str_api);
  if (api == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    api = Py_NewRef(Py_None);
  } else if (!PyCapsule_IsValid(api, BRIDGE_NAME_API)) {
    Py_SETREF(api, Py_NewRef(Py_None));
  }
  int torch = api != Py_None && is_torch_type(tp);
  PyObject *names[3] = {str_requires_grad, str_is_conj, str_is_neg};
  entry = PyTuple_New(5);
  if (entry == NULL) {
    Py_DECREF(api);
    return -1;
  }
  PyTuple_SET_ITEM(entry, 0, api);
  PyTuple_SET_ITEM(entry, 1, Py_NewRef(torch ? Py_True : Py_False));
  for (int i = 0; i < 3; i++) {
    PyObject *d = torch ? _PyType_Lookup(tp, names[i]) : NULL;
    PyTuple_SET_ITEM(entry, 2 + i, Py_NewRef(d ? d : Py_None));
  }
  if (PyDict_GET_SIZE(api_cache) > 1024) PyDict_Clear(api_cache); /* bound the cache */
  int rc = PyDict_SetItem(api_cache, (PyObject *)tp, entry);
  if (rc == 0) read_record(entry, out); /* (the dict holds it) */
  Py_DECREF(entry);
  return rc;
}

/* The type's __dlpack_c_exchange_api__ capsule, or None (borrowed from the
 * cache); NULL with an exception. */
static PyObject *exchange_api_of(PyTypeObject *tp) {
#ifndef Py_GIL_DISABLED
  if ((PyObject *)tp == last_type) return PyTuple_GET_ITEM(last_entry, 0); /* (convert asks per call: only the API) */
#endif
  type_record r;
  return bridge_type_record_of(tp, &r) < 0 ? NULL : r.api;
}

/* torch tensors torch's own __dlpack__ refuses are refused on every path,
 * the C exchange API included (which skips torch's Python checks): tensors
 * that require grad, and lazily conjugated or negated views (their memory
 * does not hold their values; torch 2.13's __dlpack__ misses the negative
 * bit). Sparse and quantized tensors make torch's exchange API fail, and the
 * caller then asks torch's __dlpack__, which raises torch's error. */
static int probe_true(PyObject *descr, PyObject *x, PyTypeObject *tp, int is_method) {
  if (descr == NULL) return 0; /* an older torch without it: nothing to see */
  PyObject *r;
  /* torch's own C getter and method called straight (x is an instance of
   * the type they were found on): CPython's descriptor and vectorcall
   * layers cost a third of the probe */
  if (Py_IS_TYPE(descr, &PyGetSetDescr_Type) && ((PyGetSetDescrObject *)descr)->d_getset->get != NULL) {
    PyGetSetDef *gs = ((PyGetSetDescrObject *)descr)->d_getset;
    r = gs->get(x, gs->closure);
  } else if (Py_IS_TYPE(descr, &PyMethodDescr_Type) &&
             (((PyMethodDescrObject *)descr)->d_method->ml_flags & ~METH_COEXIST) == METH_NOARGS) {
    r = ((PyMethodDescrObject *)descr)->d_method->ml_meth(x, NULL);
  } else if (is_method) {
    r = PyObject_Vectorcall(descr, &x, 1, NULL);
  } else {
    descrgetfunc get = Py_TYPE(descr)->tp_descr_get;
    r = get ? get(descr, x, (PyObject *)tp) : Py_NewRef(descr);
  }
  if (r == NULL) return -1;
  int bit = PyObject_IsTrue(r);
  Py_DECREF(r);
  return bit;
}

/* code: the tensor's DLPack type code when known (-1: not yet), to skip the
 * probes that cannot fire: only floating and complex tensors can require
 * grad, and only complex ones carry the conjugate bit (torch's rules). */
static int refuse_torch_export_of(const type_record *pr, PyObject *x, int code) {
  if (!pr->is_torch) return 0;
  PyTypeObject *tp = Py_TYPE(x);
  int floating = code < 0 || code == kDLFloat || code == kDLBfloat || code == kDLComplex ||
                 (code >= 7 && code <= 17); /* float8/6/4 */
  int bit = floating ? probe_true(pr->requires_grad, x, tp, 0) : 0;
  if (bit) {
    if (bit > 0)
      PyErr_SetString(PyExc_BufferError, "Can't export tensors that require gradient, use tensor.detach()");
    return -1;
  }
  PyObject *methods[2] = {pr->is_conj, pr->is_neg};
  for (int i = 0; i < 2; i++) {
    if (i == 0 && code >= 0 && code != kDLComplex) continue;
    bit = probe_true(methods[i], x, tp, 1);
    if (bit < 0) return -1;
    if (bit) {
      const char *kind = i == 0 ? "conjugate" : "negative";
      PyErr_Format(PyExc_BufferError,
                   "Can't export tensors with the %s bit set: this torch tensor is a lazy %s view "
                   "whose memory does not hold its values. Call .%s() first (a copy)",
                   kind, kind, i == 0 ? "resolve_conj" : "resolve_neg");
      return -1;
    }
  }
  return 0;
}

int bridge_refuse_torch_export(const type_record *pr, PyObject *x) { return refuse_torch_export_of(pr, x, -1); }

/* A producer's exchange API failed and there is no __dlpack__ to ask: its
 * C++ message may carry a backtrace. Raise a BufferError with its first
 * line, the original chained as the cause. */
static void exchange_error_to_buffer_error(PyObject *exc) {
  if (exc == NULL) {
    PyErr_SetString(PyExc_BufferError, "the producer's DLPack exchange API failed");
    return;
  }
  if (PyErr_GivenExceptionMatches(exc, PyExc_BufferError)) {
    bridge_restore_error(exc);
    return;
  }
  PyObject *text = PyObject_Str(exc);
  const char *msg = text ? PyUnicode_AsUTF8(text) : NULL;
  if (msg == NULL) PyErr_Clear();
  const char *nl = msg ? strchr(msg, '\n') : NULL;
  PyObject *line = PyUnicode_FromStringAndSize(
      msg ? msg : "", msg ? (Py_ssize_t)(nl ? nl - msg : (ptrdiff_t)strlen(msg)) : 0);
  Py_XDECREF(text);
  if (line == NULL) {
    Py_DECREF(exc);
    return;
  }
  PyErr_Format(PyExc_BufferError, "the producer's DLPack exchange API failed: %U", line);
  Py_DECREF(line);
  PyObject *mine = bridge_fetch_error();
  PyException_SetCause(mine, exc); /* steals exc */
  bridge_restore_error(mine);
}

int bridge_exchange_status(int rc, const char *side, const char *fn) {
  if (rc == 0 && !PyErr_Occurred()) return 0;
  if (rc != 0) {
    if (!PyErr_Occurred()) PyErr_Format(PyExc_BufferError, "the %s's DLPack exchange API failed (%s)", side, fn);
    return -1;
  }
  /* Success with an exception set breaks the C API's contract: whatever
   * follows would return a result with an exception set (SystemError). */
  PyObject *exc = bridge_fetch_error();
  PyErr_Format(PyExc_BufferError,
               "the %s's DLPack exchange API broke its contract: %s returned success with a Python "
               "exception set",
               side, fn);
  PyObject *mine = bridge_fetch_error();
  PyException_SetCause(mine, exc); /* steals exc */
  bridge_restore_error(mine);
  return -1;
}

/* The consumer's stream waits for the work the producer enqueued on its
 * current stream (NULL there is the legacy default stream, DLPack's 1). */
static int order_exchange(DLPackExchangeAPI *api, DLManagedTensorVersioned *m) {
  DLDevice d = m->dl_tensor.device;
  if (d.device_type != kDLCUDA || api->current_work_stream == NULL) return 0;
  void *ps = NULL;
  if (bridge_exchange_status(api->current_work_stream(d.device_type, d.device_id, &ps), "producer",
                             "current_work_stream") < 0)
    return -1;
  return bridge_cuda_order(d.device_id, ps ? (uintptr_t)ps : 1, bridge_current_stream());
}

DLPackExchangeAPI *bridge_exchange_api_known(DLPackExchangeAPIHeader *h) {
  /* A bound on the walk: a chain that loops back on itself ends here. */
  for (int hops = 0; h != NULL && hops < 64; h = h->prev_api, hops++)
    if (h->version.major == DLPACK_MAJOR_VERSION) return (DLPackExchangeAPI *)h;
  return NULL;
}

/* x has __dlpack__ to fall back on: 0 (no exception: the caller asks it),
 * else -1 with exc (the exchange API's failure, or NULL for `none_why`) as a
 * BufferError. */
static int fall_back_or_fail(PyObject *x, PyObject *exc, PyTypeObject *tp, DLPackExchangeAPIHeader *head) {
  PyObject *method = PyObject_GetAttr(x, str_dlpack);
  if (method != NULL) {
    Py_DECREF(method);
    Py_XDECREF(exc);
    return 0;
  }
  if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
    Py_XDECREF(exc);
    return -1;
  }
  PyErr_Clear();
  if (head != NULL) {
    PyErr_Format(PyExc_BufferError,
                 "%.200s's DLPack exchange API is version %u.%u and its prev_api chain holds no "
                 "major version %d table, and it has no __dlpack__ to fall back on",
                 tp->tp_name, head->version.major, head->version.minor, DLPACK_MAJOR_VERSION);
    return -1;
  }
  exchange_error_to_buffer_error(exc);
  return -1;
}

/* bridge_exchange_managed, with what parse_managed read of the tensor. */
static int exchange_managed(const type_record *r, PyObject *x, DLManagedTensorVersioned **out, parsed_t *p) {
  PyTypeObject *tp = Py_TYPE(x);
  DLPackExchangeAPIHeader *head = (DLPackExchangeAPIHeader *)PyCapsule_GetPointer(r->api, BRIDGE_NAME_API);
  if (head == NULL) return -1;
  DLPackExchangeAPI *api = bridge_exchange_api_known(head);
  if (api == NULL || api->managed_tensor_from_py_object_no_sync == NULL)
    return fall_back_or_fail(x, NULL, tp, head);
  DLManagedTensorVersioned *m = NULL;
  int rc = api->managed_tensor_from_py_object_no_sync((void *)x, &m);
  if (bridge_exchange_status(rc, "producer", "managed_tensor_from_py_object_no_sync") < 0) {
    PyObject *exc = bridge_fetch_error();
    if (rc == 0 && m != NULL) bridge_dlpack_call_deleter(m, 1); /* handed over all the same: ours to release */
    return fall_back_or_fail(x, exc, tp, NULL);
  }
  if (m != NULL) {
    /* Checked as a capsule's tensor is, before anything reads it (every
     * caller, bridge.convert's fast path too, gets only a valid one); then
     * the producer's rules, with the dtype known; then, for CUDA, the
     * consumer's stream waits for the producer's (the API does no sync).
     * A malformed tensor, a refusal or a failure releases the tensor. */
    if (bridge_dlpack_parse(m, 1, 0, p) < 0 || refuse_torch_export_of(r, x, m->dl_tensor.dtype.code) < 0 ||
        order_exchange(api, m) < 0) {
      PyObject *exc = bridge_fetch_error();
      bridge_dlpack_call_deleter(m, 1);
      bridge_restore_error(exc);
      return -1;
    }
    BUMP(STAT_API_IMPORTS);
    *out = m;
    return 1;
  }
  return fall_back_or_fail(x, bridge_fetch_error(), tp, NULL);
}

int bridge_exchange_managed(PyObject *api_capsule, PyObject *x, DLManagedTensorVersioned **out) {
  parsed_t p;
  type_record r;
  if (bridge_type_record_of(Py_TYPE(x), &r) < 0) return -1;
  r.api = api_capsule;
  return exchange_managed(&r, x, out, &p);
}

PyObject *bridge_dlpack_take_exchanged(DLManagedTensorVersioned *m) {
  int cuda = m->dl_tensor.device.device_type == kDLCUDA;
  PyObject *out = bridge_dlpack_take(m, 1);
  /* the consumer's stream now waits for the producer's work */
  if (out != NULL && cuda) ((TensorObject *)out)->storage->stream = bridge_current_stream();
  return out;
}

/* A torch tensor imported from the DLTensor its exchange API fills in
 * (dltensor_from_py_object_no_sync), the tensor object itself the storage's
 * owner: no managed tensor for torch to allocate and delete (half of what
 * torch's side of an import costs). Sound for torch's types only: a managed
 * tensor of torch's holds the very TensorImpl the object holds (the same
 * lifetime), and carries no flags (torch has no read-only tensors). The
 * tensor passes parse_managed and torch's refusals as on the managed route.
 * 1 with *out; -1 with an exception; 0 when this route does not apply or
 * the DLTensor does not parse (the managed route then says why). */
static int import_borrowed(const type_record *r, PyObject *x, PyObject **out) {
  if (!r->is_torch) return 0;
  DLPackExchangeAPIHeader *head = (DLPackExchangeAPIHeader *)PyCapsule_GetPointer(r->api, BRIDGE_NAME_API);
  DLPackExchangeAPI *api = head ? bridge_exchange_api_known(head) : NULL;
  if (api == NULL || api->dltensor_from_py_object_no_sync == NULL) {
    PyErr_Clear();
    return 0;
  }
  DLManagedTensorVersioned m = {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, NULL, NULL, 0, {0}};
  parsed_t p;
  if (api->dltensor_from_py_object_no_sync((void *)x, &m.dl_tensor) != 0 || PyErr_Occurred() ||
      bridge_dlpack_parse(&m, 1, 0, &p) < 0) {
    PyErr_Clear();
    return 0;
  }
  if (refuse_torch_export_of(r, x, m.dl_tensor.dtype.code) < 0 || order_exchange(api, &m) < 0) return -1;
  StorageObject *storage = bridge_storage_new((char *)p.start, p.nbytes, p.dev_type, p.dev_id, x, 0);
  if (storage == NULL) return -1;
  if (p.dev_type == kDLCUDA) storage->stream = bridge_current_stream();
  BUMP(STAT_API_IMPORTS); /* (no managed tensor: nothing for STAT_IMPORTS to balance) */
  *out = bridge_tensor_new(storage, p.dtype, p.ndim, p.shape, p.strides, p.offset, GEOM_IMPORT);
  Py_DECREF(storage);
  return *out != NULL ? 1 : -1;
}

/* Import through a type's exchange API. Returns the tensor; NULL with an
 * exception; or NULL with no exception when the API failed (or its chain
 * holds no version bridge knows) and the caller should ask __dlpack__
 * (which applies the producer's own rules). */
PyObject *bridge_import_exchange(const type_record *r, PyObject *x) {
  PyObject *borrowed;
  int rc = import_borrowed(r, x, &borrowed);
  if (rc != 0) return rc > 0 ? borrowed : NULL;
  DLManagedTensorVersioned *m = NULL;
  parsed_t p;
  if (exchange_managed(r, x, &m, &p) <= 0) return NULL;
  BUMP(STAT_IMPORTS);
  PyObject *out = bridge_dlpack_take_parsed(m, 1, &p, NULL); /* parsed once, on receipt */
  if (out != NULL && p.dev_type == kDLCUDA) ((TensorObject *)out)->storage->stream = bridge_current_stream();
  return out;
}

PyObject *bridge_exchange_api_of(PyTypeObject *tp) { return exchange_api_of(tp); }

PyObject *bridge_exchange_import(PyObject *x) {
  type_record r;
  if (bridge_type_record_of(Py_TYPE(x), &r) < 0 || r.api == Py_None) return NULL;
  return bridge_import_exchange(&r, x);
}


int bridge_exchange_import_init(void) {
  if (!(api_cache = PyDict_New()) || !(str_api = PyUnicode_InternFromString("__dlpack_c_exchange_api__")) ||
      !(str_is_conj = PyUnicode_InternFromString("is_conj")) || !(str_is_neg = PyUnicode_InternFromString("is_neg")) ||
      !(str_requires_grad = PyUnicode_InternFromString("requires_grad")) ||
      !(str_dlpack = PyUnicode_InternFromString("__dlpack__")))
    return -1;
  return 0;
}
