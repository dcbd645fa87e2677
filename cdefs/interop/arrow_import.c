/* Arrow import (C Data Interface, PyCapsule interface): structs are moved
 * out of the producer's capsules (a bitwise copy, then the source marked
 * released) into a guard that calls their release exactly once, when the
 * last bridge view lets go. The structs are described to
 * bridge.interop.arrow as tuples, which turns them into tensors with
 * _C.from_memory; every count a producer sets is bounded before it is
 * trusted. bridge.from_arrow is here too: a plain primitive array (a number
 * type without nulls, one chunk) is viewed here, in C, and bridge.convert
 * reads Arrow sources the same way (bridge_arrow_values_of). */

#include "interop.h"

#include <stdlib.h>

static const char NAME_ARROW_GUARD[] = "bridge.arrow_import";
#define ARROW_MAX_DEPTH 64
#define ARROW_MAX_BUFFERS 3 /* validity, offsets/data, data: no layout bridge reads has more */
#define ARROW_MAX_CHILDREN 65536
/* The metadata block carries no size: absurd counts and lengths are refused
 * before anything past them is read. */
#define ARROW_MAX_METADATA_PAIRS 4096
#define ARROW_MAX_METADATA_LENGTH (1 << 28)
#define ARROW_CPU_DEVICE 1
#define ARROW_CUDA_DEVICE 2

typedef struct {
  struct ArrowSchema schema;
  struct ArrowArray array;
} arrow_guard_t;

static void arrow_guard_destructor(PyObject *cap) {
  arrow_guard_t *g = (arrow_guard_t *)PyCapsule_GetPointer(cap, NAME_ARROW_GUARD);
  if (g == NULL) {
    PyErr_Clear();
    return;
  }
  PyObject *saved = bridge_fetch_error();
  if (g->array.release != NULL) g->array.release(&g->array);
  if (g->schema.release != NULL) g->schema.release(&g->schema);
  free(g);
  BUMP(STAT_ARROW_IMPORT_RELEASES);
  bridge_restore_error(saved);
}

static PyObject *new_guard(arrow_guard_t **out) {
  arrow_guard_t *g = (arrow_guard_t *)calloc(1, sizeof *g);
  if (g == NULL) return PyErr_NoMemory();
  PyObject *cap = PyCapsule_New(g, NAME_ARROW_GUARD, arrow_guard_destructor);
  if (cap == NULL) {
    free(g);
    return NULL;
  }
  BUMP(STAT_ARROW_IMPORTS);
  *out = g;
  return cap;
}

