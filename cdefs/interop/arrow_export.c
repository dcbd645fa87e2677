/* Arrow export (C Data Interface, PyCapsule interface): schemas, arrays,
 * device arrays and one-chunk streams (plain and device streams) over a
 * tensor's memory. A 1-d tensor
 * of a primitive type is exported entirely here (Tensor.__arrow_c_array__ /
 * __arrow_c_device_array__); N-d tensors and requested schemas get their
 * layout from bridge.interop.arrow as "specs", and the structs are filled
 * here from the tensor's C struct: a spec names buffers only as NULL (0) or
 * "the storage's data" (1), so no address travels through Python. */

#include "interop.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

const char BRIDGE_NAME_ARROW_SCHEMA[] = "arrow_schema";
const char BRIDGE_NAME_ARROW_ARRAY[] = "arrow_array";
const char BRIDGE_NAME_ARROW_DEVICE_ARRAY[] = "arrow_device_array";
const char BRIDGE_NAME_ARROW_STREAM[] = "arrow_array_stream";
const char BRIDGE_NAME_ARROW_DEVICE_STREAM[] = "arrow_device_array_stream";
#define ARROW_MAX_DEPTH 64
#define ARROW_CPU_DEVICE 1

/* The arrow.bool8 extension's metadata: 2 pairs, name and (empty) metadata. */
static const char BOOL8_METADATA[] = {
    2, 0, 0, 0,
    20, 0, 0, 0, 'A', 'R', 'R', 'O', 'W', ':', 'e', 'x', 't', 'e', 'n', 's', 'i', 'o', 'n', ':',
    'n', 'a', 'm', 'e', 11, 0, 0, 0, 'a', 'r', 'r', 'o', 'w', '.', 'b', 'o', 'o', 'l', '8',
    24, 0, 0, 0, 'A', 'R', 'R', 'O', 'W', ':', 'e', 'x', 't', 'e', 'n', 's', 'i', 'o', 'n', ':',
    'm', 'e', 't', 'a', 'd', 'a', 't', 'a', 0, 0, 0, 0};

/* --------------------------------------------------------------- schemas */

/* spec = (format: bytes, name: bytes|None, metadata: bytes|None, flags: int,
 * children: tuple of specs). No Python object lives in a schema, so its
 * release needs no GIL. */
typedef struct {
  struct ArrowSchema **child_ptrs;
  struct ArrowSchema *children;
} schema_private;

static void schema_release(struct ArrowSchema *s) {
  if (s == NULL || s->release == NULL) return;
  for (int64_t i = 0; i < s->n_children; i++) {
    struct ArrowSchema *c = s->children[i];
    if (c->release != NULL) c->release(c);
  }
  free(s->private_data);
  s->release = NULL;
}

static int schema_fill(struct ArrowSchema *out, PyObject *spec, int depth) {
  if (depth > ARROW_MAX_DEPTH || !PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 5 ||
      !PyBytes_Check(PyTuple_GET_ITEM(spec, 0)) || !PyTuple_Check(PyTuple_GET_ITEM(spec, 4))) {
    PyErr_SetString(PyExc_TypeError, "bad Arrow schema spec");
    return -1;
  }
  PyObject *fmt = PyTuple_GET_ITEM(spec, 0), *name = PyTuple_GET_ITEM(spec, 1),
           *meta = PyTuple_GET_ITEM(spec, 2), *children = PyTuple_GET_ITEM(spec, 4);
  long long flags = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 3));
  if (flags == -1 && PyErr_Occurred()) return -1;
  if ((name != Py_None && !PyBytes_Check(name)) || (meta != Py_None && !PyBytes_Check(meta))) {
    PyErr_SetString(PyExc_TypeError, "Arrow schema name/metadata must be bytes or None");
    return -1;
  }
  Py_ssize_t nc = PyTuple_GET_SIZE(children);
  size_t lf = (size_t)PyBytes_GET_SIZE(fmt) + 1;
  size_t ln = name == Py_None ? 0 : (size_t)PyBytes_GET_SIZE(name) + 1;
  size_t lm = meta == Py_None ? 0 : (size_t)PyBytes_GET_SIZE(meta);
  size_t size = sizeof(schema_private) + (size_t)nc * (sizeof(void *) + sizeof(struct ArrowSchema)) +
                lf + ln + lm;
  schema_private *p = (schema_private *)calloc(1, size);
  if (p == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  p->child_ptrs = (struct ArrowSchema **)(p + 1);
  p->children = (struct ArrowSchema *)(p->child_ptrs + nc);
  char *str = (char *)(p->children + nc);
  memcpy(str, PyBytes_AS_STRING(fmt), lf);
  out->format = str;
  str += lf;
  out->name = NULL;
  if (ln) {
    memcpy(str, PyBytes_AS_STRING(name), ln);
    out->name = str;
    str += ln;
  }
  out->metadata = NULL;
  if (lm) {
    memcpy(str, PyBytes_AS_STRING(meta), lm);
    out->metadata = str;
  }
  out->flags = flags;
  out->n_children = nc;
  out->children = nc ? p->child_ptrs : NULL;
  out->dictionary = NULL;
  out->private_data = p;
  for (Py_ssize_t i = 0; i < nc; i++) {
    p->child_ptrs[i] = &p->children[i];
    if (schema_fill(&p->children[i], PyTuple_GET_ITEM(children, i), depth + 1) < 0) {
      for (Py_ssize_t j = 0; j < i; j++) p->children[j].release(&p->children[j]);
      free(p);
      return -1;
    }
  }
  out->release = schema_release;
  return 0;
}

