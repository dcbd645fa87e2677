/* C half of dlpack-bridge: memory helpers, the DLPack deleters and capsule
 * destructors, the export/import hot paths and the DLPack C exchange API.
 *
 * Everything that touches Python objects runs with the GIL: cffi releases the
 * GIL around `lib` calls, so bridge_install takes it itself, and the fast
 * paths it installs are ordinary CPython builtins (METH_FASTCALL), called with
 * the GIL held and with no cffi conversion on the way. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX, READONLY: the __slots__ member kinds */

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "dlpack.h"
#include "arrow_c_data.h"
#include "bridge.h"

/* The DLPack v1.3 ABI on LP64 platforms. These restate the upstream header's
 * layout so that a compiler, not a reviewer, catches an edit that moves a field. */
#if UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu
_Static_assert(sizeof(DLDevice) == 8, "DLDevice is two int32");
_Static_assert(sizeof(DLDataType) == 4, "DLDataType is u8, u8, u16");
_Static_assert(offsetof(DLTensor, ndim) == 16, "DLTensor.ndim");
_Static_assert(offsetof(DLTensor, shape) == 24, "DLTensor.shape");
_Static_assert(offsetof(DLTensor, byte_offset) == 40, "DLTensor.byte_offset");
_Static_assert(sizeof(DLTensor) == 48, "DLTensor size");
_Static_assert(offsetof(DLManagedTensor, deleter) == 56, "DLManagedTensor.deleter");
_Static_assert(offsetof(DLManagedTensorVersioned, flags) == 24, "versioned flags");
_Static_assert(offsetof(DLManagedTensorVersioned, dl_tensor) == 32, "versioned dl_tensor");
_Static_assert(sizeof(DLManagedTensorVersioned) == 80, "versioned size");
#endif
/* The shape/strides arrays follow the struct in the same allocation. */
_Static_assert(sizeof(DLManagedTensor) % sizeof(int64_t) == 0, "dims alignment");
_Static_assert(sizeof(DLManagedTensorVersioned) % sizeof(int64_t) == 0, "dims alignment");

/* ------------------------------------------------------------------ memory */

#define BRIDGE_HUGEPAGE_THRESHOLD ((size_t)4 << 20)

/* The raw pointer is stored in the word just below the aligned block, so the
 * zeroed path can use calloc (lazily zeroed pages for large blocks) instead of
 * posix_memalign followed by a memset that touches every page. */
void *bridge_aligned_alloc(size_t nbytes, int zeroed) {
  size_t extra = BRIDGE_ALIGNMENT + sizeof(void *);
  if (nbytes > SIZE_MAX - extra) return NULL;
  void *raw = zeroed ? calloc(1, nbytes + extra) : malloc(nbytes + extra);
  if (raw == NULL) return NULL;
  uintptr_t start = (uintptr_t)raw + sizeof(void *);
  uintptr_t aligned = (start + BRIDGE_ALIGNMENT - 1) & ~(uintptr_t)(BRIDGE_ALIGNMENT - 1);
  ((void **)aligned)[-1] = raw;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  /* As NumPy does: where transparent huge pages are opt-in ("madvise"),
   * first-touching a large block costs several times more without them. */
  if (nbytes >= BRIDGE_HUGEPAGE_THRESHOLD) {
    uintptr_t page = 4096;
    uintptr_t lo = (aligned + page - 1) & ~(page - 1);
    uintptr_t hi = (aligned + nbytes) & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
  }
#endif
  return (void *)aligned;
}

void bridge_aligned_free(void *ptr) {
  if (ptr != NULL) free(((void **)ptr)[-1]);
}

/* The owner of a block bridge allocated: a capsule whose destructor frees
 * it. Destructors run with the GIL held and free() never releases it, so the
 * last reference may be dropped anywhere, also by a daemon thread while the
 * interpreter finalises (a cffi ffi.gc callback releases and re-takes the
 * GIL there, which kills such a thread mid-release). */
static const char NAME_MEMORY[] = "bridge.memory";

static void memory_destructor(PyObject *cap) {
  void *p = PyCapsule_GetPointer(cap, NAME_MEMORY);
  if (p == NULL) {
    PyErr_Clear();
    return;
  }
  bridge_aligned_free(p);
}

/* alloc(nbytes, zeroed) -> (owner capsule, address) */
static PyObject *py_alloc(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "alloc(nbytes, zeroed)");
    return NULL;
  }
  Py_ssize_t nbytes = PyLong_AsSsize_t(args[0]);
  int zeroed = PyObject_IsTrue(args[1]);
  if ((nbytes == -1 && PyErr_Occurred()) || zeroed < 0) return NULL;
  if (nbytes < 0) {
    PyErr_Format(PyExc_ValueError, "cannot allocate %zd bytes", nbytes);
    return NULL;
  }
  void *p = bridge_aligned_alloc((size_t)nbytes, zeroed);
  if (p == NULL) return PyErr_Format(PyExc_MemoryError, "cannot allocate %zd bytes", nbytes);
  PyObject *cap = PyCapsule_New(p, NAME_MEMORY, memory_destructor);
  if (cap == NULL) {
    bridge_aligned_free(p);
    return NULL;
  }
  return Py_BuildValue("(NK)", cap, (unsigned long long)(uintptr_t)p);
}

/* ---------------------------------------------------------------- counters */

static uint64_t n_exports, n_export_deleters, n_imports, n_import_releases, n_test_deleters;
static uint64_t n_arrow_exports, n_arrow_releases, n_arrow_imports, n_arrow_import_releases;
#define BUMP(c) __atomic_add_fetch(&(c), 1, __ATOMIC_RELAXED)

void bridge_stats(uint64_t *out) {
  out[0] = __atomic_load_n(&n_exports, __ATOMIC_RELAXED);
  out[1] = __atomic_load_n(&n_export_deleters, __ATOMIC_RELAXED);
  out[2] = __atomic_load_n(&n_imports, __ATOMIC_RELAXED);
  out[3] = __atomic_load_n(&n_import_releases, __ATOMIC_RELAXED);
  out[4] = __atomic_load_n(&n_test_deleters, __ATOMIC_RELAXED);
  out[5] = __atomic_load_n(&n_arrow_exports, __ATOMIC_RELAXED);
  out[6] = __atomic_load_n(&n_arrow_releases, __ATOMIC_RELAXED);
  out[7] = __atomic_load_n(&n_arrow_imports, __ATOMIC_RELAXED);
  out[8] = __atomic_load_n(&n_arrow_import_releases, __ATOMIC_RELAXED);
}

/* A deleter or destructor may run while an exception is being raised: keep it. */
#if PY_VERSION_HEX >= 0x030C0000
#define SAVE_ERROR PyObject *saved_exc_ = PyErr_GetRaisedException()
#define RESTORE_ERROR PyErr_SetRaisedException(saved_exc_)
#else
#define SAVE_ERROR                      \
  PyObject *se_t_, *se_v_, *se_tb_;     \
  PyErr_Fetch(&se_t_, &se_v_, &se_tb_)
#define RESTORE_ERROR PyErr_Restore(se_t_, se_v_, se_tb_)
#endif

#if PY_VERSION_HEX >= 0x030D0000
#define BRIDGE_FINALIZING() Py_IsFinalizing()
#else
#define BRIDGE_FINALIZING() _Py_IsFinalizing()
#endif

/* Entering Python from a foreign callback (a deleter, an Arrow release or
 * stream callback), which may run on any thread. py_enter returns 0 when
 * Python must not be touched: before initialisation, after shutdown, or
 * while it finalises on a thread that does not hold the GIL (taking it then
 * ends the thread inside the callback). Otherwise it returns 1 with the GIL
 * held and any pending error put aside; py_leave restores both. */
typedef struct {
  int held;
  PyGILState_STATE gil;
#if PY_VERSION_HEX >= 0x030C0000
  PyObject *exc;
#else
  PyObject *type, *value, *tb;
#endif
} py_entry;

static int py_enter(py_entry *e) {
  if (!Py_IsInitialized()) return 0;
  e->held = PyGILState_Check();
  if (!e->held) {
    if (BRIDGE_FINALIZING()) return 0;
    e->gil = PyGILState_Ensure();
  }
#if PY_VERSION_HEX >= 0x030C0000
  e->exc = PyErr_GetRaisedException();
#else
  PyErr_Fetch(&e->type, &e->value, &e->tb);
#endif
  return 1;
}

static void py_leave(py_entry *e) {
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(e->exc);
#else
  PyErr_Restore(e->type, e->value, e->tb);
#endif
  if (!e->held) PyGILState_Release(e->gil);
}

static PyObject *PyErr_GetRaisedException_compat(void) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyErr_GetRaisedException();
#else
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  PyErr_NormalizeException(&t, &v, &tb);
  Py_XDECREF(t);
  Py_XDECREF(tb);
  return v;
#endif
}

/* Raise `exc` again (steals the reference). */
static void PyErr_SetRaisedException_compat(PyObject *exc) {
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(exc);
#else
  PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
#endif
}

/* ---------------------------------------------------------------- deleters */

/* Our exports: one malloc block (struct + shape + strides) whose manager_ctx
 * is a strong reference to the storage owner. After interpreter shutdown the
 * reference cannot be dropped safely, so the block is leaked on purpose. */
static void release_export(void *block, void *ctx) {
  py_entry e;
  if (!py_enter(&e)) return;
  Py_XDECREF((PyObject *)ctx);
  free(block);
  BUMP(n_export_deleters);
  py_leave(&e);
}

static void export_deleter(DLManagedTensor *self) {
  if (self == NULL) return;
  void *ctx = self->manager_ctx;
  self->manager_ctx = NULL;
  release_export(self, ctx);
}

static void export_deleter_versioned(DLManagedTensorVersioned *self) {
  if (self == NULL) return;
  void *ctx = self->manager_ctx;
  self->manager_ctx = NULL;
  release_export(self, ctx);
}

void bridge_test_deleter(DLManagedTensor *self) {
  (void)self;
  BUMP(n_test_deleters);
}

void bridge_test_deleter_versioned(DLManagedTensorVersioned *self) {
  (void)self;
  BUMP(n_test_deleters);
}

typedef struct {
  void *managed;
  int versioned;
} thread_job;

static void *run_deleter(void *arg) {
  thread_job *job = (thread_job *)arg;
  if (job->versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)job->managed;
    if (m->deleter) m->deleter(m);
  } else {
    DLManagedTensor *m = (DLManagedTensor *)job->managed;
    if (m->deleter) m->deleter(m);
  }
  return NULL;
}

int bridge_call_deleter_in_thread(void *managed, int versioned) {
  /* cffi calls this without the GIL, so the new thread can take it. */
  thread_job job = {managed, versioned};
  pthread_t th;
  if (pthread_create(&th, NULL, run_deleter, &job) != 0) return -1;
  return pthread_join(th, NULL) == 0 ? 0 : -1;
}

/* ------------------------------------------------------- capsule names */

static const char NAME_LEGACY[] = "dltensor";
static const char NAME_VERSIONED[] = "dltensor_versioned";
static const char NAME_USED_LEGACY[] = "used_dltensor";
static const char NAME_USED_VERSIONED[] = "used_dltensor_versioned";
static const char NAME_GUARD_LEGACY[] = "bridge.dlpack_import";
static const char NAME_GUARD_VERSIONED[] = "bridge.dlpack_import_versioned";
static const char NAME_API[] = "dlpack_exchange_api";
static const char NAME_BOGUS[] = "not_a_dltensor";

/* Producer side: a capsule that was never consumed still owns its tensor. */
static void capsule_destructor(PyObject *capsule) {
  const char *name = PyCapsule_GetName(capsule);
  if (name == NULL) {
    PyErr_Clear();
    return;
  }
  int versioned = strcmp(name, NAME_VERSIONED) == 0;
  if (!versioned && strcmp(name, NAME_LEGACY) != 0) return; /* used_*: the consumer owns it */
  SAVE_ERROR;
  void *p = PyCapsule_GetPointer(capsule, name);
  if (p == NULL) {
    PyErr_WriteUnraisable(capsule);
  } else if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)p;
    if (m->deleter) m->deleter(m);
  } else {
    DLManagedTensor *m = (DLManagedTensor *)p;
    if (m->deleter) m->deleter(m);
  }
  RESTORE_ERROR;
}

/* Consumer side: the owner of an imported tensor. Its destructor calls the
 * producer's deleter, exactly once, when the last bridge view lets go. */
static void guard_destructor(PyObject *guard) {
  const char *name = PyCapsule_GetName(guard);
  SAVE_ERROR;
  void *p = name ? PyCapsule_GetPointer(guard, name) : NULL;
  if (p == NULL) {
    PyErr_Clear();
  } else if (strcmp(name, NAME_GUARD_VERSIONED) == 0) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)p;
    if (m->deleter) m->deleter(m);
  } else {
    DLManagedTensor *m = (DLManagedTensor *)p;
    if (m->deleter) m->deleter(m);
  }
  BUMP(n_import_releases);
  RESTORE_ERROR;
}

static void call_deleter(void *p, int versioned) {
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)p;
    if (m->deleter) m->deleter(m);
  } else {
    DLManagedTensor *m = (DLManagedTensor *)p;
    if (m->deleter) m->deleter(m);
  }
}

/* ------------------------------------------------------------------ export */

/* One managed tensor in a single allocation (struct, then shape, then
 * strides); manager_ctx is a new strong reference to `owner`. Returns NULL
 * with an exception set on bad input. */
static void *build_managed(PyObject *owner, void *data, int dev_type, int dev_id, int code,
                           int bits, PyObject *shape, PyObject *strides, uint64_t flags,
                           int versioned) {
  if (!PyTuple_Check(shape) || !PyTuple_Check(strides) ||
      PyTuple_GET_SIZE(shape) != PyTuple_GET_SIZE(strides)) {
    PyErr_SetString(PyExc_TypeError, "export: shape and strides must be tuples of equal length");
    return NULL;
  }
  Py_ssize_t ndim = PyTuple_GET_SIZE(shape);
  if (ndim > BRIDGE_MAX_NDIM) {
    PyErr_Format(PyExc_BufferError, "cannot export a tensor of %zd dimensions", ndim);
    return NULL;
  }
  size_t head = versioned ? sizeof(DLManagedTensorVersioned) : sizeof(DLManagedTensor);
  char *block = (char *)malloc(head + 2 * (size_t)ndim * sizeof(int64_t));
  if (block == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  int64_t *dims = (int64_t *)(block + head);
  for (Py_ssize_t i = 0; i < ndim; i++) {
    dims[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    dims[ndim + i] = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
  }
  if (PyErr_Occurred()) {
    free(block);
    return NULL;
  }
  DLTensor *t;
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)block;
    m->version.major = DLPACK_MAJOR_VERSION;
    m->version.minor = DLPACK_MINOR_VERSION;
    m->manager_ctx = owner;
    m->deleter = export_deleter_versioned;
    m->flags = flags;
    t = &m->dl_tensor;
  } else {
    DLManagedTensor *m = (DLManagedTensor *)block;
    m->manager_ctx = owner;
    m->deleter = export_deleter;
    t = &m->dl_tensor;
  }
  t->data = data;
  t->device.device_type = (DLDeviceType)dev_type;
  t->device.device_id = (int32_t)dev_id;
  t->ndim = (int32_t)ndim;
  t->dtype.code = (uint8_t)code;
  t->dtype.bits = (uint8_t)bits;
  t->dtype.lanes = 1;
  t->shape = dims;
  t->strides = dims + ndim; /* never NULL, as v1.2+ requires */
  t->byte_offset = 0;
  Py_INCREF(owner);
  BUMP(n_exports);
  return block;
}

