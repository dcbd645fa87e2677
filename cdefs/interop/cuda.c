/* CUDA, through the driver API loaded at first use (libcuda.so.1, which
 * every NVIDIA driver installs): the stream ordering the DLPack spec asks of
 * a producer and a consumer, the device a pointer lives on, and copies of a
 * view's bytes through the copy engine into memory bridge allocates. There is
 * no build-time CUDA dependency; without a driver these raise BufferError.
 *
 * Streams are DLPack's integers: 1 the legacy default stream, 2 the
 * per-thread default stream, anything else a cudaStream_t/CUstream handle
 * (the driver API takes all three as CUstream). A storage records the stream
 * its memory's last work was ordered on (0: none to wait for). */

#include "interop.h"

#include <limits.h>

#include <dlfcn.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUstream, *CUevent;
typedef unsigned long long CUdeviceptr;
#define CU_EVENT_DISABLE_TIMING 0x2
#define CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL 9
#define MAX_DEVICES 64

static struct {
  int state; /* 0 not tried, 1 loaded, -1 unavailable */
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext *);
  CUresult (*EventCreate)(CUevent *, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*StreamWaitEvent)(CUstream, CUevent, unsigned);
  CUresult (*EventDestroy)(CUevent);
  CUresult (*PointerGetAttribute)(void *, int, CUdeviceptr);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*GetErrorString)(CUresult, const char **);
} cu;
static CUcontext contexts[MAX_DEVICES];
static char load_error[256];


static int load(void) {
  if (cu.state != 0) return cu.state;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    snprintf(load_error, sizeof load_error, "the CUDA driver library could not be loaded (%s)", dlerror());
    return cu.state = -1;
  }
  struct {
    void **slot;
    const char *name;
  } syms[] = {
      {(void **)&cu.Init, "cuInit"},
      {(void **)&cu.DeviceGet, "cuDeviceGet"},
      {(void **)&cu.PrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
      {(void **)&cu.CtxPushCurrent, "cuCtxPushCurrent_v2"},
      {(void **)&cu.CtxPopCurrent, "cuCtxPopCurrent_v2"},
      {(void **)&cu.EventCreate, "cuEventCreate"},
      {(void **)&cu.EventRecord, "cuEventRecord"},
      {(void **)&cu.StreamWaitEvent, "cuStreamWaitEvent"},
      {(void **)&cu.EventDestroy, "cuEventDestroy_v2"},
      {(void **)&cu.PointerGetAttribute, "cuPointerGetAttribute"},
      {(void **)&cu.MemAlloc, "cuMemAlloc_v2"},
      {(void **)&cu.MemFree, "cuMemFree_v2"},
      {(void **)&cu.MemcpyAsync, "cuMemcpyAsync"},
      {(void **)&cu.StreamSynchronize, "cuStreamSynchronize"},
      {(void **)&cu.GetErrorString, "cuGetErrorString"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(h, syms[i].name);
    if (*syms[i].slot == NULL) {
      snprintf(load_error, sizeof load_error, "the CUDA driver lacks %s", syms[i].name);
      return cu.state = -1;
    }
  }
  if (cu.Init(0) != 0) {
    snprintf(load_error, sizeof load_error, "cuInit failed: no usable CUDA device");
    return cu.state = -1;
  }
  return cu.state = 1;
}

static int cu_error(CUresult rc, const char *what) {
  const char *s = NULL;
  if (cu.GetErrorString == NULL || cu.GetErrorString(rc, &s) != 0) s = NULL;
  PyErr_Format(PyExc_BufferError, "%s failed: CUDA error %d (%s)", what, rc, s ? s : "unknown");
  return -1;
}

/* Make device `dev`'s primary context current on this thread (pushed; pop
 * with leave()). */
static int enter(int dev) {
  if (load() < 0) {
    PyErr_Format(PyExc_BufferError, "CUDA stream ordering and copies need the CUDA driver: %s", load_error);
    return -1;
  }
  if (dev < 0 || dev >= MAX_DEVICES) {
    PyErr_Format(PyExc_BufferError, "CUDA device %d is out of range", dev);
    return -1;
  }
  if (contexts[dev] == NULL) {
    CUdevice d;
    CUresult rc = cu.DeviceGet(&d, dev);
    if (rc == 0) rc = cu.PrimaryCtxRetain(&contexts[dev], d); /* kept for the process */
    if (rc != 0) return cu_error(rc, "opening the CUDA device");
  }
  CUresult rc = cu.CtxPushCurrent(contexts[dev]);
  return rc == 0 ? 0 : cu_error(rc, "cuCtxPushCurrent");
}

static void leave(void) {
  CUcontext c;
  cu.CtxPopCurrent(&c);
}

/* Make `consumer` wait for the work enqueued so far on `producer` (an event
 * recorded on one and waited on the other; nothing when they are the same
 * stream or the producer has nothing to wait for). */
int bridge_cuda_order(int dev, uintptr_t producer, uintptr_t consumer) {
  if (producer == 0 || producer == consumer) return 0;
  if (enter(dev) < 0) return -1;
  CUevent ev = NULL;
  CUresult rc = cu.EventCreate(&ev, CU_EVENT_DISABLE_TIMING);
  const char *what = "cuEventCreate";
  if (rc == 0 && (rc = cu.EventRecord(ev, (CUstream)producer)) != 0) what = "recording an event on the producer's stream";
  if (rc == 0 && (rc = cu.StreamWaitEvent((CUstream)consumer, ev, 0)) != 0) what = "making the consumer's stream wait";
  if (ev != NULL) cu.EventDestroy(ev); /* destroying a recorded event is deferred by the driver */
  leave();
  return rc == 0 ? 0 : cu_error(rc, what);
}

/* Block until the work enqueued on `stream` is done (GIL released). */
int bridge_cuda_synchronize(int dev, uintptr_t stream) {
  if (stream == 0) return 0;
  if (enter(dev) < 0) return -1;
  CUresult rc;
  Py_BEGIN_ALLOW_THREADS
  rc = cu.StreamSynchronize((CUstream)stream);
  Py_END_ALLOW_THREADS
  leave();
  return rc == 0 ? 0 : cu_error(rc, "cuStreamSynchronize");
}

/* Make `stream` wait for an Arrow producer's sync event (a CUevent*). */
int bridge_cuda_wait_event(int dev, void *event_ptr, uintptr_t stream) {
  if (event_ptr == NULL) return 0;
  if (enter(dev) < 0) return -1;
  CUresult rc = cu.StreamWaitEvent((CUstream)stream, *(CUevent *)event_ptr, 0);
  leave();
  return rc == 0 ? 0 : cu_error(rc, "waiting on the Arrow producer's sync event");
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
  if (b->ptr && cu.state == 1 && contexts[b->dev] != NULL && cu.CtxPushCurrent(contexts[b->dev]) == 0) {
    cu.MemFree(b->ptr);
    leave();
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
  if (load() == 1 && cu.PointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)p) != 0)
    dev = -1;
  return PyLong_FromLong(dev);
}

