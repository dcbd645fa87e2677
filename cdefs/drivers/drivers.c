/* Drivers for tests and the conformance kit, apart from the production code:
 * the module bridge._drivers. Hand-made capsules over structs built with
 * cffi, deleters that only count, a deleter run from a thread with no Python
 * state, and callers of any library's DLPack C exchange API. */

#include "interop/interop.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>

#define NAME_LEGACY BRIDGE_NAME_LEGACY
#define NAME_VERSIONED BRIDGE_NAME_VERSIONED
#define NAME_USED_LEGACY BRIDGE_NAME_USED_LEGACY
#define NAME_USED_VERSIONED BRIDGE_NAME_USED_VERSIONED
static const char NAME_BOGUS[] = "not_a_dltensor";

/* ------------------------------------------------------ counting deleters */

static void test_deleter(DLManagedTensor *self) {
  (void)self;
  BUMP(STAT_TEST_DELETERS);
}

static void test_deleter_versioned(DLManagedTensorVersioned *self) {
  (void)self;
  BUMP(STAT_TEST_DELETERS);
}

/* test_deleter_address(versioned) -> the address of a deleter that only counts */
static PyObject *py_test_deleter_address(PyObject *mod, PyObject *versioned) {
  (void)mod;
  int v = PyObject_IsTrue(versioned);
  if (v < 0) return NULL;
  return PyLong_FromVoidPtr(v ? (void *)test_deleter_versioned : (void *)test_deleter);
}

typedef struct {
  void *managed;
  int versioned;
} thread_job;

static void *run_deleter(void *arg) {
  thread_job *job = (thread_job *)arg;
  bridge_dlpack_call_deleter(job->managed, job->versioned);
  return NULL;
}

/* call_deleter_in_thread(address, versioned): run a managed tensor's deleter
 * on a new native thread that has no Python thread state. */
static PyObject *py_call_deleter_in_thread(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) return PyErr_Format(PyExc_TypeError, "call_deleter_in_thread(address, versioned)");
  thread_job job = {PyLong_AsVoidPtr(args[0]), PyObject_IsTrue(args[1])};
  if (PyErr_Occurred()) return NULL;
  pthread_t th;
  int rc;
  Py_BEGIN_ALLOW_THREADS /* the thread's deleter takes the GIL itself */
  rc = pthread_create(&th, NULL, run_deleter, &job) == 0 && pthread_join(th, NULL) == 0 ? 0 : -1;
  Py_END_ALLOW_THREADS
  if (rc != 0) return PyErr_Format(PyExc_RuntimeError, "could not run a thread");
  Py_RETURN_NONE;
}

/* ------------------------------------------------------------- capsules */

/* make_capsule(address, kind): wrap a hand-made struct (kind 0 "dltensor",
 * 1 "dltensor_versioned", 2 a wrong name) with the standard destructor. */
static PyObject *py_make_capsule(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) return PyErr_Format(PyExc_TypeError, "make_capsule(address, kind)");
  void *p = PyLong_AsVoidPtr(args[0]);
  long kind = PyLong_AsLong(args[1]);
  if (PyErr_Occurred()) return NULL;
  const char *name = kind == 0 ? NAME_LEGACY : kind == 1 ? NAME_VERSIONED : NAME_BOGUS;
  return PyCapsule_New(p, name, bridge_dlpack_capsule_destructor);
}

/* capsule_info(capsule) -> (name, address) without consuming it. */
static PyObject *py_capsule_info(PyObject *mod, PyObject *capsule) {
  (void)mod;
  if (!PyCapsule_CheckExact(capsule)) return PyErr_Format(PyExc_TypeError, "capsule_info() needs a capsule");
  const char *name = PyCapsule_GetName(capsule);
  void *p = PyCapsule_GetPointer(capsule, name);
  if (p == NULL) return NULL;
  return Py_BuildValue("(sK)", name ? name : "", (unsigned long long)(uintptr_t)p);
}

/* mark_consumed(capsule): rename to used_*, as a consumer does. */
static PyObject *py_mark_consumed(PyObject *mod, PyObject *capsule) {
  (void)mod;
  const char *name = PyCapsule_GetName(capsule);
  if (name == NULL) return NULL;
  const char *used = strcmp(name, NAME_VERSIONED) == 0 ? NAME_USED_VERSIONED
                     : strcmp(name, NAME_LEGACY) == 0  ? NAME_USED_LEGACY
                                                       : NULL;
  if (used == NULL) return PyErr_Format(PyExc_ValueError, "not an unconsumed DLPack capsule: '%s'", name);
  if (PyCapsule_SetName(capsule, used) < 0) return NULL;
  Py_RETURN_NONE;
}

/* ---------------------------------------------- any library's exchange API */

