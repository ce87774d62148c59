// Telemetry written by the allocator and read back through livealloc_reader.h: exact counts,
// slot reuse, thread names, the overflow slot, permissions, life cycle, fork, live tuning.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <livealloc.h>
#include <livealloc_reader.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace la = livealloc;
namespace rd = livealloc::reader;
using namespace livealloc::telemetry;

namespace {

std::unique_ptr<rd::segment> own_segment() {
  REQUIRE(la::telemetry::enable() == 0);
  std::string err;
  auto seg = rd::segment::open_pid(getpid(), &err);
  INFO(err);
  REQUIRE(seg);
  return seg;
}

rd::snapshot snap(const rd::segment& seg) {
  rd::snapshot s = seg.take();
  INFO(s.error);
  REQUIRE(s.ok());
  return s;
}

const rd::thread_view* by_tid(const rd::snapshot& s, int tid) {
  for (const auto& t : s.threads)
    if (t.tid == tid && t.state == slot_alive) return &t;
  return nullptr;
}

const rd::thread_view* overflow_slot(const rd::snapshot& s) {
  for (const auto& t : s.threads)
    if (t.state == slot_overflow) return &t;
  return nullptr;
}

int my_tid() { return static_cast<int>(syscall(SYS_gettid)); }

// Runs `fn` on a new thread that calls itself `name`, and waits for it.
void on_named_thread(const char* name, const std::function<void()>& fn) {
  std::thread t([&] {
    pthread_setname_np(pthread_self(), name);
    fn();
  });
  t.join();
}

// A child process (tests/unit/telemetry_child) that reports "ready <pid>" and waits for a line.
struct child {
  pid_t pid = -1;
  int to = -1;
  FILE* from = nullptr;
  int reported = 0;
  child(std::vector<std::string> args, std::vector<std::string> env, mode_t umask_value = 022) {
    int in[2], out[2];
    REQUIRE(pipe(in) == 0);
    REQUIRE(pipe(out) == 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    std::vector<char*> argv, envp;
    std::string exe = LIVEALLOC_TELEMETRY_CHILD;
    argv.push_back(exe.data());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    mode_t old = umask(umask_value);
    int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), envp.data());
    umask(old);
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    REQUIRE(rc == 0);
    to = in[1];
    from = fdopen(out[0], "r");
    REQUIRE(std::fscanf(from, "ready %d", &reported) == 1);
  }
  // Lets the child (and its own children) exit; returns the exit status.
  int finish() {
    REQUIRE(write(to, "go\n", 3) == 3);
    close(to);
    int status = 0;
    waitpid(pid, &status, 0);
    std::fclose(from);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
};

std::string shm_path(int pid) { return "/dev/shm/livealloc." + std::to_string(pid); }

}  // namespace

TEST_CASE("the segment publishes each class's block size and the units of its spans") {
  namespace d = la::detail;
  auto seg = own_segment();
  const rd::snapshot s = snap(*seg);
  REQUIRE(s.class_sizes.size() == d::kClasses);
  REQUIRE(s.class_units.size() == d::kClasses);
  CHECK(s.class_sizes[0] == 0);
  CHECK(s.class_units[0] == 0);
  for (unsigned c = 1; c < d::kClasses; ++c) {
    CAPTURE(c);
    CHECK(s.class_sizes[c] == d::class_size(c));
    CHECK(s.class_units[c] == d::class_units(c));
    // A span holds at least kMinBlocksPerSpan blocks, in as few units as that takes.
    CHECK(s.class_units[c] * d::kUnitSize >= d::kMinBlocksPerSpan * s.class_sizes[c]);
    CHECK((s.class_units[c] == 1 ||
           (s.class_units[c] - 1) * d::kUnitSize < d::kMinBlocksPerSpan * s.class_sizes[c]));
  }
}

TEST_CASE("exact counts per thread and class: allocations, remote frees, reallocs, names") {
  auto seg = own_segment();
  const unsigned cls = la::detail::class_of(100);
  constexpr int N = 1000, M = 400, K = 10;
  std::vector<void*> blocks;
  std::mutex m;
  std::condition_variable cv;
  int step = 0;
  int worker_tid = 0;
  rd::snapshot main_before = snap(*seg);
  const rd::thread_view* mb = by_tid(main_before, my_tid());
  std::uint64_t main_sent_before = mb ? mb->counters[cls][c_remote_sent] : 0;

  std::thread worker([&] {
    pthread_setname_np(pthread_self(), "count-worker");
    worker_tid = my_tid();
    for (int i = 0; i < N; ++i) blocks.push_back(la::allocate(100));
    for (int i = 0; i < K; ++i) REQUIRE(la::reallocate(blocks[static_cast<std::size_t>(i)], 104) == blocks[static_cast<std::size_t>(i)]);
    {  // hand M blocks to the main thread, wait until it freed them
      std::unique_lock<std::mutex> l(m);
      step = 1;
      cv.notify_all();
      cv.wait(l, [&] { return step == 2; });
    }
    la::trim();  // drains the inbox: the M remote frees come home
    for (int i = M; i < N; ++i) la::deallocate(blocks[static_cast<std::size_t>(i)]);
    std::unique_lock<std::mutex> l(m);
    step = 3;
    cv.notify_all();
    cv.wait(l, [&] { return step == 4; });  // stay alive for the snapshot
  });
  {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return step == 1; });
  }
  for (int i = 0; i < M; ++i) la::deallocate(blocks[static_cast<std::size_t>(i)]);
  la::trim();  // hands the outbox back now
  {
    std::unique_lock<std::mutex> l(m);
    step = 2;
    cv.notify_all();
    cv.wait(l, [&] { return step == 3; });
  }
  rd::snapshot s = snap(*seg);
  const rd::thread_view* w = by_tid(s, worker_tid);
  REQUIRE(w != nullptr);
  CHECK(w->name == "count-worker");
  const auto& k = w->counters[cls];
  CHECK(k[c_allocs] == N + K);
  CHECK(k[c_frees] == N + K);  // K in-place reallocs are a free and an allocation each
  CHECK(k[c_requested_bytes] == N * 100u + K * 104u);
  CHECK(k[c_remote_received] == M);
  CHECK(k[c_remote_sent] == 0);
  CHECK(w->live(cls) == 0);
  CHECK(k[c_pages_taken] >= 1);
  CHECK(k[c_reserved_blocks] >= static_cast<std::uint64_t>(N) - 64);
  const rd::thread_view* mt = by_tid(s, my_tid());
  REQUIRE(mt != nullptr);
  CHECK(mt->counters[cls][c_remote_sent] - main_sent_before == M);
  CHECK(mt->flushes >= 1);
  // Peak live blocks, as seen at the worker's slow paths: close to N, never above N + K.
  CHECK(k[c_peak_live] <= static_cast<std::uint64_t>(N + K));
  CHECK(k[c_peak_live] + 200 >= static_cast<std::uint64_t>(N));
  // The free matrix: the main thread freed M blocks the worker's heap owned.
  std::uint64_t matrix_before = main_before.freed(mb ? mb->slot : 0, w->slot);
  CHECK(s.freed(mt->slot, w->slot) - (mb ? matrix_before : 0) == M);
  CHECK(s.freed(w->slot, mt->slot) == 0);
  CHECK(s.resident_bytes > 0);
  {
    std::lock_guard<std::mutex> l(m);
    step = 4;
    cv.notify_all();
  }
  worker.join();
}

