/* DLPack export: the managed tensor bridge hands out (one allocation: the
 * struct, then shape, then strides), its deleter and the capsule destructor,
 * and Tensor.__dlpack__ / __dlpack_device__ with every export keyword
 * (stream, max_version, dl_device, copy) parsed and checked here, once. The
 * rules they share with the import side (what a stream may be, which devices
 * bridge copies between, device specs) live here too. */

#include "interop.h"

#include <stdlib.h>

const char BRIDGE_NAME_LEGACY[] = "dltensor";
const char BRIDGE_NAME_VERSIONED[] = "dltensor_versioned";
const char BRIDGE_NAME_USED_LEGACY[] = "used_dltensor";
const char BRIDGE_NAME_USED_VERSIONED[] = "used_dltensor_versioned";
#define NAME_LEGACY BRIDGE_NAME_LEGACY
#define NAME_VERSIONED BRIDGE_NAME_VERSIONED

/* The DLPack v1.3 ABI on LP64 platforms: a compiler, not a reviewer, catches
 * an edit that moves a field. */
#if UINTPTR_MAX == 0xFFFFFFFFFFFFFFFFu
_Static_assert(sizeof(DLDevice) == 8, "DLDevice is two int32");
_Static_assert(sizeof(DLDataType) == 4, "DLDataType is u8, u8, u16");
_Static_assert(offsetof(DLTensor, ndim) == 16, "DLTensor.ndim");
_Static_assert(offsetof(DLTensor, shape) == 24, "DLTensor.shape");
_Static_assert(offsetof(DLTensor, byte_offset) == 40, "DLTensor.byte_offset");
_Static_assert(sizeof(DLTensor) == 48, "DLTensor size");
_Static_assert(offsetof(DLManagedTensor, deleter) == 56, "DLManagedTensor.deleter");
_Static_assert(offsetof(DLManagedTensorVersioned, flags) == 24, "versioned flags");
_Static_assert(offsetof(DLManagedTensorVersioned, dl_tensor) == 32, "versioned dl_tensor");
_Static_assert(sizeof(DLManagedTensorVersioned) == 80, "versioned size");
#endif
_Static_assert(sizeof(DLManagedTensor) % sizeof(int64_t) == 0, "dims alignment");
_Static_assert(sizeof(DLManagedTensorVersioned) % sizeof(int64_t) == 0, "dims alignment");

/* ------------------------------------------------------------- deleters */

/* manager_ctx is a strong reference to the storage's owner. When Python
 * cannot be entered (shutdown, or finalising on a thread without the GIL)
 * the block is leaked on purpose. */
static void release_export(void *block, void *ctx) {
  bridge_py_entry e;
  if (!bridge_py_enter(&e)) return;
  Py_XDECREF((PyObject *)ctx);
  free(block);
  BUMP(STAT_EXPORT_DELETERS);
  bridge_py_leave(&e);
}

static void export_deleter(DLManagedTensor *self) {
  if (self == NULL) return;
  void *ctx = self->manager_ctx;
  self->manager_ctx = NULL;
  release_export(self, ctx);
}

static void export_deleter_versioned(DLManagedTensorVersioned *self) {
  if (self == NULL) return;
  void *ctx = self->manager_ctx;
  self->manager_ctx = NULL;
  release_export(self, ctx);
}

void bridge_dlpack_call_deleter(void *p, int versioned) {
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)p;
    if (m->deleter) m->deleter(m);
  } else {
    DLManagedTensor *m = (DLManagedTensor *)p;
    if (m->deleter) m->deleter(m);
  }
}

/* Producer side: a capsule that was never consumed still owns its tensor
 * (a consumer renames it used_*, and then the tensor is the consumer's). */
static void capsule_destructor(PyObject *capsule) {
  const char *name = PyCapsule_GetName(capsule);
  if (name == NULL) {
    PyErr_Clear();
    return;
  }
  int versioned = strcmp(name, NAME_VERSIONED) == 0;
  if (!versioned && strcmp(name, NAME_LEGACY) != 0) return;
  PyObject *saved = bridge_fetch_error();
  void *p = PyCapsule_GetPointer(capsule, name);
  if (p == NULL)
    PyErr_WriteUnraisable(capsule);
  else
    bridge_dlpack_call_deleter(p, versioned);
  bridge_restore_error(saved);
}

