// A fork child whose allocator address range was taken before livealloc's atfork child handler
// ran. The parent's shared view of the telemetry segment (where the heaps live) is MADV_DONTFORK,
// so the child starts with a hole there, and an atfork child handler registered before
// livealloc's (here: before the first allocation) may be given memory in it. livealloc must leave
// that memory alone (it mapped its copy MAP_FIXED over it before) and say why the child has no
// heaps. The child checks its handler's marker and exits without allocating; the parent goes on
// allocating. Exit 0 when both hold.
#include <livealloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {
constexpr std::uint64_t kMarker = 0x5eed5eed5eed5eedull;
void* g_base = nullptr;                   // the segment's address in the parent
volatile std::uint64_t* g_claim = nullptr;  // the child handler's page there

// Registered before livealloc's (which registers at the first allocation): runs first in the
// child, and takes the first page of the hole.
void child_handler() {
  void* p = mmap(g_base, 4096, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p != g_base) return;
  g_claim = static_cast<volatile std::uint64_t*>(p);
  *g_claim = kMarker;
}

// The start of the mapping of the file (dev, ino) in /proc/self/maps, or nullptr.
void* mapping_of(dev_t dev, ino_t ino) {
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (!f) return nullptr;
  char line[512];
  void* found = nullptr;
  while (!found && std::fgets(line, sizeof line, f)) {
    unsigned long start = 0, end = 0, inode = 0;
    unsigned major = 0, minor = 0;
    if (std::sscanf(line, "%lx-%lx %*s %*s %x:%x %lu", &start, &end, &major, &minor, &inode) == 5 &&
        inode == ino && makedev(major, minor) == dev)
      found = reinterpret_cast<void*>(start);
  }
  std::fclose(f);
  return found;
}
}  // namespace

int main() {
  if (pthread_atfork(nullptr, nullptr, child_handler) != 0) return 2;
  void* first = livealloc::allocate(100);  // livealloc starts: segment, then its atfork handlers
  if (int err = livealloc::telemetry::enable(); err != 0) {
    std::fprintf(stderr, "FAIL: telemetry::enable(): errno %d\n", err);
    return 1;
  }
  char path[64];
  std::snprintf(path, sizeof path, "/dev/shm/livealloc.%d", static_cast<int>(getpid()));
  struct stat st;
  if (stat(path, &st) != 0 || !(g_base = mapping_of(st.st_dev, st.st_ino))) {
    std::fprintf(stderr, "FAIL: cannot find the mapping of %s\n", path);
    return 1;
  }
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) {  // nothing here allocates: the child has no heaps when its range was taken
    if (!g_claim) _exit(3);
    _exit(*g_claim == kMarker ? 0 : 4);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  int failures = 0;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::fprintf(stderr, "FAIL: child exited %d (%s)\n", code,
                 code == 3   ? "its atfork handler could not take the page: test setup"
                 : code == 4 ? "its atfork handler's page was replaced by livealloc's mapping"
                             : "crashed or failed");
    ++failures;
  } else {
    std::printf("ok    the child's atfork handler kept its page at %p\n", g_base);
  }
  // The parent is untouched: its heaps work.
  void* blocks[1000];
  for (void*& b : blocks) b = livealloc::allocate(64);
  for (void* b : blocks) livealloc::deallocate(b);
  livealloc::deallocate(first);
  std::printf("ok    the parent allocates\n");
  return failures ? 1 : 0;
}
