// pool_idle: a pool of worker threads each builds a mixed population (16 B-64 KiB, every byte
// written), frees it in random order, three times, then waits without allocating while the main
// thread goes on allocating a little, as a service's event loop does after a burst of work;
// stresses how much freed memory stays resident with threads that stopped allocating. Reports
// resident KiB right after the burst and after `idle_ms` of idling, peak RSS, and the burst's time.
// With main=quiet the main thread sleeps too, so no thread allocates after the burst (a service
// between bursts): what an allocator gives back then it gives back without any call.
//
//   pool_idle [threads=T] [live_kib=K] [idle_ms=N] [main=busy|quiet] [--smoke] [scale=F]
#include <unistd.h>

#include "bench_common.h"

namespace {

constexpr const char* kName = "pool_idle";
constexpr int kRounds = 3;
constexpr size_t kMaxSize = 65536;

// One worker's burst: kRounds times, blocks up to `live_bytes` in all, built and freed.
void burst(int id, size_t live_bytes) {
  bench::Rng rng(static_cast<uint64_t>(id) + 11);
  std::vector<bench::Block> blocks;
  for (int round = 0; round < kRounds; ++round)
    bench::build_and_free(kName, rng, live_bytes, kMaxSize, blocks);
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const int threads = static_cast<int>(args.integer("threads", 16, 1, 256));
  const long live_kib = args.count("live_kib", 8192, 256);
  const long idle_ms = args.integer("idle_ms", args.smoke ? 50 : 1000, 0, 600000);
  static const char* const kMains[] = {"busy", "quiet", nullptr};
  const bool quiet = args.choice("main", "busy", kMains) == "quiet";
  args.check_all_known();

  const long rss_base = bench::rss_now_kib();
  std::atomic<int> done{0};
  std::atomic<bool> stop{false};
  const double t0 = bench::now_s();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      burst(t, static_cast<size_t>(live_kib) * 1024);
      done.fetch_add(1);
      while (!stop.load()) usleep(1000);  // idle: no allocation until the pool is shut down
    });
  }
  while (done.load() < threads) usleep(1000);
  const double dt = bench::now_s() - t0;
  const long rss_done = bench::rss_now_kib();

  // The main thread's event loop: 256 small allocations a millisecond, each checked and freed
  // (none with main=quiet).
  bench::Rng rng(5);
  const double idle_end = bench::now_s() + static_cast<double>(idle_ms) / 1000;
  while (bench::now_s() < idle_end) {
    for (int i = 0; i < (quiet ? 0 : 256); ++i) {
      void* p = bench::make_block(kName, bench::log_uniform(rng, 16, 1024), rng.next());
      bench::check_and_free(kName, p, 1024);
    }
    usleep(1000);
  }
  const long rss_idle = bench::rss_now_kib();
  stop.store(true);
  for (auto& t : pool) t.join();

  const std::string case_name = quiet ? "burst+quiet" : "burst+idle";
  bench::result(kName, case_name, threads, "time", dt, "s");
  bench::result(kName, case_name, threads, "rss_done", static_cast<double>(rss_done - rss_base),
                "KiB");
  bench::result(kName, case_name, threads, "rss_idle", static_cast<double>(rss_idle - rss_base),
                "KiB");
  bench::finish(kName, case_name, threads);
  return 0;
}
