// livealloc from an installed tree: the override in this file, checked through the C API.
//   outside_allocator [--expect-preload]   (--expect-preload: under `memlive run`, which must
//                                           have preloaded the installed liblivealloc.so)
#define LIVEALLOC_OVERRIDE
#include <limits.h>
#include <livealloc.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

int main(int argc, char** argv) {
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    failures += !ok;
  };
  if (argc > 1 && std::strcmp(argv[1], "--expect-preload") == 0) {
    const char* env = std::getenv("LD_PRELOAD");
    expect(env && std::strstr(env, "liblivealloc.so"), "LD_PRELOAD names liblivealloc.so");
    char a[4096] = {}, b[4096] = {};
    expect(env && realpath(env, a) && realpath(PRELOAD_PATH, b) && std::strcmp(a, b) == 0,
           "it is the installed one: " PRELOAD_PATH);
    const char* profile = std::getenv("LIVEALLOC_PROFILE");
    expect(profile && std::strcmp(profile, "1") == 0, "LIVEALLOC_PROFILE=1");
    return failures ? 1 : 0;
  }
  const std::size_t before = livealloc::get_stats().live_bytes;
  void* p = std::malloc(100000);  // malloc is livealloc's in this program
  expect(p && livealloc::usable_size(p) >= 100000, "malloc returns a livealloc block");
  expect(livealloc::get_stats().live_bytes >= before + 100000, "livealloc counts it as live");
  std::free(p);
  expect(livealloc::set_option("page_recycle", 4) == livealloc::option_status::ok,
         "set_option works");
  expect(access(PRELOAD_PATH, R_OK) == 0, "the installed liblivealloc.so exists: " PRELOAD_PATH);
  std::printf("livealloc %d.%d.%d\n", LIVEALLOC_VERSION_MAJOR, LIVEALLOC_VERSION_MINOR,
              LIVEALLOC_VERSION_PATCH);
  return failures ? 1 : 0;
}