TEST_CASE("a remote free kept for reuse stays live in its owner, not in the thread reusing it") {
  auto seg = own_segment();
  const unsigned cls = la::detail::class_of(100);
  constexpr int N = 64;  // fits the recent-free list of the class (128 blocks)
  std::vector<void*> blocks;
  std::mutex m;
  std::condition_variable cv;
  int step = 0;
  int worker_tid = 0;
  std::thread worker([&] {
    worker_tid = my_tid();
    for (int i = 0; i < N; ++i) blocks.push_back(la::allocate(100));
    std::unique_lock<std::mutex> l(m);
    step = 1;
    cv.notify_all();
    cv.wait(l, [&] { return step == 2; });
    l.unlock();
    la::trim();  // drains the inbox: the blocks come home
    l.lock();
    step = 3;
    cv.notify_all();
    cv.wait(l, [&] { return step == 4; });
  });
  {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return step == 1; });
  }
  la::deallocate(la::allocate(100));  // the main thread has a heap (and a slot)
  la::trim();                         // and its recent-free lists start empty
  rd::snapshot before = snap(*seg);
  const rd::thread_view* mb = by_tid(before, my_tid());
  REQUIRE(mb != nullptr);
  const auto b0 = mb->counters[cls];
  const std::uint64_t main_live0 = mb->live(cls);

  for (void* p : blocks) la::deallocate(p);  // remote frees, kept on this thread's list
  CHECK(la::detail::heap_is_valid());
  std::vector<void*> again;
  for (int i = 0; i < N; ++i) again.push_back(la::allocate(100));
  // The same blocks, reused here (most recent first) while the worker's pages own them.
  std::vector<void*> x = blocks, y = again;
  std::sort(x.begin(), x.end());
  std::sort(y.begin(), y.end());
  CHECK(x == y);
  rd::snapshot mid = snap(*seg);
  const rd::thread_view* mm = by_tid(mid, my_tid());
  const rd::thread_view* wm = by_tid(mid, worker_tid);
  REQUIRE(mm != nullptr);
  REQUIRE(wm != nullptr);
  CHECK(mm->counters[cls][c_allocs] - b0[c_allocs] == N);
  CHECK(mm->counters[cls][c_foreign_allocs] - b0[c_foreign_allocs] == N);
  CHECK(mm->counters[cls][c_remote_sent] - b0[c_remote_sent] == N);
  CHECK(mm->live(cls) == main_live0);  // live where the pages are: in the worker
  CHECK(wm->live(cls) == N);
  CHECK(wm->counters[cls][c_remote_received] == 0);

  for (void* p : again) la::deallocate(p);
  la::trim();  // sends them home
  {
    std::unique_lock<std::mutex> l(m);
    step = 2;
    cv.notify_all();
    cv.wait(l, [&] { return step == 3; });
  }
  rd::snapshot s = snap(*seg);
  const rd::thread_view* mt = by_tid(s, my_tid());
  const rd::thread_view* w = by_tid(s, worker_tid);
  REQUIRE(mt != nullptr);
  REQUIRE(w != nullptr);
  CHECK(w->counters[cls][c_allocs] == N);
  CHECK(w->counters[cls][c_frees] == N);
  CHECK(w->counters[cls][c_remote_received] == N);
  CHECK(w->live(cls) == 0);
  CHECK(mt->counters[cls][c_remote_sent] - b0[c_remote_sent] == 2 * N);
  CHECK(mt->live(cls) == main_live0);
  CHECK(s.freed(mt->slot, w->slot) - before.freed(mb->slot, w->slot) == 2 * N);
  {
    std::lock_guard<std::mutex> l(m);
    step = 4;
    cv.notify_all();
  }
  worker.join();
}

TEST_CASE("a remote free of an exited thread's block goes home at once, not onto a foreign list") {
  auto seg = own_segment();
  const unsigned cls = la::detail::class_of(100);
  // Fits the recent-free list of the class (128 blocks), so only the owner's state sends them
  // home, and makes two whole batches of remote_batch (32), which go without a trim (a trim
  // would send kept blocks home too).
  constexpr int N = 64;
  std::vector<void*> blocks;
  int worker_tid = 0;
  la::deallocate(la::allocate(100));  // a heap of its own first: else this thread adopts the
                                      // worker's heap once it exits, and its blocks with it
  on_named_thread("exits-first", [&] {
    worker_tid = my_tid();
    for (int i = 0; i < N; ++i) blocks.push_back(la::allocate(100));
  });
  la::trim();  // the main thread's recent-free lists start empty
  rd::snapshot before = snap(*seg);
  const rd::thread_view* mb = by_tid(before, my_tid());
  REQUIRE(mb != nullptr);
  const auto b0 = mb->counters[cls];

  for (void* p : blocks) la::deallocate(p);
  CHECK(la::detail::heap_is_valid());
  std::vector<void*> again;
  for (int i = 0; i < N; ++i) again.push_back(la::allocate(100));
  rd::snapshot s = snap(*seg);
  const rd::thread_view* m = by_tid(s, my_tid());
  REQUIRE(m != nullptr);
  CHECK(m->counters[cls][c_remote_sent] - b0[c_remote_sent] == N);
  CHECK(m->counters[cls][c_foreign_allocs] - b0[c_foreign_allocs] == 0);  // none was kept here
  const rd::thread_view* w = nullptr;
  for (const auto& t : s.threads)
    if (t.tid == worker_tid && t.state == slot_exited) w = &t;
  REQUIRE(w != nullptr);
  CHECK(w->counters[cls][c_remote_received] == N);  // collected at once into its pages
  CHECK(w->live(cls) == 0);
  for (void* p : again) la::deallocate(p);
}

