// memlive's capture hooks in a program that does not use livealloc as its malloc, for
// tests/memlive/hooks_test.py. One source, three programs (tests/memlive/CMakeLists.txt):
//
//   memlive_hooks_app        the hooks (memlive::on_alloc/on_free) around malloc/free
//   memlive_hooks_new_app    the same with MEMLIVE_COUNT_GLOBAL_NEW: global new/delete counted
//   memlive_hooks_label_app  livealloc as malloc (LIVEALLOC_OVERRIDE), so that memlive's own
//                            threads take telemetry slots and must come out labelled
//
// It obeys lines on stdin, one at a time, and answers each with one line "ok ..." (or "error
// ..."), so the driver knows exactly what was counted and when:
//   thread NAME                  a new thread named NAME, idle until told; "ok tid=N"
//   on NAME alloc KIND SIZE N    thread NAME allocates N blocks of SIZE bytes; "ok usable=U"
//                                (malloc_usable_size of one block, or SIZE for KIND hook)
//   on NAME free KIND SIZE N     thread NAME frees the first N blocks of that kind and size it
//                                holds (in the order it got them); "ok"
//   on NAME give KIND SIZE N TO  moves N such blocks from NAME's holdings to TO's (no counting)
//   exit NAME                    thread NAME returns (its blocks are left allocated); joined
//   start / stop                 memlive::start() on port 0 / memlive::stop(); "ok port=P pid=N"
//   json                         "ok <memlive::take_snapshot() as JSON>"
//   bench N                      a new thread times N x (on_alloc + on_free) of 64 bytes; "ok ns=X"
//   stray SIZE                   this thread calls on_free(p, SIZE) with no on_alloc before; "ok"
//   quit                         (or end of input) exits 0
// KIND: hook (malloc + on_alloc, on_free + free), malloc (malloc/free, nothing else), and
// pairs of replaceable global forms that between them call all 20 of C++17 (align: 64):
//   new                    ::operator new(n)                  ::operator delete(p, n)
//   array                  new char[n]                        delete[]
//   aligned                ::operator new(n, align)           ::operator delete(p, align)
//   nothrow                ::operator new(n, nothrow)         ::operator delete(p)
//   delete_nothrow         ::operator new(n)                  ::operator delete(p, nothrow)
//   array_nothrow          ::operator new[](n, nothrow)       ::operator delete[](p, nothrow)
//   array_sized            ::operator new[](n)                ::operator delete[](p, n)
//   array_aligned          ::operator new[](n, align)         ::operator delete[](p, align)
//   aligned_nothrow        ::operator new(n, align, nothrow)  ::operator delete(p, align, nothrow)
//   array_aligned_nothrow  ::operator new[](n, align, nothrow)
//                                                    ::operator delete[](p, align, nothrow)
//   aligned_sized          ::operator new(n, align)           ::operator delete(p, n, align)
//   array_aligned_sized    ::operator new[](n, align)         ::operator delete[](p, n, align)
// A block of an aligned kind that is not 64-byte aligned is an error ("misaligned").
//
// Nothing here allocates through operator new except the planned blocks: threads are pthreads,
// the per-thread state is a static array, block lists come from malloc, output goes through
// printf. So with MEMLIVE_COUNT_GLOBAL_NEW each worker thread's counters are exactly its plan.
#ifdef MEMLIVE_HOOKS_APP_LIVEALLOC
#define LIVEALLOC_OVERRIDE 1
#include <livealloc.h>
#endif
#include <malloc.h>
#include <memlive.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

