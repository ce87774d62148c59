// memlive.h's formats and tuning input on synthetic snapshots: JSON parses (nlohmann) and gives
// back every number; CSV has its columns; Prometheus text follows exposition format 0.0.4 line by
// line; parse_assignment and check_assignment name the field they refuse. The 64 x 53 snapshot
// is timed and printed (no assertion on time: machines differ).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <memlive.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <clocale>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace tl = livealloc::telemetry;
namespace rd = livealloc::reader;
using json = nlohmann::json;

namespace {

// A snapshot with `threads` threads whose every class has non-zero counters when `full`, else
// counters only in a few classes. Numbers cover the edges: 0, 1, 2^53 + 1, UINT64_MAX.
// With `typical`, every counter is below 10^6 instead (what a running program shows).
rd::snapshot make_snapshot(unsigned threads, bool full, bool typical = false) {
  std::mt19937_64 rng(42);
  auto pick = [&](unsigned i) -> std::uint64_t {
    if (typical) return rng() % 1000000u;
    switch (i % 7) {
      case 0:
        return std::numeric_limits<std::uint64_t>::max() - (rng() % 3);
      case 1:
        return (std::uint64_t(1) << 53) + 1;
      case 2:
        return 0;
      default:
        return rng() % 1000000000u;
    }
  };
  rd::snapshot s;
  s.pid = 4242;
  s.program = "prog \"x\"\\y";
  s.start_ns = 1700000000000000000ull;
  s.taken_ns = 1700000000123456789ull;
  s.process_alive = true;
  s.process_start_ticks = 98765;
  for (unsigned c = 0; c < tl::kClassCount; ++c) s.class_sizes.push_back(c * 16u);
  for (unsigned c = 0; c < tl::kClassCount; ++c) s.class_units.push_back(c ? c / 8 + 1 : 0);
  s.segment_bytes = pick(1);
  s.large_bytes = 123;
  s.cached_bytes = 9;
  s.committed_bytes = pick(0);
  s.mmap_calls = 5;
  s.munmap_calls = 6;
  s.madvise_calls = 7;
  s.purges = 8;
  s.slots_used = threads;
  s.overflow_threads = 10;
  s.generation = 4;  // one change not validated yet
  s.validated_generation = 3;
  s.rejected = 1;
  rd::option_view o;
  o.name = "page_recycle";
  o.requested = o.effective = 2;
  o.min = 0;
  o.max = 4096;
  o.default_value = 2;
  o.live = true;
  s.options.push_back(o);
  o.name = "telemetry_slots";
  o.requested = o.effective = o.default_value = 256;
  o.min = 2;
  o.max = 4096;
  o.live = false;
  s.options.push_back(o);
  o.name = "hugepages";
  o.requested = o.effective = o.default_value = 0;
  o.min = 0;
  o.max = 1;
  o.live = true;
  o.is_bool = true;
  s.options.push_back(o);
  o.name = "negative";
  o.requested = o.effective = o.min = std::numeric_limits<std::int64_t>::min();
  o.max = o.default_value = std::numeric_limits<std::int64_t>::max();
  o.live = true;
  o.is_bool = false;
  s.options.push_back(o);
  unsigned k = 0;
  for (unsigned t = 0; t < threads; ++t) {
    rd::thread_view v;
    v.slot = t;
    v.state = t % 5 == 4 ? tl::slot_exited : tl::slot_alive;
    v.incarnation = t + 1;
    v.tid = 1000 + static_cast<std::int32_t>(t);
    v.name = "worker-" + std::to_string(t);
    v.start_ns = s.start_ns + t;
    v.exit_ns = v.state == tl::slot_exited ? s.start_ns + 99 : 0;
    v.applied_generation = 3;
    v.slow_paths = pick(k++);
    v.flushes = t;
    v.mmap_calls = t * 3u + 11;  // every per-thread number differs from the others
    v.munmap_calls = t * 3u + 12;
    v.madvise_calls = t * 3u + 13;
    for (unsigned cls = 0; cls < tl::kClassCount; ++cls) {
      if (!full && cls % 10 != t % 10) continue;
      for (unsigned c = 0; c < tl::kCounterCount; ++c) v.counters[cls][c] = pick(k++) | (c == 0);
    }
    s.threads.push_back(v);
  }
  for (unsigned c = 0; c < tl::kCounterCount; ++c) s.exited[7][c] = c + 1;
  s.resident_bytes = 7u << 20;
  s.slot_count = threads + 1;
  if (threads >= 2) {
    s.free_matrix.push_back({0, 1, 17});  // slot 0 freed 17 blocks of slot 1's heap
    s.free_matrix.push_back({1, 0, std::numeric_limits<std::uint64_t>::max()});
  }
  return s;
}

// Splits one CSV record (RFC 4180; the record has no line break inside quotes here).
std::vector<std::string> csv_split(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"')
        out.back() += '"', ++i;
      else if (c == '"')
        quoted = false;
      else
        out.back() += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("JSON parses and gives back every number") {
  rd::snapshot s = make_snapshot(6, false);
  s.threads[1].name = "a\"b\\c\nd\te\x01";
  s.threads[2].name = "cut \xC3";  // a multi-byte character cut by the 15-byte limit
  s.threads[3].name = "memlive-http";  // memlive's own thread (another process: by its name)
  const std::string text = memlive::to_json(s);
  json j;
  REQUIRE_NOTHROW(j = json::parse(text));
  CHECK(j["schema"] == "memlive.snapshot/1");
  CHECK(j["pid"] == s.pid);
  CHECK(j["program"] == s.program);
  CHECK(j["alive"] == true);
  CHECK(j["start_ns"].get<std::uint64_t>() == s.start_ns);
  CHECK(j["process_start_ticks"].get<std::uint64_t>() == 98765);
  CHECK(j["taken_ns"].get<std::uint64_t>() == s.taken_ns);
  CHECK(j["layout_version"] == tl::kVersion);
  REQUIRE(j["counters"].size() == tl::kCounterCount);
  for (unsigned c = 0; c < tl::kCounterCount; ++c)
    CHECK(j["counters"][c] == memlive::kCounterNames[c]);
  CHECK(j["counters"][tl::c_allocs] == "allocs");
  CHECK(j["counters"][tl::c_handed_over] == "handed_over");
  for (const json& g : j["gauges"]) CHECK(memlive::counter_is_gauge(g.get<unsigned>()));
  CHECK(j["class_sizes"].get<std::vector<std::uint64_t>>() == s.class_sizes);
  CHECK(j["class_units"].get<std::vector<std::uint64_t>>() == s.class_units);
  const json& p = j["process"];
  CHECK(p["segment_bytes"].get<std::uint64_t>() == s.segment_bytes);
  CHECK(p["committed_bytes"].get<std::uint64_t>() == s.committed_bytes);
  CHECK(p["large_bytes"] == s.large_bytes);
  CHECK(p["purges"] == s.purges);
  CHECK(p["live_blocks"].get<std::uint64_t>() == s.live_blocks());
  CHECK(p["live_bytes"].get<std::uint64_t>() == s.live_bytes());
  CHECK(p["resident_bytes"].get<std::uint64_t>() == s.resident_bytes);
  CHECK(p["cached_bytes"] == s.cached_bytes);
  CHECK(p["mmap_calls"] == s.mmap_calls);
  CHECK(p["munmap_calls"] == s.munmap_calls);
  CHECK(p["madvise_calls"] == s.madvise_calls);
  CHECK(p["slots_used"] == s.slots_used);
  CHECK(p["overflow_threads"] == s.overflow_threads);
  CHECK(p.size() == 13);  // a field added here gets a check above
  REQUIRE(j["free_matrix"].size() == 2);
  CHECK(j["free_matrix"][0] == json::array({0, 1, 17}));
  CHECK(j["free_matrix"][1][0] == 1);
  CHECK(j["free_matrix"][1][1] == 0);
  CHECK(j["free_matrix"][1][2].get<std::uint64_t>() == std::numeric_limits<std::uint64_t>::max());
  CHECK(j["control"]["generation"] == s.generation);
  CHECK(j["control"]["validated_generation"] == s.validated_generation);
  CHECK(j["control"]["rejected"] == s.rejected);
  CHECK(j["control"].size() == 3);
  REQUIRE(j["options"].size() == s.options.size());
  for (std::size_t i = 0; i < s.options.size(); ++i) {
    const json& o = j["options"][i];
    CHECK(o["name"] == s.options[i].name);
    CHECK(o["requested"].get<std::int64_t>() == s.options[i].requested);
    CHECK(o["effective"].get<std::int64_t>() == s.options[i].effective);
    CHECK(o["min"].get<std::int64_t>() == s.options[i].min);
    CHECK(o["max"].get<std::int64_t>() == s.options[i].max);
    CHECK(o["default"].get<std::int64_t>() == s.options[i].default_value);
    CHECK(o["live"] == s.options[i].live);
    CHECK(o["bool"] == s.options[i].is_bool);
  }
  REQUIRE(j["threads"].size() == s.threads.size());
  for (std::size_t i = 0; i < s.threads.size(); ++i) {
    const json& t = j["threads"][i];
    const rd::thread_view& v = s.threads[i];
    CHECK(t["slot"] == v.slot);
    CHECK(t["state"] == rd::state_name(s, v));
    CHECK(t["state"] == rd::state_name(v.state));  // the process runs: the slot's own state
    CHECK(t["tid"] == v.tid);
    CHECK(t["incarnation"] == v.incarnation);
    CHECK(t["start_ns"].get<std::uint64_t>() == v.start_ns);
    CHECK(t["exit_ns"].get<std::uint64_t>() == v.exit_ns);
    CHECK(t["applied_generation"] == v.applied_generation);
    CHECK(t["slow_paths"].get<std::uint64_t>() == v.slow_paths);
    CHECK(t["flushes"] == v.flushes);
    CHECK(t["mmap_calls"] == v.mmap_calls);
    CHECK(t["munmap_calls"] == v.munmap_calls);
    CHECK(t["madvise_calls"] == v.madvise_calls);
    if (i != 2) CHECK(t["name"] == v.name);  // (2: the cut character, checked below)
    CHECK(t["memlive"] == (v.name == "memlive-http"));
    CHECK(t.size() == 15);  // a field added here gets a check above
    std::set<unsigned> seen;
    for (const json& row : t["classes"]) {
      REQUIRE(row.size() == 1 + tl::kCounterCount);
      unsigned cls = row[0].get<unsigned>();
      REQUIRE(cls < tl::kClassCount);
      seen.insert(cls);
      for (unsigned c = 0; c < tl::kCounterCount; ++c)
        CHECK(row[1 + c].get<std::uint64_t>() == v.counters[cls][c]);
    }
    for (unsigned cls = 0; cls < tl::kClassCount; ++cls) {
      bool nonzero = false;
      for (std::uint64_t x : v.counters[cls]) nonzero |= x != 0;
      CHECK(seen.count(cls) == (nonzero ? 1u : 0u));  // exactly the non-zero classes
    }
  }
  CHECK(j["threads"][1]["name"] == "a\"b\\c\nd\te\x01");
  CHECK(j["threads"][3]["memlive"] == true);
  CHECK(j["threads"][2]["name"] == "cut \xEF\xBF\xBD");  // U+FFFD for the cut byte
  REQUIRE(j["exited"].size() == 1);
  CHECK(j["exited"][0][0] == 7);
  for (unsigned c = 0; c < tl::kCounterCount; ++c) CHECK(j["exited"][0][1 + c] == c + 1);
}

TEST_CASE("JSON of an empty snapshot and of a reused buffer") {
  rd::snapshot s;
  s.pid = 1;
  json j = json::parse(memlive::to_json(s));
  CHECK(j["threads"].empty());
  CHECK(j["exited"].empty());
  CHECK(j["options"].empty());
  CHECK(j["free_matrix"].empty());
  std::string buf = "garbage";
  buf.clear();
  memlive::append_json(buf, make_snapshot(3, true));
  std::string again;
  memlive::append_json(again, make_snapshot(3, true));
  CHECK(buf == again);
  buf.clear();
  memlive::append_json(buf, s);  // shorter than before: no stale bytes left at the end
  CHECK(buf == memlive::to_json(s));
}

TEST_CASE("a process that is gone: its threads that were running show ended, in JSON and CSV") {
  rd::snapshot s = make_snapshot(5, false);  // slots 0-3 alive, 4 exited
  s.process_alive = false;                   // what take() says once the process is gone
  const json j = json::parse(memlive::to_json(s));
  CHECK(j["alive"] == false);
  REQUIRE(j["threads"].size() == 5);
  for (std::size_t i = 0; i < 5; ++i) {
    CHECK(j["threads"][i]["state"] == (i == 4 ? "exited" : "ended"));
    CHECK(j["threads"][i]["exit_ns"].get<std::uint64_t>() == s.threads[i].exit_ns);
  }
  std::set<std::string> states;
  for (const std::string& line : lines_of(memlive::to_csv(s, false))) states.insert(csv_split(line)[5]);
  CHECK(states == std::set<std::string>{"ended", "exited", "exited_totals"});
  // While it runs, the same slots are alive.
  s.process_alive = true;
  const json live = json::parse(memlive::to_json(s));
  CHECK(live["threads"][0]["state"] == "alive");
  CHECK(live["threads"][4]["state"] == "exited");
}

TEST_CASE("CSV has a header and one row per thread and non-zero class") {
  rd::snapshot s = make_snapshot(5, false);
  s.threads[0].name = "comma, \"quoted\"";
  const std::vector<std::string> lines = lines_of(memlive::to_csv(s));
  REQUIRE(!lines.empty());
  const std::vector<std::string> header = csv_split(lines[0]);
  REQUIRE(header.size() == 8 + tl::kCounterCount + 1);
  CHECK(header[0] == "taken_ns");
  CHECK(header[4] == "thread");
  CHECK(header[6] == "class");
  CHECK(header[7] == "size");
  for (unsigned c = 0; c < tl::kCounterCount; ++c)
    CHECK(header[8 + c] == memlive::kCounterNames[c]);
  CHECK(header.back() == "live");
  std::size_t expected_rows = 1;  // the exited totals' class 7
  for (const rd::thread_view& t : s.threads)
    for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
      expected_rows += std::any_of(t.counters[cls].begin(), t.counters[cls].end(),
                                   [](std::uint64_t v) { return v != 0; });
  REQUIRE(lines.size() == 1 + expected_rows);
  std::size_t row = 1;
  for (const rd::thread_view& t : s.threads)
    for (unsigned cls = 0; cls < tl::kClassCount; ++cls) {
      if (std::none_of(t.counters[cls].begin(), t.counters[cls].end(),
                       [](std::uint64_t v) { return v != 0; }))
        continue;
      const std::vector<std::string> f = csv_split(lines[row++]);
      REQUIRE(f.size() == header.size());
      CHECK(f[0] == std::to_string(s.taken_ns));
      CHECK(f[1] == std::to_string(s.pid));
      CHECK(f[2] == std::to_string(t.slot));
      CHECK(f[3] == std::to_string(t.tid));
      CHECK(f[4] == t.name);
      CHECK(f[5] == rd::state_name(t.state));
      CHECK(f[6] == std::to_string(cls));
      CHECK(f[7] == std::to_string(s.class_sizes[cls]));
      for (unsigned c = 0; c < tl::kCounterCount; ++c)
        CHECK(f[8 + c] == std::to_string(t.counters[cls][c]));
      CHECK(f.back() == std::to_string(t.live(cls)));
    }
  const std::vector<std::string> f = csv_split(lines[row]);
  REQUIRE(f.size() == header.size());
  CHECK(f[2] == "exited");
  CHECK(f[5] == "exited_totals");
  CHECK(f[6] == "7");
  CHECK(f[8] == "1");
}

TEST_CASE("Prometheus text: HELP and TYPE once per family, strict sample lines, escaping") {
  rd::snapshot s = make_snapshot(4, false);
  s.threads[0].name = "q\"b\\n\nx";  // quote, backslash, the letter n, a newline
  s.threads[1].name = "sp ace,{}=";
  s.threads[2].name = "bad \xFF";
  const std::string text = memlive::to_prometheus(s);
  REQUIRE(!text.empty());
  CHECK(text.back() == '\n');

  const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) [^\n]+$)");
  const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge)$)");
  const std::string label_value = R"("(?:[^"\\\n]|\\[\\"n])*")";
  const std::string label = "[a-zA-Z_][a-zA-Z0-9_]*=" + label_value;
  const std::regex sample("^([a-zA-Z_:][a-zA-Z0-9_:]*)\\{(" + label + "(?:," + label +
                          ")*)\\} (0|[1-9][0-9]*|-[1-9][0-9]*)$");
  std::map<std::string, std::string> types;  // family -> type
  std::set<std::string> helped;
  std::string current;  // the family whose TYPE came last
  std::size_t samples = 0;
  for (const std::string& line : lines_of(text)) {
    std::smatch m;
    if (std::regex_match(line, m, help)) {
      INFO(line);
      CHECK(helped.insert(m[1]).second);  // once per family
      current.clear();
    } else if (std::regex_match(line, m, type)) {
      INFO(line);
      CHECK(types.emplace(m[1], m[2]).second);  // once per family
      CHECK(helped.count(m[1]) == 1);           // HELP first
      current = m[1];
      const bool total =
          m[1].str().size() > 6 && m[1].str().compare(m[1].str().size() - 6, 6, "_total") == 0;
      CHECK(total == (m[2] == "counter"));  // counters, and only counters, end in _total
    } else {
      INFO(line);
      REQUIRE(std::regex_match(line, m, sample));
      CHECK(m[1] == current);  // samples follow their family's TYPE
      ++samples;
    }
  }
  CHECK(types.at("livealloc_allocs_total") == "counter");
  CHECK(types.at("livealloc_pages_in_use") == "gauge");
  CHECK(types.at("livealloc_live_blocks") == "gauge");
  CHECK(types.at("livealloc_segment_bytes") == "gauge");
  CHECK(types.at("livealloc_foreign_allocs_total") == "counter");
  CHECK(samples > 0);
  // The escapes: \" \\ and \n, nothing else.
  CHECK(text.find(R"(thread="q\"b\\n\nx")") != std::string::npos);
  CHECK(text.find(R"(thread="sp ace,{}=")") != std::string::npos);
  CHECK(text.find("thread=\"bad \xEF\xBF\xBD\"") != std::string::npos);
  // The labels of one row, in order.
  const rd::thread_view& t = s.threads[3];
  unsigned cls = 3;  // make_snapshot gives thread 3 class 3
  std::string want = "livealloc_allocs_total{pid=\"4242\",thread=\"worker-3\",tid=\"" +
                     std::to_string(t.tid) + "\",slot=\"3\",class=\"3\",size=\"48\"} " +
                     std::to_string(t.counters[cls][tl::c_allocs]) + "\n";
  CHECK(text.find(want) != std::string::npos);
  CHECK(text.find("livealloc_allocs_total{pid=\"4242\",thread=\"\",tid=\"0\",slot=\"exited\","
                  "class=\"7\",size=\"112\"} 1\n") != std::string::npos);
  CHECK(text.find("livealloc_option_effective{pid=\"4242\",option=\"page_recycle\"} 2\n") !=
        std::string::npos);
}

