// memlive.h -- the live profiler for livealloc: snapshot serialisation, tuning input, segment
// access. SPDX-License-Identifier: MIT
//
// This slice of memlive (issue 5) offers, all in namespace memlive:
//
//   to_json(snapshot)            one compact JSON object per snapshot (schema "memlive.snapshot/1",
//   append_json(out, snapshot)   described below and in memlive/README.md); the page, `snapshot`
//                                and `record` all use it. Direct writer (std::to_chars), no DOM.
//   to_csv(snapshot)             one row per (thread, class) with a non-zero counter, header line.
//   to_prometheus(snapshot)      Prometheus text exposition format 0.0.4 (also of several
//                                processes in one text).
//   parse_assignment(text, ...)  "name=value" -> assignment, with a message naming the field.
//   check_assignment(a, opts)    an assignment against the options a segment publishes.
//   version_string()             "0.1.0" (MEMLIVE_VERSION_* follow LIVEALLOC_VERSION_*).
//   open_segment(pid, ...)       opens /dev/shm/livealloc.<pid> and classifies a failure
//                                (no process, no segment, permission, malformed) as an
//                                `error_kind`.
//   take_all(dir)                a snapshot of every running process that publishes a segment.
//   take_whole(segment)          a snapshot whose sums over threads are whole.
//   counter_name(c), counter_is_gauge(c), kCounterHelp[c]   the names used by every format.
//
//   start(options), stop(), port()   the HTTP server on this process's own telemetry; and
//   detail::server                   the same server on any segment (`memlive serve`, `run`),
//                                    or /metrics of every segment of a directory (`serve --all`).
//                                    Endpoints and security: see "The HTTP server" below.
//   take_snapshot(&s, &error)        this process's counters, in process (publishes the segment).
//   on_alloc(ptr, size)              capture hooks for an allocator that is not livealloc: they
//   on_free(ptr, size)               fill the telemetry slots livealloc would (see "Capture
//                                    hooks" below); no lock, a few stores on the thread's own
//                                    lines.
//   is_memlive_thread(s, t)          whether a snapshot's thread is one of memlive's own (its HTTP
//                                    workers, its sampler), which snapshots label "memlive":true.
//
// Needs civetweb (libcivetweb-dev) and nlohmann-json (nlohmann-json3-dev), and C++ exceptions
// (an #error under -fno-exceptions; livealloc.h alone does without them).
//
// Compile-time switches (define before including):
//   MEMLIVE_COUNT_GLOBAL_NEW  Define in exactly ONE translation unit of a program that does not
//                             use livealloc as its malloc: that unit then holds replacement
//                             global operator new/delete (every form) that allocate with
//                             malloc/posix_memalign and count each block through the capture
//                             hooks, in the class of its usable size. Default: undefined (nothing
//                             is replaced). Cannot be combined with LIVEALLOC_OVERRIDE, which
//                             replaces the same operators (and counts them itself).
// Every macro is MEMLIVE_-prefixed; helper macros are #undef'd at the end of the header.
// Internals live in memlive::detail.
//
// JSON schema "memlive.snapshot/1" (one object; numbers are unsigned 64-bit integers unless noted):
//   schema        "memlive.snapshot/1"
//   pid, program, alive (bool: the process was running when the snapshot was taken)
//   start_ns, taken_ns             CLOCK_REALTIME nanoseconds (start_ns: the image's, anew
//                                  after an exec)
//   process_start_ticks            the process's start in clock ticks after boot (field 22 of
//                                  /proc/<pid>/stat): the same across exec, another for a
//                                  process given the same pid; 0 when not alive or unknown
//   layout_version                 the telemetry segment version read (1)
//   counters      ["allocs", ...]  the 16 counter names in the order of telemetry::counter
//   gauges        [9, 10, 11, 14]  indices into `counters` of the gauges (the rest are cumulative)
//   class_sizes   [0, 16, 32, ...] block size of each class (class 0: large blocks, 0)
//   class_units   [0, 1, 1, ...]   64 KiB units in a span of each class (0 for class 0, and for
//                                  every class when the process's allocator does not say)
//   process       {segment_bytes, large_bytes, cached_bytes, committed_bytes, mmap_calls,
//                  munmap_calls, madvise_calls, purges, slots_used, overflow_threads,
//                  live_blocks, live_bytes, resident_bytes (from /proc/<pid>/statm; 0 if unknown)}
//   control       {generation, validated_generation, rejected}
//   options       [{name, requested, effective, min, max, default, live (bool), bool (bool)}]
//                 (requested..default are signed 64-bit)
//   threads       [{slot, state ("alive"|"exited"|"overflow"|"ended"), tid (signed), name,
//                   incarnation, start_ns, exit_ns, applied_generation, slow_paths, flushes,
//                   mmap_calls, munmap_calls, madvise_calls, memlive (bool),
//                   classes: [[class, c0, c1, ..., c15], ...]}]
//                 "ended" (rd::state_name(s, t)): the thread was still running when its process
//                 ended (crashed, killed, or returned from main): the snapshot of a process that
//                 is gone (alive false) shows no thread "alive"; its exit_ns stays 0.
//                 `classes` holds only the classes where at least one counter is non-zero, each
//                 row the class index followed by the 16 counters in `counters` order.
//                 `memlive` is true for memlive's own threads (is_memlive_thread): count them
//                 apart from the program's.
//   exited        [[class, c0, ..., c15], ...]  totals folded from exited threads, same rows.
//   free_matrix   [[from_slot, owner_slot, blocks], ...]  the non-zero cells of the cross-thread
//                 free matrix: blocks the thread in from_slot freed that owner_slot's heap owned
//                 (cumulative over the slots' incarnations; see TELEMETRY.md).
//   Strings are valid UTF-8: bytes that are not (a thread name cut in a multi-byte character)
//   become U+FFFD.
#ifndef MEMLIVE_H
#define MEMLIVE_H

// The server catches what its work throws (std::bad_alloc, thread creation) and turns it into an
// answer or a status; without exceptions that code cannot compile. The #error is then the only
// error: the compilers go on after an #error, so the rest of the header is skipped (#else), or
// its try and catch would follow with errors deep inside it.
#ifndef __cpp_exceptions
#error "memlive.h needs C++ exceptions: include it from a file compiled without -fno-exceptions"
#else

#include <arpa/inet.h>
#include <civetweb.h>
// The embedded page (see find_web_file), generated at build time; optional.
#if defined(__has_include)
#if __has_include(<memlive_web_assets.h>)
#include <memlive_web_assets.h>
#define MEMLIVE_HAS_WEB_ASSETS 1
#endif
#endif
#include <errno.h>
#include <fcntl.h>
#include <livealloc_reader.h>
#include <netinet/in.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <array>
#include <atomic>
#include <new>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

// One version number for the project: memlive ships with the allocator it reads.
#define MEMLIVE_VERSION_MAJOR LIVEALLOC_VERSION_MAJOR
#define MEMLIVE_VERSION_MINOR LIVEALLOC_VERSION_MINOR
#define MEMLIVE_VERSION_PATCH LIVEALLOC_VERSION_PATCH

namespace memlive {
inline namespace v0 {

namespace tl = livealloc::telemetry;
namespace rd = livealloc::reader;

// "0.1.0".
std::string version_string();

// ------------------------------------------------------------------------------------------------
// Counter names, shared by JSON, CSV and Prometheus.
// ------------------------------------------------------------------------------------------------

// Names without the c_ prefix, in the order of telemetry::counter.
inline constexpr const char* kCounterNames[tl::kCounterCount] = {
    "allocs",          "frees",           "requested_bytes",       "refills",        "remote_sent",
    "remote_received", "adopted",         "pages_taken",           "pages_released", "pages_in_use",
    "pages_kept",      "reserved_blocks", "large_freed_by_others", "handed_over",    "peak_live",
    "foreign_allocs"};
// One line each, for Prometheus HELP (from allocator/TELEMETRY.md).
inline constexpr const char* kCounterHelp[tl::kCounterCount] = {
    "Blocks handed out (realloc counts a free and an allocation).",
    "Blocks returned to this thread's heap (local frees and remote received).",
    "Bytes requested by those allocations.",
    "Allocations that missed the thread cache and took the slow path.",
    "Blocks this thread freed that another thread's heap owns.",
    "Blocks other threads freed into this heap (also counted in frees).",
    "Live blocks inherited with the heap of an exited thread.",
    "Spans taken from segments for this class.",
    "Spans given back to the segment.",
    "Spans of this class the heap holds.",
    "Empty spans kept under the page_recycle threshold.",
    "Blocks carved in the spans held; cached free blocks = reserved - live.",
    "Class 0 only: this thread's large blocks freed by other threads.",
    "Exited totals only: live blocks passed on to a thread that adopted a heap.",
    "Most live blocks this thread held, as seen at its slow paths.",
    "Allocations served with another thread's block that a remote free left here (live in its owner)."};

constexpr const char* counter_name(unsigned c) {
  return c < tl::kCounterCount ? kCounterNames[c] : "";
}
static_assert(tl::kCounterCount == 16, "memlive.h knows the 16 counters of layout version 1");
constexpr bool counter_is_gauge(unsigned c) {
  return c == tl::c_pages_in_use || c == tl::c_pages_kept || c == tl::c_reserved_blocks ||
         c == tl::c_peak_live;
}

// ------------------------------------------------------------------------------------------------
// Serialisation.
// ------------------------------------------------------------------------------------------------

// Appends one JSON object (schema above, no newline) to `out`. Reuse `out` across samples to keep
// its capacity: serialising a sample then allocates nothing.
void append_json(std::string& out, const rd::snapshot& s);
std::string to_json(const rd::snapshot& s);

// CSV (RFC 4180: fields with a comma, quote, CR or LF are quoted, quotes doubled). Header:
//   taken_ns,pid,slot,tid,thread,state,class,size,<16 counter names>,live
// One row per thread slot and class with any non-zero counter, then the exited totals with
// slot "exited", tid 0, thread "" and state "exited_totals". `state` is the JSON's ("ended" for a
// thread still running when its process ended). `live` is the live-block formula.
std::string to_csv(const rd::snapshot& s, bool header = true);

// Prometheus text exposition format 0.0.4. Per thread and class (only rows with a non-zero
// counter; every family lists the same rows): livealloc_<counter>_total for cumulative counters,
// livealloc_<counter> for the gauges, livealloc_live_blocks; labels pid, thread (name), tid,
// slot, class (index), size (block bytes), and memlive="true" on memlive's own threads
// (is_memlive_thread; absent on the others). The exited totals carry thread="", tid="0",
// slot="exited". Per thread: livealloc_thread_<x>_total {pid, thread, tid, slot}. Per process:
// gauges livealloc_process_info {pid, program} (1), livealloc_process_alive (1 or 0),
// livealloc_<segment|large|cached|committed|live|resident>_bytes, livealloc_slots_used, and
// counters livealloc_<mmap|munmap|madvise>_calls_total, livealloc_purges_total,
// livealloc_overflow_threads_total, livealloc_options_rejected_total; livealloc_option_effective
// {pid, option}.
std::string to_prometheus(const rd::snapshot& s);
// The same families with one series per class instead of one per thread and class (labels pid,
// class, size: the process totals, exited threads included), and no per-thread families: for
// scrapers that count series (300 threads make about 225,000 series by thread, about 1,000 by
// class). `floor`, kept between calls for one process, holds the largest total reported so far
// of each cumulative counter and reports no less: a snapshot that leaves out a slot changing
// hands, or catches a fold half done, would show a total going down, which Prometheus takes for
// a reset. Without it, such a dip can show.
std::string to_prometheus_by_class(const rd::snapshot& s, rd::counter_matrix* floor = nullptr);
// Several processes in one text (`memlive snapshot --all`): each family once, with the series of
// every snapshot (by thread and class, or with `by_class` as to_prometheus_by_class without a
// floor). Every form also has livealloc_process_info{pid, program} 1.
std::string to_prometheus(const std::vector<rd::snapshot>& all, bool by_class);
// The gauge memlive_unreadable_segments: how many running processes' segments an output of
// several (take_all) leaves out because they could not be read, so that an alert can see what
// only a comment line or stderr said. 0 is written too.
std::string prometheus_unreadable(std::size_t n);
// The content type to serve it with.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// ------------------------------------------------------------------------------------------------
// Tuning input.
// ------------------------------------------------------------------------------------------------

struct assignment {
  std::string name;
  std::int64_t value = 0;
  bool word = false;  // given as true/false/on/off: only a bool option takes it
};

// Parses "name=value". The name is lower-case letters, digits and '_' (upper case is folded, so
// PAGE_RECYCLE=4 works); the value a decimal integer with an optional sign, a JSON number that
// is whole ("8.0", "1e3", as POST /api/options takes it), or true/false/on/off in any case, as
// the name (1/0, for bool options). False and a message naming the field otherwise; *out is
// untouched then.
bool parse_assignment(const std::string& text, assignment* out, std::string* error);

// Checks an assignment against the options a segment publishes: known name, live, 0/1 for a
// bool, a number for an integer, within [min, max]. The same checks the allocator makes (it has
// the last word).
bool check_assignment(const assignment& a, const std::vector<rd::option_view>& options,
                      std::string* error);

// ------------------------------------------------------------------------------------------------
// Opening a process's segment, with the failure classified.
// ------------------------------------------------------------------------------------------------

// The values are the exit codes of the memlive command.
enum class error_kind : int {
  none = 0,
  usage = 2,        // bad command line or tuning syntax
  no_process = 3,   // no process with that pid (and no segment)
  no_segment = 4,   // the process runs but publishes no segment (LIVEALLOC_PROFILE=1?)
  permission = 5,   // the segment belongs to another user, or cannot be written to tune; or
                    // `serve`, `run`: the port is below 1024 and the user may not listen on it
  bad_segment = 6,  // version mismatch, malformed or truncated segment
  rejected = 7,     // a tuning value refused (by memlive's check or by the allocator)
  port_in_use = 8,  // `serve`: the port is taken by another server
  over_budget = 9,  // `check`, `record --budget`: a budget was exceeded
};

struct open_result {
  std::unique_ptr<rd::segment> segment;  // null on failure
  error_kind kind = error_kind::none;
  std::string error;  // the reader's message, plus a hint
};

// Opens <dir>/livealloc.<pid>. With for_tuning, a segment that can only be read is a permission
// error. A segment whose process is gone opens (stale, readable); callers decide.
open_result open_segment(int pid, bool for_tuning = false, const std::string& dir = "/dev/shm");

// One snapshot of every running process that publishes a segment in `dir`, by pid (`memlive
// snapshot --all`, `serve --all`). Segments of processes that are gone, or end meanwhile, are
// left out; each one that cannot be read (another user's, malformed) is in `failed`.
struct all_snapshots {
  std::vector<rd::snapshot> shots;
  std::vector<std::pair<error_kind, std::string>> failed;  // why, as open_segment says it
  int gone = 0;              // segments of processes that are gone
  std::string dir_error;     // "DIR: why": the directory cannot be read (nothing else is set)
  bool dir_denied = false;   // ... for want of permission
};
// `whole`: each process's snapshot taken again while its slots change hands (take_whole).
all_snapshots take_all(const std::string& dir = "/dev/shm", bool whole = false);
// A snapshot whose sums are whole (rd::snapshot::whole): taken again while slots of exited
// threads change hands, for up to `ms` milliseconds (then the last one, which may not be). For
// one-shot readers: a server keeps the largest total it reported instead (to_prometheus_by_class).
rd::snapshot take_whole(const rd::segment& seg, int ms = 1000);

// ------------------------------------------------------------------------------------------------
// Capture hooks: the same telemetry for a program whose memory does not come from livealloc.
//
// livealloc.h, which this header includes, lays out the telemetry segment in every process that
// uses it, livealloc as its malloc or not; memlive::start() publishes it. The hooks count into
// that segment exactly where livealloc's heaps count: the calling thread's slot, taken at the
// thread's first hooked call (with its tid and name) through livealloc's own thread start (an
// exited thread's slot from the pool, else the next free one, else the shared overflow slot) and
// given back at thread exit by livealloc's key destructor. So /api/snapshot, /metrics, the
// stream, `memlive snapshot --pid` and the page show hooked counts per thread and size class
// like livealloc's.
//
// Counting rules:
// - The class is livealloc's size class of `size`; class 0 holds sizes above 256 KiB, whose
//   bytes also go into process.large_bytes (so process.live_bytes = live blocks x class size +
//   large_bytes). on_alloc counts allocs, requested_bytes (+= size) and peak_live (the most live
//   blocks of the class the thread held, checked at every on_alloc, so exact); on_free counts
//   frees. The other counters (refills, pages, remote_*, free_matrix) stay 0: they describe
//   livealloc's own heaps.
// - on_free needs the size that on_alloc was given: the class of a free is the class of its
//   size, and nothing is looked up by pointer (`ptr` only tells a failed allocation, nullptr,
//   which is not counted, as free(nullptr) is not). Size 0 counts in class 1, as on_alloc(p, 0).
// - A free counts on the thread that frees, which is all the layout can say without an owner
//   lookup: a block allocated on thread A and freed on B is an alloc in A's slot and a free in
//   B's. A thread's allocs - frees may then be negative (the JSON carries the raw counters; CSV and
//   Prometheus `live` saturate at 0) and process totals stay exact. When such a thread exits, its
//   deficit goes to the exited totals and the next thread in its slot starts at 0 adopted.
// - memlive's own work is not counted: its threads (HTTP workers, sampler), and memlive::start()
//   and stop() on the thread that calls them.
// - Thread names are read at the thread's first call and every kHookRefresh calls after.
// - With livealloc as the program's malloc, the hooks add to livealloc's own counts in the same
//   slots: call them only for memory that malloc/new did not hand out (or accept that an arena's
//   objects count on top of the chunks it took from malloc).
// Cost: one thread-local load and compare, then loads and relaxed stores on the thread's own
// counter lines (no lock, no atomic read-modify-write; class 0 adds one atomic add to
// process.large_bytes). The first call of a thread takes its slot.
//
// MEMLIVE_COUNT_GLOBAL_NEW (see the switches at the top) counts global new/delete through the
// same path, by the block's malloc_usable_size() at both ends (so the two always agree, even for
// an unsized delete) with requested_bytes += the size asked for.
// ------------------------------------------------------------------------------------------------

// Counts an allocation of `size` bytes at `ptr` on the calling thread (nullptr: not counted).
void on_alloc(void* ptr, std::size_t size) noexcept;
// Counts a free of the block of `size` bytes (the size given to on_alloc) at `ptr` on the calling
// thread (nullptr: not counted).
void on_free(void* ptr, std::size_t size) noexcept;

// This process's counters, as a reader sees them (the same data /api/snapshot serialises; pass
// it to to_json, to_csv, to_prometheus). Publishes the segment (telemetry::enable()) if memlive
// did not yet. False, with a message in *error, when the segment cannot be published or read.
bool take_snapshot(rd::snapshot* out, std::string* error = nullptr);

// True when thread `t` of snapshot `s` is one of memlive's own (HTTP workers "memlive-http",
// history sampler "memlive-hist"). In a snapshot of this process: by registration (each of
// those threads records its tid and lifetime when it starts, so a program thread with the same
// name is not taken for one). In a snapshot of another process, whose registrations cannot be
// seen from here: by those names. Never for the overflow slot.
bool is_memlive_thread(const rd::snapshot& s, const rd::thread_view& t);

namespace detail {

namespace la = livealloc::detail;

// Per thread, besides livealloc's tls_heap (which holds the slot): plain data, constant
// initialised, initial-exec like livealloc's, so no TLS wrapper and nothing allocated at thread
// start.
struct hook_thread {
  std::uint32_t calls;  // hooked calls, for the occasional refresh
  bool internal;        // memlive's own work: not counted
};
inline thread_local hook_thread t_hook __attribute__((tls_model("initial-exec"))) = {0, false};

// Calls between two refreshes of a thread's name (and of an overflow thread's shared counts).
inline constexpr std::uint32_t kHookRefresh = 1024;

// The calling thread's first counted call: it takes a slot as livealloc's threads do. nullptr if
// livealloc cannot start (no memory for its metadata): then nothing is counted.
[[gnu::noinline]] inline la::heap* hook_thread_start() noexcept {
  return la::thread_init();
}

// Every kHookRefresh calls: the thread's name again (a thread may name itself after its first
// call); a thread beyond the last slot adds what changed to the overflow slot (livealloc does so
// at its slow paths, which hooked threads never reach, and at thread exit).
[[gnu::noinline]] inline void hook_refresh(la::heap* h) noexcept {
  la::slot_read_name(h);
  la::overflow_publish(h);
}

// The calling thread's counters, or nullptr when this call is not counted.
__attribute__((always_inline)) inline la::heap* hook_heap() noexcept {
  hook_thread& t = t_hook;
  if (__builtin_expect(t.internal, 0)) return nullptr;
  la::heap* h = la::tls_heap;
  if (__builtin_expect(h == &la::g_empty_heap, 0)) return hook_thread_start();
  if (__builtin_expect(++t.calls % kHookRefresh == 0, 0)) hook_refresh(h);
  return h;
}

__attribute__((always_inline)) inline unsigned hook_class(std::size_t block) noexcept {
  return block <= la::kMaxSmall ? la::size_class(block) : 0u;
}

// The process's large_bytes, shared by every thread, under sizes the program gives: an on_free
// with no on_alloc before it (a block allocated before the hooks were in place) made it wrap to
// about 16 EiB, and live_bytes with it. It stays within 0 and 2^64 - 1 instead.
inline void add_saturating(std::atomic<std::uint64_t>& a, std::uint64_t n) noexcept {
  std::uint64_t v = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(v, v + n < v ? ~std::uint64_t(0) : v + n,
                                  std::memory_order_relaxed)) {
  }
}
inline void sub_saturating(std::atomic<std::uint64_t>& a, std::uint64_t n) noexcept {
  std::uint64_t v = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(v, v > n ? v - n : 0, std::memory_order_relaxed)) {
  }
}

// One allocation of `requested` bytes in a block of `block` bytes (the block decides the class).
// Single writer (this thread): relaxed loads and stores, as livealloc's fast path. allocs grows
// before anything that balances it (TELEMETRY.md, writer rule 4).
__attribute__((always_inline)) inline void hook_alloc(std::size_t requested,
                                                      std::size_t block) noexcept {
  la::heap* h = hook_heap();
  if (!h) return;
  constexpr auto rlx = std::memory_order_relaxed;
  const unsigned cls = hook_class(block);
  std::atomic<std::uint64_t>* k = h->stats[cls].v;
  const std::uint64_t allocs = k[tl::c_allocs].load(rlx) + 1;
  k[tl::c_allocs].store(allocs, rlx);
  k[tl::c_requested_bytes].store(k[tl::c_requested_bytes].load(rlx) + requested, rlx);
  // Live as livealloc's note_peak computes it; negative (more frees than allocations on this
  // thread) never makes a peak.
  const std::uint64_t live = allocs + k[tl::c_adopted].load(rlx) - k[tl::c_frees].load(rlx) -
                             k[tl::c_large_freed_by_others].load(rlx) -
                             k[tl::c_foreign_allocs].load(rlx);
  if (static_cast<std::int64_t>(live) > static_cast<std::int64_t>(k[tl::c_peak_live].load(rlx)))
    k[tl::c_peak_live].store(live, rlx);
  if (cls == 0) add_saturating(la::g_proc->large_bytes, block);
}

__attribute__((always_inline)) inline void hook_free(std::size_t block) noexcept {
  la::heap* h = hook_heap();
  if (!h) return;
  constexpr auto rlx = std::memory_order_relaxed;
  const unsigned cls = hook_class(block);
  std::atomic<std::uint64_t>& frees = h->stats[cls].v[tl::c_frees];
  frees.store(frees.load(rlx) + 1, rlx);
  if (cls == 0) sub_saturating(la::g_proc->large_bytes, block);
}

// While one lives, the calling thread's allocations are memlive's own and not counted (memlive's
// threads set the flag for good instead). Objects made in one and handed to the caller must be
// copied out first (hand_out), or their free, counted, would have no counted allocation.
class internal_scope {
 public:
  internal_scope() noexcept : saved_(t_hook.internal) { t_hook.internal = true; }
  ~internal_scope() { t_hook.internal = saved_; }
  internal_scope(const internal_scope&) = delete;
  internal_scope& operator=(const internal_scope&) = delete;

