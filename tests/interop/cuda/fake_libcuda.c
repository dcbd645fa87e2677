/* A fake CUDA driver for tests/interop/cuda/test_cuda_copy.py: the driver entry
 * points bridge's cdefs/interop/cuda.c loads, over host memory. "Device
 * memory" is host memory marked as such: blocks from cuMemAlloc_v2 and ranges
 * a test marks with fake_mark_device (a NumPy array standing in for a GPU
 * buffer). Copies happen at once, in the calling thread; streams and events
 * are only recorded.
 *
 * Like the real driver it refuses (CUDA_ERROR_INVALID_VALUE, logged as
 * "INVALID ...") what bridge must never ask: a 2-D copy whose pitch is less
 * than its row or more than the device's maximum pitch (env
 * FAKE_CUDA_MAX_PITCH, default 2**31 - 1), a device pointer of a copy that
 * is not inside one device range, a host pointer that is, a copy without a
 * current context. FAKE_CUDA_NO_DEVICE makes cuInit fail (a machine with a
 * driver and no GPU). Every call is appended to a text log, one line each, that
 * a test reads with fake_log() (ctypes); fake_fail(name, rc, skip) makes the
 * call `name` fail with `rc` after `skip` successful calls.
 *
 * Built by the tests with gcc into a temporary folder as libcuda.so.1 and
 * found through LD_LIBRARY_PATH by a subprocess: never by the test process
 * itself, whose fake device pointers (0xDEAD0000) must never be copied. */

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define OK 0
#define INVALID_VALUE 1
#define OUT_OF_MEMORY 2
#define INVALID_CONTEXT 201
#define ILLEGAL_ADDRESS 700
#define DEVICES 2

typedef struct {
  size_t srcXInBytes, srcY;
  int srcMemoryType;
  const void *srcHost;
  CUdeviceptr srcDevice;
  void *srcArray;
  size_t srcPitch;
  size_t dstXInBytes, dstY;
  int dstMemoryType;
  void *dstHost;
  CUdeviceptr dstDevice;
  void *dstArray;
  size_t dstPitch;
  size_t WidthInBytes, Height;
} CUDA_MEMCPY2D;

/* ------------------------------------------------------------ the log */

static char *log_buf;
static size_t log_len, log_cap;

static void say(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n > sizeof line - 2) n = sizeof line - 2;
  line[n++] = '\n';
  if (log_len + (size_t)n + 1 > log_cap) {
    size_t cap = (log_cap ? log_cap * 2 : 4096) + (size_t)n;
    char *b = realloc(log_buf, cap);
    if (b == NULL) return;
    log_buf = b;
    log_cap = cap;
  }
  memcpy(log_buf + log_len, line, (size_t)n);
  log_len += (size_t)n;
  log_buf[log_len] = 0;
}

const char *fake_log(void) { return log_buf ? log_buf : ""; }
void fake_reset(void) {
  log_len = 0;
  if (log_buf) log_buf[0] = 0;
}

/* ------------------------------------------------ injected failures */

static char fail_name[64];
static int fail_rc, fail_skip;

void fake_fail(const char *name, int rc, int skip) {
  snprintf(fail_name, sizeof fail_name, "%s", name ? name : "");
  fail_rc = rc;
  fail_skip = skip;
}

static int failing(const char *name) {
  if (fail_name[0] == 0 || strcmp(fail_name, name) != 0) return 0;
  if (fail_skip > 0) {
    fail_skip--;
    return 0;
  }
  fail_name[0] = 0;
  say("FAIL %s %d", name, fail_rc);
  return 1;
}
#define FAILS(name)                  \
  do {                               \
    if (failing(name)) return fail_rc; \
  } while (0)

/* ---------------------------------------------------- device ranges */

typedef struct {
  uintptr_t lo, hi;
  int dev, owned;
} range;
static range ranges[4096];
static int nranges;

static int add_range(uintptr_t p, size_t n, int dev, int owned) {
  if (nranges == (int)(sizeof ranges / sizeof ranges[0])) return -1;
  ranges[nranges++] = (range){p, p + n, dev, owned};
  return 0;
}

void fake_mark_device(uintptr_t p, size_t n, int dev) { add_range(p, n, dev, 0); }

void fake_unmark(uintptr_t p) {
  for (int i = 0; i < nranges; i++)
    if (ranges[i].lo == p && !ranges[i].owned) {
      ranges[i] = ranges[--nranges];
      return;
    }
}

/* The range holding [p, p + n), or NULL; *inside says whether any byte of it
 * touches device memory at all. */
static range *find(uintptr_t p, size_t n, int *touches) {
  *touches = 0;
  for (int i = 0; i < nranges; i++) {
    if (p < ranges[i].hi && p + n > ranges[i].lo) *touches = 1;
    if (p >= ranges[i].lo && p + n <= ranges[i].hi) return &ranges[i];
  }
  return NULL;
}

