// Shared helpers for the benchmark binaries: arguments, timing, latency percentiles, memory
// readings, block patterns and the RESULT line format that bench.py parses.
//
// The binaries are plain C++: they call malloc/free/new/delete and never link livealloc, so every
// allocator (glibc included) is swapped in by LD_PRELOAD into the very same code.
#pragma once

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace bench {

// ---------------------------------------------------------------------------------------------
// Observer gate, for the `livealloc+memlive` column of bench.py: with BENCH_OBSERVER_FD=N in the
// environment, the binary waits before main() until the runner writes one byte to the inherited
// pipe N, which it does once `memlive serve` is attached to this process and its client has
// received the first streamed snapshot. So the whole run, set-up and timed section alike, is
// observed. Without the variable (every other column) nothing happens. End of file or 10 s
// without the byte: exit 4, never a run that silently goes unobserved.

inline bool wait_for_observer() {
  const char* fd_text = std::getenv("BENCH_OBSERVER_FD");
  if (fd_text == nullptr || *fd_text == '\0') return false;
  const int fd = std::atoi(fd_text);
  pollfd p{fd, POLLIN, 0};
  int ready;
  do {
    ready = poll(&p, 1, 10'000);
  } while (ready < 0 && errno == EINTR);
  char byte = 0;
  if (ready != 1 || read(fd, &byte, 1) != 1) {
    std::fprintf(stderr, "OBSERVER: BENCH_OBSERVER_FD=%s: the runner never reported the observer "
                         "attached (%s)\n", fd_text, ready == 1 ? "pipe closed" : "10 s timeout");
    std::_Exit(4);
  }
  close(fd);
  return true;
}

// Dynamic initialisation, before main() of every binary that includes this header.
inline const bool observer_attached = wait_for_observer();

// ---------------------------------------------------------------------------------------------
// Arguments: every binary takes key=value pairs (threads=4 size=64 ...) plus --smoke, which
// shrinks all counts so a run only proves the workload completes and its data stays intact.
// scale=F multiplies iteration counts (full runs only) to fit another machine.

struct Args {
  int argc;
  char** argv;
  bool smoke = false;
  double scale = 1.0;

  Args(int c, char** v) : argc(c), argv(v) {
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--smoke") == 0) smoke = true;
    }
    scale = num("scale", 1.0, 1e-6, 1e6);
  }
  // Value of key=..., or fallback when absent; anything but a number in [lo, hi] ends the run
  // with a usage error.
  double num(const char* key, double fallback, double lo, double hi) {
    const char* text = value(key);
    if (text == nullptr) return fallback;
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !(v >= lo && v <= hi))
      usage_error(key, text, "a number", shortest(lo), shortest(hi));
    return v;
  }
  // An integer key=N in [lo, hi], or fallback when absent.
  long integer(const char* key, long fallback, long lo, long hi) {
    const char* text = value(key);
    if (text == nullptr) return fallback;
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || v < lo || v > hi)
      usage_error(key, text, "an integer", std::to_string(lo), std::to_string(hi));
    return v;
  }
  // One of `choices` (a null-terminated list), or fallback when absent.
  std::string choice(const char* key, const char* fallback, const char* const* choices) {
    const char* text = value(key);
    if (text == nullptr) return fallback;
    std::string list;
    for (const char* const* c = choices; *c != nullptr; ++c) {
      if (std::strcmp(text, *c) == 0) return text;
      list += list.empty() ? *c : std::string("|") + *c;
    }
    std::fprintf(stderr, "%s: %s=%s: expected one of %s\n", name(), key, text, list.c_str());
    std::exit(64);
  }
  // The text of key=..., or fallback when absent (the caller validates it).
  std::string str(const char* key, const char* fallback) {
    const char* text = value(key);
    return text ? text : fallback;
  }
  // An iteration count: `full` scaled, or `tiny` under --smoke; an explicit key=N wins.
  long count(const char* key, long full, long tiny) {
    const long explicit_value = integer(key, 0, 1, 1'000'000'000'000L);
    if (explicit_value > 0) return explicit_value;
    if (smoke) return tiny;
    return std::max(1L, static_cast<long>(static_cast<double>(full) * scale));
  }
  // After the last key is read: an argument no key asked for is a usage error too, so a typo
  // (thread=4) never runs the default silently.
  void check_all_known() const {
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--smoke") == 0) continue;
      const char* eq = std::strchr(argv[i], '=');
      const std::string key =
          eq ? std::string(argv[i], static_cast<size_t>(eq - argv[i])) : std::string();
      if (std::find(known_.begin(), known_.end(), key) == known_.end()) {
        std::string list;
        for (const auto& k : known_) list += k + "= ";
        std::fprintf(stderr, "%s: unknown argument '%s' (takes %s--smoke)\n", name(), argv[i],
                     list.c_str());
        std::exit(64);
      }
    }
  }

 private:
  std::vector<std::string> known_;

  const char* name() const { return argc > 0 ? argv[0] : "bench"; }
  const char* value(const char* key) {
    if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.emplace_back(key);
    const size_t n = std::strlen(key);
    for (int i = 1; i < argc; ++i) {
      if (std::strncmp(argv[i], key, n) == 0 && argv[i][n] == '=') return argv[i] + n + 1;
    }
    return nullptr;
  }
  static std::string shortest(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
  }
  [[noreturn]] void usage_error(const char* key, const char* text, const char* what,
                                const std::string& lo, const std::string& hi) const {
    std::fprintf(stderr, "%s: %s=%s: expected %s from %s to %s\n", name(), key, text, what,
                 lo.c_str(), hi.c_str());
    std::exit(64);
  }
};