/* (format, name, metadata, flags, children, has_dictionary) */
static PyObject *describe_schema(const struct ArrowSchema *s, int depth) {
  if (depth > ARROW_MAX_DEPTH) {
    PyErr_SetString(PyExc_ValueError, "Arrow schema nests too deeply");
    return NULL;
  }
  if (s->release == NULL) {
    PyErr_SetString(PyExc_ValueError, "Arrow schema (or a child) is released");
    return NULL;
  }
  if (s->format == NULL) {
    PyErr_SetString(PyExc_ValueError, "Arrow schema has a NULL format");
    return NULL;
  }
  if (s->n_children < 0 || (s->n_children > 0 && s->children == NULL)) {
    PyErr_Format(PyExc_ValueError, "Arrow schema has n_children %lld with children %p",
                 (long long)s->n_children, (void *)s->children);
    return NULL;
  }
  if (s->n_children > ARROW_MAX_CHILDREN) {
    PyErr_Format(PyExc_ValueError, "Arrow schema has %lld children (bridge reads at most %d)",
                 (long long)s->n_children, ARROW_MAX_CHILDREN);
    return NULL;
  }
  PyObject *meta = Py_NewRef(Py_None);
  if (s->metadata != NULL) {
    /* int32 count, then (int32 length + bytes) per key and per value; the
     * block carries no size, so counts and lengths are bounded and summed
     * with overflow checks before anything past them is read. */
    int32_t n;
    memcpy(&n, s->metadata, 4);
    if (n < 0 || n > ARROW_MAX_METADATA_PAIRS) {
      Py_DECREF(meta);
      PyErr_Format(PyExc_ValueError, "Arrow schema metadata has an invalid pair count %d", (int)n);
      return NULL;
    }
    size_t used = 4;
    for (int32_t i = 0; i < 2 * n; i++) {
      int32_t len;
      memcpy(&len, s->metadata + used, 4);
      if (len < 0 || len > ARROW_MAX_METADATA_LENGTH ||
          __builtin_add_overflow(used, (size_t)4 + (size_t)len, &used) ||
          used > (size_t)PY_SSIZE_T_MAX) {
        Py_DECREF(meta);
        PyErr_Format(PyExc_ValueError, "Arrow schema metadata has an invalid length %d",
                     (int)len);
        return NULL;
      }
    }
    Py_SETREF(meta, PyBytes_FromStringAndSize(s->metadata, (Py_ssize_t)used));
    if (meta == NULL) return NULL;
  }
  PyObject *children = PyTuple_New(s->n_children);
  if (children == NULL) {
    Py_DECREF(meta);
    return NULL;
  }
  for (int64_t i = 0; i < s->n_children; i++) {
    PyObject *c = s->children[i] ? describe_schema(s->children[i], depth + 1) : NULL;
    if (c == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Arrow schema has a NULL child");
      Py_DECREF(meta);
      Py_DECREF(children);
      return NULL;
    }
    PyTuple_SET_ITEM(children, i, c);
  }
  PyObject *format = PyUnicode_DecodeUTF8(s->format, (Py_ssize_t)strlen(s->format), "strict");
  if (format == NULL) {
    PyErr_Clear();
    PyErr_SetString(PyExc_ValueError, "Arrow schema format string is not valid UTF-8");
    Py_DECREF(meta);
    Py_DECREF(children);
    return NULL;
  }
  PyObject *name = s->name ? PyUnicode_DecodeUTF8(s->name, (Py_ssize_t)strlen(s->name), "replace")
                           : Py_NewRef(Py_None);
  if (name == NULL) {
    Py_DECREF(format);
    Py_DECREF(meta);
    Py_DECREF(children);
    return NULL;
  }
  return Py_BuildValue("(NNNLNO)", format, name, meta, (long long)s->flags, children,
                       s->dictionary ? Py_True : Py_False);
}

/* (length, null_count, offset, buffers, children) */
static PyObject *describe_array(const struct ArrowArray *a, int depth) {
  if (depth > ARROW_MAX_DEPTH) {
    PyErr_SetString(PyExc_ValueError, "Arrow array nests too deeply");
    return NULL;
  }
  if (a->release == NULL) {
    PyErr_SetString(PyExc_ValueError, "Arrow array (or a child) is released");
    return NULL;
  }
  if (a->n_buffers < 0 || a->n_children < 0 || (a->n_buffers > 0 && a->buffers == NULL) ||
      (a->n_children > 0 && a->children == NULL)) {
    PyErr_Format(PyExc_ValueError,
                 "Arrow array has n_buffers %lld (buffers %p) and n_children %lld (children %p)",
                 (long long)a->n_buffers, (void *)a->buffers, (long long)a->n_children,
                 (void *)a->children);
    return NULL;
  }
  if (a->n_buffers > ARROW_MAX_BUFFERS || a->n_children > ARROW_MAX_CHILDREN) {
    PyErr_Format(PyExc_ValueError,
                 "Arrow array has %lld buffers and %lld children (the layouts bridge reads have "
                 "at most %d buffers and %d children)",
                 (long long)a->n_buffers, (long long)a->n_children, ARROW_MAX_BUFFERS,
                 ARROW_MAX_CHILDREN);
    return NULL;
  }
  PyObject *bufs = PyTuple_New(a->n_buffers);
  PyObject *children = PyTuple_New(a->n_children);
  if (bufs == NULL || children == NULL) goto fail;
  for (int64_t i = 0; i < a->n_buffers; i++) {
    PyObject *v = PyLong_FromVoidPtr((void *)a->buffers[i]);
    if (v == NULL) goto fail;
    PyTuple_SET_ITEM(bufs, i, v);
  }
  for (int64_t i = 0; i < a->n_children; i++) {
    PyObject *c = a->children[i] ? describe_array(a->children[i], depth + 1) : NULL;
    if (c == NULL) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "Arrow array has a NULL child");
      goto fail;
    }
    PyTuple_SET_ITEM(children, i, c);
  }
  return Py_BuildValue("(LLLNN)", (long long)a->length, (long long)a->null_count,
                       (long long)a->offset, bufs, children);
