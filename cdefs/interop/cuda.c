/* CUDA, through the driver API loaded at first use (libcuda.so.1, which
 * every NVIDIA driver installs): the stream ordering the DLPack spec asks of
 * a producer and a consumer, the device a pointer lives on, and every copy of
 * CUDA memory bridge makes (clone, copy_, numpy(force=True),
 * __dlpack__(copy=True), dl_device): one copy engine, `run_copy`, over the
 * driver's copy functions. There is no build-time CUDA dependency and bridge
 * launches no kernels; without a driver, DLPack paths raise BufferError and
 * clone/copy_ RuntimeError.
 *
 * Streams are DLPack's integers: 1 the legacy default stream, 2 the
 * per-thread default stream, anything else a cudaStream_t/CUstream handle
 * (the driver API takes all three as CUstream). A storage records the stream
 * its memory's last work was ordered on (0: none to wait for). */

#include "cuda_driver.h"

#include <limits.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

bridge_cuda_driver bridge_cu;
static CUcontext contexts[MAX_DEVICES];
size_t bridge_cuda_max_pitch[MAX_DEVICES]; /* bytes; 0: rows are copied one call each */
static char load_error[256];


static int load(void) {
  if (bridge_cu.state != 0) return bridge_cu.state;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    snprintf(load_error, sizeof load_error, "the CUDA driver library could not be loaded (%s)", dlerror());
    return bridge_cu.state = -1;
  }
  struct {
    void **slot;
    const char *name;
  } syms[] = {
      {(void **)&bridge_cu.Init, "cuInit"},
      {(void **)&bridge_cu.DeviceGet, "cuDeviceGet"},
      {(void **)&bridge_cu.DeviceGetAttribute, "cuDeviceGetAttribute"},
      {(void **)&bridge_cu.PrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
      {(void **)&bridge_cu.CtxPushCurrent, "cuCtxPushCurrent_v2"},
      {(void **)&bridge_cu.CtxPopCurrent, "cuCtxPopCurrent_v2"},
      {(void **)&bridge_cu.EventCreate, "cuEventCreate"},
      {(void **)&bridge_cu.EventRecord, "cuEventRecord"},
      {(void **)&bridge_cu.StreamWaitEvent, "cuStreamWaitEvent"},
      {(void **)&bridge_cu.EventDestroy, "cuEventDestroy_v2"},
      {(void **)&bridge_cu.PointerGetAttribute, "cuPointerGetAttribute"},
      {(void **)&bridge_cu.MemAlloc, "cuMemAlloc_v2"},
      {(void **)&bridge_cu.MemFree, "cuMemFree_v2"},
      {(void **)&bridge_cu.MemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"},
      {(void **)&bridge_cu.MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
      {(void **)&bridge_cu.MemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"},
      {(void **)&bridge_cu.Memcpy2DAsync, "cuMemcpy2DAsync_v2"},
      {(void **)&bridge_cu.StreamSynchronize, "cuStreamSynchronize"},
      {(void **)&bridge_cu.GetErrorName, "cuGetErrorName"},
      {(void **)&bridge_cu.GetErrorString, "cuGetErrorString"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(h, syms[i].name);
    if (*syms[i].slot == NULL) {
      snprintf(load_error, sizeof load_error, "the CUDA driver lacks %s", syms[i].name);
      return bridge_cu.state = -1;
    }
  }
  if (bridge_cu.Init(0) != 0) {
    snprintf(load_error, sizeof load_error, "cuInit failed: no usable CUDA device");
    return bridge_cu.state = -1;
  }
  return bridge_cu.state = 1;
}

/* `exc` naming the failed call, the CUDA error's name and its description. */
int bridge_cuda_error(PyObject *exc, CUresult rc, const char *what) {
  const char *name = NULL, *s = NULL;
  if (bridge_cu.GetErrorName == NULL || bridge_cu.GetErrorName(rc, &name) != 0) name = NULL;
  if (bridge_cu.GetErrorString == NULL || bridge_cu.GetErrorString(rc, &s) != 0) s = NULL;
  PyErr_Format(exc, "%s failed: %s (CUDA error %d: %s)", what, name ? name : "an unknown CUDA error", rc,
               s ? s : "no description");
  return -1;
}

/* Make device `dev`'s primary context current on this thread (pushed; pop
 * with bridge_cuda_leave()); `exc` when there is no driver or the device cannot open. */
int bridge_cuda_enter(int dev, PyObject *exc) {
  if (load() < 0) {
    PyErr_Format(exc, "CUDA stream ordering and copies need the CUDA driver: %s", load_error);
    return -1;
  }
  if (dev < 0 || dev >= MAX_DEVICES) {
    PyErr_Format(exc, "CUDA device %d is out of range", dev);
    return -1;
  }
  if (contexts[dev] == NULL) {
    CUdevice d;
    CUresult rc = bridge_cu.DeviceGet(&d, dev);
    if (rc == 0) rc = bridge_cu.PrimaryCtxRetain(&contexts[dev], d); /* kept for the process */
    if (rc != 0) return bridge_cuda_error(exc, rc, "opening the CUDA device");
    int pitch = 0; /* unknown: every row is a call of its own */
    if (bridge_cu.DeviceGetAttribute(&pitch, CU_DEVICE_ATTRIBUTE_MAX_PITCH, d) != 0 || pitch < 0) pitch = 0;
    bridge_cuda_max_pitch[dev] = (size_t)pitch;
  }
  CUresult rc = bridge_cu.CtxPushCurrent(contexts[dev]);
  return rc == 0 ? 0 : bridge_cuda_error(exc, rc, "cuCtxPushCurrent");
}

static int enter(int dev) { return bridge_cuda_enter(dev, PyExc_BufferError); }

void bridge_cuda_leave(void) {
  CUcontext c;
  bridge_cu.CtxPopCurrent(&c);
}

/* In an entered context, without the GIL: make `consumer` wait for the work
 * enqueued so far on `producer` (an event recorded on one and waited on the
 * other; nothing when they are the same stream or the producer has nothing to
 * wait for). 0 or the failing call's result, *what naming it. */
CUresult bridge_cuda_order_streams(uintptr_t producer, uintptr_t consumer, const char **what) {
  if (producer == 0 || producer == consumer) return 0;
  CUevent ev = NULL;
  CUresult rc = bridge_cu.EventCreate(&ev, CU_EVENT_DISABLE_TIMING);
  *what = "cuEventCreate";
  if (rc == 0 && (rc = bridge_cu.EventRecord(ev, (CUstream)producer)) != 0) *what = "recording an event on the producer's stream";
  if (rc == 0 && (rc = bridge_cu.StreamWaitEvent((CUstream)consumer, ev, 0)) != 0) *what = "making the consumer's stream wait";
  if (ev != NULL) bridge_cu.EventDestroy(ev); /* destroying a recorded event is deferred by the driver */
  return rc;
}

int bridge_cuda_order(int dev, uintptr_t producer, uintptr_t consumer) {
  if (producer == 0 || producer == consumer) return 0;
  if (enter(dev) < 0) return -1;
  const char *what = NULL;
  CUresult rc = bridge_cuda_order_streams(producer, consumer, &what);
  bridge_cuda_leave();
  return rc == 0 ? 0 : bridge_cuda_error(PyExc_BufferError, rc, what);
}

/* Block until the work enqueued on `stream` is done (GIL released). */
int bridge_cuda_synchronize(int dev, uintptr_t stream) {
  if (stream == 0) return 0;
  if (enter(dev) < 0) return -1;
  CUresult rc;
  Py_BEGIN_ALLOW_THREADS
  rc = bridge_cu.StreamSynchronize((CUstream)stream);
  Py_END_ALLOW_THREADS
  bridge_cuda_leave();
  return rc == 0 ? 0 : bridge_cuda_error(PyExc_BufferError, rc, "cuStreamSynchronize");
}

/* Make `stream` wait for an Arrow producer's sync event (a CUevent*). */
int bridge_cuda_wait_event(int dev, void *event_ptr, uintptr_t stream) {
  if (event_ptr == NULL) return 0;
  if (enter(dev) < 0) return -1;
  CUresult rc = bridge_cu.StreamWaitEvent((CUstream)stream, *(CUevent *)event_ptr, 0);
  bridge_cuda_leave();
  return rc == 0 ? 0 : bridge_cuda_error(PyExc_BufferError, rc, "waiting on the Arrow producer's sync event");
}

/* ---------------------------------------------------- device memory */

/* The owner of device memory bridge allocated: frees it when it dies. */
typedef struct {
  PyObject_HEAD
  CUdeviceptr ptr;
  int dev;
} CudaBlock;

static void cuda_block_dealloc(CudaBlock *b) {
  /* At interpreter exit the driver may be torn down first: ignore errors. */
  if (b->ptr && bridge_cu.state == 1 && contexts[b->dev] != NULL && bridge_cu.CtxPushCurrent(contexts[b->dev]) == 0) {
    bridge_cu.MemFree(b->ptr);
    bridge_cuda_leave();
  }
  PyObject_Free(b);
}

static PyTypeObject CudaBlock_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bridge._C.CudaBlock",
    .tp_basicsize = sizeof(CudaBlock),
    .tp_dealloc = (destructor)cuda_block_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Device memory bridge allocated (freed when the last storage over it dies).",
};

/* A storage over `nbytes` of new memory on cuda:`dev` (none for 0 bytes, which
 * needs no driver), owned by a CudaBlock; MemoryError when the driver has no
 * room, `exc` without a driver. */
StorageObject *bridge_cuda_alloc(int dev, int64_t nbytes, PyObject *exc) {
  CudaBlock *b = PyObject_New(CudaBlock, &CudaBlock_Type);
  if (b == NULL) return NULL;
  b->ptr = 0;
  b->dev = dev;
  if (nbytes > 0) {
    if (bridge_cuda_enter(dev, exc) < 0) {
      Py_DECREF(b);
      return NULL;
    }
    CUresult rc = bridge_cu.MemAlloc(&b->ptr, (size_t)nbytes);
    bridge_cuda_leave();
    if (rc != 0) {
      b->ptr = 0;
      Py_DECREF(b);
      PyErr_Format(PyExc_MemoryError, "cuMemAlloc of %lld bytes on cuda:%d failed (CUDA error %d)",
                   (long long)nbytes, dev, rc);
      return NULL;
    }
  }
  StorageObject *s = bridge_storage_new((char *)(uintptr_t)b->ptr, nbytes, kDLCUDA, dev, (PyObject *)b, 0);
  Py_DECREF(b);
  return s;
}

/* ------------------------------------------------------ Python side */

static PyObject *tensor_arg(PyObject *o) {
  if (!Tensor_Check(o)) return PyErr_Format(PyExc_TypeError, "expected a bridge.Tensor, got %.200s", Py_TYPE(o)->tp_name);
  return o;
}

static int stream_arg(PyObject *o, uintptr_t *out) {
  unsigned long long v = PyLong_AsUnsignedLongLong(o);
  if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
  *out = (uintptr_t)v;
  return 0;
}

int bridge_cuda_stream_protocol(PyObject *obj, long long *handle) {
  static PyObject *name;
  if (name == NULL && (name = PyUnicode_InternFromString("__cuda_stream__")) == NULL) return -1;
  PyObject *method = PyObject_GetAttr(obj, name);
  if (method == NULL) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    return 0;
  }
  PyObject *r = PyObject_CallNoArgs(method);
  Py_DECREF(method);
  if (r == NULL) return -1;
  long long version = -1, h = -1;
  int ok = PyTuple_Check(r) && PyTuple_GET_SIZE(r) == 2 && PyLong_Check(PyTuple_GET_ITEM(r, 0)) &&
           PyLong_Check(PyTuple_GET_ITEM(r, 1));
  if (ok) {
    version = PyLong_AsLongLong(PyTuple_GET_ITEM(r, 0));
    unsigned long long u = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(r, 1));
    if (PyErr_Occurred() || u > (unsigned long long)LLONG_MAX) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "%.200s.__cuda_stream__() returned %R: the handle must be an "
                   "address (an int >= 0)", Py_TYPE(obj)->tp_name, r);
      Py_DECREF(r);
      return -1;
    }
    h = (long long)u;
  } else {
    PyErr_Format(PyExc_TypeError, "%.200s.__cuda_stream__() returned %R, not a (version, handle) tuple of ints",
                 Py_TYPE(obj)->tp_name, r);
    Py_DECREF(r);
    return -1;
  }
  if (version != 0) {
    PyErr_Format(PyExc_ValueError, "%.200s.__cuda_stream__() speaks version %lld of the CUDA stream "
                 "protocol; bridge knows version 0", Py_TYPE(obj)->tp_name, version);
    Py_DECREF(r);
    return -1;
  }
  Py_DECREF(r);
  *handle = h ? h : 1; /* NULL is the legacy default stream, DLPack's 1 */
  return 1;
}

