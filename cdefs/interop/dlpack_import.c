/* DLPack import: consume a capsule (or a managed tensor handed over by a C
 * exchange API), validate it with overflow-checked arithmetic, and build the
 * storage and tensor in C. The storage owns the managed tensor and calls the
 * producer's deleter exactly once, when it dies. bridge.from_dlpack is here
 * with its device=/copy= policy, and ask_producer is the one place any
 * import (from_dlpack, from_numpy, from_arrow, asarray) asks an object for
 * its DLPack export. */

#include "interop.h"

#define NAME_LEGACY BRIDGE_NAME_LEGACY
#define NAME_VERSIONED BRIDGE_NAME_VERSIONED
#define NAME_USED_LEGACY BRIDGE_NAME_USED_LEGACY
#define NAME_USED_VERSIONED BRIDGE_NAME_USED_VERSIONED
const char BRIDGE_NAME_API[] = "dlpack_exchange_api";

/* type -> its record (type_record): the exchange API capsule or None, and
 * for torch's types the probes of torch's refusals. One lookup per import. */
static PyObject *api_cache;
static PyObject *str_api, *str_is_conj, *str_is_neg, *str_requires_grad;
static PyObject *str_dlpack, *str_max_version, *max_version_value; /* __dlpack__(max_version=(1, 3)) */

void bridge_dlpack_release(void *managed, int versioned) {
  PyObject *saved = bridge_fetch_error(); /* the producer's deleter may run Python code */
  bridge_dlpack_call_deleter(managed, versioned);
  BUMP(STAT_IMPORT_RELEASES);
  bridge_restore_error(saved);
}

static int known_device(int t) {
  return (t >= kDLCPU && t <= kDLOpenCL) || (t >= kDLVulkan && t <= 18);
}

static int overflow(void) {
  PyErr_SetString(PyExc_BufferError, "DLPack tensor's shape and strides overflow its address space");
  return -1;
}

/* What a valid managed tensor describes: the storage spans exactly the
 * elements it can reach (negative strides too). packed_bits > 0: the tensor
 * holds packed sub-byte values of that many bits (shape and strides count
 * values, `start` is the byte of value [0, ..., 0]), to be unpacked into
 * `dtype`, one value per byte. */
typedef struct {
  DTypeObject *dtype;
  int ndim, dev_type, dev_id, readonly, packed_bits;
  int64_t shape[BRIDGE_MAX_NDIM], strides[BRIDGE_MAX_NDIM], nbytes, offset;
  uintptr_t start;
} parsed_t;

/* Packed sub-byte values (DLPack >= 1.1: a sub-byte dtype without
 * IS_SUBBYTE_TYPE_PADDED, and every legacy one) seen as a packed dtype of one
 * byte per element, in place: lanes = 8 / bits values per element along the
 * last dimension, which must hold whole bytes in order (size a multiple of
 * lanes, stride 1 value), every other stride whole bytes. 1 when it fits
 * (shape, strides and dtype rewritten), 0 when not. */
static int packed_view(DLDataType dt, int ndim, int64_t *shape, int64_t *strides, DTypeObject **dtype) {
  int lanes = 8 / dt.bits;
  DTypeObject *packed = 8 % dt.bits == 0 ? bridge_dtype_from_dlpack(dt.code, dt.bits, lanes) : NULL;
  if (packed == NULL || ndim == 0) return 0;
  int last = ndim - 1;
  if (shape[last] % lanes != 0 || (shape[last] > 0 && strides[last] != 1)) return 0;
  for (int i = 0; i < last; i++)
    if (shape[i] > 1 && strides[i] % lanes != 0) return 0;
  for (int i = 0; i < last; i++) strides[i] /= lanes;
  shape[last] /= lanes;
  strides[last] = 1;
  *dtype = packed;
  return 1;
}

/* Validate a managed tensor (overflow-checked): 0, or -1 with BufferError.
 * unpack: packed sub-byte values that no packed dtype can view in place are
 * to be unpacked (the caller allows a copy). */