/* The table of the major version bridge knows in the capsule's version
 * chain; NULL with BufferError when the chain has none. */
static DLPackExchangeAPI *api_of(PyObject *capsule) {
  DLPackExchangeAPIHeader *h = (DLPackExchangeAPIHeader *)PyCapsule_GetPointer(capsule, BRIDGE_NAME_API);
  if (h == NULL) return NULL;
  DLPackExchangeAPI *api = bridge_exchange_api_known(h);
  if (api == NULL)
    PyErr_Format(PyExc_BufferError,
                 "exchange API version %u.%u: its prev_api chain holds no major version %d table",
                 h->version.major, h->version.minor, DLPACK_MAJOR_VERSION);
  return api;
}

typedef struct {
  char kind[64];
  char message[512];
  int set;
} api_error;

static void api_set_error(void *ctx, const char *kind, const char *message) {
  api_error *e = (api_error *)ctx;
  snprintf(e->kind, sizeof e->kind, "%s", kind ? kind : "RuntimeError");
  snprintf(e->message, sizeof e->message, "%s", message ? message : "");
  e->set = 1;
}

static PyObject *api_failed(const char *what) {
  if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "exchange API %s failed", what);
  return NULL;
}

/* api_to_object(api, tensor): bridge's export of the tensor handed to
 * api->managed_tensor_to_py_object_no_sync, which takes ownership. */
static PyObject *py_api_to_object(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2 || !Tensor_Check(args[1])) return PyErr_Format(PyExc_TypeError, "api_to_object(api, tensor)");
  DLPackExchangeAPI *api = api_of(args[0]);
  if (api == NULL) return NULL;
  void *block = bridge_dlpack_build((TensorObject *)args[1], 0, 1);
  if (block == NULL) return NULL;
  void *out = NULL;
  if (api->managed_tensor_to_py_object_no_sync((DLManagedTensorVersioned *)block, &out) != 0 || out == NULL)
    return api_failed("managed_tensor_to_py_object_no_sync");
  return (PyObject *)out;
}

/* api_convert(src_api, dst_api, obj): obj handed from one library to another
 * through their exchange APIs alone, no capsule and no Python method: the
 * source's managed_tensor_from_py_object_no_sync, then the destination's
 * managed_tensor_to_py_object_no_sync, which takes ownership. When the
 * destination fails the tensor is still ours, and its deleter runs here. */
static PyObject *py_api_convert(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 3) return PyErr_Format(PyExc_TypeError, "api_convert(src_api, dst_api, obj)");
  DLPackExchangeAPI *src = api_of(args[0]), *dst = src ? api_of(args[1]) : NULL;
  if (src == NULL || dst == NULL) return NULL;
  if (src->managed_tensor_from_py_object_no_sync == NULL || dst->managed_tensor_to_py_object_no_sync == NULL)
    return PyErr_Format(PyExc_BufferError, "an exchange API lacks the functions a conversion needs");
  DLManagedTensorVersioned *m = NULL;
  if (src->managed_tensor_from_py_object_no_sync((void *)args[2], &m) != 0 || m == NULL)
    return api_failed("managed_tensor_from_py_object_no_sync");
  void *out = NULL;
  if (dst->managed_tensor_to_py_object_no_sync(m, &out) != 0 || out == NULL) {
    PyObject *exc = bridge_fetch_error();
    bridge_dlpack_call_deleter(m, 1);
    bridge_restore_error(exc);
    return api_failed("managed_tensor_to_py_object_no_sync");
  }
  return (PyObject *)out;
}

/* api_peek(api, obj) -> (data, device_type, device_id, ndim, code, bits, lanes,
 *   shape, strides or None, byte_offset, shape address, strides address) */
static PyObject *py_api_peek(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) return PyErr_Format(PyExc_TypeError, "api_peek(api, obj)");
  DLPackExchangeAPI *api = api_of(args[0]);
  if (api == NULL) return NULL;
  if (api->dltensor_from_py_object_no_sync == NULL) /* the one function v1.3 lets be NULL */
    return PyErr_Format(PyExc_BufferError, "this exchange API has no dltensor_from_py_object_no_sync");
  DLTensor t;
  memset(&t, 0, sizeof t);
  if (api->dltensor_from_py_object_no_sync((void *)args[1], &t) != 0)
    return api_failed("dltensor_from_py_object_no_sync");
  if (t.ndim < 0 || t.ndim > BRIDGE_MAX_NDIM || (t.ndim > 0 && t.shape == NULL))
    return PyErr_Format(PyExc_BufferError, "exchange API gave ndim %d with shape %p", (int)t.ndim, (void *)t.shape);
  PyObject *shape = PyTuple_New(t.ndim);
  PyObject *strides = t.strides ? PyTuple_New(t.ndim) : Py_NewRef(Py_None);
  if (shape == NULL || strides == NULL) {
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return NULL;
  }
  for (int32_t i = 0; i < t.ndim; i++) {
    PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(t.shape[i]));
    if (t.strides) PyTuple_SET_ITEM(strides, i, PyLong_FromLongLong(t.strides[i]));
  }
  return Py_BuildValue("(KiiiiiiNNKKK)", (unsigned long long)(uintptr_t)t.data, (int)t.device.device_type,
                       (int)t.device.device_id, (int)t.ndim, (int)t.dtype.code, (int)t.dtype.bits,
                       (int)t.dtype.lanes, shape, strides, (unsigned long long)t.byte_offset,
                       (unsigned long long)(uintptr_t)t.shape, (unsigned long long)(uintptr_t)t.strides);
}

