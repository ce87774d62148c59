// memlive::start() inside a multi-threaded livealloc workload, for tests/memlive/http_test.py.
//
//   memlive_http_app [--port P] [--atexit] name:size:count:frees [...]
//
// Enables nothing itself: memlive::start() turns telemetry on. One thread per distinct name
// (named before its first allocation) allocates `count` blocks of `size` bytes with
// livealloc::allocate and frees the first `frees`; a "ticker" thread allocates and frees large
// blocks every 5 ms so the allocator reaches slow paths (validating tuning). Then prints
// "ready <port> <pid>" (or "start-failed <error> <message>" and exits 3) and obeys lines on
// stdin:
//   stop    memlive::stop(), timed: prints "stopped <ms>" (and "port-after-stop <port()>")
//   again   memlive::start() a second time while running: prints "again <error> <message>"
//   second  a second detail::server on the same port: prints "second <error> <message>"
//   alloc NAME SIZE COUNT   a new thread named NAME allocates COUNT blocks of SIZE bytes and
//           keeps them until quit; prints "allocated" when done
//   fork    forks twice while serving: one child exits at once (static destructors run); the
//           other checks that port() is 0, that it holds no socket listening on the parent's
//           port, that take_snapshot() reads its own segment, that start() and stop() work, then
//           exits. Prints "fork <status> <status> <pid> <pid>" (an exit status, or 128 + signal);
//           "fork skipped" under ThreadSanitizer
//   sigpipe prints "sigpipe default" when SIGPIPE has its default action (this program never
//           changes it; civetweb's start sets it to ignored), else "sigpipe changed"
//   snapshot  memlive::take_snapshot(): prints "snapshot 1 <pid>" or "snapshot 0 <error>"
//   cycles N K  (after stop) N rounds of start() on port 0, K stream clients, stop() while
//           they are connected, the clients closed: prints "cycles <open descriptors before>
//           <after> <rounds in which no client had an event>"
//   quit    (or end of input) stops the threads and exits 0
// --atexit registers an atexit handler before memlive's first use, which therefore runs after
// memlive's exit-time cleanup: it calls take_snapshot() and start() and prints
// "late-snapshot 1 <pid>" or "late-snapshot 0 <error>", then "late-start <error> <message>".
// --enable-only registers that handler, then enables telemetry itself
// (livealloc::telemetry::enable(), whose exit handler, registered after it, runs before it and
// removes the segment's name), prints "enabled <pid>" and returns without using memlive. The
// handler prints "late-enabled <0|1>" (livealloc::telemetry::enabled()) before the others.
#include <arpa/inet.h>
#include <dirent.h>
#include <memlive.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "plan_workload.h"

#ifdef __SANITIZE_ADDRESS__
// LeakSanitizer cannot judge a fork child of this multi-threaded program: the parent's other
// threads do not exist there, so what only their stacks pointed to (a plan thread's vector)
// looks leaked (LSan says "Running thread N was not suspended. False leaks are possible."), and
// the child's exit status, which the test checks, becomes LSan's. Off in the fork children only:
// the parent keeps its check at exit. LSan calls this at each check; its header calls a value
// that changes unsupported, but were it read once at start the children would fail, not pass.
static bool g_fork_child = false;
extern "C" __attribute__((used)) int __lsan_is_turned_off() { return g_fork_child ? 1 : 0; }
static void mark_fork_child() { g_fork_child = true; }
#else
static void mark_fork_child() {}
#endif

namespace {

using namespace plan_workload;

// ThreadSanitizer does not support a fork child of a threaded program that starts threads (the
// fork command's second child starts a server), and it would take the parent's copy of the heaps,
// which their threads write while it is made (see table_fork_prepare), for a race: no fork there.
#ifdef __SANITIZE_THREAD__
constexpr bool kThreadSanitizer = true;
#else
constexpr bool kThreadSanitizer = false;
#endif

void print_status(const char* what, const memlive::status& st) {
  std::printf("%s %d %s\n", what, static_cast<int>(st.error), st.message.c_str());
  std::fflush(stdout);
}

// The fork child's checks: a failed one exits with its own status (10...).
[[noreturn]] void fork_child_checks(int parent_port) {
  if (memlive::port() != 0) std::_Exit(10);
  if (!memlive::detail::server_sockets("127.0.0.1", parent_port).empty()) std::_Exit(11);
  livealloc::reader::snapshot s;
  std::string err;
  if (!memlive::take_snapshot(&s, &err) || s.pid != getpid()) std::_Exit(12);
  memlive::options o;
  o.port = 0;
  o.quiet = true;
  const memlive::status st = memlive::start(o);
  if (!st || memlive::port() == parent_port) std::_Exit(13);
  memlive::stop();
  std::exit(0);  // static destructors run, as at any exit
}

// Forks, runs `child` there, and returns the child's pid and exit status (128 + signal).
template <typename F>
std::pair<int, int> fork_and_wait(F child) {
  const pid_t pid = fork();
  if (pid == 0) {
    mark_fork_child();
    child();
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return {-1, -1};
  return {static_cast<int>(pid),
          WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)};
}

void print_snapshot(const char* what) {
  livealloc::reader::snapshot s;
  std::string err;
  if (memlive::take_snapshot(&s, &err))
    std::printf("%s 1 %d\n", what, static_cast<int>(s.pid));
  else
    std::printf("%s 0 %s\n", what, err.c_str());
  std::fflush(stdout);
}

void late_use() {
  std::printf("late-enabled %d\n", livealloc::telemetry::enabled() ? 1 : 0);
  print_snapshot("late-snapshot");
  memlive::options o;
  o.port = 0;
  o.quiet = true;
  print_status("late-start", memlive::start(o));
  memlive::stop();
}

int open_descriptors() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (const dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
    --n;  // the directory's own
  }
  return n;
}