static int parse_managed(void *p, int versioned, int unpack, parsed_t *out) {
  DLTensor *t;
  uint64_t flags;
  int modern_strides = 0; /* DLPack >= 1.2: strides must be set */
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)p;
    if (m->version.major != DLPACK_MAJOR_VERSION) {
      PyErr_Format(PyExc_BufferError, "unsupported DLPack version %u.%u: bridge understands major version %d",
                   m->version.major, m->version.minor, DLPACK_MAJOR_VERSION);
      return -1;
    }
    flags = m->flags;
    modern_strides = m->version.minor >= 2;
    t = &m->dl_tensor;
  } else {
    t = &((DLManagedTensor *)p)->dl_tensor;
    /* A legacy tensor cannot say whether its memory may be written (jax's is
     * immutable on its side): import it read-only, as NumPy does. It cannot
     * say its sub-byte values are padded either: they are packed. */
    flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  }
  int ndim = t->ndim;
  if (ndim < 0 || ndim > BRIDGE_MAX_NDIM) {
    PyErr_Format(PyExc_BufferError, "DLPack tensor has invalid ndim %d (bridge accepts 0..%d)", ndim,
                 BRIDGE_MAX_NDIM);
    return -1;
  }
  DLDataType dt = t->dtype;
  int padded = (flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) != 0;
  /* lanes > 1 is a vector type, except a packed sub-byte type of one byte
   * (torch's float4_e2m1fn_x2 is (17, 4, lanes 2)): packed by definition. */
  int packed_type = dt.lanes > 1 && dt.bits > 0 && dt.bits < 8 && dt.lanes * dt.bits == 8 && !padded;
  if (dt.lanes != 1 && !packed_type) {
    PyErr_Format(PyExc_BufferError, "DLPack vector dtypes are not supported (lanes=%u)", (unsigned)dt.lanes);
    return -1;
  }
  int packed_values = dt.lanes == 1 && dt.bits > 0 && dt.bits < 8 && !padded;
  if (dt.bits == 0 || (dt.bits % 8 != 0 && dt.bits > 8)) {
    PyErr_Format(PyExc_BufferError, "DLPack dtype (code=%u, bits=%u) is not byte-addressable",
                 (unsigned)dt.code, (unsigned)dt.bits);
    return -1;
  }
  if (ndim > 0 && t->shape == NULL) {
    PyErr_Format(PyExc_BufferError, "DLPack tensor has ndim %d but a NULL shape", ndim);
    return -1;
  }
  if (ndim > 0 && t->strides == NULL && modern_strides) {
    PyErr_SetString(PyExc_BufferError, "DLPack >= 1.2 producer gave NULL strides (only older producers may)");
    return -1;
  }
  int64_t acc = 1;
  int empty = 0;
  for (int i = ndim - 1; i >= 0; i--) {
    out->shape[i] = t->shape[i];
    if (out->shape[i] < 0) {
      PyErr_Format(PyExc_BufferError, "DLPack tensor has negative size %lld in dim %d",
                   (long long)out->shape[i], i);
      return -1;
    }
    if (out->shape[i] == 0) empty = 1;
    if (t->strides != NULL) {
      out->strides[i] = t->strides[i];
    } else {
      out->strides[i] = acc;
      if (out->shape[i] > 1 && __builtin_mul_overflow(acc, out->shape[i], &acc)) return overflow();
    }
  }
  out->packed_bits = 0;
  out->dtype = NULL;
  if (packed_values && bridge_dtype_from_dlpack(dt.code, dt.bits, 1) != NULL) {
    /* Packed values (little bit-endian) of a type bridge knows: seen in
     * place through a packed dtype where one fits, else unpacked when a copy
     * is allowed. */
    if (unpack || !packed_view(dt, ndim, out->shape, out->strides, &out->dtype)) {
      if (!unpack) {
        PyErr_Format(PyExc_BufferError,
                     "DLPack tensor of dtype (code=%u, bits=%u) is packed (%s): bridge views packed "
                     "float4 values in place as float4_e2m1fn_x2 only when the last dimension has an even "
                     "size and stride 1 and every other stride is even; from_dlpack(x, copy=True) "
                     "unpacks it to one value per byte",
                     (unsigned)dt.code, (unsigned)dt.bits,
                     versioned ? "no IS_SUBBYTE_TYPE_PADDED flag" : "a legacy capsule cannot say padded");
        return -1;
      }
      out->packed_bits = dt.bits;
    }
  }
  if (out->dtype == NULL) /* (unpacked values: the type of one value per byte) */
    out->dtype = bridge_dtype_from_dlpack(dt.code, dt.bits, dt.lanes);
  if (out->dtype == NULL) {
    PyErr_Format(PyExc_BufferError, "DLPack dtype (code=%u, bits=%u, lanes=%u) has no bridge dtype",
                 (unsigned)dt.code, (unsigned)dt.bits, (unsigned)dt.lanes);
    return -1;
  }
  if (!known_device((int)t->device.device_type)) {
    PyErr_Format(PyExc_BufferError, "unknown DLPack device type %d", (int)t->device.device_type);
    return -1;
  }
  if (out->packed_bits && !bridge_host_accessible((int)t->device.device_type)) {
    PyErr_Format(PyExc_BufferError,
                 "DLPack tensor of dtype (code=%u, bits=%u) is packed and on device type %d: bridge "
                 "unpacks packed values in host memory only",
                 (unsigned)dt.code, (unsigned)dt.bits, (int)t->device.device_type);
    return -1;
  }
  uintptr_t base;
  if (__builtin_add_overflow((uintptr_t)t->data, (uintptr_t)t->byte_offset, &base)) return overflow();
  if (!empty && t->data == NULL) {
    PyErr_SetString(PyExc_BufferError, "DLPack tensor has a NULL data pointer but is not empty");
    return -1;
  }
  /* Packed values: the span in values bounds the one in bytes (overflow check only). */
  if (bridge_foreign_span(base, ndim, out->shape, out->strides, out->dtype->itemsize, &out->start,
                          &out->nbytes, &out->offset) < 0)
    return overflow();
  if (out->packed_bits) out->start = base;
  out->ndim = ndim;
  out->dev_type = (int)t->device.device_type;
  out->dev_id = t->device.device_id;
  out->readonly = (flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0;
  return 0;
}

