/* The CUDA copy engine: every copy of CUDA memory bridge makes (clone,
 * copy_, numpy(force=True), __dlpack__(copy=True), dl_device), as calls of
 * the driver's copy functions (cuda_driver.h); the driver itself is loaded
 * and entered in cuda.c. */

#include "cuda_driver.h"

#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------- the copy engine
 *
 * A copy is a plan: dims (size, destination and source strides in bytes)
 * over two base addresses, each in CUDA or host memory. `normalize` drops
 * size-1 dims, turns the destination's negative strides around (both sides
 * together, so the same elements pair up), orders the dims by destination
 * stride, largest first, and merges dims that step as one on both sides.
 *
 * `issue` then hands the plan to the driver as rows: a row is the innermost
 * dim when it is contiguous on both sides, else one element; the next dim
 * becomes the rows of one cuMemcpy2DAsync_v2 when both its pitches are at
 * least a row and at most the device's maximum pitch; the remaining dims are
 * a loop of such calls; a single row is one cuMemcpy{HtoD,DtoH,DtoD}Async_v2.
 * That covers contiguous views (one call), row-strided 2-D views (one call)
 * and N-d views whose innermost dim is contiguous (a loop).
 *
 * A plan whose innermost dim is not contiguous on both sides (a transpose, a
 * step, a negative or broadcast source stride) is not sent to the engine
 * element by element; it goes through host memory: a device source's bytes
 * come down as the one span its view reaches (cuMemcpyDtoHAsync_v2), the
 * elements are re-laid on the host (`host_copy`) into a temporary dense in
 * the destination's order, and that goes up to the destination; a copy to
 * the host copies from the span straight into the destination. Only a
 * destination whose own innermost stride is not one element then moves in
 * rows of one element (its gaps are never written). A source that overlaps
 * its destination's bytes is staged the same way, so it is read whole
 * before anything is written; a host source is also re-laid when that saves
 * driver calls (a broadcast row into a dense view: one call, not one per
 * row). dtype casts never reach the engine: Tensor.copy_ casts on the host.
 * Everything is ordered on one stream; any copy that touches host memory is
 * synchronised before returning. */

typedef struct {
  int64_t n, ds, ss; /* size; destination and source strides in bytes */
} cdim;

typedef struct {
  int nd;
  int64_t isz;       /* bytes per element */
  uintptr_t dst, src; /* element [0, ..., 0] of each side */
  int dst_cuda, src_cuda;
  cdim d[BRIDGE_MAX_NDIM];
} plan;

static void normalize(plan *p) {
  int nd = 0;
  for (int i = 0; i < p->nd; i++) {
    cdim c = p->d[i];
    if (c.n == 1) continue;
    if (c.ds < 0) { /* walk this dim from its other end on both sides */
      p->dst -= (uintptr_t)(-c.ds) * (uintptr_t)(c.n - 1);
      p->src += (uintptr_t)c.ss * (uintptr_t)(c.n - 1);
      c.ds = -c.ds;
      c.ss = -c.ss;
    }
    p->d[nd++] = c;
  }
  for (int i = 1; i < nd; i++) { /* insertion sort: largest destination stride first */
    cdim c = p->d[i];
    int j = i;
    for (; j > 0 && (p->d[j - 1].ds < c.ds || (p->d[j - 1].ds == c.ds && p->d[j - 1].ss < c.ss)); j--)
      p->d[j] = p->d[j - 1];
    p->d[j] = c;
  }
  int m = 0;
  for (int i = 0; i < nd; i++) {
    cdim c = p->d[i];
    int64_t dn, sn;
    if (m > 0 && !__builtin_mul_overflow(c.ds, c.n, &dn) && !__builtin_mul_overflow(c.ss, c.n, &sn) &&
        p->d[m - 1].ds == dn && p->d[m - 1].ss == sn)
      p->d[m - 1] = (cdim){p->d[m - 1].n * c.n, c.ds, c.ss}; /* product <= numel */
    else
      p->d[m++] = c;
  }
  if (m == 0) p->d[m++] = (cdim){1, p->isz, p->isz}; /* one element */
  p->nd = m;
}

/* Whether the engine copies the plan in rows longer than one element. */
static int contiguous_rows(const plan *p) {
  return p->d[p->nd - 1].ds == p->isz && p->d[p->nd - 1].ss == p->isz;
}

