// Under LD_PRELOAD=liblivealloc.so with LIVEALLOC_PROFILE=1, run by shm_full.sh on a /dev/shm with
// room for only a few thread slots: a fork child, then the parent, each start THREADS threads that
// are all alive at once (so none reuses an exited thread's slot), allocate blocks of many sizes,
// write a pattern, free blocks their neighbour allocated (cross-thread frees write the free
// matrix) and check every byte. A thread that writes a page of the segment tmpfs cannot supply
// dies of SIGBUS; with the fix the threads without room share the overflow slot. Exits 0 when
// every thread and the child checked out, 1 with a line per failure. Each thread's first call is
// a free (of a block the starting thread made), which takes the thread's heap and slot there: it
// must leave errno as it was (POSIX), also when the slot finds no room.
//
// `shm_threads --layout` prints the running segment's slots_offset, slot_size and slot_count
// (read from its own /dev/shm/livealloc.<pid>, offsets from allocator/TELEMETRY.md), so the
// script can size its tmpfs from the real layout.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr int kBlocks = 300;

struct worker {
  int id = 0;
  unsigned char* blocks[kBlocks] = {};
  std::size_t sizes[kBlocks] = {};
  worker* neighbour = nullptr;
  void* gift = nullptr;    // the starting thread's block, freed first
  int free_errno = 0;      // errno after that free, when it changed
  bool ok = true;
};

constexpr int kErrnoMark = 4242;  // no errno value

pthread_barrier_t g_barrier;

unsigned char pattern(int id, int i, std::size_t at) {
  return static_cast<unsigned char>(id * 31 + i * 7 + static_cast<int>(at % 251));
}

bool check_blocks(const worker& w) {
  for (int i = 0; i < kBlocks; ++i) {
    if (!w.blocks[i]) return false;
    for (std::size_t at = 0; at < w.sizes[i]; ++at)
      if (w.blocks[i][at] != pattern(w.id, i, at)) return false;
  }
  return true;
}

void* run(void* arg) {
  auto* w = static_cast<worker*>(arg);
  errno = kErrnoMark;
  std::free(w->gift);  // the thread's first call: its heap and slot are taken here
  if (errno != kErrnoMark) w->free_errno = errno;
  for (int i = 0; i < kBlocks; ++i) {
    // 16 bytes to 16 KiB across the small classes, and a large block now and then.
    w->sizes[i] = i % 50 == 49 ? std::size_t(1) << 20 : std::size_t(16) << (i % 11);
    w->blocks[i] = static_cast<unsigned char*>(std::malloc(w->sizes[i]));
    if (!w->blocks[i]) {
      w->ok = false;
      continue;
    }
    for (std::size_t at = 0; at < w->sizes[i]; ++at) w->blocks[i][at] = pattern(w->id, i, at);
  }
  pthread_barrier_wait(&g_barrier);  // every thread alive at once: each needs a slot of its own
  w->ok = w->ok && check_blocks(*w);
  pthread_barrier_wait(&g_barrier);  // every check done: the neighbour's blocks may go
  for (unsigned char* p : w->neighbour->blocks) std::free(p);
  return nullptr;
}

// Starts `n` threads and checks them all; prints a line per failure.
bool phase(const char* who, int n) {
  auto* workers = new worker[static_cast<std::size_t>(n)];
  auto* threads = new pthread_t[static_cast<std::size_t>(n)];
  pthread_barrier_init(&g_barrier, nullptr, static_cast<unsigned>(n));
  bool ok = true;
  int started = 0;
  for (int i = 0; i < n; ++i) {
    workers[i].id = i;
    workers[i].neighbour = &workers[(i + 1) % n];
    workers[i].gift = std::malloc(64);
  }
  for (; started < n; ++started)
    if (pthread_create(&threads[started], nullptr, run, &workers[started]) != 0) break;
  if (started != n) {
    std::printf("FAIL  %s: could start only %d of %d threads\n", who, started, n);
    std::fflush(stdout);
    std::_Exit(1);  // the started ones wait at the barrier for ever
  }
  for (int i = 0; i < n; ++i) {
    pthread_join(threads[i], nullptr);
    if (!workers[i].ok) {
      std::printf("FAIL  %s: thread %d found its blocks changed or missing\n", who, i);
      ok = false;
    }
    if (workers[i].free_errno != 0) {
      std::printf("FAIL  %s: thread %d: its first free() set errno to %d (%s)\n", who, i,
                  workers[i].free_errno, std::strerror(workers[i].free_errno));
      ok = false;
    }
  }
  pthread_barrier_destroy(&g_barrier);
  delete[] threads;
  delete[] workers;
  return ok;
}

int print_layout() {
  const std::string path = "/dev/shm/livealloc." + std::to_string(getpid());
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::uint32_t slot_count = 0, slot_size = 0;
  std::uint64_t slots_offset = 0;
  if (fd < 0 || pread(fd, &slot_count, 4, 36) != 4 || pread(fd, &slot_size, 4, 40) != 4 ||
      pread(fd, &slots_offset, 8, 72) != 8) {
    std::fprintf(stderr, "shm_threads: cannot read %s (is LIVEALLOC_PROFILE=1 set?)\n",
                 path.c_str());
    return 1;
  }
  close(fd);
  std::printf("%llu %u %u\n", static_cast<unsigned long long>(slots_offset), slot_size,
              slot_count);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--layout") == 0) return print_layout();
  const int n = argc > 1 ? std::atoi(argv[1]) : 24;
  if (n < 1) {
    std::fprintf(stderr, "usage: shm_threads [THREADS >= 1] | --layout\n");
    return 2;
  }
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  int failures = 0;
  const pid_t child = fork();
  if (child < 0) {
    std::printf("FAIL  fork: %s\n", std::strerror(errno));
    return 1;
  }
  if (child == 0) std::exit(phase("child", n) ? 0 : 1);
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFSIGNALED(status)) {
    std::printf("FAIL  the fork child was killed by signal %d (%s)\n", WTERMSIG(status),
                strsignal(WTERMSIG(status)));
    ++failures;
  } else if (WEXITSTATUS(status) != 0) {
    std::printf("FAIL  the fork child exited with %d\n", WEXITSTATUS(status));
    ++failures;
  } else {
    std::printf("ok    fork child: %d threads checked\n", n);
  }
  if (phase("parent", n)) std::printf("ok    parent: %d threads checked\n", n);
  else ++failures;
  return failures ? 1 : 0;
}
