// budget.h -- the budgets of `memlive check` and `memlive record --budget`: parsing
// "METRIC<=VALUE", "last(METRIC)<=VALUE" and "growth(METRIC)<=VALUE", a sample's values (from a
// recorded JSON line or a live snapshot), and what each budget saw: the worst value, the last,
// or the last minus the first. SPDX-License-Identifier: MIT
//
// Only main.cpp includes this file (and the fuzz targets tests/fuzz/fuzz_budget.cpp and
// fuzz_recording.cpp, which call its parsers). The metrics are named as the snapshot JSON names
// them (memlive/README.md, "The JSON schema"), so a user finds them in a recording:
//   the fields of "process" (live_bytes, resident_bytes, ...),
//   threads                 the program's threads alive (slots in state "alive" that are not
//                           memlive's own, "memlive": true),
//   class[N].COUNTER        the process total of a counter of size class N (the `counters`
//                           names: allocs, frees, peak_live, ...), exited threads included, as
//                           GET /metrics?by=class reports it,
//   class[N].live           live blocks of class N (Prometheus livealloc_live_blocks, CSV live),
//   class[N].live_bytes     those blocks times the class's size (class 0: large_bytes).
#ifndef MEMLIVE_SRC_BUDGET_H
#define MEMLIVE_SRC_BUDGET_H

#include <memlive.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace budgets {

namespace tl = livealloc::telemetry;
namespace rd = livealloc::reader;

using memlive::kProcessFields;
constexpr unsigned kProcessCount = memlive::kProcessFieldCount;
constexpr unsigned kResident = 12;  // index of resident_bytes
constexpr unsigned kLarge = 1;      // index of large_bytes
static_assert(std::string_view(kProcessFields[kResident]) == "resident_bytes" &&
              std::string_view(kProcessFields[kLarge]) == "large_bytes");

// One sample's values.
struct sample {
  int pid = 0;
  std::uint64_t start_ns = 0;  // the image's start: an exec keeps the pid and starts anew
  // The process's start (clock ticks after boot), which an exec keeps; 0: unknown (a process
  // gone, or a recording from before memlive wrote it).
  std::uint64_t start_ticks = 0;
  std::string program;
  std::uint64_t taken_ns = 0;
  bool alive = true;  // the process was running: threads and resident_bytes mean something
  std::uint64_t process[kProcessCount] = {};
  std::uint64_t threads = 0;  // the program's threads alive
  std::vector<std::uint64_t> class_sizes;
  rd::counter_matrix total{};  // [class][counter]: exited totals plus every thread's row
};

struct budget {
  enum kind_t { process, threads, class_counter, class_live, class_live_bytes };
  // Which value is judged: the worst of every sample (METRIC<=VALUE), the last sample's
  // (last(METRIC)<=VALUE: what is left once the program has done its work, a leak check), or
  // the last minus the first (growth(METRIC)<=VALUE: a trend over the run, which can fall).
  // The last two are known only at the end of a recording.
  enum form_t { form_worst, form_last, form_growth };
  std::string text;  // as given, spaces removed: "live_bytes<=64MiB"
  kind_t kind = process;
  form_t form = form_worst;
  unsigned index = 0;  // process: kProcessFields; class_counter: the counter
  unsigned cls = 0;
  bool upper = true;    // <= or <: the worst value is the largest
  bool strict = false;  // < or >
  std::uint64_t limit = 0;         // worst, last
  std::int64_t growth_limit = 0;   // growth: it may be negative
  bool bytes = false;  // shown in KiB, MiB, ... as well

  // What the samples showed. Samples without a value (threads of a process gone) are skipped:
  // `first` and `last` are those of the first and last samples that had one.
  std::uint64_t samples = 0;  // samples that had a value
  std::uint64_t worst = 0, worst_sample = 0, worst_ns = 0;
  std::uint64_t over = 0, first_over = 0, first_over_ns = 0, first_over_value = 0;  // worst only
  std::uint64_t first = 0, first_sample = 0;
  std::uint64_t last = 0, last_sample = 0, last_ns = 0;

