/* C half of dlpack-bridge: memory helpers, and later the DLPack deleters and
 * capsule destructors, which must run without Python's help. */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dlpack.h"
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
  return (void *)aligned;
}

void bridge_aligned_free(void *ptr) {
  if (ptr != NULL) free(((void **)ptr)[-1]);
}