int fake_live_blocks(void) {
  int n = 0;
  for (int i = 0; i < nranges; i++) n += ranges[i].owned;
  return n;
}

/* ---------------------------------------------------- contexts */

static int ctx_stack[64], depth;

int fake_ctx_depth(void) { return depth; }

static int current(void) { return depth ? ctx_stack[depth - 1] : -1; }

CUresult cuInit(unsigned flags) {
  (void)flags;
  FAILS("cuInit");
  say("cuInit");
  return getenv("FAKE_CUDA_NO_DEVICE") ? 100 : OK; /* CUDA_ERROR_NO_DEVICE */
}

CUresult cuDeviceGet(int *d, int ordinal) {
  FAILS("cuDeviceGet");
  if (ordinal < 0 || ordinal >= DEVICES) return 101; /* CUDA_ERROR_INVALID_DEVICE */
  *d = ordinal;
  return OK;
}

CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  (void)dev;
  if (attr != 11) return INVALID_VALUE; /* only CU_DEVICE_ATTRIBUTE_MAX_PITCH */
  const char *env = getenv("FAKE_CUDA_MAX_PITCH");
  *v = env ? atoi(env) : 2147483647;
  return OK;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) {
  FAILS("cuDevicePrimaryCtxRetain");
  *ctx = (void *)(uintptr_t)(0x100 + dev);
  say("cuDevicePrimaryCtxRetain dev=%d", dev);
  return OK;
}

CUresult cuCtxPushCurrent_v2(void *ctx) {
  if (depth == 64) return INVALID_VALUE;
  ctx_stack[depth++] = (int)((uintptr_t)ctx - 0x100);
  return OK;
}

CUresult cuCtxPopCurrent_v2(void **ctx) {
  if (depth == 0) return INVALID_CONTEXT;
  depth--;
  if (ctx) *ctx = (void *)(uintptr_t)(0x100 + ctx_stack[depth]);
  return OK;
}

/* ---------------------------------------------------- events, streams */

static int next_event = 1;

CUresult cuEventCreate(void **ev, unsigned flags) {
  (void)flags;
  FAILS("cuEventCreate");
  *ev = (void *)(uintptr_t)next_event++;
  return OK;
}

CUresult cuEventRecord(void *ev, void *stream) {
  FAILS("cuEventRecord");
  say("cuEventRecord event=%lu stream=%lu dev=%d", (unsigned long)(uintptr_t)ev, (unsigned long)(uintptr_t)stream,
      current());
  return OK;
}

CUresult cuStreamWaitEvent(void *stream, void *ev, unsigned flags) {
  (void)flags;
  FAILS("cuStreamWaitEvent");
  say("cuStreamWaitEvent stream=%lu event=%lu dev=%d", (unsigned long)(uintptr_t)stream,
      (unsigned long)(uintptr_t)ev, current());
  return OK;
}

CUresult cuEventDestroy_v2(void *ev) {
  (void)ev;
  return OK;
}

CUresult cuStreamSynchronize(void *stream) {
  FAILS("cuStreamSynchronize");
  say("cuStreamSynchronize stream=%lu dev=%d", (unsigned long)(uintptr_t)stream, current());
  return OK;
}

/* ---------------------------------------------------- memory */

CUresult cuPointerGetAttribute(void *out, int attr, CUdeviceptr p) {
  int touches;
  range *r = find((uintptr_t)p, 1, &touches);
  if (attr != 9 || r == NULL) return INVALID_VALUE;
  *(int *)out = r->dev;
  return OK;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  FAILS("cuMemAlloc_v2");
  if (current() < 0) return INVALID_CONTEXT;
  void *b = malloc(n ? n : 1);
  if (b == NULL || add_range((uintptr_t)b, n, current(), 1) < 0) {
    free(b);
    return OUT_OF_MEMORY;
  }
  memset(b, 0xAB, n); /* no zeros by accident */
  *p = (CUdeviceptr)(uintptr_t)b;
  say("cuMemAlloc bytes=%zu dev=%d", n, current());
  return OK;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
  for (int i = 0; i < nranges; i++)
    if (ranges[i].lo == (uintptr_t)p && ranges[i].owned) {
      say("cuMemFree bytes=%zu dev=%d", (size_t)(ranges[i].hi - ranges[i].lo), ranges[i].dev);
      ranges[i] = ranges[--nranges];
      free((void *)(uintptr_t)p);
      return OK;
    }
  say("INVALID cuMemFree of an unknown pointer");
  return INVALID_VALUE;
}