// ---------------------------------------------------------------------------------------------
// Results. One line per metric, parsed by bench.py:
//   RESULT workload=W case=C threads=T metric=M value=V unit=U
// `case` names the variant inside a workload (size=64, mode=pc, elem=small); no spaces anywhere.

inline void result(const char* workload, const std::string& case_name, int threads,
                   const char* metric, double value, const char* unit) {
  std::printf("RESULT workload=%s case=%s threads=%d metric=%s value=%.6g unit=%s\n", workload,
              case_name.c_str(), threads, metric, value, unit);
  std::fflush(stdout);
}

// Corruption or allocation failure ends the run with a distinct exit code, so the runner reports
// the allocator and workload instead of averaging a broken run into the results.
[[noreturn]] inline void fail(const char* workload, const char* what, const void* p = nullptr,
                              size_t n = 0) {
  std::fprintf(stderr, "CORRUPTION workload=%s: %s (block %p, size %zu)\n", workload, what, p, n);
  std::fflush(stderr);
  std::_Exit(3);
}

inline void* checked(void* p, const char* workload, size_t n) {
  if (p == nullptr && n != 0) {
    std::fprintf(stderr, "ALLOCFAIL workload=%s: malloc(%zu) returned NULL\n", workload, n);
    std::_Exit(2);
  }
  return p;
}

// Keeps the compiler from proving a block dead and removing the malloc/free pair.
inline void escape(void* p) {
  asm volatile("" : : "g"(p) : "memory");
}

// ---------------------------------------------------------------------------------------------
// Block patterns. Three words (first, middle, last) derived from a tag and the size: constant cost
// per block, so a 64 KiB block does not spend its time in memset, yet a block handed out twice or
// overlapping a neighbour is caught when either owner checks before free.

inline uint64_t tag_word(uint64_t tag, size_t n) {
  return (tag * 0x9E3779B97F4A7C15ull) ^ (n << 1) ^ 0xA5A5A5A5A5A5A5A5ull;
}

inline void fill(void* p, size_t n, uint64_t tag) {
  const uint64_t w = tag_word(tag, n);
  auto* b = static_cast<unsigned char*>(p);
  if (n < 24) {  // below 24 B the three words would overlap
    std::memset(b, static_cast<int>(w & 0xff), n);
    return;
  }
  std::memcpy(b, &w, 8);
  std::memcpy(b + (n / 2 & ~size_t{7}), &w, 8);
  std::memcpy(b + n - 8, &w, 8);
}

inline bool intact(const void* p, size_t n, uint64_t tag) {
  const uint64_t w = tag_word(tag, n);
  const auto* b = static_cast<const unsigned char*>(p);
  if (n < 24) {
    for (size_t i = 0; i < n; ++i) {
      if (b[i] != static_cast<unsigned char>(w & 0xff)) return false;
    }
    return true;
  }
  uint64_t a, m, z;
  std::memcpy(&a, b, 8);
  std::memcpy(&m, b + (n / 2 & ~size_t{7}), 8);
  std::memcpy(&z, b + n - 8, 8);
  return a == w && m == w && z == w;
}

