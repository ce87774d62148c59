// libFuzzer target: the HTTP requests memlive's server parses itself, through a real
// memlive::detail::server (public) on a private valid segment, over loopback. The Host and
// Origin checks (server::host_allowed/origin_allowed) and the query parsing of /api/stream
// (interval_ms), /api/history (seconds) and /api/snapshot (since) are private members, so they
// are reached through requests; civetweb parses the request line and headers.
//
// Input: byte 0 % 4 chooses the mode; byte 1 tunes it; the rest is the fuzzed part.
//   0  raw: the rest is sent as the whole request (then the write side is shut), with byte 1
//      bit 0 to a second server, the `memlive serve --all` kind, on a directory holding a
//      copy of the segment (its /metrics reads the directory at each request).
//   1  query: GET /api/{stream,history,snapshot}?<rest> (byte 1 % 3); bytes outside 0x21..0x7e,
//      and '#', are sent %-encoded.
//   2  Host: GET /healthz with Host: <rest> (printable, no spaces), ":PORT" appended if byte 1
//      bit 0.
//   3  Origin: POST /api/baseline {} with Origin: [http://]<rest>[:PORT] (byte 1 bits 1, 0).
//
// Properties: every answer starts with "HTTP/" (a status line, in the structured modes); the
// structured modes get the status the README specifies: a field the path does not take, or one
// given twice, 400; the query values found as civetweb's
// mg_get_var finds them (the field of that name, in any case), a name without '=' being
// empty, decoded by mg_url_decode with a large buffer, and checked against their documented
// ranges (interval_ms 50..60000, else 400 (empty too), absent: the server's 250; seconds 1..150,
// else 400;
// since=baseline 200/409, another since 400; a value holding a NUL (%00) 400; a valid number written in 32+
// characters may be refused); Host 127.0.0.1:PORT or localhost:PORT (any case) 200, anything
// else 403; Origin absent or http://<allowed host> 200, else 403. A stream's first event is one JSON snapshot, and its
// header comment names the interval. Every 500 inputs, /healthz of both servers must still
// answer.
#include <cerrno>
#include <cstring>

#include <memlive.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "fuzz_common.h"

namespace {

namespace rd = livealloc::reader;

constexpr int kInterval = 250;                         // the server's default stream interval
constexpr long long kKept = 600LL * kInterval / 1000;  // seconds of history kept

int g_port = 0;
int g_all_port = 0;  // the serve --all server

void start_server() {
  const fuzz::segment_template t = fuzz::make_segment(getpid(), 3);
  const std::string path = fuzz::temp_file(t.bytes.data(), t.bytes.size(), "memlive-fuzz-http");
  std::string error;
  std::unique_ptr<rd::segment> seg = rd::segment::open_path(path, &error);
  unlink(path.c_str());  // the mapping stays
  FUZZ_CHECK(seg != nullptr, "template segment refused: %s", error.c_str());
  auto* srv = new memlive::detail::server(std::move(seg));  // lives until the process exits
  memlive::options o;
  o.port = 0;
  o.stream_interval_ms = kInterval;
  o.quiet = true;
  const memlive::status st = srv->start(o);
  FUZZ_CHECK(st.ok(), "server did not start: %s", st.message.c_str());
  g_port = st.port;

  // serve --all on a directory of its own, with the template as this process's segment.
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/memlive-fuzz-all-XXXXXX";
  FUZZ_CHECK(mkdtemp(dir.data()) != nullptr, "mkdtemp failed: %s", std::strerror(errno));
  const std::string file = fuzz::temp_file(t.bytes.data(), t.bytes.size(), "memlive-fuzz-all");
  const std::string named = dir + "/livealloc." + std::to_string(getpid());
  FUZZ_CHECK(rename(file.c_str(), named.c_str()) == 0, "rename failed: %s", std::strerror(errno));
  static const std::string kept[] = {named, dir};  // removed at exit
  std::atexit([] {
    unlink(kept[0].c_str());
    rmdir(kept[1].c_str());
  });
  auto* all = new memlive::detail::server(dir);  // lives until the process exits
  const memlive::status sa = all->start(o);
  FUZZ_CHECK(sa.ok(), "the serve --all server did not start: %s", sa.message.c_str());
  g_all_port = sa.port;
}

// connect(), finished when libFuzzer's timeout timer (SIGALRM, every timeout/2 + 1 s, without
// SA_RESTART) interrupts it: the connection goes on in the background (POSIX).
int connect_loopback(int fd, const sockaddr_in& sa) {
  if (connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) == 0) return 0;
  if (errno != EINTR) return -1;
  pollfd p{fd, POLLOUT, 0};
  while (poll(&p, 1, 5000) < 0 && errno == EINTR) {
  }
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return -1;
  errno = err;
  return err == 0 && (p.revents & POLLOUT) ? 0 : -1;
}

