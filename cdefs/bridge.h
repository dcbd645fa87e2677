/* The C functions cffi sees (read by cffi's cdef parser after dlpack.h and
 * arrow_c_data.h). Everything else is CPython code behind bridge_init: cffi
 * cannot pass Python objects, so the core's objects and functions live in
 * the modules bridge._C and bridge._drivers that bridge_init creates. */

#define BRIDGE_ALIGNMENT 64
#define BRIDGE_MAX_NDIM 64
/* The largest byte count of a storage: int64 in DLPack and Arrow, Py_ssize_t
 * in buffers (2**63 - 1). */
#define BRIDGE_MAX_NBYTES 9223372036854775807

/* 1 when the host can read and write memory of this DLPack device type
 * (CPU, CUDA host, ROCm host and CUDA managed memory): the one list. */
int bridge_host_accessible(int dev_type);

/* Allocate nbytes aligned to BRIDGE_ALIGNMENT; zero-filled when zeroed != 0.
 * Returns NULL when out of memory. Never returns NULL for nbytes == 0. */
void *bridge_aligned_alloc(size_t nbytes, int zeroed);

/* Free a pointer from bridge_aligned_alloc; NULL is ignored. */
void bridge_aligned_free(void *ptr);

/* Create the modules bridge._C and bridge._drivers in sys.modules (once;
 * later calls do nothing). Takes the GIL itself. Returns 0, or -1 with the
 * error printed. Called by bridge/core/native.py. */
int bridge_init(void);
