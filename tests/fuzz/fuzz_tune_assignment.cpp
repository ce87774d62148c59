// libFuzzer target: `memlive tune name=value` input, memlive::parse_assignment and
// memlive::check_assignment, and the integer parser under them (memlive::detail::parse_int, also
// used for the query values interval_ms and seconds). The input is one assignment.
//
// Properties, besides no crash or undefined behaviour:
//  - parse_assignment accepts exactly: a non-empty name of [A-Za-z0-9_] (folded to lower case),
//    '=', and a value that is true/on/false/off (in any case), an optionally signed decimal
//    int64, or a JSON number (optionally after '+') whose value is whole and within int64; the
//    name and value it returns are those; a refusal has a message and leaves no partial result;
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);

  // parse_int against the reference.
  std::int64_t got = 0, want = 0;
  const bool ok_got = memlive::detail::parse_int(text, &got);
  const bool ok_want = fuzz::reference_int(text, &want);
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
  using memlive::detail::iequals;
  const bool yes = iequals(value, "true") || iequals(value, "on");
  const bool word = yes || iequals(value, "false") || iequals(value, "off");
  if (expect) {
    if (word)
      v = yes ? 1 : 0;
    else
      expect = fuzz::reference_int(value, &v) || fuzz::reference_json_whole(value, &v);
  }
  FUZZ_CHECK(parsed == expect, "parse_assignment('%s') = %d, want %d (%s)", text.c_str(), parsed,
             expect, err.c_str());
  if (!parsed) {
    FUZZ_CHECK(!err.empty(), "refused '%s' without a message", text.c_str());
    FUZZ_CHECK(a.name == "untouched" && a.value == 12345, "a refusal changed the result");
    return 0;
  }
  FUZZ_CHECK(a.name == name && a.value == v && a.word == word,
             "parse_assignment('%s') gave %s=%lld", text.c_str(), a.name.c_str(),
             static_cast<long long>(a.value));

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
