// A multi-threaded demo workload for running under LD_PRELOAD=liblivealloc.so.
//
// It uses only the standard allocation interfaces (malloc family, new/delete, STL containers),
// so it runs the same against any allocator. Every block is filled with a pattern derived from
// its identity and checked before it is freed: a corrupting allocator makes this program exit 1.
//
// Usage: demo_workload [--expect-preload] [threads] [scale]
//   --expect-preload  exit 3 unless liblivealloc is mapped into this process (so a silently
//                     ignored LD_PRELOAD cannot pass for a preloaded run).
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace {

std::atomic<long> g_errors{0};

void report(const char* what, std::uint64_t id) {
  if (g_errors.fetch_add(1) < 10) std::fprintf(stderr, "CORRUPTION: %s (id %llu)\n", what,
                                               static_cast<unsigned long long>(id));
}

// Small deterministic generator (xorshift64*): same sequence on every run and every allocator.
struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }
};

// Byte i of block `id`. Depends on both, so a block handed out twice or overlapping another
// shows up as a mismatch.
inline unsigned char pattern(std::uint64_t id, std::size_t i) {
  return static_cast<unsigned char>((id * 131u + i * 7u + (i >> 8)) & 0xff);
}

// Large blocks are checked at a stride: enough to catch overlap and reuse, cheap enough to keep
// the demo allocation-bound rather than memset-bound.
inline std::size_t step_for(std::size_t n) { return n <= 1024 ? 1 : 61; }

void fill(void* p, std::size_t n, std::uint64_t id) {
  auto* b = static_cast<unsigned char*>(p);
  for (std::size_t i = 0; i < n; i += step_for(n)) b[i] = pattern(id, i);
  if (n) b[n - 1] = pattern(id, n - 1);
}

bool check(const void* p, std::size_t n, std::uint64_t id) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; i += step_for(n))
    if (b[i] != pattern(id, i)) return false;
  return n == 0 || b[n - 1] == pattern(id, n - 1);
}

// Mostly small sizes, some medium, a few large: the shape of real programs.
std::size_t random_size(Rng& r) {
  std::size_t roll = r.below(1000);
  if (roll < 800) return 1 + r.below(256);
  if (roll < 990) return 257 + r.below(16 * 1024);
  return 64 * 1024 + r.below(1024 * 1024);
}

void run_threads(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> ts;
  for (int t = 0; t < n; ++t) ts.emplace_back(body, t);
  for (auto& t : ts) t.join();
}

// Phase 1: each thread keeps a window of live blocks and replaces them at random, mixing
// malloc/free with new[]/delete[] so both entry points are exercised.
void phase_churn(int threads, int scale) {
  run_threads(threads, [scale](int t) {
    struct Block {
      unsigned char* p;
      std::size_t n;
      std::uint64_t id;
      int how;  // 0 malloc/free, 1 new[]/delete[], 2 operator new/sized operator delete
    };
    Rng r(100 + t);
    std::vector<Block> live(512, Block{nullptr, 0, 0, 0});
    std::uint64_t next_id = static_cast<std::uint64_t>(t) << 40;
    auto release = [](Block& b) {
      if (!b.p) return;
      if (!check(b.p, b.n, b.id)) report("churn block changed while live", b.id);
      if (b.how == 0)
        std::free(b.p);
      else if (b.how == 1)
        delete[] b.p;
      else
        ::operator delete(b.p, b.n);
      b.p = nullptr;
    };
    for (long i = 0; i < 200000L * scale; ++i) {
      Block& b = live[r.below(live.size())];
      release(b);
      b.n = random_size(r);
      b.id = next_id++;
      b.how = static_cast<int>(b.id % 3);
      if (b.how == 0)
        b.p = static_cast<unsigned char*>(std::malloc(b.n));
      else if (b.how == 1)
        b.p = new unsigned char[b.n];
      else
        b.p = static_cast<unsigned char*>(::operator new(b.n));
      if (!b.p) {
        report("malloc returned NULL", b.id);
        return;
      }
      fill(b.p, b.n, b.id);
    }
    for (auto& b : live) release(b);
  });
}

