/* The C core's internal header: the three object structs (dtype, storage,
 * tensor), the one tensor constructor, and what the core files share. It
 * declares only what cdefs/core/ defines: the core never includes or calls
 * interop (tests/test_c_layers.py checks both). Included by every .c file;
 * cffi never reads it (cffi sees only bridge.h). Every function here expects
 * the GIL to be held.
 *
 * Reading order of cdefs/ (its folders mirror bridge/): dlpack.h,
 * arrow_c_data.h (the ABIs), bridge.h (the cffi surface), then core/: this
 * file, upcalls.h, upcalls.c (the one way C calls Python), memory.c, dtype.c, storage.c, geometry.c, tensor.c, views.h, views.c,
 * indexing.c, values.c (the core objects), copy.h, copy.c, casts.c (the one
 * strided-copy kernel and the conversions of casts); interop/: interop.h,
 * dlpack_export.c, dlpack_import.c, exchange_api.c, numpy.c, arrow_export.c,
 * arrow_import.c (one file per protocol direction), cuda.c (stream ordering
 * and copies through the CUDA driver); module.c (the modules bridge._C and
 * bridge._drivers: the one file that joins the layers); drivers/drivers.c
 * (test and conformance drivers, apart from production code). */

#ifndef BRIDGE_CORE_H
#define BRIDGE_CORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "dlpack.h"
#include "dlpack_next.h"
#include "arrow_c_data.h"
#include "bridge.h"
#include "upcalls.h"

/* Tensors of up to this many dims keep shape and strides inside the object. */
#define BRIDGE_INLINE_NDIM 6

/* ------------------------------------------------------------------ dtype */

enum { KIND_BOOL = 0, KIND_INT = 1, KIND_FLOAT = 2, KIND_COMPLEX = 3 };

typedef struct {
  PyObject_HEAD
  uint8_t code, bits;      /* DLPack DLDataType */
  uint8_t kind;            /* KIND_* */
  uint8_t is_signed;
  uint16_t lanes;          /* 1, or the values one element packs (float4_e2m1fn_x2: 2) */
  int itemsize;            /* bytes per element in memory (sub-byte types padded to 1) */
  char buffer_format[4];   /* PEP 3118 format, "" when the type has none */
  char typekind;           /* NumPy array-interface kind, 0 when NumPy has no native type */
  char arrow_format[4];    /* Arrow C data format of the zero-copy type, "" when none */
} DTypeObject;

extern PyTypeObject BridgeDType_Type;
/* The registered dtype for DLPack (code, bits, lanes), or NULL (borrowed).
 * lanes > 1 only names a packed sub-byte type (two float4 values per byte). */
DTypeObject *bridge_dtype_from_dlpack(int code, int bits, int lanes);

/* ---------------------------------------------------------------- storage */

/* How a storage lets go of an imported tensor it owns (the importer's
 * function: the core never calls interop code by name). */
typedef void (*bridge_release_fn)(void *managed, int versioned);

/* The one ownership record: [data, data + nbytes) on (dev_type, dev_id) stays
 * valid while `owner` lives. An exporter holds `owner`, never the storage
 * (resize_ and share_memory_ give a storage a new record; what was lent keeps
 * the old bytes alive). Changed only by bridge_storage_adopt. */
typedef struct {
  PyObject_HEAD
  char *data;
  int64_t nbytes;
  int32_t dev_type, dev_id;
  uint8_t readonly, resizable, shared;
  uint8_t managed_versioned;
  void *managed;       /* an imported DLPack tensor this storage owns: its deleter runs
                          exactly once, when the storage dies */
  bridge_release_fn release; /* runs `managed`'s deleter: given by the importer */
  PyObject *owner;     /* NULL when the storage owns its memory itself (an import);
                          Py_None only for 0 bytes */
  PyObject *device;    /* cached bridge.device, created on first use */
  PyObject *filename;  /* str for mapped files, else NULL */
  PyObject *weakreflist;
  uintptr_t stream;    /* device memory: the CUDA stream its last work was ordered on
                          (DLPack's integers; 0: nothing to wait for) */
} StorageObject;

extern PyTypeObject BridgeStorage_Type;
/* The Python subclass instances are made of (bridge.UntypedStorage). */
extern PyTypeObject *bridge_storage_class;

/* The object an exporter holds to keep the bytes valid: the owner, or the
 * storage itself when it owns an import (whose record never changes). */
static inline PyObject *bridge_storage_owner(StorageObject *s) {
  return s->owner != NULL ? s->owner : (PyObject *)s;
}
/* A new storage owning an imported DLPack tensor: `release(managed,
 * versioned)` runs once, when the storage dies; on failure it has run. */
StorageObject *bridge_storage_new_import(char *data, int64_t nbytes, int dev_type, int dev_id,
                                         void *managed, int versioned, int readonly,
                                         bridge_release_fn release);