/* The 9 export values (owner, data, device_type, device_id, code, bits,
 * shape, strides, flags) as Python objects -> a managed tensor. */
static void *build_managed_from(PyObject *const *a, int versioned) {
  void *data = a[1] == Py_None ? NULL : PyLong_AsVoidPtr(a[1]);
  long dev_type = PyLong_AsLong(a[2]);
  long dev_id = PyLong_AsLong(a[3]);
  long code = PyLong_AsLong(a[4]);
  long bits = PyLong_AsLong(a[5]);
  unsigned long long flags = PyLong_AsUnsignedLongLong(a[8]);
  if (PyErr_Occurred()) return NULL;
  return build_managed(a[0], data, (int)dev_type, (int)dev_id, (int)code, (int)bits, a[6], a[7],
                       flags, versioned);
}

static PyObject *wrap_export(void *block, int versioned) {
  if (block == NULL) return NULL;
  PyObject *cap = PyCapsule_New(block, versioned ? NAME_VERSIONED : NAME_LEGACY, capsule_destructor);
  if (cap == NULL) call_deleter(block, versioned);
  return cap;
}

/* export(owner, data, device_type, device_id, code, bits, shape, strides, flags, versioned) */
static PyObject *py_export(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 10) {
    PyErr_SetString(PyExc_TypeError, "export() takes 10 arguments");
    return NULL;
  }
  int versioned = PyObject_IsTrue(args[9]);
  if (versioned < 0) return NULL;
  return wrap_export(build_managed_from(args, versioned), versioned);
}

/* ------------------------------------------------------------------ import */

typedef struct {
  PyObject *guard; /* owns the managed tensor */
  uintptr_t start; /* lowest byte the tensor can reach */
  int64_t nbytes;  /* bytes from start to the end of the highest element */
  int dev_type, dev_id, code, bits;
  PyObject *shape, *strides;
  int64_t offset; /* in elements, from start to element [0, ..., 0] */
  uint64_t flags;
} parsed_t;

static void parsed_clear(parsed_t *p) {
  Py_CLEAR(p->guard);
  Py_CLEAR(p->shape);
  Py_CLEAR(p->strides);
}

/* Validate a managed tensor owned by `guard` and describe it in `out`, where
 * the storage spans exactly the elements the tensor can reach (negative
 * strides included). Returns 0, or -1 with an exception set. */
static int parse_managed(PyObject *guard, void *p, int versioned, parsed_t *out) {
  DLTensor *t;
  uint64_t flags = 0;
  int modern_strides = 0; /* producer is DLPack >= 1.2: strides must be set */
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)p;
    if (m->version.major != DLPACK_MAJOR_VERSION) {
      PyErr_Format(PyExc_BufferError,
                   "unsupported DLPack version %u.%u: bridge understands major version %d",
                   m->version.major, m->version.minor, DLPACK_MAJOR_VERSION);
      return -1;
    }
    flags = m->flags;
    modern_strides = m->version.minor >= 2;
    t = &m->dl_tensor;
  } else {
    t = &((DLManagedTensor *)p)->dl_tensor;
    /* A legacy tensor cannot say whether its memory may be written (jax's is
     * immutable on its side): import it read-only, as NumPy does. */
    flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  }
  int32_t ndim = t->ndim;
  if (ndim < 0 || ndim > BRIDGE_MAX_NDIM) {
    PyErr_Format(PyExc_BufferError, "DLPack tensor has invalid ndim %d (bridge accepts 0..%d)",
                 (int)ndim, BRIDGE_MAX_NDIM);
    return -1;
  }
  DLDataType dt = t->dtype;
  if (dt.lanes != 1) {
    PyErr_Format(PyExc_BufferError, "DLPack vector dtypes are not supported (lanes=%u)",
                 (unsigned)dt.lanes);
    return -1;
  }
  int64_t itemsize;
  if (dt.bits != 0 && dt.bits % 8 == 0) {
    itemsize = dt.bits / 8;
  } else if (dt.bits != 0 && dt.bits < 8 && (flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED)) {
    itemsize = 1;
  } else {
    PyErr_Format(PyExc_BufferError,
                 "DLPack dtype (code=%u, bits=%u) is not byte-addressable (packed sub-byte "
                 "types are not supported)",
                 (unsigned)dt.code, (unsigned)dt.bits);
    return -1;
  }
  if (ndim > 0 && t->shape == NULL) {
    PyErr_Format(PyExc_BufferError, "DLPack tensor has ndim %d but a NULL shape", (int)ndim);
    return -1;
  }
  if (ndim > 0 && t->strides == NULL && modern_strides) {
    PyErr_SetString(PyExc_BufferError,
                    "DLPack >= 1.2 producer gave NULL strides (only older producers may)");
    return -1;
  }
  int empty = 0;
  for (int32_t i = 0; i < ndim; i++) {
    if (t->shape[i] < 0) {
      PyErr_Format(PyExc_BufferError, "DLPack tensor has negative size %lld in dim %d",
                   (long long)t->shape[i], (int)i);
      return -1;
    }
    if (t->shape[i] == 0) empty = 1;
  }
  PyObject *shape = PyTuple_New(ndim);
  PyObject *strides = PyTuple_New(ndim);
  if (shape == NULL || strides == NULL) goto fail;
  int64_t lo = 0, hi = 0, acc = 1;
  for (int32_t i = ndim - 1; i >= 0; i--) {
    int64_t size = t->shape[i];
    int64_t stride;
    if (t->strides != NULL) {
      stride = t->strides[i];
    } else {
      stride = acc;
      if (size > 1 && __builtin_mul_overflow(acc, size, &acc)) goto overflow;
    }
    if (!empty && size > 1) {
      int64_t span;
      if (__builtin_mul_overflow(size - 1, stride, &span)) goto overflow;
      if (span > 0 ? __builtin_add_overflow(hi, span, &hi) : __builtin_add_overflow(lo, span, &lo))
        goto overflow;
    }
    PyObject *s1 = PyLong_FromLongLong(size), *s2 = PyLong_FromLongLong(stride);
    if (s1 == NULL || s2 == NULL) {
      Py_XDECREF(s1);
      Py_XDECREF(s2);
      goto fail;
    }
    PyTuple_SET_ITEM(shape, i, s1);
    PyTuple_SET_ITEM(strides, i, s2);
  }
  uintptr_t base;
  if (__builtin_add_overflow((uintptr_t)t->data, (uintptr_t)t->byte_offset, &base)) goto overflow;
  uintptr_t start = base;
  int64_t nbytes = 0, offset = 0;
  if (!empty) {
    if (t->data == NULL) {
      PyErr_SetString(PyExc_BufferError, "DLPack tensor has a NULL data pointer but is not empty");
      goto fail;
    }
    int64_t span, count, extent, lo_bytes, end;
    if (__builtin_sub_overflow(hi, lo, &span) || __builtin_add_overflow(span, 1, &count) ||
        __builtin_mul_overflow(count, itemsize, &extent) ||
        __builtin_mul_overflow(-lo, itemsize, &lo_bytes))
      goto overflow;
    if ((uintptr_t)lo_bytes > base) goto overflow;
    /* the last byte must be addressable too */
    if (__builtin_sub_overflow(extent, lo_bytes, &end) ||
        (uint64_t)end > UINTPTR_MAX - (uint64_t)base)
      goto overflow;
    start = base - (uintptr_t)lo_bytes;
    nbytes = extent;
    offset = -lo;
  }
  BUMP(n_imports);
  Py_INCREF(guard);
  out->guard = guard;
  out->start = start;
  out->nbytes = nbytes;
  out->dev_type = (int)t->device.device_type;
  out->dev_id = (int)t->device.device_id;
  out->code = (int)dt.code;
  out->bits = (int)dt.bits;
  out->shape = shape;
  out->strides = strides;
  out->offset = offset;
  out->flags = flags;
  return 0;
overflow:
  PyErr_SetString(PyExc_BufferError, "DLPack tensor's shape and strides overflow its address space");
fail:
  Py_XDECREF(shape);
  Py_XDECREF(strides);
  return -1;
}

/* Take ownership of a managed tensor: wrap it in a guard, then parse. On any
 * error the guard dies at once and the producer's deleter runs. */
static int adopt_managed(void *p, int versioned, parsed_t *out) {
  PyObject *guard = PyCapsule_New(p, versioned ? NAME_GUARD_VERSIONED : NAME_GUARD_LEGACY,
                                  guard_destructor);
  if (guard == NULL) {
    call_deleter(p, versioned);
    return -1;
  }
  int rc = parse_managed(guard, p, versioned, out);
  Py_DECREF(guard);
  return rc;
}

static int consume_capsule(PyObject *capsule, parsed_t *out) {
  const char *name = PyCapsule_GetName(capsule);
  if (name == NULL && PyErr_Occurred()) return -1;
  int versioned;
  if (name != NULL && strcmp(name, NAME_VERSIONED) == 0) {
    versioned = 1;
  } else if (name != NULL && strcmp(name, NAME_LEGACY) == 0) {
    versioned = 0;
  } else if (name != NULL && (strcmp(name, NAME_USED_VERSIONED) == 0 ||
                              strcmp(name, NAME_USED_LEGACY) == 0)) {
    PyErr_Format(PyExc_BufferError,
                 "this DLPack capsule was already consumed (its name is '%s'); a capsule can "
                 "be imported once",
                 name);
    return -1;
  } else {
    PyErr_Format(PyExc_ValueError,
                 "not a DLPack capsule: its name is '%s', expected 'dltensor' or "
                 "'dltensor_versioned'",
                 name ? name : "(null)");
    return -1;
  }
  void *p = PyCapsule_GetPointer(capsule, name);
  if (p == NULL) return -1;
  /* Rename first: from here on the capsule's destructor leaves the tensor to us. */
  if (PyCapsule_SetName(capsule, versioned ? NAME_USED_VERSIONED : NAME_USED_LEGACY) < 0) return -1;
  return adopt_managed(p, versioned, out);
}

static int consume_exchange(PyObject *api_capsule, PyObject *obj, parsed_t *out) {
  DLPackExchangeAPI *api = (DLPackExchangeAPI *)PyCapsule_GetPointer(api_capsule, NAME_API);
  if (api == NULL) return -1;
  if (api->header.version.major != DLPACK_MAJOR_VERSION ||
      api->managed_tensor_from_py_object_no_sync == NULL) {
    PyErr_Format(PyExc_BufferError, "unsupported DLPack exchange API version %u.%u",
                 api->header.version.major, api->header.version.minor);
    return -1;
  }
  DLManagedTensorVersioned *m = NULL;
  if (api->managed_tensor_from_py_object_no_sync((void *)obj, &m) != 0 || m == NULL) {
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_BufferError, "the producer's DLPack exchange API failed");
    return -1;
  }
  return adopt_managed(m, 1, out);
}

static PyObject *parsed_to_tuple(parsed_t *p) {
  PyObject *r = Py_BuildValue("(OKLiiiiOOLK)", p->guard, (unsigned long long)p->start,
                              (long long)p->nbytes, p->dev_type, p->dev_id, p->code, p->bits,
                              p->shape, p->strides, (long long)p->offset,
                              (unsigned long long)p->flags);
  parsed_clear(p);
  return r;
}

/* import_capsule(capsule) -> the parsed tuple (the Python slow path). */
static PyObject *py_import_capsule(PyObject *mod, PyObject *capsule) {
  (void)mod;
  if (!PyCapsule_CheckExact(capsule)) {
    PyErr_Format(PyExc_TypeError, "expected a DLPack PyCapsule, got %.200s",
                 Py_TYPE(capsule)->tp_name);
    return NULL;
  }
  parsed_t p = {0};
  if (consume_capsule(capsule, &p) < 0) return NULL;
  return parsed_to_tuple(&p);
}

/* ------------------------------------------- direct object construction */

/* Set by setup(): the core's classes, their slot descriptors, and lookups.
 * Objects are built with tp_alloc and filled through the slot descriptors,
 * exactly as `object.__new__` + attribute stores would, minus the bytecode. */
static PyTypeObject *tensor_type, *storage_type, *dtype_type;
static PyObject *cpu_device, *dtype_map, *api_cache, *torch_types, *py_to_dlpack, *py_finish;
static PyObject *t_storage, *t_dtype, *t_shape, *t_strides, *t_offset;
static PyObject *s_ptr, *s_nbytes, *s_device, *s_dldev, *s_owner, *s_np, *s_readonly,
    *s_resizable, *s_filename, *s_shared;
static PyObject *d_itemsize, *d_dlpack;
static PyObject *str_dlpack, *str_max_version, *str_api, *str_is_conj, *str_is_neg, *str_requires_grad,
    *kw_max_version, *max_version_value,
    *cpu_dldev;
static PyObject *dtype_table[32][129]; /* borrowed from dtype_map, by (code, bits) */

/* __slots__ are object pointers at fixed offsets, which setup() reads from
 * the member descriptors once (and checks are plain object slots). Reading
 * and writing them directly skips the descriptor protocol on the hot paths;
 * every object passed here is an instance of the class the descriptor
 * belongs to. */
static inline PyObject **slot_ptr(PyObject *descr, PyObject *obj) {
  return (PyObject **)((char *)obj + ((PyMemberDescrObject *)descr)->d_member->offset);
}

static inline int set_slot(PyObject *descr, PyObject *obj, PyObject *value) {
  Py_XSETREF(*slot_ptr(descr, obj), Py_NewRef(value));
  return 0;
}

/* A tensor's geometry read straight from its slots. The object pointers are
 * borrowed: they live as long as the tensor, which the caller holds. */
typedef struct {
  PyObject *shape, *strides, *keep; /* keep: what an exporter must hold (_np, else _owner) */
  uintptr_t storage_ptr, data;      /* data: the address of element [0, ..., 0] */
  long long offset, itemsize;
  long code, bits, dev_type, dev_id;
  int readonly;
} tensor_view_t;

static inline PyObject *borrow_slot(PyObject *descr, PyObject *obj) {
  PyObject *v = *slot_ptr(descr, obj);
  if (v == NULL)
    PyErr_Format(PyExc_AttributeError, "'%.100s' object has no attribute '%U'",
                 Py_TYPE(obj)->tp_name, PyDescr_NAME(descr));
  return v;
}

/* The byte range [lo, hi) that a view of `shape`/`strides` (element counts)
 * starting `offset` elements into its storage reaches, relative to the
 * storage's first byte; an empty view reaches nothing (lo = hi = 0). Every
 * product and sum is overflow-checked: -1 with BufferError when one does
 * not fit in int64. */
