/* Memory: 64-byte aligned blocks and their owner object, the counters, and
 * the guards every foreign callback runs under. */

#include "core.h"

#include <stdlib.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* ---------------------------------------------------------------- blocks */

#define BRIDGE_HUGEPAGE_THRESHOLD ((size_t)4 << 20)

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
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  /* As NumPy does: where transparent huge pages are opt-in ("madvise"),
   * first-touching a large block costs several times more without them. */
  if (nbytes >= BRIDGE_HUGEPAGE_THRESHOLD) {
    uintptr_t page = 4096;
    uintptr_t lo = (aligned + page - 1) & ~(page - 1);
    uintptr_t hi = (aligned + nbytes) & ~(page - 1);
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
  }
#endif
  return (void *)aligned;
}

void bridge_aligned_free(void *ptr) {
  if (ptr != NULL) free(((void **)ptr)[-1]);
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