  template <typename T>
  bool holds(T v, T lim) const {
    return upper ? (strict ? v < lim : v <= lim) : (strict ? v > lim : v >= lim);
  }
  bool within(std::uint64_t v) const { return holds(v, limit); }
  // last - first, held to the range of a signed 64-bit number (a counter's swing past 2^63
  // does not happen; a wrong sign would).
  std::int64_t growth() const {
    constexpr std::uint64_t kMax = std::numeric_limits<std::int64_t>::max();
    if (last >= first) return static_cast<std::int64_t>(std::min(last - first, kMax));
    const std::uint64_t fall = first - last;
    return fall > kMax ? std::numeric_limits<std::int64_t>::min()
                       : -static_cast<std::int64_t>(fall);
  }
  bool passed() const {
    if (samples == 0) return false;
    if (form == form_last) return within(last);
    if (form == form_growth) return holds(growth(), growth_limit);
    return over == 0;
  }
};

inline std::string known_metrics() {
  std::string s;
  for (const char* f : kProcessFields) s += std::string(f) + ", ";
  s += "threads, class[N].live, class[N].live_bytes, class[N].COUNTER (";
  for (unsigned c = 0; c < tl::kCounterCount; ++c)
    s += std::string(c ? ", " : "") + memlive::kCounterNames[c];
  return s + "), N from 0 to " + std::to_string(tl::kClassCount - 1);
}

// "64MiB", "1024", "2GiB": a whole number and an optional binary suffix (any case). 1: *out
// holds it; 0: not such a number; -1: past 64 bits.
inline int parse_value(const std::string& text, std::uint64_t* out) {
  std::size_t i = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
  const std::string digits = text.substr(0, i), suffix = text.substr(i);
  static const struct {
    const char* name;
    unsigned shift;
  } kSuffixes[] = {{"", 0}, {"B", 0}, {"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}};
  int shift = -1;
  for (const auto& s : kSuffixes)
    if (memlive::detail::iequals(suffix, s.name)) shift = static_cast<int>(s.shift);
  if (digits.empty() || shift < 0) return 0;
  std::uint64_t v = 0;
  for (char c : digits)
    if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, unsigned(c - '0'), &v))
      return -1;
  if (shift > 0 && v > (~std::uint64_t(0) >> shift)) return -1;
  *out = v << shift;
  return 1;
}

// The function around the metric, if any: `metric` is what stands before the operator (at
// `op` in `text`), and becomes the metric inside "last(...)" or "growth(...)". The parentheses
// were found balanced, in order.
inline bool parse_form(const std::string& text, std::size_t op, std::string* metric, budget* b,
                       std::string* error) {
  const std::size_t open = text.find('('), close = text.find(')');
  if (open == std::string::npos) return true;
  if (open == 0 || close + 1 != op || text.find('(', open + 1) != std::string::npos) {
    *error = "'" + text + "' is not FUNCTION(METRIC)<=VALUE: the parentheses hold the metric, "
             "as last(live_bytes)<=64MiB or growth(live_bytes)<=1MiB";
    return false;
  }
  const std::string function = text.substr(0, open);
  if (function == "last") {
    b->form = budget::form_last;
  } else if (function == "growth") {
    b->form = budget::form_growth;
  } else {
    *error = "unknown function '" + function + "' in '" + text +
             "': last(METRIC) (the last sample's value) or growth(METRIC) (the last sample's "
             "minus the first's)";
    return false;
  }
  *metric = text.substr(open + 1, close - open - 1);
  if (metric->empty()) {
    *error = "no metric in '" + text + "': " + function + "(METRIC), as " + function +
             "(live_bytes)";
    return false;
  }
  return true;
}

// VALUE, into b->limit, or b->growth_limit for a growth (the only one with a sign: '-' or '+').
inline bool parse_limit(const std::string& text, const std::string& value, budget* b,
                        std::string* error) {
  const bool sign = !value.empty() && (value[0] == '-' || value[0] == '+');
  const bool growth = b->form == budget::form_growth;
  if (sign && !growth) {
    *error = "bad number '" + value + "' in '" + text +
             "': a sign is for growth(METRIC) only, the one budget that can fall below 0";
    return false;
  }
  std::uint64_t v = 0;
  const int got = parse_value(value.substr(sign ? 1 : 0), &v);
  if (got == 0) {
    *error = "bad number '" + value + "' in '" + text +
             "': a whole number, optionally followed by B, KiB, MiB, GiB or TiB (1024-based)" +
             (growth ? ", with a '-' in front for a fall" : "");
    return false;
  }
  constexpr std::uint64_t kMax = std::numeric_limits<std::int64_t>::max();
  const bool negative = sign && value[0] == '-';
  if (got < 0 || (growth && v > kMax + (negative ? 1 : 0))) {
    *error = "'" + value + "' in '" + text + "' is too large " +
             (growth ? "for a growth (from -9223372036854775808 to 9223372036854775807)"
                     : "(at most 18446744073709551615, 2^64 - 1)");
    return false;
  }
  if (!growth)
    b->limit = v;
  else if (!negative)
    b->growth_limit = static_cast<std::int64_t>(v);
  else  // v is at most 2^63 here, whose negation is the smallest int64
    b->growth_limit = v > kMax ? std::numeric_limits<std::int64_t>::min()
                               : -static_cast<std::int64_t>(v);
  return true;
}

