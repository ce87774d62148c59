// The options table: environment parsing with clear warnings, LIVEALLOC_VERBOSE, and the README
// table generated from the same list.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <livealloc.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using namespace livealloc::detail;

namespace {

// Runs `fn` with stderr redirected to a pipe; returns what it wrote.
template <class F>
std::string capture_stderr(F fn) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  int saved = dup(2);
  dup2(fds[1], 2);
  close(fds[1]);
  fn();
  dup2(saved, 2);
  close(saved);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  return out;
}

long long value_of(const char* name) {
  long long v = 0;
  REQUIRE(livealloc::get_option(name, &v));
  return v;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  return s;
}

// The README table, generated from the options table.
std::string markdown_table() {
  std::ostringstream o;
  o << "| Variable | Type | Default | Range | Changeable while running | Meaning |\n";
  o << "|---|---|---|---|---|---|\n";
  for (const option_info& i : kOptionTable) {
    o << "| `LIVEALLOC_" << upper(i.name) << "` | " << i.type << " | " << i.def << " | " << i.lo
      << " to " << i.hi << " | " << (i.live ? "yes" : "no, start-up only") << " | " << i.doc
      << " |\n";
  }
  return o.str();
}

}  // namespace

TEST_CASE("a valid variable sets the option") {
  long long before = value_of("segment_cache");
  std::string err = capture_stderr([] { apply_env_entry("LIVEALLOC_SEGMENT_CACHE=7"); });
  CHECK(err.empty());
  CHECK(value_of("segment_cache") == 7);
  apply_env_entry("LIVEALLOC_segment_cache=+9");  // names are case-insensitive; '+' is fine
  CHECK(value_of("segment_cache") == 9);
  livealloc::set_option("segment_cache", before);
}

TEST_CASE("bool options take 0/1/true/false/yes/no/on/off") {
  apply_env_entry("LIVEALLOC_VERBOSE=on");
  CHECK(value_of("verbose") == 1);
  apply_env_entry("LIVEALLOC_VERBOSE=FALSE");
  CHECK(value_of("verbose") == 0);
  apply_env_entry("LIVEALLOC_VERBOSE=1");
  CHECK(value_of("verbose") == 1);
  std::string err = capture_stderr([] { apply_env_entry("LIVEALLOC_VERBOSE=maybe"); });
  CHECK(err.find("LIVEALLOC_VERBOSE='maybe' is not 0/1, true/false, yes/no or on/off") != std::string::npos);
  CHECK(err.find("using 0") != std::string::npos);
  apply_env_entry("LIVEALLOC_VERBOSE=0");
}

TEST_CASE("invalid values warn once, name the variable and the value used, and change nothing") {
  struct bad {
    const char* entry;
    const char* says;
  };
  const bad cases[] = {
      {"LIVEALLOC_PAGE_RECYCLE=abc", "LIVEALLOC_PAGE_RECYCLE='abc' is not a number"},
      {"LIVEALLOC_PAGE_RECYCLE=", "LIVEALLOC_PAGE_RECYCLE='' is not a number"},
      {"LIVEALLOC_PAGE_RECYCLE=12x", "LIVEALLOC_PAGE_RECYCLE='12x' is not a number"},
      {"LIVEALLOC_PAGE_RECYCLE=-1", "LIVEALLOC_PAGE_RECYCLE='-1' is out of range [0, 4096]"},
      {"LIVEALLOC_PAGE_RECYCLE=99999999999999999999999", "is out of range [0, 4096]"},
      {"LIVEALLOC_HUGEPAGES=99999999999999999999999", "is out of range [0, 1]"},
      {"LIVEALLOC_PAGE_RECYCLE=1111111111111111111111111111111111111111", "is too long"},
      {"LIVEALLOC_REMOTE_BATCH=0", "LIVEALLOC_REMOTE_BATCH='0' is out of range [1, 4096]"},
  };
  for (const bad& b : cases) {
    long long before = value_of("page_recycle");
    long long batch_before = value_of("remote_batch");
    std::string err = capture_stderr([&] { apply_env_entry(b.entry); });
    INFO(b.entry, " -> ", err);
    CHECK(err.find(b.says) != std::string::npos);
    CHECK(err.find("; using ") != std::string::npos);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
    CHECK(value_of("page_recycle") == before);
    CHECK(value_of("remote_batch") == batch_before);
  }
}

