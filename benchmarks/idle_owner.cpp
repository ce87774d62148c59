// idle_owner: the main thread builds a population of small blocks (16 B-1 KiB, log-uniform, every
// byte written) and then only waits, as a loader does once its data is handed over; a worker
// checks and frees all of it, does `pause_ms` of other work, then builds a population of its own
// of the same sizes, checks and frees it. Stresses whether memory freed for a thread that stopped
// allocating serves a thread that goes on allocating, or stays with the sleeping thread while the
// worker takes new memory. Reports the resident KiB above the start-up baseline once the worker
// has built its population, the time of the worker's build, and peak RSS.
//
//   idle_owner [live_kib=K] [pause_ms=N] [--smoke] [scale=F]
#include <unistd.h>

#include "bench_common.h"

namespace {

constexpr const char* kName = "idle_owner";
constexpr size_t kMaxSize = 1024;

std::vector<void*> build(bench::Rng& rng, size_t bytes, uint64_t tag) {
  std::vector<void*> blocks;
  for (size_t built = 0; built < bytes;) {
    const size_t n = bench::log_uniform(rng, 16, kMaxSize);
    blocks.push_back(bench::make_block(kName, n, tag + blocks.size()));
    built += n;
  }
  return blocks;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const long live_kib = args.count("live_kib", 131072, 1024);
  const long pause_ms = args.integer("pause_ms", 100, 0, 600000);
  args.check_all_known();

  const long rss_base = bench::rss_now_kib();
  bench::Rng rng(7);
  std::vector<void*> loaded = build(rng, static_cast<size_t>(live_kib) * 1024, 1);
  double build_s = 0;
  long rss_built = 0;
  std::thread worker([&] {
    for (void* p : loaded) bench::check_and_free(kName, p, kMaxSize);
    usleep(static_cast<useconds_t>(pause_ms) * 1000);
    bench::Rng again(7);  // the same sizes
    const double t0 = bench::now_s();
    std::vector<void*> own = build(again, static_cast<size_t>(live_kib) * 1024, 2);
    build_s = bench::now_s() - t0;
    rss_built = bench::rss_now_kib() - rss_base;
    for (void* p : own) bench::check_and_free(kName, p, kMaxSize);
  });
  worker.join();  // the main thread allocates nothing meanwhile

  bench::result(kName, "load+rebuild", 2, "time", build_s, "s");
  bench::result(kName, "load+rebuild", 2, "rss_built", static_cast<double>(rss_built), "KiB");
  bench::finish(kName, "load+rebuild", 1);
  return 0;
}