TEST_CASE("Prometheus label values: control characters become U+FFFD, JSON keeps them escaped") {
  rd::snapshot s = make_snapshot(2, false);
  s.threads[0].name = "cr\rtab\tdel\x7f" "nel\xC2\x85" "e\xC2\xA0nd";  // \xC2\xA0: NBSP stays
  const std::string text = memlive::to_prometheus(s);
  const std::string fffd = "\xEF\xBF\xBD";
  CHECK(text.find("thread=\"cr" + fffd + "tab" + fffd + "del" + fffd + "nel" + fffd +
                  "e\xC2\xA0nd\"") != std::string::npos);
  bool raw_control = false;  // a parser that splits lines on \r or \x85 reads every line whole
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7F ||
        (c == 0xC2 && i + 1 < text.size() && static_cast<unsigned char>(text[i + 1]) < 0xA0))
      raw_control = true;
  }
  CHECK(!raw_control);
  const json j = json::parse(memlive::to_json(s));
  CHECK(j["threads"][0]["name"] == "cr\rtab\tdel\x7f" "nel\xC2\x85" "e\xC2\xA0nd");
}

TEST_CASE("thread names: 3- and 4-byte UTF-8 kept, each byte of a malformed sequence U+FFFD") {
  const std::string fffd = "\xEF\xBF\xBD";
  struct named {
    std::string raw, want;
  };
  const named names[] = {
      {"\xE5\xB7\xA5\xE4\xBD\x9C-1", "\xE5\xB7\xA5\xE4\xBD\x9C-1"},  // CJK, 3 bytes each
      {"\xF0\x9F\x9A\x80go", "\xF0\x9F\x9A\x80go"},                   // U+1F680, 4 bytes
      {"\xEF\xBF\xBF\xF4\x8F\xBF\xBF", "\xEF\xBF\xBF\xF4\x8F\xBF\xBF"},  // U+FFFF, U+10FFFF
      {"s\xED\xA0\x80", "s" + fffd + fffd + fffd},          // a surrogate, U+D800
      {"o\xE0\x80\xAF", "o" + fffd + fffd + fffd},          // overlong '/' in 3 bytes
      {"o\xF0\x80\x80\xAF", "o" + fffd + fffd + fffd + fffd},  // overlong '/' in 4 bytes
      {"b\xF4\x90\x80\x80", "b" + fffd + fffd + fffd + fffd},  // U+110000, past Unicode
      {"t\xE5\xB7", "t" + fffd + fffd},                      // cut after 2 of 3 bytes
      {"t\xF0\x9F\x9A", "t" + fffd + fffd + fffd},          // cut after 3 of 4 bytes
      {"x\xF5\x80\x80\x80", "x" + fffd + fffd + fffd + fffd},  // no lead byte is F5 or more
  };
  constexpr std::size_t kNames = sizeof names / sizeof names[0];
  rd::snapshot s = make_snapshot(kNames, false);
  for (std::size_t i = 0; i < kNames; ++i) s.threads[i].name = names[i].raw;
  const json j = json::parse(memlive::to_json(s));
  const std::string prom = memlive::to_prometheus(s);
  const std::string csv = memlive::to_csv(s);
  for (std::size_t i = 0; i < kNames; ++i) {
    CAPTURE(i);
    CHECK(j["threads"][i]["name"] == names[i].want);
    CHECK(prom.find("thread=\"" + names[i].want + "\"") != std::string::npos);
    CHECK(csv.find("," + names[i].want + ",") != std::string::npos);
  }
}

