/* StorageBase: the one ownership record of a run of bytes (pointer, size,
 * device, read-only bit, owner). bridge.UntypedStorage is the Python class on
 * top; every storage, allocated or foreign, goes through
 * bridge_storage_adopt, the one place an owner is set. */

#include "core.h"

#include <structmember.h>

PyTypeObject *bridge_storage_class = &BridgeStorage_Type;
static PyObject *cpu_device; /* cached bridge.device("cpu") */

int bridge_storage_adopt(StorageObject *s, char *data, int64_t nbytes, int dev_type, int dev_id,
                         PyObject *owner, int readonly, int resizable, int shared,
                         PyObject *filename) {
  if (nbytes < 0) {
    PyErr_Format(PyExc_ValueError, "storage size must be non-negative, got %lld", (long long)nbytes);
    return -1;
  }
  if (data == NULL && nbytes > 0) {
    PyErr_SetString(PyExc_ValueError, "a storage of more than 0 bytes needs a non-NULL address");
    return -1;
  }
  if ((uint64_t)(uintptr_t)data > UINTPTR_MAX - (uint64_t)nbytes) {
    PyErr_SetString(PyExc_ValueError, "the storage's bytes run past the end of the address space");
    return -1;
  }
  if (s->managed != NULL) { /* the record of an import owns its producer's tensor */
    PyErr_SetString(PyExc_RuntimeError, "an imported storage's ownership record cannot change");
    return -1;
  }
  if (owner == NULL || (owner == Py_None && nbytes > 0)) {
    PyErr_SetString(PyExc_ValueError, "a storage of foreign memory needs an owner that keeps it alive");
    return -1;
  }
  if (filename != NULL && filename != Py_None && !PyUnicode_Check(filename)) {
    PyErr_SetString(PyExc_TypeError, "filename must be a str or None");
    return -1;
  }
  if (s->dev_type != dev_type || s->dev_id != dev_id) Py_CLEAR(s->device);
  s->data = data;
  s->nbytes = nbytes;
  s->dev_type = dev_type;
  s->dev_id = dev_id;
  s->readonly = readonly != 0;
  s->resizable = resizable != 0;
  s->shared = shared != 0;
  /* owner == s: the storage owns the bytes itself (an import); no self-cycle */
  Py_XSETREF(s->owner, owner == (PyObject *)s ? NULL : Py_NewRef(owner));
  Py_XSETREF(s->filename, filename == Py_None ? NULL : Py_XNewRef(filename));
  return 0;
}

static StorageObject *storage_alloc_object(void) {
  StorageObject *s = (StorageObject *)bridge_storage_class->tp_alloc(bridge_storage_class, 0);
  if (s != NULL) {
    s->dev_type = kDLCPU;
    s->owner = Py_NewRef(Py_None);
  }
  return s;
}

int bridge_lend(int readonly, int consumer) {
  if (!readonly) return BRIDGE_LEND_WRITABLE;
  switch (consumer) {
    case BRIDGE_CONSUMER_FLAGGED:
    case BRIDGE_CONSUMER_IMMUTABLE: return BRIDGE_LEND_READONLY;
    case BRIDGE_CONSUMER_NEVER_WRITES: return BRIDGE_LEND_ALIAS;
    default: return BRIDGE_LEND_REFUSED;
  }
}

int bridge_storage_lend(const StorageObject *s, int consumer) {
  return bridge_lend(__atomic_load_n(&s->readonly, __ATOMIC_RELAXED), consumer);
}

StorageObject *bridge_storage_new(char *data, int64_t nbytes, int dev_type, int dev_id,
                                  PyObject *owner, int readonly) {
  StorageObject *s = storage_alloc_object();
  if (s == NULL) return NULL;
  if (bridge_storage_adopt(s, data, nbytes, dev_type, dev_id, owner, readonly, 0, 0, NULL) < 0) {
    Py_DECREF(s);
    return NULL;
  }
  return s;
}

StorageObject *bridge_storage_alloc(int64_t nbytes, int zeroed) {
  char *data;
  PyObject *owner = bridge_memory_new(nbytes, zeroed, &data);
  if (owner == NULL) return NULL;
  StorageObject *s = storage_alloc_object();
  if (s == NULL || bridge_storage_adopt(s, data, nbytes, kDLCPU, 0, owner, 0, 1, 0, NULL) < 0) {
    Py_XDECREF(s);
    Py_DECREF(owner);
    return NULL;
  }
  Py_DECREF(owner);
  return s;
}

