// Stress tests: every block carries a pattern that is checked before it is freed, and memory must
// stay bounded while far more than the bound is allocated.
//   stress producer_consumer T SCALE ITER  T producers hand blocks to T consumers that free them
//   stress all_to_all T SCALE ITER         every thread frees blocks every other thread made
//   stress churn T SCALE ITER              ITER short-lived threads, T at a time
//   stress fork T SCALE ITER               fork ITER times while T threads allocate
//   stress purge T SCALE ITER              T threads release and retake spans while the others
//                                          purge the dirty units (any slow path, trim)
#include <livealloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace la = livealloc;

namespace {

int failures = 0;
std::mutex report_mutex;

void fail(const std::string& what) {
  std::lock_guard<std::mutex> g(report_mutex);
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  ++failures;
}

// A block: its size and a seed in the first 16 bytes, then a pattern derived from both.
struct item {
  void* p;
  std::size_t size;
};

item make(std::size_t size, std::uint32_t seed) {
  if (size < 16) size = 16;
  auto* b = static_cast<unsigned char*>(la::allocate(size));
  if (!b) {
    fail("allocation failed");
    std::abort();
  }
  std::memcpy(b, &size, 8);
  std::memcpy(b + 8, &seed, 4);
  for (std::size_t i = 16; i < size; i += 61) b[i] = static_cast<unsigned char>(seed * 31 + i);
  return {b, size};
}

void check_and_free(item it) {
  auto* b = static_cast<unsigned char*>(it.p);
  std::size_t size;
  std::uint32_t seed;
  std::memcpy(&size, b, 8);
  std::memcpy(&seed, b + 8, 4);
  bool ok = size == it.size;
  for (std::size_t i = 16; ok && i < size; i += 61)
    ok = b[i] == static_cast<unsigned char>(seed * 31 + i);
  if (!ok) {
    fail("corrupted block");
    std::abort();
  }
  la::deallocate(it.p, it.size);
}

std::size_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long pages = 0, resident = 0;
  if (f) {
    if (std::fscanf(f, "%lu %lu", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

// A bounded queue: producers wait when it is full, so at most `cap` blocks are in flight.
struct channel {
  std::mutex m;
  std::condition_variable cv;
  std::deque<item> q;
  std::size_t cap;
  bool closed = false;
  explicit channel(std::size_t c) : cap(c) {}
  void push(item it) {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return q.size() < cap; });
    q.push_back(it);
    cv.notify_all();
  }
  bool pop(item* out) {
    std::unique_lock<std::mutex> l(m);
    cv.wait(l, [&] { return !q.empty() || closed; });
    if (q.empty()) return false;
    *out = q.front();
    q.pop_front();
    cv.notify_all();
    return true;
  }
  void close() {
    std::lock_guard<std::mutex> l(m);
    closed = true;
    cv.notify_all();
  }
};

// T producers, T consumers, ITER blocks each of up to SCALE*16 bytes, 4096 in flight at most.
void producer_consumer(int threads, std::size_t scale, long iterations) {
  channel ch(4096);
  std::vector<std::thread> producers, consumers;
  std::atomic<long> consumed{0};
  for (int t = 0; t < threads; ++t) {
    producers.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (long i = 0; i < iterations; ++i) ch.push(make(16 + rng() % (scale * 16), rng()));
    });
    consumers.emplace_back([&] {
      item it;
      while (ch.pop(&it)) {
        check_and_free(it);
        consumed.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (auto& p : producers) p.join();
  ch.close();
  for (auto& c : consumers) c.join();
  if (consumed.load() != iterations * threads) fail("lost blocks");
  la::stats s = la::get_stats();
  // Far more than this went through: iterations * threads * ~scale*8 bytes (hundreds of MB).
  const std::size_t bound = (16u + 16u * static_cast<std::size_t>(threads)) << 20;
  std::printf("producer_consumer: %d+%d threads, %ld blocks each, segments %zu MiB, live %zu KiB\n",
              threads, threads, iterations, s.segment_bytes >> 20, s.live_bytes >> 10);
  if (s.segment_bytes > bound)
    fail("segments grew to " + std::to_string(s.segment_bytes >> 20) + " MiB");
}

// A reusable barrier (std::barrier is C++20).
struct barrier {
  std::mutex m;
  std::condition_variable cv;
  int count, waiting = 0;
  long phase = 0;
  explicit barrier(int n) : count(n) {}
  void wait() {
    std::unique_lock<std::mutex> l(m);
    long my = phase;
    if (++waiting == count) {
      waiting = 0;
      ++phase;
      cv.notify_all();
    } else {
      cv.wait(l, [&] { return phase != my; });
    }
  }
};

// Rounds: each thread makes SCALE blocks for every other thread, then each frees what it got.
void all_to_all(int threads, std::size_t scale, long rounds) {
  std::vector<std::vector<item>> inbox(static_cast<std::size_t>(threads));
  std::vector<std::mutex> locks(static_cast<std::size_t>(threads));
  barrier sync(threads);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) * 7 + 1);
      for (long r = 0; r < rounds; ++r) {
        for (int d = 0; d < threads; ++d) {
          if (d == t) continue;
          std::vector<item> batch;
          for (std::size_t i = 0; i < scale; ++i) batch.push_back(make(rng() % 3000, rng()));
          std::lock_guard<std::mutex> l(locks[static_cast<std::size_t>(d)]);
          auto& in = inbox[static_cast<std::size_t>(d)];
          in.insert(in.end(), batch.begin(), batch.end());
        }
        sync.wait();
        std::vector<item> mine;
        {
          std::lock_guard<std::mutex> l(locks[static_cast<std::size_t>(t)]);
          mine.swap(inbox[static_cast<std::size_t>(t)]);
        }
        for (item it : mine) check_and_free(it);
        sync.wait();
      }
    });
  }
  for (auto& th : ts) th.join();
  la::trim();
  la::stats s = la::get_stats();
  std::printf("all_to_all: %d threads, %ld rounds, segments %zu MiB, live %zu KiB\n", threads,
              rounds, s.segment_bytes >> 20, s.live_bytes >> 10);
  if (s.live_bytes > (1u << 20)) fail("blocks were not returned to their heaps");
  if (s.segment_bytes > (std::size_t(8 + 4 * threads) << 20)) fail("segments not returned");
}