TEST_CASE("Prometheus by class: one series per class, the process totals, never going down") {
  rd::snapshot s = make_snapshot(4, true, true);
  rd::counter_matrix floor{};
  const std::string text = memlive::to_prometheus_by_class(s, &floor);
  CHECK(text.find("thread=") == std::string::npos);
  CHECK(text.find("livealloc_thread_") == std::string::npos);
  CHECK(text.find("livealloc_process_alive{pid=\"4242\"} 1\n") != std::string::npos);
  const unsigned cls = 3;
  const auto sample = [](const std::string& family, unsigned c, std::uint64_t v) {
    return "\n" + family + "{pid=\"4242\",class=\"" + std::to_string(c) + "\",size=\"" +
           std::to_string(c * 16) + "\"} " + std::to_string(v) + "\n";
  };
  const std::uint64_t allocs = s.total(cls, tl::c_allocs), frees = s.total(cls, tl::c_frees);
  CHECK(text.find(sample("livealloc_allocs_total", cls, allocs)) != std::string::npos);
  CHECK(text.find(sample("livealloc_frees_total", cls, frees)) != std::string::npos);
  CHECK(text.find(sample("livealloc_live_blocks", cls, s.live(cls))) != std::string::npos);
  // The next snapshot leaves out thread 3 (it changed hands while copied): its counts would
  // vanish from the totals. Counters stay at what was reported; gauges follow the snapshot.
  rd::snapshot next = s;
  next.threads.pop_back();
  const std::string later = memlive::to_prometheus_by_class(next, &floor);
  CHECK(next.total(cls, tl::c_allocs) < allocs);
  CHECK(later.find(sample("livealloc_allocs_total", cls, allocs)) != std::string::npos);
  CHECK(later.find(sample("livealloc_frees_total", cls, frees)) != std::string::npos);
  CHECK(later.find(sample("livealloc_pages_in_use", cls, next.total(cls, tl::c_pages_in_use))) !=
        std::string::npos);
  // Without a floor, the dip shows.
  CHECK(memlive::to_prometheus_by_class(next).find(
            sample("livealloc_allocs_total", cls, next.total(cls, tl::c_allocs))) !=
        std::string::npos);
}