// Parses "METRIC<=VALUE", "last(METRIC)<=VALUE" or "growth(METRIC)<=VALUE" (also <, >=, >;
// spaces anywhere are ignored).
inline bool parse(const std::string& given, budget* b, std::string* error) {
  std::string text;
  for (char c : given)
    if (c != ' ' && c != '\t') text += c;
  b->text = text;
  const auto opens = std::count(text.begin(), text.end(), '(');
  if (opens != std::count(text.begin(), text.end(), ')') || text.find(')') < text.find('(')) {
    *error = "unbalanced parentheses in '" + text +
             "': write last(METRIC)<=VALUE or growth(METRIC)<=VALUE";
    return false;
  }
  const std::size_t op = text.find_first_of("<>=!");
  if (op == std::string::npos || op == 0) {
    *error = "budget '" + text + "' is not METRIC<=VALUE (or <, >=, >), last(METRIC)<=VALUE "
             "or growth(METRIC)<=VALUE, as live_bytes<=64MiB";
    return false;
  }
  std::size_t end = op;
  while (end < text.size() && std::strchr("<>=!", text[end])) ++end;
  const std::string oper = text.substr(op, end - op);
  std::string metric = text.substr(0, op);
  if (oper != "<=" && oper != "<" && oper != ">=" && oper != ">") {
    *error = "bad operator '" + oper + "' in '" + text + "': one of <=, <, >=, >";
    return false;
  }
  b->upper = oper[0] == '<';
  b->strict = oper.size() == 1;
  if (!parse_form(text, op, &metric, b, error) ||
      !parse_limit(text, text.substr(end), b, error))
    return false;
  for (unsigned i = 0; i < kProcessCount; ++i)
    if (metric == kProcessFields[i]) {
      b->kind = budget::process;
      b->index = i;
      b->bytes = metric.size() > 6 && metric.compare(metric.size() - 6, 6, "_bytes") == 0;
      return true;
    }
  if (metric == "threads") {
    b->kind = budget::threads;
    return true;
  }
  // class[N].NAME
  const std::size_t close = metric.find("].");
  if (metric.compare(0, 6, "class[") == 0 && close != std::string::npos && close > 6) {
    std::int64_t n = -1;
    const std::string index = metric.substr(6, close - 6), name = metric.substr(close + 2);
    if (!memlive::detail::is_whole_number(index) || index[0] == '-' || index[0] == '+' ||
        !memlive::detail::parse_int(index, &n) || n >= tl::kClassCount) {
      *error = "size class '" + index + "' in '" + text + "' is not from 0 to " +
               std::to_string(tl::kClassCount - 1) + " (a recording's class_sizes lists them)";
      return false;
    }
    b->cls = static_cast<unsigned>(n);
    b->bytes = name.size() > 6 && name.compare(name.size() - 6, 6, "_bytes") == 0;
    if (name == "live") {
      b->kind = budget::class_live;
      return true;
    }
    if (name == "live_bytes") {
      b->kind = budget::class_live_bytes;
      return true;
    }
    for (unsigned c = 0; c < tl::kCounterCount; ++c)
      if (name == memlive::kCounterNames[c]) {
        b->kind = budget::class_counter;
        b->index = c;
        return true;
      }
  }
  *error = "unknown metric '" + metric + "' in '" + text + "'; known: " + known_metrics();
  return false;
}

