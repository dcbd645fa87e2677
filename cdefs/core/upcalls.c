/* The up-call registry (see upcalls.h): the table of names, _C._register,
 * which checks what it is given, and _C.upcall, Python's way to the same
 * objects. */

#include "core.h"

enum { ANY, CALLABLE, TYPE, TENSOR_SUBCLASS, STORAGE_SUBCLASS };

static const struct {
  const char *name;
  int kind;
} upcall_table[UP_COUNT] = {
    [UP_TENSOR_CLASS] = {"tensor_class", TENSOR_SUBCLASS},
    [UP_STORAGE_CLASS] = {"storage_class", STORAGE_SUBCLASS},
    [UP_CONTIGUOUS_FORMAT] = {"contiguous_format", ANY},
    [UP_DEVICE] = {"device", CALLABLE},
    [UP_GETITEM_SLOW] = {"getitem_slow", CALLABLE},
    [UP_SETITEM_SLOW] = {"setitem_slow", CALLABLE},
    [UP_ITEM_SLOW] = {"item_slow", CALLABLE},
    [UP_TOLIST_SLOW] = {"tolist_slow", CALLABLE},
    [UP_CLONE_SLOW] = {"clone_slow", CALLABLE},
    [UP_IS_CONTIGUOUS_SLOW] = {"is_contiguous_slow", CALLABLE},
    [UP_RESHAPE_COPY] = {"reshape_copy", CALLABLE},
    [UP_VIEW_DTYPE] = {"view_dtype", CALLABLE},
    [UP_EMPTY_SLOW] = {"empty_slow", CALLABLE},
    [UP_ZEROS_SLOW] = {"zeros_slow", CALLABLE},
    [UP_NDARRAY] = {"ndarray", TYPE},
    [UP_NUMPY_SLOW] = {"numpy_slow", CALLABLE},
    [UP_ARROW_EXPORT] = {"arrow_export", CALLABLE},
    [UP_ARROW_IMPORT] = {"arrow_import", CALLABLE},
    [UP_CUDA_ARRAY_INTERFACE] = {"cuda_array_interface", CALLABLE},
    [UP_JAX_ARRAY] = {"jax_array", CALLABLE},
    [UP_CONVERT_SLOW] = {"convert_slow", CALLABLE},
    [UP_CONVERT_REGISTER] = {"convert_register_for", CALLABLE},
    [UP_CONVERT_COPIED] = {"convert_copied", CALLABLE},
    [UP_CONVERT_ASKS] = {"convert_asks", CALLABLE},
};

static PyObject *upcalls[UP_COUNT];

PyObject *bridge_upcall(bridge_upcall_id which) {
  PyObject *obj = upcalls[which];
  if (obj == NULL)
    PyErr_Format(PyExc_RuntimeError, "bridge's up-call %s is not registered (import bridge first)",
                 upcall_table[which].name);
  return obj;
}

PyObject *bridge_upcall_peek(bridge_upcall_id which) { return upcalls[which]; }

PyObject *bridge_upcall_call(bridge_upcall_id which, void *tensor, PyObject *arg) {
  PyObject *fn = bridge_upcall(which);
  if (fn == NULL) return NULL;
  PyObject *stack[2] = {(PyObject *)tensor, arg};
  return PyObject_Vectorcall(fn, stack, arg != NULL ? 2 : 1, NULL);
}

static int lookup(PyObject *name) {
  if (!PyUnicode_Check(name)) {
    PyErr_Format(PyExc_TypeError, "an up-call name must be a str, not %.200s", Py_TYPE(name)->tp_name);
    return -1;
  }
  for (int i = 0; i < UP_COUNT; i++)
    if (PyUnicode_CompareWithASCIIString(name, upcall_table[i].name) == 0) return i;
  PyErr_Format(PyExc_ValueError, "unknown up-call %R", name);
  return -1;
}

static int check_subclass(PyObject *cls, PyTypeObject *base) {
  if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, base) ||
      ((PyTypeObject *)cls)->tp_basicsize != base->tp_basicsize ||
      ((PyTypeObject *)cls)->tp_dictoffset != 0) {
    PyErr_Format(PyExc_TypeError, "expected a subclass of %s with __slots__ = ()", base->tp_name);
    return -1;
  }
  return 0;
}

/* _register(name, obj): the Python layer hands C an up-call. */
static PyObject *py_register(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
  (void)mod;
  if (nargs != 2) return PyErr_Format(PyExc_TypeError, "_register(name, obj)");
  int i = lookup(args[0]);
  if (i < 0) return NULL;
  PyObject *obj = args[1];
  switch (upcall_table[i].kind) {
    case CALLABLE:
      if (!PyCallable_Check(obj)) return PyErr_Format(PyExc_TypeError, "%s must be callable", upcall_table[i].name);
      break;
    case TYPE:
      if (!PyType_Check(obj)) return PyErr_Format(PyExc_TypeError, "%s must be a type", upcall_table[i].name);
      break;
    case TENSOR_SUBCLASS:
      if (check_subclass(obj, &BridgeTensor_Type) < 0) return NULL;
      bridge_tensor_class = (PyTypeObject *)obj; /* kept alive by upcalls[] */
      break;
    case STORAGE_SUBCLASS:
      if (check_subclass(obj, &BridgeStorage_Type) < 0) return NULL;
      bridge_storage_class = (PyTypeObject *)obj;
      break;
  }
  Py_XSETREF(upcalls[i], Py_NewRef(obj));
  Py_RETURN_NONE;
}

/* upcall(name) -> the registered object, or None when unset. */
static PyObject *py_upcall(PyObject *mod, PyObject *name) {
  (void)mod;
  int i = lookup(name);
  if (i < 0) return NULL;
  return Py_NewRef(upcalls[i] != NULL ? upcalls[i] : Py_None);
}

static PyMethodDef upcall_functions[] = {
    {"_register", (PyCFunction)(void (*)(void))py_register, METH_FASTCALL,
     "_register(name, obj, /)\n--\n\nHand the C core an up-call: a class, object or function named in "
     "UPCALLS (private)."},
    {"upcall", (PyCFunction)py_upcall, METH_O,
     "upcall(name, /)\n--\n\nThe object registered under an up-call name, or None (private)."},
    {NULL, NULL, 0, NULL},
};

int bridge_upcalls_init(PyObject *mod) {
  PyObject *names = PyTuple_New(UP_COUNT);
  if (names == NULL) return -1;
  for (int i = 0; i < UP_COUNT; i++) {
    PyObject *s = PyUnicode_FromString(upcall_table[i].name);
    if (s == NULL) {
      Py_DECREF(names);
      return -1;
    }
    PyTuple_SET_ITEM(names, i, s);
  }
  int rc = PyModule_AddObjectRef(mod, "UPCALLS", names);
  Py_DECREF(names);
  if (rc < 0) return -1;
  return PyModule_AddFunctions(mod, upcall_functions);
}
