// Under LD_PRELOAD=liblivealloc.so with LIVEALLOC_PROFILE=1: every way a process can end without
// exit() must still remove its segment's name, or /dev/shm fills with stale livealloc.<pid>
// files (a program that forks and _exits, as daemon() does, would leave one at every start;
// glibc's daemon() itself calls glibc's internal _exit, which no preload reaches, so it is not
// tested here). A vfork child that calls _exit must leave
// its parent's alone. Exits 0 when all holds, 1 with a line per failure.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

int failures = 0;

std::string segment_of(pid_t pid) { return "/dev/shm/livealloc." + std::to_string(pid); }

bool exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

void check(bool ok, const std::string& what) {
  std::printf("%s  %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// A fork child that checks it has a segment of its own (exit status 3 if not), then ends as `how`.
void fork_and_end(const char* name, void (*end)(int)) {
  void* keep = std::malloc(100);  // the parent allocates around the fork
  const pid_t pid = fork();
  if (pid == 0) {
    void* p = std::malloc(200);
    std::free(p);
    end(exists(segment_of(getpid())) ? 0 : 3);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
        std::string(name) + ": the fork child had a segment of its own");
  check(!exists(segment_of(pid)), std::string(name) + ": the child's segment is gone after it");
  std::free(keep);
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);  // no buffered line is printed again by a fork child
  const std::string mine = segment_of(getpid());
  if (!exists(mine)) {
    std::printf("FAIL  no %s: run with LIVEALLOC_PROFILE=1 under the preload\n", mine.c_str());
    return 1;
  }
  fork_and_end("_exit", [](int status) { _exit(status); });
  fork_and_end("_Exit", [](int status) { _Exit(status); });
  fork_and_end("quick_exit", [](int status) { std::quick_exit(status); });
  fork_and_end("exit", [](int status) { std::exit(status); });

  // daemon()'s pattern: a process forks and _exits, and its child goes on.
  int fds[2];
  if (pipe(fds) != 0) return 1;
  const pid_t middle = fork();
  if (middle == 0) {
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      close(fds[0]);
      void* p = std::malloc(300);  // allocates on, in a segment of its own
      std::free(p);
      const char done = 'y';
      (void)!write(fds[1], &done, 1);
      std::exit(0);
    }
    _exit(0);
  }
  close(fds[1]);
  int status = 0;
  waitpid(middle, &status, 0);
  check(!exists(segment_of(middle)), "daemon(): the process that forked and _exited left no segment");
  char c = 0;
  check(read(fds[0], &c, 1) == 1, "daemon(): the process it left behind goes on");

  // A vfork child shares the parent's memory and has its own pid: its _exit removes nothing.
  const pid_t v = vfork();
  if (v == 0) _exit(0);
  waitpid(v, &status, 0);
  check(exists(mine), "vfork child's _exit: the parent's segment is still there");
  return failures ? 1 : 0;
}
