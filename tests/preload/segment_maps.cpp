// Small blocks filling 64 segments (256 MiB of 1 KiB blocks): the segments are mapped one after
// another where they join into one mapping, so the process gains a few mappings, not one per
// segment (each was a mapping of its own: a process of many segments came that much nearer
// vm.max_map_count, 65,530 by default). Then every block is freed and allocated again: no new
// mapping. Exit 0 when both hold, 1 otherwise.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "proc_status.h"

int main() {
  constexpr size_t kBlocks = 256 * 1024, kSize = 1024;
  static void* blocks[kBlocks];
  const long before = mappings();
  for (size_t i = 0; i < kBlocks; ++i) {
    blocks[i] = malloc(kSize);
    if (!blocks[i]) {
      std::printf("segment_maps: FAILED: malloc %zu returned null\n", i);
      return 1;
    }
    std::memset(blocks[i], 1, 16);
  }
  const long filled = mappings();
  for (size_t i = 0; i < kBlocks; ++i) free(blocks[i]);
  for (size_t i = 0; i < kBlocks; ++i) blocks[i] = malloc(kSize);
  const long again = mappings();
  for (size_t i = 0; i < kBlocks; ++i) free(blocks[i]);
  // 64 segments; the telemetry segment, a thread's heap or a cached range may add a few.
  const bool joined = before > 0 && filled - before <= 8;
  const bool kept = again <= filled;
  std::printf("segment_maps: %ld mappings before, %ld with 256 MiB of 1 KiB blocks%s, %ld after "
              "freeing and allocating them again%s\n",
              before, filled, joined ? "" : " (FAILED: at most 8 more)", again,
              kept ? "" : " (FAILED: no more)");
  return joined && kept ? 0 : 1;
}
