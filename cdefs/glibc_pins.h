/* glibc_pins.h: the oldest symbol versions of the glibc functions bridge
 * calls, for the manylinux wheels `make wheels` builds (x86_64 glibc only).
 *
 * It is not included by any source: the wheel build force-includes it into
 * every translation unit (CFLAGS="-include glibc_pins.h", see tests/wheels.py),
 * because `.symver` renames a symbol only in the object file whose assembly
 * carries the directive, calls the compiler emits on its own (struct copies
 * through memcpy) included. A build from the sdist on the user's machine does
 * not use it: it links against that machine's glibc, which is what it runs on.
 *
 * Why each pin is safe:
 * - memcpy: GLIBC_2.14 split memcpy from memmove; the 2.2.5 memcpy is kept
 *   as memmove, which also copies overlapping blocks: a superset of the
 *   contract, at the same speed for the block copies bridge makes.
 * - dlopen, dlsym, dlerror, pthread_create, pthread_join, pthread_once,
 *   pthread_mutex_trylock: glibc 2.34 moved
 *   them from libdl.so.2 and libpthread.so.0 into libc.so.6 and gave them the
 *   version GLIBC_2.34; the 2.2.5 versions are still exported there for old
 *   binaries. On a glibc older than 2.34 the 2.2.5 definitions live in
 *   libdl.so.2 and libpthread.so.0, so the wheel build also links those two by
 *   name (LDFLAGS="-Wl,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0"): the
 *   loader then has them in scope whatever the Python executable links.
 *
 * tests/wheels.py checks the built library: no glibc symbol version above
 * the chosen manylinux tag's, and libdl.so.2 / libpthread.so.0 needed. */
#ifndef BRIDGE_GLIBC_PINS_H
#define BRIDGE_GLIBC_PINS_H

#if defined(__linux__) && defined(__x86_64__)
#include <features.h> /* defines __GLIBC__ on glibc, not on musl */
#if defined(__GLIBC__)
__asm__(".symver memcpy,memcpy@GLIBC_2.2.5");
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_join,pthread_join@GLIBC_2.2.5");
__asm__(".symver pthread_once,pthread_once@GLIBC_2.2.5");
__asm__(".symver pthread_mutex_trylock,pthread_mutex_trylock@GLIBC_2.2.5");
#endif
#endif

#endif
