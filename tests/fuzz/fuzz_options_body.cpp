// libFuzzer target: the body of POST /api/options, memlive::detail::check_options_body (pure).
//
// Properties, besides no crash, leak or undefined behaviour, against a reference verdict made
// here from nlohmann's SAX parser and the option table (not from memlive's code):
//  - the body is malformed exactly when the reference finds it malformed, a number past a
//    double's range (1e400) being well-formed JSON: refused as "malformed JSON", field null;
//  - accepted exactly when the reference accepts: an object, not empty, no name twice (also in
//    two cases), every member a published, live option (its name in any case) with a value
//    within [min, max] (0 or 1 for a bool): a bool for a bool option, an integer, or a number
//    with a fraction or an exponent that is whole, decided on its digits
//    (fuzz::reference_json_whole: 8.0000000000000000001 is not 8);
//  - accepted: one value per member, equal to the reference's;
//  - refused: no values, a message, and a field that is null for the body as a whole (malformed,
//    not an object, empty), else the name given twice or the first member (in name order, as
//    they are checked) that the reference refuses;
//  - the {error, field} body the server sends for it (detail::json_error) parses back to the
//    same strings.
#include <memlive.h>

#include <map>
#include <set>

#include "fuzz_common.h"

namespace {

const std::vector<fuzz::rd::option_view>& options() {
  static const auto* v = new std::vector<fuzz::rd::option_view>(fuzz::published_options());
  return *v;
}

// A SAX handler of nlohmann's: the top-level names, those that come twice, the text of each
// top-level float as written, and the error that ended the parse (0 when none).
struct reader {
  std::set<std::string> names, twice;
  std::map<std::string, std::string> floats;
  std::string name;
  int depth = 0;
  int error = 0;
  std::size_t error_at = 0;
  std::string error_token;
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(std::int64_t) { return true; }
  bool number_unsigned(std::uint64_t) { return true; }
  bool number_float(double, const std::string& s) {  // the C locale's '.' here
    if (depth == 1) floats[name] = s;
    return true;
  }
  bool string(std::string&) { return true; }
  bool binary(nlohmann::json::binary_t&) { return true; }
  bool start_object(std::size_t) { return ++depth > 0; }
  bool key(std::string& k) {
    if (depth == 1 && !names.insert(name = k).second) twice.insert(k);
    return true;
  }
  bool end_object() { return --depth >= 0; }
  bool start_array(std::size_t) { return ++depth > 0; }
  bool end_array() { return --depth >= 0; }
  bool parse_error(std::size_t at, const std::string& token, const nlohmann::json::exception& e) {
    error = e.id;
    error_at = at;
    error_token = token;
    return false;
  }
};

// The reference's reading of a body. nlohmann ends its parse at a number past a double's range
// (error 406, reported at the number's end): that number is replaced by 0 padded with spaces
// and the body read again from the start, until it parses or fails otherwise.
struct reference {
  bool well_formed = false;
  nlohmann::json j;                            // the body, overflowing numbers as 0
  std::set<std::string> twice;                 // the top-level names given twice
  std::map<std::string, std::string> numbers;  // top-level name -> its float's text as written
};

reference read(std::string body) {
  reference ref;
  std::map<std::string, std::string> overflows;  // top-level name -> the number past the range
  for (;;) {
    reader r;
    nlohmann::json::sax_parse(body, &r);
    if (r.error == 406) {
      const std::size_t n = r.error_token.size();
      if (r.depth == 1) overflows[r.name] = r.error_token;
      body.replace(r.error_at - n, n, "0" + std::string(n - 1, ' '));
      continue;
    }
    if (r.error != 0) return ref;
    ref.well_formed = true;
    ref.j = nlohmann::json::parse(body);
    ref.twice = r.twice;
    ref.numbers = r.floats;
    for (const auto& [name, text] : overflows) ref.numbers[name] = text;
    return ref;
  }
}

// The published option a member names, in any case (as `tune` takes names), or nullptr.
const fuzz::rd::option_view* named(const std::string& name) {
  const auto lower = [](std::string t) {
    for (char& c : t) c = (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c;
    return t;
  };
  for (const fuzz::rd::option_view& o : options())
    if (lower(o.name) == lower(name)) return &o;
  return nullptr;
}

// The value a member may set its option to, or false when it is refused.
bool member_value(const reference& ref, const std::string& name, std::int64_t* out) {
  const fuzz::rd::option_view* o = named(name);
  if (!o || !o->live) return false;
  const nlohmann::json& v = ref.j.at(name);
  std::int64_t x = 0;
  if (ref.numbers.count(name)) {
    if (!fuzz::reference_json_whole(ref.numbers.at(name), &x)) return false;
  } else if (v.is_boolean()) {
    if (!o->is_bool) return false;
    x = v.get<bool>() ? 1 : 0;
  } else if (v.is_number_unsigned()) {
    if (v.get<std::uint64_t>() > std::uint64_t{std::numeric_limits<std::int64_t>::max()})
      return false;
    x = static_cast<std::int64_t>(v.get<std::uint64_t>());
  } else if (v.is_number_integer()) {
    x = v.get<std::int64_t>();
  } else {
    return false;
  }
  if (x < o->min || x > o->max || (o->is_bool && x != 0 && x != 1)) return false;
  *out = x;
  return true;
}

// What check_options_body should answer; `want` gets the values of an acceptance.
struct verdict {
  enum { accept, malformed, body, member } kind = accept;  // body: not an object, or empty
  std::string name;  // member: the first refused (in name order, as they are checked)
};

verdict expected(const reference& ref, std::map<std::string, std::int64_t>* want) {
  if (!ref.well_formed) return {verdict::malformed, ""};
  if (!ref.j.is_object() || ref.j.empty()) return {verdict::body, ""};
  for (auto it = ref.j.begin(); it != ref.j.end(); ++it) {
    const fuzz::rd::option_view* o = named(it.key());
    const std::string option = o ? o->name : it.key();
    if (want->count(option)) return {verdict::member, it.key()};  // given twice, in two cases
    std::int64_t v = 0;
    if (!member_value(ref, it.key(), &v)) return {verdict::member, it.key()};
    (*want)[option] = v;
  }
  return {};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using nlohmann::json;
  const std::string body(reinterpret_cast<const char*>(data), size);
  const memlive::detail::options_request r = memlive::detail::check_options_body(body, options());
  const reference ref = read(body);
  std::map<std::string, std::int64_t> want;
  const verdict v = expected(ref, &want);
  const bool should = v.kind == verdict::accept && ref.twice.empty();
  FUZZ_CHECK(r.ok() == should, "%s, the reference %s: %s", r.ok() ? "accepted" : r.error.c_str(),
             should ? "accepts" : "refuses", body.c_str());
  if (r.ok()) {
    FUZZ_CHECK(!r.has_field, "accepted, yet a field is named");
    FUZZ_CHECK(r.values.size() == want.size(), "%zu values for %zu members", r.values.size(),
               want.size());
    for (const memlive::assignment& a : r.values)
      FUZZ_CHECK(want.count(a.name) && want[a.name] == a.value, "'%s' = %lld, want %s",
                 a.name.c_str(), static_cast<long long>(a.value),
                 want.count(a.name) ? std::to_string(want[a.name]).c_str() : "no value");
    return 0;
  }
  FUZZ_CHECK(r.values.empty(), "rejected, yet %zu values kept", r.values.size());
  FUZZ_CHECK(!r.error.empty(), "rejected without a message");
  if (v.kind == verdict::malformed) {
    FUZZ_CHECK(r.error == "malformed JSON" && !r.has_field, "a malformed body refused as: %s",
               r.error.c_str());
  } else if (v.kind == verdict::body) {
    FUZZ_CHECK(r.error != "malformed JSON" && !r.has_field, "%s for a %s", r.error.c_str(),
               ref.j.is_object() ? "an empty object" : "JSON not an object");
  } else {  // a name twice (any of them), or the first member refused
    FUZZ_CHECK(r.error != "malformed JSON" && r.has_field &&
                   (ref.twice.empty() ? r.field == v.name : ref.twice.count(r.field) > 0),
               "refused naming '%s' (%s), the reference refuses '%s' first%s",
               r.has_field ? r.field.c_str() : "(null)", r.error.c_str(), v.name.c_str(),
               ref.twice.empty() ? "" : " and has a name twice");
  }
  // What the server sends back parses, with the same message and field.
  const std::string reply = memlive::detail::json_error(r.error, r.has_field ? &r.field : nullptr);
  const json e = json::parse(reply, nullptr, false);
  FUZZ_CHECK(!e.is_discarded() && e.is_object(), "unparsable error reply: %s", reply.c_str());
  FUZZ_CHECK(e["error"].is_string() && e["error"].get<std::string>() == r.error,
             "error reply does not round-trip: %s", reply.c_str());
  if (r.has_field)
    FUZZ_CHECK(e["field"].is_string() && e["field"].get<std::string>() == r.field,
               "field does not round-trip: %s", reply.c_str());
  else
    FUZZ_CHECK(e["field"].is_null(), "field not null: %s", reply.c_str());
  return 0;
}