/* The thread's consumer stream for device memory (DLPack's integers; 1, the
 * legacy default, until bridge.cuda_stream sets another): what imports pass
 * to producers, what from_memory stamps on device memory handed over. */
uintptr_t bridge_current_stream(void);
uintptr_t bridge_set_current_stream(uintptr_t stream); /* -> the previous one */
/* The one lending decision: may memory whose read-only bit is `readonly`
 * be lent, as it is, to a consumer of this kind, and how. Every exporter
 * asks it (DLPack capsules, the exchange API, the buffer protocol, NumPy's
 * interfaces, Arrow, __cuda_array_interface__, __jax_array__, convert's
 * destinations); changing the read-only rule is a change here. */
enum {
  BRIDGE_CONSUMER_FLAGGED,      /* says read-only itself: a versioned capsule's flag, NumPy's
                                   WRITEABLE, a buffer's readonly, the CUDA array interface's data[1] */
  BRIDGE_CONSUMER_IMMUTABLE,    /* never writes by its format's rules (Arrow's arrays) */
  BRIDGE_CONSUMER_NEVER_WRITES, /* cannot be told, and never writes (a legacy capsule to a
                                   destination that only reads) */
  BRIDGE_CONSUMER_UNFLAGGED,    /* cannot be told, and may write (a legacy capsule, a bare DLTensor) */
};
enum {
  BRIDGE_LEND_REFUSED = -1, /* read-only memory the consumer could write: the caller's BufferError */
  BRIDGE_LEND_WRITABLE = 0, /* lent writable */
  BRIDGE_LEND_READONLY = 1, /* lent read-only, and the consumer is told so */
  BRIDGE_LEND_ALIAS = 2,    /* lent through a writable alias: read-only memory to a consumer that only reads */
};
int bridge_lend(int readonly, int consumer);
/* bridge_lend of a storage's memory: its read-only bit read in one step. */
int bridge_storage_lend(const StorageObject *s, int consumer);
/* A new storage over foreign memory (the registered class). */
StorageObject *bridge_storage_new(char *data, int64_t nbytes, int dev_type, int dev_id,
                                  PyObject *owner, int readonly);
/* A new storage over fresh, 64-byte aligned host memory bridge allocates. */
StorageObject *bridge_storage_alloc(int64_t nbytes, int zeroed);
/* Replace a storage's ownership record (validates; the one place owners change). */
int bridge_storage_adopt(StorageObject *s, char *data, int64_t nbytes, int dev_type, int dev_id,
                         PyObject *owner, int readonly, int resizable, int shared,
                         PyObject *filename);
/* The storage's bridge.device object (new reference). */
PyObject *bridge_storage_device(StorageObject *s);

/* ----------------------------------------------------------------- tensor */

typedef struct {
  PyObject_HEAD
  StorageObject *storage;
  DTypeObject *dtype;
  int32_t ndim;
  uint8_t lent;            /* BRIDGE_LENT_*: dims lent to a C exchange API consumer */
  int64_t offset;          /* elements from the storage's start to element [0, ..., 0] */
  int64_t *shape, *strides; /* ndim each (elements), inline_dims or a heap block */
  int64_t lo, hi;          /* elements [lo, hi) reached, from the storage's start; lo == hi: none */
  PyObject *shape_tuple, *strides_tuple; /* cached Python tuples, or NULL */
  void *retired;           /* heap dim blocks lent before a geometry change (a list) */
  PyObject *weakreflist;
  int64_t inline_dims[2 * BRIDGE_INLINE_NDIM];
} TensorObject;

/* Dims lent by the exchange API's DLTensor peek are never rewritten or freed. */
#define BRIDGE_LENT_INLINE 1 /* the inline array was lent: it is never reused */
#define BRIDGE_LENT_HEAP 2   /* the current heap block is lent: retired, not freed */

extern PyTypeObject BridgeTensor_Type;
extern PyTypeObject *bridge_tensor_class; /* bridge.Tensor */

#define Tensor_Check(o) PyObject_TypeCheck((o), &BridgeTensor_Type)
#define Storage_Check(o) PyObject_TypeCheck((o), &BridgeStorage_Type)
#define DType_Check(o) PyObject_TypeCheck((o), &BridgeDType_Type)

/* How the constructor reports geometry outside the storage. */
enum {
  GEOM_USER,    /* user-given geometry (as_strided, set_, factories): ValueError; an
                   empty view's offset must lie inside the storage too */
  GEOM_DERIVED, /* a view of a view: RuntimeError (the storage shrank); empty views go anywhere */
  GEOM_IMPORT   /* foreign memory described exactly: BufferError */
};

