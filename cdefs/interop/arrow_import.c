/* Arrow import (C Data Interface, PyCapsule interface): structs are moved
 * out of the producer's capsules (a bitwise copy, then the source marked
 * released) into a guard that calls their release exactly once, when the
 * last bridge view lets go. The structs are described to
 * bridge.interop.arrow as tuples, which turns them into tensors with
 * _C.from_memory; every count a producer sets is bounded before it is
 * trusted. bridge.from_arrow is here too (pyarrow's plain primitive arrays
 * go through pyarrow's DLPack export, in C). */

#include "interop.h"

#include <stdlib.h>

extern const char BRIDGE_NAME_ARROW_SCHEMA[], BRIDGE_NAME_ARROW_ARRAY[],
    BRIDGE_NAME_ARROW_DEVICE_ARRAY[], BRIDGE_NAME_ARROW_STREAM[];
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

/* arrow_import_stream(stream_capsule) -> (schema_guard, schema_desc,
 *   [(array_guard, array_desc), ...]); the stream is drained and released. */
static PyObject *py_arrow_import_stream(PyObject *mod, PyObject *cap) {
  (void)mod;
  struct ArrowArrayStream *src =
      (struct ArrowArrayStream *)capsule_struct(cap, BRIDGE_NAME_ARROW_STREAM, "stream");
  if (src == NULL) return NULL;
  if (src->release == NULL) {
    PyErr_SetString(PyExc_ValueError, "the Arrow stream capsule was already consumed");
    return NULL;
  }
  struct ArrowArrayStream st = *src;
  src->release = NULL;
  PyObject *batches = NULL, *result = NULL, *sguard = NULL, *sd = NULL;
  arrow_guard_t *g;
  sguard = new_guard(&g);
  if (sguard == NULL) goto done;
  int rc;
  Py_BEGIN_ALLOW_THREADS rc = st.get_schema(&st, &g->schema);
  Py_END_ALLOW_THREADS if (rc != 0) {
    const char *err = st.get_last_error ? st.get_last_error(&st) : NULL;
    PyErr_Format(PyExc_RuntimeError, "Arrow stream get_schema failed (%d): %s", rc,
                 err ? err : "no message");
    goto done;
  }
  if (!(sd = describe_schema(&g->schema, 0)) || !(batches = PyList_New(0))) goto done;
  for (;;) {
    arrow_guard_t *bg;
    PyObject *bguard = new_guard(&bg);
    if (bguard == NULL) goto done;
    Py_BEGIN_ALLOW_THREADS rc = st.get_next(&st, &bg->array);
    Py_END_ALLOW_THREADS if (rc != 0) {
      const char *err = st.get_last_error ? st.get_last_error(&st) : NULL;
      PyErr_Format(PyExc_RuntimeError, "Arrow stream get_next failed (%d): %s", rc,
                   err ? err : "no message");
      Py_DECREF(bguard);
      goto done;
    }
    if (bg->array.release == NULL) { /* end of stream */
      Py_DECREF(bguard);
      break;
    }
    PyObject *ad = describe_array(&bg->array, 0);
    PyObject *item = ad ? Py_BuildValue("(NN)", bguard, ad) : NULL;
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
  if (st.release != NULL) {
    /* The producer's release may run Python code: keep our error intact. */
    PyObject *saved = bridge_fetch_error();
    st.release(&st);
    bridge_restore_error(saved);
  }
  Py_XDECREF(sguard);
  Py_XDECREF(sd);
  Py_XDECREF(batches);
  return result;
}


/* --------------------------------------------------------- from_arrow */

/* pyarrow's primitive array classes, by type name (pyarrow is not imported
 * to ask): those go through pyarrow's own DLPack export, in C. */
static int is_pyarrow_primitive(PyTypeObject *tp) {
  static const char *names[] = {"Int8Array", "UInt8Array", "Int16Array", "UInt16Array",
                                "Int32Array", "UInt32Array", "Int64Array", "UInt64Array",
                                "HalfFloatArray", "FloatArray", "DoubleArray", NULL};
  const char *n = tp->tp_name;
  if (strncmp(n, "pyarrow.lib.", 12) != 0) return 0;
  for (const char **p = names; *p; p++)
    if (strcmp(n + 12, *p) == 0) return 1;
  return 0;
}

static PyObject *py_from_arrow(PyObject *mod, PyObject *const *args, Py_ssize_t nargsf,
                               PyObject *kwnames) {
  (void)mod;
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs == 1 && kwnames == NULL && is_pyarrow_primitive(Py_TYPE(args[0]))) {
    /* pyarrow refuses arrays with nulls (ArrowTypeError, a TypeError): the
     * general path then explains, or honours with_mask */
    PyObject *out = bridge_dlpack_ask(args[0], 1); /* Arrow arrays are host memory */
    if (out != NULL) return out;
    if (!PyErr_ExceptionMatches(PyExc_TypeError) && !PyErr_ExceptionMatches(PyExc_BufferError))
      return NULL;
    PyErr_Clear();
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
     "__arrow_c_device_array__ / __arrow_c_array__ / __arrow_c_stream__, a stream capsule or a\n"
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
     "array description), ...]): the stream drained and released."},
    {"arrow_describe_schema", (PyCFunction)py_arrow_describe_schema, METH_O,
     "arrow_describe_schema(schema_capsule, /)\n--\n\nThe schema's description, without taking it."},
    {NULL, NULL, 0, NULL},
};

int bridge_arrow_import_init(PyObject *mod) { return PyModule_AddFunctions(mod, import_functions); }