// Self-describing blocks for cross-thread workloads, where the freeing thread knows only the
// pointer: the first 16 bytes hold the size and tag, the rest carries the pattern. n >= 16.
inline void* make_block(const char* workload, size_t n, uint64_t tag) {
  void* p = checked(std::malloc(n), workload, n);
  auto* w = static_cast<uint64_t*>(p);
  w[0] = n;
  w[1] = tag;
  fill(w + 2, n - 16, tag);
  escape(p);
  return p;
}

// Checks a block from make_block and frees it; returns its size.
inline size_t check_and_free(const char* workload, void* p, size_t max_size) {
  const auto* w = static_cast<const uint64_t*>(p);
  const size_t n = w[0];
  if (n < 16 || n > max_size) fail(workload, "size header changed", p, n);
  if (!intact(w + 2, n - 16, w[1])) fail(workload, "pattern changed", p, n);
  std::free(p);
  return n;
}

// ---------------------------------------------------------------------------------------------
// Random numbers: xorshift, cheap and deterministic per seed, so every allocator sees the same
// sequence of sizes.

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 2654435761u + 0x9E3779B97F4A7C15ull) {}
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  uint64_t below(uint64_t n) { return next() % n; }
};

// Log-uniform size in [lo, hi]: as many draws per doubling, so small and large classes all appear.
inline size_t log_uniform(Rng& r, size_t lo, size_t hi) {
  int lo_bit = 63 - __builtin_clzll(lo), hi_bit = 63 - __builtin_clzll(hi);
  const int bit = lo_bit + static_cast<int>(r.below(static_cast<uint64_t>(hi_bit - lo_bit) + 1));
  const size_t base = size_t{1} << bit;
  return std::clamp(base + static_cast<size_t>(r.below(base)), lo, hi);
}

struct Block {
  void* p;
  size_t n;
};

// A burst of work that leaves its memory freed: blocks of 16 B to `max_size` (log-uniform) up to
// `bytes` in all, every byte written (resident, as real buffers would be), then checked and freed
// in random order. `blocks` is scratch space, reused across bursts.
inline void build_and_free(const char* workload, Rng& rng, size_t bytes, size_t max_size,
                           std::vector<Block>& blocks) {
  size_t built = 0;
  while (built < bytes) {
    const size_t n = log_uniform(rng, 16, max_size);
    void* p = checked(std::malloc(n), workload, n);
    std::memset(p, 0x5a, n);
    fill(p, n, reinterpret_cast<uintptr_t>(p) ^ n);
    blocks.push_back({p, n});
    built += n;
  }
  for (size_t i = blocks.size(); i > 1; --i) std::swap(blocks[i - 1], blocks[rng.below(i)]);
  for (const Block& b : blocks) {
    if (!intact(b.p, b.n, reinterpret_cast<uintptr_t>(b.p) ^ b.n))
      fail(workload, "pattern changed", b.p, b.n);
    std::free(b.p);
  }
  blocks.clear();
}

// ---------------------------------------------------------------------------------------------
// Time.

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// rdtsc fenced on both sides: one call costs ~10 ns here, much less than clock_gettime, so single
// allocator calls can be timed. The TSC is invariant on this CPU (constant_tsc, nonstop_tsc).
inline uint64_t ticks() {
  _mm_lfence();
  const uint64_t t = __rdtsc();
  _mm_lfence();
  return t;
}

// Nanoseconds per TSC tick, measured against the steady clock over ~20 ms.
inline double ns_per_tick() {
  static double cached = 0;
  if (cached > 0) return cached;
  const double t0 = now_s();
  const uint64_t k0 = ticks();
  while (now_s() - t0 < 0.02) {
  }
  const double t1 = now_s();
  const uint64_t k1 = ticks();
  cached = (t1 - t0) * 1e9 / static_cast<double>(k1 - k0);
  return cached;
}