fail:
  Py_XDECREF(bufs);
  Py_XDECREF(children);
  return NULL;
}

static void *capsule_struct(PyObject *cap, const char *want, const char *role) {
  if (!PyCapsule_CheckExact(cap)) {
    PyErr_Format(PyExc_TypeError, "expected an '%s' PyCapsule for the %s, got %.200s", want, role,
                 Py_TYPE(cap)->tp_name);
    return NULL;
  }
  const char *name = PyCapsule_GetName(cap);
  if (name == NULL || strcmp(name, want) != 0) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "expected a PyCapsule named '%s' for the %s, got '%s'", want,
                 role, name ? name : "(null)");
    return NULL;
  }
  return PyCapsule_GetPointer(cap, name);
}

/* arrow_import(schema_capsule, array_capsule) ->
 *   (guard, schema_desc, array_desc, device_type, device_id)
 * array_capsule may be an "arrow_array" or an "arrow_device_array". */
static PyObject *py_arrow_import(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) {
    PyErr_SetString(PyExc_TypeError, "arrow_import(schema_capsule, array_capsule)");
    return NULL;
  }
  struct ArrowSchema *s = (struct ArrowSchema *)capsule_struct(args[0], BRIDGE_NAME_ARROW_SCHEMA, "schema");
  if (s == NULL) return NULL;
  const char *aname = PyCapsule_CheckExact(args[1]) ? PyCapsule_GetName(args[1]) : NULL;
  int device = aname != NULL && strcmp(aname, BRIDGE_NAME_ARROW_DEVICE_ARRAY) == 0;
  void *ap = capsule_struct(args[1], device ? BRIDGE_NAME_ARROW_DEVICE_ARRAY : BRIDGE_NAME_ARROW_ARRAY, "array");
  if (ap == NULL) return NULL;
  struct ArrowArray *a = device ? &((struct ArrowDeviceArray *)ap)->array : (struct ArrowArray *)ap;
  long dev_type = device ? (long)((struct ArrowDeviceArray *)ap)->device_type : ARROW_CPU_DEVICE;
  long long dev_id = device ? (long long)((struct ArrowDeviceArray *)ap)->device_id : -1;
  if (s->release == NULL || a->release == NULL) {
    PyErr_SetString(PyExc_ValueError,
                    "the Arrow schema or array capsule was already consumed (released struct)");
    return NULL;
  }
  /* A CUDA producer's pending work: the consumer's stream waits for its event. */
  if (device && dev_type == ARROW_CUDA_DEVICE &&
      bridge_cuda_wait_event((int)dev_id, ((struct ArrowDeviceArray *)ap)->sync_event,
                             bridge_current_stream()) < 0)
    return NULL;
  arrow_guard_t *g;
  PyObject *guard = new_guard(&g);
  if (guard == NULL) return NULL;
  g->schema = *s; /* move: bitwise copy, then mark the source released */
  s->release = NULL;
  g->array = *a;
  a->release = NULL;
  PyObject *sd = describe_schema(&g->schema, 0);
  PyObject *ad = sd ? describe_array(&g->array, 0) : NULL;
  if (ad == NULL) {
    Py_XDECREF(sd);
    Py_DECREF(guard);
    return NULL;
  }
  return Py_BuildValue("(NNNlL)", guard, sd, ad, dev_type, dev_id);
}

/* arrow_describe_schema(schema_capsule): describe without taking it (for
 * requested_schema, which stays the caller's). */
static PyObject *py_arrow_describe_schema(PyObject *mod, PyObject *cap) {
  (void)mod;
  struct ArrowSchema *s = (struct ArrowSchema *)capsule_struct(cap, BRIDGE_NAME_ARROW_SCHEMA, "schema");
  return s == NULL ? NULL : describe_schema(s, 0);
}

/* A stream being drained: a plain ArrowArrayStream or an
 * ArrowDeviceArrayStream, moved out of its capsule (the source marked
 * released), behind one set of calls. */
typedef struct {
  int device;
  struct ArrowArrayStream plain;
  struct ArrowDeviceArrayStream dev;
} any_stream;

static int any_released(any_stream *s) { return s->device ? s->dev.release == NULL : s->plain.release == NULL; }