/* ---------------------------------------------------------------- arrays */

/* spec = (length, null_count, offset, buffers: tuple of 0 (NULL) or 1 (the
 * storage's data), children: tuple of specs). Every node holds its own
 * reference to the owner, since consumers may move children out. */
typedef struct {
  PyObject *owner;
  struct ArrowArray **child_ptrs;
  struct ArrowArray *children;
  const void **buffers;
} array_private;

static void array_release(struct ArrowArray *a) {
  if (a == NULL || a->release == NULL) return;
  for (int64_t i = 0; i < a->n_children; i++) {
    struct ArrowArray *c = a->children[i];
    if (c->release != NULL) c->release(c);
  }
  array_private *p = (array_private *)a->private_data;
  bridge_py_entry e;
  if (p->owner != NULL && bridge_py_enter(&e)) { /* else: leak rather than touch Python */
    Py_DECREF(p->owner);
    bridge_py_leave(&e);
  }
  free(p);
  a->release = NULL;
  BUMP(STAT_ARROW_RELEASES);
}

static int array_fill(struct ArrowArray *out, StorageObject *st, PyObject *spec, int depth) {
  if (depth > ARROW_MAX_DEPTH || !PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 5 ||
      !PyTuple_Check(PyTuple_GET_ITEM(spec, 3)) || !PyTuple_Check(PyTuple_GET_ITEM(spec, 4))) {
    PyErr_SetString(PyExc_TypeError, "bad Arrow array spec");
    return -1;
  }
  long long length = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 0));
  long long null_count = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 1));
  long long offset = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 2));
  if (PyErr_Occurred()) return -1;
  PyObject *buffers = PyTuple_GET_ITEM(spec, 3), *children = PyTuple_GET_ITEM(spec, 4);
  Py_ssize_t nb = PyTuple_GET_SIZE(buffers), nc = PyTuple_GET_SIZE(children);
  size_t size = sizeof(array_private) + (size_t)nc * (sizeof(void *) + sizeof(struct ArrowArray)) +
                (size_t)nb * sizeof(void *);
  array_private *p = (array_private *)calloc(1, size);
  if (p == NULL) {
    PyErr_NoMemory();
    return -1;
  }
  p->child_ptrs = (struct ArrowArray **)(p + 1);
  p->children = (struct ArrowArray *)(p->child_ptrs + nc);
  p->buffers = (const void **)(p->children + nc);
  for (Py_ssize_t i = 0; i < nb; i++) {
    long which = PyLong_AsLong(PyTuple_GET_ITEM(buffers, i));
    if (which != 0 && which != 1) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "Arrow spec buffers are 0 (NULL) or 1 (the data)");
      free(p);
      return -1;
    }
    p->buffers[i] = which ? st->data : NULL;
  }
  out->length = length;
  out->null_count = null_count;
  out->offset = offset;
  out->n_buffers = nb;
  out->n_children = nc;
  out->buffers = nb ? p->buffers : NULL;
  out->children = nc ? p->child_ptrs : NULL;
  out->dictionary = NULL;
  out->private_data = p;
  for (Py_ssize_t i = 0; i < nc; i++) {
    p->child_ptrs[i] = &p->children[i];
    if (array_fill(&p->children[i], st, PyTuple_GET_ITEM(children, i), depth + 1) < 0) {
      for (Py_ssize_t j = 0; j < i; j++) p->children[j].release(&p->children[j]);
      free(p);
      return -1;
    }
  }
  p->owner = Py_NewRef(bridge_storage_owner(st));
  out->release = array_release;
  BUMP(STAT_ARROW_EXPORTS);
  return 0;
}

