/* Memory: 64-byte aligned blocks and their owner object, the counters, and
 * the guards every foreign callback runs under. */

#include "core.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* ---------------------------------------------------------------- blocks */

#define BRIDGE_HUGEPAGE_THRESHOLD ((size_t)4 << 20)

/* Below each aligned block lie two words: the raw pointer malloc returned
 * ([-1]) and that raw block's size ([-2]), so the zeroed path can use calloc
 * (lazily zeroed pages for large blocks) instead of posix_memalign and a
 * memset that touches every page, and a freed block can be cached whole. */
#define BLOCK_HEADER (2 * sizeof(void *))

/* ---------------------------------------------------------- block cache
 *
 * Freed large blocks are kept for the next allocation of about their size.
 * glibc gives the top of its heap back to the kernel once the free space
 * there passes its trim threshold (twice the largest block it has mmap'ed:
 * 256 KiB at first), and the blocks of a converted batch or table are freed
 * together, exactly there: the next step faults every page in again. A
 * pa.Table of 8 float64 columns x 100,000 rows copied into torch faulted
 * 1,531 pages per call (4.9 ms against 0.45 ms without). A training loop
 * moves the same shapes step after step: each step gets the last step's
 * blocks. Bounded by bytes (BRIDGE_HOST_CACHE, 256 MiB by default, 0 turns
 * it off) and by slots; bridge.empty_cache() gives everything back.
 *
 * The lock is only ever tried: a thread that finds it taken allocates or
 * frees as if there were no cache, so no thread waits (a deleter may run on
 * any thread, without the GIL), and a child forked while another thread held
 * it simply never uses the cache. */

#define CACHE_SLOTS 32
#define CACHE_MIN_BYTES ((size_t)128 << 10) /* glibc's first mmap threshold: smaller blocks it keeps itself */
#define CACHE_DEFAULT_LIMIT ((size_t)256 << 20)
#define CACHE_UNSET SIZE_MAX

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BRIDGE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define BRIDGE_ASAN 1
#endif
#ifdef BRIDGE_ASAN /* a cached block stays poisoned: a use after bridge freed it is still caught */
#include <sanitizer/asan_interface.h>
#define CACHE_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define CACHE_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define CACHE_POISON(p, n) ((void)(p), (void)(n))
#define CACHE_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

typedef struct {
  void *raw;
  size_t size;
} cached_block;

static cached_block cache[CACHE_SLOTS]; /* oldest first */
static int cache_n;
static size_t cache_bytes, cache_limit;
static char cache_lock;

static int cache_try_lock(void) { return !__atomic_test_and_set(&cache_lock, __ATOMIC_ACQUIRE); }
static void cache_unlock(void) { __atomic_clear(&cache_lock, __ATOMIC_RELEASE); }

/* BRIDGE_HOST_CACHE: decimal digits only (no sign, no space), with an
 * optional k/m/g suffix (powers of 1024); anything else, and a number past
 * SIZE_MAX, keeps the default (strtoull would take "-1" as 2**64-1: no bound).
 * Read once per process, the first time the cache is asked its limit. */
static size_t cache_limit_from_env(void) {
  const char *e = getenv("BRIDGE_HOST_CACHE");
  if (e == NULL || *e == '\0') return CACHE_DEFAULT_LIMIT;
  size_t v = 0;
  const char *c = e;
  for (; *c >= '0' && *c <= '9'; c++) {
    size_t digit = (size_t)(*c - '0');
    if (v > (SIZE_MAX - digit) / 10) return CACHE_DEFAULT_LIMIT;
    v = v * 10 + digit;
  }
  int shift = 0;
  if (*c == 'k' || *c == 'K') shift = 10;
  else if (*c == 'm' || *c == 'M') shift = 20;
  else if (*c == 'g' || *c == 'G') shift = 30;
  if (shift) c++;
  if (c == e || *c != '\0' || (shift && (c - 1 == e || v > (SIZE_MAX >> shift)))) return CACHE_DEFAULT_LIMIT;
  return v << shift;
}

static int cache_limit_read; /* whether cache_limit holds the environment's (or a caller's) bound */

static size_t cache_limit_now(void) {
  if (!cache_limit_read) {
    cache_limit = cache_limit_from_env();
    cache_limit_read = 1;
  }
  return cache_limit;
}

/* The smallest cached block of `need` raw bytes that wastes at most a
 * quarter of them, taken out of the cache; NULL when none (or the lock is
 * taken). */
static void *cache_take(size_t need, size_t *size) {
  if (need < CACHE_MIN_BYTES || !cache_try_lock()) return NULL;
  int best = -1;
  for (int i = 0; i < cache_n; i++)
    if (cache[i].size >= need && cache[i].size - need <= need / 4 && (best < 0 || cache[i].size < cache[best].size))
      best = i;
  void *raw = NULL;
  if (best >= 0) {
    raw = cache[best].raw;
    *size = cache[best].size;
    cache_bytes -= *size;
    memmove(&cache[best], &cache[best + 1], (size_t)(cache_n - best - 1) * sizeof(cached_block));
    cache_n--;
  }
  cache_unlock();
  if (raw != NULL) {
    CACHE_UNPOISON(raw, *size);
    BUMP(STAT_HOST_CACHE_HITS);
  }
  return raw;
}