// Phase 2: the standard containers, whose growth patterns (doubling vectors, node-per-element
// maps, SSO and heap strings) are what most C++ programs really do.
void phase_containers(int threads, int scale) {
  run_threads(threads, [scale](int t) {
    for (int round = 0; round < 30 * scale; ++round) {
      std::map<std::string, std::vector<int>> index;
      const int keys = 4000;
      for (int k = 0; k < keys; ++k) {
        std::string key = "key-" + std::to_string(t) + "-" + std::to_string(k) +
                          std::string(static_cast<std::size_t>(k % 40), 'x');
        auto& v = index[key];
        for (int j = 0; j < k % 50; ++j) v.push_back(k * 31 + j);
      }
      if (index.size() != static_cast<std::size_t>(keys)) report("map lost keys", t);
      for (const auto& [key, v] : index) {
        int k = std::stoi(key.substr(key.find('-', 4) + 1));
        if (v.size() != static_cast<std::size_t>(k % 50)) report("vector size", k);
        for (std::size_t j = 0; j < v.size(); ++j)
          if (v[j] != k * 31 + static_cast<int>(j)) report("vector contents", k);
      }
      std::string big;
      for (int k = 0; k < 20000; ++k) big += static_cast<char>('a' + k % 26);
      for (int k = 0; k < 20000; ++k)
        if (big[static_cast<std::size_t>(k)] != static_cast<char>('a' + k % 26))
          report("string contents", k);
    }
  });
}

// Phase 3: producers allocate and fill, consumers on other threads check and free. Every free
// here is a cross-thread free, the case where allocators grow without bound if remote frees do
// not go back to the owning heap.
void phase_handoff(int threads, int scale) {
  struct Item {
    unsigned char* p;
    std::size_t n;
    std::uint64_t id;
  };
  std::mutex m;
  std::condition_variable cv_items, cv_space;
  std::deque<Item> queue;
  const std::size_t capacity = 4096;
  int producers = std::max(1, threads / 2);
  int consumers = std::max(1, threads - producers);
  std::atomic<int> producers_left{producers};
  const long per_producer = 150000L * scale;

  auto produce = [&](int t) {
    Rng r(200 + t);
    for (long i = 0; i < per_producer; ++i) {
      Item it{nullptr, random_size(r), (static_cast<std::uint64_t>(t) << 40) | i};
      it.p = static_cast<unsigned char*>(std::malloc(it.n));
      if (!it.p) {
        report("malloc returned NULL", it.id);
        break;
      }
      fill(it.p, it.n, it.id);
      std::unique_lock<std::mutex> lock(m);
      cv_space.wait(lock, [&] { return queue.size() < capacity; });
      queue.push_back(it);
      cv_items.notify_one();
    }
    if (producers_left.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(m);
      cv_items.notify_all();
    }
  };
  auto consume = [&] {
    for (;;) {
      Item it;
      {
        std::unique_lock<std::mutex> lock(m);
        cv_items.wait(lock, [&] { return !queue.empty() || producers_left.load() == 0; });
        if (queue.empty()) return;
        it = queue.front();
        queue.pop_front();
        cv_space.notify_one();
      }
      if (!check(it.p, it.n, it.id)) report("handed-off block changed", it.id);
      std::free(it.p);
    }
  };
  run_threads(producers + consumers, [&](int t) {
    if (t < producers)
      produce(t);
    else
      consume();
  });
}

