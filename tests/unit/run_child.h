// Runs a function in a forked child and reports whether it died of SIGABRT and what it wrote:
// for the cases where livealloc must abort (a double free), which would end the test process.
#pragma once

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

struct child_outcome {
  bool aborted = false;
  std::string err;  // its stdout and stderr
};

template <class F>
child_outcome run_child(F fn) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  std::fflush(nullptr);  // else the child would write what the test process had buffered too
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    signal(SIGABRT, SIG_DFL);  // not doctest's crash reporter: the abort is the expected outcome
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    fn();
    _exit(0);
  }
  close(fds[1]);
  child_outcome o;
  char buf[1024];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) o.err.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  o.aborted = WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
  return o;
}

// An address as livealloc's messages print it.
inline std::string hex(const void* p) {
  char b[32];
  const auto a = static_cast<unsigned long>(reinterpret_cast<std::uintptr_t>(p));
  std::snprintf(b, sizeof b, "%#lx", a);
  return b;
}
