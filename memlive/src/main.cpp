// memlive -- the command: list, snapshot, tune, record, serve and run livealloc processes.
// SPDX-License-Identifier: MIT
//
// Every verb reads /dev/shm/livealloc.<pid> through livealloc_reader.h and formats with memlive.h;
// this file holds only argument parsing, the verbs' control flow and their messages.
// Exit codes are memlive::error_kind (see usage()).
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>
#include <memlive.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "budget.h"

#ifndef MEMLIVE_INSTALL_LIBDIR  // set by memlive/CMakeLists.txt from GNUInstallDirs
#define MEMLIVE_INSTALL_LIBDIR "lib"
#endif

namespace {

using memlive::error_kind;
namespace rd = livealloc::reader;

// The hint after a port that cannot be listened on.
constexpr const char* kOtherPort = "choose another with --port (0: any free port)";

constexpr const char* kUsage =
    "usage: memlive <verb> [options]\n"
    "\n"
    "Reads the telemetry segment (/dev/shm/livealloc.<pid>) of a process that runs livealloc with\n"
    "profiling on: LD_PRELOAD=/abs/path/liblivealloc.so LIVEALLOC_PROFILE=1 ./program, or a call\n"
    "to livealloc::telemetry::enable(); `memlive run` starts a program that way for you.\n"
    "\n"
    "verbs:\n"
    "  list [--clean]                      processes publishing a segment; --clean removes the\n"
    "                                      segments of processes that are gone\n"
    "  snapshot --pid N | --all [--format F] [--by B]\n"
    "                                      one snapshot to stdout (--all: of every running\n"
    "                                      process); F: json (default), csv, prometheus (B:\n"
    "                                      thread or class)\n"
    "  tune --pid N name=value ...         change live thresholds (all validated first; none\n"
    "                                      applied if one is wrong); name=default resets one\n"
    "  record --pid N --interval MS --out FILE [--count N | --duration S] [--budget B]\n"
    "                                      one JSON snapshot per line, every MS (>= 10) ms\n"
    "  check FILE BUDGET ...               check a recording against budgets such as\n"
    "                                      'live_bytes<=64MiB', 'last(live_bytes)<=1MiB',\n"
    "                                      'growth(live_bytes)<=0' (exit 9: one is exceeded)\n"
    "  serve --pid N [--host H] [--port P] [--interval MS] [--history MIB]\n"
    "                                      serve the process over HTTP (127.0.0.1:8080 by\n"
    "                                      default; port 0 picks a free one) until Ctrl-C\n"
    "  serve --all [--host H] [--port P]   /metrics of every profiled process, for Prometheus\n"
    "  run [--host H] [--port P] [--interval MS] [--history MIB] [--lib PATH]\n"
    "      [--exit-when-done] -- program args\n"
    "                                      start the program with liblivealloc.so preloaded and\n"
    "                                      profiling on, and serve it like serve (exit: its "
    "status)\n"
    "\n"
    "options:\n"
    "  -h, --help [VERB]  this text, or VERB's options (as `memlive VERB --help`)\n"
    "  --version          the memlive version and the telemetry layout version it reads\n"
    "\n"
    "exit codes:\n"
    "  0  success\n"
    "  1  an I/O error (writing the output file; check: reading FILE)\n"
    "  2  usage error (unknown verb or option, bad value, tuning syntax such as name without =,\n"
    "     an option given twice)\n"
    "  3  no such process\n"
    "  4  the process publishes no segment (run it with LIVEALLOC_PROFILE=1)\n"
    "  5  permission denied (the segment belongs to another user; serve, run: a port below\n"
    "     1024)\n"
    "  6  version mismatch or malformed segment (check: a file that is not a recording)\n"
    "  7  tuning rejected (unknown option, not live, out of range, or refused by the allocator)\n"
    "  8  serve: the port is in use (run too)\n"
    "  9  check, record --budget: a budget was exceeded\n"
    "  127  run: the program was not found (126: not executable)\n"
    "\n"
    "examples:\n"
    "  memlive run -- ./app args           profile ./app, page at http://127.0.0.1:8080/\n"
    "  memlive list                        which processes can be read\n"
    "  memlive snapshot --pid 1234 --format prometheus\n"
    "  memlive tune --pid 1234 page_recycle=8 purge_delay=100\n"
    "  memlive check run.jsonl 'live_bytes<=64MiB' 'threads<=16'\n";

constexpr const char* kListHelp =
    "usage: memlive list [--clean]\n"
    "\n"
    "Lists the processes that publish a telemetry segment: pid, program, threads alive, age and\n"
    "state (running; stale: the process is gone; unreadable: the reason).\n"
    "\n"
    "options:\n"
    "  --clean        also remove the segments of processes that are gone, and say how many\n"
    "  -h, --help     this text\n";
constexpr const char* kSnapshotHelp =
    "usage: memlive snapshot --pid N | --all [--format json|csv|prometheus] [--by thread|class]\n"
    "\n"
    "Prints one snapshot of the process's counters. A segment left by a process that is gone is\n"
    "still printed, with a note on stderr.\n"
    "\n"
    "options:\n"
    "  --pid N        the process (`memlive list` shows the candidates)\n"
    "  --all          every running process that publishes a segment instead, in one output:\n"
    "                 json, one line per process; csv, one header; prometheus, each family\n"
    "                 once (for node_exporter's textfile collector: --by class). Gone ones are\n"
    "                 left out; one that cannot be read is said on stderr and sets the exit\n"
    "                 code, the others are printed all the same\n"
    "  --format F     json (default): one object, schema memlive.snapshot/1 (memlive/README.md);\n"
    "                 csv: one row per thread and size class with a non-zero counter;\n"
    "                 prometheus: text exposition format 0.0.4\n"
    "  --by B         with --format prometheus: thread (default), a series per thread and size\n"
    "                 class; class, a series per size class with the process totals (as\n"
    "                 GET /metrics?by=class)\n"
    "  -h, --help     this text\n";
constexpr const char* kTuneHelp =
    "usage: memlive tune --pid N [--] name=value|name=default [...]\n"
    "\n"
    "Changes live thresholds of a running process. Every assignment is checked first against the\n"
    "options the segment publishes (name, live, range, bool); if one fails, nothing is applied\n"
    "(exit 2 for syntax: no '=', a value that is not a whole number; exit 7 for an unknown\n"
    "option, one that is not live, a value outside its range). Then all are stored, and memlive\n"
    "waits up to 2 s for the allocator to validate them, and reports each as accepted, accepted\n"
    "then superseded (another writer changed the option meanwhile: exit 0), or rejected by the\n"
    "allocator (exit 7). The allocator validates and each thread applies a change at its next\n"
    "slow path: an idle thread applies it later; if nothing validates within 2 s the change is\n"
    "reported as pending (exit 0). '--' may come before the assignments.\n"
    "\n"
    "options:\n"
    "  --pid N        the process (required; it must run as your user: tuning writes its segment)\n"
    "  name=value     an option below (any case) and a whole number (8, 8.0 and 1e3 as in\n"
    "                 POST /api/options), or true/false/on/off (any case, as the names)\n"
    "  name=default   the option's default, as the process publishes it (DEFAULT too)\n"
    "  -h, --help     this text\n"
    "\n"
    "example: memlive tune --pid 1234 page_recycle=8 purge_delay=default\n";

// kTuneHelp and the live options of livealloc.h's table, wrapped at 96 columns. The process's
// segment has the last word (`memlive snapshot --pid N` lists what it publishes, "options").
const char* tune_help() {
  static const std::string text = [] {
    std::string s = std::string(kTuneHelp) +
                    "\nlive options (this build's table; `memlive snapshot --pid N` shows what a\n"
                    "process publishes under \"options\"):\n";
    std::string fixed;
    for (const livealloc::detail::option_info& o : livealloc::detail::kOptionTable) {
      if (!o.live) {
        fixed += (fixed.empty() ? "" : ", ") + std::string(o.name);
        continue;
      }
      char head[128];
      std::snprintf(head, sizeof head, "  %-15s %lld to %lld, default %lld\n", o.name, o.lo, o.hi,
                    o.def);
      s += head;
      std::string line = "      ";
      for (const char* w = o.doc; *w;) {
        const char* end = std::strchr(w, ' ');
        if (!end) end = w + std::strlen(w);
        if (line.size() > 6 && line.size() + 1 + (end - w) > 96) {
          s += line + "\n";
          line = "      ";
        }
        line += (line.size() > 6 ? " " : "") + std::string(w, end);
        w = *end ? end + 1 : end;
      }
      s += line + "\n";
    }
    return s + "not live (set LIVEALLOC_<NAME> before the program starts):\n      " + fixed + "\n";
  }();
  return text.c_str();
}
constexpr const char* kRecordHelp =
    "usage: memlive record --pid N --interval MS --out FILE [--count N | --duration S]\n"
    "                      [--budget BUDGET ...]\n"
    "\n"
    "Writes one JSON snapshot per line (the schema of `memlive snapshot`). Stops after N samples,\n"
    "after S seconds, when the process exits (a final sample is written and the exit reported),\n"
    "or on SIGINT/SIGTERM (the file is flushed, exit 0; also while it waits for a pipe's reader).\n"
    "A write that fails (a full disk) stops it with exit 1; a partial last line is cut off. A\n"
    "process that calls exec is followed into its new segment (the same pid).\n"
    "\n"
    "options:\n"
    "  --pid N        the process (required)\n"
    "  --interval MS  milliseconds between samples, 10 to 86400000 (required)\n"
    "  --out FILE     the file to write, '-' for stdout (required; replaced if it exists;\n"
    "                 a telemetry segment is refused, exit 2)\n"
    "  --count N      stop after N samples\n"
    "  --duration S   stop after S seconds (not with --count)\n"
    "  --budget B     check each sample against B, as `memlive check` does (METRIC<=VALUE,\n"
    "                 last(METRIC)<=VALUE, growth(METRIC)<=VALUE; see `memlive check --help`;\n"
    "                 repeat for more): a METRIC budget exceeded is said on stderr when it\n"
    "                 happens, the recording goes on; last() and growth() are judged at the\n"
    "                 end only; at the end every budget's line is printed on stderr; then\n"
    "                 exit 9 if one was exceeded\n"
    "  -h, --help     this text\n";

constexpr const char* kCheckHelp =
    "usage: memlive check FILE BUDGET [BUDGET ...]\n"
    "\n"
    "Checks a recording (the JSON lines `memlive record` writes; FILE '-' reads stdin) against\n"
    "budgets. Prints one line per budget: PASS or FAIL, the value judged (the worst of any\n"
    "sample, the last, or the growth), at which sample (sample N is line N) and when (seconds\n"
    "after the first sample), the limit, and for a METRIC budget exceeded in how many samples\n"
    "and the first; then a summary line. Exit 0 when every budget holds; 9 when one is exceeded\n"
    "(or no sample gives it a value); 6 when FILE is not a recording this memlive reads (a line\n"
    "that is not JSON, not a snapshot, of another telemetry layout version, of another process\n"
    "than the line before; no sample at all); 2 for a bad budget; 1 when FILE cannot be read.\n"
    "A last line without its newline that is not whole JSON (a record killed while writing it)\n"
    "is left out, with a warning on stderr.\n"
    "\n"
    "A BUDGET (quote it for the shell; spaces are ignored) is one of\n"
    "  METRIC<=VALUE          the worst value of any sample (the largest; >=, >: the smallest)\n"
    "  last(METRIC)<=VALUE    the last sample's value: what is left at the end (a leak check)\n"
    "  growth(METRIC)<=VALUE  the last sample's value minus the first's, signed (VALUE may be\n"
    "                         too: growth(live_bytes)<=-1MiB asks for a fall of 1 MiB or more)\n"
    "with <, >=, > as well as <=. VALUE is a whole number, optionally followed by B, KiB, MiB,\n"
    "GiB or TiB (1024-based). METRIC is named as in the snapshot JSON:\n"
    "  live_bytes, live_blocks, resident_bytes, committed_bytes, cached_bytes, large_bytes,\n"
    "  segment_bytes, slots_used, overflow_threads, mmap_calls, munmap_calls, madvise_calls,\n"
    "  purges               the fields of \"process\" (live_bytes: bytes in live blocks)\n"
    "  threads              the program's threads alive (memlive's own are not counted)\n"
    "  class[N].live        live blocks of size class N, 0 to 52 (class_sizes in a sample lists\n"
    "                       their block sizes; class 0 holds the large blocks)\n"
    "  class[N].live_bytes  those blocks times the class's block size (class 0: large_bytes)\n"
    "  class[N].COUNTER     the process total of one of the snapshot's \"counters\" in class N\n"
    "                       (allocs, frees, requested_bytes, peak_live, ...), exited threads\n"
    "                       included\n"
    "threads and resident_bytes describe a running process: a sample of the process gone (the\n"
    "last one of a record that saw it exit) gives them no value; last() and growth() then take\n"
    "the last sample that has one, and the line says so.\n"
    "A recording is of one process: record follows a pid across exec (a later start_ns, the\n"
    "same process_start_ticks, the counters from zero), and a line of another pid, of another\n"
    "process_start_ticks (a pid reused), or of an earlier start_ns than the line before, is\n"
    "refused (exit 6; two recordings put together).\n"
    "\n"
    "options:\n"
    "  -h, --help     this text\n"
    "\n"
    "example:\n"
    "  memlive record --pid 1234 --interval 100 --duration 60 --out run.jsonl\n"
    "  memlive check run.jsonl 'live_bytes<=64MiB' 'resident_bytes<=256MiB' 'threads<=16'\n"
    "  memlive check run.jsonl 'last(live_bytes)<=1MiB' 'growth(live_bytes)<=0'\n";

constexpr const char* kServeHelp =
    "usage: memlive serve --pid N [--host H] [--port P] [--interval MS] [--history MIB]\n"
    "       memlive serve --all [--host H] [--port P]\n"
    "\n"
    "Serves the process's telemetry over HTTP at http://H:P/: the live page, /api/snapshot,\n"
    "/api/stream, /api/options (GET, POST to tune), /api/history, /api/baseline, /metrics,\n"
    "/healthz. Prints the URL, then serves until SIGINT/SIGTERM (exit 0). When the process exits\n"
    "it says so and keeps serving its last state. Tuning needs write access to the segment (the\n"
    "process's user); without it the options are read-only. A process that calls exec is\n"
    "followed into its new segment (the same pid).\n"
    "With --all, serves /metrics of every running process that publishes a segment, read at\n"
    "each request (a series per thread and class, ?by=class per class; each process's\n"
    "livealloc_process_info names its program; a segment that cannot be read is named in a\n"
    "comment line), /healthz, and at / an index page linking /metrics and /metrics?by=class:\n"
    "one Prometheus target for the whole machine (the live page is --pid's).\n"
    "\n"
    "options:\n"
    "  --pid N        the process\n"
    "  --all          every profiled process instead (/metrics, /healthz and an index at /)\n"
    "  --host H       the IPv4 address to listen on: 127.0.0.1 (default), localhost, or an\n"
    "                 address of this machine (the page then answers other machines, with no\n"
    "                 authentication); not 0.0.0.0\n"
    "  --port P       the port, 8080 by default; 0 picks a free one (printed). In use: exit\n"
    "                 8; below 1024 without the privilege: exit 5\n"
    "  --interval MS  the default /api/stream interval, 50 to 60000 (default 80)\n"
    "  --history MIB  the /api/history ring's size (the page fills gaps from it), 1 to 65536\n"
    "                 MiB (default 32: 2.5 minutes of samples up to 55 KB, a few seconds of\n"
    "                 2,000 threads); not with --all\n"
    "  -h, --help     this text\n";

constexpr const char* kRunHelp =
    "usage: memlive run [--host H] [--port P] [--interval MS] [--history MIB] [--lib PATH]\n"
    "                   [--exit-when-done] -- program [args ...]\n"
    "\n"
    "Starts the program with LD_PRELOAD=<liblivealloc.so> (prepended to an existing LD_PRELOAD)\n"
    "and LIVEALLOC_PROFILE=1, waits for its telemetry segment and serves it like `serve` at\n"
    "http://H:P/ (printed). When the program exits, its status is printed and its last state\n"
    "stays served until SIGINT/SIGTERM. memlive prints its own lines on stderr: the program's\n"
    "stdout is the program's alone. memlive then exits with the program's status (128+N if\n"
    "killed by signal N). SIGINT/SIGTERM while the program runs is passed on to it, and if\n"
    "memlive dies the program gets SIGTERM. A program that calls exec is followed into its new\n"
    "image. Exit 127: program not found; 126: not executable; 8: the port is in use, 5: below\n"
    "1024 without the privilege (the program is not left running).\n"
    "\n"
    "options:\n"
    "  --host H          the IPv4 address to listen on (default 127.0.0.1; see `serve --help`)\n"
    "  --port P          the port, 8080 by default; 0 picks a free one (printed)\n"
    "  --interval MS     the default /api/stream interval, 50 to 60000 (default 80)\n"
    "  --history MIB     the /api/history ring's size, 1 to 65536 MiB (default 32; see\n"
    "                    `serve --help`)\n"
    "  --lib PATH        the liblivealloc.so to preload; by default the one beside memlive:\n"
    "                    <build>/allocator/ for <build>/memlive/memlive (a build tree), or\n"
    "                    <prefix>/" MEMLIVE_INSTALL_LIBDIR "/ for <prefix>/bin/memlive (installed)\n"
    "  --exit-when-done  stop serving as soon as the program exits\n"
    "  -- program args   the program (searched in PATH) and its arguments\n"
    "  -h, --help        this text\n";

// The verb running, once main() has found it. Every error line is "memlive: VERB: what" (before
// a verb is known, "memlive: what"): the verbs wrote "memlive: run: ..." but their option
// errors "memlive run: ...".
const char* g_verb = nullptr;

void error_line(const std::string& msg) {
  if (g_verb)
    std::fprintf(stderr, "memlive: %s: %s\n", g_verb, msg.c_str());
  else
    std::fprintf(stderr, "memlive: %s\n", msg.c_str());
}

// A usage error is its line, then, once the verb is known, the verb's synopsis (its help up to
// the first blank line) and where the rest is: the whole help after `--pid abc` buried the line
// that said what was wrong under 40 lines of options. Without a verb, the list of verbs.
int usage_error(const std::string& msg, const char* help = nullptr) {
  error_line(msg);
  if (!help) {
    std::fprintf(stderr, "run 'memlive %s--help' for usage\n",
                 g_verb ? (std::string(g_verb) + " ").c_str() : "");
  } else if (!g_verb) {
    std::fputs(help, stderr);
  } else {
    const char* blank = std::strstr(help, "\n\n");
    const int synopsis = static_cast<int>(blank ? blank - help : std::strlen(help));
    std::fprintf(stderr, "%.*s\nrun 'memlive %s --help' for the options\n", synopsis, help,
                 g_verb);
  }
  return static_cast<int>(error_kind::usage);
}

int fail(error_kind kind, const std::string& msg) {
  error_line(msg);
  return static_cast<int>(kind);
}

// Digits alone: a sign ("+5", "-0") is no process id, port or count on a command line.
bool parse_number(const std::string& text, long long lo, long long hi, long long* out) {
  std::int64_t v = 0;
  if (text.empty() || text[0] < '0' || text[0] > '9' || !memlive::detail::parse_int(text, &v) ||
      v < lo || v > hi)
    return false;
  *out = v;
  return true;
}

// The largest --history, in MiB: 64 GiB, past any history a machine would hold for a page.
constexpr long long kMaxHistoryMib = 65536;

// Options common to the verbs. Unknown ones are usage errors.
struct args {
  int pid = 0;
  bool have_pid = false;
  std::string format = "json";
  std::string by;  // snapshot --by: "", thread or class
  std::string host = "127.0.0.1";
  long long port = 8080;
  std::string dir = "/dev/shm";  // hidden: --dir, for tests
  std::string out;
  long long interval_ms = -1, count = -1, duration_s = -1;
  long long history_mib = -1;  // serve, run: --history
  bool clean = false, help = false;
  bool all = false;                  // snapshot --all, serve --all
  std::vector<std::string> positional;
  std::string lib;                   // run --lib
  bool exit_when_done = false;       // run --exit-when-done
  std::vector<std::string> program;  // run: after --
  std::vector<std::string> budgets;  // record --budget, in order
};

// Parses argv[first..] for `verb`, allowing the options in `allowed` (space-separated).
bool parse_args(int argc, char** argv, int first, const std::string& allowed, args* a,
                std::string* error) {
  auto allows = [&](const std::string& opt) {
    return (" " + allowed + " ").find(" " + opt + " ") != std::string::npos;
  };
  // An option given twice kept the last silently (`--pid 1 --pid 2` read pid 2), where tune,
  // the query strings and the POST bodies refuse a repeat: refused here too, but --budget,
  // which is made to be repeated.
  std::vector<std::string> seen;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {  // the end of the options (run takes its program's arguments before this)
      a->positional.insert(a->positional.end(), argv + i + 1, argv + argc);
      break;
    }
    if (arg == "--help" || arg == "-h") {
      a->help = true;
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-' && arg[1] != '-') {  // `-p 5` read as "--pid required"
      *error = "unknown option '" + arg + "' (the options are spelled --name)";
      return false;
    }
    if (arg.size() < 2 || arg.compare(0, 2, "--") != 0) {
      a->positional.push_back(arg);
      continue;
    }
    std::string value;
    bool inline_value = false;
    if (std::size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      inline_value = true;
    }
    if (!allows(arg)) {
      *error = "unknown option '" + arg + "'";
      return false;
    }
    if (arg != "--budget" && std::find(seen.begin(), seen.end(), arg) != seen.end()) {
      *error = arg + " is given more than once";
      return false;
    }
    seen.push_back(arg);
    if (arg == "--clean" || arg == "--exit-when-done" || arg == "--all") {
      if (inline_value) {  // --clean=false must not clean
        *error = "option " + arg + " takes no value";
        return false;
      }
      (arg == "--clean" ? a->clean : arg == "--all" ? a->all : a->exit_when_done) = true;
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) {
        *error = "option " + arg + " needs a value";
        return false;
      }
      value = argv[++i];
      // `--out --budget` made a file named --budget and dropped the budget.
      if (value.size() > 2 && value.compare(0, 2, "--") == 0 &&
          allows(value.substr(0, value.find('=')))) {
        *error = "option " + arg + " needs a value, not the option " + value + " (for a value " +
                 "that starts with --, write " + arg + "=VALUE)";
        return false;
      }
    }
    long long n = 0;
    // A positive whole number too large for `hi` is out of range, not "not a number"; with
    // `saturate` it is taken as `hi`, for the verb's own range check to report.
    auto positive = [&](long long hi, long long* out, const std::string& what,
                        bool saturate = false) {
      if (parse_number(value, 1, hi, out)) return true;
      std::int64_t v = 0;
      const bool big = memlive::detail::is_whole_number(value) && value[0] >= '0' &&
                       (!memlive::detail::parse_int(value, &v) || v > hi);
      if (big && saturate) {
        *out = hi;
        return true;
      }
      *error = arg + ": '" + value + "' is " +
               (big ? "too large (at most " + std::to_string(hi) + ")"
                    : "not a positive number" + what);
      return false;
    };
    if (arg == "--pid") {
      if (!parse_number(value, 1, 0x7fffffff, &n)) {
        *error = "--pid: '" + value + "' is not a process id";
        return false;
      }
      a->pid = static_cast<int>(n);
      a->have_pid = true;
    } else if (arg == "--format") {
      if (value != "json" && value != "csv" && value != "prometheus") {
        *error = "--format: '" + value + "' is not json, csv or prometheus";
        return false;
      }
      a->format = value;
    } else if (arg == "--by") {
      if (value != "thread" && value != "class") {
        *error = "--by: '" + value + "' is not thread or class";
        return false;
      }
      a->by = value;
    } else if (arg == "--host") {
      a->host = value;
    } else if (arg == "--port") {
      if (!parse_number(value, 0, 65535, &a->port)) {
        *error = "--port: '" + value + "' is not a port number from 0 to 65535";
        return false;
      }
    } else if (arg == "--lib") {
      if (value.empty()) {  // was taken as no --lib: the library beside memlive, silently
        *error = "--lib: the path is empty";
        return false;
      }
      a->lib = value;
    } else if (arg == "--dir" || arg == "--out") {
      if (value.empty()) {  // --out '' was said to be missing
        *error = arg + ": the path is empty";
        return false;
      }
      (arg == "--dir" ? a->dir : a->out) = value;
    } else if (arg == "--budget") {
      a->budgets.push_back(value);
    } else if (arg == "--interval") {
      // Each verb checks its own range (record 10 to 86400000, serve and run 50 to 60000), and
      // says it for a number past 64 bits too.
      if (!positive(std::numeric_limits<long long>::max(), &a->interval_ms, " of milliseconds",
                    /*saturate=*/true))
        return false;
    } else if (arg == "--history") {
      if (!positive(kMaxHistoryMib, &a->history_mib, " of MiB")) return false;
    } else if (arg == "--count") {
      if (!positive(1000000000, &a->count, "")) return false;
    } else if (arg == "--duration") {
      if (!positive(31536000, &a->duration_s, " of seconds")) return false;
    }
  }
  return true;
}