TEST_CASE("large blocks count in class 0, also when another thread frees them") {
  auto seg = own_segment();
  la::deallocate(la::allocate(8));  // this thread has its own heap before the other one exits
  int tid = 0;
  void* kept = nullptr;
  rd::snapshot before = snap(*seg);
  on_named_thread("large-owner", [&] {
    tid = my_tid();
    void* a = la::allocate(1 << 20);
    la::deallocate(a);
    kept = la::allocate(2 << 20);
    rd::snapshot s = snap(*seg);
    const rd::thread_view* t = by_tid(s, tid);
    REQUIRE(t);
    CHECK(t->counters[0][c_allocs] == 2);
    CHECK(t->counters[0][c_frees] == 1);
    CHECK(t->counters[0][c_requested_bytes] == (3u << 20));
    CHECK(t->live(0) == 1);
  });
  const rd::thread_view* mb = by_tid(before, my_tid());
  std::uint64_t sent = mb ? mb->counters[0][c_remote_sent] : 0;
  la::deallocate(kept);  // the owner exited; its heap (and slot) remember the block
  rd::snapshot s = snap(*seg);
  const rd::thread_view* me = by_tid(s, my_tid());
  REQUIRE(me);
  CHECK(me->counters[0][c_remote_sent] == sent + 1);
  std::uint64_t freed_by_others = 0;
  for (const auto& t : s.threads) freed_by_others += t.counters[0][c_large_freed_by_others];
  freed_by_others += s.exited[0][c_large_freed_by_others];
  CHECK(freed_by_others >= 1);
}

// realloc_impl's own path: a small block that stays in place counts only when the caller owns it.
TEST_CASE("a realloc in place of another thread's block counts nothing, a move counts") {
  auto seg = own_segment();
  const unsigned cls = la::detail::class_of(100), big = la::detail::class_of(4000);
  std::mutex m;
  std::condition_variable cv;
  int step = 0, owner_tid = 0, other_tid = 0;
  unsigned char* p = nullptr;
  void* kept = nullptr;
  void* moved = nullptr;
  auto go = [&](int to) {
    std::lock_guard<std::mutex> l(m);
    step = to;
    cv.notify_all();
  };
  auto wait_for = [&](int at) {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return step == at; });
  };
  std::thread owner([&] {
    owner_tid = my_tid();
    p = static_cast<unsigned char*>(la::allocate(100));
    for (int i = 0; i < 100; ++i) p[i] = static_cast<unsigned char>(i + 1);
    go(1);
    wait_for(6);
  });
  std::thread other([&] {  // allocates nothing of its own before the move
    other_tid = my_tid();
    wait_for(2);
    kept = la::reallocate(p, 104);  // still at least half of its 112-byte block
    go(3);
    wait_for(4);
    moved = la::reallocate(p, 4000);
    go(5);
    wait_for(6);
    la::deallocate(moved);
  });
  wait_for(1);
  rd::snapshot s0 = snap(*seg);
  const rd::thread_view* o0 = by_tid(s0, owner_tid);
  REQUIRE(o0 != nullptr);
  const auto owner_before = o0->counters[cls];
  go(2);
  wait_for(3);
  CHECK(kept == p);
  rd::snapshot s1 = snap(*seg);
  const rd::thread_view* o1 = by_tid(s1, owner_tid);
  REQUIRE(o1 != nullptr);
  CHECK(o1->counters[cls] == owner_before);  // the owner's counts: the block stays as it was
  const rd::thread_view* t1 = by_tid(s1, other_tid);
  CHECK((t1 == nullptr || t1->counters[cls][c_allocs] + t1->counters[cls][c_frees] == 0));
  go(4);
  wait_for(5);
  REQUIRE(moved != nullptr);
  CHECK(moved != p);
  bool same = true;
  for (int i = 0; i < 100; ++i) same = same && static_cast<unsigned char*>(moved)[i] == i + 1;
  CHECK(same);
  rd::snapshot s2 = snap(*seg);
  const rd::thread_view* t2 = by_tid(s2, other_tid);
  REQUIRE(t2 != nullptr);
  CHECK(t2->counters[big][c_allocs] == 1);
  CHECK(t2->counters[big][c_requested_bytes] == 4000);
  CHECK(t2->counters[cls][c_remote_sent] == 1);  // the old block, freed for its owner
  CHECK(t2->counters[cls][c_allocs] == 0);
  go(6);
  owner.join();
  other.join();
}

TEST_CASE("large reallocs count a free and an allocation in class 0: grown, kept in place, cut") {
  auto seg = own_segment();
  const unsigned small = la::detail::class_of(1000);
  int tid = 0;
  rd::snapshot mid, end;
  on_named_thread("large-realloc", [&] {
    tid = my_tid();
    void* p = la::allocate(1 << 20);
    p = la::reallocate(p, 3 << 20);            // grows: in place, into a cached mapping or moved
    REQUIRE(p);
    p = la::reallocate(p, (3 << 20) - 4096);  // above half the request: the mapping stays whole
    mid = snap(*seg);
    p = la::reallocate(p, 512 << 10);          // below half: the tail goes back to the OS
    p = la::reallocate(p, 1000);               // to a small block
    p = la::reallocate(p, 2 << 20);            // and back to a large one
    REQUIRE(p);
    la::deallocate(p);
    end = snap(*seg);
  });
  const rd::thread_view* m = by_tid(mid, tid);
  REQUIRE(m);
  CHECK(m->counters[0][c_allocs] == 3);
  CHECK(m->counters[0][c_frees] == 2);
  CHECK(m->counters[0][c_requested_bytes] == (1u << 20) + (3u << 20) + (3u << 20) - 4096);
  CHECK(m->live(0) == 1);
  const rd::thread_view* t = by_tid(end, tid);
  REQUIRE(t);
  CHECK(t->counters[0][c_allocs] == 5);
  CHECK(t->counters[0][c_frees] == 5);
  CHECK(t->counters[0][c_requested_bytes] ==
        (1u << 20) + (3u << 20) + (3u << 20) - 4096 + (512u << 10) + (2u << 20));
  CHECK(t->counters[0][c_remote_sent] == 0);
  CHECK(t->counters[0][c_large_freed_by_others] == 0);
  CHECK(t->live(0) == 0);
  CHECK(t->counters[small][c_allocs] == 1);
  CHECK(t->counters[small][c_frees] == 1);
  CHECK(t->counters[small][c_requested_bytes] == 1000);
}

