// realloc_growth: 8 buffers grown round-robin by small appends (8..72 B at a time) from 16 B to
// 64 KiB, like strings or logs being built; stresses realloc (in-place growth vs move and copy).
// Every appended byte is written and the whole buffer is checked before free.
//
//   realloc_growth [reallocs=N] [max=BYTES] [--smoke] [scale=F]
#include "bench_common.h"

namespace {

constexpr const char* kName = "realloc_growth";
constexpr int kBuffers =
    8;  // growing several at once interleaves them, so growth is not trivially in place

unsigned char byte_at(size_t i, int id) {
  return static_cast<unsigned char>(i * 31 + static_cast<size_t>(id) * 7 + 1);
}

struct Buffer {
  unsigned char* p = nullptr;
  size_t n = 0;
};

void check_whole(const Buffer& b, int id) {
  for (size_t i = 0; i < b.n; ++i) {
    if (b.p[i] != byte_at(i, id)) bench::fail(kName, "content changed", b.p, b.n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::Args args(argc, argv);
  const long reallocs = args.count("reallocs", 4'000'000, 20'000);
  const size_t max_size = static_cast<size_t>(args.integer("max", 65536, 16, 64 << 20));
  args.check_all_known();

  Buffer bufs[kBuffers];
  bench::Rng rng(3);
  const double t0 = bench::now_s();
  for (long k = 0; k < reallocs; ++k) {
    const int id = static_cast<int>(k % kBuffers);
    Buffer& b = bufs[id];
    if (b.n >= max_size) {  // full: check it all and start a new one
      check_whole(b, id);
      std::free(b.p);
      b = Buffer{};
    }
    const size_t grow = b.n == 0 ? 16 : 8 + rng.below(65);
    auto* q = static_cast<unsigned char*>(
        bench::checked(std::realloc(b.p, b.n + grow), kName, b.n + grow));
    // The old bytes must have moved with the block: check the two ends of the old content.
    if (b.n > 0 && (q[0] != byte_at(0, id) || q[b.n - 1] != byte_at(b.n - 1, id))) {
      bench::fail(kName, "realloc lost content", q, b.n);
    }
    for (size_t i = b.n; i < b.n + grow; ++i) q[i] = byte_at(i, id);
    b = Buffer{q, b.n + grow};
  }
  const double dt = bench::now_s() - t0;
  for (int id = 0; id < kBuffers; ++id) {
    check_whole(bufs[id], id);
    std::free(bufs[id].p);
  }

  bench::result(kName, "append", 1, "ops_per_s", static_cast<double>(reallocs) / dt, "reallocs/s");
  bench::result(kName, "append", 1, "time", dt, "s");
  bench::finish(kName, "append", 1);
  return 0;
}
