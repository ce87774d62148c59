// Built by tests/install/subdirectory/CMakeLists.txt against the tree it add_subdirectory()s:
// livealloc replaces malloc, memlive serves on a free port. Exit 0 when both worked.
#define LIVEALLOC_OVERRIDE
#include <livealloc.h>
#include <memlive.h>

#include <cstdio>
#include <cstdlib>

int main() {
  void* p = std::malloc(100);
  if (livealloc::usable_size(p) < 100) {
    std::fprintf(stderr, "subdirectory_app: malloc is not livealloc's\n");
    return 1;
  }
  std::free(p);
  memlive::options o;
  o.port = 0;
  o.quiet = true;
  const memlive::status st = memlive::start(o);
  if (!st) {
    std::fprintf(stderr, "subdirectory_app: memlive::start: %s\n", st.message.c_str());
    return 1;
  }
  memlive::stop();
  std::printf("subdirectory_app: ok\n");
  return 0;
}
