// The in-process override: this translation unit defines LIVEALLOC_OVERRIDE, so malloc, free, ...
// and every operator new/delete of this program are livealloc's. Checks the C ABI to the letter.
#define LIVEALLOC_OVERRIDE 1
#include <livealloc.h>

#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

extern "C" void free_sized(void*, size_t) noexcept;
extern "C" void free_aligned_sized(void*, size_t, size_t) noexcept;

namespace {
bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }
// Keeps the compiler from folding malloc/free pairs away.
void* volatile sink;
// Sizes the compiler cannot see, so it does not reject the deliberately impossible requests.
std::size_t opaque(std::size_t v) {
  volatile std::size_t x = v;
  return x;
}
void* opaque(void* v) {
  void* volatile x = v;
  return x;
}
}  // namespace

TEST_CASE("malloc and operator new are livealloc's") {
  void* p = malloc(100);
  CHECK(malloc_usable_size(p) == 112);  // livealloc's class for 100 bytes
  CHECK(livealloc::usable_size(p) == 112);
  free(p);
  auto* q = new std::string(1000, 'x');
  CHECK(livealloc::usable_size(q) >= sizeof(std::string));
  delete q;
}

TEST_CASE("malloc(0) is a unique pointer and free(NULL) is a no-op") {
  void* a = malloc(0);
  void* b = malloc(0);
  CHECK(a);
  CHECK(b);
  CHECK(a != b);
  free(a);
  free(b);
  free(nullptr);
  CHECK(malloc_usable_size(nullptr) == 0);
}

TEST_CASE("a request beyond the machine's memory fails at once under the default overcommit") {
  int mode = -1;
  if (FILE* f = std::fopen("/proc/sys/vm/overcommit_memory", "r")) {
    if (std::fscanf(f, "%d", &mode) != 1) mode = -1;
    std::fclose(f);
  }
  if (mode != 0) return;  // 1 grants any request; 2 refuses by its own limit either way
  const std::size_t huge = std::size_t(1) << 46;  // 64 TiB: more than RAM and swap here
  errno = 0;
  sink = malloc(opaque(huge));
  CHECK(sink == nullptr);
  CHECK(errno == ENOMEM);
  errno = 0;
  sink = calloc(1, opaque(huge));
  CHECK(sink == nullptr);
  CHECK(errno == ENOMEM);
  void* p = nullptr;
  CHECK(posix_memalign(&p, opaque(std::size_t(1) << 40), 100) == ENOMEM);
  void* small = malloc(100);  // and the allocator goes on
  CHECK(small != nullptr);
  free(small);
}

TEST_CASE("impossible sizes: NULL and ENOMEM") {
  errno = 0;
  sink = malloc(opaque(SIZE_MAX));
  CHECK(sink == nullptr);
  CHECK(errno == ENOMEM);
  errno = 0;
  sink = calloc(opaque(SIZE_MAX / 8), 16);
  CHECK(sink == nullptr);
  CHECK(errno == ENOMEM);
  errno = 0;
  sink = calloc(opaque(std::size_t(1) << 33), std::size_t(1) << 33);
  CHECK(sink == nullptr);
  CHECK(errno == ENOMEM);
  void* p = malloc(10);
  errno = 0;
  CHECK(reallocarray(opaque(p), opaque(SIZE_MAX / 2), 4) == nullptr);
  CHECK(errno == ENOMEM);
  errno = 0;
  CHECK(realloc(opaque(p), opaque(SIZE_MAX)) == nullptr);
  CHECK(errno == ENOMEM);
  free(opaque(p));  // still valid after the failed reallocs
}

TEST_CASE("calloc zeroes and reallocarray multiplies") {
  auto* z = static_cast<unsigned char*>(calloc(1000, 3));
  for (int i = 0; i < 3000; ++i) REQUIRE(z[i] == 0);
  auto* r = static_cast<int*>(reallocarray(nullptr, 100, sizeof(int)));
  REQUIRE(r);
  for (int i = 0; i < 100; ++i) r[i] = i;
  r = static_cast<int*>(reallocarray(r, 100000, sizeof(int)));
  REQUIRE(r);
  for (int i = 0; i < 100; ++i) REQUIRE(r[i] == i);
  free(r);
  free(z);
}

