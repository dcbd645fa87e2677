/* Functions implemented in cdefs/bridge.c. Read by cffi's cdef parser after
 * dlpack.h, and included by the generated module and by bridge.c. */

#define BRIDGE_ALIGNMENT 64

/* Allocate nbytes aligned to BRIDGE_ALIGNMENT; zero-filled when zeroed != 0.
 * Returns NULL when out of memory. Never returns NULL for nbytes == 0. */
void *bridge_aligned_alloc(size_t nbytes, int zeroed);

/* Free a pointer from bridge_aligned_alloc; NULL is ignored. */
void bridge_aligned_free(void *ptr);
