// fastpath: one thread frees and allocates in a ring of 64 live blocks of one size (16 B..64 KiB)
// or of random mixed sizes; stresses the thread-cache fast path and reports throughput plus the
// latency distribution of single malloc and free calls (one call in 64 timed with rdtsc).
//
//   fastpath size=64|mixed [iters=N] [--smoke] [scale=F]
#include "bench_common.h"

namespace {

constexpr const char* kName = "fastpath";
constexpr size_t kWindow = 64;  // live blocks: enough to leave the one-slot "same pointer" case
constexpr size_t kSizeTable = 4096;  // pre-drawn sizes keep the RNG out of the timed loop
constexpr long kSampleEvery = 64;    // timing every call would double the cost of a 20 ns call

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  // size=mixed, or one size from 16 bytes (the pattern's header) to 1 MiB.
  const bool mixed = args.str("size", "64") == "mixed";
  const size_t fixed = mixed ? 0 : static_cast<size_t>(args.integer("size", 64, 16, 1 << 20));
  // Mixed sizes leave the fast path often (glibc: ~8x slower per call), so fewer iterations.
  const long full = mixed ? 5'000'000 : 15'000'000;
  const long iters = args.count("iters", full, 100'000);
  args.check_all_known();
  const std::string case_name = "size=" + (mixed ? std::string("mixed") : std::to_string(fixed));

  std::vector<size_t> sizes(kSizeTable);
  bench::Rng rng(42);
  for (auto& s : sizes) s = mixed ? bench::log_uniform(rng, 16, 65536) : fixed;

  struct Slot {
    void* p;
    size_t n;
    uint64_t tag;
  };
  std::vector<Slot> ring(kWindow, Slot{nullptr, 0, 0});
  bench::Latency lat_malloc(static_cast<size_t>(iters / kSampleEvery));
  bench::Latency lat_free(static_cast<size_t>(iters / kSampleEvery));
  (void)bench::ns_per_tick();  // calibrate before the clock starts

  const double t0 = bench::now_s();
  for (long i = 0; i < iters; ++i) {
    Slot& s = ring[static_cast<size_t>(i) % kWindow];
    const size_t n = sizes[static_cast<size_t>(i) % kSizeTable];
    const bool sample = i % kSampleEvery == 0;
    if (s.p != nullptr) {
      if (!bench::intact(s.p, s.n, s.tag)) bench::fail(kName, "pattern changed", s.p, s.n);
      if (sample) {
        const uint64_t a = bench::ticks();
        std::free(s.p);
        lat_free.add(bench::ticks() - a);
      } else {
        std::free(s.p);
      }
    }
    void* p;
    if (sample) {
      const uint64_t a = bench::ticks();
      p = std::malloc(n);
      lat_malloc.add(bench::ticks() - a);
    } else {
      p = std::malloc(n);
    }
    bench::checked(p, kName, n);
    bench::fill(p, n, static_cast<uint64_t>(i));
    bench::escape(p);
    s = Slot{p, n, static_cast<uint64_t>(i)};
  }
  const double dt = bench::now_s() - t0;

  for (Slot& s : ring) {
    if (s.p != nullptr && !bench::intact(s.p, s.n, s.tag)) bench::fail(kName, "pattern changed");
    std::free(s.p);
  }

  bench::result(kName, case_name, 1, "ops_per_s", static_cast<double>(iters) / dt, "pairs/s");
  bench::result(kName, case_name, 1, "time", dt, "s");
  lat_malloc.report(kName, case_name, 1, "malloc");
  lat_free.report(kName, case_name, 1, "free");
  // The cost of the two rdtsc reads themselves, included in every latency above.
  std::vector<uint64_t> overhead(4096);
  for (auto& o : overhead) {
    const uint64_t a = bench::ticks();
    o = bench::ticks() - a;
  }
  std::sort(overhead.begin(), overhead.end());
  bench::result(kName, case_name, 1, "timer_overhead",
                static_cast<double>(overhead[overhead.size() / 2]) * bench::ns_per_tick(), "ns");
  bench::finish(kName, case_name, 1);
  return 0;
}
