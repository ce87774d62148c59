// libFuzzer target: the body of POST /api/options, memlive::detail::check_options_body (pure).
//
// Properties, besides no crash, leak or undefined behaviour:
//  - accepted: one value per key of the (parsed) object, each a published, live option, within
//    [min, max], 0 or 1 for a bool, and equal to the JSON number (or bool) given (a float only
//    when it is a whole number);
//  - rejected: no values, a message, and a field that is either null (the body as a whole:
//    malformed, not an object, empty) or a key of the object (of a body whose parse a number
//    past a double's range ended: that number's key, out of range or unknown);
//  - the {error, field} body the server sends for it (detail::json_error) parses back to the
//    same strings.
#include <memlive.h>

#include <cmath>

#include "fuzz_common.h"

namespace {

const std::vector<fuzz::rd::option_view>& options() {
  static const auto* v = new std::vector<fuzz::rd::option_view>(fuzz::published_options());
  return *v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using nlohmann::json;
  const std::string body(reinterpret_cast<const char*>(data), size);
  const memlive::detail::options_request r = memlive::detail::check_options_body(body, options());
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (r.ok()) {
    FUZZ_CHECK(!j.is_discarded() && j.is_object() && !j.empty(), "accepted a bad body: %s",
               body.c_str());
    FUZZ_CHECK(r.values.size() == j.size(), "%zu values for %zu keys", r.values.size(), j.size());
    FUZZ_CHECK(!r.has_field, "accepted, yet a field is named");
    for (const memlive::assignment& a : r.values) {
      const fuzz::rd::option_view* o = fuzz::find(options(), a.name);
      FUZZ_CHECK(o != nullptr, "accepted an unknown option '%s'", a.name.c_str());
      FUZZ_CHECK(o->live, "accepted '%s', which is not live", a.name.c_str());
      FUZZ_CHECK(a.value >= o->min && a.value <= o->max, "'%s' = %lld outside [%lld, %lld]",
                 a.name.c_str(), static_cast<long long>(a.value), static_cast<long long>(o->min),
                 static_cast<long long>(o->max));
      FUZZ_CHECK(!o->is_bool || a.value == 0 || a.value == 1, "bool '%s' = %lld", a.name.c_str(),
                 static_cast<long long>(a.value));
      FUZZ_CHECK(j.contains(a.name), "value for '%s', not a key of the body", a.name.c_str());
      const json& v = j[a.name];
      if (v.is_boolean()) {
        FUZZ_CHECK(o->is_bool && a.value == (v.get<bool>() ? 1 : 0), "bool mismatch");
      } else if (v.is_number_float()) {  // a whole number written as a float: 1e3, 8.0
        const double d = v.get<double>();
        FUZZ_CHECK(std::trunc(d) == d && static_cast<double>(a.value) == d,
                   "accepted %s for '%s' as %lld", v.dump().c_str(), a.name.c_str(),
                   static_cast<long long>(a.value));
      } else {
        FUZZ_CHECK(v.is_number_integer(), "accepted a %s for '%s'", v.type_name(), a.name.c_str());
        if (v.is_number_unsigned())
          FUZZ_CHECK(v.get<std::uint64_t>() == static_cast<std::uint64_t>(a.value),
                     "value mismatch");
        else
          FUZZ_CHECK(v.get<std::int64_t>() == a.value, "value mismatch");
      }
    }
  } else {
    FUZZ_CHECK(r.values.empty(), "rejected, yet %zu values kept", r.values.size());
    FUZZ_CHECK(!r.error.empty(), "rejected without a message");
    if (r.has_field && j.is_discarded()) {  // a number past a double's range, which ends a parse
      const bool known = fuzz::find(options(), r.field) != nullptr;
      FUZZ_CHECK(r.error.find(known ? "out of range" : "unknown option") != std::string::npos,
                 "'%s' named in a malformed body: %s", r.field.c_str(), r.error.c_str());
    } else if (r.has_field) {
      FUZZ_CHECK(!j.is_discarded() && j.is_object() && j.contains(r.field),
                 "the field '%s' is not a key of the body", r.field.c_str());
    } else {
      FUZZ_CHECK(j.is_discarded() || !j.is_object() || j.empty(),
                 "a body-level error (%s) for a non-empty object", r.error.c_str());
    }
    // What the server sends back parses, with the same message and field.
    const std::string reply =
        memlive::detail::json_error(r.error, r.has_field ? &r.field : nullptr);
    const json e = json::parse(reply, nullptr, false);
    FUZZ_CHECK(!e.is_discarded() && e.is_object(), "unparsable error reply: %s", reply.c_str());
    FUZZ_CHECK(e["error"].is_string() && e["error"].get<std::string>() == r.error,
               "error reply does not round-trip: %s", reply.c_str());
    if (r.has_field)
      FUZZ_CHECK(e["field"].is_string() && e["field"].get<std::string>() == r.field,
                 "field does not round-trip: %s", reply.c_str());
    else
      FUZZ_CHECK(e["field"].is_null(), "field not null: %s", reply.c_str());
  }
  return 0;
}
