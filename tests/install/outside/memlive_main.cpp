// memlive from an installed tree: memlive::start() on a free port, then this program asks its
// own server for the page (embedded from the installed memlive_web_assets.h) and a snapshot.
#define LIVEALLOC_OVERRIDE
#include <livealloc.h>
#include <memlive.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace {
// HTTP/1.0 GET on 127.0.0.1:port; the status code, or -1.
int get(int port, const std::string& path, std::string* body) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string reply;
  if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req =
        "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      ssize_t n;
      while ((n = read(fd, buf, sizeof buf)) > 0) reply.append(buf, static_cast<std::size_t>(n));
    }
  }
  if (fd >= 0) close(fd);
  const std::size_t end = reply.find("\r\n\r\n");
  if (reply.size() < 12 || end == std::string::npos) return -1;
  *body = reply.substr(end + 4);
  return std::stoi(reply.substr(9, 3));
}
}  // namespace

int main() {
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAILED", what.c_str());
    failures += !ok;
  };
  memlive::options o;
  o.port = 0;
  o.quiet = true;
  const memlive::status st = memlive::start(o);
  expect(st.ok(), "memlive::start on a free port (" + st.message + ")");
  if (!st) return 1;
  std::string body;
  expect(get(st.port, "/", &body) == 200 && body.find("<html") != std::string::npos,
         "GET / serves the embedded page");
  const int code = get(st.port, "/api/snapshot", &body);
  const nlohmann::json snap = nlohmann::json::parse(body, nullptr, false);
  expect(code == 200 && !snap.is_discarded() && snap.value("pid", 0) == getpid(),
         "GET /api/snapshot is this process's snapshot");
  memlive::stop();
  std::printf("memlive %s\n", memlive::version_string().c_str());
  return failures ? 1 : 0;
}
