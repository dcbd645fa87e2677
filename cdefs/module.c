/* bridge_init: the C core's entry point (called once through cffi by
 * bridge/core/native.py). It readies the three types and creates two
 * modules in sys.modules: bridge._C (the core objects, the protocol
 * functions, the registry) and bridge._drivers (test and conformance drivers,
 * apart). cffi cannot pass Python objects, so nothing crosses its boundary
 * but this call; everything after it is ordinary CPython. */

#include "interop/interop.h"

int bridge_tensor_init(PyObject *mod);
int bridge_drivers_init(PyObject *mod); /* drivers/drivers.c */
int bridge_crossing_init(PyObject *mod); /* crossing/convert.c */

/* stats() -> the C counters, for leak and exactly-once tests. */
static PyObject *py_stats(PyObject *mod, PyObject *unused) {
  (void)mod;
  (void)unused;
  static const char *keys[STAT_COUNT] = {
      "exports", "export_deleters", "imports", "import_releases", "test_deleters",
      "arrow_exports", "arrow_releases", "arrow_imports", "arrow_import_releases",
      "api_exports", "api_imports", "copy_threads", "copy_staged", "copy_temporaries",
      "host_cache_hits", "convert_reads", "convert_judgements", "convert_upcalls"};
  PyObject *d = PyDict_New();
  for (int i = 0; d && i < STAT_COUNT; i++) {
    PyObject *v = PyLong_FromUnsignedLongLong(__atomic_load_n(&bridge_stats_counters[i], __ATOMIC_RELAXED));
    if (v == NULL || PyDict_SetItemString(d, keys[i], v) < 0) Py_CLEAR(d);
    Py_XDECREF(v);
  }
  return d;
}

static PyMethodDef core_functions[] = {
    {"stats", (PyCFunction)py_stats, METH_NOARGS,
     "stats()\n--\n\nCounters kept in C: DLPack exports and their deleters run, imports and their "
     "guards released, test-deleter calls, the same for Arrow, and the DLPack exchanges that went through the C "
     "exchange API (api_exports: a consumer read a bridge tensor through it; api_imports: bridge "
     "read a producer's), the parts of copies handed to the copy kernel's worker threads (kept between copies), overlapping copies staged "
     "through a tile-sized buffer, those that needed a temporary of the whole source, and those\n"
     "done in place along the cycles of a permutation (in-place transposes and reversals), and\n"
     "other overlaps done in place along chains of elements; host_cache_hits: allocations served by the\n"
     "host block cache (bridge.empty_cache); convert_reads: sources bridge.convert read (a foreign object's\n"
     "memory described: a bridge tensor is read by no one), convert_judgements: judgements of a destination\n"
     "(cdefs/crossing/destination.h judge), convert_upcalls: calls bridge.convert's C made into Python (its\n"
     "general path, a warning's words, a registration)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "bridge._C",
    "The C core of dlpack-bridge: DTypeBase, StorageBase, TensorBase and the protocol functions.",
    -1, core_functions, NULL, NULL, NULL, NULL};

static struct PyModuleDef drivers_module = {
    PyModuleDef_HEAD_INIT, "bridge._drivers",
    "Drivers for tests and the conformance kit (hand-made capsules, counting deleters, exchange "
    "API callers); not part of the production paths.",
    -1, NULL, NULL, NULL, NULL, NULL};

/* Both modules need the GIL: the C core has not been audited for running
 * without it (docs/build.md, "Free-threaded CPython"). They are single-phase
 * modules made here, not by an import, so the interpreter never reads this
 * flag; what re-enables the GIL on a free-threaded build is bridge._native's
 * own declaration (cffi_gil.h). Said here too, so that no module of bridge
 * claims otherwise. */
static int declare_gil_used(PyObject *mod) {
#ifdef Py_GIL_DISABLED
  return PyUnstable_Module_SetGIL(mod, Py_MOD_GIL_USED);
#else
  (void)mod;
  return 0;
#endif
}

static int init_modules(void) {
  /* The protocol files' methods and buffer slots join TensorBase here: the
   * core never names them. */
  PyMethodDef *const methods[] = {bridge_dlpack_methods, bridge_numpy_methods, bridge_arrow_methods,
                                  NULL};
  PyGetSetDef *const getsets[] = {bridge_numpy_getset, NULL};
  if (bridge_tensor_prepare_type(methods, getsets, &bridge_tensor_as_buffer) < 0 || PyType_Ready(&BridgeDType_Type) < 0 ||
      PyType_Ready(&BridgeStorage_Type) < 0 || PyType_Ready(&BridgeTensor_Type) < 0)
    return -1;
  PyObject *core = PyModule_Create(&core_module);
  if (core == NULL) return -1;
  PyObject *drivers = PyModule_Create(&drivers_module);
  PyObject *modules = PyImport_GetModuleDict();
  int rc = drivers == NULL || declare_gil_used(core) < 0 || declare_gil_used(drivers) < 0 ||
           PyModule_AddObjectRef(core, "DTypeBase", (PyObject *)&BridgeDType_Type) < 0 ||
           PyModule_AddObjectRef(core, "StorageBase", (PyObject *)&BridgeStorage_Type) < 0 ||
           PyModule_AddObjectRef(core, "TensorBase", (PyObject *)&BridgeTensor_Type) < 0 ||
           PyModule_AddIntConstant(core, "MAX_NDIM", BRIDGE_MAX_NDIM) < 0 ||
           PyModule_AddIntConstant(core, "ALIGNMENT", BRIDGE_ALIGNMENT) < 0 ||
           bridge_upcalls_init(core) < 0 || bridge_tensor_init(core) < 0 || bridge_geometry_init(core) < 0 || bridge_storage_init(core) < 0 ||
           bridge_indexing_init(core) < 0 || bridge_values_init(core) < 0 || bridge_copy_init(core) < 0 || bridge_memory_init(core) < 0 ||
           bridge_dlpack_export_init(core) < 0 || bridge_dlpack_import_init(core) < 0 ||
           bridge_exchange_api_init(core) < 0 || bridge_numpy_init(core) < 0 ||
           bridge_cuda_init(core) < 0 ||
           bridge_arrow_export_init(core) < 0 || bridge_arrow_import_init(core) < 0 ||
           bridge_crossing_init(core) < 0 ||
           bridge_drivers_init(drivers) < 0 || PyDict_SetItemString(modules, "bridge._C", core) < 0 ||
           PyDict_SetItemString(modules, "bridge._drivers", drivers) < 0
               ? -1
               : 0;
  Py_DECREF(core);
  Py_XDECREF(drivers);
  return rc;
}

int bridge_init(void) {
  static int done = 0;
  PyGILState_STATE gil = PyGILState_Ensure(); /* cffi calls this without the GIL */
  int rc = 0;
  if (!done) {
    rc = init_modules();
    if (rc == 0)
      done = 1;
    else
      PyErr_Print();
  }
  PyGILState_Release(gil);
  return rc;
}