std::string format_age(std::uint64_t start_ns) {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  const std::uint64_t now = std::uint64_t(ts.tv_sec) * 1000000000ull + std::uint64_t(ts.tv_nsec);
  if (start_ns == 0 || start_ns > now) return "-";
  std::uint64_t s = (now - start_ns) / 1000000000ull;
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%llus", static_cast<unsigned long long>(s));
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%llum%02llus", static_cast<unsigned long long>(s / 60),
                  static_cast<unsigned long long>(s % 60));
  else
    std::snprintf(buf, sizeof buf, "%lluh%02llum", static_cast<unsigned long long>(s / 3600),
                  static_cast<unsigned long long>(s / 60 % 60));
  return buf;
}

// `text` for one cell of a terminal table: control bytes (C0, DEL, and C1 as UTF-8) and the
// backslash as C escapes, so that a program named with a newline or an escape sequence stays on
// its row and moves no cursor.
std::string printable(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const unsigned char next = i + 1 < text.size() ? static_cast<unsigned char>(text[i + 1]) : 0;
    if (c == 0xc2 && next >= 0x80 && next <= 0x9f) {  // U+0080..U+009F, C1 controls (CSI...)
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", next);
      out += buf;
      ++i;
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// A directory of segments that cannot be read (err: "DIR: why"): exit 5 for want of
// permission, else 1.
int cannot_read(const std::string& err, bool denied) {
  return fail(denied ? error_kind::permission : static_cast<error_kind>(1), "cannot read " + err);
}

int cmd_list(const args& a) {
  if (!a.positional.empty())
    return usage_error("unexpected '" + a.positional[0] + "'", kListHelp);
  std::string err;
  std::vector<rd::segment_entry> entries = rd::list_segments(a.dir, &err);
  if (!err.empty()) return cannot_read(err, errno == EACCES || errno == EPERM);  // opendir's
  int stale = 0;
  bool overflow = false;  // a process with more threads than slots: its count is a lower bound
  if (entries.empty()) {
    std::printf("no process publishes a livealloc telemetry segment in %s\n", a.dir.c_str());
  } else {
    std::printf("%-8s %-24s %7s %8s  %s\n", "PID", "PROGRAM", "THREADS", "AGE", "STATE");
    for (const rd::segment_entry& e : entries) {
      std::string state;
      struct stat st;
      const int found = lstat(e.path.c_str(), &st) == 0 ? 0 : errno;
      if (found == ENOENT) continue;  // removed since it was listed (or its name being replaced,
                                      // by an exec: it read "not a regular file")
      if (found != 0 || !S_ISREG(st.st_mode)) {
        // A directory, FIFO or symbolic link with the name: never ours, never swept.
        state = "not a segment: " + (e.valid ? std::string("not a regular file") : e.error);
      } else if (e.stale) {  // what --clean removes
        state = !e.valid ? "stale: process gone; unreadable: " + e.error
                : rd::segment_owner_alive(e.pid, e.start_ns)
                    ? "stale: the process exec'd a program without livealloc"
                : rd::pid_alive(e.pid) ? "stale: process gone, its pid now another process's"
                                       : "stale: process gone";
        ++stale;
      } else if (!e.valid) {
        state = "unreadable: " + e.error;
      } else if (!e.alive) {
        state = "process gone";
      } else {
        state = "running";
      }
      std::string program = e.valid ? printable(e.program) : "?";
      const bool more = e.valid && e.threads_alive > 0 && e.overflow_threads > 0;
      overflow = overflow || more;
      std::printf("%-8d %-24s %7s %8s  %s\n", e.pid, program.c_str(),
                  e.valid ? (std::to_string(e.threads_alive) + (more ? "+" : "")).c_str() : "-",
                  e.valid ? format_age(e.start_ns).c_str() : "-", printable(state).c_str());
    }
  }
  if (overflow)
    std::printf("N+: at least N threads; more than the telemetry slots ran at once, and those "
                "without one share the overflow slot (LIVEALLOC_TELEMETRY_SLOTS)\n");
  if (a.clean) {
    int removed = rd::remove_stale(a.dir);
    std::printf("removed %d stale segment%s\n", removed, removed == 1 ? "" : "s");
  } else if (stale > 0) {
    std::printf(
        "%d stale segment%s of processes that are gone; 'memlive list --clean' removes "
        "them\n",
        stale, stale == 1 ? "" : "s");
  }
  return 0;
}

// Opens the segment of --pid, or prints why not and returns the exit code in *code.
// Of a snapshot that reads not alive: whether its process (pid and start time) runs on, which
// means it exec'd a program without livealloc, rather than being gone.
bool exec_d_away(const rd::snapshot& last) {
  return last.ok() && rd::segment_owner_alive(last.pid, last.start_ns);
}

// A segment that reads not alive while its process runs on may be that of one image of an exec
// chain, met between two of them: a wrapper script or pyenv's shim execs the program, and each
// preloaded image publishes its own segment under the name as it loads. `serve --pid $!` read
// such a gap as "exec'd a program without livealloc" (10 times in 12 behind a wrapper script).
// Waits up to kPublishWaitMs for the next image's segment (and the one after it), then gives
// what it has: the segment of an image still running, or the last one, which the caller reports.
void await_next_image(std::unique_ptr<rd::segment>* seg) {
  const std::uint64_t until = rd::detail::monotonic_ms() + memlive::detail::kPublishWaitMs;
  while (!(*seg)->process_alive() && exec_d_away((*seg)->head()) &&
         rd::detail::monotonic_ms() < until) {
    std::string err;
    if (std::unique_ptr<rd::segment> next = (*seg)->successor(&err)) {
      *seg = std::move(next);
      continue;
    }
    const timespec step{0, 20 * 1000000};
    nanosleep(&step, nullptr);
  }
}

// open_segment's error, said; where no process has the pid, with where to find one.
int fail_open(const memlive::open_result& r) {
  return fail(r.kind, r.error + (r.kind == error_kind::no_process
                                     ? "; `memlive list` shows the processes that publish one"
                                     : ""));
}

std::unique_ptr<rd::segment> open_or_report(const args& a, bool for_tuning, int* code) {
  memlive::open_result r = memlive::open_segment(a.pid, for_tuning, a.dir);
  if (!r.segment)
    *code = fail_open(r);
  else
    await_next_image(&r.segment);
  return std::move(r.segment);
}

// The note for a snapshot with threads in the overflow slot (`who`: "" or "process N: ").
void overflow_note(const rd::snapshot& s, const std::string& who) {
  if (s.overflow_threads == 0) return;
  std::fprintf(stderr,
               "memlive: note: %s%llu thread heap(s) got no slot of their own: their threads "
               "share the overflow slot (slot %u), whose counts are their sum as of each one's "
               "last 256th slow path (the totals miss the rest); start the process with a "
               "larger LIVEALLOC_TELEMETRY_SLOTS (now %u) to see each\n",
               who.c_str(), static_cast<unsigned long long>(s.overflow_threads),
               s.slot_count ? s.slot_count - 1 : 0, s.slot_count);
}

// Set once a failed write of stdout has been said (write_stdout): flushed() does not say it twice.
bool g_stdout_error_said = false;

int write_stdout(const std::string& out) {
  if (std::fwrite(out.data(), 1, out.size(), stdout) != out.size() || std::fflush(stdout) != 0) {
    g_stdout_error_said = true;
    return fail(static_cast<error_kind>(1), std::string("writing stdout: ") + strerror(errno));
  }
  return 0;
}

// snapshot --all: every running process that publishes a segment in --dir, in one output. The
// segments it cannot read are said on stderr, and the exit code is the first one's; the others
// are printed all the same (a textfile collector then keeps the processes it could read).
int snapshot_all(const args& a) {
  // The last state of a gone process is not news (`snapshot --pid` still shows it).
  const memlive::all_snapshots all = memlive::take_all(a.dir, true);
  if (!all.dir_error.empty()) return cannot_read(all.dir_error, all.dir_denied);
  int code = 0;
  for (const auto& f : all.failed) {
    const int c = fail(f.first, f.second);
    if (code == 0) code = c;
  }
  const std::vector<rd::snapshot>& shots = all.shots;
  for (const rd::snapshot& s : shots) overflow_note(s, "process " + std::to_string(s.pid) + ": ");
  if (shots.empty() && code == 0)
    std::fprintf(stderr, "memlive: note: no running process publishes a segment in %s%s\n",
                 a.dir.c_str(),
                 all.gone ? (" (" + std::to_string(all.gone) + " of gone ones left; `memlive "
                             "list --clean` removes them)").c_str() : "");
  std::string out;
  if (a.format == "prometheus") {
    out = memlive::to_prometheus(shots, a.by == "class") +
          memlive::prometheus_unreadable(all.failed.size());
  } else {
    for (std::size_t i = 0; i < shots.size(); ++i)
      out += a.format == "csv" ? memlive::to_csv(shots[i], i == 0)
                               : memlive::to_json(shots[i]) + "\n";
    if (a.format == "csv" && shots.empty()) out = memlive::to_csv(rd::snapshot{}, true);
  }
  const int w = write_stdout(out);
  return w ? w : code;
}

int cmd_snapshot(const args& a) {
  if (a.all && a.have_pid) return usage_error("--all and --pid exclude each other", kSnapshotHelp);
  if (!a.have_pid && !a.all) return usage_error("--pid N (or --all) is required", kSnapshotHelp);
  if (!a.positional.empty())
    return usage_error("unexpected '" + a.positional[0] + "'", kSnapshotHelp);
  if (!a.by.empty() && a.format != "prometheus")
    return usage_error("--by goes with --format prometheus", kSnapshotHelp);
  if (a.all) return snapshot_all(a);
  int code = 0;
  auto seg = open_or_report(a, false, &code);
  if (!seg) return code;
  rd::snapshot s = memlive::take_whole(*seg);
  if (s.ok() && !s.process_alive && exec_d_away(s)) {  // it exec'd since open_or_report's wait
    await_next_image(&seg);
    s = memlive::take_whole(*seg);
  }
  if (!s.ok()) return fail(error_kind::bad_segment, seg->path() + ": " + s.error);
  if (!s.process_alive)
    std::fprintf(stderr,
                 exec_d_away(s) ? "memlive: note: process %d exec'd a program without livealloc; "
                                  "this is the stale segment of its earlier image\n"
                                : "memlive: note: process %d is gone; this is its stale segment\n",
                 a.pid);
  overflow_note(s, "");
  return write_stdout(a.format == "csv"          ? memlive::to_csv(s)
                      : a.format == "prometheus" ? (a.by == "class"
                                                        ? memlive::to_prometheus_by_class(s)
                                                        : memlive::to_prometheus(s))
                                                 : memlive::to_json(s) + "\n");
}

// A segment whose process_alive() is false: its process is gone (exit 3), or it exec'd a program
// without livealloc, whose pid lives on but reads no segment (exit 4).
int fail_not_alive(const rd::segment& seg, int pid, const std::string& verb) {
  if (exec_d_away(seg.head()))
    return fail(error_kind::no_segment,
                "process " + std::to_string(pid) +
                    " exec'd a program without livealloc: nothing reads its stale segment; "
                    "nothing to " + verb);
  return fail(error_kind::no_process,
              "process " + std::to_string(pid) + " is gone (stale segment): nothing to " + verb);
}

int cmd_tune(const args& a) {
  if (!a.have_pid) return usage_error("--pid N is required", tune_help());
  if (a.positional.empty()) return usage_error("give at least one name=value", tune_help());
  std::vector<memlive::assignment> want;
  std::vector<std::string> special;  // per assignment: "default", a number past 64 bits, or ""
  for (const std::string& text : a.positional) {
    memlive::assignment x;
    std::string err;
    const std::size_t eq = text.find('=');
    const std::string value = eq == std::string::npos ? "" : text.substr(eq + 1);
    // The keyword in any case, as the names and true/false/on/off: PAGE_RECYCLE=DEFAULT.
    const bool to_default = memlive::detail::iequals(value, "default");
    std::string odd;  // resolved once the segment's options are known
    if (!memlive::parse_assignment(text, &x, &err)) {
      std::string name_err;  // the name's checks, with a stand-in value
      // A whole number past 64 bits is out of every option's range: exit 7, like any other.
      std::int64_t unused = 0;
      if ((!to_default && memlive::detail::parse_whole(value, &unused) >= 0) ||
          !memlive::parse_assignment(text.substr(0, eq + 1) + "0", &x, &name_err))
        return usage_error(err + "; nothing applied");
      odd = to_default ? "default" : value;
    }
    for (const memlive::assignment& y : want)
      if (y.name == x.name)
        return usage_error("option '" + x.name + "' given twice; nothing applied");
    want.push_back(x);
    special.push_back(odd);
  }
  int code = 0;
  auto seg = open_or_report(a, true, &code);
  if (!seg) return code;
  if (!seg->process_alive()) return fail_not_alive(*seg, a.pid, "tune");
  rd::snapshot before = seg->head();
  if (!before.ok()) return fail(error_kind::bad_segment, seg->path() + ": " + before.error);
  for (std::size_t i = 0; i < want.size(); ++i) {
    memlive::assignment& x = want[i];
    const rd::option_view* o = before.find_option(x.name);
    if (special[i] == "default" && o) x.value = o->default_value;
    if (!special[i].empty() && special[i] != "default" && o && o->live)
      return fail(error_kind::rejected, "option '" + x.name + "': " + special[i] +
                                            " is out of range [" + std::to_string(o->min) + ", " +
                                            std::to_string(o->max) + "]; nothing applied");
    std::string err;
    if (!memlive::check_assignment(x, before.options, &err))
      return fail(error_kind::rejected, err + "; nothing applied");
  }
  std::uint64_t generation = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    std::string err;
    std::uint64_t g = 0;
    if (!seg->set_option(want[i].name, want[i].value, &err, &g))
      return fail(
          error_kind::rejected,
          err + (i ? " (the options before it were stored)" : "; nothing applied"));
    if (g > generation) generation = g;
  }
  const bool validated = seg->wait_validated(generation, 2000);
  if (!validated && !seg->process_alive()) {  // not pending: nobody is left to apply it
    if (exec_d_away(seg->head()))  // the values went with the image; the process runs on
      return fail(error_kind::no_segment,
                  "process " + std::to_string(a.pid) +
                      " exec'd before it validated the values, which went with its old image "
                      "(a new one starts from its environment's options); tune it again");
    return fail(error_kind::no_process, "process " + std::to_string(a.pid) +
                                            " exited before it validated the values");
  }
  rd::snapshot after = seg->head();
  if (!after.ok()) return fail(error_kind::bad_segment, seg->path() + ": " + after.error);
  // The allocator counts what it rejects. A value in force that differs from ours while nothing
  // was rejected and `requested` holds another value is another writer's later change.
  const bool none_rejected = after.rejected == before.rejected;
  bool any_rejected = false;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const memlive::assignment& x = want[i];
    const rd::option_view* was = before.find_option(x.name);
    const rd::option_view* now = after.find_option(x.name);
    const long long old_value = was ? was->effective : 0;
    const long long value = x.value;
    const std::string what =
        x.name + " = " + std::to_string(value) + (special[i] == "default" ? " (default)" : "");
    if (!validated) {
      std::printf("%s: pending (was %lld)\n", what.c_str(), old_value);
    } else if (now && now->effective == value) {
      std::printf("%s: accepted (was %lld)\n", what.c_str(), old_value);
    } else if (now && now->requested != value && none_rejected) {
      std::printf("%s: accepted, then superseded by another change (in force: %lld)\n",
                  what.c_str(), static_cast<long long>(now->effective));
    } else {
      any_rejected = true;
      std::printf("%s: rejected by the allocator (in force: %lld)\n", what.c_str(),
                  now ? static_cast<long long>(now->effective) : old_value);
    }
  }
  if (!validated)
    std::printf(
        "the allocator has not validated generation %llu within 2 s: it checks at its "
        "next slow path (an idle process does so later)\n",
        static_cast<unsigned long long>(generation));
  else
    std::printf(
        "generation %llu; threads apply it at their next slow path (a thread's "
        "applied_generation >= %llu shows it took effect there)\n",
        static_cast<unsigned long long>(generation), static_cast<unsigned long long>(generation));
  // The values are stored whatever becomes of this report: a lost one (/dev/full) must not read
  // as "nothing applied" to a script that would then try again.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    g_stdout_error_said = true;
    return fail(static_cast<error_kind>(1),
                std::string("writing stdout: ") + strerror(errno) +
                    " (the values were stored all the same: `memlive snapshot --pid " +
                    std::to_string(a.pid) + "` shows the options in force)");
  }
  return any_rejected ? static_cast<int>(error_kind::rejected) : 0;
}

