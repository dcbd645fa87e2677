/* DLPack export: the managed tensor bridge hands out (one allocation: the
 * struct, then shape, then strides), its deleter and the capsule destructor,
 * and Tensor.__dlpack__ / __dlpack_device__. The export is built from the
 * tensor's C struct; the keyword policy (streams, dl_device, copy) that the
 * plain call does not need is bridge.interop.dlpack's, which calls back into
 * bridge_dlpack_build through _C.dlpack_export. */

#include "core.h"

#include <stdlib.h>

static const char NAME_LEGACY[] = "dltensor";
static const char NAME_VERSIONED[] = "dltensor_versioned";

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

static void call_deleter(void *p, int versioned) {
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
    call_deleter(p, versioned);
  bridge_restore_error(saved);
}

/* Exported for the test drivers, which wrap hand-made structs with it. */
PyCapsule_Destructor bridge_dlpack_capsule_destructor = capsule_destructor;

/* --------------------------------------------------------------- build */

void *bridge_dlpack_build(TensorObject *t, uint64_t flags, int versioned) {
  if (bridge_tensor_check_bounds(t, PyExc_BufferError) < 0) return NULL;
  int readonly = t->storage->readonly;
  if (readonly && !versioned) {
    PyErr_SetString(PyExc_BufferError,
                    "a read-only tensor cannot be exported as a legacy DLPack capsule, which has no "
                    "READ_ONLY flag; ask for max_version >= (1, 0) or export a copy");
    return NULL;
  }
  int ndim = t->ndim;
  size_t head = versioned ? sizeof(DLManagedTensorVersioned) : sizeof(DLManagedTensor);
  char *block = (char *)malloc(head + 2 * (size_t)ndim * sizeof(int64_t));
  if (block == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  int64_t *dims = (int64_t *)(block + head);
  memcpy(dims, t->shape, (size_t)ndim * sizeof(int64_t));
  memcpy(dims + ndim, t->strides, (size_t)ndim * sizeof(int64_t));
  PyObject *owner = bridge_storage_owner(t->storage);
  DLTensor *dl;
  if (versioned) {
    DLManagedTensorVersioned *m = (DLManagedTensorVersioned *)block;
    m->version.major = DLPACK_MAJOR_VERSION;
    m->version.minor = DLPACK_MINOR_VERSION;
    m->manager_ctx = owner;
    m->deleter = export_deleter_versioned;
    if (readonly) flags |= DLPACK_FLAG_BITMASK_READ_ONLY;
    if (t->dtype->bits < 8) flags |= DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
    m->flags = flags;
    dl = &m->dl_tensor;
  } else {
    DLManagedTensor *m = (DLManagedTensor *)block;
    m->manager_ctx = owner;
    m->deleter = export_deleter;
    dl = &m->dl_tensor;
  }
  dl->data = bridge_tensor_data(t);
  dl->device.device_type = (DLDeviceType)t->storage->dev_type;
  dl->device.device_id = t->storage->dev_id;
  dl->ndim = ndim;
  dl->dtype.code = t->dtype->code;
  dl->dtype.bits = t->dtype->bits;
  dl->dtype.lanes = 1;
  dl->shape = dims;
  dl->strides = dims + ndim; /* never NULL, as v1.2+ requires */
  dl->byte_offset = 0;
  Py_INCREF(owner);
  BUMP(STAT_EXPORTS);
  return block;
}

PyObject *bridge_dlpack_wrap(void *managed, int versioned) {
  if (managed == NULL) return NULL;
  PyObject *cap = PyCapsule_New(managed, versioned ? NAME_VERSIONED : NAME_LEGACY, capsule_destructor);
  if (cap == NULL) call_deleter(managed, versioned);
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

/* max_version -> 1 versioned, 0 legacy, -1 malformed (the policy explains) */
static int wants_versioned(PyObject *max_version) {
  if (max_version == Py_None) return 0;
  if (!PyTuple_Check(max_version) || PyTuple_GET_SIZE(max_version) < 1) return -1;
  PyObject *major = PyTuple_GET_ITEM(max_version, 0);
  if (!PyLong_Check(major)) return -1;
  long mj = PyLong_AsLong(major);
  if (mj == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return -1;
  }
  return mj >= 1;
}

/* Tensor.__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None).
 * The plain call is done here; any other keyword value goes to the registered
 * policy (bridge.interop.dlpack.to_dlpack), which checks it and calls
 * _C.dlpack_export. */
static PyObject *tensor_dlpack(TensorObject *t, PyObject *const *args, Py_ssize_t nargsf,
                               PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs != 0)
    return PyErr_Format(PyExc_TypeError, "__dlpack__() takes only keyword arguments (%zd given)", nargs);
  PyObject *max_version = Py_None;
  int plain = 1;
  int cuda = t->storage->dev_type == kDLCUDA;
  long long consumer = 1; /* stream None: the legacy default stream */
  Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  for (Py_ssize_t i = 0; i < nkw; i++) {
    PyObject *name = PyTuple_GET_ITEM(kwnames, i), *v = args[i];
    int which = keyword_of(name);
    if (which < 0) return NULL;
    if (which == KW_MAX_VERSION)
      max_version = v;
    else if (which == KW_COPY)
      plain &= v == Py_None || v == Py_False;
    else if (which == KW_STREAM && cuda && PyLong_CheckExact(v)) {
      /* a CUDA consumer's stream: -1 (no sync) or a handle; 0 and the rest
       * go to the policy, which explains them */
      int overflow;
      consumer = PyLong_AsLongLongAndOverflow(v, &overflow);
      if (overflow || consumer == 0 || consumer < -1) {
        PyErr_Clear();
        plain = 0;
      }
    } else
      plain &= v == Py_None; /* stream, dl_device */
  }
  int versioned = wants_versioned(max_version);
  if (plain && versioned >= 0) {
    if (cuda && consumer != -1 &&
        bridge_cuda_order(t->storage->dev_id, t->storage->stream, (uintptr_t)consumer) < 0)
      return NULL;
    return bridge_dlpack_wrap(bridge_dlpack_build(t, 0, versioned), versioned);
  }
  PyObject *policy = bridge_callback_get(CB_DLPACK_EXPORT);
  if (policy == NULL) return NULL;
  PyObject *stack[5];
  stack[0] = (PyObject *)t;
  for (Py_ssize_t i = 0; i < nkw; i++) stack[1 + i] = args[i];
  return PyObject_Vectorcall(policy, stack, 1, kwnames);
}

static PyObject *tensor_dlpack_device(TensorObject *t, PyObject *unused) {
  (void)unused;
  return Py_BuildValue("(ii)", t->storage->dev_type, t->storage->dev_id);
}

/* _C.dlpack_export(tensor, flags, versioned): the capsule for the policy. */
static PyObject *py_dlpack_export(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 3 || !Tensor_Check(args[0]))
    return PyErr_Format(PyExc_TypeError, "dlpack_export(tensor, flags, versioned)");
  unsigned long long flags = PyLong_AsUnsignedLongLong(args[1]);
  int versioned = PyObject_IsTrue(args[2]);
  if (PyErr_Occurred() || versioned < 0) return NULL;
  return bridge_dlpack_wrap(bridge_dlpack_build((TensorObject *)args[0], flags, versioned), versioned);
}