static int any_get_schema(any_stream *s, struct ArrowSchema *out) {
  int rc;
  Py_BEGIN_ALLOW_THREADS /* a producer may block, or take the GIL itself */
  rc = s->device ? s->dev.get_schema(&s->dev, out) : s->plain.get_schema(&s->plain, out);
  Py_END_ALLOW_THREADS
  return rc;
}

/* The next array into `out` (its device fields too, for a device stream). */
static int any_get_next(any_stream *s, struct ArrowDeviceArray *out) {
  int rc;
  memset(out, 0, sizeof *out);
  Py_BEGIN_ALLOW_THREADS
  rc = s->device ? s->dev.get_next(&s->dev, out) : s->plain.get_next(&s->plain, &out->array);
  Py_END_ALLOW_THREADS
  if (!s->device) {
    out->device_type = ARROW_CPU_DEVICE;
    out->device_id = -1;
  }
  return rc;
}

static const char *any_last_error(any_stream *s) {
  if (s->device) return s->dev.get_last_error ? s->dev.get_last_error(&s->dev) : NULL;
  return s->plain.get_last_error ? s->plain.get_last_error(&s->plain) : NULL;
}

static void any_release(any_stream *s) {
  if (any_released(s)) return;
  /* The producer's release may run Python code: keep our error intact. */
  PyObject *saved = bridge_fetch_error();
  if (s->device)
    s->dev.release(&s->dev);
  else
    s->plain.release(&s->plain);
  bridge_restore_error(saved);
}

static PyObject *stream_failed(any_stream *s, const char *what, int rc) {
  const char *err = any_last_error(s);
  return PyErr_Format(PyExc_RuntimeError, "Arrow stream %s failed (%d): %s", what, rc, err ? err : "no message");
}

/* arrow_import_stream(stream_capsule) -> (schema_guard, schema_desc,
 *   [(array_guard, array_desc, device_type, device_id), ...]); the stream
 * ('arrow_array_stream' or 'arrow_device_array_stream') is drained and
 * released. A device stream's CUDA arrays make the consumer's stream wait
 * for their sync_event; every array must be on the stream's device type. */
static PyObject *py_arrow_import_stream(PyObject *mod, PyObject *cap) {
  (void)mod;
  const char *cname = PyCapsule_CheckExact(cap) ? PyCapsule_GetName(cap) : NULL;
  any_stream s;
  memset(&s, 0, sizeof s);
  s.device = cname != NULL && strcmp(cname, BRIDGE_NAME_ARROW_DEVICE_STREAM) == 0;
  void *src = capsule_struct(cap, s.device ? BRIDGE_NAME_ARROW_DEVICE_STREAM : BRIDGE_NAME_ARROW_STREAM,
                             "stream");
  if (src == NULL) return NULL;
  if (s.device) {
    s.dev = *(struct ArrowDeviceArrayStream *)src;
    ((struct ArrowDeviceArrayStream *)src)->release = NULL;
  } else {
    s.plain = *(struct ArrowArrayStream *)src;
    ((struct ArrowArrayStream *)src)->release = NULL;
  }
  if (any_released(&s)) {
    PyErr_SetString(PyExc_ValueError, "the Arrow stream capsule was already consumed");
    return NULL;
  }
  long stream_type = s.device ? (long)s.dev.device_type : ARROW_CPU_DEVICE;
  PyObject *batches = NULL, *result = NULL, *sguard = NULL, *sd = NULL;
  arrow_guard_t *g;
  sguard = new_guard(&g);
  if (sguard == NULL) goto done;
  int rc = any_get_schema(&s, &g->schema);
  if (rc != 0) {
    stream_failed(&s, "get_schema", rc);
    goto done;
  }
  if (!(sd = describe_schema(&g->schema, 0)) || !(batches = PyList_New(0))) goto done;
  for (;;) {
    arrow_guard_t *bg;
    PyObject *bguard = new_guard(&bg);
    if (bguard == NULL) goto done;
    struct ArrowDeviceArray next;
    rc = any_get_next(&s, &next);
    if (rc != 0) {
      stream_failed(&s, "get_next", rc);
      Py_DECREF(bguard);
      goto done;
    }
    bg->array = next.array; /* moved: the guard releases it once */
    if (bg->array.release == NULL) { /* end of stream */
      Py_DECREF(bguard);
      break;
    }
    if ((long)next.device_type != stream_type) {
      PyErr_Format(PyExc_ValueError,
                   "Arrow device stream of device type %ld gave an array of device type %ld",
                   stream_type, (long)next.device_type);
      Py_DECREF(bguard);
      goto done;
    }
    /* A CUDA producer's pending work: the consumer's stream waits for its event. */
    if (next.device_type == ARROW_CUDA_DEVICE &&
        bridge_cuda_wait_event((int)next.device_id, next.sync_event, bridge_current_stream()) < 0) {
      Py_DECREF(bguard);
      goto done;
    }
    PyObject *ad = describe_array(&bg->array, 0);
    PyObject *item = ad ? Py_BuildValue("(NNlL)", bguard, ad, (long)next.device_type,
                                        (long long)next.device_id)
                        : NULL;
    if (item == NULL) {
      Py_XDECREF(ad);
      Py_DECREF(bguard);
      goto done;
    }
    int bad = PyList_Append(batches, item);
    Py_DECREF(item);
    if (bad) goto done;
  }
  result = Py_BuildValue("(OOO)", sguard, sd, batches);
done:
  any_release(&s);
  Py_XDECREF(sguard);
  Py_XDECREF(sd);
  Py_XDECREF(batches);
  return result;
}