 private:
  bool saved_;
};

// A string made inside an internal_scope, for the caller: copied in the caller's (counted)
// context, the original freed inside a scope. Call it outside any internal_scope.
inline std::string hand_out(std::string& inner) {
  std::string out = inner;
  internal_scope scope;
  std::string().swap(inner);
  return out;
}

// memlive's own threads, registered when they start: tid and lifetime (CLOCK_REALTIME, the
// clock of a slot's start_ns/exit_ns). A ring: the oldest entries go first, long after their
// threads ended (a server has about 27 threads).
inline constexpr std::size_t kOwnThreads = 256;
struct own_thread {
  std::int32_t tid;
  std::uint64_t begin_ns, end_ns;  // end_ns 0: running
};
struct own_registry {
  std::mutex mutex;  // registration is rare; snapshots copy the entries out
  own_thread entries[kOwnThreads] = {};
  std::uint64_t added = 0;
};
inline own_registry g_own;  // constant initialised: usable before and after main

inline std::int32_t gettid_now() noexcept {
  return static_cast<std::int32_t>(syscall(SYS_gettid));
}

// Makes the calling thread memlive's for the rest of its life: named `name`, never counted by
// the hooks, registered for is_memlive_thread. Returns the handle for own_thread_end.
inline std::size_t own_thread_begin(const char* name) noexcept {
  t_hook.internal = true;
  pthread_setname_np(pthread_self(), name);
  la::heap* h = la::tls_heap;  // a slot taken before the rename (livealloc as malloc): rename it
  if (h != &la::g_empty_heap) la::slot_read_name(h);
  const own_thread e{gettid_now(), la::realtime_ns(), 0};
  std::lock_guard<std::mutex> lock(g_own.mutex);
  const std::size_t i = g_own.added++ % kOwnThreads;
  g_own.entries[i] = e;
  return i + 1;
}

inline void own_thread_end(std::size_t handle) noexcept {
  if (handle == 0 || handle > kOwnThreads) return;
  const std::int32_t tid = gettid_now();
  std::lock_guard<std::mutex> lock(g_own.mutex);
  own_thread& e = g_own.entries[handle - 1];
  if (e.tid == tid && e.end_ns == 0) e.end_ns = la::realtime_ns();
}

// For a thread of memlive's own for its whole body.
struct own_thread_scope {
  explicit own_thread_scope(const char* name) noexcept : handle(own_thread_begin(name)) {}
  ~own_thread_scope() { own_thread_end(handle); }
  own_thread_scope(const own_thread_scope&) = delete;
  own_thread_scope& operator=(const own_thread_scope&) = delete;
  std::size_t handle;
};

// The names memlive's threads carry; the only sign of them in another process's snapshot.
inline bool own_thread_name(const std::string& name) {
  return name == "memlive-http" || name == "memlive-hist";
}

// is_memlive_thread for every thread of one snapshot: the registry copied once.
class own_threads_view {
 public:
  explicit own_threads_view(const rd::snapshot& s) : self_(s.pid == getpid()) {
    if (!self_) return;
    std::lock_guard<std::mutex> lock(g_own.mutex);
    n_ = static_cast<std::size_t>(std::min<std::uint64_t>(g_own.added, kOwnThreads));
    std::copy(g_own.entries, g_own.entries + n_, entries_);
  }
  // Same tid, and the slot's thread (start_ns to exit_ns, or now) lived while the registered
  // thread did: tids are unique among threads alive at the same time.
  bool contains(const rd::thread_view& t) const {
    if (t.state == tl::slot_overflow) return false;
    if (!self_) return own_thread_name(t.name);
    for (std::size_t i = 0; i < n_; ++i) {
      const own_thread& e = entries_[i];
      if (e.tid == t.tid && (e.end_ns == 0 || t.start_ns <= e.end_ns) &&
          (t.exit_ns == 0 || t.exit_ns >= e.begin_ns))
        return true;
    }
    return false;
  }

 private:
  bool self_;
  std::size_t n_ = 0;
  own_thread entries_[kOwnThreads];
};

}  // namespace detail

inline void on_alloc(void* ptr, std::size_t size) noexcept {
  if (ptr) detail::hook_alloc(size, size);
}

inline void on_free(void* ptr, std::size_t size) noexcept {
  if (ptr) detail::hook_free(size);
}

inline bool is_memlive_thread(const rd::snapshot& s, const rd::thread_view& t) {
  return detail::own_threads_view(s).contains(t);
}

// ------------------------------------------------------------------------------------------------
// Implementation.
// ------------------------------------------------------------------------------------------------

namespace detail {

// Appends numbers and escaped strings to a std::string through a raw cursor: reserve() once for a
// bounded run of writes, then put() without checks. This is what keeps a 64 x 53 snapshot cheap.
class writer {
 public:
  explicit writer(std::string& out) : out_(out), used_(out.size()) {}
  ~writer() { out_.resize(used_); }
  writer(const writer&) = delete;
  writer& operator=(const writer&) = delete;

  // Room for n more bytes.
  void reserve(std::size_t n) {
    if (out_.size() - used_ >= n) return;
    std::size_t want = std::max(out_.size() * 2, used_ + n);
    out_.resize(std::max<std::size_t>(want, 256));
  }
  void ch(char c) {
    reserve(1);
    out_[used_++] = c;
  }
  void raw(const char* s, std::size_t n) {
    reserve(n);
    std::memcpy(&out_[used_], s, n);
    used_ += n;
  }
  void raw(const char* s) { raw(s, std::strlen(s)); }
  void raw(const std::string& s) { raw(s.data(), s.size()); }
  // Unchecked forms: the caller reserved room.
  void u_ch(char c) { out_[used_++] = c; }
  template <class T>
  void u_num(T v) {
    char* p = &out_[used_];
    used_ = static_cast<std::size_t>(std::to_chars(p, p + 20, v).ptr - out_.data());
  }
  template <class T>
  void num(T v) {
    reserve(21);
    u_num(v);
  }
  std::size_t size() const { return used_; }
  // For hot loops: a local cursor after reserve(n), written through plain char stores, then
  // handed back. The compiler keeps a local pointer in a register; through the members it would
  // reload them after every char store (a char store may alias anything).
  char* cursor() { return &out_[used_]; }
  void advance_to(char* p) { used_ = static_cast<std::size_t>(p - out_.data()); }

 private:
  std::string& out_;
  std::size_t used_;
};

// Length of the valid UTF-8 sequence at s[i..n), or 0 if the bytes there are not one.
inline std::size_t utf8_length(const unsigned char* s, std::size_t i, std::size_t n) {
  unsigned char c = s[i];
  std::size_t len;
  std::uint32_t cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + len > n) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    if ((s[i + k] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (s[i + k] & 0x3F);
  }
  if ((len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;  // overlong, surrogate or beyond Unicode
  return len;
}

enum class escape_style { json, prometheus, csv };

// Valid UTF-8 copy of `in` with the escapes of `style`; invalid bytes become U+FFFD.
// JSON: \" \\ and \uXXXX for control characters. Prometheus label values: \\ \" \n (the spec's
// three escapes), and every other control character (C0, DEL, C1) becomes U+FFFD: the format
// allows them raw, but a parser that splits lines on \r (Python's prometheus_client reading a
// text-mode file) or \x85 breaks on them. CSV: no escapes here (quoting is the caller's).
inline void append_escaped(writer& w, const std::string& in, escape_style style) {
  static const char hex[] = "0123456789abcdef";
  const auto* s = reinterpret_cast<const unsigned char*>(in.data());
  const std::size_t n = in.size();
  w.reserve(n * 6 + 2);
  for (std::size_t i = 0; i < n;) {
    std::size_t len = utf8_length(s, i, n);
    if (len == 0) {
      w.raw("\xEF\xBF\xBD", 3);  // U+FFFD
      ++i;
      continue;
    }
    if (len > 1) {
      if (style == escape_style::prometheus && s[i] == 0xC2 && s[i + 1] < 0xA0)
        w.raw("\xEF\xBF\xBD", 3);  // a C1 control character, U+0080..U+009F
      else
        w.raw(reinterpret_cast<const char*>(s + i), len);
      i += len;
      continue;
    }
    const char c = static_cast<char>(s[i++]);
    if (style == escape_style::csv) {
      w.u_ch(c);
    } else if (c == '"' || c == '\\') {
      w.u_ch('\\');
      w.u_ch(c);
    } else if (c == '\n') {
      w.u_ch('\\');
      w.u_ch('n');
    } else if (style == escape_style::json && static_cast<unsigned char>(c) < 0x20) {
      w.raw("\\u00", 4);
      w.u_ch(hex[(c >> 4) & 0xF]);
      w.u_ch(hex[c & 0xF]);
    } else if (style == escape_style::prometheus &&
               (static_cast<unsigned char>(c) < 0x20 || c == 0x7F)) {
      w.raw("\xEF\xBF\xBD", 3);
    } else {
      w.u_ch(c);
    }
  }
}

inline void json_string(writer& w, const std::string& s) {
  w.ch('"');
  append_escaped(w, s, escape_style::json);
  w.ch('"');
}

// "name":number, with a leading comma unless first.
template <class T>
inline void json_field(writer& w, const char* name, T v, bool first = false) {
  if (!first) w.ch(',');
  w.ch('"');
  w.raw(name);
  w.raw("\":", 2);
  w.num(v);
}
inline void json_bool(writer& w, const char* name, bool v) {
  w.ch(',');
  w.ch('"');
  w.raw(name);
  w.raw(v ? "\":true" : "\":false");
}

// ,"doc":"..." for a livealloc option: its one-line description from the options table this
// memlive was built with ("" for a name that table does not know, e.g. a newer allocator's).
inline void json_option_doc(writer& w, const std::string& name) {
  const char* doc = "";
  for (const livealloc::detail::option_info& o : livealloc::detail::kOptionTable)
    if (name == o.name) doc = o.doc;
  w.raw(",\"doc\":");
  json_string(w, doc);
}

using counter_row = std::array<std::uint64_t, tl::kCounterCount>;

inline bool row_nonzero(const counter_row& r) {
  std::uint64_t any = 0;
  for (std::uint64_t v : r) any |= v;
  return any != 0;
}

// [[class, c0..c15], ...] for the non-zero rows of a matrix.
inline void json_matrix(writer& w, const rd::counter_matrix& m) {
  w.ch('[');
  bool first = true;
  for (unsigned cls = 0; cls < tl::kClassCount; ++cls) {
    if (!row_nonzero(m[cls])) continue;
    w.reserve(2 + 21 * (tl::kCounterCount + 1));
    char* p = w.cursor();
    if (!first) *p++ = ',';
    first = false;
    *p++ = '[';
    p = std::to_chars(p, p + 20, cls).ptr;
    for (std::uint64_t v : m[cls]) {
      *p++ = ',';
      p = std::to_chars(p, p + 20, v).ptr;
    }
    *p++ = ']';
    w.advance_to(p);
  }
  w.ch(']');
}

using rd::detail::live_of;  // the reader's live formula (counter_row is its row type)

inline std::uint64_t class_size_of(const rd::snapshot& s, unsigned cls) {
  return cls < s.class_sizes.size() ? s.class_sizes[cls] : 0;
}

// CSV field: quoted when it holds a comma, quote, CR or LF.
inline void csv_field(writer& w, const std::string& s) {
  bool quote = s.find_first_of(",\"\r\n") != std::string::npos;
  if (!quote) return append_escaped(w, s, escape_style::csv);
  w.ch('"');
  std::string doubled;
  for (char c : s) {
    if (c == '"') doubled.push_back('"');
    doubled.push_back(c);
  }
  append_escaped(w, doubled, escape_style::csv);
  w.ch('"');
}

inline void csv_row(writer& w, const rd::snapshot& s, const std::string& slot, std::int32_t tid,
                    const std::string& name, const std::string& state, unsigned cls,
                    const counter_row& r) {
  w.num(s.taken_ns);
  w.ch(',');
  w.num(s.pid);
  w.ch(',');
  w.raw(slot);
  w.ch(',');
  w.num(tid);
  w.ch(',');
  csv_field(w, name);
  w.ch(',');
  w.raw(state);
  w.reserve(8 + 21 * (tl::kCounterCount + 3));
  char* p = w.cursor();
  *p++ = ',';
  p = std::to_chars(p, p + 20, cls).ptr;
  *p++ = ',';
  p = std::to_chars(p, p + 20, class_size_of(s, cls)).ptr;
  for (std::uint64_t v : r) {
    *p++ = ',';
    p = std::to_chars(p, p + 20, v).ptr;
  }
  *p++ = ',';
  p = std::to_chars(p, p + 20, live_of(r)).ptr;
  *p++ = '\n';
  w.advance_to(p);
}

// One Prometheus sample line's label set, built once per row and reused by every family.
struct prom_row {
  std::string labels;  // pid="1",thread="x",tid="2",slot="0",class="3",size="48"
  const counter_row* row;
  std::uint64_t live;  // livealloc_live_blocks
};

inline void prom_family(writer& w, const std::string& name, const char* type,
                        const std::string& help) {
  w.raw("# HELP ");
  w.raw(name);
  w.ch(' ');
  w.raw(help);  // our own texts: no backslash or newline to escape
  w.raw("\n# TYPE ");
  w.raw(name);
  w.ch(' ');
  w.raw(type);
  w.ch('\n');
}

template <class T>
inline void prom_sample(writer& w, const std::string& name, const std::string& labels, T v) {
  w.raw(name);
  w.ch('{');
  w.raw(labels);
  w.raw("} ", 2);
  w.num(v);
  w.ch('\n');
}

inline std::string prom_label(const char* key, const std::string& value) {
  std::string out;
  {
    writer w(out);
    w.raw(key);
    w.raw("=\"", 2);
    append_escaped(w, value, escape_style::prometheus);
    w.ch('"');
  }
  return out;
}

inline bool parse_int(const std::string& text, std::int64_t* out) {
  const char* b = text.data();
  const char* e = b + text.size();
  if (b != e && *b == '+') {  // from_chars takes '-' but not '+'
    ++b;
    if (b != e && *b == '-') return false;  // "+-5" is no number
  }
  if (b == e) return false;
  auto r = std::from_chars(b, e, *out);
  return r.ec == std::errc() && r.ptr == e;
}

}  // namespace detail

inline std::string version_string() {
  return std::to_string(MEMLIVE_VERSION_MAJOR) + "." + std::to_string(MEMLIVE_VERSION_MINOR) + "." +
         std::to_string(MEMLIVE_VERSION_PATCH);
}

// The fields of a snapshot's "process" object, in the JSON's order: the names `memlive check`
// takes as budget metrics, and the values (process_values) append_json writes.
constexpr const char* kProcessFields[] = {
    "segment_bytes", "large_bytes",   "cached_bytes", "committed_bytes",  "mmap_calls",
    "munmap_calls",  "madvise_calls", "purges",       "slots_used",       "overflow_threads",
    "live_blocks",   "live_bytes",    "resident_bytes"};
constexpr unsigned kProcessFieldCount = sizeof kProcessFields / sizeof kProcessFields[0];
inline std::array<std::uint64_t, kProcessFieldCount> process_values(const rd::snapshot& s) {
  return {s.segment_bytes, s.large_bytes,   s.cached_bytes, s.committed_bytes,  s.mmap_calls,
          s.munmap_calls,  s.madvise_calls, s.purges,       s.slots_used,       s.overflow_threads,
          s.live_blocks(), s.live_bytes(),  s.resident_bytes};
}

inline void append_json(std::string& out, const rd::snapshot& s) {
  detail::writer w(out);
  w.raw("{\"schema\":\"memlive.snapshot/1\"");
  detail::json_field(w, "pid", s.pid);
  w.raw(",\"program\":");
  detail::json_string(w, s.program);
  detail::json_bool(w, "alive", s.process_alive);
  detail::json_field(w, "start_ns", s.start_ns);
  detail::json_field(w, "process_start_ticks", s.process_start_ticks);
  detail::json_field(w, "taken_ns", s.taken_ns);
  detail::json_field(w, "layout_version", tl::kVersion);
  w.raw(",\"counters\":[");
  for (unsigned c = 0; c < tl::kCounterCount; ++c) {
    if (c) w.ch(',');
    w.ch('"');
    w.raw(kCounterNames[c]);
    w.ch('"');
  }
  w.raw("],\"gauges\":[");
  bool first = true;
  for (unsigned c = 0; c < tl::kCounterCount; ++c)
    if (counter_is_gauge(c)) {
      if (!first) w.ch(',');
      first = false;
      w.num(c);
    }
  const auto numbers = [&w](const char* opening, const std::vector<std::uint64_t>& v) {
    w.raw(opening);
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i) w.ch(',');
      w.num(v[i]);
    }
  };
  numbers("],\"class_sizes\":[", s.class_sizes);
  numbers("],\"class_units\":[", s.class_units);
  w.raw("],\"process\":{");
  const auto process = process_values(s);
  for (unsigned i = 0; i < kProcessFieldCount; ++i)
    detail::json_field(w, kProcessFields[i], process[i], i == 0);
  w.raw("},\"control\":{");
  detail::json_field(w, "generation", s.generation, true);
  detail::json_field(w, "validated_generation", s.validated_generation);
  detail::json_field(w, "rejected", s.rejected);
  w.raw("},\"options\":[");
  for (std::size_t i = 0; i < s.options.size(); ++i) {
    const rd::option_view& o = s.options[i];
    w.raw(i ? ",{\"name\":" : "{\"name\":");
    detail::json_string(w, o.name);
    detail::json_field(w, "requested", o.requested);
    detail::json_field(w, "effective", o.effective);
    detail::json_field(w, "min", o.min);
    detail::json_field(w, "max", o.max);
    detail::json_field(w, "default", o.default_value);
    detail::json_bool(w, "live", o.live);
    detail::json_bool(w, "bool", o.is_bool);
    detail::json_option_doc(w, o.name);
    w.ch('}');
  }
  w.raw("],\"threads\":[");
  const detail::own_threads_view own(s);
  for (std::size_t i = 0; i < s.threads.size(); ++i) {
    const rd::thread_view& t = s.threads[i];
    w.raw(i ? ",{" : "{");
    detail::json_field(w, "slot", t.slot, true);
    w.raw(",\"state\":\"");
    w.raw(rd::state_name(s, t));
    w.ch('"');
    detail::json_field(w, "tid", t.tid);
    w.raw(",\"name\":");
    detail::json_string(w, t.name);
    detail::json_field(w, "incarnation", t.incarnation);
    detail::json_field(w, "start_ns", t.start_ns);
    detail::json_field(w, "exit_ns", t.exit_ns);
    detail::json_field(w, "applied_generation", t.applied_generation);
    detail::json_field(w, "slow_paths", t.slow_paths);
    detail::json_field(w, "flushes", t.flushes);
    detail::json_field(w, "mmap_calls", t.mmap_calls);
    detail::json_field(w, "munmap_calls", t.munmap_calls);
    detail::json_field(w, "madvise_calls", t.madvise_calls);
    detail::json_bool(w, "memlive", own.contains(t));
    w.raw(",\"classes\":");
    detail::json_matrix(w, t.counters);
    w.ch('}');
  }
  w.raw("],\"exited\":");
  detail::json_matrix(w, s.exited);
  w.raw(",\"free_matrix\":[");
  bool first_cell = true;
  for (const rd::snapshot::free_cell& c : s.free_matrix) {
    if (c.blocks == 0) continue;  // take() and since_baseline leave none; a hand-made one might
    w.reserve(64);
    if (!first_cell) w.u_ch(',');
    first_cell = false;
    w.u_ch('[');
    w.u_num(c.from_slot);
    w.u_ch(',');
    w.u_num(c.owner_slot);
    w.u_ch(',');
    w.u_num(c.blocks);
    w.u_ch(']');
  }
  w.raw("]}");
}