namespace {
// Every sample line of a Prometheus text as "family{labels}" -> value.
std::map<std::string, std::string> prom_samples(const std::string& text) {
  std::map<std::string, std::string> out;
  for (const std::string& line : lines_of(text)) {
    if (line.empty() || line[0] == '#') continue;
    const std::size_t space = line.rfind(' ');
    REQUIRE(space != std::string::npos);
    CHECK(out.emplace(line.substr(0, space), line.substr(space + 1)).second);  // no duplicate
  }
  return out;
}
}  // namespace

TEST_CASE("Prometheus text: every sample of every family carries the snapshot's value") {
  rd::snapshot s = make_snapshot(4, false);
  s.process_alive = false;  // the 0 of a process that is gone
  s.threads[2].name = "memlive-http";
  std::map<std::string, std::string> want;
  const std::string pid = "pid=\"4242\"";
  auto row_labels = [&](const std::string& base, unsigned cls) {
    return base + ",class=\"" + std::to_string(cls) + "\",size=\"" + std::to_string(cls * 16) +
           "\"";
  };
  using row = std::array<std::uint64_t, tl::kCounterCount>;
  auto add_row = [&](const std::string& labels, const row& r) {
    for (unsigned c = 0; c < tl::kCounterCount; ++c)
      want["livealloc_" + std::string(memlive::kCounterNames[c]) +
           (memlive::counter_is_gauge(c) ? "" : "_total") + "{" + labels + "}"] =
          std::to_string(r[c]);
    want["livealloc_live_blocks{" + labels + "}"] = std::to_string(rd::detail::live_of(r));
  };
  auto nonzero = [](const row& r) {
    return std::any_of(r.begin(), r.end(), [](std::uint64_t v) { return v != 0; });
  };
  for (const rd::thread_view& t : s.threads) {
    std::string base = pid + ",thread=\"" + t.name + "\",tid=\"" + std::to_string(t.tid) +
                       "\",slot=\"" + std::to_string(t.slot) + "\"";
    if (t.name == "memlive-http") base += ",memlive=\"true\"";
    for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
      if (nonzero(t.counters[cls])) add_row(row_labels(base, cls), t.counters[cls]);
    const std::pair<const char*, std::uint64_t> per_thread[] = {
        {"slow_paths", t.slow_paths}, {"flushes", t.flushes}, {"mmap_calls", t.mmap_calls},
        {"munmap_calls", t.munmap_calls}, {"madvise_calls", t.madvise_calls}};
    for (const auto& [name, v] : per_thread)
      want["livealloc_thread_" + std::string(name) + "_total{" + base + "}"] = std::to_string(v);
  }
  for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
    if (nonzero(s.exited[cls]))
      add_row(row_labels(pid + ",thread=\"\",tid=\"0\",slot=\"exited\"", cls), s.exited[cls]);
  const std::pair<const char*, std::uint64_t> per_process[] = {
      {"process_alive", 0},
      {"segment_bytes", s.segment_bytes},
      {"large_bytes", s.large_bytes},
      {"cached_bytes", s.cached_bytes},
      {"committed_bytes", s.committed_bytes},
      {"live_bytes", s.live_bytes()},
      {"resident_bytes", s.resident_bytes},
      {"slots_used", s.slots_used},
      {"mmap_calls_total", s.mmap_calls},
      {"munmap_calls_total", s.munmap_calls},
      {"madvise_calls_total", s.madvise_calls},
      {"purges_total", s.purges},
      {"overflow_threads_total", s.overflow_threads},
      {"options_rejected_total", s.rejected}};
  for (const auto& [name, v] : per_process)
    want["livealloc_" + std::string(name) + "{" + pid + "}"] = std::to_string(v);
  s.program = "a \"quoted\" \\ program";
  want["livealloc_process_info{" + pid + ",program=\"a \\\"quoted\\\" \\\\ program\"}"] = "1";
  for (const rd::option_view& o : s.options)
    want["livealloc_option_effective{" + pid + ",option=\"" + o.name + "\"}"] =
        std::to_string(o.effective);
  const std::map<std::string, std::string> got = prom_samples(memlive::to_prometheus(s));
  for (const auto& [key, value] : want) {
    INFO(key);
    auto it = got.find(key);
    REQUIRE(it != got.end());
    CHECK(it->second == value);
  }
  CHECK(got.size() == want.size());  // and nothing else
  CHECK(want.count("livealloc_option_effective{pid=\"4242\",option=\"negative\"}") == 1);
}

