// libFuzzer target: a recording as `memlive check` reads it, line by line, through
// budgets::read_line (memlive/src/budget.h: the line limits, the parse of only what the budgets
// read, budgets::from_json) and budgets::continues (one process per recording), then the
// budgets' verdicts (observe, value_of, report_line).
//
// Input: one flags byte, then the file. Flags bit 0: a threads budget; bit 1: class budgets (the
// two decide what a line must hold, budgets::needs_of); bit 2: at most 200 values a line (else
// budgets::kMaxValues). Lines end at '\n'; a last one without it is the file's unfinished line.
// As cmd_check does, the first refused line ends the file.
//
// Properties, besides no crash, leak or undefined behaviour:
//  - each line's verdict equals a reference made from nlohmann's full parse of the line (no
//    callback, no limit): a sample exactly when the line is JSON nested at most 8 deep and holds
//    a memlive.snapshot/1 object of layout version 1 with what the budgets read (pid 1 to
//    2^31 - 1, start_ns, taken_ns, alive, the 13 process fields as whole numbers, and
//    process_start_ticks a whole number if present; for threads
//    a threads array of objects with a state; for classes the 16 counter names, 53 class sizes,
//    exited rows and every thread's rows of [class < 53, 16 counters]); a line that is not JSON
//    is left out (cut) only when it is the unfinished last line and starts with {"schema":;
//    past the value limit a line may be refused for it (the parse stops early), never taken
//    when the reference refuses it; a number past a double's range (1e400), which nlohmann
//    cannot hold, is refused as such exactly when it is the error nlohmann's parse stops at;
//  - a refused line has a message; a sample's values are the JSON's: pid, start_ns,
//    process_start_ticks (0 if absent), taken_ns,
//    alive, program (a string, else empty), the process fields, the threads alive that are not
//    "memlive": true (counted only while the process is alive), the class sizes, and per class
//    and counter the sum of exited and every thread's rows (at most 2^64 - 1);
//  - continues() refuses exactly another pid, a process_start_ticks other than the last non-zero
//    one before (both non-zero: a pid reused), an earlier start_ns than the line before, or the
//    same start_ns with fewer mmap_calls, munmap_calls, madvise_calls, purges, slots_used or
//    overflow_threads (counts that only grow while an image runs: the same run twice);
//  - each budget's value in a sample is the README's: a process field, threads, a class total,
//    class[N].live = allocs + adopted - frees - large_freed_by_others - handed_over -
//    foreign_allocs (0 if below, at most 2^64 - 1), class[N].live_bytes = that times the class
//    size (class 0: large_bytes); threads and resident_bytes have none in a sample of the
//    process gone; over the samples, a budget's first, last, worst, count over the limit and
//    PASS/FAIL are those of the values, and its report line says PASS or FAIL and the budget.
#include "budget.h"
#include "fuzz_common.h"

namespace {

using u128 = unsigned __int128;
constexpr std::uint64_t kU64Max = ~std::uint64_t(0);
constexpr unsigned kClasses = fuzz::tl::kClassCount;
constexpr unsigned kCounters = fuzz::tl::kCounterCount;

std::uint64_t clamp(u128 v) { return v > kU64Max ? kU64Max : static_cast<std::uint64_t>(v); }

// Counts what nlohmann's parser sees up to the end or the first error: the values and container
// starts and ends (every event but a key: at most what read_line's callback counts) and the
// deepest nesting (a top-level container is 1, as budgets::depth counts).
struct counting_sax {
  std::size_t events = 0;
  unsigned depth = 0, deepest = 0;
  bool value() { return ++events, true; }
  bool null() { return value(); }
  bool boolean(bool) { return value(); }
  bool number_integer(std::int64_t) { return value(); }
  bool number_unsigned(std::uint64_t) { return value(); }
  bool number_float(double, const std::string&) { return value(); }
  bool string(std::string&) { return value(); }
  bool binary(nlohmann::json::binary_t&) { return value(); }
  bool open() {
    deepest = std::max(deepest, ++depth);
    return value();
  }
  bool close() {
    --depth;
    return value();
  }
  bool start_object(std::size_t) { return open(); }
  bool start_array(std::size_t) { return open(); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string&) { return true; }
  bool out_of_range = false;  // the error is a number past a double's range (1e400)
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) {
    out_of_range = e.id == 406;
    return false;
  }
};