/* Exported for the test drivers, which wrap hand-made structs with it. */
PyCapsule_Destructor bridge_dlpack_capsule_destructor = capsule_destructor;

/* --------------------------------------------------------------- build */

/* A sub-byte type stored one value per byte (float4_e2m1fn, float6_*): what
 * DLPack calls padded, which only a versioned capsule can say. */
static int padded_subbyte(const DTypeObject *dt) { return dt->bits < 8 && dt->lanes == 1; }

/* One managed tensor (struct, shape, strides in one block) over `data`,
 * holding a strong reference to `owner`. */
static void *build_over(PyObject *owner, char *data, DLDevice device, DLDataType dtype, int ndim,
                        const int64_t *shape, const int64_t *strides, uint64_t flags, int versioned) {
  size_t head = versioned ? sizeof(DLManagedTensorVersioned) : sizeof(DLManagedTensor);
  char *block = (char *)malloc(head + 2 * (size_t)ndim * sizeof(int64_t));
  if (block == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  int64_t *dims = (int64_t *)(block + head);
  memcpy(dims, shape, (size_t)ndim * sizeof(int64_t));
  memcpy(dims + ndim, strides, (size_t)ndim * sizeof(int64_t));
  /* A dim of one element is never stepped along, so its stride says nothing
   * (DLPack allows any); consumers that refuse a negative or odd one (mlx)
   * would refuse a layout they hold. Asked (bridge.convert's hand-over), each
   * is given the row-major stride it would have after the dims that follow
   * it; __dlpack__ keeps the view's own, as NumPy's and torch's exports do. */
  if (flags & BRIDGE_BUILD_UNIT_STRIDES) bridge_unit_strides(ndim, shape, dims + ndim);
  flags &= ~BRIDGE_BUILD_UNIT_STRIDES;
  DLTensor *dl;
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)block;
    m->version.major = DLPACK_MAJOR_VERSION;
    m->version.minor = DLPACK_MINOR_VERSION;
    m->manager_ctx = owner;
    m->deleter = export_deleter_versioned;
    m->flags = flags;
    dl = &m->dl_tensor;
  } else {
    DLManagedTensor *m = (DLManagedTensor *)block;
    m->manager_ctx = owner;
    m->deleter = export_deleter;
    dl = &m->dl_tensor;
  }
  dl->data = data;
  dl->device = device;
  dl->ndim = ndim;
  dl->dtype = dtype;
  dl->shape = dims;
  dl->strides = dims + ndim; /* never NULL, as v1.2+ requires (ndim 0: past the struct, unread) */
  dl->byte_offset = 0;
  Py_INCREF(owner);
  BUMP(STAT_EXPORTS);
  return block;
}

/* One managed tensor over `data` in `st`, holding the storage's owner. */
static void *build(StorageObject *st, char *data, DLDataType dtype, int ndim, const int64_t *shape,
                   const int64_t *strides, uint64_t flags, int versioned) {
  DLDevice device = {(DLDeviceType)st->dev_type, st->dev_id};
  if (bridge_storage_lend(st, versioned ? BRIDGE_CONSUMER_FLAGGED : BRIDGE_CONSUMER_UNFLAGGED) == BRIDGE_LEND_READONLY)
    flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
  return build_over(bridge_storage_owner(st), data, device, dtype, ndim, shape, strides, flags, versioned);
}

DLManagedTensorVersioned *bridge_dlpack_build_owned(PyObject *owner, void *data, DLDevice device, DLDataType dtype,
                                                    int ndim, const int64_t *shape, const int64_t *strides,
                                                    uint64_t flags) {
  return (DLManagedTensorVersioned *)build_over(owner, (char *)data, device, dtype, ndim, shape, strides, flags, 1);
}

void *bridge_dlpack_build(TensorObject *t, uint64_t flags, int versioned) {
  if (bridge_tensor_check_bounds(t, PyExc_BufferError) < 0) return NULL;
  if (!versioned && bridge_storage_lend(t->storage, BRIDGE_CONSUMER_UNFLAGGED) == BRIDGE_LEND_REFUSED) {
    PyErr_SetString(PyExc_BufferError,
                    "a read-only tensor cannot be exported as a legacy DLPack capsule, which has no "
                    "READ_ONLY flag; ask for max_version >= (1, 0) or export a copy");
    return NULL;
  }
  if (padded_subbyte(t->dtype)) {
    if (!versioned) {
      PyErr_SetString(PyExc_BufferError,
                      "a legacy DLPack capsule of a sub-byte type holds packed values, and this tensor "
                      "holds one value per byte (padded, which only a versioned capsule's "
                      "IS_SUBBYTE_TYPE_PADDED flag can say); ask for max_version >= (1, 1), or allow "
                      "a copy (copy=None or True) for a packed one");
      return NULL;
    }
    flags |= DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
  }
  DLDataType dtype = {t->dtype->code, t->dtype->bits, t->dtype->lanes};
  return build(t->storage, bridge_tensor_data(t), dtype, t->ndim, t->shape, t->strides, flags, versioned);
}