volatile sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

using rd::detail::monotonic_ms;

// SIGINT and SIGTERM set g_stop. Interrupted system calls restart (the read of the exec status,
// waitpid): every wait polls g_stop in slices of at most 20 ms anyway. Not with `restart` false:
// record's blocking write (to an output it could not make non-blocking, see record_output) to a
// full pipe whose reader does not read waits without end, and must fail.
// A reader of stdout that went away (`memlive serve ... | head -1`) does not end serve, run or
// record: a write to it fails with EPIPE instead (run's program gets the default back).
void catch_stop_signals(bool restart = true) {
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = restart ? SA_RESTART : 0;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// Sleeps until `deadline_ms` (CLOCK_MONOTONIC) or a stop signal, in slices so a signal that
// arrives just before nanosleep is noticed within 20 ms.
void sleep_until(std::uint64_t deadline_ms) {
  while (!g_stop) {
    std::uint64_t now = monotonic_ms();
    if (now >= deadline_ms) return;
    std::uint64_t ms = deadline_ms - now;
    if (ms > 20) ms = 20;
    timespec ts{0, static_cast<long>(ms) * 1000000L};
    nanosleep(&ts, nullptr);
  }
}

// record's waits. Its stop signals (SIGINT, SIGTERM) are blocked while it runs and taken only
// inside ppoll(), which unblocks them (`mask`) for as long as it waits: a signal that comes
// between a look at g_stop and the wait is pending and ends the wait at once. (A blocking write()
// to a full pipe had a window there: a signal taken just before the write set g_stop, and the
// write then waited for the reader, or for the next signal.)
struct record_output {
  int fd = -1;
  bool close_it = false;  // ours: --out FILE, or our own description of stdout
  bool send = false;      // a socket: send(MSG_DONTWAIT) does not wait
  bool waits = false;     // a blocking fd that may wait on a reader (no other way found)
  sigset_t mask;          // the signal mask inside ppoll: without SIGINT and SIGTERM
};

// Sleeps until `deadline_ms` (CLOCK_MONOTONIC) or a stop signal.
void wait_until(std::uint64_t deadline_ms, const sigset_t& mask) {
  while (!g_stop) {
    const std::uint64_t now = monotonic_ms();
    if (now >= deadline_ms) return;
    const std::uint64_t ms = deadline_ms - now;
    const timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000L};
    ppoll(nullptr, 0, &ts, &mask);
  }
}

