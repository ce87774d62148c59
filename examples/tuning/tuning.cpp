// tuning: the three ways to set livealloc's thresholds.
//
//   1. at start, from the environment:   LIVEALLOC_PURGE_DELAY=100 ./tuning
//   2. from code, while running:         livealloc::set_option("page_recycle", 8)
//   3. from outside, while running:      memlive tune --pid N page_recycle=16 remote_batch=64
//
// The program does (2) itself and checks every status set_option can return, publishes its
// telemetry (livealloc::telemetry::enable()) so that memlive can tune it, prints "ready <pid>",
// and then reads commands on stdin:
//   expect NAME VALUE   allocate until livealloc::get_option(NAME) is VALUE (each thread applies a
//                       change at its next slow path), then print "ok NAME=VALUE"
//   show                print the options in effect
//   quit                exit (also at end of input)
// A thread named "ticker" allocates a little every 10 ms so that changes made from outside are
// validated promptly even while the main thread waits for input. Exit 0 unless a check failed.
#define LIVEALLOC_OVERRIDE
#include <livealloc.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

const char* const kNames[] = {"page_recycle", "remote_batch", "large_cache", "purge_delay",
                              "segment_cache"};

void show() {
  for (const char* name : kNames) {
    long long v = 0;
    livealloc::get_option(name, &v);
    std::printf("  %s = %lld\n", name, v);
  }
}

// Allocations that reach the slow path, where the allocator validates and applies changes.
void churn() {
  std::vector<void*> blocks;
  for (int i = 0; i < 9; ++i) blocks.push_back(livealloc::allocate(256 * 1024));
  for (int i = 0; i < 2000; ++i) blocks.push_back(livealloc::allocate(64 + i % 512));
  for (void* p : blocks) livealloc::deallocate(p);
}

int failures = 0;
void expect(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAILED", what);
  failures += !ok;
}

}  // namespace

int main(int argc, char** argv) {
  using livealloc::option_status;
  if (argc > 1 && (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0)) {
    std::printf("usage: [LIVEALLOC_<NAME>=V] %s   (commands on stdin: see examples/tuning)\n",
                argv[0]);
    return 0;
  }
  if (argc > 1) {  // commands come on stdin; the environment sets options at start
    std::fprintf(stderr, "tuning: unexpected argument '%s'; usage: [LIVEALLOC_<NAME>=V] %s\n",
                 argv[1], argv[0]);
    return 2;
  }
  std::printf("tuning: options at start (LIVEALLOC_<NAME> environment variables apply here):\n");
  show();

  // From code. Every change is checked: name, changeable while running, range.
  const std::uint64_t gen = livealloc::options_generation();
  expect(livealloc::set_option("page_recycle", 8) == option_status::ok,
         "set_option(\"page_recycle\", 8) is accepted");
  long long v = 0;
  expect(livealloc::get_option("page_recycle", &v) && v == 8, "get_option reads 8 back");
  expect(livealloc::options_generation() > gen, "the options generation went up");
  expect(livealloc::set_option("page_recycle", 1 << 20) == option_status::out_of_range,
         "page_recycle=1048576 is out_of_range (0 to 4096)");
  expect(livealloc::set_option("no_such_option", 1) == option_status::unknown_name,
         "an unknown name is unknown_name");
  expect(livealloc::set_option("telemetry_slots", 64) == option_status::not_live,
         "telemetry_slots (start-up only) is not_live");
  expect(livealloc::get_option("page_recycle", &v) && v == 8,
         "the rejected changes changed nothing");

  if (int e = livealloc::telemetry::enable(); e != 0) {
    std::printf("FAILED: livealloc::telemetry::enable(): error %d\n", e);
    return 1;
  }
  std::atomic<bool> stop{false};
  std::thread ticker([&] {
    pthread_setname_np(pthread_self(), "ticker");
    while (!stop) {
      churn();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  std::printf("tuning: try: memlive tune --pid %d page_recycle=16 remote_batch=64\n",
              static_cast<int>(getpid()));
  std::printf("ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);

  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd, name;
    long long want = 0;
    in >> cmd;
    if (cmd == "quit") break;
    if (cmd == "show") {
      show();
    } else if (cmd == "expect" && (in >> name >> want)) {
      // No time limit here: the caller's own timeout decides how long is too long.
      while (!livealloc::get_option(name.c_str(), &v) || v != want) churn();
      std::printf("ok %s=%lld\n", name.c_str(), want);
    } else {
      std::printf("tuning: commands: expect NAME VALUE | show | quit\n");
    }
    std::fflush(stdout);
  }
  stop = true;
  ticker.join();
  return failures ? 1 : 0;
}
