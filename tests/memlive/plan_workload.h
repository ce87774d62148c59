// The planned threads shared by memlive_workload (workload.cpp) and memlive_http_app
// (http_app.cpp): arguments name:size:count:frees, one thread per distinct name that allocates
// `count` blocks of `size` bytes with livealloc::allocate and frees the first `frees`, and a
// "ticker" thread that allocates and frees 9 blocks of 256 KiB every 5 ms so that the allocator
// reaches a slow path and validates tuning requests (its counts are not part of any plan).
#pragma once
#include <livealloc.h>
#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace plan_workload {

struct entry {
  std::size_t size = 0, count = 0, frees = 0;
};
struct plan {
  std::string name;
  std::vector<entry> entries;
};

inline std::mutex g_mutex;
// Never destroyed: in a fork child (http_app's "fork") the parent's threads are copied as
// waiters, and glibc's pthread_cond_destroy at exit would wait for them for good.
inline std::condition_variable& g_cv = *new std::condition_variable;
inline bool g_stop = false;
inline std::atomic<int> g_done{0};  // threads whose plan is done

// Adds one name:size:count:frees argument (split from the right, so a name may hold ':').
inline bool parse_entry(const std::string& arg, std::vector<plan>* plans) {
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

// Runs one plan, counts itself in g_done, keeps its blocks until g_stop.
inline void worker(plan p) {
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
  {
    std::unique_lock<std::mutex> lock(g_mutex);
    g_cv.wait(lock, [] { return g_stop; });
  }
  for (void* b : kept) livealloc::deallocate(b);
}

// Set (by a workload's "pause"): the ticker allocates no more, so nothing reaches a slow path and
// a tuning request stays pending.
inline std::atomic<bool> g_ticker_paused{false};

inline void ticker() {
  pthread_setname_np(pthread_self(), "ticker");
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(g_mutex);
      if (g_cv.wait_for(lock, std::chrono::milliseconds(5), [] { return g_stop; })) return;
    }
    if (g_ticker_paused.load()) continue;
    void* b[9];
    for (void*& p : b) p = livealloc::allocate(256 * 1024);
    for (void* p : b) livealloc::deallocate(p);
  }
}

// Waits until `n` plans are done.
inline void wait_done(int n) {
  while (g_done.load() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// Sets g_stop, wakes every thread and joins them.
inline void stop_and_join(std::vector<std::thread>* threads) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_stop = true;
  }
  g_cv.notify_all();
  for (std::thread& t : *threads) t.join();
}

}  // namespace plan_workload