TEST_CASE("aligned_alloc: power-of-two alignments work, others are EINVAL") {
  for (std::size_t a = 1; a <= (1u << 23); a *= 2) {
    void* p = aligned_alloc(a, 3 * a);
    REQUIRE(p);
    CHECK(aligned(p, a));
    free(p);
  }
  for (std::size_t a : {std::size_t(0), std::size_t(3), std::size_t(48), std::size_t(1000)}) {
    errno = 0;
    CHECK(aligned_alloc(a, 64) == nullptr);
    CHECK(errno == EINVAL);
  }
}

TEST_CASE("posix_memalign: EINVAL for bad alignments, memptr untouched on failure") {
  void* p = reinterpret_cast<void*>(0x1234);
  CHECK(posix_memalign(&p, 0, 8) == EINVAL);
  CHECK(posix_memalign(&p, 4, 8) == EINVAL);  // not a multiple of sizeof(void*)
  CHECK(posix_memalign(&p, 24, 8) == EINVAL);
  CHECK(p == reinterpret_cast<void*>(0x1234));
  CHECK(posix_memalign(&p, 64, SIZE_MAX - 4096) == ENOMEM);
  CHECK(p == reinterpret_cast<void*>(0x1234));
  for (std::size_t a = sizeof(void*); a <= (1u << 23); a *= 2) {
    REQUIRE(posix_memalign(&p, a, 100) == 0);
    CHECK(aligned(p, a));
    free(p);
  }
}

TEST_CASE("memalign, valloc, pvalloc") {
  void* p = memalign(48, 10);  // glibc rounds 48 up to 64
  REQUIRE(p);
  CHECK(aligned(p, 64));
  free(p);
  long page = sysconf(_SC_PAGESIZE);
  p = valloc(10);
  CHECK(aligned(p, static_cast<std::size_t>(page)));
  free(p);
  p = pvalloc(10);
  CHECK(aligned(p, static_cast<std::size_t>(page)));
  CHECK(malloc_usable_size(p) >= static_cast<std::size_t>(page));
  free(p);
  errno = 0;
  CHECK(pvalloc(opaque(SIZE_MAX)) == nullptr);
  CHECK(errno == ENOMEM);
  // As glibc: an alignment that cannot be mapped is ENOMEM, one above SIZE_MAX / 2 + 1 EINVAL.
  errno = 0;
  CHECK(memalign(opaque(std::size_t(1) << 41), 16) == nullptr);
  CHECK(errno == ENOMEM);
  errno = 0;
  CHECK(memalign(opaque((std::size_t(1) << 40) + 1), 16) == nullptr);
  CHECK(errno == ENOMEM);
  errno = 0;
  CHECK(memalign(opaque((SIZE_MAX >> 1) + 2), 16) == nullptr);
  CHECK(errno == EINVAL);
}

TEST_CASE("free_sized and free_aligned_sized free") {
  for (int i = 0; i < 1000; ++i) {
    void* p = malloc(static_cast<std::size_t>(i));
    free_sized(p, static_cast<std::size_t>(i));
    void* q = aligned_alloc(256, 512);
    free_aligned_sized(q, 256, 512);
  }
  CHECK(livealloc::detail::heap_is_valid());
}

TEST_CASE("mallinfo2 reports real numbers") {
  struct mallinfo2 before = mallinfo2();
  std::vector<void*> v;
  for (int i = 0; i < 1000; ++i) v.push_back(malloc(1000));
  void* big = malloc(8 << 20);
  struct mallinfo2 during = mallinfo2();
  CHECK(during.uordblks >= before.uordblks + 1000 * 1000);
  CHECK(during.hblks == before.hblks + 1);
  CHECK(during.hblkhd >= before.hblkhd + (8u << 20));
  CHECK(during.arena >= during.uordblks);
  for (void* p : v) free(p);
  free(big);
  struct mallinfo2 after = mallinfo2();
  CHECK(after.uordblks <= during.uordblks - 1000 * 1000);
  CHECK(after.hblks == before.hblks);
  CHECK(malloc_trim(0) == 1);
  CHECK(mallinfo2().keepcost == 0);
}

TEST_CASE("the deprecated mallinfo reports the same numbers in ints") {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  void* p = malloc(100000);
  struct mallinfo2 w = mallinfo2();
  struct mallinfo m = mallinfo();
#pragma GCC diagnostic pop
  CHECK(m.uordblks >= 100000);
  CHECK(static_cast<std::size_t>(m.uordblks) == w.uordblks);
  CHECK(static_cast<std::size_t>(m.arena) == w.arena);
  CHECK(static_cast<std::size_t>(m.ordblks) == w.ordblks);
  free(p);
}