// Sends `req`, shuts the write side, reads the answer: all of it, or for an event stream up to
// the end of its first event. Returns false if nothing came within `timeout_ms`. Calls that the
// timer interrupts (EINTR) are repeated.
bool round_trip(const std::string& req, std::string* out, int timeout_ms = 5000,
                int port = g_port) {
  out->clear();
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FUZZ_CHECK(fd >= 0, "socket failed");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  FUZZ_CHECK(connect_loopback(fd, sa) == 0, "connect failed: %s", std::strerror(errno));
  for (std::size_t done = 0; done < req.size();) {
    const ssize_t w = send(fd, req.data() + done, req.size() - done, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;  // the server may close early (a bad request line)
    done += static_cast<std::size_t>(w);
  }
  shutdown(fd, SHUT_WR);
  char buf[65536];
  bool got = true;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      got = !out->empty();
      break;
    }
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out->append(buf, static_cast<std::size_t>(n));
    const std::size_t body = out->find("\r\n\r\n");
    if (body != std::string::npos && out->find("text/event-stream") < body) {
      const std::size_t data = out->find("\ndata: ", body);
      if (data != std::string::npos && out->find("\n\n", data + 1) != std::string::npos) break;
      if (out->find("event: error") != std::string::npos) break;
    }
    if (out->size() > (64u << 20)) break;
  }
  close(fd);
  return got;
}

int status_of(const std::string& r) {
  if (r.size() < 12 || r.compare(0, 7, "HTTP/1.") != 0 || r[8] != ' ') return -1;
  int code = 0;
  for (int i = 9; i < 12; ++i) {
    if (r[i] < '0' || r[i] > '9') return -1;
    code = code * 10 + (r[i] - '0');
  }
  return code;
}

std::string printable(const std::uint8_t* p, std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] > 0x20 && p[i] < 0x7f) s += static_cast<char>(p[i]);
  return s;
}

using memlive::detail::iequals;

bool host_ok(const std::string& h) {
  const std::string p = ":" + std::to_string(g_port);
  return iequals(h, "127.0.0.1" + p) || iequals(h, "localhost" + p);
}

// The decoded value of `name` in `query`: 1 and the value, 0 when absent. The first field whose
// name matches in any case counts; a field without '=' ("?seconds") has the empty value.
// *decoded (if given) receives the full decoded length, NULs included.
int query_var(const std::string& query, const char* name, std::string* value,
              std::size_t* decoded = nullptr) {
  std::size_t at = 0;
  for (;;) {
    const std::size_t end = std::min(query.find('&', at), query.size());
    const std::string field = query.substr(at, end - at);
    const std::size_t eq = field.find('=');
    if (iequals(field.substr(0, eq), name)) {
      const std::string raw = eq == std::string::npos ? "" : field.substr(eq + 1);
      std::vector<char> buf(raw.size() + 2);
      const int n = mg_url_decode(raw.data(), static_cast<int>(raw.size()), buf.data(),
                                  static_cast<int>(buf.size()), 1);
      value->assign(buf.data(), static_cast<std::size_t>(n));  // NULs (%00) too: not a number
      if (decoded) *decoded = static_cast<std::size_t>(n);
      return 1;
    }
    if (end == query.size()) return 0;
    at = end + 1;
  }
}