/* api_alloc(api, shape, code, bits, device_type, device_id) -> the API's own
 * tensor object for a fresh allocation (allocator, then to_py_object). */
static PyObject *py_api_alloc(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 6) return PyErr_Format(PyExc_TypeError, "api_alloc(api, shape, code, bits, dev_type, dev_id)");
  DLPackExchangeAPI *api = api_of(args[0]);
  if (api == NULL) return NULL;
  int64_t shape[BRIDGE_MAX_NDIM];
  int ndim = bridge_parse_dims(args[1], shape, BRIDGE_MAX_NDIM, "shape");
  long code = PyLong_AsLong(args[2]), bits = PyLong_AsLong(args[3]);
  long dev_type = PyLong_AsLong(args[4]), dev_id = PyLong_AsLong(args[5]);
  if (ndim < 0 || PyErr_Occurred()) return NULL;
  DLTensor proto;
  memset(&proto, 0, sizeof proto);
  proto.device.device_type = (DLDeviceType)dev_type;
  proto.device.device_id = (int32_t)dev_id;
  proto.ndim = ndim;
  proto.dtype.code = (uint8_t)code;
  proto.dtype.bits = (uint8_t)bits;
  proto.dtype.lanes = 1;
  proto.shape = shape;
  api_error err = {{0}, {0}, 0};
  DLManagedTensorVersioned *m = NULL;
  if (api->managed_tensor_allocator(&proto, &m, &err, api_set_error) != 0 || m == NULL) {
    if (err.set) PyErr_Format(PyExc_RuntimeError, "exchange API allocator: %s: %s", err.kind, err.message);
    return api_failed("managed_tensor_allocator");
  }
  void *out = NULL;
  if (api->managed_tensor_to_py_object_no_sync(m, &out) != 0 || out == NULL)
    return api_failed("managed_tensor_to_py_object_no_sync");
  return (PyObject *)out;
}

/* api_stream(api, device_type, device_id) -> the stream as an int (0 = NULL). */
static PyObject *py_api_stream(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 3) return PyErr_Format(PyExc_TypeError, "api_stream(api, device_type, device_id)");
  DLPackExchangeAPI *api = api_of(args[0]);
  if (api == NULL) return NULL;
  long dev_type = PyLong_AsLong(args[1]), dev_id = PyLong_AsLong(args[2]);
  if (PyErr_Occurred()) return NULL;
  void *stream = NULL;
  if (api->current_work_stream == NULL) Py_RETURN_NONE;
  if (api->current_work_stream((DLDeviceType)dev_type, (int32_t)dev_id, &stream) != 0)
    return api_failed("current_work_stream");
  return PyLong_FromVoidPtr(stream);
}

/* ------------------------------------------- exchange API version chains */

/* Tables a consumer must not use (a major version it does not know): each
 * call counts and fails. The one it may use (major 1) delegates to bridge's
 * own table, taking the bridge tensor from the object's `tensor` attribute,
 * and counts too. */
static uint64_t chain_known_calls, chain_unknown_calls;
static DLPackExchangeAPI *chain_inner; /* bridge's own table */

static int chain_refuse(void) {
  chain_unknown_calls++;
  PyErr_SetString(PyExc_RuntimeError, "a consumer called an exchange API table of a major version it "
                                      "does not know");
  return -1;
}
static int unknown_alloc(DLTensor *p, DLManagedTensorVersioned **o, void *c,
                         void (*e)(void *, const char *, const char *)) {
  (void)p, (void)o;
  chain_unknown_calls++;
  e(c, "RuntimeError", "a consumer called an exchange API table of a major version it does not know");
  return -1;
}
static int unknown_from(void *x, DLManagedTensorVersioned **o) { return (void)x, (void)o, chain_refuse(); }
static int unknown_to(DLManagedTensorVersioned *m, void **o) { return (void)m, (void)o, chain_refuse(); }
static int unknown_peek(void *x, DLTensor *o) { return (void)x, (void)o, chain_refuse(); }
static int unknown_stream(DLDeviceType t, int32_t i, void **o) { return (void)t, (void)i, (void)o, chain_refuse(); }

