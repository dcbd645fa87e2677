/* A destination of bridge.convert, as data: the record of what it holds as
 * it is (made by bridge.crossing.convert from the capability table,
 * registered in cdefs/crossing/destinations.c) and the one judgement of it
 * (judge), which the fast path (cdefs/crossing/convert.c) and the general
 * path (through _C.convert_judge) both take. */
#ifndef BRIDGE_CROSSING_DESTINATION_H
#define BRIDGE_CROSSING_DESTINATION_H

#include "interop/interop.h"

#include <stdint.h>

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
  J_NOT_JUDGED = 1 << 29,    /* not judged here: device memory, sub-byte or multi-lane values (the general path's) */
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
  PyTypeObject *own;        /* the type it returns (NULL: unknown): a source of it held as it is is returned itself */
  int own_subclasses;       /* a subclass of `own` is its own too (torch.as_tensor keeps a Parameter) */
} destination;

/* Whether `obj` is the destination's own object: a same-library call, which
 * returns it itself when the judgement holds it as it is (the library's own
 * identity: np.asarray(a), torch.as_tensor(t), jnp.asarray(x), pa.array(a)). */
static inline int is_own(const destination *d, PyObject *obj) {
  PyTypeObject *own = d->own;
  return own != NULL && (Py_TYPE(obj) == own || (d->own_subclasses && PyType_IsSubtype(Py_TYPE(obj), own)));
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

static inline uint32_t dtype_key(DLDataType t) { return (uint32_t)t.code | (uint32_t)t.bits << 8 | (uint32_t)t.lanes << 16; }

static inline int dtype_index(const uint32_t *keys, int n, uint32_t key) {
  int i = 0;
  while (i < n && keys[i] != key) i++;
  return i;
}

/* Every reason `d` does not hold `v` as it is (J_*), 0 for none: the one
 * judgement of a destination. `v` has strides (row-major ones filled in). */
/* Inlined: the fast path (holds) pays no call, and its offset_counts is a constant. */
static inline __attribute__((always_inline)) uint32_t judge(const destination *d, const view *v, int offset_counts) {
  BUMP(STAT_CONVERT_JUDGEMENTS);
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

static const char DEST_NAME[] = "bridge.convert.destination";

/* What the fast path reads of a bridge tensor. */
static inline void view_of_tensor(TensorObject *t, view *v) {
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

/* `to` -> capsule of a destination, or None (the general path's): the
 * registry (cdefs/crossing/destinations.c). */
extern PyObject *bridge_convert_registry;
/* Bumped at every change of the registry: what a lookup remembered is stale once it moves. */
extern uint64_t bridge_convert_registry_gen;

int bridge_destinations_init(PyObject *mod);

#endif