TEST_CASE("operator new throws std::bad_alloc and the nothrow forms return nullptr") {
  CHECK_THROWS_AS(sink = ::operator new(opaque(SIZE_MAX - 100)), std::bad_alloc);
  CHECK_THROWS_AS(sink = ::operator new[](opaque(SIZE_MAX - 100)), std::bad_alloc);
  CHECK_THROWS_AS(sink = ::operator new(opaque(SIZE_MAX - 100), std::align_val_t(64)), std::bad_alloc);
  CHECK_THROWS_AS(sink = ::operator new[](opaque(SIZE_MAX - 100), std::align_val_t(64)), std::bad_alloc);
  CHECK(::operator new(opaque(SIZE_MAX - 100), std::nothrow) == nullptr);
  CHECK(::operator new[](opaque(SIZE_MAX - 100), std::nothrow) == nullptr);
  CHECK(::operator new(opaque(SIZE_MAX - 100), std::align_val_t(64), std::nothrow) == nullptr);
  CHECK(::operator new[](opaque(SIZE_MAX - 100), std::align_val_t(64), std::nothrow) == nullptr);
}

namespace {
int handler_calls = 0;
void* reserve = nullptr;
void release_reserve() {  // a typical handler: free an emergency reserve, then give up
  ++handler_calls;
  if (reserve) {
    free(reserve);
    reserve = nullptr;
  } else {
    std::set_new_handler(nullptr);
  }
}
void throwing_handler() {
  ++handler_calls;
  throw std::bad_alloc();
}
}  // namespace

TEST_CASE("the new-handler is called until it gives up") {
  handler_calls = 0;
  reserve = malloc(100);
  std::set_new_handler(release_reserve);
  CHECK_THROWS_AS(sink = ::operator new(opaque(SIZE_MAX - 100)), std::bad_alloc);
  CHECK(handler_calls == 2);
  std::set_new_handler(throwing_handler);
  handler_calls = 0;
  CHECK(::operator new(opaque(SIZE_MAX - 100), std::nothrow) == nullptr);  // the throw is caught
  CHECK(handler_calls == 1);
  std::set_new_handler(nullptr);
}

TEST_CASE("every operator new/delete form round trips with the right alignment") {
  struct alignas(128) wide {
    char c[128];
  };
  auto* w = new wide;
  CHECK(aligned(w, 128));
  delete w;
  auto* wa = new wide[7];
  CHECK(aligned(wa, 128));
  delete[] wa;
  auto* wn = new (std::nothrow) wide;
  CHECK(aligned(wn, 128));
  delete wn;
  void* p = ::operator new(100);
  ::operator delete(p, 100);
  p = ::operator new[](100);
  ::operator delete[](p, 100);
  p = ::operator new(100, std::nothrow);
  ::operator delete(p, std::nothrow);
  p = ::operator new[](100, std::nothrow);
  ::operator delete[](p, std::nothrow);
  p = ::operator new(100, std::align_val_t(4096));
  CHECK(aligned(p, 4096));
  ::operator delete(p, 100, std::align_val_t(4096));
  p = ::operator new[](100, std::align_val_t(4096));
  CHECK(aligned(p, 4096));
  ::operator delete[](p, 100, std::align_val_t(4096));
  p = ::operator new(100, std::align_val_t(256), std::nothrow);
  ::operator delete(p, std::align_val_t(256), std::nothrow);
  p = ::operator new[](100, std::align_val_t(256), std::nothrow);
  ::operator delete[](p, std::align_val_t(256), std::nothrow);
  p = ::operator new(100, std::align_val_t(256));
  ::operator delete(p, std::align_val_t(256));
  p = ::operator new[](100, std::align_val_t(256));
  ::operator delete[](p, std::align_val_t(256));
  CHECK(livealloc::detail::heap_is_valid());
}