namespace {

enum kind {
  k_hook,
  k_malloc,
  k_new,
  k_array,
  k_aligned,
  k_nothrow,
  k_delete_nothrow,
  k_array_nothrow,
  k_array_sized,
  k_array_aligned,
  k_aligned_nothrow,
  k_array_aligned_nothrow,
  k_aligned_sized,
  k_array_aligned_sized,
  k_count
};
const char* const kKindNames[k_count] = {
    "hook", "malloc", "new", "array", "aligned", "nothrow", "delete_nothrow", "array_nothrow",
    "array_sized", "array_aligned", "aligned_nothrow", "array_aligned_nothrow", "aligned_sized",
    "array_aligned_sized"};
constexpr std::size_t kAlign = 64;
constexpr std::align_val_t kAlignVal{kAlign};

bool is_aligned_kind(int kind) {
  return kind == k_aligned || kind == k_array_aligned || kind == k_aligned_nothrow ||
         kind == k_array_aligned_nothrow || kind == k_aligned_sized ||
         kind == k_array_aligned_sized;
}

struct block {
  int kind;
  std::size_t size;
  void* ptr;
};

struct command {
  enum { none, alloc, free_blocks, exit } op = none;
  int kind = 0;
  std::size_t size = 0, count = 0;
};

constexpr int kMaxThreads = 64;
constexpr std::size_t kMaxBlocks = 1 << 16;

struct worker {
  char name[16] = {};
  pthread_t thread{};
  long tid = 0;
  bool used = false;
  std::mutex mutex;
  std::condition_variable cv;
  command cmd;
  bool busy = false;       // cmd set, not done yet
  std::size_t usable = 0;  // answer of the last alloc
  const char* error = nullptr;
  block* blocks = nullptr;  // malloc'd, kMaxBlocks
  std::size_t nblocks = 0;
};
worker g_workers[kMaxThreads];
// The blocks of exited threads whose worker entry a new thread took: they stay allocated (the
// counters keep them) until the program ends, where main frees them; new_thread gives the new
// thread a list of its own. (Overwritten, they were unreachable: LeakSanitizer's leaks.)
struct left_list {
  block* blocks;
  std::size_t nblocks;
};
constexpr int kMaxLeftLists = 1024;
left_list g_left[kMaxLeftLists];
int g_left_count = 0;

void* allocate(int kind, std::size_t size) {
  switch (kind) {
    case k_hook: {
      void* p = std::malloc(size ? size : 1);
      memlive::on_alloc(p, size);
      return p;
    }
    case k_malloc:
      return std::malloc(size ? size : 1);
    case k_new:
      return ::operator new(size);
    case k_array:
      return new char[size];
    case k_aligned:
    case k_aligned_sized:
      return ::operator new(size, kAlignVal);
    case k_nothrow:
      return ::operator new(size, std::nothrow);
    case k_delete_nothrow:
      return ::operator new(size);
    case k_array_nothrow:
      return ::operator new[](size, std::nothrow);
    case k_array_sized:
      return ::operator new[](size);
    case k_array_aligned:
    case k_array_aligned_sized:
      return ::operator new[](size, kAlignVal);
    case k_aligned_nothrow:
      return ::operator new(size, kAlignVal, std::nothrow);
    default:
      return ::operator new[](size, kAlignVal, std::nothrow);
  }
}

void release(int kind, std::size_t size, void* p) {
  switch (kind) {
    case k_hook:
      memlive::on_free(p, size);
      std::free(p);
      break;
    case k_malloc:
      std::free(p);
      break;
    case k_new:
      ::operator delete(p, size);
      break;
    case k_array:
      delete[] static_cast<char*>(p);
      break;
    case k_aligned:
      ::operator delete(p, kAlignVal);
      break;
    case k_nothrow:
      ::operator delete(p);
      break;
    case k_delete_nothrow:
      ::operator delete(p, std::nothrow);
      break;
    case k_array_nothrow:
      ::operator delete[](p, std::nothrow);
      break;
    case k_array_sized:
      ::operator delete[](p, size);
      break;
    case k_array_aligned:
      ::operator delete[](p, kAlignVal);
      break;
    case k_aligned_nothrow:
      ::operator delete(p, kAlignVal, std::nothrow);
      break;
    case k_array_aligned_nothrow:
      ::operator delete[](p, kAlignVal, std::nothrow);
      break;
    case k_aligned_sized:
      ::operator delete(p, size, kAlignVal);
      break;
    default:
      ::operator delete[](p, size, kAlignVal);
      break;
  }
}

std::size_t usable_of(int kind, std::size_t size, void* p) {
  return kind == k_hook ? size : malloc_usable_size(p);
}

// Removes the first `count` blocks of (kind, size) from w's list, in order, into `out`.
std::size_t take_blocks(worker& w, int kind, std::size_t size, std::size_t count, block* out) {
  std::size_t taken = 0, kept = 0;
  for (std::size_t i = 0; i < w.nblocks; ++i) {
    const block b = w.blocks[i];
    if (taken < count && b.kind == kind && b.size == size)
      out[taken++] = b;
    else
      w.blocks[kept++] = b;
  }
  w.nblocks = kept;
  return taken;
}

void run(worker& w, const command& c) {
  if (c.op == command::alloc) {
    if (w.nblocks + c.count > kMaxBlocks) {
      w.error = "too many blocks";
      return;
    }
    for (std::size_t i = 0; i < c.count; ++i) {
      void* p = allocate(c.kind, c.size);
      if (!p) {
        w.error = "allocation failed";
        return;
      }
      if (is_aligned_kind(c.kind) && reinterpret_cast<std::uintptr_t>(p) % kAlign != 0) {
        release(c.kind, c.size, p);
        w.error = "misaligned";
        return;
      }
      static_cast<char*>(p)[0] = 1;
      if (i == 0) w.usable = usable_of(c.kind, c.size, p);
      w.blocks[w.nblocks++] = {c.kind, c.size, p};
    }
  } else if (c.op == command::free_blocks) {
    // Freed in place, in the order held: nothing else is allocated meanwhile.
    std::size_t freed = 0, kept = 0;
    for (std::size_t i = 0; i < w.nblocks; ++i) {
      const block b = w.blocks[i];
      if (freed < c.count && b.kind == c.kind && b.size == c.size) {
        release(b.kind, b.size, b.ptr);
        ++freed;
      } else {
        w.blocks[kept++] = b;
      }
    }
    w.nblocks = kept;
    if (freed < c.count) w.error = "not that many blocks held";
  }
}

void* worker_main(void* arg) {
  worker& w = *static_cast<worker*>(arg);
  pthread_setname_np(pthread_self(), w.name);
  std::unique_lock<std::mutex> lock(w.mutex);
  w.tid = syscall(SYS_gettid);
  w.busy = false;
  w.cv.notify_all();
  for (;;) {
    w.cv.wait(lock, [&] { return w.busy; });
    const command c = w.cmd;
    if (c.op == command::exit) {
      w.busy = false;
      w.cv.notify_all();
      return nullptr;
    }
    w.error = nullptr;
    run(w, c);
    w.busy = false;
    w.cv.notify_all();
  }
}

worker* find(const char* name) {
  for (worker& w : g_workers)
    if (w.used && std::strcmp(w.name, name) == 0) return &w;
  return nullptr;
}

int kind_of(const char* name) {
  for (int k = 0; k < k_count; ++k)
    if (std::strcmp(kKindNames[k], name) == 0) return k;
  return -1;
}

// Gives w a command and waits until it is done.
void order(worker& w, const command& c) {
  std::unique_lock<std::mutex> lock(w.mutex);
  w.cmd = c;
  w.busy = true;
  w.cv.notify_all();
  w.cv.wait(lock, [&] { return !w.busy; });
}

void new_thread(const char* name) {
  if (find(name)) return (void)std::printf("error thread %s exists\n", name);
  // (A thread name holds 15 characters; main reads at most that, but the compiler cannot know.)
  const std::size_t length = std::strlen(name);
  if (length >= sizeof worker::name) return (void)std::printf("error name %s too long\n", name);
  worker* w = nullptr;
  for (worker& x : g_workers)
    if (!x.used) {
      w = &x;
      break;
    }
  if (!w) return (void)std::printf("error too many threads\n");
  if (w->nblocks > 0) {  // blocks of the thread that exited here: kept, see g_left
    if (g_left_count == kMaxLeftLists) return (void)std::printf("error too many threads\n");
    g_left[g_left_count++] = {w->blocks, w->nblocks};
    w->blocks = nullptr;
  }
  std::memcpy(w->name, name, length + 1);
  if (!w->blocks) w->blocks = static_cast<block*>(std::malloc(kMaxBlocks * sizeof(block)));
  w->nblocks = 0;
  w->used = true;
  w->busy = true;  // until the thread has named itself
  if (pthread_create(&w->thread, nullptr, worker_main, w) != 0) {
    w->used = false;
    return (void)std::printf("error pthread_create\n");
  }
  std::unique_lock<std::mutex> lock(w->mutex);
  w->cv.wait(lock, [&] { return !w->busy; });
  std::printf("ok tid=%ld\n", w->tid);
}

struct bench_arg {
  std::size_t n;
  double ns;
};

void* bench_main(void* arg) {
  auto* b = static_cast<bench_arg*>(arg);
  pthread_setname_np(pthread_self(), "hk-bench");
  alignas(64) static char object[64];
  void* volatile p = object;  // the hooks never look at the block
  memlive::on_alloc(p, 64);   // the thread's slot, outside the timing
  memlive::on_free(p, 64);
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < b->n; ++i) {
    memlive::on_alloc(p, 64);
    memlive::on_free(p, 64);
  }
  const auto t1 = std::chrono::steady_clock::now();
  b->ns = std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(b->n);
  return nullptr;
}