static int view_byte_extent(PyObject *shape, PyObject *strides, long long offset,
                            long long itemsize, int64_t *lo_out, int64_t *hi_out) {
  Py_ssize_t nd = PyTuple_GET_SIZE(shape);
  int64_t lo = offset, hi = offset; /* in elements, inclusive */
  *lo_out = *hi_out = 0;
  for (Py_ssize_t i = 0; i < nd; i++) {
    long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    long long stride = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
    if (PyErr_Occurred()) goto overflow;
    if (size == 0) return 0;
    int64_t span;
    if (__builtin_mul_overflow((int64_t)size - 1, (int64_t)stride, &span)) goto overflow;
    if (span > 0 ? __builtin_add_overflow(hi, span, &hi) : __builtin_add_overflow(lo, span, &lo))
      goto overflow;
  }
  int64_t hi_end;
  if (__builtin_add_overflow(hi, 1, &hi_end) || __builtin_mul_overflow(lo, itemsize, lo_out) ||
      __builtin_mul_overflow(hi_end, itemsize, hi_out))
    goto overflow;
  return 0;
overflow:
  PyErr_Clear();
  PyErr_SetString(PyExc_BufferError,
                  "the tensor's shape and strides overflow a 64-bit byte range; it cannot be "
                  "exported");
  return -1;
}

static int read_tensor(PyObject *self, tensor_view_t *v) {
  PyObject *storage = borrow_slot(t_storage, self), *dtype = borrow_slot(t_dtype, self);
  if (storage == NULL || dtype == NULL) return -1;
  if (!PyObject_TypeCheck(storage, storage_type) || !PyObject_TypeCheck(dtype, dtype_type)) {
    PyErr_SetString(PyExc_TypeError, "tensor's _storage/_dtype slots hold foreign objects");
    return -1;
  }
  PyObject *offset = borrow_slot(t_offset, self), *ptr = borrow_slot(s_ptr, storage),
           *dldev = borrow_slot(s_dldev, storage), *readonly = borrow_slot(s_readonly, storage),
           *np_view = borrow_slot(s_np, storage), *itemsize = borrow_slot(d_itemsize, dtype),
           *dl = borrow_slot(d_dlpack, dtype);
  v->shape = borrow_slot(t_shape, self);
  v->strides = borrow_slot(t_strides, self);
  if (!offset || !ptr || !dldev || !readonly || !np_view || !itemsize || !dl || !v->shape ||
      !v->strides)
    return -1;
  v->keep = np_view != Py_None ? np_view : borrow_slot(s_owner, storage);
  if (v->keep == NULL) return -1;
  v->storage_ptr = (uintptr_t)PyLong_AsVoidPtr(ptr);
  v->offset = PyLong_AsLongLong(offset);
  v->itemsize = PyLong_AsLongLong(itemsize);
  v->code = PyLong_AsLong(PyTuple_GET_ITEM(dl, 0));
  v->bits = PyLong_AsLong(PyTuple_GET_ITEM(dl, 1));
  v->dev_type = PyLong_AsLong(PyTuple_GET_ITEM(dldev, 0));
  v->dev_id = PyLong_AsLong(PyTuple_GET_ITEM(dldev, 1));
  v->readonly = readonly == Py_True;
  v->data = v->storage_ptr + (uintptr_t)(v->offset * v->itemsize);
  if (PyErr_Occurred()) return -1;
  /* A storage can shrink (resize_) under its views: never hand out a view
   * that reaches past the bytes that exist now. */
  PyObject *nbytes_obj = borrow_slot(s_nbytes, storage);
  if (nbytes_obj == NULL) return -1;
  long long nbytes = PyLong_AsLongLong(nbytes_obj);
  int64_t lo, hi;
  if (PyErr_Occurred() ||
      view_byte_extent(v->shape, v->strides, v->offset, v->itemsize, &lo, &hi) < 0)
    return -1;
  if (lo < 0 || hi > nbytes) {
    PyErr_Format(PyExc_BufferError,
                 "the tensor views bytes [%lld, %lld) of a storage that now holds %lld bytes "
                 "(the storage was resized after the view was made); it cannot be exported",
                 (long long)lo, (long long)hi, nbytes);
    return -1;
  }
  return 0;
}

/* A Storage and a Tensor for a parsed import (CPU or any device bridge has a
 * cached object for); other devices go through the Python finisher. */
static PyObject *parsed_to_tensor(parsed_t *p) {
  PyObject *dt = (p->code < 32 && p->bits <= 128) ? dtype_table[p->code][p->bits] : NULL;
  if (dt == NULL || p->dev_type != kDLCPU || p->dev_id != 0) {
    if (py_finish == NULL) {
      parsed_clear(p);
      PyErr_SetString(PyExc_RuntimeError, "bridge.dlpack is not initialised");
      return NULL;
    }
    PyObject *tup = parsed_to_tuple(p);
    if (tup == NULL) return NULL;
    PyObject *r = PyObject_CallOneArg(py_finish, tup);
    Py_DECREF(tup);
    return r;
  }
  PyObject *storage = NULL, *tensor = NULL, *v = NULL;
  storage = storage_type->tp_alloc(storage_type, 0);
  if (storage == NULL) goto fail;
#define SET_NEW(descr, obj, expr)                               \
  do {                                                          \
    v = (expr);                                                 \
    if (v == NULL || set_slot(descr, obj, v) < 0) goto fail;    \
    Py_CLEAR(v);                                                \
  } while (0)
  SET_NEW(s_ptr, storage, PyLong_FromUnsignedLongLong((unsigned long long)p->start));
  SET_NEW(s_nbytes, storage, PyLong_FromLongLong(p->nbytes));
  if (set_slot(s_device, storage, cpu_device) < 0 || set_slot(s_dldev, storage, cpu_dldev) < 0 ||
      set_slot(s_owner, storage, p->guard) < 0 || set_slot(s_np, storage, Py_None) < 0 ||
      set_slot(s_readonly, storage,
               (p->flags & DLPACK_FLAG_BITMASK_READ_ONLY) ? Py_True : Py_False) < 0 ||
      set_slot(s_resizable, storage, Py_False) < 0 || set_slot(s_filename, storage, Py_None) < 0 ||
      set_slot(s_shared, storage, Py_False) < 0)
    goto fail;
  tensor = tensor_type->tp_alloc(tensor_type, 0);
  if (tensor == NULL) goto fail;
  if (set_slot(t_storage, tensor, storage) < 0 || set_slot(t_dtype, tensor, dt) < 0 ||
      set_slot(t_shape, tensor, p->shape) < 0 || set_slot(t_strides, tensor, p->strides) < 0)
    goto fail;
  SET_NEW(t_offset, tensor, PyLong_FromLongLong(p->offset));
#undef SET_NEW
  Py_DECREF(storage);
  parsed_clear(p);
  return tensor;
fail:
  Py_XDECREF(v);
  Py_XDECREF(tensor);
  Py_XDECREF(storage);
  parsed_clear(p);
  return NULL;
}

/* The type's __dlpack_c_exchange_api__ capsule, or None; cached per type. */
static PyObject *exchange_api_of(PyTypeObject *tp) {
  PyObject *api = PyDict_GetItemWithError(api_cache, (PyObject *)tp);
  if (api != NULL) return api;
  if (PyErr_Occurred()) return NULL;
  api = PyObject_GetAttr((PyObject *)tp, str_api);
  if (api == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return NULL;
    PyErr_Clear();
    api = Py_NewRef(Py_None);
  } else if (!PyCapsule_IsValid(api, NAME_API)) {
    Py_SETREF(api, Py_NewRef(Py_None));
  }
  if (api != Py_None) {
    PyObject *modname = PyObject_GetAttrString((PyObject *)tp, "__module__");
    if (modname == NULL) {
      PyErr_Clear();
    } else {
      const char *m = PyUnicode_Check(modname) ? PyUnicode_AsUTF8(modname) : NULL;
      if (m != NULL && strncmp(m, "torch", 5) == 0 && PySet_Add(torch_types, (PyObject *)tp) < 0) {
        Py_DECREF(modname);
        Py_DECREF(api);
        return NULL;
      }
      PyErr_Clear();
      Py_DECREF(modname);
    }
  }
  if (PyDict_GET_SIZE(api_cache) > 1024) PyDict_Clear(api_cache); /* bound the cache */
  int rc = PyDict_SetItem(api_cache, (PyObject *)tp, api);
  Py_DECREF(api); /* the cache holds it */
  return rc < 0 ? NULL : api;
}

/* torch tensors that torch's own __dlpack__ refuses must be refused on every
 * path, the C exchange API included (which skips torch's Python checks):
 * tensors that require grad, and lazily conjugated or negated views, whose
 * memory does not hold their values (torch 2.13's __dlpack__ misses the
 * negative bit). Sparse and quantized tensors make torch's exchange API fail,
 * and the caller then asks torch's __dlpack__, which raises torch's error. */
static int refuse_torch_export(PyTypeObject *tp, PyObject *x) {
  int is_torch = PySet_Contains(torch_types, (PyObject *)tp);
  if (is_torch <= 0) return is_torch;
  PyObject *grad = PyObject_GetAttr(x, str_requires_grad);
  if (grad == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
  } else {
    int bit = PyObject_IsTrue(grad);
    Py_DECREF(grad);
    if (bit < 0) return -1;
    if (bit) {
      PyErr_SetString(PyExc_BufferError,
                      "Can't export tensors that require gradient, use tensor.detach()");
      return -1;
    }
  }
  PyObject *names[2] = {str_is_conj, str_is_neg};
  for (size_t i = 0; i < 2; i++) {
    PyObject *r = PyObject_CallMethodNoArgs(x, names[i]);
    if (r == NULL) {
      if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
      PyErr_Clear(); /* an older torch without the check: nothing lazy to see */
      continue;
    }
    int bit = PyObject_IsTrue(r);
    Py_DECREF(r);
    if (bit < 0) return -1;
    if (bit) {
      PyErr_Format(PyExc_BufferError,
                   "Can't export tensors with the %s bit set: this torch tensor is a lazy %s "
                   "view whose memory does not hold its values. Call .%s() first (a copy)",
                   i == 0 ? "conjugate" : "negative", i == 0 ? "conjugate" : "negative",
                   i == 0 ? "resolve_conj" : "resolve_neg");
      return -1;
    }
  }
  return 0;
}

/* check_torch_export(x): the same refusal for the Python import path. */
static PyObject *py_check_torch_export(PyObject *mod, PyObject *x) {
  (void)mod;
  PyObject *api = exchange_api_of(Py_TYPE(x)); /* registers torch's types */
  if (api == NULL) return NULL;
  if (refuse_torch_export(Py_TYPE(x), x) < 0) return NULL;
  Py_RETURN_NONE;
}

/* A producer's exchange API failed: its C++ message may carry a backtrace.
 * Replace the pending error by a BufferError holding its first line (the
 * original chained as the cause). */
static void exchange_error_to_buffer_error(void) {
  PyObject *exc = PyErr_GetRaisedException_compat();
  if (exc == NULL) {
    PyErr_SetString(PyExc_BufferError, "the producer's DLPack exchange API failed");
    return;
  }
  if (PyErr_GivenExceptionMatches(exc, PyExc_BufferError)) {
    PyErr_SetRaisedException_compat(exc);
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
  PyObject *mine = PyErr_GetRaisedException_compat();
  PyException_SetCause(mine, exc); /* steals exc */
  PyErr_SetRaisedException_compat(mine);
}

/* fast_from_dlpack(x): bridge.from_dlpack(x) with no device/copy options.
 * Returns NotImplemented for bridge's own tensors (handled in Python). */
static PyObject *py_fast_from_dlpack(PyObject *mod, PyObject *x) {
  (void)mod;
  parsed_t p = {0};
  PyTypeObject *tp = Py_TYPE(x);
  if (tp == tensor_type) Py_RETURN_NOTIMPLEMENTED;
  if (tp == &PyCapsule_Type) {
    if (consume_capsule(x, &p) < 0) return NULL;
    return parsed_to_tensor(&p);
  }
  PyObject *api = exchange_api_of(tp);
  if (api == NULL) return NULL;
  if (api != Py_None) {
    if (refuse_torch_export(tp, x) < 0) return NULL;
    if (consume_exchange(api, x, &p) == 0) return parsed_to_tensor(&p);
    /* The exchange API only speeds up what __dlpack__ does: when it fails,
     * ask __dlpack__, which applies the producer's own rules and raises its
     * own error (torch: sparse, quantized). Without one, report the C
     * API's failure as a one-line BufferError. */
    PyObject *exc = PyErr_GetRaisedException_compat();
    PyObject *method = PyObject_GetAttr(x, str_dlpack);
    if (method == NULL) {
      if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
        Py_XDECREF(exc);
        return NULL;
      }
      PyErr_Clear();
      if (exc != NULL) PyErr_SetRaisedException_compat(exc);
      exchange_error_to_buffer_error();
      return NULL;
    }
    Py_DECREF(method);
    Py_XDECREF(exc);
  }
  PyObject *callargs[2] = {x, max_version_value};
  PyObject *cap = PyObject_VectorcallMethod(str_dlpack, callargs,
                                            1 | PY_VECTORCALL_ARGUMENTS_OFFSET, kw_max_version);
  if (cap == NULL) {
    if (PyErr_ExceptionMatches(PyExc_AttributeError) && !PyObject_HasAttr(x, str_dlpack)) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError, "%.200s does not support DLPack (no __dlpack__ method)",
                   tp->tp_name);
      return NULL;
    }
    if (!PyErr_ExceptionMatches(PyExc_TypeError)) return NULL;
    /* A producer older than the 2023 signature: ask again without keywords. */
    PyErr_Clear();
    cap = PyObject_CallMethodNoArgs(x, str_dlpack);
    if (cap == NULL) return NULL;
  }
  if (!PyCapsule_CheckExact(cap)) {
    PyErr_Format(PyExc_TypeError, "%.200s.__dlpack__ returned %.200s, not a capsule",
                 tp->tp_name, Py_TYPE(cap)->tp_name);
    Py_DECREF(cap);
    return NULL;
  }
  int rc = consume_capsule(cap, &p);
  Py_DECREF(cap);
  if (rc < 0) return NULL;
  return parsed_to_tensor(&p);
}

/* Tensor.__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None).
 * The common case runs here; options that need more (streams, devices,
 * copies, read-only legacy refusals) go to the Python to_dlpack. */
