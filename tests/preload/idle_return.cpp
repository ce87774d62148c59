// A process whose threads all go idle after a burst: two workers allocate 64 MiB each (blocks
// of 32 B to 64 KiB and a few of 1 to 4 MiB), free it all and wait; the main thread allocates
// nothing and watches its resident anonymous memory. Under LIVEALLOC_BACKGROUND_PURGE=1 the
// allocator's own thread must give most of it back although no thread reaches a slow path again
// (without it nothing would: README, Known limits). The program has 1 MiB of thread_local data,
// more than the thread's first stack size holds, so the thread starts on its second. Exit 0 when
// it fell below a quarter of what they freed within 30 s (a deadline for what must happen, not a
// speed check), 1 otherwise.
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "proc_status.h"

// Static TLS (external, so that it stays in the program): every thread's stack must hold it.
thread_local char tls_block[1 << 20];

namespace {

constexpr int kWorkers = 2;
constexpr std::size_t kBurst = std::size_t(64) << 20;
std::atomic<int> freed{0};
std::atomic<bool> stop{false};

void* worker(void* arg) {
  unsigned seed = static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(arg)) * 2654435761u + 1;
  std::vector<void*> blocks;
  blocks.reserve(1 << 16);
  std::size_t total = 0;
  while (total < kBurst) {
    seed = seed * 1103515245u + 12345u;
    std::size_t size = (seed >> 8) % 64 == 0 ? (std::size_t(1) << 20) << ((seed >> 16) % 3)
                                              : std::size_t(32) << ((seed >> 16) % 12);
    char* p = static_cast<char*>(malloc(size));
    if (!p) abort();
    memset(p, 1, size);  // resident
    blocks.push_back(p);
    total += size;
  }
  for (void* p : blocks) free(p);
  std::vector<void*>().swap(blocks);
  freed.fetch_add(1);
  while (!stop.load()) usleep(20 * 1000);  // idle: allocates nothing
  return nullptr;
}

}  // namespace

int main() {
  tls_block[0] = 1;
  pthread_t t[kWorkers];
  for (int i = 0; i < kWorkers; ++i)
    if (pthread_create(&t[i], nullptr, worker, reinterpret_cast<void*>(std::uintptr_t(i))) != 0)
      return 2;
  while (freed.load() < kWorkers) usleep(1000);
  const long peak = static_cast<long>(kWorkers * kBurst >> 10);
  long rss = status_kib("RssAnon:");
  std::printf("idle_return: the workers freed %ld KiB; resident anonymous memory %ld KiB\n", peak,
              rss);
  int waited = 0;
  for (; waited < 3000 && rss >= peak / 4; ++waited) {
    usleep(10 * 1000);
    rss = status_kib("RssAnon:");
  }
  std::printf("idle_return: %ld KiB after %d ms\n", rss, waited * 10);
  stop.store(true);
  for (pthread_t& th : t) pthread_join(th, nullptr);
  if (rss < 0 || rss >= peak / 4) {
    std::printf("idle_return: FAILED: still %ld KiB resident (of %ld freed) after 30 s\n", rss, peak);
    return 1;
  }
  return 0;
}
