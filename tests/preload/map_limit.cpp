// A process near vm.max_map_count: it holds mappings up to 300 short of the limit (one region of
// single pages made to alternate between readable and not, so that the kernel cannot merge them),
// then allocates 1,000 large blocks (300 KB, each the allocator's own mapping), touches them and
// frees them, six times. Unmapping part of a mapping the kernel merged with its neighbours splits
// it, which fails with ENOMEM at the limit: before, every freed block whose unmap failed stayed
// resident and mapped, and from the second round malloc failed after 32 blocks. Every block of
// every round must be allocated (glibc's malloc allocates them all here), and after each round's
// frees the resident memory must fall below a quarter of what the blocks held. Exit 0 when
// both hold, 1 otherwise, 77 (skipped) when the limit cannot be read or is too high to reach.
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "proc_status.h"

int main() {
  long limit = 0;
  if (FILE* f = std::fopen("/proc/sys/vm/max_map_count", "r")) {
    if (std::fscanf(f, "%ld", &limit) != 1) limit = 0;
    std::fclose(f);
  }
  if (limit <= 0 || limit > (1 << 20)) {
    std::printf("map_limit: vm.max_map_count is %ld: skipped\n", limit);
    return 77;
  }
  const long pages = limit - mappings() - 300;
  if (pages > 0) {
    auto* filler = static_cast<char*>(
        mmap(nullptr, static_cast<size_t>(pages) * 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS,
             -1, 0));
    if (filler == MAP_FAILED) {
      std::printf("map_limit: FAILED: no room for the filler mapping\n");
      return 1;
    }
    for (long i = 0; i < pages; i += 2) mprotect(filler + i * 4096, 4096, PROT_NONE);
  }
  std::printf("map_limit: %ld mappings of at most %ld\n", mappings(), limit);
  constexpr size_t kBlocks = 1000, kSize = 300000;
  static void* blocks[kBlocks];
  int failures = 0;
  for (int round = 0; round < 6; ++round) {
    size_t got = 0;
    for (; got < kBlocks; ++got) {
      auto* p = static_cast<char*>(malloc(kSize));
      if (!p) break;
      for (size_t o = 0; o < kSize; o += 4096) p[o] = 1;
      blocks[got] = p;
    }
    const long held = status_kib("RssAnon:");
    for (size_t i = 0; i < got; i += 2) free(blocks[i]);  // (every other first: splits)
    for (size_t i = 1; i < got; i += 2) free(blocks[i]);
    const long left = status_kib("RssAnon:");
    const long blocks_kib = static_cast<long>(kBlocks * kSize / 1024);
    const bool ok = got == kBlocks && left >= 0 && left < blocks_kib / 4;
    std::printf("map_limit: round %d: %zu of %zu blocks allocated; resident %ld KiB, %ld after "
                "the frees (the blocks: %ld KiB); %ld mappings%s\n",
                round, got, kBlocks, held, left, blocks_kib, mappings(), ok ? "" : ": FAILED");
    failures += !ok;
  }
  return failures == 0 ? 0 : 1;
}