/* cuda_stream_handle(obj) -> the stream handle obj's __cuda_stream__ gives. */
static PyObject *py_cuda_stream_handle(PyObject *mod, PyObject *obj) {
  (void)mod;
  long long h;
  int r = bridge_cuda_stream_protocol(obj, &h);
  if (r < 0) return NULL;
  if (r == 0)
    return PyErr_Format(PyExc_TypeError, "%.200s has no __cuda_stream__ (cuda.core's CUDA stream protocol)",
                        Py_TYPE(obj)->tp_name);
  return PyLong_FromLongLong(h);
}

/* cuda_wait(tensor, stream): make `stream` wait for the tensor's memory. */
static PyObject *py_cuda_wait(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  uintptr_t s;
  if (nargs != 2 || tensor_arg(args[0]) == NULL || stream_arg(args[1], &s) < 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "cuda_wait(tensor, stream)");
    return NULL;
  }
  StorageObject *st = ((TensorObject *)args[0])->storage;
  if (st->dev_type != kDLCUDA) Py_RETURN_NONE;
  if (bridge_cuda_order(st->dev_id, st->stream, s) < 0) return NULL;
  Py_RETURN_NONE;
}

/* cuda_copy(dst, src): dst[...] = src by the copy engine. */
static PyObject *py_cuda_copy(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) return PyErr_Format(PyExc_TypeError, "cuda_copy(dst, src) takes 2 arguments (%zd given)", nargs);
  if (tensor_arg(args[0]) == NULL || tensor_arg(args[1]) == NULL) return NULL;
  if (bridge_cuda_copy((TensorObject *)args[0], (TensorObject *)args[1], PyExc_RuntimeError) < 0) return NULL;
  Py_RETURN_NONE;
}