TEST_CASE("slots of exited threads are reused with nothing lost from the totals") {
  auto seg = own_segment();
  const unsigned cls = la::detail::class_of(3000);
  std::vector<void*> left;
  int first_tid = 0, second_tid = 0;
  auto total = [&](const rd::snapshot& s, counter c) { return s.total(cls, c); };
  rd::snapshot s0 = snap(*seg);
  on_named_thread("first", [&] {
    first_tid = my_tid();
    la::trim();  // nothing cached: the large blocks below are mmaps of this thread
    void* big[3];
    for (std::size_t i = 0; i < 3; ++i) big[i] = la::allocate((i + 8) << 20);
    for (void* b : big) la::deallocate(b);
    for (int i = 0; i < 500; ++i) left.push_back(la::allocate(3000));
    for (int i = 0; i < 200; ++i) la::deallocate(left[static_cast<std::size_t>(i)]);
    left.erase(left.begin(), left.begin() + 200);
  });
  rd::snapshot s1 = snap(*seg);
  CHECK(total(s1, c_allocs) - total(s0, c_allocs) == 500);
  CHECK(total(s1, c_frees) - total(s0, c_frees) == 200);
  std::uint32_t first_slot = 0, first_incarnation = 0;
  std::uint64_t first_mmaps = 0;
  for (const auto& t : s1.threads)
    if (t.tid == first_tid) {
      CHECK(t.state == slot_exited);
      CHECK(t.exit_ns >= t.start_ns);
      CHECK(t.mmap_calls >= 1);
      first_mmaps = t.mmap_calls;
      CHECK(t.counters[cls][c_peak_live] > 301);
      first_slot = t.slot;
      first_incarnation = t.incarnation;
    }
  on_named_thread("second", [&] {
    second_tid = my_tid();
    void* p = la::allocate(3000);  // adopts the first thread's heap and slot
    rd::snapshot s = snap(*seg);
    const rd::thread_view* t = by_tid(s, second_tid);
    REQUIRE(t);
    CHECK(t->slot == first_slot);
    CHECK(t->incarnation == first_incarnation + 1);
    CHECK(t->name == "second");
    CHECK(t->counters[cls][c_adopted] == 300);  // the first thread's live blocks
    CHECK(t->counters[cls][c_allocs] == 1);
    CHECK(t->live(cls) == 301);
    CHECK(total(s, c_allocs) - total(s0, c_allocs) == 501);  // nothing lost
    // The per-thread figures are this thread's, not the first one's.
    CHECK(t->mmap_calls < first_mmaps);
    CHECK(t->counters[cls][c_peak_live] <= 301);
    la::deallocate(p);
  });
  for (void* p : left) la::deallocate(p);
  la::trim();
  rd::snapshot s2 = snap(*seg);
  CHECK(s2.live(cls) == s0.live(cls));
}

TEST_CASE("get_stats: the totals ever never drop when a new thread adopts an exited one's heap") {
  // With the segment, a new thread that adopts an exited thread's heap moves the slot's
  // cumulative counts to the exited totals: get_stats must read them there too. Large blocks
  // (class 0) count in both totals: their block bytes are the usable bytes of the mapping.
  auto seg = own_segment();
  la::deallocate(la::allocate(8));  // this thread has its own heap before the others come
  constexpr std::size_t kSmall = 3000, kCount = 500, kKept = 300, kLarge = 8u << 20;
  const std::size_t block = la::detail::class_size(la::detail::class_of(kSmall));
  std::vector<void*> left;
  std::size_t large_usable = 0;
  const la::stats s0 = la::get_stats();
  on_named_thread("first", [&] {
    void* big = la::allocate(kLarge);
    large_usable = la::usable_size(big);
    la::deallocate(big);
    for (std::size_t i = 0; i < kCount; ++i) left.push_back(la::allocate(kSmall));
    for (std::size_t i = kKept; i < kCount; ++i) la::deallocate(left[i]);
    left.resize(kKept);
  });
  const la::stats s1 = la::get_stats();
  CHECK(large_usable >= kLarge);
  CHECK(s1.requested_bytes - s0.requested_bytes >= kLarge + kCount * kSmall);
  CHECK(s1.allocated_bytes - s0.allocated_bytes >= large_usable + kCount * block);
  la::stats s2{};
  on_named_thread("second", [&] {
    la::deallocate(la::allocate(kSmall));  // adopts the first thread's heap and slot
    s2 = la::get_stats();
  });
  CHECK(s2.heaps == s1.heaps);  // adopted, not a new heap: the fold ran
  CHECK(s2.requested_bytes >= s1.requested_bytes + kSmall);
  CHECK(s2.allocated_bytes >= s1.allocated_bytes + block);
  CHECK(s2.live_bytes >= s0.live_bytes + kKept * block);
  for (void* p : left) la::deallocate(p);
  const la::stats s3 = la::get_stats();
  CHECK(s3.requested_bytes >= s2.requested_bytes);
  CHECK(s3.allocated_bytes >= s2.allocated_bytes);
}

TEST_CASE("a slot changing hands is never shown half-cleared, and whole snapshots never go down") {
  // A new thread that takes an exited thread's slot moves its counts to the exited totals, then
  // writes its own tid and name. A snapshot must show the slot as the old thread, complete, or
  // as the new one, or leave it out: never the old thread's tid with counters that went down.
  auto seg = own_segment();
  const unsigned cls = la::detail::class_of(100);
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      std::thread t([] {
        void* p[20];
        for (void*& b : p) b = la::allocate(100);
        for (void* b : p) la::deallocate(b);
      });
      t.join();
    }
  });
  struct seen {
    std::uint32_t incarnation;
    int tid;
    std::uint64_t allocs;
  };
  std::vector<seen> last(4096, seen{0, 0, 0});
  int snapshots = 0, torn = 0, whole = 0, went_down = 0;
  std::string first, down;
  std::uint64_t allocs_before = 0, frees_before = 0;  // of the last whole snapshot
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
  while (std::chrono::steady_clock::now() < until) {
    rd::snapshot s = snap(*seg);
    ++snapshots;
    // The process totals of a whole snapshot (no slot changed hands meanwhile) never go down.
    if (s.whole) {
      ++whole;
      const std::uint64_t a = s.total(cls, c_allocs), f = s.total(cls, c_frees);
      if ((a < allocs_before || f < frees_before) && went_down++ == 0)
        down = "allocs " + std::to_string(allocs_before) + " -> " + std::to_string(a) +
               ", frees " + std::to_string(frees_before) + " -> " + std::to_string(f);
      allocs_before = a;
      frees_before = f;
    }
    for (const auto& t : s.threads) {
      if (t.state == slot_overflow || t.slot >= last.size()) continue;
      seen& l = last[t.slot];
      const std::uint64_t allocs = t.counters[cls][c_allocs];
      if (t.incarnation == l.incarnation &&
          (t.tid != l.tid || allocs < l.allocs)) {
        if (torn++ == 0)
          first = "slot " + std::to_string(t.slot) + " incarnation " +
                  std::to_string(t.incarnation) + ": tid " + std::to_string(l.tid) + " -> " +
                  std::to_string(t.tid) + ", allocs " + std::to_string(l.allocs) + " -> " +
                  std::to_string(allocs);
      }
      l = seen{t.incarnation, t.tid, allocs};
    }
  }
  stop = true;
  churn.join();
  MESSAGE(snapshots, " snapshots, ", whole, " whole");
  INFO(first);
  CHECK(torn == 0);
  INFO(down);
  CHECK(whole > 0);
  CHECK(went_down == 0);
}

