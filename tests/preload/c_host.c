// A C program that loads a C++ plugin, as python3 loads its extension modules: the host links
// neither libstdc++ nor anything that needs it, so under LD_PRELOAD=liblivealloc.so the
// library's weak references to libstdc++ (get_new_handler, __throw_bad_alloc) are bound, null,
// before the plugin brings libstdc++ in. The plugin (cxx_plugin.cpp, its path is argv[1]) then
// runs out of memory in operator new and checks it gets its new-handler and std::bad_alloc, not
// an abort. Exits 0 when every check held.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

// 1 if a line of /proc/self/maps names a file whose path contains `word`, 0 if none, -1 if the
// file cannot be read.
static int mapped(const char* word) {
  FILE* maps = fopen("/proc/self/maps", "r");
  if (!maps) return -1;
  char line[4096];
  int found = 0;
  while (!found && fgets(line, sizeof line, maps)) found = strstr(line, word) != NULL;
  fclose(maps);
  return found;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s PLUGIN.so (under LD_PRELOAD=liblivealloc.so)\n", argv[0]);
    return 2;
  }
  // Without the preload, glibc's malloc and libstdc++'s operator new would pass every check.
  Dl_info where;
  void* malloc_used = dlsym(RTLD_DEFAULT, "malloc");
  if (!malloc_used || !dladdr(malloc_used, &where) || !where.dli_fname ||
      !strstr(where.dli_fname, "livealloc")) {
    fprintf(stderr, "c_host: malloc is not liblivealloc's (is LD_PRELOAD set?)\n");
    return 1;
  }
  // The point of the test: libstdc++ arrives with the plugin, after the process started.
  int before = mapped("libstdc++");
  if (before != 0) {
    fprintf(stderr, "c_host: %s before dlopen: the host must be a C program without libstdc++\n",
            before < 0 ? "cannot read /proc/self/maps" : "libstdc++ is mapped");
    return 1;
  }
  // RTLD_LOCAL, as python3 loads extension modules: libstdc++ is then not in the global scope.
  void* plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!plugin) {
    fprintf(stderr, "c_host: dlopen: %s\n", dlerror());
    return 1;
  }
  if (mapped("libstdc++") != 1) {
    fprintf(stderr, "c_host: the plugin did not bring libstdc++ in: it tests nothing\n");
    return 1;
  }
  int (*run)(void);
  void* sym = dlsym(plugin, "cxx_plugin_run");
  if (!sym) {
    fprintf(stderr, "c_host: dlsym(cxx_plugin_run): %s\n", dlerror());
    return 1;
  }
  memcpy(&run, &sym, sizeof run);  // ISO C has no cast from object to function pointer
  int failures = run();
  dlclose(plugin);
  if (failures) {
    fprintf(stderr, "c_host: %d check(s) failed in the plugin\n", failures);
    return 1;
  }
  printf("c_host: the C++ plugin got its new-handler and std::bad_alloc\n");
  return 0;
}
