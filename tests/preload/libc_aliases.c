/* glibc's internal names for the malloc family (__libc_malloc, ..., cfree), which some programs
 * and libraries call directly, must be livealloc's under LD_PRELOAD: a block from glibc's
 * __libc_malloc freed by livealloc's free (or the reverse) would crash. Each name must resolve
 * into the preloaded library, and blocks must pass between these names and the standard ones
 * with their contents, alignment and sizes. Exit 0 when every check holds. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;
static void check(int ok, const char* what) {
  printf("%s  %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

/* The symbol `name` as the program would bind it, checked to come from liblivealloc. */
static void* livealloc_symbol(const char* name) {
  void* f = dlsym(RTLD_DEFAULT, name);
  Dl_info info;
  char what[160];
  const int ours = f && dladdr(f, &info) && info.dli_fname &&
                   strstr(info.dli_fname, "liblivealloc") != NULL;
  snprintf(what, sizeof what, "%s resolves into liblivealloc (%s)", name,
           f && dladdr(f, &info) && info.dli_fname ? info.dli_fname : "not found");
  check(ours, what);
  return ours ? f : NULL;
}

static int filled(const unsigned char* p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != v) return 0;
  return 1;
}

int main(void) {
  void* (*libc_malloc)(size_t) = (void* (*)(size_t))livealloc_symbol("__libc_malloc");
  void* (*libc_calloc)(size_t, size_t) =
      (void* (*)(size_t, size_t))livealloc_symbol("__libc_calloc");
  void* (*libc_realloc)(void*, size_t) =
      (void* (*)(void*, size_t))livealloc_symbol("__libc_realloc");
  void* (*libc_memalign)(size_t, size_t) =
      (void* (*)(size_t, size_t))livealloc_symbol("__libc_memalign");
  void* (*libc_valloc)(size_t) = (void* (*)(size_t))livealloc_symbol("__libc_valloc");
  void* (*libc_pvalloc)(size_t) = (void* (*)(size_t))livealloc_symbol("__libc_pvalloc");
  void (*libc_free)(void*) = (void (*)(void*))livealloc_symbol("__libc_free");
  void (*c_free)(void*) = (void (*)(void*))livealloc_symbol("cfree");
  livealloc_symbol("__libc_mallinfo");
  if (failures) return 1;
  const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);

  unsigned char* p = libc_malloc(100);
  check(p && malloc_usable_size(p) >= 100, "__libc_malloc(100): a block of at least 100 bytes");
  memset(p, 0xA5, 100);
  p = realloc(p, 5000); /* the standard realloc takes it */
  check(p && filled(p, 100, 0xA5), "realloc keeps what __libc_malloc's block held");
  free(p);

  p = libc_calloc(300, 7);
  check(p && filled(p, 2100, 0), "__libc_calloc(300, 7): 2,100 zero bytes");
  free(p);

  p = malloc(40);
  memset(p, 0x3C, 40);
  p = libc_realloc(p, 100000); /* a small block moved to a large one */
  check(p && filled(p, 40, 0x3C) && malloc_usable_size(p) >= 100000,
        "__libc_realloc of malloc's block to 100,000 bytes keeps its contents");
  libc_free(p);

  p = libc_memalign(256, 1000);
  check(p && (uintptr_t)p % 256 == 0, "__libc_memalign(256, 1000): 256-byte aligned");
  c_free(p);

  p = libc_valloc(10);
  check(p && (uintptr_t)p % page == 0, "__libc_valloc(10): page aligned");
  free(p);

  p = libc_pvalloc(10);
  check(p && (uintptr_t)p % page == 0 && malloc_usable_size(p) >= page,
        "__libc_pvalloc(10): page aligned, a whole page usable");
  memset(p, 1, page);
  free(p);

  /* The standard malloc's blocks through the glibc names: a crash or livealloc's "free of a
   * pointer livealloc never returned" if the names were not livealloc's. */
  libc_free(malloc(64));
  c_free(calloc(2, 64));
  return failures ? 1 : 0;
}
