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
// (unlinking its segment) at end of input or on a line "quit". A line "exec PROGRAM ARG..."
// replaces it with PROGRAM (a program without livealloc: its segment stays behind, stale; this
// workload itself: its new image publishes a new segment under the same name). A line "pause"
// stops the ticker: a tuning request then stays pending.
#include <unistd.h>

#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "plan_workload.h"

using namespace plan_workload;

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
  for (const plan& p : plans) threads.emplace_back(worker, p);
  threads.emplace_back(ticker);
  wait_done(static_cast<int>(plans.size()));
  std::printf("ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
    if (line == "pause") g_ticker_paused = true;
    if (line.compare(0, 5, "exec ") != 0) continue;
    std::istringstream words(line.substr(5));
    std::vector<std::string> args;
    for (std::string w; words >> w;) args.push_back(w);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(&a[0]);
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    std::fprintf(stderr, "workload: exec %s failed\n", line.c_str() + 5);
    return 1;
  }
  stop_and_join(&threads);
  return 0;
}