// The value of `b` in `s`; false when the sample has none (threads and resident_bytes of a
// process that is gone: the final sample of a recording that followed the process's exit).
inline bool value_of(const budget& b, const sample& s, std::uint64_t* v) {
  switch (b.kind) {
    case budget::process:
      if (b.index == kResident && !s.alive) return false;
      *v = s.process[b.index];
      return true;
    case budget::threads:
      if (!s.alive) return false;
      *v = s.threads;
      return true;
    case budget::class_counter:
      *v = s.total[b.cls][b.index];
      return true;
    case budget::class_live:
    case budget::class_live_bytes: {
      const std::uint64_t live = rd::detail::live_of(s.total[b.cls]);
      if (b.kind == budget::class_live) {
        *v = live;
      } else if (b.cls == 0) {
        *v = s.process[kLarge];
      } else {
        const std::uint64_t size = b.cls < s.class_sizes.size() ? s.class_sizes[b.cls] : 0;
        if (__builtin_mul_overflow(live, size, v)) *v = ~std::uint64_t(0);
      }
      return true;
    }
  }
  return false;
}

// Takes sample number `n` (1-based) into every budget; the budgets it is the first to break
// (only worst-value budgets: a last() or growth() is judged at the end of the recording).
inline std::vector<budget*> observe(std::vector<budget>& bs, const sample& s, std::uint64_t n,
                                    std::uint64_t t0_ns) {
  std::vector<budget*> broke;
  const std::uint64_t at = s.taken_ns > t0_ns ? s.taken_ns - t0_ns : 0;
  for (budget& b : bs) {
    std::uint64_t v = 0;
    if (!value_of(b, s, &v)) continue;
    if (b.samples == 0) {
      b.first = v;
      b.first_sample = n;
    }
    b.last = v;
    b.last_sample = n;
    b.last_ns = at;
    if (b.samples++ == 0 || (b.upper ? v > b.worst : v < b.worst)) {
      b.worst = v;
      b.worst_sample = n;
      b.worst_ns = at;
    }
    if (b.form == budget::form_worst && !b.within(v) && b.over++ == 0) {
      b.first_over = n;
      b.first_over_ns = at;
      b.first_over_value = v;
      broke.push_back(&b);
    }
  }
  return broke;
}

inline std::string with_unit(std::uint64_t v, bool bytes) {
  std::string s = std::to_string(v);
  if (!bytes || v < 1024) return s;
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double x = static_cast<double>(v) / 1024;
  unsigned u = 0;
  while (x >= 1024 && u + 1 < sizeof kUnits / sizeof kUnits[0]) {
    x /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", x);
  std::string n = buf;
  while (n.back() == '0') n.pop_back();
  if (n.back() == '.') n.pop_back();
  return s + " (" + n + " " + kUnits[u] + ")";
}

// A growth or its limit: "-990", "+1048576 (+1 MiB)"; with `plus` false a positive one has no
// sign, as a limit is written.
inline std::string with_sign(std::int64_t v, bool bytes, bool plus = true) {
  const std::uint64_t size = v < 0 ? 0 - static_cast<std::uint64_t>(v) : std::uint64_t(v);
  const std::string sign = v < 0 ? "-" : (v > 0 && plus) ? "+" : "";
  std::string s = sign + with_unit(size, bytes);
  const std::size_t unit = s.find(" (");
  if (unit != std::string::npos) s.insert(unit + 2, sign);
  return s;
}

inline std::string seconds(std::uint64_t ns) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "+%llu.%03llu s", static_cast<unsigned long long>(ns / 1000000000),
                static_cast<unsigned long long>(ns / 1000000 % 1000));
  return buf;
}

// Where the last value of a last() or growth() budget is from: "sample 600 of 600 (+59.900 s)",
// and when later samples had no value, that this was the last one with a value.
inline std::string last_of(const budget& b, std::uint64_t total) {
  std::string s = std::to_string(b.last_sample) + " of " + std::to_string(total) + " (" +
                  seconds(b.last_ns) + ")";
  const std::uint64_t after = total - b.last_sample;
  if (after > 0)
    s += ", the last with a value (" + std::to_string(after) + " sample" +
         (after == 1 ? "" : "s") + " after it: alive false)";
  return s;
}

