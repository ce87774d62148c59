// libFuzzer target: one BUDGET argument of `memlive check` (and `memlive record --budget`), as
// budgets::parse (memlive/src/budget.h) reads it. The input is the budget string.
//
// Properties, besides no crash, hang, leak or undefined behaviour:
//  - parse accepts exactly what the reference below accepts: the grammar of memlive/README.md
//    ("Budgets: `memlive check`"), spaces and tabs removed first:
//      [last( | growth(] METRIC [)] OP VALUE
//    METRIC one of the process fields, threads, class[N].live, class[N].live_bytes or
//    class[N].COUNTER (N decimal digits, 0 to 52), OP one of <= < >= >, VALUE decimal digits and
//    a unit (none, B, KiB, MiB, GiB, TiB in any case; 1024-based), within 2^64 - 1, or for a
//    growth only a '+' or '-' in front and within int64;
//  - an accepted budget has the reference's metric (kind, field or counter, class), form,
//    operator, limit, bytes flag (a metric ending in _bytes) and text (spaces removed);
//  - a refusal has a message that quotes the budget: '<text>'.
#include "budget.h"
#include "fuzz_common.h"

namespace {

struct reference {
  budgets::budget::kind_t kind = budgets::budget::process;
  budgets::budget::form_t form = budgets::budget::form_worst;
  unsigned index = 0, cls = 0;
  bool upper = true, strict = false, bytes = false;
  std::uint64_t limit = 0;
  std::int64_t growth_limit = 0;
};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// METRIC into r, or false.
bool reference_metric(const std::string& m, reference* r) {
  for (unsigned i = 0; i < memlive::kProcessFieldCount; ++i)
    if (m == memlive::kProcessFields[i]) {
      r->kind = budgets::budget::process;
      r->index = i;
      r->bytes = ends_with(m, "_bytes");
      return true;
    }
  if (m == "threads") {
    r->kind = budgets::budget::threads;
    return true;
  }
  const std::string head = "class[";
  if (m.compare(0, head.size(), head) != 0) return false;
  std::size_t i = head.size();
  unsigned n = 0;
  const std::size_t digits_from = i;
  for (; i < m.size() && m[i] >= '0' && m[i] <= '9'; ++i) {
    n = n * 10 + unsigned(m[i] - '0');
    if (n > 52) return false;  // leading zeros keep n small; anything past 52 is out
  }
  if (i == digits_from || m.compare(i, 2, "].") != 0) return false;
  const std::string name = m.substr(i + 2);
  r->cls = n;
  r->bytes = ends_with(name, "_bytes");
  if (name == "live") {
    r->kind = budgets::budget::class_live;
    return true;
  }
  if (name == "live_bytes") {
    r->kind = budgets::budget::class_live_bytes;
    return true;
  }
  for (unsigned c = 0; c < fuzz::tl::kCounterCount; ++c)
    if (name == memlive::kCounterNames[c]) {
      r->kind = budgets::budget::class_counter;
      r->index = c;
      return true;
    }
  return false;
}

bool iequal(const std::string& a, const char* b) {
  if (a.size() != std::strlen(b)) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(b[i])) return false;
  return true;
}

