/* Functions implemented in cdefs/bridge.c. Read by cffi's cdef parser after
 * dlpack.h, and included by the generated module and by bridge.c. */

#define BRIDGE_ALIGNMENT 64
#define BRIDGE_MAX_NDIM 64

/* Allocate nbytes aligned to BRIDGE_ALIGNMENT; zero-filled when zeroed != 0.
 * Returns NULL when out of memory. Never returns NULL for nbytes == 0. */
void *bridge_aligned_alloc(size_t nbytes, int zeroed);

/* Free a pointer from bridge_aligned_alloc; NULL is ignored. */
void bridge_aligned_free(void *ptr);

/* Install the CPython fast paths (export, import, the DLPack C exchange API
 * capsule, test helpers) into the dict whose address (CPython's id()) is
 * namespace_dict. Takes the GIL itself. Returns 0, or -1 with the error
 * printed. Called once, by bridge/_capi.py. */
int bridge_install(uintptr_t namespace_dict);

/* Counters, for leak and exactly-once tests: out[0] DLPack exports made,
 * out[1] export deleters run, out[2] imports, out[3] imported deleters run
 * (guards released), out[4] test deleter calls, out[5] Arrow array nodes
 * exported, out[6] of them released, out[7] Arrow imports (guards made),
 * out[8] Arrow import guards released. */
void bridge_stats(uint64_t *out);

/* Test helpers: deleters that only count their calls (the struct is owned by
 * the test), and a way to run any deleter on a new native thread that has no
 * Python thread state. */
void bridge_test_deleter(DLManagedTensor *self);
void bridge_test_deleter_versioned(DLManagedTensorVersioned *self);
int bridge_call_deleter_in_thread(void *managed, int versioned);