// Whether every non-empty field of `query` is named (the part before '=', undecoded, in any case)
// by one of `names`, each at most once: else the path answers 400.
bool fields_ok(const std::string& query, std::initializer_list<const char*> names) {
  std::vector<int> seen(names.size());
  for (std::size_t at = 0; at <= query.size();) {
    const std::size_t end = std::min(query.find('&', at), query.size());
    const std::string field = query.substr(at, end - at);
    if (!field.empty()) {
      std::size_t i = 0;
      while (i < names.size() && !iequals(field.substr(0, field.find('=')), names.begin()[i])) ++i;
      if (i == names.size() || seen[i]++) return false;
    }
    at = end + 1;
  }
  return true;
}

void check_query(int which, const std::string& query, const std::string& r, int code) {
  std::string v;
  std::int64_t n = 0;
  static const char* const kPaths[] = {"stream", "history", "snapshot"};
  if (!(which == 0   ? fields_ok(query, {"interval_ms"})
        : which == 1 ? fields_ok(query, {"seconds"})
                     : fields_ok(query, {"since", "if_none"}))) {
    FUZZ_CHECK(code == 400, "GET /api/%s?%s: %d, the README says 400 (an unknown or repeated "
               "field)", kPaths[which], query.c_str(), code);
    return;
  }
  if (which == 0) {  // /api/stream
    int want = 200;
    long long interval = kInterval;
    std::size_t decoded = 0;
    // An empty value (interval_ms=) is 400, as an empty seconds= is.
    if (query_var(query, "interval_ms", &v, &decoded)) {
      if (memlive::detail::parse_int(v, &n) && n >= 50 && n <= 60000)
        interval = n;
      else
        want = 400;
    }
    // As for seconds below: a valid number written with 32+ characters (leading zeros) does
    // not fit the server's buffer and may be refused.
    const bool long_valid = want == 200 && decoded >= 32;
    // A valid request while 16 streams hold their workers (a closed client's stream is let go
    // at its next tick): 503, "too many streams" (memlive/README.md).
    const bool full = want == 200 && code == 503 && r.find("too many streams") != std::string::npos;
    FUZZ_CHECK(code == want || (long_valid && code == 400) || full,
               "GET /api/stream?%s: %d, the README says %d", query.c_str(), code, want);
    if (code == 200) {
      const std::string comment =
          ": memlive stream, interval_ms=" + std::to_string(interval) + "\n";
      FUZZ_CHECK(r.find(comment) != std::string::npos, "stream interval not %lld: %s", interval,
                 r.substr(0, 300).c_str());
      const std::size_t d = r.find("\ndata: ");
      FUZZ_CHECK(d != std::string::npos, "no event in the stream");
      const std::size_t e = r.find("\n\n", d + 1);
      const auto j = nlohmann::json::parse(r.substr(d + 7, e - d - 7), nullptr, false);
      FUZZ_CHECK(!j.is_discarded() && j.is_object(), "the first event is not a JSON object");
    }
  } else if (which == 1) {  // /api/history
    int want = 200;
    std::size_t decoded = 0;
    if (query_var(query, "seconds", &v, &decoded) &&
        !(memlive::detail::parse_int(v, &n) && n >= 1 && n <= kKept))
      want = 400;
    // A value mg_get_var cannot hold in the server's 32 bytes is refused: allowed for a valid
    // number only when it decodes to 32+ bytes (leading zeros). A NUL in it (%00) is refused:
    // "seconds=8%00junk" is not 8.
    const bool long_valid = want == 200 && decoded >= 32;
    FUZZ_CHECK(code == want || (long_valid && code == 400),
               "GET /api/history?%s: %d, the README says %d", query.c_str(), code, want);
  } else {  // /api/snapshot
    int want = 200;
    std::size_t decoded = 0;
    if (query_var(query, "since", &v, &decoded)) want = v == "baseline" ? 409 : 400;
    std::string if_none;  // with since=baseline: plain, else 400 (an empty value too)
    if (want == 409 && query_var(query, "if_none", &if_none) && if_none != "plain") want = 400;
    // "baseline" followed by NULs to 32+ bytes does not fit the server's buffer: refused too.
    const bool long_valid = want == 409 && decoded >= 32;
    FUZZ_CHECK(code == want || (want == 409 && code == 200) || (long_valid && code == 400),
               "GET /api/snapshot?%s: %d, the README says %d", query.c_str(), code, want);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool started = (start_server(), true);
  (void)started;
  static unsigned long inputs = 0;
  if (size < 2) return 0;
  const int mode = data[0] % 4;
  const std::uint8_t tune = data[1];
  const std::uint8_t* rest = data + 2;
  const std::size_t n = size - 2;
  const std::string host = "Host: 127.0.0.1:" + std::to_string(g_port) + "\r\n";
  std::string req, r;
  if (mode == 0) {
    req.assign(reinterpret_cast<const char*>(rest), n);
    round_trip(req, &r, 5000, (tune & 1) ? g_all_port : g_port);
    // civetweb answers some malformed request lines itself, echoing the client's protocol
    // field (even with its CR LF) after "HTTP/": only the prefix is checked here.
    if (!r.empty())
      FUZZ_CHECK(r.compare(0, 5, "HTTP/") == 0, "not an HTTP answer: %s", r.substr(0, 200).c_str());
  } else if (mode == 1) {
    const int which = tune % 3;
    std::string query;
    for (std::size_t i = 0; i < n; ++i) {
      const unsigned char c = rest[i];
      if (c > 0x20 && c < 0x7f && c != '#') {
        query += static_cast<char>(c);
      } else {
        char esc[4];
        std::snprintf(esc, sizeof esc, "%%%02X", c);
        query += esc;
      }
    }
    static const char* kPaths[] = {"/api/stream", "/api/history", "/api/snapshot"};
    // A stream at a long interval holds a server thread until its next tick: keep them short.
    std::string v;
    std::int64_t iv = 0;
    if (which == 0 && query_var(query, "interval_ms", &v) && memlive::detail::parse_int(v, &iv) &&
        iv > 1000)
      return 0;
    req = std::string("GET ") + kPaths[which] + "?" + query + " HTTP/1.1\r\n" + host + "\r\n";
    FUZZ_CHECK(round_trip(req, &r), "no answer to %s", req.c_str());
    const int code = status_of(r);
    FUZZ_CHECK(code > 0, "not an HTTP status line: %s", r.substr(0, 200).c_str());
    check_query(which, query, r, code);
  } else if (mode == 2) {
    std::string h = printable(rest, n);
    if (tune & 1) h += ":" + std::to_string(g_port);
    req = "GET /healthz HTTP/1.1\r\nHost: " + h + "\r\n\r\n";
    FUZZ_CHECK(round_trip(req, &r), "no answer to %s", req.c_str());
    const int code = status_of(r);
    const int want = host_ok(h) ? 200 : 403;
    FUZZ_CHECK(code == want, "Host: %s -> %d, want %d", h.c_str(), code, want);
  } else {
    std::string o = printable(rest, n);
    if (tune & 2) o = "http://" + o;
    if (tune & 1) o += ":" + std::to_string(g_port);
    req = "POST /api/baseline HTTP/1.1\r\n" + host + "Origin: " + o +
          "\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
    FUZZ_CHECK(round_trip(req, &r), "no answer to %s", req.c_str());
    const int code = status_of(r);
    const int want = o.compare(0, 7, "http://") == 0 && host_ok(o.substr(7)) ? 200 : 403;
    FUZZ_CHECK(code == want, "Origin: %s -> %d, want %d", o.c_str(), code, want);
  }
  if (++inputs % 500 == 0) {
    FUZZ_CHECK(
        round_trip("GET /healthz HTTP/1.1\r\n" + host + "\r\n", &r, 10000) && status_of(r) == 200,
        "the server stopped answering /healthz: %s", r.substr(0, 200).c_str());
    const std::string all_host = "Host: 127.0.0.1:" + std::to_string(g_all_port) + "\r\n";
    FUZZ_CHECK(round_trip("GET /metrics HTTP/1.1\r\n" + all_host + "\r\n", &r, 10000,
                          g_all_port) &&
                   status_of(r) == 200,
               "the serve --all server stopped answering /metrics: %s", r.substr(0, 200).c_str());
  }
  return 0;
}