inline std::string to_json(const rd::snapshot& s) {
  std::string out;
  out.reserve(4096 + s.threads.size() * 8192);
  append_json(out, s);
  return out;
}

inline std::string to_csv(const rd::snapshot& s, bool header) {
  std::string out;
  {
    detail::writer w(out);
    if (header) {
      w.raw("taken_ns,pid,slot,tid,thread,state,class,size");
      for (const char* n : kCounterNames) {
        w.ch(',');
        w.raw(n);
      }
      w.raw(",live\n");
    }
    for (const rd::thread_view& t : s.threads) {
      const std::string slot = std::to_string(t.slot), state = rd::state_name(s, t);
      for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
        if (detail::row_nonzero(t.counters[cls]))
          detail::csv_row(w, s, slot, t.tid, t.name, state, cls, t.counters[cls]);
    }
    for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
      if (detail::row_nonzero(s.exited[cls]))
        detail::csv_row(w, s, "exited", 0, "", "exited_totals", cls, s.exited[cls]);
  }
  return out;
}

namespace detail {
// One process's part of a Prometheus text: its rows (every counter family lists them), and with
// `by_thread` the label set of each s->threads entry for the per-thread families.
struct prom_source {
  const rd::snapshot* s = nullptr;
  std::string pid;  // pid="N"
  std::vector<prom_row> rows;
  std::vector<std::string> thread_labels;
  std::unique_ptr<rd::counter_matrix> sums;  // by class: the totals the rows point into
};

inline prom_source prom_by_thread(const rd::snapshot& s) {
  prom_source src;
  src.s = &s;
  src.pid = prom_label("pid", std::to_string(s.pid));
  const own_threads_view own(s);
  for (const rd::thread_view& t : s.threads) {
    std::string base = src.pid + "," + prom_label("thread", t.name) + "," +
                       prom_label("tid", std::to_string(t.tid)) + "," +
                       prom_label("slot", std::to_string(t.slot));
    if (own.contains(t)) base += ",memlive=\"true\"";  // memlive's own threads only
    for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
      if (row_nonzero(t.counters[cls]))
        src.rows.push_back({base + "," + prom_label("class", std::to_string(cls)) + "," +
                                prom_label("size", std::to_string(class_size_of(s, cls))),
                            &t.counters[cls], live_of(t.counters[cls])});
    src.thread_labels.push_back(std::move(base));
  }
  const std::string exited_base = src.pid + ",thread=\"\",tid=\"0\",slot=\"exited\"";
  for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
    if (row_nonzero(s.exited[cls]))
      src.rows.push_back({exited_base + "," + prom_label("class", std::to_string(cls)) + "," +
                              prom_label("size", std::to_string(class_size_of(s, cls))),
                          &s.exited[cls], live_of(s.exited[cls])});
  return src;
}

inline prom_source prom_by_class(const rd::snapshot& s, rd::counter_matrix* floor) {
  prom_source src;
  src.s = &s;
  src.pid = prom_label("pid", std::to_string(s.pid));
  const rd::counter_matrix totals = s.totals();
  src.sums = std::make_unique<rd::counter_matrix>(totals);
  rd::counter_matrix& sums = *src.sums;
  for (unsigned cls = 0; cls < tl::kClassCount; ++cls) {
    for (unsigned c = 0; c < tl::kCounterCount; ++c) {
      // A total only grows: what reads lower is a slot left out, or a fold caught half done.
      if (floor && !counter_is_gauge(c)) {
        if (sums[cls][c] < (*floor)[cls][c]) sums[cls][c] = (*floor)[cls][c];
        (*floor)[cls][c] = sums[cls][c];
      }
    }
    if (row_nonzero(sums[cls]))
      src.rows.push_back({src.pid + "," + prom_label("class", std::to_string(cls)) + "," +
                              prom_label("size", std::to_string(class_size_of(s, cls))),
                          &sums[cls], live_of(totals[cls])});
  }
  return src;
}

// The Prometheus text of one or more processes: each family once, with the samples of every
// source in turn (the format wants a family's samples together, under one HELP and TYPE).
inline std::string prom_text(const std::vector<prom_source>& sources, bool by_thread) {
  std::string out;
  std::size_t rows = 0;
  for (const prom_source& src : sources) rows += src.rows.size();
  out.reserve(2048 * (sources.size() + 1) + rows * 15 * 120);
  {
    writer w(out);
    // By class, a value is the sum over the process's threads (a peak: the sum of their peaks).
    const char* summed = by_thread ? "" : " By class: summed over the threads, exited included.";
    for (unsigned c = 0; c < tl::kCounterCount; ++c) {
      const bool gauge = counter_is_gauge(c);
      std::string name = std::string("livealloc_") + kCounterNames[c] + (gauge ? "" : "_total");
      prom_family(w, name, gauge ? "gauge" : "counter", std::string(kCounterHelp[c]) + summed);
      for (const prom_source& src : sources)
        for (const prom_row& r : src.rows) prom_sample(w, name, r.labels, (*r.row)[c]);
    }
    const std::string live = "livealloc_live_blocks";
    prom_family(w, live, "gauge",
                std::string("Live blocks: allocs + adopted - frees - large_freed_by_others - "
                            "handed_over - foreign_allocs.") +
                    summed);
    for (const prom_source& src : sources)
      for (const prom_row& r : src.rows) prom_sample(w, live, r.labels, r.live);

    struct per_thread {
      const char* name;
      const char* help;
      std::uint64_t rd::thread_view::*field;
    };
    static const per_thread kThread[] = {
        {"livealloc_thread_slow_paths_total", "Allocations of this thread that took the slow path.",
         &rd::thread_view::slow_paths},
        {"livealloc_thread_flushes_total", "Batches of remote frees this thread handed back.",
         &rd::thread_view::flushes},
        {"livealloc_thread_mmap_calls_total", "mmap calls made by this thread.",
         &rd::thread_view::mmap_calls},
        {"livealloc_thread_munmap_calls_total", "munmap calls made by this thread.",
         &rd::thread_view::munmap_calls},
        {"livealloc_thread_madvise_calls_total", "madvise calls made by this thread.",
         &rd::thread_view::madvise_calls},
    };
    for (const per_thread& f : kThread) {
      if (!by_thread) break;
      const std::string name = f.name;
      prom_family(w, name, "counter", f.help);
      for (const prom_source& src : sources)
        for (std::size_t i = 0; i < src.s->threads.size(); ++i)
          prom_sample(w, name, src.thread_labels[i], src.s->threads[i].*f.field);
    }

    struct per_process {
      const char* name;
      const char* type;
      const char* help;
      std::uint64_t (*value)(const rd::snapshot&);
    };
    static const per_process kProcess[] = {
        {"livealloc_segment_bytes", "gauge", "Bytes of 4 MiB allocator segments mapped.",
         [](const rd::snapshot& s) { return s.segment_bytes; }},
        {"livealloc_large_bytes", "gauge", "Bytes of large mappings in use.",
         [](const rd::snapshot& s) { return s.large_bytes; }},
        {"livealloc_cached_bytes", "gauge", "Bytes kept for reuse (large cache, segment cache).",
         [](const rd::snapshot& s) { return s.cached_bytes; }},
        {"livealloc_committed_bytes", "gauge",
         "Small-block spans in use or not yet purged (large and cached bytes come on top).",
         [](const rd::snapshot& s) { return s.committed_bytes; }},
        {"livealloc_live_bytes", "gauge", "Bytes in live blocks (block sizes) plus large bytes.",
         [](const rd::snapshot& s) { return s.live_bytes(); }},
        {"livealloc_resident_bytes", "gauge", "Resident memory of the process (/proc statm).",
         [](const rd::snapshot& s) { return s.resident_bytes; }},
        {"livealloc_slots_used", "gauge", "Telemetry slots ever taken (high-water mark).",
         [](const rd::snapshot& s) { return s.slots_used; }},
        {"livealloc_mmap_calls_total", "counter", "mmap calls, whole process.",
         [](const rd::snapshot& s) { return s.mmap_calls; }},
        {"livealloc_munmap_calls_total", "counter", "munmap calls, whole process.",
         [](const rd::snapshot& s) { return s.munmap_calls; }},
        {"livealloc_madvise_calls_total", "counter", "madvise calls, whole process.",
         [](const rd::snapshot& s) { return s.madvise_calls; }},
        {"livealloc_purges_total", "counter", "Purge passes that returned memory to the OS.",
         [](const rd::snapshot& s) { return s.purges; }},
        {"livealloc_overflow_threads_total", "counter",
         "Heaps made without a telemetry slot (their threads share the overflow slot).",
         [](const rd::snapshot& s) { return s.overflow_threads; }},
        {"livealloc_options_rejected_total", "counter",
         "Invalid tuning values the allocator refused.",
         [](const rd::snapshot& s) { return s.rejected; }},
    };
    prom_family(w, "livealloc_process_info", "gauge",
                "Always 1: the program of the process with this pid.");
    for (const prom_source& src : sources)
      prom_sample(w, "livealloc_process_info",
                  src.pid + "," + prom_label("program", src.s->program), 1);
    prom_family(w, "livealloc_process_alive", "gauge",
                "1 while the process runs; 0 once it is gone (the values are its last).");
    for (const prom_source& src : sources)
      prom_sample(w, "livealloc_process_alive", src.pid, src.s->process_alive ? 1 : 0);
    for (const per_process& f : kProcess) {
      const std::string name = f.name;
      prom_family(w, name, f.type, f.help);
      for (const prom_source& src : sources) prom_sample(w, name, src.pid, f.value(*src.s));
    }
    const std::string opt = "livealloc_option_effective";
    prom_family(w, opt, "gauge", "Value in force of each tunable threshold.");
    for (const prom_source& src : sources)
      for (const rd::option_view& o : src.s->options)
        prom_sample(w, opt, src.pid + "," + prom_label("option", o.name), o.effective);
  }
  return out;
}
}  // namespace detail

inline std::string to_prometheus(const rd::snapshot& s) {
  std::vector<detail::prom_source> one;
  one.push_back(detail::prom_by_thread(s));
  return detail::prom_text(one, true);
}

inline std::string to_prometheus_by_class(const rd::snapshot& s, rd::counter_matrix* floor) {
  std::vector<detail::prom_source> one;
  one.push_back(detail::prom_by_class(s, floor));
  return detail::prom_text(one, false);
}

inline std::string to_prometheus(const std::vector<rd::snapshot>& all, bool by_class) {
  std::vector<detail::prom_source> sources;
  sources.reserve(all.size());
  for (const rd::snapshot& s : all)
    sources.push_back(by_class ? detail::prom_by_class(s, nullptr) : detail::prom_by_thread(s));
  return detail::prom_text(sources, !by_class);
}

inline std::string prometheus_unreadable(std::size_t n) {
  return "# HELP memlive_unreadable_segments Segments of running processes left out because they "
         "could not be read (another user's, malformed).\n"
         "# TYPE memlive_unreadable_segments gauge\n"
         "memlive_unreadable_segments " +
         std::to_string(n) + "\n";
}


namespace detail {
// Digits with an optional sign, of any length (parse_int also wants it to fit in 64 bits).
inline bool is_whole_number(const std::string& v) {
  const std::size_t sign = !v.empty() && (v[0] == '-' || v[0] == '+') ? 1 : 0;
  return v.size() > sign && v.find_first_not_of("0123456789", sign) == std::string::npos;
}

// A whole number written as an integer ("8", "+8", "-3"), or as a JSON number with a fraction
// or an exponent that leaves it whole ("8.0", "1e3"; JSON's grammar after an optional '+'),
// decided on the decimal digits, not through a double ("1e-400" and "1.0000000000000000001" are
// not whole).
// 1: *out holds it; 0: not a whole number; -1: a whole number outside 64 bits.
inline int parse_whole(const std::string& text, std::int64_t* out) {
  if (parse_int(text, out)) return 1;
  if (is_whole_number(text)) return -1;
  std::size_t i = !text.empty() && text[0] == '+' ? 1 : 0;
  const bool negative = i == 0 && !text.empty() && text[0] == '-';
  if (negative) ++i;
  auto digits = [&](std::string* to) {
    const std::size_t from = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    if (to) to->append(text, from, i - from);
    return i - from;
  };
  std::string d;  // the significant digits; value = d x 10^exponent
  const std::size_t int_digits = digits(&d);
  if (int_digits == 0 || (int_digits > 1 && d[0] == '0')) return 0;  // JSON: no "08", no ".5"
  long long exponent = 0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    const std::size_t n = digits(&d);
    if (n == 0) return 0;  // "8."
    exponent -= static_cast<long long>(n);
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    const bool down = i < text.size() && text[i] == '-';
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    std::string e;
    if (digits(&e) == 0) return 0;
    e.erase(0, std::min(e.find_first_not_of('0'), e.size()));
    std::int64_t v = 0;  // past 9 digits: beyond any number of digits a string can hold here
    if (e.size() > 9 || (!e.empty() && !parse_int(e, &v))) v = 1000000000;
    exponent += down ? -v : v;
  }
  if (i != text.size()) return 0;
  d.erase(0, std::min(d.find_first_not_of('0'), d.size()));
  while (!d.empty() && d.back() == '0') {
    d.pop_back();
    ++exponent;
  }
  if (d.empty()) {  // zero, however written
    *out = 0;
    return 1;
  }
  if (exponent < 0) return 0;  // a non-zero digit after the point
  if (static_cast<long long>(d.size()) + exponent > 19) return -1;  // 10^19 > 2^63
  d.append(static_cast<std::size_t>(exponent), '0');
  return parse_int((negative ? "-" : "") + d, out) ? 1 : -1;
}