/* The one tensor constructor: every tensor, from views, imports and
 * factories, is made here. Checks sizes (>= 0), that every value fits in
 * int64, and that the elements lie inside the storage in elements and
 * bytes (negative and zero strides included), with overflow checks. */
PyObject *bridge_tensor_new(StorageObject *storage, DTypeObject *dtype, int ndim,
                            const int64_t *shape, const int64_t *strides, int64_t offset,
                            int mode);
/* Repoint an existing tensor (set_ and the in-place view ops); same checks.
 * Dims lent to an exchange API consumer stay untouched and alive. */
int bridge_tensor_assign(TensorObject *t, StorageObject *storage, DTypeObject *dtype, int ndim,
                         const int64_t *shape, const int64_t *strides, int64_t offset, int mode);
/* 0 when the view lies inside the bytes its storage holds now; else -1 with
 * `exc` ("the storage was resized after the view was made"). */
int bridge_tensor_check_bounds(TensorObject *t, PyObject *exc);
/* Free a dying tensor's heap dims and the retired blocks kept for consumers. */
void bridge_tensor_free_dims(TensorObject *t);
/* Address of element [0, ..., 0]. An empty view reaches nothing and may sit
 * anywhere: its address is the storage's when the offset leaves the storage. */
static inline char *bridge_tensor_data(TensorObject *t) {
  int64_t off;
  if (__builtin_mul_overflow(t->offset, (int64_t)t->dtype->itemsize, &off) || off < 0 ||
      off > t->storage->nbytes)
    return t->storage->data;
  return t->storage->data + off;
}
/* The storage over foreign memory that spans exactly the elements a view
 * reaches, element [0, ..., 0] at `data` (strides in elements, negative
 * ones included): its start, size and the view's offset in it. An empty view
 * spans nothing at `data`. 0, or -1 (no exception set: the caller names the
 * rule) when an extent or address overflows. */
int bridge_foreign_span(uintptr_t data, int ndim, const int64_t *shape, const int64_t *strides,
                        int64_t itemsize, uintptr_t *start, int64_t *nbytes, int64_t *offset);
/* The stride rules, written once (geometry.c); Python calls them through the
 * _C functions of the same names (bridge/core/strides.py re-exports them).
 * Sizes are >= 0 in all of them. */
/* The elements [lo, hi) reached, counted from the storage's start ((offset,
 * offset) when empty); -1 (no exception) when that overflows int64. */
int bridge_view_extent(int ndim, const int64_t *shape, const int64_t *strides, int64_t offset,
                       int64_t *lo, int64_t *hi);
int64_t bridge_numel(const TensorObject *t);
/* C-contiguity (size-1 dims may have any stride; empty tensors are contiguous). */
int bridge_is_contiguous(int ndim, const int64_t *shape, const int64_t *strides);
/* Whether the elements tile [0, numel) exactly once in some dim order. */
int bridge_is_non_overlapping_and_dense(int ndim, const int64_t *shape, const int64_t *strides);
/* Row-major strides for shape (size-0/1 dims get the trailing product, as
 * torch); -1 (no exception) when a stride does not fit in int64. */
int bridge_contiguous_strides(int ndim, const int64_t *shape, int64_t *out);
/* The strides convert hands over, in place (the one rule; _C.unit_strides):
 * a dim of one element gets the row-major stride it would have after the
 * dims that follow it; an empty tensor all its row-major strides. */
void bridge_unit_strides(int ndim, const int64_t *shape, int64_t *strides);
/* Resolve the one -1 of shape so that it holds numel elements; ValueError. */
int bridge_infer_size(int n, int64_t *shape, int64_t numel);

/* Parse a Python sequence of ints into dims (TypeError naming `what` for a
 * non-int or a bool; ValueError past `max` dims or past int64); returns the
 * number of dims or -1. */
int bridge_parse_dims(PyObject *seq, int64_t *out, int max, const char *what);
/* The same rules over a call's positional arguments (f(2, 3)). */
int bridge_parse_dim_args(PyObject *const *args, Py_ssize_t n, int64_t *out, int max, const char *what);
/* Parse a shape (sizes >= 0) and, unless strides_obj is NULL, strides of the
 * same length; returns ndim or -1 (TypeError/ValueError). */
int bridge_parse_geometry(PyObject *shape_obj, PyObject *strides_obj, int64_t *shape,
                          int64_t *strides);
/* Parse one int that must fit in int64 (`what` names it in the error). */
int bridge_parse_int64(PyObject *v, int64_t *out, const char *what);
/* A tuple of Python ints (new reference, NULL with an exception). */
PyObject *bridge_dims_tuple(int n, const int64_t *v);
/* Wrap a possibly negative dim (IndexError, torch's message, when out of range). */
int bridge_wrap_dim(PyObject *dim_obj, int64_t dim, int ndim, int *out);

