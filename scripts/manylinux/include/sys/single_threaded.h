// Stands in for glibc's <sys/single_threaded.h> (glibc 2.32+) in the local build, so that the
// variants need only what manylinux_2_28 (glibc 2.28) provides. scripts/build.py puts this
// directory first on the include path (-isystem).
//
// GCC 11+'s libstdc++ tests `__has_include(<sys/single_threaded.h>)` in <ext/atomicity.h>; when
// the header exists, every inline reference-count update (std::shared_ptr, std::locale, ...)
// reads glibc's `__libc_single_threaded` (GLIBC_2.32), which glibc 2.28-2.31 do not have, so
// the library would not load there. Here the name is a constant 0, "not known to be
// single-threaded": libstdc++ then always takes its atomic path, which is what it does on
// glibc < 2.32 in any process that links libpthread (every torch process) and on any glibc once
// a second thread has started. Correct everywhere; at most a few cycles more per update in a
// single-threaded process.
#pragma once
static constexpr char __libc_single_threaded = 0;
