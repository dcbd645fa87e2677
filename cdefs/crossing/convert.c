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

#include "interop/interop.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

enum { TAKE_BRIDGE, TAKE_API, TAKE_CALL, TAKE_NUMPY, TAKE_NONE /* a record judged, never taken */ };
enum { STRIDES_ANY, STRIDES_COMPACT, STRIDES_CONTIGUOUS };
#define MAX_DEVICE_KINDS 64 /* a bit each in destination.devices */

/* Why a destination does not hold a tensor as it is: the one judgement
 * (judge), as data. The fast path takes a tensor only when there is no
 * reason; the general path (bridge.crossing.convert._plan) words each reason
 * and makes its fix. Keep in step with _C.JUDGE_* (py_convert_judge). */
enum {
  J_ZERO_D = 1 << 0,         /* a 0-d tensor, and it holds none */
  J_NDIM = 1 << 1,           /* more dims than it holds */
  J_ND_BOOL = 1 << 2,        /* a bool tensor of more than one dim, and it holds none */
  J_ZERO_WIDTH = 1 << 3,     /* rows of no elements, and it holds none */
  J_DEVICE = 1 << 4,         /* memory on a device it does not hold */
  J_DTYPE = 1 << 5,          /* a dtype it does not hold */
  J_DTYPE_VIEW = 1 << 6,     /* a dtype it holds through NumPy's view of the same bytes */
  J_NEGATIVE = 1 << 7,       /* a negative stride, and it holds none */
  J_ZERO_STRIDE = 1 << 8,    /* a zero stride (a broadcast), and it holds none */
  J_NOT_CONTIGUOUS = 1 << 9, /* not row-major, and it holds only row-major */
  J_NOT_COMPACT = 1 << 10,   /* not a permutation of dense memory, and it holds only those */
  J_ALIGNMENT = 1 << 11,     /* its first element not at the alignment it needs */
  J_READONLY = 1 << 12,      /* read-only memory it could write (bridge_lend refuses) */
  J_ALIAS = 1 << 13,         /* read-only memory lent through a writable alias (bridge_lend) */
  J_OFFSET = 1 << 14,        /* an offset, and it ignores DLPack's byte_offset */
  /* not reasons, what the fast path also needs to know (never shown to Python): */
  J_EMPTY = 1 << 30,         /* no elements */
  J_STRIDED = 1u << 31,      /* not row-major (judged only for records that hold some strides only) */
};
#define MAX_DTYPES 64

/* One destination, as the general path's record says it holds memory
 * without a fix (bridge.crossing.convert builds it from Holds). */
typedef struct {
  int take;                 /* TAKE_*: bridge itself, an exchange API, a Python import, NumPy's C API */
  DLPackExchangeAPI *api;   /* TAKE_API: the destination's table (kept by `keep`) */
  PyObject *keep;           /* TAKE_API: the API capsule; TAKE_CALL: the import, called with a bridge tensor */
  int strides;              /* STRIDES_* */
  int negative, zero;       /* it holds negative / zero strides */
  int byte_offset;          /* it honours DLPack's byte_offset */
  int zero_d;               /* it holds 0-d tensors */
  int max_ndim;             /* -1: no limit */
  int nd_bool;              /* it holds bool tensors of more than one dim */
  int zero_width;           /* it holds N-d tensors whose rows have no elements */
  uint64_t devices;          /* bit t: it holds memory of DLPack device type t */
  int nviews;
  uint32_t dtype_views[MAX_DTYPES]; /* dtypes it holds through NumPy's view of the same bytes */
  int consumer;             /* BRIDGE_CONSUMER_*: what bridge_lend is asked for read-only memory */
  int64_t alignment;        /* 0: none */
  int ndtypes;
  uint32_t dtypes[MAX_DTYPES]; /* code | bits << 8 | lanes << 16 */
  uint8_t element_aligned[MAX_DTYPES]; /* dtypes[i]'s first element must be aligned to its size */
} destination;

static PyObject *registry; /* `to` -> capsule of a destination */
static const char DEST_NAME[] = "bridge.convert.destination";

static void destination_free(PyObject *capsule) {
  destination *d = (destination *)PyCapsule_GetPointer(capsule, DEST_NAME);
  if (d == NULL) {
    PyErr_Clear();
    return;
  }
  Py_XDECREF(d->keep);
  free(d);
}