/* Capsule destructors (PyCapsule interface): release an unmoved struct, then
 * free the struct itself. */
#define STRUCT_DESTRUCTOR(fn, type, name, release_of)                       \
  static void fn(PyObject *cap) {                                           \
    type *x = (type *)PyCapsule_GetPointer(cap, name);                      \
    if (x == NULL) {                                                        \
      PyErr_Clear();                                                        \
      return;                                                               \
    }                                                                       \
    if ((release_of)->release != NULL) (release_of)->release(release_of);   \
    free(x);                                                                \
  }
STRUCT_DESTRUCTOR(schema_capsule_destructor, struct ArrowSchema, BRIDGE_NAME_ARROW_SCHEMA, x)
STRUCT_DESTRUCTOR(array_capsule_destructor, struct ArrowArray, BRIDGE_NAME_ARROW_ARRAY, x)
STRUCT_DESTRUCTOR(device_array_capsule_destructor, struct ArrowDeviceArray,
                  BRIDGE_NAME_ARROW_DEVICE_ARRAY, (&x->array))
STRUCT_DESTRUCTOR(stream_capsule_destructor, struct ArrowArrayStream, BRIDGE_NAME_ARROW_STREAM, x)
STRUCT_DESTRUCTOR(device_stream_capsule_destructor, struct ArrowDeviceArrayStream,
                  BRIDGE_NAME_ARROW_DEVICE_STREAM, x)

/* A zeroed, released struct wrapped in its capsule before it is filled, so
 * every error path frees it. */
static PyObject *new_struct_capsule(size_t size, const char *name, PyCapsule_Destructor d, void **out) {
  void *mem = calloc(1, size);
  if (mem == NULL) return PyErr_NoMemory();
  PyObject *cap = PyCapsule_New(mem, name, d);
  if (cap == NULL) {
    free(mem);
    return NULL;
  }
  *out = mem;
  return cap;
}

/* 0 when `t`'s memory may go to Arrow: its bytes exist, and the one lending
 * decision lends them to a consumer that never writes by its format's rules
 * (the C Data Interface's "Mutability": both sides treat exported buffers as
 * immutable, which is how an Arrow export says read-only). -1 with BufferError. */
static int lend_to_arrow(TensorObject *t) {
  if (bridge_tensor_check_bounds(t, PyExc_BufferError) < 0) return -1;
  if (bridge_storage_lend(t->storage, BRIDGE_CONSUMER_IMMUTABLE) == BRIDGE_LEND_REFUSED) {
    PyErr_SetString(PyExc_BufferError, "this tensor's read-only memory cannot be lent to Arrow");
    return -1;
  }
  return 0;
}

/* The tensor whose memory a spec exports. */
static TensorObject *export_source(PyObject *obj) {
  if (!Tensor_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "expected a bridge.Tensor, got %.200s", Py_TYPE(obj)->tp_name);
    return NULL;
  }
  TensorObject *t = (TensorObject *)obj;
  return lend_to_arrow(t) < 0 ? NULL : t;
}

static PyObject *py_arrow_export_schema(PyObject *mod, PyObject *spec) {
  (void)mod;
  struct ArrowSchema *s = NULL;
  PyObject *cap = new_struct_capsule(sizeof *s, BRIDGE_NAME_ARROW_SCHEMA, schema_capsule_destructor, (void **)&s);
  if (cap != NULL && schema_fill(s, spec, 0) < 0) Py_CLEAR(cap);
  return cap;
}