inline bool iequals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

}  // namespace detail

inline bool parse_assignment(const std::string& text, assignment* out, std::string* error) {
  auto fail = [&](const std::string& msg) {
    if (error) *error = msg;
    return false;
  };
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos)
    return fail("'" + text + "': expected name=value (for example page_recycle=8)");
  std::string name = text.substr(0, eq);
  const std::string value = text.substr(eq + 1);
  if (name.empty()) return fail("'" + text + "': the option name before '=' is empty");
  for (char& c : name) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
      return fail("option '" + text.substr(0, eq) + "': a name has only letters, digits and '_'");
  }
  if (value.empty()) return fail("option '" + name + "': no value after '='");
  std::int64_t v = 0;
  using detail::iequals;  // True, ON: in any case, as the name
  const bool yes = iequals(value, "true") || iequals(value, "on");
  const bool word = yes || iequals(value, "false") || iequals(value, "off");
  if (word) {
    v = yes;
  } else if (const int whole = detail::parse_whole(value, &v); whole != 1) {
    return fail("option '" + name + "': '" + value + "' is not " +
                (whole < 0 ? "a 64-bit integer (out of range)" : "a whole number"));
  }
  out->name = std::move(name);
  out->value = v;
  out->word = word;
  return true;
}

inline bool check_assignment(const assignment& a, const std::vector<rd::option_view>& options,
                             std::string* error) {
  auto fail = [&](const std::string& msg) {
    if (error) *error = msg;
    return false;
  };
  std::string known;
  for (const rd::option_view& o : options) {
    if (o.name != a.name) {
      if (o.live) known += (known.empty() ? "" : ", ") + o.name;
      continue;
    }
    if (!o.live) {
      std::string upper;
      for (char c : o.name) upper.push_back(c >= 'a' && c <= 'z' ? char(c - 'a' + 'A') : c);
      return fail("option '" + a.name + "' cannot change while the program runs (set LIVEALLOC_" +
                  upper + " before it starts)");
    }
    if (o.is_bool && a.value != 0 && a.value != 1)
      return fail("option '" + a.name + "' is a bool: " + std::to_string(a.value) +
                  " is not 0 or 1");
    if (!o.is_bool && a.word)
      return fail("option '" + a.name + "' takes an integer, not true, false, on or off");
    if (a.value < o.min || a.value > o.max)
      return fail("option '" + a.name + "': " + std::to_string(a.value) + " is out of range [" +
                  std::to_string(o.min) + ", " + std::to_string(o.max) + "]");
    return true;
  }
  namespace ld = livealloc::detail;
  const int near = ld::near_option(a.name.data(), a.name.size());
  const std::string hint =
      near >= 0 ? " (did you mean '" + std::string(ld::kOptionTable[near].name) + "'?)" : "";
  return fail("unknown option '" + a.name + "'" + hint + "; the live options are: " + known);
}

inline rd::snapshot take_whole(const rd::segment& seg, int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  rd::snapshot s = seg.take();
  while (s.ok() && !s.whole && std::chrono::steady_clock::now() < end) seg.take(&s);
  return s;
}

inline all_snapshots take_all(const std::string& dir, bool whole) {
  all_snapshots all;
  // Each segment is read once (rd::list_segments reads every file, stale ones too, for `list`).
  std::vector<int> pids;
  DIR* d = opendir(dir.c_str());
  if (!d) {
    const int e = errno;
    all.dir_error = dir + ": " + strerror(e);
    all.dir_denied = e == EACCES || e == EPERM;
    return all;
  }
  while (const dirent* e = readdir(d))
    if (const int pid = rd::detail::pid_from_name(e->d_name); pid > 0) pids.push_back(pid);
  closedir(d);
  std::sort(pids.begin(), pids.end());
  for (const int pid : pids) {
    if (!rd::pid_alive(pid)) {
      ++all.gone;
      continue;
    }
    open_result o = open_segment(pid, false, dir);
    rd::snapshot s;
    if (o.segment) s = whole ? take_whole(*o.segment) : o.segment->take();
    if (o.kind == error_kind::no_process || o.kind == error_kind::no_segment ||
        (o.segment && s.ok() && !s.process_alive)) {  // it ended meanwhile
      ++all.gone;
    } else if (!o.segment) {
      all.failed.emplace_back(o.kind, o.error);
    } else if (!s.ok()) {
      all.failed.emplace_back(error_kind::bad_segment, o.segment->path() + ": " + s.error);
    } else {
      all.shots.push_back(std::move(s));
    }
  }
  return all;
}

namespace detail {
// Milliseconds since process `pid` started (its start in /proc against CLOCK_BOOTTIME), or -1
// when unknown.
inline long long process_age_ms(int pid) {
  rd::detail::proc_info i;
  const long hz = sysconf(_SC_CLK_TCK);
  timespec now;
  if (hz <= 0 || !rd::detail::proc_stat(pid, &i) || clock_gettime(CLOCK_BOOTTIME, &now) != 0)
    return -1;
  return static_cast<long long>(now.tv_sec) * 1000 + now.tv_nsec / 1000000 -
         static_cast<long long>(i.start_ticks * 1000 / static_cast<std::uint64_t>(hz));
}
// A process this young may not have published its segment yet: open_segment waits for it.
constexpr long long kPublishWaitMs = 2000;
// The process whose thread `tid` is (its Tgid in /proc), or 0 when `tid` is no thread's id or is
// a process's own (kill(tid, 0) succeeds for any thread's id, so a tid passes for a pid).
inline int process_of_thread(int tid) {
  const int fd = ::open(("/proc/" + std::to_string(tid) + "/status").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];  // Tgid is the fourth line
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char* t = std::strstr(buf, "\nTgid:");
  const int tgid = t ? std::atoi(t + 6) : 0;
  return tgid > 0 && tgid != tid ? tgid : 0;
}
}  // namespace detail

inline open_result open_segment(int pid, bool for_tuning, const std::string& dir) {
  open_result r;
  if (pid <= 0) {
    r.kind = error_kind::usage;
    r.error = "pid " + std::to_string(pid) + " is not a process id";
    return r;
  }
  const std::string path = dir + "/livealloc." + std::to_string(pid);
  const bool alive = rd::pid_alive(pid);
  struct stat st;
  int e = lstat(path.c_str(), &st) == 0 ? 0 : errno;
  // `LD_PRELOAD=... LIVEALLOC_PROFILE=1 prog & memlive serve --pid $!`: the shell's child may
  // not have exec'd the program yet, nor the library published its segment. A process started
  // less than kPublishWaitMs ago gets until then (it failed about half the time on a busy host).
  for (long long age = alive && e == ENOENT ? detail::process_age_ms(pid) : -1;
       age >= 0 && age < detail::kPublishWaitMs && e == ENOENT;
       age = detail::process_age_ms(pid)) {
    const timespec step{0, 20 * 1000000};
    nanosleep(&step, nullptr);
    e = lstat(path.c_str(), &st) == 0 ? 0 : errno;
  }
  if (e != 0) {
    if (e == ENOENT && !alive) {
      r.kind = error_kind::no_process;
      r.error = "no process with pid " + std::to_string(pid) + " (and no segment " + path + ")";
    } else if (const int owner = e == ENOENT ? detail::process_of_thread(pid) : 0) {
      r.kind = error_kind::no_segment;
      r.error = std::to_string(pid) + " is a thread of process " + std::to_string(owner) +
                ", not a process: give the process's pid (--pid " + std::to_string(owner) + ")";
    } else if (e == ENOENT) {
      r.kind = error_kind::no_segment;
      r.error = "process " + std::to_string(pid) + " publishes no telemetry segment (" + path +
                "); run it with LD_PRELOAD=<abs path>/liblivealloc.so LIVEALLOC_PROFILE=1, or "
                "call livealloc::telemetry::enable()";
    } else if (e == EACCES) {  // lstat needs only search permission on the directories
      r.kind = error_kind::permission;
      r.error = path + ": permission denied: this user may not enter " + dir;
    } else {
      r.kind = error_kind::bad_segment;
      r.error = path + ": " + std::strerror(e);
    }
    return r;
  }
  std::string err;
  r.segment = rd::segment::open_path(path, &err, !for_tuning);
  if (r.segment) {
    if (for_tuning && !r.segment->writable()) {
      r.segment.reset();
      r.kind = error_kind::permission;
      r.error = path +
                ": permission denied: the segment can be read but not written, so it "
                "cannot be tuned; run as the process's user";
    }
    return r;
  }
  // Why did the reader refuse it? Permission, or the content.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  e = errno;
  if (fd >= 0) ::close(fd);
  if (fd < 0 && (e == EACCES || e == EPERM))
    r.kind = error_kind::permission;
  else if (fd < 0 && e == ENOENT)  // removed meanwhile: the process just exited
    r.kind = rd::pid_alive(pid) ? error_kind::no_segment : error_kind::no_process;
  else
    r.kind = error_kind::bad_segment;
  r.error = err;
  return r;
}

// ------------------------------------------------------------------------------------------------
// The HTTP server (civetweb C API) and memlive::start()/stop().
//
// One detail::server serves one telemetry segment: this process's own (memlive::start) or
// another process's (`memlive serve`). Endpoints (every response carries Connection: close and
// Cache-Control: no-store; the four that read a query take only their fields, each once, else
// 400 naming the field: query_fields_ok):
//   GET  /healthz        {"ok":true,"pid":N,"alive":bool,"uptime_ms":N,"version":"0.1.0"};
//                        serve --all: {"ok":true,"all":true,"uptime_ms":N,"version":"0.1.0"}
//   GET  /api/snapshot   one memlive.snapshot/1 object (application/json)
//   GET  /metrics        Prometheus text 0.0.4 (kPrometheusContentType); ?by=class: one series
//                        per class (to_prometheus_by_class, its floor kept per server), ?by=thread
//                        the default, another value 400 (an empty one too: `?by=`, `?by`)
//   GET  /api/options    {"generation","validated_generation","rejected","writable","options":[
//                         {name, requested, effective, min, max, default, live, bool}]};
//                        writable: a POST could store values (the segment is writable to this
//                        server and the process is alive)
//   POST /api/options    body {"name": value, ...} (Content-Type application/json, at most
//                        kMaxBody bytes). Every entry is checked before any is stored: malformed
//                        JSON, not an object, empty, unknown name, wrong type (integers; true or
//                        false also for bool options), out of range, not live -> 400
//                        {"error","field"} (field null for the body as a whole) and nothing
//                        stored. Else all are stored: 200
//                        {"ok":true,"generation":N,"applied":{..}}. The allocator validates them at
//                        its next slow path (see `tune`).
//   GET  /api/stream     Server-Sent Events: one `data: <snapshot>` event per tick;
//                        ?interval_ms=N (kMinStreamMs..kMaxStreamMs, default: the server's;
//                        empty 400, as for every other query value; a name without '=' is
//                        empty: `?interval_ms`).
//                        Ticks fall on multiples of the interval of the monotonic clock, and
//                        each tick's JSON is built once and shared by every client on it.
//                        Between ticks further apart, a `:` comment every kStreamHeartbeatMs.
//                        HEAD: the same headers (no Content-Length), no body.
//   GET  /api/history    ?seconds=N (1..kept, default 60 or what is kept): the samples of the
//                        last N seconds as a JSON array of memlive.snapshot/1 objects, oldest
//                        first. A sampler thread ("memlive-hist") takes one sample per history
//                        step (the stream interval, but at least kHistoryMinStepMs; the JSON
//                        the stream last shared when it is less than a step old) and keeps at most
//                        kHistorySamples of them and at most options.history_bytes of JSON (the oldest go
//                        first): 600 x 250 ms = the last 2.5 minutes by default. Bad N -> 400.
//   POST /api/baseline   body empty or {} records the current snapshot as the baseline;
//                        {"clear":true} clears it (same checks as POST /api/options: Origin,
//                        Content-Type, size). 200 {"ok":true,"baseline":true|false,"taken_ns":N}.
//   DELETE /api/baseline clears it (Origin checked). GET /api/baseline {"baseline":bool,
//                        "taken_ns":N}.
//   GET  /api/snapshot?since=baseline   the snapshot with every cumulative counter replaced by
//                        its growth since the baseline (see since_baseline()), plus the field
//                        "baseline_taken_ns"; 409 when no baseline is set, 400 for another value.
//                        &if_none=plain: no baseline (none set, or one of the image before an
//                        exec) gives the plain snapshot with "baseline_taken_ns":0, not a 409.
//                        Another if_none value is a 400, with or without since.
//   GET  /               the live page (web/src, embedded at build time) and its files:
//                        /index.html /app.js /style.css /chart.umd.js ...; GET /favicon.ico 204
//   anything else        404 {"error","field":null}; a known path with another method 405.
//                        An absolute-form target http://HOST:PORT/path is served as the path
//                        (HOST:PORT checked as Host is, the Host header ignored); the asterisk-form
//                        `*` and another scheme 400.
// Security: listens on 127.0.0.1 unless told otherwise; a Host header that is not
// 127.0.0.1:PORT, localhost:PORT or HOST:PORT -> 403 (DNS rebinding); two Host, Content-Length,
// Origin or Content-Type headers -> 400 {"error":"more than one NAME header"};
// a POST whose Origin is present and not http://<one of those> -> 403, whose Content-Type is not
// JSON -> 415, whose body is larger than kMaxBody -> 413, without a length -> 411. HEAD is
// answered like GET, no body.
// ------------------------------------------------------------------------------------------------

struct options {
  std::string host = "127.0.0.1";  // an IPv4 address, or "localhost" (= 127.0.0.1)
  int port = 8080;                 // 0: a free port (port() tells which)
  // Default for /api/stream, kMinStreamMs..kMaxStreamMs. A change reaches a client at the next
  // tick: half an interval later on average (plus under 1 ms of memlive's own work), so 80 ms
  // keeps the median change-to-client delay near 40 ms (benchmarks/memlive_bench.sh).
  int stream_interval_ms = 80;
  bool quiet = false;              // start(): do not print the URL
  // /api/history keeps at most this much JSON (the memory its strings hold), and at least the
  // latest sample. 32 MiB holds all 600 samples while a snapshot is under 55 KB (a process of
  // about 25 threads); a larger process keeps fewer, and a service short of memory can lower it.
  std::size_t history_bytes = 32u * 1024u * 1024u;
};

enum class start_error : int {
  none = 0,
  port_in_use,      // another socket listens on host:port
  bad_host,         // not an IPv4 address of this machine (or "localhost")
  bad_options,      // port or stream interval out of range
  already_running,  // memlive::start() was called twice without stop()
  telemetry,        // livealloc::telemetry::enable() or opening our own segment failed
  server,           // civetweb refused to start for another reason (message says why)
  exiting,          // called while the process exits, after memlive's exit-time cleanup ran
                    // or after livealloc removed the segment's name at exit
  permission,       // the port is below 1024 (ip_unprivileged_port_start) and the process
                    // may not listen on it
};

struct status {
  start_error error = start_error::none;
  std::string message;  // empty on success
  int port = 0;         // the bound port on success
  bool ok() const { return error == start_error::none; }
  explicit operator bool() const { return ok(); }
};

// Enables livealloc telemetry in this process and serves it over HTTP. Prints the URL once
// (stderr) unless o.quiet. Never throws: failures come back in the status.
// At exit, memlive stops its server (when the program did not call stop()) in a cleanup that
// runs in the reverse order of registration, as atexit handlers and static destructors do: it
// is registered at memlive's first use (start(), port(), stop() or take_snapshot()), so an
// atexit handler registered before that runs after it. start() from there fails with
// start_error::exiting; take_snapshot() still works while the segment can be read.
status start(const options& o = {});
// Stops the server started by start(); returns within about a second even with stream clients
// connected (their loops watch a stop flag). Telemetry stays enabled. No-op when not running.
void stop();
// The bound port of the server started by start(), 0 when none runs.
int port();

namespace detail {

inline constexpr std::size_t kMaxBody = 64 * 1024;
// A request body must arrive whole within this long: civetweb's request_timeout_ms (3 s) bounds
// each wait for bytes, not the body, so a client sending a byte a second would hold a worker for
// the 18 hours 64 KiB takes (and 24 such clients every worker).
inline constexpr std::uint64_t kBodyDeadlineMs = 3000;
inline constexpr int kMinStreamMs = 50;
inline constexpr int kMaxStreamMs = 60000;
// Each /api/stream client holds one of the server's 24 worker threads; past this many, a new one
// gets 503, so /healthz, the API and the page still have workers to answer them.
inline constexpr int kMaxStreams = 16;
// A snapshot, /metrics or the history of a process with hundreds of threads is tens of MiB, held
// until sent (a 21 MB /metrics peaks at 55-75 MB while built): 24 at once took 0.8-1.6 GB. At
// most this many are built or sent at once; a request that waits for its turn longer than
// kBigAnswerWaitMs gets 503 with Retry-After.
inline constexpr int kMaxBigAnswers = 2;
inline constexpr int kBigAnswerWaitMs = 5000;
// A stream whose ticks are further apart than this sends an SSE comment (":") at this period, by
// which it notices a client that went away.
inline constexpr std::uint64_t kStreamHeartbeatMs = 1000;
inline constexpr std::size_t kHistorySamples = 600;                // samples kept by /api/history
inline constexpr int kHistoryMinStepMs = 250;  // history samples at most 4 a second

inline std::uint64_t steady_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

inline std::string json_error(const std::string& message, const std::string* field) {
  std::string out;
  {
    writer w(out);
    w.raw("{\"error\":");
    json_string(w, message);
    w.raw(",\"field\":");
    if (field)
      json_string(w, *field);
    else
      w.raw("null");
    w.ch('}');
  }
  return out;
}

// The result of checking a POST /api/options body: the assignments, or an error.
struct options_request {
  std::vector<assignment> values;
  std::string error;  // empty when valid
  bool has_field = false;
  std::string field;
  bool ok() const { return error.empty(); }
};

// Parses a request body (discarded when malformed, never throws); *twice is the first key of the
// top-level object that appears more than once (empty when none): a parser keeps only the last.
// `floats`, when given, gets the text, as written, of each top-level member's number that has a
// fraction or an exponent (or is past 64 bits): the parsed JSON holds a double, in which 1e-400
// is 0 and 1.0000000000000000001 is 1.
// A number past a double's range (1e400) ends nlohmann's parse wherever it stands (parser.hpp
// returns at its error 406, whatever the handler answers), which would leave the rest of the
// body unread; so each is first replaced by 0.0 between spaces, found by nlohmann's own lexer (a
// token reads the same in any context), and the body is judged whole. Its text is kept.
inline nlohmann::json parse_json_body(const std::string& body, std::string* twice,
                                      std::map<std::string, std::string>* floats = nullptr) {
  using lexer = nlohmann::detail::lexer<nlohmann::json,
                                        decltype(nlohmann::detail::input_adapter(body))>;
  std::vector<std::string> written;  // every float token, in order, its bytes (a '.' in any locale)
  std::string finite = body;
  lexer lex(nlohmann::detail::input_adapter(body));
  using token = lexer::token_type;
  for (token t = lex.scan(); t != token::end_of_input && t != token::parse_error; t = lex.scan()) {
    if (t != token::value_float) continue;
    written.push_back(lex.get_token_string());
    const std::size_t n = written.back().size();  // 5 or more for a number past 1.8e308
    if (!std::isfinite(lex.get_number_float()))  // spaced: "5-1e400" stays two numbers
      finite.replace(lex.get_position().chars_read_total - n, n, " 0.0" + std::string(n - 4, ' '));
  }
  std::set<std::string> names;
  std::string name;
  std::size_t float_index = 0;  // the parser sees the lexer's float tokens in the same order
  return nlohmann::json::parse(
      finite,
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (depth == 1 && event == nlohmann::json::parse_event_t::key && parsed.is_string()) {
          name = parsed.get_ref<const std::string&>();
          if (!names.insert(name).second && twice->empty()) *twice = name;
        }
        if (event == nlohmann::json::parse_event_t::value && parsed.is_number_float() &&
            float_index < written.size()) {
          if (depth == 1 && floats) (*floats)[name] = written[float_index];
          ++float_index;
        }
        return true;
      },
      /*allow_exceptions=*/false);
}

