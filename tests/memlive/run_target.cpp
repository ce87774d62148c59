// A plain program for `memlive run` (tests/memlive/http_test.py run): it uses only malloc, which
// the preloaded liblivealloc.so provides. Prints "target ready <pid>", then obeys stdin lines:
//   alloc SIZE COUNT   malloc COUNT blocks of SIZE bytes, kept; prints "allocated"
//   exec               execs itself (the same pid, a new image; what it kept is dropped)
//   exec PROGRAM ARG.. execs PROGRAM (PATH searched) with those arguments, split at spaces
//   exit N             exits with status N (also at end of input: 0)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main() {
  std::vector<void*> kept;
  std::printf("target ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  char line[256];
  while (std::fgets(line, sizeof line, stdin)) {
    std::size_t size = 0, count = 0;
    int code = 0;
    if (std::sscanf(line, "alloc %zu %zu", &size, &count) == 2) {
      for (std::size_t i = 0; i < count; ++i) {
        void* p = std::malloc(size);
        if (!p) return 99;
        std::memset(p, 1, size);
        kept.push_back(p);
      }
      std::printf("allocated\n");
      std::fflush(stdout);
    } else if (std::strcmp(line, "exec\n") == 0) {
      char self[] = "memlive_run_target";
      char* argv[] = {self, nullptr};
      execv("/proc/self/exe", argv);
      return 98;
    } else if (std::strncmp(line, "exec ", 5) == 0) {
      line[std::strcspn(line, "\n")] = '\0';
      std::vector<char*> argv;
      for (char* t = std::strtok(line + 5, " "); t; t = std::strtok(nullptr, " "))
        argv.push_back(t);
      argv.push_back(nullptr);
      if (argv[0]) execvp(argv[0], argv.data());
      return 98;
    } else if (std::sscanf(line, "exit %d", &code) == 1) {
      for (void* p : kept) std::free(p);
      return code;
    }
  }
  for (void* p : kept) std::free(p);
  return 0;
}
