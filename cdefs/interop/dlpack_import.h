/* What the DLPack importer (dlpack_import.c) and its C exchange API side
 * (exchange_import.c) share: the one parse of a managed tensor, and a
 * producer type's record. Internal to cdefs/interop. */

#ifndef BRIDGE_DLPACK_IMPORT_H
#define BRIDGE_DLPACK_IMPORT_H

#include "interop.h"

/* What bridge_dlpack_parse read of a managed tensor, checked. */
typedef struct {
  DTypeObject *dtype;
  int ndim, dev_type, dev_id, readonly, packed_bits;
  int64_t shape[BRIDGE_MAX_NDIM], strides[BRIDGE_MAX_NDIM], nbytes, offset;
  uintptr_t start;
} parsed_t;

/* Validate managed tensor `p` (versioned or legacy) with overflow-checked
 * arithmetic: 0 and *out filled, or -1 with BufferError. unpack: packed
 * sub-byte values are to be unpacked (a copy), not viewed. */
int bridge_dlpack_parse(void *p, int versioned, int unpack, parsed_t *out);
/* A tensor over a managed tensor already parsed into *pp (its storage owns
 * it; the deleter runs once, when it dies). *copied (may be NULL): 1 when
 * packed values were unpacked into new memory. */
PyObject *bridge_dlpack_take_parsed(void *managed, int versioned, const parsed_t *pp, int *copied);

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

/* tp's record, made on its first import (-1 with an exception). */
int bridge_type_record_of(PyTypeObject *tp, type_record *out);
/* x through its type's C exchange API (r->api a capsule): a new tensor, or
 * NULL with an exception, or NULL without one when x has __dlpack__ to ask
 * instead. */
PyObject *bridge_import_exchange(const type_record *r, PyObject *x);
/* -1 with BufferError when x is a torch tensor torch's own export refuses
 * (requires_grad, conjugate or negative bit); else 0. */
int bridge_refuse_torch_export(const type_record *r, PyObject *x);
/* The exchange side's interned names and cache; -1 on failure. */
int bridge_exchange_import_init(void);

#endif /* BRIDGE_DLPACK_IMPORT_H */