/* ------------------------------------------------ primitive arrays, in C */

/* The one-character formats of Arrow's fixed-width numbers, as DLPack types:
 * what a primitive array's values buffer holds, element for element. */
static int primitive_type(const char *fmt, DLDataType *out) {
  if (fmt == NULL || fmt[0] == 0 || fmt[1] != 0) return 0;
  static const struct {
    char f;
    uint8_t code, bits;
  } table[] = {{'c', kDLInt, 8},    {'C', kDLUInt, 8},  {'s', kDLInt, 16},   {'S', kDLUInt, 16},
               {'i', kDLInt, 32},   {'I', kDLUInt, 32}, {'l', kDLInt, 64},   {'L', kDLUInt, 64},
               {'e', kDLFloat, 16}, {'f', kDLFloat, 32}, {'g', kDLFloat, 64}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (table[i].f == fmt[0]) {
      out->code = table[i].code;
      out->bits = table[i].bits;
      out->lanes = 1;
      return 1;
    }
  return 0;
}

/* Whether (s, a) is a plain primitive array bridge views as it is: a number
 * format with no metadata (no extension type), children or dictionary; two
 * buffers, no nulls, a non-negative length and offset. Anything else is the
 * general path's (bridge.interop.arrow), which explains what it refuses. */
static int plain_primitive(const struct ArrowSchema *s, const struct ArrowArray *a, DLDataType *dt) {
  if (s->release == NULL || a->release == NULL || !primitive_type(s->format, dt)) return 0;
  if (s->metadata != NULL || s->n_children != 0 || s->dictionary != NULL) return 0;
  if (a->n_buffers != 2 || a->buffers == NULL || a->n_children != 0 || a->dictionary != NULL) return 0;
  if (a->length < 0 || a->offset < 0) return 0;
  if (a->null_count != 0 && !(a->null_count == -1 && a->buffers[0] == NULL)) return 0;
  return a->length == 0 || a->buffers[1] != NULL;
}

/* Move (s, a), a plain primitive array of `dt`, into a new guard and
 * describe its values: 1 with *p filled (p->guard a new reference); -1 with
 * an exception (the structs are then released). */
static int take_primitive(struct ArrowSchema *s, struct ArrowArray *a, DLDataType dt, bridge_arrow_values *p) {
  arrow_guard_t *g;
  PyObject *guard = new_guard(&g);
  if (guard == NULL) {
    a->release(a);
    s->release(s);
    return -1;
  }
  g->schema = *s; /* move: bitwise copy, then mark the source released */
  s->release = NULL;
  g->array = *a;
  a->release = NULL;
  int64_t isz = dt.bits / 8, skip;
  uintptr_t data;
  if (__builtin_mul_overflow(g->array.offset, isz, &skip) ||
      __builtin_add_overflow((uintptr_t)g->array.buffers[1], (uintptr_t)skip, &data) ||
      __builtin_mul_overflow(g->array.length, isz, &p->nbytes) ||
      (g->array.length > 0 && data > UINTPTR_MAX - (uintptr_t)p->nbytes)) {
    Py_DECREF(guard);
    PyErr_SetString(PyExc_ValueError, "Arrow array's offset and length put its values past the 64-bit "
                                      "address space (the offset or length is corrupt)");
    return -1;
  }
  p->guard = guard;
  p->data = (char *)data;
  p->dtype = dt;
  p->length = g->array.length;
  return 1;
}

/* Whether each __arrow_c_stream__() of tp's objects is a new stream over the
 * same data (polars' Series, pyarrow's ChunkedArray): what is read here and
 * not taken is read again by the general path. A one-shot stream (a
 * RecordBatchReader, a generator's) is left to the general path whole. */
static int restreamable(PyTypeObject *tp) {
  static PyTypeObject *known[2];
  if (tp == known[0] || tp == known[1]) return 1;
  int chunked = strcmp(tp->tp_name, "pyarrow.lib.ChunkedArray") == 0;
  if (!chunked && strcmp(tp->tp_name, "Series") == 0) { /* a Python class: its module says whose */
    PyObject *mod = PyObject_GetAttrString((PyObject *)tp, "__module__");
    chunked = mod != NULL && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "polars.series.series") == 0;
    Py_XDECREF(mod);
    PyErr_Clear();
  }
  if (chunked) known[known[0] != NULL] = tp;
  return chunked;
}