TEST_CASE("a thread renamed after it started shows its new name") {
  auto seg = own_segment();
  int tid = 0;
  on_named_thread("old-name", [&] {
    tid = my_tid();
    pthread_setname_np(pthread_self(), "new-name");
    std::vector<void*> v;  // enough slow paths for the name to be read again
    for (int i = 0; i < 300 * 16; ++i) v.push_back(la::allocate(4096));
    rd::snapshot s = snap(*seg);
    const rd::thread_view* t = by_tid(s, tid);
    REQUIRE(t);
    CHECK(t->name == "new-name");
    for (void* p : v) la::deallocate(p);
  });
}

TEST_CASE("a changed threshold reaches every thread and changes behaviour") {
  auto seg = own_segment();
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  std::vector<std::atomic<int>> tids(4);
  for (auto& t : tids) t.store(0);
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      tids[static_cast<std::size_t>(t)] = my_tid();
      while (!stop.load()) {
        std::vector<void*> v;
        for (int i = 0; i < 200; ++i) v.push_back(la::allocate(2048));
        for (void* p : v) la::deallocate(p);
      }
    });
  std::string err;
  std::uint64_t gen = 0;
  for (auto& t : tids)
    while (t.load() == 0) std::this_thread::yield();
  REQUIRE(seg->set_option("page_recycle", 7, &err, &gen));
  // Every worker applies it at its next slow path (this thread, idle, would not: no wait_applied).
  bool applied = false;
  for (int i = 0; i < 5000 && !applied; ++i) {
    rd::snapshot s = snap(*seg);
    applied = true;
    for (auto& tid : tids) {
      const rd::thread_view* t = by_tid(s, tid.load());
      applied = applied && t && t->applied_generation >= gen;
    }
    if (!applied) usleep(1000);
  }
  CHECK(applied);
  long long v = 0;
  CHECK(la::get_option("page_recycle", &v));
  CHECK(v == 7);
  rd::snapshot s = snap(*seg);
  CHECK(s.find_option("page_recycle")->effective == 7);
  stop = true;
  for (auto& th : ts) th.join();

  // Behaviour: with page_recycle 0 and purge_delay 0, freed pages go back to the OS at once.
  REQUIRE(seg->set_option("purge_delay", 0, &err, &gen));
  REQUIRE(seg->set_option("page_recycle", 0, &err, &gen));
  std::vector<void*> blocks;
  for (int i = 0; i < 20000; ++i) blocks.push_back(la::allocate(512));  // slow paths apply it
  std::uint64_t madvise_before = snap(*seg).madvise_calls;
  rd::snapshot full = snap(*seg);
  for (void* p : blocks) la::deallocate(p);
  rd::snapshot emptied = snap(*seg);
  CHECK(emptied.madvise_calls - madvise_before >= 100);
  CHECK(emptied.purges - full.purges >= 100);
  CHECK(full.committed_bytes - emptied.committed_bytes >= 100u * 65536u);
  REQUIRE(seg->set_option("page_recycle", 2, &err, &gen));
  REQUIRE(seg->set_option("purge_delay", 10, &err, &gen));
}

// A consumer thread frees what others allocate and allocates nothing itself, so it reaches no
// allocation slow path; its remote frees are where remote_batch acts and where it applies it.
TEST_CASE("a thread that only frees other threads' blocks applies a new remote_batch") {
  auto seg = own_segment();
  std::atomic<int> stage{0}, tid{0};
  std::vector<void*> blocks;
  std::thread consumer([&] {
    la::deallocate(la::allocate(64));  // its heap, with the options of before
    tid = my_tid();
    stage = 1;
    while (stage.load() != 2) std::this_thread::yield();
    for (void* p : blocks) la::deallocate(p);
    stage = 3;
    while (stage.load() != 4) std::this_thread::yield();  // alive for the snapshot
  });
  while (stage.load() != 1) std::this_thread::yield();
  for (int i = 0; i < 4000; ++i) blocks.push_back(la::allocate(1500));
  const rd::snapshot before = snap(*seg);
  const rd::thread_view* t = by_tid(before, tid.load());
  REQUIRE(t);
  const std::uint64_t flushes_before = t->flushes;
  std::string err;
  std::uint64_t gen = 0;
  REQUIRE(seg->set_option("remote_batch", 1, &err, &gen));
  stage = 2;
  while (stage.load() != 3) std::this_thread::yield();
  rd::snapshot s = snap(*seg);
  t = by_tid(s, tid.load());
  REQUIRE(t);
  CHECK(t->applied_generation >= gen);
  // A block a batch past the blocks its lists keep: about 3,950 batches of 1, not 124 of 32.
  CHECK(t->flushes - flushes_before >= 3000);
  stage = 4;
  consumer.join();
  REQUIRE(seg->set_option("remote_batch", 32, &err, &gen));
}

// This process's control block, written as a careless third party would, bypassing the
// reader's checks.
control_block* own_control() {
  auto* base = reinterpret_cast<unsigned char*>(la::detail::g_table.base);
  return reinterpret_cast<control_block*>(base + la::detail::kControlOffset);
}