static PyObject *tensor_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargsf,
                               PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs != 0) {
    PyErr_Format(PyExc_TypeError, "__dlpack__() takes only keyword arguments (%zd given)", nargs);
    return NULL;
  }
  PyObject *max_version = Py_None;
  int simple = 1;
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; i++) {
    const char *k = PyUnicode_AsUTF8(PyTuple_GET_ITEM(kwnames, i));
    if (k == NULL) return NULL;
    PyObject *v = args[i];
    if (strcmp(k, "max_version") == 0) {
      max_version = v;
    } else if (strcmp(k, "stream") == 0 || strcmp(k, "dl_device") == 0) {
      if (v != Py_None) simple = 0;
    } else if (strcmp(k, "copy") == 0) {
      if (v != Py_None && v != Py_False) simple = 0;
    } else {
      PyErr_Format(PyExc_TypeError, "__dlpack__() got an unexpected keyword argument '%s'", k);
      return NULL;
    }
  }
  int versioned = 0;
  if (max_version != Py_None) {
    PyObject *major = PyTuple_Check(max_version) && PyTuple_GET_SIZE(max_version) >= 1
                          ? PyTuple_GET_ITEM(max_version, 0)
                          : NULL;
    long mj = major && PyLong_Check(major) ? PyLong_AsLong(major) : -1;
    if (mj < 0) {
      PyErr_Clear();
      simple = 0; /* let the Python path produce the error */
    }
    versioned = mj >= 1;
  }
  tensor_view_t v;
  if (simple) {
    if (read_tensor(self, &v) < 0) return NULL;
    if (v.readonly && !versioned) simple = 0; /* Python raises the BufferError */
  }
  if (!simple) {
    if (py_to_dlpack == NULL) {
      PyErr_SetString(PyExc_RuntimeError, "bridge.dlpack is not initialised");
      return NULL;
    }
    PyObject *stack[5]; /* self, then at most the 4 known keyword values */
    stack[0] = self;
    for (Py_ssize_t i = 0; i < nkw; i++) stack[1 + i] = args[i];
    return PyObject_Vectorcall(py_to_dlpack, stack, 1, kwnames);
  }
  uint64_t flags = 0;
  if (v.readonly) flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
  if (v.bits < 8) flags |= DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
  return wrap_export(build_managed(v.keep, (void *)v.data, (int)v.dev_type, (int)v.dev_id,
                                   (int)v.code, (int)v.bits, v.shape, v.strides, flags, versioned),
                     versioned);
}

static PyMethodDef tensor_dlpack_def = {
    "__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_FASTCALL | METH_KEYWORDS,
    "DLPack export (array API __dlpack__): a legacy 'dltensor' capsule when max_version is None\n"
    "or its major is 0, else a 'dltensor_versioned' (v1.3) one. Zero-copy unless copy=True.\n"
    "Errors: see bridge.dlpack.to_dlpack."};

static PyObject *descr(PyObject *cls, const char *name) {
  return PyObject_GetAttrString(cls, name);
}

/* set_dlpack_fallbacks(to_dlpack, finish): the Python halves of export and
 * import, registered by bridge/dlpack.py. */
static PyObject *py_set_dlpack_fallbacks(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "set_dlpack_fallbacks(to_dlpack, finish)");
    return NULL;
  }
  Py_XSETREF(py_to_dlpack, Py_NewRef(args[0]));
  Py_XSETREF(py_finish, Py_NewRef(args[1]));
  Py_RETURN_NONE;
}

/* setup(Tensor, UntypedStorage, dtype_class, {(code, bits): dtype}, cpu_device)
 * -> the __dlpack__ method descriptor for Tensor. Called once by bridge/_capi.py. */
static PyObject *py_setup(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 5 || !PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyType_Check(args[2]) ||
      !PyDict_Check(args[3])) {
    PyErr_SetString(PyExc_TypeError, "setup() takes (Tensor, UntypedStorage, dtype, map, cpu)");
    return NULL;
  }
  tensor_type = (PyTypeObject *)Py_NewRef(args[0]);
  storage_type = (PyTypeObject *)Py_NewRef(args[1]);
  dtype_type = (PyTypeObject *)Py_NewRef(args[2]);
  PyObject *T = args[0], *S = args[1], *D = args[2];
  dtype_map = Py_NewRef(args[3]);
  cpu_device = Py_NewRef(args[4]);
  if (!(t_storage = descr(T, "_storage")) || !(t_dtype = descr(T, "_dtype")) ||
      !(t_shape = descr(T, "_shape")) || !(t_strides = descr(T, "_strides")) ||
      !(t_offset = descr(T, "_offset")) || !(s_ptr = descr(S, "_ptr")) ||
      !(s_nbytes = descr(S, "_nbytes")) || !(s_device = descr(S, "_device")) ||
      !(s_dldev = descr(S, "_dldev")) || !(s_owner = descr(S, "_owner")) ||
      !(s_np = descr(S, "_np")) || !(s_readonly = descr(S, "_readonly")) ||
      !(s_resizable = descr(S, "_resizable")) || !(s_filename = descr(S, "_filename")) ||
      !(s_shared = descr(S, "_shared")) || !(d_itemsize = descr(D, "itemsize")) ||
      !(d_dlpack = descr(D, "dlpack")))
    return NULL;
  PyObject *all[] = {t_storage, t_dtype, t_shape, t_strides, t_offset, s_ptr, s_nbytes,
                     s_device, s_dldev, s_owner, s_np, s_readonly, s_resizable, s_filename,
                     s_shared, d_itemsize, d_dlpack};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
    if (!Py_IS_TYPE(all[i], &PyMemberDescr_Type) ||
        ((PyMemberDescrObject *)all[i])->d_member->type != T_OBJECT_EX ||
        (((PyMemberDescrObject *)all[i])->d_member->flags & READONLY)) {
      PyErr_SetString(PyExc_TypeError, "setup(): expected writable __slots__ member descriptors");
      return NULL;
    }
  }
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dtype_map, &pos, &key, &value)) {
    long code = PyLong_AsLong(PyTuple_GetItem(key, 0));
    long bits = PyLong_AsLong(PyTuple_GetItem(key, 1));
    if (PyErr_Occurred()) return NULL;
    if (code >= 0 && code < 32 && bits >= 0 && bits <= 128) dtype_table[code][bits] = value;
  }
  if (!(api_cache = PyDict_New()) || !(torch_types = PySet_New(NULL)) || !(str_dlpack = PyUnicode_InternFromString("__dlpack__")) ||
      !(str_api = PyUnicode_InternFromString("__dlpack_c_exchange_api__")) ||
      !(str_max_version = PyUnicode_InternFromString("max_version")) ||
      !(str_is_conj = PyUnicode_InternFromString("is_conj")) ||
      !(str_is_neg = PyUnicode_InternFromString("is_neg")) ||
      !(str_requires_grad = PyUnicode_InternFromString("requires_grad")) ||
      !(kw_max_version = PyTuple_Pack(1, str_max_version)) ||
      !(max_version_value = Py_BuildValue("(ii)", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION)) ||
      !(cpu_dldev = Py_BuildValue("(ii)", kDLCPU, 0)))
    return NULL;
  return PyDescr_NewMethod((PyTypeObject *)T, &tensor_dlpack_def);
}

/* ------------------------------------------------ our C exchange API */

static PyObject *cb_export_args = NULL;   /* tensor -> the 9 export values */
static PyObject *cb_dltensor_args = NULL; /* tensor -> (data, dev_type, dev_id, code, bits, meta) */

static int api_from_py_object(void *py_object, DLManagedTensorVersioned **out) {
  PyObject *vals = PyObject_CallOneArg(cb_export_args, (PyObject *)py_object);
  if (vals == NULL) return -1;
  if (!PyTuple_Check(vals) || PyTuple_GET_SIZE(vals) != 9) {
    Py_DECREF(vals);
    PyErr_SetString(PyExc_SystemError, "bridge export callback returned a bad tuple");
    return -1;
  }
  void *block = build_managed_from(&PyTuple_GET_ITEM(vals, 0), 1);
  Py_DECREF(vals);
  if (block == NULL) return -1;
  *out = (DLManagedTensorVersioned *)block;
  return 0;
}

static int api_to_py_object(DLManagedTensorVersioned *tensor, void **out_py_object) {
  parsed_t p = {0};
  if (adopt_managed(tensor, 1, &p) < 0) return -1;
  PyObject *obj = parsed_to_tensor(&p);
  if (obj == NULL) return -1;
  *out_py_object = obj;
  return 0;
}

static int api_dltensor_from_py_object(void *py_object, DLTensor *out) {
  PyObject *r = PyObject_CallOneArg(cb_dltensor_args, (PyObject *)py_object);
  if (r == NULL) return -1;
  PyObject *meta = PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 6 ? PyTuple_GET_ITEM(r, 5) : NULL;
  if (meta == NULL || !PyBytes_Check(meta)) {
    Py_DECREF(r);
    PyErr_SetString(PyExc_SystemError, "bridge dltensor callback returned a bad tuple");
    return -1;
  }
  Py_ssize_t ndim = PyBytes_GET_SIZE(meta) / (Py_ssize_t)(2 * sizeof(int64_t));
  out->data = PyLong_AsVoidPtr(PyTuple_GET_ITEM(r, 0));
  out->device.device_type = (DLDeviceType)PyLong_AsLong(PyTuple_GET_ITEM(r, 1));
  out->device.device_id = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(r, 2));
  out->dtype.code = (uint8_t)PyLong_AsLong(PyTuple_GET_ITEM(r, 3));
  out->dtype.bits = (uint8_t)PyLong_AsLong(PyTuple_GET_ITEM(r, 4));
  out->dtype.lanes = 1;
  out->ndim = (int32_t)ndim;
  /* meta is cached on the tensor, so these arrays live as long as it does. */
  out->shape = (int64_t *)PyBytes_AS_STRING(meta);
  out->strides = out->shape + ndim;
  out->byte_offset = 0;
  Py_DECREF(r);
  return PyErr_Occurred() ? -1 : 0;
}

typedef struct {
  DLManagedTensorVersioned m;
  int64_t dims[]; /* shape then strides */
} alloc_block;

static void alloc_deleter(DLManagedTensorVersioned *self) {
  if (self == NULL) return;
  bridge_aligned_free(self->manager_ctx);
  free(self);
}

/* Needs no Python: a new, contiguous CPU tensor shaped like the prototype. */
static int api_allocator(DLTensor *proto, DLManagedTensorVersioned **out, void *error_ctx,
                         void (*set_error)(void *, const char *, const char *)) {
  if (proto->device.device_type != kDLCPU) {
    set_error(error_ctx, "RuntimeError", "bridge can only allocate CPU tensors");
    return -1;
  }
  int32_t ndim = proto->ndim;
  if (ndim < 0 || ndim > BRIDGE_MAX_NDIM || proto->dtype.lanes == 0 || (ndim > 0 && !proto->shape)) {
    set_error(error_ctx, "ValueError", "bad prototype tensor");
    return -1;
  }
  uint64_t numel = 1;
  for (int32_t i = 0; i < ndim; i++) {
    if (proto->shape[i] < 0 || __builtin_mul_overflow(numel, (uint64_t)proto->shape[i], &numel)) {
      set_error(error_ctx, "ValueError", "bad prototype shape");
      return -1;
    }
  }
  uint64_t bits = (uint64_t)proto->dtype.bits * proto->dtype.lanes;
  uint64_t nbytes;
  if (__builtin_mul_overflow(numel, (bits + 7) / 8, &nbytes)) {
    set_error(error_ctx, "MemoryError", "tensor too large");
    return -1;
  }
  alloc_block *b = (alloc_block *)malloc(sizeof(alloc_block) + 2 * (size_t)ndim * sizeof(int64_t));
  void *data = b ? bridge_aligned_alloc((size_t)nbytes, 0) : NULL;
  if (data == NULL) {
    free(b);
    set_error(error_ctx, "MemoryError", "out of memory");
    return -1;
  }
  int64_t acc = 1;
  for (int32_t i = ndim - 1; i >= 0; i--) {
    b->dims[i] = proto->shape[i];
    b->dims[ndim + i] = acc;
    acc *= proto->shape[i] > 1 ? proto->shape[i] : 1;
  }
  b->m.version.major = DLPACK_MAJOR_VERSION;
  b->m.version.minor = DLPACK_MINOR_VERSION;
  b->m.manager_ctx = data;
  b->m.deleter = alloc_deleter;
  b->m.flags = 0;
  b->m.dl_tensor.data = data;
  b->m.dl_tensor.device = proto->device;
  b->m.dl_tensor.ndim = ndim;
  b->m.dl_tensor.dtype = proto->dtype;
  b->m.dl_tensor.shape = b->dims;
  b->m.dl_tensor.strides = b->dims + ndim;
  b->m.dl_tensor.byte_offset = 0;
  *out = &b->m;
  return 0;
}

static int api_current_work_stream(DLDeviceType device_type, int32_t device_id, void **out) {
  (void)device_type;
  (void)device_id;
  *out = NULL; /* bridge launches no work: the default stream */
  return 0;
}

static DLPackExchangeAPI bridge_exchange_api = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, NULL},
    api_allocator,
    api_from_py_object,
    api_to_py_object,
    api_dltensor_from_py_object,
    api_current_work_stream,
};

/* set_callbacks(export_args, dltensor_args) */
static PyObject *py_set_callbacks(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "set_callbacks() takes 2 arguments");
    return NULL;
  }
  Py_XSETREF(cb_export_args, Py_NewRef(args[0]));
  Py_XSETREF(cb_dltensor_args, Py_NewRef(args[1]));
  Py_RETURN_NONE;
}

/* make_capsule(address, kind): wrap a test-made struct (kind 0 "dltensor",
 * 1 "dltensor_versioned", 2 a wrong name) with the standard destructor. */
static PyObject *py_make_capsule(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "make_capsule() takes 2 arguments");
    return NULL;
  }
  void *p = PyLong_AsVoidPtr(args[0]);
  long kind = PyLong_AsLong(args[1]);
  if (PyErr_Occurred()) return NULL;
  const char *name = kind == 0 ? NAME_LEGACY : kind == 1 ? NAME_VERSIONED : NAME_BOGUS;
  return PyCapsule_New(p, name, capsule_destructor);
}

/* ------------------------------------------------------------------ NumPy */

/* NumPy's PyArrayInterface (numpy/ndarraytypes.h), the __array_struct__
 * payload. Restated here so the build needs no NumPy headers. */
typedef struct {
  int two;
  int nd;
  char typekind;
  int itemsize;
  int flags;
  Py_intptr_t *shape;
  Py_intptr_t *strides;
  void *data;
  PyObject *descr;
} bridge_array_interface;

#define BRIDGE_NPY_ALIGNED 0x0100
#define BRIDGE_NPY_NOTSWAPPED 0x0200
#define BRIDGE_NPY_WRITEABLE 0x0400

static PyTypeObject *ndarray_type;
static PyObject *py_from_numpy_slow;

/* The capsule NumPy keeps (as part of the new array's base) also holds the
 * storage's keep-alive object, so the array outlives a later resize_() or
 * set_() of the tensor, which would otherwise drop the memory it views. */
static void array_struct_destructor(PyObject *capsule) {
  PyObject *keep = (PyObject *)PyCapsule_GetContext(capsule);
  free(PyCapsule_GetPointer(capsule, NULL));
  Py_XDECREF(keep);
}