/* --------------------------------------------------------------- shared */

/* Pending-error helpers across Python versions. */
PyObject *bridge_fetch_error(void);       /* the raised exception (new ref) or NULL */
void bridge_restore_error(PyObject *exc); /* raise it again (steals) */

/* Entering Python from a foreign callback (deleters, Arrow releases, stream
 * callbacks), on any thread. bridge_py_enter returns 0 when Python must not be
 * touched: before initialisation, after shutdown, or while it finalises on a
 * thread without the GIL (taking the GIL then ends the thread inside the
 * callback). Otherwise 1, with the GIL held and any pending error put aside;
 * bridge_py_leave restores both. */
typedef struct {
  int held;
  PyGILState_STATE gil;
  PyObject *exc;
} bridge_py_entry;
int bridge_py_enter(bridge_py_entry *e);
void bridge_py_leave(bridge_py_entry *e);

/* Counters for leak and exactly-once tests (bridge._C.stats()). */
enum {
  STAT_EXPORTS, STAT_EXPORT_DELETERS, STAT_IMPORTS, STAT_IMPORT_RELEASES, STAT_TEST_DELETERS,
  STAT_ARROW_EXPORTS, STAT_ARROW_RELEASES, STAT_ARROW_IMPORTS, STAT_ARROW_IMPORT_RELEASES,
  STAT_API_EXPORTS, STAT_API_IMPORTS, STAT_COPY_THREADS, STAT_COPY_STAGED, STAT_COPY_TEMPORARIES,
  STAT_HOST_CACHE_HITS, STAT_CONVERT_READS, STAT_CONVERT_JUDGEMENTS, STAT_CONVERT_UPCALLS, STAT_COUNT
};
extern uint64_t bridge_stats_counters[STAT_COUNT];
#define BUMP(c) __atomic_add_fetch(&bridge_stats_counters[c], 1, __ATOMIC_RELAXED)

/* The host block cache (memory.c): set the limit in bytes (SIZE_MAX: leave
 * it) and return the one before; free every cached block and return their
 * bytes; the bytes cached now. Never wait on the GIL. */
size_t bridge_host_cache_limit(size_t limit);
size_t bridge_host_cache_empty(void);
size_t bridge_host_cache_bytes(void);
int bridge_memory_init(PyObject *mod);

/* The owner of memory bridge allocated: a capsule whose destructor frees
 * the block without releasing the GIL. */
PyObject *bridge_memory_new(int64_t nbytes, int zeroed, char **data);

/* The one strided-copy kernel (copy.c): src's elements into dst's, src
 * broadcast to dst's shape and cast to its dtype, overlap handled. 1 done, 0
 * a cast C leaves to NumPy (dst's contents then unspecified), -1 error. */
int bridge_copy_tensor(TensorObject *dst, TensorObject *src);
/* A row-major copy of host tensor t in fresh (64-byte aligned, writable)
 * memory: the one copy every fix of convert's makes. NULL with an exception. */
PyObject *bridge_tensor_rowmajor_copy(TensorObject *t);
/* The kernel's instruction set (0 element loops, 1 SSE2, 2 AVX2, -1 the
 * CPU's best; lowered to what the CPU has); returns the level before. For
 * tests (bridge._drivers.copy_simd). */
int bridge_copy_set_simd(int level);

/* Module-init hooks of the core files: each adds its functions to `mod`
 * (called by module.c, which joins the layers). */
int bridge_values_init(PyObject *mod);
int bridge_geometry_init(PyObject *mod);
int bridge_storage_init(PyObject *mod);
int bridge_indexing_init(PyObject *mod);
/* Contiguous bytes to copy: `nbytes` from `src` to `dst`. */
typedef struct {
  char *dst;
  const char *src;
  int64_t nbytes;
} bridge_span;

/* Copy n spans, none overlapping another's memory or its own, on several
 * threads when their bytes together are many (the copy kernel's threads).
 * Touches no Python object: may run without the GIL, the caller keeping
 * every block alive. */
void bridge_copy_spans(const bridge_span *spans, int n);

int bridge_copy_init(PyObject *mod);

/* Methods the core files add to TensorBase (assembled in tensor.c). */
extern PyMethodDef bridge_view_methods[], bridge_value_methods[];
extern PyGetSetDef bridge_view_getset[];
extern PyMappingMethods bridge_tensor_as_mapping;

/* Ready TensorBase's tables once, before PyType_Ready: the core's methods
 * and getters joined with those the caller hands in (NULL-terminated arrays
 * of tables: module.c passes the protocol files'), and the buffer slots. */
int bridge_tensor_prepare_type(PyMethodDef *const *methods, PyGetSetDef *const *getsets,
                               PyBufferProcs *as_buffer);

#endif /* BRIDGE_CORE_H */
