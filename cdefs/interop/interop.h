/* What the interop files share and the core never needs: the DLPack export
 * and import entry points, capsule names, stream and device rules, and the
 * CUDA driver calls. Included by the files of cdefs/interop/, the test
 * drivers and module.c; never by cdefs/core/ (tests/test_c_layers.py checks
 * that). Every function here expects the GIL to be held. */

#ifndef BRIDGE_INTEROP_H
#define BRIDGE_INTEROP_H

#include "core/core.h"

/* Module-init hooks of the protocol files: each adds its functions to `mod`
 * (called by module.c). */
int bridge_dlpack_export_init(PyObject *mod);
int bridge_dlpack_import_init(PyObject *mod);
int bridge_exchange_api_init(PyObject *mod);
int bridge_arrow_export_init(PyObject *mod);
int bridge_arrow_import_init(PyObject *mod);
int bridge_numpy_init(PyObject *mod);
int bridge_cuda_init(PyObject *mod);

/* CUDA (cuda.c; BufferError without a driver). Streams are DLPack's integers. */
int bridge_cuda_order(int dev, uintptr_t producer, uintptr_t consumer);
int bridge_cuda_synchronize(int dev, uintptr_t stream);
int bridge_cuda_wait_event(int dev, void *event_ptr, uintptr_t stream);
/* cuda.core's CUDA stream protocol: 1 with *handle when obj has __cuda_stream__
 * answering (0, address) (address 0, the default stream, gives 1: the legacy
 * default, as DLPack numbers it); 0 when obj has no __cuda_stream__; -1 with
 * TypeError/ValueError for a malformed answer or another version. */
int bridge_cuda_stream_protocol(PyObject *obj, long long *handle);
/* dst[...] = src (broadcast; one dtype; each side CUDA or host memory, one of
 * them CUDA) by the copy engine, the one way bridge copies CUDA memory;
 * `exc` for a missing driver or a failed driver call. */
int bridge_cuda_copy(TensorObject *dst, TensorObject *src, PyObject *exc);
/* A copy of t on (to_type, to_id), CPU or CUDA, by the copy engine (the
 * view's byte span in one call, strides kept; BufferError). */
PyObject *bridge_cuda_transfer(TensorObject *t, int to_type, int to_id);

/* An ndarray (exactly numpy.ndarray, read from its struct) as a DLTensor:
 * 1 with *out, its shape and strides (in elements) in the arrays given
 * (BRIDGE_MAX_NDIM long) and *readonly; 0 when it is not one of NumPy's
 * built-in types in native byte order with strides of whole elements and
 * no empty dim (the general importers take those). No exception either way. */
int bridge_numpy_describe(PyObject *x, DLTensor *out, int64_t *shape, int64_t *strides, int *readonly);
/* A bridge tensor over obj's buffer (the buffer protocol: host memory,
 * read-only when the buffer is), holding the export until the last view
 * dies; NULL with the exporter's error, or a BufferError for a format or
 * layout with no tensor form (non-native byte order, records). */
PyObject *bridge_buffer_tensor(PyObject *obj);
/* A new ndarray over host memory (strides in elements) whose base is
 * `owner`, through NumPy's C API: the zero-copy way into NumPy without a
 * capsule. BufferError for a dtype NumPy has no built-in type for. */
PyObject *bridge_numpy_array_over(PyObject *owner, void *data, DLDataType dt, int ndim, const int64_t *shape,
                                  const int64_t *strides, int readonly);

/* Methods and slots the protocol files add to TensorBase (module.c hands
 * them to bridge_tensor_prepare_type). */
extern PyMethodDef bridge_dlpack_methods[], bridge_numpy_methods[], bridge_arrow_methods[];
extern PyGetSetDef bridge_numpy_getset[];
extern PyBufferProcs bridge_tensor_as_buffer;

/* Call a managed tensor's deleter, versioned or legacy (if it has one): the
 * one dispatch. No Python code of bridge's runs; any thread. */