static int known_from(void *x, DLManagedTensorVersioned **out) {
  chain_known_calls++;
  PyObject *t = PyObject_GetAttrString((PyObject *)x, "tensor");
  if (t == NULL) return -1;
  int rc = chain_inner->managed_tensor_from_py_object_no_sync(t, out);
  Py_DECREF(t);
  return rc;
}
static int known_peek(void *x, DLTensor *out) {
  chain_known_calls++;
  PyObject *t = PyObject_GetAttrString((PyObject *)x, "tensor");
  if (t == NULL) return -1;
  int rc = chain_inner->dltensor_from_py_object_no_sync(t, out); /* x keeps t, and t its dims */
  Py_DECREF(t);
  return rc;
}

/* exchange_chain(majors, loop=False) -> a "dlpack_exchange_api" capsule whose
 * header has majors[0], prev_api a table of majors[1], ...; with loop the
 * last prev_api points back to the first (a malformed chain). The tables are
 * never freed: the spec has them live as long as the process. */
static PyObject *py_exchange_chain(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs < 1 || nargs > 2) return PyErr_Format(PyExc_TypeError, "exchange_chain(majors, loop=False)");
  int64_t majors[16];
  int n = bridge_parse_dims(args[0], majors, 16, "majors");
  int loop = nargs == 2 ? PyObject_IsTrue(args[1]) : 0;
  if (n < 0 || loop < 0) return NULL;
  if (n == 0) return PyErr_Format(PyExc_ValueError, "exchange_chain needs at least one major version");
  if (chain_inner == NULL) {
    PyObject *cap = PyObject_GetAttrString((PyObject *)&BridgeTensor_Type, "__dlpack_c_exchange_api__");
    chain_inner = cap ? (DLPackExchangeAPI *)PyCapsule_GetPointer(cap, BRIDGE_NAME_API) : NULL;
    Py_XDECREF(cap);
    if (chain_inner == NULL) return NULL;
  }
  DLPackExchangeAPI *next = NULL, *last = NULL;
  for (int i = n - 1; i >= 0; i--) {
    DLPackExchangeAPI *api = (DLPackExchangeAPI *)calloc(1, sizeof *api);
    if (api == NULL) return PyErr_NoMemory();
    if (last == NULL) last = api;
    api->header.version.major = (uint32_t)majors[i];
    api->header.version.minor = 0;
    api->header.prev_api = next ? &next->header : NULL;
    if (majors[i] == DLPACK_MAJOR_VERSION) {
      api->managed_tensor_allocator = chain_inner->managed_tensor_allocator;
      api->managed_tensor_from_py_object_no_sync = known_from;
      api->managed_tensor_to_py_object_no_sync = chain_inner->managed_tensor_to_py_object_no_sync;
      api->dltensor_from_py_object_no_sync = known_peek;
      api->current_work_stream = chain_inner->current_work_stream;
    } else {
      api->managed_tensor_allocator = unknown_alloc;
      api->managed_tensor_from_py_object_no_sync = unknown_from;
      api->managed_tensor_to_py_object_no_sync = unknown_to;
      api->dltensor_from_py_object_no_sync = unknown_peek;
      api->current_work_stream = unknown_stream;
    }
    next = api;
  }
  if (loop) last->header.prev_api = &next->header;
  return PyCapsule_New(next, BRIDGE_NAME_API, NULL);
}

/* A producer that hands over whatever managed tensor it is given: its
 * managed_tensor_from_py_object_no_sync returns the DLManagedTensorVersioned
 * at the object's `managed` attribute (an address, a hand-made struct of
 * the tests'), unchecked, as a buggy or hostile producer would. */
static int handing_from(void *x, DLManagedTensorVersioned **out) {
  PyObject *a = PyObject_GetAttrString((PyObject *)x, "managed");
  if (a == NULL) return -1;
  void *p = PyLong_AsVoidPtr(a);
  Py_DECREF(a);
  if (p == NULL) return -1;
  *out = (DLManagedTensorVersioned *)p;
  return 0;
}

static int handing_peek(void *x, DLTensor *out) {
  DLManagedTensorVersioned *m = NULL;
  if (handing_from(x, &m) < 0) return -1;
  *out = m->dl_tensor;
  return 0;
}

/* handing_api() -> a "dlpack_exchange_api" capsule of such a producer (bridge's
 * own table for everything else). */
