// memlive.h -- the live profiler for livealloc: snapshot serialisation, tuning input, segment
// access. SPDX-License-Identifier: MIT
//
// This slice of memlive (issue 5) offers, all in namespace memlive:
//
//   to_json(snapshot)            one compact JSON object per snapshot (schema "memlive.snapshot/1",
//   append_json(out, snapshot)   described below and in memlive/README.md); the page, `snapshot`
//                                and `record` all use it. Direct writer (std::to_chars), no DOM.
//   to_csv(snapshot)             one row per (thread, class) with a non-zero counter, header line.
//   to_prometheus(snapshot)      Prometheus text exposition format 0.0.4.
//   parse_assignment(text, ...)  "name=value" -> assignment, with a message naming the field.
//   check_assignment(a, opts)    an assignment against the options a segment publishes.
//   version_string()             "0.1.0" (MEMLIVE_VERSION_* follow LIVEALLOC_VERSION_*).
//   open_segment(pid, ...)       opens /dev/shm/livealloc.<pid> and classifies a failure
//                                (no process, no segment, permission, malformed) as an
//                                `error_kind`.
//   counter_name(c), counter_is_gauge(c), kCounterHelp[c]   the names used by every format.
//
// Not yet here (later slices): memlive::start()/stop(), the HTTP server, capture hooks.
//
// Compile-time switches: none yet. Every macro is MEMLIVE_-prefixed; helper macros are #undef'd at
// the end of the header. Internals live in memlive::detail.
//
// JSON schema "memlive.snapshot/1" (one object; numbers are unsigned 64-bit integers unless noted):
//   schema        "memlive.snapshot/1"
//   pid, program, alive (bool: the process was running when the snapshot was taken)
//   start_ns, taken_ns             CLOCK_REALTIME nanoseconds
//   layout_version                 the telemetry segment version read (1)
//   counters      ["allocs", ...]  the 16 counter names in the order of telemetry::counter
//   gauges        [9, 10, 11, 14]      indices into `counters` of the gauges (the rest are
//   cumulative) class_sizes   [0, 16, 32, ...] block size of each class (class 0: large blocks, 0)
//   process       {segment_bytes, large_bytes, cached_bytes, committed_bytes, mmap_calls,
//                  munmap_calls, madvise_calls, purges, slots_used, overflow_threads,
//                  live_blocks, live_bytes, resident_bytes (from /proc/<pid>/statm; 0 if unknown)}
//   control       {generation, validated_generation, rejected}
//   options       [{name, requested, effective, min, max, default, live (bool), bool (bool)}]
//                 (requested..default are signed 64-bit)
//   threads       [{slot, state ("alive"|"exited"|"overflow"), tid (signed), name, incarnation,
//                   start_ns, exit_ns, applied_generation, slow_paths, flushes, mmap_calls,
//                   munmap_calls, madvise_calls,
//                   classes: [[class, c0, c1, ..., c15], ...]}]
//                 `classes` holds only the classes where at least one counter is non-zero, each
//                 row the class index followed by the 16 counters in `counters` order.
//   exited        [[class, c0, ..., c15], ...]  totals folded from exited threads, same rows.
//   free_matrix   [[from_slot, owner_slot, blocks], ...]  the non-zero cells of the cross-thread
//                 free matrix: blocks the thread in from_slot freed that owner_slot's heap owned
//                 (cumulative over the slots' incarnations; see TELEMETRY.md).
//   Strings are valid UTF-8: bytes that are not (a thread name cut in a multi-byte character)
//   become U+FFFD.
#ifndef MEMLIVE_H
#define MEMLIVE_H

#include <errno.h>
#include <fcntl.h>
#include <livealloc_reader.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
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
    "reserved_15"};
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
    "Reserved, zero."};