/* Tensor.__array_struct__: a capsule NumPy reads without any Python-level
 * dict. NumPy makes the tensor the new array's base, which keeps the storage
 * alive. Types NumPy can only name through ml_dtypes, and memory the host
 * cannot read, have no array struct (AttributeError), so NumPy falls back
 * to __array__. */
static PyObject *tensor_array_struct(PyObject *self, void *closure) {
  (void)closure;
  tensor_view_t v;
  if (read_tensor(self, &v) < 0) return NULL;
  char kind = v.code == kDLInt ? 'i' : v.code == kDLUInt ? 'u' : v.code == kDLFloat ? 'f'
            : v.code == kDLComplex ? 'c' : v.code == kDLBool ? 'b' : 0;
  if (kind == 0 || v.dev_type != kDLCPU || (v.code == kDLFloat && v.bits > 64)) {
    PyErr_SetString(PyExc_AttributeError,
                    "__array_struct__ is only defined for host tensors of NumPy-native dtypes");
    return NULL;
  }
  Py_ssize_t nd = PyTuple_GET_SIZE(v.shape);
  bridge_array_interface *ai = (bridge_array_interface *)malloc(
      sizeof(bridge_array_interface) + 2 * (size_t)nd * sizeof(Py_intptr_t));
  if (ai == NULL) return PyErr_NoMemory();
  Py_intptr_t *dims = (Py_intptr_t *)(ai + 1);
  for (Py_ssize_t i = 0; i < nd; i++) {
    Py_ssize_t stride = PyLong_AsSsize_t(PyTuple_GET_ITEM(v.strides, i));
    dims[i] = (Py_intptr_t)PyLong_AsSsize_t(PyTuple_GET_ITEM(v.shape, i));
    if (!PyErr_Occurred() && __builtin_mul_overflow(stride, (Py_ssize_t)v.itemsize, &dims[nd + i]))
      PyErr_Format(PyExc_BufferError, "stride %zd of dim %zd overflows in bytes", stride, i);
  }
  if (PyErr_Occurred()) {
    free(ai);
    return NULL;
  }
  ai->two = 2;
  ai->nd = (int)nd;
  ai->typekind = kind;
  ai->itemsize = (int)v.itemsize;
  ai->flags = BRIDGE_NPY_ALIGNED | BRIDGE_NPY_NOTSWAPPED | (v.readonly ? 0 : BRIDGE_NPY_WRITEABLE);
  ai->shape = dims;
  ai->strides = dims + nd;
  ai->data = (void *)v.data;
  ai->descr = NULL;
  PyObject *result = PyCapsule_New(ai, NULL, array_struct_destructor);
  if (result == NULL) {
    free(ai);
    return NULL;
  }
  if (PyCapsule_SetContext(result, Py_NewRef(v.keep)) < 0) {
    Py_DECREF(v.keep);
    Py_DECREF(result);
    return NULL;
  }
  return result;
}

static PyGetSetDef tensor_array_struct_def = {
    "__array_struct__", tensor_array_struct, NULL,
    "NumPy's array struct interface (a PyCapsule of PyArrayInterface), zero-copy.", NULL};

/* from_numpy(ndarray): NumPy's own DLPack export, consumed in C. Anything it
 * refuses (ml_dtypes types, byte-swapped or odd-strided arrays) goes to the
 * Python slow path, which imports it or explains the refusal. */
static PyObject *py_from_numpy(PyObject *mod, PyObject *x) {
  (void)mod;
  if (ndarray_type == NULL || !PyObject_TypeCheck(x, ndarray_type))
    return PyObject_CallOneArg(py_from_numpy_slow, x);
  PyObject *callargs[2] = {x, max_version_value};
  PyObject *cap = PyObject_VectorcallMethod(str_dlpack, callargs,
                                            1 | PY_VECTORCALL_ARGUMENTS_OFFSET, kw_max_version);
  if (cap == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_BufferError) && !PyErr_ExceptionMatches(PyExc_TypeError))
      return NULL;
    PyErr_Clear();
    return PyObject_CallOneArg(py_from_numpy_slow, x);
  }
  parsed_t p = {0};
  int rc = PyCapsule_CheckExact(cap) ? consume_capsule(cap, &p) : -1;
  if (rc < 0 && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "ndarray.__dlpack__ gave no capsule");
  Py_DECREF(cap);
  if (rc < 0) return NULL;
  return parsed_to_tensor(&p);
}

static PyMethodDef from_numpy_def = {
    "from_numpy", (PyCFunction)py_from_numpy, METH_O,
    "from_numpy(ndarray, /) -> Tensor\n\n"
    "A tensor sharing the array's memory (zero-copy; the array is kept alive).\n"
    "Read-only arrays give read-only tensors; negative strides are kept.\n"
    "TypeError for non-arrays and object/structured dtypes; ValueError for\n"
    "non-native byte order and byte strides that are not a multiple of the\n"
    "item size."};

/* setup_numpy(Tensor, ndarray, slow_path) -> (__array_struct__ descriptor, from_numpy) */
static PyObject *py_setup_numpy(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 3 || !PyType_Check(args[0]) || !PyType_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "setup_numpy(Tensor, ndarray, slow_path)");
    return NULL;
  }
  if (tensor_type == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "setup_numpy() needs setup() first (import bridge.dlpack)");
    return NULL;
  }
  Py_XSETREF(ndarray_type, (PyTypeObject *)Py_NewRef(args[1]));
  Py_XSETREF(py_from_numpy_slow, Py_NewRef(args[2]));
  PyObject *getset = PyDescr_NewGetSet((PyTypeObject *)args[0], &tensor_array_struct_def);
  PyObject *fn = PyCFunction_New(&from_numpy_def, NULL);
  if (getset == NULL || fn == NULL) {
    Py_XDECREF(getset);
    Py_XDECREF(fn);
    return NULL;
  }
  return Py_BuildValue("(NN)", getset, fn);
}

/* ------------------------------------- driving any exchange API from Python */

/* These call a DLPack C exchange API (ours or another library's) with the
 * GIL held, as the API requires; they back bridge.dlpack.ExchangeAPI and the
 * conformance checks. */

static DLPackExchangeAPI *api_from_capsule(PyObject *capsule) {
  return (DLPackExchangeAPI *)PyCapsule_GetPointer(capsule, NAME_API);
}

typedef struct {
  char kind[64];
  char message[512];
  int set;
} api_error;

static void api_set_error(void *ctx, const char *kind, const char *message) {
  api_error *e = (api_error *)ctx;
  snprintf(e->kind, sizeof e->kind, "%s", kind ? kind : "RuntimeError");
  snprintf(e->message, sizeof e->message, "%s", message ? message : "");
  e->set = 1;
}

static PyObject *api_failed(const char *what) {
  if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "exchange API %s failed", what);
  return NULL;
}

/* api_to_object(api, owner, data, device_type, device_id, code, bits, shape, strides, flags):
 * build a managed tensor (as an export would) and hand it to
 * api->managed_tensor_to_py_object_no_sync, which takes ownership. */
static PyObject *py_api_to_object(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 10) {
    PyErr_SetString(PyExc_TypeError, "api_to_object() takes 10 arguments");
    return NULL;
  }
  DLPackExchangeAPI *api = api_from_capsule(args[0]);
  if (api == NULL) return NULL;
  void *block = build_managed_from(args + 1, 1);
  if (block == NULL) return NULL;
  void *out = NULL;
  if (api->managed_tensor_to_py_object_no_sync((DLManagedTensorVersioned *)block, &out) != 0 ||
      out == NULL)
    return api_failed("managed_tensor_to_py_object_no_sync");
  return (PyObject *)out;
}

/* api_peek(api, obj) -> (data, device_type, device_id, ndim, code, bits, lanes,
 *                        shape, strides or None, byte_offset, shape address,
 *                        strides address) */
static PyObject *py_api_peek(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "api_peek() takes 2 arguments");
    return NULL;
  }
  DLPackExchangeAPI *api = api_from_capsule(args[0]);
  if (api == NULL) return NULL;
  DLTensor t;
  memset(&t, 0, sizeof t);
  if (api->dltensor_from_py_object_no_sync((void *)args[1], &t) != 0)
    return api_failed("dltensor_from_py_object_no_sync");
  if (t.ndim < 0 || t.ndim > BRIDGE_MAX_NDIM || (t.ndim > 0 && t.shape == NULL)) {
    PyErr_Format(PyExc_BufferError, "exchange API gave ndim %d with shape %p", (int)t.ndim,
                 (void *)t.shape);
    return NULL;
  }
  PyObject *shape = PyTuple_New(t.ndim);
  PyObject *strides = t.strides ? PyTuple_New(t.ndim) : Py_NewRef(Py_None);
  if (shape == NULL || strides == NULL) goto fail;
  for (int32_t i = 0; i < t.ndim; i++) {
    PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(t.shape[i]));
    if (t.strides) PyTuple_SET_ITEM(strides, i, PyLong_FromLongLong(t.strides[i]));
  }
  return Py_BuildValue("(KiiiiiiNNKKK)", (unsigned long long)(uintptr_t)t.data,
                       (int)t.device.device_type, (int)t.device.device_id, (int)t.ndim,
                       (int)t.dtype.code, (int)t.dtype.bits, (int)t.dtype.lanes, shape, strides,
                       (unsigned long long)t.byte_offset, (unsigned long long)(uintptr_t)t.shape,
                       (unsigned long long)(uintptr_t)t.strides);
fail:
  Py_XDECREF(shape);
  Py_XDECREF(strides);
  return NULL;
}

/* api_alloc(api, shape, code, bits, device_type, device_id) -> the API's own
 * tensor object for a fresh allocation (allocator, then to_py_object). */
static PyObject *py_api_alloc(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 6 || !PyTuple_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "api_alloc(api, shape_tuple, code, bits, dev_type, dev_id)");
    return NULL;
  }
  DLPackExchangeAPI *api = api_from_capsule(args[0]);
  if (api == NULL) return NULL;
  Py_ssize_t ndim = PyTuple_GET_SIZE(args[1]);
  if (ndim > BRIDGE_MAX_NDIM) {
    PyErr_SetString(PyExc_ValueError, "too many dimensions");
    return NULL;
  }
  int64_t shape[BRIDGE_MAX_NDIM];
  for (Py_ssize_t i = 0; i < ndim; i++) shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(args[1], i));
  long code = PyLong_AsLong(args[2]), bits = PyLong_AsLong(args[3]);
  long dev_type = PyLong_AsLong(args[4]), dev_id = PyLong_AsLong(args[5]);
  if (PyErr_Occurred()) return NULL;
  DLTensor proto;
  memset(&proto, 0, sizeof proto);
  proto.device.device_type = (DLDeviceType)dev_type;
  proto.device.device_id = (int32_t)dev_id;
  proto.ndim = (int32_t)ndim;
  proto.dtype.code = (uint8_t)code;
  proto.dtype.bits = (uint8_t)bits;
  proto.dtype.lanes = 1;
  proto.shape = shape;
  api_error err = {{0}, {0}, 0};
  DLManagedTensorVersioned *m = NULL;
  if (api->managed_tensor_allocator(&proto, &m, &err, api_set_error) != 0 || m == NULL) {
    if (err.set)
      PyErr_Format(PyExc_RuntimeError, "exchange API allocator: %s: %s", err.kind, err.message);
    return api_failed("managed_tensor_allocator");
  }
  void *out = NULL;
  if (api->managed_tensor_to_py_object_no_sync(m, &out) != 0 || out == NULL)
    return api_failed("managed_tensor_to_py_object_no_sync");
  return (PyObject *)out;
}

/* api_stream(api, device_type, device_id) -> the stream as an int (0 = NULL). */
static PyObject *py_api_stream(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "api_stream() takes 3 arguments");
    return NULL;
  }
  DLPackExchangeAPI *api = api_from_capsule(args[0]);
  if (api == NULL) return NULL;
  long dev_type = PyLong_AsLong(args[1]), dev_id = PyLong_AsLong(args[2]);
  if (PyErr_Occurred()) return NULL;
  void *stream = NULL;
  if (api->current_work_stream == NULL) Py_RETURN_NONE;
  if (api->current_work_stream((DLDeviceType)dev_type, (int32_t)dev_id, &stream) != 0)
    return api_failed("current_work_stream");
  return PyLong_FromVoidPtr(stream);
}

/* capsule_info(capsule) -> (name, address of the managed struct) without consuming it. */
static PyObject *py_capsule_info(PyObject *mod, PyObject *capsule) {
  (void)mod;
  if (!PyCapsule_CheckExact(capsule)) {
    PyErr_SetString(PyExc_TypeError, "capsule_info() needs a capsule");
    return NULL;
  }
  const char *name = PyCapsule_GetName(capsule);
  void *p = PyCapsule_GetPointer(capsule, name);
  if (p == NULL) return NULL;
  return Py_BuildValue("(sK)", name ? name : "", (unsigned long long)(uintptr_t)p);
}

/* mark_consumed(capsule): rename a DLPack capsule to used_*, as a consumer
 * does, so that its destructor no longer owns the tensor. */
static PyObject *py_mark_consumed(PyObject *mod, PyObject *capsule) {
  (void)mod;
  const char *name = PyCapsule_GetName(capsule);
  if (name == NULL) return NULL;
  const char *used = strcmp(name, NAME_VERSIONED) == 0 ? NAME_USED_VERSIONED
                     : strcmp(name, NAME_LEGACY) == 0  ? NAME_USED_LEGACY
                                                       : NULL;
  if (used == NULL) {
    PyErr_Format(PyExc_ValueError, "not an unconsumed DLPack capsule: '%s'", name);
    return NULL;
  }
  if (PyCapsule_SetName(capsule, used) < 0) return NULL;
  Py_RETURN_NONE;
}

/* ============================================================ Arrow C data */

static const char NAME_ARROW_SCHEMA[] = "arrow_schema";
static const char NAME_ARROW_ARRAY[] = "arrow_array";
static const char NAME_ARROW_DEVICE_ARRAY[] = "arrow_device_array";
static const char NAME_ARROW_STREAM[] = "arrow_array_stream";
static const char NAME_ARROW_GUARD[] = "bridge.arrow_import";
#define ARROW_MAX_DEPTH 64
#define ARROW_MAX_BUFFERS 3 /* validity, offsets/data, data: no layout bridge reads has more */
#define ARROW_MAX_CHILDREN 65536
/* The metadata block carries no size: absurd counts and lengths are refused
 * before anything past them is read. */
#define ARROW_MAX_METADATA_PAIRS 4096
#define ARROW_MAX_METADATA_LENGTH (1 << 28)
#define ARROW_CPU_DEVICE 1

/* ---- export: schemas. spec = (format: bytes, name: bytes|None,
 * metadata: bytes|None, flags: int, children: tuple of specs). No Python
 * objects live in a schema, so its release needs no GIL. */

typedef struct {
  struct ArrowSchema **child_ptrs;
  struct ArrowSchema *children;
} schema_private;

static void schema_release(struct ArrowSchema *s) {
  if (s == NULL || s->release == NULL) return;
  for (int64_t i = 0; i < s->n_children; i++) {
    struct ArrowSchema *c = s->children[i];
    if (c->release != NULL) c->release(c);
  }
  free(s->private_data);
  s->release = NULL;
}