void print_json() {
  livealloc::reader::snapshot s;
  std::string err;
  if (!memlive::take_snapshot(&s, &err)) return (void)std::printf("error %s\n", err.c_str());
  const std::string json = memlive::to_json(s);
  std::printf("ok %s\n", json.c_str());
}

}  // namespace

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  char line[512];
  while (std::fgets(line, sizeof line, stdin)) {
    char a[64] = {}, b[64] = {}, c[64] = {}, d[64] = {};
    std::size_t size = 0, count = 0;
    if (std::sscanf(line, "thread %15s", a) == 1) {
      new_thread(a);
    } else if (std::sscanf(line, "on %15s %63s %63s %zu %zu %15s", a, b, c, &size, &count, d) >=
               5) {
      worker* w = find(a);
      const int k = kind_of(c);
      if (!w || k < 0) {
        std::printf("error no thread %s or kind %s\n", a, c);
      } else if (std::strcmp(b, "alloc") == 0 || std::strcmp(b, "free") == 0) {
        command cmd;
        cmd.op = b[0] == 'a' ? command::alloc : command::free_blocks;
        cmd.kind = k;
        cmd.size = size;
        cmd.count = count;
        order(*w, cmd);
        if (w->error)
          std::printf("error %s\n", w->error);
        else if (cmd.op == command::alloc)
          std::printf("ok usable=%zu\n", w->usable);
        else
          std::printf("ok\n");
      } else if (std::strcmp(b, "give") == 0) {
        worker* to = find(d);
        if (!to || to->nblocks + count > kMaxBlocks) {
          std::printf("error cannot give to '%s'\n", d);
          continue;
        }
        // Both threads are idle (every command is waited for): their lists are ours.
        std::lock_guard<std::mutex> l1(w->mutex);
        std::lock_guard<std::mutex> l2(to->mutex);
        const std::size_t n = take_blocks(*w, k, size, count, to->blocks + to->nblocks);
        to->nblocks += n;
        std::printf(n == count ? "ok\n" : "error only %zu blocks\n", n);
      } else {
        std::printf("error unknown action %s\n", b);
      }
    } else if (std::sscanf(line, "exit %15s", a) == 1) {
      worker* w = find(a);
      if (!w) {
        std::printf("error no thread %s\n", a);
        continue;
      }
      command cmd;
      cmd.op = command::exit;
      order(*w, cmd);
      pthread_join(w->thread, nullptr);
      w->used = false;
      std::printf("ok\n");
    } else if (std::strncmp(line, "start", 5) == 0) {
      memlive::options o;
      o.port = 0;
      o.quiet = true;
      o.stream_interval_ms = 50;
      const memlive::status st = memlive::start(o);
      if (st)
        std::printf("ok port=%d pid=%d\n", st.port, static_cast<int>(getpid()));
      else
        std::printf("error %d %s\n", static_cast<int>(st.error), st.message.c_str());
    } else if (std::strncmp(line, "stop", 4) == 0) {
      memlive::stop();
      std::printf("ok\n");
    } else if (std::strncmp(line, "json", 4) == 0) {
      print_json();
    } else if (std::sscanf(line, "stray %zu", &count) == 1) {
      static char never_counted;
      memlive::on_free(&never_counted, count);
      std::printf("ok\n");
    } else if (std::sscanf(line, "bench %zu", &count) == 1 && count > 0) {
      bench_arg arg{count, 0};
      pthread_t t;
      if (pthread_create(&t, nullptr, bench_main, &arg) != 0) {
        std::printf("error pthread_create\n");
        continue;
      }
      pthread_join(t, nullptr);
      std::printf("ok ns=%.2f\n", arg.ns);
    } else if (std::strncmp(line, "quit", 4) == 0) {
      break;
    } else {
      std::printf("error unknown command: %s", line);
    }
  }
  memlive::stop();
  for (worker& w : g_workers)
    if (w.used) {
      command cmd;
      cmd.op = command::exit;
      order(w, cmd);
      pthread_join(w.thread, nullptr);
    }
  for (int i = 0; i < g_left_count; ++i) {
    for (std::size_t j = 0; j < g_left[i].nblocks; ++j) {
      const block& b = g_left[i].blocks[j];
      release(b.kind, b.size, b.ptr);
    }
    std::free(g_left[i].blocks);
  }
  return 0;
}