// start() on port 0, `clients` stream clients, stop() while they are connected. True when at
// least one had its first event within 2 s (the server has 24 workers: with more clients, the
// others wait in civetweb's queue, accepted but never served).
bool stream_cycle(int clients) {
  memlive::options o;
  o.port = 0;
  o.quiet = true;
  if (memlive::start(o).error != memlive::start_error::none) return false;
  const std::string req = "GET /api/stream?interval_ms=50 HTTP/1.1\r\nHost: 127.0.0.1:" +
                          std::to_string(memlive::port()) + "\r\n\r\n";
  std::vector<pollfd> fds;
  for (int i = 0; i < clients; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<std::uint16_t>(memlive::port()));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 ||
        write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
      close(fd);
      break;
    }
    fds.push_back({fd, POLLIN, 0});
  }
  std::vector<std::string> got(fds.size());
  int streamed = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (streamed < clients && std::chrono::steady_clock::now() < until &&
         poll(fds.data(), fds.size(), 100) >= 0) {
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!(fds[i].revents & POLLIN) || fds[i].fd < 0) continue;
      char buf[4096];
      const ssize_t r = read(fds[i].fd, buf, sizeof buf);
      if (r > 0) got[i].append(buf, static_cast<std::size_t>(r));
      if (r <= 0 || got[i].find("data:") != std::string::npos) {
        streamed += r > 0;
        fds[i].fd = ~fds[i].fd;  // poll skips it from now on
      }
    }
  }
  memlive::stop();
  for (const pollfd& p : fds) close(p.fd < 0 ? ~p.fd : p.fd);
  return streamed > 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)  // first of all: before memlive's first use
    if (std::string(argv[i]) == "--atexit") std::atexit(late_use);
  if (argc == 2 && std::string(argv[1]) == "--enable-only") {
    std::atexit(late_use);
    if (const int e = livealloc::telemetry::enable(); e != 0) {
      std::printf("enable-failed %d\n", e);
      return 3;
    }
    std::printf("enabled %d\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    return 0;
  }
  memlive::options opts;
  opts.port = 0;
  std::vector<plan> plans;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--port" && i + 1 < argc) {
      opts.port = std::atoi(argv[++i]);
    } else if (arg == "--atexit") {
    } else if (!parse_entry(arg, &plans)) {
      std::fprintf(stderr, "http_app: bad entry '%s' (name:size:count:frees)\n", arg.c_str());
      return 2;
    }
  }

  const memlive::status st = memlive::start(opts);
  if (!st) {
    print_status("start-failed", st);
    return 3;
  }
  std::vector<std::thread> threads;
  for (const plan& p : plans) threads.emplace_back(worker, p);
  threads.emplace_back(ticker);
  wait_done(static_cast<int>(plans.size()));
  std::printf("ready %d %d\n", memlive::port(), static_cast<int>(getpid()));
  std::fflush(stdout);

  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
    if (line == "stop") {
      const auto t0 = std::chrono::steady_clock::now();
      memlive::stop();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::printf("stopped %.1f\nport-after-stop %d\n", ms, memlive::port());
    } else if (line.compare(0, 6, "alloc ") == 0) {
      char name[16] = {};
      std::size_t size = 0, count = 0;
      if (std::sscanf(line.c_str() + 6, "%15s %zu %zu", name, &size, &count) != 3) {
        std::printf("bad alloc command\n");
      } else {
        plans.push_back({name, {entry{size, count, 0}}});
        threads.emplace_back(worker, plans.back());
        wait_done(static_cast<int>(plans.size()));
        std::printf("allocated\n");
      }
    } else if (line == "fork") {
      if (kThreadSanitizer) {
        std::printf("fork skipped\n");
      } else {
        std::fflush(stdout);  // the children exit through exit(): nothing buffered twice
        const int port = memlive::port();
        const auto a = fork_and_wait([] { std::exit(0); });
        const auto b = fork_and_wait([port] { fork_child_checks(port); });
        std::printf("fork %d %d %d %d\n", a.second, b.second, a.first, b.first);
      }
    } else if (line == "snapshot") {
      print_snapshot("snapshot");
    } else if (line == "sigpipe") {
      struct sigaction now {};
      sigaction(SIGPIPE, nullptr, &now);
      std::printf("sigpipe %s\n", now.sa_handler == SIG_DFL ? "default" : "changed");
    } else if (line == "small-history") {  // after stop: a server keeping one sample at most
      memlive::options o;
      o.port = 0;
      o.quiet = true;
      o.history_bytes = 1;
      const memlive::status st = memlive::start(o);
      std::printf("small-history %d %d\n", static_cast<int>(st.error), st.port);
    } else if (line == "again") {
      memlive::options o = opts;
      o.quiet = true;
      print_status("again", memlive::start(o));
    } else if (line.compare(0, 7, "cycles ") == 0) {
      int n = 0, clients = 0;
      std::sscanf(line.c_str() + 7, "%d %d", &n, &clients);
      const int before = open_descriptors();
      int failed = 0;
      for (int i = 0; i < n; ++i) failed += stream_cycle(clients) ? 0 : 1;
      std::printf("cycles %d %d %d\n", before, open_descriptors(), failed);
    } else if (line == "second") {
      std::string err;
      memlive::detail::server second(livealloc::reader::segment::open_pid(getpid(), &err));
      memlive::options o;
      o.port = memlive::port();
      print_status("second", second.start(o));
    } else {
      std::printf("unknown command '%s'\n", line.c_str());
    }
    std::fflush(stdout);
  }
  memlive::stop();
  stop_and_join(&threads);
  return 0;
}
