// A program that defines daemon() and _Exit() itself, as portability code does, links with
// LIVEALLOC_OVERRIDE in another of its files (livealloc's are weak) and keeps its own: it exits 3
// from its own _Exit, after its own daemon's 42; livealloc's _Exit would exit 2.
// Built twice: with LIVEALLOC_OVERRIDE (the allocator) and without (the program).
#include <livealloc.h>

#ifndef LIVEALLOC_OVERRIDE
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>

extern "C" int daemon(int, int) noexcept { return 42; }
extern "C" void _Exit(int status) noexcept {
  for (;;) syscall(SYS_exit_group, status + 1);
}

int main() {
  void* p = std::malloc(100);
  const bool ours = livealloc::get_stats().heaps_in_use >= 1;  // the override is in place
  std::free(p);
  if (!ours || daemon(0, 0) != 42) return 1;
  _Exit(2);
}
#endif