// Writes all of `s`; false with errno set when a write fails, EINTR when a stop signal came
// first or while a write waited (*done: the bytes of `s` written).
bool write_all(const record_output& o, const std::string& s, std::size_t* done) {
  for (*done = 0; *done < s.size();) {
    if (g_stop) {
      errno = EINTR;
      return false;
    }
    const char* p = s.data() + *done;
    const std::size_t n = s.size() - *done;
    ssize_t w;
    if (o.send) {
      w = ::send(o.fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    } else if (o.waits) {  // as before: the signal interrupts the write, bar the window above
      sigset_t blocked;
      sigprocmask(SIG_SETMASK, &o.mask, &blocked);
      w = g_stop ? (errno = EINTR, -1) : ::write(o.fd, p, n);
      const int e = errno;
      sigprocmask(SIG_SETMASK, &blocked, nullptr);
      errno = e;
    } else {
      w = ::write(o.fd, p, n);
    }
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pfd{o.fd, POLLOUT, 0};
      ppoll(&pfd, 1, nullptr, &o.mask);  // ready, or EINTR: a stop signal
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      if (w == 0) errno = EIO;
      return false;
    }
    *done += static_cast<std::size_t>(w);
  }
  return true;
}

// record's output: a regular file as it is (a write to it does not wait on a reader); a pipe,
// FIFO or terminal through a description of our own made non-blocking (stdout's is shared with
// the shell and the processes beside us, which O_NONBLOCK on it would surprise), reopened
// through /proc/self/fd for --out -; a socket with send(MSG_DONTWAIT).
// A file is opened without O_TRUNC: record truncates it only once it knows it is no segment
// (segment_file_of).
bool open_output(const std::string& path, record_output* o, std::string* error) {
  if (path != "-") {
    o->fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
    if (o->fd < 0) {
      *error = path + ": " + strerror(errno);
      return false;
    }
    o->close_it = true;
  } else {
    o->fd = STDOUT_FILENO;
    // Closed (main() put /dev/null there, read-only) or read-only: reopening it by its name
    // below would write, and lose, every sample.
    const int mode = fcntl(o->fd, F_GETFL);
    if (mode < 0 || (mode & O_ACCMODE) == O_RDONLY) {
      *error = "stdout is closed or not open for writing";
      return false;
    }
  }
  struct stat st {};
  if (fstat(o->fd, &st) != 0 || S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) return true;
  if (S_ISSOCK(st.st_mode)) {
    o->send = true;
  } else if (o->close_it) {
    const int flags = fcntl(o->fd, F_GETFL);
    o->waits = flags < 0 || fcntl(o->fd, F_SETFL, flags | O_NONBLOCK) != 0;
  } else {
    const int fd = ::open("/proc/self/fd/1", O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    o->waits = fd < 0;
    if (fd >= 0) {
      o->fd = fd;
      o->close_it = true;
    }
  }
  return true;
}

// The telemetry segment that the regular file open as `fd` is: `seg`'s own, or any file named
// livealloc.* in `dir` (another process's segment), whatever name `fd` was opened by (a hard or
// symbolic link, /proc/PID/fd). "" when it is none. Writing one would truncate it under its
// process's mapping, which kills that process by SIGBUS at its next counter update.
std::string segment_file_of(int fd, const rd::segment& seg, const std::string& dir) {
  struct stat out, st;
  if (fstat(fd, &out) != 0 || !S_ISREG(out.st_mode)) return "";
  auto same = [&](const std::string& path) {
    return stat(path.c_str(), &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino;
  };
  if (same(seg.path())) return seg.path();
  std::string found;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, "livealloc.", 10) == 0 && same(dir + "/" + e->d_name)) {
        found = dir + "/" + e->d_name;
        break;
      }
    closedir(d);
  }
  return found;
}