PyMethodDef bridge_dlpack_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack, METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__($self, *, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "DLPack export (array API __dlpack__): a legacy 'dltensor' capsule when max_version is None "
     "or its major is 0, else a 'dltensor_versioned' (v1.3) one. Zero-copy unless copy=True. "
     "Errors: see bridge.interop.dlpack.to_dlpack."},
    {"__dlpack_device__", (PyCFunction)tensor_dlpack_device, METH_NOARGS,
     "__dlpack_device__($self, /)\n--\n\n(DLDeviceType, device_id) of the tensor's memory."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef export_functions[] = {
    {"dlpack_export", (PyCFunction)(void (*)(void))py_dlpack_export, METH_FASTCALL,
     "dlpack_export(tensor, flags, versioned, /)\n--\n\nA DLPack capsule over the tensor as it is, "
     "with extra flags (IS_COPIED); BufferError for a view past its storage and for a read-only "
     "tensor asked for a legacy capsule."},
    {NULL, NULL, 0, NULL},
};

int bridge_dlpack_export_init(PyObject *mod) {
  static const char *names[KW_COUNT] = {"stream", "max_version", "dl_device", "copy"};
  for (int i = 0; i < KW_COUNT; i++)
    if ((kw_names[i] = PyUnicode_InternFromString(names[i])) == NULL) return -1;
  return PyModule_AddFunctions(mod, export_functions);
}