/* arrow_export_array(tensor, spec) */
static PyObject *py_arrow_export_array(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) return PyErr_Format(PyExc_TypeError, "arrow_export_array(tensor, spec)");
  TensorObject *t = export_source(args[0]);
  if (t == NULL) return NULL;
  struct ArrowArray *a = NULL;
  PyObject *cap = new_struct_capsule(sizeof *a, BRIDGE_NAME_ARROW_ARRAY, array_capsule_destructor, (void **)&a);
  if (cap != NULL && array_fill(a, t->storage, args[1], 0) < 0) Py_CLEAR(cap);
  return cap;
}

/* An ArrowDeviceArray over the storage. No sync event: the memory's stream
 * is waited for here, so that any consumer stream may read it at once. */
static int device_array_fill(struct ArrowDeviceArray *d, StorageObject *st, PyObject *spec,
                             ArrowDeviceType dev_type, int64_t dev_id) {
  memset(d, 0, sizeof *d); /* reserved zeroed, release NULL until filled */
  if (st->dev_type == kDLCUDA && bridge_cuda_synchronize(st->dev_id, st->stream) < 0) return -1;
  if (array_fill(&d->array, st, spec, 0) < 0) return -1;
  d->device_type = dev_type;
  d->device_id = dev_id;
  d->sync_event = NULL;
  return 0;
}

/* arrow_export_device_array(tensor, spec, device_type, device_id) */
static PyObject *py_arrow_export_device_array(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 4) return PyErr_Format(PyExc_TypeError, "arrow_export_device_array(tensor, spec, type, id)");
  TensorObject *t = export_source(args[0]);
  long dev_type = PyLong_AsLong(args[2]);
  long long dev_id = PyLong_AsLongLong(args[3]);
  if (t == NULL || PyErr_Occurred()) return NULL;
  struct ArrowDeviceArray *d = NULL;
  PyObject *cap = new_struct_capsule(sizeof *d, BRIDGE_NAME_ARROW_DEVICE_ARRAY,
                                     device_array_capsule_destructor, (void **)&d);
  if (cap == NULL) return NULL;
  if (device_array_fill(d, t->storage, args[1], (ArrowDeviceType)dev_type, dev_id) < 0) Py_CLEAR(cap);
  return cap;
}

/* ------------------------------------------------------------- streams */

/* A one-chunk stream, plain or device (C Stream / C Device Stream
 * interfaces). get_next may be called from any thread (DuckDB does), so the
 * callbacks enter Python themselves. */
typedef struct {
  PyObject *storage, *schema_spec, *array_spec;
  ArrowDeviceType dev_type; /* device streams: where the arrays live */
  int64_t dev_id;
  int done;
  char error[512];
} stream_private;

static void stream_set_error(stream_private *p) {
  PyObject *exc = bridge_fetch_error();
  PyObject *msg = exc ? PyObject_Str(exc) : NULL;
  const char *text = msg ? PyUnicode_AsUTF8(msg) : NULL;
  snprintf(p->error, sizeof p->error, "%s", text ? text : "bridge Arrow stream error");
  Py_XDECREF(msg);
  Py_XDECREF(exc);
  PyErr_Clear();
}

static int stream_schema(stream_private *p, struct ArrowSchema *out) {
  bridge_py_entry e;
  if (!bridge_py_enter(&e)) return EINVAL;
  int rc = schema_fill(out, p->schema_spec, 0) < 0 ? ENOMEM : 0;
  if (rc) stream_set_error(p);
  bridge_py_leave(&e);
  return rc;
}

/* The next array into `array` (a plain stream) or `device` (a device
 * stream): the one chunk, then the end (a released struct). */
static int stream_next(stream_private *p, struct ArrowArray *array, struct ArrowDeviceArray *device) {
  if (p->done) { /* release == NULL: end of stream */
    if (device != NULL) memset(device, 0, sizeof *device);
    if (array != NULL) memset(array, 0, sizeof *array);
    return 0;
  }
  bridge_py_entry e;
  if (!bridge_py_enter(&e)) return EINVAL;
  StorageObject *st = (StorageObject *)p->storage;
  int bad = device ? device_array_fill(device, st, p->array_spec, p->dev_type, p->dev_id)
                   : array_fill(array, st, p->array_spec, 0);
  int rc = bad < 0 ? (PyErr_ExceptionMatches(PyExc_MemoryError) ? ENOMEM : EIO) : 0;
  if (rc)
    stream_set_error(p);
  else
    p->done = 1;
  bridge_py_leave(&e);
  return rc;
}

