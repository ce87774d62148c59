// custom_allocator: a program with its own allocator (a per-thread pool of fixed-size blocks
// carved from malloc'd chunks) that reports to memlive through the capture hooks. livealloc is not
// the program's malloc here; memlive::start() serves what the hooks counted.
//
//   example_custom_allocator [--port P]   serves at http://127.0.0.1:P/ (8080) until Ctrl-C
//   example_custom_allocator --smoke      port 0, a few rounds, then checks memlive's numbers
//                                         against the pools' own tallies; exit 0 when they agree
#include <memlive.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

// A pool for one thread: blocks of 16 bytes to 4 KiB in power-of-two slots, each slot size with
// its own free list, carved from 64 KiB chunks; bigger requests go to malloc. Not thread-safe on
// purpose: each thread owns one. The hooks see what the program asked for (`size`), not the slot.
class pool {
 public:
  struct tally {  // the pool's own count, to check memlive's against
    std::uint64_t allocs = 0, frees = 0, requested = 0;
  };

  pool() = default;
  pool(const pool&) = delete;
  pool& operator=(const pool&) = delete;
  ~pool() {
    for (void* c : chunks_) std::free(c);
  }

  void* allocate(std::size_t size) {
    void* p = nullptr;
    const int s = slot_of(size);
    if (s < 0) {
      p = std::malloc(size);
    } else {
      if (!free_[s]) refill(s);
      free_block* b = free_[s];
      if (b) free_[s] = b->next;
      p = b;
    }
    if (!p) return nullptr;
    memlive::on_alloc(p, size);  // the hook: counted in the calling thread's telemetry slot
    ++counts_.allocs;
    counts_.requested += size;
    return p;
  }

  void deallocate(void* p, std::size_t size) {
    if (!p) return;
    memlive::on_free(p, size);  // the same size as at allocate: it decides the class
    ++counts_.frees;
    const int s = slot_of(size);
    if (s < 0) return std::free(p);
    auto* b = static_cast<free_block*>(p);
    b->next = free_[s];
    free_[s] = b;
  }

  const tally& counts() const { return counts_; }

 private:
  struct free_block {
    free_block* next;
  };
  static constexpr int kSlots = 9;  // 16, 32, ..., 4096
  static constexpr std::size_t kChunk = 64 * 1024;

  static int slot_of(std::size_t size) {
    std::size_t s = 16;
    for (int i = 0; i < kSlots; ++i, s *= 2)
      if (size <= s) return i;
    return -1;
  }
  // Carves a new chunk into blocks of slot s (the chunk's own memory is not a program
  // allocation: it is not reported).
  void refill(int s) {
    const std::size_t block = std::size_t(16) << s;
    auto* chunk = static_cast<unsigned char*>(std::malloc(kChunk));
    if (!chunk) return;
    chunks_.push_back(chunk);
    for (std::size_t off = 0; off + block <= kChunk; off += block) {
      auto* b = reinterpret_cast<free_block*>(chunk + off);
      b->next = free_[s];
      free_[s] = b;
    }
  }

  free_block* free_[kSlots] = {};
  std::vector<void*> chunks_;
  tally counts_;
};

// One kind of work: a thread named `name` that keeps up to `keep` blocks of `size` bytes,
// replacing `churn` of them per round.
struct job {
  const char* name;
  std::size_t size, keep, churn;
};
constexpr job kJobs[] = {
    {"parser", 48, 2000, 500},     // small nodes, churned a lot
    {"cache", 1000, 300, 30},      // mid-size entries, kept long
    {"images", 512 * 1024, 4, 1},  // large buffers: class 0 in the telemetry
};

std::atomic<bool> g_quit{false};

struct worker_state {
  pool::tally final_counts;
  std::uint64_t live = 0;
  std::atomic<bool> done{false};
};