// One line: "PASS live_bytes<=64MiB: worst 123 at sample 4 of 10 (+0.300 s); limit 67108864
// (64 MiB)", and for a budget exceeded how many samples were over and the first. For the other
// forms: "last 123 at sample 10 of 10 (+0.900 s)", "growth +100 from sample 1 to 10 of 10
// (+0.900 s): 23 to 123".
inline std::string report_line(const budget& b, std::uint64_t total) {
  std::string s = std::string(b.passed() ? "PASS " : "FAIL ") + b.text + ": ";
  if (total == 0) {
    s += "no sample";
  } else if (b.samples == 0) {
    s += "no value in " + std::to_string(total) + " sample" + (total == 1 ? "" : "s") +
         " (it is read while the process runs, and every sample is of the process gone)";
  } else if (b.form == budget::form_last) {
    s += "last " + with_unit(b.last, b.bytes) + " at sample " + last_of(b, total);
  } else if (b.form == budget::form_growth) {
    s += "growth " + with_sign(b.growth(), b.bytes) + " from sample " +
         std::to_string(b.first_sample) + " to " + last_of(b, total) + ": " +
         with_unit(b.first, b.bytes) + " to " + with_unit(b.last, b.bytes);
  } else {
    s += "worst " + with_unit(b.worst, b.bytes) + " at sample " + std::to_string(b.worst_sample) +
         " of " + std::to_string(total) + " (" + seconds(b.worst_ns) + ")";
  }
  s += "; limit " + (b.form == budget::form_growth ? with_sign(b.growth_limit, b.bytes, false)
                                                     : with_unit(b.limit, b.bytes));
  if (b.over > 0)
    s += "; over in " + std::to_string(b.over) + " of " + std::to_string(b.samples) +
         " samples, first at sample " + std::to_string(b.first_over) + " (" +
         seconds(b.first_over_ns) + ")";
  return s;
}

// ------------------------------------------------------------------------------------------------
// Samples from a live snapshot (record --budget) and from a recorded line (check).
// ------------------------------------------------------------------------------------------------

inline void add_row(rd::counter_matrix& total, unsigned cls, const std::uint64_t* row) {
  for (unsigned c = 0; c < tl::kCounterCount; ++c)
    if (__builtin_add_overflow(total[cls][c], row[c], &total[cls][c]))
      total[cls][c] = ~std::uint64_t(0);
}

inline sample from_snapshot(const rd::snapshot& s) {
  sample out;
  out.pid = s.pid;
  out.start_ns = s.start_ns;
  out.program = s.program;
  out.taken_ns = s.taken_ns;
  out.alive = s.process_alive;
  const auto values = memlive::process_values(s);
  std::copy(values.begin(), values.end(), out.process);
  out.class_sizes = s.class_sizes;
  for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
    add_row(out.total, cls, s.exited[cls].data());
  for (const rd::thread_view& t : s.threads) {
    if (t.state == tl::slot_alive && s.process_alive && !memlive::is_memlive_thread(s, t))
      ++out.threads;
    for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
      add_row(out.total, cls, t.counters[cls].data());
  }
  return out;
}

// What the budgets read of a line: only those parts are parsed and checked.
struct needs {
  bool threads = false, classes = false;
};
inline needs needs_of(const std::vector<budget>& bs) {
  needs n;
  for (const budget& b : bs) {
    n.threads = n.threads || b.kind == budget::threads;
    n.classes = n.classes || b.kind == budget::class_counter || b.kind == budget::class_live ||
                b.kind == budget::class_live_bytes;
  }
  return n;
}

inline bool whole(const nlohmann::json& j, const char* key, std::uint64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  *out = it->get<std::uint64_t>();
  return true;
}

// A `classes` or `exited` matrix: rows [class, c0, ..., c15] added into s->total.
inline bool add_rows(const nlohmann::json& rows, sample* s) {
  if (!rows.is_array()) return false;
  std::uint64_t row[tl::kCounterCount];
  for (const nlohmann::json& r : rows) {
    if (!r.is_array() || r.size() != tl::kCounterCount + 1) return false;
    for (const nlohmann::json& v : r)
      if (!v.is_number_unsigned()) return false;
    const std::uint64_t cls = r[0].get<std::uint64_t>();
    if (cls >= tl::kClassCount) return false;
    for (unsigned c = 0; c < tl::kCounterCount; ++c) row[c] = r[c + 1].get<std::uint64_t>();
    add_row(s->total, static_cast<unsigned>(cls), row);
  }
  return true;
}