/* What the fast path reads of a tensor, whoever made it. */
typedef struct {
  const char *data;         /* the first element (byte_offset included) */
  int64_t byte_offset;
  DLDevice device;
  DLDataType dtype;
  int ndim;
  const int64_t *shape, *strides; /* strides NULL: row-major */
  int readonly;
  int64_t elements_in;      /* a bridge tensor's offset into its storage (elements); 0 otherwise */
} view;

static uint32_t dtype_key(DLDataType t) { return (uint32_t)t.code | (uint32_t)t.bits << 8 | (uint32_t)t.lanes << 16; }

static int dtype_index(const uint32_t *keys, int n, uint32_t key) {
  int i = 0;
  while (i < n && keys[i] != key) i++;
  return i;
}

/* Every reason `d` does not hold `v` as it is (J_*), 0 for none: the one
 * judgement of a destination. `v` has strides (row-major ones filled in). */
/* Inlined: the fast path (holds) pays no call, and its offset_counts is a constant. */
static inline __attribute__((always_inline)) uint32_t judge(const destination *d, const view *v, int offset_counts) {
  uint32_t why = 0;
  int nd = v->ndim;
  if (nd == 0 && !d->zero_d) why |= J_ZERO_D;
  if (d->max_ndim >= 0 && nd > d->max_ndim) why |= J_NDIM;
  if (!d->nd_bool && nd > 1 && v->dtype.code == kDLBool) why |= J_ND_BOOL;
  int numel = 1; /* 0: no elements (whether there are any is all that is asked) */
  for (int k = 0; k < nd; k++) {
    if (v->shape[k] != 0) continue;
    numel = 0;
    if (k > 0 && !d->zero_width) why |= J_ZERO_WIDTH;
  }
  unsigned type = (unsigned)v->device.device_type;
  if (type >= MAX_DEVICE_KINDS || !(d->devices >> type & 1)) why |= J_DEVICE;
  uint32_t key = dtype_key(v->dtype);
  int i = dtype_index(d->dtypes, d->ndtypes, key);
  if (i == d->ndtypes) why |= dtype_index(d->dtype_views, d->nviews, key) < d->nviews ? J_DTYPE_VIEW : J_DTYPE;
  /* the layout: row-major needs nothing (but an empty tensor's strides, for a row-major-only
   * record); a record of any strides asks only about negative and zero ones, which a row-major
   * tensor has on no dim of more than one element */
  if (numel == 0) why |= J_EMPTY;
  if (v->strides == NULL) {
    /* row-major: nothing to say (an empty one's strides are the row-major ones) */
  } else if (d->strides == STRIDES_ANY) {
    for (int k = 0; numel != 0 && k < nd && !(d->negative && d->zero); k++) { /* empty: contiguous */
      if (v->shape[k] <= 1) continue;
      if (v->strides[k] < 0 && !d->negative) why |= J_NEGATIVE;
      if (v->strides[k] == 0 && !d->zero) why |= J_ZERO_STRIDE;
    }
  } else {
    int contiguous = bridge_is_contiguous(nd, v->shape, v->strides);
    if (!contiguous) why |= J_STRIDED;
    if (!contiguous || (numel == 0 && d->strides == STRIDES_CONTIGUOUS)) {
      for (int k = 0; k < nd; k++) {
        if (v->shape[k] <= 1) continue;
        if (v->strides[k] < 0 && !d->negative) why |= J_NEGATIVE;
        if (v->strides[k] == 0 && !d->zero) why |= J_ZERO_STRIDE;
      }
      int strided = !contiguous;
      if (!strided) { /* empty: its strides must still be the row-major ones */
        int64_t rowmajor[BRIDGE_MAX_NDIM];
        strided = bridge_contiguous_strides(nd, v->shape, rowmajor) < 0;
        for (int k = 0; !strided && k < nd; k++) strided = v->strides[k] != rowmajor[k];
      }
      if (d->strides == STRIDES_CONTIGUOUS && strided) why |= J_NOT_CONTIGUOUS;
      if (d->strides == STRIDES_COMPACT && !bridge_is_non_overlapping_and_dense(nd, v->shape, v->strides))
        why |= J_NOT_COMPACT;
    }
  }
  if (numel) {
    int64_t align = d->alignment;
    if (i < d->ndtypes && d->element_aligned[i]) {
      int64_t itemsize = (int64_t)((v->dtype.bits * (v->dtype.lanes ? v->dtype.lanes : 1) + 7) / 8);
      if (itemsize > align) align = itemsize;
    }
    if (align > 1 && (uintptr_t)v->data % (uint64_t)align) why |= J_ALIGNMENT;
  }
  if (v->readonly) { /* the one lending decision (writable memory is lent as it is) */
    int lent = bridge_lend(1, d->consumer);
    if (lent == BRIDGE_LEND_REFUSED) why |= J_READONLY;
    if (lent == BRIDGE_LEND_ALIAS) why |= J_ALIAS;
  }
  if (!d->byte_offset && (v->byte_offset || (offset_counts && v->elements_in))) why |= J_OFFSET;
  return why;
}