void bridge_dlpack_call_deleter(void *managed, int versioned);
/* Run an imported managed tensor's deleter (error state kept). */
void bridge_dlpack_release(void *managed, int versioned);
/* DLPack export of a tensor as it is: one managed tensor (struct, shape and
 * strides in one block) holding its storage's owner. NULL with an exception. */
void *bridge_dlpack_build(TensorObject *t, uint64_t flags, int versioned);
PyObject *bridge_dlpack_wrap(void *managed, int versioned); /* the capsule */
extern PyCapsule_Destructor bridge_dlpack_capsule_destructor; /* for the test drivers */
/* Import: consume a capsule into a tensor; NULL with an exception. */
PyObject *bridge_dlpack_import_capsule(PyObject *capsule);
/* A copy of t on DLPack device (type, id): the one rule for which devices
 * bridge copies between (host <-> CUDA, by the copy engine); BufferError else. */
PyObject *bridge_dlpack_transfer(TensorObject *t, int type, int id);
/* A copy in new memory: the copy engine for CUDA, clone(contiguous_format) else. */
PyObject *bridge_dlpack_copy(TensorObject *t);
/* A device spec as DLPack's pair: a (type, id) tuple or a bridge.device, and
 * with `names` also whatever bridge.device() takes ("cpu", "cuda:1", a
 * torch.device, an object with __dlpack_device__). TypeError (ValueError for a
 * bad name) otherwise. */
int bridge_dl_device_of(PyObject *spec, int names, int *type, int *id);
/* The array API's stream argument for memory on (dev_type, dev_id), checked:
 * 0 for None, else -1, 1, 2 or a handle; TypeError/ValueError when wrong. */
int bridge_dlpack_stream_arg(PyObject *v, int dev_type, int dev_id, long long *out);
/* Ask x for its DLPack export (__dlpack__(max_version=(1, 3)), the consumer's
 * stream for CUDA unless the caller knows the memory is the host's: host=1, the legacy retry) and
 * import it: the one request. */
PyObject *bridge_dlpack_ask(PyObject *x, int host);
/* x.__dlpack__ asked as bridge_dlpack_ask asks it: 1 with *m (only when
 * `managed`: the caller can hand a managed tensor on), the producer's
 * host tensor with strides (versioned or not: *versioned), valid
 * (bridge.from_dlpack's checks) and the caller's to release
 * (bridge_dlpack_release) or hand on; 0 with *tensor, any other capsule
 * (or any capsule, when not `managed`) imported as from_dlpack imports it,
 * parsed once; -1 with an error. */
int bridge_dlpack_ask_managed(PyObject *x, int managed, void **m, int *versioned, PyObject **tensor);
/* An object whose death releases managed tensor `m` (bridge_dlpack_release),
 * to be the base of an array over its memory; NULL (m released) on error. */
PyObject *bridge_dlpack_owner(void *m, int versioned);
/* Import a managed tensor taken over (from a capsule or an exchange API). */
PyObject *bridge_dlpack_take(void *managed, int versioned);
/* The type's __dlpack_c_exchange_api__ capsule, or None (borrowed; cached
 * per type); NULL with an exception. */
PyObject *bridge_exchange_api_of(PyTypeObject *tp);
/* x's managed tensor through its exchange API (the capsule from
 * bridge_exchange_api_of), the producer's refusals applied (torch's) and CUDA
 * work ordered: 1 with *out (the caller owns it); 0 with no exception when
 * the caller should ask x.__dlpack__ instead; -1 with an exception. */
int bridge_exchange_managed(PyObject *api_capsule, PyObject *x, DLManagedTensorVersioned **out);
/* x imported as bridge.from_dlpack(x) imports it through its type's exchange
 * API: the tensor; NULL with an exception; NULL with none when x's type has
 * no API or it failed (the caller should ask x.__dlpack__). */
PyObject *bridge_exchange_import(PyObject *x);
/* A flag of bridge_dlpack_build's (not DLPack's, never exported): strides of
 * dims of one element handed over as row-major ones. */