static void stream_private_free(stream_private *p) {
  bridge_py_entry e;
  if (bridge_py_enter(&e)) { /* else: leak rather than touch a dying interpreter */
    Py_XDECREF(p->storage);
    Py_XDECREF(p->schema_spec);
    Py_XDECREF(p->array_spec);
    bridge_py_leave(&e);
  }
  free(p);
}

static int stream_get_schema(struct ArrowArrayStream *st, struct ArrowSchema *out) {
  if (st == NULL || st->release == NULL) return EINVAL;
  return stream_schema((stream_private *)st->private_data, out);
}

static int stream_get_next(struct ArrowArrayStream *st, struct ArrowArray *out) {
  if (st == NULL || st->release == NULL || out == NULL) return EINVAL;
  return stream_next((stream_private *)st->private_data, out, NULL);
}

static const char *stream_get_last_error(struct ArrowArrayStream *st) {
  stream_private *p = (stream_private *)st->private_data;
  return p != NULL && p->error[0] ? p->error : NULL;
}

static void stream_release(struct ArrowArrayStream *st) {
  if (st == NULL || st->release == NULL) return;
  stream_private_free((stream_private *)st->private_data);
  st->release = NULL;
}

static int device_stream_get_schema(struct ArrowDeviceArrayStream *st, struct ArrowSchema *out) {
  if (st == NULL || st->release == NULL) return EINVAL;
  return stream_schema((stream_private *)st->private_data, out);
}

static int device_stream_get_next(struct ArrowDeviceArrayStream *st, struct ArrowDeviceArray *out) {
  if (st == NULL || st->release == NULL || out == NULL) return EINVAL;
  return stream_next((stream_private *)st->private_data, NULL, out);
}

static const char *device_stream_get_last_error(struct ArrowDeviceArrayStream *st) {
  stream_private *p = (stream_private *)st->private_data;
  return p != NULL && p->error[0] ? p->error : NULL;
}

static void device_stream_release(struct ArrowDeviceArrayStream *st) {
  if (st == NULL || st->release == NULL) return;
  stream_private_free((stream_private *)st->private_data);
  st->release = NULL;
}

/* The stream's private part: it holds a read-only snapshot of the tensor's
 * storage record (a later resize_ cannot move it) and its owner; a batch is
 * built only at get_next. NULL with an exception. */
static stream_private *stream_private_new(TensorObject *t, PyObject *schema_spec, PyObject *array_spec) {
  stream_private *p = (stream_private *)calloc(1, sizeof *p);
  if (p == NULL) {
    PyErr_NoMemory();
    return NULL;
  }
  StorageObject *snapshot = bridge_storage_new(t->storage->data, t->storage->nbytes, t->storage->dev_type,
                                               t->storage->dev_id, bridge_storage_owner(t->storage), 1);
  if (snapshot == NULL) {
    free(p);
    return NULL;
  }
  snapshot->stream = t->storage->stream; /* the work a device stream's get_next waits for */
  p->storage = (PyObject *)snapshot;
  p->schema_spec = Py_NewRef(schema_spec);
  p->array_spec = Py_NewRef(array_spec);
  return p;
}

/* arrow_export_stream(tensor, schema_spec, array_spec) */
static PyObject *py_arrow_export_stream(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 3) return PyErr_Format(PyExc_TypeError, "arrow_export_stream(tensor, schema_spec, array_spec)");
  TensorObject *t = export_source(args[0]);
  if (t == NULL) return NULL;
  struct ArrowArrayStream *st = NULL;
  PyObject *cap = new_struct_capsule(sizeof *st, BRIDGE_NAME_ARROW_STREAM, stream_capsule_destructor, (void **)&st);
  if (cap == NULL) return NULL;
  stream_private *p = stream_private_new(t, args[1], args[2]);
  if (p == NULL) {
    Py_DECREF(cap);
    return NULL;
  }
  st->get_schema = stream_get_schema;
  st->get_next = stream_get_next;
  st->get_last_error = stream_get_last_error;
  st->private_data = p;
  st->release = stream_release;
  return cap;
}