int cmd_record(const args& a) {
  if (!a.have_pid) return usage_error("--pid N is required", kRecordHelp);
  if (a.interval_ms < 0) return usage_error("--interval MS is required", kRecordHelp);
  if (a.interval_ms < 10 || a.interval_ms > 86400000)
    return usage_error("--interval must be from 10 to 86400000 ms", kRecordHelp);
  if (a.out.empty()) return usage_error("--out FILE is required", kRecordHelp);
  if (a.count > 0 && a.duration_s > 0)
    return usage_error("give --count or --duration, not both", kRecordHelp);
  if (!a.positional.empty())
    return usage_error("unexpected '" + a.positional[0] + "'", kRecordHelp);
  std::vector<budgets::budget> bs;
  for (const std::string& text : a.budgets) {
    budgets::budget b;
    std::string err;
    if (!budgets::parse(text, &b, &err)) return fail(error_kind::usage, "--budget: " + err);
    bs.push_back(b);
  }
  int code = 0;
  auto seg = open_or_report(a, false, &code);
  if (!seg) return code;
  if (!seg->process_alive()) return fail_not_alive(*seg, a.pid, "record");

  const bool to_stdout = a.out == "-";
  record_output o;
  std::string open_error;
  if (!open_output(a.out, &o, &open_error)) return fail(static_cast<error_kind>(1), open_error);
  const std::string segment_file = segment_file_of(o.fd, *seg, a.dir);
  struct stat out_st {};
  if (segment_file.empty() && o.close_it && !o.send && fstat(o.fd, &out_st) == 0 &&
      S_ISREG(out_st.st_mode) && ftruncate(o.fd, 0) != 0) {  // "replaced if it exists"
    open_error = a.out + ": " + strerror(errno);
    ::close(o.fd);
    return fail(static_cast<error_kind>(1), open_error);
  }
  if (!segment_file.empty()) {
    if (o.close_it) ::close(o.fd);
    return fail(error_kind::usage, (to_stdout ? std::string("stdout") : "--out " + a.out) +
                                       " is the telemetry segment " + segment_file +
                                       ": writing it would truncate it under its process "
                                       "(killed by SIGBUS); choose another file");
  }
  const int out = o.fd;

  // SIGINT and SIGTERM only inside ppoll (see record_output).
  catch_stop_signals(false);
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  sigprocmask(SIG_BLOCK, &stops, &o.mask);
  sigdelset(&o.mask, SIGINT);
  sigdelset(&o.mask, SIGTERM);
  signal(SIGXFSZ, SIG_IGN);  // past `ulimit -f`, a write fails (EFBIG) and is reported
  signal(SIGPIPE, SIG_IGN);  // a reader of --out - that goes away: EPIPE, reported

  // The process's start (its segment's): the recording ends with the process, not with an image
  // of it. After an exec the old image's segment is no longer attached (its lock went with the
  // image) while the new one has not published yet, or never will (a program without livealloc).
  const std::uint64_t owner_start_ns = seg->head().start_ns;  // 0 if unreadable: the pid decides
  const std::uint64_t start = monotonic_ms();
  const std::uint64_t end = a.duration_s > 0 ? start + std::uint64_t(a.duration_s) * 1000u : 0;
  std::string line;
  long long written = 0;
  off_t complete = 0;  // bytes of the file in whole lines
  std::string why = "done";
  int result = 0;
  const std::uint64_t interval = std::uint64_t(a.interval_ms);
  std::uint64_t t0_ns = 0;
  rd::snapshot s;  // each sample reuses the memory of the one before (27 MB at 4,000 threads)
  for (std::uint64_t tick = start;;) {
    wait_until(tick, o.mask);
    if (g_stop) {
      why = "stopped by a signal";
      break;
    }
    std::string err;
    if (std::unique_ptr<rd::segment> next = seg->successor(&err)) seg = std::move(next);  // exec
    // Before take(): the last sample follows the exit.
    const bool gone = !rd::segment_owner_alive(a.pid, owner_start_ns);
    seg->take(&s);
    if (!s.ok()) {
      result = fail(error_kind::bad_segment, seg->path() + ": " + s.error);
      why = "";
      break;
    }
    line.clear();
    memlive::append_json(line, s);
    line.push_back('\n');
    std::size_t sent = 0;
    if (!write_all(o, line, &sent)) {
      const int e = errno;
      // A full disk or a size limit must not leave half a line for readers to trip on.
      const bool cut = !to_stdout && ftruncate(out, complete) == 0;
      if (e == EINTR && g_stop) {  // a pipe cannot take a line back
        why = "stopped by a signal";
        if (sent > 0 && !cut) why += "; its reader did not read: the last line is cut short";
        break;
      }
      result = fail(static_cast<error_kind>(1),
                    a.out + ": " + strerror(e) + "; stopped after " + std::to_string(written) +
                        " complete sample" + (written == 1 ? "" : "s") +
                        (cut ? " (the partial last line was removed)" : ""));
      why = "";
      break;
    }
    complete += static_cast<off_t>(line.size());
    ++written;
    if (!bs.empty()) {
      const budgets::sample smp = budgets::from_snapshot(s);
      if (written == 1) t0_ns = smp.taken_ns;
      for (const budgets::budget* b : budgets::observe(bs, smp, written, t0_ns))
        error_line("budget " + b->text + " exceeded at sample " + std::to_string(written) + " (" +
                   budgets::seconds(b->first_over_ns) + "): " +
                   budgets::with_unit(b->first_over_value, b->bytes) + "; limit " +
                   budgets::with_unit(b->limit, b->bytes));
    }
    if (gone) {
      why = "process " + std::to_string(a.pid) + " exited; wrote a final sample";
      break;
    }
    if (a.count > 0 && written >= a.count) break;
    const std::uint64_t now = monotonic_ms();
    if (end && now + interval > end) break;
    // The next tick still ahead: one held up (SIGSTOP, a debugger, samples slower than the
    // interval) skips the ticks it missed instead of taking them all at once.
    tick += interval;
    if (tick <= now) tick = start + ((now - start) / interval + 1) * interval;
  }
  if (o.close_it && ::close(out) != 0 && result == 0 && !to_stdout)
    result = fail(static_cast<error_kind>(1), a.out + ": " + strerror(errno));
  if (!why.empty())
    std::fprintf(stderr, "memlive: recorded %lld sample%s to %s (%s)\n", written,
                 written == 1 ? "" : "s", a.out.c_str(), why.c_str());
  if (!bs.empty()) {
    bool over = false;
    for (const budgets::budget& b : bs) {
      std::fprintf(stderr, "%s\n", budgets::report_line(b, std::uint64_t(written)).c_str());
      over = over || !b.passed();
    }
    if (over && result == 0) result = static_cast<int>(error_kind::over_budget);
  }
  return result;
}

