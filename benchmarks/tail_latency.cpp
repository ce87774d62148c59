// tail_latency: a request thread serves requests (each frees 16 random blocks of its 4,096 live
// ones, 16 B-32 KiB, and allocates and writes their replacements) while a batch thread builds and
// frees 64 MiB of mixed blocks every 300 ms; stresses the worst time of one request when memory
// freed elsewhere goes back to the OS. Reports each request's thread CPU time (p50, p99, p99.99,
// max: CPU time, so that preemption on a busy machine does not count) and requests per second.
//
//   tail_latency [seconds=S] [batch_mib=M] [period_ms=N] [--smoke] [scale=F]
#include <unistd.h>

#include "bench_common.h"

namespace {

constexpr const char* kName = "tail_latency";
constexpr size_t kLive = 4096;
constexpr int kPerRequest = 16;

using bench::Block;

uint64_t thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

Block make(bench::Rng& rng) {
  const size_t n = bench::log_uniform(rng, 16, 32768);
  return {bench::make_block(kName, n, n), n};
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const double seconds = args.num("seconds", args.smoke ? 0.3 : 3.0 * args.scale, 0.01, 3600);
  const long batch_mib = args.integer("batch_mib", args.smoke ? 4 : 64, 1, 16384);
  const long period_ms = args.integer("period_ms", args.smoke ? 20 : 300, 1, 600000);
  args.check_all_known();

  std::atomic<bool> stop{false};
  std::atomic<long> batches{0};
  std::thread batcher([&] {
    bench::Rng rng(3);
    std::vector<Block> blocks;
    while (!stop.load()) {
      bench::build_and_free(kName, rng, static_cast<size_t>(batch_mib) << 20, 65536, blocks);
      batches.fetch_add(1);
      for (long waited = 0; waited < period_ms && !stop.load(); waited += 5)
        usleep(5000);  // idle until the next batch, in steps so the end is not delayed
    }
  });

  bench::Rng rng(7);
  std::vector<Block> live(kLive);
  for (Block& b : live) b = make(rng);
  std::vector<uint32_t> cpu_ns;
  cpu_ns.reserve(static_cast<size_t>(seconds * 2'000'000) + 16);
  const double t0 = bench::now_s();
  const double end = t0 + seconds;
  long requests = 0;
  do {  // at least one round, however short `seconds`
    for (int k = 0; k < 256; ++k, ++requests) {
      const uint64_t c0 = thread_cpu_ns();
      for (int i = 0; i < kPerRequest; ++i) {
        Block& b = live[rng.below(kLive)];
        bench::check_and_free(kName, b.p, b.n);
        b = make(rng);
      }
      const uint64_t c1 = thread_cpu_ns();
      if (cpu_ns.size() < cpu_ns.capacity())
        cpu_ns.push_back(static_cast<uint32_t>(std::min<uint64_t>(c1 - c0, UINT32_MAX)));
    }
  } while (bench::now_s() < end);
  const double dt = bench::now_s() - t0;
  stop.store(true);
  batcher.join();
  for (Block& b : live) bench::check_and_free(kName, b.p, b.n);

  const std::string case_name = std::to_string(batch_mib) + "MiB/" + std::to_string(period_ms) + "ms";
  std::sort(cpu_ns.begin(), cpu_ns.end());
  const struct {
    const char* metric;
    double q;
  } qs[] = {{"request_p50", 0.5}, {"request_p99", 0.99}, {"request_p9999", 0.9999}};
  for (const auto& q : qs) {
    const size_t i = std::min(cpu_ns.size() - 1, static_cast<size_t>(q.q * static_cast<double>(cpu_ns.size())));
    bench::result(kName, case_name, 2, q.metric, cpu_ns[i], "ns");
  }
  bench::result(kName, case_name, 2, "request_max", cpu_ns.back(), "ns");
  bench::result(kName, case_name, 2, "requests_per_s", static_cast<double>(requests) / dt, "1/s");
  bench::result(kName, case_name, 2, "batches", static_cast<double>(batches.load()), "count");
  bench::finish(kName, case_name, 2);
  return 0;
}
