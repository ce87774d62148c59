// memlive::start() inside a multi-threaded livealloc workload, for tests/memlive/http_test.py.
//
//   memlive_http_app [--port P] name:size:count:frees [...]
//
// Enables nothing itself: memlive::start() turns telemetry on. One thread per distinct name
// (named before its first allocation) allocates `count` blocks of `size` bytes with
// livealloc::allocate and frees the first `frees`; a "ticker" thread allocates and frees large
// blocks every 5 ms so the allocator reaches slow paths (validating tuning). Then prints
// "ready <port> <pid>" (or "start-failed <error> <message>" and exits 3) and obeys lines on
// stdin:
//   stop    memlive::stop(), timed: prints "stopped <ms>" (and "port-after-stop <port()>")
//   again   memlive::start() a second time while running: prints "again <error> <message>"
//   second  a second detail::server on the same port: prints "second <error> <message>"
//   alloc NAME SIZE COUNT   a new thread named NAME allocates COUNT blocks of SIZE bytes and
//           keeps them until quit; prints "allocated" when done
//   quit    (or end of input) stops the threads and exits 0
#include <livealloc.h>
#include <memlive.h>
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
  std::string name;
  std::size_t size = 0, count = 0, frees = 0;
};

std::mutex g_mutex;
std::condition_variable g_cv;
bool g_stop = false;
std::atomic<int> g_done{0};

void worker(std::string name, std::vector<entry> plan) {
  pthread_setname_np(pthread_self(), name.c_str());
  std::vector<void*> kept;  // std::vector uses the C library's malloc, not livealloc
  for (const entry& e : plan) {
    std::vector<void*> blocks;
    for (std::size_t i = 0; i < e.count; ++i) {
      void* b = livealloc::allocate(e.size);
      if (!b) std::abort();
      static_cast<char*>(b)[0] = 1;
      blocks.push_back(b);
    }
    for (std::size_t i = 0; i < blocks.size(); ++i)
      (i < e.frees ? livealloc::deallocate(blocks[i]) : kept.push_back(blocks[i]));
  }
  ++g_done;
  std::unique_lock<std::mutex> lock(g_mutex);
  g_cv.wait(lock, [] { return g_stop; });
  lock.unlock();
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

void print_status(const char* what, const memlive::status& st) {
  std::printf("%s %d %s\n", what, static_cast<int>(st.error), st.message.c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  memlive::options opts;
  opts.port = 0;
  std::vector<std::pair<std::string, std::vector<entry>>> plans;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--port" && i + 1 < argc) {
      opts.port = std::atoi(argv[++i]);
      continue;
    }
    entry e;
    const std::size_t c3 = arg.rfind(':'), c2 = arg.rfind(':', c3 - 1), c1 = arg.rfind(':', c2 - 1);
    if (c3 == std::string::npos || c2 == std::string::npos || c1 == std::string::npos || c1 == 0) {
      std::fprintf(stderr, "http_app: bad entry '%s'\n", arg.c_str());
      return 2;
    }
    e.name = arg.substr(0, c1);
    e.size = std::strtoull(arg.substr(c1 + 1, c2 - c1 - 1).c_str(), nullptr, 10);
    e.count = std::strtoull(arg.substr(c2 + 1, c3 - c2 - 1).c_str(), nullptr, 10);
    e.frees = std::strtoull(arg.substr(c3 + 1).c_str(), nullptr, 10);
    bool found = false;
    for (auto& p : plans)
      if (p.first == e.name) p.second.push_back(e), found = true;
    if (!found) plans.push_back({e.name, {e}});
  }

  const memlive::status st = memlive::start(opts);
  if (!st) {
    print_status("start-failed", st);
    return 3;
  }
  std::vector<std::thread> threads;
  for (const auto& p : plans) threads.emplace_back(worker, p.first, p.second);
  threads.emplace_back(ticker);
  while (g_done.load() < static_cast<int>(plans.size()))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::printf("ready %d %d\n", memlive::port(), static_cast<int>(getpid()));
  std::fflush(stdout);

  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
    if (line == "stop") {
      const auto t0 = std::chrono::steady_clock::now();
      memlive::stop();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::printf("stopped %.1f\nport-after-stop %d\n", ms, memlive::port());
    } else if (line.compare(0, 6, "alloc ") == 0) {
      char name[16] = {};
      std::size_t size = 0, count = 0;
      if (std::sscanf(line.c_str() + 6, "%15s %zu %zu", name, &size, &count) != 3) {
        std::printf("bad alloc command\n");
      } else {
        threads.emplace_back(worker, std::string(name),
                             std::vector<entry>{entry{name, size, count, 0}});
        const int want = static_cast<int>(plans.size()) + 1;
        while (g_done.load() < want) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        plans.push_back({name, {}});
        std::printf("allocated\n");
      }
    } else if (line == "again") {
      memlive::options o = opts;
      o.quiet = true;
      print_status("again", memlive::start(o));
    } else if (line == "second") {
      std::string err;
      memlive::detail::server second(livealloc::reader::segment::open_pid(getpid(), &err));
      memlive::options o;
      o.port = memlive::port();
      print_status("second", second.start(o));
    } else {
      std::printf("unknown command '%s'\n", line.c_str());
    }
    std::fflush(stdout);
  }
  memlive::stop();
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_stop = true;
  }
  g_cv.notify_all();
  for (std::thread& t : threads) t.join();
  return 0;
}
