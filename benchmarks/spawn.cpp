// bench_spawn: runs a program N times and prints, per run, its wall and CPU time, peak RSS and minor
// faults as the kernel accounts them for that child alone.
//
//   bench_spawn N program [args...]    ->  SPAWN wall_s=... cpu_s=... maxrss_kib=... minflt=...
//
// Why a separate, statically linked launcher: a child's ru_maxrss is at least the peak RSS of the
// process it was forked from (exec keeps the old image's high-water mark), so measuring /bin/true
// from python3 would report python's 15 MiB. This launcher is tiny, and being static it is not
// itself affected by the LD_PRELOAD it passes on to the child.
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>

extern char** environ;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: bench_spawn N program [args...]\n");
    return 64;
  }
  const long runs = std::atol(argv[1]);
  for (long i = 0; i < runs; ++i) {
    timespec t0{}, t1{};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pid_t pid = 0;
    // posix_spawn uses vfork-style cloning: no copy of this process is ever resident in the child.
    if (posix_spawn(&pid, argv[2], nullptr, nullptr, argv + 2, environ) != 0) {
      std::perror("bench_spawn: posix_spawn");
      return 127;
    }
    int status = 0;
    rusage ru{};
    if (wait4(pid, &status, 0, &ru) != pid) {
      std::perror("bench_spawn: wait4");
      return 127;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double wall =
        static_cast<double>(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
    std::printf("SPAWN wall_s=%.6f cpu_s=%.6f maxrss_kib=%ld minflt=%ld\n", wall, cpu,
                ru.ru_maxrss, ru.ru_minflt);
    std::fflush(stdout);
    if (WIFSIGNALED(status)) {
      std::fprintf(stderr, "bench_spawn: %s killed by signal %d\n", argv[2], WTERMSIG(status));
      return 128 + WTERMSIG(status);
    }
    if (WEXITSTATUS(status) != 0) return WEXITSTATUS(status);
  }
  return 0;
}