static PyObject *py_handing_api(PyObject *mod, PyObject *unused) {
  (void)mod, (void)unused;
  static DLPackExchangeAPI api;
  if (api.managed_tensor_from_py_object_no_sync == NULL) {
    PyObject *cap = PyObject_GetAttrString((PyObject *)&BridgeTensor_Type, "__dlpack_c_exchange_api__");
    DLPackExchangeAPI *ours = cap ? (DLPackExchangeAPI *)PyCapsule_GetPointer(cap, BRIDGE_NAME_API) : NULL;
    Py_XDECREF(cap);
    if (ours == NULL) return NULL;
    api = *ours;
    api.header.prev_api = NULL;
    api.managed_tensor_from_py_object_no_sync = handing_from;
    api.dltensor_from_py_object_no_sync = handing_peek;
  }
  return PyCapsule_New(&api, BRIDGE_NAME_API, NULL);
}

/* A producer and destination that break the C API's contract: each of its
 * functions does its work through bridge's own table (from the object's
 * `tensor` attribute, as the chain's tables do) and returns success, but
 * leaves a Python exception set. */
static DLPackExchangeAPI *ours_table(void) {
  PyObject *cap = PyObject_GetAttrString((PyObject *)&BridgeTensor_Type, "__dlpack_c_exchange_api__");
  DLPackExchangeAPI *ours = cap ? (DLPackExchangeAPI *)PyCapsule_GetPointer(cap, BRIDGE_NAME_API) : NULL;
  Py_XDECREF(cap);
  return ours;
}
static int lie(int rc) {
  if (rc == 0) PyErr_SetString(PyExc_RuntimeError, "left set by a lying exchange API");
  return rc;
}
static int lying_from(void *x, DLManagedTensorVersioned **out) {
  PyObject *t = PyObject_GetAttrString((PyObject *)x, "tensor");
  if (t == NULL) return -1;
  int rc = ours_table()->managed_tensor_from_py_object_no_sync(t, out);
  Py_DECREF(t);
  return lie(rc);
}
static int lying_peek(void *x, DLTensor *out) {
  PyObject *t = PyObject_GetAttrString((PyObject *)x, "tensor");
  if (t == NULL) return -1;
  int rc = ours_table()->dltensor_from_py_object_no_sync(t, out); /* x keeps t, and t its dims */
  Py_DECREF(t);
  return lie(rc);
}
static int lying_to(DLManagedTensorVersioned *m, void **out) {
  return lie(ours_table()->managed_tensor_to_py_object_no_sync(m, out));
}

/* lying_api() -> a "dlpack_exchange_api" capsule of such a table. */
static PyObject *py_lying_api(PyObject *mod, PyObject *unused) {
  (void)mod, (void)unused;
  static DLPackExchangeAPI api;
  if (api.managed_tensor_from_py_object_no_sync == NULL) {
    DLPackExchangeAPI *ours = ours_table();
    if (ours == NULL) return NULL;
    api = *ours;
    api.header.prev_api = NULL;
    api.managed_tensor_from_py_object_no_sync = lying_from;
    api.dltensor_from_py_object_no_sync = lying_peek;
    api.managed_tensor_to_py_object_no_sync = lying_to;
  }
  return PyCapsule_New(&api, BRIDGE_NAME_API, NULL);
}

/* api_from_head(api, obj) -> obj through the first table of the capsule's
 * chain, whatever its major version: what a consumer that does not walk
 * prev_api does (for the kit's tests of such a consumer). */
static PyObject *py_api_from_head(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) return PyErr_Format(PyExc_TypeError, "api_from_head(api, obj)");
  DLPackExchangeAPI *api = (DLPackExchangeAPI *)PyCapsule_GetPointer(args[0], BRIDGE_NAME_API);
  if (api == NULL) return NULL;
  DLManagedTensorVersioned *m = NULL;
  if (api->managed_tensor_from_py_object_no_sync((void *)args[1], &m) != 0 || m == NULL)
    return api_failed("managed_tensor_from_py_object_no_sync");
  return bridge_dlpack_take(m, 1);
}

/* exchange_chain_calls() -> (calls of major 1 tables, calls of unknown ones) */
static PyObject *py_exchange_chain_calls(PyObject *mod, PyObject *unused) {
  (void)mod, (void)unused;
  return Py_BuildValue("(KK)", (unsigned long long)chain_known_calls, (unsigned long long)chain_unknown_calls);
}

/* ------------------------------------ Arrow C Device Stream adapters */

/* A plain ArrowArrayStream seen as an ArrowDeviceArrayStream whose arrays
 * carry the given device fields (what Arrow's own C++ does for CPU streams;
 * with a CUDA device type and a sync event, a hand-made CUDA producer whose
 * addresses are never dereferenced), and the way back for CPU arrays. No
 * Python is touched: the inner stream's callbacks guard themselves. */
typedef struct {
  struct ArrowArrayStream inner;
  ArrowDeviceType array_type; /* the arrays' device type (a malformed stream: not the stream's) */
  int64_t device_id;
  void *sync_event;
} to_device_private;

