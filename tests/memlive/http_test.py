#!/usr/bin/python3
"""memlive's HTTP server against real workloads, with a real client (standard library only).

    http_test.py --memlive PATH --workload PATH --app PATH inprocess|serve

inprocess: memlive_http_app (memlive::start() on port 0 inside a multi-threaded livealloc
workload) checked endpoint by endpoint: content types, /api/snapshot and /metrics against the
workload's counts, POST /api/options (valid: stored, generation grows, visible in GET; each
invalid case: the right status, nothing changed, the server still serving), malformed requests,
/api/stream (events at the requested interval), a second server on the same port (an error
value), and memlive::stop() with two stream clients connected (timed; must be < 1.5 s).
serve: `memlive serve --pid` against memlive_workload: /api/snapshot matches the plan, port in
use exits 8, the process's exit is reported and its last state still served, SIGTERM stops it.
Every failed check is printed; the exit code is 1 if any failed.
"""
import argparse
import concurrent.futures
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_test  # noqa: E402  (PLAN, expected counts, the JSON and Prometheus checks)
from cli_test import check, failures, PLAN, request  # noqa: E402

TIMEOUT = 10
JSON_TYPE = "application/json; charset=utf-8"
PROM_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def raw(port, data, wait=TIMEOUT):
    """Sends raw bytes, returns everything the server answers until it closes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=wait)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (socket.timeout, ConnectionResetError):
                break
            if not chunk:
                break
            out += chunk
        return out
    finally:
        s.close()


def read_to_close(s):
    """Everything the server sends on socket s until it closes the connection."""
    out = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return out
        out += chunk


def get_json(port, path):
    st, h, body = request(port, "GET", path)
    try:
        return st, h, json.loads(body)
    except ValueError:
        return st, h, None


def options_of(port):
    st, _, j = get_json(port, "/api/options")
    return j if st == 200 and j else {"options": [], "generation": -1}


def option(opts, name):
    return next((o for o in opts["options"] if o["name"] == name), None)


def check_metrics_by_class(port, pid):
    """/metrics?by=class: one series per class, each between the process totals of a snapshot
    taken before and one taken after; ?by=thread is the default text; another value 400."""
    _, _, before = get_json(port, "/api/snapshot")
    st, h, body = request(port, "GET", "/metrics?by=class")
    _, _, after = get_json(port, "/api/snapshot")
    text = body.decode()
    check(st == 200 and h.get("content-type") == PROM_TYPE and "thread=" not in text and
          "livealloc_thread_" not in text, "/metrics?by=class: 200, no thread labels (got %d)" % st)

    def totals(snap, counter):
        i = snap["counters"].index(counter)
        out = {}
        for rows in [t["classes"] for t in snap["threads"]] + [snap["exited"]]:
            for r in rows:
                out[r[0]] = out.get(r[0], 0) + r[1 + i]
        return out
    for counter in ("allocs", "frees"):
        lo, hi = totals(before, counter), totals(after, counter)
        got = {int(m.group(1)): int(m.group(2)) for m in re.finditer(
            r'\nlivealloc_%s_total\{pid="%d",class="(\d+)",size="\d+"\} (\d+)' % (counter, pid),
            text)}
        # Bracketed by the snapshots, classes too: each class of the first is there, and each
        # one there is in the second (a class can get its first count in between).
        bad = {c: (lo.get(c), got.get(c), hi.get(c)) for c in set(lo) | set(got) | set(hi)
               if not ((c not in lo or c in got) and (c not in got or c in hi) and
                       lo.get(c, 0) <= got.get(c, 0) <= hi.get(c, 0))}
        check(got and not bad,
              "/metrics?by=class %s per class between two snapshots' totals (%d classes; "
              "class: (before, metrics, after) where not: %s)" % (counter, len(got), bad))
    st, _, body = request(port, "GET", "/metrics?by=thread")
    check(st == 200 and b'thread="' in body, "/metrics?by=thread: the default, per thread")
    st, _, j = get_json(port, "/metrics?by=nope")
    check(st == 400 and j and j.get("field") == "by", "/metrics?by=nope: 400, field by (%d)" % st)


def check_endpoints(port, pid, want):
    st, h, j = get_json(port, "/healthz")
    check(st == 200 and h.get("content-type") == JSON_TYPE and j and j["ok"] is True and
          j["pid"] == pid and j["alive"] is True and isinstance(j["uptime_ms"], int),
          "/healthz: 200 json ok, pid %d, uptime (got %d %s)" % (pid, st, j))
    st, h, j = get_json(port, "/api/snapshot")
    if check(st == 200 and h.get("content-type") == JSON_TYPE and j is not None,
             "/api/snapshot: 200 json (got %d %s)" % (st, h.get("content-type"))):
        check(j["pid"] == pid and j["alive"] is True, "/api/snapshot: pid and alive")
        cli_test.check_json(j, want)
    st, h, body = request(port, "GET", "/metrics")
    check(st == 200 and h.get("content-type") == PROM_TYPE,
          "/metrics: 200 %s (got %d %s)" % (PROM_TYPE, st, h.get("content-type")))
    cli_test.check_prometheus(body.decode(), want, pid)
    check('\nlivealloc_process_alive{pid="%d"} 1\n' % pid in body.decode(),
          "/metrics: livealloc_process_alive 1 while the process runs")
    check_metrics_by_class(port, pid)
    st, h, j = get_json(port, "/api/options")
    check(st == 200 and h.get("content-type") == JSON_TYPE and j and
          isinstance(j["generation"], int) and option(j, "page_recycle") is not None and
          all(set(o) >= {"name", "requested", "effective", "min", "max", "live"}
              for o in j["options"]),
          "/api/options: 200 json with generation and name/requested/effective/min/max/live")
    st, h, body = request(port, "GET", "/")
    check(st == 200 and h.get("content-type", "").startswith("text/html") and
          b'src="/app.js"' in body and "default-src 'self'" in h.get("content-security-policy", ""),
          "/: the embedded page, with a same-origin CSP (got %d)" % st)
    st, h, body = request(port, "GET", "/app.js")
    check(st == 200 and h.get("content-type", "").startswith("text/javascript") and len(body) > 0,
          "/app.js: the page's script (got %d)" % st)
    st, h, body = request(port, "GET", "/chart.umd.js")
    check(st == 200 and b"window.Chart" in body and b"sourceMappingURL" not in body,
          "/chart.umd.js: Chart.js from web/node_modules, source-map comment dropped (got %d)" % st)
    st, h, body = request(port, "GET", "/favicon.ico")
    check(st == 204 and body == b"", "/favicon.ico: 204 (got %d)" % st)
    st, h, j = get_json(port, "/nope")
    check(st == 404 and h.get("content-type") == JSON_TYPE and j and "error" in j,
          "/nope: 404 json (got %d %s)" % (st, j))
    st, h, body = request(port, "HEAD", "/healthz")
    check(st == 200 and body == b"", "HEAD /healthz: 200, no body (got %d)" % st)


def post(port, body, headers=None, host=None):
    hs = {"Content-Type": "application/json"}
    hs.update(headers or {})
    st, h, b = request(port, "POST", "/api/options", body, hs, host)
    try:
        j = json.loads(b)
    except ValueError:
        j = None
    return st, h, j


def check_options(port, slow_path_hint):
    before = options_of(port)
    pr = option(before, "page_recycle")
    if not check(pr is not None and pr["live"], "page_recycle is a live option"):
        return
    new = pr["max"] if pr["requested"] != pr["max"] else pr["min"]
    nonlive = next((o for o in before["options"] if not o["live"]), None)
    live_names = [o["name"] for o in before["options"] if o["live"]]
    boolopt = next((o for o in before["options"] if o["bool"] and o["live"]), None)

    bad = [
        ("malformed JSON", '{"page_recycle": ', {}, None, 400, None),
        ("not an object", '[1, 2]', {}, None, 400, None),
        ("empty object", '{}', {}, None, 400, None),
        ("wrong type (string)", '{"page_recycle": "8"}', {}, None, 400, "page_recycle"),
        ("wrong type (float)", '{"page_recycle": 8.5}', {}, None, 400, "page_recycle"),
        ("wrong type (bool)", '{"page_recycle": true}', {}, None, 400, "page_recycle"),
        ("wrong type (null)", '{"page_recycle": null}', {}, None, 400, "page_recycle"),
        ("unknown name", '{"page_recycle": %d, "no_such_option": 1}' % new, {}, None, 400,
         "no_such_option"),
        ("out of range (max+1)", '{"page_recycle": %d}' % (pr["max"] + 1), {}, None, 400,
         "page_recycle"),
        ("out of range (min-1)", '{"page_recycle": %d}' % (pr["min"] - 1), {}, None, 400,
         "page_recycle"),
        ("out of range (2^64)", '{"page_recycle": 18446744073709551616}', {}, None, 400,
         "page_recycle"),
        ("one good, one out of range", '{"page_recycle": %d, "%s": -5}' %
         (new, live_names[-1] if live_names[-1] != "page_recycle" else live_names[0]), {}, None,
         400, None),
        ("huge body", '{"page_recycle": %d, "x": "%s"}' % (new, "a" * (70 * 1024)), {}, None,
         413, None),
        ("foreign Origin", '{"page_recycle": %d}' % new, {"Origin": "http://evil.example"},
         None, 403, None),
        ("Origin null", '{"page_recycle": %d}' % new, {"Origin": "null"}, None, 403, None),
        ("foreign Host", '{"page_recycle": %d}' % new, {}, "evil.example:%d" % port, 403, None),
        ("form content type", '{"page_recycle": %d}' % new,
         {"Content-Type": "application/x-www-form-urlencoded"}, None, 415, None),
        ("content type with trailing text", '{"page_recycle": %d}' % new,
         {"Content-Type": "application/json garbage"}, None, 415, None),
        ("content type application/jsonx", '{"page_recycle": %d}' % new,
         {"Content-Type": "application/jsonx"}, None, 415, None),
        ("nested depth", "[" * 20000 + "]" * 20000, {}, None, 400, None),
    ]
    if nonlive:
        bad.append(("not live", '{"%s": %d}' % (nonlive["name"], nonlive["requested"]), {},
                    None, 400, nonlive["name"]))
    if boolopt:
        bad.append(("bool out of range", '{"%s": 2}' % boolopt["name"], {}, None, 400,
                    boolopt["name"]))
    for what, body, hs, host, want_status, field in bad:
        st, h, j = post(port, body, hs, host)
        ok = st == want_status and h.get("content-type") == JSON_TYPE and j is not None and \
            isinstance(j.get("error"), str) and j["error"] and "field" in j
        if field is not None:
            ok = ok and j.get("field") == field
        check(ok, "POST %s: %d with {error, field%s} (got %d %s)" %
              (what, want_status, "=" + field if field else "", st, j))
        after = options_of(port)
        check(after["generation"] == before["generation"] and
              [(o["name"], o["requested"]) for o in after["options"]] ==
              [(o["name"], o["requested"]) for o in before["options"]],
              "POST %s: nothing changed (generation %d)" % (what, after["generation"]))

    # A header the checks read by its first copy, sent twice: 400 naming it, nothing changed (the
    # first Content-Length, Origin or Content-Type was taken, and the POST applied).
    body = b'{"page_recycle": %d}' % new
    ours = b"Origin: http://127.0.0.1:%d\r\n" % port
    json_type = b"Content-Type: application/json\r\n"
    length = b"Content-Length: %d\r\n" % len(body)
    for name, headers in (
            ("Content-Length", json_type + length + b"Content-Length: %d\r\n" % (len(body) + 5)),
            ("Origin", json_type + length + ours + b"Origin: http://evil.example\r\n"),
            ("Content-Type", json_type + length + b"Content-Type: text/plain\r\n")):
        gen = options_of(port)["generation"]
        st, j = raw_answer(port, b"POST /api/options HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n%s\r\n%s"
                           % (port, headers, body))
        after = options_of(port)
        check(st == 400 and j and j.get("error") == "more than one %s header" % name and
              after["generation"] == gen and
              option(after, "page_recycle")["requested"] == pr["requested"],
              "POST with two %s headers: 400 naming it, nothing changed (got %s %s)" %
              (name, st, j))
    # The Origin of the page itself is allowed.
    st, _, j = post(port, '{"page_recycle": %d}' % new,
                    {"Origin": "http://127.0.0.1:%d" % port,
                     "Content-Type": "Application/JSON ; charset=utf-8"})
    check(st == 200 and j and j["ok"] is True and j["generation"] > before["generation"] and
          j["applied"] == {"page_recycle": new},
          "POST valid (same Origin): 200, generation %d -> %s, applied" %
          (before["generation"], j and j.get("generation")))
    after = options_of(port)
    check(option(after, "page_recycle")["requested"] == new and
          after["generation"] == (j or {}).get("generation"),
          "GET /api/options shows the requested value and the new generation")
    deadline = time.time() + 5
    while time.time() < deadline and option(options_of(port), "page_recycle")["effective"] != new:
        time.sleep(0.02)
    check(option(options_of(port), "page_recycle")["effective"] == new,
          "the allocator made page_recycle=%d effective (%s)" % (new, slow_path_hint))
    st, _, j = post(port, '{"page_recycle": %d}' % pr["requested"])  # back
    check(st == 200, "POST valid (no Origin): 200")


def check_body_checks(port):
    """POST /api/options: a body shorter than its Content-Length, and a name given twice, are
    refused, and nothing is stored."""
    before = option(options_of(port), "page_recycle")["requested"]
    new = 3 if before != 3 else 5
    body = b'{"page_recycle":%d}' % new
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    try:
        s.sendall(b"POST /api/options HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: "
                  b"application/json\r\nContent-Length: %d\r\n\r\n" % (port, len(body) + 50) +
                  body)
        s.shutdown(socket.SHUT_WR)
        out = read_to_close(s)
    finally:
        s.close()
    check(out.startswith(b"HTTP/1.1 400") and b"Content-Length says" in out,
          "POST with a body shorter than its Content-Length: 400 (%r)" % out[:200])
    st, _, j = post(port, '{"page_recycle": 99999, "page_recycle": %d}' % new)
    check(st == 400 and j and j.get("field") == "page_recycle" and "twice" in j.get("error", ""),
          "POST with a name given twice: 400, field page_recycle (%d %s)" % (st, j))
    check(option(options_of(port), "page_recycle")["requested"] == before,
          "neither stored anything (page_recycle still %d)" % before)
    # A body sent a byte a second: every wait for bytes is short, but the whole body is due
    # within 3 s; without that bound one client holds a worker for as long as it likes.
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    out, sent = b"", 0
    try:
        s.sendall(b"POST /api/options HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: "
                  b"application/json\r\nContent-Length: 30\r\n\r\n" % port)
        while sent < 30 and not out:
            try:
                s.sendall(b" ")
            except OSError:  # the server answered and closed
                break
            sent += 1
            if select.select([s], [], [], 1.0)[0]:
                out = read_to_close(s)  # every response ends the connection
    finally:
        s.close()
    check(out.startswith(b"HTTP/1.1 408") and b"within 3 s" in out and sent < 30,
          "POST with a body trickled a byte a second: 408 after %d of 30 bytes (%r)" % (sent, out[:120]))
    # A body that stalls, the socket kept open: 408 when the 3 s are up (civetweb's read timed
    # out and was taken for the client's end of the body: 400 "the body ended after 18").
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    try:
        t0 = time.time()
        s.sendall(b"POST /api/options HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: "
                  b"application/json\r\nContent-Length: 100\r\n\r\n{\"page_recycle\": 3" % port)
        out = s.recv(65536)
        took = time.time() - t0
    finally:
        s.close()
    check(out.startswith(b"HTTP/1.1 408") and b"within 3 s (18 bytes of it did)" in out,
          "POST with a stalled body (18 of 100 bytes): 408 after %.1f s (%r)" % (took, out[:200]))


def check_malformed(port):
    cases = [
        ("garbage", b"\x00\xff\xfe garbage\r\n\r\n"),
        ("no HTTP version", b"GET /healthz\r\n\r\n"),
        ("huge header", b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nX: " % port +
         b"a" * 100000 + b"\r\n\r\n"),
        ("HTTP/1.0 without Host", b"GET /healthz HTTP/1.0\r\n\r\n"),
        ("HTTP/2.5", b"GET /healthz HTTP/2.5\r\nHost: 127.0.0.1:%d\r\n\r\n" % port),
        ("negative length", b"POST /api/options HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
         b"Content-Type: application/json\r\nContent-Length: -5\r\n\r\n{}" % port),
        ("short body", b"POST /api/options HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
         b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{}" % port),
        ("no length", b"POST /api/options HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
         b"Content-Type: application/json\r\n\r\n{}" % port),
        ("stream bad interval", b"GET /api/stream?interval_ms=abc HTTP/1.1\r\n"
         b"Host: 127.0.0.1:%d\r\n\r\n" % port),
        ("stream interval 10", b"GET /api/stream?interval_ms=10 HTTP/1.1\r\n"
         b"Host: 127.0.0.1:%d\r\n\r\n" % port),
    ]
    for what, data in cases:
        t0 = time.time()
        out = raw(port, data, wait=12)
        took = time.time() - t0
        first = out.split(b"\r\n", 1)[0]
        m = re.match(rb"HTTP/1\.[01] (\d{3})", first)
        check(took < 11.5 and (not m or int(m.group(1)) >= 400),
              "malformed %s: an error or a close, in %.1f s (got %r)" % (what, took, first))
        if m:  # also what civetweb refuses itself is answered in JSON, not its plain text
            head_, _, body = out.partition(b"\r\n\r\n")
            try:
                j = json.loads(body)
            except ValueError:
                j = None
            check(b"content-type: application/json" in head_.lower() and isinstance(j, dict)
                  and j.get("error"), "malformed %s: a JSON error (got %r)" % (what, out[:300]))
        st, _, _ = request(port, "GET", "/healthz")
        check(st == 200, "after malformed %s: still serving" % what)
    for host in ("evil.example:%d" % port, "127.0.0.1", "127.0.0.1:%d" % (port + 1), "",
                 "localhost:%d.evil" % port):
        st, h, body = request(port, "GET", "/api/snapshot", host=host)
        check(st == 403, "GET with Host %r: 403 (got %d)" % (host, st))
    st, _, _ = request(port, "GET", "/healthz", host="localhost:%d" % port)
    check(st == 200, "GET with Host localhost:PORT: 200")
    for second in (b"127.0.0.1:%d" % port, b"evil.example"):  # RFC 9112 3.2: 400, either way
        st, j = raw_answer(port, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nHost: %s\r\n\r\n"
                           % (port, second))
        check(st == 400 and j and "more than one Host" in j.get("error", ""),
              "GET with two Host headers (the second %s): 400 JSON (got %s %s)" %
              (second.decode(), st, j))
    for method, path in (("DELETE", "/api/options"), ("POST", "/api/snapshot"),
                         ("PUT", "/metrics"), ("POST", "/healthz")):
        st, h, body = request(port, method, path, body=b"" if method != "DELETE" else None)
        check(st == 405 and "allow" in h, "%s %s: 405 with Allow (got %d)" % (method, path, st))


def raw_answer(port, data):
    """(status or None, body parsed as JSON or None) of the answer to the raw request data."""
    out = raw(port, data)
    m = re.match(rb"HTTP/1\.[01] (\d{3})", out)
    try:
        j = json.loads(out.partition(b"\r\n\r\n")[2])
    except ValueError:
        j = None
    return (int(m.group(1)) if m else None), j


def check_request_targets(port):
    """Absolute-form targets (RFC 9112 3.2.2) for this server are served, and every other target
    civetweb maps to no path (`*`, another port) gets a JSON error; civetweb closed those
    without a word."""
    cases = [
        ("absolute-form, this server", b"http://127.0.0.1:%d/healthz" % port, "GET", 200),
        ("absolute-form, localhost", b"http://localhost:%d/healthz" % port, "GET", 200),
        ("absolute-form, another host", b"http://evil.example:%d/healthz" % port, "GET", 403),
        ("absolute-form, another port", b"http://127.0.0.1:%d/healthz" % (port + 1), "GET", 403),
        ("absolute-form, https", b"https://127.0.0.1:%d/healthz" % port, "GET", 400),
        ("asterisk-form", b"*", "OPTIONS", 400),
        ("asterisk-form GET", b"*", "GET", 400),
    ]
    for what, target, method, want in cases:
        st, j = raw_answer(port, b"%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" %
                           (method.encode(), target, port))
        good = isinstance(j, dict) and (j.get("ok") if want == 200 else j.get("error"))
        check(st == want and good,
              "%s %s: %d JSON (got %s %s)" % (method, target.decode(), want, st, j))
    # The target's authority stands for Host, which is ignored (RFC 9112 3.2.2).
    st, j = raw_answer(port, b"GET http://127.0.0.1:%d/api/baseline HTTP/1.1\r\n"
                       b"Host: evil.example\r\n\r\n" % port)
    check(st == 200 and j and "baseline" in j,
          "absolute-form target with another Host header: served (got %s %s)" % (st, j))


class Stream:
    """An SSE client on a raw socket: connect(), then events() as they come."""

    def __init__(self, port, query=""):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
        self.s.sendall(b"GET /api/stream%s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" %
                       (query.encode(), port))
        self.buf = b""
        self.head = None
        self.closed = False

    def _fill(self, timeout):
        r, _, _ = select.select([self.s], [], [], timeout)
        if not r:
            return False
        chunk = self.s.recv(1 << 20)
        if not chunk:
            self.closed = True
            return False
        self.buf += chunk
        return True

    def event(self, timeout=TIMEOUT):
        """(arrival time, data string) of the next data event, or None."""
        deadline = time.time() + timeout
        while True:
            if self.head is None and b"\r\n\r\n" in self.buf:
                self.head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            if self.head is not None:
                while b"\n\n" in self.buf:
                    ev, self.buf = self.buf.split(b"\n\n", 1)
                    data = [ln[6:] for ln in ev.split(b"\n") if ln.startswith(b"data: ")]
                    if data:
                        return time.time(), b"\n".join(data).decode()
            left = deadline - time.time()
            if left <= 0 or self.closed or not self._fill(left):
                if self.closed or left <= 0:
                    return None

    def wait_closed(self, timeout):
        deadline = time.time() + timeout
        while not self.closed and time.time() < deadline:
            self._fill(deadline - time.time())
        return self.closed

    def close(self):
        self.s.close()


def check_big_answers(port):
    """Snapshots, /metrics and history are answered at most 2 at a time: 30 requests at once all
    get their answer (each waits for its turn), and every turn is given back."""
    paths = ["/api/snapshot", "/metrics", "/api/history?seconds=1"] * 10
    with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
        codes = list(pool.map(lambda p: request(port, "GET", p)[0], paths))
    check(codes.count(200) == len(paths), "30 big answers at once: all 200 (%s)" % codes)
    codes = [request(port, "GET", p)[0] for p in paths[:9]]  # the turns were all given back
    check(codes == [200] * 9, "then 9 more one by one: all 200 (%s)" % codes)


def check_stream_cap(port):
    # Each stream holds a worker thread: past 16 a new one gets 503 and the rest still answers.
    time.sleep(1.5)  # a stream closed just before is counted until a write to it fails
    # A minute between ticks: the server must notice the closed ones by its heartbeat, not then.
    streams = [Stream(port, "?interval_ms=60000") for _ in range(16)]
    try:
        got = [st.event() is not None for st in streams]
        check(all(got), "16 streams at once: each gets its first event (%d of 16)" % sum(got))
        extra = Stream(port)
        extra.event(timeout=5)
        check(extra.head is not None and b" 503 " in extra.head.split(b"\r\n")[0],
              "a 17th stream: 503 (head %r)" % (extra.head or b"")[:80])
        extra.close()
        check(request(port, "GET", "/healthz")[0] == 200, "with 16 streams open, /healthz answers")
    finally:
        for st in streams:
            st.close()
    closed = time.time()
    while True:  # the server notices the closed streams within two heartbeats (1 s each)
        again = Stream(port, "?interval_ms=100")
        ok = again.event(timeout=5) is not None
        again.close()
        if ok or time.time() - closed > 6:
            break
        time.sleep(0.1)
    check(ok, "once 16 streams with a 60 s interval close, a new stream is served within 6 s "
          "(%.1f s)" % (time.time() - closed))


def check_stream_bounds(port):
    # interval_ms takes kMinStreamMs..kMaxStreamMs: each bound serves a stream, one past it is a
    # 400 at once (a stream served by mistake would show its 200 head and first event instead).
    # Empty is 400 too, as an empty seconds= of /api/history is.
    for ms, served in ((49, False), (50, True), (60000, True), (60001, False), ("", False)):
        s = Stream(port, "?interval_ms=%s" % ms)
        ev = s.event(timeout=5)
        s.close()
        status = s.head.split(b"\r\n")[0] if s.head else b""
        if served:
            check(b" 200 " in status and ev is not None,
                  "/api/stream?interval_ms=%s: served, first event at once (%r)" % (ms, status))
        else:
            check(b" 400 " in status and ev is None,
                  "/api/stream?interval_ms=%s: 400, no stream (%r)" % (ms, status))


def check_query_no_value(port):
    """A query field without '=' (`?by`) has the empty value, as `?by=`, on every endpoint that
    reads a query: 400 naming the field and saying it has no value. `/metrics?by` was served as
    by=thread, `/api/snapshot?since` as the plain snapshot, `?seconds` and `?interval_ms` as
    their defaults, while their `name=` forms were refused."""
    for path, field in (("/metrics", "by"), ("/api/snapshot", "since"),
                        ("/api/history", "seconds"), ("/api/stream", "interval_ms")):
        for query in (field, field + "=", "&" + field, field + "&&", field.upper()):
            # What comes within 3 s: a stream served by mistake never ends.
            s = socket.create_connection(("127.0.0.1", port), timeout=3)
            out, deadline = b"", time.time() + 3
            try:
                s.sendall(b"GET %s?%s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" %
                          (path.encode(), query.encode(), port))
                while time.time() < deadline:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    out += chunk
            except (socket.timeout, ConnectionResetError):
                pass
            finally:
                s.close()
            head_, _, body = out.partition(b"\r\n\r\n")
            m = re.match(rb"HTTP/1\.[01] (\d{3})", head_)
            st = int(m.group(1)) if m else 0
            try:
                j = json.loads(body)
            except ValueError:
                j = None
            check(st == 400 and j and j.get("field") == field and
                  j.get("error", "").startswith(field + " has no value; it must be "),
                  "GET %s?%s: 400, field %s, saying it has no value (got %d %r)" %
                  (path, query, field, st, body[:200]))
    # A value is still told from its absence, and a wrong one is not called missing.
    st, _, j = get_json(port, "/metrics?by=nope")
    check(st == 400 and j and j.get("error", "").startswith("by must be 'thread' or 'class'"),
          "/metrics?by=nope: 400, 'by must be ...' (%d %s)" % (st, j))
    # A field the path does not take, or one given twice, is 400 naming it (were 200: no such
    # field, or its first value used); empty fields are none, and /healthz reads no query.
    for path, field, says in (
            ("/metrics?byx", "byx", "unknown query field 'byx'; this path takes by"),
            ("/metrics?x=by", "x", "unknown query field 'x'; this path takes by"),
            ("/metrics?by=thread&by", "by", "by is given more than once"),
            ("/metrics?by=thread&BY=class", "by", "by is given more than once"),
            ("/api/snapshot?x", "x", "unknown query field 'x'; this path takes since and if_none"),
            ("/api/snapshot?since=baseline&if_none=plain&if_none=plain", "if_none",
             "if_none is given more than once"),
            ("/api/history?second=5", "second", "unknown query field 'second'"),
            ("/api/stream?interval_ms=100&x" + "y" * 100, "x" + "y" * 63 + "...",
             "unknown query field 'x" + "y" * 63 + "...'")):
        st, _, j = get_json(port, path)
        check(st == 400 and j and j.get("field") == field and says in j.get("error", ""),
              "GET %s: 400, field %r, %r (%d %s)" % (path, field, says, st, j))
    for path in ("/metrics?by=class&", "/metrics?&&by=class", "/api/history?seconds=1&",
                 "/healthz?x=1&x=2"):
        st, _, _ = request(port, "GET", path)
        check(st == 200, "GET %s: 200 (%d)" % (path, st))


def check_stream_head(port):
    """HEAD /api/stream: the headers GET sends (no Content-Length: the body is the stream) and
    no body, then the close. It answered with a snapshot's Content-Length."""
    out = raw(port, b"HEAD /api/stream HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port)
    head_, _, body = out.partition(b"\r\n\r\n")
    check(head_.startswith(b"HTTP/1.1 200") and b"content-type: text/event-stream" in head_.lower()
          and b"content-length" not in head_.lower() and body == b"",
          "HEAD /api/stream: the stream's headers, no length, no body (%r)" % out[:300])
    out = raw(port, b"HEAD /api/stream?interval_ms=10 HTTP/1.1\r\n"
                              b"Host: 127.0.0.1:%d\r\n\r\n" % port)
    check(out.startswith(b"HTTP/1.1 400") and out.endswith(b"\r\n\r\n"),
          "HEAD /api/stream?interval_ms=10: 400 as for GET, no body (%r)" % out[:200])


def check_stream(port, pid):
    # Only lower bounds on time: ticks fall on multiples of the interval, the first at once, so
    # the fifth event cannot come before 3 intervals (4 boundaries, the first of them up to one
    # interval after the start), however loaded the machine; upper bounds would measure the
    # machine (a check "about 100 ms apart" failed under load). 250 ms tells the interval asked
    # for from the default 80 ms, whose fifth event comes after 240-320 ms.
    t0 = time.time()
    s = Stream(port, "?interval_ms=250")
    evs = [s.event() for _ in range(5)]
    s.close()
    got = [e for e in evs if e]
    check(len(got) == 5, "/api/stream?interval_ms=250: 5 events (got %d)" % len(got))
    check(s.head is not None and b"200 OK" in s.head.split(b"\r\n")[0] and
          b"content-type: text/event-stream" in s.head.lower(),
          "/api/stream: 200 text/event-stream (head %r)" % (s.head or b"")[:120])
    parsed = []
    for _, data in got:
        try:
            parsed.append(json.loads(data))
        except ValueError:
            pass
    check(len(parsed) == len(got) and all(j["schema"] == "memlive.snapshot/1" and
                                          j["pid"] == pid for j in parsed),
          "/api/stream: every event is a memlive.snapshot/1 of pid %d" % pid)
    if len(got) == 5:
        took = got[-1][0] - t0
        print("      stream at 250 ms: 5 events in %.0f ms" % (took * 1000))
        check(took >= 0.74, "/api/stream?interval_ms=250: the fifth event after 3 intervals at "
              "least (%.0f ms)" % (took * 1000))
    if len(parsed) >= 3:
        check(parsed[-1]["taken_ns"] > parsed[1]["taken_ns"],
              "/api/stream: samples are fresh (taken_ns grows)")
    t0 = time.time()
    s = Stream(port)
    evs = [s.event() for _ in range(3)]
    took = time.time() - t0
    s.close()
    check(all(evs) and took >= 0.08,
          "/api/stream default interval 80 ms: 3 events, the third after one interval at least "
          "(%.2f s)" % took)


def check_history(port, pid):
    time.sleep(1.2)  # the sampler takes one per 250 ms
    st, h, j = get_json(port, "/api/history")
    ok = st == 200 and h.get("content-type") == JSON_TYPE and isinstance(j, list)
    check(ok and len(j) >= 3, "/api/history: 200 json array of >= 3 samples (got %d, %s)" %
          (st, len(j) if ok else j))
    if ok and j:
        check(all(s["schema"] == "memlive.snapshot/1" and s["pid"] == pid for s in j),
              "/api/history: memlive.snapshot/1 samples of pid %d" % pid)
        ts = [s["taken_ns"] for s in j]
        check(ts == sorted(ts) and len(set(ts)) == len(ts), "/api/history: oldest first")
        check(len(j) <= 600, "/api/history: at most 600 samples")
    st, _, j1 = get_json(port, "/api/history?seconds=1")
    check(st == 200 and isinstance(j1, list) and 1 <= len(j1) <= 6,
          "/api/history?seconds=1: 1..6 samples at 250 ms (got %d, %s)" %
          (st, len(j1) if isinstance(j1, list) else j1))
    st, _, j = get_json(port, "/api/history?seconds=150")
    check(st == 200 and isinstance(j, list), "/api/history?seconds=150 (all kept): 200")
    for bad in ("0", "-1", "abc", "151", "1.5", "", "99999999999999999999999"):
        st, h, j = get_json(port, "/api/history?seconds=" + bad)
        check(st == 400 and j and j.get("field") == "seconds",
              "/api/history?seconds=%s: 400 json field seconds (got %d %s)" % (bad, st, j))


def post_baseline(port, body="", headers=None, method="POST"):
    hs = {"Content-Type": "application/json"}
    hs.update(headers or {})
    st, h, b = request(port, method, "/api/baseline", body if method == "POST" else None, hs)
    try:
        return st, json.loads(b)
    except ValueError:
        return st, None


# POST /api/baseline bodies and headers that are refused: (what, body, extra headers, status,
# the entry the error names ("-": unchecked; None: the body as a whole), the error's start).
BAD_BASELINES = [
    ("foreign Origin", "", {"Origin": "http://evil.example"}, 403, "-", ""),
    ("form content type", "", {"Content-Type": "text/plain"}, 415, "-", ""),
    ("huge body", " " * (70 * 1024), {}, 413, "-", ""),
    ("clear 1", '{"clear": 1}', {}, 400, "clear", "clear must be true or false"),
    ("clear 1.0", '{"clear": 1.0}', {}, 400, "clear", "clear must be true or false"),
    # past a double's range: it ended nlohmann's parse, and the body was called malformed
    ("clear 1e400", '{"clear": 1e400}', {}, 400, "clear", "clear must be true or false"),
    ("clear -1e400", '{"clear":-1e400}', {}, 400, "clear", "clear must be true or false"),
    ("clear 1e400, then garbage", '{"clear": 1e400, x', {}, 400, None, "malformed JSON"),
    ("clear a string", '{"clear": "true"}', {}, 400, "clear", "clear must be true or false"),
    ("clear null", '{"clear": null}', {}, 400, "clear", "clear must be true or false"),
    ("clear an object", '{"clear": {"clear": true}}', {}, 400, "clear",
     "clear must be true or false"),
    ("unknown field", '{"reset": true}', {}, 400, "reset", "unknown field 'reset'"),
    ("unknown field after clear", '{"clear": true, "x": true}', {}, 400, "x",
     "unknown field 'x'"),
    ("unknown field 1e400", '{"x": 1e400}', {}, 400, "x", "unknown field 'x'"),
    ("'Clear'", '{"Clear": true}', {}, 400, "Clear", "unknown field 'Clear'"),
    ("an empty name", '{"": true}', {}, 400, "", "unknown field ''"),
    ("malformed", '{"clear": ', {}, 400, None, "malformed JSON"),
    ("trailing garbage", '{"clear": true} x', {}, 400, None, "malformed JSON"),
    ("an array", '[{"clear": true}]', {}, 400, None, "the body must be empty, {} or"),
    ("true", 'true', {}, 400, None, "the body must be empty, {} or"),
    ("null", 'null', {}, 400, None, "the body must be empty, {} or"),
    ("with 'clear' twice", '{"clear": true, "clear": false}', {}, 400, "clear",
     "'clear' given twice"),
]


def check_bad_baselines(port, want_after):
    """Every refused POST /api/baseline: its status, the entry it names and what it says, and
    the baseline as it was (`want_after`): none recorded, none cleared."""
    for what, body, hs, want, field, says in BAD_BASELINES:
        st, j = post_baseline(port, body, hs)
        check(st == want and j and j.get("error", "").startswith(says) and
              field in ("-", j.get("field")),
              "POST /api/baseline %s: %d, field %r, %r (got %d %s)" % (what, want, field, says,
                                                                     st, j))
        st, _, j = get_json(port, "/api/baseline")
        check(st == 200 and j == want_after,
              "after POST /api/baseline %s: the baseline unchanged, %s (%s)" % (what, want_after,
                                                                                 j))


def check_plain_if_none(port, when):
    """?since=baseline&if_none=plain without a baseline: not a 409 but the plain snapshot (the
    totals of PLAN, not changes), marked by baseline_taken_ns 0."""
    st, _, j = get_json(port, "/api/snapshot?since=baseline&if_none=plain")
    if check(st == 200 and j and j.get("baseline_taken_ns") == 0,
             "snapshot?since=baseline&if_none=plain %s: 200, baseline_taken_ns 0 (got %d %s)" %
             (when, st, j and j.get("baseline_taken_ns", j.get("error")))):
        cli_test.check_json(j, cli_test.expected(j["class_sizes"]))


def check_baseline(port, p):
    st, _, j = get_json(port, "/api/snapshot?since=baseline")
    check(st == 409 and j and j.get("field") == "since",
          "snapshot?since=baseline without a baseline: 409 (got %d)" % st)
    # A client that asks GET /api/baseline before each ?since=baseline still met the 409 when
    # another client cleared it between the two: &if_none=plain (opt-in) answers it instead.
    check_plain_if_none(port, "without a baseline")
    for bad in ("=full", "=", "=plain%00x", ""):
        for since in ("since=baseline&", ""):  # without since it was not looked at: 200
            st, _, j = get_json(port, "/api/snapshot?%sif_none%s" % (since, bad))
            check(st == 400 and j and j.get("field") == "if_none",
                  "snapshot?%sif_none%s: 400, field if_none (got %d %s)" %
                  (since, bad, st, j and j.get("error", "no error")))
    st, _, j = get_json(port, "/api/snapshot?if_none=plain")
    check(st == 200 and j and "baseline_taken_ns" not in j,
          "snapshot?if_none=plain (no since): 200, the plain snapshot (got %d)" % st)
    st, _, j = get_json(port, "/api/snapshot?since=yesterday")
    check(st == 400 and j and j.get("field") == "since", "snapshot?since=yesterday: 400")
    check_bad_baselines(port, {"baseline": False, "taken_ns": 0})
    st, _, j = get_json(port, "/api/snapshot?since=baseline%00x")
    check(st == 400 and j and j.get("field") == "since", "snapshot?since=baseline%%00x: 400 (%d)" % st)
    st, _, j = get_json(port, "/api/history?seconds=1%00junk")
    check(st == 400 and j and j.get("field") == "seconds", "history?seconds=1%%00junk: 400 (%d)" % st)
    st, _, j = get_json(port, "/api/history?seconds=")  # as an empty interval_ms= of the stream
    check(st == 400 and j and j.get("field") == "seconds",
          "history?seconds= (empty): 400 (%d)" % st)
    # A path is not decoded into a C string: "%00" ended it, and these were answered as
    # /healthz, /api/snapshot and the page.
    # Nor cleaned: civetweb's copy makes these /healthz.
    for path in ("/healthz%00junk", "/api/snapshot%00.json", "/%00", "/app.js%00.map",
                 "//healthz", "/x/../healthz", "/./healthz"):
        st, _, j = get_json(port, path)
        check(st == 404 and j and "no such endpoint" in j.get("error", ""),
              "GET %s: 404 no such endpoint (%d)" % (path, st))
    st, j = post_baseline(port, "", {"Origin": "http://127.0.0.1:%d" % port,
                                     "Content-Type": "Application/JSON"})  # media types ignore case
    check(st == 200 and j and j["ok"] is True and j["baseline"] is True and j["taken_ns"] > 0,
          "POST /api/baseline (empty body, same Origin): 200 baseline true (%d %s)" % (st, j))
    base_ns = (j or {}).get("taken_ns")
    st, _, j = get_json(port, "/api/baseline")
    check(st == 200 and j == {"baseline": True, "taken_ns": base_ns}, "GET /api/baseline (%s)" % j)
    st, _, snap = get_json(port, "/api/snapshot")
    size, count = 100, 37
    ans = command(p, "alloc extra %d %d" % (size, count))
    check(ans == ["allocated"], "http_app allocated %d more blocks (%s)" % (count, ans))
    st, h, d = get_json(port, "/api/snapshot?since=baseline")
    if not check(st == 200 and d and d["schema"] == "memlive.snapshot/1" and
                 d["baseline_taken_ns"] == base_ns,
                 "snapshot?since=baseline: 200 snapshot with baseline_taken_ns (%d)" % st):
        return
    cls = cli_test.class_of(size, d["class_sizes"])
    ia, ir = d["counters"].index("allocs"), d["counters"].index("requested_bytes")
    rows = [(t["name"], r) for t in d["threads"] for r in t["classes"]] + \
        [("<exited>", r) for r in d["exited"]]
    total = sum(r[1 + ia] for _, r in rows if r[0] == cls)
    extra = [r for n, r in rows if n == "extra" and r[0] == cls]
    check(total == count and extra and extra[0][1 + ia] == count and
          extra[0][1 + ir] == size * count,
          "since baseline: exactly %d allocs of class %d, all by 'extra', %d bytes (total %d, %s)"
          % (count, cls, size * count, total, extra))
    planned = {name for name, _, _, _ in PLAN}
    moved = [(n, r[0], r[1 + ia]) for n, r in rows if n in planned and r[1 + ia] != 0]
    check(not moved, "since baseline: the planned threads allocated nothing more (%s)" % moved)
    st, _, d = get_json(port, "/api/snapshot?since=baseline&if_none=plain")
    extra = [r for t in (d or {}).get("threads", []) if t["name"] == "extra"
             for r in t["classes"] if r[0] == cls]
    check(st == 200 and d and d.get("baseline_taken_ns") == base_ns and extra and
          extra[0][1 + ia] == count,
          "snapshot?since=baseline&if_none=plain with a baseline: the change since it (%d %s)" %
          (st, extra))
    st, _, now = get_json(port, "/api/snapshot")
    full = [r for t in now["threads"] if t["name"] == "extra" for r in t["classes"]
            if r[0] == cls]
    check(full and full[0][1 + ia] == count, "the counters themselves are not reset")
    st, j = post_baseline(port, '{"clear": true}')
    check(st == 200 and j and j["baseline"] is False, "POST {\"clear\":true}: cleared (%s)" % j)
    check(get_json(port, "/api/snapshot?since=baseline")[0] == 409, "after clear: 409")
    check_plain_if_none(port, "after a clear")
    st, j = post_baseline(port, "{}")
    check(st == 200 and j and j["baseline"] is True, "POST {}: baseline set again")
    check_bad_baselines(port, {"baseline": True, "taken_ns": (j or {}).get("taken_ns")})
    st, j = post_baseline(port, method="DELETE", headers={"Origin": "http://evil.example"})
    check(st == 403, "DELETE /api/baseline from a foreign Origin: 403 (got %d)" % st)
    check(get_json(port, "/api/baseline")[2]["baseline"] is True, "  and the baseline is kept")
    st, j = post_baseline(port, method="DELETE")
    check(st == 200 and j and j["baseline"] is False, "DELETE /api/baseline: cleared (%s)" % j)
    st, h, _ = request(port, "PUT", "/api/baseline", b"")
    check(st == 405 and "DELETE" in h.get("allow", ""), "PUT /api/baseline: 405 (%d)" % st)


def start_app(app, port=0, extra=()):
    args = [app, "--port", str(port)] + list(extra) + ["%s:%d:%d:%d" % p for p in PLAN]
    p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().split()
    return p, line


def command(p, cmd, answers=1):
    p.stdin.write(cmd + "\n")
    p.stdin.flush()
    return [p.stdout.readline().rstrip("\n") for _ in range(answers)]


def check_late_use(app):
    """An atexit handler registered before memlive's first use runs after memlive's exit-time
    cleanup (and livealloc's, which removes the segment's name): start() there said "no telemetry
    segment for pid N: is it running with LIVEALLOC_PROFILE=1?", of a program that had served
    its telemetry a moment before."""
    for snapshot_first in (False, True):
        p, line = start_app(app, extra=["--atexit"])
        try:
            if not check(line[:1] == ["ready"], "memlive_http_app --atexit ready (%s)" % line):
                continue
            pid = line[2]
            if snapshot_first:
                ans = command(p, "snapshot")[0]
                check(ans == "snapshot 1 " + pid, "take_snapshot() while running (%s)" % ans)
            out, _ = p.communicate("quit\n", timeout=TIMEOUT)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        lines = out.splitlines()
        late = {ln.split()[0]: ln for ln in lines if ln.startswith("late-")}
        start = late.get("late-start", "")
        check(p.returncode == 0 and start.startswith("late-start 7 memlive::start(): the process "
                                                     "is exiting: memlive's exit-time cleanup") and
              "LIVEALLOC_PROFILE" not in start,
              "start() from an atexit handler that runs after memlive's cleanup: error exiting, "
              "saying the process is exiting (rc %s: %s)" % (p.returncode, lines))
        snap = late.get("late-snapshot", "")
        if snapshot_first:
            check(snap == "late-snapshot 1 " + pid,
                  "take_snapshot() from that handler reads the segment a snapshot before exit "
                  "opened (%s)" % snap)
        else:
            check(snap.startswith("late-snapshot 0 memlive::take_snapshot(): the process is "
                                  "exiting") and "LIVEALLOC_PROFILE" not in snap,
                  "take_snapshot() from that handler, none before: the process is exiting (%s)"
                  % snap)
        check(not os.path.exists("/dev/shm/livealloc." + pid),
              "the segment's name is removed at that exit all the same")


def check_enable_only_late(app):
    """A program that enables telemetry itself (livealloc::telemetry::enable()) and first uses
    memlive in an atexit handler registered before that: livealloc's exit handler has removed
    the segment's name when it runs, and enable() still said 0 there, so start() said "no
    telemetry segment ...: is it running with LIVEALLOC_PROFILE=1?"."""
    p = subprocess.run([app, "--enable-only"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=TIMEOUT)
    lines = p.stdout.splitlines()
    first = lines[0].split() if lines else []
    if not check(p.returncode == 0 and first[:1] == ["enabled"],
                 "memlive_http_app --enable-only (rc %s: %s %s)" % (p.returncode, lines,
                                                                    p.stderr)):
        return
    late = {ln.split()[0]: ln for ln in lines if ln.startswith("late-")}
    check(late.get("late-enabled") == "late-enabled 0",
          "telemetry::enabled() is false once the exit removed the name (%s)" % lines)
    start = late.get("late-start", "")
    check(start.startswith("late-start 7 memlive::start(): the process is exiting: livealloc "
                           "removed its telemetry segment's name") and
          "LIVEALLOC_PROFILE" not in start,
          "start() from that handler: error exiting, saying livealloc removed the name (%s)"
          % start)
    snap = late.get("late-snapshot", "")
    check(snap.startswith("late-snapshot 0 memlive::take_snapshot(): the process is exiting: "
                          "livealloc removed") and "LIVEALLOC_PROFILE" not in snap,
          "take_snapshot() from that handler: the process is exiting (%s)" % snap)
    check(not os.path.exists("/dev/shm/livealloc." + first[1]),
          "no segment name is left behind by that exit (enable() gave none in the handler)")


def cmd_inprocess(app):
    p, line = start_app(app)
    try:
        if not check(len(line) == 3 and line[0] == "ready", "memlive_http_app ready (%s)" % line):
            return
        port, pid = int(line[1]), int(line[2])
        check(port > 0 and pid == p.pid, "start({port=0}) bound port %d" % port)
        st, _, snap = get_json(port, "/api/snapshot")
        want = cli_test.expected(snap["class_sizes"]) if snap else {}
        check_endpoints(port, pid, want)
        check_options(port, "the ticker thread reaches slow paths")
        check_malformed(port)
        check_request_targets(port)
        check_body_checks(port)
        check_big_answers(port)
        check_stream(port, pid)
        check_stream_bounds(port)
        check_stream_head(port)
        check_query_no_value(port)
        check_endpoints(port, pid, want)  # still serving, same numbers
        check_history(port, pid)
        check_baseline(port, p)

        ans = command(p, "sigpipe")[0]
        check(ans == "sigpipe default", "start() leaves the program's SIGPIPE action as it was "
              "(programs it runs later inherit an ignored SIGPIPE) (%s)" % ans)
        ans = command(p, "fork")[0].split()
        if ans == ["fork", "skipped"]:  # ThreadSanitizer build: see http_app.cpp
            print("skip  fork while serving: not under ThreadSanitizer")
        else:
            check(ans[:3] == ["fork", "0", "0"],
                  "fork while serving: a child that exits at once and one that checks port() 0, "
                  "no inherited listening socket, its own snapshot, start() and stop() both exit "
                  "0 (%s)" % ans)
            left = [c for c in ans[3:] if os.path.exists("/dev/shm/livealloc." + c)]
            check(not left, "the fork children removed their segments (left: %s)" % left)
        check(request(port, "GET", "/healthz")[0] == 200, "the parent still serves after the forks")
        ans = command(p, "again")[0]
        check(ans.startswith("again 4 "), "start() twice: already_running error value (%s)" % ans)
        ans = command(p, "second")[0]
        check(ans.startswith("second 1 ") and "in use" in ans,
              "second server on port %d: port_in_use error value (%s)" % (port, ans))
        p2, line2 = start_app(app, port)
        rc2 = p2.wait(timeout=TIMEOUT)
        check(rc2 == 3 and line2[:2] == ["start-failed", "1"],
              "another process's start() on port %d: port_in_use, no crash (%d %s)" %
              (port, rc2, line2))
        check(request(port, "GET", "/healthz")[0] == 200, "first server still serving")

        clients = [Stream(port, "?interval_ms=50"), Stream(port, "?interval_ms=50")]
        check(all(c.event() for c in clients), "two stream clients connected")
        ans = command(p, "stop", 2)
        ms = float(ans[0].split()[1]) if ans[0].startswith("stopped ") else 1e9
        print("      memlive::stop() with 2 stream clients: %.1f ms" % ms)
        # The clients never leave on their own: without the stop flag their loops watch, stop()
        # would wait for ever. A hang, not a speed, is what is checked (about 20 ms here).
        check(ms < 20000, "stop() with 2 stream clients returns (%.1f ms)" % ms)
        check(ans[1] == "port-after-stop 0", "port() is 0 after stop() (%s)" % ans[1])
        check(all(c.wait_closed(3) for c in clients), "stream clients see the end of the stream")
        for c in clients:
            c.close()
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            refused = False
        except OSError:
            refused = True
        check(refused, "port %d refuses connections after stop()" % port)
        # options.history_bytes bounds the history; at least the latest sample stays.
        ans = command(p, "small-history")[0].split()
        if check(len(ans) == 3 and ans[1] == "0", "start() with history_bytes 1 (%s)" % ans):
            small = int(ans[2])
            time.sleep(1.3)  # 5 history steps of 250 ms
            st, _, j = get_json(small, "/api/history")
            check(st == 200 and isinstance(j, list) and len(j) == 1,
                  "history_bytes 1: /api/history keeps only the latest sample (got %d, %s)" %
                  (st, len(j) if isinstance(j, list) else j))
            check(command(p, "stop", 2)[1] == "port-after-stop 0", "that server stops")
        # start() and stop() lose no descriptor. stop() woke civetweb by connecting to it, and a
        # connection accepted as civetweb stopped stayed open (5 in 30 rounds under valgrind; this
        # check did not see it at full speed). 30 stream clients: 6 wait for its 24 workers.
        ans = command(p, "cycles 20 1")[0].split() + command(p, "cycles 3 30")[0].split()
        check(len(ans) == 8 and ans[1] == ans[2] and ans[5] == ans[6] and ans[3] == ans[7] == "0",
              "rounds of start(), 1 or 30 stream clients, stop(): as many descriptors open after "
              "as before, a client streamed in every round (%s)" % " ".join(ans))
        p.stdin.write("quit\n")
        p.stdin.close()
        check(p.wait(timeout=TIMEOUT) == 0, "memlive_http_app exits 0")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def start_serve(ml, pid, port):
    p = subprocess.Popen([ml, "serve", "--pid", str(pid), "--port", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.search(r"at http://127\.0\.0\.1:(\d+)/", line)
    return p, (int(m.group(1)) if m else None), line


def cmd_serve(ml, wl):
    w = cli_test.Workload(wl)
    p = None
    try:
        p, port, line = start_serve(ml, w.pid, 0)
        if not check(port, "memlive serve --port 0 prints its URL (%r)" % line):
            return
        st, _, snap = get_json(port, "/api/snapshot")
        check(st == 200 and snap and snap["pid"] == w.pid, "serve: /api/snapshot of pid %d" % w.pid)
        want = cli_test.expected(snap["class_sizes"]) if snap else {}
        check_endpoints(port, w.pid, want)
        check_options(port, "the workload's ticker reaches slow paths")
        check_stream(port, w.pid)
        check_stream_cap(port)
        check_history(port, w.pid)
        check_stream_bounds(port)  # after the cap check: its streams would hold slots there
        check_query_no_value(port)

        r = subprocess.run([ml, "serve", "--pid", str(w.pid), "--port", str(port)],
                           capture_output=True, text=True, timeout=TIMEOUT)
        check(r.returncode == 8 and "in use" in r.stderr,
              "serve on a taken port: exit 8, 'in use' (got %d: %s)" % (r.returncode,
                                                                       r.stderr.strip()))
        check(request(port, "GET", "/healthz")[0] == 200, "the first serve still serves")

        check(w.stop() == 0, "workload exits 0")
        line = p.stderr.readline()
        check("exited; still serving its last state" in line,
              "serve reports the process's exit (%r)" % line)
        st, _, last = get_json(port, "/api/snapshot")
        check(st == 200 and last and last["pid"] == w.pid,
              "serve: the last state is still served after the exit (%d)" % st)
        st, _, h = get_json(port, "/healthz")
        check(st == 200 and h and h["alive"] is False, "/healthz says alive false after the exit")
        st, _, body = request(port, "GET", "/metrics")
        check(st == 200 and ('\nlivealloc_process_alive{pid="%d"} 0\n' % w.pid) in body.decode(),
              "/metrics after the exit: livealloc_process_alive 0 (%d)" % st)
        st, _, j = post(port, '{"page_recycle": 3}')
        check(st == 409, "POST /api/options after the exit: 409 (got %d %s)" % (st, j))
        st, _, j = get_json(port, "/api/options")
        check(st == 200 and j and j["writable"] is False,
              "GET /api/options after the exit: writable false, as the POST's 409 says (%s)" %
              (j and j.get("writable")))

        s = Stream(port, "?interval_ms=50")
        check(s.event() is not None, "a stream client connected before SIGTERM")
        t0 = time.time()
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=TIMEOUT)
        took = time.time() - t0
        print("      memlive serve stop on SIGTERM with a stream client: %.0f ms" % (took * 1000))
        # (p.wait's TIMEOUT catches a serve that waits for its stream client to leave.)
        check(rc == 0, "SIGTERM: serve exits 0 with a stream client connected (%d, %.2f s)" %
              (rc, took))
        check(s.wait_closed(3), "the stream client sees the end")
        s.close()
    finally:
        w.kill()
        if p and p.poll() is None:
            p.kill()
            p.wait()


def check_serve_history(ml, wl):
    """serve --history MIB bounds /api/history: a workload of 240 threads (12 classes each)
    whose samples are large enough for 1 MiB to hold a few, sampled for 4 s (16 history
    steps)."""
    plan = [("h%03d" % t, 16 << c, 3, 1) for t in range(240) for c in range(12)]
    w = cli_test.Workload(wl, plan=plan)
    p = None
    try:
        p = subprocess.Popen([ml, "serve", "--pid", str(w.pid), "--port", "0", "--history", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        m = re.search(r"at http://127\.0\.0\.1:(\d+)/", p.stdout.readline())
        if not check(m, "serve --history 1 starts"):
            return
        port = int(m.group(1))
        time.sleep(4)
        st, _, body = request(port, "GET", "/api/history")
        samples = json.loads(body) if st == 200 else []
        sizes = [len(json.dumps(x, separators=(",", ":"))) for x in samples]
        # Each sample is kept at its exact size, so 1 MiB holds at most 1 MiB / smallest + 1.
        bound = (1 << 20) // min(sizes) + 1 if sizes else 0
        check(st == 200 and 1 <= len(samples) <= bound and len(samples) < 12,
              "serve --history 1: /api/history holds what 1 MiB holds (%d samples of %s bytes; "
              "at most %d; unbounded, 4 s make 16)" % (len(samples), sizes[:1], bound))
    finally:
        w.kill()
        if p and p.poll() is None:
            p.kill()
            p.wait()


def check_serve_reader_gone(ml, wl):
    """`memlive serve ... | head -1`: the URL read, the reader of stdout goes away; the process
    then exits, which serve says (it said it on stdout, and the SIGPIPE ended the server). It
    serves on, and stops with exit 0."""
    w = cli_test.Workload(wl)
    p = None
    try:
        p = subprocess.Popen([ml, "serve", "--pid", str(w.pid), "--port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        m = re.search(r"at http://127\.0\.0\.1:(\d+)/", p.stdout.readline())
        if not check(m, "serve starts"):
            return
        p.stdout.close()
        check(w.stop() == 0, "workload exits 0")
        said = p.stderr.readline()
        time.sleep(0.3)
        st = request(int(m.group(1)), "GET", "/healthz")[0]
        p.send_signal(signal.SIGINT)
        code = p.wait(timeout=TIMEOUT)
        check("exited; still serving its last state" in said and st == 200 and code == 0,
              "serve whose stdout reader went away serves on after the process exits, exit 0 "
              "(%r, /healthz %d, exit %d)" % (said, st, code))
    finally:
        w.kill()
        if p and p.poll() is None:
            p.kill()
            p.wait()


def read_until(p, pattern, timeout=TIMEOUT, stream="stdout"):
    """Lines of p.stdout (or p.stderr: stream="stderr") until one matches pattern: (match or
    None, lines read). Reads the raw fd (a buffered readline would hide lines already read from
    select); what was read past the match stays in p._ml_buf (stdout) or p._ml_errbuf."""
    lines = []
    fd = getattr(p, stream).fileno()
    attr = "_ml_buf" if stream == "stdout" else "_ml_errbuf"
    buf = getattr(p, attr, b"")
    deadline = time.time() + timeout
    try:
        while True:
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                lines.append(line.decode(errors="replace"))
                m = re.search(pattern, lines[-1])
                if m:
                    return m, lines
            left = deadline - time.time()
            r, _, _ = select.select([fd], [], [], max(left, 0))
            if not r:
                return None, lines
            chunk = os.read(fd, 65536)
            if not chunk:
                return None, lines
            buf += chunk
    finally:
        setattr(p, attr, buf)


def cmd_run_errors(ml):
    r = subprocess.run([ml, "run", "--port", "0", "--", "true"], capture_output=True, text=True,
                       timeout=TIMEOUT)
    check(r.returncode == 2 and "liblivealloc.so" in r.stderr and "--lib PATH" in r.stderr,
          "run without the library: exit 2 naming it and --lib (got %d: %s)" %
          (r.returncode, r.stderr.strip()))
    with tempfile.TemporaryDirectory() as tmp:
        lib = os.path.join(tmp, "liblivealloc.so")  # an ELF shared object's header: past the checks
        with open(lib, "wb") as f:
            f.write(b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + b"\x03\x00" + b"\x00" * 46)
        r = subprocess.run([ml, "run", "--port", "0", "--lib", lib, "--",
                            "/nonexistent/program-xyz"], capture_output=True, text=True,
                           timeout=TIMEOUT)
        check(r.returncode == 127 and "not found" in r.stderr,
              "run of a missing program: exit 127 (got %d: %s)" % (r.returncode,
                                                                   r.stderr.strip()))
        # Refused before the program starts: it must not run for a mistyped option.
        marker = os.path.join(tmp, "ran")
        for extra, want in ((["--lib", "/dev/null"], "is not a file"),
                            (["--lib", "/etc/passwd"], "is not a 64-bit ELF shared library"),
                            (["--lib", tmp + "/a b.so"], "cannot find"),
                            (["--host", "192.0.2.1", "--lib", lib], "cannot listen on")):
            r = subprocess.run([ml, "run", "--port", "0"] + extra + ["--", "touch", marker],
                               capture_output=True, text=True, timeout=TIMEOUT)
            check(r.returncode == 2 and want in r.stderr and not os.path.exists(marker),
                  "run %s: exit 2 with %r, the program not started (got %d: %s)" %
                  (" ".join(extra), want, r.returncode, r.stderr.strip()[-200:]))
        spaced = os.path.join(tmp, "a b.so")
        os.rename(lib, spaced)
        r = subprocess.run([ml, "run", "--port", "0", "--lib", spaced, "--", "touch", marker],
                           capture_output=True, text=True, timeout=TIMEOUT)
        check(r.returncode == 2 and "space or a colon" in r.stderr and not os.path.exists(marker),
              "run with a library path holding a space: exit 2, not started (got %d: %s)" %
              (r.returncode, r.stderr.strip()[-200:]))


def check_run_unmapped(ml):
    """A program that never maps the library (here the loader refuses a fake one; a static
    program alike): the note after 5 s says so, not to start it with LD_PRELOAD, which run did."""
    with tempfile.TemporaryDirectory() as tmp:
        lib = os.path.join(tmp, "liblivealloc.so")  # an ELF shared object's header: past the checks
        with open(lib, "wb") as f:
            f.write(b"\x7fELF\x02\x01\x01" + b"\x00" * 9 + b"\x03\x00" + b"\x00" * 46)
        p = subprocess.Popen([ml, "run", "--port", "0", "--lib", lib, "--", "sleep", "60"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            m, lines = read_until(p, r"^memlive: run: process \d+ publishes no segment yet",
                                  stream="stderr")
            note = m.string if m else ""
            check(m and "does not map the library" in note and "statically linked" in note and
                  "run it with" not in note,
                  "run of a program without the library: the note says it does not map it (%s)" %
                  (note or lines))
        finally:
            p.terminate()
            p.wait(timeout=TIMEOUT)


def check_run_exec(p, port, pid, before):
    """The program execs itself: memlive follows the same pid into its new segment."""
    p.stdin.write("exec\n")
    p.stdin.flush()
    m, lines = read_until(p, r"^target ready (\d+)")
    if not check(m and int(m.group(1)) == pid, "the program exec'd itself, pid %d (%s)" %
                 (pid, lines)):
        return
    p.stdin.write("alloc 300 17\n")
    p.stdin.flush()
    m, lines = read_until(p, r"^allocated")
    check(m, "the new image allocated (%s)" % lines)
    deadline = time.time() + 5
    snap, total = None, None
    while time.time() < deadline:
        st, _, snap = get_json(port, "/api/snapshot")
        if st == 200 and snap and snap["start_ns"] != before["start_ns"]:
            cls = cli_test.class_of(300, snap["class_sizes"])
            ia = snap["counters"].index("allocs")
            total = sum(r[1 + ia] for t in snap["threads"] for r in t["classes"] if r[0] == cls)
            if total >= 17:
                break
        time.sleep(0.1)
    check(snap and snap["pid"] == pid and snap["start_ns"] != before["start_ns"] and
          snap["alive"] is True and total is not None and total >= 17,
          "run: after the exec, /api/snapshot is the new image's segment with its 17 mallocs of "
          "300 bytes (start_ns %s -> %s, allocs %s)" % (before["start_ns"],
                                                        snap and snap["start_ns"], total))
    st, _, j = get_json(port, "/api/baseline")
    check(st == 200 and j and j["baseline"] is False,
          "run: the exec cleared the baseline, which counted the old image (%s)" % j)
    st, _, j = get_json(port, "/api/options")
    check(st == 200 and j and j["writable"] is True, "run: the new segment can be tuned (%s)" %
          (j and j.get("writable")))


def run_url(ml, target, *options):
    """`memlive run --port 0 OPTIONS -- target`, without a preload of its own (run gives the
    program one), and the URL it prints: (process, match of pid and port or None, lines)."""
    env = dict(os.environ, LD_PRELOAD="")
    p = subprocess.Popen([ml, "run", "--port", "0"] + list(options) + ["--", target],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, bufsize=1, env=env)
    m, lines = read_until(p, r"^memlive: serving process (\d+) \(.*\) at "
                          r"http://127\.0\.0\.1:(\d+)/", stream="stderr")
    return p, m, lines


def check_run_exec_healthz(ml, target):
    """/healthz follows an exec into another livealloc program as the snapshot does: once the
    new image has published its segment, alive is true. It asked the old image's segment, which
    reads not alive from the exec on, until a sample followed the exec: with the history sampled
    once a minute (--interval 60000) and no other request, for up to a minute."""
    p, m, lines = run_url(ml, target, "--interval", "60000")
    try:
        if not check(m, "memlive run --interval 60000 prints the URL (%s)" % lines):
            return
        pid, port = int(m.group(1)), int(m.group(2))
        segment = "/dev/shm/livealloc.%d" % pid
        old = os.stat(segment).st_ino  # memlive keeps the old file open: its inode stays taken
        st, _, h = get_json(port, "/healthz")
        check(st == 200 and h and h["alive"] is True, "run: /healthz alive before the exec (%s)" %
              h)
        p.stdin.write("exec sleep 60\n")  # preloaded as the target was: a livealloc program
        p.stdin.flush()
        published, deadline = False, time.time() + 30
        while not published and time.time() < deadline:
            try:
                published = os.stat(segment).st_ino != old
            except OSError:
                pass
            time.sleep(0.005)
        if not check(published, "run: the program exec'd sleep, which published %s" % segment):
            return
        st, _, h = get_json(port, "/healthz")  # the first request since the exec
        check(st == 200 and h and h["pid"] == pid and h["alive"] is True,
              "run: /healthz right after the exec's new image published: alive true (%s)" % h)
        st, _, snap = get_json(port, "/api/snapshot")
        check(st == 200 and snap and snap["alive"] is True and snap["program"] == "sleep",
              "run: /api/snapshot agrees: the new image, sleep, alive (%s)" %
              ((snap or {}).get("program"),))
    finally:
        if p.poll() is None:
            cli_test.terminate(p, TIMEOUT)


def check_run_exec_name(ml):
    """run: a program that execs another names the image that ran last when it exits."""
    r = subprocess.run([ml, "run", "--port", "0", "--exit-when-done", "--", "/bin/sh", "-c",
                        "exec python3 -c 'import time; time.sleep(1.5)'"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    check(r.returncode == 0 and "(/bin/sh, last image python3) exited with status 0" in r.stderr,
          "run: sh that execs python3 ends as python3 (%d: %s)" % (r.returncode,
                                                                   r.stderr.strip()[-200:]))


def check_run_sigpipe(ml):
    """run: the program starts with SIGPIPE's default action, as from a shell (an ignored one
    is inherited across exec: `yes | head -1` would then print 'Broken pipe')."""
    before = set(os.listdir("/dev/shm"))
    r = subprocess.run([ml, "run", "--port", "0", "--exit-when-done", "--", "/bin/sh", "-c",
                        "yes | head -1"], capture_output=True, text=True, timeout=TIMEOUT)
    # `yes`, killed by SIGPIPE, leaves its segment (as any killed process does): removed here.
    for name in set(os.listdir("/dev/shm")) - before:
        pid = name[len("livealloc."):]
        if name.startswith("livealloc.") and pid.isdigit() and not os.path.exists("/proc/" + pid):
            os.unlink(os.path.join("/dev/shm", name))
    # memlive's own lines are on stderr too: only the program's part counts.
    prog_err = "".join(ln for ln in r.stderr.splitlines(True) if not ln.startswith("memlive:"))
    check(r.returncode == 0 and "Broken pipe" not in prog_err and r.stdout == "y\n",
          "run: `yes | head -1` ends quietly, SIGPIPE at its default (%d: %r %s)" %
          (r.returncode, r.stdout[:40], prog_err.strip()[-200:]))


def check_run_stdout_own(ml):
    """run: memlive's own lines (the URL, the exit status, stopped) go to stderr, so the
    program's stdout is the program's alone (`memlive run -- prog > out.txt`)."""
    # `echo hello` may end before it publishes its segment (then "... nothing to serve"): either
    # way, stdout is the program's. The second one lives long enough to be served.
    for script, served in (("echo hello", None), ("echo hello; sleep 1", True)):
        r = subprocess.run([ml, "run", "--port", "0", "--exit-when-done", "--", "/bin/sh", "-c",
                            script], capture_output=True, text=True, timeout=TIMEOUT)
        check(r.returncode == 0 and r.stdout == "hello\n",
              "run: the stdout of sh -c %r is exactly its own 'hello' (%d: %r)" %
              (script, r.returncode, r.stdout[-200:]))
        mine = [ln for ln in r.stderr.splitlines() if ln.startswith("memlive:")]
        serving = [ln for ln in mine if re.match(
            r"memlive: serving process \d+ \(/bin/sh\) at http://127\.0\.0\.1:\d+/", ln)]
        if served or serving:
            ok = (len(serving) == 1 and mine[-1:] == ["memlive: stopped"] and
                  any(re.match(r"memlive: process \d+ \(\S+\) exited with status 0$", ln)
                      for ln in mine))
        else:
            ok = any(re.match(r"memlive: process \d+ \(/bin/sh\) exited with status 0 before "
                              r"memlive could read its telemetry; nothing to serve$", ln)
                     for ln in mine)
        check(ok, "run: for sh -c %r, memlive's lines (serving, the exit status, stopped) are "
              "on stderr (%r)" % (script, r.stderr[-300:]))


def start_run(ml, args, env=None):
    """`memlive run --port 0 ARGS` once it serves: the process and the program's pid (None if it
    never said, which is reported)."""
    p = subprocess.Popen([ml, "run", "--port", "0"] + args, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
                         env=env)
    m, lines = read_until(p, r"^memlive: serving process (\d+) ", stream="stderr")
    check(m, "memlive run prints the URL (%s)" % lines)
    return p, int(m.group(1)) if m else None


def check_exec_unprofiled(ml):
    """A program that execs another without the library (LD_PRELOAD dropped): its old segment
    is stale while the pid runs on (the new image does not map it), and run removes it."""
    p, pid = start_run(ml, ["--exit-when-done", "--", "/bin/sh", "-c",
                            "exec env -u LD_PRELOAD sleep 3"])
    try:
        if pid is None:
            return
        line, deadline = "", time.time() + 5
        while time.time() < deadline and "without livealloc" not in line:
            time.sleep(0.2)
            out = subprocess.run([ml, "list"], capture_output=True, text=True,
                                 timeout=TIMEOUT).stdout
            line = next((ln for ln in out.splitlines() if ln.split()[:1] == [str(pid)]), "")
        check("stale: the process exec'd a program without livealloc" in line,
              "list: the segment of a pid that exec'd without the library is stale (%s)" % line)
        check(p.wait(timeout=TIMEOUT) == 0 and
              not os.path.exists("/dev/shm/livealloc.%d" % pid),
              "run: the program ends, its stale segment removed")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def cmd_run_killed(ml, target):
    """memlive run killed by SIGKILL: the program gets SIGTERM and does not run on unobserved."""
    env = dict(os.environ, LD_PRELOAD="")
    p, pid = start_run(ml, ["--", target], env)
    try:
        if pid is None:
            return
        p.kill()
        p.wait()
        deadline = time.time() + 5
        gone = False
        while time.time() < deadline and not gone:
            try:
                with open("/proc/%d/stat" % pid) as f:
                    gone = f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
            except OSError:
                gone = True
            time.sleep(0.05)
        check(gone, "memlive run killed by SIGKILL: the program (pid %d) ends too" % pid)
        if not gone:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)  # reaped by init meanwhile
        cli_test.forget_segment(pid)  # its SIGTERM left it
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()

    # Ctrl-C: memlive ends the program with SIGTERM, which leaves the program's segment; memlive
    # removes it once the program is reaped, and still serves the last state until it stops.
    p, pid = start_run(ml, ["--", target], env)
    try:
        if pid is None:
            return
        segment = "/dev/shm/livealloc.%d" % pid
        check(os.path.exists(segment), "run: the program publishes %s" % segment)
        p.send_signal(signal.SIGINT)
        rc = p.wait(timeout=TIMEOUT)
        check(rc == 128 + signal.SIGTERM and not os.path.exists(segment),
              "run: Ctrl-C ends the program by SIGTERM (exit %d) and removes its segment (%s)" %
              (rc, "left" if os.path.exists(segment) else "gone"))
        cli_test.forget_segment(pid)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def cmd_run(ml, target):
    # memlive's lines are on stderr, the program's ("target ready", "allocated") on stdout
    p, m, lines = run_url(ml, target, "--interval", "100", "--exit-when-done")
    try:
        if not check(m, "memlive run prints the URL (%s)" % lines):
            return
        pid, port = int(m.group(1)), int(m.group(2))
        st, _, snap = get_json(port, "/api/snapshot")
        check(st == 200 and snap and snap["pid"] == pid and snap["alive"] is True,
              "run: /api/snapshot of the running program, pid %d (%d)" % (pid, st))
        if snap:
            env_of = open("/proc/%d/environ" % pid, "rb").read().split(b"\0")
            check(b"LIVEALLOC_PROFILE=1" in env_of and
                  any(e.startswith(b"LD_PRELOAD=/") and e.endswith(b"/liblivealloc.so")
                      for e in env_of),
                  "run: the program has LIVEALLOC_PROFILE=1 and an absolute LD_PRELOAD")
        st, j = post_baseline(port)
        check(st == 200, "run: POST /api/baseline (%d)" % st)
        p.stdin.write("alloc 200 41\n")
        p.stdin.flush()
        m, lines = read_until(p, r"^allocated")
        check(m, "the program allocated (%s)" % lines)
        st, _, d = get_json(port, "/api/snapshot?since=baseline")
        if check(st == 200 and d, "run: snapshot?since=baseline (%d)" % st):
            cls = cli_test.class_of(200, d["class_sizes"])
            ia = d["counters"].index("allocs")
            total = sum(r[1 + ia] for t in d["threads"] for r in t["classes"] if r[0] == cls) + \
                sum(r[1 + ia] for r in d["exited"] if r[0] == cls)
            check(total == 41, "run: the program's 41 mallocs of 200 bytes seen since the "
                  "baseline (class %d: %d)" % (cls, total))
        time.sleep(0.5)
        st, _, h = get_json(port, "/api/history?seconds=1")
        check(st == 200 and isinstance(h, list) and len(h) >= 3,
              "run: /api/history has samples at 100 ms (%s)" % (len(h) if isinstance(h, list)
                                                                 else h))
        check_run_exec(p, port, pid, snap)
        p.stdin.write("exit 5\n")
        p.stdin.flush()
        rc = p.wait(timeout=TIMEOUT)
        out = p._ml_buf.decode() + p.stdout.read()
        err = getattr(p, "_ml_errbuf", b"").decode() + p.stderr.read()
        check(rc == 5 and "memlive: process %d (" % pid in err and
              "exited with status 5" in err and "memlive:" not in out,
              "run --exit-when-done: exits with the program's status 5 and says so on stderr, "
              "not in the program's stdout (%d %r %r)" % (rc, err, out))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            refused = False
        except OSError:
            refused = True
        check(refused, "run --exit-when-done: no longer serving")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()

    # Without --exit-when-done: the last state stays served until SIGTERM; exit = the status.
    p, m, lines = run_url(ml, target)
    try:
        if check(m, "memlive run (no --exit-when-done) prints the URL"):
            port = int(m.group(2))
            p.stdin.write("exit 4\n")
            p.stdin.flush()
            m2, lines = read_until(p, r"still serving its last state", stream="stderr")
            check(m2 and any("exited with status 4" in ln for ln in lines),
                  "run: reports the exit (status 4) and keeps serving (%s)" % lines)
            st, _, snap = get_json(port, "/api/snapshot")
            check(st == 200 and snap and snap["alive"] is False,
                  "run: the last state is served after the exit (%d)" % st)
            states = [t["state"] for t in (snap or {}).get("threads", [])]
            check("ended" in states and "alive" not in states,
                  "run: no thread of the exited program alive, its main thread ended (%s)" %
                  states)
            p.send_signal(signal.SIGTERM)
            rc = p.wait(timeout=TIMEOUT)
            check(rc == 4, "run: SIGTERM ends it with the program's status 4 (got %d)" % rc)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()

    r = subprocess.run([ml, "run", "--port", "0", "--", "/nonexistent/program-xyz"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    check(r.returncode == 127 and "not found" in r.stderr,
          "run of a missing program: exit 127, 'not found' (got %d: %s)" %
          (r.returncode, r.stderr.strip()))
    r = subprocess.run([ml, "run", "--port", "0", "--", "no-such-program-xyz"],
                       capture_output=True, text=True, timeout=TIMEOUT)
    check(r.returncode == 127 and "not found" in r.stderr,
          "run of a program not on PATH: exit 127 (got %d)" % r.returncode)

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    tport = taken.getsockname()[1]
    marker = "memlive-run-marker-%d" % os.getpid()
    try:
        r = subprocess.run([ml, "run", "--port", str(tport), "--", "/bin/sh", "-c",
                            "sleep 30 # " + marker], capture_output=True, text=True,
                           timeout=TIMEOUT)
        check(r.returncode == 8 and "in use" in r.stderr,
              "run on a taken port: exit 8, 'in use' (got %d: %s)" % (r.returncode,
                                                                    r.stderr.strip()))
        left = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    if marker.encode() in open("/proc/%s/cmdline" % d, "rb").read():
                        left.append(d)
                except OSError:
                    pass
        check(not left, "run on a taken port: the program is not left running (%s)" % left)
    finally:
        taken.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memlive", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--app", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--no-preload", action="store_true",
                    help="no liblivealloc.so in this build (sanitizers): run's error cases only")
    ap.add_argument("what", choices=["inprocess", "serve", "run"])
    a = ap.parse_args()
    if a.what == "inprocess":
        cmd_inprocess(a.app)
        check_late_use(a.app)
        check_enable_only_late(a.app)
    elif a.what == "run":
        check_run_unmapped(a.memlive)
        if a.no_preload:
            cmd_run_errors(a.memlive)
        else:
            cmd_run(a.memlive, a.target)
            cmd_run_killed(a.memlive, a.target)
            check_run_exec_name(a.memlive)
            check_run_exec_healthz(a.memlive, a.target)
            check_run_sigpipe(a.memlive)
            check_run_stdout_own(a.memlive)
            check_exec_unprofiled(a.memlive)
    else:
        cmd_serve(a.memlive, a.workload)
        check_serve_history(a.memlive, a.workload)
        check_serve_reader_gone(a.memlive, a.workload)
    if failures:
        print("\n%d check(s) failed:" % len(failures))
        for f in failures:
            print("  " + f)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
