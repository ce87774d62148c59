// libFuzzer target: livealloc_reader.h on a malformed telemetry segment file. A reader must never
// crash, read outside its mapping or hang on a damaged or hostile file, and what it accepts must
// serialise into valid output.
//
// Input: byte 0 chooses the mode.
//   odd:  the file is the rest of the input, as is (from scratch: magic, sizes, truncation).
//   even: a valid segment (fuzz_common.h, 3 slots) is damaged by the rest of the input: byte 1
//         bit 0 set: after patching, segment_size is set to the file size again (so damage gets
//         past the size check); bits 1-7: the file is cut by that many 64-byte units; then
//         records of 10 bytes: a 16-bit little-endian offset (modulo the size) and 8 bytes XORed
//         into the file there (clipped at its end).
// The file (a private temporary file, unlinked after each input) goes through open_path, take(),
// to_json/to_csv/to_prometheus, since_baseline and set_option.
//
// Properties: open_path gives a segment or nullptr with a message; take() gives an error or a
// snapshot whose shapes agree with its own header (53 class sizes, slots below slot_count, a
// slot_count^2 matrix or none, states alive/exited/overflow); its JSON parses; since_baseline of a
// snapshot against itself leaves every cumulative counter at 0; set_option accepts only a
// published, live option within [min, max] and then shows it as `requested`.
#include <memlive.h>

#include "fuzz_common.h"

