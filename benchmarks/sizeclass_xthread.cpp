// sizeclass_xthread: threads in a ring each allocate blocks of every size class from 16 B to
// 32 KiB (four sizes per doubling) and pass them to the next thread, which frees them while
// allocating its own; stresses remote frees across all classes at once and reports per-call
// latency percentiles of malloc and free (one call in 8 timed with rdtsc).
//
//   sizeclass_xthread threads=T [rounds=N] [--smoke] [scale=F]
#include "bench_common.h"

namespace {

constexpr const char* kName = "sizeclass_xthread";
constexpr int kBatch = 8;  // blocks per class per round: passes a burst, not a single block
constexpr long kSampleEvery = 8;
constexpr size_t kMaxSize = 32768;

std::vector<size_t> size_classes() {
  std::vector<size_t> v;
  for (size_t base = 16; base < kMaxSize; base *= 2) {
    for (size_t q = 0; q < 4; ++q) v.push_back(base + q * base / 4);
  }
  v.push_back(kMaxSize);
  return v;
}

struct Worker {
  bench::SpscRing inbox{4096};
  bench::Latency lat_malloc{0};
  bench::Latency lat_free{0};
  long received = 0;
  long freed_calls = 0;

  void drain() {
    while (void* p = inbox.try_pop()) {
      const auto* w = static_cast<const uint64_t*>(p);
      const size_t n = w[0];
      if (n < 16 || n > kMaxSize) bench::fail(kName, "size header changed", p, n);
      if (!bench::intact(w + 2, n - 16, w[1])) bench::fail(kName, "pattern changed", p, n);
      if (++freed_calls % kSampleEvery == 0) {
        const uint64_t a = bench::ticks();
        std::free(p);
        lat_free.add(bench::ticks() - a);
      } else {
        std::free(p);
      }
      ++received;
    }
  }
};

void run_worker(std::vector<std::unique_ptr<Worker>>& workers, int me, long rounds,
                const std::vector<size_t>& classes) {
  Worker& self = *workers[static_cast<size_t>(me)];
  Worker& next = *workers[(static_cast<size_t>(me) + 1) % workers.size()];
  const long expected = rounds * static_cast<long>(classes.size()) * kBatch;
  long allocs = 0;
  for (long r = 0; r < rounds; ++r) {
    for (size_t n : classes) {
      for (int b = 0; b < kBatch; ++b) {
        void* p;
        if (++allocs % kSampleEvery == 0) {
          const uint64_t a = bench::ticks();
          p = std::malloc(n);
          self.lat_malloc.add(bench::ticks() - a);
        } else {
          p = std::malloc(n);
        }
        bench::checked(p, kName, n);
        auto* w = static_cast<uint64_t*>(p);
        w[0] = n;
        w[1] = static_cast<uint64_t>(allocs) * 2 + static_cast<uint64_t>(me);
        bench::fill(w + 2, n - 16, w[1]);
        // A full inbox next door: free our own incoming blocks meanwhile, or both could wait
        // forever.
        while (!next.inbox.try_push(p)) {
          self.drain();
          std::this_thread::yield();
        }
      }
      self.drain();
    }
  }
  while (self.received < expected) {
    self.drain();
    std::this_thread::yield();
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const int threads = static_cast<int>(args.integer("threads", 2, 1, 256));
  const long rounds = args.count("rounds", 1200, 50);
  args.check_all_known();
  const std::vector<size_t> classes = size_classes();
  const long per_thread = rounds * static_cast<long>(classes.size()) * kBatch;

  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < threads; ++t) {
    workers.push_back(std::make_unique<Worker>());
    workers.back()->lat_malloc.samples.reserve(static_cast<size_t>(per_thread / kSampleEvery) + 16);
    workers.back()->lat_free.samples.reserve(static_cast<size_t>(per_thread / kSampleEvery) + 16);
  }
  (void)bench::ns_per_tick();

  const double t0 = bench::now_s();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back(run_worker, std::ref(workers), t, rounds, std::cref(classes));
  for (auto& t : pool) t.join();
  const double dt = bench::now_s() - t0;

  bench::Latency all_malloc(0), all_free(0);
  for (auto& w : workers) {
    all_malloc.merge(w->lat_malloc);
    all_free.merge(w->lat_free);
  }
  const std::string case_name = "16B-32KiB";
  bench::result(kName, case_name, threads, "ops_per_s",
                static_cast<double>(per_thread * threads) / dt, "blocks/s");
  bench::result(kName, case_name, threads, "time", dt, "s");
  all_malloc.report(kName, case_name, threads, "malloc");
  all_free.report(kName, case_name, threads, "free");
  bench::finish(kName, case_name, threads);
  return 0;
}