/* A legacy capsule of a padded sub-byte tensor (host memory): its values
 * packed, C order, little bit-endian, in new memory; shape and dtype kept,
 * strides counting values. */
static void *build_packed(TensorObject *t) {
  if (!bridge_host_accessible(t->storage->dev_type)) {
    PyErr_SetString(PyExc_BufferError,
                    "a legacy DLPack capsule of a sub-byte type holds packed values, and bridge packs "
                    "only host memory; ask for max_version >= (1, 1) (a padded export)");
    return NULL;
  }
  if (bridge_tensor_check_bounds(t, PyExc_BufferError) < 0) return NULL;
  int64_t numel = bridge_numel(t), bits = t->dtype->bits, nbits;
  if (__builtin_mul_overflow(numel, bits, &nbits) || nbits > INT64_MAX - 7) return PyErr_NoMemory();
  StorageObject *st = bridge_storage_alloc((nbits + 7) / 8, 1);
  if (st == NULL) return NULL;
  const uint8_t *src = (const uint8_t *)bridge_tensor_data(t); /* itemsize 1: strides are bytes */
  uint8_t *dst = (uint8_t *)st->data;
  unsigned mask = (1u << bits) - 1;
  int64_t idx[BRIDGE_MAX_NDIM] = {0}, at = 0;
  for (int64_t k = 0; k < numel; k++) {
    int64_t bit = k * bits;
    unsigned word = (unsigned)(src[at] & mask) << (bit % 8);
    dst[bit / 8] |= (uint8_t)word;
    if (word >> 8) dst[bit / 8 + 1] |= (uint8_t)(word >> 8); /* a 6-bit value across two bytes */
    for (int d = t->ndim - 1; d >= 0; d--) {
      at += t->strides[d];
      if (++idx[d] < t->shape[d]) break;
      at -= t->strides[d] * t->shape[d];
      idx[d] = 0;
    }
  }
  int64_t strides[BRIDGE_MAX_NDIM];
  bridge_contiguous_strides(t->ndim, t->shape, strides);
  DLDataType dtype = {t->dtype->code, t->dtype->bits, 1};
  void *out = build(st, st->data, dtype, t->ndim, t->shape, strides, 0, 0);
  Py_DECREF(st); /* the export holds the memory's owner */
  return out;
}

PyObject *bridge_dlpack_wrap(void *managed, int versioned) {
  if (managed == NULL) return NULL;
  PyObject *cap = PyCapsule_New(managed, versioned ? NAME_VERSIONED : NAME_LEGACY, capsule_destructor);
  if (cap == NULL) bridge_dlpack_call_deleter(managed, versioned);
  return cap;
}

/* ------------------------------------------------------- __dlpack__ */

/* The keywords of __dlpack__. Callers pass interned names (a Python call
 * site's, or a C caller's interned constants), so a pointer comparison
 * decides almost always; equal strings decide the rest. */
enum { KW_STREAM, KW_MAX_VERSION, KW_DL_DEVICE, KW_COPY, KW_COUNT };
static PyObject *kw_names[KW_COUNT];

static int keyword_of(PyObject *name) {
  for (int i = 0; i < KW_COUNT; i++)
    if (name == kw_names[i]) return i;
  for (int i = 0; i < KW_COUNT; i++)
    if (PyUnicode_Check(name) && PyUnicode_Compare(name, kw_names[i]) == 0) return i;
  if (!PyErr_Occurred())
    PyErr_Format(PyExc_TypeError, "__dlpack__() got an unexpected keyword argument %R", name);
  return -1;
}

/* max_version -> 1 versioned (major >= 1), 0 legacy (None or major 0), -1
 * with TypeError when malformed. */