// The longest line check reads: a sample of 4,096 threads with every class in use is about
// 75 MB.
constexpr std::size_t kMaxLine = std::size_t(256) << 20;

// A recording is of one process: `record` follows its pid, through every exec (a new image, so
// a later start_ns, the counters from zero) until it exits. A line of another pid, or of an
// image that started before the line above's, is of another process (recordings put end to
// end), whose values compared with the first's would mean nothing. A later start_ns under the
// same pid is an exec when the process's own start (process_start_ticks) is the same, or when
// either is unknown (a process gone has none, so `prev` carries the last one known); a new
// process given the same pid has another.
std::string another_process(const budgets::sample& s, const budgets::sample& prev,
                            std::uint64_t prev_line) {
  const auto who = [](const budgets::sample& x) {
    return "pid " + std::to_string(x.pid) + " (" + printable(x.program) + ", start_ns " +
           std::to_string(x.start_ns) + ")";
  };
  const int down = s.pid == prev.pid && s.start_ns == prev.start_ns ? budgets::fallen(s, prev) : -1;
  if (down >= 0)
    return std::string("the same process as line ") + std::to_string(prev_line) + ", " + who(s) +
           ", with fewer " + budgets::kProcessFields[down] + " (" +
           std::to_string(s.process[down]) + " after " + std::to_string(prev.process[down]) +
           "), which only grow: a recording put after itself, or after a later part of the same "
           "run? check each";
  std::string what = "another process: " + who(s) + " after " + who(prev) + " on line " +
                     std::to_string(prev_line);
  if (s.pid == prev.pid && budgets::restarted(s, prev))
    what += ", which started at another time (process_start_ticks " +
            std::to_string(s.start_ticks) + ", not " + std::to_string(prev.start_ticks) +
            "): a new process given the same pid, as a container's first process is";
  else if (s.pid == prev.pid)
    what += ", an image that started before that line's (record follows a process through "
            "exec, to images that start later only)";
  return what + "; a recording is of one process (two recordings put together? check each)";
}

int cmd_check(const args& a) {
  if (a.positional.empty())
    return usage_error("give the FILE `memlive record` wrote ('-': stdin) and a budget",
                       kCheckHelp);
  if (a.positional.size() < 2)
    return usage_error("give at least one budget, such as 'live_bytes<=64MiB'", kCheckHelp);
  std::vector<budgets::budget> bs;
  for (std::size_t i = 1; i < a.positional.size(); ++i) {
    budgets::budget b;
    std::string err;
    if (!budgets::parse(a.positional[i], &b, &err)) return fail(error_kind::usage, err);
    bs.push_back(b);
  }
  const std::string& file = a.positional[0];
  const std::string name = file == "-" ? "stdin" : file;
  const int fd = file == "-" ? STDIN_FILENO : ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(static_cast<error_kind>(1), name + ": " + strerror(errno));
  const budgets::needs need = budgets::needs_of(bs);
  const auto malformed = [&](std::uint64_t n, const std::string& what) {
    return fail(error_kind::bad_segment, name + ": line " + std::to_string(n) + ": " + what);
  };
  std::uint64_t samples = 0, t0_ns = 0, last_ns = 0, prev_line = 0;
  budgets::sample first, prev;  // their pid, program and start_ns
  // One line: 0 when it is a sample (taken), else the exit code, said.
  const auto take = [&](const std::string& text, std::uint64_t n, bool unfinished) -> int {
    budgets::sample s;
    std::string err;
    switch (budgets::read_line(text, need, unfinished, &s, &err)) {
      case budgets::line_kind::refused:
        return malformed(n, err);
      case budgets::line_kind::cut:
        error_line("warning: " + name + ": the last line (" + std::to_string(n) +
                   ") is cut short, without its newline (a record stopped while writing it?); "
                   "left out");
        return 0;
      case budgets::line_kind::sample:
        break;
    }
    if (samples > 0 && !budgets::continues(s, prev))
      return malformed(n, another_process(s, prev, prev_line));
    if (++samples == 1) {
      t0_ns = s.taken_ns;
      first.pid = s.pid;
      first.program = s.program;
    }
    prev.pid = s.pid;
    prev.start_ns = s.start_ns;
    if (s.start_ticks != 0) prev.start_ticks = s.start_ticks;  // one process: it never changes
    prev.program = s.program;
    std::copy(std::begin(s.process), std::end(s.process), prev.process);
    prev_line = n;
    last_ns = s.taken_ns;
    budgets::observe(bs, s, samples, t0_ns);
    return 0;
  };
  std::vector<char> chunk(std::size_t(1) << 20);
  std::string line;
  std::uint64_t number = 0;
  int code = 0;
  try {
    for (;;) {
      const ssize_t got = ::read(fd, chunk.data(), chunk.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        code = fail(static_cast<error_kind>(1), name + ": " + strerror(errno));
        break;
      }
      if (got == 0) {
        if (!line.empty()) code = take(line, ++number, true);
        break;
      }
      for (const char *p = chunk.data(), *end = p + got; p < end && code == 0;) {
        const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
        const std::size_t n = static_cast<std::size_t>((nl ? nl : end) - p);
        if (line.size() + n > kMaxLine) {
          code = malformed(number + 1, "longer than 256 MiB: not a sample");
          break;
        }
        line.append(p, n);
        p += n;
        if (!nl) break;
        ++p;
        code = take(line, ++number, false);
        line.clear();
      }
      if (code != 0) break;
    }
  } catch (const std::bad_alloc&) {
    code = fail(static_cast<error_kind>(1), name + ": out of memory reading line " +
                                               std::to_string(number + 1));
  }
  if (fd != STDIN_FILENO) ::close(fd);
  if (code != 0) return code;
  if (samples == 0)
    return fail(error_kind::bad_segment,
                name + " holds no sample" + (number == 0 ? " (it is empty)" : ""));
  int over = 0;
  for (const budgets::budget& b : bs) {
    std::printf("%s\n", budgets::report_line(b, samples).c_str());
    over += b.passed() ? 0 : 1;
  }
  const std::string span = budgets::seconds(last_ns > t0_ns ? last_ns - t0_ns : 0).substr(1);
  std::printf("%s: %d of %zu budget%s exceeded; %llu sample%s of process %d (%s) over %s\n",
              over ? "FAIL" : "PASS", over, bs.size(), bs.size() == 1 ? "" : "s",
              static_cast<unsigned long long>(samples), samples == 1 ? "" : "s", first.pid,
              printable(first.program).c_str(), span.c_str());
  return over ? static_cast<int>(error_kind::over_budget) : 0;
}

// Says why a server did not start (`help`: the verb's, for a bad option) and returns the exit code.
int start_failed(const memlive::status& st, const char* help) {
  switch (st.error) {
    case memlive::start_error::port_in_use:
      return fail(error_kind::port_in_use, st.message + "; " + kOtherPort);
    case memlive::start_error::permission:
      return fail(error_kind::permission, st.message + "; " + kOtherPort);
    case memlive::start_error::bad_host:
    case memlive::start_error::bad_options:
      return usage_error(st.message, help);
    default:
      return fail(static_cast<error_kind>(1), st.message);
  }
}

// Starts `srv` for serve: 0, or the exit code of the error it said.
int start_server(memlive::detail::server& srv, const memlive::options& opts, int* port) {
  const memlive::status st = srv.start(opts);
  *port = st.port;
  return st ? 0 : start_failed(st, kServeHelp);
}

// serve --all: /metrics of every running process in --dir, until SIGINT/SIGTERM.
int serve_all(const args& a, const memlive::options& opts) {
  // A directory that cannot be read is said now, not at each scrape.
  std::string err;
  rd::list_segments(a.dir, &err);
  if (!err.empty()) return cannot_read(err, errno == EACCES || errno == EPERM);  // opendir's
  catch_stop_signals();
  memlive::detail::server srv(a.dir);
  int port = 0;
  if (const int code = start_server(srv, opts, &port)) return code;
  std::printf("memlive: serving every profiled process of %s at http://%s:%d/metrics "
              "(Ctrl-C stops)\n",
              a.dir.c_str(), opts.host.c_str(), port);
  std::fflush(stdout);
  std::fputs(memlive::detail::exposure_warning(opts.host).c_str(), stderr);
  while (!g_stop) sleep_until(monotonic_ms() + 100);
  srv.stop();
  std::fprintf(stderr, "memlive: stopped\n");  // (stdout: the URL only, as serve --pid)
  return 0;
}

// civetweb's 24 workers each hold a connection, beside stdio, the segment and the listening
// socket: with `ulimit -n 5` the server listened but could not accept, and its clients waited
// for nothing while memlive said nothing.
constexpr rlim_t kMinDescriptors = 32;

// 0 when the process may open kMinDescriptors descriptors, else the error's exit code, said.
int check_descriptors() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur >= kMinDescriptors) return 0;
  return fail(static_cast<error_kind>(1),
              "ulimit -n is " + std::to_string(r.rlim_cur) +
                  ": the HTTP server needs at least " + std::to_string(kMinDescriptors) +
                  " file descriptors (24 workers); raise it (ulimit -n 1024)");
}