PyObject *bridge_storage_device(StorageObject *s) {
  if (s->device != NULL) return Py_NewRef(s->device);
  if (s->dev_type == kDLCPU && cpu_device != NULL) {
    s->device = Py_NewRef(cpu_device);
    return Py_NewRef(cpu_device);
  }
  PyObject *factory = bridge_upcall(UP_DEVICE);
  if (factory == NULL) return NULL;
  PyObject *dev = PyObject_CallFunction(factory, "ii", s->dev_type, s->dev_id);
  if (dev == NULL) return NULL;
  if (s->dev_type == kDLCPU) cpu_device = Py_NewRef(dev);
  s->device = Py_NewRef(dev);
  return dev;
}

/* ------------------------------------------------------------- the type */

static PyObject *storage_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  (void)args;
  (void)kwargs;
  StorageObject *s = (StorageObject *)type->tp_alloc(type, 0);
  if (s != NULL) {
    s->dev_type = kDLCPU;
    s->owner = Py_NewRef(Py_None);
  }
  return (PyObject *)s;
}

/* (Instances are of the Python subclass, whose subtype_traverse visits the
 * type and whose subtype_dealloc drops it: the static base does neither.) */
static _Thread_local uintptr_t current_stream = 1;

uintptr_t bridge_current_stream(void) { return current_stream; }

uintptr_t bridge_set_current_stream(uintptr_t stream) {
  uintptr_t old = current_stream;
  current_stream = stream;
  return old;
}

StorageObject *bridge_storage_new_import(char *data, int64_t nbytes, int dev_type, int dev_id,
                                         void *managed, int versioned, int readonly,
                                         bridge_release_fn release) {
  StorageObject *s = storage_alloc_object();
  if (s == NULL || bridge_storage_adopt(s, data, nbytes, dev_type, dev_id, (PyObject *)s, readonly,
                                       0, 0, NULL) < 0) {
    Py_XDECREF(s);
    release(managed, versioned);
    return NULL;
  }
  s->release = release;
  s->managed = managed;
  s->managed_versioned = (uint8_t)versioned;
  return s;
}

static int storage_traverse(StorageObject *s, visitproc visit, void *arg) {
  Py_VISIT(s->owner);
  Py_VISIT(s->device);
  Py_VISIT(s->filename);
  return 0;
}

static int storage_clear(StorageObject *s) {
  Py_CLEAR(s->owner);
  Py_CLEAR(s->device);
  Py_CLEAR(s->filename);
  return 0;
}

static void storage_dealloc(StorageObject *s) {
  PyObject_GC_UnTrack(s);
  if (s->weakreflist != NULL) PyObject_ClearWeakRefs((PyObject *)s);
  storage_clear(s);
  if (s->managed != NULL) { /* an import this storage owned: the producer's deleter, once */
    void *m = s->managed;
    s->managed = NULL;
    s->release(m, s->managed_versioned);
  }
  Py_TYPE(s)->tp_free((PyObject *)s);
}

/* Copy the first min(old, new) bytes of the storage's current block into
 * `dst` (`nbytes` long), the step before a switch to `dst`: a storage switches
 * blocks only once the new block holds its bytes, and the copy and the switch
 * run under one hold of the GIL, so no other thread sees the new block
 * unwritten (torch copies, then swaps, too). */
static int storage_keep_bytes(StorageObject *s, char *dst, int64_t nbytes) {
  int64_t keep = s->nbytes < nbytes ? s->nbytes : nbytes;
  if (keep <= 0) return 0;
  if (!bridge_host_accessible(s->dev_type)) {
    PyErr_SetString(PyExc_RuntimeError, "a device storage's bytes cannot be copied on the host");
    return -1;
  }
  if (s->managed != NULL) { /* checked before copying: bridge_storage_adopt would refuse after */
    PyErr_SetString(PyExc_RuntimeError, "an imported storage's ownership record cannot change");
    return -1;
  }
  memmove(dst, s->data, (size_t)keep);
  return 0;
}

/* _adopt(data, nbytes, owner, *, device=(1, 0), readonly=False,
 *        resizable=False, shared=False, filename=None, keep=False)
 * keep=True: the current bytes are copied into the new block first. */
