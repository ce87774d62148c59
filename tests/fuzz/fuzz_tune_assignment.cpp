// libFuzzer target: `memlive tune name=value` input, memlive::parse_assignment and
// memlive::check_assignment, and the integer parser under them (memlive::detail::parse_int, also
// used for the query values interval_ms and seconds). The input is one assignment.
//
// Properties, besides no crash or undefined behaviour:
//  - parse_assignment accepts exactly: a non-empty name of [A-Za-z0-9_] (folded to lower case),
//    '=', and a value that is true/on/false/off, an optionally signed decimal int64, or a JSON
//    number (optionally after '+') whose value is whole and within int64; the name and value it
//    returns are those; a refusal has a message and leaves no partial result;
//  - parse_int agrees with a reference: [+-]?[0-9]+ that fits in int64, same value;
//  - check_assignment accepts only a published, live option with the value in [min, max] (0/1
//    for a bool; true/false/on/off for a bool only), and a refusal names the option.
#include <memlive.h>

#include "fuzz_common.h"

namespace {

const std::vector<fuzz::rd::option_view>& options() {
  static const auto* v = new std::vector<fuzz::rd::option_view>(fuzz::published_options());
  return *v;
}

// Reference integer parser: optional sign, at least one digit, no overflow (accumulated in
// negative numbers so INT64_MIN fits).
bool reference_int(const std::string& s, std::int64_t* out) {
  std::size_t i = 0;
  bool neg = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
  if (i == s.size()) return false;
  std::int64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    const int d = s[i] - '0';
    if (v < (std::numeric_limits<std::int64_t>::min() + d) / 10) return false;
    v = v * 10 - d;
  }
  if (!neg) {
    if (v == std::numeric_limits<std::int64_t>::min()) return false;
    v = -v;
  }
  *out = v;
  return true;
}

// Reference for the other whole numbers: '+'? then JSON's number grammar,
// -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, whole and within int64, decided exactly: the
// digits of the integer and fraction parts with the decimal point moved by the exponent; every
// digit after the point must be 0, the digits before it fit in int64 (reference_int).
bool reference_json_whole(const std::string& s, std::int64_t* out) {
  std::size_t i = s.size() > 0 && s[0] == '+' ? 1 : 0;
  const std::size_t start = i;
  std::string intpart, frac, exp;
  auto digits = [&](std::string* to) {
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') to->push_back(s[i++]);
    return to->size();
  };
  bool neg = false;
  if (i < s.size() && s[i] == '-' && start == 0) neg = ++i > 0;  // a sign, not two
  if (digits(&intpart) == 0 || (intpart.size() > 1 && intpart[0] == '0')) return false;
  if (i < s.size() && s[i] == '.' && (++i, digits(&frac) == 0)) return false;
  bool exp_neg = false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) exp_neg = s[i++] == '-';
    if (digits(&exp) == 0) return false;
  }
  if (i != s.size()) return false;
  // The point sits after `point` digits of intpart + frac (may be outside them).
  exp.erase(0, std::min(exp.find_first_not_of('0'), exp.size()));
  if (exp.size() > 6) exp = "999999";  // far beyond any digits here
  const long long e = exp.empty() ? 0 : std::atoll(exp.c_str());
  const std::string all = intpart + frac;
  const long long point = static_cast<long long>(intpart.size()) + (exp_neg ? -e : e);
  std::string whole, after;
  const auto n = static_cast<long long>(all.size());
  for (long long k = 0; k < std::max<long long>(point, 0); ++k)
    whole.push_back(k < n ? all[static_cast<std::size_t>(k)] : '0');
  for (long long k = std::max<long long>(point, 0); k < n; ++k)
    after.push_back(all[static_cast<std::size_t>(k)]);
  if (after.find_first_not_of('0') != std::string::npos) return false;
  whole.erase(0, std::min(whole.find_first_not_of('0'), whole.size()));
  if (whole.empty()) {
    *out = 0;
    return true;
  }
  return reference_int((neg ? "-" : "") + whole, out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);

  // parse_int against the reference.
  std::int64_t got = 0, want = 0;
  const bool ok_got = memlive::detail::parse_int(text, &got);
  const bool ok_want = reference_int(text, &want);
  FUZZ_CHECK(ok_got == ok_want && (!ok_got || got == want),
             "parse_int('%s') = %d/%lld, want %d/%lld", text.c_str(), ok_got,
             static_cast<long long>(got), ok_want, static_cast<long long>(want));

  // parse_assignment against the grammar.
  memlive::assignment a;
  a.name = "untouched";
  a.value = 12345;
  std::string err;
  const bool parsed = memlive::parse_assignment(text, &a, &err);
  const std::size_t eq = text.find('=');
  bool expect = eq != std::string::npos && eq > 0;
  std::string name, value;
  if (expect) {
    name = text.substr(0, eq);
    value = text.substr(eq + 1);
    for (char& c : name) {
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) expect = false;
    }
  }
  std::int64_t v = 0;
  const bool word = value == "true" || value == "on" || value == "false" || value == "off";
  if (expect) {
    if (value == "true" || value == "on")
      v = 1;
    else if (value == "false" || value == "off")
      v = 0;
    else
      expect = reference_int(value, &v) || reference_json_whole(value, &v);
  }
  FUZZ_CHECK(parsed == expect, "parse_assignment('%s') = %d, want %d (%s)", text.c_str(), parsed,
             expect, err.c_str());
  if (!parsed) {
    FUZZ_CHECK(!err.empty(), "refused '%s' without a message", text.c_str());
    FUZZ_CHECK(a.name == "untouched" && a.value == 12345, "a refusal changed the result");
    return 0;
  }
  FUZZ_CHECK(a.name == name && a.value == v && a.word == word, "parse_assignment('%s') gave %s=%lld",
             text.c_str(), a.name.c_str(), static_cast<long long>(a.value));

  // check_assignment against the published options.
  std::string why;
  const bool accepted = memlive::check_assignment(a, options(), &why);
  const fuzz::rd::option_view* o = fuzz::find(options(), a.name);
  const bool should = o && o->live && a.value >= o->min && a.value <= o->max &&
                      (!o->is_bool || a.value == 0 || a.value == 1) && (o->is_bool || !a.word);
  FUZZ_CHECK(accepted == should, "check_assignment(%s=%lld) = %d, want %d (%s)", a.name.c_str(),
             static_cast<long long>(a.value), accepted, should, why.c_str());
  if (!accepted)
    FUZZ_CHECK(why.find("'" + a.name + "'") != std::string::npos,
               "the refusal does not name the option: %s", why.c_str());
  return 0;
}
