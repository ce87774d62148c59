// include_and_start: livealloc replaces malloc in this program (LIVEALLOC_OVERRIDE in this one
// file) and memlive::start() serves its live telemetry at http://127.0.0.1:8080/.
//
//   include_and_start [--port P]   two named threads allocate until Ctrl-C
//   include_and_start --smoke      port 0 (any free port); a thread named "smoke-worker" keeps
//                                  1000 blocks of 100 bytes; the program asks its own server for
//                                  /api/snapshot and / and exits 0 only if the snapshot shows
//                                  those allocations under that thread and the page is served
#define LIVEALLOC_OVERRIDE  // in exactly one .cpp file of the program
#include <livealloc.h>
#include <memlive.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

// A plain HTTP/1.0 GET to 127.0.0.1:port; returns the status code and the body.
int http_get(int port, const std::string& path, std::string* body) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    const std::string req =
        "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) reply.append(buf, static_cast<std::size_t>(n));
    }
  }
  close(fd);
  const std::size_t end = reply.find("\r\n\r\n");
  if (reply.compare(0, 9, "HTTP/1.1 ") != 0 && reply.compare(0, 9, "HTTP/1.0 ") != 0) return -1;
  if (end == std::string::npos) return -1;
  *body = reply.substr(end + 4);
  return std::atoi(reply.c_str() + 9);
}

int smoke() {
  memlive::options o;
  o.port = 0;  // any free port: a test must not depend on 8080 being free
  o.quiet = true;
  const memlive::status st = memlive::start(o);
  if (!st) {
    std::fprintf(stderr, "include_and_start: memlive::start failed: %s\n", st.message.c_str());
    return 1;
  }
  // A named thread keeps 1000 blocks of 100 bytes (made with new, i.e. livealloc) until told.
  std::mutex m;
  std::condition_variable cv;
  bool ready = false, done = false;
  std::thread worker([&] {
    pthread_setname_np(pthread_self(), "smoke-worker");  // before its first allocation
    std::vector<std::unique_ptr<char[]>> kept;
    kept.reserve(1000);  // one allocation of 8000 bytes, another class than 100 bytes
    for (int i = 0; i < 1000; ++i) kept.emplace_back(new char[100]);
    std::unique_lock<std::mutex> lock(m);
    ready = true;
    cv.notify_all();
    cv.wait(lock, [&] { return done; });
  });
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return ready; });
  }
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
    failures += !ok;
  };
  std::string body;
  expect(http_get(st.port, "/healthz", &body) == 200 && body.find("\"ok\":true") != body.npos,
         "GET /healthz answers ok");
  expect(http_get(st.port, "/", &body) == 200 && body.find("<html") != body.npos,
         "GET / serves the page");
  const int code = http_get(st.port, "/api/snapshot", &body);
  expect(code == 200, "GET /api/snapshot answers 200");
  // allocs (counter 0) of the 100-byte class (112-byte blocks) in the smoke-worker's row
  unsigned long long allocs = 0;
  bool found = false;
  if (code == 200) {
    const nlohmann::json snap = nlohmann::json::parse(body, nullptr, false);
    if (!snap.is_discarded() && snap.contains("threads")) {
      const auto& sizes = snap["class_sizes"];
      for (const auto& t : snap["threads"]) {
        if (t.value("name", "") != "smoke-worker") continue;
        found = true;
        for (const auto& row : t["classes"]) {
          const unsigned cls = row[0].get<unsigned>();
          if (cls < sizes.size() && sizes[cls].get<unsigned>() >= 100 &&
              sizes[cls].get<unsigned>() < 128)
            allocs += row[1].get<unsigned long long>();
        }
      }
    }
  }
  expect(found, "the snapshot lists the thread named smoke-worker");
  expect(allocs >= 1000,
         "it shows the 1000 allocations of 100 bytes (" + std::to_string(allocs) + ")");
  {
    std::lock_guard<std::mutex> lock(m);
    done = true;
  }
  cv.notify_all();
  worker.join();
  memlive::stop();
  expect(memlive::port() == 0, "memlive::stop() stops the server");
  return failures ? 1 : 0;
}

void busy(const char* name, std::size_t base) {
  pthread_setname_np(pthread_self(), name);
  std::vector<std::string> live(2048);
  for (std::size_t i = 0; !g_stop; ++i) {
    live[i % live.size()] = std::string(base + i % (base * 4), 'x');
    if (i % 4096 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// A whole decimal number from lo to hi: `--port abc` is an error, not port 0.
bool parse_number(const char* text, long lo, long hi, long* out) {
  const char* end = text + std::strlen(text);
  long v = 0;
  const std::from_chars_result r = std::from_chars(text, end, v);
  if (r.ec != std::errc() || r.ptr != end || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  long port = 8080;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--smoke") == 0) return smoke();
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: include_and_start [--port P] | --smoke\n");
      return 0;
    }
    if (std::strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
      if (!parse_number(argv[++i], 0, 65535, &port)) {
        std::fprintf(stderr, "include_and_start: --port %s: not a port from 0 to 65535\n", argv[i]);
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: include_and_start [--port P] | --smoke\n");
      return 2;
    }
  }
  memlive::options o;
  o.port = static_cast<int>(port);
  const memlive::status st = memlive::start(o);  // prints the URL
  if (!st) {
    std::fprintf(stderr, "include_and_start: %s\n", st.message.c_str());
    if (st.error == memlive::start_error::port_in_use)
      std::fprintf(stderr, "include_and_start: try --port %d, or --port 0 for any free port\n",
                   static_cast<int>(port) + 1);
    return 1;
  }
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  std::thread a(busy, "parser", 24), b(busy, "indexer", 200);
  std::printf("include_and_start: threads 'parser' and 'indexer' allocate; Ctrl-C stops\n");
  a.join();
  b.join();
  memlive::stop();
  return 0;
}
