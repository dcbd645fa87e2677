/* The copy kernel's threads: how many a copy may use, and the pool of
 * workers that runs its parts (copy.c splits a copy into parts; this file
 * knows nothing of copies). */

#include "copy.h"

#include <pthread.h>
#include <sys/time.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* A copy's parts are none under this many bytes: on many CPUs a small copy
 * is not worth waking every worker for. */
#define PART_MIN_BYTES (1 << 20)

static int copy_threads = 0; /* 0: one per online CPU (bridge_copy_set_threads) */

int bridge_copy_thread_count(void) {
  int n = __atomic_load_n(&copy_threads, __ATOMIC_RELAXED);
  if (n > 0) return n;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  return cpus < 1 ? 1 : cpus > 64 ? 64 : (int)cpus;
}

int bridge_copy_set_threads(int n) {
  int old = __atomic_exchange_n(&copy_threads, n < 0 ? 0 : n, __ATOMIC_RELAXED);
  return old;
}

int bridge_copy_threads_set(void) { return __atomic_load_n(&copy_threads, __ATOMIC_RELAXED); }

int bridge_copy_parts(int64_t nbytes) {
  int64_t by_size = nbytes / PART_MIN_BYTES;
  int nt = bridge_copy_thread_count();
  return by_size < 1 ? 1 : by_size < nt ? (int)by_size : nt;
}

/* The pool: worker threads kept between copies. Starting a thread costs
 * about 40 us here, as much as copying 2 MB, and made threads slower than
 * one: a pa.Table of 8 float64 columns x 100,000 rows copied into torch took
 * 216 us on one thread, 316 us starting one more per call. A worker waits
 * awake for about POOL_SPIN_NS after its last part (a loop converting step
 * after step finds it awake, as OpenMP's workers wait), then sleeps.
 *
 * One job at a time: a copy that finds another copy's job running (a thread
 * without the GIL) does its parts itself. The caller takes part 0, and any
 * part no worker has taken yet when it is done: a worker that wakes late
 * costs nothing. A forked child starts with no workers (pthread_atfork). */

#define POOL_SPIN_NS 200000

static struct {
  pthread_mutex_t mu;
  pthread_cond_t wake, done;
  int workers;
  uint64_t gen; /* bumped per job: what a waiting worker watches */
  bridge_pool_fn fn;
  void *arg;
  int parts, next, left; /* parts of the job; the next one to take; those not finished */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, NULL, NULL, 0, 0, 0};
static pthread_mutex_t pool_job = PTHREAD_MUTEX_INITIALIZER; /* held by the copy whose job runs */
static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

/* gettimeofday, not clock_gettime: a manylinux wheel's glibc has it in libc
 * (clock_gettime was librt's before glibc 2.17). Microseconds are enough for
 * a worker's wait, which also ends when the clock is set back. */
static uint64_t now_ns(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (uint64_t)tv.tv_sec * 1000000000u + (uint64_t)tv.tv_usec * 1000u;
}

/* Take and run the job's parts until none is left (pool.mu held on entry
 * and on return). */
static void pool_take(void) {
  while (pool.next < pool.parts) {
    int part = pool.next++;
    bridge_pool_fn fn = pool.fn;
    void *arg = pool.arg;
    pthread_mutex_unlock(&pool.mu);
    fn(arg, part);
    pthread_mutex_lock(&pool.mu);
    if (--pool.left == 0) pthread_cond_signal(&pool.done);
  }
}

static void *pool_worker(void *start_gen) {
  uint64_t seen = (uint64_t)(uintptr_t)start_gen;
  for (;;) {
    uint64_t from = now_ns();
    for (int i = 0; __atomic_load_n(&pool.gen, __ATOMIC_ACQUIRE) == seen; i++) {
#if defined(__SSE2__)
      _mm_pause();
#endif
      if ((i & 255) == 255) {
        uint64_t t = now_ns();
        if (t < from || t - from > POOL_SPIN_NS) break;
      }
    }
    pthread_mutex_lock(&pool.mu);
    while (pool.gen == seen) pthread_cond_wait(&pool.wake, &pool.mu);
    seen = pool.gen;
    pool_take();
    pthread_mutex_unlock(&pool.mu);
  }
  return NULL;
}

/* fork() takes both locks first, so the child's copy of the pool is never
 * halfway through a job; the child has none of the workers. The child gets
 * every lock and condition variable new: a condition variable the parent's
 * workers slept on keeps their (absent) waiters in its state, and glibc's
 * next broadcast on it waits for them forever (a forked Pool's second large
 * copy hung so). */
static void pool_prepare(void) {
  pthread_mutex_lock(&pool_job);
  pthread_mutex_lock(&pool.mu);
}
static void pool_parent(void) {
  pthread_mutex_unlock(&pool.mu);
  pthread_mutex_unlock(&pool_job);
}
static void pool_child(void) {
  static const pthread_mutex_t mutex_new = PTHREAD_MUTEX_INITIALIZER;
  static const pthread_cond_t cond_new = PTHREAD_COND_INITIALIZER;
  pool.mu = mutex_new;
  pool.wake = cond_new;
  pool.done = cond_new;
  pool_job = mutex_new;
  pool.workers = 0;
  pool.parts = pool.next = pool.left = 0;
  pool.fn = NULL;
  pool.arg = NULL;
}
static void pool_init(void) { pthread_atfork(pool_prepare, pool_parent, pool_child); }

void bridge_pool_run(bridge_pool_fn fn, void *arg, int parts) {
  pthread_once(&pool_once, pool_init);
  if (parts <= 1 || pthread_mutex_trylock(&pool_job) != 0) {
    for (int i = 0; i < parts; i++) fn(arg, i);
    return;
  }
  pthread_mutex_lock(&pool.mu);
  while (pool.workers < parts - 1) {
    pthread_t th;
    pthread_attr_t attr;
    int made = pthread_attr_init(&attr) == 0;
    made = made && pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
           pthread_create(&th, &attr, pool_worker, (void *)(uintptr_t)pool.gen) == 0;
    pthread_attr_destroy(&attr);
    if (!made) break; /* fewer workers: this thread takes their parts */
    pool.workers++;
  }
  pool.fn = fn;
  pool.arg = arg;
  pool.parts = parts;
  pool.next = 1;
  pool.left = parts - 1;
  __atomic_add_fetch(&pool.gen, 1, __ATOMIC_RELEASE);
  for (int i = 1; i < parts; i++) BUMP(STAT_COPY_THREADS);
  pthread_cond_broadcast(&pool.wake);
  pthread_mutex_unlock(&pool.mu);
  fn(arg, 0);
  pthread_mutex_lock(&pool.mu);
  pool_take();
  while (pool.left > 0) pthread_cond_wait(&pool.done, &pool.mu);
  pool.fn = NULL;
  pool.arg = NULL;
  pthread_mutex_unlock(&pool.mu);
  pthread_mutex_unlock(&pool_job);
}