static PyObject *storage_adopt_py(StorageObject *s, PyObject *args, PyObject *kwargs) {
  unsigned long long data;
  long long nbytes;
  PyObject *owner, *filename = Py_None;
  int dev_type = kDLCPU, dev_id = 0, readonly = 0, resizable = 0, shared = 0, keep = 0;
  static char *kwlist[] = {"data", "nbytes", "owner", "device", "readonly", "resizable",
                           "shared", "filename", "keep", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KLO|$(ii)pppOp:_adopt", kwlist, &data, &nbytes,
                                   &owner, &dev_type, &dev_id, &readonly, &resizable, &shared,
                                   &filename, &keep))
    return NULL;
  if (owner == (PyObject *)s) { /* only an import may own itself (see bridge_storage_new_import) */
    PyErr_SetString(PyExc_ValueError, "a storage cannot be its own owner");
    return NULL;
  }
  if (keep && (!bridge_host_accessible(dev_type) || (data == 0 && nbytes > 0))) {
    PyErr_SetString(PyExc_ValueError, "keep=True needs a new block of host memory");
    return NULL;
  }
  if (keep && storage_keep_bytes(s, (char *)(uintptr_t)data, nbytes) < 0) return NULL;
  if (bridge_storage_adopt(s, (char *)(uintptr_t)data, nbytes, dev_type, dev_id, owner, readonly,
                           resizable, shared, filename) < 0)
    return NULL;
  Py_RETURN_NONE;
}

/* _allocate(nbytes, zeroed=False, keep=False): adopt a fresh block bridge
 * owns; keep=True copies the current bytes into it first (resize_). */
static PyObject *storage_allocate_py(StorageObject *s, PyObject *args, PyObject *kwargs) {
  long long nbytes;
  int zeroed = 0, keep = 0;
  static char *kwlist[] = {"nbytes", "zeroed", "keep", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "L|pp:_allocate", kwlist, &nbytes, &zeroed, &keep))
    return NULL;
  char *data;
  PyObject *owner = bridge_memory_new(nbytes, zeroed, &data);
  if (owner == NULL) return NULL;
  int rc = keep ? storage_keep_bytes(s, data, nbytes) : 0;
  if (rc == 0) rc = bridge_storage_adopt(s, data, nbytes, kDLCPU, 0, owner, 0, 1, 0, NULL);
  Py_DECREF(owner);
  if (rc < 0) return NULL;
  Py_RETURN_NONE;
}

/* _slice(slice): a new storage over bytes [start, stop) of this one (step 1),
 * with its owner, read-only bit, file and shared flag. The bounds are taken
 * from the size the storage has at this moment, in the same step as the
 * address, so another thread's resize_() cannot put the view past the block. */
static PyObject *storage_slice_py(StorageObject *s, PyObject *key) {
  Py_ssize_t start, stop, step;
  if (!PySlice_Check(key)) return PyErr_Format(PyExc_TypeError, "_slice() expects a slice");
  if (PySlice_Unpack(key, &start, &stop, &step) < 0) return NULL;
  if (step != 1) {
    PyErr_SetString(PyExc_ValueError, "storage slices must have step 1");
    return NULL;
  }
  if (!bridge_host_accessible(s->dev_type)) {
    PyErr_Format(PyExc_RuntimeError, "a storage on a device (type %d) cannot be sliced on the host",
                 (int)s->dev_type);
    return NULL;
  }
  Py_ssize_t n = PySlice_AdjustIndices((Py_ssize_t)s->nbytes, &start, &stop, step);
  StorageObject *out = storage_alloc_object();
  if (out == NULL) return NULL;
  if (bridge_storage_adopt(out, n ? s->data + start : s->data, (int64_t)n, s->dev_type, s->dev_id,
                           bridge_storage_owner(s), s->readonly, 0, s->shared,
                           s->filename != NULL ? s->filename : Py_None) < 0) {
    Py_DECREF(out);
    return NULL;
  }
  return (PyObject *)out;
}

static PyObject *storage_data_ptr(StorageObject *s, PyObject *unused) {
  (void)unused;
  return PyLong_FromVoidPtr(s->data);
}

static PyObject *storage_nbytes(StorageObject *s, PyObject *unused) {
  (void)unused;
  return PyLong_FromLongLong(s->nbytes);
}

static PyObject *storage_resizable(StorageObject *s, PyObject *unused) {
  (void)unused;
  return PyBool_FromLong(s->resizable);
}

static PyObject *storage_is_shared(StorageObject *s, PyObject *unused) {
  (void)unused;
  return PyBool_FromLong(s->shared);
}

static Py_ssize_t storage_len(StorageObject *s) { return (Py_ssize_t)s->nbytes; }

static PyObject *storage_get_device(StorageObject *s, void *c) {
  (void)c;
  return bridge_storage_device(s);
}

static PyObject *storage_get_owner(StorageObject *s, void *c) {
  (void)c;
  return Py_NewRef(bridge_storage_owner(s));
}

static PyObject *storage_get_readonly(StorageObject *s, void *c) {
  (void)c;
  return PyBool_FromLong(s->readonly);
}