// One recorded line, parsed. False with *error (without the line number) when it is not a
// memlive.snapshot/1 sample of this telemetry layout, or lacks what the budgets read.
inline bool from_json(const nlohmann::json& j, const needs& n, sample* s, std::string* error) {
  auto bad = [&](const std::string& what) {
    *error = what;
    return false;
  };
  if (!j.is_object()) return bad("not a JSON object, as `memlive record` writes");
  auto schema = j.find("schema");
  if (schema == j.end() || !schema->is_string())
    return bad("not a memlive snapshot (no \"schema\"; `memlive record` writes one per line)");
  if (schema->get<std::string>() != "memlive.snapshot/1")
    return bad("schema '" + schema->get<std::string>().substr(0, 64) +
               "'; this memlive reads memlive.snapshot/1");
  std::uint64_t version = 0;
  if (!whole(j, "layout_version", &version)) return bad("no layout_version");
  if (version != tl::kVersion)
    return bad("a recording of telemetry layout version " + std::to_string(version) +
               "; this memlive reads version " + std::to_string(tl::kVersion));
  std::uint64_t pid = 0;
  if (!whole(j, "pid", &pid) || pid == 0 || pid > 0x7fffffff) return bad("no pid");
  s->pid = static_cast<int>(pid);
  if (!whole(j, "start_ns", &s->start_ns)) return bad("no start_ns");
  if (j.contains("process_start_ticks") && !whole(j, "process_start_ticks", &s->start_ticks))
    return bad("process_start_ticks is not a whole number");
  auto program = j.find("program");
  if (program != j.end() && program->is_string()) s->program = program->get<std::string>();
  if (!whole(j, "taken_ns", &s->taken_ns)) return bad("no taken_ns");
  auto alive = j.find("alive");
  if (alive == j.end() || !alive->is_boolean()) return bad("no \"alive\"");
  s->alive = alive->get<bool>();
  auto process = j.find("process");
  if (process == j.end() || !process->is_object()) return bad("no \"process\" object");
  for (unsigned i = 0; i < kProcessCount; ++i)
    if (!whole(*process, kProcessFields[i], &s->process[i]))
      return bad(std::string("no process.") + kProcessFields[i] + " (a whole number)");
  auto threads = j.find("threads");
  if ((n.threads || n.classes) && (threads == j.end() || !threads->is_array()))
    return bad("no \"threads\" array");
  if (n.threads)
    for (const nlohmann::json& t : *threads) {
      if (!t.is_object()) return bad("a thread that is not an object");
      auto state = t.find("state");
      if (state == t.end() || !state->is_string()) return bad("a thread without a state");
      auto own = t.find("memlive");  // absent in older records: false
      if (state->get<std::string>() == "alive" && s->alive &&
          !(own != t.end() && own->is_boolean() && own->get<bool>()))
        ++s->threads;
    }
  if (n.classes) {
    auto counters = j.find("counters");
    bool same = counters != j.end() && counters->is_array() &&
                counters->size() == tl::kCounterCount;
    for (unsigned c = 0; same && c < tl::kCounterCount; ++c)
      same = (*counters)[c].is_string() &&
             (*counters)[c].get<std::string>() == memlive::kCounterNames[c];
    if (!same) return bad("its \"counters\" are not the 16 this memlive names");
    auto sizes = j.find("class_sizes");
    if (sizes == j.end() || !sizes->is_array() || sizes->size() != tl::kClassCount)
      return bad("no class_sizes of " + std::to_string(tl::kClassCount) + " classes");
    for (const nlohmann::json& v : *sizes) {
      if (!v.is_number_unsigned()) return bad("a class size that is not a whole number");
      s->class_sizes.push_back(v.get<std::uint64_t>());
    }
    auto exited = j.find("exited");
    if (exited == j.end() || !add_rows(*exited, s))
      return bad("no \"exited\" rows of [class, 16 counters]");
    for (const nlohmann::json& t : *threads) {
      auto rows = t.is_object() ? t.find("classes") : t.end();
      if (!t.is_object() || rows == t.end() || !add_rows(*rows, s))
        return bad("a thread without \"classes\" rows of [class, 16 counters]");
    }
  }
  return true;
}

// How deep the brackets of a line nest, outside strings, stopping past `limit`: a sample nests
// 4 deep; a line of a million '[' would make the parser build a million nested values.
inline unsigned depth(const std::string& line, unsigned limit) {
  unsigned d = 0, most = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++d > most && (most = d) > limit) return most;
    } else if ((c == ']' || c == '}') && d > 0) {
      --d;
    }
  }
  return most;
}

// The most JSON values a line may hold: a line of 256 MiB could hold 128 million numbers,
// gigabytes as a DOM; 8 million take about 300 MB, and a sample of 4,096 threads with every
// class in use holds about 4 million.
constexpr std::size_t kMaxValues = std::size_t(8) << 20;