TEST_CASE("a whole number may have a fraction or an exponent, as memlive tune takes it") {
  const long long before = value_of("page_recycle");
  const std::pair<const char*, long long> good[] = {
      {"8.0", 8}, {"1e3", 1000}, {"2.5E2", 250}, {"+8", 8}, {"08", 8}, {"0.0", 0},
      {"80e-1", 8}, {"1.000e+3", 1000}, {"0e999999999999", 0}, {"4096", 4096}};
  for (const auto& g : good) {
    const std::string entry = std::string("LIVEALLOC_PAGE_RECYCLE=") + g.first;
    INFO(entry);
    CHECK(capture_stderr([&] { apply_env_entry(entry.c_str()); }).empty());
    CHECK(value_of("page_recycle") == g.second);
  }
  apply_env_entry(("LIVEALLOC_PAGE_RECYCLE=" + std::to_string(before)).c_str());
  const std::pair<const char*, const char*> bad[] = {
      {"8.5", "is not a whole number"},   {"1e-3", "is not a whole number"},
      {"1e-99999999", "is not a whole number"}, {"8.", "is not a number"},
      {".5", "is not a number"},          {"1e", "is not a number"},
      {"1e+", "is not a number"},         {"e3", "is not a number"},
      {"8.0.0", "is not a number"},       {"1e400", "is out of range"},
      {"5e18", "is out of range"},        {"4.097e3", "is out of range"}};
  for (const auto& b : bad) {
    const std::string entry = std::string("LIVEALLOC_PAGE_RECYCLE=") + b.first;
    INFO(entry);
    const std::string err = capture_stderr([&] { apply_env_entry(entry.c_str()); });
    CHECK(err.find(std::string("='") + b.first + "' " + b.second) != std::string::npos);
    CHECK(value_of("page_recycle") == before);
  }
  long long v = 0;  // a bool option takes the same forms: 1.0 is true
  CHECK(parse_value("1.0", true, &v));
  CHECK(v == 1);
  CHECK(parse_value("OFF", true, &v));
  CHECK(v == 0);
}

TEST_CASE("every option: its min and max are taken, min-1 and max+1 refused (environment, set_option)") {
  for (const option_info& o : kOptionTable) {
    const std::string env = "LIVEALLOC_" + upper(o.name) + "=";
    const long long before = value_of(o.name);
    for (long long v : {o.lo, o.hi}) {
      INFO(env, v);
      const std::string entry = env + std::to_string(v);
      CHECK(capture_stderr([&] { apply_env_entry(entry.c_str()); }).empty());
      CHECK(value_of(o.name) == v);
      const livealloc::option_status st = livealloc::set_option(o.name, v);
      CHECK(st == (o.live ? livealloc::option_status::ok : livealloc::option_status::not_live));
      apply_env_entry((env + std::to_string(before)).c_str());
      REQUIRE(value_of(o.name) == before);
    }
    for (long long v : {o.lo - 1, o.hi + 1}) {
      INFO(env, v);
      const std::string entry = env + std::to_string(v);
      const std::string err = capture_stderr([&] { apply_env_entry(entry.c_str()); });
      CHECK(err.find(entry.substr(0, entry.find('=')) + "='" + std::to_string(v) +
                     "' is out of range [" + std::to_string(o.lo) + ", " +
                     std::to_string(o.hi) + "]") != std::string::npos);
      CHECK(value_of(o.name) == before);
      const livealloc::option_status st = livealloc::set_option(o.name, v);
      CHECK(st == (o.live ? livealloc::option_status::out_of_range
                          : livealloc::option_status::not_live));
      CHECK(value_of(o.name) == before);
    }
    if (o.live) {  // set_option's own edges, from a value inside the range
      CHECK(livealloc::set_option(o.name, o.lo) == livealloc::option_status::ok);
      CHECK(value_of(o.name) == o.lo);
      CHECK(livealloc::set_option(o.name, o.hi) == livealloc::option_status::ok);
      CHECK(value_of(o.name) == o.hi);
      CHECK(livealloc::set_option(o.name, before) == livealloc::option_status::ok);
    }
  }
}

TEST_CASE("an unknown LIVEALLOC_ variable is reported, a known one of another part is not") {
  std::string err = capture_stderr([] { apply_env_entry("LIVEALLOC_PAGE_RECYCEL=3"); });
  CHECK(err.find("unknown variable LIVEALLOC_PAGE_RECYCEL ignored; did you mean "
                 "LIVEALLOC_PAGE_RECYCLE?") != std::string::npos);
  const std::pair<const char*, const char*> near[] = {
      {"LIVEALLOC_PROFLIE=1", "LIVEALLOC_PROFILE"},          // two letters swapped
      {"LIVEALLOC_hugepage=1", "LIVEALLOC_HUGEPAGES"},       // one dropped, any case
      {"LIVEALLOC_REMOTE_BATCHES=8", "LIVEALLOC_REMOTE_BATCH"},
      {"LIVEALLOC_PURGEDELAY=8", "LIVEALLOC_PURGE_DELAY"}};
  for (const auto& n : near) {
    INFO(n.first);
    err = capture_stderr([&] { apply_env_entry(n.first); });
    CHECK(err.find(std::string("did you mean ") + n.second + "?") != std::string::npos);
  }
  err = capture_stderr([] { apply_env_entry("LIVEALLOC_RECYCLE=3"); });  // too far from any
  CHECK(err.find("unknown variable LIVEALLOC_RECYCLE ignored\n") != std::string::npos);
  err = capture_stderr([] { apply_env_entry("LIVEALLOC_PROFILE=1"); });
  CHECK(err.empty());
}

