// Under LD_PRELOAD=liblivealloc.so with LIVEALLOC_PROFILE=1: every way a process can end without
// exit() must still remove its segment's name, or /dev/shm fills with stale livealloc.<pid>
// files (a program that forks and _exits, or calls daemon(), would leave one at every start).
// A vfork child that calls _exit must leave its parent's alone. Exits 0 when all holds, 1 with a
// line per failure.
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
  close(fds[0]);

  // daemon() itself (the preload's: glibc's ends the parent with its internal _exit). The daemon
  // reports through a pipe that it runs in a new session in "/" with stdin on /dev/null, and
  // that it has a segment of its own.
  if (pipe(fds) != 0) return 1;
  const pid_t starter = fork();
  if (starter == 0) {
    close(fds[0]);
    const int keep = dup(fds[1]);  // daemon() puts /dev/null on 0-2 only
    if (daemon(0, 0) != 0) _exit(2);
    char cwd[8] = {};
    struct stat null_st, in_st;
    const bool ok = getsid(0) == getpid() && getcwd(cwd, sizeof cwd) && std::string(cwd) == "/" &&
                    stat("/dev/null", &null_st) == 0 && fstat(0, &in_st) == 0 &&
                    in_st.st_rdev == null_st.st_rdev && exists(segment_of(getpid()));
    const std::string line = std::to_string(getpid()) + (ok ? " ok" : " bad");
    (void)!write(keep, line.data(), line.size());
    std::exit(0);
  }
  close(fds[1]);
  waitpid(starter, &status, 0);
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "daemon(): the call succeeded");
  check(!exists(segment_of(starter)), "daemon(): the process that called it left no segment");
  char buf[64] = {};
  std::string report;
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) report.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  check(report.size() > 3 && report.compare(report.size() - 3, 3, " ok") == 0,
        "daemon(): the daemon runs in a session of its own, in /, on /dev/null, with a segment (" +
            report + ")");

  // A fork child that execs a program that never allocates (/bin/true): the new image's
  // segment replaces the child's at load and goes at its exit, so nothing is left.
  const pid_t execer = fork();
  if (execer == 0) {
    execl("/bin/true", "true", static_cast<char*>(nullptr));
    _exit(127);
  }
  waitpid(execer, &status, 0);
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0 && !exists(segment_of(execer)),
        "exec of a program that never allocates: no segment left");

  // A vfork child shares the parent's memory and has its own pid: its _exit removes nothing.
  const pid_t v = vfork();
  if (v == 0) _exit(0);
  waitpid(v, &status, 0);
  check(exists(mine), "vfork child's _exit: the parent's segment is still there");
  return failures ? 1 : 0;
}
