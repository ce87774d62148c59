// crossthread: blocks allocated on one thread and freed on another, at 1, 2 and 4 threads.
//   mode=pc   producer/consumer: producers allocate, consumers free, through lock-free rings of
//             4,096 blocks; stresses the remote-free path (an allocator that parks remote frees
//             in the freeing thread grows without bound here). threads=1: one thread through a
//             ring of its own (same traffic, no cross-thread free).
//   mode=a2a  all-to-all, larson-like: every thread swaps fresh blocks into random slots of one
//             shared array and frees whatever it took out, so (T-1)/T of frees are remote.
//
//   crossthread mode=pc|a2a threads=T [ops=N] [--smoke] [scale=F]
#include "bench_common.h"

namespace {

constexpr const char* kName = "crossthread";
constexpr size_t kRing = 4096;
constexpr size_t kMaxSize = 1024;
constexpr size_t kSlotsPerThread = 1024;

// One thread alone: the same allocate, queue, free traffic without a second thread.
void pc_single(long ops) {
  bench::SpscRing ring(kRing);
  bench::Rng rng(1);
  for (long i = 0; i < ops; ++i) {
    void* p = bench::make_block(kName, bench::log_uniform(rng, 16, kMaxSize), rng.next());
    if (!ring.try_push(p)) {
      bench::check_and_free(kName, ring.try_pop(), kMaxSize);
      ring.push(p);
    }
  }
  while (void* p = ring.try_pop()) bench::check_and_free(kName, p, kMaxSize);
}

void pc_pairs(int threads, long ops_per_producer) {
  const int pairs = std::max(1, threads / 2);
  std::vector<std::unique_ptr<bench::SpscRing>> rings;
  for (int i = 0; i < pairs; ++i) rings.push_back(std::make_unique<bench::SpscRing>(kRing));
  std::vector<std::thread> pool;
  for (int i = 0; i < pairs; ++i) {
    pool.emplace_back([&, i] {
      bench::Rng rng(static_cast<uint64_t>(i) + 1);
      for (long k = 0; k < ops_per_producer; ++k) {
        rings[i]->push(bench::make_block(kName, bench::log_uniform(rng, 16, kMaxSize), rng.next()));
      }
    });
    pool.emplace_back([&, i] {
      for (long k = 0; k < ops_per_producer;) {
        if (void* p = rings[i]->try_pop()) {
          bench::check_and_free(kName, p, kMaxSize);
          ++k;
        } else {
          std::this_thread::yield();
        }
      }
    });
  }
  for (auto& t : pool) t.join();
}

void all_to_all(int threads, long ops_per_thread) {
  std::vector<std::atomic<void*>> slots(kSlotsPerThread * static_cast<size_t>(threads));
  for (auto& s : slots) s.store(nullptr, std::memory_order_relaxed);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      bench::Rng rng(static_cast<uint64_t>(t) + 7);
      for (long k = 0; k < ops_per_thread; ++k) {
        void* p = bench::make_block(kName, bench::log_uniform(rng, 16, kMaxSize), rng.next());
        void* old = slots[rng.below(slots.size())].exchange(p, std::memory_order_acq_rel);
        if (old != nullptr) bench::check_and_free(kName, old, kMaxSize);
      }
    });
  }
  for (auto& t : pool) t.join();
  for (auto& s : slots) {
    if (void* p = s.load()) bench::check_and_free(kName, p, kMaxSize);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  static const char* const kModes[] = {"pc", "a2a", nullptr};
  const std::string mode = args.choice("mode", "pc", kModes);
  const int threads = static_cast<int>(args.integer("threads", 1, 1, 256));
  // Total operations stay the same at every thread count, so times compare directly.
  const long ops = args.count("ops", 5'000'000, 100'000);
  args.check_all_known();
  const std::string case_name = "mode=" + mode;

  const double t0 = bench::now_s();
  if (mode == "pc") {
    if (threads == 1) {
      pc_single(ops);
    } else {
      pc_pairs(threads, ops / std::max(1, threads / 2));
    }
  } else if (mode == "a2a") {
    all_to_all(threads, ops / threads);
  } else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 64;
  }
  const double dt = bench::now_s() - t0;

  bench::result(kName, case_name, threads, "ops_per_s", static_cast<double>(ops) / dt, "blocks/s");
  bench::result(kName, case_name, threads, "time", dt, "s");
  bench::finish(kName, case_name, threads);
  return 0;
}