constexpr const char* counter_name(unsigned c) {
  return c < tl::kCounterCount ? kCounterNames[c] : "";
}
static_assert(tl::kCounterCount == 16, "memlive.h knows the 16 counters of layout version 1");
constexpr bool counter_is_gauge(unsigned c) {
  return c == tl::c_pages_in_use || c == tl::c_pages_kept || c == tl::c_reserved_blocks ||
         c == tl::c_peak_live;
}
constexpr bool counter_is_reserved(unsigned c) {
  return c == 15;
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
// slot "exited", tid 0, thread "" and state "exited_totals". `live` is the live-block formula.
std::string to_csv(const rd::snapshot& s, bool header = true);

// Prometheus text exposition format 0.0.4. Per thread and class (only rows with a non-zero
// counter; every family lists the same rows): livealloc_<counter>_total for cumulative counters,
// livealloc_<counter> for the gauges, livealloc_live_blocks; labels pid, thread (name), tid,
// slot, class (index), size (block bytes). The exited totals carry thread="", tid="0",
// slot="exited". Per thread: livealloc_thread_<x>_total {pid, thread, tid, slot}. Per process:
// gauges livealloc_<segment|large|cached|committed|live>_bytes, livealloc_slots_used, and counters
// livealloc_<mmap|munmap|madvise>_calls_total, livealloc_purges_total,
// livealloc_overflow_threads_total, livealloc_options_rejected_total; livealloc_option_effective
// {pid, option}. Reserved counters are left out.
std::string to_prometheus(const rd::snapshot& s);
// The content type to serve it with.
inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

// ------------------------------------------------------------------------------------------------
// Tuning input.
// ------------------------------------------------------------------------------------------------

struct assignment {
  std::string name;
  std::int64_t value = 0;
};

// Parses "name=value". The name is lower-case letters, digits and '_' (upper case is folded, so
// PAGE_RECYCLE=4 works); the value a decimal integer with an optional sign, or true/false/on/off
// (1/0). False and a message naming the field otherwise; *out is untouched then.
bool parse_assignment(const std::string& text, assignment* out, std::string* error);

// Checks an assignment against the options a segment publishes: known name, live, 0/1 for a
// bool, within [min, max]. The same checks the allocator makes (it has the last word).
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
  permission = 5,   // the segment belongs to another user, or cannot be written to tune
  bad_segment = 6,  // version mismatch, malformed or truncated segment
  rejected = 7,     // a tuning value refused (by memlive's check or by the allocator)
};

struct open_result {
  std::unique_ptr<rd::segment> segment;  // null on failure
  error_kind kind = error_kind::none;
  std::string error;  // the reader's message, plus a hint
};

// Opens <dir>/livealloc.<pid>. With for_tuning, a segment that can only be read is a permission
// error. A segment whose process is gone opens (stale, readable); callers decide.
open_result open_segment(int pid, bool for_tuning = false, const std::string& dir = "/dev/shm");

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
  if (c >= 0xC2 && c <= 0xDF)
    len = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF)
    len = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4)
    len = 4, cp = c & 0x07;
  else
    return 0;
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
// JSON: \" \\ and \uXXXX for control characters. Prometheus label values: \\ \" \n only (the
// spec's three; other bytes stand as they are). CSV: no escapes here (quoting is the caller's).
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

inline std::uint64_t live_of(const counter_row& v) {
  std::uint64_t plus = v[tl::c_allocs] + v[tl::c_adopted];
  std::uint64_t minus = v[tl::c_frees] + v[tl::c_large_freed_by_others] + v[tl::c_handed_over];
  return plus > minus ? plus - minus : 0;
}

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
};

inline void prom_family(writer& w, const std::string& name, const char* type, const char* help) {
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
  if (b != e && *b == '+') ++b;  // from_chars takes '-' but not '+'
  if (b == e) return false;
  auto r = std::from_chars(b, e, *out);
  return r.ec == std::errc() && r.ptr == e;
}

}  // namespace detail

inline std::string version_string() {
  return std::to_string(MEMLIVE_VERSION_MAJOR) + "." + std::to_string(MEMLIVE_VERSION_MINOR) + "." +
         std::to_string(MEMLIVE_VERSION_PATCH);
}