/* The bytes [*lo, *hi) the source side reaches, relative to p->src. */
static void source_span(const plan *p, int64_t *lo, int64_t *hi) {
  *lo = 0;
  *hi = p->isz;
  for (int i = 0; i < p->nd; i++) { /* each term is bounded by the storage's size */
    int64_t reach = p->d[i].ss * (p->d[i].n - 1);
    if (reach < 0)
      *lo += reach;
    else
      *hi += reach;
  }
}

/* Rows of the plan and the loop over the rest: width in bytes, the dim used
 * as the rows of one 2-D call (-1: none) and the number of loop dims. */
static void shape_rows(const plan *p, size_t maxp, int64_t *width, int *rows_dim, int *loops) {
  int k = p->nd;
  *width = p->isz;
  if (contiguous_rows(p)) {
    *width = p->d[k - 1].n * p->isz;
    k--;
  }
  *rows_dim = -1;
  if (k > 0) {
    const cdim *c = &p->d[k - 1];
    if (c->ds >= *width && c->ss >= *width && (uint64_t)c->ds <= maxp && (uint64_t)c->ss <= maxp) {
      *rows_dim = k - 1;
      k--;
    }
  }
  *loops = k;
}

/* How many driver calls `walk` makes for the plan. */
static int64_t count_calls(const plan *p, size_t maxp) {
  int64_t width, n = 1;
  int rows_dim, loops;
  shape_rows(p, maxp, &width, &rows_dim, &loops);
  for (int i = 0; i < loops; i++) n *= p->d[i].n; /* <= numel */
  return n;
}

/* Whether a host source re-laid dense in the destination's order would take
 * fewer calls (a broadcast or scattered host source into a dense device
 * view): a host copy is cheaper than a driver call per row. */
static int fewer_calls_dense(const plan *p, size_t maxp) {
  plan q = *p;
  int64_t stride = p->isz;
  for (int i = q.nd - 1; i >= 0; i--) {
    q.d[i].ss = stride;
    if (__builtin_mul_overflow(stride, q.d[i].n, &stride)) return 0;
  }
  normalize(&q);
  return count_calls(&q, maxp) < count_calls(p, maxp);
}

/* One call: `height` rows of `width` bytes. */
static CUresult copy_rows(const plan *p, uintptr_t dst, uintptr_t src, int64_t width, int64_t height, int64_t dpitch,
                          int64_t spitch, CUstream stream, const char **what) {
  if (height == 1) {
    if (p->dst_cuda && p->src_cuda) {
      *what = "cuMemcpyDtoDAsync";
      return bridge_cu.MemcpyDtoDAsync((CUdeviceptr)dst, (CUdeviceptr)src, (size_t)width, stream);
    }
    if (p->dst_cuda) {
      *what = "cuMemcpyHtoDAsync";
      return bridge_cu.MemcpyHtoDAsync((CUdeviceptr)dst, (const void *)src, (size_t)width, stream);
    }
    *what = "cuMemcpyDtoHAsync";
    return bridge_cu.MemcpyDtoHAsync((void *)dst, (CUdeviceptr)src, (size_t)width, stream);
  }
  CUDA_MEMCPY2D m;
  memset(&m, 0, sizeof m);
  m.srcMemoryType = p->src_cuda ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
  if (p->src_cuda)
    m.srcDevice = (CUdeviceptr)src;
  else
    m.srcHost = (const void *)src;
  m.srcPitch = (size_t)spitch;
  m.dstMemoryType = p->dst_cuda ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
  if (p->dst_cuda)
    m.dstDevice = (CUdeviceptr)dst;
  else
    m.dstHost = (void *)dst;
  m.dstPitch = (size_t)dpitch;
  m.WidthInBytes = (size_t)width;
  m.Height = (size_t)height;
  *what = "cuMemcpy2DAsync";
  return bridge_cu.Memcpy2DAsync(&m, stream);
}

/* Walk the loop dims of a plan, calling the engine (or, with `host`, memcpy
 * row by row) once per position. No Python: runs without the GIL. */