TEST_CASE("an invalid value written straight into the segment is rejected and counted") {
  auto seg = own_segment();
  control_block* control = own_control();
  int id = la::detail::find_option("remote_batch", 12);
  REQUIRE(id >= 0);
  long long before = 0;
  la::get_option("remote_batch", &before);
  std::uint64_t rejected = control->rejected.load();
  la::telemetry::option_at(control, static_cast<unsigned>(id))->requested.store(1 << 30);  // out of range
  control->generation.fetch_add(1);
  std::vector<void*> v;
  for (int i = 0; i < 1000; ++i) v.push_back(la::allocate(1000));  // slow paths validate
  for (void* p : v) la::deallocate(p);
  CHECK(control->rejected.load() == rejected + 1);
  CHECK(la::telemetry::option_at(control, static_cast<unsigned>(id))->requested.load() == before);
  CHECK(la::telemetry::option_at(control, static_cast<unsigned>(id))->effective.load() == before);
  long long now = 0;
  la::get_option("remote_batch", &now);
  CHECK(now == before);
  // A start-up option cannot change while running either.
  int hp = la::detail::find_option("hugepages", 9);
  la::telemetry::option_at(control, static_cast<unsigned>(hp))->requested.store(1);
  control->generation.fetch_add(1);
  for (int i = 0; i < 1000; ++i) v[static_cast<std::size_t>(i)] = la::allocate(1000);
  for (void* p : v) la::deallocate(p);
  CHECK(control->rejected.load() == rejected + 2);
  CHECK(la::telemetry::option_at(control, static_cast<unsigned>(hp))->effective.load() == 0);
}

TEST_CASE("garbage in the control block's validated_generation or effective does not stop tuning") {
  auto seg = own_segment();
  control_block* control = own_control();
  int id = la::detail::find_option("remote_batch", 12);
  REQUIRE(id >= 0);
  long long before = 0;
  la::get_option("remote_batch", &before);
  auto* entry = la::telemetry::option_at(control, static_cast<unsigned>(id));
  std::vector<void*> v(1000);
  auto slow_paths = [&v] {
    for (auto& p : v) p = la::allocate(1000);
    for (void* p : v) la::deallocate(p);
  };
  // A validated_generation far ahead, and an `effective` that is not the value in force.
  control->validated_generation.store(~std::uint64_t(0));
  entry->effective.store(123456);
  const long long want = before == 9 ? 10 : 9;
  entry->requested.store(want);
  const std::uint64_t gen = control->generation.fetch_add(1) + 1;
  slow_paths();
  CHECK(control->validated_generation.load() == gen);
  CHECK(entry->effective.load() == want);
  long long now = 0;
  la::get_option("remote_batch", &now);
  CHECK(now == want);
  std::string err;
  std::uint64_t g = 0;
  REQUIRE(seg->set_option("remote_batch", before, &err, &g));
  slow_paths();
  CHECK(control->validated_generation.load() == g);
  CHECK(entry->effective.load() == before);
}

TEST_CASE("a snapshot taken while 8 threads allocate is internally consistent") {
  auto seg = own_segment();
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  std::vector<std::atomic<void*>> shared(4096);
  for (auto& x : shared) x.store(nullptr);
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([&, t] {
      unsigned r = static_cast<unsigned>(t) * 2654435761u + 1;
      while (!stop.load(std::memory_order_relaxed)) {
        r = r * 1103515245u + 12345u;
        void* p = la::allocate(16 + (r >> 8) % 4000);
        void* old = shared[(r >> 4) % shared.size()].exchange(p);
        la::deallocate(old);
      }
    });
  int negative = 0, snapshots = 0;
  for (int i = 0; i < 300; ++i) {
    rd::snapshot s = seg->take();
    if (!s.ok()) continue;
    ++snapshots;
    for (const auto& t : s.threads)
      for (unsigned c = 0; c < kClassCount; ++c) {
        const auto& k = t.counters[c];
        negative += k[c_allocs] + k[c_adopted] < k[c_frees] + k[c_large_freed_by_others];
      }
  }
  stop = true;
  for (auto& th : ts) th.join();
  CHECK(snapshots == 300);
  CHECK(negative == 0);
  for (auto& x : shared) la::deallocate(x.exchange(nullptr));
}