inline void append_json(std::string& out, const rd::snapshot& s) {
  detail::writer w(out);
  w.raw("{\"schema\":\"memlive.snapshot/1\"");
  detail::json_field(w, "pid", s.pid);
  w.raw(",\"program\":");
  detail::json_string(w, s.program);
  detail::json_bool(w, "alive", s.process_alive);
  detail::json_field(w, "start_ns", s.start_ns);
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
  w.raw("],\"class_sizes\":[");
  for (std::size_t i = 0; i < s.class_sizes.size(); ++i) {
    if (i) w.ch(',');
    w.num(s.class_sizes[i]);
  }
  w.raw("],\"process\":{");
  detail::json_field(w, "segment_bytes", s.segment_bytes, true);
  detail::json_field(w, "large_bytes", s.large_bytes);
  detail::json_field(w, "cached_bytes", s.cached_bytes);
  detail::json_field(w, "committed_bytes", s.committed_bytes);
  detail::json_field(w, "mmap_calls", s.mmap_calls);
  detail::json_field(w, "munmap_calls", s.munmap_calls);
  detail::json_field(w, "madvise_calls", s.madvise_calls);
  detail::json_field(w, "purges", s.purges);
  detail::json_field(w, "slots_used", s.slots_used);
  detail::json_field(w, "overflow_threads", s.overflow_threads);
  detail::json_field(w, "live_blocks", s.live_blocks());
  detail::json_field(w, "live_bytes", s.live_bytes());
  detail::json_field(w, "resident_bytes", s.resident_bytes);
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
    w.ch('}');
  }
  w.raw("],\"threads\":[");
  for (std::size_t i = 0; i < s.threads.size(); ++i) {
    const rd::thread_view& t = s.threads[i];
    w.raw(i ? ",{" : "{");
    detail::json_field(w, "slot", t.slot, true);
    w.raw(",\"state\":\"");
    w.raw(rd::state_name(t.state));
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
    w.raw(",\"classes\":");
    detail::json_matrix(w, t.counters);
    w.ch('}');
  }
  w.raw("],\"exited\":");
  detail::json_matrix(w, s.exited);
  w.raw(",\"free_matrix\":[");
  bool first_cell = true;
  for (std::uint32_t f = 0; f < s.slot_count && !s.matrix.empty(); ++f)
    for (std::uint32_t o = 0; o < s.slot_count; ++o)
      if (std::uint64_t n = s.freed(f, o)) {
        w.reserve(64);
        if (!first_cell) w.u_ch(',');
        first_cell = false;
        w.u_ch('[');
        w.u_num(f);
        w.u_ch(',');
        w.u_num(o);
        w.u_ch(',');
        w.u_num(n);
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
      const std::string slot = std::to_string(t.slot), state = rd::state_name(t.state);
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

inline std::string to_prometheus(const rd::snapshot& s) {
  using detail::prom_label;
  const std::string pid = prom_label("pid", std::to_string(s.pid));
  std::vector<detail::prom_row> rows;
  std::vector<std::string> thread_labels;
  for (const rd::thread_view& t : s.threads) {
    std::string base = pid + "," + prom_label("thread", t.name) + "," +
                       prom_label("tid", std::to_string(t.tid)) + "," +
                       prom_label("slot", std::to_string(t.slot));
    for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
      if (detail::row_nonzero(t.counters[cls]))
        rows.push_back({base + "," + prom_label("class", std::to_string(cls)) + "," +
                            prom_label("size", std::to_string(detail::class_size_of(s, cls))),
                        &t.counters[cls]});
    thread_labels.push_back(std::move(base));
  }
  const std::string exited_base = pid + ",thread=\"\",tid=\"0\",slot=\"exited\"";
  for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
    if (detail::row_nonzero(s.exited[cls]))
      rows.push_back({exited_base + "," + prom_label("class", std::to_string(cls)) + "," +
                          prom_label("size", std::to_string(detail::class_size_of(s, cls))),
                      &s.exited[cls]});

  std::string out;
  out.reserve(1024 + rows.size() * 15 * 120);
  {
    detail::writer w(out);
    for (unsigned c = 0; c < tl::kCounterCount; ++c) {
      if (counter_is_reserved(c)) continue;
      const bool gauge = counter_is_gauge(c);
      std::string name = std::string("livealloc_") + kCounterNames[c] + (gauge ? "" : "_total");
      detail::prom_family(w, name, gauge ? "gauge" : "counter", kCounterHelp[c]);
      for (const detail::prom_row& r : rows) detail::prom_sample(w, name, r.labels, (*r.row)[c]);
    }
    const std::string live = "livealloc_live_blocks";
    detail::prom_family(w, live, "gauge",
                        "Live blocks: allocs + adopted - frees - large_freed_by_others - "
                        "handed_over.");
    for (const detail::prom_row& r : rows)
      detail::prom_sample(w, live, r.labels, detail::live_of(*r.row));

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
      const std::string name = f.name;
      detail::prom_family(w, name, "counter", f.help);
      for (std::size_t i = 0; i < s.threads.size(); ++i)
        detail::prom_sample(w, name, thread_labels[i], s.threads[i].*f.field);
    }

    struct per_process {
      const char* name;
      const char* type;
      const char* help;
      std::uint64_t value;
    };
    const per_process kProcess[] = {
        {"livealloc_segment_bytes", "gauge", "Bytes of 4 MiB allocator segments mapped.",
         s.segment_bytes},
        {"livealloc_large_bytes", "gauge", "Bytes of large mappings in use.", s.large_bytes},
        {"livealloc_cached_bytes", "gauge", "Bytes kept for reuse (large cache, segment cache).",
         s.cached_bytes},
        {"livealloc_committed_bytes", "gauge",
         "Spans in use or not yet purged, plus large mappings, plus caches.", s.committed_bytes},
        {"livealloc_live_bytes", "gauge", "Bytes in live blocks (block sizes) plus large bytes.",
         s.live_bytes()},
        {"livealloc_resident_bytes", "gauge", "Resident memory of the process (/proc statm).",
         s.resident_bytes},
        {"livealloc_slots_used", "gauge", "Telemetry slots ever taken (high-water mark).",
         s.slots_used},
        {"livealloc_mmap_calls_total", "counter", "mmap calls, whole process.", s.mmap_calls},
        {"livealloc_munmap_calls_total", "counter", "munmap calls, whole process.", s.munmap_calls},
        {"livealloc_madvise_calls_total", "counter", "madvise calls, whole process.",
         s.madvise_calls},
        {"livealloc_purges_total", "counter", "Purge passes that returned memory to the OS.",
         s.purges},
        {"livealloc_overflow_threads_total", "counter",
         "Threads that found no free telemetry slot.", s.overflow_threads},
        {"livealloc_options_rejected_total", "counter",
         "Invalid tuning values the allocator refused.", s.rejected},
    };
    for (const per_process& f : kProcess) {
      const std::string name = f.name;
      detail::prom_family(w, name, f.type, f.help);
      detail::prom_sample(w, name, pid, f.value);
    }
    const std::string opt = "livealloc_option_effective";
    detail::prom_family(w, opt, "gauge", "Value in force of each tunable threshold.");
    for (const rd::option_view& o : s.options)
      detail::prom_sample(w, opt, pid + "," + prom_label("option", o.name), o.effective);
  }
  return out;
}

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
  if (value == "true" || value == "on") {
    v = 1;
  } else if (value == "false" || value == "off") {
    v = 0;
  } else if (!detail::parse_int(value, &v)) {
    const std::size_t sign = value[0] == '-' || value[0] == '+' ? 1 : 0;
    const bool digits =
        value.size() > sign && value.find_first_not_of("0123456789", sign) == std::string::npos;
    return fail("option '" + name + "': '" + value + "' is not " +
                (digits ? "a 64-bit integer (out of range)" : "a whole number"));
  }
  out->name = std::move(name);
  out->value = v;
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
    if (a.value < o.min || a.value > o.max)
      return fail("option '" + a.name + "': " + std::to_string(a.value) + " is out of range [" +
                  std::to_string(o.min) + ", " + std::to_string(o.max) + "]");
    return true;
  }
  return fail("unknown option '" + a.name + "'; the live options are: " + known);
}

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
  if (lstat(path.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT && !alive) {
      r.kind = error_kind::no_process;
      r.error = "no process with pid " + std::to_string(pid) + " (and no segment " + path + ")";
    } else if (e == ENOENT) {
      r.kind = error_kind::no_segment;
      r.error = "process " + std::to_string(pid) + " publishes no telemetry segment (" + path +
                "); run it with LD_PRELOAD=<abs path>/liblivealloc.so LIVEALLOC_PROFILE=1, or "
                "call livealloc::telemetry::enable()";
    } else {
      r.kind = e == EACCES ? error_kind::permission : error_kind::bad_segment;
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
  const int e = errno;
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

}  // namespace v0
}  // namespace memlive

#endif  // MEMLIVE_H
