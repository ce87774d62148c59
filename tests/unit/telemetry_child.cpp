// A separate process for the telemetry tests that need one (start-up options, umask, exit, fork).
// It runs one scenario, writes "ready <pid>" on stdout, and waits for a line on stdin to exit.
//   telemetry_child threads N      N threads, each allocating 100 blocks of 100 bytes, then wait
//   telemetry_child fork           fork; the child allocates 777 blocks of 48 bytes and reports
//                                  "ready <child pid>"; both wait
//   telemetry_child fork_threads N a second thread frees a block of the main thread's and exits;
//                                  fork; the child runs N threads as `threads N` does and reports
//                                  "ready <child pid>"; both wait
//   telemetry_child matrix         known cross-thread frees between named threads, one after
//                                  another, all but one alive at the end (matrix_threads)
//   telemetry_child after_exit     an atexit handler registered before enable() checks what is
//                                  left after enable()'s own handler ran (after_exit_unlink); it
//                                  ends the process with 42 when every check held
#include <livealloc.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {
void wait_for_parent() {
  char line[16];
  if (!std::fgets(line, sizeof line, stdin)) return;
}

// N threads, each allocating 100 blocks of 100 bytes, all alive at once (so each needs a slot of
// its own); returns when all have joined.
void run_threads(int n, std::vector<std::vector<void*>>& kept) {
  std::vector<std::thread> ts;
  kept.assign(static_cast<std::size_t>(n), {});
  std::atomic<int> arrived{0};
  for (int t = 0; t < n; ++t)
    ts.emplace_back([&kept, &arrived, n, t] {
      for (int i = 0; i < 100; ++i) kept[static_cast<std::size_t>(t)].push_back(livealloc::allocate(100));
      arrived.fetch_add(1);
      while (arrived.load() < n) std::this_thread::yield();
    });
  for (auto& th : ts) th.join();
}

// Threads that free each other's blocks in known numbers, started one after another, so that
// each takes the next slot: main; "mx-owner" allocates 20 blocks; "mx-gone" frees 3 of them
// and exits; "mx-heir" takes its heap and slot (incarnation 2) and frees nothing remotely, so
// the slot's counters show no remote free while its row of the matrix holds the 3; "mx-quiet"
// frees only its own blocks; "mx-sender" frees 5 of main's blocks; "mx-over" frees 7 of the
// owner's blocks and allocates 2 that main frees. With 6 slots mx-over has none: it counts in the
// overflow slot, whose counters it publishes only at its 256th slow path or its exit, while its
// cells are in the overflow row at once. All but mx-gone stay alive until `release` is called.
struct matrix_threads {
  std::vector<std::thread> alive;
  std::atomic<bool> released{false};
  void* mine[5] = {};
  void* owned[20] = {};
  void* over[2] = {};

  // Runs fn on a new thread named `name`; returns once fn is done, the thread staying alive.
  template <class F>
  void stay(const char* name, F fn) {
    std::atomic<bool> done{false};
    alive.emplace_back([this, name, fn, &done] {
      pthread_setname_np(pthread_self(), name);
      fn();
      done.store(true);
      while (!released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
    while (!done.load()) std::this_thread::yield();
  }
  void run() {
    for (void*& p : mine) p = livealloc::allocate(64);
    stay("mx-owner", [this] {
      for (void*& p : owned) p = livealloc::allocate(100);
    });
    std::thread([this] {
      pthread_setname_np(pthread_self(), "mx-gone");
      for (int i = 0; i < 3; ++i) livealloc::deallocate(owned[i]);
    }).join();
    stay("mx-heir", [] { livealloc::deallocate(livealloc::allocate(100)); });
    stay("mx-quiet", [] {
      for (int i = 0; i < 10; ++i) livealloc::deallocate(livealloc::allocate(200));
    });
    stay("mx-sender", [this] {
      for (void* p : mine) livealloc::deallocate(p);
    });
    stay("mx-over", [this] {
      for (int i = 3; i < 10; ++i) livealloc::deallocate(owned[i]);
      for (void*& p : over) p = livealloc::allocate(300);
    });
    for (void* p : over) livealloc::deallocate(p);
  }
  void release() {
    released.store(true);
    for (std::thread& t : alive) t.join();
  }
};
std::string shm_path(int pid) { return "/dev/shm/livealloc." + std::to_string(pid); }

// Runs after the handler enable() registered, which removed the name (it was registered after
// this one): enable() there must refuse rather than say 0 with no name (memlive's start() then
// said "no telemetry segment"), and a fork child, whose exit does not remove a name again (the
// handler has run), must name no file that would outlive it. Needs to be its process's first
// enable(), hence a process of its own: a fork of a test process that enabled before inherits
// that handler's earlier registration.
void after_exit_unlink() {
  namespace tm = livealloc::telemetry;
  int code = 0;
  if (tm::enabled() || *tm::path() != 0) code |= 1;
  if (tm::enable() != ECANCELED || tm::enabled()) code |= 2;
  if (access(shm_path(getpid()).c_str(), F_OK) == 0) code |= 4;
  const pid_t child = fork();
  if (child == 0) {
    const bool named = access(shm_path(getpid()).c_str(), F_OK) == 0;
    _exit(named || tm::enabled() ? 1 : 0);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
      WEXITSTATUS(status) != 0)
    code |= 8;
  if (child > 0 && access(shm_path(child).c_str(), F_OK) == 0) {
    unlink(shm_path(child).c_str());
    code |= 16;
  }
  _exit(code == 0 ? 42 : code);  // 42: the handler ran and every check held
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  std::string mode = argv[1];
  if (mode == "threads" && argc == 3) {
    std::vector<std::vector<void*>> kept;
    run_threads(std::atoi(argv[2]), kept);
    std::printf("ready %d\n", getpid());
    std::fflush(stdout);
    wait_for_parent();
    return 0;
  }
  if (mode == "fork") {
    void* before = livealloc::allocate(48);
    pid_t pid = fork();
    if (pid == 0) {
      std::vector<void*> v;
      for (int i = 0; i < 777; ++i) v.push_back(livealloc::allocate(48));
      std::printf("ready %d\n", getpid());
      std::fflush(stdout);
      wait_for_parent();
      std::exit(0);  // a normal exit: the child's segment is removed
    }
    int status = 0;
    waitpid(pid, &status, 0);
    livealloc::deallocate(before);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  if (mode == "fork_threads" && argc == 3) {
    void* mine = livealloc::allocate(64);
    std::thread([mine] { livealloc::deallocate(mine); }).join();  // a cross-thread free
    pid_t pid = fork();
    if (pid == 0) {
      std::vector<std::vector<void*>> kept;
      run_threads(std::atoi(argv[2]), kept);
      std::printf("ready %d\n", getpid());
      std::fflush(stdout);
      wait_for_parent();
      std::exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  if (mode == "matrix") {
    matrix_threads m;
    m.run();
    std::printf("ready %d\n", getpid());
    std::fflush(stdout);
    wait_for_parent();
    m.release();
    return 0;
  }
  if (mode == "after_exit") {
    std::atexit(after_exit_unlink);  // before enable(): runs after its handler
    if (livealloc::telemetry::enable() != 0) return 100;
    if (access(shm_path(getpid()).c_str(), F_OK) != 0) return 101;
    std::printf("ready %d\n", getpid());
    std::fflush(stdout);
    wait_for_parent();
    std::exit(0);
  }
  return 2;
}
