// A consumer's translation unit for consumer_flags.sh: compiled with the strict warning flags
// users put in -Werror builds, with and without LIVEALLOC_OVERRIDE, -fno-exceptions, -fno-rtti.
// Run, it checks what those flags change: the pmr resource's equality without RTTI, and a failed
// operator-new-style allocation without exceptions (argument "new-fails": it must abort, saying
// why).
#include <livealloc.h>
#include <livealloc_reader.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory_resource>
#include <new>
#include <vector>

int main(int argc, char** argv) {
  std::vector<int, livealloc::stl_allocator<int>> v(1000, 7);
  std::pmr::vector<long> w(livealloc::resource());
  w.resize(1000, 3);
  if (!livealloc::resource()->is_equal(*livealloc::resource())) {
    std::fputs("resource() is not equal to itself\n", stderr);
    return 1;
  }
  if (livealloc::resource()->is_equal(*std::pmr::new_delete_resource())) {
    std::fputs("resource() is equal to new_delete_resource()\n", stderr);
    return 1;
  }
  livealloc::reader::snapshot s;
  (void)s;
  if (argc > 1 && std::strcmp(argv[1], "new-fails") == 0) {
    // More than can be mapped: with exceptions std::bad_alloc, without them the process ends.
    char* volatile p = livealloc::stl_allocator<char>().allocate(std::size_t(1) << 62);
    std::printf("allocate returned %p\n", static_cast<void*>(p));
    return 1;
  }
  std::printf("ok %zu %zu\n", v.size(), w.size());
  return 0;
}
