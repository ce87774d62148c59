// Run under LD_PRELOAD=liblivealloc-checked.so by checked.sh. `checked_errors MODE`:
//   ok       correct use (threads freeing each other's blocks, realloc, aligned and sized forms,
//            four threads growing, shrinking and moving large blocks with realloc at once):
//            prints "ok" and exits 0
//   double   frees a block twice, then allocates its size again
//   double_large  frees a large block (3 MiB) twice
//   foreign  frees a pointer into a static array, which livealloc never returned
//   inside_large, misaligned  frees a pointer 16 bytes into a large block, 8 into a small one
//   realloc_misaligned, realloc_freed  reallocs a pointer 8 bytes into a small block, a freed one
//   usable_inside  asks malloc_usable_size of a pointer 16 bytes into a large block
//   sized    sized operator delete with a size larger than the block
// The errors print the pointer (printf's %p) on stdout before the bad call; the checked
// library must then abort with a message that names it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <malloc.h>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace {

// Through a volatile, so the compiler neither warns about nor removes the deliberate misuse.
void* launder(void* p) {
  void* volatile v = p;
  return v;
}

void say(const void* p) {
  std::printf("%p\n", p);
  std::fflush(stdout);
}

int correct_use() {
  std::vector<void*> blocks;
  for (int i = 0; i < 20000; ++i) blocks.push_back(std::malloc(static_cast<std::size_t>(i % 5000)));
  std::thread other([&] {
    for (std::size_t i = 0; i < blocks.size(); i += 2) std::free(blocks[i]);
  });
  other.join();
  for (std::size_t i = 1; i < blocks.size(); i += 2) blocks[i] = std::realloc(blocks[i], 300);
  for (std::size_t i = 1; i < blocks.size(); i += 2) std::free(blocks[i]);
  void* a = std::aligned_alloc(4096, 8192);
  void* n = ::operator new(100);
  ::operator delete(n, 100);
  std::free(a);
  std::string s(1 << 20, 'x');  // a large block, through operator new
  // Threads reallocating large blocks at once: a mapping one of them shrinks or moves frees
  // address space that another's new mapping may take at once; the checked library's record of
  // that mapping must not then be erased by the first (it was, in the window between the
  // munmap or mremap and the clearing of the old range).
  std::vector<std::thread> movers;
  for (unsigned t = 1; t <= 4; ++t) {
    movers.emplace_back([t] {
      std::uint64_t x = t * 0x9E3779B97F4A7C15ull;
      auto next = [&x](std::uint64_t n) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return static_cast<std::size_t>(x % n);
      };
      char* held[8] = {};
      for (int i = 0; i < 20000; ++i) {
        char*& b = held[next(8)];
        if (!b) {
          b = static_cast<char*>(std::malloc(next(16 << 20) + (256 << 10) + 1));
        } else if (next(2)) {
          std::free(b);
          b = nullptr;
          continue;
        } else {
          b = static_cast<char*>(std::realloc(b, next(12 << 20) + (256 << 10) + 1));
        }
        if (!b) std::abort();
        b[0] = 1;
      }
      for (char* b : held) std::free(b);
    });
  }
  for (std::thread& m : movers) m.join();
  std::printf("ok %zu\n", s.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "ok") return correct_use();
  if (mode == "double") {
    void* p = std::malloc(48);
    void* again = launder(p);
    say(p);
    std::free(p);
    std::free(again);
    launder(std::malloc(48));  // the plain library finds it here, where it would hand p out again
  } else if (mode == "double_large") {
    void* p = std::malloc(3 << 20);
    void* again = launder(p);
    say(p);
    std::free(p);
    std::free(again);
  } else if (mode == "inside_large") {  // a pointer 16 bytes into a large block
    void* p = static_cast<char*>(std::malloc(3 << 20)) + 16;
    say(p);
    std::free(launder(p));
  } else if (mode == "misaligned") {  // a pointer 8 bytes into a small block
    void* p = static_cast<char*>(std::malloc(48)) + 8;
    say(p);
    std::free(launder(p));
    launder(std::malloc(48));  // the plain library finds it here, where it would hand p out
  } else if (mode == "realloc_misaligned") {  // realloc of a pointer 8 bytes into a small block
    void* p = static_cast<char*>(std::malloc(48)) + 8;
    say(p);
    launder(std::realloc(launder(p), 40));
  } else if (mode == "realloc_freed") {  // realloc of a freed small block, to a size it holds
    void* p = std::malloc(48);
    void* again = launder(p);
    say(p);
    std::free(p);
    launder(std::realloc(again, 40));
  } else if (mode == "usable_inside") {  // malloc_usable_size 16 bytes into a large block
    void* p = static_cast<char*>(std::malloc(3 << 20)) + 16;
    say(p);
    std::printf("%zu\n", malloc_usable_size(launder(p)));
  } else if (mode == "foreign") {
    alignas(64) static unsigned char array[256];
    void* p = launder(array + 64);
    say(p);
    std::free(p);
  } else if (mode == "sized") {
    void* p = ::operator new(64);
    say(p);
    ::operator delete(launder(p), 4000);
  } else {
    std::fprintf(stderr,
                 "usage: checked_errors "
                 "ok|double|double_large|inside_large|misaligned|realloc_misaligned|"
                 "realloc_freed|usable_inside|foreign|sized\n");
    return 2;
  }
  std::printf("not caught\n");
  return 1;
}