/* Give blocks taken out of the cache back to malloc (lock not held). */
static void free_blocks(const cached_block *b, int k) {
  for (int i = 0; i < k; i++) {
    CACHE_UNPOISON(b[i].raw, b[i].size);
    free(b[i].raw);
  }
}

/* Evict the oldest blocks until `room` more bytes fit under the limit in a
 * free slot (lock held); the evicted go into out[] for the caller to free
 * after unlocking. Returns how many. */
static int cache_evict(size_t room, cached_block *out) {
  int k = 0;
  size_t limit = cache_limit_now();
  while (cache_n > 0 && (cache_n == CACHE_SLOTS || cache_bytes + room > limit)) {
    out[k++] = cache[0];
    cache_bytes -= cache[0].size;
    memmove(&cache[0], &cache[1], (size_t)(cache_n - 1) * sizeof(cached_block));
    cache_n--;
  }
  return k;
}

/* Keep a freed raw block; 0 when it is not kept (the caller frees it). */
static int cache_put(void *raw, size_t size) {
  if (size < CACHE_MIN_BYTES) return 0;
  /* Poisoned before another thread can see it: poisoned after the unlock, a
   * block another thread had taken (and unpoisoned) meanwhile was poisoned
   * under it, and ASan reported its use. */
  CACHE_POISON(raw, size);
  if (!cache_try_lock()) {
    CACHE_UNPOISON(raw, size);
    return 0;
  }
  cached_block evicted[CACHE_SLOTS];
  int k = 0, kept = 0;
  if (size <= cache_limit_now()) {
    k = cache_evict(size, evicted);
    cache[cache_n++] = (cached_block){raw, size};
    cache_bytes += size;
    kept = 1;
  }
  cache_unlock();
  if (!kept) CACHE_UNPOISON(raw, size);
  free_blocks(evicted, k);
  return kept;
}

/* Take the lock for an owner's call (these wait: they are rare and short,
 * and the lock is only ever held for a few loads and stores). */
static void cache_lock_wait(void) {
  while (!cache_try_lock()) sched_yield();
}

/* fork() takes the lock first, so a child never inherits it held by a thread
 * it does not have (bridge.empty_cache() in such a child waited forever); the
 * child keeps the parent's cached blocks, which are its own copies. */
static void cache_prepare(void) { cache_lock_wait(); }
static void cache_after(void) { cache_unlock(); }

size_t bridge_host_cache_limit(size_t limit) {
  cache_lock_wait();
  size_t old = cache_limit_now();
  cached_block evicted[CACHE_SLOTS];
  int k = 0;
  if (limit != CACHE_UNSET) {
    cache_limit = limit;
    cache_limit_read = 1;
    k = cache_evict(0, evicted);
  }
  cache_unlock();
  free_blocks(evicted, k);
  return old;
}

size_t bridge_host_cache_empty(void) {
  cache_lock_wait();
  cached_block all[CACHE_SLOTS];
  int k = cache_n;
  size_t freed = cache_bytes;
  memcpy(all, cache, (size_t)k * sizeof(cached_block));
  cache_n = 0;
  cache_bytes = 0;
  cache_unlock();
  free_blocks(all, k);
  return freed;
}

size_t bridge_host_cache_bytes(void) {
  cache_lock_wait();
  size_t n = cache_bytes;
  cache_unlock();
  return n;
}

void *bridge_aligned_alloc(size_t nbytes, int zeroed) {
  size_t extra = BRIDGE_ALIGNMENT + BLOCK_HEADER;
  if (nbytes > SIZE_MAX - extra) return NULL;
  size_t size = nbytes + extra;
  /* a zeroed block comes from calloc: its pages are the kernel's zero pages
   * until written, which a cached block's memset would touch */
  void *raw = zeroed ? NULL : cache_take(size, &size);
  int reused = raw != NULL;
  if (!reused) raw = zeroed ? calloc(1, size) : malloc(size);
  if (raw == NULL) return NULL;
  uintptr_t start = (uintptr_t)raw + BLOCK_HEADER;
  uintptr_t aligned = (start + BRIDGE_ALIGNMENT - 1) & ~(uintptr_t)(BRIDGE_ALIGNMENT - 1);
  ((void **)aligned)[-1] = raw;
  ((size_t *)aligned)[-2] = size;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  /* As NumPy does: where transparent huge pages are opt-in ("madvise"),
   * first-touching a large block costs several times more without them. (A
   * reused block was advised when it was first made, at least as large.) */
  if (!reused && nbytes >= BRIDGE_HUGEPAGE_THRESHOLD) {
    uintptr_t page = 4096;
    uintptr_t lo = (aligned + page - 1) & ~(page - 1);
    uintptr_t hi = (aligned + nbytes) & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
  }
#endif
  return (void *)aligned;
}