static int to_device_get_schema(struct ArrowDeviceArrayStream *s, struct ArrowSchema *out) {
  to_device_private *p = (to_device_private *)s->private_data;
  return p->inner.get_schema(&p->inner, out);
}

static int to_device_get_next(struct ArrowDeviceArrayStream *s, struct ArrowDeviceArray *out) {
  to_device_private *p = (to_device_private *)s->private_data;
  memset(out, 0, sizeof *out);
  int rc = p->inner.get_next(&p->inner, &out->array);
  if (rc == 0 && out->array.release != NULL) {
    out->device_type = p->array_type;
    out->device_id = p->device_id;
    out->sync_event = p->sync_event;
  }
  return rc;
}

static const char *to_device_get_last_error(struct ArrowDeviceArrayStream *s) {
  to_device_private *p = (to_device_private *)s->private_data;
  return p->inner.get_last_error ? p->inner.get_last_error(&p->inner) : NULL;
}

static void to_device_release(struct ArrowDeviceArrayStream *s) {
  if (s->release == NULL) return;
  to_device_private *p = (to_device_private *)s->private_data;
  if (p->inner.release != NULL) p->inner.release(&p->inner);
  free(p);
  s->release = NULL;
}

typedef struct {
  struct ArrowDeviceArrayStream inner;
  char error[128];
} to_plain_private;

static int to_plain_get_schema(struct ArrowArrayStream *s, struct ArrowSchema *out) {
  to_plain_private *p = (to_plain_private *)s->private_data;
  p->error[0] = 0;
  return p->inner.get_schema(&p->inner, out);
}

static int to_plain_get_next(struct ArrowArrayStream *s, struct ArrowArray *out) {
  to_plain_private *p = (to_plain_private *)s->private_data;
  struct ArrowDeviceArray d;
  memset(&d, 0, sizeof d);
  p->error[0] = 0;
  int rc = p->inner.get_next(&p->inner, &d);
  if (rc != 0) return rc;
  if (d.array.release != NULL && d.device_type != ARROW_DEVICE_CPU) {
    snprintf(p->error, sizeof p->error, "a plain stream carries CPU arrays only, got device type %d",
             (int)d.device_type);
    d.array.release(&d.array);
    return EINVAL;
  }
  *out = d.array; /* moved */
  return 0;
}

static const char *to_plain_get_last_error(struct ArrowArrayStream *s) {
  to_plain_private *p = (to_plain_private *)s->private_data;
  if (p->error[0]) return p->error;
  return p->inner.get_last_error ? p->inner.get_last_error(&p->inner) : NULL;
}

static void to_plain_release(struct ArrowArrayStream *s) {
  if (s->release == NULL) return;
  to_plain_private *p = (to_plain_private *)s->private_data;
  if (p->inner.release != NULL) p->inner.release(&p->inner);
  free(p);
  s->release = NULL;
}

static void device_stream_capsule_destructor(PyObject *cap) {
  struct ArrowDeviceArrayStream *s =
      (struct ArrowDeviceArrayStream *)PyCapsule_GetPointer(cap, BRIDGE_NAME_ARROW_DEVICE_STREAM);
  if (s == NULL) {
    PyErr_Clear();
    return;
  }
  if (s->release != NULL) s->release(s);
  free(s);
}

static void stream_capsule_destructor(PyObject *cap) {
  struct ArrowArrayStream *s = (struct ArrowArrayStream *)PyCapsule_GetPointer(cap, BRIDGE_NAME_ARROW_STREAM);
  if (s == NULL) {
    PyErr_Clear();
    return;
  }
  if (s->release != NULL) s->release(s);
  free(s);
}

/* Move the unreleased stream behind a capsule of this name into `out` (the
 * capsule's struct marked released): 0, or -1 with ValueError. */
static int move_stream(PyObject *cap, const char *name, void *out, size_t size) {
  void *src = PyCapsule_IsValid(cap, name) ? PyCapsule_GetPointer(cap, name) : NULL;
  if (src == NULL) {
    PyErr_Format(PyExc_ValueError, "expected an unconsumed '%s' capsule", name);
    return -1;
  }
  memcpy(out, src, size);
  if (strcmp(name, BRIDGE_NAME_ARROW_STREAM) == 0)
    ((struct ArrowArrayStream *)src)->release = NULL;
  else
    ((struct ArrowDeviceArrayStream *)src)->release = NULL;
  return 0;
}

/* device_stream(stream_capsule, device_type=1, device_id=-1, sync_event=0,
 * array_device_type=None): None gives the arrays the stream's device type. */