TEST_CASE("Prometheus text of several processes: each family once, every process's samples") {
  std::vector<rd::snapshot> all;
  for (int pid : {101, 202, 303}) {
    all.push_back(make_snapshot(static_cast<unsigned>(pid / 100), false));
    all.back().pid = pid;
    all.back().program = "prog" + std::to_string(pid);
  }
  for (bool by_class : {false, true}) {
    INFO("by_class ", by_class);
    const std::string text = memlive::to_prometheus(all, by_class);
    // The samples are those of each process alone, and nothing else.
    std::map<std::string, std::string> want;
    for (const rd::snapshot& s : all)
      for (const auto& kv : prom_samples(by_class ? memlive::to_prometheus_by_class(s)
                                                  : memlive::to_prometheus(s)))
        CHECK(want.insert(kv).second);
    CHECK(prom_samples(text) == want);
    CHECK(want.count("livealloc_process_info{pid=\"202\",program=\"prog202\"}") == 1);
    // Each family once, and its samples together after its TYPE line.
    std::set<std::string> types, seen;
    std::string current;
    for (const std::string& line : lines_of(text)) {
      if (line.rfind("# TYPE ", 0) == 0) {
        current = line.substr(7, line.find(' ', 7) - 7);
        CHECK(types.insert(current).second);
      } else if (!line.empty() && line[0] != '#') {
        const std::string family = line.substr(0, line.find('{'));
        CHECK(family == current);
        seen.insert(family);
      }
    }
    CHECK(seen == types);
    CHECK(types.count("livealloc_thread_flushes_total") == (by_class ? 0u : 1u));
  }
  // None: the families' HELP and TYPE lines, no sample.
  CHECK(prom_samples(memlive::to_prometheus(std::vector<rd::snapshot>{}, true)).empty());
}

TEST_CASE("CSV: the exited totals' row carries every value") {
  rd::snapshot s = make_snapshot(2, false);
  const std::vector<std::string> lines = lines_of(memlive::to_csv(s));
  const std::vector<std::string> f = csv_split(lines.back());
  REQUIRE(f.size() == 8 + tl::kCounterCount + 1);
  CHECK(f[0] == std::to_string(s.taken_ns));
  CHECK(f[1] == "4242");
  CHECK(f[2] == "exited");
  CHECK(f[3] == "0");
  CHECK(f[4] == "");
  CHECK(f[5] == "exited_totals");
  CHECK(f[6] == "7");
  CHECK(f[7] == "112");
  for (unsigned c = 0; c < tl::kCounterCount; ++c) CHECK(f[8 + c] == std::to_string(c + 1));
  CHECK(f.back() == std::to_string(s.live(7)));
  // No header: the same rows.
  const std::vector<std::string> bare = lines_of(memlive::to_csv(s, false));
  CHECK(bare == std::vector<std::string>(lines.begin() + 1, lines.end()));
}

namespace {
// A base snapshot and one taken later: slot 0 the same thread (counts grown), slot 1 taken by a
// new thread (the old one's counts folded into the exited totals), slot 2 new since the base.
struct since_case {
  rd::snapshot base, now;
  since_case() {
    base = make_snapshot(2, true, true);
    base.slot_count = 3;
    base.free_matrix = {{0, 1, 40}, {1, 0, 5}};
    now = base;
    rd::thread_view& same = now.threads[0];
    for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
      for (unsigned c = 0; c < tl::kCounterCount; ++c)
        same.counters[cls][c] += memlive::counter_is_gauge(c) ? 1000 + c : cls + c + 1;
    same.slow_paths += 5;
    same.flushes += 6;
    same.mmap_calls += 7;
    same.munmap_calls += 8;
    same.madvise_calls += 9;
    rd::thread_view& next = now.threads[1];  // the new thread of slot 1
    for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
      for (unsigned c = 0; c < tl::kCounterCount; ++c) {
        now.exited[cls][c] += base.threads[1].counters[cls][c] + (c == tl::c_frees ? 3 : 0);
        next.counters[cls][c] = 2 * cls + c;
      }
    next.incarnation += 1;
    next.tid += 100;
    next.slow_paths = 17;
    rd::thread_view fresh = base.threads[0];
    fresh.slot = 2;
    fresh.incarnation = 1;
    fresh.tid = 5555;
    for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
      for (unsigned c = 0; c < tl::kCounterCount; ++c) fresh.counters[cls][c] = cls * 100 + c;
    fresh.slow_paths = 23;
    now.threads.push_back(fresh);
    now.mmap_calls += 1;
    now.munmap_calls += 2;
    now.madvise_calls += 3;
    now.purges += 4;
    now.overflow_threads += 5;
    now.free_matrix = {{0, 1, 40 + 11}, {1, 0, 5}, {2, 0, 12}};
    now.segment_bytes += 4096;  // gauges: as in now
  }
};
}  // namespace

TEST_CASE("since_baseline: the process totals are exactly now - base, gauges as now") {
  const since_case k;
  const rd::snapshot d = memlive::detail::since_baseline(k.now, k.base);
  for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
    for (unsigned c = 0; c < tl::kCounterCount; ++c) {
      INFO("class ", cls, " counter ", memlive::kCounterNames[c]);
      if (memlive::counter_is_gauge(c))
        CHECK(d.total(cls, c) == k.now.total(cls, c));
      else
        CHECK(d.total(cls, c) == k.now.total(cls, c) - k.base.total(cls, c));
    }
  CHECK(d.mmap_calls == 1);
  CHECK(d.munmap_calls == 2);
  CHECK(d.madvise_calls == 3);
  CHECK(d.purges == 4);
  CHECK(d.overflow_threads == 5);
  CHECK(d.segment_bytes == k.now.segment_bytes);
  CHECK(d.slots_used == k.now.slots_used);
  REQUIRE(d.free_matrix.size() == 2);  // the cell that did not grow is left out
  CHECK(d.freed(0, 1) == 11);
  CHECK(d.freed(1, 0) == 0);
  CHECK(d.freed(2, 0) == 12);
}

