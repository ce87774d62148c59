// A C++ plugin loaded by a C host (c_host.c) under LD_PRELOAD=liblivealloc.so. Every form of
// operator new is asked for more than the address space holds, so livealloc's operator new
// fails: it must call the new-handler the plugin installed (once: the handler uninstalls itself)
// and then throw std::bad_alloc, which the plugin catches; the nothrow form returns nullptr; a
// handler that throws has its exception reach the plugin. Before livealloc looked libstdc++ up
// at the time of the failure, a C host's process aborted here. Returns the number of failed
// checks.
#include <cstddef>
#include <cstdio>
#include <new>
#include <stdexcept>

namespace {
// 2^60 bytes: beyond any x86-64 address space (47 bits, 57 with 5-level paging), so no mapping
// can serve it under any overcommit setting. Below PTRDIFF_MAX, so new[] asks operator new[]
// rather than throwing std::bad_array_new_length itself. volatile: the compiler knows nothing.
volatile std::size_t huge = std::size_t(1) << 60;
void* volatile sink;  // keeps the calls from being elided
int handler_calls = 0;
int failures = 0;

void uninstall_on_first_call() {
  ++handler_calls;
  std::set_new_handler(nullptr);  // operator new then has no handler left: std::bad_alloc
}
struct handler_gave_up : std::runtime_error {
  handler_gave_up() : std::runtime_error("the new-handler gave up") {}
};
void throw_own() {
  ++handler_calls;
  throw handler_gave_up();
}

void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "cxx_plugin: FAILED: %s\n", what);
  ++failures;
}

// Runs `allocate` with `handler` installed; true if it threw std::bad_alloc.
template <typename F>
bool bad_alloc_from(F allocate, std::new_handler handler) {
  handler_calls = 0;
  std::set_new_handler(handler);
  bool caught = false;
  try {
    sink = allocate();
  } catch (const std::bad_alloc&) {
    caught = true;
  }
  std::set_new_handler(nullptr);
  return caught;
}
}  // namespace

extern "C" __attribute__((visibility("default"))) int cxx_plugin_run();
extern "C" int cxx_plugin_run() {
  check(bad_alloc_from([] { return ::operator new(huge); }, uninstall_on_first_call),
        "operator new(size) threw std::bad_alloc");
  check(handler_calls == 1, "operator new(size) called the new-handler once");

  check(bad_alloc_from([] { return static_cast<void*>(new char[huge]); }, uninstall_on_first_call),
        "new char[n] threw std::bad_alloc");
  check(handler_calls == 1, "new char[n] called the new-handler once");

  check(bad_alloc_from([] { return ::operator new(huge, std::align_val_t(4096)); },
                       uninstall_on_first_call),
        "operator new(size, align) threw std::bad_alloc");
  check(handler_calls == 1, "operator new(size, align) called the new-handler once");

  check(bad_alloc_from([] { return ::operator new(huge); }, nullptr),
        "operator new(size) without a new-handler threw std::bad_alloc");
  check(handler_calls == 0, "no new-handler, none called");

  handler_calls = 0;
  std::set_new_handler(uninstall_on_first_call);
  void* p = ::operator new(huge, std::nothrow);
  std::set_new_handler(nullptr);
  check(p == nullptr, "operator new(size, nothrow) returned nullptr");
  check(handler_calls == 1, "operator new(size, nothrow) called the new-handler once");

  handler_calls = 0;
  std::set_new_handler(throw_own);
  bool own = false;
  try {
    sink = ::operator new(huge);
  } catch (const handler_gave_up&) {
    own = true;
  }
  std::set_new_handler(nullptr);
  check(own, "the new-handler's own exception reached the plugin through operator new");
  check(handler_calls == 1, "the throwing new-handler was called once");

  // The allocator still works after all that.
  char* small = new char[100];
  small[99] = 1;
  sink = small;
  delete[] small;
  return failures;
}