namespace {

namespace tl = livealloc::telemetry;
namespace rd = livealloc::reader;

std::vector<unsigned char> build_file(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return {};
  if (data[0] & 1) return std::vector<unsigned char>(data + 1, data + size);
  static const fuzz::segment_template* t =
      new fuzz::segment_template(fuzz::make_segment(getpid(), 3));
  std::vector<unsigned char> f = t->bytes;
  const std::uint8_t flags = size > 1 ? data[1] : 0;
  const std::size_t cut = std::min<std::size_t>(f.size(), (flags >> 1) * 64u);
  f.resize(f.size() - cut);
  for (std::size_t i = 2; i + 10 <= size && !f.empty(); i += 10) {
    const std::size_t off = (data[i] | (std::size_t(data[i + 1]) << 8)) % f.size();
    for (std::size_t k = 0; k < 8 && off + k < f.size(); ++k) f[off + k] ^= data[i + 2 + k];
  }
  if ((flags & 1) && f.size() >= offsetof(tl::segment_header, segment_size) + 8) {
    const std::uint64_t n = f.size();
    std::memcpy(f.data() + offsetof(tl::segment_header, segment_size), &n, 8);
  }
  return f;
}

void check_snapshot(const rd::snapshot& s) {
  FUZZ_CHECK(s.class_sizes.size() == tl::kClassCount, "%zu class sizes", s.class_sizes.size());
  FUZZ_CHECK(s.slot_count > 0, "slot_count 0 accepted");
  for (std::size_t i = 0; i < s.free_matrix.size(); ++i) {
    const rd::snapshot::free_cell& c = s.free_matrix[i];
    FUZZ_CHECK(c.from_slot < s.slot_count && c.owner_slot < s.slot_count && c.blocks != 0,
               "free matrix cell (%u, %u, %llu) for %u slots", c.from_slot, c.owner_slot,
               static_cast<unsigned long long>(c.blocks), s.slot_count);
    const rd::snapshot::free_cell& p = s.free_matrix[i ? i - 1 : 0];
    FUZZ_CHECK(i == 0 || p.from_slot < c.from_slot ||
                   (p.from_slot == c.from_slot && p.owner_slot < c.owner_slot),
               "free matrix cells out of order at %zu", i);
    FUZZ_CHECK(s.freed(c.from_slot, c.owner_slot) == c.blocks, "freed() misses cell %zu", i);
  }
  std::uint32_t last = 0;
  for (std::size_t i = 0; i < s.threads.size(); ++i) {
    const rd::thread_view& t = s.threads[i];
    FUZZ_CHECK(t.slot < s.slot_count, "slot %u of %u", t.slot, s.slot_count);
    FUZZ_CHECK(i == 0 || t.slot > last, "slots out of order");
    FUZZ_CHECK(
        t.state == tl::slot_alive || t.state == tl::slot_exited || t.state == tl::slot_overflow,
        "state %u listed", t.state);
    FUZZ_CHECK(t.name.size() <= 3 * tl::kNameSize, "name of %zu bytes", t.name.size());
    last = t.slot;
  }
  const std::string j = memlive::to_json(s);
  const nlohmann::json p = nlohmann::json::parse(j, nullptr, false);
  FUZZ_CHECK(!p.is_discarded(), "to_json gave invalid JSON: %s", j.c_str());
  FUZZ_CHECK(p["threads"].size() == s.threads.size(), "threads lost in JSON");
  FUZZ_CHECK(p["options"].size() == s.options.size(), "options lost in JSON");
  FUZZ_CHECK(p["program"].get<std::string>().size() <= 3 * tl::kProgramSize, "program name");
  const std::string csv = memlive::to_csv(s, true);
  FUZZ_CHECK(!csv.empty() && csv.back() == '\n', "CSV does not end in a line break");
  const std::string prom = memlive::to_prometheus(s);
  FUZZ_CHECK(prom.empty() || prom.back() == '\n', "Prometheus text does not end in a line break");

  // Against itself, every cumulative counter grew by 0.
  const rd::snapshot d = memlive::detail::since_baseline(s, s);
  for (const rd::thread_view& t : d.threads)
    for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
      for (unsigned c = 0; c < tl::kCounterCount; ++c)
        if (!memlive::counter_is_gauge(c))
          FUZZ_CHECK(t.counters[cls][c] == 0,
                     "since_baseline(s, s) slot %u class %u counter %u = %llu", t.slot, cls, c,
                     static_cast<unsigned long long>(t.counters[cls][c]));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<unsigned char> file = build_file(data, size);
  const std::string path = fuzz::temp_file(file.data(), file.size(), "memlive-fuzz-segment");
  std::string error;
  std::unique_ptr<rd::segment> seg = rd::segment::open_path(path, &error);
  if (!seg) {
    FUZZ_CHECK(!error.empty(), "open_path refused without a message");
    unlink(path.c_str());
    return 0;
  }
  const rd::snapshot s = seg->take();
  if (!s.ok()) {
    unlink(path.c_str());
    return 0;
  }
  check_snapshot(s);

  // A change through the control block, on an option picked by the input.
  if (!s.options.empty() && size >= 10) {
    const rd::option_view& o = s.options[data[size - 9] % s.options.size()];
    std::int64_t value = 0;
    std::memcpy(&value, data + size - 8, 8);
    if (data[size - 9] & 0x80) value = o.min + (value & 0xff);  // near the range, often inside
    std::string why;
    std::uint64_t generation = 0;
    const bool stored = seg->set_option(o.name, value, &why, &generation);
    const bool allowed = o.live && value >= o.min && value <= o.max &&
                         (!o.is_bool || value == 0 || value == 1) &&
                         s.process_alive;  // the segment's owner runs: not a newer holder of its pid
    // Two options may share a name in a damaged file: only the first one's rules apply then.
    bool first = true;
    for (const rd::option_view& other : s.options)
      if (&other < &o && other.name == o.name) first = false;
    if (first) {
      FUZZ_CHECK(stored == allowed, "set_option(%s, %lld) = %d, want %d (%s)", o.name.c_str(),
                 static_cast<long long>(value), stored, allowed, why.c_str());
    }
    if (stored) {
      const rd::snapshot after = seg->take();
      if (after.ok()) {
        const rd::option_view* n = after.find_option(o.name);
        FUZZ_CHECK(n && n->requested == value, "set_option stored, but requested is not %lld",
                   static_cast<long long>(value));
        FUZZ_CHECK(after.generation == generation, "generation %llu, set_option said %llu",
                   static_cast<unsigned long long>(after.generation),
                   static_cast<unsigned long long>(generation));
      }
    } else {
      FUZZ_CHECK(!why.empty(), "set_option refused without a message");
    }
  }
  seg.reset();
  unlink(path.c_str());
  return 0;
}