static int schema_fill(struct ArrowSchema *out, PyObject *spec, int depth) {
  if (depth > ARROW_MAX_DEPTH || !PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 5 ||
      !PyBytes_Check(PyTuple_GET_ITEM(spec, 0)) || !PyTuple_Check(PyTuple_GET_ITEM(spec, 4))) {
    PyErr_SetString(PyExc_TypeError, "bad Arrow schema spec");
    return -1;
  }
  PyObject *fmt = PyTuple_GET_ITEM(spec, 0), *name = PyTuple_GET_ITEM(spec, 1),
           *meta = PyTuple_GET_ITEM(spec, 2), *children = PyTuple_GET_ITEM(spec, 4);
  long long flags = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 3));
  if (flags == -1 && PyErr_Occurred()) return -1;
  if ((name != Py_None && !PyBytes_Check(name)) || (meta != Py_None && !PyBytes_Check(meta))) {
    PyErr_SetString(PyExc_TypeError, "Arrow schema name/metadata must be bytes or None");
    return -1;
  }
  Py_ssize_t nc = PyTuple_GET_SIZE(children);
  size_t lf = (size_t)PyBytes_GET_SIZE(fmt) + 1;
  size_t ln = name == Py_None ? 0 : (size_t)PyBytes_GET_SIZE(name) + 1;
  size_t lm = meta == Py_None ? 0 : (size_t)PyBytes_GET_SIZE(meta);
  size_t size = sizeof(schema_private) + (size_t)nc * (sizeof(void *) + sizeof(struct ArrowSchema)) +
                lf + ln + lm;
  schema_private *p = (schema_private *)calloc(1, size);
  if (p == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  p->child_ptrs = (struct ArrowSchema **)(p + 1);
  p->children = (struct ArrowSchema *)(p->child_ptrs + nc);
  char *str = (char *)(p->children + nc);
  memcpy(str, PyBytes_AS_STRING(fmt), lf);
  out->format = str;
  str += lf;
  out->name = NULL;
  if (ln) {
    memcpy(str, PyBytes_AS_STRING(name), ln);
    out->name = str;
    str += ln;
  }
  out->metadata = NULL;
  if (lm) {
    memcpy(str, PyBytes_AS_STRING(meta), lm);
    out->metadata = str;
  }
  out->flags = flags;
  out->n_children = nc;
  out->children = nc ? p->child_ptrs : NULL;
  out->dictionary = NULL;
  out->private_data = p;
  for (Py_ssize_t i = 0; i < nc; i++) {
    p->child_ptrs[i] = &p->children[i];
    if (schema_fill(&p->children[i], PyTuple_GET_ITEM(children, i), depth + 1) < 0) {
      for (Py_ssize_t j = 0; j < i; j++) p->children[j].release(&p->children[j]);
      free(p);
      return -1;
    }
  }
  out->release = schema_release;
  return 0;
}

/* ---- export: arrays. spec = (length, null_count, offset, buffers: tuple of
 * addresses (0 for NULL), children: tuple of specs). Every node holds its own
 * reference to the owner, since consumers may move children out. */

typedef struct {
  PyObject *owner;
  struct ArrowArray **child_ptrs;
  struct ArrowArray *children;
  const void **buffers;
} array_private;

static void array_release(struct ArrowArray *a) {
  if (a == NULL || a->release == NULL) return;
  for (int64_t i = 0; i < a->n_children; i++) {
    struct ArrowArray *c = a->children[i];
    if (c->release != NULL) c->release(c);
  }
  array_private *p = (array_private *)a->private_data;
  /* When Python cannot be entered the reference cannot be dropped: leak it. */
  py_entry e;
  if (p->owner != NULL && py_enter(&e)) {
    Py_DECREF(p->owner);
    py_leave(&e);
  }
  free(p);
  a->release = NULL;
  BUMP(n_arrow_releases);
}

static int array_fill(struct ArrowArray *out, PyObject *owner, PyObject *spec, int depth) {
  if (depth > ARROW_MAX_DEPTH || !PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 5 ||
      !PyTuple_Check(PyTuple_GET_ITEM(spec, 3)) || !PyTuple_Check(PyTuple_GET_ITEM(spec, 4))) {
    PyErr_SetString(PyExc_TypeError, "bad Arrow array spec");
    return -1;
  }
  long long length = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 0));
  long long null_count = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 1));
  long long offset = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 2));
  if (PyErr_Occurred()) return -1;
  PyObject *buffers = PyTuple_GET_ITEM(spec, 3), *children = PyTuple_GET_ITEM(spec, 4);
  Py_ssize_t nb = PyTuple_GET_SIZE(buffers), nc = PyTuple_GET_SIZE(children);
  size_t size = sizeof(array_private) + (size_t)nc * (sizeof(void *) + sizeof(struct ArrowArray)) +
                (size_t)nb * sizeof(void *);
  array_private *p = (array_private *)calloc(1, size);
  if (p == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  p->child_ptrs = (struct ArrowArray **)(p + 1);
  p->children = (struct ArrowArray *)(p->child_ptrs + nc);
  p->buffers = (const void **)(p->children + nc);
  for (Py_ssize_t i = 0; i < nb; i++) {
    p->buffers[i] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(buffers, i));
  }
  if (PyErr_Occurred()) {
    free(p);
    return -1;
  }
  out->length = length;
  out->null_count = null_count;
  out->offset = offset;
  out->n_buffers = nb;
  out->n_children = nc;
  out->buffers = nb ? p->buffers : NULL;
  out->children = nc ? p->child_ptrs : NULL;
  out->dictionary = NULL;
  out->private_data = p;
  for (Py_ssize_t i = 0; i < nc; i++) {
    p->child_ptrs[i] = &p->children[i];
    if (array_fill(&p->children[i], owner, PyTuple_GET_ITEM(children, i), depth + 1) < 0) {
      for (Py_ssize_t j = 0; j < i; j++) p->children[j].release(&p->children[j]);
      free(p);
      return -1;
    }
  }
  Py_INCREF(owner);
  p->owner = owner;
  out->release = array_release;
  BUMP(n_arrow_exports);
  return 0;
}

/* Capsule destructors (PyCapsule interface): release an unmoved struct, then
 * free the struct itself. */
static void arrow_schema_capsule_destructor(PyObject *cap) {
  struct ArrowSchema *s = (struct ArrowSchema *)PyCapsule_GetPointer(cap, NAME_ARROW_SCHEMA);
  if (s == NULL) {
    PyErr_Clear();
    return;
  }
  if (s->release != NULL) s->release(s);
  free(s);
}

static void arrow_array_capsule_destructor(PyObject *cap) {
  struct ArrowArray *a = (struct ArrowArray *)PyCapsule_GetPointer(cap, NAME_ARROW_ARRAY);
  if (a == NULL) {
    PyErr_Clear();
    return;
  }
  if (a->release != NULL) a->release(a);
  free(a);
}

static void arrow_device_array_capsule_destructor(PyObject *cap) {
  struct ArrowDeviceArray *d =
      (struct ArrowDeviceArray *)PyCapsule_GetPointer(cap, NAME_ARROW_DEVICE_ARRAY);
  if (d == NULL) {
    PyErr_Clear();
    return;
  }
  if (d->array.release != NULL) d->array.release(&d->array);
  free(d);
}

static void arrow_stream_capsule_destructor(PyObject *cap) {
  struct ArrowArrayStream *st =
      (struct ArrowArrayStream *)PyCapsule_GetPointer(cap, NAME_ARROW_STREAM);
  if (st == NULL) {
    PyErr_Clear();
    return;
  }
  if (st->release != NULL) st->release(st);
  free(st);
}

/* Allocate a zeroed, released struct and wrap it in its capsule before
 * filling it, so that every error path frees it. */
static PyObject *new_struct_capsule(size_t size, const char *name, PyCapsule_Destructor d,
                                    void **out) {
  void *mem = calloc(1, size);
  if (mem == NULL) return PyErr_NoMemory();
  PyObject *cap = PyCapsule_New(mem, name, d);
  if (cap == NULL) {
    free(mem);
    return NULL;
  }
  *out = mem;
  return cap;
}

static PyObject *py_arrow_export_schema(PyObject *mod, PyObject *spec) {
  (void)mod;
  struct ArrowSchema *s;
  PyObject *cap = new_struct_capsule(sizeof *s, NAME_ARROW_SCHEMA,
                                     arrow_schema_capsule_destructor, (void **)&s);
  if (cap == NULL) return NULL;
  if (schema_fill(s, spec, 0) < 0) Py_CLEAR(cap);
  return cap;
}

/* arrow_export_array(owner, spec) */
static PyObject *py_arrow_export_array(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "arrow_export_array(owner, spec)");
    return NULL;
  }
  struct ArrowArray *a;
  PyObject *cap = new_struct_capsule(sizeof *a, NAME_ARROW_ARRAY, arrow_array_capsule_destructor,
                                     (void **)&a);
  if (cap == NULL) return NULL;
  if (array_fill(a, args[0], args[1], 0) < 0) Py_CLEAR(cap);
  return cap;
}

/* arrow_export_device_array(owner, spec, device_type, device_id) */
static PyObject *py_arrow_export_device_array(PyObject *mod, PyObject *const *args,
                                              Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 4) {
    PyErr_SetString(PyExc_TypeError, "arrow_export_device_array(owner, spec, type, id)");
    return NULL;
  }
  long dev_type = PyLong_AsLong(args[2]);
  long long dev_id = PyLong_AsLongLong(args[3]);
  if (PyErr_Occurred()) return NULL;
  struct ArrowDeviceArray *d;
  PyObject *cap = new_struct_capsule(sizeof *d, NAME_ARROW_DEVICE_ARRAY,
                                     arrow_device_array_capsule_destructor, (void **)&d);
  if (cap == NULL) return NULL;
  d->device_type = (ArrowDeviceType)dev_type;
  d->device_id = dev_id;
  d->sync_event = NULL; /* bridge enqueues no work: nothing to wait for */
  if (array_fill(&d->array, args[0], args[1], 0) < 0) Py_CLEAR(cap);
  return cap;
}

/* ---- export: a one-batch stream. get_next may be called from any thread
 * (DuckDB does), so the callbacks take the GIL themselves. */

typedef struct {
  PyObject *owner, *schema_spec, *array_spec;
  int done;
  char error[512];
} stream_private;

static void stream_set_error(stream_private *p) {
  PyObject *exc = PyErr_Occurred() ? PyErr_GetRaisedException_compat() : NULL;
  PyObject *msg = exc ? PyObject_Str(exc) : NULL;
  const char *text = msg ? PyUnicode_AsUTF8(msg) : NULL;
  snprintf(p->error, sizeof p->error, "%s", text ? text : "bridge Arrow stream error");
  Py_XDECREF(msg);
  Py_XDECREF(exc);
  PyErr_Clear();
}

static int stream_get_schema(struct ArrowArrayStream *st, struct ArrowSchema *out) {
  py_entry e;
  if (st == NULL || st->release == NULL || !py_enter(&e)) return EINVAL;
  stream_private *p = (stream_private *)st->private_data;
  int rc = schema_fill(out, p->schema_spec, 0) < 0 ? ENOMEM : 0;
  if (rc) stream_set_error(p);
  py_leave(&e);
  return rc;
}

static int stream_get_next(struct ArrowArrayStream *st, struct ArrowArray *out) {
  if (st == NULL || st->release == NULL) return EINVAL;
  stream_private *p = (stream_private *)st->private_data;
  if (p->done) {
    memset(out, 0, sizeof *out); /* release == NULL: end of stream */
    return 0;
  }
  py_entry e;
  if (!py_enter(&e)) return EINVAL;
  int rc = array_fill(out, p->owner, p->array_spec, 0) < 0 ? ENOMEM : 0;
  if (rc)
    stream_set_error(p);
  else
    p->done = 1;
  py_leave(&e);
  return rc;
}

static const char *stream_get_last_error(struct ArrowArrayStream *st) {
  stream_private *p = (stream_private *)st->private_data;
  return p != NULL && p->error[0] ? p->error : NULL;
}

static void stream_release(struct ArrowArrayStream *st) {
  if (st == NULL || st->release == NULL) return;
  stream_private *p = (stream_private *)st->private_data;
  py_entry e;
  if (py_enter(&e)) {
    Py_XDECREF(p->owner);
    Py_XDECREF(p->schema_spec);
    Py_XDECREF(p->array_spec);
    py_leave(&e);
  }
  free(p);
  st->release = NULL;
}

/* arrow_export_stream(owner, schema_spec, array_spec) */
static PyObject *py_arrow_export_stream(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 3) {
    PyErr_SetString(PyExc_TypeError, "arrow_export_stream(owner, schema_spec, array_spec)");
    return NULL;
  }
  struct ArrowArrayStream *st;
  PyObject *cap = new_struct_capsule(sizeof *st, NAME_ARROW_STREAM, arrow_stream_capsule_destructor,
                                     (void **)&st);
  if (cap == NULL) return NULL;
  stream_private *p = (stream_private *)calloc(1, sizeof *p);
  if (p == NULL) {
    Py_DECREF(cap);
    return PyErr_NoMemory();
  }
  p->owner = Py_NewRef(args[0]);
  p->schema_spec = Py_NewRef(args[1]);
  p->array_spec = Py_NewRef(args[2]);
  st->get_schema = stream_get_schema;
  st->get_next = stream_get_next;
  st->get_last_error = stream_get_last_error;
  st->private_data = p;
  st->release = stream_release;
  return cap;
}

/* ---- import. Structs are moved out of the producer's capsule (bitwise copy,
 * then the source marked released) into a guard that calls their release
 * exactly once, when the last bridge view lets go. */

typedef struct {
  struct ArrowSchema schema;
  struct ArrowArray array;
} arrow_guard_t;

static void arrow_guard_destructor(PyObject *cap) {
  arrow_guard_t *g = (arrow_guard_t *)PyCapsule_GetPointer(cap, NAME_ARROW_GUARD);
  if (g == NULL) {
    PyErr_Clear();
    return;
  }
  SAVE_ERROR;
  if (g->array.release != NULL) g->array.release(&g->array);
  if (g->schema.release != NULL) g->schema.release(&g->schema);
  free(g);
  BUMP(n_arrow_import_releases);
  RESTORE_ERROR;
}

static PyObject *new_guard(arrow_guard_t **out) {
  arrow_guard_t *g = (arrow_guard_t *)calloc(1, sizeof *g);
  if (g == NULL) return PyErr_NoMemory();
  PyObject *cap = PyCapsule_New(g, NAME_ARROW_GUARD, arrow_guard_destructor);
  if (cap == NULL) {
    free(g);
    return NULL;
  }
  BUMP(n_arrow_imports);
  *out = g;
  return cap;
}