namespace {
// In a child: the address space limited to what is mapped plus 2 MiB, after 64 MiB of freed large
// mappings went to the cache. Exit 0 if every step behaved; else the step's number.
[[noreturn]] void exhaust_address_space() {
  if (livealloc::set_option("purge_delay", 60000) != livealloc::option_status::ok) _exit(10);
  void* big[8];
  for (auto& b : big) b = malloc(opaque(8u << 20));
  for (auto& b : big) free(b);  // into the large cache
  unsigned long pages = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f || std::fscanf(f, "%lu", &pages) != 1) _exit(11);
  std::fclose(f);
  rlimit rl{};
  rl.rlim_cur = rl.rlim_max = pages * 4096ul + (2ul << 20);
  if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(12);
  // 1. A new 24 MiB block has no room but what the cached mappings hold. The mmap refused on the
  //    way leaves errno as it was: the malloc succeeded.
  errno = 777;
  void* p = malloc(opaque(24u << 20));
  if (!p) _exit(1);
  if (errno != 777) _exit(6);
  std::memset(p, 1, 4096);
  free(p);  // cached again
  // 2. Small blocks until nothing is left: the cached block gives its room to new segments, then
  //    malloc returns nullptr with ENOMEM.
  std::size_t n = 0;
  errno = 0;
  while (malloc(opaque(1024)) != nullptr) ++n;
  if (errno != ENOMEM) _exit(2);
  if (n < (16u << 10)) _exit(3);  // at least 16 MiB: the cached 24 MiB went to segments
  // 3. operator new throws std::bad_alloc once a class has no room either: a small size (its own
  //    slow path), then a medium one (malloc_medium<new_slow_path>), then a large one.
  for (std::size_t n : {std::size_t(64), std::size_t(8192), std::size_t(1) << 20}) {
    bool thrown = false;
    try {
      for (int i = 0; i < (1 << 22); ++i) sink = ::operator new(opaque(n));
    } catch (const std::bad_alloc&) {
      thrown = true;
    }
    if (!thrown) _exit(5);
  }
  if (!livealloc::detail::heap_is_valid()) _exit(4);
  _exit(0);
}
}  // namespace

TEST_CASE("when the OS refuses memory, the caches give theirs back, then malloc fails and new throws") {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) exhaust_address_space();
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

// The process of the test below. Returns 0 when the fork child found its heap as it was at the
// fork, else the number of the check that failed.
static int fork_without_descriptors() {
  constexpr int kBlocks = 2000;
  std::vector<unsigned char*> kept(kBlocks);
  for (auto& p : kept) {
    p = static_cast<unsigned char*>(std::malloc(64));
    std::memset(p, 0xAB, 64);
  }
  // Every file descriptor taken: the allocator cannot make the file for the child's copy of the
  // segment, and falls back to a copy in anonymous memory.
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 10;
  rl.rlim_cur = 256;
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return 11;
  while (open("/dev/null", O_RDONLY | O_CLOEXEC) >= 0) {
  }
  if (errno != EMFILE || open("/dev/shm", O_TMPFILE | O_RDWR, 0600) >= 0) return 12;
  const pid_t child = fork();
  if (child < 0) return 13;
  if (child == 0) {
    usleep(200000);  // the parent's frees below are done by now
    std::vector<unsigned char*> fresh(kBlocks);
    for (auto& p : fresh) {
      p = static_cast<unsigned char*>(std::malloc(64));
      std::memset(p, 0xCD, 64);
    }
    for (unsigned char* p : kept)  // still ours: no malloc of the child may have returned one
      for (int i = 0; i < 64; ++i)
        if (p[i] != 0xAB) _exit(2);
    if (!livealloc::detail::heap_is_valid()) _exit(3);
    for (unsigned char* p : fresh) std::free(p);
    for (unsigned char* p : kept) std::free(p);
    _exit(livealloc::detail::heap_is_valid() ? 0 : 4);
  }
  // The parent goes on at once: it frees what the child still holds, and allocates again.
  for (unsigned char* p : kept) std::free(p);
  for (int round = 0; round < 20; ++round) {
    for (auto& p : kept) p = static_cast<unsigned char*>(std::malloc(64));
    for (unsigned char* p : kept) std::free(p);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child) return 14;
  if (!WIFEXITED(status)) return 15;
  return WEXITSTATUS(status);
}

// `body` run in a child process of its own: its exit status (-1 if it did not exit).
static int in_child(int (*body)()) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST_CASE("a fork child whose segment file cannot be made keeps its heap as it was at the fork") {
  CHECK(in_child(fork_without_descriptors) == 0);
}

// The process of the test below: stdin, stdout and stderr closed (as a daemon may start its
// children), then a fork, whose segment file is made before it (table_fork_prepare) and kept by
// the child. Returns 0 when neither process has a descriptor from 0 to 2, else which one has.
static int fork_with_stdio_closed() {
  for (int fd = 0; fd <= 2; ++fd) close(fd);
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    void* p = std::malloc(48);
    std::free(p);
    for (int fd = 0; fd <= 2; ++fd)
      if (fcntl(fd, F_GETFD) != -1) _exit(10 + fd);
    _exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) return 2;
  for (int fd = 0; fd <= 2; ++fd)
    if (fcntl(fd, F_GETFD) != -1) return 20 + fd;
  return WEXITSTATUS(status);
}