// VALUE into r (the form already known), or false.
bool reference_value(const std::string& v, reference* r) {
  std::size_t i = 0;
  bool negative = false;
  if (r->form == budgets::budget::form_growth && i < v.size() && (v[i] == '+' || v[i] == '-'))
    negative = v[i++] == '-';
  const std::size_t digits_from = i;
  unsigned __int128 x = 0;
  // Held past 2^64 (and far from 2^128 once shifted by a unit): too large either way.
  const unsigned __int128 kCap = static_cast<unsigned __int128>(1) << 70;
  for (; i < v.size() && v[i] >= '0' && v[i] <= '9'; ++i) x = std::min(x * 10 + (v[i] - '0'), kCap);
  if (i == digits_from) return false;
  const std::string unit = v.substr(i);
  int shift = -1;
  const char* const kUnits[] = {"", "B", "KiB", "MiB", "GiB", "TiB"};
  const int kShifts[] = {0, 0, 10, 20, 30, 40};
  for (int u = 0; u < 6; ++u)
    if (iequal(unit, kUnits[u])) shift = kShifts[u];
  if (shift < 0) return false;
  x <<= shift;
  if (r->form != budgets::budget::form_growth) {
    if (x > std::numeric_limits<std::uint64_t>::max()) return false;
    r->limit = static_cast<std::uint64_t>(x);
    return true;
  }
  const unsigned __int128 kMax = std::numeric_limits<std::int64_t>::max();
  if (x > kMax + (negative ? 1 : 0)) return false;
  r->growth_limit = negative ? static_cast<std::int64_t>(-static_cast<__int128>(x))
                             : static_cast<std::int64_t>(x);
  return true;
}

bool reference_parse(const std::string& text, reference* r) {
  std::string metric;
  std::size_t i = 0;
  for (const auto& f : {std::make_pair("last(", budgets::budget::form_last),
                        std::make_pair("growth(", budgets::budget::form_growth)})
    if (text.compare(0, std::strlen(f.first), f.first) == 0) {
      r->form = f.second;
      i = std::strlen(f.first);
    }
  std::size_t op = text.find_first_of("<>", i);
  if (op == std::string::npos) return false;
  metric = text.substr(i, op - i);
  if (r->form != budgets::budget::form_worst) {
    if (!ends_with(metric, ")")) return false;
    metric.pop_back();
  }
  if (!reference_metric(metric, r)) return false;
  r->upper = text[op] == '<';
  r->strict = !(op + 1 < text.size() && text[op + 1] == '=');
  return reference_value(text.substr(op + (r->strict ? 1 : 2)), r);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string given(reinterpret_cast<const char*>(data), size);
  std::string text;
  for (char c : given)
    if (c != ' ' && c != '\t') text += c;

  budgets::budget b;
  std::string err;
  const bool got = budgets::parse(given, &b, &err);
  reference r;
  const bool want = reference_parse(text, &r);
  FUZZ_CHECK(got == want, "parse('%s') = %d, want %d (%s)", given.c_str(), got, want,
             err.c_str());
  FUZZ_CHECK(b.text == text, "parse('%s') kept the text '%s'", given.c_str(), b.text.c_str());
  if (!got) {
    FUZZ_CHECK(err.find("'" + text + "'") != std::string::npos,
               "the refusal of '%s' does not quote it: %s", text.c_str(), err.c_str());
    return 0;
  }
  FUZZ_CHECK(b.kind == r.kind && b.form == r.form && b.upper == r.upper &&
                 b.strict == r.strict && b.bytes == r.bytes,
             "parse('%s'): kind %d form %d upper %d strict %d bytes %d, want %d %d %d %d %d",
             text.c_str(), b.kind, b.form, b.upper, b.strict, b.bytes, r.kind, r.form, r.upper,
             r.strict, r.bytes);
  const bool indexed = b.kind == budgets::budget::process ||
                       b.kind == budgets::budget::class_counter;
  const bool classed = b.kind != budgets::budget::process && b.kind != budgets::budget::threads;
  FUZZ_CHECK((!indexed || b.index == r.index) && (!classed || b.cls == r.cls),
             "parse('%s'): index %u class %u, want %u %u", text.c_str(), b.index, b.cls, r.index,
             r.cls);
  if (b.form == budgets::budget::form_growth)
    FUZZ_CHECK(b.growth_limit == r.growth_limit, "parse('%s'): growth limit %lld, want %lld",
               text.c_str(), static_cast<long long>(b.growth_limit),
               static_cast<long long>(r.growth_limit));
  else
    FUZZ_CHECK(b.limit == r.limit, "parse('%s'): limit %llu, want %llu", text.c_str(),
               static_cast<unsigned long long>(b.limit),
               static_cast<unsigned long long>(r.limit));
  return 0;
}