/* (format, name, metadata, flags, children, has_dictionary) */
static PyObject *describe_schema(const struct ArrowSchema *s, int depth) {
  if (depth > ARROW_MAX_DEPTH) {
    PyErr_SetString(PyExc_ValueError, "Arrow schema nests too deeply");
    return NULL;
  }
  if (s->release == NULL) {
    PyErr_SetString(PyExc_ValueError, "Arrow schema (or a child) is released");
    return NULL;
  }
  if (s->format == NULL) {
    PyErr_SetString(PyExc_ValueError, "Arrow schema has a NULL format");
    return NULL;
  }
  if (s->n_children < 0 || (s->n_children > 0 && s->children == NULL)) {
    PyErr_Format(PyExc_ValueError, "Arrow schema has n_children %lld with children %p",
                 (long long)s->n_children, (void *)s->children);
    return NULL;
  }
  if (s->n_children > ARROW_MAX_CHILDREN) {
    PyErr_Format(PyExc_ValueError, "Arrow schema has %lld children (bridge reads at most %d)",
                 (long long)s->n_children, ARROW_MAX_CHILDREN);
    return NULL;
  }
  PyObject *meta = Py_NewRef(Py_None);
  if (s->metadata != NULL) {
    /* int32 count, then (int32 length + bytes) per key and per value; the
     * block carries no size, so counts and lengths are bounded and summed
     * with overflow checks before anything past them is read. */
    int32_t n;
    memcpy(&n, s->metadata, 4);
    if (n < 0 || n > ARROW_MAX_METADATA_PAIRS) {
      Py_DECREF(meta);
      PyErr_Format(PyExc_ValueError, "Arrow schema metadata has an invalid pair count %d", (int)n);
      return NULL;
    }
    size_t used = 4;
    for (int32_t i = 0; i < 2 * n; i++) {
      int32_t len;
      memcpy(&len, s->metadata + used, 4);
      if (len < 0 || len > ARROW_MAX_METADATA_LENGTH ||
          __builtin_add_overflow(used, (size_t)4 + (size_t)len, &used) ||
          used > (size_t)PY_SSIZE_T_MAX) {
        Py_DECREF(meta);
        PyErr_Format(PyExc_ValueError, "Arrow schema metadata has an invalid length %d",
                     (int)len);
        return NULL;
      }
    }
    Py_SETREF(meta, PyBytes_FromStringAndSize(s->metadata, (Py_ssize_t)used));
    if (meta == NULL) return NULL;
  }
  PyObject *children = PyTuple_New(s->n_children);
  if (children == NULL) {
    Py_DECREF(meta);
    return NULL;
  }
  for (int64_t i = 0; i < s->n_children; i++) {
    PyObject *c = s->children[i] ? describe_schema(s->children[i], depth + 1) : NULL;
    if (c == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Arrow schema has a NULL child");
      Py_DECREF(meta);
      Py_DECREF(children);
      return NULL;
    }
    PyTuple_SET_ITEM(children, i, c);
  }
  PyObject *format = PyUnicode_DecodeUTF8(s->format, (Py_ssize_t)strlen(s->format), "strict");
  if (format == NULL) {
    PyErr_Clear();
    PyErr_SetString(PyExc_ValueError, "Arrow schema format string is not valid UTF-8");
    Py_DECREF(meta);
    Py_DECREF(children);
    return NULL;
  }
  PyObject *name = s->name ? PyUnicode_DecodeUTF8(s->name, (Py_ssize_t)strlen(s->name), "replace")
                           : Py_NewRef(Py_None);
  if (name == NULL) {
    Py_DECREF(format);
    Py_DECREF(meta);
    Py_DECREF(children);
    return NULL;
  }
  return Py_BuildValue("(NNNLNO)", format, name, meta, (long long)s->flags, children,
                       s->dictionary ? Py_True : Py_False);
}

/* (length, null_count, offset, buffers, children) */
static PyObject *describe_array(const struct ArrowArray *a, int depth) {
  if (depth > ARROW_MAX_DEPTH) {
    PyErr_SetString(PyExc_ValueError, "Arrow array nests too deeply");
    return NULL;
  }
  if (a->release == NULL) {
    PyErr_SetString(PyExc_ValueError, "Arrow array (or a child) is released");
    return NULL;
  }
  if (a->n_buffers < 0 || a->n_children < 0 || (a->n_buffers > 0 && a->buffers == NULL) ||
      (a->n_children > 0 && a->children == NULL)) {
    PyErr_Format(PyExc_ValueError,
                 "Arrow array has n_buffers %lld (buffers %p) and n_children %lld (children %p)",
                 (long long)a->n_buffers, (void *)a->buffers, (long long)a->n_children,
                 (void *)a->children);
    return NULL;
  }
  if (a->n_buffers > ARROW_MAX_BUFFERS || a->n_children > ARROW_MAX_CHILDREN) {
    PyErr_Format(PyExc_ValueError,
                 "Arrow array has %lld buffers and %lld children (the layouts bridge reads have "
                 "at most %d buffers and %d children)",
                 (long long)a->n_buffers, (long long)a->n_children, ARROW_MAX_BUFFERS,
                 ARROW_MAX_CHILDREN);
    return NULL;
  }
  PyObject *bufs = PyTuple_New(a->n_buffers);
  PyObject *children = PyTuple_New(a->n_children);
  if (bufs == NULL || children == NULL) goto fail;
  for (int64_t i = 0; i < a->n_buffers; i++) {
    PyObject *v = PyLong_FromVoidPtr((void *)a->buffers[i]);
    if (v == NULL) goto fail;
    PyTuple_SET_ITEM(bufs, i, v);
  }
  for (int64_t i = 0; i < a->n_children; i++) {
    PyObject *c = a->children[i] ? describe_array(a->children[i], depth + 1) : NULL;
    if (c == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Arrow array has a NULL child");
      goto fail;
    }
    PyTuple_SET_ITEM(children, i, c);
  }
  return Py_BuildValue("(LLLNN)", (long long)a->length, (long long)a->null_count,
                       (long long)a->offset, bufs, children);
fail:
  Py_XDECREF(bufs);
  Py_XDECREF(children);
  return NULL;
}

static void *capsule_struct(PyObject *cap, const char *want, const char *role) {
  if (!PyCapsule_CheckExact(cap)) {
    PyErr_Format(PyExc_TypeError, "expected an '%s' PyCapsule for the %s, got %.200s", want, role,
                 Py_TYPE(cap)->tp_name);
    return NULL;
  }
  const char *name = PyCapsule_GetName(cap);
  if (name == NULL || strcmp(name, want) != 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "expected a PyCapsule named '%s' for the %s, got '%s'", want,
                 role, name ? name : "(null)");
    return NULL;
  }
  return PyCapsule_GetPointer(cap, name);
}

/* arrow_import(schema_capsule, array_capsule) ->
 *   (guard, schema_desc, array_desc, device_type, device_id)
 * array_capsule may be an "arrow_array" or an "arrow_device_array". */
static PyObject *py_arrow_import(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "arrow_import(schema_capsule, array_capsule)");
    return NULL;
  }
  struct ArrowSchema *s = (struct ArrowSchema *)capsule_struct(args[0], NAME_ARROW_SCHEMA, "schema");
  if (s == NULL) return NULL;
  const char *aname = PyCapsule_CheckExact(args[1]) ? PyCapsule_GetName(args[1]) : NULL;
  int device = aname != NULL && strcmp(aname, NAME_ARROW_DEVICE_ARRAY) == 0;
  void *ap = capsule_struct(args[1], device ? NAME_ARROW_DEVICE_ARRAY : NAME_ARROW_ARRAY, "array");
  if (ap == NULL) return NULL;
  struct ArrowArray *a = device ? &((struct ArrowDeviceArray *)ap)->array : (struct ArrowArray *)ap;
  long dev_type = device ? (long)((struct ArrowDeviceArray *)ap)->device_type : ARROW_CPU_DEVICE;
  long long dev_id = device ? (long long)((struct ArrowDeviceArray *)ap)->device_id : -1;
  if (s->release == NULL || a->release == NULL) {
    PyErr_SetString(PyExc_ValueError,
                    "the Arrow schema or array capsule was already consumed (released struct)");
    return NULL;
  }
  arrow_guard_t *g;
  PyObject *guard = new_guard(&g);
  if (guard == NULL) return NULL;
  g->schema = *s; /* move: bitwise copy, then mark the source released */
  s->release = NULL;
  g->array = *a;
  a->release = NULL;
  PyObject *sd = describe_schema(&g->schema, 0);
  PyObject *ad = sd ? describe_array(&g->array, 0) : NULL;
  if (ad == NULL) {
    Py_XDECREF(sd);
    Py_DECREF(guard);
    return NULL;
  }
  return Py_BuildValue("(NNNlL)", guard, sd, ad, dev_type, dev_id);
}

/* arrow_describe_schema(schema_capsule): describe without taking it (for
 * requested_schema, which stays the caller's). */
static PyObject *py_arrow_describe_schema(PyObject *mod, PyObject *cap) {
  (void)mod;
  struct ArrowSchema *s = (struct ArrowSchema *)capsule_struct(cap, NAME_ARROW_SCHEMA, "schema");
  return s == NULL ? NULL : describe_schema(s, 0);
}

/* arrow_import_stream(stream_capsule) -> (schema_guard, schema_desc,
 *   [(array_guard, array_desc), ...]); the stream is drained and released. */
static PyObject *py_arrow_import_stream(PyObject *mod, PyObject *cap) {
  (void)mod;
  struct ArrowArrayStream *src =
      (struct ArrowArrayStream *)capsule_struct(cap, NAME_ARROW_STREAM, "stream");
  if (src == NULL) return NULL;
  if (src->release == NULL) {
    PyErr_SetString(PyExc_ValueError, "the Arrow stream capsule was already consumed");
    return NULL;
  }
  struct ArrowArrayStream st = *src;
  src->release = NULL;
  PyObject *batches = NULL, *result = NULL, *sguard = NULL, *sd = NULL;
  arrow_guard_t *g;
  sguard = new_guard(&g);
  if (sguard == NULL) goto done;
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = st.get_schema(&st, &g->schema);
  Py_END_ALLOW_THREADS if (rc != 0) {
    const char *err = st.get_last_error ? st.get_last_error(&st) : NULL;
    PyErr_Format(PyExc_RuntimeError, "Arrow stream get_schema failed (%d): %s", rc,
                 err ? err : "no message");
    goto done;
  }
  if (!(sd = describe_schema(&g->schema, 0)) || !(batches = PyList_New(0))) goto done;
  for (;;) {
    arrow_guard_t *bg;
    PyObject *bguard = new_guard(&bg);
    if (bguard == NULL) goto done;
    Py_BEGIN_ALLOW_THREADS rc = st.get_next(&st, &bg->array);
    Py_END_ALLOW_THREADS if (rc != 0) {
      const char *err = st.get_last_error ? st.get_last_error(&st) : NULL;
      PyErr_Format(PyExc_RuntimeError, "Arrow stream get_next failed (%d): %s", rc,
                   err ? err : "no message");
      Py_DECREF(bguard);
      goto done;
    }
    if (bg->array.release == NULL) { /* end of stream */
      Py_DECREF(bguard);
      break;
    }
    PyObject *ad = describe_array(&bg->array, 0);
    PyObject *item = ad ? Py_BuildValue("(NN)", bguard, ad) : NULL;
    if (item == NULL) {
      Py_XDECREF(ad);
      Py_DECREF(bguard);
      goto done;
    }
    int bad = PyList_Append(batches, item);
    Py_DECREF(item);
    if (bad) goto done;
  }
  result = Py_BuildValue("(OOO)", sguard, sd, batches);
done:
  if (st.release != NULL) {
    /* The producer's release may run Python code: keep our error intact. */
    SAVE_ERROR;
    st.release(&st);
    RESTORE_ERROR;
  }
  Py_XDECREF(sguard);
  Py_XDECREF(sd);
  Py_XDECREF(batches);
  return result;
}

/* ---- the tensor fast path: a 1-d contiguous host tensor of a primitive
 * type, exported without building Python-level specs. Anything else is left
 * to bridge/arrow.py (which also raises the errors). */

static PyObject *py_arrow_export_fallback; /* (tensor, want_device: bool, args, kwnames) */
static const char BOOL8_METADATA[] = {
    2, 0, 0, 0,                                                              /* 2 pairs */
    20, 0, 0, 0, 'A', 'R', 'R', 'O', 'W', ':', 'e', 'x', 't', 'e', 'n', 's', 'i', 'o', 'n', ':',
    'n', 'a', 'm', 'e', 11, 0, 0, 0, 'a', 'r', 'r', 'o', 'w', '.', 'b', 'o', 'o', 'l', '8',
    24, 0, 0, 0, 'A', 'R', 'R', 'O', 'W', ':', 'e', 'x', 't', 'e', 'n', 's', 'i', 'o', 'n', ':',
    'm', 'e', 't', 'a', 'd', 'a', 't', 'a', 0, 0, 0, 0};

static const char *arrow_format_of(long code, long bits) {
  switch (code) {
    case kDLInt:
      return bits == 8 ? "c" : bits == 16 ? "s" : bits == 32 ? "i" : bits == 64 ? "l" : NULL;
    case kDLUInt:
      return bits == 8 ? "C" : bits == 16 ? "S" : bits == 32 ? "I" : bits == 64 ? "L" : NULL;
    case kDLFloat:
      return bits == 16 ? "e" : bits == 32 ? "f" : bits == 64 ? "g" : NULL;
    case kDLBool:
      return bits == 8 ? "c" : NULL;
    default:
      return NULL;
  }
}

/* A primitive schema node (no children) pointing at static strings: nothing
 * to allocate, so its release only marks it released. */
static void static_schema_release(struct ArrowSchema *s) {
  if (s != NULL) s->release = NULL;
}

static void schema_fill_primitive(struct ArrowSchema *out, const char *format,
                                  const char *metadata) {
  out->format = format;
  out->name = "tensor"; /* the field name __arrow_c_schema__ and the stream use too */
  out->metadata = metadata;
  out->flags = ARROW_FLAG_NULLABLE;
  out->n_children = 0;
  out->children = NULL;
  out->dictionary = NULL;
  out->private_data = NULL;
  out->release = static_schema_release;
}

/* The fast path's export: one allocation holds both capsules' structs (the
 * schema, and an ArrowArray or ArrowDeviceArray), the owner reference and the
 * buffer list. The block is freed once both capsules are gone and the array
 * (wherever a consumer moved it) is released. The schema points at static
 * strings and owns nothing, so a moved copy of it needs nothing from the
 * block. The flags are only touched with the GIL held, which serialises the
 * three events. */
typedef struct {
  union {
    struct ArrowArray array;
    struct ArrowDeviceArray device;
  } head; /* first: the array capsule points here */
  struct ArrowSchema schema;
  PyObject *owner;
  const void *buffers[2];
  int array_capsule_gone, schema_capsule_gone, released;
} fast_block;

static void fast_block_maybe_free(fast_block *b) {
  if (b->array_capsule_gone && b->schema_capsule_gone && b->released) free(b);
}

