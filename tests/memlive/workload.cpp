// A workload with known allocations for the memlive command tests (tests/memlive/cli_test.py).
//
//   memlive_workload name:size:count:frees [name:size:count:frees ...]
//
// Publishes its telemetry segment (livealloc::telemetry::enable()), then runs one thread per
// distinct name (pthread_setname_np before its first allocation): for each of its entries the
// thread allocates `count` blocks of `size` bytes with livealloc::allocate and frees the first
// `frees` of them. A thread named "ticker" allocates and frees 9 blocks of 256 KiB every 5 ms so
// that the allocator reaches a slow path and validates tuning requests (its counts are not part
// of any plan). When every planned allocation is done it prints "ready <pid>"; it exits cleanly
// (unlinking its segment) at end of input or on a line "quit".
#include <livealloc.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

struct entry {
  std::size_t size = 0, count = 0, frees = 0;
};
struct plan {
  std::string name;
  std::vector<entry> entries;
};

std::mutex g_mutex;
std::condition_variable g_cv;
bool g_stop = false;
std::atomic<int> g_done{0};

void wait_stop() {
  std::unique_lock<std::mutex> lock(g_mutex);
  g_cv.wait(lock, [] { return g_stop; });
}

void worker(const plan& p) {
  if (pthread_setname_np(pthread_self(), p.name.c_str()) != 0) {
    std::fprintf(stderr, "workload: cannot name a thread '%s'\n", p.name.c_str());
    std::exit(1);
  }
  std::vector<void*> kept;  // std::vector uses the C library's malloc, not livealloc
  for (const entry& e : p.entries) {
    std::vector<void*> blocks;
    for (std::size_t i = 0; i < e.count; ++i) {
      void* b = livealloc::allocate(e.size);
      if (!b) {
        std::fprintf(stderr, "workload: allocation of %zu bytes failed\n", e.size);
        std::exit(1);
      }
      static_cast<char*>(b)[0] = 1;
      blocks.push_back(b);
    }
    for (std::size_t i = 0; i < blocks.size(); ++i)
      if (i < e.frees)
        livealloc::deallocate(blocks[i]);
      else
        kept.push_back(blocks[i]);
  }
  ++g_done;
  wait_stop();
  for (void* b : kept) livealloc::deallocate(b);
}

void ticker() {
  pthread_setname_np(pthread_self(), "ticker");
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(g_mutex);
      if (g_cv.wait_for(lock, std::chrono::milliseconds(5), [] { return g_stop; })) return;
    }
    void* b[9];
    for (void*& p : b) p = livealloc::allocate(256 * 1024);
    for (void* p : b) livealloc::deallocate(p);
  }
}

bool parse_entry(const std::string& arg, std::vector<plan>* plans) {
  // name:size:count:frees, split from the right so a name may hold ':'.
  std::size_t c3 = arg.rfind(':');
  std::size_t c2 = c3 == std::string::npos || c3 == 0 ? std::string::npos : arg.rfind(':', c3 - 1);
  std::size_t c1 = c2 == std::string::npos || c2 == 0 ? std::string::npos : arg.rfind(':', c2 - 1);
  if (c1 == std::string::npos || c1 == 0) return false;
  entry e;
  e.size = std::strtoull(arg.substr(c1 + 1, c2 - c1 - 1).c_str(), nullptr, 10);
  e.count = std::strtoull(arg.substr(c2 + 1, c3 - c2 - 1).c_str(), nullptr, 10);
  e.frees = std::strtoull(arg.substr(c3 + 1).c_str(), nullptr, 10);
  std::string name = arg.substr(0, c1);
  if (e.size == 0 || e.frees > e.count || name.size() > 15 || name == "ticker") return false;
  for (plan& p : *plans)
    if (p.name == name) return p.entries.push_back(e), true;
  plans->push_back({name, {e}});
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<plan> plans;
  for (int i = 1; i < argc; ++i)
    if (!parse_entry(argv[i], &plans)) {
      std::fprintf(stderr, "workload: bad entry '%s' (name:size:count:frees)\n", argv[i]);
      return 2;
    }
  if (int err = livealloc::telemetry::enable(); err != 0) {
    std::fprintf(stderr, "workload: telemetry::enable() failed: errno %d\n", err);
    return 1;
  }
  std::vector<std::thread> threads;
  for (const plan& p : plans) threads.emplace_back(worker, std::cref(p));
  threads.emplace_back(ticker);
  while (g_done.load() < static_cast<int>(plans.size()))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::printf("ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
  }
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_stop = true;
  }
  g_cv.notify_all();
  for (std::thread& t : threads) t.join();
  return 0;
}
