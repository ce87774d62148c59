// Under LD_PRELOAD=liblivealloc.so, with LIVEALLOC_PROFILE=0 or 1: the allocator keeps no file
// descriptor the program could see, and a program that closes every descriptor above 2 and opens
// its own files keeps them across a fork (the fork handler once closed the number it had kept
// for its segment, which was by then the program's file). Exits 0 when all holds, 1 with a line
// per failure.
#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s  %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

// Descriptors above 2 that name something in /dev/shm, as "fd -> target" lines.
std::string shm_descriptors() {
  std::string out;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return "cannot read /proc/self/fd";
  const int own = dirfd(d);
  while (dirent* e = readdir(d)) {
    const int fd = std::atoi(e->d_name);
    if (fd <= 2 || fd == own) continue;
    char target[PATH_MAX] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(link.c_str(), target, sizeof target - 1) > 0 &&
        std::strncmp(target, "/dev/shm/", 9) == 0)
      out += std::string(e->d_name) + " -> " + target + "; ";
  }
  closedir(d);
  return out;
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  void* warm = std::malloc(64);  // the allocator is set up by now
  std::free(warm);
  const std::string held = shm_descriptors();
  check(held.empty(), "no descriptor of the allocator's is open (" + held + ")");

  // A daemon's start: close everything above 2, open a log (it gets the lowest number), fork;
  // the child writes to the log.
  for (int fd = 3; fd < 1024; ++fd) close(fd);
  char path[] = "/tmp/livealloc-descriptors-XXXXXX";
  const int log = mkstemp(path);
  if (log < 0) return 1;
  unlink(path);
  const pid_t pid = fork();
  if (pid == 0) {
    void* p = std::malloc(100);
    std::free(p);
    _exit(write(log, "child\n", 6) == 6 ? 0 : 3);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  char buf[16] = {};
  const bool wrote = pread(log, buf, sizeof buf - 1, 0) == 6 && std::string(buf) == "child\n";
  check(WIFEXITED(status) && WEXITSTATUS(status) == 0 && wrote,
        "a fork child writes to the program's descriptor " + std::to_string(log) +
            " (exit status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")");
  check(fcntl(log, F_GETFD) != -1, "the parent's descriptor is still open after the fork");
  void* after = std::malloc(200);  // and the allocator goes on
  std::free(after);
  return failures ? 1 : 0;
}