// The segment once took descriptor 0 there: the program's stdin read the counters, and its output,
// once it opened files for 0 to 2 (or a log), went into them.
TEST_CASE("started with stdin, stdout and stderr closed, the segment never takes 0, 1 or 2") {
  CHECK(in_child(fork_with_stdio_closed) == 0);
}

TEST_CASE("a fork child that ends with _exit or _Exit removes its segment, as one that calls exit") {
  REQUIRE(livealloc::telemetry::enable() == 0);
  for (int how = 0; how < 3; ++how) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      sink = std::malloc(32);  // the child's own segment is named by now
      std::free(sink);
      if (how == 0) _exit(0);
      if (how == 1) _Exit(0);
      std::exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status));
    const std::string path = "/dev/shm/livealloc." + std::to_string(pid);
    INFO("how ", how, ": ", path);
    CHECK(access(path.c_str(), F_OK) != 0);
  }
}

TEST_CASE("a free after the thread's key destructors does not bring its heap back for good") {
  namespace d = livealloc::detail;
  // A key past the first 32 makes glibc allocate (with our calloc) a second-level array of
  // thread-specific values in each thread that sets it, and free it after every destructor round
  // has run: then the thread's heap is already given up, and that free must not adopt it again.
  std::vector<pthread_key_t> keys(40);
  for (auto& k : keys) REQUIRE(pthread_key_create(&k, nullptr) == 0);
  void* warm = std::malloc(64);  // this thread has its heap
  std::free(warm);
  const std::size_t owned_before = d::g.heaps_owned.load();
  for (int round = 0; round < 4; ++round) {
    pthread_t t;
    REQUIRE(pthread_create(&t, nullptr, [](void* k) -> void* {
      sink = std::malloc(100);  // the thread takes a heap
      std::free(sink);
      pthread_setspecific(*static_cast<pthread_key_t*>(k), k);
      return nullptr;
    }, &keys.back()) == 0);
    REQUIRE(pthread_join(t, nullptr) == 0);
  }
  CHECK(d::g.heaps_owned.load() == owned_before);  // every exited thread's heap went back
  CHECK(d::heap_is_valid());
  for (auto k : keys) pthread_key_delete(k);
}

namespace {
pthread_key_t g_rearm_key;
thread_local int g_rearm_rounds = 0;
std::atomic<int> g_rearm_last_round{0};
// Allocates in every destructor round glibc runs (PTHREAD_DESTRUCTOR_ITERATIONS, 4) and re-arms
// the key for the next, as POSIX allows; what it allocates in the last round outlives the thread.
void rearm_destructor(void* v) {
  std::free(v);
  void* p = std::malloc(100);
  std::memset(p, 0x5a, 100);
  ++g_rearm_rounds;
  g_rearm_last_round.store(g_rearm_rounds);
  pthread_setspecific(g_rearm_key, p);
}
}  // namespace

TEST_CASE("a malloc in every key destructor round, the last one too, keeps no heap of the thread") {
  namespace d = livealloc::detail;
  // Our key destructor gives the thread's heap up in the first round; a malloc by another key's
  // destructor after it must not take a heap for good: in glibc's last round nothing would give
  // it back, and every such thread would leave one owned (2,000 threads: 2,001 heaps, 128 MiB).
  void* warm = std::malloc(64);  // this thread has its heap, and our key exists before the test's
  std::free(warm);
  REQUIRE(pthread_key_create(&g_rearm_key, rearm_destructor) == 0);
  const std::size_t owned_before = d::g.heaps_owned.load();
  for (int t = 0; t < 50; ++t) {
    pthread_t th;
    REQUIRE(pthread_create(&th, nullptr, [](void*) -> void* {
      pthread_setspecific(g_rearm_key, std::malloc(16));
      return nullptr;
    }, nullptr) == 0);
    REQUIRE(pthread_join(th, nullptr) == 0);
  }
  CHECK(g_rearm_last_round.load() == PTHREAD_DESTRUCTOR_ITERATIONS);  // it did run in the last
  CHECK(d::g.heaps_owned.load() == owned_before);
  CHECK(d::heap_is_valid());
  pthread_key_delete(g_rearm_key);
}