// ITER short-lived threads, T at a time; each leaves half its blocks for the main thread to free.
void churn(int threads, std::size_t scale, long total) {
  std::mutex m;
  std::vector<item> left;
  std::size_t rss_early = 0;
  for (long started = 0; started < total;) {
    std::vector<std::thread> wave;
    for (int t = 0; t < threads && started < total; ++t, ++started) {
      wave.emplace_back([&, started] {
        std::mt19937 rng(static_cast<unsigned>(started));
        std::vector<item> mine;
        for (std::size_t i = 0; i < scale; ++i) mine.push_back(make(rng() % 5000, rng()));
        std::lock_guard<std::mutex> l(m);
        for (std::size_t i = 0; i < mine.size(); ++i) {
          if (i % 2) left.push_back(mine[i]);
          else check_and_free(mine[i]);
        }
      });
    }
    for (auto& th : wave) th.join();
    for (item it : left) check_and_free(it);  // frees into heaps of exited threads
    left.clear();
    if (rss_early == 0 && started >= total / 10) rss_early = rss_bytes();
  }
  la::stats s = la::get_stats();
  std::size_t rss_end = rss_bytes();
  std::printf("churn: %ld threads, heaps %zu, segments %zu MiB, rss %zu -> %zu MiB\n", total,
              s.heaps, s.segment_bytes >> 20, rss_early >> 20, rss_end >> 20);
  // Heaps are reused: one per concurrent thread (plus main), not one per thread ever started.
  if (s.heaps > static_cast<std::size_t>(threads) * 2 + 2) fail("heaps were not reused");
#ifndef __SANITIZE_THREAD__  // TSan's shadow memory grows with every address touched
  if (rss_end > rss_early + (32u << 20)) fail("resident memory grew over thread churn");
#endif
  if (s.live_bytes > (1u << 20)) fail("blocks of exited threads were not reclaimed");
}