/* arrow_export_device_stream(tensor, schema_spec, array_spec, device_type,
 * device_id): an 'arrow_device_array_stream' of one ArrowDeviceArray. */
static PyObject *py_arrow_export_device_stream(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 5)
    return PyErr_Format(PyExc_TypeError,
                        "arrow_export_device_stream(tensor, schema_spec, array_spec, type, id)");
  TensorObject *t = export_source(args[0]);
  long dev_type = PyLong_AsLong(args[3]);
  long long dev_id = PyLong_AsLongLong(args[4]);
  if (t == NULL || PyErr_Occurred()) return NULL;
  struct ArrowDeviceArrayStream *st = NULL;
  PyObject *cap = new_struct_capsule(sizeof *st, BRIDGE_NAME_ARROW_DEVICE_STREAM,
                                     device_stream_capsule_destructor, (void **)&st);
  if (cap == NULL) return NULL;
  stream_private *p = stream_private_new(t, args[1], args[2]);
  if (p == NULL) {
    Py_DECREF(cap);
    return NULL;
  }
  p->dev_type = (ArrowDeviceType)dev_type;
  p->dev_id = dev_id;
  st->device_type = (ArrowDeviceType)dev_type;
  st->get_schema = device_stream_get_schema;
  st->get_next = device_stream_get_next;
  st->get_last_error = device_stream_get_last_error;
  st->private_data = p;
  st->release = device_stream_release;
  return cap;
}

/* ------------------------------------------- the 1-d primitive fast path */

/* One allocation holds both capsules' structs (the schema, and an ArrowArray
 * or ArrowDeviceArray), the owner reference and the buffer list. The block
 * is freed once both capsules are gone and the array (wherever a consumer
 * moved it) is released. The schema points at static strings and owns
 * nothing. The flags are only touched with the GIL held. */
typedef struct {
  union {
    struct ArrowArray array;
    struct ArrowDeviceArray device;
  } head; /* first: the array capsule points here */
  struct ArrowSchema schema;
  PyObject *owner;
  const void *buffers[2];
  int array_capsule_gone, schema_capsule_gone, released;
} fast_block;

static void static_schema_release(struct ArrowSchema *s) {
  if (s != NULL) s->release = NULL;
}

static void fast_block_maybe_free(fast_block *b) {
  if (b->array_capsule_gone && b->schema_capsule_gone && b->released) free(b);
}

static void fast_array_release(struct ArrowArray *a) {
  if (a == NULL || a->release == NULL) return;
  fast_block *b = (fast_block *)a->private_data;
  a->release = NULL;
  bridge_py_entry e;
  if (!bridge_py_enter(&e)) return; /* Python cannot be entered: leak rather than touch it */
  Py_CLEAR(b->owner);
  b->released = 1;
  BUMP(STAT_ARROW_RELEASES);
  fast_block_maybe_free(b);
  bridge_py_leave(&e);
}

static void fast_array_capsule_destructor(PyObject *cap) {
  const char *name = PyCapsule_GetName(cap);
  fast_block *b = name ? (fast_block *)PyCapsule_GetPointer(cap, name) : NULL;
  if (b == NULL) {
    PyErr_Clear();
    return;
  }
  struct ArrowArray *a = &b->head.array; /* the first member of both struct kinds */
  b->array_capsule_gone = 1;
  if (a->release != NULL)
    a->release(a); /* never moved: release it here (which may free the block) */
  else
    fast_block_maybe_free(b);
}

static void fast_schema_capsule_destructor(PyObject *cap) {
  struct ArrowSchema *s = (struct ArrowSchema *)PyCapsule_GetPointer(cap, BRIDGE_NAME_ARROW_SCHEMA);
  if (s == NULL) {
    PyErr_Clear();
    return;
  }
  fast_block *b = (fast_block *)((char *)s - offsetof(fast_block, schema));
  if (s->release != NULL) s->release(s);
  b->schema_capsule_gone = 1;
  fast_block_maybe_free(b);
}