TEST_CASE("since_baseline: per thread, growth of the same thread, everything of a new one") {
  const since_case k;
  const rd::snapshot d = memlive::detail::since_baseline(k.now, k.base);
  REQUIRE(d.threads.size() == 3);
  const rd::thread_view& same = d.threads[0];
  for (unsigned cls = 0; cls < tl::kClassCount; ++cls)
    for (unsigned c = 0; c < tl::kCounterCount; ++c) {
      INFO("class ", cls, " counter ", memlive::kCounterNames[c]);
      CHECK(same.counters[cls][c] == (memlive::counter_is_gauge(c)
                                          ? k.now.threads[0].counters[cls][c]
                                          : std::uint64_t(cls + c + 1)));
      // Slot 1's new thread (another incarnation and tid) and slot 2's keep their full rows.
      CHECK(d.threads[1].counters[cls][c] == k.now.threads[1].counters[cls][c]);
      CHECK(d.threads[2].counters[cls][c] == k.now.threads[2].counters[cls][c]);
      // The exited totals: only what was folded beyond the old thread of slot 1.
      if (!memlive::counter_is_gauge(c))
        CHECK(d.exited[cls][c] == (c == tl::c_frees ? 3u : 0u));
    }
  CHECK(same.slow_paths == 5);
  CHECK(same.flushes == 6);
  CHECK(same.mmap_calls == 7);
  CHECK(same.munmap_calls == 8);
  CHECK(same.madvise_calls == 9);
  CHECK(d.threads[1].slow_paths == 17);
  CHECK(d.threads[2].slow_paths == 23);
  CHECK(d.threads[0].name == k.now.threads[0].name);
}

TEST_CASE("since_baseline: a thread with the same slot and incarnation but another tid is new") {
  since_case k;
  k.now.threads[1] = k.base.threads[1];
  k.now.threads[1].tid += 1;  // a fork child's thread, say: not the base's thread
  k.now.exited = k.base.exited;
  const rd::snapshot d = memlive::detail::since_baseline(k.now, k.base);
  CHECK(d.threads[1].counters[3][tl::c_allocs] == k.base.threads[1].counters[3][tl::c_allocs]);
  CHECK(d.threads[1].slow_paths == k.base.threads[1].slow_paths);
}

TEST_CASE("since_baseline: counters that went down give 0, another slot count keeps the matrix") {
  since_case k;
  k.now.threads[0].counters[5][tl::c_allocs] = 0;  // lower than in the base: a torn read
  k.now.threads[0].slow_paths = 0;
  k.now.mmap_calls = 0;
  k.now.purges = 0;
  k.now.slot_count = 4;
  k.now.free_matrix = {{0, 1, 9}, {3, 3, 9}};
  const rd::snapshot d = memlive::detail::since_baseline(k.now, k.base);
  CHECK(d.threads[0].counters[5][tl::c_allocs] == 0);
  CHECK(d.threads[0].slow_paths == 0);
  CHECK(d.mmap_calls == 0);
  CHECK(d.purges == 0);
  REQUIRE(d.free_matrix.size() == 2);  // another layout: nothing to subtract
  CHECK(d.freed(0, 1) == 9);
  CHECK(d.freed(3, 3) == 9);
  CHECK(memlive::detail::since_baseline(k.base, k.base).total(5, tl::c_allocs) == 0);
}

TEST_CASE("serialising 64 threads x 53 classes (timed, printed)") {
  for (bool typical : {false, true}) {
    const rd::snapshot s = make_snapshot(64, true, typical);
    std::string buf;
    auto time_it = [&](auto&& f) {
      std::vector<double> us;
      for (int i = 0; i < 41; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        f();
        auto t1 = std::chrono::steady_clock::now();
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      }
      std::sort(us.begin(), us.end());
      return us[us.size() / 2];
    };
    const double json_reused = time_it([&] {
      buf.clear();
      memlive::append_json(buf, s);
    });
    const double json_fresh = time_it([&] { buf = memlive::to_json(s); });
    const std::size_t json_size = buf.size();
    const double csv = time_it([&] { buf = memlive::to_csv(s); });
    const std::size_t csv_size = buf.size();
    const double prom = time_it([&] { buf = memlive::to_prometheus(s); });
    std::printf(
        "memlive serialisation, 64 threads x 53 classes, all counters non-zero, %s (median of "
        "41):\n"
        "  json %.0f us reusing the buffer, %.0f us fresh (%zu bytes)\n"
        "  csv %.0f us (%zu bytes), prometheus %.0f us (%zu bytes)\n",
        typical ? "values < 10^6" : "worst case: 2/7 of the values 16-20 digits", json_reused,
        json_fresh, json_size, csv, csv_size, prom, buf.size());
    // What was timed is complete: the times alone would pass on an empty output.
    std::string reused;
    memlive::append_json(reused, s);
    CHECK(reused.size() == json_size);
    json j = json::parse(reused);
    CHECK(j["threads"].size() == 64);
    CHECK(j["threads"][63]["classes"].size() == tl::kClassCount);
    const std::size_t rows = 64 * tl::kClassCount + 1;  // every thread and class, exited class 7
    CHECK(lines_of(memlive::to_csv(s)).size() == 1 + rows);
    CHECK(csv_size == memlive::to_csv(s).size());
    const std::map<std::string, std::string> samples = prom_samples(buf);
    // Per row: 16 counter families and live_blocks; per thread: 5; then the process's 15 and
    // one per option.
    CHECK(samples.size() == rows * (tl::kCounterCount + 1) + 64 * 5 + 15 + s.options.size());
  }
}

TEST_CASE("parse_assignment: good forms") {
  memlive::assignment a;
  std::string err;
  REQUIRE(memlive::parse_assignment("page_recycle=8", &a, &err));
  CHECK(a.name == "page_recycle");
  CHECK(a.value == 8);
  REQUIRE(memlive::parse_assignment("PAGE_RECYCLE=+3", &a, &err));
  CHECK(a.name == "page_recycle");
  CHECK(a.value == 3);
  CHECK_FALSE(a.word);
  REQUIRE(memlive::parse_assignment("hugepages=true", &a, &err));
  CHECK(a.value == 1);
  CHECK(a.word);
  REQUIRE(memlive::parse_assignment("hugepages=off", &a, &err));
  CHECK(a.value == 0);
  // The words in any case, as the name: memlive tune folds both.
  REQUIRE(memlive::parse_assignment("HUGEPAGES=True", &a, &err));
  CHECK(a.value == 1);
  CHECK(a.word);
  REQUIRE(memlive::parse_assignment("hugepages=OFF", &a, &err));
  CHECK(a.value == 0);
  CHECK(a.word);
  REQUIRE(memlive::parse_assignment("x=-9223372036854775808", &a, &err));
  CHECK(a.value == std::numeric_limits<std::int64_t>::min());
}