/* Whether a copy's side of `n` bytes at p is the memory its type says. */
static int side_ok(uintptr_t p, size_t n, int device, const char *call) {
  int touches;
  range *r = find(p, n, &touches);
  if (device && (r == NULL || r->dev != current())) {
    say("INVALID %s: %zu device bytes at %#lx are not inside one block of the current device", call, n,
        (unsigned long)p);
    return 0;
  }
  if (!device && touches) {
    say("INVALID %s: host bytes at %#lx are device memory", call, (unsigned long)p);
    return 0;
  }
  return 1;
}

static CUresult linear(const char *call, uintptr_t dst, int dd, uintptr_t src, int sd, size_t n, void *stream) {
  FAILS(call);
  if (current() < 0) return INVALID_CONTEXT;
  if (!side_ok(dst, n, dd, call) || !side_ok(src, n, sd, call)) return INVALID_VALUE;
  if (dst < src + n && src < dst + n) {
    say("INVALID %s: the two sides overlap", call);
    return INVALID_VALUE;
  }
  memcpy((void *)dst, (const void *)src, n);
  say("%s bytes=%zu stream=%lu dev=%d", call, n, (unsigned long)(uintptr_t)stream, current());
  return OK;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream) {
  return linear("cuMemcpyHtoDAsync_v2", (uintptr_t)dst, 1, (uintptr_t)src, 0, n, stream);
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream) {
  return linear("cuMemcpyDtoHAsync_v2", (uintptr_t)dst, 0, (uintptr_t)src, 1, n, stream);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *stream) {
  return linear("cuMemcpyDtoDAsync_v2", (uintptr_t)dst, 1, (uintptr_t)src, 1, n, stream);
}

#ifndef FAKE_OMIT_2D
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *m, void *stream) {
  static const char *call = "cuMemcpy2DAsync_v2";
  FAILS(call);
  if (current() < 0) return INVALID_CONTEXT;
  const char *env = getenv("FAKE_CUDA_MAX_PITCH");
  size_t maxp = env ? (size_t)atol(env) : 2147483647u;
  int sd = m->srcMemoryType == 2, dd = m->dstMemoryType == 2;
  if ((m->srcMemoryType != 1 && !sd) || (m->dstMemoryType != 1 && !dd) || m->srcXInBytes || m->srcY ||
      m->dstXInBytes || m->dstY || m->srcArray || m->dstArray) {
    say("INVALID %s: only host and device pointers at offset 0 are faked", call);
    return INVALID_VALUE;
  }
  if (m->srcPitch < m->WidthInBytes || m->dstPitch < m->WidthInBytes || m->srcPitch > maxp || m->dstPitch > maxp) {
    say("INVALID %s: pitches %zu/%zu for rows of %zu bytes (max pitch %zu)", call, m->dstPitch, m->srcPitch,
        m->WidthInBytes, maxp);
    return INVALID_VALUE;
  }
  uintptr_t s = sd ? (uintptr_t)m->srcDevice : (uintptr_t)m->srcHost;
  uintptr_t d = dd ? (uintptr_t)m->dstDevice : (uintptr_t)m->dstHost;
  for (size_t r = 0; r < m->Height; r++)
    if (!side_ok(d + r * m->dstPitch, m->WidthInBytes, dd, call) ||
        !side_ok(s + r * m->srcPitch, m->WidthInBytes, sd, call))
      return INVALID_VALUE;
  for (size_t r = 0; r < m->Height; r++)
    memcpy((void *)(d + r * m->dstPitch), (const void *)(s + r * m->srcPitch), m->WidthInBytes);
  say("%s %s<-%s width=%zu height=%zu dpitch=%zu spitch=%zu stream=%lu dev=%d", call, dd ? "D" : "H", sd ? "D" : "H",
      m->WidthInBytes, m->Height, m->dstPitch, m->srcPitch, (unsigned long)(uintptr_t)stream, current());
  return OK;
}
#endif

/* ---------------------------------------------------- errors */

CUresult cuGetErrorName(CUresult rc, const char **s) {
  switch (rc) {
    case OK: *s = "CUDA_SUCCESS"; return OK;
    case INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case OUT_OF_MEMORY: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return OK;
    case INVALID_CONTEXT: *s = "CUDA_ERROR_INVALID_CONTEXT"; return OK;
    case ILLEGAL_ADDRESS: *s = "CUDA_ERROR_ILLEGAL_ADDRESS"; return OK;
  }
  return INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult rc, const char **s) {
  switch (rc) {
    case OK: *s = "no error"; return OK;
    case INVALID_VALUE: *s = "invalid argument"; return OK;
    case OUT_OF_MEMORY: *s = "out of memory"; return OK;
    case INVALID_CONTEXT: *s = "invalid device context"; return OK;
    case ILLEGAL_ADDRESS: *s = "an illegal memory access was encountered"; return OK;
  }
  return INVALID_VALUE;
}
