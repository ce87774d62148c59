// Under LD_PRELOAD=liblivealloc.so with LIVEALLOC_PROFILE=1: a child made without fork()'s atfork
// handlers (syscall(SYS_fork), glibc's _Fork, clone(SIGCHLD) without CLONE_VM) must never change
// its parent's heaps, which live in the MAP_SHARED telemetry segment. Three threads allocate and
// check patterns in their blocks the whole time; the main thread keeps blocks of its own and makes
// children of every kind, twice each:
//  - a quiet child calls nothing of the allocator (what glibc allows after _Fork: async-signal-safe
//    calls only) and ends with _exit, which must work (status 7);
//  - an allocating child frees the main thread's blocks and the workers', and allocates. It must
//    die by a signal (the allocator's heaps are not mapped in it), and the parent must not see a
//    block it holds given out again, nor a changed byte in one.
// After each child the main thread churns its blocks (a block a child freed into the shared
// recent-free list would be handed out again here) and checks them all. Then, with the workers
// stopped: fork() children for which no copy of the heaps can be made (the allocator's last
// fallback: they may exec, and die if they allocate, rather than use the parent's heaps), and a
// raw fork of a fork() child (whose own copy must be as safe). At the end the segment must still
// read back with the parent's pid and this thread alive. Exits 0 when all holds, 1 with a line
// per failure; the unfixed allocator makes it die by SIGSEGV (or report damaged blocks) instead.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "livealloc_reader.h"

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s  %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// A block's pattern: every word holds its own address mixed with the owner's seed, so a block
// handed out twice, or written by anyone else, shows.
void fill(void* p, std::size_t n, std::uint64_t seed) {
  auto* w = static_cast<std::uint64_t*>(p);
  for (std::size_t i = 0; i < n / 8; ++i) w[i] = reinterpret_cast<std::uintptr_t>(w + i) ^ seed;
}
bool intact(const void* p, std::size_t n, std::uint64_t seed) {
  const auto* w = static_cast<const std::uint64_t*>(p);
  for (std::size_t i = 0; i < n / 8; ++i)
    if (w[i] != (reinterpret_cast<std::uintptr_t>(w + i) ^ seed)) return false;
  return true;
}

constexpr int kWorkers = 3;
constexpr int kRing = 128;
constexpr std::size_t kWorkerSizes[] = {24, 48, 96, 200, 512, 1504, 4000};
struct ring_entry {
  void* p;
  std::size_t n;
};
// Written by each worker, read (as the fork left it) by an allocating child.
ring_entry rings[kWorkers][kRing];
std::atomic<bool> stop{false};
std::atomic<int> worker_bad{0};

void worker(int id) {
  const std::uint64_t seed = 0x5eed0000u + static_cast<unsigned>(id);
  std::uint64_t rng = 88172645463325252ull + static_cast<unsigned>(id);
  for (unsigned i = 0; !stop.load(std::memory_order_relaxed); i = (i + 1) % kRing) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    ring_entry& e = rings[id][i];
    if (e.p) {
      if (!intact(e.p, e.n, seed) && worker_bad.fetch_add(1) == 0)
        std::printf("FAIL  worker %d: a block of %zu bytes was changed by someone else\n", id, e.n);
      std::free(e.p);
      e.p = nullptr;  // (a child forked here frees only what the ring still names)
    }
    const std::size_t n = kWorkerSizes[rng % (sizeof kWorkerSizes / sizeof kWorkerSizes[0])];
    void* p = std::malloc(n);
    if (!p) continue;
    fill(p, n, seed);
    e = ring_entry{p, n};
  }
}

// The main thread's blocks.
constexpr int kMine = 256;
constexpr std::size_t kMineSize = 48;
constexpr std::uint64_t kMineSeed = 0x4d41494e;
void* mine[kMine];

bool mine_intact() {
  for (void* p : mine)
    if (!intact(p, kMineSize, kMineSeed)) return false;
  return true;
}

// A child that dies of a fault leaves no core file (a core_pattern pipe ignores RLIMIT_CORE).
void no_core_dump() {
  const struct rlimit none = {0, 0};
  setrlimit(RLIMIT_CORE, &none);
  prctl(PR_SET_DUMPABLE, 0);
}