static PyObject *storage_get_filename(StorageObject *s, void *c) {
  (void)c;
  return Py_NewRef(s->filename != NULL ? s->filename : Py_None);
}

static PyObject *storage_get_dlpack_device(StorageObject *s, void *c) {
  (void)c;
  return Py_BuildValue("(ii)", s->dev_type, s->dev_id);
}

static PyObject *storage_get_host(StorageObject *s, void *c) {
  (void)c;
  return PyBool_FromLong(bridge_host_accessible(s->dev_type));
}

/* The storage's bytes as a flat 'B' buffer (host memory only). The view
 * holds the owner, so it outlives a later resize_() or share_memory_(). */
static int storage_getbuffer(StorageObject *s, Py_buffer *view, int flags) {
  if (!bridge_host_accessible(s->dev_type)) {
    PyErr_SetString(PyExc_BufferError, "a device storage has no host buffer");
    return -1;
  }
  if (PyBuffer_FillInfo(view, (PyObject *)s, s->data, (Py_ssize_t)s->nbytes, s->readonly, flags) < 0)
    return -1;
  view->internal = Py_NewRef(bridge_storage_owner(s));
  return 0;
}

static void storage_releasebuffer(StorageObject *s, Py_buffer *view) {
  (void)s;
  Py_XDECREF((PyObject *)view->internal);
}

static PyBufferProcs storage_as_buffer = {(getbufferproc)storage_getbuffer,
                                          (releasebufferproc)storage_releasebuffer};
static PySequenceMethods storage_as_sequence = {.sq_length = (lenfunc)storage_len};

/* The one way a storage becomes read-only (never back): a copy of memory
 * lent read-only (pickle, shared memory) keeps the promise. */
static PyObject *storage_make_readonly(StorageObject *self, PyObject *unused) {
  (void)unused;
  __atomic_store_n(&self->readonly, 1, __ATOMIC_RELAXED);
  Py_RETURN_NONE;
}

static PyMethodDef storage_methods[] = {
    {"_make_readonly", (PyCFunction)storage_make_readonly, METH_NOARGS,
     "_make_readonly($self, /)\n--\n\nMake this storage read-only, for good: every export after this "
     "lends it read-only (private)."},
    {"_adopt", (PyCFunction)(void (*)(void))storage_adopt_py, METH_VARARGS | METH_KEYWORDS,
     "_adopt($self, data, nbytes, owner, *, device=(1, 0), readonly=False, resizable=False, "
     "shared=False, filename=None, keep=False)\n--\n\nSet the ownership record; keep=True "
     "copies the current bytes into the new block first, in the same step (private)."},
    {"_allocate", (PyCFunction)(void (*)(void))storage_allocate_py, METH_VARARGS | METH_KEYWORDS,
     "_allocate($self, nbytes, zeroed=False, keep=False)\n--\n\nAdopt fresh memory bridge owns; "
     "keep=True copies the current bytes into it first, in the same step (private)."},
    {"_slice", (PyCFunction)storage_slice_py, METH_O,
     "_slice($self, key, /)\n--\n\nA storage over the bytes of a step-1 slice, bounded by the "
     "size at this moment (private)."},
    {"data_ptr", (PyCFunction)storage_data_ptr, METH_NOARGS,
     "data_ptr($self, /)\n--\n\nAddress of the first byte (0 only for some empty foreign storages)."},
    {"nbytes", (PyCFunction)storage_nbytes, METH_NOARGS, "nbytes($self, /)\n--\n\nSize in bytes."},
    {"size", (PyCFunction)storage_nbytes, METH_NOARGS,
     "size($self, /)\n--\n\nSize in bytes (an untyped storage's elements are bytes)."},
    {"resizable", (PyCFunction)storage_resizable, METH_NOARGS,
     "resizable($self, /)\n--\n\nWhether resize_() may reallocate this storage (only memory "
     "bridge allocated)."},
    {"is_shared", (PyCFunction)storage_is_shared, METH_NOARGS,
     "is_shared($self, /)\n--\n\nWhether the memory is shared between processes (shared memory "
     "or a shared file map)."},
    {NULL, NULL, 0, NULL},
};

static PyObject *storage_get_stream(StorageObject *s, void *c) {
  (void)c;
  return PyLong_FromUnsignedLongLong(s->stream);
}

static int storage_set_stream(StorageObject *s, PyObject *v, void *c) {
  (void)c;
  unsigned long long x = v ? PyLong_AsUnsignedLongLong(v) : 0;
  if (x == (unsigned long long)-1 && PyErr_Occurred()) return -1;
  s->stream = (uintptr_t)x;
  return 0;
}

