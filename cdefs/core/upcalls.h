/* The one way C calls back into Python: a table of up-calls, each a Python
 * object the Python layer hands in with bridge._C._register(name, obj) and
 * C (or Python, through bridge._C.upcall) looks up by its index. Classes,
 * objects and functions alike; this enum and `upcall_table` in upcalls.c are
 * the one list (docs/architecture.md draws it). Adding an up-call: a value
 * here, a row in upcall_table, a _register line where Python defines it. */

#ifndef BRIDGE_UPCALLS_H
#define BRIDGE_UPCALLS_H

#include <Python.h>

typedef enum {
  /* the core's own classes and objects (bridge.core) */
  UP_TENSOR_CLASS,       /* bridge.Tensor (also kept as bridge_tensor_class) */
  UP_STORAGE_CLASS,      /* bridge.UntypedStorage (also kept as bridge_storage_class) */
  UP_CONTIGUOUS_FORMAT,  /* bridge.contiguous_format */
  UP_DEVICE,             /* (dev_type, dev_id) -> bridge.device */
  /* what the C fast paths of Tensor fall back on: (tensor, *args) */
  UP_GETITEM_SLOW, UP_SETITEM_SLOW, UP_ITEM_SLOW, UP_TOLIST_SLOW, UP_CLONE_SLOW,
  UP_IS_CONTIGUOUS_SLOW, UP_RESHAPE_COPY, UP_VIEW_DTYPE,
  /* what the C factories (bridge.empty, bridge.zeros) fall back on: the call as it came */
  UP_EMPTY_SLOW, UP_ZEROS_SLOW,
  /* interop policies and hooks the core reaches without importing interop */
  UP_NDARRAY,            /* numpy.ndarray (bridge.interop.numpy) */
  UP_NUMPY_SLOW,         /* from_numpy for what NumPy's DLPack export refuses */
  UP_ARROW_EXPORT,       /* N-d / requested-schema Arrow export (bridge.interop.arrow) */
  UP_ARROW_IMPORT,       /* from_arrow's general path */
  UP_CUDA_ARRAY_INTERFACE, /* Tensor.__cuda_array_interface__ (bridge.interop.cuda) */
  UP_JAX_ARRAY,          /* Tensor.__jax_array__ (bridge.interop.jax_array) */
  UP_CONVERT_SLOW,       /* bridge.convert's general path (bridge.crossing.convert) */
  UP_CONVERT_REGISTER,   /* registers a destination for the fast path, where it can be */
  UP_CONVERT_COPIED,     /* the CopyWarning's words for what convert's C engine copied, from its judgement */
  UP_CONVERT_ASKS,       /* convert's dtype=/device=/contiguous=/writable= read and checked (cached per kind of call) */
  UP_COUNT
} bridge_upcall_id;

/* The registered object (borrowed); RuntimeError naming it when unset. */
PyObject *bridge_upcall(bridge_upcall_id which);
/* The registered object (borrowed) or NULL, no exception. */
PyObject *bridge_upcall_peek(bridge_upcall_id which);
/* Call the up-call with (tensor) or (tensor, arg) (arg may be NULL); NULL
 * with an exception. */
PyObject *bridge_upcall_call(bridge_upcall_id which, void *tensor, PyObject *arg);
/* Adds _register, upcall and UPCALLS to bridge._C. */
int bridge_upcalls_init(PyObject *mod);

#endif /* BRIDGE_UPCALLS_H */
