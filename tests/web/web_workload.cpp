// The workload behind the browser tests (tests/web/browser.mjs): an unmodified program (plain
// malloc/free, no livealloc header) run under `memlive run`, so it uses the preloaded allocator.
//
// Named threads, each doing a fixed amount of work and then holding still, so that the numbers
// the page shows can be compared with /api/snapshot:
//   ingest-0  1000 blocks of 48 B, all kept
//   ingest-1  500 blocks of 1000 B, the first 100 freed
//   worker-0  300 blocks of 4096 B handed to `cache`, which frees them (cross-thread frees)
//   cache     frees what worker-0 hands over
//   ticker    allocates and frees 9 blocks of 256 KiB every 5 ms, for ever, so the allocator
//             reaches a slow path and applies tuning requests
//   swing     holds 64 blocks of 16 KiB (1 MiB) for 200 ms, then none for 200 ms, for ever: its
//             row moves in the thread table sorted by live bytes (the focus test)
// The threads stay alive (parked) after their work. Prints "ready <pid>" once the fixed work is
// done; exits at end of input (or SIGTERM). A line "exec" on its input makes it exec itself: a
// new image under the same pid, whose counters start again (it prints "ready <pid>" again). A
// line "threads N" starts N more threads, crowd-0 ... crowd-N-1, each keeping one block of
// 64 B and parked, and prints "crowd <N>" once they all have. A line "quiet" stops ticker and
// swing allocating (the process then reaches no slow path: tuning requests wait) and prints
// "quiet" once both have; "loud" starts them again.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_quiet{false};
std::atomic<int> g_quiet_threads{0};  // of ticker and swing, those that stopped for g_quiet
std::mutex g_park_mutex;
std::condition_variable g_park_cv;
std::mutex g_mutex;
std::condition_variable g_cv;
std::deque<void*> g_handoff;
bool g_handoff_done = false;
std::atomic<int> g_ready{0};
std::vector<void*> g_kept;  // blocks kept alive by the ingest threads (guarded by g_mutex)

void name(const char* n) {
  if (pthread_setname_np(pthread_self(), n) != 0) {
    std::fprintf(stderr, "web_workload: cannot name a thread %s\n", n);
    std::exit(1);
  }
}

// Done: wait, without allocating, until main says stop.
void park() {
  ++g_ready;
  std::unique_lock<std::mutex> lock(g_park_mutex);
  g_park_cv.wait(lock, [] { return g_stop.load(); });
}

void* must_malloc(std::size_t n) {
  void* p = std::malloc(n);
  if (!p) {
    std::fprintf(stderr, "web_workload: out of memory\n");
    std::exit(1);
  }
  std::memset(p, 0x5a, n);
  return p;
}

void ingest(const char* n, std::size_t size, int count, int frees) {
  name(n);
  std::vector<void*> blocks;
  blocks.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) blocks.push_back(must_malloc(size));
  for (int i = 0; i < frees; ++i) std::free(blocks[static_cast<std::size_t>(i)]);
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_kept.insert(g_kept.end(), blocks.begin() + frees, blocks.end());
  }
  park();
}

void worker() {
  name("worker-0");
  for (int i = 0; i < 300; ++i) {
    void* p = must_malloc(4096);
    std::lock_guard<std::mutex> lock(g_mutex);
    g_handoff.push_back(p);
    g_cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_handoff_done = true;
    g_cv.notify_one();
  }
  park();
}

void cache() {
  name("cache");
  std::unique_lock<std::mutex> lock(g_mutex);
  for (;;) {
    g_cv.wait(lock, [] { return !g_handoff.empty() || g_handoff_done; });
    while (!g_handoff.empty()) {
      void* p = g_handoff.front();
      g_handoff.pop_front();
      std::free(p);
    }
    if (g_handoff_done) break;
  }
  lock.unlock();
  park();
}

// True while g_quiet holds: the caller counts in g_quiet_threads once, and sleeps.
bool quiet(bool* counted) {
  if (!g_quiet.load()) {
    *counted = false;
    return false;
  }
  if (!*counted) ++g_quiet_threads;
  *counted = true;
  usleep(5000);
  return true;
}

void ticker() {
  name("ticker");
  bool counted = false;
  while (!g_stop.load()) {
    if (quiet(&counted)) continue;
    void* p[9];
    for (void*& q : p) q = must_malloc(256 * 1024);
    for (void* q : p) std::free(q);
    usleep(5000);
  }
}

void swing() {
  name("swing");
  bool counted = false;
  while (!g_stop.load()) {
    if (quiet(&counted)) continue;
    void* p[64];
    for (void*& q : p) q = must_malloc(16 * 1024);
    usleep(200000);
    for (void* q : p) std::free(q);
    usleep(200000);
  }
}

}  // namespace

int main(int, char** argv) {
  std::thread t_ticker(ticker);
  std::thread t_swing(swing);
  std::thread t_cache(cache);
  std::thread t_worker(worker);
  std::thread t_in0(ingest, "ingest-0", 48, 1000, 0);
  std::thread t_in1(ingest, "ingest-1", 1000, 500, 100);
  while (g_ready.load() < 4) usleep(1000);
  std::printf("ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  std::vector<std::thread> crowd;
  char buf[256];
  while (std::fgets(buf, sizeof buf, stdin)) {
    int n = 0;
    if (std::sscanf(buf, "threads %d", &n) == 1 && n > 0) {
      const int from = static_cast<int>(crowd.size());
      const int ready = g_ready.load();
      for (int i = from; i < from + n; ++i)
        crowd.emplace_back([i] {
          char label[16];
          std::snprintf(label, sizeof label, "crowd-%d", i);
          name(label);
          void* p = must_malloc(64);
          {
            std::lock_guard<std::mutex> lock(g_mutex);
            g_kept.push_back(p);
          }
          park();
        });
      while (g_ready.load() < ready + n) usleep(1000);
      std::printf("crowd %d\n", n);
      std::fflush(stdout);
    }
    if (std::strcmp(buf, "quiet\n") == 0) {
      g_quiet_threads = 0;
      g_quiet = true;
      while (g_quiet_threads.load() < 2) usleep(1000);
      std::printf("quiet\n");
      std::fflush(stdout);
    }
    if (std::strcmp(buf, "loud\n") == 0) g_quiet = false;
    if (std::strcmp(buf, "exec\n") == 0) {
      execv("/proc/self/exe", argv);
      std::fprintf(stderr, "web_workload: exec failed: %s\n", std::strerror(errno));
      std::exit(1);
    }
  }
  {
    std::lock_guard<std::mutex> lock(g_park_mutex);
    g_stop = true;
  }
  g_park_cv.notify_all();
  for (std::thread* t : {&t_ticker, &t_swing, &t_cache, &t_worker, &t_in0, &t_in1}) t->join();
  for (std::thread& t : crowd) t.join();
  for (void* p : g_kept) std::free(p);
  return 0;
}