/* obj.__arrow_c_stream__() drained, when it holds exactly one batch: 1 with
 * *schema and *batch (the caller's to release, or to move from); 0 when it
 * holds more or fewer, or a call failed (nothing held, no exception: the
 * general path reads obj again and explains); -1 with an exception. */
static int one_batch(PyObject *obj, PyObject *method, struct ArrowSchema *schema, struct ArrowArray *batch) {
  PyObject *cap = PyObject_CallMethodNoArgs(obj, method);
  if (cap == NULL) return -1;
  struct ArrowArrayStream *src = (struct ArrowArrayStream *)capsule_struct(cap, BRIDGE_NAME_ARROW_STREAM, "stream");
  if (src == NULL || src->release == NULL) {
    PyErr_Clear();
    Py_DECREF(cap);
    return 0;
  }
  any_stream st;
  memset(&st, 0, sizeof st);
  st.plain = *src; /* drained here: one schema, one array, then the end */
  src->release = NULL;
  Py_DECREF(cap);
  struct ArrowDeviceArray first, next;
  memset(schema, 0, sizeof *schema);
  memset(&first, 0, sizeof first);
  memset(&next, 0, sizeof next);
  int rc = any_get_schema(&st, schema) == 0 && schema->release != NULL && any_get_next(&st, &first) == 0 &&
           first.array.release != NULL && any_get_next(&st, &next) == 0 && next.array.release == NULL;
  if (next.array.release != NULL) next.array.release(&next.array);
  if (!rc) {
    if (first.array.release != NULL) first.array.release(&first.array);
    if (schema->release != NULL) schema->release(schema);
  } else {
    *batch = first.array;
  }
  any_release(&st);
  return rc;
}

int bridge_arrow_values_of(PyObject *obj, bridge_arrow_values *p) {
  static PyObject *str_array, *str_stream;
  if (str_array == NULL && !(str_array = PyUnicode_InternFromString("__arrow_c_array__"))) return -1;
  if (str_stream == NULL && !(str_stream = PyUnicode_InternFromString("__arrow_c_stream__"))) return -1;
  PyTypeObject *tp = Py_TYPE(obj);
  DLDataType dt;
  if (_PyType_Lookup(tp, str_array) != NULL) {
    PyObject *pair = PyObject_CallMethodNoArgs(obj, str_array);
    if (pair == NULL) return -1;
    struct ArrowSchema *s = NULL;
    struct ArrowArray *a = NULL;
    if (PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2) {
      s = (struct ArrowSchema *)capsule_struct(PyTuple_GET_ITEM(pair, 0), BRIDGE_NAME_ARROW_SCHEMA, "schema");
      a = s ? (struct ArrowArray *)capsule_struct(PyTuple_GET_ITEM(pair, 1), BRIDGE_NAME_ARROW_ARRAY, "array")
            : NULL;
      PyErr_Clear(); /* (a malformed answer: the general path explains) */
    }
    int rc = s && a && plain_primitive(s, a, &dt) ? take_primitive(s, a, dt, p) : 0;
    Py_DECREF(pair); /* the capsules release what was not moved */
    return rc;
  }
  if (_PyType_Lookup(tp, str_stream) == NULL || !restreamable(tp)) return 0;
  struct ArrowSchema schema;
  struct ArrowArray first;
  int rc = one_batch(obj, str_stream, &schema, &first);
  if (rc > 0) {
    rc = plain_primitive(&schema, &first, &dt) ? take_primitive(&schema, &first, dt, p) : 0;
    if (first.release != NULL) first.release(&first); /* what was not taken: the general path's */
    if (schema.release != NULL) schema.release(&schema);
  }
  return rc;
}

