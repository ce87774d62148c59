// The checked mode (LIVEALLOC_CHECKED=1): double frees, frees of foreign pointers and sized frees
// with a wrong size abort with a message that names the address; correct programs run unchanged.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <livealloc.h>

#include "run_child.h"

#include <string>
#include <thread>
#include <vector>

static_assert(LIVEALLOC_CHECKED == 1, "this file tests the checked mode");
namespace la = livealloc;

TEST_CASE("double free of a small block aborts naming the address") {
  void* p = la::allocate(40);
  child_outcome o = run_child([p] {
    la::deallocate(p);
    la::deallocate(p);
  });
  CHECK(o.aborted);
  CHECK(o.err.find("livealloc: double free of " + hex(p)) != std::string::npos);
  la::deallocate(p);  // the parent still owns it: a single free is fine
}

TEST_CASE("double free of a large block aborts naming the address") {
  void* p = la::allocate(3 << 20);
  child_outcome o = run_child([p] {
    la::deallocate(p);
    la::deallocate(p);
  });
  CHECK(o.aborted);
  CHECK(o.err.find("livealloc: double free of " + hex(p)) != std::string::npos);
  la::deallocate(p);
}

TEST_CASE("double free from another thread is caught too") {
  void* p = la::allocate(100);
  child_outcome o = run_child([p] {
    std::thread([p] { la::deallocate(p); }).join();
    la::deallocate(p);
  });
  CHECK(o.aborted);
  CHECK(o.err.find("double free of " + hex(p)) != std::string::npos);
  la::deallocate(p);
}

TEST_CASE("freeing a pointer livealloc never returned aborts naming the address") {
  static char not_ours[64];
  char* inside = static_cast<char*>(la::allocate(256)) + 16;
  void* stack_ptr = &inside;
  for (void* bad : {static_cast<void*>(not_ours), static_cast<void*>(inside), stack_ptr}) {
    child_outcome o = run_child([bad] { la::deallocate(bad); });
    CHECK(o.aborted);
    CHECK(o.err.find("never returned: " + hex(bad)) != std::string::npos);
  }
  la::deallocate(inside - 16);
}

// Allocates `block` bytes; a child frees it (when `offset` is 0) and passes the pointer `offset`
// bytes into it to `use`, which must abort naming it: `freed` or `never` before the address.
template <class F>
void check_use_aborts(std::size_t block, std::size_t offset, F use, const char* freed,
                      const char* never) {
  CAPTURE(block);
  CAPTURE(offset);
  char* p = static_cast<char*>(la::allocate(block));
  void* bad = p + offset;
  child_outcome o = run_child([&] {
    if (offset == 0) la::deallocate(p);
    use(bad);
  });
  INFO("the child wrote: " << o.err);
  CHECK(o.aborted);
  const std::string want = std::string("livealloc: ") + (offset == 0 ? freed : never) + " ";
  CHECK(o.err.find(want + hex(bad)) != std::string::npos);
  la::deallocate(p);
}

// realloc validates its pointer before it keeps, grows or moves the block: a freed block kept in
// place would be handed out twice, and a pointer inside one would be returned as a block.
TEST_CASE("realloc of a freed block or of a pointer livealloc never returned aborts") {
  struct bad_realloc {
    std::size_t block, offset, to;
  };
  const bad_realloc cases[] = {
      {40, 0, 40},               // freed, the size its block holds (kept in place before)
      {40, 0, 4000},             // freed, moved to a larger class
      {3 << 20, 0, 3 << 20},     // a large block freed, its mapping cached
      {3 << 20, 0, 5 << 20},     // the same, grown
      {256, 16, 256},            // 16 bytes into a small block (a multiple of 16)
      {256, 8, 4000},            // 8 bytes into a small block, moved
      {3 << 20, 4096, 3 << 20},  // a page into a large block
  };
  for (const bad_realloc& c : cases) {
    CAPTURE(c.to);
    check_use_aborts(
        c.block, c.offset,
        [&c](void* bad) {
          void* volatile q = la::reallocate(bad, c.to);
          (void)q;
        },
        "realloc of a freed block:", "realloc of a pointer livealloc never returned:");
  }
}

// malloc_usable_size validates its pointer as free does: the size of a freed block, or of one a
// pointer points into, is a use after free or an overflow waiting to happen.
TEST_CASE("the usable size of a freed block or of a pointer livealloc never returned aborts") {
  const std::size_t cases[][2] = {{40, 0}, {3 << 20, 0}, {256, 16}, {3 << 20, 4096}};
  for (const auto& c : cases) {
    check_use_aborts(
        c[0], c[1],
        [](void* bad) {
          volatile std::size_t n = la::usable_size(bad);
          (void)n;
        },
        "malloc_usable_size of a freed block:",
        "malloc_usable_size of a pointer livealloc never returned:");
  }
}

TEST_CASE("a sized free with a size larger than the block aborts") {
  void* p = la::allocate(100);
  child_outcome o = run_child([p] { la::deallocate(p, 5000); });
  CHECK(o.aborted);
  CHECK(o.err.find("sized free with a size larger than the block: " + hex(p)) !=
        std::string::npos);
  la::deallocate(p, 100);
}

TEST_CASE("correct programs run unchanged in checked mode") {
  std::vector<std::thread> threads;
  std::vector<std::vector<void*>> made(4);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&made, t] {
      for (int i = 0; i < 20000; ++i) made[t].push_back(la::allocate(static_cast<std::size_t>(i % 3000)));
    });
  for (auto& th : threads) th.join();
  threads.clear();
  for (int t = 0; t < 4; ++t)  // every thread frees another thread's blocks
    threads.emplace_back([&made, t] {
      for (void* p : made[(t + 1) % 4]) la::deallocate(p);
    });
  for (auto& th : threads) th.join();
  CHECK(la::detail::heap_is_valid());
}

// Each page descriptor of a segment gets a bitmap of its blocks. A segment unmapped and a new one
// mapped used to take a new bitmap from the metadata arena for every page it served, for good:
// a loop that trims took 512 bytes more each round (100 MB in 200,000 rounds).
TEST_CASE("segments unmapped and mapped again reuse their pages' bitmaps") {
  auto round = [] {
    la::deallocate(la::allocate(100));
    la::trim();
  };
  round();
  round();
  const std::uint8_t* const arena = la::detail::g.meta_cur;  // one thread: nothing else takes any
  for (int i = 0; i < 2000; ++i) round();
  CHECK(la::detail::g.meta_cur == arena);
  CHECK(la::detail::heap_is_valid());
}