// Checks a POST /api/options body against the options a segment publishes. Pure: no side
// effects, so it can be fuzzed and unit-tested.
inline options_request check_options_body(const std::string& body,
                                          const std::vector<rd::option_view>& published) {
  options_request r;
  auto fail = [&](const std::string& msg, const std::string* field) {
    r.values.clear();
    r.error = msg;
    r.has_field = field != nullptr;
    if (field) r.field = *field;
    return r;
  };
  // A name given twice would keep only its last value, unchecked the others: refused, as `tune`
  // refuses it.
  std::string twice;
  std::map<std::string, std::string> floats;  // as written
  const nlohmann::json j = parse_json_body(body, &twice, &floats);
  const auto range = [](const rd::option_view& o) {
    return "[" + std::to_string(o.min) + ", " + std::to_string(o.max) + "]";
  };
  if (j.is_discarded()) return fail("malformed JSON", nullptr);
  if (!j.is_object()) return fail("the body must be a JSON object {\"name\": value, ...}", nullptr);
  if (!twice.empty()) return fail("option '" + twice + "' given twice; nothing applied", &twice);
  if (j.empty()) return fail("no options given", nullptr);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    // Names in any case, as `tune` and livealloc::set_option take them ("PAGE_RECYCLE").
    const rd::option_view* o = nullptr;
    for (const rd::option_view& p : published)
      if (detail::iequals(p.name, name)) o = &p;
    assignment a;
    a.name = o ? o->name : name;
    for (const assignment& before : r.values)
      if (before.name == a.name)  // {"page_recycle": 3, "PAGE_RECYCLE": 4}
        return fail("option '" + a.name + "' given twice; nothing applied", &name);
    // A number with a fraction or an exponent is decided on its digits, as `tune` decides it:
    // 1e3 and 8.0 are whole, 1e-400 is not (a double holds 0), 1e400 is past 64 bits.
    std::int64_t whole_value = 0;
    const int whole = v.is_number_float() ? parse_whole(floats[name], &whole_value) : 0;
    if (o && v.is_boolean() && o->is_bool) {
      a.value = v.get<bool>() ? 1 : 0;
    } else if (o && v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        return fail("option '" + name + "': " + std::to_string(u) + " is out of range " +
                        range(*o),
                    &name);
      a.value = static_cast<std::int64_t>(u);
    } else if (o && v.is_number_integer()) {
      a.value = v.get<std::int64_t>();
    } else if (o && whole < 0) {
      return fail("option '" + name + "': " + floats[name] + " is out of range " +
                      range(*o),
                  &name);
    } else if (o && whole > 0) {
      a.value = whole_value;
    } else if (o) {  // "not a string", "not an object", "not a number with a fraction", "not null"
      const std::string type = v.type_name();
      const char* article = v.is_null() ? "" : v.is_object() || v.is_array() ? "an " : "a ";
      return fail("option '" + name + "' takes " +
                      (o->is_bool ? std::string("true, false, 0 or 1") : "an integer") + ", not " +
                      article + type + (v.is_number_float() ? " with a fraction" : ""),
                  &name);
    }
    std::string err;  // unknown name (o == nullptr), not live, bool, range
    if (!check_assignment(a, published, &err)) return fail(err, &name);
    r.values.push_back(a);
  }
  return r;
}

inline std::uint64_t minus(std::uint64_t a, std::uint64_t b) {
  return a > b ? a - b : 0;
}

// `now` with every cumulative counter replaced by its growth since `base` (gauges, names,
// options and sizes as in `now`). Per class counter of a thread: minus the same slot's row in
// `base` when the slot holds the same thread (incarnation and tid); a thread new since the base
// keeps its full rows. The exited totals: minus base's exited totals and minus the rows of the
// base's threads no longer in their slot (folded into the exited totals since), so the process
// totals are exactly now - base. Per-thread and process call counts and the free matrix likewise.
// Subtractions saturate at 0 (a torn read never gives a huge number).
inline rd::snapshot since_baseline(const rd::snapshot& now, const rd::snapshot& base) {
  rd::snapshot d = now;
  auto sub_matrix = [](rd::counter_matrix& m, const rd::counter_matrix& b) {
    for (unsigned c = 0; c < tl::kClassCount; ++c)
      for (unsigned k = 0; k < tl::kCounterCount; ++k)
        if (!counter_is_gauge(k)) m[c][k] = minus(m[c][k], b[c][k]);
  };
  for (rd::thread_view& t : d.threads) {
    for (const rd::thread_view& b : base.threads) {
      if (b.slot != t.slot || b.incarnation != t.incarnation || b.tid != t.tid) continue;
      sub_matrix(t.counters, b.counters);
      t.slow_paths = minus(t.slow_paths, b.slow_paths);
      t.flushes = minus(t.flushes, b.flushes);
      t.mmap_calls = minus(t.mmap_calls, b.mmap_calls);
      t.munmap_calls = minus(t.munmap_calls, b.munmap_calls);
      t.madvise_calls = minus(t.madvise_calls, b.madvise_calls);
    }
  }
  sub_matrix(d.exited, base.exited);
  for (const rd::thread_view& b : base.threads) {
    bool present = false;
    for (const rd::thread_view& t : now.threads)
      present = present || (b.slot == t.slot && b.incarnation == t.incarnation && b.tid == t.tid);
    if (!present) sub_matrix(d.exited, b.counters);
  }
  d.mmap_calls = minus(d.mmap_calls, base.mmap_calls);
  d.munmap_calls = minus(d.munmap_calls, base.munmap_calls);
  d.madvise_calls = minus(d.madvise_calls, base.madvise_calls);
  d.purges = minus(d.purges, base.purges);
  d.overflow_threads = minus(d.overflow_threads, base.overflow_threads);
  if (d.slot_count == base.slot_count) {
    auto& cells = d.free_matrix;
    for (rd::snapshot::free_cell& c : cells)
      c.blocks = minus(c.blocks, base.freed(c.from_slot, c.owner_slot));
    cells.erase(std::remove_if(cells.begin(), cells.end(),
                               [](const rd::snapshot::free_cell& c) { return c.blocks == 0; }),
                cells.end());
  }
  return d;
}

// The page (web/src) and Chart.js, embedded at build time by memlive/cmake/embed_web.cmake into
// memlive_web_assets.h (on the include path of the memlive::memlive target, included at the
// top). Without it, GET /
// answers with a short page that says how to get the real one.
#ifdef MEMLIVE_HAS_WEB_ASSETS
using web_file = memlive::web::asset;
#else
struct web_file {
  const char* path;
  const char* type;
  const unsigned char* data;
  std::size_t size;
};
#endif

// The embedded file served at `path` ("/" is /index.html), or nullptr.
inline const web_file* find_web_file(const std::string& path) {
#ifdef MEMLIVE_HAS_WEB_ASSETS
  const std::string want = path == "/" ? "/index.html" : path;
  for (const memlive::web::asset* a = memlive::web::kAssets; a->path; ++a)
    if (want == a->path) return a;
#else
  (void)path;
#endif
  return nullptr;
}

class server {
 public:
  // Serves `seg` (owned). `label` names the source in messages ("this process", "process N").
  explicit server(std::unique_ptr<rd::segment> seg) : seg_(std::move(seg)), pid_(seg_->pid()) {}
  // Serves every running process that publishes a segment in `dir` (`memlive serve --all`):
  // /metrics of all of them, read at each request, /healthz, and at / a small HTML index that
  // links the two forms of /metrics; not the live page, no other endpoint.
  explicit server(std::string dir) : pid_(0), all_dir_(std::move(dir)) {}
  ~server() { stop(); }
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  status start(const options& o);
  void stop();
  int port() const { return port_; }
  std::int32_t pid() const { return pid_; }
  // The descriptors civetweb listens on (a fork child closes its copies).
  const std::vector<int>& listening_fds() const { return listen_fds_; }
  // Puts back the program's SIGPIPE action of before start(), which civetweb changes.
  void restore_sigpipe() const { sigaction(SIGPIPE, &sigpipe_before_, nullptr); }
  // The program's name in the segment now served (after an exec, the new image's); empty if it
  // cannot be read.
  std::string program();

  // Request handling (public for civetweb's C callbacks).
  int handle(mg_connection* conn);
  // A request civetweb refused before handle() (no HTTP version, a malformed or oversized
  // header, an unknown version): answered in JSON like every other error, not civetweb's text.
  void refused(mg_connection* conn, int status, const char* why);
  // A request civetweb read and then dropped unanswered (a target it maps to no path).
  void unmapped(mg_connection* conn);

 private:
  struct response {
    int code = 200;
    const char* type = "application/json; charset=utf-8";
    std::string body;
    std::string headers;  // extra header lines, each ending in \r\n
    const unsigned char* static_body = nullptr;  // instead of body: an embedded file
    std::size_t static_size = 0;
  };

  // Workers take connections as soon as mg_start2 returns, before start() has learned the port
  // (port 0) and written port_ and started_ms_: a request that comes that early waits for them.
  void wait_started();
  void mark_started();
  bool host_allowed(const char* host) const;
  response host_refused(const char* what) const;  // 403: `what` (Host, the target) is not ours
  bool origin_allowed(const char* origin) const;
  response snapshot_response();
  response options_response();
  response post_options(mg_connection* conn);
  void stream(mg_connection* conn, const char* query, bool head);  // head: the headers only
  // The shared sample for `tick`: the one already built if it is for this tick or a later
  // one, or at most `slack` ms older; else a new one.
  std::shared_ptr<const std::string> sample(std::uint64_t tick, std::uint64_t slack = 0);
  // Under seg_mutex_. Follows the process through exec (rd::segment::successor), which also
  // clears the baseline: it counted another program image.
  void follow_exec();
  // What take() reads: the whole snapshot, or its head (rd::segment::head: no threads, no free
  // matrix), all that the options need, at a cost that does not grow with the threads.
  enum class part { whole, head };
  // Under seg_mutex_: follow_exec(), then the snapshot.
  bool take(rd::snapshot* s, std::string* error, part what = part::whole);
  // take() under seg_mutex_; on failure *r becomes the 503 to send. *writable (if given): whether
  // the segment taken can be tuned.
  bool take_or_503(rd::snapshot* s, response* r, bool* writable = nullptr,
                   part what = part::whole);
  static void send(mg_connection* conn, const response& r, bool head);
  response history_response(const char* query);
  response baseline_request(mg_connection* conn, const std::string& method);
  response since_response(const char* query);
  response metrics_response(const char* query);
  response metrics_all_response(const char* query);  // serve --all
  response read_json_body(mg_connection* conn, std::string* body);  // code 0: fine
  void sampler();
  std::uint64_t history_step_ms() const {  // one history sample per this many ms
    return opts_.stream_interval_ms > kHistoryMinStepMs
               ? static_cast<std::uint64_t>(opts_.stream_interval_ms)
               : static_cast<std::uint64_t>(kHistoryMinStepMs);
  }
  std::size_t history_seconds() const {  // what the ring covers
    return (kHistorySamples * history_step_ms() + 999) / 1000;
  }

  std::unique_ptr<rd::segment> seg_;  // replaced under seg_mutex_ when the process calls exec
  const std::int32_t pid_;
  const std::string all_dir_;  // serve --all: the directory of the segments; seg_ is null
  mg_context* ctx_ = nullptr;
  int port_ = 0;
  std::vector<int> listen_fds_;
  struct sigaction sigpipe_before_ {};
  options opts_;
  std::string bind_host_;
  std::uint64_t started_ms_ = 0;

  std::mutex seg_mutex_;  // take() and set_option() one at a time; guards seg_
  // Taken before seg_mutex_, and held while the JSON is written, which seg_mutex_ is not: the
  // options, /healthz and the head of a snapshot need not wait for thousands of threads' JSON.
  std::mutex snapshot_mutex_;
  std::string last_good_;  // JSON of the last snapshot that could be taken (snapshot_mutex_)
  rd::snapshot sample_snapshot_;  // each sample is taken into this one's memory (snapshot_mutex_)

  std::mutex sample_mutex_;  // the shared stream sample
  std::uint64_t sample_tick_ = 0;
  std::shared_ptr<const std::string> sample_json_;

  struct history_entry {
    std::uint64_t ms;  // steady_ms() when taken
    std::shared_ptr<const std::string> json;
  };
  std::mutex history_mutex_;
  std::deque<history_entry> history_;
  std::size_t history_bytes_ = 0;
  std::thread sampler_;

  std::mutex floor_mutex_;  // /metrics?by=class: the largest totals reported (to_prometheus_by_class)
  rd::counter_matrix floor_{};
  // serve --all: the floor of each process (pid, start_ns) in the last answer, under floor_mutex_
  std::map<std::pair<std::int32_t, std::uint64_t>, rd::counter_matrix> floors_;
  std::uint64_t floor_start_ns_ = 0;

  std::mutex baseline_mutex_;
  std::unique_ptr<rd::snapshot> baseline_;  // null: none

  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> started_{false};  // start() wrote port_ and started_ms_, or gave up
  std::atomic<int> streams_{0};  // /api/stream clients connected now (kMaxStreams)

  // Big answers (snapshot, /metrics, history) built and being sent now, at most kMaxBigAnswers.
  std::mutex big_mutex_;
  std::condition_variable big_cv_;
  int big_answers_ = 0;
  bool big_acquire();
  void big_release();
};

inline const char* reason_phrase(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 431:
      return "Request Header Fields Too Large";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return code >= 400 && code < 500 ? "Bad Request" : "Internal Server Error";
  }
}

inline void server::send(mg_connection* conn, const response& r, bool head) {
  std::string h = "HTTP/1.1 " + std::to_string(r.code) + " " + reason_phrase(r.code) + "\r\n";
  const std::size_t size = r.static_body ? r.static_size : r.body.size();
  if (r.code != 204) {
    h += "Content-Type: ";
    h += r.type;
    h += "\r\nContent-Length: " + std::to_string(size) + "\r\n";
  }
  h += "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n";
  h += r.headers;
  h += "\r\n";
  if (!head && r.code != 204 && !r.static_body) h += r.body;
  mg_write(conn, h.data(), h.size());
  if (!head && r.code != 204 && r.static_body) mg_write(conn, r.static_body, size);
}

inline void server::refused(mg_connection* conn, int status, const char* why) {
  response r;
  r.code = status >= 400 && status <= 599 ? status : 400;
  std::string text = reason_phrase(r.code);
  if (why && *why) text += std::string(": ") + why;
  r.body = json_error(text, nullptr);
  send(conn, r, false);
}

inline server::response server::host_refused(const char* what) const {
  response r;
  r.code = 403;
  const std::string p = ":" + std::to_string(port_);
  r.body = json_error(std::string(what) + " must be 127.0.0.1" + p +
                          (bind_host_ != "127.0.0.1" ? ", " + bind_host_ + p : "") +
                          " or localhost" + p,
                      nullptr);
  return r;
}

// civetweb 1.15 closes the connection without a word when it maps a request's target to no path
// of its own ("TODO: handle non-local request (PROXY)"): the asterisk-form `*` (as in `OPTIONS *`)
// and an absolute-form target whose port is not ours. memlive_connection_close calls this for a
// request that was read and not answered, before civetweb closes the socket.
inline void server::unmapped(mg_connection* conn) {
  wait_started();
  const mg_request_info* ri = mg_get_request_info(conn);
  response r;
  if (std::strcmp(ri->request_uri, "*") == 0) {
    r.code = 400;
    r.body = json_error("the request target * (asterisk-form) names no resource: this server "
                        "answers no OPTIONS request; ask for a path",
                        nullptr);
  } else {
    r = host_refused("the host of an absolute-form target");  // another port
  }
  send(conn, r, ri->request_method && std::strcmp(ri->request_method, "HEAD") == 0);
}

inline void server::wait_started() {
  if (started_.load(std::memory_order_acquire)) return;
  std::unique_lock<std::mutex> lock(stop_mutex_);
  stop_cv_.wait(lock, [this] { return started_.load(std::memory_order_acquire); });
}

inline void server::mark_started() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    started_.store(true, std::memory_order_release);
  }
  stop_cv_.notify_all();
}

inline bool server::host_allowed(const char* host) const {
  if (!host) return false;  // HTTP/1.0 without Host: refused, it cannot be checked
  const std::string h = host;
  const std::string p = ":" + std::to_string(port_);
  for (const std::string& name : {std::string("127.0.0.1"), std::string("localhost"), opts_.host})
    if (iequals(h, name + p) || (port_ == 80 && iequals(h, name))) return true;
  return false;
}

inline bool server::origin_allowed(const char* origin) const {
  if (!origin) return true;  // not a browser's cross-origin request
  const std::string o = origin;
  if (o.compare(0, 7, "http://") != 0) return false;
  return host_allowed(o.c_str() + 7);
}

inline void server::follow_exec() {
  std::string why;
  if (std::unique_ptr<rd::segment> next = seg_->successor(&why)) {
    seg_ = std::move(next);
    std::lock_guard<std::mutex> lock(baseline_mutex_);
    baseline_.reset();
  }
}

