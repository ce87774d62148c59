// A plugin with a copy of livealloc of its own (it includes the header; built with
// -fvisibility=hidden, so its inline variables are no unique symbols that would keep it loaded
// anyway). plugin_unload_host.c loads it, lets a thread allocate through it and dlcloses it.
#include <livealloc.h>

extern "C" __attribute__((visibility("default"))) int plugin_unload_work() {
  void* p = livealloc::allocate(100);
  if (!p) return 1;
  livealloc::deallocate(p);
  return 0;
}