// Phase 4: the rest of the malloc family, each with its own contract checked.
void phase_family(int threads, int scale) {
  run_threads(threads, [scale](int t) {
    Rng r(300 + t);
    for (long i = 0; i < 12000L * scale; ++i) {
      std::uint64_t id = (static_cast<std::uint64_t>(t) << 40) | i;
      std::size_t n = 1 + r.below(4096);
      auto* z = static_cast<unsigned char*>(std::calloc(n, 3));
      if (!z) {
        report("calloc returned NULL", id);
        return;
      }
      for (std::size_t k = 0; k < n * 3; ++k)
        if (z[k] != 0) {
          report("calloc memory not zero", id);
          break;
        }
      std::free(z);

      // realloc must keep the old contents when growing and the prefix when shrinking.
      auto* p = static_cast<unsigned char*>(std::malloc(n));
      if (!p) return report("malloc returned NULL", id);
      fill(p, n, id);
      std::size_t grown = n * (2 + r.below(8));
      auto* q = static_cast<unsigned char*>(std::realloc(p, grown));
      if (!q) return report("realloc returned NULL", id);
      if (!check(q, n, id)) report("realloc lost contents", id);
      std::size_t shrunk = 1 + n / 3;
      auto* s = static_cast<unsigned char*>(std::realloc(q, shrunk));
      if (!s) return report("realloc returned NULL", id);
      for (std::size_t k = 0; k < shrunk && k < n; k += step_for(n))
        if (s[k] != pattern(id, k)) {
          report("realloc shrink lost prefix", id);
          break;
        }
      std::free(s);

      std::size_t align = std::size_t{16} << r.below(9);  // 16 .. 4096
      void* a = std::aligned_alloc(align, align * (1 + r.below(4)));
      if (!a || reinterpret_cast<std::uintptr_t>(a) % align != 0)
        report("aligned_alloc misaligned", id);
      std::free(a);
      void* pm = nullptr;
      if (posix_memalign(&pm, align, n) != 0 || reinterpret_cast<std::uintptr_t>(pm) % align)
        report("posix_memalign misaligned", id);
      std::free(pm);

      auto* obj = new (std::align_val_t{64}) std::uint64_t[8];
      if (reinterpret_cast<std::uintptr_t>(obj) % 64) report("aligned new misaligned", id);
      ::operator delete[](obj, std::align_val_t{64});
    }
  });
}

bool livealloc_is_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line))
    if (line.find("liblivealloc") != std::string::npos) return true;
  return false;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  bool expect_preload = false;
  std::vector<int> numbers;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--expect-preload") == 0)
      expect_preload = true;
    else
      numbers.push_back(std::atoi(argv[i]));
  }
  const int threads = numbers.size() > 0 && numbers[0] > 0 ? numbers[0] : 4;
  const int scale = numbers.size() > 1 && numbers[1] > 0 ? numbers[1] : 1;

  bool preloaded = livealloc_is_mapped();
  std::printf("demo: allocator %s, %d threads, scale %d\n",
              preloaded ? "liblivealloc.so (preloaded)" : "system malloc (no livealloc)",
              threads, scale);
  if (expect_preload && !preloaded) {
    std::fprintf(stderr, "demo: --expect-preload given but liblivealloc is not mapped\n");
    return 3;
  }

  struct Phase {
    const char* name;
    const char* what;
    void (*run)(int, int);
  };
  const Phase phases[] = {
      {"churn", "each thread replaces blocks of 1 B..1 MiB at random (malloc, new[], sized delete)",
       phase_churn},
      {"containers", "std::map<std::string, std::vector<int>> and long std::string per thread",
       phase_containers},
      {"handoff", "producers allocate, consumers on other threads verify and free",
       phase_handoff},
      {"family", "calloc zeroing, realloc grow/shrink, aligned_alloc, posix_memalign, aligned new",
       phase_family},
  };

  auto t0 = std::chrono::steady_clock::now();
  for (const auto& ph : phases) {
    std::printf("demo: phase %-10s %s\n", ph.name, ph.what);
    std::fflush(stdout);
    auto tp = std::chrono::steady_clock::now();
    ph.run(threads, scale);
    std::printf("demo: phase %-10s done in %.2f s\n", ph.name, seconds_since(tp));
  }

  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);  // ru_maxrss is in KiB on Linux
  std::printf("demo: elapsed %.2f s, peak RSS %.1f MiB\n", seconds_since(t0),
              static_cast<double>(ru.ru_maxrss) / 1024.0);
  long errors = g_errors.load();
  if (errors) {
    std::fprintf(stderr, "demo: FAILED: %ld corrupted or misbehaving allocations\n", errors);
    return 1;
  }
  std::printf("demo: all data verified\n");
  return 0;
}