void bridge_aligned_free(void *ptr) {
  if (ptr == NULL) return;
  void *raw = ((void **)ptr)[-1];
  size_t size = ((size_t *)ptr)[-2];
  if (!cache_put(raw, size)) free(raw);
}

/* The owner of a block bridge allocated. Destructors run with the GIL held
 * and free() never releases it, so the last reference may be dropped
 * anywhere, also by a daemon thread while the interpreter finalises (a cffi
 * ffi.gc callback releases and re-takes the GIL there, which ends such a
 * thread mid-release). */
static const char NAME_MEMORY[] = "bridge.memory";

static void memory_destructor(PyObject *cap) {
  void *p = PyCapsule_GetPointer(cap, NAME_MEMORY);
  if (p == NULL) {
    PyErr_Clear();
    return;
  }
  bridge_aligned_free(p);
}

PyObject *bridge_memory_new(int64_t nbytes, int zeroed, char **data) {
  if (nbytes < 0) {
    PyErr_Format(PyExc_ValueError, "storage size must be non-negative, got %lld",
                 (long long)nbytes);
    return NULL;
  }
  void *p = bridge_aligned_alloc((size_t)nbytes, zeroed);
  if (p == NULL) return PyErr_Format(PyExc_MemoryError, "cannot allocate %lld bytes", (long long)nbytes);
  PyObject *cap = PyCapsule_New(p, NAME_MEMORY, memory_destructor);
  if (cap == NULL) {
    bridge_aligned_free(p);
    return NULL;
  }
  *data = (char *)p;
  return cap;
}

/* _C.host_cache(limit=-1): the cache's limit in bytes before the call, and
 * the bytes it holds now; limit >= 0 sets it (evicting what no longer fits). */
static PyObject *py_host_cache(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs > 1) return PyErr_Format(PyExc_TypeError, "host_cache(limit=-1)");
  long long n = nargs ? PyLong_AsLongLong(args[0]) : -1;
  if (n == -1 && PyErr_Occurred()) return NULL;
  size_t old = bridge_host_cache_limit(n < 0 ? CACHE_UNSET : (size_t)n);
  return Py_BuildValue("(KK)", (unsigned long long)old, (unsigned long long)bridge_host_cache_bytes());
}

static PyObject *py_empty_host_cache(PyObject *mod, PyObject *unused) {
  (void)mod;
  (void)unused;
  return PyLong_FromSize_t(bridge_host_cache_empty());
}

static PyMethodDef memory_functions[] = {
    {"host_cache", (PyCFunction)(void (*)(void))py_host_cache, METH_FASTCALL,
     "host_cache(limit=-1, /)\n--\n\n(limit, held): the bytes of freed host blocks bridge may keep for "
     "reuse, as it was before the call, and the bytes it keeps now; limit >= 0 sets it."},
    {"empty_host_cache", (PyCFunction)py_empty_host_cache, METH_NOARGS,
     "empty_host_cache()\n--\n\nFree every block the host cache keeps; returns their bytes."},
    {NULL, NULL, 0, NULL},
};

int bridge_memory_init(PyObject *mod) {
  static int registered;
  if (!registered && pthread_atfork(cache_prepare, cache_after, cache_after) != 0) {
    PyErr_SetString(PyExc_RuntimeError, "pthread_atfork failed for bridge's host block cache");
    return -1;
  }
  registered = 1;
  return PyModule_AddFunctions(mod, memory_functions);
}

/* -------------------------------------------------------------- counters */

uint64_t bridge_stats_counters[STAT_COUNT];

/* ------------------------------------------------------- pending errors */

PyObject *bridge_fetch_error(void) {
#if PY_VERSION_HEX >= 0x030C0000
  return PyErr_GetRaisedException();
#else
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  if (t == NULL) return NULL;
  PyErr_NormalizeException(&t, &v, &tb);
  if (tb != NULL) PyException_SetTraceback(v, tb);
  Py_XDECREF(t);
  Py_XDECREF(tb);
  return v;
#endif
}

void bridge_restore_error(PyObject *exc) {
  if (exc == NULL) return;
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(exc);
#else
  PyErr_Restore(Py_NewRef((PyObject *)Py_TYPE(exc)), exc, PyException_GetTraceback(exc));
#endif
}

/* ------------------------------------------------------ foreign callbacks */

#if PY_VERSION_HEX >= 0x030D0000
#define BRIDGE_FINALIZING() Py_IsFinalizing()
#else
#define BRIDGE_FINALIZING() _Py_IsFinalizing()
#endif

int bridge_py_enter(bridge_py_entry *e) {
  if (!Py_IsInitialized()) return 0;
  e->held = PyGILState_Check();
  if (!e->held) {
    if (BRIDGE_FINALIZING()) return 0;
    e->gil = PyGILState_Ensure();
  }
  e->exc = bridge_fetch_error();
  return 1;
}

void bridge_py_leave(bridge_py_entry *e) {
  bridge_restore_error(e->exc);
  if (!e->held) PyGILState_Release(e->gil);
}