static PyObject *py_device_stream(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs < 1 || nargs > 5)
    return PyErr_Format(PyExc_TypeError, "device_stream(stream_capsule, device_type=1, device_id=-1, "
                                         "sync_event=0, array_device_type=None)");
  long dev_type = nargs > 1 ? PyLong_AsLong(args[1]) : ARROW_DEVICE_CPU;
  long long dev_id = nargs > 2 ? PyLong_AsLongLong(args[2]) : -1;
  void *event = nargs > 3 ? PyLong_AsVoidPtr(args[3]) : NULL;
  long array_type = nargs > 4 && args[4] != Py_None ? PyLong_AsLong(args[4]) : dev_type;
  if (PyErr_Occurred()) return NULL;
  to_device_private *p = (to_device_private *)calloc(1, sizeof *p);
  struct ArrowDeviceArrayStream *s = (struct ArrowDeviceArrayStream *)calloc(1, sizeof *s);
  if (p == NULL || s == NULL) {
    free(p);
    free(s);
    return PyErr_NoMemory();
  }
  if (move_stream(args[0], BRIDGE_NAME_ARROW_STREAM, &p->inner, sizeof p->inner) < 0) {
    free(p);
    free(s);
    return NULL;
  }
  p->array_type = (ArrowDeviceType)array_type;
  p->device_id = dev_id;
  p->sync_event = event;
  s->device_type = (ArrowDeviceType)dev_type;
  s->get_schema = to_device_get_schema;
  s->get_next = to_device_get_next;
  s->get_last_error = to_device_get_last_error;
  s->private_data = p;
  s->release = to_device_release;
  PyObject *cap = PyCapsule_New(s, BRIDGE_NAME_ARROW_DEVICE_STREAM, device_stream_capsule_destructor);
  if (cap == NULL) {
    s->release(s);
    free(s);
  }
  return cap;
}

/* plain_stream(device_stream_capsule) */
static PyObject *py_plain_stream(PyObject *mod, PyObject *cap_in) {
  (void)mod;
  to_plain_private *p = (to_plain_private *)calloc(1, sizeof *p);
  struct ArrowArrayStream *s = (struct ArrowArrayStream *)calloc(1, sizeof *s);
  if (p == NULL || s == NULL) {
    free(p);
    free(s);
    return PyErr_NoMemory();
  }
  if (move_stream(cap_in, BRIDGE_NAME_ARROW_DEVICE_STREAM, &p->inner, sizeof p->inner) < 0) {
    free(p);
    free(s);
    return NULL;
  }
  s->get_schema = to_plain_get_schema;
  s->get_next = to_plain_get_next;
  s->get_last_error = to_plain_get_last_error;
  s->private_data = p;
  s->release = to_plain_release;
  PyObject *cap = PyCapsule_New(s, BRIDGE_NAME_ARROW_STREAM, stream_capsule_destructor);
  if (cap == NULL) {
    s->release(s);
    free(s);
  }
  return cap;
}

/* copy_simd(level): the copy kernel's instruction set from now on (0 element
 * loops, 1 SSE2, 2 AVX2, -1 the best the CPU has), so that tests reach every
 * path whatever the machine; returns the level before. */
static PyObject *py_copy_simd(PyObject *mod, PyObject *arg) {
  (void)mod;
  long level = PyLong_AsLong(arg);
  if (level == -1 && PyErr_Occurred()) return NULL;
  return PyLong_FromLong(bridge_copy_set_simd((int)level));
}

#define FAST(name, fn, doc) {name, (PyCFunction)(void (*)(void))fn, METH_FASTCALL, doc}
/* churn_host_blocks(ms) -> blocks allocated: for `ms` milliseconds, without
 * the GIL, allocate and free host blocks of the cache's sizes (what a DLPack
 * deleter or the exchange API's allocator does on a thread of another
 * library's), so that the host cache's lock is taken most of the time: for
 * the tests that fork while another thread holds it. */
static PyObject *py_churn_host_blocks(PyObject *mod, PyObject *arg) {
  (void)mod;
  long ms = PyLong_AsLong(arg);
  if (ms == -1 && PyErr_Occurred()) return NULL;
  long long n = 0;
  Py_BEGIN_ALLOW_THREADS
  struct timeval t0, t;
  gettimeofday(&t0, NULL);
  for (;;) {
    void *a = bridge_aligned_alloc((size_t)300 << 10, 0), *b = bridge_aligned_alloc((size_t)200 << 10, 0);
    bridge_aligned_free(a);
    bridge_aligned_free(b);
    n += 2;
    gettimeofday(&t, NULL);
    if ((t.tv_sec - t0.tv_sec) * 1000L + (t.tv_usec - t0.tv_usec) / 1000L >= ms) break;
  }
  Py_END_ALLOW_THREADS
  return PyLong_FromLongLong(n);
}