/* cuda_clone(tensor, strides) -> a copy in new memory on the tensor's device. */
static PyObject *py_cuda_clone(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) return PyErr_Format(PyExc_TypeError, "cuda_clone(tensor, strides) takes 2 arguments (%zd given)", nargs);
  if (tensor_arg(args[0]) == NULL) return NULL;
  TensorObject *t = (TensorObject *)args[0];
  if (t->storage->dev_type != kDLCUDA) {
    PyObject *dev = bridge_storage_device(t->storage);
    if (dev) PyErr_Format(PyExc_ValueError, "cuda_clone() takes a CUDA tensor, not one on %S", dev);
    Py_XDECREF(dev);
    return NULL;
  }
  int64_t strides[BRIDGE_MAX_NDIM], numel = bridge_numel(t), nbytes;
  int n = bridge_parse_dims(args[1], strides, BRIDGE_MAX_NDIM, "strides");
  if (n < 0) return NULL;
  if (n != t->ndim)
    return PyErr_Format(PyExc_ValueError, "cuda_clone(): %d strides for a %d-d tensor", n, (int)t->ndim);
  for (int i = 0; i < n; i++)
    if (strides[i] < 0) return PyErr_Format(PyExc_ValueError, "cuda_clone() needs a dense layout (strides >= 0)");
  if (!bridge_is_non_overlapping_and_dense(n, t->shape, strides))
    return PyErr_Format(PyExc_ValueError, "cuda_clone() needs a dense layout of the tensor's shape");
  if (__builtin_mul_overflow(numel, (int64_t)t->dtype->itemsize, &nbytes))
    return PyErr_Format(PyExc_ValueError, "a clone of %lld elements does not fit in memory", (long long)numel);
  StorageObject *s = bridge_cuda_alloc(t->storage->dev_id, nbytes, PyExc_RuntimeError);
  if (s == NULL) return NULL;
  PyObject *out = bridge_tensor_new(s, t->dtype, t->ndim, t->shape, strides, 0, GEOM_USER);
  Py_DECREF(s);
  if (out != NULL && bridge_cuda_copy((TensorObject *)out, t, PyExc_RuntimeError) < 0) Py_CLEAR(out);
  return out;
}

