// vector_push: std::vector<T>::push_back without reserve, for small (8 B), medium (64 B) and large
// (1 KiB) elements, at 1 and 4 threads; stresses the grow-by-doubling new/delete pattern of real
// C++ code (many short vectors, a few long). Every element is checked before the vector dies.
//
//   vector_push elem=small|medium|large threads=T [pushes=N] [--smoke] [scale=F]
#include "bench_common.h"

namespace {

constexpr const char* kName = "vector_push";

template <size_t Bytes>
struct Elem {
  uint64_t words[Bytes / 8];
  explicit Elem(uint64_t v) {
    for (auto& w : words) w = v;
  }
  bool ok(uint64_t v) const { return words[0] == v && words[Bytes / 8 - 1] == v; }
};

// Pushes until `pushes` elements went in, in vectors of random length up to max_len.
template <size_t Bytes>
void run_thread(long pushes, size_t max_len, uint64_t seed) {
  bench::Rng rng(seed);
  long done = 0;
  while (done < pushes) {
    const size_t len = 1 + rng.below(max_len);
    std::vector<Elem<Bytes>> v;
    for (size_t i = 0; i < len; ++i) v.emplace_back(seed + i);
    for (size_t i = 0; i < len; ++i) {
      if (!v[i].ok(seed + i)) bench::fail(kName, "element changed", v.data(), len * Bytes);
    }
    bench::escape(v.data());
    done += static_cast<long>(len);
  }
}

template <size_t Bytes>
void run(int threads, long pushes_per_thread, size_t max_len) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back(run_thread<Bytes>, pushes_per_thread, max_len, static_cast<uint64_t>(t) + 11);
  }
  for (auto& t : pool) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  static const char* const kElems[] = {"small", "medium", "large", nullptr};
  const std::string elem = args.choice("elem", "small", kElems);
  const int threads = static_cast<int>(args.integer("threads", 1, 1, 256));
  // Fewer pushes for bigger elements keep the bytes moved comparable; the total is split among
  // threads so time at 1 and 4 threads compares directly.
  const long full = elem == "small" ? 100'000'000 : elem == "medium" ? 40'000'000 : 4'000'000;
  const long pushes = args.count("pushes", full, 20'000);
  args.check_all_known();
  const long per_thread = pushes / threads;
  const std::string case_name = "elem=" + elem;

  const double t0 = bench::now_s();
  if (elem == "small") {
    run<8>(threads, per_thread, 256);  // up to 2 KiB arrays
  } else if (elem == "medium") {
    run<64>(threads, per_thread, 256);  // up to 16 KiB
  } else if (elem == "large") {
    run<1024>(threads, per_thread, 64);  // up to 64 KiB
  } else {
    std::fprintf(stderr, "unknown elem %s\n", elem.c_str());
    return 64;
  }
  const double dt = bench::now_s() - t0;

  bench::result(kName, case_name, threads, "ops_per_s",
                static_cast<double>(per_thread * threads) / dt, "pushes/s");
  bench::result(kName, case_name, threads, "time", dt, "s");
  bench::finish(kName, case_name, threads);
  return 0;
}
