/* DLPack import: consume a capsule (or a managed tensor handed over by a C
 * exchange API), validate it with overflow-checked arithmetic, and build the
 * storage and tensor in C. The storage owns the managed tensor and calls the
 * producer's deleter exactly once, when it dies. bridge.from_dlpack is here
 * with its device=/copy= policy, and ask_producer is the one place any
 * import (from_dlpack, from_numpy, from_arrow, asarray) asks an object for
 * its DLPack export. */

#include "dlpack_import.h"

#define NAME_LEGACY BRIDGE_NAME_LEGACY
#define NAME_VERSIONED BRIDGE_NAME_VERSIONED
#define NAME_USED_LEGACY BRIDGE_NAME_USED_LEGACY
#define NAME_USED_VERSIONED BRIDGE_NAME_USED_VERSIONED

static PyObject *str_dlpack, *str_max_version, *max_version_value; /* __dlpack__(max_version=(1, 3)) */

void bridge_dlpack_release(void *managed, int versioned) {
  PyObject *saved = bridge_fetch_error(); /* the producer's deleter may run Python code */
  bridge_dlpack_call_deleter(managed, versioned);
  BUMP(STAT_IMPORT_RELEASES);
  bridge_restore_error(saved);
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
int bridge_dlpack_parse(void *p, int versioned, int unpack, parsed_t *out) {
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
  if (out->dtype == NULL && dt.code == kDLBcomplex) {
    PyErr_Format(PyExc_BufferError,
                 "DLPack dtype bcomplex%u (code=%u: complex numbers of two bfloat16 halves, lanes=%u) has no "
                 "bridge dtype (nor a NumPy or ml_dtypes one); the producer can export its real and imaginary "
                 "parts as bfloat16 (torch.view_as_real)",
                 (unsigned)dt.bits, (unsigned)dt.code, (unsigned)dt.lanes);
    return -1;
  }
  if (out->dtype == NULL) {
    PyErr_Format(PyExc_BufferError, "DLPack dtype (code=%u, bits=%u, lanes=%u) has no bridge dtype",
                 (unsigned)dt.code, (unsigned)dt.bits, (unsigned)dt.lanes);
    return -1;
  }
  if (t->device.device_type != kDLCPU && bridge_device_name((int)t->device.device_type) == NULL) { /* (the host: known, no table walk) */
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
PyObject *bridge_dlpack_take_parsed(void *managed, int versioned, const parsed_t *pp, int *copied);

static PyObject *take(void *managed, int versioned, int unpack, int *copied) {
  BUMP(STAT_IMPORTS);
  parsed_t p;
  if (bridge_dlpack_parse(managed, versioned, unpack, &p) < 0) {
    bridge_dlpack_release(managed, versioned);
    return NULL;
  }
  return bridge_dlpack_take_parsed(managed, versioned, &p, copied);
}

/* take() of a managed tensor parse_managed accepted as `*pp`. */
PyObject *bridge_dlpack_take_parsed(void *managed, int versioned, const parsed_t *pp, int *copied) {
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

int bridge_dlpack_ask_managed(PyObject *x, int managed, void **m, int *versioned, PyObject **tensor) {
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
  if (managed && dl != NULL && dl->device.device_type == kDLCPU && dl->strides != NULL && bridge_dlpack_parse(mm, v, 0, &p) == 0 &&
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
  if (bridge_type_record_of(tp, &rec) < 0) return NULL;
  if (!have_dev && copy == Py_None) {
    if (rec.api != Py_None) {
      PyObject *out = bridge_import_exchange(&rec, x);
      if (out != NULL || PyErr_Occurred()) return out;
    }
  } else if (bridge_refuse_torch_export(&rec, x) < 0) {
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
      /* __dlpack_device__ is asked with the refusal set aside (a call with an
       * exception pending is a SystemError); the refusal stands unless bridge copies */
      PyObject *refusal = bridge_fetch_error();
      int cuda = type == kDLCUDA ? 1 : producer_on_cuda(x);
      PyErr_Clear(); /* (a failing __dlpack_device__: the producer's refusal says more) */
      if (cuda != 1) bridge_restore_error(refusal);
      else Py_XDECREF(refusal);
      if (cuda == 1) { /* the producer cannot reach the device: bridge copies (the copy engine) */
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
  if (bridge_exchange_import_init() < 0 || !(str_dlpack_device = PyUnicode_InternFromString("__dlpack_device__")) ||
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