/* 1 when `d` holds `v` as it is and the fast path takes it; 0 when the
 * general path must look: a reason (judge), or a case the fast path leaves
 * to it (device memory, where streams are ordered; empty tensors; sub-byte
 * values; strides other than row-major for a record that holds only some).
 * A bridge tensor's offset is folded into the pointer it exports (no
 * reason here). Never an error. */
static int holds(const destination *d, const view *v) {
  if (v->device.device_type != kDLCPU || v->dtype.bits < 8 || v->dtype.lanes != 1) return 0;
  uint32_t why = judge(d, v, 0);
  return why == 0; /* J_STRIDED: a compact or row-major-only record's other strides are the general path's */
}

static void view_of_tensor(TensorObject *t, view *v) {
  StorageObject *st = t->storage;
  v->data = bridge_tensor_data(t);
  v->byte_offset = 0; /* bridge's exports fold the offset into the pointer */
  v->device.device_type = (DLDeviceType)st->dev_type;
  v->device.device_id = st->dev_id;
  v->dtype.code = t->dtype->code;
  v->dtype.bits = t->dtype->bits;
  v->dtype.lanes = t->dtype->lanes;
  v->ndim = t->ndim;
  v->shape = t->shape;
  v->strides = t->strides;
  v->readonly = st->readonly;
  v->elements_in = t->offset;
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
/* Set while a batch's leaves are taken (batch_to): a leaf the fast path does
 * not finish makes the whole batch the general path's (one CopyWarning per
 * call, overlapping copies made as one region), so general() only says so.
 * Per thread: torch's probes release the GIL mid-batch. */
static _Thread_local int batching;
static PyObject *needs_general; /* what general() returns while batching (a unique object) */

static PyObject *general(PyObject *obj, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  if (batching) return Py_NewRef(needs_general);
  PyObject *slow = bridge_upcall(UP_CONVERT_SLOW);
  if (slow == NULL) return NULL;
  if (obj == args[0]) return PyObject_Vectorcall(slow, args, nargsf, kwnames);
  Py_ssize_t n = PyVectorcall_NARGS(nargsf) + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
  PyObject *stack[8];
  if (n > 8) return PyObject_Vectorcall(slow, args, nargsf, kwnames);
  for (Py_ssize_t i = 0; i < n; i++) stack[i] = args[i];
  stack[0] = obj;
  return PyObject_Vectorcall(slow, stack, PyVectorcall_NARGS(nargsf), kwnames);
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
    if (d->api->managed_tensor_to_py_object_no_sync(m, &out) != 0) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_BufferError, "the destination's DLPack exchange API failed");
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

/* A bridge tensor (the source, or what the source was imported as) into
 * one registered destination; `obj` is what the general path is handed. */
static PyObject *tensor_to(const destination *d, TensorObject *t, PyObject *obj, PyObject *const *args,
                           Py_ssize_t nargsf, PyObject *kwnames) {
  view v;
  if (d->take == TAKE_BRIDGE) return Py_NewRef((PyObject *)t);
  view_of_tensor(t, &v);
  if (!holds(d, &v)) return general(obj, args, nargsf, kwnames);
  if (d->take == TAKE_CALL) return PyObject_CallOneArg(d->keep, (PyObject *)t);
  if (d->take == TAKE_NUMPY) return ndarray_of(t);
  DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)bridge_dlpack_build(t, BRIDGE_BUILD_UNIT_STRIDES, 1);
  return m ? take_managed(d, m) : NULL;
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
static PyObject *arrow_to(const destination *d, PyObject *obj, PyObject *const *args, Py_ssize_t nargsf,
                          PyObject *kwnames) {
  bridge_arrow_values av;
  int got = bridge_arrow_values_of(obj, &av);
  if (got <= 0) return got < 0 ? NULL : general(obj, args, nargsf, kwnames);
  view v = {av.data, 0, {kDLCPU, 0}, av.dtype, 1, &av.length, NULL, 1};
  if ((d->take == TAKE_NUMPY || d->take == TAKE_API) && holds(d, &v)) {
    PyObject *out;
    int64_t stride = 1;
    if (d->take == TAKE_NUMPY) {
      out = bridge_numpy_array_over(av.guard, av.data, av.dtype, 1, &av.length, &stride, 1);
    } else {
      DLManagedTensorVersioned *m = bridge_dlpack_build_owned(av.guard, av.data, v.device, av.dtype, 1, &av.length,
                                                              &stride, DLPACK_FLAG_BITMASK_READ_ONLY);
      out = m ? take_managed(d, m) : NULL;
    }
    Py_DECREF(av.guard);
    return out;
  }
  PyObject *t = bridge_arrow_values_tensor(&av);
  if (t == NULL) return NULL;
  PyObject *out = tensor_to(d, (TensorObject *)t, t, args, nargsf, kwnames);
  Py_DECREF(t);
  return out;
}

/* The fast path into one registered destination. */
static PyObject *convert_to(const destination *d, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  PyObject *obj = args[0];
  if (Tensor_Check(obj)) return tensor_to(d, (TensorObject *)obj, obj, args, nargsf, kwnames);
  PyTypeObject *tp = Py_TYPE(obj);
  DLManagedTensorVersioned *m = NULL;
  int got = 0;
  view v;
  if (tp == (PyTypeObject *)bridge_upcall_peek(UP_NDARRAY)) {
    DLTensor dl;
    int64_t shape[BRIDGE_MAX_NDIM], strides[BRIDGE_MAX_NDIM];
    int readonly;
    if (!bridge_numpy_describe(obj, &dl, shape, strides, &readonly)) return general(obj, args, nargsf, kwnames);
    view_of_dl(&dl, readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0, &v);
    if (!holds(d, &v)) return general(obj, args, nargsf, kwnames);
    if (d->take == TAKE_NUMPY) return bridge_numpy_array_over(obj, dl.data, dl.dtype, dl.ndim, shape, strides, readonly);
    m = bridge_dlpack_build_owned(obj, dl.data, dl.device, dl.dtype, dl.ndim, shape, strides,
                                  readonly ? DLPACK_FLAG_BITMASK_READ_ONLY : 0);
    return m ? take_managed(d, m) : NULL;
  }
  if (tp != &PyCapsule_Type) {
    PyObject *api = bridge_exchange_api_of(tp);
    if (api == NULL) return NULL;
    if (api != Py_None && d->take == TAKE_BRIDGE) { /* bridge.from_dlpack's import, torch's borrowed one too */
      PyObject *t = bridge_exchange_import(obj);
      return t != NULL || PyErr_Occurred() ? t : general(obj, args, nargsf, kwnames);
    } else if (api != Py_None) {
      got = bridge_exchange_managed(api, obj, &m);
    } else if (_PyType_Lookup(tp, str_arrow_array) != NULL ||
               (_PyType_Lookup(tp, str_arrow_stream) != NULL && _PyType_Lookup(tp, str_dlpack_method) == NULL)) {
      /* Arrow (pyarrow, nanoarrow, polars): a plain primitive array is read
       * here; bit-packed bools, nulls, chunks, nested types go to the general
       * path, which names the fix or the refusal */
      return arrow_to(d, obj, args, nargsf, kwnames);
    } else if (_PyType_Lookup(tp, str_dlpack_method) != NULL) {
      /* a jax array on the host: its buffer (the buffer protocol waits for the
       * array to be computed, as its __dlpack__ does; read-only), without
       * jax's Python __dlpack__ and __dlpack_device__; on a GPU it refuses
       * (CPU buffers only) and DLPack is asked instead */
      int jax = is_jax_array(tp);
      if (batching && !jax) /* asking may use a one-shot producer up: the general path asks it, once */
        return Py_NewRef(needs_general);
      PyObject *t = jax ? bridge_buffer_tensor(obj) : NULL;
      if (t == NULL && batching) {
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
        if (bridge_dlpack_ask_managed(obj, &raw, &versioned, &t) > 0) {
          /* a legacy tensor cannot say it may be written: read-only, as from_dlpack reads it */
          DLManagedTensorVersioned *vm = versioned ? (DLManagedTensorVersioned *)raw : NULL;
          const DLTensor *dl = vm ? &vm->dl_tensor : &((DLManagedTensor *)raw)->dl_tensor;
          uint64_t flags = vm ? vm->flags : DLPACK_FLAG_BITMASK_READ_ONLY;
          view_of_dl(dl, flags, &v);
          if (holds(d, &v) && (vm != NULL || d->take == TAKE_NUMPY))
            return vm ? take_managed(d, vm) : ndarray_over_managed(raw, 0, dl, flags);
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
      PyObject *out = tensor_to(d, (TensorObject *)t, t, args, nargsf, kwnames);
      Py_DECREF(t);
      return out;
    }
  }
  if (got <= 0) return got < 0 ? NULL : general(obj, args, nargsf, kwnames);
  if (d->take == TAKE_BRIDGE) return take_managed(d, m); /* bridge holds whatever it imports: no fix */
  view_of_dl(&m->dl_tensor, m->flags, &v);
  if (holds(d, &v)) return take_managed(d, m);
  PyObject *t = bridge_dlpack_take_exchanged(m); /* imported once: the general path fixes it */
  if (t == NULL) return NULL;
  PyObject *out = general(t, args, nargsf, kwnames);
  Py_DECREF(t);
  return out;
}

/* ------------------------------------------------------------ batches */

#define BATCH_MAX_DEPTH 32

/* A leaf kept as it is (a value, not memory: as torch's default_convert keeps it). */
static int is_value(PyObject *o) {
  PyTypeObject *tp = Py_TYPE(o);
  return o == Py_None || tp == &PyUnicode_Type || tp == &PyLong_Type || tp == &PyFloat_Type || tp == &PyBool_Type ||
         tp == &PyBytes_Type;
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

/* `obj` (a dict, list or tuple, nested) with each array leaf taken by the
 * fast path into `d` and every value kept; `needs_general` when a leaf or a
 * container is the general path's (bridge.crossing.units decides those).
 * `arrays` counts the leaves taken. `args` is the call's (args[0] replaced per leaf). */
static PyObject *batch_to(const destination *d, PyObject *obj, PyObject *const *args, Py_ssize_t nargsf,
                          PyObject *kwnames, int depth, Py_ssize_t *arrays, memo *seen) {
  PyTypeObject *tp = Py_TYPE(obj);
  int dict = tp == &PyDict_Type, list = tp == &PyList_Type, tuple = tp == &PyTuple_Type;
  if (!dict && !list && !tuple) {
    if (is_value(obj)) return Py_NewRef(obj);
    if (tp == &PyCapsule_Type) return Py_NewRef(needs_general); /* one-shot: read once, by the general path */
    PyObject *again = memo_get(seen, obj);
    if (again != NULL || PyErr_Occurred()) return again;
    PyObject *stack[4];
    Py_ssize_t n = PyVectorcall_NARGS(nargsf) + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    for (Py_ssize_t i = 0; i < n && i < 4; i++) stack[i] = args[i];
    stack[0] = obj;
    PyObject *out = convert_to(d, stack, nargsf, kwnames);
    if (out != NULL && out != needs_general) {
      ++*arrays;
      if (memo_put(seen, obj, out) < 0) Py_CLEAR(out);
    }
    return out;
  }
  if (depth >= BATCH_MAX_DEPTH) return Py_NewRef(needs_general);
  Py_ssize_t n = dict ? PyDict_GET_SIZE(obj) : Py_SIZE(obj);
  PyObject *out = dict ? PyDict_New() : list ? PyList_New(n) : PyTuple_New(n);
  if (out == NULL) return NULL;
  Py_ssize_t pos = 0, i = 0;
  PyObject *key, *value;
  while (dict ? PyDict_Next(obj, &pos, &key, &value) : i < n) {
    PyObject *leaf = dict ? value : list ? PyList_GET_ITEM(obj, i) : PyTuple_GET_ITEM(obj, i);
    Py_INCREF(leaf); /* a list may change under a leaf's import (it runs Python) */
    if (dict) Py_INCREF(key);
    PyObject *r = batch_to(d, leaf, args, nargsf, kwnames, depth + 1, arrays, seen);
    Py_DECREF(leaf);
    if (r == NULL || r == needs_general) {
      if (dict) Py_DECREF(key);
      Py_DECREF(out);
      return r;
    }
    if (dict) {
      int rc = PyDict_SetItem(out, key, r);
      Py_DECREF(key);
      Py_DECREF(r);
      if (rc < 0) {
        Py_DECREF(out);
        return NULL;
      }
      if (PyDict_GET_SIZE(obj) != n) { /* changed while its leaves were imported */
        Py_DECREF(out);
        return Py_NewRef(needs_general);
      }
    } else if (list) {
      if (i >= PyList_GET_SIZE(obj)) { /* shrunk meanwhile */
        Py_DECREF(r);
        Py_DECREF(out);
        return Py_NewRef(needs_general);
      }
      PyList_SET_ITEM(out, i, r);
    } else {
      PyTuple_SET_ITEM(out, i, r);
    }
    i++;
  }
  return out;
}

/* A batch into `d`: all on the fast path, or (any leaf it does not finish, no
 * array at all) all on the general path. */
static PyObject *batch_call(const destination *d, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  Py_ssize_t arrays = 0;
  memo seen = {0};
  int was = batching;
  batching = 1;
  PyObject *out = batch_to(d, args[0], args, nargsf, kwnames, 0, &arrays, &seen);
  batching = was;
  memo_clear(&seen);
  if (out != NULL && out != needs_general && arrays > 0) return out;
  if (out == NULL) return NULL;
  Py_DECREF(out);
  return general(args[0], args, nargsf, kwnames);
}

static PyObject *str_copy_kw, *str_readonly_kw, *str_copy_value;

/* convert(obj, to, *, copy=None, readonly="copy", dtype=None, device=None,
 * contiguous=False, writable=False, columns=None, stack=False) */
static PyObject *str_obj_kw, *str_to_kw, *kwnames_of[4]; /* kwnames_of: (), (copy,), (readonly,), both */
/* The keywords only the general path reads (what the caller asks besides the destination). */
static const char *const asks_names[] = {"dtype", "device", "contiguous", "writable", "columns", "stack"};
#define N_ASKS (sizeof asks_names / sizeof asks_names[0])
static PyObject *asks_kw[N_ASKS];

static int is_ask(PyObject *name) {
  for (size_t i = 0; i < N_ASKS; i++)
    if (name == asks_kw[i]) return 1;
  for (size_t i = 0; i < N_ASKS; i++)
    if (PyUnicode_Compare(name, asks_kw[i]) == 0) return 1;
  return 0;
}

static PyObject *convert_call(PyObject *mod, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  (void)mod;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  /* The signature's own checks, in Python's words (the general path has a
   * name of its own). obj and to may come as keywords too: then the call is
   * laid out again as (obj, to, copy=..., readonly=...). */
  if (nargs > 2)
    return PyErr_Format(PyExc_TypeError, "convert() takes 2 positional arguments but %zd were given", nargs);
  PyObject *pos[2] = {nargs > 0 ? args[0] : NULL, nargs > 1 ? args[1] : NULL}, *kw[2] = {NULL, NULL};
  int moved = 0, asks = 0;
  for (Py_ssize_t i = 0; kwnames && i < PyTuple_GET_SIZE(kwnames); i++) {
    PyObject *name = PyTuple_GET_ITEM(kwnames, i), *value = args[nargs + i];
    if (is_ask(name)) {
      asks = 1;
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
  if (asks) { /* the general path reads them (and binds the call itself) */
    PyObject *slow = bridge_upcall(UP_CONVERT_SLOW);
    return slow ? PyObject_Vectorcall(slow, args, nargsf, kwnames) : NULL;
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
    int plain = (PyUnicode_Compare(name, str_copy_kw) == 0 && value == Py_None) ||
                (PyUnicode_Compare(name, str_readonly_kw) == 0 && PyUnicode_Check(value) &&
                 (value == str_copy_value || PyUnicode_Compare(value, str_copy_value) == 0));
    if (!plain) return general(args[0], args, nargsf, kwnames);
  }
  PyObject *cap = PyDict_GetItemWithError(registry, args[1]); /* (unhashable: the general path explains) */
  if (cap == NULL && !PyErr_Occurred()) {
    /* A destination not seen before: registered (when it can be) and taken
     * on the fast path at once, so that the first call costs what a later
     * one does plus the registration, not a trip through the general path. */
    PyObject *reg = bridge_upcall(UP_CONVERT_REGISTER);
    PyObject *done = reg ? PyObject_CallOneArg(reg, args[1]) : NULL;
    Py_XDECREF(done);
    cap = done != NULL ? PyDict_GetItemWithError(registry, args[1]) : NULL;
  }
  if (cap == NULL || cap == Py_None) {
    PyErr_Clear();
    return general(args[0], args, nargsf, kwnames);
  }
  /* Held for the call: torch's probes release the GIL, and another thread
   * may empty the registry meanwhile. */
  Py_INCREF(cap);
  const destination *d = (const destination *)PyCapsule_GetPointer(cap, DEST_NAME);
  PyTypeObject *tp = Py_TYPE(args[0]);
  int batch = tp == &PyDict_Type || tp == &PyList_Type || tp == &PyTuple_Type;
  PyObject *out = d == NULL ? NULL : batch ? batch_call(d, args, nargsf, kwnames) : convert_to(d, args, nargsf, kwnames);
  Py_DECREF(cap);
  return out;
}

/* convert() itself: a call made from inside a batch's leaf (a destination's
 * import that converts) is a call of its own, never part of the batch. */
static PyObject *py_convert(PyObject *mod, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) {
  int was = batching;
  batching = 0;
  PyObject *out = convert_call(mod, args, nargsf, kwnames);
  batching = was;
  return out;
}

/* ------------------------------------------------------------ registry */

/* The spec's keys, interned at init: a first call registers its
 * destination, and a lookup by C string would make and hash a str each time. */
enum { K_STRIDES, K_NEGATIVE, K_ZERO, K_BYTE_OFFSET, K_ZERO_D, K_MAX_NDIM, K_CONSUMER, K_ALIGNMENT, K_ND_BOOL,
       K_DTYPES, K_ELEMENT_ALIGNED, K_ZERO_WIDTH, K_DEVICES, K_DTYPE_VIEWS, K_COUNT };
static const char *const spec_names[K_COUNT] = {"strides",   "negative", "zero",      "byte_offset",
                                                "zero_d",    "max_ndim", "consumer",  "alignment",
                                                "nd_bool",   "dtypes",   "element_aligned",
                                                "zero_width", "devices", "dtype_views"};
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
  if (PyDict_GET_SIZE(registry) >= 256) PyDict_Clear(registry); /* bound it: `to` may be made per call */
  if (PyDict_SetItem(registry, to, record) < 0) return NULL;
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
      flag(spec, K_ND_BOOL, &d->nd_bool) < 0 || flag(spec, K_ZERO_WIDTH, &d->zero_width) < 0)
    goto fail;
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
  if (cap == NULL) free(d);
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
  PyDict_Clear(registry);
  Py_RETURN_NONE;
}

static PyObject *py_convert_registered(PyObject *mod, PyObject *to) {
  (void)mod;
  int rc = PyDict_Contains(registry, to);
  if (rc < 0) {
    PyErr_Clear();
    rc = 0;
  }
  return PyBool_FromLong(rc);
}

static PyMethodDef crossing_functions[] = {
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

int bridge_crossing_init(PyObject *mod) {
  if (!(registry = PyDict_New()) || !(str_copy_kw = PyUnicode_InternFromString("copy")) ||
      !(str_obj_kw = PyUnicode_InternFromString("obj")) || !(str_to_kw = PyUnicode_InternFromString("to")) ||
      !(str_dlpack_method = PyUnicode_InternFromString("__dlpack__")) ||
      !(str_arrow_array = PyUnicode_InternFromString("__arrow_c_array__")) ||
      !(str_arrow_stream = PyUnicode_InternFromString("__arrow_c_stream__")) ||
      !(str_readonly_kw = PyUnicode_InternFromString("readonly")) ||
      !(str_copy_value = PyUnicode_InternFromString("copy")))
    return -1;
  for (int i = 0; i < K_COUNT; i++)
    if (!(spec_keys[i] = PyUnicode_InternFromString(spec_names[i]))) return -1;
  for (size_t i = 0; i < N_ASKS; i++)
    if (!(asks_kw[i] = PyUnicode_InternFromString(asks_names[i]))) return -1;
  if (!(needs_general = PyCapsule_New(&needs_general, "bridge.convert.needs_general", NULL))) return -1;
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
  if (!(kwnames_of[1] = PyTuple_Pack(1, str_copy_kw)) || !(kwnames_of[2] = PyTuple_Pack(1, str_readonly_kw)) ||
      !(kwnames_of[3] = PyTuple_Pack(2, str_copy_kw, str_readonly_kw)))
    return -1;
  return PyModule_AddFunctions(mod, crossing_functions);
}