static int wants_versioned(PyObject *max_version) {
  if (max_version == Py_None) return 0;
  if (PyTuple_CheckExact(max_version) && PyTuple_GET_SIZE(max_version) >= 1) { /* the usual call */
    PyObject *major = PyTuple_GET_ITEM(max_version, 0);
    if (PyLong_CheckExact(major)) {
      int overflow;
      long long mj = PyLong_AsLongLongAndOverflow(major, &overflow);
      return overflow > 0 || mj >= 1;
    }
  }
  if ((PyTuple_Check(max_version) || PyList_Check(max_version)) && PySequence_Size(max_version) >= 1) {
    PyObject *major = PySequence_GetItem(max_version, 0);
    if (major != NULL && PyLong_Check(major) && !PyBool_Check(major)) {
      int overflow;
      long long mj = PyLong_AsLongLongAndOverflow(major, &overflow);
      Py_DECREF(major);
      return overflow > 0 || mj >= 1;
    }
    Py_XDECREF(major);
    PyErr_Clear();
  }
  PyErr_Format(PyExc_TypeError, "max_version must be a (major, minor) tuple, got %R", max_version);
  return -1;
}

/* A bridge.device for (type, id), for messages (new reference). */
static PyObject *device_object(int type, int id) {
  PyObject *factory = bridge_upcall(UP_DEVICE);
  return factory ? PyObject_CallFunction(factory, "ii", type, id) : NULL;
}

/* The array API's stream argument for memory on (dev_type, dev_id): None (0
 * here), -1 (no synchronisation) or, on CUDA, 1, 2 or a stream handle (an
 * int, or an object of cuda.core's stream protocol, __cuda_stream__). Host
 * memory has no streams. A stream that is neither is a TypeError; a handle
 * the device cannot take is a ValueError (BufferError is for data that cannot
 * be exported). NumPy raises RuntimeError for any stream and torch
 * AssertionError for a host int; the spec's types win. */
int bridge_dlpack_stream_arg(PyObject *v, int dev_type, int dev_id, long long *out) {
  *out = 0;
  if (v == Py_None) return 0;
  int overflow = 0;
  long long s;
  if (!PyLong_Check(v) || PyBool_Check(v)) {
    /* a stream object of cuda.core's protocol (torch.cuda.Stream, cuda.core's Stream) */
    int speaks = PyBool_Check(v) ? 0 : bridge_cuda_stream_protocol(v, &s);
    if (speaks < 0) return -1;
    if (speaks == 0) {
      PyErr_Format(PyExc_TypeError, "stream must be an int, None or an object with __cuda_stream__, got %.200s",
                   Py_TYPE(v)->tp_name);
      return -1;
    }
  } else {
    s = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (s == -1 && PyErr_Occurred()) return -1;
  }
  if (bridge_host_accessible(dev_type) && dev_type != kDLCUDAManaged) {
    if (s != -1 || overflow) {
      PyObject *dev = device_object(dev_type, dev_id);
      if (dev != NULL) {
        PyErr_Format(PyExc_ValueError, "stream must be None or -1 for a %S tensor, got %R", dev, v);
        Py_DECREF(dev);
      }
      return -1;
    }
  } else if (s == 0 && !overflow) {
    PyErr_SetString(PyExc_ValueError, "stream 0 is ambiguous and forbidden by the DLPack spec; use 1 or 2");
    return -1;
  } else if (overflow || s < -1) {
    PyErr_Format(PyExc_ValueError, "invalid stream %R", v);
    return -1;
  }
  *out = s;
  return 0;
}