// Sampled latencies in ticks. Reserve up front so recording never allocates inside a timed call.
struct Latency {
  std::vector<uint32_t> samples;
  explicit Latency(size_t expected) { samples.reserve(expected + 16); }
  void add(uint64_t dt) {
    if (samples.size() < samples.capacity()) {
      samples.push_back(static_cast<uint32_t>(std::min<uint64_t>(dt, UINT32_MAX)));
    }
  }
  void merge(const Latency& other) {
    samples.insert(samples.end(), other.samples.begin(), other.samples.end());
  }
  // Prints p50, p99 and p99.9 in ns as metrics <prefix>_p50 ...
  void report(const char* workload, const std::string& case_name, int threads, const char* prefix) {
    if (samples.empty()) return;
    std::sort(samples.begin(), samples.end());
    const double k = ns_per_tick();
    const struct {
      const char* name;
      double q;
    } qs[] = {{"p50", 0.50}, {"p99", 0.99}, {"p999", 0.999}};
    for (const auto& q : qs) {
      const size_t i = std::min(samples.size() - 1, static_cast<size_t>(q.q * samples.size()));
      const std::string metric = std::string(prefix) + "_" + q.name;
      result(workload, case_name, threads, metric.c_str(), samples[i] * k, "ns");
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Memory.

// Peak resident set of this process image, from VmHWM in /proc/self/status. Not ru_maxrss: that
// one starts at the high-water mark of whatever process forked and exec'd us (a python3 runner
// would add its own ~15 MiB to every number).
inline long peak_rss_kib() {
  char buf[4096] = {};
  const int fd = open("/proc/self/status", O_RDONLY);
  if (fd < 0) return -1;
  const ssize_t got = read(fd, buf, sizeof buf - 1);
  close(fd);
  const char* line = got > 0 ? std::strstr(buf, "VmHWM:") : nullptr;
  return line != nullptr ? std::atol(line + 6) : -1;
}

inline long minor_faults() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

// Resident now, from /proc/self/statm (second field, pages). Read with read(2), not stdio, so the
// reading itself does not allocate.
inline long rss_now_kib() {
  char buf[128] = {};
  const int fd = open("/proc/self/statm", O_RDONLY);
  if (fd < 0) return -1;
  const ssize_t got = read(fd, buf, sizeof buf - 1);
  close(fd);
  long size = 0, resident = 0;
  if (got <= 0 || std::sscanf(buf, "%ld %ld", &size, &resident) != 2) return -1;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

// The common tail of every binary: peak RSS, and which library actually answers `malloc`, so the
// runner can refuse a run where LD_PRELOAD was silently ignored.
inline void finish(const char* workload, const std::string& case_name, int threads) {
  result(workload, case_name, threads, "peak_rss", static_cast<double>(peak_rss_kib()), "KiB");
  Dl_info info{};
  void* sym = dlsym(RTLD_DEFAULT, "malloc");
  if (sym != nullptr && dladdr(sym, &info) != 0 && info.dli_fname != nullptr) {
    std::printf("INFO malloc_from=%s\n", info.dli_fname);
  }
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------------------------
// A bounded single-producer single-consumer ring of pointers. Lock-free, so the cross-thread
// workloads measure the allocator rather than a mutex. A full or empty ring yields the CPU: this
// machine has 2 cores and the 4-thread cases oversubscribe them.

class SpscRing {
 public:
  explicit SpscRing(size_t capacity_pow2) : mask_(capacity_pow2 - 1), slots_(capacity_pow2) {}

  bool try_push(void* p) {
    const size_t h = head_.load(std::memory_order_relaxed);
    if (h - tail_.load(std::memory_order_acquire) > mask_) return false;
    slots_[h & mask_] = p;
    head_.store(h + 1, std::memory_order_release);
    return true;
  }
  void push(void* p) {
    while (!try_push(p)) std::this_thread::yield();
  }
  void* try_pop() {
    const size_t t = tail_.load(std::memory_order_relaxed);
    if (t == head_.load(std::memory_order_acquire)) return nullptr;
    void* p = slots_[t & mask_];
    tail_.store(t + 1, std::memory_order_release);
    return p;
  }

 private:
  const size_t mask_;
  std::vector<void*> slots_;
  alignas(64) std::atomic<size_t> head_{0};
  alignas(64) std::atomic<size_t> tail_{0};
};

}  // namespace bench