inline bool server::take(rd::snapshot* s, std::string* error, part what) {
  follow_exec();
  if (what == part::head)
    *s = seg_->head();
  else
    seg_->take(s);
  if (s->ok()) return true;
  *error = s->error;
  return false;
}

inline std::string server::program() {
  std::lock_guard<std::mutex> lock(seg_mutex_);
  rd::snapshot s;
  std::string err;
  return take(&s, &err, part::head) ? s.program : std::string();
}

inline server::response server::snapshot_response() {
  response r;
  std::lock_guard<std::mutex> lock(snapshot_mutex_);
  rd::snapshot& s = sample_snapshot_;
  std::string err;
  bool taken, alive = true;
  {
    std::lock_guard<std::mutex> seg_lock(seg_mutex_);
    taken = take(&s, &err);
    if (!taken) alive = seg_->process_alive();
  }
  if (taken) {
    // Room for a sample as large as the last one and a little more, so that the JSON of 4,000
    // threads (a megabyte) is not grown by doubling, copied and faulted in four times over.
    r.body.reserve(last_good_.size() + last_good_.size() / 16);
    append_json(r.body, s);
    last_good_ = r.body;
  } else if (!last_good_.empty() && !alive) {
    r.body = last_good_;  // the process is gone and its segment went with it: the last state
  } else {
    r.code = 503;
    r.body = json_error("cannot read the segment: " + err, nullptr);
  }
  return r;
}

inline std::shared_ptr<const std::string> server::sample(std::uint64_t tick, std::uint64_t slack) {
  std::lock_guard<std::mutex> lock(sample_mutex_);
  if (sample_json_ && sample_tick_ + slack >= tick) return sample_json_;  // recent enough
  response r = snapshot_response();
  if (r.code != 200) return nullptr;
  sample_tick_ = tick;
  sample_json_ = std::make_shared<const std::string>(std::move(r.body));
  return sample_json_;
}

inline bool server::take_or_503(rd::snapshot* s, response* r, bool* writable, part what) {
  std::lock_guard<std::mutex> lock(seg_mutex_);
  std::string err;
  if (take(s, &err, what)) {
    if (writable) *writable = seg_->writable();
    return true;
  }
  r->code = 503;
  r->body = json_error("cannot read the segment: " + err, nullptr);
  return false;
}

// The query fields a path takes (query_var's names), or nullptr for a path whose query is not
// read (the page's files, /healthz, /api/options, /api/baseline).
inline const std::initializer_list<const char*>* query_fields_of(const std::string& path) {
  static const std::initializer_list<const char*> stream = {"interval_ms"},
                                                  history = {"seconds"},
                                                  snapshot = {"since", "if_none"},
                                                  metrics = {"by"};
  if (path == "/api/stream") return &stream;
  if (path == "/api/history") return &history;
  if (path == "/api/snapshot") return &snapshot;
  if (path == "/metrics") return &metrics;
  return nullptr;
}

// Whether every field of `query` is one of `names`, given once (names match as in query_var: in
// any case, undecoded; empty fields, as in `a=1&&b=2` or a trailing `&`, are no fields). Else the
// 400's message and field: a misspelt field (`?second=5`) silently gave the default, and a
// repeated one (`?by=thread&by=class`) its first value.
inline bool query_fields_ok(const char* query, const std::initializer_list<const char*>& names,
                            std::string* message, std::string* field) {
  if (!query) return true;
  std::vector<bool> seen(names.size());
  for (const char* p = query;;) {
    const std::size_t len = std::strcspn(p, "&");
    const std::size_t name_len = std::min(len, std::strcspn(p, "="));
    if (len > 0) {
      std::size_t i = 0;
      for (const char* n : names) {
        if (std::strlen(n) == name_len && strncasecmp(p, n, name_len) == 0) break;
        ++i;
      }
      if (i < names.size() && seen[i]) {
        *field = names.begin()[i];
        *message = *field + " is given more than once; give it once";
        return false;
      }
      if (i == names.size()) {
        const std::size_t kShown = 64;  // of a field name as sent
        field->assign(p, std::min(name_len, kShown));
        if (name_len > kShown) *field += "...";
        *message = "unknown query field '" + *field + "'; this path takes ";
        const char* sep = "";
        for (const char* n : names) {
          *message += sep + std::string(n);
          sep = " and ";
        }
        return false;
      }
      seen[i] = true;
    }
    if (p[len] == '\0') return true;
    p += len + 1;
  }
}

inline server::response server::options_response() {
  response r;
  rd::snapshot s;
  bool writable = false;
  if (!take_or_503(&s, &r, &writable, part::head)) return r;
  {
    writer w(r.body);  // scoped: its destructor trims r.body, before r is returned
    w.ch('{');
    json_field(w, "generation", s.generation, true);
    json_field(w, "validated_generation", s.validated_generation);
    json_field(w, "rejected", s.rejected);
    json_bool(w, "writable", writable && s.process_alive);  // as POST: 403, or 409 once gone
    w.raw(",\"options\":[");
    for (std::size_t i = 0; i < s.options.size(); ++i) {
      const rd::option_view& o = s.options[i];
      w.raw(i ? ",{\"name\":" : "{\"name\":");
      json_string(w, o.name);
      json_field(w, "requested", o.requested);
      json_field(w, "effective", o.effective);
      json_field(w, "min", o.min);
      json_field(w, "max", o.max);
      json_field(w, "default", o.default_value);
      json_bool(w, "live", o.live);
      json_bool(w, "bool", o.is_bool);
      json_option_doc(w, o.name);
      w.ch('}');
    }
    w.raw("]}");
  }
  return r;
}

inline int server::handle(mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  if (!ri) return 1;
  wait_started();
  const std::string method = ri->request_method ? ri->request_method : "";
  const bool head = method == "HEAD";
  response r;
  // An absolute-form target (RFC 9112 3.2.2, "http://127.0.0.1:PORT/path") names the server
  // itself: its authority is checked as a Host header would be, and the Host header is ignored.
  // civetweb passes it here only when its port is ours (see unmapped() for the rest).
  // Headers checked by their first copy alone (mg_get_header) must come once: two Hosts are a
  // 400 (RFC 9112 3.2), two differing Content-Lengths too (6.3: the first read the body short),
  // and a second Origin or Content-Type after an allowed first slipped past the POST checks.
  for (const char* once : {"Host", "Content-Length", "Origin", "Content-Type"}) {
    int seen = 0;
    for (int i = 0; i < ri->num_headers; ++i) seen += iequals(ri->http_headers[i].name, once);
    if (seen > 1) {
      r.code = 400;
      r.body = json_error("more than one " + std::string(once) + " header", nullptr);
      send(conn, r, head);
      return r.code;
    }
  }
  const char* target = ri->request_uri ? ri->request_uri : "";
  const char* host = mg_get_header(conn, "Host");
  std::string authority;
  if (target[0] != '/') {
    if (strncasecmp(target, "http://", 7) != 0) {
      r.code = 400;
      r.body = json_error("the request target must be a path or http://HOST:PORT/path", nullptr);
      send(conn, r, head);
      return r.code;
    }
    authority.assign(target + 7, std::strcspn(target + 7, "/"));
    host = authority.c_str();
  }
  if (!host_allowed(host)) {
    r = host_refused(authority.empty() ? "the Host header" : "the host of an absolute-form target");
    send(conn, r, head);
    return r.code;
  }
  // As sent: local_uri is civetweb's cleaned copy, "//healthz" and "/x/../healthz" made /healthz.
  const std::string path = ri->local_uri_raw ? ri->local_uri_raw : "";
  const bool get = method == "GET" || head;
  const char* allow = "GET, HEAD";
  const bool all = seg_ == nullptr;  // serve --all
  if (!all && path == "/api/options") {
    allow = "GET, HEAD, POST";
    if (method == "POST") {
      r = post_options(conn);
      send(conn, r, false);
      return r.code;
    }
  } else if (!all && path == "/api/baseline") {
    allow = "GET, HEAD, POST, DELETE";
    if (method == "POST" || method == "DELETE") {
      r = baseline_request(conn, method);
      send(conn, r, false);
      return r.code;
    }
  }
  const web_file* file = all ? nullptr : find_web_file(path);
  const bool known = path == "/" || path == "/healthz" || path == "/metrics" ||
                     (!all && (file || path == "/api/snapshot" || path == "/api/options" ||
                               path == "/api/stream" || path == "/favicon.ico" ||
                               path == "/api/history" || path == "/api/baseline"));
  struct big_turn {  // released when the answer has been sent
    server* s = nullptr;
    ~big_turn() {
      if (s) s->big_release();
    }
  } turn;
  if (get && (path == "/api/snapshot" || path == "/metrics" || path == "/api/history")) {
    if (!big_acquire()) {
      r.code = 503;
      r.body = json_error("busy: " + std::to_string(kMaxBigAnswers) +
                              " snapshots are being answered; try again",
                          nullptr);
      r.headers = "Retry-After: 1\r\n";
      send(conn, r, head);
      return r.code;
    }
    turn.s = this;
  }
  std::string query_error, query_field;
  if (!known) {
    r.code = 404;
    r.body = json_error("no such endpoint: " + path +
                            (all ? " (memlive serve --all answers /metrics and /healthz)" : ""),
                        nullptr);
  } else if (!get) {
    r.code = 405;
    r.body = json_error(
        "method " + method + " not allowed on " + path + " (allowed: " + allow + ")", nullptr);
    r.headers = std::string("Allow: ") + allow + "\r\n";
  } else if (const auto* fields = query_fields_of(path);
             fields && !query_fields_ok(ri->query_string, *fields, &query_error, &query_field)) {
    r.code = 400;
    r.body = json_error(query_error, &query_field);
  } else if (path == "/api/stream") {
    stream(conn, ri->query_string, head);
    return 200;
  } else if (all && path == "/metrics") {
    r = metrics_all_response(ri->query_string);
  } else if (all && path == "/") {
    r.type = "text/html; charset=utf-8";
    r.body = "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             "<title>memlive</title></head>\n<body><h1>memlive</h1>\n"
             "<p>The counters of every profiled process of this machine, for Prometheus: "
             "<a href=\"/metrics\">/metrics</a> (a series per thread and size class), "
             "<a href=\"/metrics?by=class\">/metrics?by=class</a> (per size class). "
             "The live page is <code>memlive serve --pid N</code>'s.</p>\n</body></html>\n";
  } else if (path == "/healthz") {
    writer w(r.body);
    w.raw("{\"ok\":true");
    if (all) {
      w.raw(",\"all\":true");
    } else {
      json_field(w, "pid", pid_);
      bool alive = false;
      {
        // As the snapshot's "alive", and so after an exec the new image's: the old image's
        // segment reads as not alive from the exec on.
        std::lock_guard<std::mutex> lock(seg_mutex_);
        follow_exec();
        alive = seg_->process_alive();
      }
      json_bool(w, "alive", alive);
    }
    json_field(w, "uptime_ms", steady_ms() - started_ms_);
    w.raw(",\"version\":\"");
    w.raw(version_string());
    w.raw("\"}");
  } else if (path == "/api/snapshot" && ri->query_string) {
    r = since_response(ri->query_string);
  } else if (path == "/api/history") {
    r = history_response(ri->query_string);
  } else if (path == "/api/baseline") {
    r = baseline_request(conn, "GET");
  } else if (path == "/api/snapshot") {
    r = snapshot_response();
  } else if (path == "/metrics") {
    r = metrics_response(ri->query_string);
  } else if (path == "/api/options") {
    r = options_response();
  } else if (path == "/favicon.ico") {
    r.code = 204;
  } else if (file) {
    r.type = file->type;
    r.static_body = file->data;
    r.static_size = file->size;
    // The page runs only what this server sends: no inline script, nothing from elsewhere.
    r.headers = "Content-Security-Policy: default-src 'self'; img-src 'self' data: blob:; "
                "style-src 'self'; frame-ancestors 'none'\r\n";
  } else {  // "/" without an embedded page
    r.type = "text/html; charset=utf-8";
    r.body =
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<title>memlive</title></head>\n<body><h1>memlive</h1>\n"
        "<p>This build has no embedded page: build with the memlive::memlive CMake target, "
        "which generates memlive_web_assets.h from web/. The data is here: "
        "<a href=\"/api/snapshot\">/api/snapshot</a> (JSON), "
        "<a href=\"/metrics\">/metrics</a> (Prometheus).</p>\n</body></html>\n";
  }
  send(conn, r, head);
  return r.code;
}

inline bool server::big_acquire() {
  std::unique_lock<std::mutex> lock(big_mutex_);
  if (!big_cv_.wait_for(lock, std::chrono::milliseconds(kBigAnswerWaitMs),
                        [&] { return big_answers_ < kMaxBigAnswers || stopping_.load(); }) ||
      stopping_.load())
    return false;
  ++big_answers_;
  return true;
}

inline void server::big_release() {
  {
    std::lock_guard<std::mutex> lock(big_mutex_);
    --big_answers_;
  }
  big_cv_.notify_one();
}

// The checks every POST shares (Origin, Content-Type, length, size cap), then the body. On
// success the response's code is 0; else it is the error to send.
inline server::response server::read_json_body(mg_connection* conn, std::string* body) {
  const mg_request_info* ri = mg_get_request_info(conn);
  response r;
  r.code = 0;
  auto error = [&](int code, const std::string& msg) {
    r.code = code;
    r.body = json_error(msg, nullptr);
    return r;
  };
  if (!origin_allowed(mg_get_header(conn, "Origin")))
    return error(403, "cross-origin requests may not change the server's state");
  // application/json, in any case, then nothing or parameters: "; charset=utf-8".
  const char* type = mg_get_header(conn, "Content-Type");
  const char* rest = type && strncasecmp(type, "application/json", 16) == 0 ? type + 16 : nullptr;
  while (rest && (*rest == ' ' || *rest == '\t')) ++rest;
  if (!rest || (*rest != '\0' && *rest != ';'))
    return error(415, "the body must be sent as Content-Type: application/json");
  const char* te = mg_get_header(conn, "Transfer-Encoding");
  if (ri->content_length > static_cast<long long>(kMaxBody))
    return error(413, "the body is larger than " + std::to_string(kMaxBody) + " bytes");
  if (ri->content_length < 0 && !(te && iequals(te, "chunked")))
    return error(411, "a Content-Length is required");
  // A byte at a time: mg_read returns only once it has filled its buffer (or the body ended), so a
  // larger read would wait for the whole of it before the deadline could be checked. The bytes
  // that came with the headers are copied from civetweb's buffer; only the rest costs a recv each.
  const std::uint64_t deadline = steady_ms() + kBodyDeadlineMs;
  for (;;) {
    char c;
    const int n = mg_read(conn, &c, 1);
    // A read that waited civetweb's request_timeout_ms (kBodyDeadlineMs) in vain returns what
    // the client's end of the body returns: past the deadline it is the timeout.
    const bool late = steady_ms() >= deadline;
    if (n <= 0 && !late) break;  // the client shut down its side: the body ended
    if (late)
      return error(408, "the body did not arrive within " + std::to_string(kBodyDeadlineMs / 1000) +
                            " s (" + std::to_string(body->size()) + " bytes of it did)");
    body->push_back(c);
    if (body->size() > kMaxBody)
      return error(413, "the body is larger than " + std::to_string(kMaxBody) + " bytes");
  }
  if (ri->content_length >= 0 && body->size() < static_cast<std::size_t>(ri->content_length))
    return error(400, "the body ended after " + std::to_string(body->size()) + " of the " +
                          std::to_string(ri->content_length) + " bytes its Content-Length says");
  return r;
}

inline server::response server::post_options(mg_connection* conn) {
  response r;
  r.code = 400;
  auto error = [&](int code, const std::string& msg, const std::string* field) {
    r.code = code;
    r.body = json_error(msg, field);
    return r;
  };
  std::string body;
  if (response e = read_json_body(conn, &body); e.code != 0) return e;
  // Checked and stored under one lock: two POSTs cannot interleave their values.
  std::lock_guard<std::mutex> lock(seg_mutex_);
  rd::snapshot s;
  std::string err;
  if (!take(&s, &err, part::head)) return error(503, "cannot read the segment: " + err, nullptr);
  if (!seg_->writable())
    return error(403, "the segment is read-only to this server (another user's process?)", nullptr);
  if (!s.process_alive) return error(409, "the process is gone: nothing would apply", nullptr);
  options_request req = check_options_body(body, s.options);
  if (!req.ok()) return error(400, req.error, req.has_field ? &req.field : nullptr);
  std::uint64_t generation = s.generation;
  for (std::size_t i = 0; i < req.values.size(); ++i) {
    std::uint64_t g = 0;
    if (!seg_->set_option(req.values[i].name, req.values[i].value, &err, &g))
      return error(i ? 500 : 409, err + (i ? " (the options before it were stored)" : ""),
                   &req.values[i].name);
    if (g > generation) generation = g;
  }
  r.code = 200;
  {
    writer w(r.body);
    w.raw("{\"ok\":true");
    json_field(w, "generation", generation);
    w.raw(",\"applied\":{");
    for (std::size_t i = 0; i < req.values.size(); ++i) {
      if (i) w.ch(',');
      json_string(w, req.values[i].name);
      w.ch(':');
      w.num(req.values[i].value);
    }
    w.raw("}}");
  }
  return r;
}

// The value of `name` in a query string as mg_get_var finds it (the first field with that name,
// in any case; decoded as a form), or -1 when absent, -2 when it does not fit `size`. A field
// without '=' (`?by`) has the empty value, as `?by=`: mg_get_var skips it, and the request got
// the default where `?by=` got 400. A value that decodes to a NUL byte (`%00`) counts as too
// long: read as a C string it would end there, and `seconds=1%00junk` would pass for 1.
inline int query_var(const char* query, const char* name, char* value, std::size_t size) {
  value[0] = '\0';
  if (!query) return -1;
  const std::size_t len = std::strlen(name);
  for (const char* p = query;; ++p) {
    const char* end = p + std::strcspn(p, "&");
    const char* eq = static_cast<const char*>(std::memchr(p, '=', std::size_t(end - p)));
    if (std::size_t((eq ? eq : end) - p) == len && strncasecmp(p, name, len) == 0) {
      if (!eq) return 0;
      const int n = mg_url_decode(eq + 1, static_cast<int>(end - eq - 1), value,
                                  static_cast<int>(size), 1);
      return n >= 0 && std::strlen(value) == static_cast<std::size_t>(n) ? n : -2;
    }
    if (*end == '\0') return -1;
    p = end;
  }
}

// The start of the 400 for query value `name`, whose query_var() gave `n`: an empty one (`?by`,
// `?by=`) is named as such, not as a wrong value.
inline std::string query_problem(const std::string& name, int n) {
  return n == 0 ? name + " has no value; it must be " : name + " must be ";
}