int bridge_dl_device_of(PyObject *spec, int names, int *type, int *id) {
  static PyObject *device_class, *str_to_dlpack;
  PyObject *pair = NULL;
  if (PyTuple_Check(spec) && PyTuple_GET_SIZE(spec) == 2) {
    pair = Py_NewRef(spec);
  } else {
    if (str_to_dlpack == NULL && (str_to_dlpack = PyUnicode_InternFromString("to_dlpack")) == NULL)
      return -1;
    if (device_class == NULL) { /* the class of what the registered factory makes */
      PyObject *cpu = device_object(kDLCPU, 0);
      if (cpu == NULL) return -1;
      device_class = Py_NewRef((PyObject *)Py_TYPE(cpu));
      Py_DECREF(cpu);
    }
    if (PyObject_TypeCheck(spec, (PyTypeObject *)device_class)) {
      pair = PyObject_CallMethodNoArgs(spec, str_to_dlpack);
    } else if (names) {
      /* bridge.device reads every device spec (names, ints, foreign device
       * objects): ValueError for a bad name, TypeError for a non-device. */
      PyObject *dev = PyObject_CallOneArg(device_class, spec);
      if (dev == NULL) return -1;
      pair = PyObject_CallMethodNoArgs(dev, str_to_dlpack);
      Py_DECREF(dev);
    } else {
      PyErr_Format(PyExc_TypeError, "%s must be a (device_type, device_id) pair or a bridge.device, got %R",
                   names ? "device" : "dl_device", spec);
      return -1;
    }
    if (pair == NULL) return -1;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) { /* a subclass's to_dlpack() answers anything */
      PyErr_Format(PyExc_TypeError, "%s: %.200s.to_dlpack() returned %R, not a (device_type, device_id) pair",
                   names ? "device" : "dl_device", Py_TYPE(spec)->tp_name, pair);
      Py_DECREF(pair);
      return -1;
    }
  }
  long t = PyLong_AsLong(PyTuple_GET_ITEM(pair, 0)), i = PyLong_AsLong(PyTuple_GET_ITEM(pair, 1));
  Py_DECREF(pair);
  if (PyErr_Occurred() || t < 0 || t > INT32_MAX || i < INT32_MIN || i > INT32_MAX) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s must be a (device_type, device_id) pair of ints, got %R",
                 names ? "device" : "dl_device", spec);
    return -1;
  }
  *type = (int)t;
  *id = (int)i;
  return 0;
}

PyObject *bridge_dlpack_transfer(TensorObject *t, int type, int id) {
  if (!bridge_device_copyable(t->storage->dev_type, type)) {
    PyObject *dev = bridge_storage_device(t->storage);
    if (dev != NULL) {
      PyErr_Format(PyExc_BufferError,
                   "cannot copy a %S tensor to DLPack device (%d, %d): bridge copies within host "
                   "memory and between host and CUDA memory",
                   dev, type, id);
      Py_DECREF(dev);
    }
    return NULL;
  }
  if (type == kDLCUDAHost) { /* CUDA host memory is host memory to the copy */
    type = kDLCPU;
    id = 0;
  }
  return bridge_cuda_transfer(t, type, id);
}

PyObject *bridge_dlpack_copy(TensorObject *t) {
  static PyObject *str_clone;
  if (t->storage->dev_type == kDLCUDA) return bridge_dlpack_transfer(t, kDLCUDA, t->storage->dev_id);
  if (str_clone == NULL && (str_clone = PyUnicode_InternFromString("clone")) == NULL) return NULL;
  PyObject *format = bridge_upcall(UP_CONTIGUOUS_FORMAT);
  if (format == NULL) return NULL;
  PyObject *callargs[2] = {(PyObject *)t, format};
  return PyObject_VectorcallMethod(str_clone, callargs, 2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* Tensor.__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None):
 * every keyword is parsed and checked here, once. A copy is made only when
 * dl_device names another device or copy=True (IS_COPIED is then set); a
 * CUDA consumer's stream waits for the memory's work unless it is -1. */
static PyObject *tensor_dlpack(TensorObject *t, PyObject *const *args, Py_ssize_t nargsf,
                               PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs != 0)
    return PyErr_Format(PyExc_TypeError, "__dlpack__() takes only keyword arguments (%zd given)", nargs);
  PyObject *v[KW_COUNT] = {Py_None, Py_None, Py_None, Py_None};
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; i++) {
    int which = keyword_of(PyTuple_GET_ITEM(kwnames, i));
    if (which < 0) return NULL;
    v[which] = args[i];
  }
  int versioned = wants_versioned(v[KW_MAX_VERSION]);
  if (versioned < 0) return NULL;
  PyObject *copy = v[KW_COPY];
  if (copy != Py_None && !PyBool_Check(copy))
    return PyErr_Format(PyExc_TypeError, "copy must be True, False or None, got %R", copy);
  int own_type = t->storage->dev_type, own_id = t->storage->dev_id, type = own_type, id = own_id;
  if (v[KW_DL_DEVICE] != Py_None && bridge_dl_device_of(v[KW_DL_DEVICE], 0, &type, &id) < 0) return NULL;
  long long stream;
  if (bridge_dlpack_stream_arg(v[KW_STREAM], type, id, &stream) < 0) return NULL;
  int copying = type != own_type || id != own_id || copy == Py_True;
  if (copying && bridge_tensor_check_bounds(t, PyExc_BufferError) < 0) return NULL; /* else: build */
  PyObject *src = Py_NewRef((PyObject *)t);
  uint64_t flags = 0;
  if (type != own_type || id != own_id) {
    if (copy == Py_False) {
      PyObject *dev = bridge_storage_device(t->storage);
      if (dev != NULL) {
        PyErr_Format(PyExc_BufferError,
                     "exporting a %S tensor to DLPack device (%d, %d) needs a copy, and copy=False "
                     "forbids it",
                     dev, type, id);
        Py_DECREF(dev);
      }
      Py_DECREF(src);
      return NULL;
    }
    Py_SETREF(src, bridge_dlpack_transfer(t, type, id));
    flags = DLPACK_FLAG_BITMASK_IS_COPIED;
  } else if (copy == Py_True) {
    Py_SETREF(src, bridge_dlpack_copy(t));
    flags = DLPACK_FLAG_BITMASK_IS_COPIED;
  }
  if (src == NULL) return NULL;
  StorageObject *st = ((TensorObject *)src)->storage;
  /* The consumer's stream waits for the memory's (None: the legacy default stream). */
  if (st->dev_type == kDLCUDA && stream != -1 &&
      bridge_cuda_order(st->dev_id, st->stream, (uintptr_t)(stream ? stream : 1)) < 0) {
    Py_DECREF(src);
    return NULL;
  }
  TensorObject *from = (TensorObject *)src;
  /* A legacy capsule's sub-byte values are packed: where a copy is allowed,
   * bridge's one value per byte goes out packed (build refuses otherwise). */
  void *managed = !versioned && padded_subbyte(from->dtype) && copy != Py_False
                      ? build_packed(from)
                      : bridge_dlpack_build(from, flags, versioned);
  PyObject *out = bridge_dlpack_wrap(managed, versioned);
  Py_DECREF(src);
  return out;
}

