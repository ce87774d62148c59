// Run by shm_full.sh on a small private tmpfs over /dev/shm. The library is built in
// (LIVEALLOC_OVERRIDE), profiling on. It fills what room /dev/shm has left, then starts one
// thread, which finds no room for a telemetry slot: the library warns while that thread is still
// being given its heap. Under a locale other than C that warning must not call malloc (strerror
// translates, and so allocates): the thread would get a second heap that nothing ever gives back.
// Exits 0 when the thread made exactly one heap and gave it back at its exit.
#define LIVEALLOC_OVERRIDE
#include <livealloc.h>

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <clocale>
#include <cstdio>
#include <cstdlib>

static void* body(void*) {
  void* p = malloc(100);
  free(p);
  return nullptr;
}

int main() {
  free(malloc(10));
  if (!setlocale(LC_ALL, "C.UTF-8")) {
    std::printf("FAIL  no C.UTF-8 locale here\n");
    return 1;
  }
  const int fd = open("/dev/shm/filler", O_CREAT | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror("open /dev/shm/filler");
    return 1;
  }
  for (off_t off = 0; fallocate(fd, 0, off, 4096) == 0; off += 4096) {
  }
  const livealloc::stats before = livealloc::get_stats();
  pthread_t t;
  if (pthread_create(&t, nullptr, body, nullptr) != 0 || pthread_join(t, nullptr) != 0) {
    std::printf("FAIL  cannot run a thread\n");
    return 1;
  }
  const livealloc::stats after = livealloc::get_stats();
  close(fd);
  unlink("/dev/shm/filler");
  std::printf("heaps %zu -> %zu, in use %zu -> %zu\n", before.heaps, after.heaps,
              before.heaps_in_use, after.heaps_in_use);
  if (after.heaps != before.heaps + 1 || after.heaps_in_use != before.heaps_in_use) {
    std::printf("FAIL  the thread should make one heap and give it back at its exit\n");
    return 1;
  }
  std::printf("ok    one heap for the thread, given back at its exit\n");
  return 0;
}