static CUresult walk(const plan *p, size_t maxp, CUstream stream, int host, const char **what) {
  int64_t width, idx[BRIDGE_MAX_NDIM] = {0};
  int rows_dim, loops;
  shape_rows(p, host ? 0 : maxp, &width, &rows_dim, &loops);
  int64_t height = rows_dim < 0 ? 1 : p->d[rows_dim].n;
  int64_t dpitch = rows_dim < 0 ? width : p->d[rows_dim].ds, spitch = rows_dim < 0 ? width : p->d[rows_dim].ss;
  uintptr_t dst = p->dst, src = p->src;
  for (;;) {
    if (host) {
      memcpy((void *)dst, (const void *)src, (size_t)width);
    } else {
      CUresult rc = copy_rows(p, dst, src, width, height, dpitch, spitch, stream, what);
      if (rc != 0) return rc;
    }
    int i = loops - 1;
    for (; i >= 0; i--) { /* the next position, last loop dim fastest */
      const cdim *c = &p->d[i];
      if (++idx[i] < c->n) {
        dst += (uintptr_t)c->ds;
        src += (uintptr_t)c->ss;
        break;
      }
      idx[i] = 0;
      dst -= (uintptr_t)c->ds * (uintptr_t)(c->n - 1);
      src -= (uintptr_t)c->ss * (uintptr_t)(c->n - 1);
    }
    if (i < 0) return 0;
  }
}

/* What a copy needs besides the plan: the devices and the streams the
 * storages' work was ordered on. */
typedef struct {
  int dst_id, src_id;
  uintptr_t dst_wait, src_wait;
  uintptr_t stream; /* out: the stream the copy was ordered on */
} copy_env;

/* Bring the source's span down into new host memory (*buf) and point the plan
 * at it; synchronised, so the host can read it at once. */
static CUresult download(plan *p, size_t maxp, CUstream stream, void **buf, int *nomem, const char **what) {
  int64_t lo, hi;
  source_span(p, &lo, &hi);
  *buf = malloc((size_t)(hi - lo));
  if (*buf == NULL) {
    *nomem = 1;
    return 0;
  }
  plan span = {.nd = 1, .isz = 1, .dst = (uintptr_t)*buf, .src = p->src - (uintptr_t)(-lo), .dst_cuda = 0, .src_cuda = 1};
  span.d[0] = (cdim){hi - lo, 1, 1};
  CUresult rc = walk(&span, maxp, stream, 0, what);
  if (rc == 0 && (rc = bridge_cu.StreamSynchronize(stream)) != 0) *what = "cuStreamSynchronize";
  p->src = (uintptr_t)*buf + (uintptr_t)(-lo);
  p->src_cuda = 0;
  return rc;
}

/* Re-lay a host source into new host memory (*buf) dense in the destination's
 * order (the plan is normalized: dims by destination stride), and point the
 * plan at it. */
static void relayout(plan *p, void **buf, int *nomem) {
  int64_t numel = 1, nbytes;
  for (int i = 0; i < p->nd; i++) numel *= p->d[i].n; /* <= the destination's elements */
  if (__builtin_mul_overflow(numel, p->isz, &nbytes) || (*buf = malloc((size_t)nbytes)) == NULL) {
    *nomem = 1;
    return;
  }
  plan q = *p;
  q.dst = (uintptr_t)*buf;
  q.dst_cuda = 0;
  int64_t stride = p->isz;
  for (int i = p->nd - 1; i >= 0; i--) {
    q.d[i].ds = stride;
    p->d[i].ss = stride;
    stride *= p->d[i].n;
  }
  walk(&q, 0, NULL, 1, NULL);
  p->src = (uintptr_t)*buf;
  normalize(p);
}

/* Whether two device spans share bytes (the copy must read before writing). */
static int overlaps(const plan *p) {
  if (!p->dst_cuda || !p->src_cuda) return 0;
  int64_t slo, shi, dlo = 0, dhi = p->isz;
  source_span(p, &slo, &shi);
  for (int i = 0; i < p->nd; i++) dhi += p->d[i].ds * (p->d[i].n - 1); /* normalized: ds >= 0 */
  uintptr_t a = p->dst + (uintptr_t)dlo, b = p->dst + (uintptr_t)dhi;
  uintptr_t c = p->src - (uintptr_t)(-slo), d = p->src + (uintptr_t)shi;
  return a < d && c < b;
}

/* Run a copy (the plan's numel > 0). The destination's device orders it: on
 * the thread's consumer stream after the work pending on both storages; a
 * copy to the host runs on the source's stream (the legacy default when it has
 * none). Copies between two devices come down to the host first. `exc` for a
 * missing driver or a failed call; MemoryError when host memory runs out. */