// GET /api/history?seconds=N.
inline server::response server::history_response(const char* query) {
  response r;
  const std::int64_t kept = static_cast<std::int64_t>(history_seconds());
  std::int64_t seconds = std::min<std::int64_t>(60, kept);
  char value[32];
  const int n = query_var(query, "seconds", value, sizeof value);
  if (n >= 0 || n == -2) {  // present (maybe empty), or too long to be a number
    std::int64_t v = 0;
    if (n < 0 || !parse_int(value, &v) || v < 1 || v > kept) {
      r.code = 400;
      const std::string field = "seconds";
      r.body = json_error(query_problem(field, n) + "a whole number from 1 to " +
                              std::to_string(kept) + " (the history kept at this stream interval)",
                          &field);
      return r;
    }
    seconds = v;
  }
  const std::uint64_t now = steady_ms();
  const std::uint64_t span = std::uint64_t(seconds) * 1000;  // seconds >= 1 here
  const std::uint64_t from = now > span ? now - span : 0;
  std::vector<std::shared_ptr<const std::string>> picked;
  {
    std::lock_guard<std::mutex> lock(history_mutex_);
    for (const history_entry& e : history_)
      if (e.ms >= from) picked.push_back(e.json);
  }
  std::size_t bytes = 2;
  for (const auto& j : picked) bytes += j->size() + 1;
  r.body.reserve(bytes);
  r.body += '[';
  for (std::size_t i = 0; i < picked.size(); ++i) {
    if (i) r.body += ',';
    r.body += *picked[i];
  }
  r.body += ']';
  return r;
}

// The sampler thread: one shared sample per history step into the history ring.
inline void server::sampler() {
  const own_thread_scope own("memlive-hist");
  const std::uint64_t step = history_step_ms();
  std::shared_ptr<const std::string> last;
  while (!stopping_.load()) {
    const std::uint64_t tick = steady_ms() / step * step;
    std::shared_ptr<const std::string> json;
    try {
      // With a stream client, the sample its last tick built (less than one step old) serves
      // the history too, instead of one more snapshot and JSON.
      json = sample(tick, step - 1);
      if (json && json != last) {
        last = json;
        // A sample's string was grown by doubling: up to twice its size is allocated. The ring
        // keeps a copy of exactly its size when that saves more than an eighth.
        std::shared_ptr<const std::string> kept = json;
        if (json->capacity() > json->size() + json->size() / 8)
          kept = std::make_shared<const std::string>(*json);
        std::lock_guard<std::mutex> lock(history_mutex_);
        history_.push_back({steady_ms(), kept});
        history_bytes_ += kept->capacity();
        while (history_.size() > kHistorySamples ||
               (history_bytes_ > opts_.history_bytes && history_.size() > 1)) {
          history_bytes_ -= history_.front().json->capacity();
          history_.pop_front();
        }
      }
    } catch (const std::exception&) {  // bad_alloc: skip this sample
    }
    std::unique_lock<std::mutex> lock(stop_mutex_);
    const auto wake = std::chrono::steady_clock::time_point(std::chrono::milliseconds(tick + step));
    if (stop_cv_.wait_until(lock, wake, [this] { return stopping_.load(); })) return;
  }
}

// POST (record, or clear with {"clear":true}), DELETE (clear) and GET /api/baseline.
inline server::response server::baseline_request(mg_connection* conn, const std::string& method) {
  response r;
  bool clear = method == "DELETE";
  if (method == "POST") {
    std::string body;
    if (response e = read_json_body(conn, &body); e.code != 0) return e;
    if (body.find_first_not_of(" \t\r\n") != std::string::npos) {
      std::string twice;  // {"clear":false,"clear":true}: refused, as /api/options refuses it
      const nlohmann::json j = detail::parse_json_body(body, &twice);
      const std::string shape = "the body must be empty, {} or {\"clear\": true|false}";
      std::string why, field;  // the problem, and the entry refused (if named)
      bool named = false;  // false: the body as a whole
      if (j.is_discarded()) {
        why = "malformed JSON; " + shape;
      } else if (!j.is_object()) {
        why = shape;
      } else if (!twice.empty()) {
        why = "'" + twice + "' given twice; nothing done";
        field = twice;
        named = true;
      } else {
        for (auto it = j.begin(); it != j.end() && why.empty(); ++it) {
          field = it.key();
          named = true;
          if (field != "clear")
            why = "unknown field '" + field + "'; " + shape;
          else if (!it.value().is_boolean())
            why = "clear must be true or false";
        }
        if (why.empty() && j.contains("clear")) clear = j["clear"].get<bool>();
      }
      if (!why.empty()) {
        r.code = 400;
        r.body = json_error(why, named ? &field : nullptr);
        return r;
      }
    }
  } else if (method == "DELETE" && !origin_allowed(mg_get_header(conn, "Origin"))) {
    r.code = 403;
    r.body = json_error("cross-origin requests may not change the server's state", nullptr);
    return r;
  }
  std::uint64_t taken = 0;
  bool set = false;
  if (method == "GET") {
    std::lock_guard<std::mutex> lock(baseline_mutex_);
    set = baseline_ != nullptr;
    taken = set ? baseline_->taken_ns : 0;
  } else if (clear) {
    std::lock_guard<std::mutex> lock(baseline_mutex_);
    baseline_.reset();
  } else {
    auto s = std::make_unique<rd::snapshot>();
    if (!take_or_503(s.get(), &r)) return r;
    set = true;
    taken = s->taken_ns;
    std::lock_guard<std::mutex> lock(baseline_mutex_);
    baseline_ = std::move(s);
  }
  {
    writer w(r.body);  // scoped: its destructor trims r.body, before r is returned
    w.raw(method == "GET" ? "{\"baseline\":" : "{\"ok\":true,\"baseline\":");
    w.raw(set ? "true" : "false");
    json_field(w, "taken_ns", taken);
    w.ch('}');
  }
  return r;
}

// A message made safe for one comment line of a Prometheus text: control bytes become '?'.
inline std::string printable_comment(std::string text) {
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return text;
}

// /metrics's ?by: false (thread, the default) or true (class); on a bad value, *code is 400 and
// *body says why.
inline bool metrics_by_class(const char* query, int* code, std::string* body) {
  char value[16];
  const int n = query_var(query, "by", value, sizeof value);
  const bool by_class = n >= 0 && std::strcmp(value, "class") == 0;
  const bool by_thread = n == -1 || (n >= 0 && std::strcmp(value, "thread") == 0);
  if (!by_class && !by_thread) {
    const std::string field = "by";
    *code = 400;
    *body = json_error(query_problem(field, n) + "'thread' or 'class'", &field);
  }
  return by_class;
}

// serve --all: GET /metrics of every running process in all_dir_, ?by as below.
inline server::response server::metrics_all_response(const char* query) {
  response r;
  const bool by_class = metrics_by_class(query, &r.code, &r.body);
  if (r.code != 200) return r;
  const all_snapshots all = take_all(all_dir_);
  if (!all.dir_error.empty()) {
    r.code = 503;
    r.body = json_error("cannot read " + all.dir_error, nullptr);
    return r;
  }
  // Processes that cannot be read are named in comment lines, which scrapers skip.
  std::string skipped;
  for (const auto& f : all.failed)
    skipped += "# memlive: left out: " + printable_comment(f.second) + "\n";
  const std::vector<rd::snapshot>& shots = all.shots;
  r.type = kPrometheusContentType;
  std::vector<prom_source> sources;
  sources.reserve(shots.size());
  if (by_class) {
    std::lock_guard<std::mutex> lock(floor_mutex_);
    std::map<std::pair<std::int32_t, std::uint64_t>, rd::counter_matrix> next;
    for (const rd::snapshot& s : shots) {
      const auto key = std::make_pair(s.pid, s.start_ns);  // a new program or pid starts anew
      const auto old = floors_.find(key);
      rd::counter_matrix& floor = next[key];
      if (old != floors_.end()) floor = old->second;
      sources.push_back(prom_by_class(s, &floor));
    }
    floors_ = std::move(next);  // the processes gone are forgotten
  } else {
    for (const rd::snapshot& s : shots) sources.push_back(prom_by_thread(s));
  }
  r.body = skipped + prom_text(sources, !by_class) + prometheus_unreadable(all.failed.size());
  return r;
}

// GET /api/snapshot?since=baseline (a query without `since`: the plain snapshot).
// GET /metrics, ?by=thread (the default) or ?by=class.
inline server::response server::metrics_response(const char* query) {
  response r;
  const bool by_class = metrics_by_class(query, &r.code, &r.body);
  if (r.code != 200) return r;
  rd::snapshot s;
  if (!take_or_503(&s, &r)) return r;
  r.type = kPrometheusContentType;
  if (!by_class) {
    r.body = to_prometheus(s);
    return r;
  }
  std::lock_guard<std::mutex> lock(floor_mutex_);
  if (floor_start_ns_ != s.start_ns) {  // the program the process exec'd counts from zero
    floor_ = rd::counter_matrix{};
    floor_start_ns_ = s.start_ns;
  }
  r.body = to_prometheus_by_class(s, &floor_);
  return r;
}

inline server::response server::since_response(const char* query) {
  char value[32];
  response r;
  // &if_none=plain: no baseline is not an error but the plain snapshot, marked by a
  // baseline_taken_ns of 0. A client cannot avoid the 409 by asking GET /api/baseline first:
  // another client may clear it between the two requests. Checked with or without `since`
  // (without, `plain` changes nothing): any other value is a 400 either way.
  const int m = query_var(query, "if_none", value, sizeof value);
  if (m != -1 && (m < 0 || std::strcmp(value, "plain") != 0)) {
    const std::string if_none = "if_none";
    r.code = 400;
    r.body = json_error(query_problem(if_none, m) + "'plain'", &if_none);
    return r;
  }
  const bool plain_if_none = m != -1;
  const int n = query_var(query, "since", value, sizeof value);
  if (n == -1) return snapshot_response();
  const std::string field = "since";
  if (n < 0 || std::strcmp(value, "baseline") != 0) {
    r.code = 400;
    r.body = json_error(query_problem(field, n) + "'baseline'", &field);
    return r;
  }
  auto marked = [](response& a, std::uint64_t taken_ns) {
    if (a.code != 200) return;
    a.body.pop_back();  // the closing brace
    writer w(a.body);
    json_field(w, "baseline_taken_ns", taken_ns);
    w.ch('}');
  };
  rd::snapshot base;
  bool set = false;
  {
    std::lock_guard<std::mutex> lock(baseline_mutex_);
    set = baseline_ != nullptr;
    if (set) base = *baseline_;
  }
  if (!set && plain_if_none) {  // (not under baseline_mutex_: take() locks it under seg_mutex_)
    r = snapshot_response();
    marked(r, 0);
    return r;
  }
  if (!set) {
    r.code = 409;
    r.body = json_error("no baseline is set: POST /api/baseline first", &field);
    return r;
  }
  rd::snapshot now;
  if (!take_or_503(&now, &r)) return r;
  if (now.start_ns != base.start_ns) {  // the process called exec since (take() cleared it)
    if (plain_if_none) {
      append_json(r.body, now);
      marked(r, 0);
      return r;
    }
    r.code = 409;
    r.body = json_error("the baseline counted the program the process ran before its exec: "
                        "POST /api/baseline again",
                        &field);
    return r;
  }
  append_json(r.body, since_baseline(now, base));
  marked(r, base.taken_ns);
  return r;
}

// One SSE client: holds this civetweb worker thread until the client goes away or stop().
inline void server::stream(mg_connection* conn, const char* query, bool head_only) {
  long long interval = opts_.stream_interval_ms;
  char value[32];
  const int n = query_var(query, "interval_ms", value, sizeof value);
  if (n >= 0 || n == -2) {  // present (maybe empty), or too long to be a number
    std::int64_t v = 0;
    if (n < 0 || !parse_int(value, &v) || v < kMinStreamMs || v > kMaxStreamMs) {
      response r;
      r.code = 400;
      const std::string field = "interval_ms";
      r.body = json_error(query_problem(field, n) + "a whole number of milliseconds from " +
                              std::to_string(kMinStreamMs) + " to " + std::to_string(kMaxStreamMs),
                          &field);
      send(conn, r, head_only);
      return;
    }
    interval = v;
  }
  if (streams_.fetch_add(1) >= kMaxStreams) {
    streams_.fetch_sub(1);
    response r;
    r.code = 503;
    r.headers = "Retry-After: 5\r\n";
    r.body = json_error("too many streams: " + std::to_string(kMaxStreams) +
                        " clients are connected to /api/stream already",
                        nullptr);
    send(conn, r, head_only);
    return;
  }
  struct leave {
    std::atomic<int>& n;
    ~leave() { n.fetch_sub(1); }
  } left{streams_};
  // No Content-Length: the body is the stream. HEAD gets these same headers (RFC 9110 9.3.2),
  // and no body.
  std::string head =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n"
      "X-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n";
  if (!head_only) head += ": memlive stream, interval_ms=" + std::to_string(interval) + "\n\n";
  if (mg_write(conn, head.data(), head.size()) <= 0 || head_only) return;
  const auto step = static_cast<std::uint64_t>(interval);
  std::uint64_t tick = steady_ms() / step * step;  // the first event at once
  while (!stopping_.load()) {
    std::shared_ptr<const std::string> json = sample(tick);
    bool ok;
    if (json) {
      ok = mg_write(conn, "data: ", 6) > 0 && mg_write(conn, json->data(), json->size()) > 0 &&
           mg_write(conn, "\n\n", 2) > 0;
    } else {
      const std::string e = "event: error\ndata: {\"error\":\"cannot read the segment\"}\n\n";
      ok = mg_write(conn, e.data(), e.size()) > 0;
    }
    if (!ok) return;  // the client went away
    tick = (steady_ms() / step + 1) * step;
    // Between ticks further apart than kStreamHeartbeatMs, a comment line every so often: a
    // client that went away makes the second one fail, and its stream slot and worker come back
    // within two heartbeats instead of at the next tick, up to a minute later.
    for (;;) {
      const std::uint64_t now = steady_ms();
      if (now >= tick) break;
      const std::uint64_t until =
          tick - now > kStreamHeartbeatMs ? now + kStreamHeartbeatMs : tick;
      {
        std::unique_lock<std::mutex> lock(stop_mutex_);
        const auto wake = std::chrono::steady_clock::time_point(std::chrono::milliseconds(until));
        if (stop_cv_.wait_until(lock, wake, [this] { return stopping_.load(); })) return;
      }
      if (until < tick && mg_write(conn, ":\n\n", 3) <= 0) return;
    }
  }
}

// A dotted IPv4 address, or "localhost" in any case (host names are case-insensitive). A NUL in
// the string is refused: "127.0.0.1\0junk" was read as 127.0.0.1.
inline int parse_ipv4(const std::string& host, in_addr* out) {
  if (host.find('\0') != std::string::npos) return 0;
  return inet_pton(AF_INET, iequals(host, "localhost") ? "127.0.0.1" : host.c_str(), out) == 1;
}

// Why `host` cannot be the one address a server listens on, or "" (and *out set) when it can:
// server::start's check, which `memlive run` makes before it starts the program.
inline std::string host_problem(const std::string& host, in_addr* out) {
  if (!parse_ipv4(host, out)) return "host '" + host + "' is not an IPv4 address (or localhost)";
  if (out->s_addr == htonl(INADDR_ANY))
    return "host 0.0.0.0 (every interface) is refused: requests must name the address in their "
           "Host header, so give one address of this machine (or 127.0.0.1)";
  // Multicast, reserved and broadcast (224.0.0.0 and up): a server binds there, and says it
  // serves, but no connection ever reaches it.
  if (ntohl(out->s_addr) >= 0xe0000000u)
    return "host " + host + " is a multicast or broadcast address, which no connection "
           "reaches: give one address of this machine (or 127.0.0.1)";
  return "";
}

// The line to print when `host` is not a loopback address (127.0.0.0/8), else "": the server
// then answers other machines, which can read the counters and change the thresholds.
inline std::string exposure_warning(const std::string& host) {
  in_addr a{};
  if (!parse_ipv4(host, &a) || (ntohl(a.s_addr) >> 24) == 127) return "";
  return "memlive: warning: listening on " + host +
         ", not a loopback address: anyone who can reach it can read these counters and change "
         "the thresholds (there is no authentication)\n";
}

// This process's TCP descriptors whose local address is `host`:`port`: those that listen there
// (civetweb keeps them to itself), or with `listening` false the connections accepted there.
inline std::vector<int> server_sockets(const std::string& host, int port,
                                       bool listening = true) {
  std::vector<int> fds;
  in_addr want{};
  if (!parse_ipv4(host, &want)) return fds;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return fds;
  while (const dirent* e = readdir(d)) {
    int fd = -1;
    const char* end = e->d_name + std::strlen(e->d_name);
    if (std::from_chars(e->d_name, end, fd).ptr != end || fd < 0 || fd == dirfd(d)) continue;
    int accepts = 0, type = 0;
    socklen_t n = sizeof accepts, tn = sizeof type;
    sockaddr_in sa{};
    socklen_t len = sizeof sa;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepts, &n) == 0 &&
        (accepts != 0) == listening && getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tn) == 0 &&
        type == SOCK_STREAM &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0 && sa.sin_family == AF_INET &&
        ntohs(sa.sin_port) == port && sa.sin_addr.s_addr == want.s_addr)
      fds.push_back(fd);
  }
  closedir(d);
  return fds;
}

// Why could host:port not be bound? errno of a test bind (0 if it binds now).
inline int probe_bind(const in_addr& addr, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  sa.sin_addr = addr;
  const int e = bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0 ? 0 : errno;
  close(fd);
  return e;
}

// Why bind() failed with EACCES: the port is privileged. Also `memlive run`'s message, which
// checks the port before it starts the program.
inline std::string listen_denied(const std::string& host, int port) {
  return "cannot listen on " + host + ":" + std::to_string(port) +
         ": permission denied (ports below 1024 need privileges)";
}

// Marks a connection whose request has been answered (see memlive_connection_close).
inline char answered_mark;

