// The in-app workload of the browser tests (web/tests/browser.mjs): livealloc replaces malloc in
// this program (LIVEALLOC_OVERRIDE) and memlive::start() serves it from inside, so memlive's own
// threads (civetweb's, the history sampler) allocate through livealloc and take slots of this
// process next to the program's, labelled "memlive" in the snapshots.
//
// The program's threads: main and three named threads, `app-0` .. `app-2`, that keep a few blocks
// each and hold still (parked). Prints "ready <pid> <port>" once they have allocated; stops the
// server and exits at end of input.
#define LIVEALLOC_OVERRIDE  // in exactly one .cpp file of the program
#include <livealloc.h>
#include <memlive.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

int main() {
  memlive::options o;
  o.port = 0;  // any free port: the test reads it from the "ready" line
  o.quiet = true;
  const memlive::status st = memlive::start(o);
  if (!st) {
    std::fprintf(stderr, "web_inapp: memlive::start failed: %s\n", st.message.c_str());
    return 1;
  }
  std::mutex m;
  std::condition_variable cv;
  int ready = 0;
  bool stop = false;
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      const std::string name = "app-" + std::to_string(i);
      pthread_setname_np(pthread_self(), name.c_str());  // before its first allocation
      std::vector<std::unique_ptr<char[]>> kept;
      for (int k = 0; k < 100; ++k) kept.emplace_back(new char[64]);
      std::unique_lock<std::mutex> lock(m);
      ++ready;
      cv.notify_all();
      cv.wait(lock, [&] { return stop; });
    });
  }
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return ready == 3; });
  }
  std::printf("ready %d %d\n", static_cast<int>(getpid()), st.port);
  std::fflush(stdout);
  char buf[256];
  while (std::fgets(buf, sizeof buf, stdin)) {
  }
  {
    std::lock_guard<std::mutex> lock(m);
    stop = true;
  }
  cv.notify_all();
  for (std::thread& t : threads) t.join();
  memlive::stop();
  return 0;
}