static int run_copy(plan *p, copy_env *env, PyObject *exc) {
  void *down = NULL, *tmp = NULL;
  int nomem = 0;
  CUresult rc = 0;
  const char *what = NULL;
  normalize(p);
  if (p->dst_cuda && p->src_cuda && env->dst_id != env->src_id) {
    if (bridge_cuda_enter(env->src_id, exc) < 0) return -1;
    size_t maxp = bridge_cuda_max_pitch[env->src_id];
    CUstream s = (CUstream)(env->src_wait ? env->src_wait : 1);
    Py_BEGIN_ALLOW_THREADS
    rc = download(p, maxp, s, &down, &nomem, &what);
    Py_END_ALLOW_THREADS
    bridge_cuda_leave();
    if (rc != 0 || nomem) goto done;
  }
  int dev = p->dst_cuda ? env->dst_id : env->src_id;
  uintptr_t stream = p->dst_cuda ? bridge_current_stream() : (env->src_wait ? env->src_wait : 1);
  if (bridge_cuda_enter(dev, exc) < 0) {
    free(down);
    return -1;
  }
  size_t maxp = bridge_cuda_max_pitch[dev];
  Py_BEGIN_ALLOW_THREADS
  if (p->dst_cuda) {
    rc = bridge_cuda_order_streams(env->dst_wait, stream, &what);
    if (rc == 0 && p->src_cuda) rc = bridge_cuda_order_streams(env->src_wait, stream, &what);
  }
  if (rc == 0 && p->src_cuda && (!contiguous_rows(p) || overlaps(p)))
    rc = download(p, maxp, (CUstream)stream, &down, &nomem, &what);
  if (rc == 0 && !nomem && !p->src_cuda) {
    if (!p->dst_cuda)
      walk(p, 0, NULL, 1, NULL); /* from the span into host memory */
    else if (!contiguous_rows(p) || fewer_calls_dense(p, maxp))
      relayout(p, &tmp, &nomem);
  }
  if (rc == 0 && !nomem && (p->dst_cuda || p->src_cuda)) rc = walk(p, maxp, (CUstream)stream, 0, &what);
  /* host memory is read or written: the copy is done before returning */
  if (rc == 0 && !nomem && (!p->dst_cuda || !p->src_cuda) && (rc = bridge_cu.StreamSynchronize((CUstream)stream)) != 0)
    what = "cuStreamSynchronize";
  Py_END_ALLOW_THREADS
  bridge_cuda_leave();
  env->stream = stream;
done:
  free(down);
  free(tmp);
  if (nomem) {
    PyErr_NoMemory();
    return -1;
  }
  return rc == 0 ? 0 : bridge_cuda_error(exc, rc, what);
}

/* The dims of a copy of `src` into `dst` (src broadcast to dst's shape, as
 * NumPy broadcasts), in bytes. ValueError when the shapes do not broadcast. */
static int plan_views(plan *p, TensorObject *dst, TensorObject *src) {
  int nd = dst->ndim, off = dst->ndim - src->ndim;
  int64_t isz = dst->dtype->itemsize;
  if (off < 0) goto mismatch;
  for (int i = 0; i < src->ndim; i++)
    if (src->shape[i] != dst->shape[i + off] && src->shape[i] != 1) goto mismatch;
  p->nd = nd;
  p->isz = isz;
  p->dst = (uintptr_t)bridge_tensor_data(dst);
  p->src = (uintptr_t)bridge_tensor_data(src);
  p->dst_cuda = dst->storage->dev_type == kDLCUDA;
  p->src_cuda = src->storage->dev_type == kDLCUDA;
  for (int i = 0; i < nd; i++) {
    int64_t n = dst->shape[i], ds = 0, ss = 0;
    int j = i - off;
    /* size-1 dims step nowhere (their strides may be anything) */
    if (n > 1 && __builtin_mul_overflow(dst->strides[i], isz, &ds)) goto overflow;
    if (n > 1 && j >= 0 && src->shape[j] != 1 && __builtin_mul_overflow(src->strides[j], isz, &ss)) goto overflow;
    p->d[i] = (cdim){n, ds, ss};
  }
  return 0;
mismatch:;
  PyObject *a = bridge_dims_tuple(src->ndim, src->shape), *b = bridge_dims_tuple(dst->ndim, dst->shape);
  if (a && b) PyErr_Format(PyExc_ValueError, "cannot broadcast a value of shape %R to shape %R", a, b);
  Py_XDECREF(a);
  Py_XDECREF(b);
  return -1;
overflow:
  PyErr_SetString(PyExc_ValueError, "a stride in bytes overflows int64");
  return -1;
}

