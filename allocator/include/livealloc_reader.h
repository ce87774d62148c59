// livealloc_reader.h -- reads, and tunes, the telemetry segment of a livealloc process.
// SPDX-License-Identifier: MIT
//
// A process running with profiling on (LIVEALLOC_PROFILE=1 or livealloc::telemetry::enable())
// publishes its counters in /dev/shm/livealloc.<pid>; allocator/TELEMETRY.md describes that file.
// This header-only reader maps it, validates it and copies it into plain structs:
//
//   std::string err;
//   auto seg = livealloc::reader::segment::open_pid(pid, &err);   // nullptr + err on failure
//   livealloc::reader::snapshot s = seg->take();                   // s.error empty when good
//   seg->set_option("page_recycle", 8, &err);                      // false + err when refused
//
// Nothing here throws for bad input: every failure is a false or nullptr and a message that says
// what was wrong. Nothing in the file is trusted: each take() reads the layout fields once,
// checks them against the size of the mapping and uses only the checked copies, so a damaged or
// hostile file gives an error, never a read outside the mapping. A file its owner truncates
// between the size check and the reads would raise SIGBUS at a read past its new end: a process
// that reads other users' segments (the memlive command, as root) calls survive_truncation()
// first, and then such a read sees zeros and the take() reports "truncated while being read"
// (see survive_truncation below). Without it (memlive::start() reads its own segment), SIGBUS.
// Memory allocation (std::string, std::vector) may still throw std::bad_alloc, as anywhere.
#ifndef LIVEALLOC_READER_H
#define LIVEALLOC_READER_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <livealloc.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace livealloc {
inline namespace v0 {
namespace reader {

using counter_matrix =
    std::array<std::array<std::uint64_t, telemetry::kCounterCount>, telemetry::kClassCount>;

// One threshold of the control block.
struct option_view {
  std::string name;
  std::int64_t requested = 0;  // last value a writer asked for (reset to effective if rejected)
  std::int64_t effective = 0;  // value in force
  std::int64_t min = 0, max = 0, default_value = 0;
  bool live = false;  // may change while the program runs
  bool is_bool = false;
};

// One thread slot that was not unused.
struct thread_view {
  std::uint32_t slot = 0;         // index; the last slot is the overflow slot
  std::uint32_t state = 0;        // telemetry::slot_state: alive, exited or overflow
  std::uint32_t incarnation = 0;  // bumped each time a new thread takes the slot
  std::int32_t tid = 0;
  std::string name;
  std::uint64_t start_ns = 0, exit_ns = 0, applied_generation = 0;
  std::uint64_t slow_paths = 0, flushes = 0, mmap_calls = 0, munmap_calls = 0, madvise_calls = 0;
  counter_matrix counters{};  // [class][telemetry::counter]

  // Live blocks of class `cls`:
  // allocs + adopted - frees - large_freed_by_others - handed_over - foreign_allocs.
  // Saturates at 0: the read order keeps process totals non-negative, but a slot caught while
  // a new thread folds it into the exited totals can read torn on its own.
  std::uint64_t live(unsigned cls) const;
  // Sum of one counter over all classes.
  std::uint64_t total(unsigned counter) const;
};

// A copy of the whole segment at one moment (per counter; the copy is not atomic as a whole).
struct snapshot {
  std::string error;  // empty when the snapshot is good; otherwise nothing else is meaningful
  std::int32_t pid = 0;
  std::string program;
  std::uint64_t start_ns = 0;  // CLOCK_REALTIME when the process started
  std::uint64_t taken_ns = 0;  // CLOCK_REALTIME when this snapshot was taken
  // The process's own start, in clock ticks after boot (/proc/<pid>/stat, field 22), read with
  // process_alive: an exec keeps it (start_ns is the image's), a process given a reused pid does
  // not. 0 when the process is gone or /proc cannot be read.
  std::uint64_t process_start_ticks = 0;
  // The process that made the segment still runs this image of it: segment_owner_alive, and
  // the file is still its own (its lock held, or it maps the file): false once the process
  // exec'd a program without livealloc, whose pid lives on but writes nothing here.
  bool process_alive = false;
  std::vector<std::uint64_t> class_sizes;  // block size per class; 0 for class 0 (large blocks)
  // 64 KiB units in a span of each class (0 for class 0); all 0 when the writer does not say.
  std::vector<std::uint64_t> class_units;

  // Process-wide counters (segment_header).
  std::uint64_t segment_bytes = 0, large_bytes = 0, cached_bytes = 0, committed_bytes = 0;
  std::uint64_t mmap_calls = 0, munmap_calls = 0, madvise_calls = 0, purges = 0;
  std::uint64_t slots_used = 0, overflow_threads = 0;

  // Control block.
  std::uint64_t generation = 0, validated_generation = 0, rejected = 0;
  std::vector<option_view> options;

  // Slots in use (alive, exited or overflow), by slot index; a slot that changed hands while
  // take() copied it is left out of that snapshot.
  std::vector<thread_view> threads;
  // No slot changed hands while take() copied it (segment_header::folds_started and folds_done),
  // so every count summed over the slots and the exited totals is whole: such sums never go down
  // from one whole snapshot to the next. False: a sum may come out short, or count a fold twice,
  // in this snapshot only; take another for exact totals (the `memlive snapshot` command does).
  bool whole = true;
  // The cross-thread free matrix, slot_count x slot_count, row = freeing slot, column = owning
  // slot: its non-zero cells, ordered by (from_slot, owner_slot) (none when the segment has no
  // matrix). Few threads free each other's blocks, so few cells are non-zero, where the whole
  // matrix is 128 MiB at 4,096 slots. freed(f, o) looks a cell up.
  struct free_cell {
    std::uint32_t from_slot = 0, owner_slot = 0;
    std::uint64_t blocks = 0;  // blocks the thread in from_slot freed that owner_slot's heap owned
  };
  std::uint32_t slot_count = 0;
  std::vector<free_cell> free_matrix;
  std::uint64_t freed(std::uint32_t from_slot, std::uint32_t owner_slot) const {
    const auto before = [](const free_cell& a, const free_cell& b) {
      return a.from_slot != b.from_slot ? a.from_slot < b.from_slot : a.owner_slot < b.owner_slot;
    };
    const free_cell key{from_slot, owner_slot, 0};
    auto it = std::lower_bound(free_matrix.begin(), free_matrix.end(), key, before);
    return it != free_matrix.end() && !before(key, *it) ? it->blocks : 0;
  }
  // Resident memory of the process from /proc/<pid>/statm at take() (0 if unreadable).
  std::uint64_t resident_bytes = 0;
  counter_matrix exited{};  // totals folded from exited threads, [class][counter]

  bool ok() const { return error.empty(); }
  // One counter of one class for the whole process: the exited totals plus every slot in use
  // (alive, exited or overflow). An exited thread's counters stay in its slot until a new thread
  // takes the slot and folds them into the exited totals (see TELEMETRY.md, "Totals").
  std::uint64_t total(unsigned cls, unsigned counter) const;
  // total(cls, c) of every class and counter, in one pass that reads each thread's counters in
  // order (a total at a time reads one number per thread, 7 KB apart: a cache miss each).
  counter_matrix totals() const;
  std::uint64_t live(unsigned cls) const;  // live blocks of a class, whole process, saturating
  std::uint64_t live_blocks() const;       // over all classes
  // Bytes in live blocks: live blocks x block size for classes 1.., plus large_bytes.
  std::uint64_t live_bytes() const;
  // Slots in state alive while the process runs; 0 once it is gone (see state_name below).
  std::uint32_t threads_alive() const;
  const option_view* find_option(const std::string& name) const;  // nullptr if absent
};

// "unused", "alive", "exited", "overflow" or "state N".
std::string state_name(std::uint32_t state);
// A thread's state as a reader should show it: state_name(t.state), except "ended" for a slot
// still in state alive when its process is gone (!s.process_alive). The allocator marks a slot
// exited when its thread exits; a process that crashes, is killed or returns from main ends its
// running threads without that (the main thread's slot always stays alive), so in the last state
// of a process every thread that was still running shows "ended", none "alive".
std::string state_name(const snapshot& s, const thread_view& t);

// True when a process with this pid exists (kill(pid, 0) succeeds or fails with EPERM). A reused
// pid looks alive: the error is on the safe side (a segment is never swept while its pid lives).
bool pid_alive(int pid);

// Makes a read of a segment its owner truncated meanwhile harmless, for the rest of the
// process: installs a SIGBUS handler (sigaction, SA_SIGINFO) that, for a fault inside the mapping
// of a segment opened after this call, maps a private page of zeros over the faulting page
// (mmap MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS), marks the segment and returns: the read sees
// zeros, and every later take(), set_option() and wait on that segment fails with "truncated
// while being read" (the mapping no longer shows the file: open it again). Any other SIGBUS
// (another address, one sent with kill) goes to the handler installed before, if any (called
// directly: its sa_mask and flags are not applied), else kills as before. False, and *error,
// when sigaction fails.
bool survive_truncation(std::string* error = nullptr);

namespace detail {
struct layout;
struct guarded;
}

// A mapped telemetry segment.
class segment {
 public:
  // /dev/shm/livealloc.<pid> (or <dir>/livealloc.<pid>).
  static std::unique_ptr<segment> open_pid(int pid, std::string* error,
                                           const std::string& dir = "/dev/shm");
  // Maps read-write when the file allows it (needed by set_option), else read-only;
  // read_only = true never asks for write access. Returns nullptr and sets *error on failure.
  static std::unique_ptr<segment> open_path(const std::string& path, std::string* error,
                                            bool read_only = false);
  ~segment();
  segment(const segment&) = delete;
  segment& operator=(const segment&) = delete;

  snapshot take() const;
  // The same into *into, reusing the memory it holds: a sampler that takes one snapshot after
  // another of 4,000 threads would otherwise allocate and fault in 27 MB of thread_views each
  // time (a fifth of an idle `memlive serve`'s CPU).
  void take(snapshot* into) const;
  // take() without what grows with the threads: the header, class sizes and control block
  // (options, generations), and no threads, free matrix or resident memory. For a reader of the
  // options, which a full snapshot at 2,000 threads that come and go kept waiting a second.
  snapshot head() const;

  // Asks the process to change a threshold: checks the name, `live` and [min, max], stores
  // `requested`, then increments `generation` (release). False and a message otherwise. The
  // allocator validates the value at its next slow path (wait_validated), then every thread
  // applies it at its own next slow path (wait_applied). *new_generation receives the generation
  // this change was published under.
  bool set_option(const std::string& name, std::int64_t value, std::string* error,
                  std::uint64_t* new_generation = nullptr);
  // Polls (1 ms) until validated_generation >= generation: the allocator has checked the value
  // (then options[].effective and `rejected` tell the outcome). False on timeout or if the
  // process is gone.
  bool wait_validated(std::uint64_t generation, int timeout_ms) const;
  // Polls until every slot in state alive shows applied_generation >= generation. A thread that
  // never reaches a slow path never applies it: callers should expect timeouts.
  bool wait_applied(std::uint64_t generation, int timeout_ms) const;

  std::int32_t pid() const { return pid_; }
  const std::string& path() const { return path_; }
  bool writable() const { return writable_; }
  // Whether the process that made this segment still runs this image of it, as
  // snapshot::process_alive: segment_owner_alive with the header's start time (a pid reused since
  // is not that process), and the file still its own (an exec without livealloc left it).
  bool process_alive() const;
  // Slots in state alive, without a full snapshot; 0 once the process is gone.
  std::uint32_t threads_alive() const;

  // A process that calls exec publishes a new segment under the same name (the new image's
  // allocator starts afresh), and this one stops changing. Returns the new one, opened as this
  // one was, when path() now names another file written by the same process (the same pid and
  // start time: not a later process that was given the pid); nullptr when it does not, or when
  // the new file cannot be opened (then *error says why).
  std::unique_ptr<segment> successor(std::string* error) const;

 private:
  segment(int fd, unsigned char* base, std::uint64_t size, bool writable, bool read_only,
          std::int32_t pid, std::string path, detail::guarded* guard)
      : fd_(fd), base_(base), size_(size), writable_(writable), read_only_(read_only), pid_(pid),
        path_(std::move(path)), guard_(guard) {}
  bool current(detail::layout* l, std::string* error) const;
  bool take_head(snapshot* s, detail::layout* l) const;
  // Whether a read of the mapping faulted past the file's end (survive_truncation): the
  // mapping then holds pages of zeros where the file was, for good.
  bool cut() const;
  std::string cut_error() const;
  bool writer_attached() const;
  // process_alive() for the header's start time `start_ns` (take() has it loaded already).
  bool alive_since(std::uint64_t start_ns, std::uint64_t* start_ticks = nullptr) const;

  int fd_;
  unsigned char* base_;
  std::uint64_t size_;  // bytes mapped (the file size at open, equal to segment_size)
  bool writable_;
  bool read_only_;  // as asked of open_path
  std::int32_t pid_;
  std::string path_;
  dev_t dev_ = 0;  // the file mapped
  ino_t ino_ = 0;
  std::uint64_t start_ticks_ = 0;  // the process's start time at open; 0: unknown
  detail::guarded* guard_;         // the mapping's entry in the SIGBUS registry, or nullptr
};

// One file named livealloc.<digits> in a directory.
struct segment_entry {
  int pid = 0;  // from the file name
  std::string path, program;
  bool alive = false;  // segment_owner_alive(pid, start_ns) (pid_alive(pid) when not valid)
  bool stale = false;  // remove_stale would remove it
  bool valid = false;  // the segment opened and validated; otherwise `error` says why
  std::string error;
  std::uint32_t threads_alive = 0;  // of the slots: the overflow slot's threads are not told
  std::uint64_t overflow_threads = 0;  // heaps made without a slot (snapshot::overflow_threads)
  std::uint64_t start_ns = 0;
};

// Every livealloc.<pid> file of `dir`, by pid. Malformed ones are listed with valid = false.
// *error (when given) is set if the directory cannot be read.
std::vector<segment_entry> list_segments(const std::string& dir = "/dev/shm",
                                         std::string* error = nullptr);
// Unlinks the livealloc.<pid> files of `dir` whose process is gone (also malformed ones: a
// process that crashed while creating its segment leaves a short file). Never touches a file
// whose owner holds its lock (a running process, also one in another pid namespace, whose pid
// here is another or none), whose pid, from the name or from the header, is alive
// (segment_owner_alive), a symbolic link or a non-regular file. Returns how many files were
// removed.
int remove_stale(const std::string& dir = "/dev/shm");
// The same for the one file livealloc.<pid> of `dir`: whether it was there, stale, and removed
// (memlive run, once the program it started has ended, killed by a signal for instance).
bool remove_stale_segment(int pid, const std::string& dir = "/dev/shm");

// Whether the process that made a segment (its header's pid and start_ns) still runs: pid_alive,
// and the process now holding that pid did not start well after the segment did. Pids are
// reused: a file left by a killed process can name the pid of a newer one. A process starts
// before its segment, so the test errs on the side of alive: a process started less than a minute
// after the segment (or whose start time cannot be read) counts as the segment's.
// `start_ticks`, when given, gets the process's start time in clock ticks after boot from the
// same read of its stat line, or 0 when the answer is false or it cannot be read.
bool segment_owner_alive(int pid, std::uint64_t start_ns, std::uint64_t* start_ticks = nullptr);

// ------------------------------------------------------------------------------------------------
// Implementation.
// ------------------------------------------------------------------------------------------------

namespace detail {

using livealloc::detail::object_at;
constexpr std::uint64_t kHeaderSize = sizeof(telemetry::segment_header);
constexpr std::uint64_t kControlHeaderSize = offsetof(telemetry::control_block, options);
constexpr std::uint64_t kSlotMinSize =
    sizeof(telemetry::slot_header) + telemetry::kClassCount * sizeof(telemetry::class_counters);
constexpr std::uint64_t kCounterBlockSize =
    telemetry::kClassCount * sizeof(telemetry::class_counters);

// The segment is shared memory written by another process: every integer is read with an atomic
// load of its own width, every offset comes from a validated `layout`.
template <class T>
inline T load(const unsigned char* base, std::uint64_t off) {
  return __atomic_load_n(object_at<const T>(base + off), __ATOMIC_RELAXED);
}
template <class T>
inline T load_acquire(const unsigned char* base, std::uint64_t off) {
  return __atomic_load_n(object_at<const T>(base + off), __ATOMIC_ACQUIRE);
}
// A NUL-terminated string of at most `n` bytes (no NUL: all n bytes).
inline std::string load_string(const unsigned char* base, std::uint64_t off, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    char c = static_cast<char>(__atomic_load_n(base + off + i, __ATOMIC_RELAXED));
    if (c == 0) break;
    s.push_back(c);
  }
  return s;
}

inline std::string num(std::uint64_t v) {
  return std::to_string(v);
}
inline std::string num(std::int64_t v) {
  return std::to_string(v);
}

inline std::string octal(unsigned v) {
  std::string s;
  do s.insert(s.begin(), static_cast<char>('0' + (v & 7)));
  while ((v >>= 3) != 0);
  return std::string(s.size() < 3 ? 3 - s.size() : 0, '0') + s;
}

inline std::uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

inline void set(std::string* error, std::string msg) {
  if (error) *error = std::move(msg);
}

// The checked copy of everything that locates data in the segment.
struct layout {
  std::uint64_t size = 0;
  std::int32_t pid = 0;
  std::uint32_t class_count = 0, counter_count = 0, slot_count = 0, slot_size = 0;
  std::uint32_t option_count = 0, option_size = 0;
  std::uint64_t class_sizes_offset = 0, control_offset = 0, exited_offset = 0, slots_offset = 0;
  std::uint64_t matrix_offset = 0;  // 0: no matrix
  std::uint64_t class_units_offset = 0;  // 0: not published

  std::uint64_t slot(std::uint32_t i) const { return slots_offset + std::uint64_t(i) * slot_size; }
  std::uint64_t slot_counters(std::uint32_t i, unsigned cls) const {
    return slot(i) + sizeof(telemetry::slot_header) + cls * sizeof(telemetry::class_counters);
  }
  std::uint64_t exited(unsigned cls) const {
    return exited_offset + cls * sizeof(telemetry::class_counters);
  }
  std::uint64_t option(std::uint32_t i) const {
    return control_offset + kControlHeaderSize + std::uint64_t(i) * option_size;
  }
};

// The parts of the segment file that hold data. On tmpfs a load through a shared mapping from a
// page never written allocates that page: a reader that loaded every slot's state and the whole
// free matrix filled the file (3.6 MB for an idle process at 256 slots, 128 MiB of matrix at
// 4,096, more than Docker's default /dev/shm), and got SIGBUS when /dev/shm was full. The writer
// reserves a thread's slot and its row of the matrix before it publishes the slot's state, so a
// reader loads a slot's state only where lseek(SEEK_DATA) reports data (a hole reads as zeros:
// an unused slot) and then everything else of a slot in use. Ranges written after the scan read
// as they were at the scan (a thread that starts meanwhile shows in the next snapshot). A file
// system that reports no holes says the whole file is data.
class written {
 public:
  written(int fd, std::uint64_t size) {
    std::uint64_t off = 0;
    while (off < size) {
      const off_t d = lseek(fd, static_cast<off_t>(off), SEEK_DATA);
      if (d < 0) {
        if (errno != ENXIO) ranges_.emplace_back(off, size);  // cannot tell: data, as before
        break;
      }
      off_t h = lseek(fd, d, SEEK_HOLE);
      const std::uint64_t end = h < 0 ? size : std::min<std::uint64_t>(std::uint64_t(h), size);
      if (std::uint64_t(d) >= end) break;
      ranges_.emplace_back(std::uint64_t(d), end);
      off = end;
    }
  }
  // [off, off + len) lies in data.
  bool has(std::uint64_t off, std::uint64_t len) const {
    auto it = std::upper_bound(ranges_.begin(), ranges_.end(), off,
                               [](std::uint64_t o, const range& r) { return o < r.first; });
    return it != ranges_.begin() && off + len <= std::prev(it)->second;
  }
  // Calls f(i) for each 8-byte cell i of [off, off + 8 * count) that lies in data.
  template <class F>
  void each_cell(std::uint64_t off, std::uint64_t count, F f) const {
    each_part(off, off + 8 * count, [&](std::uint64_t b, std::uint64_t e) {
      for (std::uint64_t i = (b - off + 7) / 8; off + 8 * i + 8 <= e; ++i) f(i);
    });
  }
  // Calls f(b, e) for each non-empty part [b, e) of [begin, end) that lies in data, in order;
  // the ranges before `begin` are skipped by a binary search (a snapshot asks row by row).
  template <class F>
  void each_part(std::uint64_t begin, std::uint64_t end, F f) const {
    auto it = std::upper_bound(ranges_.begin(), ranges_.end(), begin,
                               [](std::uint64_t o, const range& r) { return o < r.second; });
    for (; it != ranges_.end() && it->first < end; ++it) {
      const std::uint64_t b = std::max(it->first, begin), e = std::min(it->second, end);
      if (b < e) f(b, e);
    }
  }

 private:
  using range = std::pair<std::uint64_t, std::uint64_t>;  // [first, second), sorted, disjoint
  std::vector<range> ranges_;
};

struct region {
  const char* what;
  std::uint64_t begin, end;
};

// [off, off + count * each) lies in [header_size, size) and is 8-byte aligned.
inline bool check_region(const char* what, std::uint64_t off, std::uint64_t count,
                         std::uint64_t each, std::uint64_t size, region* out, std::string* error) {
  std::uint64_t bytes, end;
  if (__builtin_mul_overflow(count, each, &bytes) || __builtin_add_overflow(off, bytes, &end)) {
    set(error, std::string(what) + " at offset " + num(off) + " (" + num(count) + " x " +
                   num(each) + " bytes) overflows 64 bits");
    return false;
  }
  if (off % 8 != 0) {
    set(error, std::string(what) + " offset " + num(off) + " is not a multiple of 8");
    return false;
  }
  if (off < kHeaderSize || end > size) {
    set(error, std::string(what) + " [" + num(off) + ", " + num(end) + ") lies outside the " +
                   "segment's data area [" + num(kHeaderSize) + ", " + num(size) + ")");
    return false;
  }
  *out = {what, off, end};
  return true;
}

// Reads and checks the layout fields of the mapping [base, base + size). Reads each field once.
inline bool read_layout(const unsigned char* p, std::uint64_t size, layout* l, std::string* error) {
  using H = telemetry::segment_header;
  const std::string truncated = "truncated: " + num(size) + " bytes, smaller than the " +
                                num(kHeaderSize) + "-byte segment header";
  if (size < sizeof(telemetry::kMagic)) {
    set(error, truncated);
    return false;
  }
  bool zero = true, match = true;
  for (std::size_t i = 0; i < sizeof(telemetry::kMagic); ++i) {
    auto c = static_cast<char>(__atomic_load_n(p + i, __ATOMIC_RELAXED));
    zero = zero && c == 0;
    match = match && c == telemetry::kMagic[i];
  }
  if (zero) {
    set(error,
        "not a livealloc telemetry segment (yet?): the magic number is zero; a process "
        "that is creating its segment shows this for a moment");
    return false;
  }
  if (!match) {
    set(error, "not a livealloc telemetry segment: wrong magic number");
    return false;
  }
  if (size < offsetof(H, version) + 4) {
    set(error, truncated);
    return false;
  }
  std::uint32_t version = load<std::uint32_t>(p, offsetof(H, version));
  if (version != telemetry::kVersion) {
    set(error, "version " + num(std::uint64_t(version)) + "; this reader reads version " +
                   num(std::uint64_t(telemetry::kVersion)));
    return false;
  }
  if (size < kHeaderSize) {
    set(error, truncated);
    return false;
  }
  std::uint32_t header_size = load<std::uint32_t>(p, offsetof(H, header_size));
  if (header_size != kHeaderSize) {
    set(error, "header_size is " + num(std::uint64_t(header_size)) + "; version 1 has a " +
                   num(kHeaderSize) + "-byte header");
    return false;
  }
  std::uint64_t segment_size = load<std::uint64_t>(p, offsetof(H, segment_size));
  if (segment_size != size) {
    set(error, std::string(size < segment_size ? "truncated" : "grown") + ": the header says " +
                   num(segment_size) + " bytes, the file has " + num(size));
    return false;
  }
  l->size = size;
  l->pid = load<std::int32_t>(p, offsetof(H, pid));
  l->class_count = load<std::uint32_t>(p, offsetof(H, class_count));
  l->counter_count = load<std::uint32_t>(p, offsetof(H, counter_count));
  l->slot_count = load<std::uint32_t>(p, offsetof(H, slot_count));
  l->slot_size = load<std::uint32_t>(p, offsetof(H, slot_size));
  l->class_sizes_offset = load<std::uint64_t>(p, offsetof(H, class_sizes_offset));
  l->control_offset = load<std::uint64_t>(p, offsetof(H, control_offset));
  l->exited_offset = load<std::uint64_t>(p, offsetof(H, exited_offset));
  l->slots_offset = load<std::uint64_t>(p, offsetof(H, slots_offset));
  l->matrix_offset = load<std::uint64_t>(p, offsetof(H, matrix_offset));
  l->class_units_offset = load<std::uint64_t>(p, offsetof(H, class_units_offset));
  if (l->pid <= 0) {
    set(error, "pid " + num(std::int64_t(l->pid)) + " in the header is not a process id");
    return false;
  }
  if (l->class_count != telemetry::kClassCount) {
    set(error, "class_count is " + num(std::uint64_t(l->class_count)) + "; version 1 has " +
                   num(std::uint64_t(telemetry::kClassCount)) + " size classes");
    return false;
  }
  if (l->counter_count != telemetry::kCounterCount) {
    set(error, "counter_count is " + num(std::uint64_t(l->counter_count)) + "; version 1 has " +
                   num(std::uint64_t(telemetry::kCounterCount)) + " counters per class");
    return false;
  }
  if (l->slot_count == 0) {
    set(error, "slot_count is 0; a segment has at least its overflow slot");
    return false;
  }
  if (l->slot_size < kSlotMinSize || l->slot_size % 8 != 0) {
    set(error, "slot_size is " + num(std::uint64_t(l->slot_size)) +
                   "; it must be a multiple of 8 and hold a slot header and " +
                   num(std::uint64_t(telemetry::kClassCount)) + " class counters (" +
                   num(kSlotMinSize) + " bytes)");
    return false;
  }
  region r[6];
  if (!check_region("class sizes", l->class_sizes_offset, l->class_count, 8, size, &r[0], error))
    return false;
  if (!check_region("control block", l->control_offset, 1, kControlHeaderSize, size, &r[1], error))
    return false;
  l->option_count =
      load<std::uint32_t>(p, l->control_offset + offsetof(telemetry::control_block, option_count));
  l->option_size =
      load<std::uint32_t>(p, l->control_offset + offsetof(telemetry::control_block, option_size));
  if (l->option_size != sizeof(telemetry::option_entry)) {
    set(error, "option_size is " + num(std::uint64_t(l->option_size)) + "; version 1 has " +
                   num(sizeof(telemetry::option_entry)) + "-byte options");
    return false;
  }
  std::uint64_t options_offset = l->control_offset + kControlHeaderSize;
  region opts;
  if (!check_region("options", options_offset, l->option_count, l->option_size, size, &opts, error))
    return false;
  r[1].end = opts.end;
  if (!check_region("exited totals", l->exited_offset, l->class_count,
                    sizeof(telemetry::class_counters), size, &r[2], error) ||
      !check_region("slots", l->slots_offset, l->slot_count, l->slot_size, size, &r[3], error))
    return false;
  int regions = 4;
  if (l->matrix_offset != 0 &&
      !check_region("free matrix", l->matrix_offset, std::uint64_t(l->slot_count) * l->slot_count,
                    8, size, &r[regions++], error))
    return false;
  if (l->class_units_offset != 0 &&
      !check_region("class units", l->class_units_offset, l->class_count, 8, size, &r[regions++],
                    error))
    return false;
  for (int i = 0; i < regions; ++i)
    for (int j = i + 1; j < regions; ++j)
      if (r[i].begin < r[j].end && r[j].begin < r[i].end) {
        set(error, std::string(r[i].what) + " [" + num(r[i].begin) + ", " + num(r[i].end) +
                       ") and " + r[j].what + " [" + num(r[j].begin) + ", " + num(r[j].end) +
                       ") overlap");
        return false;
      }
  return true;
}

// Resident bytes of a process from /proc/<pid>/statm; 0 when it cannot be read.
inline std::uint64_t resident_of(int pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/statm";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[128];
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  unsigned long long pages = 0, resident = 0;
  if (std::sscanf(buf, "%llu %llu", &pages, &resident) != 2) return 0;
  return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

// "livealloc.<digits>" -> the pid; -1 for any other name (or a pid that does not fit an int).
inline int pid_from_name(const std::string& name) {
  const std::string prefix = "livealloc.";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  if (name[prefix.size()] == '0') return -1;  // the allocator writes no leading zeros
  long long v = 0;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    v = v * 10 + (name[i] - '0');
    if (v > 0x7fffffff) return -1;
  }
  return v > 0 ? static_cast<int>(v) : -1;
}

inline std::string base_name(const std::string& path) {
  std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

inline void sleep_ms(int ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

// Milliseconds of CLOCK_MONOTONIC (the reader's waits, the memlive command's timers).
inline std::uint64_t monotonic_ms() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1000u + std::uint64_t(ts.tv_nsec) / 1000000u;
}

// The subtracted counters of the live formula, read in a first pass (see snapshot::total).
constexpr unsigned kSubtracted[] = {telemetry::c_frees, telemetry::c_large_freed_by_others,
                                    telemetry::c_handed_over, telemetry::c_foreign_allocs};
inline bool is_subtracted(unsigned c) {
  return c == telemetry::c_frees || c == telemetry::c_large_freed_by_others ||
         c == telemetry::c_handed_over || c == telemetry::c_foreign_allocs;
}

// allocs + adopted - the subtracted counters: 0 if below, held at 2^64 - 1 if above. Summed in
// 128 bits, so that counters near 2^64 (a damaged segment, or totals held at 2^64 - 1 as
// `memlive check` sums a recording's) do not wrap: allocs at 2^64 - 1 and 1 adopted made 0.
inline std::uint64_t live_of(const std::array<std::uint64_t, telemetry::kCounterCount>& v) {
  __extension__ typedef unsigned __int128 wide;  // GCC and clang, 64-bit targets
  const wide plus = wide(v[telemetry::c_allocs]) + v[telemetry::c_adopted];
  wide minus = 0;
  for (unsigned c : kSubtracted) minus += v[c];
  const wide live = plus > minus ? plus - minus : 0;
  return live > ~std::uint64_t(0) ? ~std::uint64_t(0) : static_cast<std::uint64_t>(live);
}

}  // namespace detail

inline std::string state_name(std::uint32_t state) {
  switch (state) {
    case telemetry::slot_unused:
      return "unused";
    case telemetry::slot_alive:
      return "alive";
    case telemetry::slot_exited:
      return "exited";
    case telemetry::slot_overflow:
      return "overflow";
    default:
      return "state " + std::to_string(state);
  }
}

// A process that has exited but was not reaped yet (a zombie) still answers kill(pid, 0): its
// state in /proc/<pid>/stat (the field after the command name, which may hold spaces and
// parentheses) tells it apart. Where /proc cannot be read, kill() decides alone.
namespace detail {
// What the reader needs of a process's stat line: the state letter (field 3), its threads (field
// 20) and its start time (clock ticks after boot, field 22).
struct proc_info {
  char state = 0;
  std::uint64_t threads = 0;
  std::uint64_t start_ticks = 0;
};

// Read from the thread group leader's own stat, /proc/<pid>/task/<pid>/stat, which holds the same
// three fields: /proc/<pid>/stat sums CPU times over every thread, so with 4,000 threads each
// read walked them all, and an idle `memlive serve` spent 8% of its time there. False when
// neither can be read.
inline bool proc_stat(int pid, proc_info* out) {
  char path[64], buf[1024];
  std::snprintf(path, sizeof path, "/proc/%d/task/%d/stat", pid, pid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
    fd = ::open(path, O_RDONLY | O_CLOEXEC);
  }
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  const char* p = strrchr(buf, ')');  // the command name may hold spaces and parentheses
  if (!p || p[1] != ' ' || !p[2]) return false;
  out->state = p[2];
  p += 2;
  unsigned long long threads = 0, start = 0;
  for (int field = 3; field < 22 && p; ++field) {
    p = strchr(p, ' ');
    if (p) ++p;
    if (p && field == 19 && std::sscanf(p, "%llu", &threads) != 1) return false;
  }
  if (!p || std::sscanf(p, "%llu", &start) != 1) return false;
  out->threads = threads;
  out->start_ticks = start;
  return true;
}

// Whether a process still runs. A zombie (Z) or a dead task (X) has exited, unless threads are
// left: a leader that returned through pthread_exit() while other threads run is a zombie with
// them counted (a process that exited for good keeps only its leader, 1).
inline bool proc_running(const proc_info& i) {
  return (i.state != 'Z' && i.state != 'X') || i.threads > 1;
}
}  // namespace detail

inline std::string state_name(const snapshot& s, const thread_view& t) {
  return t.state == telemetry::slot_alive && !s.process_alive ? "ended" : state_name(t.state);
}

inline bool pid_alive(int pid) {
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return false;
  detail::proc_info i;
  return !detail::proc_stat(pid, &i) || detail::proc_running(i);
}

namespace detail {
// CLOCK_REALTIME nanoseconds at which a process started `start_ticks` after boot: the boot time
// (btime in /proc/stat) plus those ticks. 0 when unknown.
inline std::uint64_t start_ns_of(std::uint64_t start_ticks) {
  const long hz = sysconf(_SC_CLK_TCK);
  if (hz <= 0) return 0;
  FILE* f = std::fopen("/proc/stat", "re");
  if (!f) return 0;
  char line[256];
  unsigned long long btime = 0;
  while (std::fgets(line, sizeof line, f) && std::sscanf(line, "btime %llu", &btime) != 1) {
  }
  std::fclose(f);
  if (btime == 0) return 0;
  return btime * 1000000000ull + start_ticks * (1000000000ull / static_cast<std::uint64_t>(hz));
}
}  // namespace detail

inline bool segment_owner_alive(int pid, std::uint64_t start_ns, std::uint64_t* start_ticks) {
  if (start_ticks) *start_ticks = 0;
  if (pid <= 0 || (kill(pid, 0) != 0 && errno != EPERM)) return false;
  detail::proc_info i;
  if (!detail::proc_stat(pid, &i)) return true;  // kill() decides alone
  if (!detail::proc_running(i)) return false;
  constexpr std::uint64_t kSlackNs = 60ull * 1000000000ull;  // clock steps, btime rounding
  const std::uint64_t started = detail::start_ns_of(i.start_ticks);
  if (start_ns != 0 && started != 0 && started > start_ns + kSlackNs) return false;
  if (start_ticks) *start_ticks = i.start_ticks;
  return true;
}

inline std::uint64_t thread_view::live(unsigned cls) const {
  return cls < telemetry::kClassCount ? detail::live_of(counters[cls]) : 0;
}
inline std::uint64_t thread_view::total(unsigned counter) const {
  std::uint64_t t = 0;
  if (counter < telemetry::kCounterCount)
    for (const auto& c : counters) t += c[counter];
  return t;
}

inline std::uint64_t snapshot::total(unsigned cls, unsigned counter) const {
  if (cls >= telemetry::kClassCount || counter >= telemetry::kCounterCount) return 0;
  std::uint64_t t = exited[cls][counter];
  for (const thread_view& th : threads) t += th.counters[cls][counter];
  return t;
}
inline std::uint64_t snapshot::live(unsigned cls) const {
  if (cls >= telemetry::kClassCount) return 0;
  std::array<std::uint64_t, telemetry::kCounterCount> v{};
  for (unsigned c = 0; c < telemetry::kCounterCount; ++c) v[c] = total(cls, c);
  return detail::live_of(v);
}
inline counter_matrix snapshot::totals() const {
  counter_matrix t = exited;
  for (const thread_view& th : threads)
    for (unsigned cls = 0; cls < telemetry::kClassCount; ++cls)
      for (unsigned c = 0; c < telemetry::kCounterCount; ++c) t[cls][c] += th.counters[cls][c];
  return t;
}
// Both from totals(): live(cls) for every class read the threads' counters 848 times over,
// half of what memlive serve spent on a sample of 4,000 threads.
inline std::uint64_t snapshot::live_blocks() const {
  const counter_matrix all = totals();
  std::uint64_t t = 0;
  for (unsigned cls = 0; cls < telemetry::kClassCount; ++cls) t += detail::live_of(all[cls]);
  return t;
}
inline std::uint64_t snapshot::live_bytes() const {
  const counter_matrix all = totals();
  std::uint64_t t = large_bytes;
  for (unsigned cls = 1; cls < telemetry::kClassCount && cls < class_sizes.size(); ++cls)
    t += detail::live_of(all[cls]) * class_sizes[cls];
  return t;
}
inline std::uint32_t snapshot::threads_alive() const {
  if (!process_alive) return 0;
  return static_cast<std::uint32_t>(
      std::count_if(threads.begin(), threads.end(),
                    [](const thread_view& t) { return t.state == telemetry::slot_alive; }));
}
inline const option_view* snapshot::find_option(const std::string& name) const {
  for (const option_view& o : options)
    if (o.name == name) return &o;
  return nullptr;
}

namespace detail {
// The registry of mappings survive_truncation's handler may repair: entries in chunks of 64, a
// chunk added (never freed) when all are taken, so the handler walks them without a lock.
// base: 0 free, 1 being filled or emptied, else the mapping's first byte; size is stored before
// base (release) and read after it (acquire), and a match is checked against base again.
struct guarded {
  std::atomic<std::uintptr_t> base{0};
  std::atomic<std::uint64_t> size{0};
  std::atomic<bool> truncated{false};  // a read faulted past the file's end
};
struct guard_chunk {
  guarded entries[64];
  std::atomic<guard_chunk*> next{nullptr};
};
static_assert(std::atomic<std::uintptr_t>::is_always_lock_free &&
                  std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<bool>::is_always_lock_free &&
                  std::atomic<guard_chunk*>::is_always_lock_free,
              "the SIGBUS handler reads the registry: its atomics must be lock-free");
inline guard_chunk g_guards;
inline std::atomic<bool> g_guarding{false};     // survive_truncation() was called
inline std::atomic<std::uintptr_t> g_page{0};  // the page size, read once outside the handler

// An entry for the mapping [base, base + size), or nullptr when nothing guards mappings.
inline guarded* guard(const unsigned char* base, std::uint64_t size) {
  if (!g_guarding.load(std::memory_order_acquire)) return nullptr;
  for (guard_chunk* c = &g_guards;;) {
    for (guarded& g : c->entries) {
      std::uintptr_t expect = 0;
      if (g.base.load(std::memory_order_relaxed) != 0 ||
          !g.base.compare_exchange_strong(expect, 1, std::memory_order_acquire))
        continue;
      g.truncated.store(false, std::memory_order_relaxed);
      g.size.store(size, std::memory_order_relaxed);
      g.base.store(reinterpret_cast<std::uintptr_t>(base), std::memory_order_release);
      return &g;
    }
    guard_chunk* next = c->next.load(std::memory_order_acquire);
    if (!next) {
      auto* fresh = new guard_chunk;
      if (c->next.compare_exchange_strong(next, fresh, std::memory_order_acq_rel))
        next = fresh;
      else
        delete fresh;  // another thread added one: `next` is it
    }
    c = next;
  }
}

// Before the munmap: the address range may be mapped again for something else.
inline void unguard(guarded* g) {
  if (!g) return;
  g->base.store(1, std::memory_order_relaxed);
  g->size.store(0, std::memory_order_relaxed);
  g->base.store(0, std::memory_order_release);
}

// The SIGBUS action survive_truncation() replaced: a fault outside the segments goes to it.
inline struct sigaction g_previous {};

inline void on_sigbus(int sig, siginfo_t* info, void* context) {
  const int saved = errno;
  const auto addr = reinterpret_cast<std::uintptr_t>(info->si_addr);
  const std::uintptr_t page = g_page.load(std::memory_order_relaxed);
  if (info->si_code == BUS_ADRERR && page != 0)
    for (guard_chunk* c = &g_guards; c; c = c->next.load(std::memory_order_acquire))
      for (guarded& g : c->entries) {
        const std::uintptr_t b = g.base.load(std::memory_order_acquire);
        if (b <= 1 || addr < b || addr - b >= g.size.load(std::memory_order_acquire) ||
            g.base.load(std::memory_order_acquire) != b)
          continue;
        // The page past the file's end becomes private zeros: the read that faulted sees 0.
        void* at = reinterpret_cast<void*>(addr & ~(page - 1));
        if (mmap(at, page, PROT_READ | PROT_WRITE, MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1,
                 0) == MAP_FAILED)
          break;
        g.truncated.store(true, std::memory_order_release);
        errno = saved;
        return;
      }
  // Not ours: the handler installed before ours takes it, called as the kernel would have (without
  // its sa_mask and flags); SIG_IGN ignores one sent by kill. Otherwise die of it as without a
  // handler (SIGBUS is blocked here, and pending on return).
  const struct sigaction& prev = g_previous;
  errno = saved;
  if (prev.sa_flags & SA_SIGINFO) {
    if (prev.sa_sigaction) return prev.sa_sigaction(sig, info, context);
  } else if (prev.sa_handler == SIG_IGN) {
    if (info->si_code <= 0) return;  // sent, not a fault: ignored as before
  } else if (prev.sa_handler != SIG_DFL) {
    return prev.sa_handler(sig);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  raise(sig);
  errno = saved;
}
}  // namespace detail

inline bool survive_truncation(std::string* error) {
  const long page = sysconf(_SC_PAGESIZE);
  detail::g_page.store(static_cast<std::uintptr_t>(page > 0 ? page : 4096),
                       std::memory_order_relaxed);
  struct sigaction sa {};
  sa.sa_sigaction = detail::on_sigbus;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  struct sigaction before {};
  bool ok = sigaction(SIGBUS, nullptr, &before) == 0;
  // Called again: what was there before the first call stays the one chained to.
  if (ok && !((before.sa_flags & SA_SIGINFO) && before.sa_sigaction == detail::on_sigbus))
    detail::g_previous = before;
  if (!ok || sigaction(SIGBUS, &sa, nullptr) != 0) {
    detail::set(error, std::string("sigaction(SIGBUS): ") + strerror(errno));
    return false;
  }
  detail::g_guarding.store(true, std::memory_order_release);
  return true;
}

inline bool segment::cut() const {
  // A compiler barrier: every read of the mapping before this is done before the flag is read
  // (the handler sets it in this thread, during the read that faulted).
  std::atomic_signal_fence(std::memory_order_seq_cst);
  return guard_ && guard_->truncated.load(std::memory_order_acquire);
}

inline std::string segment::cut_error() const {
  return path_ + ": truncated while being read: the file shrank under the mapping (its owner "
                 "cut it); open it again";
}

inline std::unique_ptr<segment> segment::open_pid(int pid, std::string* error,
                                                  const std::string& dir) {
  if (pid <= 0) {
    detail::set(error, "pid " + std::to_string(pid) + " is not a process id");
    return nullptr;
  }
  std::string path = dir + "/livealloc." + std::to_string(pid);
  struct stat st;
  if (lstat(path.c_str(), &st) != 0 && errno == ENOENT) {
    detail::set(error, pid_alive(pid) ? "no telemetry segment for pid " + std::to_string(pid) +
                                            ": is it running with LIVEALLOC_PROFILE=1?"
                                      : "no telemetry segment for pid " + std::to_string(pid) +
                                            ", and no process with that pid is running");
    return nullptr;
  }
  return open_path(path, error);
}

inline std::unique_ptr<segment> segment::open_path(const std::string& path, std::string* error,
                                                   bool read_only) {
  const int flags = O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;  // NONBLOCK: a FIFO must not hang us
  bool writable = !read_only;
  int fd = writable ? ::open(path.c_str(), O_RDWR | flags) : -1;
  if (fd < 0) {
    writable = false;
    fd = ::open(path.c_str(), O_RDONLY | flags);
  }
  if (fd < 0) {
    int e = errno;
    std::string why;
    struct stat st;
    if (e == ENOENT)
      why = "no such file";
    else if ((e == EACCES || e == EPERM) && stat(path.c_str(), &st) == 0 && st.st_uid == geteuid())
      why = "permission denied: the file's mode (" + detail::octal(st.st_mode & 07777) +
            ") does not let its owner read it";
    else if (e == EACCES || e == EPERM)
      why = "permission denied: the segment belongs to another user" +
            (stat(path.c_str(), &st) == 0 ? " (uid " + std::to_string(st.st_uid) + ")"
                                          : std::string()) +
            "; run as that user or as root";
    else if (e == ELOOP)
      why = "a symbolic link; refusing to follow it";
    else
      why = strerror(e);
    detail::set(error, path + ": " + why);
    return nullptr;
  }
  struct stat st;
  std::string why;
  if (fstat(fd, &st) != 0)
    why = strerror(errno);
  else if (!S_ISREG(st.st_mode))
    why = "not a regular file";
  else if (st.st_size < static_cast<off_t>(sizeof(telemetry::kMagic)))
    why = "truncated: " + std::to_string(st.st_size) + " bytes, smaller than the " +
          std::to_string(detail::kHeaderSize) + "-byte segment header";
  if (!why.empty()) {
    ::close(fd);
    detail::set(error, path + ": " + why);
    return nullptr;
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  void* m = mmap(nullptr, size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    detail::set(error,
                path + ": mmap of " + std::to_string(size) + " bytes failed: " + strerror(errno));
    ::close(fd);
    return nullptr;
  }
  auto* base = static_cast<unsigned char*>(m);
  detail::guarded* guard = detail::guard(base, size);
  detail::layout l;
  const bool laid_out = detail::read_layout(base, size, &l, &why);
  std::uint64_t start_ns = 0;
  if (laid_out)
    start_ns = detail::load<std::uint64_t>(base, offsetof(telemetry::segment_header, start_ns));
  std::atomic_signal_fence(std::memory_order_seq_cst);  // the reads above before the flag's
  if (guard && guard->truncated.load(std::memory_order_acquire)) {
    why = "truncated while being read: the file shrank under the mapping (its owner cut it)";
  } else if (laid_out) {
    const int name_pid = detail::pid_from_name(detail::base_name(path));
    // A process writes its segment as itself: a file of another user (but root) that names a
    // live process was put there by someone else, and would be shown as that process's.
    struct stat proc;
    const bool forged = st.st_uid != 0 && segment_owner_alive(l.pid, start_ns) &&
                        stat(("/proc/" + std::to_string(l.pid)).c_str(), &proc) == 0 &&
                        proc.st_uid != st.st_uid;
    if (forged) {
      why = "owned by uid " + std::to_string(st.st_uid) + ", but process " +
            std::to_string(l.pid) + " runs as uid " + std::to_string(proc.st_uid) +
            ": not written by that process; refusing to read it";
    } else if (name_pid <= 0 || name_pid == l.pid) {
      std::unique_ptr<segment> seg(
          new segment(fd, base, size, writable, read_only, l.pid, path, guard));
      seg->dev_ = st.st_dev;
      seg->ino_ = st.st_ino;
      detail::proc_info i;
      seg->start_ticks_ = detail::proc_stat(l.pid, &i) ? i.start_ticks : 0;
      return seg;
    } else {
      why = "the header says pid " + std::to_string(l.pid) + " but the file name says pid " +
            std::to_string(name_pid);
    }
  }
  detail::unguard(guard);
  munmap(m, size);
  ::close(fd);
  detail::set(error, path + ": " + why);
  return nullptr;
}

inline segment::~segment() {
  detail::unguard(guard_);
  munmap(base_, size_);
  ::close(fd_);
}

inline std::unique_ptr<segment> segment::successor(std::string* error) const {
  struct stat st;
  if (lstat(path_.c_str(), &st) != 0 || (st.st_dev == dev_ && st.st_ino == ino_)) return nullptr;
  detail::proc_info i;
  if (start_ticks_ == 0 || !detail::proc_stat(pid_, &i) || i.start_ticks != start_ticks_)
    return nullptr;
  std::unique_ptr<segment> next = open_path(path_, error, read_only_);
  if (next && next->pid_ != pid_) {
    detail::set(error, path_ + ": now holds the segment of pid " + std::to_string(next->pid_));
    next.reset();
  }
  return next;
}

// Re-reads and re-checks the layout: a file truncated under the mapping would turn reads into
// SIGBUS, and header fields changed since open must not move reads outside it.
inline bool segment::current(detail::layout* l, std::string* error) const {
  if (cut()) {
    detail::set(error, cut_error());
    return false;
  }
  struct stat st;
  if (fstat(fd_, &st) != 0) {
    detail::set(error, path_ + ": " + strerror(errno));
    return false;
  }
  if (static_cast<std::uint64_t>(st.st_size) < size_) {
    detail::set(error, path_ + ": truncated while mapped: the file has " +
                           std::to_string(st.st_size) + " bytes, " + std::to_string(size_) +
                           " were mapped");
    return false;
  }
  std::string why;
  if (!detail::read_layout(base_, size_, l, &why)) {
    detail::set(error, cut() ? cut_error() : path_ + ": " + why);
    return false;
  }
  if (l->pid != pid_) {
    detail::set(error, path_ + ": the header's pid changed from " + std::to_string(pid_) + " to " +
                           std::to_string(l->pid) + " since the segment was opened");
    return false;
  }
  return true;
}

namespace detail {
// The non-zero cells of the free matrix into s->free_matrix, in (row, column) order. Loading
// every cell in data cost what the slots reserve, not what they use: a 4,096-slot process with
// 4,000 threads has 4,001 rows of 4,096 cells in data, 128 MiB loaded at every snapshot (14 ms of
// 57 ms), most of them 0. So only the cells that can hold a count are loaded:
// - columns below `taken_end`, one past the last regular slot whose state is in data (a heap
//   owns a block only once its thread has taken the slot, and taking a slot writes it: reading
//   rule 8), and the overflow slot's column;
// - rows of slots that can have counted a free: a slot in the snapshot in its first incarnation
//   (its first thread: incarnation 1) whose c_remote_sent sums to 0 over the classes has an
//   empty row, since its thread counts a block sent before it counts the block's cell, and only
//   the fold of a next incarnation moves sent counts out of the slot (TELEMETRY.md, "The
//   cross-thread free matrix"). The overflow row (its slot's counters lag behind its threads'),
//   a slot taken again and one not in the snapshot (changing hands) are loaded.
// A cell that grows while this runs reads as it was at the load, as before; one that a skipped
// row gains after the slot's counters were read shows in the next snapshot.
inline void read_free_matrix(const unsigned char* p, const layout& l, const written& data,
                             std::uint32_t taken_end, snapshot* s) {
  const std::uint32_t n = l.slot_count, overflow = n - 1;
  std::vector<bool> quiet(n, false);
  for (const thread_view& t : s->threads)
    quiet[t.slot] = t.slot != overflow && t.state != telemetry::slot_overflow &&
                    t.incarnation == 1 && t.total(telemetry::c_remote_sent) == 0;
  const std::uint64_t cols = std::min(taken_end, overflow);  // then the overflow column
  const std::uint64_t row_bytes = 8ull * n;
  for (std::uint32_t f = 0; f < n; ++f) {
    if (quiet[f]) continue;
    const std::uint64_t row = l.matrix_offset + f * row_bytes;
    auto cells = [&](std::uint64_t b, std::uint64_t e) {
      // 8 cells at a time: most are 0, and one branch for 8 loads keeps this at memory speed.
      std::uint64_t at = row + (b - row + 7) / 8 * 8;
      for (; at + 64 <= e; at += 64) {
        std::uint64_t any = 0;
        for (unsigned k = 0; k < 8; ++k) any |= load<std::uint64_t>(p, at + 8 * k);
        if (any == 0) continue;
        for (unsigned k = 0; k < 8; ++k)
          if (const auto v = load<std::uint64_t>(p, at + 8 * k))
            s->free_matrix.push_back({f, std::uint32_t((at + 8 * k - row) / 8), v});
      }
      for (; at + 8 <= e; at += 8)
        if (const auto v = load<std::uint64_t>(p, at))
          s->free_matrix.push_back({f, std::uint32_t((at - row) / 8), v});
    };
    data.each_part(row, row + 8 * cols, cells);
    data.each_part(row + 8ull * overflow, row + row_bytes, cells);
  }
}
}  // namespace detail

// The header, class sizes and control block into a fresh *s (take() goes on from there).
inline bool segment::take_head(snapshot* out, detail::layout* layout) const {
  using detail::load;
  using H = telemetry::segment_header;
  snapshot& s = *out;
  if (!current(layout, &s.error)) return false;
  const detail::layout& l = *layout;
  const unsigned char* p = base_;
  s.taken_ns = detail::now_ns();
  s.pid = l.pid;
  s.program = detail::load_string(p, offsetof(H, program), telemetry::kProgramSize);
  s.start_ns = load<std::uint64_t>(p, offsetof(H, start_ns));
  s.process_alive = alive_since(s.start_ns, &s.process_start_ticks);
  if (!s.process_alive) s.process_start_ticks = 0;
  s.segment_bytes = load<std::uint64_t>(p, offsetof(H, segment_bytes));
  s.large_bytes = load<std::uint64_t>(p, offsetof(H, large_bytes));
  s.cached_bytes = load<std::uint64_t>(p, offsetof(H, cached_bytes));
  s.committed_bytes = load<std::uint64_t>(p, offsetof(H, committed_bytes));
  s.mmap_calls = load<std::uint64_t>(p, offsetof(H, mmap_calls));
  s.munmap_calls = load<std::uint64_t>(p, offsetof(H, munmap_calls));
  s.madvise_calls = load<std::uint64_t>(p, offsetof(H, madvise_calls));
  s.purges = load<std::uint64_t>(p, offsetof(H, purges));
  s.slots_used = load<std::uint64_t>(p, offsetof(H, slots_used));
  s.overflow_threads = load<std::uint64_t>(p, offsetof(H, overflow_threads));

  // A u64 per class from `offset`; all 0 where the writer publishes none (offset 0).
  const auto per_class = [&](std::uint64_t offset) {
    std::vector<std::uint64_t> v(l.class_count, 0);
    if (offset != 0)
      for (std::uint32_t c = 0; c < l.class_count; ++c)
        v[c] = load<std::uint64_t>(p, offset + 8ull * c);
    return v;
  };
  s.class_sizes = per_class(l.class_sizes_offset);
  s.class_units = per_class(l.class_units_offset);

  using C = telemetry::control_block;
  s.generation = load<std::uint64_t>(p, l.control_offset + offsetof(C, generation));
  s.validated_generation =
      load<std::uint64_t>(p, l.control_offset + offsetof(C, validated_generation));
  s.rejected = load<std::uint64_t>(p, l.control_offset + offsetof(C, rejected));
  using O = telemetry::option_entry;
  s.options.resize(l.option_count);
  for (std::uint32_t i = 0; i < l.option_count; ++i) {
    const std::uint64_t o = l.option(i);
    option_view& v = s.options[i];
    v.name = detail::load_string(p, o + offsetof(O, name), sizeof(O::name));
    v.requested = load<std::int64_t>(p, o + offsetof(O, requested));
    v.effective = load<std::int64_t>(p, o + offsetof(O, effective));
    v.min = load<std::int64_t>(p, o + offsetof(O, min));
    v.max = load<std::int64_t>(p, o + offsetof(O, max));
    v.default_value = load<std::int64_t>(p, o + offsetof(O, default_value));
    v.live = load<std::uint32_t>(p, o + offsetof(O, live)) != 0;
    v.is_bool = load<std::uint32_t>(p, o + offsetof(O, is_bool)) != 0;
  }
  return true;
}

inline snapshot segment::head() const {
  snapshot s;
  detail::layout l;
  if (take_head(&s, &l) && cut()) {  // read zeros in place of the file (see take())
    s = snapshot{};
    s.error = cut_error();
  }
  return s;
}

inline snapshot segment::take() const {
  snapshot s;
  take(&s);
  return s;
}

inline void segment::take(snapshot* into) const {
  using detail::load;
  using S = telemetry::slot_header;
  // Everything back to a fresh snapshot but the memory of its threads and free cells. The thread
  // views are kept as they are: every field of those still in use is written below.
  std::vector<thread_view> threads = std::move(into->threads);
  std::vector<snapshot::free_cell> cells = std::move(into->free_matrix);
  *into = snapshot{};
  into->threads = std::move(threads);
  into->free_matrix = std::move(cells);
  into->free_matrix.clear();
  snapshot& s = *into;
  detail::layout l;
  if (!take_head(&s, &l)) {
    s.threads.clear();
    return;
  }
  const unsigned char* p = base_;
  using H = telemetry::segment_header;
  const auto folds_done = detail::load_acquire<std::uint64_t>(p, offsetof(H, folds_done));
  const auto folds_started = detail::load_acquire<std::uint64_t>(p, offsetof(H, folds_started));
  // Slots in use, by their state now (acquire: a slot's identity is written before its state).
  // Listed first and then copied into threads sized once: a thread_view is 7 KB, and growing
  // the vector by push_back moved and faulted in about twice the 27 MB of 4,000 threads per
  // snapshot (a third of a snapshot's time).
  const detail::written data(fd_, size_);
  std::uint32_t taken_end = 0;  // one past the last regular slot in data (read_free_matrix)
  struct in_use {
    std::uint32_t slot, state, incarnation;
  };
  std::vector<in_use> used;
  for (std::uint32_t i = 0; i < l.slot_count; ++i) {
    const std::uint64_t at = l.slot(i) + offsetof(S, state);
    if (!data.has(at, sizeof(std::uint32_t))) continue;  // never written: unused
    if (i + 1 < l.slot_count) taken_end = i + 1;
    auto state = detail::load_acquire<std::uint32_t>(p, at);
    if (state != telemetry::slot_alive && state != telemetry::slot_exited &&
        state != telemetry::slot_overflow)
      continue;  // unused (or changing hands), or a value this version does not know
    used.push_back({i, state, load<std::uint32_t>(p, l.slot(i) + offsetof(S, incarnation))});
  }
  // A sampler keeps the memory of its largest snapshot, but not for ever: after a burst of
  // threads has gone, a view vector over twice the size it needs is given back.
  if (s.threads.capacity() > 2 * used.size() + 64) std::vector<thread_view>().swap(s.threads);
  s.threads.resize(used.size());
  for (std::size_t k = 0; k < used.size(); ++k) {
    s.threads[k].slot = used[k].slot;
    s.threads[k].state = used[k].state;
    s.threads[k].incarnation = used[k].incarnation;
  }

  // Counters in two passes, so that live never reads negative (TELEMETRY.md, "Reading rules"):
  // first every subtracted counter (acquire, so no later load moves above them), exited totals
  // before slots; then the added ones, slots before exited totals. A writer bumps an added
  // counter (allocs, adopted) before the subtracted one that balances it, and when it moves
  // counts from a slot to the exited totals it zeroes subtracted counters in the slot before
  // adding them there, and adds added counters there before zeroing them in the slot: this read
  // order then sees a subtracted count at most once and an added count at least once.
  const int blocks = static_cast<int>(s.threads.size());
  auto block = [&](int w, unsigned cls) {  // w: -1 for the exited totals, else a thread index
    return w < 0 ? l.exited(cls) : l.slot_counters(s.threads[std::size_t(w)].slot, cls);
  };
  auto row = [&](int w, unsigned cls) -> std::array<std::uint64_t, telemetry::kCounterCount>& {
    return w < 0 ? s.exited[cls] : s.threads[std::size_t(w)].counters[cls];
  };
  for (int w = -1; w < blocks; ++w)
    for (unsigned cls = 0; cls < telemetry::kClassCount; ++cls)
      for (unsigned c : detail::kSubtracted)
        row(w, cls)[c] = detail::load_acquire<std::uint64_t>(p, block(w, cls) + 8ull * c);
  for (int i = 0; i <= blocks; ++i) {
    const int w = i < blocks ? i : -1;  // slots first, the exited totals last
    for (unsigned cls = 0; cls < telemetry::kClassCount; ++cls)
      for (unsigned c = 0; c < telemetry::kCounterCount; ++c)
        if (!detail::is_subtracted(c))  // acquire too: keeps slots-then-exited in order
          row(w, cls)[c] = detail::load_acquire<std::uint64_t>(p, block(w, cls) + 8ull * c);
  }

  for (thread_view& t : s.threads) {
    const std::uint64_t h = l.slot(t.slot);
    t.tid = load<std::int32_t>(p, h + offsetof(S, tid));
    t.name = detail::load_string(p, h + offsetof(S, name), telemetry::kNameSize);
    t.start_ns = load<std::uint64_t>(p, h + offsetof(S, start_ns));
    t.exit_ns = load<std::uint64_t>(p, h + offsetof(S, exit_ns));
    t.applied_generation = load<std::uint64_t>(p, h + offsetof(S, applied_generation));
    t.mmap_calls = load<std::uint64_t>(p, h + offsetof(S, mmap_calls));
    t.munmap_calls = load<std::uint64_t>(p, h + offsetof(S, munmap_calls));
    t.madvise_calls = load<std::uint64_t>(p, h + offsetof(S, madvise_calls));
    t.slow_paths = load<std::uint64_t>(p, h + offsetof(S, slow_paths));
    t.flushes = load<std::uint64_t>(p, h + offsetof(S, flushes));
  }
  // A slot that changed hands while we copied it (new incarnation, or a new state: a thread
  // took an exited slot, folding its counters into the exited totals) mixes two threads and
  // may be torn: leave it out of this snapshot; the next one shows it.
  // Every copy above before the checks: x86-64 keeps loads in order, and this keeps the compiler
  // from moving them.
  std::atomic_signal_fence(std::memory_order_acquire);
  // A thread that exited meanwhile (alive, then exited, same incarnation) keeps its counts in
  // its slot: kept.
  auto changed = [&](const thread_view& t) {
    const std::uint64_t h = l.slot(t.slot);
    const auto state = detail::load_acquire<std::uint32_t>(p, h + offsetof(S, state));
    return detail::load_acquire<std::uint32_t>(p, h + offsetof(S, incarnation)) != t.incarnation ||
           (state != t.state &&
            !(t.state == telemetry::slot_alive && state == telemetry::slot_exited));
  };
  s.threads.erase(std::remove_if(s.threads.begin(), s.threads.end(), changed), s.threads.end());
  s.whole = folds_done == folds_started &&
            detail::load_acquire<std::uint64_t>(p, offsetof(H, folds_started)) == folds_started;
  s.slot_count = l.slot_count;
  if (l.matrix_offset != 0) detail::read_free_matrix(p, l, data, taken_end, &s);
  s.resident_bytes = detail::resident_of(pid_);
  if (cut()) {  // some of the above read zeros in place of the file: none of it is to be trusted
    std::vector<thread_view> kept = std::move(s.threads);  // its memory, as above
    kept.clear();
    s = snapshot{};
    s.threads = std::move(kept);
    s.error = cut_error();
  }
}

inline bool segment::process_alive() const {
  // The header's start time, unless the file was cut under the mapping (a read there is SIGBUS):
  // then 0, unknown, and the pid alone decides.
  struct stat st;
  std::uint64_t start_ns = 0;
  if (fstat(fd_, &st) == 0 && static_cast<std::uint64_t>(st.st_size) >= detail::kHeaderSize)
    start_ns = detail::load<std::uint64_t>(base_, offsetof(telemetry::segment_header, start_ns));
  return alive_since(start_ns);
}

inline bool segment::alive_since(std::uint64_t start_ns, std::uint64_t* start_ticks) const {
  return segment_owner_alive(pid_, start_ns, start_ticks) && writer_attached();
}

inline std::uint32_t segment::threads_alive() const {
  detail::layout l;
  if (!current(&l, nullptr) || !process_alive()) return 0;
  const detail::written data(fd_, size_);
  std::uint32_t n = 0;
  for (std::uint32_t i = 0; i < l.slot_count; ++i) {
    const std::uint64_t at = l.slot(i) + offsetof(telemetry::slot_header, state);
    n += data.has(at, sizeof(std::uint32_t)) &&
         detail::load<std::uint32_t>(base_, at) == telemetry::slot_alive;
  }
  return cut() ? 0 : n;
}

inline bool segment::set_option(const std::string& name, std::int64_t value, std::string* error,
                                std::uint64_t* new_generation) {
  using O = telemetry::option_entry;
  if (!writable_) {
    detail::set(error, path_ + ": opened read-only (no write permission): cannot tune");
    return false;
  }
  detail::layout l;
  if (!current(&l, error)) return false;
  if (!process_alive()) {
    detail::set(error, "process " + std::to_string(pid_) +
                           " is not running: nothing would apply option '" + name + "'");
    return false;
  }
  std::string known;
  for (std::uint32_t i = 0; i < l.option_count; ++i) {
    const std::uint64_t o = l.option(i);
    const std::string n = detail::load_string(base_, o + offsetof(O, name), sizeof(O::name));
    if (n != name) {
      known += (known.empty() ? "" : ", ") + n;
      continue;
    }
    const bool live = detail::load<std::uint32_t>(base_, o + offsetof(O, live)) != 0;
    const bool is_bool = detail::load<std::uint32_t>(base_, o + offsetof(O, is_bool)) != 0;
    const auto lo = detail::load<std::int64_t>(base_, o + offsetof(O, min));
    const auto hi = detail::load<std::int64_t>(base_, o + offsetof(O, max));
    std::string upper;
    for (char c : name)
      upper.push_back(c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c);
    if (!live) {
      detail::set(error, "option '" + name + "' cannot change while the program runs; set " +
                             "LIVEALLOC_" + upper + " before it starts");
      return false;
    }
    if (is_bool && value != 0 && value != 1) {
      detail::set(error,
                  "option '" + name + "' is a bool: " + std::to_string(value) + " is not 0 or 1");
      return false;
    }
    if (value < lo || value > hi) {
      detail::set(error, "option '" + name + "': " + std::to_string(value) + " is out of range [" +
                             std::to_string(lo) + ", " + std::to_string(hi) + "]");
      return false;
    }
    __atomic_store_n(detail::object_at<std::int64_t>(base_ + o + offsetof(O, requested)), value,
                     __ATOMIC_RELAXED);
    std::uint64_t g = __atomic_add_fetch(
        detail::object_at<std::uint64_t>(base_ + l.control_offset +
                                          offsetof(telemetry::control_block, generation)),
        1, __ATOMIC_RELEASE);
    if (new_generation) *new_generation = g;
    if (cut()) {  // the stores may have gone to a page of zeros of our own
      detail::set(error, cut_error());
      return false;
    }
    return true;
  }
  detail::set(error, "unknown option '" + name + "'; the options are: " + known);
  return false;
}

// Both waits measure the time: a sleep of 1 ms takes longer on a busy machine.
inline bool segment::wait_validated(std::uint64_t generation, int timeout_ms) const {
  const std::uint64_t deadline = detail::monotonic_ms() + std::uint64_t(timeout_ms);
  for (;;) {
    detail::layout l;
    if (!current(&l, nullptr)) return false;
    if (detail::load_acquire<std::uint64_t>(
            base_, l.control_offset + offsetof(telemetry::control_block, validated_generation)) >=
        generation)
      return true;
    if (detail::monotonic_ms() >= deadline || !process_alive()) return false;
    detail::sleep_ms(1);
  }
}

inline bool segment::wait_applied(std::uint64_t generation, int timeout_ms) const {
  using S = telemetry::slot_header;
  const std::uint64_t deadline = detail::monotonic_ms() + std::uint64_t(timeout_ms);
  for (;;) {
    detail::layout l;
    if (!current(&l, nullptr)) return false;
    const detail::written data(fd_, size_);
    bool all = true;
    for (std::uint32_t i = 0; i < l.slot_count && all; ++i)
      all = !data.has(l.slot(i) + offsetof(S, state), sizeof(std::uint32_t)) ||
            detail::load<std::uint32_t>(base_, l.slot(i) + offsetof(S, state)) !=
                telemetry::slot_alive ||
            detail::load<std::uint64_t>(base_, l.slot(i) + offsetof(S, applied_generation)) >=
                generation;
    if (all) return true;
    if (detail::monotonic_ms() >= deadline || !process_alive()) return false;
    detail::sleep_ms(1);
  }
}

namespace detail {
// Whether process `pid` maps the file (dev, ino): 1 yes, 0 no, -1 unknown.
inline int maps_file(int pid, dev_t dev, ino_t ino) {
  return livealloc::detail::maps_file(("/proc/" + std::to_string(pid) + "/maps").c_str(), dev, ino);
}
}  // namespace detail

// Whether the image that made the file still has it: the allocator holds an exclusive flock on
// its segment from before the file is named until the image ends or execs, so one we can take
// means none is held. Only then is /proc/PID/maps read (a writer whose flock failed still maps
// the file; -1, unreadable, errs on the side of attached). The shared lock we took is dropped at
// once: a new process that wants the name tests the lock too (table_name_held).
inline bool segment::writer_attached() const {
  if (flock(fd_, LOCK_SH | LOCK_NB) != 0) return true;  // held (EWOULDBLOCK), or cannot tell
  flock(fd_, LOCK_UN);
  return detail::maps_file(pid_, dev_, ino_) != 0;
}

namespace detail {

// Whether remove_stale may unlink the file `path` (named for `pid`): a regular file, not a
// symbolic link, whose header (when it has one: our magic and version) names no process that is
// alive, and whose name's pid is not alive either (for a file without our header, or naming
// another pid). A process that is alive but no longer maps its file exec'd into a program without
// livealloc (its environment dropped LD_PRELOAD, a static binary): nothing will write the file
// again, so it is stale too. A file whose lock is held (flock, exclusive: the allocator holds it
// on its segment until it ends or execs) is never stale, whatever the pids say: its process may
// run in another pid namespace that shares /dev/shm, where the pid in its name means another
// process or none.
// *st is the file's, for the caller to check that the name still holds it.
inline bool sweepable(const std::string& path, int pid, struct stat* st) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return false;
  bool ok = fstat(fd, st) == 0 && S_ISREG(st->st_mode) &&
            !(flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK);
  using H = telemetry::segment_header;
  unsigned char h[kHeaderSize];
  std::uint32_t version = 0;
  std::int32_t header_pid = 0;
  std::uint64_t start_ns = 0;
  bool header = ok && st->st_size >= static_cast<off_t>(kHeaderSize) &&
                pread(fd, h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) &&
                memcmp(h + offsetof(H, magic), telemetry::kMagic, sizeof telemetry::kMagic) == 0;
  ::close(fd);
  if (header) {
    memcpy(&version, h + offsetof(H, version), sizeof version);
    memcpy(&header_pid, h + offsetof(H, pid), sizeof header_pid);
    memcpy(&start_ns, h + offsetof(H, start_ns), sizeof start_ns);
    header = version == telemetry::kVersion;  // another layout's pid is not where ours is
  }
  if (!ok) return false;
  if (header && header_pid == pid)
    return !segment_owner_alive(pid, start_ns) || maps_file(pid, st->st_dev, st->st_ino) == 0;
  return !pid_alive(pid) && !(header && pid_alive(header_pid));
}
}  // namespace detail

inline std::vector<segment_entry> list_segments(const std::string& dir, std::string* error) {
  std::vector<segment_entry> out;
  DIR* d = opendir(dir.c_str());
  if (!d) {
    detail::set(error, dir + ": " + strerror(errno));
    return out;
  }
  while (dirent* e = readdir(d)) {
    int pid = detail::pid_from_name(e->d_name);
    if (pid <= 0) continue;
    segment_entry entry;
    entry.pid = pid;
    entry.path = dir + "/" + e->d_name;
    entry.alive = pid_alive(pid);
    if (auto seg = segment::open_path(entry.path, &entry.error, /*read_only=*/true)) {
      snapshot s = seg->take();
      entry.valid = s.ok();
      entry.error = s.error;
      entry.program = s.program;
      entry.start_ns = s.start_ns;
      entry.threads_alive = s.threads_alive();
      entry.overflow_threads = s.overflow_threads;
      if (entry.valid) entry.alive = s.process_alive;
    }
    struct stat st;
    entry.stale = detail::sweepable(entry.path, pid, &st);
    out.push_back(std::move(entry));
  }
  closedir(d);
  std::sort(out.begin(), out.end(),
            [](const segment_entry& a, const segment_entry& b) { return a.pid < b.pid; });
  return out;
}

inline int remove_stale(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return 0;
  std::vector<std::string> names;
  while (dirent* e = readdir(d))
    if (detail::pid_from_name(e->d_name) > 0) names.emplace_back(e->d_name);
  closedir(d);
  int removed = 0;
  for (const std::string& name : names)
    if (remove_stale_segment(detail::pid_from_name(name), dir)) ++removed;
  return removed;
}

inline bool remove_stale_segment(int pid, const std::string& dir) {
  const std::string path = dir + "/livealloc." + std::to_string(pid);
  struct stat st;
  if (!detail::sweepable(path, pid, &st)) return false;
  // Unlink only the file checked (not one a new process with this pid just created).
  struct stat now;
  return lstat(path.c_str(), &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino &&
         detail::sweepable(path, pid, &st) && ::unlink(path.c_str()) == 0;
}

}  // namespace reader
}  // namespace v0
}  // namespace livealloc

#endif  // LIVEALLOC_READER_H
