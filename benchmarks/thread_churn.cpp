// thread_churn: rounds of 4 short-lived threads that allocate, free most blocks and leave some to
// be freed by the main thread after they exit; stresses thread-heap creation, reclaim and reuse of
// dead threads' heaps. Reports threads/s, peak RSS, and RSS after warm-up vs at the end: the two
// should match (flat), growth means heaps of exited threads are never reused.
//
//   thread_churn [rounds=N] [--smoke] [scale=F]
#include <deque>
#include <mutex>

#include "bench_common.h"

namespace {

constexpr const char* kName = "thread_churn";
constexpr int kThreadsPerRound = 4;
constexpr int kBlocksPerThread = 256;
constexpr int kKeepPerThread = 32;   // handed to the main thread, freed after the owner exits
constexpr size_t kSurvivors = 4096;  // main keeps this many orphans alive across rounds
constexpr size_t kMaxSize = 4096;

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const long rounds = args.count("rounds", 1000, 100);
  args.check_all_known();
  const long warm_rounds = std::max(1L, rounds / 10);

  std::mutex handoff_mutex;
  std::vector<void*> handoff;
  handoff.reserve(kThreadsPerRound * kKeepPerThread);
  std::deque<void*> survivors;
  long rss_warm = 0;

  const double t0 = bench::now_s();
  for (long r = 0; r < rounds; ++r) {
    std::vector<std::thread> pool;
    for (int t = 0; t < kThreadsPerRound; ++t) {
      pool.emplace_back([&, r, t] {
        bench::Rng rng(static_cast<uint64_t>(r * kThreadsPerRound + t) + 1);
        void* mine[kBlocksPerThread];
        for (auto& p : mine)
          p = bench::make_block(kName, bench::log_uniform(rng, 16, kMaxSize), rng.next());
        for (int i = kKeepPerThread; i < kBlocksPerThread; ++i)
          bench::check_and_free(kName, mine[i], kMaxSize);
        std::lock_guard<std::mutex> lock(handoff_mutex);
        handoff.insert(handoff.end(), mine, mine + kKeepPerThread);
      });
    }
    for (auto& t : pool) t.join();
    // Blocks of threads that are gone now: free the oldest, keep a bounded population alive.
    for (void* p : handoff) survivors.push_back(p);
    handoff.clear();
    while (survivors.size() > kSurvivors) {
      bench::check_and_free(kName, survivors.front(), kMaxSize);
      survivors.pop_front();
    }
    if (r + 1 == warm_rounds) rss_warm = bench::rss_now_kib();
  }
  const double dt = bench::now_s() - t0;
  const long rss_end = bench::rss_now_kib();
  for (void* p : survivors) bench::check_and_free(kName, p, kMaxSize);

  const double threads_total = static_cast<double>(rounds * kThreadsPerRound);
  bench::result(kName, "rounds", kThreadsPerRound, "threads_per_s", threads_total / dt,
                "threads/s");
  bench::result(kName, "rounds", kThreadsPerRound, "time", dt, "s");
  bench::result(kName, "rounds", kThreadsPerRound, "rss_warm", static_cast<double>(rss_warm),
                "KiB");
  bench::result(kName, "rounds", kThreadsPerRound, "rss_end", static_cast<double>(rss_end), "KiB");
  bench::result(kName, "rounds", kThreadsPerRound, "rss_growth",
                static_cast<double>(rss_end - rss_warm), "KiB");
  bench::finish(kName, "rounds", kThreadsPerRound);
  return 0;
}