/* Packed values copied out one per byte, in new memory (C order): value i of
 * the producer sits at bit `i * bits` from `start`, little bit-endian, and
 * may straddle two bytes (6 bits). */
static PyObject *unpack_values(const parsed_t *p) {
  int64_t numel = 1;
  for (int i = 0; i < p->ndim; i++)
    if (__builtin_mul_overflow(numel, p->shape[i], &numel)) return PyErr_NoMemory();
  StorageObject *st = bridge_storage_alloc(numel, 0);
  if (st == NULL) return NULL;
  const uint8_t *src = (const uint8_t *)p->start;
  uint8_t *dst = (uint8_t *)st->data;
  unsigned mask = (1u << p->packed_bits) - 1;
  int64_t idx[BRIDGE_MAX_NDIM] = {0}, value = 0; /* value: index of the current value from start */
  for (int64_t k = 0; k < numel; k++) {
    int64_t bit;
    if (__builtin_mul_overflow(value, (int64_t)p->packed_bits, &bit)) {
      Py_DECREF(st);
      overflow();
      return NULL;
    }
    int64_t byte = bit >= 0 ? bit / 8 : -((-bit + 7) / 8);
    int shift = (int)(bit - byte * 8);
    unsigned word = src[byte];
    if (shift + p->packed_bits > 8) word |= (unsigned)src[byte + 1] << 8;
    dst[k] = (uint8_t)((word >> shift) & mask);
    for (int d = p->ndim - 1; d >= 0; d--) { /* the next index, C order */
      value += p->strides[d];
      if (++idx[d] < p->shape[d]) break;
      value -= p->strides[d] * p->shape[d];
      idx[d] = 0;
    }
  }
  int64_t strides[BRIDGE_MAX_NDIM];
  bridge_contiguous_strides(p->ndim, p->shape, strides);
  PyObject *out = bridge_tensor_new(st, p->dtype, p->ndim, p->shape, strides, 0, GEOM_IMPORT);
  Py_DECREF(st);
  return out;
}

/* Take ownership of a managed tensor (taken from a capsule or handed over by
 * an exchange API): the new storage owns it and runs its deleter exactly
 * once, when it dies; on any error the deleter runs at once. With unpack,
 * packed sub-byte values no packed dtype views are copied out (the deleter
 * runs at once) and *copied is set. */
static PyObject *take_parsed(void *managed, int versioned, const parsed_t *pp, int *copied);

static PyObject *take(void *managed, int versioned, int unpack, int *copied) {
  BUMP(STAT_IMPORTS);
  parsed_t p;
  if (parse_managed(managed, versioned, unpack, &p) < 0) {
    bridge_dlpack_release(managed, versioned);
    return NULL;
  }
  return take_parsed(managed, versioned, &p, copied);
}

/* take() of a managed tensor parse_managed accepted as `*pp`. */
static PyObject *take_parsed(void *managed, int versioned, const parsed_t *pp, int *copied) {
  parsed_t p = *pp;
  if (p.packed_bits) {
    PyObject *out = unpack_values(&p);
    bridge_dlpack_release(managed, versioned);
    if (copied) *copied = out != NULL;
    return out;
  }
  StorageObject *storage = bridge_storage_new_import((char *)p.start, p.nbytes, p.dev_type, p.dev_id,
                                                     managed, versioned, p.readonly,
                                                     bridge_dlpack_release);
  if (storage == NULL) return NULL;
  PyObject *out = bridge_tensor_new(storage, p.dtype, p.ndim, p.shape, p.strides, p.offset, GEOM_IMPORT);
  Py_DECREF(storage); /* on failure this releases the import */
  return out;
}

PyObject *bridge_dlpack_take(void *managed, int versioned) { return take(managed, versioned, 0, NULL); }

/* Consume a capsule; unpack and copied as for take(). */
static PyObject *import_capsule(PyObject *capsule, int unpack, int *copied) {
  const char *name = PyCapsule_GetName(capsule);
  if (name == NULL && PyErr_Occurred()) return NULL;
  int versioned;
  if (name != NULL && strcmp(name, NAME_VERSIONED) == 0) {
    versioned = 1;
  } else if (name != NULL && strcmp(name, NAME_LEGACY) == 0) {
    versioned = 0;
  } else if (name != NULL && (strcmp(name, NAME_USED_VERSIONED) == 0 ||
                              strcmp(name, NAME_USED_LEGACY) == 0)) {
    return PyErr_Format(PyExc_BufferError,
                        "this DLPack capsule was already consumed (its name is '%s'); a capsule can "
                        "be imported once",
                        name);
  } else {
    return PyErr_Format(PyExc_ValueError,
                        "not a DLPack capsule: its name is '%s', expected 'dltensor' or "
                        "'dltensor_versioned'",
                        name ? name : "(null)");
  }
  void *p = PyCapsule_GetPointer(capsule, name);
  if (p == NULL) return NULL;
  /* Rename first: from here on the capsule's destructor leaves the tensor to us. */
  if (PyCapsule_SetName(capsule, versioned ? NAME_USED_VERSIONED : NAME_USED_LEGACY) < 0) return NULL;
  return take(p, versioned, unpack, copied);
}