static void fast_array_release(struct ArrowArray *a) {
  if (a == NULL || a->release == NULL) return;
  fast_block *b = (fast_block *)a->private_data;
  a->release = NULL;
  py_entry e;
  if (!py_enter(&e)) return; /* Python cannot be entered: leak rather than touch it */
  Py_CLEAR(b->owner);
  b->released = 1;
  BUMP(n_arrow_releases);
  fast_block_maybe_free(b);
  py_leave(&e);
}

static void fast_array_capsule_destructor(PyObject *cap) {
  const char *name = PyCapsule_GetName(cap);
  fast_block *b = name ? (fast_block *)PyCapsule_GetPointer(cap, name) : NULL;
  if (b == NULL) {
    PyErr_Clear();
    return;
  }
  struct ArrowArray *a = &b->head.array; /* the first member of both struct kinds */
  b->array_capsule_gone = 1;
  if (a->release != NULL)
    a->release(a); /* never moved: release it here (which may free the block) */
  else
    fast_block_maybe_free(b);
}

static void fast_schema_capsule_destructor(PyObject *cap) {
  struct ArrowSchema *s = (struct ArrowSchema *)PyCapsule_GetPointer(cap, NAME_ARROW_SCHEMA);
  if (s == NULL) {
    PyErr_Clear();
    return;
  }
  fast_block *b = (fast_block *)((char *)s - offsetof(fast_block, schema));
  if (s->release != NULL) s->release(s);
  b->schema_capsule_gone = 1;
  fast_block_maybe_free(b);
}

/* (schema capsule, array capsule) for a primitive 1-d host array. */
static PyObject *fast_export(PyObject *owner, const char *format, const char *metadata,
                             int64_t length, int64_t offset, const void *data, int device) {
  fast_block *b = (fast_block *)calloc(1, sizeof *b);
  if (b == NULL) return PyErr_NoMemory();
  b->schema_capsule_gone = b->array_capsule_gone = b->released = 1; /* until each exists */
  PyObject *scap = PyCapsule_New(&b->schema, NAME_ARROW_SCHEMA, fast_schema_capsule_destructor);
  if (scap == NULL) {
    free(b);
    return NULL;
  }
  b->schema_capsule_gone = 0;
  schema_fill_primitive(&b->schema, format, metadata);
  PyObject *acap = PyCapsule_New(b, device ? NAME_ARROW_DEVICE_ARRAY : NAME_ARROW_ARRAY,
                                 fast_array_capsule_destructor);
  if (acap == NULL) {
    Py_DECREF(scap); /* frees the block: the array part never existed */
    return NULL;
  }
  b->array_capsule_gone = 0;
  struct ArrowArray *out = &b->head.array;
  if (device) {
    b->head.device.device_type = ARROW_CPU_DEVICE;
    b->head.device.device_id = -1;
  }
  b->buffers[0] = NULL;
  b->buffers[1] = data;
  b->owner = Py_NewRef(owner);
  out->length = length;
  out->null_count = 0;
  out->offset = offset;
  out->n_buffers = 2;
  out->n_children = 0;
  out->buffers = b->buffers;
  out->children = NULL;
  out->dictionary = NULL;
  out->private_data = b;
  out->release = fast_array_release;
  b->released = 0;
  BUMP(n_arrow_exports);
  PyObject *pair = PyTuple_New(2);
  if (pair == NULL) {
    Py_DECREF(scap);
    Py_DECREF(acap);
    return NULL;
  }
  PyTuple_SET_ITEM(pair, 0, scap);
  PyTuple_SET_ITEM(pair, 1, acap);
  return pair;
}

/* The common body of Tensor.__arrow_c_array__ / __arrow_c_device_array__. */
static PyObject *tensor_arrow_export(PyObject *self, PyObject *const *args, Py_ssize_t nargsf,
                                     PyObject *kwnames, int device) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  /* Only requested_schema may be passed positionally, and keywords to
   * __arrow_c_array__ are Python's to check: anything else takes that path. */
  int simple = nargs <= 1 && (device || nkw == 0);
  for (Py_ssize_t i = 0; i < nargs + nkw; i++)
    if (args[i] != Py_None) simple = 0; /* requested_schema or device keywords: Python decides */
  if (simple) {
    tensor_view_t v;
    if (read_tensor(self, &v) < 0) return NULL;
    const char *format = arrow_format_of(v.code, v.bits);
    long long n = PyTuple_GET_SIZE(v.shape) == 1 ? PyLong_AsLongLong(PyTuple_GET_ITEM(v.shape, 0)) : -1;
    long long stride = n >= 0 ? PyLong_AsLongLong(PyTuple_GET_ITEM(v.strides, 0)) : 0;
    if (PyErr_Occurred()) return NULL;
    if (format != NULL && n >= 0 && (n <= 1 || stride == 1) && v.dev_type == kDLCPU &&
        v.storage_ptr % (uintptr_t)(v.bits / 8) == 0)
      return fast_export(v.keep, format, v.code == kDLBool ? BOOL8_METADATA : NULL, n, v.offset,
                         (const void *)v.storage_ptr, device);
  }
  /* Everything else (N-d, requested schemas, device memory, errors) is Python's. */
  PyObject *call[4] = {self, device ? Py_True : Py_False, NULL, NULL};
  PyObject *argt = PyTuple_New(nargs), *kw = PyDict_New(), *result = NULL;
  if (argt == NULL || kw == NULL) goto done;
  for (Py_ssize_t i = 0; i < nargs; i++) PyTuple_SET_ITEM(argt, i, Py_NewRef(args[i]));
  for (Py_ssize_t i = 0; i < nkw; i++)
    if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) goto done;
  call[2] = argt;
  call[3] = kw;
  result = PyObject_Vectorcall(py_arrow_export_fallback, call, 4, NULL);
done:
  Py_XDECREF(argt);
  Py_XDECREF(kw);
  return result;
}

static PyObject *tensor_arrow_c_array(PyObject *self, PyObject *const *args, Py_ssize_t nargsf,
                                      PyObject *kwnames) {
  return tensor_arrow_export(self, args, nargsf, kwnames, 0);
}

static PyObject *tensor_arrow_c_device_array(PyObject *self, PyObject *const *args,
                                             Py_ssize_t nargsf, PyObject *kwnames) {
  return tensor_arrow_export(self, args, nargsf, kwnames, 1);
}

static PyMethodDef tensor_arrow_c_array_def = {
    "__arrow_c_array__", (PyCFunction)(void (*)(void))tensor_arrow_c_array,
    METH_FASTCALL | METH_KEYWORDS,
    "__arrow_c_array__(requested_schema=None) -> (schema capsule, array capsule)\n\n"
    "Arrow PyCapsule interface, zero-copy; see bridge.arrow."};

static PyMethodDef tensor_arrow_c_device_array_def = {
    "__arrow_c_device_array__", (PyCFunction)(void (*)(void))tensor_arrow_c_device_array,
    METH_FASTCALL | METH_KEYWORDS,
    "__arrow_c_device_array__(requested_schema=None, **kwargs) -> (schema, device array)\n\n"
    "Arrow PyCapsule interface for host and CUDA memory; see bridge.arrow."};

/* bridge.from_arrow: plain primitive pyarrow arrays (exact class in
 * pa_primitive, no nulls) go through pyarrow's own DLPack export in C; every
 * other call goes to the Python implementation (bridge/arrow.py). */
static PyObject *pa_primitive, *py_from_arrow_impl;

static PyObject *py_from_arrow(PyObject *mod, PyObject *const *args, Py_ssize_t nargsf,
                               PyObject *kwnames) {
  (void)mod;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs == 1 && kwnames == NULL && pa_primitive != NULL) {
    int hit = PySet_Contains(pa_primitive, (PyObject *)Py_TYPE(args[0]));
    if (hit < 0) return NULL;
    if (hit) {
      /* pyarrow refuses arrays with nulls (ArrowTypeError, a TypeError): the
       * Python path then explains, or honours with_mask. */
      PyObject *callargs[2] = {args[0], max_version_value};
      PyObject *cap = PyObject_VectorcallMethod(str_dlpack, callargs,
                                                1 | PY_VECTORCALL_ARGUMENTS_OFFSET, kw_max_version);
      if (cap == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_BufferError))
          return NULL;
        PyErr_Clear();
      } else {
        parsed_t p = {0};
        int rc = PyCapsule_CheckExact(cap) ? consume_capsule(cap, &p) : -1;
        if (rc < 0 && !PyErr_Occurred())
          PyErr_SetString(PyExc_TypeError, "pyarrow's __dlpack__ returned no capsule");
        Py_DECREF(cap);
        return rc < 0 ? NULL : parsed_to_tensor(&p);
      }
    }
  }
  return PyObject_Vectorcall(py_from_arrow_impl, args, nargsf, kwnames);
}

static PyMethodDef from_arrow_def = {
    "from_arrow", (PyCFunction)(void (*)(void))py_from_arrow, METH_FASTCALL | METH_KEYWORDS,
    "from_arrow(obj, *, copy=False, with_mask=False) -> Tensor\n\n"
    "A read-only tensor over Arrow memory, zero-copy; the Arrow memory stays alive\n"
    "and its release runs once, when the last view dies. Takes pyarrow Buffer, Array,\n"
    "ChunkedArray (one chunk), Tensor, FixedShapeTensorArray, one-column Table /\n"
    "RecordBatch, any object with __arrow_c_device_array__ / __arrow_c_array__ /\n"
    "__arrow_c_stream__, a stream capsule or a (schema, array) capsule pair.\n"
    "with_mask=True returns (values, valid) for data with nulls (the mask a copy);\n"
    "bit-packed bools need copy=True.\n\n"
    "TypeError: no tensor form (strings, dictionaries, nested lists, complex).\n"
    "ValueError: nulls, several chunks/batches/columns, released structs, wrong\n"
    "capsule names, malformed structs. See docs/arrow.md."};

/* make_from_arrow(impl, primitive_classes: set) -> the from_arrow builtin */
static PyObject *py_make_from_arrow(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2 || !PyAnySet_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "make_from_arrow(impl, classes)");
    return NULL;
  }
  if (tensor_type == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "make_from_arrow() needs bridge._capi's setup() first");
    return NULL;
  }
  Py_XSETREF(py_from_arrow_impl, Py_NewRef(args[0]));
  Py_XSETREF(pa_primitive, Py_NewRef(args[1]));
  return PyCFunction_New(&from_arrow_def, NULL);
}

/* setup_arrow(fallback) -> (__arrow_c_array__, __arrow_c_device_array__)
 * method descriptors for Tensor */
static PyObject *py_setup_arrow(PyObject *mod, PyObject *fallback) {
  (void)mod;
  if (tensor_type == NULL) {
    PyErr_SetString(PyExc_RuntimeError, "setup_arrow() needs bridge._capi's setup() first");
    return NULL;
  }
  Py_XSETREF(py_arrow_export_fallback, Py_NewRef(fallback));
  PyObject *a = PyDescr_NewMethod(tensor_type, &tensor_arrow_c_array_def);
  PyObject *d = a ? PyDescr_NewMethod(tensor_type, &tensor_arrow_c_device_array_def) : NULL;
  if (d == NULL) {
    Py_XDECREF(a);
    return NULL;
  }
  return Py_BuildValue("(NN)", a, d);
}

static PyMethodDef fast_methods[] = {
    {"alloc", (PyCFunction)(void (*)(void))py_alloc, METH_FASTCALL, NULL},
    {"export", (PyCFunction)(void (*)(void))py_export, METH_FASTCALL, NULL},
    {"import_capsule", (PyCFunction)py_import_capsule, METH_O, NULL},
    {"set_callbacks", (PyCFunction)(void (*)(void))py_set_callbacks, METH_FASTCALL, NULL},
    {"setup", (PyCFunction)(void (*)(void))py_setup, METH_FASTCALL, NULL},
    {"set_dlpack_fallbacks", (PyCFunction)(void (*)(void))py_set_dlpack_fallbacks, METH_FASTCALL,
     NULL},
    {"setup_numpy", (PyCFunction)(void (*)(void))py_setup_numpy, METH_FASTCALL, NULL},
    {"fast_from_dlpack", (PyCFunction)py_fast_from_dlpack, METH_O, NULL},
    {"check_torch_export", (PyCFunction)py_check_torch_export, METH_O, NULL},
    {"api_to_object", (PyCFunction)(void (*)(void))py_api_to_object, METH_FASTCALL, NULL},
    {"api_peek", (PyCFunction)(void (*)(void))py_api_peek, METH_FASTCALL, NULL},
    {"api_alloc", (PyCFunction)(void (*)(void))py_api_alloc, METH_FASTCALL, NULL},
    {"api_stream", (PyCFunction)(void (*)(void))py_api_stream, METH_FASTCALL, NULL},
    {"capsule_info", (PyCFunction)py_capsule_info, METH_O, NULL},
    {"arrow_export_schema", (PyCFunction)py_arrow_export_schema, METH_O, NULL},
    {"arrow_export_array", (PyCFunction)(void (*)(void))py_arrow_export_array, METH_FASTCALL, NULL},
    {"arrow_export_device_array", (PyCFunction)(void (*)(void))py_arrow_export_device_array,
     METH_FASTCALL, NULL},
    {"arrow_export_stream", (PyCFunction)(void (*)(void))py_arrow_export_stream, METH_FASTCALL,
     NULL},
    {"arrow_import", (PyCFunction)(void (*)(void))py_arrow_import, METH_FASTCALL, NULL},
    {"arrow_import_stream", (PyCFunction)py_arrow_import_stream, METH_O, NULL},
    {"arrow_describe_schema", (PyCFunction)py_arrow_describe_schema, METH_O, NULL},
    {"setup_arrow", (PyCFunction)py_setup_arrow, METH_O, NULL},
    {"make_from_arrow", (PyCFunction)(void (*)(void))py_make_from_arrow, METH_FASTCALL, NULL},
    {"mark_consumed", (PyCFunction)py_mark_consumed, METH_O, NULL},
    {"make_capsule", (PyCFunction)(void (*)(void))py_make_capsule, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

int bridge_install(uintptr_t namespace_dict) {
  PyGILState_STATE gil = PyGILState_Ensure();
  int rc = -1;
  PyObject *ns = (PyObject *)namespace_dict;
  if (!PyDict_Check(ns)) {
    PyErr_SetString(PyExc_TypeError, "bridge_install needs a dict");
    goto done;
  }
  for (PyMethodDef *def = fast_methods; def->ml_name != NULL; def++) {
    PyObject *fn = PyCFunction_New(def, NULL);
    if (fn == NULL || PyDict_SetItemString(ns, def->ml_name, fn) < 0) {
      Py_XDECREF(fn);
      goto done;
    }
    Py_DECREF(fn);
  }
  PyObject *api = PyCapsule_New(&bridge_exchange_api, NAME_API, NULL);
  if (api == NULL || PyDict_SetItemString(ns, "exchange_api", api) < 0) {
    Py_XDECREF(api);
    goto done;
  }
  Py_DECREF(api);
  rc = 0;
done:
  if (rc != 0) PyErr_Print();
  PyGILState_Release(gil);
  return rc;
}