extern "C" inline int memlive_begin_request(mg_connection* conn) {
  mg_set_user_connection_data(conn, &answered_mark);
  const mg_request_info* ri = mg_get_request_info(conn);
  auto* self = ri ? static_cast<server*>(ri->user_data) : nullptr;
  if (!self) return 0;
  int code;
  try {
    code = self->handle(conn);
  } catch (...) {  // std::bad_alloc and the like: answer, never unwind into C
    static const char k[] =
        "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    mg_write(conn, k, sizeof k - 1);
    code = 500;
  }
  // The worker may wait long for its next request: what it kept for reuse from building this
  // answer goes back (with livealloc as the program's malloc; else nothing to do). Without it, 24
  // workers that had each answered a few snapshots held 75 MB between them.
  livealloc::trim_thread();
  return code;
}
extern "C" inline int memlive_http_error(mg_connection* conn, int status, const char* why) {
  mg_set_user_connection_data(conn, &answered_mark);
  try {
    static_cast<server*>(mg_get_user_data(mg_get_context(conn)))->refused(conn, status, why);
    return 0;  // answered
  } catch (...) {
    return 1;  // no memory for ours: civetweb's plain text
  }
}
// civetweb calls this before it closes a connection (its user data is reset for each one): a
// request it read (a method and target) that neither begin_request nor http_error answered was
// dropped by civetweb, and gets its JSON error now.
extern "C" inline void memlive_connection_close(const mg_connection* conn) {
  const mg_request_info* ri = mg_get_request_info(conn);
  if (mg_get_user_connection_data(conn) || !ri || !ri->request_method || !ri->request_uri) return;
  try {
    static_cast<server*>(ri->user_data)->unmapped(const_cast<mg_connection*>(conn));
  } catch (...) {  // no memory: closed without an answer, as before
  }
}
extern "C" inline int memlive_log_message(const mg_connection*, const char*) {
  return 1;  // civetweb's own logging off: errors reach the caller through start()'s status
}
// Every civetweb thread (master, workers) is memlive's own: named, not counted by the hooks,
// registered so that snapshots label it. Its handle is the thread pointer exit_thread gets back.
extern "C" inline void* memlive_init_thread(const mg_context* ctx, int) {
  // Each civetweb thread has just set SIGPIPE to SIG_IGN for the process (see server::start).
  static_cast<server*>(mg_get_user_data(ctx))->restore_sigpipe();
  return reinterpret_cast<void*>(own_thread_begin("memlive-http"));
}
extern "C" inline void memlive_exit_thread(const mg_context*, int, void* handle) {
  own_thread_end(reinterpret_cast<std::size_t>(handle));
}

inline status server::start(const options& o) {
  internal_scope scope;  // the server's memory is memlive's own, whichever thread starts it
  status st;
  auto fail = [&](start_error e, const std::string& msg) {
    st.error = e;
    st.message = msg;
    return st;
  };
  if (ctx_) return fail(start_error::already_running, "this server is running already");
  if (o.port < 0 || o.port > 65535)
    return fail(start_error::bad_options, "port " + std::to_string(o.port) + " is not 0..65535");
  if (o.stream_interval_ms < kMinStreamMs || o.stream_interval_ms > kMaxStreamMs)
    return fail(start_error::bad_options,
                "stream interval " + std::to_string(o.stream_interval_ms) + " ms is not " +
                    std::to_string(kMinStreamMs) + ".." + std::to_string(kMaxStreamMs));
  in_addr addr{};
  if (const std::string why = host_problem(o.host, &addr); !why.empty())
    return fail(start_error::bad_host, why);
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &addr, ip, sizeof ip);
  opts_ = o;
  bind_host_ = ip;
  const std::string ports = bind_host_ + ":" + std::to_string(o.port);
  // An absolute-form target reaches begin_request only with civetweb's "authentication domain"
  // check off (else its host must be "mydomain.com"); handle() checks its host instead.
  const char* config[] = {
      "listening_ports",   ports.c_str(), "num_threads", "24", "request_timeout_ms", "3000",
      "enable_keep_alive", "no",          "decode_url",  "no", "enable_auth_domain_check", "no",
      nullptr};
  mg_callbacks cb{};
  cb.begin_request = memlive_begin_request;
  cb.log_message = memlive_log_message;
  cb.http_error = memlive_http_error;
  cb.connection_close = memlive_connection_close;
  cb.init_thread = memlive_init_thread;
  cb.exit_thread = memlive_exit_thread;
  // civetweb sets SIGPIPE to SIG_IGN for the whole process, in mg_start2 and again in each of
  // its threads before it calls init_thread, and so for every program the process starts later
  // (an ignored signal stays ignored across exec). It sends with MSG_NOSIGNAL, so the program's
  // own disposition goes back: here, and in memlive_init_thread.
  sigaction(SIGPIPE, nullptr, &sigpipe_before_);
  mg_init_library(0);  // no TLS: Debian's civetweb cannot load OpenSSL 3
  stopping_ = false;
  started_ = false;
  char text[256] = {};
  mg_error_data err{};
  err.text = text;
  err.text_buffer_size = sizeof text;
  mg_init_data init{};
  init.callbacks = &cb;
  init.user_data = this;
  init.configuration_options = config;
  ctx_ = mg_start2(&init, &err);
  restore_sigpipe();
  if (!ctx_) {
    mg_exit_library();
    const int e = probe_bind(addr, o.port);
    if (e == EADDRINUSE)
      return fail(start_error::port_in_use,
                  "port " + std::to_string(o.port) + " on " + bind_host_ + " is in use");
    if (e == EADDRNOTAVAIL)
      return fail(start_error::bad_host,
                  "host " + bind_host_ + " is not an address of this machine");
    if (e == EACCES)
      return fail(start_error::permission, listen_denied(bind_host_, o.port));
    return fail(start_error::server, std::string("the HTTP server did not start: ") +
                                         (text[0] ? text : "unknown reason"));
  }
  mg_server_port sp[4] = {};
  if (mg_get_server_ports(ctx_, 4, sp) < 1) {
    stop();
    return fail(start_error::server, "the HTTP server reports no listening port");
  }
  port_ = sp[0].port;
  listen_fds_ = server_sockets(bind_host_, port_);
  started_ms_ = steady_ms();
  mark_started();
  try {
    if (seg_) sampler_ = std::thread(&server::sampler, this);  // serve --all keeps no history
  } catch (const std::system_error& e) {
    stop();
    return fail(start_error::server, std::string("no history thread: ") + e.what());
  }
  st.port = port_;
  return st;
}

inline void server::stop() {
  if (!ctx_) return;
  internal_scope scope;
  mark_started();  // a request still waiting for start() must not hold mg_stop() up
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (sampler_.joinable()) sampler_.join();
  // civetweb's accept thread polls its sockets with a 2 s quantum before it looks at its stop
  // flag. Shutting the listening sockets down wakes it at once (poll reports POLLHUP, which it
  // passes over until mg_stop() sets the flag a moment later) and resets the connections not
  // yet accepted. Through duplicates: the socket is the same, and the numbers stay ours while
  // civetweb closes its own. (Connecting to ourselves woke it too, but made connections.)
  std::vector<int> wake;
  for (const int fd : listen_fds_) {
    const int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (d >= 0) wake.push_back(d);
  }
  for (const int d : wake) (void)shutdown(d, SHUT_RDWR);
  mg_stop(ctx_);  // joins the workers; stream loops return at once on the flag
  for (const int d : wake) close(d);
  // A connection civetweb accepted as it stopped can stay open for good (connections made while
  // it stopped did, one in every few hundred stop()s): any left is closed here, now that none of
  // its threads runs. Only our server's connections have its address and port as their own end.
  if (port_ > 0)
    for (const int fd : server_sockets(bind_host_, port_, false)) close(fd);
  ctx_ = nullptr;
  port_ = 0;
  listen_fds_.clear();
  mg_exit_library();
}

// The listening descriptors of memlive::start()'s server, plus one (0: none). A fork child
// closes its copies at once, before the program can open other files under those numbers;
// only the forking thread runs there, so no lock.
inline std::atomic<int> g_listeners[4];
inline void close_listeners_in_fork_child() {
  for (std::atomic<int>& l : g_listeners)
    if (const int fd = l.exchange(0, std::memory_order_relaxed) - 1; fd >= 0) close(fd);
}

// The server of memlive::start() and the segment of take_snapshot().
struct global_server {
  std::mutex mutex;
  std::unique_ptr<server> srv;
  std::unique_ptr<rd::segment> self;  // this process's segment, for take_snapshot
  pid_t owner = 0;                    // the process srv and self were made in
  // The exit-time cleanup ran: the process is exiting, and start() serves no more.
  std::atomic<bool> closed{false};
  global_server() = default;
  global_server(const global_server&) = delete;
  global_server& operator=(const global_server&) = delete;
  // At exit, when the program never called stop(): the server stops, inside an internal_scope
  // like stop(), so that memlive's own frees are not counted either. Without the lock, as the
  // destructor this was: a fork child can find it held by a thread the fork did not copy. The
  // segment stays mapped for a take_snapshot() still to come (the exit unmaps it).
  // `closed` first, so that a start() from another thread while the server stops (up to about
  // a second) refuses rather than starting one that nothing would stop; the listeners are
  // forgotten before their sockets close, as in stop().
  void close_at_exit() {
    internal_scope scope;
    closed.store(true);
    forget_if_forked();
    std::unique_ptr<server> stopping = std::move(srv);
    publish_listeners();
    stopping.reset();
  }
  // A fork child has copies of srv and self but none of the server's threads: stopping or
  // destroying that server would join threads that do not exist (std::system_error, then an
  // abort at exit). The child lets go of it (the memory stays, a copy of the parent's) and of
  // self, which maps the parent's segment; then it can start a server of its own.
  void forget_if_forked() {
    if (owner == 0 || owner == getpid()) return;
    (void)srv.release();
    self.reset();
    owner = 0;
  }
  void publish_listeners() {
    const std::vector<int> none;
    const std::vector<int>& fds = srv ? srv->listening_fds() : none;
    for (std::size_t i = 0; i < std::size(g_listeners); ++i)
      g_listeners[i].store(i < fds.size() ? fds[i] + 1 : 0, std::memory_order_relaxed);
  }
};
// Never destroyed (built in static storage, as livealloc's own instance is), so that what runs
// after the exit-time cleanup (an atexit handler registered before memlive's first use, the
// destructor of a static built before it) still finds it whole: start() then says the process
// is exiting. (A destroyed one said "no telemetry segment ...: is it running with
// LIVEALLOC_PROFILE=1?" once livealloc had removed the segment's name at exit.)
inline global_server& global() {
  alignas(global_server) static unsigned char storage[sizeof(global_server)];
  static global_server* const g = new (storage) global_server;
  struct cleanup {
    ~cleanup() { g->close_at_exit(); }
  };
  static const cleanup at_exit;  // registered now: runs before the handlers registered earlier
  return *g;
}

inline constexpr const char* kExitingMessage =
    "the process is exiting: memlive's exit-time cleanup has run, which comes before the atexit "
    "handlers registered before memlive's first use and the destructors of statics built "
    "before it; ";

// What enable() says once livealloc's own exit handler (registered by an earlier enable() of the
// program) removed the segment's name: memlive's first use comes after it.
inline constexpr const char* kUnlinkedMessage =
    "the process is exiting: livealloc removed its telemetry segment's name at exit, in the "
    "handler the program's livealloc::telemetry::enable() registered, which runs before the "
    "atexit handlers registered before it; ";

// Why livealloc::telemetry::enable() failed, for start() and take_snapshot().
inline std::string enable_error(int e) {
  std::string m = std::string("livealloc telemetry could not be enabled: ") + std::strerror(e);
  const std::string path = "/dev/shm/livealloc." + std::to_string(getpid());
  if (e == EBUSY && la::table_name_mapped_here(path.c_str()))
    m += " (" + path + " is published by another copy of livealloc in this process, the " +
         "LD_PRELOAD library: start the program without LIVEALLOC_PROFILE=1, which `memlive " +
         "run` sets, for this copy to publish its own)";
  if (e == ENOENT)  // table_enable's answer once disable() took the name
    m += " (was livealloc::telemetry::disable() called? It removes the segment's name for good: "
         "a process publishes it once)";
  return m;
}

// memlive::start() with its lock held, inside an internal_scope.
inline status start_locked(global_server& g, const options& o) {
  status st;
  if (g.closed.load()) {
    st.error = start_error::exiting;
    st.message = std::string("memlive::start(): ") + kExitingMessage +
                 "call start() before exit() or the return from main";
    return st;
  }
  if (g.srv) {
    st.error = start_error::already_running;
    st.message = "memlive is serving already on port " + std::to_string(g.srv->port());
    return st;
  }
  if (const int e = livealloc::telemetry::enable(); e != 0) {
    st.error = e == ECANCELED ? start_error::exiting : start_error::telemetry;
    st.message = e == ECANCELED ? std::string("memlive::start(): ") + kUnlinkedMessage +
                                      "call start() before exit() or the return from main"
                                : enable_error(e);
    return st;
  }
  std::string err;
  std::unique_ptr<rd::segment> seg = rd::segment::open_pid(getpid(), &err);
  if (!seg) {
    st.error = start_error::telemetry;
    st.message = "cannot open this process's telemetry segment: " + err;
    return st;
  }
  try {
    auto srv = std::make_unique<server>(std::move(seg));
    st = srv->start(o);
    if (!st.ok()) return st;
    g.srv = std::move(srv);
    g.owner = getpid();
    g.publish_listeners();
    static const int registered = pthread_atfork(nullptr, nullptr, close_listeners_in_fork_child);
    (void)registered;
  } catch (const std::exception& e) {  // bad_alloc, thread creation: an error value
    st.error = start_error::server;
    st.message = e.what();
    return st;
  }
  if (!o.quiet)
    std::fprintf(stderr, "memlive: http://%s:%d/\n%s",
                 o.host == "localhost" ? "localhost" : o.host.c_str(), st.port,
                 exposure_warning(o.host).c_str());
  return st;
}

}  // namespace detail

inline status start(const options& o) {
  detail::global_server& g = detail::global();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.forget_if_forked();
  status st;
  {
    detail::internal_scope scope;  // the server is memlive's: not counted by the hooks
    st = detail::start_locked(g, o);
  }
  st.message = detail::hand_out(st.message);  // the caller's, counted where it will be freed
  return st;
}

inline void stop() {
  detail::global_server& g = detail::global();
  std::lock_guard<std::mutex> lock(g.mutex);
  detail::internal_scope scope;
  g.forget_if_forked();
  std::unique_ptr<detail::server> srv = std::move(g.srv);
  g.publish_listeners();  // none, before the sockets close and their numbers can be reused
  srv.reset();            // ~server stops it
}

inline int port() {
  detail::global_server& g = detail::global();
  std::lock_guard<std::mutex> lock(g.mutex);
  g.forget_if_forked();
  return g.srv ? g.srv->port() : 0;
}

inline bool take_snapshot(rd::snapshot* out, std::string* error) {
  detail::global_server& g = detail::global();
  std::lock_guard<std::mutex> lock(g.mutex);
  std::string err;
  g.forget_if_forked();
  if (!g.self) {
    detail::internal_scope scope;  // the segment object stays with memlive
    if (const int e = livealloc::telemetry::enable(); e == ECANCELED)
      err = std::string("memlive::take_snapshot(): ") + detail::kUnlinkedMessage +
            "a take_snapshot() before exit keeps the segment open for those after";
    else if (e != 0)
      err = detail::enable_error(e);
    else if ((g.self = rd::segment::open_pid(getpid(), &err)))
      g.owner = getpid();
    if (!g.self && g.closed.load())  // not "is it running with ...?"
      err = std::string("memlive::take_snapshot(): ") + detail::kExitingMessage +
            "livealloc removes the segment's name at exit as well, so it cannot be opened any "
            "more; a take_snapshot() before exit keeps it open for those after";
  }
  if (!g.self) {
    std::string message = detail::hand_out(err);
    if (error) *error = std::move(message);
    return false;
  }
  *out = g.self->take();  // the caller's snapshot: its memory is counted on the caller's thread
  if (out->ok()) return true;
  if (error) *error = out->error;
  return false;
}

}  // namespace v0
}  // namespace memlive

// ------------------------------------------------------------------------------------------------
// MEMLIVE_COUNT_GLOBAL_NEW: counted replacements of the global operator new and delete, in the
// one translation unit that defines it. Memory comes from malloc (posix_memalign above the
// default alignment) and goes back to free, so the program's malloc, and tools that watch it,
// see what they saw before. Each block is counted by the capture hooks in the class of its
// malloc_usable_size(), read at new and again at delete: the two ends always agree, also for an
// unsized delete, which has no size to go by (a 128-byte new whose block is 136 bytes usable
// counts in the 160-byte class). requested_bytes grows by the size asked for.
// ------------------------------------------------------------------------------------------------
#ifdef MEMLIVE_COUNT_GLOBAL_NEW
#ifdef LIVEALLOC_OVERRIDE
// livealloc already counts every new: define only LIVEALLOC_OVERRIDE.
#error "MEMLIVE_COUNT_GLOBAL_NEW and LIVEALLOC_OVERRIDE both replace operator new"
#endif
#include <malloc.h>

#include <new>

namespace memlive {
inline namespace v0 {
namespace detail {

// The block's usable size, asked as memlive's own work: an allocator whose malloc_usable_size
// allocates with new on its first call (gperftools' tcmalloc makes its MallocExtension so) came
// back into counted_new, which asked again, without end (a stack overflow at start-up). That
// nested allocation is not counted, and not asked its size.
inline std::size_t counted_usable_size(void* p) noexcept {
  internal_scope scope;
  return malloc_usable_size(p);
}

inline void* counted_new(std::size_t size, std::size_t align) {
  const std::size_t n = size ? size : 1;  // new of 0 bytes returns a distinct pointer
  for (;;) {
    void* p = nullptr;
    if (align <= __STDCPP_DEFAULT_NEW_ALIGNMENT__)
      p = std::malloc(n);
    else if (posix_memalign(&p, align, n) != 0)
      p = nullptr;
    if (__builtin_expect(p != nullptr, 1)) {
      if (!t_hook.internal) hook_alloc(size, counted_usable_size(p));
      return p;
    }
    std::new_handler handler = std::get_new_handler();
    if (!handler) throw std::bad_alloc();
    handler();  // may free memory, throw bad_alloc or end the program
  }
}

inline void* counted_new_nothrow(std::size_t size, std::size_t align) noexcept {
  try {
    return counted_new(size, align);
  } catch (...) {  // bad_alloc, or a new_handler's bad_alloc
    return nullptr;
  }
}

inline void counted_delete(void* p) noexcept {
  if (!p) return;
  if (!t_hook.internal) hook_free(counted_usable_size(p));
  std::free(p);
}

}  // namespace detail
}  // namespace v0
}  // namespace memlive

// The replaceable forms of C++17 (the standard forbids declaring them inline). Sized and aligned
// deletes need neither the size nor the alignment: free() and malloc_usable_size() know the block.
void* operator new(std::size_t n) {
  return memlive::detail::counted_new(n, 0);
}
void* operator new[](std::size_t n) {
  return memlive::detail::counted_new(n, 0);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return memlive::detail::counted_new_nothrow(n, 0);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return memlive::detail::counted_new_nothrow(n, 0);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return memlive::detail::counted_new(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return memlive::detail::counted_new(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return memlive::detail::counted_new_nothrow(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return memlive::detail::counted_new_nothrow(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept {
  memlive::detail::counted_delete(p);
}
void operator delete[](void* p) noexcept {
  memlive::detail::counted_delete(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  memlive::detail::counted_delete(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  memlive::detail::counted_delete(p);
}
void operator delete(void* p, std::size_t) noexcept {
  memlive::detail::counted_delete(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  memlive::detail::counted_delete(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  memlive::detail::counted_delete(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  memlive::detail::counted_delete(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  memlive::detail::counted_delete(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  memlive::detail::counted_delete(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  memlive::detail::counted_delete(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  memlive::detail::counted_delete(p);
}
#endif  // MEMLIVE_COUNT_GLOBAL_NEW

#endif  // __cpp_exceptions
#endif  // MEMLIVE_H