int bridge_cuda_copy(TensorObject *dst, TensorObject *src, PyObject *exc) {
  StorageObject *ds = dst->storage, *ss = src->storage;
  int dc = ds->dev_type == kDLCUDA, sc = ss->dev_type == kDLCUDA;
  if (!(dc || sc) || !(dc || bridge_host_accessible(ds->dev_type)) || !(sc || bridge_host_accessible(ss->dev_type))) {
    PyObject *a = bridge_storage_device(ds), *b = a ? bridge_storage_device(ss) : NULL;
    if (a && b)
      PyErr_Format(exc, "bridge's CUDA copy engine copies between host and CUDA memory, not from %S to %S", b, a);
    Py_XDECREF(a);
    Py_XDECREF(b);
    return -1;
  }
  if (dst->dtype != src->dtype) {
    PyErr_SetString(PyExc_ValueError, "the CUDA copy engine copies between tensors of one dtype (casts go through "
                                      "the host: Tensor.copy_)");
    return -1;
  }
  if (ds->readonly) {
    PyErr_SetString(PyExc_ValueError, "cannot write to a read-only tensor (its memory was borrowed read-only)");
    return -1;
  }
  if (bridge_tensor_check_bounds(dst, exc) < 0 || bridge_tensor_check_bounds(src, exc) < 0) return -1;
  plan p;
  if (plan_views(&p, dst, src) < 0) return -1;
  if (bridge_numel(dst) == 0) return 0;
  copy_env env = {dst->storage->dev_id, src->storage->dev_id, dc ? ds->stream : 0, sc ? ss->stream : 0, 0};
  /* the owners keep both blocks alive while the GIL is released */
  PyObject *keep_dst = Py_NewRef(bridge_storage_owner(ds)), *keep_src = Py_NewRef(bridge_storage_owner(ss));
  int rc = run_copy(&p, &env, exc);
  Py_DECREF(keep_dst);
  Py_DECREF(keep_src);
  if (rc == 0 && dc) ds->stream = env.stream;
  return rc;
}

/* bridge_cuda_transfer(tensor, dev_type, dev_id) -> a copy of the tensor on
 * (dev_type, dev_id), CPU or CUDA, by the copy engine: the bytes the view
 * reaches are copied as one span (one call), so the copy keeps the view's
 * strides. The copy is ordered after the source's stream and complete on
 * return for the host; a device copy is ordered on the thread's consumer
 * stream. BufferError for what cannot be exported. */
PyObject *bridge_cuda_transfer(TensorObject *t, int to_type, int to_id) {
  StorageObject *src = t->storage;
  int from_cuda = src->dev_type == kDLCUDA, to_cuda = to_type == kDLCUDA;
  if (!bridge_device_copyable(src->dev_type, to_type) || to_type == kDLCUDAHost) /* callers map it to CPU */
    return PyErr_Format(PyExc_BufferError, "bridge copies only between CPU and CUDA memory");
  if (bridge_tensor_check_bounds(t, PyExc_BufferError) < 0) return NULL;
  int64_t isz = t->dtype->itemsize, nbytes = (t->hi - t->lo) * isz; /* inside the storage */
  StorageObject *dst = to_cuda ? bridge_cuda_alloc(to_id, nbytes, PyExc_BufferError) : bridge_storage_alloc(nbytes, 0);
  if (dst == NULL) return NULL;
  if (nbytes) {
    plan p = {.nd = 1, .isz = 1, .dst = (uintptr_t)dst->data, .src = (uintptr_t)(src->data + t->lo * isz),
              .dst_cuda = to_cuda, .src_cuda = from_cuda};
    p.d[0] = (cdim){nbytes, 1, 1};
    copy_env env = {to_id, src->dev_id, 0, from_cuda ? src->stream : 0, 0};
    PyObject *keep = Py_NewRef(bridge_storage_owner(src));
    int rc = run_copy(&p, &env, PyExc_BufferError);
    Py_DECREF(keep);
    if (rc < 0) {
      Py_DECREF(dst);
      return NULL;
    }
    if (to_cuda) dst->stream = env.stream;
  }
  PyObject *out = bridge_tensor_new(dst, t->dtype, t->ndim, t->shape, t->strides, nbytes ? t->offset - t->lo : 0,
                                    GEOM_DERIVED);
  Py_DECREF(dst);
  return out;
}