TEST_CASE("parse_assignment: errors name the field") {
  struct bad {
    const char* text;
    const char* says;
  };
  const bad cases[] = {
      {"page_recycle", "expected name=value"},
      {"=5", "name before '=' is empty"},
      {"page-recycle=5", "'page-recycle'"},
      {"page_recycle=", "option 'page_recycle': no value"},
      {"page_recycle=abc", "option 'page_recycle': 'abc' is not a whole number"},
      {"page_recycle=1.5", "'1.5' is not a whole number"},
      {"page_recycle=12x", "'12x' is not a whole number"},
      {"page_recycle= 1", "is not a whole number"},
      {"page_recycle=99999999999999999999", "out of range"},
      {"page_recycle=--1", "page_recycle"},
  };
  for (const bad& b : cases) {
    INFO(b.text);
    memlive::assignment a;
    a.name = "untouched";
    std::string err;
    CHECK_FALSE(memlive::parse_assignment(b.text, &a, &err));
    CHECK(err.find(b.says) != std::string::npos);
    CHECK(a.name == "untouched");
  }
}

TEST_CASE("check_assignment against the published options") {
  const rd::snapshot s = make_snapshot(1, false);
  std::string err;
  CHECK(memlive::check_assignment({"page_recycle", 4096}, s.options, &err));
  CHECK(memlive::check_assignment({"page_recycle", 0}, s.options, &err));
  CHECK(memlive::check_assignment({"hugepages", 1}, s.options, &err));
  CHECK_FALSE(memlive::check_assignment({"page_recycle", 4097}, s.options, &err));
  CHECK(err == "option 'page_recycle': 4097 is out of range [0, 4096]");
  CHECK_FALSE(memlive::check_assignment({"page_recycle", -1}, s.options, &err));
  CHECK(err.find("out of range") != std::string::npos);
  CHECK_FALSE(memlive::check_assignment({"telemetry_slots", 8}, s.options, &err));
  CHECK(err.find("'telemetry_slots' cannot change while the program runs") != std::string::npos);
  CHECK(err.find("LIVEALLOC_TELEMETRY_SLOTS") != std::string::npos);
  CHECK_FALSE(memlive::check_assignment({"hugepages", 2}, s.options, &err));
  CHECK(err.find("'hugepages' is a bool") != std::string::npos);
  CHECK(memlive::check_assignment({"hugepages", 1, true}, s.options, &err));  // hugepages=on
  // page_recycle=on: a word is for bools, as POST /api/options refuses {"page_recycle": true}.
  CHECK_FALSE(memlive::check_assignment({"page_recycle", 1, true}, s.options, &err));
  CHECK(err == "option 'page_recycle' takes an integer, not true, false, on or off");
  CHECK_FALSE(memlive::check_assignment({"nosuch", 1}, s.options, &err));
  CHECK(err.find("unknown option 'nosuch'") != std::string::npos);
  CHECK(err.find("page_recycle") != std::string::npos);  // lists the live ones
  CHECK(err.find("did you mean") == std::string::npos);
  CHECK_FALSE(memlive::check_assignment({"pag_recycle", 1}, s.options, &err));
  CHECK(err.rfind("unknown option 'pag_recycle' (did you mean 'page_recycle'?); the live", 0) == 0);
}

TEST_CASE("check_options_body: all checked, errors name the field, nothing kept on failure") {
  const rd::snapshot s = make_snapshot(1, false);
  using memlive::detail::check_options_body;
  auto ok = check_options_body(R"({"page_recycle": 8, "hugepages": true})", s.options);
  REQUIRE(ok.ok());
  REQUIRE(ok.values.size() == 2);
  std::map<std::string, std::int64_t> got;
  for (const auto& a : ok.values) got[a.name] = a.value;
  CHECK(got["page_recycle"] == 8);
  CHECK(got["hugepages"] == 1);
  CHECK(check_options_body(R"({"hugepages": 0})", s.options).ok());
  // Names in any case, as tune takes them; stored under the published name.
  const auto upper = check_options_body(R"({"PAGE_RECYCLE": 9, "HugePages": false})", s.options);
  REQUIRE(upper.ok());
  std::map<std::string, std::int64_t> named;
  for (const auto& a : upper.values) named[a.name] = a.value;
  CHECK(named == std::map<std::string, std::int64_t>{{"hugepages", 0}, {"page_recycle", 9}});
  const auto twice = check_options_body(R"({"page_recycle": 3, "PAGE_RECYCLE": 4})", s.options);
  CHECK_FALSE(twice.ok());
  CHECK(twice.error == "option 'page_recycle' given twice; nothing applied");
  CHECK((twice.field == "PAGE_RECYCLE" || twice.field == "page_recycle"));
  CHECK(twice.values.empty());
  // A whole number written as a float (1e3, 8.0: Python's json.dumps of a float) is that integer.
  for (const char* body : {R"({"page_recycle": 1e3})", R"({"page_recycle": 1000.0})",
                           R"({"page_recycle": 10E2})", R"({"page_recycle": 1.000e+3})"}) {
    INFO(body);
    const auto r = check_options_body(body, s.options);
    REQUIRE(r.ok());
    CHECK(r.values.at(0).value == 1000);
  }

  struct bad_case {
    const char* body;
    const char* field;  // nullptr: the body as a whole
    const char* says;
  };
  const bad_case cases[] = {
      {"", nullptr, "malformed JSON"},
      {"{\"page_recycle\": ", nullptr, "malformed JSON"},
      {"{\"page_recycle\": 8} x", nullptr, "malformed JSON"},
      {"[1]", nullptr, "JSON object"},
      {"8", nullptr, "JSON object"},
      {"{}", nullptr, "no options"},
      {R"({"page_recycle": "8"})", "page_recycle", "an integer, not a string"},
      {R"({"page_recycle": 8.5})", "page_recycle", "with a fraction"},
      {R"({"page_recycle": 1e-3})", "page_recycle", "with a fraction"},
      // Decided on the digits, as `tune` decides: a double holds 0 and 8 for these.
      {R"({"page_recycle": 1e-400})", "page_recycle", "with a fraction"},
      {R"({"page_recycle": 8.0000000000000000001})", "page_recycle", "with a fraction"},
      // Past a double's range, which ends nlohmann's parse: out of range, not malformed.
      {R"({"page_recycle": 1e400})", "page_recycle", "1e400 is out of range [0, 4096]"},
      {R"({"page_recycle": -1E+400})", "page_recycle", "-1E+400 is out of range [0, 4096]"},
      {R"({"hugepages": 1e400})", "hugepages", "1e400 is out of range [0, 1]"},
      {R"({"nosuch": 1e400})", "nosuch", "unknown option 'nosuch'"},
      // ... judged on the whole body: malformed after it is malformed, and every member counts
      // (in name order, as always).
      {R"({"page_recycle": 1e400, garbage)", nullptr, "malformed JSON"},
      {R"({"page_recycle": 1e400 "hugepages": 1})", nullptr, "malformed JSON"},
      {R"({"page_recycle": 1e400} x)", nullptr, "malformed JSON"},
      {R"({"page_recycle": 5-1e400})", nullptr, "malformed JSON"},
      {R"({"page_recycle": 1e400, "hugepages": 2})", "hugepages", "is a bool"},
      {R"({"hugepages": 1, "page_recycle": -1e400, "nosuch": 1e999})", "nosuch",
       "unknown option 'nosuch'"},
      {R"({"page_recycle": 1e400, "page_recycle": 1})", "page_recycle", "given twice"},
      {R"({"page_recycle": [1e400]})", "page_recycle", "an integer, not an array"},
      {"[1e400]", nullptr, "JSON object"},
      // Each number keeps its own text, whatever floats come before it.
      {R"({"x": [1.5, 1e999, 2.5], "page_recycle": 1e400})", "page_recycle",
       "1e400 is out of range [0, 4096]"},
      {R"({"page_recycle": 5e3})", "page_recycle", "out of range [0, 4096]"},
      {R"({"hugepages": 2.0})", "hugepages", "is a bool"},
      {R"({"page_recycle": true})", "page_recycle", "an integer, not a boolean"},
      {R"({"page_recycle": [8]})", "page_recycle", "an integer, not an array"},
      {R"({"page_recycle": 4097})", "page_recycle", "out of range [0, 4096]"},
      {R"({"page_recycle": -1})", "page_recycle", "out of range"},
      {R"({"page_recycle": 9223372036854775808})", "page_recycle", "out of range"},
      {R"({"page_recycle": 1e300})", "page_recycle", "out of range"},
      {R"({"page_recycle": -9223372036854775809})", "page_recycle", "out of range"},
      {R"({"hugepages": 2})", "hugepages", "is a bool"},
      {R"({"hugepages": "yes"})", "hugepages", "true, false, 0 or 1"},
      {R"({"telemetry_slots": 8})", "telemetry_slots", "cannot change while the program runs"},
      {R"({"page_recycle": 8, "nosuch": 1})", "nosuch", "unknown option 'nosuch'"},
  };
  for (const bad_case& c : cases) {
    INFO(c.body);
    const auto r = check_options_body(c.body, s.options);
    CHECK_FALSE(r.ok());
    CHECK(r.values.empty());
    CHECK(r.has_field == (c.field != nullptr));
    if (c.field) CHECK(r.field == c.field);
    CHECK(r.error.find(c.says) != std::string::npos);
  }
  // Past a double's range with all its digits: out of range when whole, with a fraction if not.
  const std::string digits400 = "1" + std::string(400, '0');
  auto r400 = check_options_body("{\"page_recycle\": " + digits400 + "}", s.options);
  CHECK(r400.error == "option 'page_recycle': " + digits400 + " is out of range [0, 4096]");
  r400 = check_options_body("{\"page_recycle\": " + digits400 + ".5}", s.options);
  CHECK(r400.error == "option 'page_recycle' takes an integer, not a number with a fraction");
  const auto zero = check_options_body(R"({"page_recycle": 0.0e999999})", s.options);
  REQUIRE(zero.ok());
  CHECK(zero.values.at(0).value == 0);
  // Deep nesting and long bodies do not crash (the server caps bodies at kMaxBody).
  const std::string deep = std::string(30000, '[') + std::string(30000, ']');
  CHECK_FALSE(check_options_body(deep, s.options).ok());
  const std::string deep_obj = "{\"a\":" + std::string(30000, '[') + std::string(30000, ']') + "}";
  CHECK_FALSE(check_options_body(deep_obj, s.options).ok());
}