// Fork while T threads allocate; the child frees blocks the parent's threads made, allocates,
// and checks its heap; the parent's threads go on.
void fork_test(int threads, std::size_t scale, long forks) {
  std::atomic<bool> stop{false};
  std::mutex m;
  std::vector<item> shared;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<item> mine;
      while (!stop.load(std::memory_order_relaxed)) {
        mine.push_back(make(rng() % 2000, rng()));
        if (mine.size() > scale) {
          std::lock_guard<std::mutex> l(m);
          shared.push_back(mine.back());
          mine.pop_back();
          for (item it : mine) check_and_free(it);
          mine.clear();
        }
      }
      for (item it : mine) check_and_free(it);
    });
  for (long f = 0; f < forks; ++f) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::vector<item> snapshot;
    {
      std::lock_guard<std::mutex> l(m);
      snapshot = shared;
    }
    pid_t pid = fork();
    if (pid == 0) {
      // Only this thread exists here; the other threads' heaps are orphaned.
      for (item it : snapshot) check_and_free(it);
      std::vector<item> v;
      for (std::size_t i = 0; i < scale * 10; ++i) v.push_back(make(i % 4000, static_cast<std::uint32_t>(i)));
      std::thread([&v] {
        for (item it : v) check_and_free(it);
      }).join();
      _exit(la::detail::heap_is_valid() && failures == 0 ? 0 : 1);
    }
    // Meanwhile the forking thread changes its own heap (free lists, recent-free lists, pages):
    // none of it may reach the child's copy, which must stay as it was at the fork.
    std::vector<item> ring(64, item{nullptr, 0});
    for (std::size_t i = 0; i < scale * 20; ++i) {
      item& it = ring[i % ring.size()];
      if (it.p) check_and_free(it);
      it = make((i * 7919) % 3000, static_cast<std::uint32_t>(i));
    }
    for (item it : ring)
      if (it.p) check_and_free(it);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("fork child failed");
  }
  stop = true;
  for (auto& th : ts) th.join();
  for (item it : shared) check_and_free(it);
  if (!la::detail::heap_is_valid()) fail("parent heap invalid after forks");
  std::printf("fork: %ld forks with %d threads allocating\n", forks, threads);
}

// T threads each ITER times build SCALE blocks of 4-64 KiB (whole spans), check and free them, and
// every few rounds pause without allocating; with purge_delay 1 ms and no kept pages every
// release leaves dirty units in the page heap, which every thread takes spans from and any
// thread's slow path purges; one thread also trims. A purge that reached units a thread had taken
// again would zero live blocks: the patterns catch it.
void purge_test(int threads, std::size_t scale, long rounds) {
  long long delay = 0, recycle = 0;
  la::get_option("purge_delay", &delay);
  la::get_option("page_recycle", &recycle);
  if (la::set_option("purge_delay", 1) != la::option_status::ok ||
      la::set_option("page_recycle", 0) != la::option_status::ok)
    fail("cannot set the purge options");
  const std::size_t madvise_before = la::get_stats().madvise_calls;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([=] {
      std::mt19937 rng(static_cast<unsigned>(t) + 100);
      std::vector<item> mine;
      for (long r = 0; r < rounds; ++r) {
        for (std::size_t i = 0; i < scale; ++i) mine.push_back(make(4096 + rng() % 61440, rng()));
        for (item it : mine) check_and_free(it);
        mine.clear();
        if (r % 8 == static_cast<long>(t) % 8) std::this_thread::sleep_for(std::chrono::milliseconds(3));
        if (t == 0 && r % 16 == 0) la::trim();
      }
      if (!la::detail::heap_is_valid()) fail("heap invalid after purges");
    });
  for (auto& th : ts) th.join();
  const std::size_t madvise_calls = la::get_stats().madvise_calls - madvise_before;
  if (madvise_calls == 0) fail("nothing was purged");
  la::set_option("purge_delay", delay);
  la::set_option("page_recycle", recycle);
  std::printf("purge: %d threads, %ld rounds, %zu madvise calls\n", threads, rounds, madvise_calls);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s producer_consumer|all_to_all|churn|fork|purge THREADS SCALE ITER\n",
                 argv[0]);
    return 2;
  }
  std::string mode = argv[1];
  int threads = std::atoi(argv[2]);
  std::size_t scale = std::strtoul(argv[3], nullptr, 10);
  long iter = std::atol(argv[4]);
  if (threads < 1 || scale < 1 || iter < 1) {
    std::fprintf(stderr, "THREADS, SCALE and ITER must be positive\n");
    return 2;
  }
  if (mode == "producer_consumer") producer_consumer(threads, scale, iter);
  else if (mode == "all_to_all") all_to_all(threads, scale, iter);
  else if (mode == "churn") churn(threads, scale, iter);
  else if (mode == "fork") fork_test(threads, scale, iter);
  else if (mode == "purge") purge_test(threads, scale, iter);
  else {
    std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  if (!la::detail::heap_is_valid()) fail("main heap invalid");
  std::printf("%s: %s\n", mode.c_str(), failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
