/* Drivers for tests and the conformance kit, apart from the production code:
 * the module bridge._drivers. Hand-made capsules over structs built with
 * cffi, deleters that only count, a deleter run from a thread with no Python
 * state, and callers of any library's DLPack C exchange API. */

#include "interop/interop.h"

#include <pthread.h>
#include <stdio.h>

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

static DLPackExchangeAPI *api_of(PyObject *capsule) {
  return (DLPackExchangeAPI *)PyCapsule_GetPointer(capsule, BRIDGE_NAME_API);
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
  if (src->header.version.major != DLPACK_MAJOR_VERSION || dst->header.version.major != DLPACK_MAJOR_VERSION)
    return PyErr_Format(PyExc_BufferError, "exchange API major versions %u and %u: only %d is known",
                        src->header.version.major, dst->header.version.major, DLPACK_MAJOR_VERSION);
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
static PyMethodDef driver_functions[] = {
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
    {NULL, NULL, 0, NULL},
};

int bridge_drivers_init(PyObject *mod) { return PyModule_AddFunctions(mod, driver_functions); }
