// Shared helpers of the libFuzzer targets in tests/fuzz: a property check that aborts (libFuzzer
// then saves the input), the option table the targets check against, reference parsers of
// integers and of whole numbers written as JSON numbers (decided on their digits), and a valid
// telemetry segment built from the layout structs of livealloc.h (the reader target mutates it).
#ifndef MEMLIVE_FUZZ_COMMON_H
#define MEMLIVE_FUZZ_COMMON_H

#include <livealloc_reader.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

// A violated property is a finding like a crash: print it and abort, so libFuzzer keeps the input.
#define FUZZ_CHECK(cond, ...)                                                              \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "property violated at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                   \
      std::fprintf(stderr, "\n");                                                          \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

namespace fuzz {

namespace tl = livealloc::telemetry;
namespace rd = livealloc::reader;

// The options a segment publishes, with the edges a checker must get right: a plain range, an
// option that may not change while running, a bool, and the full int64 range.
inline std::vector<rd::option_view> published_options() {
  std::vector<rd::option_view> v;
  auto add = [&](const char* name, std::int64_t lo, std::int64_t hi, bool live, bool is_bool) {
    rd::option_view o;
    o.name = name;
    o.min = lo;
    o.max = hi;
    o.requested = o.effective = o.default_value = lo;
    o.live = live;
    o.is_bool = is_bool;
    v.push_back(o);
  };
  add("page_recycle", 0, 4096, true, false);
  add("remote_batch", 1, 1024, true, false);
  add("telemetry_slots", 2, 4096, false, false);
  add("hugepages", 0, 1, true, true);
  add("wide", std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max(),
      true, false);
  add("negative", -100, -10, true, false);
  return v;
}

inline const rd::option_view* find(const std::vector<rd::option_view>& v, const std::string& n) {
  for (const rd::option_view& o : v)
    if (o.name == n) return &o;
  return nullptr;
}

// Reference integer parser: optional sign, at least one digit, no overflow (accumulated in
// negative numbers so INT64_MIN fits).
inline bool reference_int(const std::string& s, std::int64_t* out) {
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
inline bool reference_json_whole(const std::string& s, std::int64_t* out) {
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
  const auto n = static_cast<long long>(all.size());
  const long long p = std::max<long long>(point, 0);
  std::string whole = all.substr(0, static_cast<std::size_t>(std::min(p, n))) +
                      std::string(static_cast<std::size_t>(std::max(p - n, 0LL)), '0');
  const std::string after = all.substr(static_cast<std::size_t>(std::min(p, n)));
  if (after.find_first_not_of('0') != std::string::npos) return false;
  whole.erase(0, std::min(whole.find_first_not_of('0'), whole.size()));
  if (whole.empty()) {
    *out = 0;
    return true;
  }
  return reference_int((neg ? "-" : "") + whole, out);
}

// A small valid version-1 segment: header, class sizes, control block with the options above,
// exited totals, `slots` slots (the last one the overflow slot) and the free matrix. `pid` goes
// into the header (use getpid(): set_option needs a live process).
struct segment_template {
  std::vector<unsigned char> bytes;
  std::uint64_t slots_offset = 0, slot_size = 0, control_offset = 0, matrix_offset = 0;
};

inline segment_template make_segment(std::int32_t pid, std::uint32_t slots) {
  constexpr std::uint64_t kHeader = sizeof(tl::segment_header);
  constexpr std::uint64_t kControlHeader = offsetof(tl::control_block, options);
  const std::vector<rd::option_view> opts = published_options();
  segment_template t;
  const std::uint64_t class_sizes = kHeader;  // 280, a multiple of 8
  t.control_offset = class_sizes + 8ull * tl::kClassCount;
  const std::uint64_t exited =
      t.control_offset + kControlHeader + opts.size() * sizeof(tl::option_entry);
  t.slots_offset = exited + tl::kClassCount * sizeof(tl::class_counters);
  t.slot_size = sizeof(tl::slot_header) + tl::kClassCount * sizeof(tl::class_counters);
  t.matrix_offset = t.slots_offset + slots * t.slot_size;
  const std::uint64_t size = t.matrix_offset + 8ull * slots * slots;
  t.bytes.assign(size, 0);
  unsigned char* b = t.bytes.data();
  auto put = [&](std::uint64_t off, auto v) { std::memcpy(b + off, &v, sizeof v); };
  using H = tl::segment_header;
  std::memcpy(b + offsetof(H, magic), tl::kMagic, sizeof tl::kMagic);
  put(offsetof(H, version), tl::kVersion);
  put(offsetof(H, header_size), static_cast<std::uint32_t>(kHeader));
  put(offsetof(H, segment_size), size);
  put(offsetof(H, pid), pid);
  put(offsetof(H, class_count), tl::kClassCount);
  put(offsetof(H, counter_count), static_cast<std::uint32_t>(tl::kCounterCount));
  put(offsetof(H, slot_count), slots);
  put(offsetof(H, slot_size), static_cast<std::uint32_t>(t.slot_size));
  put(offsetof(H, class_sizes_offset), class_sizes);
  put(offsetof(H, control_offset), t.control_offset);
  put(offsetof(H, exited_offset), exited);
  put(offsetof(H, slots_offset), t.slots_offset);
  put(offsetof(H, matrix_offset), t.matrix_offset);
  put(offsetof(H, start_ns), std::uint64_t(1700000000000000000ull));
  std::memcpy(b + offsetof(H, program), "fuzz-\xc3\xa9t\xc3", 9);  // a cut UTF-8 sequence
  put(offsetof(H, segment_bytes), std::uint64_t(4) << 20);
  for (unsigned c = 1; c < tl::kClassCount; ++c) put(class_sizes + 8ull * c, std::uint64_t(16 * c));
  using C = tl::control_block;
  using O = tl::option_entry;
  put(t.control_offset + offsetof(C, generation), std::uint64_t(3));
  put(t.control_offset + offsetof(C, validated_generation), std::uint64_t(3));
  put(t.control_offset + offsetof(C, option_count), static_cast<std::uint32_t>(opts.size()));
  put(t.control_offset + offsetof(C, option_size), static_cast<std::uint32_t>(sizeof(O)));
  for (std::size_t i = 0; i < opts.size(); ++i) {
    const std::uint64_t o = t.control_offset + kControlHeader + i * sizeof(O);
    std::memcpy(b + o + offsetof(O, name), opts[i].name.c_str(), opts[i].name.size());
    put(o + offsetof(O, requested), opts[i].requested);
    put(o + offsetof(O, effective), opts[i].effective);
    put(o + offsetof(O, min), opts[i].min);
    put(o + offsetof(O, max), opts[i].max);
    put(o + offsetof(O, default_value), opts[i].default_value);
    put(o + offsetof(O, live), static_cast<std::uint32_t>(opts[i].live));
    put(o + offsetof(O, is_bool), static_cast<std::uint32_t>(opts[i].is_bool));
  }
  for (unsigned c = 0; c < tl::kCounterCount; ++c)
    put(exited + 7 * sizeof(tl::class_counters) + 8ull * c, std::uint64_t(c + 1));
  using S = tl::slot_header;
  for (std::uint32_t i = 0; i < slots; ++i) {
    const std::uint64_t h = t.slots_offset + i * t.slot_size;
    const bool overflow = i + 1 == slots;
    put(h + offsetof(S, state),
        static_cast<std::uint32_t>(overflow ? tl::slot_overflow : tl::slot_alive));
    put(h + offsetof(S, incarnation), std::uint32_t(1));
    put(h + offsetof(S, tid), static_cast<std::int32_t>(1000 + i));
    std::memcpy(b + h + offsetof(S, name), "worker\"\\\n", 9);
    for (unsigned cls = 0; cls < tl::kClassCount; cls += 5)
      for (unsigned c = 0; c < tl::kCounterCount; ++c)
        put(h + sizeof(S) + cls * sizeof(tl::class_counters) + 8ull * c,
            std::uint64_t(c == 0 ? 100 + i : c));
  }
  if (slots > 1) put(t.matrix_offset + 8, std::uint64_t(17));  // slot 0 freed 17 of slot 1's
  return t;
}

// Writes `bytes` to a fresh private file (0600) and returns its path; the caller unlinks it.
inline std::string temp_file(const void* data, std::size_t n, const char* stem) {
  const char* dir = std::getenv("TMPDIR");
  std::string path = std::string(dir && *dir ? dir : "/tmp") + "/" + stem + "-XXXXXX";
  std::vector<char> name(path.begin(), path.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) {
    std::perror("mkstemp");
    std::abort();
  }
  const char* p = static_cast<const char*>(data);
  for (std::size_t done = 0; done < n;) {
    const ssize_t w = write(fd, p + done, n - done);
    if (w <= 0) {
      std::perror("write");
      std::abort();
    }
    done += static_cast<std::size_t>(w);
  }
  close(fd);
  return name.data();
}

}  // namespace fuzz

#endif