struct ref_sample {
  int pid = 0;
  std::uint64_t start_ns = 0, start_ticks = 0, taken_ns = 0;
  bool alive = false;
  std::string program;
  std::uint64_t process[memlive::kProcessFieldCount] = {};
  std::uint64_t threads = 0;
  std::vector<std::uint64_t> sizes;
  std::uint64_t total[kClasses][kCounters] = {};
};

bool unsigned_at(const nlohmann::json& o, const char* key, std::uint64_t* out) {
  if (!o.is_object() || !o.contains(key) || !o.at(key).is_number_unsigned()) return false;
  *out = o.at(key).get<std::uint64_t>();
  return true;
}

// Rows [class, 16 counters] added into `sum`.
bool ref_rows(const nlohmann::json& rows, std::vector<u128>& sum) {
  if (!rows.is_array()) return false;
  for (const nlohmann::json& r : rows) {
    if (!r.is_array() || r.size() != kCounters + 1) return false;
    for (const nlohmann::json& v : r)
      if (!v.is_number_unsigned()) return false;
    const std::uint64_t cls = r[0].get<std::uint64_t>();
    if (cls >= kClasses) return false;
    for (unsigned c = 0; c < kCounters; ++c)
      sum[cls * kCounters + c] += r[c + 1].get<std::uint64_t>();
  }
  return true;
}

// The reference: is the parsed line a sample the budgets can read, and its values.
bool ref_sample_of(const nlohmann::json& j, const budgets::needs& n, ref_sample* s) {
  std::uint64_t v = 0, pid = 0;
  if (!j.is_object() || !j.contains("schema") || j["schema"] != "memlive.snapshot/1")
    return false;
  if (!unsigned_at(j, "layout_version", &v) || v != fuzz::tl::kVersion) return false;
  if (!unsigned_at(j, "pid", &pid) || pid < 1 || pid > 0x7fffffff) return false;
  s->pid = static_cast<int>(pid);
  if (!unsigned_at(j, "start_ns", &s->start_ns) || !unsigned_at(j, "taken_ns", &s->taken_ns))
    return false;
  if (j.contains("process_start_ticks") &&
      !unsigned_at(j, "process_start_ticks", &s->start_ticks))
    return false;
  if (!j.contains("alive") || !j["alive"].is_boolean()) return false;
  s->alive = j["alive"].get<bool>();
  if (j.contains("program") && j["program"].is_string()) s->program = j["program"];
  if (!j.contains("process")) return false;
  for (unsigned i = 0; i < memlive::kProcessFieldCount; ++i)
    if (!unsigned_at(j["process"], memlive::kProcessFields[i], &s->process[i])) return false;
  if (!n.threads && !n.classes) return true;
  if (!j.contains("threads") || !j["threads"].is_array()) return false;
  const nlohmann::json& threads = j["threads"];
  if (n.threads)
    for (const nlohmann::json& t : threads) {
      if (!t.is_object() || !t.contains("state") || !t["state"].is_string()) return false;
      const bool own = t.contains("memlive") && t["memlive"] == true;
      if (t["state"] == "alive" && !own && s->alive) ++s->threads;
    }
  if (!n.classes) return true;
  nlohmann::json names = nlohmann::json::array();
  for (const char* c : memlive::kCounterNames) names.push_back(c);
  if (!j.contains("counters") || j["counters"] != names) return false;
  if (!j.contains("class_sizes") || !j["class_sizes"].is_array() ||
      j["class_sizes"].size() != kClasses)
    return false;
  for (const nlohmann::json& x : j["class_sizes"]) {
    if (!x.is_number_unsigned()) return false;
    s->sizes.push_back(x.get<std::uint64_t>());
  }
  std::vector<u128> sum(kClasses * kCounters, 0);
  if (!j.contains("exited") || !ref_rows(j["exited"], sum)) return false;
  for (const nlohmann::json& t : threads)
    if (!t.is_object() || !t.contains("classes") || !ref_rows(t["classes"], sum)) return false;
  for (unsigned cls = 0; cls < kClasses; ++cls)
    for (unsigned c = 0; c < kCounters; ++c) s->total[cls][c] = clamp(sum[cls * kCounters + c]);
  return true;
}