static PyGetSetDef storage_getset[] = {
    {"device", (getter)storage_get_device, NULL, "The device holding the memory.", NULL},
    {"owner", (getter)storage_get_owner, NULL,
     "The object whose lifetime keeps this memory valid (what an exporter holds); the storage "
     "itself for an imported DLPack tensor, which it owns.", NULL},
    {"is_readonly", (getter)storage_get_readonly, NULL,
     "Whether writes are forbidden (memory borrowed read-only).", NULL},
    {"filename", (getter)storage_get_filename, NULL,
     "The mapped file's path for from_file storages, else None.", NULL},
    {"_dlpack_device", (getter)storage_get_dlpack_device, NULL, "(DLDeviceType, device_id).",
     NULL},
    {"_host_accessible", (getter)storage_get_host, NULL,
     "Whether the host can read and write the memory.", NULL},
    {"_stream", (getter)storage_get_stream, (setter)storage_set_stream,
     "Device memory: the CUDA stream its last work was ordered on (DLPack's integers; 0: "
     "nothing to wait for).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject BridgeStorage_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "bridge._C.StorageBase",
    .tp_basicsize = sizeof(StorageObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The C part of bridge.UntypedStorage: one ownership record.",
    .tp_new = storage_tp_new,
    .tp_dealloc = (destructor)storage_dealloc,
    .tp_traverse = (traverseproc)storage_traverse,
    .tp_clear = (inquiry)storage_clear,
    .tp_weaklistoffset = offsetof(StorageObject, weakreflist),
    .tp_methods = storage_methods,
    .tp_getset = storage_getset,
    .tp_as_buffer = &storage_as_buffer,
    .tp_as_sequence = &storage_as_sequence,
};

/* _C.lend(readonly, consumer): bridge_lend for Python's exporters. */
static PyObject *py_lend(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) return PyErr_Format(PyExc_TypeError, "lend(readonly, consumer) takes 2 arguments");
  int readonly = PyObject_IsTrue(args[0]);
  long consumer = PyLong_AsLong(args[1]);
  if (readonly < 0 || (consumer == -1 && PyErr_Occurred())) return NULL;
  if (consumer < BRIDGE_CONSUMER_FLAGGED || consumer > BRIDGE_CONSUMER_UNFLAGGED)
    return PyErr_Format(PyExc_ValueError, "lend(): unknown consumer kind %ld", consumer);
  return PyLong_FromLong(bridge_lend(readonly, (int)consumer));
}

static PyMethodDef storage_functions[] = {
    {"lend", (PyCFunction)(void (*)(void))py_lend, METH_FASTCALL,
     "lend(readonly, consumer, /)\n--\n\nThe one lending decision (cdefs/core/storage.c: bridge_lend): "
     "may memory with this read-only bit be lent to a consumer of this kind (CONSUMER_FLAGGED, "
     "CONSUMER_IMMUTABLE, CONSUMER_NEVER_WRITES, CONSUMER_UNFLAGGED)? LEND_WRITABLE, "
     "LEND_READONLY (the consumer is told), LEND_ALIAS (through a writable alias) or LEND_REFUSED."},
    {NULL, NULL, 0, NULL},
};

int bridge_storage_init(PyObject *mod) {
  if (PyModule_AddIntConstant(mod, "CONSUMER_FLAGGED", BRIDGE_CONSUMER_FLAGGED) < 0 ||
      PyModule_AddIntConstant(mod, "CONSUMER_IMMUTABLE", BRIDGE_CONSUMER_IMMUTABLE) < 0 ||
      PyModule_AddIntConstant(mod, "CONSUMER_NEVER_WRITES", BRIDGE_CONSUMER_NEVER_WRITES) < 0 ||
      PyModule_AddIntConstant(mod, "CONSUMER_UNFLAGGED", BRIDGE_CONSUMER_UNFLAGGED) < 0 ||
      PyModule_AddIntConstant(mod, "LEND_REFUSED", BRIDGE_LEND_REFUSED) < 0 ||
      PyModule_AddIntConstant(mod, "LEND_WRITABLE", BRIDGE_LEND_WRITABLE) < 0 ||
      PyModule_AddIntConstant(mod, "LEND_READONLY", BRIDGE_LEND_READONLY) < 0 ||
      PyModule_AddIntConstant(mod, "LEND_ALIAS", BRIDGE_LEND_ALIAS) < 0)
    return -1;
  return PyModule_AddFunctions(mod, storage_functions);
}