TEST_CASE("the segment is 0600 under a permissive umask and is removed at exit") {
  child c({"threads", "2"}, {"LIVEALLOC_PROFILE=1"}, 0);
  struct stat st {};
  REQUIRE(stat(shm_path(c.pid).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(c.finish() == 0);
  CHECK(access(shm_path(c.pid).c_str(), F_OK) != 0);
}

TEST_CASE("threads past the last slot count in the overflow slot") {
  child c({"threads", "8"}, {"LIVEALLOC_PROFILE=1", "LIVEALLOC_TELEMETRY_SLOTS=4"});
  std::string err;
  auto seg = rd::segment::open_pid(c.pid, &err);
  INFO(err);
  REQUIRE(seg);
  rd::snapshot s = snap(*seg);
  const unsigned cls = la::detail::class_of(100);
  const rd::thread_view* overflow = overflow_slot(s);
  REQUIRE(overflow != nullptr);
  CHECK(overflow->slot == 3);
  CHECK(s.overflow_threads >= 5);  // the main thread and 2 workers got slots 0..2
  CHECK(s.total(cls, c_allocs) == 800);
  CHECK(overflow->counters[cls][c_allocs] >= 500);
  CHECK(c.finish() == 0);
}

TEST_CASE("a fork child's segment has the parent's free matrix and a working overflow slot") {
  // Slots 0..2 for threads, 3 the overflow slot. Before the fork the parent used slots 0 and 1
  // (its main thread, and a thread that freed one of main's blocks and exited); the child's six
  // threads take slots 1 and 2 and then the overflow slot.
  child c({"fork_threads", "6"}, {"LIVEALLOC_PROFILE=1", "LIVEALLOC_TELEMETRY_SLOTS=4"});
  std::string err;
  auto ps = rd::segment::open_pid(c.pid, &err);
  INFO(err);
  REQUIRE(ps);
  auto cs = rd::segment::open_pid(c.reported, &err);
  INFO(err);
  REQUIRE(cs);
  rd::snapshot pc = snap(*ps), cc = snap(*cs);
  CHECK(pc.freed(1, 0) == 1);
  CHECK(cc.freed(1, 0) == pc.freed(1, 0));  // the matrix came with the copy
  const rd::thread_view* overflow = overflow_slot(cc);
  REQUIRE(overflow != nullptr);
  CHECK(overflow->slot == 3);
  CHECK(cc.total(la::detail::class_of(100), c_allocs) == 600);  // none lost in the overflow slot
  CHECK(c.finish() == 0);
}

namespace {

// Every cell of a process's free matrix, read from its file with pread (a hole reads as zeros
// and stays a hole), in (row, column) order: what a snapshot loading every cell would show.
std::vector<rd::snapshot::free_cell> matrix_in_file(int pid) {
  const int fd = open(shm_path(pid).c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  unsigned char h[sizeof(segment_header)];
  REQUIRE(pread(fd, h, sizeof h, 0) == static_cast<ssize_t>(sizeof h));
  std::uint32_t n = 0;
  std::uint64_t at = 0;
  std::memcpy(&n, h + offsetof(segment_header, slot_count), sizeof n);
  std::memcpy(&at, h + offsetof(segment_header, matrix_offset), sizeof at);
  std::vector<std::uint64_t> cells(std::size_t(n) * n);
  const auto bytes = static_cast<ssize_t>(cells.size() * 8);
  CHECK(pread(fd, cells.data(), std::size_t(bytes), static_cast<off_t>(at)) == bytes);
  close(fd);
  std::vector<rd::snapshot::free_cell> out;
  for (std::size_t i = 0; i < cells.size(); ++i)
    if (cells[i]) out.push_back({std::uint32_t(i / n), std::uint32_t(i % n), cells[i]});
  return out;
}

const rd::thread_view* by_name(const rd::snapshot& s, const char* name) {
  for (const auto& t : s.threads)
    if (t.name == name && t.state == slot_alive) return &t;
  return nullptr;
}

}  // namespace

// A snapshot loads only the rows of the matrix that can hold a count (read_free_matrix): a
// row wrongly left out loses cells. telemetry_child matrix makes cells in the row of a slot
// taken again, whose counters show no remote free, in the overflow row, whose slot's counters
// lag behind, and in the column of the last slot taken; the snapshot must hold exactly the
// file's non-zero cells, and the known counts.
TEST_CASE("a snapshot's free matrix is every non-zero cell of the file, with the known counts") {
  for (const int slots : {6, 64}) {
    CAPTURE(slots);
    const bool overflowing = slots == 6;  // mx-over, the seventh thread, shares the overflow slot
    // idle_reclaim off: mx-owner sleeps with mx-gone's three blocks in its inbox, and a
    // thread that starts a span of their class after 10 ms of that (mx-heir, under TSan)
    // would take them, and send them home again as frees of its own.
    child c({"matrix"}, {"LIVEALLOC_PROFILE=1", "LIVEALLOC_IDLE_RECLAIM=0",
                         "LIVEALLOC_TELEMETRY_SLOTS=" + std::to_string(slots)});
    std::string err;
    auto seg = rd::segment::open_pid(c.pid, &err);
    INFO(err);
    REQUIRE(seg);
    const rd::snapshot s = snap(*seg);
    const auto file = matrix_in_file(c.pid);
    REQUIRE(s.free_matrix.size() == file.size());
    for (std::size_t i = 0; i < file.size(); ++i) {
      CAPTURE(i);
      CHECK(s.free_matrix[i].from_slot == file[i].from_slot);
      CHECK(s.free_matrix[i].owner_slot == file[i].owner_slot);
      CHECK(s.free_matrix[i].blocks == file[i].blocks);
    }
    const rd::thread_view* main_thread = by_tid(s, c.pid);
    const rd::thread_view* owner = by_name(s, "mx-owner");
    const rd::thread_view* heir = by_name(s, "mx-heir");
    const rd::thread_view* quiet = by_name(s, "mx-quiet");
    const rd::thread_view* sender = by_name(s, "mx-sender");
    const rd::thread_view* over = overflowing ? overflow_slot(s) : by_name(s, "mx-over");
    REQUIRE(main_thread);
    REQUIRE(owner);
    REQUIRE(heir);
    REQUIRE(quiet);
    REQUIRE(sender);
    REQUIRE(over);
    CHECK(heir->incarnation == 2);  // mx-gone's slot, taken again
    CHECK(heir->total(c_remote_sent) == 0);
    CHECK(s.freed(heir->slot, owner->slot) == 3);  // mx-gone's frees, in the slot's row
    CHECK(s.freed(sender->slot, main_thread->slot) == 5);
    CHECK(s.freed(over->slot, owner->slot) == 7);
    CHECK(s.freed(main_thread->slot, over->slot) == 2);
    if (overflowing) {
      CHECK(over->slot == 5);
      CHECK(over->total(c_remote_sent) == 0);  // not published yet: the row is read anyway
    } else {
      CHECK(over->slot + 1 == s.slots_used);  // the last column in use
    }
    CHECK(quiet->total(c_remote_sent) == 0);
    CHECK(s.free_matrix.size() == 4);
    CHECK(c.finish() == 0);
  }
}

TEST_CASE("a fork child publishes its own segment") {
  child c({"fork"}, {"LIVEALLOC_PROFILE=1"});
  int parent = c.pid, forked = c.reported;
  REQUIRE(forked != parent);
  std::string err;
  auto ps = rd::segment::open_pid(parent, &err);
  INFO(err);
  REQUIRE(ps);
  auto cs = rd::segment::open_pid(forked, &err);
  INFO(err);
  REQUIRE(cs);
  const unsigned cls = la::detail::class_of(48);
  rd::snapshot pc = snap(*ps), cc = snap(*cs);
  CHECK(cc.pid == forked);
  CHECK(cc.total(cls, c_allocs) == pc.total(cls, c_allocs) + 777);
  CHECK(c.finish() == 0);
  CHECK(access(shm_path(forked).c_str(), F_OK) != 0);
  CHECK(access(shm_path(parent).c_str(), F_OK) != 0);
}

// An atexit handler registered before enable() runs after the handler enable() registered, which
// removed the name: enable() there refuses, and a fork child names nothing (telemetry_child
// after_exit, a process of its own: the case needs its process's first enable()).
TEST_CASE("after the exit removed the name, enable() refuses and a fork child names nothing") {
  child c({"after_exit"}, {});
  CHECK(c.reported == c.pid);
  CHECK(c.finish() == 42);
  CHECK(access(shm_path(c.pid).c_str(), F_OK) != 0);
}

namespace {

// The `profile` option says whether the segment has its name, also when enable() gave it.
long long profile_in_segment() {
  std::string err;
  auto seg = rd::segment::open_pid(getpid(), &err);
  if (!seg) return -1;
  for (const rd::option_view& o : seg->head().options)
    if (o.name == "profile") return o.effective;
  return -2;
}

long long profile_option() {
  long long v = -1;
  return la::get_option("profile", &v) ? v : -2;
}

}  // namespace

TEST_CASE("enable after disable fails cleanly: Linux names an unnamed file only once") {
  const pid_t pid = fork();
  if (pid == 0) {  // a process of its own, so that the rest of the tests keep their segment
    int code = 0;
    const std::string path = shm_path(getpid());
    if (la::telemetry::enable() != 0 || access(path.c_str(), F_OK) != 0) code |= 1;
    if (profile_option() != 1 || profile_in_segment() != 1) code |= 16;
    if (la::telemetry::disable() != 0 || access(path.c_str(), F_OK) == 0 ||
        la::telemetry::enabled())
      code |= 2;
    if (profile_option() != 0) code |= 32;
    if (la::telemetry::enable() != ENOENT || la::telemetry::enabled() ||
        access(path.c_str(), F_OK) == 0)
      code |= 4;
    void* p = std::malloc(100);  // the allocator goes on, unpublished
    if (!p) code |= 8;
    std::free(p);
    _exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

namespace {

// A file in `dir` with a segment header's first fields: magic, version and start time.
void write_fake_segment(const std::string& dir, const std::string& name, std::uint64_t start_ns,
                        std::uint32_t version = kVersion, const char* magic = kMagic) {
  segment_header h{};
  memcpy(h.magic, magic, sizeof h.magic);
  h.version = version;
  h.start_ns = start_ns;
  const int fd = open((dir + "/" + name).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, &h, sizeof h) == static_cast<ssize_t>(sizeof h));
  close(fd);
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

int sweep(const std::string& dir, int keep, dev_t dev = 0, ino_t ino = 0) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  const int removed = la::detail::sweep_stale_segments(fd, keep, dev, ino);
  close(fd);
  return removed;
}

}  // namespace

TEST_CASE("stale segments: the newest are kept, the older removed, anything else left alone") {
  char tmpl[] = "/tmp/livealloc-sweep-XXXXXX";
  REQUIRE(mkdtemp(tmpl));
  const std::string dir = tmpl;
  // Stale segments, in no order of their start times (the start time, not the pid, decides).
  const std::uint64_t starts[] = {500, 100, 400, 200, 300};
  for (int i = 0; i < 5; ++i)
    write_fake_segment(dir, "livealloc." + std::to_string(10 + i), starts[i]);
  // Never removed, though older than any: a segment whose process holds its lock, one of another
  // version or magic, a header cut short, names that are not livealloc.<digits>, a directory, a
  // FIFO and a symbolic link with a segment's name, and (below) another user's file.
  write_fake_segment(dir, "livealloc.20", 1);
  const int held = open((dir + "/livealloc.20").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(held >= 0);
  REQUIRE(flock(held, LOCK_EX | LOCK_NB) == 0);
  write_fake_segment(dir, "livealloc.21", 1, kVersion + 1);
  write_fake_segment(dir, "livealloc.22", 1, kVersion, "LIVEALLX");
  REQUIRE(truncate((dir + "/livealloc.22").c_str(), 0) == 0);
  write_fake_segment(dir, "livealloc.23", 1);
  REQUIRE(truncate((dir + "/livealloc.23").c_str(), 40) == 0);
  write_fake_segment(dir, "livealloc.24x", 1);
  write_fake_segment(dir, "livealloc.", 1);
  write_fake_segment(dir, "other.25", 1);
  REQUIRE(mkdir((dir + "/livealloc.26").c_str(), 0700) == 0);
  REQUIRE(mkfifo((dir + "/livealloc.27").c_str(), 0600) == 0);
  write_fake_segment(dir, "target", 1);
  REQUIRE(symlink("target", (dir + "/livealloc.28").c_str()) == 0);
  bool other_user = false;
  if (geteuid() == 0) {
    write_fake_segment(dir, "livealloc.29", 1);
    other_user = chown((dir + "/livealloc.29").c_str(), 65534, 65534) == 0;
  }
  std::vector<std::string> others = {"livealloc.", "livealloc.20", "livealloc.21", "livealloc.22",
                                     "livealloc.23", "livealloc.24x", "livealloc.26",
                                     "livealloc.27", "livealloc.28", "other.25", "target"};
  if (other_user) others.push_back("livealloc.29");
  auto expect = [&](std::vector<std::string> stale) {
    stale.insert(stale.end(), others.begin(), others.end());
    std::sort(stale.begin(), stale.end());
    CHECK(names_in(dir) == stale);
  };

  SUBCASE("keep 2 of 5: the two started last stay") {
    CHECK(sweep(dir, 2) == 3);
    expect({"livealloc.10", "livealloc.12"});
    CHECK(sweep(dir, 2) == 0);  // nothing more to do
    CHECK(sweep(dir, 0) == 2);
    expect({});
  }
  SUBCASE("keep as many as there are, or more: nothing removed") {
    CHECK(sweep(dir, 5) == 0);
    CHECK(sweep(dir, 64) == 0);
    expect({"livealloc.10", "livealloc.11", "livealloc.12", "livealloc.13", "livealloc.14"});
  }
  SUBCASE("the caller's own file is never removed, even unlocked and the oldest") {
    struct stat st;
    REQUIRE(stat((dir + "/livealloc.11").c_str(), &st) == 0);
    CHECK(sweep(dir, 1, st.st_dev, st.st_ino) == 3);
    expect({"livealloc.10", "livealloc.11"});
  }
  SUBCASE("the held segment is stale once its holder lets go") {
    close(held);
    CHECK(sweep(dir, 5) == 1);
    others.erase(std::find(others.begin(), others.end(), "livealloc.20"));
    expect({"livealloc.10", "livealloc.11", "livealloc.12", "livealloc.13", "livealloc.14"});
  }
  SUBCASE("more kept than the stack holds: the option's bound, 64, is the most kept") {
    for (int i = 0; i < 70; ++i)
      write_fake_segment(dir, "livealloc." + std::to_string(100 + i), 1000 + i);
    CHECK(sweep(dir, 1000) == 75 - la::detail::kMaxStaleKept);  // the 5 above are the oldest
    std::vector<std::string> stale;
    for (int i = 70 - la::detail::kMaxStaleKept; i < 70; ++i)
      stale.push_back("livealloc." + std::to_string(100 + i));
    expect(stale);
  }
  close(held);
  for (const std::string& n : names_in(dir)) {
    const std::string p = dir + "/" + n;
    if (rmdir(p.c_str()) != 0) unlink(p.c_str());
  }
  CHECK(rmdir(dir.c_str()) == 0);
}