static PyObject *tensor_dlpack_device(TensorObject *t, PyObject *unused) {
  (void)unused;
  return Py_BuildValue("(ii)", t->storage->dev_type, t->storage->dev_id);
}

/* _C.transfer(tensor, dl_device): a copy on that DLPack device. */
static PyObject *py_transfer(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  int type, id;
  if (nargs != 2 || !Tensor_Check(args[0]))
    return PyErr_Format(PyExc_TypeError, "transfer(tensor, dl_device)");
  if (bridge_dl_device_of(args[1], 0, &type, &id) < 0) return NULL;
  return bridge_dlpack_transfer((TensorObject *)args[0], type, id);
}

PyMethodDef bridge_dlpack_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__($self, *, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "DLPack export (array API __dlpack__): a legacy 'dltensor' capsule when max_version is None "
     "or its major is 0, else a 'dltensor_versioned' (v1.3) one. Zero-copy unless copy=True or "
     "dl_device names another device (IS_COPIED is then set). Sub-byte types (float4_e2m1fn, "
     "float6_*) hold one value per byte: a versioned capsule says so (IS_SUBBYTE_TYPE_PADDED); a "
     "legacy one cannot, and gets a packed copy of the values. float4_e2m1fn_x2 exports packed, "
     "(17, 4, lanes 2). Errors: BufferError for a read-only tensor or (copy=False) a sub-byte "
     "tensor asked for a legacy capsule, copy=False when a copy is needed, a device bridge cannot "
     "reach, a view past its storage; TypeError/ValueError for malformed keywords (a host tensor "
     "takes stream None or -1 only; stream 0 is forbidden)."},
    {"__dlpack_device__", (PyCFunction)tensor_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n(DLDeviceType, device_id) of the tensor's memory."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef export_functions[] = {
    {"transfer", (PyCFunction)(void (*)(void))py_transfer, METH_FASTCALL,
     "transfer(tensor, dl_device, /)\n--\n\nA copy on a DLPack device (CPU <-> CUDA by the copy "
     "engine, strides kept); BufferError for devices bridge cannot copy between."},
    {NULL, NULL, 0, NULL},
};

int bridge_dlpack_export_init(PyObject *mod) {
  static const char *names[KW_COUNT] = {"stream", "max_version", "dl_device", "copy"};
  for (int i = 0; i < KW_COUNT; i++)
    if ((kw_names[i] = PyUnicode_InternFromString(names[i])) == NULL) return -1;
  return PyModule_AddFunctions(mod, export_functions);
}