// Runs `rounds` rounds (0: until g_quit), then reports and waits for g_quit keeping its blocks
// live, so that the main thread can compare them with memlive's view.
void work(const job& j, int rounds, worker_state* out) {
  pthread_setname_np(pthread_self(), j.name);  // before the first hook: the slot's name
  pool p;
  std::vector<void*> kept;  // std::vector uses the C++ library's allocator: not reported
  kept.reserve(j.keep);
  std::size_t next = 0;
  for (int r = 0; (rounds == 0 || r < rounds) && !g_quit.load(); ++r) {
    while (kept.size() < j.keep) kept.push_back(p.allocate(j.size));
    for (std::size_t i = 0; i < j.churn; ++i, next = (next + 1) % kept.size()) {
      p.deallocate(kept[next], j.size);
      kept[next] = p.allocate(j.size);
    }
    if (rounds == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  out->final_counts = p.counts();
  out->live = kept.size();
  out->done = true;
  while (!g_quit.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  for (void* b : kept) p.deallocate(b, j.size);
}

// memlive's snapshot of each worker against the pool's tally: allocs, frees, requested bytes
// and live blocks summed over the thread's classes; and memlive's own threads not counted.
bool check(const std::vector<worker_state>& states) {
  livealloc::reader::snapshot s;
  std::string err;
  if (!memlive::take_snapshot(&s, &err)) {
    std::fprintf(stderr, "custom_allocator: no snapshot: %s\n", err.c_str());
    return false;
  }
  namespace tl = livealloc::telemetry;
  bool ok = true;
  for (std::size_t i = 0; i < states.size(); ++i) {
    const pool::tally& want = states[i].final_counts;
    const livealloc::reader::thread_view* t = nullptr;
    for (const auto& v : s.threads)
      if (v.name == kJobs[i].name) t = &v;
    if (!t) {
      std::fprintf(stderr, "custom_allocator: thread %s missing\n", kJobs[i].name);
      ok = false;
      continue;
    }
    const std::uint64_t allocs = t->total(tl::c_allocs), frees = t->total(tl::c_frees);
    const std::uint64_t requested = t->total(tl::c_requested_bytes);
    const bool same = allocs == want.allocs && frees == want.frees && requested == want.requested &&
                      allocs - frees == states[i].live;
    std::printf("custom_allocator: %-7s allocs %llu frees %llu requested %llu live %llu: %s\n",
                kJobs[i].name, static_cast<unsigned long long>(allocs),
                static_cast<unsigned long long>(frees), static_cast<unsigned long long>(requested),
                static_cast<unsigned long long>(allocs - frees),
                same ? "matches the pool" : "DIFFERS from the pool");
    ok = ok && same;
  }
  for (const auto& v : s.threads)
    if (memlive::is_memlive_thread(s, v)) {
      std::fprintf(stderr, "custom_allocator: memlive's thread %s was counted\n", v.name.c_str());
      ok = false;
    }
  // Large blocks (class 0) also count their bytes in the process total.
  const std::uint64_t large = kJobs[2].keep * kJobs[2].size;
  if (s.large_bytes != large) {
    std::fprintf(stderr, "custom_allocator: large_bytes %llu, want %llu\n",
                 static_cast<unsigned long long>(s.large_bytes),
                 static_cast<unsigned long long>(large));
    ok = false;
  }
  return ok;
}

// A whole decimal number from lo to hi: `--port abc` is an error, not port 0.
bool parse_number(const char* text, long lo, long hi, long* out) {
  const char* end = text + std::strlen(text);
  long v = 0;
  const std::from_chars_result r = std::from_chars(text, end, v);
  if (r.ec != std::errc() || r.ptr != end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bool smoke = false;
  memlive::options opts;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: %s [--port P] [--smoke]\n", argv[0]);
      return 0;
    } else if (std::strcmp(argv[i], "--smoke") == 0) {
      smoke = true;
      opts.port = 0;
    } else if (std::strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
      long port = 0;
      if (!parse_number(argv[++i], 0, 65535, &port)) {
        std::fprintf(stderr, "custom_allocator: --port %s: not a port from 0 to 65535\n", argv[i]);
        return 2;
      }
      opts.port = static_cast<int>(port);
    } else {
      std::fprintf(stderr, "usage: %s [--port P] [--smoke]\n", argv[0]);
      return 2;
    }
  }
  const memlive::status st = memlive::start(opts);  // prints the URL
  if (!st) {
    std::fprintf(stderr, "custom_allocator: %s\n", st.message.c_str());
    return 1;
  }
  if (!smoke) {
    signal(SIGINT, [](int) { g_quit = true; });
    signal(SIGTERM, [](int) { g_quit = true; });
  }
  std::vector<worker_state> states(std::size(kJobs));
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < std::size(kJobs); ++i)
    threads.emplace_back(work, kJobs[i], smoke ? 20 : 0, &states[i]);
  bool ok = true;
  if (smoke) {
    for (const worker_state& w : states)
      while (!w.done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ok = check(states);
    g_quit = true;
  }
  for (std::thread& t : threads) t.join();
  memlive::stop();
  if (smoke) std::printf("custom_allocator: smoke %s\n", ok ? "passed" : "FAILED");
  return ok ? 0 : 1;
}