// What became of one line of a recording.
enum class line_kind {
  sample,   // *s holds it
  cut,      // the file's last line, cut short by a record stopped while writing it: left out
  refused,  // *error says why (without the line number)
};

namespace detail {
struct too_many_values {};
}  // namespace detail

// One line of a recording, without its newline; `unfinished`: it is the file's last line and
// had none. Only what the budgets read (`n`) is kept, and the parse stops past `max_values`
// values (kMaxValues; the fuzz target passes fewer).
inline line_kind read_line(const std::string& text, const needs& n, bool unfinished, sample* s,
                           std::string* error, std::size_t max_values = kMaxValues) {
  const auto refuse = [&](const std::string& what) {
    *error = what;
    return line_kind::refused;
  };
  if (text.empty()) return refuse("empty (every line of a recording is one sample)");
  if (depth(text, 8) > 8) return refuse("not a sample (nested too deep)");
  std::size_t values = 0;
  const auto keep = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (event != nlohmann::json::parse_event_t::key) {
      if (++values > max_values) throw detail::too_many_values{};
      return true;
    }
    const std::string& key = parsed.get_ref<const std::string&>();
    if (depth == 1)
      return key == "schema" || key == "pid" || key == "program" || key == "alive" ||
             key == "start_ns" || key == "process_start_ticks" || key == "taken_ns" ||
             key == "layout_version" ||
             key == "process" || (key == "threads" && (n.threads || n.classes)) ||
             (n.classes && (key == "counters" || key == "class_sizes" || key == "exited"));
    if (depth == 3)  // a thread's
      return key == "state" || key == "memlive" || (n.classes && key == "classes");
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text, keep);
  } catch (const detail::too_many_values&) {
    return refuse("not a sample (more than " + std::to_string(max_values) + " values)");
  } catch (const nlohmann::json::out_of_range&) {
    // A number past a double's range (1e400) is JSON that nlohmann cannot hold; it ends the
    // parse with this error (406) rather than a parse_error. record writes no such number.
    return refuse("not a sample (a number past a double's range, as 1e400)");
  } catch (const nlohmann::json::parse_error& e) {
    // A record stopped while it wrote to a pipe leaves the start of a sample.
    if (unfinished && text.compare(0, 10, "{\"schema\":") == 0) return line_kind::cut;
    const bool short_of_end = e.byte >= text.size() &&
                              std::strstr(e.what(), "unexpected end of input") != nullptr;
    return refuse(short_of_end ? std::string("not JSON (it ends too soon)")
                               : "not JSON (at byte " + std::to_string(e.byte) + ")");
  }
  return from_json(j, n, s, error) ? line_kind::sample : line_kind::refused;
}

// The process fields that only grow while an image runs: counts of calls and of threads, the
// slots' high-water mark.
constexpr unsigned kGrowing[] = {4, 5, 6, 7, 8, 9};
static_assert(std::string_view(kProcessFields[4]) == "mmap_calls" &&
              std::string_view(kProcessFields[9]) == "overflow_threads");

// The first of those that is lower in `s` than in `prev`, the sample before of the same image,
// or -1. A recording put after itself (`cat run.jsonl run.jsonl`), or after a later part of the
// same run, goes back in them; a clock set back between two samples does not (taken_ns may).
inline int fallen(const sample& s, const sample& prev) {
  for (unsigned i : kGrowing)
    if (s.process[i] < prev.process[i]) return static_cast<int>(i);
  return -1;
}

// Whether the process start times of `s` and of the run so far (`prev.start_ticks`: the last one
// known, as a process gone has none) say two processes: both known, and not equal.
inline bool restarted(const sample& s, const sample& prev) {
  return s.start_ticks != 0 && prev.start_ticks != 0 && s.start_ticks != prev.start_ticks;
}

// Whether `s` can follow `prev` in one recording: the same pid, the same process start when both
// are known, and a later image (record follows a process through exec) or the same one with
// nothing fallen. Anything else is another process (a pid reused, as a container's pid 1 is
// each run), or the same run twice.
inline bool continues(const sample& s, const sample& prev) {
  return s.pid == prev.pid && !restarted(s, prev) &&
         (s.start_ns > prev.start_ns || (s.start_ns == prev.start_ns && fallen(s, prev) < 0));
}

}  // namespace budgets

#endif  // MEMLIVE_SRC_BUDGET_H