// What a child runs. Quiet: nothing of the allocator; the exit goes through the preload's _exit.
// Allocating: frees the parent's blocks (the main thread's are this heap's own, the workers'
// go back to their heaps' inboxes) and allocates other sizes, then ends.
int child_body(bool allocates) {
  no_core_dump();
  if (allocates) {
    for (int i = 0; i < kMine; i += 4) std::free(mine[i]);
    for (auto& ring : rings)
      for (int i = 0; i < kRing; i += 8)
        if (ring[i].p) std::free(ring[i].p);
    for (int i = 0; i < 200; ++i) {
      void* p = std::malloc(1000 + static_cast<std::size_t>(i));
      if (p) std::memset(p, 0xee, 1000);
      if (i % 2) std::free(p);
    }
  }
  _exit(7);
}

int clone_entry(void* arg) {
  return child_body(arg != nullptr);
}

enum class how { sys_fork, underscore_fork, clone_sigchld };
const char* name_of(how h) {
  return h == how::sys_fork          ? "syscall(SYS_fork)"
         : h == how::underscore_fork ? "_Fork"
                                     : "clone(SIGCHLD)";
}

pid_t make_child(how h, bool allocates, void* stack_top) {
  pid_t pid = -1;
  switch (h) {
    case how::sys_fork:
      pid = static_cast<pid_t>(syscall(SYS_fork));
      break;
    case how::underscore_fork:
      pid = _Fork();
      break;
    case how::clone_sigchld:
      // Without CLONE_VM: a copy of the address space, as fork makes, but no atfork handlers.
      return clone(clone_entry, stack_top, SIGCHLD, allocates ? &stop : nullptr);
  }
  if (pid == 0) child_body(allocates);
  return pid;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by ") + strsignal(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// A child that allocates must not run on its parent's heaps: it dies by a signal.
void check_child(const std::string& what, bool allocates, int status, int quiet_code) {
  if (allocates)
    check(WIFSIGNALED(status),
          what + ": it did not run on the parent's heaps (it " + describe(status) + ")");
  else
    check(WIFEXITED(status) && WEXITSTATUS(status) == quiet_code,
          what + ": it ended normally (it " + describe(status) + ")");
}

// What the children could have broken in the main thread's heap: blocks of kMineSize handed out
// again while the main thread still holds them. Four times: replaces every block (checking it
// first), holds as many extra blocks of the same size at the same time, and checks them all.
bool main_heap_sound() {
  bool ok = true;
  for (int round = 0; round < 4; ++round) {
    for (void*& p : mine) {
      if (!intact(p, kMineSize, kMineSeed)) ok = false;
      std::free(p);
      p = std::malloc(kMineSize);
      if (!p) return false;
      fill(p, kMineSize, kMineSeed);
    }
    std::vector<void*> extra;
    for (int i = 0; i < kMine; ++i) {
      void* p = std::malloc(kMineSize);
      if (!p) return false;
      fill(p, kMineSize, ~kMineSeed);
      extra.push_back(p);
    }
    ok = ok && mine_intact();
    for (void* p : extra) {
      if (!intact(p, kMineSize, ~kMineSeed)) ok = false;
      std::free(p);
    }
  }
  return ok;
}

// The address space this process has now, in bytes (read without allocating: nothing may map
// memory between this and the limit set from it).
rlim_t address_space() {
  char buf[64] = {};
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  return n > 0 ? std::strtoull(buf, nullptr, 10) * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) : 0;
}

