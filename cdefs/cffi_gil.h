/* cffi_gil.h: bridge._native says that it needs the GIL.
 *
 * Included only by the cffi-generated cdefs/_native.c (cdefs/build.py puts it
 * last in the set_source preamble), where cffi's own _cffi_init and
 * struct _cffi_type_context_s are already defined.
 *
 * cffi >= 2.0's _cffi_backend creates every API-mode module with
 * PyUnstable_Module_SetGIL(m, Py_MOD_GIL_NOT_USED) on a free-threaded build,
 * i.e. it declares the module safe to run without the GIL. bridge's C core
 * has not been audited for that (storage swaps in resize_/set_/
 * share_memory_, the counters, the registries; docs/build.md, "Free-threaded
 * CPython"), so on such a build PyInit__native goes through
 * bridge_cffi_init_needing_gil, which takes the declaration back: the
 * interpreter then re-enables the GIL on import, with its RuntimeWarning.
 * On builds with the GIL this file adds nothing.
 *
 * A single-phase module states this with PyUnstable_Module_SetGIL (the
 * Py_mod_gil slot is for multi-phase ones), which the limited API lacks, so
 * _native.c must be compiled without it: pyproject.toml defines
 * _CFFI_NO_LIMITED_API, which keeps cffi's header from defining
 * Py_LIMITED_API (on 3.13t and 3.14t Python.h refuses the limited API on a
 * free-threaded build anyway). */
#ifndef BRIDGE_CFFI_GIL_H
#define BRIDGE_CFFI_GIL_H

#ifdef Py_GIL_DISABLED
#ifdef Py_LIMITED_API
#error "bridge._native needs PyUnstable_Module_SetGIL: compile it with _CFFI_NO_LIMITED_API defined"
#endif

static PyObject *bridge_cffi_init_needing_gil(const char *module_name, Py_ssize_t version,
                                              const struct _cffi_type_context_s *ctx) {
  PyObject *m = _cffi_init(module_name, version, ctx);
  if (m != NULL && PyUnstable_Module_SetGIL(m, Py_MOD_GIL_USED) < 0) Py_CLEAR(m);
  return m;
}

/* PyInit__native, generated after this preamble, calls _cffi_init by name. */
#define _cffi_init bridge_cffi_init_needing_gil
#endif

#endif
