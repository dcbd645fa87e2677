/* The C functions cffi sees (read by cffi's cdef parser after dlpack.h and
 * arrow_c_data.h). Everything else is CPython code behind bridge_init: cffi
 * cannot pass Python objects, so the core's objects and functions live in
 * the modules bridge._C and bridge._drivers that bridge_init creates. */

#define BRIDGE_ALIGNMENT 64
#define BRIDGE_MAX_NDIM 64
/* The largest byte count of a storage: int64 in DLPack and Arrow, Py_ssize_t
 * in buffers (2**63 - 1). */
#define BRIDGE_MAX_NBYTES 9223372036854775807

/* The device table (cdefs/core/devices.c), the one description of a device
 * kind. bridge_device_name: bridge's name of a DLPack device type ("cuda"),
 * NULL for a type bridge does not know. bridge_device_type_at: the i-th
 * known DLPack device type, 0 past the last. bridge_host_accessible: 1 when
 * the host can read and write memory of that type (CPU, CUDA host, ROCm
 * host, CUDA managed, TPU host). bridge_device_to_arrow / _from_arrow: the
 * Arrow C Device Interface type bridge exchanges a DLPack type as, and back;
 * 0 for none. bridge_device_copyable: 1 when bridge can copy memory of type
 * `from` into new memory of type `to` (its CUDA copy engine: one side CUDA,
 * the other CUDA or host-readable; copies within host memory are the copy
 * kernel's, not a move between devices). */
const char *bridge_device_name(int dev_type);
int bridge_device_type_at(int i);
int bridge_host_accessible(int dev_type);
int bridge_device_to_arrow(int dev_type);
int bridge_device_from_arrow(int arrow_type);
int bridge_device_copyable(int from, int to);

/* Allocate nbytes aligned to BRIDGE_ALIGNMENT; zero-filled when zeroed != 0.
 * Returns NULL when out of memory. Never returns NULL for nbytes == 0. */
void *bridge_aligned_alloc(size_t nbytes, int zeroed);

/* Free a pointer from bridge_aligned_alloc; NULL is ignored. */
void bridge_aligned_free(void *ptr);

/* Create the modules bridge._C and bridge._drivers in sys.modules (once;
 * later calls do nothing). Takes the GIL itself. Returns 0, or -1 with the
 * error printed. Called by bridge/core/native.py. */
int bridge_init(void);