// The value of budget `b` in a sample, as the README defines it; false: none.
bool ref_value(const budgets::budget& b, const ref_sample& s, std::uint64_t* v) {
  namespace t = fuzz::tl;
  switch (b.kind) {
    case budgets::budget::process:
      if (std::string(memlive::kProcessFields[b.index]) == "resident_bytes" && !s.alive)
        return false;
      *v = s.process[b.index];
      return true;
    case budgets::budget::threads:
      *v = s.threads;
      return s.alive;
    case budgets::budget::class_counter:
      *v = s.total[b.cls][b.index];
      return true;
    case budgets::budget::class_live:
    case budgets::budget::class_live_bytes: {
      const std::uint64_t* c = s.total[b.cls];
      const u128 plus = u128(c[t::c_allocs]) + c[t::c_adopted];
      const u128 minus = u128(c[t::c_frees]) + c[t::c_large_freed_by_others] +
                         c[t::c_handed_over] + c[t::c_foreign_allocs];
      const std::uint64_t live = clamp(plus > minus ? plus - minus : 0);
      if (b.kind == budgets::budget::class_live)
        *v = live;
      else
        *v = b.cls == 0 ? s.process[1] : clamp(u128(live) * s.sizes.at(b.cls));
      return true;
    }
  }
  return false;
}

// The budgets of each flag: bit 0 adds threads, bit 1 class budgets.
std::vector<budgets::budget> budgets_for(unsigned flags) {
  std::vector<std::string> texts = {"live_bytes<=1MiB", "last(resident_bytes)>=1",
                                    "growth(live_blocks)<=-1", "large_bytes>0"};
  if (flags & 1) texts.insert(texts.end(), {"threads<4", "growth(threads)>=+2"});
  if (flags & 2)
    texts.insert(texts.end(), {"class[1].live<=5", "class[0].live_bytes>=1", "class[7].live<9",
                               "last(class[52].live_bytes)<=1KiB", "growth(class[3].allocs)<0",
                               "class[2].live_bytes<=100", "class[13].peak_live>2"});
  std::vector<budgets::budget> bs;
  for (const std::string& text : texts) {
    budgets::budget b;
    std::string err;
    FUZZ_CHECK(budgets::parse(text, &b, &err), "the target's budget '%s': %s", text.c_str(),
               err.c_str());
    bs.push_back(b);
  }
  return bs;
}

