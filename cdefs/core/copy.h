/* What the copy kernel (copy.c) and the element conversions it applies
 * (casts.c) share. Nothing here touches Python objects: the kernel runs with
 * the GIL released, and on worker threads. */

#ifndef BRIDGE_COPY_H
#define BRIDGE_COPY_H

#include "core.h"

/* Convert n elements read contiguously at `src` into elements `dstride`
 * bytes apart at `dst`. Returns 1 when some element has no conversion that
 * is the same on every platform (a float out of an integer's range, NaN to
 * an integer): what was written is then meaningless, and the caller redoes
 * the whole copy with NumPy (whose result, and warning, it is). Else 0. */
typedef int (*bridge_conv_fn)(const char *src, char *dst, int64_t n, int64_t dstride);

/* A cast: one conversion, or two through a contiguous middle type (bfloat16
 * and float16 through float32, real to complex through the real part). */
typedef struct {
  bridge_conv_fn first, second; /* second NULL: first writes the destination */
  int mid_itemsize;             /* element size between first and second */
  int src_itemsize;
  int can_flag;                 /* a float-to-integer cast: may return 1 */
} bridge_cast;

/* The cast from `from` to `to` (different dtypes): 1 and *out filled, or 0
 * when C has none (complex to real, float8/6/4: NumPy and ml_dtypes do it). */
int bridge_cast_lookup(const DTypeObject *from, const DTypeObject *to, bridge_cast *out);

/* Run a cast over n contiguous source elements (the same contract as
 * bridge_conv_fn). */
int bridge_cast_run(const bridge_cast *c, const char *src, char *dst, int64_t n, int64_t dstride);

/* Move an nk x nj block of isz-byte elements (tiles.c): element (k, j) from
 * s + k*sK + j*sJ to d + k*dK + j*dJ, byte strides. bridge_move_tile picks
 * rows of memcpy, a SIMD transpose or a reversal where the strides allow;
 * bridge_move_elems is the element loop. The block's two sides must not
 * overlap. */
void bridge_move_tile(char *d, const char *s, int64_t nk, int64_t nj, int64_t dK, int64_t dJ, int64_t sK,
                      int64_t sJ, int isz);
void bridge_move_elems(char *d, const char *s, int64_t nk, int64_t nj, int64_t dK, int64_t dJ, int64_t sK,
                       int64_t sJ, int isz);

/* The copy threads (threads.c): how many a large copy may use (the setting,
 * else one per online CPU, at most 64); set it (0: one per CPU; returns the
 * setting before); read the setting; the parts a copy of nbytes is split
 * into (one per thread, none under 1 MiB). */
int bridge_copy_thread_count(void);
int bridge_copy_set_threads(int n);
int bridge_copy_threads_set(void);
int bridge_copy_parts(int64_t nbytes);

/* fn(arg, part) for every part in [0, parts), on the pool's workers and the
 * calling thread, which takes part 0; returns when all are done. A call
 * that finds another call's job running runs every part itself. fn touches
 * no Python object. */
typedef void (*bridge_pool_fn)(void *arg, int part);
void bridge_pool_run(bridge_pool_fn fn, void *arg, int parts);

#endif /* BRIDGE_COPY_H */