static PyMethodDef driver_functions[] = {
    {"churn_host_blocks", (PyCFunction)py_churn_host_blocks, METH_O,
     "churn_host_blocks(ms)\n--\n\nAllocate and free host blocks for ms milliseconds without the GIL; "
     "returns how many."},
    {"test_deleter_address", (PyCFunction)py_test_deleter_address, METH_O,
     "test_deleter_address(versioned, /)\n--\n\nThe address of a deleter that only counts its calls."},
    FAST("call_deleter_in_thread", py_call_deleter_in_thread,
         "call_deleter_in_thread(address, versioned, /)\n--\n\nRun a managed tensor's deleter on a "
         "new native thread that has no Python thread state."),
    FAST("make_capsule", py_make_capsule,
         "make_capsule(address, kind, /)\n--\n\nWrap a hand-made struct in a capsule (kind 0 "
         "\"dltensor\", 1 \"dltensor_versioned\", 2 a wrong name) with the standard destructor."),
    {"capsule_info", (PyCFunction)py_capsule_info, METH_O,
     "capsule_info(capsule, /)\n--\n\n(name, address) of a capsule, without consuming it."},
    {"copy_simd", (PyCFunction)py_copy_simd, METH_O,
     "copy_simd(level, /)\n--\n\nThe copy kernel's instruction set from now on (0 element loops, 1 "
     "SSE2, 2 AVX2, -1 the CPU's best; a level the CPU lacks is lowered); returns the one before."},
    {"mark_consumed", (PyCFunction)py_mark_consumed, METH_O,
     "mark_consumed(capsule, /)\n--\n\nRename the capsule to used_*, as a consumer does."},
    FAST("api_to_object", py_api_to_object,
         "api_to_object(api, tensor, /)\n--\n\nbridge's export of the tensor handed to the exchange "
         "API's managed_tensor_to_py_object_no_sync."),
    FAST("api_convert", py_api_convert,
         "api_convert(src_api, dst_api, obj, /)\n--\n\nobj handed from one exchange API to another: "
         "the source's managed_tensor_from_py_object_no_sync, then the destination's to_py_object."),
    FAST("api_peek", py_api_peek,
         "api_peek(api, obj, /)\n--\n\nThe DLTensor fields the exchange API reads from obj, as a tuple."),
    FAST("api_alloc", py_api_alloc,
         "api_alloc(api, shape, code, bits, device_type, device_id, /)\n--\n\nThe exchange API's own "
         "tensor object for a fresh allocation."),
    FAST("api_stream", py_api_stream,
         "api_stream(api, device_type, device_id, /)\n--\n\nThe API's current work stream as an int, "
         "or None when it has no such function."),
    FAST("exchange_chain", py_exchange_chain,
         "exchange_chain(majors, loop=False, /)\n--\n\nA DLPack exchange API capsule whose version "
         "chain has these major versions, first to last (prev_api); major 1 tables delegate to "
         "bridge's for the object's `tensor` attribute, the others count and fail. loop makes the "
         "last prev_api point back to the first."),
    FAST("device_stream", py_device_stream,
         "device_stream(stream_capsule, device_type=1, device_id=-1, sync_event=0, "
         "array_device_type=None, /)\n--\n\nAn 'arrow_device_array_stream' capsule over a "
         "plain 'arrow_array_stream' (moved out of its capsule) whose arrays carry these device "
         "fields (sync_event: an address, 0 for NULL; array_device_type None: the stream's)."),
    {"plain_stream", (PyCFunction)py_plain_stream, METH_O,
     "plain_stream(device_stream_capsule, /)\n--\n\nAn 'arrow_array_stream' capsule over a device "
     "stream of CPU arrays (moved out of its capsule); another device type fails get_next."},
    FAST("api_from_head", py_api_from_head,
         "api_from_head(api, obj, /)\n--\n\nobj through the first table of the exchange API's "
         "chain, whatever its major version (a consumer that does not walk prev_api)."),
    {"lying_api", (PyCFunction)py_lying_api, METH_NOARGS,
     "lying_api()\n--\n\nAn exchange API capsule whose functions do their work (from the object's "
     "`tensor`) and return success with a Python exception set."},
    {"handing_api", (PyCFunction)py_handing_api, METH_NOARGS,
     "handing_api()\n--\n\nAn exchange API capsule whose managed_tensor_from_py_object_no_sync hands over, "
     "unchecked, the DLManagedTensorVersioned at the object's `managed` address (a hostile producer)."},
    {"exchange_chain_calls", (PyCFunction)py_exchange_chain_calls, METH_NOARGS,
     "exchange_chain_calls()\n--\n\n(calls of exchange_chain's major 1 tables, calls of the others)."},
    {NULL, NULL, 0, NULL},
};

int bridge_drivers_init(PyObject *mod) { return PyModule_AddFunctions(mod, driver_functions); }
