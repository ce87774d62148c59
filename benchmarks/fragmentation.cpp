// fragmentation: allocate a mixed population (80% 16-256 B, 18% 256 B-4 KiB, 2% 4-64 KiB), free a
// random 90% of it, then read resident memory from /proc/self/statm; stresses how well freed
// memory is returned or reused when the survivors pin pages (scattered live blocks).
//
//   fragmentation [objects=N] [keep_percent=P] [--smoke] [scale=F]
#include "bench_common.h"

namespace {

constexpr const char* kName = "fragmentation";

size_t draw_size(bench::Rng& rng) {
  const uint64_t pick = rng.below(100);
  if (pick < 80) return bench::log_uniform(rng, 16, 256);
  if (pick < 98) return bench::log_uniform(rng, 257, 4096);
  return bench::log_uniform(rng, 4097, 65536);
}

struct Block {
  void* p;
  size_t n;
};

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const long objects = args.count("objects", 400'000, 20'000);
  const long keep_percent = args.integer("keep_percent", 10, 0, 100);
  args.check_all_known();

  std::vector<Block> blocks(static_cast<size_t>(objects));
  std::vector<size_t> order(blocks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  bench::Rng rng(9);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);
  const long rss_base = bench::rss_now_kib();

  const double t0 = bench::now_s();
  for (auto& b : blocks) {
    b.n = draw_size(rng);
    b.p = bench::checked(std::malloc(b.n), kName, b.n);
    bench::fill(b.p, b.n, reinterpret_cast<uintptr_t>(&b));
  }
  const long rss_full = bench::rss_now_kib();
  // Free in random order, so the survivors end up scattered over the heap's pages.
  double live_bytes = 0;
  for (size_t i : order) {
    Block& b = blocks[i];
    if (!bench::intact(b.p, b.n, reinterpret_cast<uintptr_t>(&b)))
      bench::fail(kName, "pattern changed", b.p, b.n);
    if (static_cast<long>(rng.below(100)) < keep_percent) {
      live_bytes += static_cast<double>(b.n);
    } else {
      std::free(b.p);
      b.p = nullptr;
    }
  }
  const double dt = bench::now_s() - t0;
  const long rss_after_free = bench::rss_now_kib();
  for (auto& b : blocks) {
    if (b.p == nullptr) continue;
    if (!bench::intact(b.p, b.n, reinterpret_cast<uintptr_t>(&b)))
      bench::fail(kName, "pattern changed", b.p, b.n);
    std::free(b.p);
  }

  const std::string case_name = "keep=" + std::to_string(keep_percent) + "%";
  const double live_kib = live_bytes / 1024;
  bench::result(kName, case_name, 1, "time", dt, "s");
  bench::result(kName, case_name, 1, "rss_full", static_cast<double>(rss_full - rss_base), "KiB");
  bench::result(kName, case_name, 1, "rss_after_free",
                static_cast<double>(rss_after_free - rss_base), "KiB");
  bench::result(kName, case_name, 1, "live", live_kib, "KiB");
  // Resident per live byte after the frees: 1.0 would be perfect return of freed memory.
  bench::result(kName, case_name, 1, "rss_per_live",
                static_cast<double>(rss_after_free - rss_base) / live_kib, "ratio");
  bench::finish(kName, case_name, 1);
  return 0;
}