int bridge_arrow_is_table(PyTypeObject *tp) {
  static PyTypeObject *known[3], *last_not; /* (last_not: a run of one array type pays one compare) */
  if (tp == known[0] || tp == known[1] || tp == known[2]) return 1;
  if (tp == last_not) return 0;
  int yes = strcmp(tp->tp_name, "pyarrow.lib.Table") == 0 || strcmp(tp->tp_name, "pyarrow.lib.RecordBatch") == 0;
  if (!yes && strcmp(tp->tp_name, "DataFrame") == 0) {
    PyObject *mod = PyObject_GetAttrString((PyObject *)tp, "__module__");
    yes = mod != NULL && PyUnicode_Check(mod) && PyUnicode_CompareWithASCIIString(mod, "polars.dataframe.frame") == 0;
    Py_XDECREF(mod);
    PyErr_Clear();
  }
  for (int i = 0; yes && i < 3; i++)
    if (known[i] == NULL) {
      known[i] = tp;
      break;
    }
  if (!yes) last_not = tp; /* (by address: a type made where a freed one was only misses the fast path) */
  return yes;
}

int bridge_arrow_columns_of(PyObject *obj, PyObject **names, bridge_arrow_values **cols, Py_ssize_t *n) {
  static PyObject *str_stream;
  if (str_stream == NULL && !(str_stream = PyUnicode_InternFromString("__arrow_c_stream__"))) return -1;
  if (!bridge_arrow_is_table(Py_TYPE(obj))) return 0;
  struct ArrowSchema schema;
  struct ArrowArray batch;
  int rc = one_batch(obj, str_stream, &schema, &batch);
  if (rc <= 0) return rc;
  /* a struct of plain primitive columns, none of them cut by the batch's own
   * offset or nulls (a column then would not be its child's values as they are) */
  int64_t k = schema.n_children;
  int ok = strcmp(schema.format, "+s") == 0 && k > 0 && k == batch.n_children && k <= ARROW_MAX_CHILDREN &&
           schema.children != NULL && batch.children != NULL && batch.offset == 0 && batch.length >= 0 &&
           (batch.null_count == 0 || (batch.null_count == -1 && (batch.n_buffers < 1 || batch.buffers == NULL ||
                                                                   batch.buffers[0] == NULL)));
  DLDataType *dts = ok ? PyMem_Calloc((size_t)k, sizeof *dts) : NULL;
  for (int64_t i = 0; dts != NULL && i < k; i++) {
    struct ArrowSchema *cs = schema.children[i];
    struct ArrowArray *ca = batch.children[i];
    if (cs == NULL || ca == NULL || cs->name == NULL || !plain_primitive(cs, ca, &dts[i]) || ca->length != batch.length) {
      PyMem_Free(dts);
      dts = NULL;
    }
  }
  rc = 0;
  if (dts != NULL) {
    bridge_arrow_values *out = PyMem_Calloc((size_t)k, sizeof *out);
    PyObject *keys = out ? PyTuple_New((Py_ssize_t)k) : NULL;
    int64_t i = 0;
    for (; keys != NULL && i < k; i++) {
      PyObject *name = PyUnicode_FromString(schema.children[i]->name);
      if (name == NULL) break;
      PyTuple_SET_ITEM(keys, i, name);
      /* a child moved out of its parent (the C Data Interface allows it: the
       * parent's release then leaves it alone), into a guard of its own */
      if (take_primitive(schema.children[i], batch.children[i], dts[i], &out[i]) < 0) break;
    }
    if (keys != NULL && i == k) {
      *names = keys;
      *cols = out;
      *n = (Py_ssize_t)k;
      rc = 1;
    } else {
      for (int64_t j = 0; out != NULL && j < i; j++) Py_XDECREF(out[j].guard);
      PyMem_Free(out);
      Py_XDECREF(keys);
      rc = -1;
      if (!PyErr_Occurred()) PyErr_NoMemory();
    }
    PyMem_Free(dts);
  }
  if (batch.release != NULL) batch.release(&batch);
  if (schema.release != NULL) schema.release(&schema);
  return rc;
}