/* cuda_set_stream(stream) -> previous: the thread's consumer stream. */
static PyObject *py_cuda_set_stream(PyObject *mod, PyObject *arg) {
  (void)mod;
  uintptr_t s;
  if (stream_arg(arg, &s) < 0) return NULL;
  return PyLong_FromUnsignedLongLong(bridge_set_current_stream(s));
}

static PyObject *py_cuda_current_stream(PyObject *mod, PyObject *unused) {
  (void)mod;
  (void)unused;
  return PyLong_FromUnsignedLongLong(bridge_current_stream());
}

/* cuda_pointer_device(address) -> the device ordinal the pointer belongs to,
 * or -1 when the driver cannot say (no driver, not a device pointer). */
static PyObject *py_cuda_pointer_device(PyObject *mod, PyObject *arg) {
  (void)mod;
  unsigned long long p = PyLong_AsUnsignedLongLong(arg);
  if (p == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
  int dev = -1;
  if (load() == 1 && bridge_cu.PointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)p) != 0)
    dev = -1;
  return PyLong_FromLong(dev);
}

static PyMethodDef cuda_functions[] = {
    {"cuda_wait", (PyCFunction)(void (*)(void))py_cuda_wait, METH_FASTCALL,
     "cuda_wait(tensor, stream, /)\n--\n\nMake `stream` wait for the work on the tensor's memory "
     "(an event recorded on the storage's stream); nothing for host tensors."},
    {"cuda_copy", (PyCFunction)(void (*)(void))py_cuda_copy, METH_FASTCALL,
     "cuda_copy(dst, src, /)\n--\n\nCopy src (broadcast to dst's shape, same dtype) into dst, one of them "
     "CUDA memory and the other CUDA or host memory, through the CUDA driver's copy engine: on the "
     "thread's consumer stream after the work pending on both storages (a copy to the host on the "
     "source's stream), complete on return when host memory is involved. Layouts whose innermost dim is "
     "not contiguous on both sides go through host memory. RuntimeError without a driver or when a "
     "driver call fails (naming the CUDA error); ValueError for other dtypes, shapes that do not "
     "broadcast or a read-only dst."},
    {"cuda_clone", (PyCFunction)(void (*)(void))py_cuda_clone, METH_FASTCALL,
     "cuda_clone(tensor, strides, /)\n--\n\nA copy of a CUDA tensor in new memory on its device (a "
     "bridge._C.CudaBlock), laid out with `strides` (a dense layout of its shape), by cuda_copy."},
    {"cuda_set_stream", (PyCFunction)py_cuda_set_stream, METH_O,
     "cuda_set_stream(stream, /)\n--\n\nSet this thread's consumer stream; returns the previous one."},
    {"cuda_current_stream", (PyCFunction)py_cuda_current_stream, METH_NOARGS,
     "cuda_current_stream()\n--\n\nThis thread's consumer stream (1, the legacy default, unless set)."},
    {"cuda_stream_handle", (PyCFunction)py_cuda_stream_handle, METH_O,
     "cuda_stream_handle(obj, /)\n--\n\nThe CUDA stream handle an object speaking cuda.core's "
     "stream protocol gives (__cuda_stream__() -> (0, address); address 0, the default stream, "
     "is 1, the legacy default). TypeError without the protocol or for a malformed answer; "
     "ValueError for another protocol version or a negative handle."},
    {"cuda_pointer_device", (PyCFunction)py_cuda_pointer_device, METH_O,
     "cuda_pointer_device(address, /)\n--\n\nThe CUDA device a pointer belongs to, -1 when unknown."},
    {NULL, NULL, 0, NULL},
};

/* A child forked after the driver was initialised cannot use it (the CUDA
 * driver does not survive fork: every call fails, or hangs, in the child), so
 * the child sees CUDA as unavailable, with the reason; one forked before
 * loads the driver itself. Its contexts are the parent's: forgotten, and
 * device memory a storage inherited is never freed through them. */
static void cuda_child(void) {
  if (bridge_cu.state == 1) {
    snprintf(load_error, sizeof load_error,
             "this process was forked after its parent initialised CUDA, and the CUDA driver does not survive "
             "fork (start it with multiprocessing's 'spawn' or 'forkserver' method)");
    bridge_cu.state = -1;
  }
  memset(contexts, 0, sizeof contexts);
}

int bridge_cuda_init(PyObject *mod) {
  static int registered;
  if (!registered && pthread_atfork(NULL, NULL, cuda_child) != 0) {
    PyErr_SetString(PyExc_RuntimeError, "pthread_atfork failed for bridge's CUDA state");
    return -1;
  }
  registered = 1;
  if (PyType_Ready(&CudaBlock_Type) < 0) return -1;
  return PyModule_AddFunctions(mod, cuda_functions);
}