int cmd_serve(const args& a) {
  if (a.all && a.have_pid) return usage_error("--all and --pid exclude each other", kServeHelp);
  if (!a.have_pid && !a.all) return usage_error("--pid N (or --all) is required", kServeHelp);
  if (!a.positional.empty())
    return usage_error("unexpected '" + a.positional[0] + "'", kServeHelp);
  memlive::options opts;
  opts.host = a.host;
  opts.port = static_cast<int>(a.port);
  if (a.interval_ms >= 0) {
    if (a.all) return usage_error("--interval is the stream's: not with --all", kServeHelp);
    if (a.interval_ms < memlive::detail::kMinStreamMs ||
        a.interval_ms > memlive::detail::kMaxStreamMs)
      return usage_error("--interval must be from 50 to 60000 ms", kServeHelp);
    opts.stream_interval_ms = static_cast<int>(a.interval_ms);
  }
  if (a.history_mib >= 0) {
    if (a.all) return usage_error("--history is the page's: not with --all", kServeHelp);
    opts.history_bytes = std::size_t(a.history_mib) << 20;
  }
  if (const int code = check_descriptors()) return code;
  if (a.all) return serve_all(a, opts);
  // Writable when we may (POST /api/options tunes), else read-only.
  memlive::open_result r = memlive::open_segment(a.pid, true, a.dir);
  bool read_only = false;
  if (!r.segment && r.kind == error_kind::permission) {
    r = memlive::open_segment(a.pid, false, a.dir);
    read_only = true;
  }
  if (!r.segment) return fail_open(r);
  await_next_image(&r.segment);
  // A process that is gone (crashed, killed) left its last state: served, marked gone, as
  // snapshot prints it. One whose pid lives on in a program without livealloc (exec) is refused.
  const bool gone = !r.segment->process_alive();
  if (gone && exec_d_away(r.segment->head())) return fail_not_alive(*r.segment, a.pid, "serve");
  // The process's start, as its segment says: the note below is for the process's end, whose pid
  // may be reused.
  const std::uint64_t owner_start_ns = r.segment->head().start_ns;  // 0, unreadable: the pid

  catch_stop_signals();

  memlive::detail::server srv(std::move(r.segment));
  int port = 0;
  if (const int code = start_server(srv, opts, &port)) return code;
  std::printf("memlive: serving process %d at http://%s:%d/ (Ctrl-C stops)%s\n", a.pid,
              opts.host.c_str(), port, read_only ? "; read-only segment: tuning disabled" : "");
  std::fflush(stdout);
  std::fputs(memlive::detail::exposure_warning(opts.host).c_str(), stderr);
  // The URL is the one line on stdout (a script reads it, `| head -1`); what follows is said on
  // stderr, as `run` says it: a later line to a reader gone had ended the server by SIGPIPE.
  bool gone_noted = gone;
  if (gone)
    std::fprintf(stderr, "memlive: process %d is gone (stale segment): serving its last state\n",
                 a.pid);
  while (!g_stop) {
    sleep_until(monotonic_ms() + 100);
    if (!gone_noted && !rd::segment_owner_alive(a.pid, owner_start_ns)) {
      gone_noted = true;
      std::fprintf(stderr,
                   "memlive: process %d exited; still serving its last state (Ctrl-C stops)\n",
                   a.pid);
    }
  }
  srv.stop();
  std::fprintf(stderr, "memlive: stopped\n");
  return 0;
}

// The status memlive run exits with: the exit code, or 128 + the signal.
int exit_code_of(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return 1;
}
std::string describe_status(int wstatus) {
  if (WIFSIGNALED(wstatus))
    return "was killed by signal " + std::to_string(WTERMSIG(wstatus)) + " (" +
           strsignal(WTERMSIG(wstatus)) + ")";
  return "exited with status " + std::to_string(exit_code_of(wstatus));
}

// The library to preload: --lib, else the one beside this binary: <build>/allocator/ when it is
// <build>/memlive/memlive, <prefix>/<libdir>/ when it is an installed <prefix>/bin/memlive.
bool find_library(const std::string& given, std::string* out, std::string* error) {
  std::vector<std::string> candidates;
  if (!given.empty()) {
    candidates.push_back(given);
  } else {
    char exe[PATH_MAX] = {};
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) {
      *error = std::string("cannot read /proc/self/exe: ") + strerror(errno) +
               "; give the library's path with --lib PATH";
      return false;
    }
    std::string dir(exe, static_cast<std::size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));                 // <build>/memlive or <prefix>/bin
    const std::string up = dir.substr(0, dir.rfind('/'));  // <build> or <prefix>
    candidates.push_back(up + "/allocator/liblivealloc.so");
    const std::string libdir = MEMLIVE_INSTALL_LIBDIR;
    candidates.push_back((libdir[0] == '/' ? libdir : up + "/" + libdir) + "/liblivealloc.so");
  }
  int last_errno = ENOENT;
  for (const std::string& path : candidates) {
    char real[PATH_MAX] = {};
    struct stat st {};
    if (realpath(path.c_str(), real) && access(real, R_OK) == 0 && stat(real, &st) == 0) {
      if (!S_ISREG(st.st_mode)) {
        *error = std::string("the allocator library ") + real + " is not a file";
        return false;
      }
      // ld.so would only warn about anything else, and the program would run unprofiled while
      // memlive waited for a segment: a 64-bit ELF shared object (e_ident, e_type ET_DYN).
      unsigned char head[18] = {};
      const int fd = open(real, O_RDONLY | O_CLOEXEC);
      const ssize_t got = fd >= 0 ? read(fd, head, sizeof head) : -1;
      if (fd >= 0) close(fd);
      if (got != static_cast<ssize_t>(sizeof head) || std::memcmp(head, "\x7f" "ELF", 4) != 0 ||
          head[4] != 2 || head[16] != 3 || head[17] != 0) {
        *error = std::string("the allocator library ") + real +
                 " is not a 64-bit ELF shared library; give liblivealloc.so with --lib PATH";
        return false;
      }
      // ld.so splits LD_PRELOAD at spaces and colons, with no way to quote them: such a path
      // would be ignored and the program would run unprofiled.
      if (std::strpbrk(real, " :\t\n")) {
        *error = std::string("the allocator library's path '") + real +
                 "' holds a space or a colon, which LD_PRELOAD cannot carry; copy or link it " +
                 "to a path without them and give that with --lib PATH";
        return false;
      }
      *out = real;
      return true;
    }
    last_errno = errno;
  }
  std::string tried;
  for (const std::string& path : candidates) tried += (tried.empty() ? "" : " or ") + path;
  *error = "cannot find the allocator library " + tried + " (" + strerror(last_errno) +
           "); build it (cmake --build <build>; sanitizer builds have none), or give its path " +
           "with --lib PATH";
  return false;
}

// Whether process pid surely does not map the file at `path` (by device and inode, as
// /proc/PID/maps names them); false when either cannot be read.
bool maps_not(pid_t pid, const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 &&
         rd::detail::maps_file(static_cast<int>(pid), st.st_dev, st.st_ino) == 0;
}

// Ends the child: SIGTERM, then SIGKILL after 2 s. Returns its wait status.
int end_child(pid_t pid) {
  kill(pid, SIGTERM);
  int ws = 0;
  for (int i = 0; i < 200; ++i) {
    if (waitpid(pid, &ws, WNOHANG) == pid) return ws;
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &ws, 0);
  return ws;
}