PyObject *bridge_arrow_values_tensor(bridge_arrow_values *p) {
  DTypeObject *dt = bridge_dtype_from_dlpack(p->dtype.code, p->dtype.bits, p->dtype.lanes);
  StorageObject *s = dt ? bridge_storage_new(p->data, p->nbytes, kDLCPU, 0, p->guard, 1) : NULL;
  Py_CLEAR(p->guard); /* the storage holds it now */
  if (s == NULL) return NULL;
  int64_t shape[1] = {p->length}, strides[1] = {1};
  PyObject *out = bridge_tensor_new(s, dt, 1, shape, strides, 0, GEOM_USER);
  Py_DECREF(s);
  return out;
}

/* --------------------------------------------------------- from_arrow */

static PyObject *py_from_arrow(PyObject *mod, PyObject *const *args, Py_ssize_t nargsf,
                               PyObject *kwnames) {
  (void)mod;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs == 1 && kwnames == NULL) {
    /* a plain primitive array (pyarrow, nanoarrow, polars; a stream of one
     * chunk), read here as bridge.convert reads it; everything else (nulls,
     * bools, chunks, nested and extension types, pyarrow's other objects) is
     * the general path's, which explains or honours with_mask and copy */
    bridge_arrow_values av;
    int got = bridge_arrow_values_of(args[0], &av);
    if (got < 0) return NULL;
    if (got > 0) return bridge_arrow_values_tensor(&av);
  }
  PyObject *general = bridge_upcall(UP_ARROW_IMPORT);
  return general ? PyObject_Vectorcall(general, args, nargsf, kwnames) : NULL;
}

static PyMethodDef import_functions[] = {
    {"from_arrow", (PyCFunction)(void (*)(void))py_from_arrow, METH_FASTCALL | METH_KEYWORDS,
     "from_arrow(obj, *, copy=False, with_mask=False)\n--\n\n"
     "A read-only tensor over Arrow memory, zero-copy; the Arrow memory stays alive and its\n"
     "release runs once, when the last view dies. Takes pyarrow Buffer, Array, ChunkedArray,\n"
     "Tensor, FixedShapeTensorArray, one-column Table / RecordBatch, any object with\n"
     "__arrow_c_device_array__ / __arrow_c_array__ / __arrow_c_device_stream__ /\n"
     "__arrow_c_stream__, a (device) stream capsule or a\n"
     "(schema, array) capsule pair. with_mask=True returns (values, valid) for data with nulls\n"
     "(the mask a copy); bit-packed bools and several chunks need copy=True; copy=True always\n"
     "gives new, writable memory.\n\n"
     "TypeError: no tensor form (strings, dictionaries, nested lists, complex).\n"
     "ValueError: nulls, several chunks/batches without copy=True, several columns, released\n"
     "structs, wrong capsule names, malformed structs. See docs/arrow.md."},
    {"arrow_import", (PyCFunction)(void (*)(void))py_arrow_import, METH_FASTCALL,
     "arrow_import(schema_capsule, array_capsule, /)\n--\n\n(guard, schema description, array "
     "description, device_type, device_id): the structs moved into a guard."},
    {"arrow_import_stream", (PyCFunction)py_arrow_import_stream, METH_O,
     "arrow_import_stream(stream_capsule, /)\n--\n\n(schema guard, schema description, [(guard, "
     "array description, device type, device id), ...]): the stream (plain or device) drained "
     "and released."},
    {"arrow_describe_schema", (PyCFunction)py_arrow_describe_schema, METH_O,
     "arrow_describe_schema(schema_capsule, /)\n--\n\nThe schema's description, without taking it."},
    {NULL, NULL, 0, NULL},
};

int bridge_arrow_import_init(PyObject *mod) { return PyModule_AddFunctions(mod, import_functions); }
