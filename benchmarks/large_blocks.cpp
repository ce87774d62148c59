// large_blocks: blocks of 1..64 MiB allocated, every page touched, checked and freed in a loop;
// stresses the large-object path (mmap/munmap vs reuse) and reports page faults per block
// (getrusage minflt): an allocator that returns and re-maps memory every time pays a fault per
// page.
//
//   large_blocks [blocks=N] [--smoke] [scale=F]
#include "bench_common.h"

namespace {

constexpr const char* kName = "large_blocks";
constexpr size_t kPage = 4096;
constexpr size_t kMiB = 1 << 20;

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const long blocks = args.count("blocks", 100, 6);
  args.check_all_known();
  const size_t max_mib = args.smoke ? 8 : 64;

  bench::Rng rng(5);
  double touched_mib = 0;
  const long faults0 = bench::minor_faults();
  const double t0 = bench::now_s();
  for (long k = 0; k < blocks; ++k) {
    // Sizes log-uniform from 1 to 64 MiB, plus an odd tail so they are not all page multiples.
    const size_t n = bench::log_uniform(rng, 1, max_mib) * kMiB - rng.below(kPage);
    auto* p = static_cast<unsigned char*>(bench::checked(std::malloc(n), kName, n));
    const auto tag = static_cast<unsigned char>(k * 13 + 1);
    for (size_t i = 0; i < n; i += kPage) p[i] = static_cast<unsigned char>(tag + i / kPage);
    p[n - 1] = tag;
    for (size_t i = 0; i < n; i += kPage) {
      if (p[i] != static_cast<unsigned char>(tag + i / kPage))
        bench::fail(kName, "page content changed", p, n);
    }
    if (p[n - 1] != tag) bench::fail(kName, "tail changed", p, n);
    std::free(p);
    touched_mib += static_cast<double>(n) / kMiB;
  }
  const double dt = bench::now_s() - t0;
  const long faults = bench::minor_faults() - faults0;

  bench::result(kName, "1-64MiB", 1, "ops_per_s", static_cast<double>(blocks) / dt, "blocks/s");
  bench::result(kName, "1-64MiB", 1, "time", dt, "s");
  bench::result(kName, "1-64MiB", 1, "minflt_per_block", static_cast<double>(faults) / blocks,
                "faults");
  bench::result(kName, "1-64MiB", 1, "minflt_per_mib", static_cast<double>(faults) / touched_mib,
                "faults");
  bench::finish(kName, "1-64MiB", 1);
  return 0;
}