TEST_CASE("LIVEALLOC_VERBOSE prints every option with where its value came from") {
  // Only page_recycle from the environment, whatever earlier cases of this process applied.
  bool saved[kOptionCount];
  std::copy(std::begin(g_options.from_env), std::end(g_options.from_env), saved);
  std::fill(std::begin(g_options.from_env), std::end(g_options.from_env), false);
  g_options.from_env[opt_page_recycle] = true;
  std::string err = capture_stderr([] { print_options(); });
  std::copy(std::begin(saved), std::end(saved), g_options.from_env);
  for (const option_info& i : kOptionTable)
    CHECK(err.find(std::string("livealloc: ") + i.name + " = ") != std::string::npos);
  CHECK(err.find("(from LIVEALLOC_PAGE_RECYCLE)") != std::string::npos);
  CHECK(err.find("(default)") != std::string::npos);
}

#ifdef LIVEALLOC_PRELOAD_PATH
// Runs `program` (no arguments) under the preloaded library with only `env` (and LD_PRELOAD) in
// its environment; returns what it wrote on stderr, and its wait status in *status.
static std::string run_preloaded(const char* program, std::vector<std::string> env,
                                 int* status) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawn_file_actions_addclose(&fa, fds[0]);
  env.push_back(std::string("LD_PRELOAD=") + LIVEALLOC_PRELOAD_PATH);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(&e[0]);
  envp.push_back(nullptr);
  char* argv[] = {const_cast<char*>(program), nullptr};
  pid_t pid;
  REQUIRE(posix_spawn(&pid, program, &fa, nullptr, argv, envp.data()) == 0);
  close(fds[1]);
  std::string err;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) err.append(buf, static_cast<std::size_t>(n));
  close(fds[0]);
  *status = 0;
  waitpid(pid, status, 0);
  posix_spawn_file_actions_destroy(&fa);
  return err;
}

TEST_CASE("a preloaded program reads the environment at start") {
  int status = 0;
  std::string err = run_preloaded("/usr/bin/env",
                                  {"LIVEALLOC_VERBOSE=1", "LIVEALLOC_PAGE_RECYCLE=7",
                                   "LIVEALLOC_REMOTE_BATCH=lots"},
                                  &status);
  INFO(err);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(err.find("LIVEALLOC_REMOTE_BATCH='lots' is not a number [1, 4096]; using 32") !=
        std::string::npos);
  CHECK(err.find("livealloc: page_recycle = 7 (from LIVEALLOC_PAGE_RECYCLE)") != std::string::npos);
  CHECK(err.find("livealloc: remote_batch = 32 (default)") != std::string::npos);
}

// The allocator started at its first call, so a program that never calls malloc (/bin/true)
// printed nothing, and LIVEALLOC_VERBOSE could not tell whether the library was loaded at all.
TEST_CASE("LIVEALLOC_VERBOSE speaks at load, also for a program that never allocates") {
  int status = 0;
  std::string err = run_preloaded("/bin/true", {"LIVEALLOC_VERBOSE=1"}, &status);
  INFO(err);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(err.find("livealloc: verbose = 1 (from LIVEALLOC_VERBOSE)") != std::string::npos);
  CHECK(err.find("livealloc: page_recycle = 2 (default)") != std::string::npos);
  // A bad value is reported there too; an unset or false one says nothing.
  err = run_preloaded("/bin/true", {"LIVEALLOC_VERBOSE=maybe"}, &status);
  CHECK(err.find("LIVEALLOC_VERBOSE='maybe' is not 0/1") != std::string::npos);
  CHECK(run_preloaded("/bin/true", {"LIVEALLOC_VERBOSE=off"}, &status).empty());
  CHECK(run_preloaded("/bin/true", {}, &status).empty());
}
#endif

TEST_CASE("the README's options table is generated from the options table") {
  // tests/update_options_table.py asks for the table this way.
  if (std::getenv("LIVEALLOC_PRINT_OPTIONS_TABLE")) std::cout << markdown_table();
  std::ifstream in(LIVEALLOC_SOURCE_DIR "/README.md");
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  std::string table = markdown_table();
  INFO("README.md must contain this table (copy it between the options-table markers):\n",
       table);
  CHECK(ss.str().find(table) != std::string::npos);
}