/* bridge_cuda_transfer(tensor, dev_type, dev_id) -> a copy of the tensor on
 * (dev_type, dev_id), CPU or CUDA, made by the copy engine: the bytes the
 * view reaches are copied as one span, so the copy keeps the view's strides.
 * The copy is ordered after the source's stream and complete on return for
 * the host; a device copy is ordered on the thread's consumer stream. */
PyObject *bridge_cuda_transfer(TensorObject *t, int to_type, int to_id) {
  StorageObject *src = t->storage;
  int from_cuda = src->dev_type == kDLCUDA, to_cuda = to_type == kDLCUDA;
  if (!(from_cuda || bridge_host_accessible(src->dev_type)) || !(to_cuda || to_type == kDLCPU))
    return PyErr_Format(PyExc_BufferError, "bridge copies only between CPU and CUDA memory");
  if (bridge_tensor_check_bounds(t, PyExc_BufferError) < 0) return NULL;
  int64_t isz = t->dtype->itemsize, nbytes = (t->hi - t->lo) * isz;
  char *span = t->lo == t->hi ? NULL : src->data + t->lo * isz;
  int dev = from_cuda ? src->dev_id : to_id;
  uintptr_t stream = to_cuda ? bridge_current_stream() : (from_cuda ? (src->stream ? src->stream : 1) : 1);
  StorageObject *dst;
  if (to_cuda) {
    if (enter(dev) < 0) return NULL;
    CudaBlock *b = PyObject_New(CudaBlock, &CudaBlock_Type);
    if (b == NULL) {
      leave();
      return NULL;
    }
    b->ptr = 0;
    b->dev = dev;
    CUresult rc = nbytes ? cu.MemAlloc(&b->ptr, (size_t)nbytes) : 0;
    leave();
    if (rc != 0) {
      Py_DECREF(b);
      return PyErr_Format(PyExc_MemoryError, "cuMemAlloc of %lld bytes on cuda:%d failed (CUDA error %d)",
                          (long long)nbytes, dev, rc);
    }
    dst = bridge_storage_new((char *)(uintptr_t)b->ptr, nbytes, kDLCUDA, dev, (PyObject *)b, 0);
    Py_DECREF(b);
  } else {
    dst = bridge_storage_alloc(nbytes, 0);
  }
  if (dst == NULL) return NULL;
  if (nbytes) {
    /* Unified addressing: one call copies in any direction. */
    if (from_cuda && bridge_cuda_order(dev, src->stream, stream) < 0) goto fail;
    if (enter(dev) < 0) goto fail;
    CUresult rc;
    Py_BEGIN_ALLOW_THREADS
    rc = cu.MemcpyAsync((CUdeviceptr)(uintptr_t)dst->data, (CUdeviceptr)(uintptr_t)span, (size_t)nbytes,
                        (CUstream)stream);
    /* host memory is read or written by the copy: done before returning */
    if (rc == 0 && !(from_cuda && to_cuda)) rc = cu.StreamSynchronize((CUstream)stream);
    Py_END_ALLOW_THREADS
    leave();
    if (rc != 0) {
      cu_error(rc, "cuMemcpyAsync");
      goto fail;
    }
  }
  dst->stream = to_cuda ? stream : 0;
  PyObject *out = bridge_tensor_new(dst, t->dtype, t->ndim, t->shape, t->strides, t->offset - t->lo, GEOM_DERIVED);
  Py_DECREF(dst);
  return out;
fail:
  Py_DECREF(dst);
  return NULL;
}

static PyMethodDef cuda_functions[] = {
    {"cuda_wait", (PyCFunction)(void (*)(void))py_cuda_wait, METH_FASTCALL,
     "cuda_wait(tensor, stream, /)\n--\n\nMake `stream` wait for the work on the tensor's memory "
     "(an event recorded on the storage's stream); nothing for host tensors."},
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

int bridge_cuda_init(PyObject *mod) {
  if (PyType_Ready(&CudaBlock_Type) < 0) return -1;
  return PyModule_AddFunctions(mod, cuda_functions);
}
