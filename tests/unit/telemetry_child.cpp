// A separate process for the telemetry tests that need one (start-up options, umask, exit, fork).
// It runs one scenario, writes "ready <pid>" on stdout, and waits for a line on stdin to exit.
//   telemetry_child threads N      N threads, each allocating 100 blocks of 100 bytes, then wait
//   telemetry_child fork           fork; the child allocates 777 blocks of 48 bytes and reports
//                                  "ready <child pid>"; both wait
//   telemetry_child fork_threads N a second thread frees a block of the main thread's and exits;
//                                  fork; the child runs N threads as `threads N` does and reports
//                                  "ready <child pid>"; both wait
#include <livealloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
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
  return 2;
}
