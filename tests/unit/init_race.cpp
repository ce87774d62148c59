// The public calls that read what the process's start writes (the control block's address, the
// process counters, the segment's name), made by several threads at once while another makes the
// process's first allocation: nothing of it may be read before it is written (a data race, which
// the TSan build reports), and an option set meanwhile must be in the control block memlive reads.
// Its own process, since the start happens once. Exit 0 when everything holds.
#include <livealloc.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

namespace {
std::atomic<int> g_ready{0};
std::atomic<bool> g_go{false};
int g_failures = 0;

void wait_for_start() {
  g_ready.fetch_add(1);
  while (!g_go.load(std::memory_order_acquire)) std::this_thread::yield();
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "init_race: FAILED: %s\n", what);
    ++g_failures;
  }
}
}  // namespace

int main() {
  constexpr long long kDelay = 777;  // purge_delay: live, and not its default
  std::vector<std::thread> threads;
  std::atomic<int> set_status{-1};
  std::atomic<int> enable_status{-1};
  threads.emplace_back([] {
    wait_for_start();
    void* volatile p = livealloc::allocate(64);
    livealloc::deallocate(p);
  });
  threads.emplace_back([&] {
    wait_for_start();
    set_status = static_cast<int>(livealloc::set_option("purge_delay", kDelay));
  });
  threads.emplace_back([] {
    wait_for_start();
    (void)livealloc::options_generation();
    (void)livealloc::get_stats();
  });
  threads.emplace_back([&] {
    wait_for_start();
    enable_status = livealloc::telemetry::enable();
  });
  threads.emplace_back([] {
    wait_for_start();
    for (int i = 0; i < 1000; ++i) {
      const char* path = livealloc::telemetry::path();
      if (*path && std::strncmp(path, "/dev/shm/livealloc.", 19) != 0) {
        std::fprintf(stderr, "init_race: FAILED: path() gave \"%s\"\n", path);
        ++g_failures;
        break;
      }
    }
  });
  while (g_ready.load() < static_cast<int>(threads.size())) std::this_thread::yield();
  g_go.store(true, std::memory_order_release);
  for (auto& t : threads) t.join();

  namespace d = livealloc::detail;
  check(set_status.load() == static_cast<int>(livealloc::option_status::ok), "set_option failed");
  check(enable_status.load() == 0, "telemetry::enable() failed");
  long long v = 0;
  check(livealloc::get_option("purge_delay", &v) && v == kDelay, "get_option lost the value");
  livealloc::telemetry::control_block* c = d::g_table.control;
  check(c != nullptr, "no control block");
  if (c) {
    int id = d::find_option("purge_delay", std::strlen("purge_delay"));
    auto* e = livealloc::telemetry::option_at(c, static_cast<unsigned>(id));
    check(e->requested.load() == kDelay, "the control block's requested value is not the one set");
    check(e->effective.load() == kDelay, "the control block's effective value is not the one set");
    check(c->generation.load() == livealloc::options_generation(),
          "the control block's generation is not the options'");
  }
  check(std::strncmp(livealloc::telemetry::path(), "/dev/shm/livealloc.", 19) == 0,
        "enabled, but path() names no segment");
  if (g_failures == 0) std::puts("init_race: ok");
  return g_failures == 0 ? 0 : 1;
}