// A budget's verdict over the values of the samples that had one.
void check_budget(const budgets::budget& b, const std::vector<std::uint64_t>& values,
                  std::uint64_t samples) {
  FUZZ_CHECK(b.samples == values.size(), "%s: %llu samples with a value, want %zu",
             b.text.c_str(), static_cast<unsigned long long>(b.samples), values.size());
  const std::string line = budgets::report_line(b, samples);
  const bool pass_said = line.compare(0, 5, "PASS ") == 0;
  FUZZ_CHECK((pass_said || line.compare(0, 5, "FAIL ") == 0) && pass_said == b.passed() &&
                 line.find(b.text) == 5,
             "%s: report line '%s'", b.text.c_str(), line.c_str());
  if (values.empty()) {
    FUZZ_CHECK(!b.passed(), "%s passed without a value", b.text.c_str());
    return;
  }
  const auto holds = [&](auto v, auto lim) {
    return b.upper ? (b.strict ? v < lim : v <= lim) : (b.strict ? v > lim : v >= lim);
  };
  std::uint64_t worst = values[0], over = 0;
  for (std::uint64_t v : values) {
    worst = b.upper ? std::max(worst, v) : std::min(worst, v);
    over += holds(v, b.limit) ? 0 : 1;
  }
  FUZZ_CHECK(b.first == values.front() && b.last == values.back() && b.worst == worst,
             "%s: first %llu last %llu worst %llu, want %llu %llu %llu", b.text.c_str(),
             static_cast<unsigned long long>(b.first), static_cast<unsigned long long>(b.last),
             static_cast<unsigned long long>(b.worst),
             static_cast<unsigned long long>(values.front()),
             static_cast<unsigned long long>(values.back()),
             static_cast<unsigned long long>(worst));
  const __int128 growth = __int128(values.back()) - __int128(values.front());
  bool pass = over == 0;
  if (b.form == budgets::budget::form_last) pass = holds(values.back(), b.limit);
  if (b.form == budgets::budget::form_growth) {
    const __int128 lo = std::numeric_limits<std::int64_t>::min();
    const __int128 hi = std::numeric_limits<std::int64_t>::max();
    FUZZ_CHECK(b.growth() == static_cast<std::int64_t>(std::min(std::max(growth, lo), hi)),
               "%s: growth %lld", b.text.c_str(), static_cast<long long>(b.growth()));
    pass = holds(growth, __int128(b.growth_limit));
  } else {
    FUZZ_CHECK(b.form != budgets::budget::form_worst || b.over == over,
               "%s: over in %llu samples, want %llu", b.text.c_str(),
               static_cast<unsigned long long>(b.over), static_cast<unsigned long long>(over));
  }
  FUZZ_CHECK(b.passed() == pass, "%s: passed %d, want %d", b.text.c_str(), b.passed(), pass);
}

