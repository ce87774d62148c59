#!/usr/bin/python3
"""memlive's capture hooks and its own threads, with a real server and a real client.

    hooks_test.py --app PATH [--memlive PATH] [--preload LIB] hooks|global_new|labels

hooks:      memlive_hooks_app (no livealloc as malloc) calls memlive::on_alloc/on_free from
            named threads with known sizes and counts (also large blocks, class boundaries, a
            free on another thread than the allocation, threads that exit and whose slots are
            taken over); /api/snapshot, /metrics, one /api/stream event and the in-process
            take_snapshot() must show exactly what this script's own model of those counts says,
            per thread and class, and in the process totals; memlive's threads take no slot.
global_new: memlive_hooks_new_app (MEMLIVE_COUNT_GLOBAL_NEW): every form of new/delete, counted
            in the class of the block's usable size (the app reports it); the worker threads'
            rows exactly; the server's threads, busy with requests, counted nowhere. With
            --preload LIB the app runs with LD_PRELOAD=LIB, another malloc (gperftools'
            tcmalloc, whose malloc_usable_size allocates with new on its first call).
labels:     memlive_hooks_label_app (livealloc as malloc, so memlive's threads allocate through
            livealloc and take slots): memlive's threads come out "memlive": true, a program
            thread that calls itself memlive-http does not; Prometheus carries memlive="true" on
            the same threads; the labels survive stop() and a second start(); `memlive snapshot
            --pid` (another process: by name) labels memlive-hist too.
Every failed check is printed; the exit code is 1 if any failed.
"""
import argparse
import http.client
import json
import os
import re
import select
import socket
import subprocess
import sys
import time

TIMEOUT = 10
NCOUNTERS = 16
ALLOCS, FREES, REQUESTED, ADOPTED, HANDED_OVER, PEAK = 0, 1, 2, 6, 13, 14
failures = []


def check(ok, what):
    if not ok:
        print("FAIL: " + what, flush=True)
        failures.append(what)
    return ok