static PyObject *fast_export(TensorObject *t, int device) {
  fast_block *b = (fast_block *)calloc(1, sizeof *b);
  if (b == NULL) return PyErr_NoMemory();
  b->schema_capsule_gone = b->array_capsule_gone = b->released = 1; /* until each exists */
  PyObject *scap = PyCapsule_New(&b->schema, BRIDGE_NAME_ARROW_SCHEMA, fast_schema_capsule_destructor);
  if (scap == NULL) {
    free(b);
    return NULL;
  }
  b->schema_capsule_gone = 0;
  struct ArrowSchema *s = &b->schema;
  s->format = t->dtype->arrow_format;
  s->name = "tensor"; /* the field name __arrow_c_schema__ uses too */
  s->metadata = t->dtype->code == kDLBool ? BOOL8_METADATA : NULL;
  s->flags = ARROW_FLAG_NULLABLE;
  s->release = static_schema_release;
  PyObject *acap = PyCapsule_New(b, device ? BRIDGE_NAME_ARROW_DEVICE_ARRAY : BRIDGE_NAME_ARROW_ARRAY,
                                 fast_array_capsule_destructor);
  if (acap == NULL) {
    Py_DECREF(scap); /* frees the block: the array part never existed */
    return NULL;
  }
  b->array_capsule_gone = 0;
  struct ArrowArray *out = &b->head.array;
  if (device) {
    b->head.device.device_type = ARROW_CPU_DEVICE;
    b->head.device.device_id = -1;
  }
  b->buffers[1] = t->storage->data;
  b->owner = Py_NewRef(bridge_storage_owner(t->storage));
  out->length = t->ndim ? t->shape[0] : 1;
  out->offset = t->offset;
  out->n_buffers = 2;
  out->buffers = b->buffers;
  out->private_data = b;
  out->release = fast_array_release;
  b->released = 0;
  BUMP(STAT_ARROW_EXPORTS);
  return Py_BuildValue("(NN)", scap, acap);
}

/* The common body of Tensor.__arrow_c_array__ / __arrow_c_device_array__: a
 * 1-d contiguous host tensor of a primitive Arrow type, no requests, is done
 * here; the rest (N-d, requested schemas, device memory, every error) is
 * the registered Python export's. */
static PyObject *arrow_method(TensorObject *t, const char *kind, PyObject *const *args,
                              Py_ssize_t nargsf, PyObject *kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf), nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
  int device = strcmp(kind, "device_array") == 0;
  int simple = (strcmp(kind, "array") == 0 || device) && nargs <= 1 && (device || nkw == 0);
  for (Py_ssize_t i = 0; simple && i < nargs + nkw; i++) simple = args[i] == Py_None;
  if (simple && t->ndim == 1 && t->dtype->arrow_format[0] && t->storage->dev_type == kDLCPU &&
      (t->shape[0] <= 1 || t->strides[0] == 1) && (uintptr_t)t->storage->data % (uintptr_t)t->dtype->itemsize == 0) {
    if (lend_to_arrow(t) < 0) return NULL;
    return fast_export(t, device);
  }
  PyObject *policy = bridge_upcall(UP_ARROW_EXPORT);
  if (policy == NULL) return NULL;
  PyObject *argt = PyTuple_New(nargs), *kw = PyDict_New(), *kindobj = PyUnicode_FromString(kind), *r = NULL;
  if (argt == NULL || kw == NULL || kindobj == NULL) goto done;
  for (Py_ssize_t i = 0; i < nargs; i++) PyTuple_SET_ITEM(argt, i, Py_NewRef(args[i]));
  for (Py_ssize_t i = 0; i < nkw; i++)
    if (PyDict_SetItem(kw, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0) goto done;
  r = PyObject_CallFunctionObjArgs(policy, (PyObject *)t, kindobj, argt, kw, NULL);
done:
  Py_XDECREF(argt);
  Py_XDECREF(kw);
  Py_XDECREF(kindobj);
  return r;
}

#define ARROW_METHOD(fn, kind)                                                                    \
  static PyObject *fn(TensorObject *t, PyObject *const *args, Py_ssize_t nargsf, PyObject *kwnames) { \
    return arrow_method(t, kind, args, nargsf, kwnames);                                         \
  }