#define BRIDGE_BUILD_UNIT_STRIDES (1ULL << 63)
/* bridge_dlpack_take of a tensor from bridge_exchange_managed (its CUDA
 * memory then ordered on the consumer's stream). */
PyObject *bridge_dlpack_take_exchanged(DLManagedTensorVersioned *m);
/* What a call into a foreign exchange API returned, checked as the C API's
 * contract has it: 0 for success with no Python exception set; else -1 with
 * an exception: the API's own, or a BufferError naming `side` ("producer",
 * "destination") and the function `fn` when it failed without one or
 * returned success with one set (that exception chained as the cause). */
int bridge_exchange_status(int rc, const char *side, const char *fn);
/* A versioned managed tensor over `data` (shape and strides copied into its
 * block) holding a strong reference to `owner` until its deleter runs (with
 * the GIL, exactly once, leaked at shutdown): what bridge hands out for
 * memory that is not a bridge storage's (an ndarray's). NULL with an exception. */
DLManagedTensorVersioned *bridge_dlpack_build_owned(PyObject *owner, void *data, DLDevice device, DLDataType dtype,
                                                    int ndim, const int64_t *shape, const int64_t *strides,
                                                    uint64_t flags);
extern const char BRIDGE_NAME_API[];
/* The table of the DLPack major version bridge knows in an exchange API's
 * version chain (the header, then header.prev_api, ...), or NULL when the
 * chain has none (the consumer then falls back to __dlpack__). */
DLPackExchangeAPI *bridge_exchange_api_known(DLPackExchangeAPIHeader *h);
/* The values of a plain primitive Arrow array (a number type, no nulls, host
 * memory), its structs moved into `guard`, which releases them once. */
typedef struct {
  PyObject *guard; /* owns the structs (a new reference) */
  char *data;      /* the first value */
  int64_t length, nbytes;
  DLDataType dtype;
} bridge_arrow_values;
/* obj's values through its __arrow_c_array__ or __arrow_c_stream__ (of one
 * chunk): 1 with *p; 0 when obj is not such an array (no exception; what it
 * handed over is released, and the general path reads obj again); -1 with an
 * exception. */
int bridge_arrow_values_of(PyObject *obj, bridge_arrow_values *p);
/* A table's columns (pyarrow Table or RecordBatch, polars DataFrame) through
 * one __arrow_c_stream__ of one batch of plain primitive columns: 1 with
 * *names (a tuple of str, new) and *cols (n of them, PyMem_Malloc'd, each
 * guard a new reference; the caller frees both); 0 when obj is not such a
 * table (nothing held, no exception); -1 with an exception. */
int bridge_arrow_columns_of(PyObject *obj, PyObject **names, bridge_arrow_values **cols, Py_ssize_t *n);
/* pyarrow's Table and RecordBatch, polars' DataFrame: tables whose every
 * __arrow_c_stream__() is a new stream over the same columns (what is read
 * for bridge_arrow_columns_of and not taken is read again by the general path). */
int bridge_arrow_is_table(PyTypeObject *tp);
/* A read-only 1-d bridge tensor over *p's values (taking p->guard). */
PyObject *bridge_arrow_values_tensor(bridge_arrow_values *p);
/* The Arrow PyCapsule interface's capsule names, written once (arrow_export.c). */
extern const char BRIDGE_NAME_ARROW_SCHEMA[], BRIDGE_NAME_ARROW_ARRAY[], BRIDGE_NAME_ARROW_DEVICE_ARRAY[],
    BRIDGE_NAME_ARROW_STREAM[], BRIDGE_NAME_ARROW_DEVICE_STREAM[];
/* DLPack's capsule names, written once (dlpack_export.c). */
extern const char BRIDGE_NAME_LEGACY[], BRIDGE_NAME_VERSIONED[], BRIDGE_NAME_USED_LEGACY[],
    BRIDGE_NAME_USED_VERSIONED[];

#endif /* BRIDGE_INTEROP_H */