class App:
    """The test program, one command line at a time."""

    def __init__(self, path, preload=None):
        env = dict(os.environ, LD_PRELOAD=preload) if preload else None
        self.p = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, bufsize=1, env=env)

    def cmd(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        ready, _, _ = select.select([self.p.stdout], [], [], TIMEOUT)
        out = self.p.stdout.readline().rstrip("\n") if ready else ""
        if not out.startswith("ok"):
            raise RuntimeError("app: %r -> %r" % (line, out))
        return dict(re.findall(r"(\w+)=(\S+)", out)) if not out.startswith("ok {") else out[3:]

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.flush()
            code = self.p.wait(timeout=TIMEOUT)
        except (subprocess.TimeoutExpired, BrokenPipeError):
            self.p.kill()
            code = self.p.wait()
        check(code == 0, "the app exits 0 (got %s)" % code)


def request(port, path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        c.request("GET", path, headers={"Host": "127.0.0.1:%d" % port})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def snapshot(port):
    st, body = request(port, "/api/snapshot")
    check(st == 200, "/api/snapshot: 200 (got %d)" % st)
    return json.loads(body)


def stream_event(port):
    """The second event of /api/stream, parsed. The first may be the sample of the tick in
    progress, which the sampler can have built before the last command; the second is built at
    or after its tick, which comes after this request."""
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    try:
        s.sendall(b"GET /api/stream?interval_ms=50 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % port)
        buf = b""
        while True:
            events = [e for e in buf.split(b"\n\n")[:-1] if e.startswith(b"data: ")]
            if len(events) >= 2:
                return json.loads(events[1][6:])
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("/api/stream: closed before the second event")
            buf += chunk
    finally:
        s.close()


class Model:
    """What the telemetry must show: livealloc's slot rules applied to the hooked counts."""

    def __init__(self, class_sizes):
        self.sizes = class_sizes
        self.slot_of = {}   # thread name -> its slot's counters {cls: [16]}
        self.pool = []      # slots of exited threads, the last one pushed is taken first
        self.exited = {}    # cls -> [16]
        self.large = 0      # process.large_bytes

    def cls(self, block):
        if block > self.sizes[-1]:
            return 0
        return next(c for c in range(1, len(self.sizes)) if self.sizes[c] >= block)

    def slot(self, name):
        if name not in self.slot_of:  # the thread's first counted call takes a slot
            slot = self.pool.pop() if self.pool else {}
            for c, k in slot.items():  # livealloc's slot_fold
                x = self.exited.setdefault(c, [0] * NCOUNTERS)
                live = k[ALLOCS] + k[ADOPTED] - k[FREES]
                for i in (ALLOCS, ADOPTED, FREES, REQUESTED):
                    x[i] += k[i]
                live = max(live, 0)  # a deficit stays in the exited totals
                k[ALLOCS] = k[FREES] = k[REQUESTED] = 0
                k[ADOPTED] = k[PEAK] = live  # the new thread's peak starts at what it inherits
                x[HANDED_OVER] += live
            self.slot_of[name] = slot
        return self.slot_of[name]

    def row(self, name, block):
        return self.slot(name).setdefault(self.cls(block), [0] * NCOUNTERS)

    def alloc(self, name, requested, block, n):
        k = self.row(name, block)
        k[ALLOCS] += n
        k[REQUESTED] += requested * n
        k[PEAK] = max(k[PEAK], k[ALLOCS] + k[ADOPTED] - k[FREES])
        if self.cls(block) == 0:
            self.large += block * n

    def free(self, name, block, n):
        self.row(name, block)[FREES] += n
        if self.cls(block) == 0:
            self.large -= block * n

    def exit(self, name):
        if name in self.slot_of:
            self.pool.append(self.slot_of.pop(name))

    def rows(self, name):
        return {c: k for c, k in self.slot_of[name].items() if any(k)}


def rows_of(classes):
    return {r[0]: r[1:] for r in classes}


def check_rows(snap, model, names, where):
    by_name = {t["name"]: t for t in snap["threads"]}
    for name in names:
        t = by_name.get(name)
        if not check(t is not None, "%s: thread %s present" % (where, name)):
            continue
        got = rows_of(t["classes"])
        want = model.rows(name)
        check(sorted(got) == sorted(want), "%s: %s classes %s (want %s)" %
              (where, name, sorted(got), sorted(want)))
        for c in want:
            check(got.get(c) == want[c], "%s: %s class %d: %s (want %s)" %
                  (where, name, c, got.get(c), want[c]))
        check(t["memlive"] is False, "%s: %s is not memlive's" % (where, name))


def check_exited(snap, model, where):
    got = rows_of(snap["exited"])
    want = {c: k for c, k in model.exited.items() if any(k)}
    check(got == want, "%s: exited totals %s (want %s)" % (where, got, want))


def check_no_memlive_threads(snap, where):
    own = [(t["name"], t["tid"]) for t in snap["threads"]
           if t["memlive"] or t["name"].startswith("memlive-")]
    check(not own, "%s: memlive's threads are not counted (got %s)" % (where, own))


def metric_values(text, name):
    """{(thread, class): value} of one family's per-thread rows."""
    out = {}
    for m in re.finditer(r'^%s\{([^}]*)\} (\d+)$' % name, text, re.M):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if "class" in labels:
            out[(labels["thread"], int(labels["class"]))] = int(m.group(2))
    return out


def run_hooks(app_path):
    app = App(app_path)
    try:
        tids = {}
        m = None
        ops = []  # applied to the model once the class sizes are known

        def thread(name):
            tids[name] = int(app.cmd("thread " + name)["tid"])

        def alloc(name, size, n):
            app.cmd("on %s alloc hook %d %d" % (name, size, n))
            ops.append(("alloc", name, size, n))

        def free(name, size, n):
            app.cmd("on %s free hook %d %d" % (name, size, n))
            ops.append(("free", name, size, n))

        def give(name, size, n, to):
            app.cmd("on %s give hook %d %d %s" % (name, size, n, to))

        def exit_(name):
            app.cmd("exit " + name)
            ops.append(("exit", name, 0, 0))

        def apply():
            for op, name, size, n in ops:
                if op == "alloc":
                    m.alloc(name, size, size, n)
                elif op == "free":
                    m.free(name, size, n)
                else:
                    m.exit(name)
            ops.clear()

        # Before the server: counts from before memlive::start() are kept.
        thread("hk-alpha")
        alloc("hk-alpha", 24, 100)
        free("hk-alpha", 24, 40)
        alloc("hk-alpha", 100, 10)
        alloc("hk-alpha", 300000, 2)   # class 0: large
        free("hk-alpha", 300000, 1)
        thread("hk-beta")
        alloc("hk-beta", 1000, 7)
        alloc("hk-beta", 262144, 3)    # the largest small class
        alloc("hk-beta", 262145, 1)    # one byte more: class 0
        alloc("hk-beta", 0, 2)         # size 0: the smallest class
        free("hk-beta", 1000, 7)
        alloc("hk-beta", 1000, 2)      # peak stays at 7
        thread("hk-prod")
        thread("hk-cons")
        alloc("hk-prod", 64, 50)
        give("hk-prod", 64, 20, "hk-cons")
        free("hk-cons", 64, 20)        # counted on the freeing thread: its live is -20

        r = app.cmd("start")
        port, pid = int(r["port"]), int(r["pid"])
        snap = snapshot(port)
        m = Model(snap["class_sizes"])
        apply()
        names = ["hk-alpha", "hk-beta", "hk-prod", "hk-cons"]
        check_rows(snap, m, names, "before start")
        check(snap["pid"] == pid, "snapshot of the app's pid")
        for t in snap["threads"]:
            if t["name"] in tids:
                check(t["tid"] == tids[t["name"]] and t["state"] == "alive",
                      "%s: tid %d alive (got %d %s)" % (t["name"], tids[t["name"]], t["tid"],
                                                        t["state"]))

        # After: a thread that exits, and the next one takes its slot (and its live blocks);
        # the thread with a deficit exits, and the next one adopts nothing.
        thread("hk-gone")
        alloc("hk-gone", 48, 10)
        free("hk-gone", 48, 4)
        exit_("hk-gone")
        thread("hk-next")
        alloc("hk-next", 48, 1)
        alloc("hk-next", 16, 3)
        exit_("hk-cons")
        thread("hk-after")
        alloc("hk-after", 64, 1)
        apply()
        names = ["hk-alpha", "hk-beta", "hk-prod", "hk-next", "hk-after"]
        check(m.rows("hk-next")[m.cls(48)][ADOPTED] == 6, "model: hk-next adopts 6 blocks")
        check(m.rows("hk-after")[m.cls(64)][ADOPTED] == 0, "model: hk-after adopts nothing")

        # Requests that make memlive's threads allocate (they must not be counted).
        for path in ("/api/snapshot", "/metrics", "/api/history", "/healthz", "/"):
            request(port, path)
        snap = snapshot(port)
        check_rows(snap, m, names, "/api/snapshot")
        check_exited(snap, m, "/api/snapshot")
        check_no_memlive_threads(snap, "/api/snapshot")
        check(not any(t["name"] in ("hk-gone", "hk-cons") for t in snap["threads"]),
              "the exited threads' slots belong to hk-next and hk-after now")
        live_blocks, live_bytes = 0, m.large
        for c in range(len(m.sizes)):
            total = sum(s.get(c, [0] * NCOUNTERS)[ALLOCS] + s.get(c, [0] * NCOUNTERS)[ADOPTED] -
                        s.get(c, [0] * NCOUNTERS)[FREES] - s.get(c, [0] * NCOUNTERS)[HANDED_OVER]
                        for s in list(m.slot_of.values()) + m.pool + [m.exited])
            live_blocks += total
            live_bytes += total * m.sizes[c] if c else 0
        p = snap["process"]
        check(p["large_bytes"] == m.large, "process.large_bytes %d (want %d)" %
              (p["large_bytes"], m.large))
        check(p["live_blocks"] == live_blocks, "process.live_blocks %d (want %d)" %
              (p["live_blocks"], live_blocks))
        check(p["live_bytes"] == live_bytes, "process.live_bytes %d (want %d)" %
              (p["live_bytes"], live_bytes))
        check(p["slots_used"] == 5, "slots_used 5: hk-next and hk-after reuse slots (got %d)"
              % p["slots_used"])

        # The same numbers through the other outputs.
        check_rows(stream_event(port), m, names, "/api/stream")
        check_rows(json.loads(app.cmd("json")), m, names, "take_snapshot()")
        st, body = request(port, "/metrics")
        text = body.decode()
        check(st == 200 and 'memlive="true"' not in text, "/metrics: 200, no memlive thread")
        for family, idx in (("livealloc_allocs_total", ALLOCS), ("livealloc_frees_total", FREES),
                            ("livealloc_requested_bytes_total", REQUESTED),
                            ("livealloc_peak_live", PEAK)):
            got = metric_values(text, family)
            for name in names:
                for c, k in m.rows(name).items():
                    check(got.get((name, c)) == k[idx], "/metrics %s{thread=%s,class=%d} %s "
                          "(want %d)" % (family, name, c, got.get((name, c)), k[idx]))
        lb = re.search(r'^livealloc_large_bytes\{[^}]*\} (\d+)$', text, re.M)
        check(lb and int(lb.group(1)) == m.large, "/metrics livealloc_large_bytes")

        # on_free of a block the hooks never saw allocated: large_bytes went below 0 and read
        # about 16 EiB (live_bytes too); it stops at 0. (Last: the model no longer holds.)
        app.cmd("stray %d" % (m.large + (1 << 30)))
        p = json.loads(app.cmd("json"))["process"]
        check(p["large_bytes"] == 0 and p["live_bytes"] < 1 << 40,
              "an on_free with no on_alloc: large_bytes stops at 0 (got %d, live_bytes %d)" %
              (p["large_bytes"], p["live_bytes"]))

        ns = float(app.cmd("bench 2000000")["ns"])
        print("hooks: on_alloc + on_free, 64 bytes: %.2f ns per pair" % ns)
    finally:
        app.close()


def run_global_new(app_path, preload=None):
    app = App(app_path, preload)
    try:
        plan = []  # (name, "alloc" or "free", size, usable, n)
        held = {}  # (name, kind, size): the usable sizes of the blocks it holds, in order

        def op(name, what, kind, size, n, to=None):
            r = app.cmd("on %s %s %s %d %d%s" % (name, what, kind, size, n,
                                                 " " + to if to else ""))
            blocks = held.setdefault((name, kind, size), [])
            if what == "alloc":  # the app reports the first block's usable size
                blocks.extend([int(r["usable"])] * n)
                plan.append((name, what, size, int(r["usable"]), n))
                return
            taken = blocks[:n]  # the app frees and gives the first n it holds, in order
            del blocks[:n]
            if what == "free":
                plan.extend((name, what, size, u, 1) for u in taken)
            else:
                held.setdefault((to, kind, size), []).extend(taken)

        names = ["gn-new", "gn-array", "gn-align", "gn-nothrow", "gn-big", "gn-forms"]
        for name in names:
            app.cmd("thread " + name)
        op("gn-new", "alloc", "new", 40, 30)        # sized delete
        op("gn-new", "free", "new", 40, 10)
        op("gn-new", "alloc", "new", 0, 3)          # new of 0 bytes
        op("gn-array", "alloc", "array", 200, 12)   # unsized delete[]
        op("gn-array", "free", "array", 200, 5)
        op("gn-align", "alloc", "aligned", 100, 8)  # align_val_t 64
        op("gn-align", "free", "aligned", 100, 8)
        op("gn-nothrow", "alloc", "nothrow", 5000, 4)
        op("gn-nothrow", "free", "nothrow", 5000, 1)
        op("gn-big", "alloc", "new", 300000, 2)     # large: class 0
        op("gn-big", "free", "new", 300000, 1)
        # The other replaceable forms (the kinds of hooks_app.cpp), one block at a time: the
        # usable size of an aligned block can differ from one block to the next (glibc).
        for kind, size in (("delete_nothrow", 24), ("array_nothrow", 72), ("array_sized", 130),
                           ("array_aligned", 260), ("aligned_nothrow", 700),
                           ("array_aligned_nothrow", 1500), ("aligned_sized", 3000),
                           ("array_aligned_sized", 9000), ("array_aligned_sized", 300000)):
            for _ in range(3):
                op("gn-forms", "alloc", kind, size, 1)
            op("gn-forms", "free", kind, size, 2)
        op("gn-new", "give", "new", 40, 5, "gn-array")
        op("gn-array", "free", "new", 40, 5)        # freed on another thread
        r = app.cmd("start")
        port = int(r["port"])
        for path in ("/api/snapshot", "/metrics", "/api/history", "/healthz", "/", "/nope"):
            request(port, path)  # memlive's threads allocate with new: not counted
        stream_event(port)
        snap = snapshot(port)
        m = Model(snap["class_sizes"])
        for name, what, size, usable, n in plan:
            if what == "alloc":
                m.alloc(name, size, usable, n)
            else:
                m.free(name, usable, n)
        check_rows(snap, m, names, "global new")
        check_no_memlive_threads(snap, "global new")
        check(snap["process"]["large_bytes"] == m.large, "global new: large_bytes %d (want %d)" %
              (snap["process"]["large_bytes"], m.large))
        main = [t for t in snap["threads"] if t["tid"] == snap["pid"]]
        print("global_new: main thread rows (its own new/delete, not checked): %s" %
              (main[0]["classes"] if main else "none"))
        # More requests, a stop and a start: still nothing counted for memlive.
        for _ in range(5):
            request(port, "/api/snapshot")
        app.cmd("stop")
        port = int(app.cmd("start")["port"])
        request(port, "/metrics")
        snap = snapshot(port)
        check_rows(snap, m, names, "global new, after stop/start")
        check_no_memlive_threads(snap, "global new, after stop/start")
    finally:
        app.close()


def check_labels(snap, impostor, where, require=("memlive-hist", "memlive-http")):
    own = [t for t in snap["threads"] if t["memlive"]]
    names = {t["name"] for t in own}
    check(own and set(require) <= names, "%s: %s threads labelled (got %s)" %
          (where, " and ".join(require) or "memlive's", sorted(names)))
    check(names <= {"memlive-http", "memlive-hist"},
          "%s: only memlive's names labelled (got %s)" % (where, sorted(names)))
    imp = [t for t in snap["threads"] if t["tid"] == impostor]
    check(len(imp) == 1 and imp[0]["name"] == "memlive-http" and imp[0]["memlive"] is False,
          "%s: the program's own thread named memlive-http is not memlive's (got %s)" %
          (where, [(t["name"], t["memlive"]) for t in imp]))
    main = [t for t in snap["threads"] if t["tid"] == snap["pid"]]
    check(len(main) == 1 and main[0]["memlive"] is False,
          "%s: the main thread is not memlive's" % where)
    check(all(t["memlive"] is False for t in snap["threads"] if t["state"] == "overflow"),
          "%s: the overflow slot is not memlive's" % where)
    return own


def run_labels(app_path, memlive):
    app = App(app_path)
    try:
        impostor = int(app.cmd("thread memlive-http")["tid"])
        app.cmd("on memlive-http alloc malloc 100 5")
        r = app.cmd("start")
        port, pid = int(r["port"]), int(r["pid"])
        for path in ("/api/snapshot", "/metrics", "/healthz", "/"):
            request(port, path)
        time.sleep(0.2)  # the sampler (memlive-hist) has taken samples through livealloc
        snap = snapshot(port)
        own = check_labels(snap, impostor, "/api/snapshot")
        st, body = request(port, "/metrics")
        text = body.decode()
        labelled = set(re.findall(r'thread="([^"]*)",tid="(\d+)",slot="\d+",memlive="true"', text))
        want = {(t["name"], str(t["tid"])) for t in own}
        check(st == 200 and labelled == want, "/metrics: memlive=\"true\" on exactly memlive's "
              "threads (got %s, want %s)" % (sorted(labelled), sorted(want)))
        check('tid="%d",slot' % impostor in text and
              not re.search(r'tid="%d",slot="\d+",memlive' % impostor, text),
              "/metrics: the impostor has no memlive label")
        if memlive:
            r = subprocess.run([memlive, "snapshot", "--pid", str(pid)], capture_output=True,
                               text=True, timeout=TIMEOUT)
            outside = json.loads(r.stdout) if r.returncode == 0 else {"threads": []}
            hist = [t for t in outside["threads"] if t["name"] == "memlive-hist"]
            check(hist and all(t["memlive"] for t in hist),
                  "memlive snapshot --pid (another process): memlive-hist labelled by name")
        app.cmd("stop")
        after = json.loads(app.cmd("json"))
        old = {t["tid"] for t in own}
        stopped = [t for t in after["threads"] if t["tid"] in old]
        check(stopped and all(t["memlive"] and t["state"] == "exited" for t in stopped),
              "after stop(): memlive's exited threads still labelled (got %s)" %
              [(t["name"], t["state"], t["memlive"]) for t in stopped])
        check_labels(after, impostor, "take_snapshot() after stop()", require=())
        port = int(app.cmd("start")["port"])
        for path in ("/api/snapshot", "/metrics"):
            request(port, path)
        time.sleep(0.2)
        check_labels(snapshot(port), impostor, "after a second start()")
    finally:
        app.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--app", required=True)
    ap.add_argument("--memlive")
    ap.add_argument("--preload")
    ap.add_argument("mode", choices=["hooks", "global_new", "labels"])
    a = ap.parse_args()
    try:
        {"hooks": lambda: run_hooks(a.app), "global_new": lambda: run_global_new(a.app, a.preload),
         "labels": lambda: run_labels(a.app, a.memlive)}[a.mode]()
    except (RuntimeError, OSError, ValueError, KeyError, IndexError) as e:
        check(False, "%s: %s: %s" % (a.mode, type(e).__name__, e))
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all %s checks passed" % a.mode)
    return 0


if __name__ == "__main__":
    sys.exit(main())