// nlohmann hands a float's token to its parser with the locale's decimal point in place of the
// '.' ("8,0" under a de_DE LC_NUMERIC, set by the program): the text kept is the number as
// written, and 8.0 stays the whole number 8 in any locale.
TEST_CASE("check_options_body: a float's text does not depend on the locale's decimal point") {
  // With a comma locale installed (skipped without one).
  const std::string saved = std::setlocale(LC_NUMERIC, nullptr);
  for (const char* name : {"de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8"}) {
    if (!std::setlocale(LC_NUMERIC, name)) continue;
    const rd::snapshot s = make_snapshot(1, false);
    const auto r = memlive::detail::check_options_body(R"({"page_recycle": 8.0})", s.options);
    std::setlocale(LC_NUMERIC, saved.c_str());
    INFO(name << ": " << r.error);
    REQUIRE(r.ok());
    CHECK(r.values.at(0).value == 8);
    break;
  }
  std::setlocale(LC_NUMERIC, saved.c_str());
}

TEST_CASE("parse_ipv4: a dotted address, or localhost in any case") {
  for (const char* host : {"localhost", "LOCALHOST", "LocalHost", "127.0.0.1"}) {
    INFO(host);
    in_addr a{};
    CHECK(memlive::detail::parse_ipv4(host, &a) == 1);
    CHECK(a.s_addr == htonl(INADDR_LOOPBACK));
  }
  in_addr a{};
  for (const char* host : {"", "localhost.", "127.1", "::1", "local host"}) {
    INFO(host);
    CHECK(memlive::detail::parse_ipv4(host, &a) == 0);
  }
  using namespace std::string_literals;  // a NUL inside: inet_pton would stop there
  CHECK(memlive::detail::parse_ipv4("127.0.0.1\0junk"s, &a) == 0);
  CHECK(memlive::detail::parse_ipv4("localhost\0"s, &a) == 0);
}

TEST_CASE("open_segment classifies failures") {
  memlive::open_result r = memlive::open_segment(0);
  CHECK(r.kind == memlive::error_kind::usage);
  // Our own pid, in a directory without segments: alive, no segment.
  r = memlive::open_segment(static_cast<int>(getpid()), false, "/nonexistent-memlive-dir");
  CHECK(r.kind == memlive::error_kind::no_segment);
  CHECK(r.error.find("LIVEALLOC_PROFILE=1") != std::string::npos);
  CHECK(static_cast<int>(memlive::error_kind::no_process) == 3);
  CHECK(static_cast<int>(memlive::error_kind::bad_segment) == 6);
  CHECK(static_cast<int>(memlive::error_kind::rejected) == 7);
}

TEST_CASE("memlive::start: the port and the stream interval, each bound and one past it") {
  memlive::options o;
  o.port = 0;
  o.quiet = true;
  for (int ms : {memlive::detail::kMinStreamMs - 1, memlive::detail::kMaxStreamMs + 1}) {
    o.stream_interval_ms = ms;
    const memlive::status st = memlive::start(o);
    INFO(ms, ": ", st.message);
    CHECK(st.error == memlive::start_error::bad_options);
    CHECK(memlive::port() == 0);
  }
  for (int ms : {memlive::detail::kMinStreamMs, memlive::detail::kMaxStreamMs}) {
    o.stream_interval_ms = ms;
    const memlive::status st = memlive::start(o);
    INFO(ms, ": ", st.message);
    CHECK(st.ok());
    CHECK(memlive::port() == st.port);
    memlive::stop();
  }
  o.stream_interval_ms = 80;
  for (int port : {-1, 65536}) {
    o.port = port;
    const memlive::status st = memlive::start(o);
    INFO(port, ": ", st.message);
    CHECK(st.error == memlive::start_error::bad_options);
  }
}