// fork() when neither copy of the heaps can be made: no descriptor for the file (RLIMIT_NOFILE 0),
// no address space for anonymous memory (RLIMIT_AS at what is mapped now). The child must not
// fall back to the parent's heaps: it can exec, and dies if it allocates. It lifts the limits
// again before anything else (the allocator's fork handler has run by then).
void fork_without_copy(bool allocates) {
  struct rlimit files, space;
  getrlimit(RLIMIT_NOFILE, &files);
  getrlimit(RLIMIT_AS, &space);
  const rlim_t now = address_space();
  const struct rlimit no_files = {0, files.rlim_max}, no_space = {now, space.rlim_max};
  if (now == 0 || setrlimit(RLIMIT_NOFILE, &no_files) != 0 ||
      setrlimit(RLIMIT_AS, &no_space) != 0) {
    setrlimit(RLIMIT_NOFILE, &files);
    check(false, "fork without a copy: the limits could be set");
    return;
  }
  const pid_t pid = fork();
  setrlimit(RLIMIT_AS, &space);
  setrlimit(RLIMIT_NOFILE, &files);
  if (pid == 0) {
    no_core_dump();
    if (allocates) {
      void* p = std::malloc(100);
      std::memset(p, 0xee, 100);
      std::free(mine[0]);
      _exit(7);
    }
    execl("/bin/true", "true", static_cast<char*>(nullptr));
    _exit(127);
  }
  const std::string what = std::string("fork() without a copy of the heaps, ") +
                           (allocates ? "a child that allocates" : "a child that execs /bin/true");
  if (pid < 0) {
    check(false, what + ": the child was made");
    return;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  check_child(what, allocates, status, 0);
  check(main_heap_sound(), what + ": the main thread's blocks are intact and given out once");
}

// A fork() child maps its own copy of the segment: a raw fork of it must leave that copy alone too.
// The child makes an allocating grandchild with syscall(SYS_fork) and checks its own blocks after
// it; exit status 0 when the grandchild died by a signal and the child's blocks are sound.
void raw_fork_of_fork_child() {
  const pid_t child = fork();
  if (child == 0) {
    const pid_t grandchild = static_cast<pid_t>(syscall(SYS_fork));
    if (grandchild == 0) child_body(true);
    int status = 0;
    waitpid(grandchild, &status, 0);
    const bool sound = main_heap_sound();
    _exit(grandchild > 0 && WIFSIGNALED(status) ? (sound ? 0 : 2) : 3);
  }
  int status = 0;
  waitpid(child, &status, 0);
  const bool exited = child > 0 && WIFEXITED(status);
  const int code = exited ? WEXITSTATUS(status) : -1;
  check(code == 0,
        "a raw fork of a fork() child: it died and left the fork child's blocks intact (" +
            (code == 2   ? std::string("the fork child's blocks were damaged")
             : code == 3 ? std::string("the raw fork's child was not killed")
                         : "the fork child " + describe(status)) +
            ")");
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // a child never prints a buffered line again
  const pid_t self = getpid();
  std::string error;
  if (!livealloc::reader::segment::open_pid(self, &error)) {
    std::printf(
        "FAIL  no segment for this process (%s): run with LIVEALLOC_PROFILE=1 under the "
        "preload\n",
        error.c_str());
    return 1;
  }
  for (void*& p : mine) {
    p = std::malloc(kMineSize);
    fill(p, kMineSize, kMineSeed);
  }
  std::vector<std::thread> workers;
  for (int i = 0; i < kWorkers; ++i) workers.emplace_back(worker, i);

  // The clone child's stack: private to it after the clone, as the rest of the address space.
  constexpr std::size_t kStack = 256 * 1024;
  void* stack = mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (stack == MAP_FAILED) return 1;
  void* stack_top = static_cast<char*>(stack) + kStack;

  for (int round = 0; round < 2; ++round) {
    for (how h : {how::sys_fork, how::underscore_fork, how::clone_sigchld}) {
      for (bool allocates : {false, true}) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the workers are running
        const pid_t pid = make_child(h, allocates, stack_top);
        if (pid < 0) {
          check(false, std::string(name_of(h)) + ": the child was made");
          continue;
        }
        int status = 0;
        waitpid(pid, &status, 0);
        const std::string what =
            std::string(name_of(h)) + (allocates ? ", a child that allocates" : ", a quiet child");
        check_child(what, allocates, status, 7);
        check(main_heap_sound(), what + ": the main thread's blocks are intact and given out once");
        check(worker_bad.load() == 0, what + ": the workers' blocks are intact");
      }
    }
  }
  stop.store(true);
  for (auto& t : workers) t.join();
  check(worker_bad.load() == 0, "the workers' blocks stayed intact to the end");
  fork_without_copy(false);
  fork_without_copy(true);
  raw_fork_of_fork_child();
  check(mine_intact(), "the main thread's blocks stayed intact to the end");

  auto seg = livealloc::reader::segment::open_pid(self, &error);
  livealloc::reader::snapshot s;
  if (seg) s = seg->take();
  check(seg && s.ok() && s.pid == self,
        "the segment reads back with this process's pid (" + (seg ? s.error : error) + ")");
  // This thread; the workers have exited, and no child's thread ever showed up in it.
  check(s.ok() && s.threads_alive() == 1, "the segment shows this thread alive and no other (" +
                                              std::to_string(s.ok() ? s.threads_alive() : 0) + ")");
  munmap(stack, kStack);
  return failures ? 1 : 0;
}