void check_sample(const budgets::sample& s, const ref_sample& r, const std::string& line) {
  bool same = s.pid == r.pid && s.start_ns == r.start_ns && s.start_ticks == r.start_ticks &&
              s.taken_ns == r.taken_ns &&
              s.alive == r.alive && s.program == r.program && s.threads == r.threads &&
              s.class_sizes == r.sizes;
  for (unsigned i = 0; i < memlive::kProcessFieldCount; ++i)
    same = same && s.process[i] == r.process[i];
  for (unsigned cls = 0; cls < kClasses; ++cls)
    for (unsigned c = 0; c < kCounters; ++c) same = same && s.total[cls][c] == r.total[cls][c];
  FUZZ_CHECK(same, "the sample of '%s' differs from the JSON (pid %d, threads %llu)",
             line.c_str(), s.pid, static_cast<unsigned long long>(s.threads));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const unsigned flags = data[0];
  const std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  std::vector<budgets::budget> bs = budgets_for(flags);
  const budgets::needs need = budgets::needs_of(bs);
  FUZZ_CHECK(need.threads == ((flags & 1) != 0) && need.classes == ((flags & 2) != 0),
             "needs_of: threads %d classes %d for flags %u", need.threads, need.classes, flags);
  const std::size_t max_values = (flags & 4) ? 200 : budgets::kMaxValues;

  std::vector<std::vector<std::uint64_t>> values(bs.size());
  budgets::sample prev;
  std::uint64_t samples = 0, t0_ns = 0, known_ticks = 0;
  for (std::size_t at = 0; at < file.size();) {
    const std::size_t nl = file.find('\n', at);
    const bool unfinished = nl == std::string::npos;
    const std::string line = file.substr(at, unfinished ? std::string::npos : nl - at);
    at = unfinished ? file.size() : nl + 1;

    budgets::sample s;
    std::string err;
    const budgets::line_kind got = budgets::read_line(line, need, unfinished, &s, &err, max_values);

    counting_sax sax;
    const bool json = nlohmann::json::sax_parse(line, &sax);
    ref_sample r;
    bool want = false;
    if (json && sax.deepest <= 8) want = ref_sample_of(nlohmann::json::parse(line), need, &r);
    const bool may_cut = !json && unfinished && line.compare(0, 10, "{\"schema\":") == 0;
    const bool past_limit = sax.events > max_values;

    if (got == budgets::line_kind::cut) {
      FUZZ_CHECK(may_cut, "'%s' left out as a cut last line", line.c_str());
      break;
    }
    if (got == budgets::line_kind::refused) {
      FUZZ_CHECK(!err.empty(), "'%s' refused without a message", line.c_str());
      const bool for_limit = err.find("more than " + std::to_string(max_values) + " values") !=
                             std::string::npos;
      const bool too_deep = err == "not a sample (nested too deep)";
      const bool for_range = err == "not a sample (a number past a double's range, as 1e400)";
      FUZZ_CHECK(for_range == (sax.out_of_range && !too_deep && !for_limit),
                 "'%s' refused: %s (a number past a double's range: %d)", line.c_str(),
                 err.c_str(), sax.out_of_range);
      FUZZ_CHECK(!want || (past_limit && for_limit), "'%s' refused: %s", line.c_str(),
                 err.c_str());
      FUZZ_CHECK(!for_limit || past_limit, "'%s' refused for %zu values: %s", line.c_str(),
                 sax.events, err.c_str());
      // Cut is the verdict of a cut last line unless the parse stopped before it could see
      // the line is not JSON (the value limit), the nesting check, which counts the brackets
      // of the whole line, refused it first, or a number past a double's range ended it.
      FUZZ_CHECK(!may_cut || for_limit || too_deep || for_range, "'%s' refused, not cut: %s",
                 line.c_str(), err.c_str());
      break;
    }
    FUZZ_CHECK(want, "'%s' taken as a sample, which the reference refuses", line.c_str());
    check_sample(s, r, line);
    if (samples > 0) {
      bool fell = false;  // a count that only grows while an image runs, lower
      for (const char* f : {"mmap_calls", "munmap_calls", "madvise_calls", "purges", "slots_used",
                            "overflow_threads"})
        for (unsigned i = 0; i < budgets::kProcessCount; ++i)
          if (f == std::string(budgets::kProcessFields[i]) && s.process[i] < prev.process[i])
            fell = true;
      const bool reused = r.start_ticks != 0 && known_ticks != 0 && r.start_ticks != known_ticks;
      const bool another = s.pid != prev.pid || reused || s.start_ns < prev.start_ns ||
                           (s.start_ns == prev.start_ns && fell);
      FUZZ_CHECK(budgets::continues(s, prev) == !another, "continues: pid %d/%d start %llu/%llu",
                 s.pid, prev.pid, static_cast<unsigned long long>(s.start_ns),
                 static_cast<unsigned long long>(prev.start_ns));
      if (another) break;
    }
    if (++samples == 1) t0_ns = s.taken_ns;
    if (r.start_ticks != 0) known_ticks = r.start_ticks;
    prev = s;
    prev.start_ticks = known_ticks;  // as cmd_check keeps it: the last one known
    budgets::observe(bs, s, samples, t0_ns);
    for (std::size_t i = 0; i < bs.size(); ++i) {
      std::uint64_t v = 0, w = 0;
      const bool has = budgets::value_of(bs[i], s, &v);
      FUZZ_CHECK(has == ref_value(bs[i], r, &w) && (!has || v == w),
                 "%s in '%s': %d/%llu, want %llu", bs[i].text.c_str(), line.c_str(), has,
                 static_cast<unsigned long long>(v), static_cast<unsigned long long>(w));
      if (has) values[i].push_back(v);
    }
  }
  for (std::size_t i = 0; i < bs.size(); ++i) check_budget(bs[i], values[i], samples);
  return 0;
}