int cmd_run(const args& a) {
  if (!a.positional.empty())
    return usage_error("unexpected '" + a.positional[0] + "' (the program goes after --)",
                       kRunHelp);
  if (a.program.empty())
    return usage_error("no program given (memlive run [options] -- program args)", kRunHelp);
  memlive::options opts;
  opts.host = a.host;
  opts.port = static_cast<int>(a.port);
  if (a.interval_ms >= 0) {
    if (a.interval_ms < memlive::detail::kMinStreamMs ||
        a.interval_ms > memlive::detail::kMaxStreamMs)
      return usage_error("--interval must be from 50 to 60000 ms", kRunHelp);
    opts.stream_interval_ms = static_cast<int>(a.interval_ms);
  }
  if (a.history_mib >= 0) opts.history_bytes = std::size_t(a.history_mib) << 20;
  in_addr addr{};  // (the server's own check, before the program starts)
  if (const std::string why = memlive::detail::host_problem(opts.host, &addr); !why.empty())
    return usage_error(why, kRunHelp);
  std::string lib, err;
  // Before the library's checks: a sanitizer build has none, and the limit is the shell's.
  if (const int code = check_descriptors()) return code;
  if (!find_library(a.lib, &lib, &err)) return usage_error(err);
  // A port or host the server cannot listen on is found before the program starts (and again
  // by start(), below): the program must not run, and be killed, for a mistyped option.
  if (const int e = memlive::detail::probe_bind(addr, opts.port); e == EADDRINUSE) {
    return fail(error_kind::port_in_use, "port " + std::to_string(opts.port) + " on " +
                                             opts.host + " is in use; " + kOtherPort);
  } else if (e == EACCES) {
    return fail(error_kind::permission,
                memlive::detail::listen_denied(opts.host, opts.port) + "; " + kOtherPort);
  } else if (e != 0) {
    return usage_error("cannot listen on " + opts.host + ":" + std::to_string(opts.port) +
                           ": " + strerror(e),
                       kRunHelp);
  }

  // The environment: ours, LD_PRELOAD with the library first, LIVEALLOC_PROFILE=1.
  std::vector<std::string> env;
  std::string preload = "LD_PRELOAD=" + lib;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    if (v.compare(0, 11, "LD_PRELOAD=") == 0) {
      if (v.size() > 11) preload += ":" + v.substr(11);
    } else if (v.compare(0, 18, "LIVEALLOC_PROFILE=") != 0) {
      env.push_back(v);
    }
  }
  env.push_back(preload);
  env.push_back("LIVEALLOC_PROFILE=1");
  std::vector<char*> envp, argv;
  for (std::string& v : env) envp.push_back(&v[0]);
  envp.push_back(nullptr);
  std::vector<std::string> prog = a.program;
  for (std::string& v : prog) argv.push_back(&v[0]);
  argv.push_back(nullptr);

  catch_stop_signals();

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return fail(static_cast<error_kind>(1), "pipe failed");
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t self = getpid();
  const pid_t pid = fork();
  if (pid < 0)
    return fail(static_cast<error_kind>(1), std::string("fork: ") + strerror(errno));
  if (pid == 0) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGINT, &dfl, nullptr);
    sigaction(SIGTERM, &dfl, nullptr);
    sigaction(SIGPIPE, &dfl, nullptr);  // as from a shell, whatever memlive's own is
    close(fds[0]);
    // If memlive dies, even by SIGKILL, the program gets the SIGTERM that a stop would send it.
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != self) _exit(127);
    execvpe(argv[0], argv.data(), envp.data());
    const int e = errno;
    ssize_t w = write(fds[1], &e, sizeof e);
    (void)w;
    _exit(127);
  }
  close(fds[1]);
  int exec_errno = 0;
  const ssize_t got = read(fds[0], &exec_errno, sizeof exec_errno);
  close(fds[0]);
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    int ws = 0;
    waitpid(pid, &ws, 0);
    const bool missing = exec_errno == ENOENT;
    error_line("cannot start '" + a.program[0] + "': " +
               (missing ? "program not found" : strerror(exec_errno)));
    return missing ? 127 : 126;
  }

  // Wait for the program's segment.
  std::unique_ptr<rd::segment> seg;
  int ws = 0;
  bool exited = false;
  const std::uint64_t t0 = monotonic_ms();
  bool hinted = false;
  while (!seg) {
    if (waitpid(pid, &ws, WNOHANG) == pid) {
      exited = true;
      break;
    }
    if (g_stop) {
      ws = end_child(pid);
      exited = true;
      break;
    }
    memlive::open_result r = memlive::open_segment(pid, true, a.dir);
    if (r.segment) {
      seg = std::move(r.segment);
      break;
    }
    if (!hinted && monotonic_ms() - t0 > 5000) {
      hinted = true;
      // open_segment's hint for a missing segment is to start the program with LD_PRELOAD and
      // LIVEALLOC_PROFILE=1, which is what run did: say instead why there is none.
      if (r.kind == memlive::error_kind::no_segment && maps_not(pid, lib))
        std::fprintf(stderr,
                     "memlive: run: process %d publishes no segment yet: it was started with "
                     "LD_PRELOAD=%s and LIVEALLOC_PROFILE=1, but does not map the library (a "
                     "statically linked or setuid program, or a library the loader refused: see "
                     "its message above); still waiting\n",
                     pid, lib.c_str());
      else if (r.kind == memlive::error_kind::no_segment)  // the hint would be what run did
        std::fprintf(stderr,
                     "memlive: run: process %d maps %s but publishes no segment yet (the "
                     "allocator says why on the program's stderr: a full /dev/shm, another "
                     "user's file under its name); still waiting\n",
                     pid, lib.c_str());
      else
        std::fprintf(stderr,
                     "memlive: run: process %d publishes no segment yet (%s); still waiting\n",
                     pid, r.error.c_str());
    }
    usleep(10000);
  }
  if (!seg) {
    rd::remove_stale_segment(pid, a.dir);  // in case it published just before it ended
    std::fprintf(stderr,
                 "memlive: process %d (%s) %s before memlive could read its telemetry; nothing "
                 "to serve\n",
                 pid, printable(a.program[0]).c_str(), describe_status(ws).c_str());
    return exit_code_of(ws);
  }

  memlive::detail::server srv(std::move(seg));
  const memlive::status st = srv.start(opts);
  if (!st) {
    end_child(pid);
    return start_failed(st, kRunHelp);
  }
  std::fprintf(stderr, "memlive: serving process %d (%s) at http://%s:%d/ (Ctrl-C stops)\n", pid,
               printable(a.program[0]).c_str(), opts.host.c_str(), st.port);
  std::fputs(memlive::detail::exposure_warning(opts.host).c_str(), stderr);
  while (!exited) {
    if (waitpid(pid, &ws, WNOHANG) == pid) {
      exited = true;
      break;
    }
    if (g_stop) {  // passed on to the program; then we stop with it
      ws = end_child(pid);
      exited = true;
      break;
    }
    usleep(20000);
  }
  // The program as given, and the image that ran last when its segment names another (argv[0]'s
  // last component, up to 63 bytes): after an exec, or a script's interpreter.
  std::string name = a.program[0];
  const std::string last = srv.program();
  if (!last.empty() && last != name.substr(name.rfind('/') + 1).substr(0, 63))
    name += ", last image " + last;
  // A program that a signal ended (our SIGTERM at Ctrl-C, a kill -9) left its segment's name:
  // ours to remove, it is our child. The server keeps the segment mapped, last state and all.
  rd::remove_stale_segment(pid, a.dir);
  // memlive's own lines go to stderr: the program shares stdout, which is the program's alone
  // (`memlive run -- prog > out.txt` holds prog's output and nothing else).
  std::fprintf(stderr, "memlive: process %d (%s) %s\n", pid, printable(name).c_str(),
               describe_status(ws).c_str());
  if (!a.exit_when_done && !g_stop) {
    std::fprintf(stderr, "memlive: still serving its last state at http://%s:%d/ (Ctrl-C stops)\n",
                 opts.host.c_str(), st.port);
    while (!g_stop) sleep_until(monotonic_ms() + 100);
  }
  srv.stop();
  std::fprintf(stderr, "memlive: stopped\n");
  return exit_code_of(ws);
}

// What was printed must have reached stdout (a full disk, /dev/full): else say so and exit 1,
// whatever the verb's own exit code was (check's report with a budget exceeded, exit 9, lost
// to /dev/full exited 9 in silence). A write error write_stdout has said already is not said again.
int flushed(int code) {
  if (!g_stdout_error_said && (std::fflush(stdout) != 0 || std::ferror(stdout)))
    return fail(static_cast<error_kind>(1),
                std::string("writing stdout: ") + (errno ? strerror(errno) : "error"));
  return code;
}

}  // namespace

// Under an exported LD_PRELOAD of liblivealloc.so with LIVEALLOC_PROFILE=1, memlive publishes a
// segment of its own, and `list`, `snapshot --all` and `serve --all` showed memlive among the
// programs it watches. Its name goes: the allocator keeps the file it maps (which nothing reads
// then) and finds the name gone at exit. A file under the name that this process does not map is
// not its segment, and stays.
static void unpublish_self() {
  const std::string path = "/dev/shm/livealloc." + std::to_string(getpid());
  if (livealloc::detail::table_name_mapped_here(path.c_str())) unlink(path.c_str());
}

int main(int argc, char** argv) {
  // Descriptors 0 to 2 closed (`memlive serve ... >&-`) would go to the first files memlive
  // opens, and a segment opened for `tune` or `serve` took them: memlive's own messages were
  // written into the counters, and the process read as "not a livealloc telemetry segment" until
  // it ended. Each closed one is taken by /dev/null opened the other way round (1 and 2 read-only,
  // 0 write-only), so that output to it still fails as it did on the closed descriptor; `run`'s
  // program finds it closed, as it was given (O_CLOEXEC).
  for (int fd = 0; fd <= 2; ++fd)
    if (fcntl(fd, F_GETFD) == -1 && errno == EBADF &&
        open("/dev/null", (fd == 0 ? O_WRONLY : O_RDONLY) | O_NOCTTY | O_CLOEXEC) != fd)
      return 1;  // no /dev/null (and maybe nowhere to say so)
  unpublish_self();
  // The server's 24 worker threads would each get a glibc arena, and memory freed after one big
  // answer (a snapshot of hundreds of threads is tens of MiB) would stay in that thread's arena
  // instead of serving the next: 24 requests for /metrics at once peaked at 0.8 GB. Two arenas.
  mallopt(M_ARENA_MAX, 2);
  // Each sample builds and drops buffers of a few hundred KiB (the threads' counters, the JSON).
  // Past glibc's first mmap threshold (128 KiB) each was a fresh mapping, faulted in page by page
  // on every sample (10 faults a sample for a process of 9 threads; without them `record` takes
  // 14% less CPU). Below 8 MiB they now come from the heap and are reused; trimming waits for
  // 32 MiB free.
  mallopt(M_MMAP_THRESHOLD, 8 << 20);
  mallopt(M_TRIM_THRESHOLD, 32 << 20);
  // /dev/shm is world-writable: a user who truncates its own segment while root's `list`,
  // `snapshot --all` or `serve --all` reads it must not kill them by SIGBUS. With the handler
  // the read sees zeros and that segment is reported unreadable (livealloc_reader.h).
  // memlive::start() does not install it: a program reads its own segment, and may have its own
  // SIGBUS handler.
  std::string guard_error;
  if (!rd::survive_truncation(&guard_error)) return fail(static_cast<error_kind>(1), guard_error);
  if (argc < 2) return usage_error("no verb given", kUsage);
  const std::string verb = argv[1];
  struct verb_info {
    const char* name;
    const char* options;
    const char* help;
    int (*run)(const args&);
  };
  static const verb_info kVerbs[] = {
      // --dir (not in the helps: for tests) where segments are read; check reads a recording.
      {"list", "--clean --dir", kListHelp, cmd_list},
      {"snapshot", "--pid --all --format --by --dir", kSnapshotHelp, cmd_snapshot},
      {"tune", "--pid --dir", tune_help(), cmd_tune},
      {"record", "--pid --interval --out --count --duration --budget --dir", kRecordHelp,
       cmd_record},
      {"check", "", kCheckHelp, cmd_check},
      {"serve", "--pid --all --host --port --interval --history --dir", kServeHelp, cmd_serve},
      {"run", "--host --port --interval --history --lib --exit-when-done --dir", kRunHelp,
       cmd_run},
  };
  if (verb == "--help" || verb == "-h" || verb == "help") {  // memlive help [VERB]
    if (argc > 3) return usage_error(verb + " takes at most one verb");
    if (argc == 3) {
      for (const verb_info& v : kVerbs)
        if (std::strcmp(argv[2], v.name) == 0) {
          std::printf("%s", v.help);
          return flushed(0);
        }
      return usage_error("unknown verb '" + std::string(argv[2]) + "'", kUsage);
    }
    std::printf("%s", kUsage);
    return flushed(0);
  }
  if (verb == "--version") {
    if (argc > 2) return usage_error("--version takes no arguments");
    std::printf("memlive %s (telemetry layout version %u)\n", memlive::version_string().c_str(),
                livealloc::telemetry::kVersion);
    return flushed(0);
  }
  for (const verb_info& v : kVerbs) {
    if (verb != v.name) continue;
    g_verb = v.name;
    args a;
    std::string err;
    int end = argc;  // run: the program's command line follows "--"
    if (verb == "run")
      for (int i = 2; i < argc; ++i)
        if (std::strcmp(argv[i], "--") == 0) {
          end = i;
          for (int k = i + 1; k < argc; ++k) a.program.push_back(argv[k]);
          break;
        }
    if (!parse_args(end, argv, 2, v.options, &a, &err)) return usage_error(err, v.help);
    if (a.help) {
      std::printf("%s", v.help);
      return flushed(0);
    }
    return flushed(v.run(a));
  }
  return usage_error("unknown verb '" + verb + "'", kUsage);
}