ARROW_METHOD(tensor_arrow_c_array, "array")
ARROW_METHOD(tensor_arrow_c_device_array, "device_array")
ARROW_METHOD(tensor_arrow_c_stream, "stream")
ARROW_METHOD(tensor_arrow_c_device_stream, "device_stream")
ARROW_METHOD(tensor_arrow_c_schema, "schema")

#define KW METH_FASTCALL | METH_KEYWORDS
PyMethodDef bridge_arrow_methods[] = {
    {"__arrow_c_schema__", (PyCFunction)(void (*)(void))tensor_arrow_c_schema, KW,
     "__arrow_c_schema__($self, /)\n--\n\nArrow PyCapsule interface: an 'arrow_schema' capsule of "
     "this tensor's Arrow type, a field named 'tensor' (see bridge.arrow)."},
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))tensor_arrow_c_array, KW,
     "__arrow_c_array__($self, requested_schema=None)\n--\n\nArrow PyCapsule interface: "
     "('arrow_schema', 'arrow_array') capsules over this tensor's memory, zero-copy (a "
     "requested_schema of another value type is met by a cast into new memory); see bridge.arrow."},
    {"__arrow_c_device_array__", (PyCFunction)(void (*)(void))tensor_arrow_c_device_array, KW,
     "__arrow_c_device_array__($self, requested_schema=None, **kwargs)\n--\n\nArrow PyCapsule "
     "interface for host and CUDA memory: ('arrow_schema', 'arrow_device_array'); see bridge.arrow."},
    {"__arrow_c_stream__", (PyCFunction)(void (*)(void))tensor_arrow_c_stream, KW,
     "__arrow_c_stream__($self, requested_schema=None)\n--\n\nArrow PyCapsule interface: an "
     "'arrow_array_stream' of one array of the tensor's type (a tensor is a column); see bridge.arrow."},
    {"__arrow_c_device_stream__", (PyCFunction)(void (*)(void))tensor_arrow_c_device_stream, KW,
     "__arrow_c_device_stream__($self, requested_schema=None, **kwargs)\n--\n\nArrow PyCapsule "
     "interface for host and CUDA memory: an 'arrow_device_array_stream' of one ArrowDeviceArray "
     "(the array __arrow_c_device_array__ gives); see bridge.arrow."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef export_functions[] = {
    {"arrow_export_schema", (PyCFunction)py_arrow_export_schema, METH_O,
     "arrow_export_schema(spec, /)\n--\n\nAn 'arrow_schema' capsule for a schema spec."},
    {"arrow_export_array", (PyCFunction)(void (*)(void))py_arrow_export_array, METH_FASTCALL,
     "arrow_export_array(tensor, spec, /)\n--\n\nAn 'arrow_array' capsule over the tensor's storage."},
    {"arrow_export_device_array", (PyCFunction)(void (*)(void))py_arrow_export_device_array, METH_FASTCALL,
     "arrow_export_device_array(tensor, spec, device_type, device_id, /)\n--\n\nAn "
     "'arrow_device_array' capsule over the tensor's storage."},
    {"arrow_export_stream", (PyCFunction)(void (*)(void))py_arrow_export_stream, METH_FASTCALL,
     "arrow_export_stream(tensor, schema_spec, array_spec, /)\n--\n\nAn 'arrow_array_stream' "
     "capsule of one chunk over the tensor's storage."},
    {"arrow_export_device_stream", (PyCFunction)(void (*)(void))py_arrow_export_device_stream, METH_FASTCALL,
     "arrow_export_device_stream(tensor, schema_spec, array_spec, device_type, device_id, /)\n--\n\n"
     "An 'arrow_device_array_stream' capsule of one ArrowDeviceArray over the tensor's storage."},
    {NULL, NULL, 0, NULL},
};

int bridge_arrow_export_init(PyObject *mod) {
  PyObject *meta = PyBytes_FromStringAndSize(BOOL8_METADATA, sizeof BOOL8_METADATA);
  if (meta == NULL || PyModule_AddObjectRef(mod, "BOOL8_METADATA", meta) < 0) {
    Py_XDECREF(meta);
    return -1;
  }
  Py_DECREF(meta);
  return PyModule_AddFunctions(mod, export_functions);
}