PyObject *bridge_dlpack_import_capsule(PyObject *capsule) { return import_capsule(capsule, 0, NULL); }

/* ------------------------------------------------ the C exchange API */

/* What bridge remembers of a producer type, made when the type is first
 * seen: its __dlpack_c_exchange_api__ capsule (or None) and, for torch's
 * types, the three attributes torch's refusal reads (requires_grad, is_conj,
 * is_neg), looked up once and called directly: a generic attribute lookup
 * costs as much as the rest of the import, and torch's tensor type misses
 * CPython's method cache, so even _PyType_Lookup walks the MRO each time.
 * Kept in api_cache as a tuple (api, is_torch, requires_grad, is_conj,
 * is_neg), None where this torch lacks one; rebinding them on the class
 * later is not seen. */
typedef struct {
  PyObject *api;                              /* borrowed: capsule or None */
  int is_torch;
  PyObject *requires_grad, *is_conj, *is_neg; /* borrowed; NULL where torch lacks one */
} type_record;

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
static int type_record_of(PyTypeObject *tp, type_record *out) {
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
  type_record r;
  return type_record_of(tp, &r) < 0 ? NULL : r.api;
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

static int refuse_torch_export(const type_record *pr, PyObject *x) { return refuse_torch_export_of(pr, x, -1); }

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

/* The consumer's stream waits for the work the producer enqueued on its
 * current stream (NULL there is the legacy default stream, DLPack's 1). */
static int order_exchange(DLPackExchangeAPI *api, DLManagedTensorVersioned *m) {
  DLDevice d = m->dl_tensor.device;
  if (d.device_type != kDLCUDA || api->current_work_stream == NULL) return 0;
  void *ps = NULL;
  if (api->current_work_stream(d.device_type, d.device_id, &ps) != 0) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_BufferError, "the producer's current_work_stream failed");
    return -1;
  }
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
  if (api->managed_tensor_from_py_object_no_sync((void *)x, &m) == 0 && m != NULL) {
    /* Checked as a capsule's tensor is, before anything reads it (every
     * caller, bridge.convert's fast path too, gets only a valid one); then
     * the producer's rules, with the dtype known; then, for CUDA, the
     * consumer's stream waits for the producer's (the API does no sync).
     * A malformed tensor, a refusal or a failure releases the tensor. */
    if (parse_managed(m, 1, 0, p) < 0 || refuse_torch_export_of(r, x, m->dl_tensor.dtype.code) < 0 ||
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
  if (type_record_of(Py_TYPE(x), &r) < 0) return -1;
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
  if (api->dltensor_from_py_object_no_sync((void *)x, &m.dl_tensor) != 0 || parse_managed(&m, 1, 0, &p) < 0) {
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
static PyObject *import_exchange(const type_record *r, PyObject *x) {
  PyObject *borrowed;
  int rc = import_borrowed(r, x, &borrowed);
  if (rc != 0) return rc > 0 ? borrowed : NULL;
  DLManagedTensorVersioned *m = NULL;
  parsed_t p;
  if (exchange_managed(r, x, &m, &p) <= 0) return NULL;
  BUMP(STAT_IMPORTS);
  PyObject *out = take_parsed(m, 1, &p, NULL); /* parsed once, on receipt */
  if (out != NULL && p.dev_type == kDLCUDA) ((TensorObject *)out)->storage->stream = bridge_current_stream();
  return out;
}

PyObject *bridge_exchange_api_of(PyTypeObject *tp) { return exchange_api_of(tp); }

PyObject *bridge_exchange_import(PyObject *x) {
  type_record r;
  if (type_record_of(Py_TYPE(x), &r) < 0 || r.api == Py_None) return NULL;
  return import_exchange(&r, x);
}

static PyObject *str_dlpack_device, *str_dl_device, *str_copy, *str_stream, *str_keyword;

/* 1 when x.__dlpack_device__() names CUDA, 0 otherwise (or when x has none:
 * __dlpack__ then says what is wrong), -1 on error. NumPy arrays are always
 * on the host: they are not asked. */
static int producer_on_cuda(PyObject *x) {
  if (strcmp(Py_TYPE(x)->tp_name, "numpy.ndarray") == 0) return 0;
  PyObject *d = PyObject_CallMethodNoArgs(x, str_dlpack_device);
  if (d == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    return 0;
  }
  int cuda = 0;
  if (PyTuple_Check(d) && PyTuple_GET_SIZE(d) == 2) {
    long type = PyLong_AsLong(PyTuple_GET_ITEM(d, 0));
    if (type == -1 && PyErr_Occurred()) PyErr_Clear();
    cuda = type == kDLCUDA;
  }
  Py_DECREF(d);
  return cuda;
}

/* The one request to a producer: x.__dlpack__(max_version=(1, 3)) with
 * dl_device= and copy= when given (NULL: not asked), and stream= (the
 * thread's consumer stream) when the memory is or goes to CUDA (the spec's
 * rule: ask __dlpack_device__ first). Retried with no keywords on TypeError
 * (producers older than the 2023 signature): *keywords_taken is then 0 and
 * *stream_passed 0. Returns the capsule. */
/* Whether the pending TypeError is a signature's refusal of a keyword
 * (Python's, Cython's and C's own messages say "keyword"): an older producer,
 * asked again with none. Any other TypeError is the producer's answer (pyarrow
 * refuses nulls and strings with one): retrying would only repeat it, behind a
 * warning of the producer's about the legacy call. */
static int about_keywords(void) {
  PyObject *exc = bridge_fetch_error();
  PyObject *msg = exc ? PyObject_Str(exc) : NULL;
  Py_ssize_t at = msg ? PyUnicode_Find(msg, str_keyword, 0, PY_SSIZE_T_MAX, 1) : -1;
  Py_XDECREF(msg);
  PyErr_Clear(); /* (a failing str() or find: not about keywords) */
  bridge_restore_error(exc);
  return at >= 0;
}

static PyObject *ask_producer_on(PyObject *x, PyObject *dl_device, PyObject *copy, int cuda,
                                 int *keywords_taken, uintptr_t *stream_passed) {
  if (cuda < 0) return NULL;
  PyObject *stack[5] = {x, max_version_value};
  PyObject *names[4] = {str_max_version};
  Py_ssize_t n = 1;
  if (dl_device != NULL) {
    stack[1 + n] = dl_device;
    names[n++] = str_dl_device;
  }
  if (copy != NULL) {
    stack[1 + n] = copy;
    names[n++] = str_copy;
  }
  PyObject *stream = NULL;
  uintptr_t consumer = cuda ? bridge_current_stream() : 0;
  if (cuda) {
    if ((stream = PyLong_FromUnsignedLongLong(consumer)) == NULL) return NULL;
    stack[1 + n] = stream;
    names[n++] = str_stream;
  }
  /* The keyword-name tuple of this combination, made once (the hot path
   * asks with max_version alone). */
  static PyObject *kwnames_of[8];
  int which = (dl_device != NULL) | (copy != NULL) << 1 | cuda << 2;
  if (kwnames_of[which] == NULL) {
    PyObject *kw = PyTuple_New(n);
    if (kw == NULL) {
      Py_XDECREF(stream);
      return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(kw, i, Py_NewRef(names[i]));
    kwnames_of[which] = kw;
  }
  PyObject *cap = PyObject_VectorcallMethod(str_dlpack, stack, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                            kwnames_of[which]);
  Py_XDECREF(stream);
  *keywords_taken = 1;
  *stream_passed = consumer;
  if (cap == NULL) {
    if (PyErr_ExceptionMatches(PyExc_AttributeError) && !PyObject_HasAttr(x, str_dlpack)) {
      PyErr_Clear();
      return PyErr_Format(PyExc_TypeError, "%.200s does not support DLPack (no __dlpack__ method)",
                          Py_TYPE(x)->tp_name);
    }
    if (!PyErr_ExceptionMatches(PyExc_TypeError) || !about_keywords()) return NULL;
    PyErr_Clear();
    *keywords_taken = 0;
    *stream_passed = 0;
    cap = PyObject_CallMethodNoArgs(x, str_dlpack);
    if (cap == NULL) return NULL;
  }
  if (!PyCapsule_CheckExact(cap)) {
    PyErr_Format(PyExc_TypeError, "%.200s.__dlpack__ returned %.200s, not a capsule",
                 Py_TYPE(x)->tp_name, Py_TYPE(cap)->tp_name);
    Py_DECREF(cap);
    return NULL;
  }
  return cap;
}

static PyObject *ask_producer(PyObject *x, PyObject *dl_device, PyObject *copy, int to_cuda,
                              int *keywords_taken, uintptr_t *stream_passed) {
  return ask_producer_on(x, dl_device, copy, to_cuda ? 1 : producer_on_cuda(x), keywords_taken,
                         stream_passed);
}

static PyObject *ask_producer_host(PyObject *x, uintptr_t *stream_passed) {
  int taken;
  return ask_producer_on(x, NULL, NULL, 0, &taken, stream_passed);
}

/* The flags of an unconsumed capsule (0 for a legacy one, which has none). */
static uint64_t capsule_flags(PyObject *capsule) {
  if (!PyCapsule_IsValid(capsule, NAME_VERSIONED)) return 0;
  DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)PyCapsule_GetPointer(capsule, NAME_VERSIONED);
  return m ? m->flags : 0;
}

/* Import the capsule a producer gave: the storage's CUDA work is ordered on
 * the stream the producer was passed (0 when none was: nothing to wait for
 * that bridge knows of). */
static PyObject *import_asked(PyObject *capsule, uintptr_t stream, int unpack, int *copied) {
  PyObject *out = import_capsule(capsule, unpack, copied);
  if (out != NULL && ((TensorObject *)out)->storage->dev_type == kDLCUDA)
    ((TensorObject *)out)->storage->stream = stream;
  return out;
}

PyObject *bridge_dlpack_ask(PyObject *x, int host) {
  int taken;
  uintptr_t stream;
  /* host: the caller knows the memory is the host's (an ndarray, an Arrow
   * array), so __dlpack_device__ need not be asked: no stream to pass. */
  PyObject *cap = host ? ask_producer_host(x, &stream) : ask_producer(x, NULL, NULL, 0, &taken, &stream);
  if (cap == NULL) return NULL;
  PyObject *out = import_asked(cap, stream, 0, NULL);
  Py_DECREF(cap);
  return out;
}

/* The owner of a managed tensor handed to NumPy: its destructor runs the
 * producer's deleter (once: the capsule is its only holder). */
static const char NAME_OWNER[] = "bridge.dlpack_owner", NAME_OWNER_LEGACY[] = "bridge.dlpack_owner_legacy";

static void owner_release(PyObject *cap) {
  void *m = PyCapsule_GetPointer(cap, NAME_OWNER);
  if (m != NULL) bridge_dlpack_release(m, 1);
}

static void owner_release_legacy(PyObject *cap) {
  void *m = PyCapsule_GetPointer(cap, NAME_OWNER_LEGACY);
  if (m != NULL) bridge_dlpack_release(m, 0);
}

int bridge_dlpack_ask_managed(PyObject *x, void **m, int *versioned, PyObject **tensor) {
  int taken;
  uintptr_t stream;
  PyObject *cap = ask_producer(x, NULL, NULL, 0, &taken, &stream);
  if (cap == NULL) return -1;
  parsed_t p;
  int v = PyCapsule_IsValid(cap, NAME_VERSIONED);
  void *mm = v ? PyCapsule_GetPointer(cap, NAME_VERSIONED)
               : PyCapsule_IsValid(cap, NAME_LEGACY) ? PyCapsule_GetPointer(cap, NAME_LEGACY) : NULL;
  DLTensor *dl = mm == NULL ? NULL : v ? &((DLManagedTensorVersioned *)mm)->dl_tensor : &((DLManagedTensor *)mm)->dl_tensor;
  /* a valid host tensor with its strides: claimed as the capsule is consumed
   * (renamed first, so that its destructor leaves the tensor to the caller) */
  if (dl != NULL && dl->device.device_type == kDLCPU && dl->strides != NULL && parse_managed(mm, v, 0, &p) == 0 &&
      p.packed_bits == 0 && PyCapsule_SetName(cap, v ? NAME_USED_VERSIONED : NAME_USED_LEGACY) == 0) {
    Py_DECREF(cap);
    *m = mm;
    *versioned = v;
    return 1;
  }
  PyErr_Clear(); /* (parse_managed's reason: the import below gives it again) */
  *tensor = import_asked(cap, stream, 0, NULL);
  Py_DECREF(cap);
  return *tensor != NULL ? 0 : -1;
}

PyObject *bridge_dlpack_owner(void *m, int versioned) {
  BUMP(STAT_IMPORTS); /* (balanced by the release, as a storage's import is) */
  PyObject *owner = versioned ? PyCapsule_New(m, NAME_OWNER, owner_release)
                              : PyCapsule_New(m, NAME_OWNER_LEGACY, owner_release_legacy);
  if (owner == NULL) bridge_dlpack_release(m, versioned);
  return owner;
}

/* from_dlpack of a bridge tensor: a new view of it, or a copy when copy=True
 * or another device is asked for. */
static PyObject *from_bridge_tensor(TensorObject *t, int have_dev, int type, int id, PyObject *device,
                                    PyObject *copy) {
  if (have_dev && (type != t->storage->dev_type || id != t->storage->dev_id)) {
    if (copy == Py_False) {
      PyObject *dev = bridge_storage_device(t->storage);
      if (dev != NULL) {
        PyErr_Format(PyExc_ValueError, "from_dlpack(copy=False): moving a %S tensor to %R needs a copy",
                     dev, device);
        Py_DECREF(dev);
      }
      return NULL;
    }
    return bridge_dlpack_transfer(t, type, id);
  }
  if (copy == Py_True) return bridge_dlpack_copy(t);
  return bridge_tensor_new(t->storage, t->dtype, t->ndim, t->shape, t->strides, t->offset, GEOM_DERIVED);
}

/* bridge.from_dlpack(x, /, *, device=None, copy=None): every import of a
 * DLPack producer, with or without keywords, asks it here (ask_producer). */
static PyObject *py_from_dlpack(PyObject *mod, PyObject *const *args, Py_ssize_t nargsf,
                                PyObject *kwnames) {
  (void)mod;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  PyObject *device = Py_None, *copy = Py_None;
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs != 1)
    return PyErr_Format(PyExc_TypeError, "from_dlpack() takes exactly one positional argument (%zd given)",
                        nargs);
  for (Py_ssize_t i = 0; i < nkw; i++) {
    PyObject *name = PyTuple_GET_ITEM(kwnames, i);
    if (PyUnicode_CompareWithASCIIString(name, "device") == 0)
      device = args[nargs + i];
    else if (PyUnicode_CompareWithASCIIString(name, "copy") == 0)
      copy = args[nargs + i];
    else
      return PyErr_Format(PyExc_TypeError, "from_dlpack() got an unexpected keyword argument %R", name);
  }
  if (copy != Py_None && !PyBool_Check(copy))
    return PyErr_Format(PyExc_TypeError, "copy must be True, False or None, got %R", copy);
  PyObject *x = args[0];
  int have_dev = device != Py_None, type = 0, id = 0;
  if (have_dev && bridge_dl_device_of(device, 1, &type, &id) < 0) return NULL;
  if (Tensor_Check(x)) return from_bridge_tensor((TensorObject *)x, have_dev, type, id, device, copy);
  PyTypeObject *tp = Py_TYPE(x);
  if (tp == &PyCapsule_Type) {
    if (have_dev)
      return PyErr_Format(PyExc_ValueError, "device= cannot be honoured for a bare capsule; pass the array");
    int copied = 0; /* packed values unpacked: a copy already */
    PyObject *out = import_capsule(x, copy == Py_True, &copied);
    if (out != NULL && copy == Py_True && !copied) Py_SETREF(out, bridge_dlpack_copy((TensorObject *)out));
    return out;
  }
  type_record rec;
  if (type_record_of(tp, &rec) < 0) return NULL;
  if (!have_dev && copy == Py_None) {
    if (rec.api != Py_None) {
      PyObject *out = import_exchange(&rec, x);
      if (out != NULL || PyErr_Occurred()) return out;
    }
  } else if (refuse_torch_export(&rec, x) < 0) {
    return NULL;
  }
  int taken;
  uintptr_t stream;
  PyObject *dl_device = have_dev ? Py_BuildValue("(ii)", type, id) : NULL;
  if (have_dev && dl_device == NULL) return NULL;
  PyObject *cap = ask_producer(x, dl_device, copy == Py_None ? NULL : copy, have_dev && type == kDLCUDA,
                               &taken, &stream);
  if (cap == NULL) {
    PyObject *out = NULL;
    if (PyErr_ExceptionMatches(PyExc_BufferError) && copy == Py_False) {
      /* A refusal of copy=False or of the export itself? Ask without it: only
       * when that works was a copy the problem (ValueError, as the array API
       * says); otherwise the producer's BufferError stands. */
      PyObject *refusal = bridge_fetch_error();
      PyObject *again = ask_producer(x, dl_device, NULL, have_dev && type == kDLCUDA, &taken, &stream);
      if (again != NULL) {
        Py_DECREF(again);
        PyErr_Format(PyExc_ValueError, "from_dlpack(copy=False): the producer needs a copy: %S", refusal);
        PyObject *err = bridge_fetch_error();
        PyException_SetCause(err, Py_NewRef(refusal));
        PyException_SetContext(err, refusal);
        bridge_restore_error(err);
      } else {
        Py_DECREF(refusal);
      }
    } else if (have_dev && PyErr_ExceptionMatches(PyExc_BufferError)) {
      int cuda = type == kDLCUDA ? 1 : producer_on_cuda(x);
      if (cuda == 1) { /* the producer cannot reach the device: bridge copies (the copy engine) */
        PyErr_Clear();
        PyObject *plain = ask_producer(x, NULL, NULL, 0, &taken, &stream);
        PyObject *here = plain ? import_asked(plain, stream, 0, NULL) : NULL;
        Py_XDECREF(plain);
        if (here != NULL) {
          out = bridge_dlpack_transfer((TensorObject *)here, type, id);
          Py_DECREF(here);
        }
      }
    }
    Py_XDECREF(dl_device);
    return out;
  }
  Py_XDECREF(dl_device);
  uint64_t flags = copy == Py_True ? capsule_flags(cap) : 0; /* read only when it matters */
  int copied = 0; /* packed values unpacked: a copy already */
  PyObject *out = import_asked(cap, stream, copy == Py_True, &copied);
  Py_DECREF(cap);
  if (out == NULL) return NULL;
  StorageObject *st = ((TensorObject *)out)->storage;
  if (have_dev && (st->dev_type != type || st->dev_id != id)) {
    PyObject *dev = bridge_storage_device(st);
    if (dev != NULL) {
      PyErr_Format(PyExc_BufferError, "the producer gave a %S tensor, not the requested device %R", dev,
                   device);
      Py_DECREF(dev);
    }
    Py_DECREF(out);
    return NULL;
  }
  /* The producer did not say it copied (a legacy capsule cannot; some
   * producers accept copy= and ignore it): copying is ours to do. */
  if (copy == Py_True && !copied && !(taken && (flags & DLPACK_FLAG_BITMASK_IS_COPIED)))
    Py_SETREF(out, bridge_dlpack_copy((TensorObject *)out));
  return out;
}

/* dlpack_import(capsule) -> Tensor: consume a capsule. */
static PyObject *py_dlpack_import(PyObject *mod, PyObject *capsule) {
  (void)mod;
  if (!PyCapsule_CheckExact(capsule))
    return PyErr_Format(PyExc_TypeError, "expected a DLPack PyCapsule, got %.200s", Py_TYPE(capsule)->tp_name);
  return bridge_dlpack_import_capsule(capsule);
}

static PyMethodDef import_functions[] = {
    {"from_dlpack", (PyCFunction)(void (*)(void))py_from_dlpack, METH_FASTCALL | METH_KEYWORDS,
     "from_dlpack(x, /, *, device=None, copy=None)\n--\n\n"
     "A bridge tensor sharing the memory of x (the Python array API's from_dlpack).\n\n"
     "x may be any object with __dlpack__, or a bare DLPack capsule. The producer is asked for a\n"
     "versioned capsule (max_version=(1, 3)) and asked again without keywords if it raises\n"
     "TypeError. Types that publish __dlpack_c_exchange_api__ (PyTorch >= 2.11, tvm-ffi) are\n"
     "read through that C API instead, with no capsule.\n\n"
     "The producer's memory stays alive until the last bridge view of it dies; its deleter then\n"
     "runs exactly once. READ_ONLY memory, and every legacy (unversioned) capsule, give a\n"
     "read-only tensor. copy=True always returns new, writable memory; copy=False never copies\n"
     "(ValueError when the producer needs to). device asks the producer for that device (\"cpu\"\n"
     "or a (device_type, device_id) pair).\n\n"
     "torch tensors torch's own __dlpack__ refuses (requiring grad, lazy conjugate/negative views,\n"
     "sparse, quantized) are refused with torch's BufferError on every path.\n\n"
     "Packed sub-byte values (DLPack's default for float4/float6 without IS_SUBBYTE_TYPE_PADDED,\n"
     "and every legacy capsule) are viewed in place as float4_e2m1fn_x2 (two values per element,\n"
     "the last dimension halved) where the layout allows; copy=True unpacks them to one value per\n"
     "byte (float4_e2m1fn, the producer's shape); otherwise BufferError saying 'packed'.\n\n"
     "Errors: BufferError for capsules bridge cannot represent (unknown dtype or device, lanes !=\n"
     "1, packed values it cannot view, bad ndim, NULL shape, NULL strides from a >= 1.2 producer,\n"
     "NULL data for a non-empty tensor, major version != 1, overflowing extents) and for consumed\n"
     "capsules, and for an exchange API whose chain holds no major version 1 table and no\n"
     "__dlpack__ to fall back on; ValueError for\n"
     "capsules with a wrong name; TypeError for objects without DLPack support."},
    {"dlpack_import", (PyCFunction)py_dlpack_import, METH_O,
     "dlpack_import(capsule, /)\n--\n\nConsume a DLPack capsule into a tensor."},
    {NULL, NULL, 0, NULL},
};

int bridge_dlpack_import_init(PyObject *mod) {
  if (!(api_cache = PyDict_New()) ||
      !(str_api = PyUnicode_InternFromString("__dlpack_c_exchange_api__")) ||
      !(str_is_conj = PyUnicode_InternFromString("is_conj")) ||
      !(str_is_neg = PyUnicode_InternFromString("is_neg")) ||
      !(str_requires_grad = PyUnicode_InternFromString("requires_grad")) ||
      !(str_dlpack_device = PyUnicode_InternFromString("__dlpack_device__")) ||
      !(str_dl_device = PyUnicode_InternFromString("dl_device")) ||
      !(str_keyword = PyUnicode_InternFromString("keyword")) ||
      !(str_copy = PyUnicode_InternFromString("copy")) ||
      !(str_stream = PyUnicode_InternFromString("stream")) ||
      !(str_dlpack = PyUnicode_InternFromString("__dlpack__")) ||
      !(str_max_version = PyUnicode_InternFromString("max_version")) ||
      !(max_version_value = Py_BuildValue("(ii)", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION)))
    return -1;
  return PyModule_AddFunctions(mod, import_functions);
}
