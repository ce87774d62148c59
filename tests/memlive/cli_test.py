#!/usr/bin/python3
"""The memlive command against a real workload (standard library only).

    cli_test.py --memlive PATH --workload PATH cli|check|permission|promtool

cli: starts memlive_workload (4 named threads with known allocations, telemetry enabled), then
checks `memlive list`, `snapshot` in json, csv and prometheus against the plan (exact counts
per thread name and size class), `tune` (valid: accepted and effective; invalid: refused, nothing
changed), `record` (--count, SIGINT, process exit), the error exit codes, `list --clean`, and that
the segment is gone once the workload exits.
check: `memlive check` on a real recording of the workload: budgets that hold and that do not
(exit 9, the worst value and its sample, as the file has them; per class exactly the plan's
blocks), stdin, a last line cut short, every bad budget (exit 2) and bad file (exit 6, the line),
fuzzed input; `record --budget`; last() and growth() on the running workload and on a recording
through an exec until the exit (a fall, samples without a value), recordings of two processes put
together (exit 6).
permission: what a user without the rights gets, exit 5 and one line saying why: a segment of
its own of mode 000, a directory it may not read or enter, port 80 for serve and run (which starts
nothing). Run as root, the checks run as nobody (setpriv), with root's workload too: its 0600
segment is unreadable to list, snapshot, tune, serve and record, said by snapshot --all and
named in a comment by serve --all; made 0644 it reads and serves but cannot be tuned (the POST
403, the option unchanged).
promtool: `promtool check metrics` accepts the prometheus output (skipped, exit 77, when
promtool is not on PATH: tests/setup.sh takes it out of Debian's `prometheus` package).
Every failed check is printed; the exit code is 1 if any failed.
"""
import argparse
import csv
import fcntl
import http.client
import io
import json
import mmap
import os
import random
import re
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

# name, size, count, frees: one thread per distinct name; names test escaping in every format.
PLAN = [
    ("alpha", 16, 1000, 0),
    ("alpha", 300000, 10, 4),  # large blocks: class 0
    ("beta", 100, 500, 100),
    ("beta", 5000, 7, 0),
    ('ga"m\\ma', 48, 250, 0),
    ("delta, x", 256, 123, 23),
    ("delta, x", 250, 5, 1),  # same class as 256: counts add up
]
TIMEOUT = 30
failures = []


def check(ok, what):
    if ok:
        print("ok    " + what)
    else:
        print("FAIL  " + what)
        failures.append(what)
    return ok


def run(args, **kw):
    kw.setdefault("timeout", TIMEOUT)
    return subprocess.run(args, capture_output=True, text=True, **kw)


def class_of(size, class_sizes):
    if size > max(class_sizes):
        return 0
    return min(k for k in range(1, len(class_sizes)) if class_sizes[k] >= size)


def expected(class_sizes):
    """{thread name: {class: {allocs, frees, requested_bytes, live}}} from PLAN."""
    out = {}
    for name, size, count, frees in PLAN:
        row = out.setdefault(name, {}).setdefault(
            class_of(size, class_sizes), {"allocs": 0, "frees": 0, "requested_bytes": 0})
        row["allocs"] += count
        row["frees"] += frees
        row["requested_bytes"] += size * count
    for classes in out.values():
        for row in classes.values():
            row["live"] = row["allocs"] - row["frees"]
    return out


def free_pid():
    with open("/proc/sys/kernel/pid_max") as f:
        pid = int(f.read()) - 1
    while pid > 1:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except PermissionError:
            pass
        pid -= 1
    raise RuntimeError("no free pid")


def forget_segment(pid):
    """A process the test killed leaves its segment (no exit handler ran): remove its name, so
    test runs do not fill /dev/shm. Only once the process is reaped: the pid is not reused yet."""
    try:
        os.unlink("/dev/shm/livealloc.%d" % pid)
    except FileNotFoundError:
        pass


class Workload:
    def __init__(self, path, env=None, plan=None):
        args = [path] + ["%s:%d:%d:%d" % p for p in (plan or PLAN)]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=dict(os.environ, **(env or {})))
        line = self.proc.stdout.readline()
        if not line.startswith("ready "):
            self.proc.kill()
            raise RuntimeError("workload did not start: %r" % line)
        self.pid = self.proc.pid

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        return self.proc.wait(timeout=TIMEOUT)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            forget_segment(self.pid)


def finish_record(p, out):
    """Waits for a `memlive record` process (killed when it hangs): its stderr and the lines it
    wrote to the file `out`."""
    try:
        _, err = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        err = "(hung)"
    return err, (open(out).read().splitlines() if os.path.exists(out) else [])


def terminate(p, timeout=TIMEOUT):
    """Ends a process a test started (http_test.py too): SIGTERM, a wait of `timeout` seconds,
    else SIGKILL. Its exit status."""
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        return p.wait()


def check_overflow_note(ml, wl):
    """More threads than slots: the threads without one share the overflow slot, and snapshot
    says so on stderr (the JSON alone shows one "overflow" thread)."""
    w = Workload(wl, env={"LIVEALLOC_TELEMETRY_SLOTS": "2"})  # one slot and the overflow slot
    try:
        r = run([ml, "snapshot", "--pid", str(w.pid)])
        snap = json.loads(r.stdout) if r.returncode == 0 else {}
        n = snap.get("process", {}).get("overflow_threads", 0)
        m = re.search(r"note: (\d+) thread heap\(s\) got no slot of their own: their threads share "
                      r"the overflow slot \(slot 1\).*LIVEALLOC_TELEMETRY_SLOTS \(now 2\)", r.stderr)
        check(r.returncode == 0 and n >= 2 and m is not None and int(m.group(1)) == n,
              "snapshot notes the %d heaps sharing the overflow slot (stderr: %s)" %
              (n, r.stderr.strip()))
        # list counted the threads of slots alone (1 here, for 5 running: 3000 threads read 255).
        alive = sum(1 for t in snap.get("threads", []) if t["state"] == "alive")
        line = listed(ml, w.pid) or ""
        f = line.split()
        check(len(f) > 2 and f[2] == "%d+" % alive and "at least" in run([ml, "list"]).stdout,
              "list: threads beyond the slots, '%d+' threads and a note (%s)" % (alive, line))
        check(w.stop() == 0, "the workload with 2 slots exits 0")
    finally:
        w.kill()


def snapshot_json(ml, pid):
    r = run([ml, "snapshot", "--pid", str(pid)])
    if not check(r.returncode == 0, "snapshot --pid exits 0 (stderr: %s)" % r.stderr.strip()):
        return None
    check("overflow slot" not in r.stderr, "snapshot: no overflow-slot note while every thread "
          "has a slot (stderr: %s)" % r.stderr.strip())
    try:
        return json.loads(r.stdout)
    except ValueError as e:
        check(False, "snapshot output is JSON (%s)" % e)
        return None


def threads_by_name(snap):
    out = {}
    for t in snap["threads"]:
        out.setdefault(t["name"], []).append(t)
    return out


def check_json(snap, want):
    check(snap["schema"] == "memlive.snapshot/1", "json: schema")
    check(len(snap["counters"]) == 16 and snap["counters"][0] == "allocs", "json: counter names")
    check(snap["process"]["resident_bytes"] > 0 and isinstance(snap["free_matrix"], list),
          "json: resident_bytes and free_matrix present")
    names = snap["counters"]
    by_name = threads_by_name(snap)
    for name, classes in want.items():
        ts = by_name.get(name, [])
        if not check(len(ts) == 1, "json: one thread named %r (found %d)" % (name, len(ts))):
            continue
        t = ts[0]
        check(t["state"] == "alive" and t["tid"] > 0, "json: %r alive with a tid" % name)
        got = {}
        for row in t["classes"]:
            check(len(row) == 17, "json: %r class row has 17 numbers" % name)
            v = dict(zip(names, row[1:]))
            if v["allocs"]:
                got[row[0]] = v
        check(sorted(got) == sorted(classes),
              "json: %r allocates in classes %s (got %s)" % (name, sorted(classes), sorted(got)))
        for cls, w in classes.items():
            v = got.get(cls, {})
            live = v.get("allocs", 0) + v.get("adopted", 0) - v.get("frees", 0) - \
                v.get("large_freed_by_others", 0) - v.get("handed_over", 0) - \
                v.get("foreign_allocs", 0)
            check(v.get("allocs") == w["allocs"] and v.get("frees") == w["frees"] and
                  v.get("requested_bytes") == w["requested_bytes"] and live == w["live"],
                  "json: %r class %d: allocs %d frees %d requested %d live %d (got %s %s %s %d)" %
                  (name, cls, w["allocs"], w["frees"], w["requested_bytes"], w["live"],
                   v.get("allocs"), v.get("frees"), v.get("requested_bytes"), live))


def check_csv(text, want, pid):
    rows = list(csv.reader(io.StringIO(text, newline="")))
    header = rows[0] if rows else []
    check(len(header) == 25 and header[:8] == ["taken_ns", "pid", "slot", "tid", "thread",
                                               "state", "class", "size"] and
          header[-1] == "live", "csv: header %s" % header[:8])
    ix = {h: i for i, h in enumerate(header)}
    check(all(len(r) == len(header) for r in rows), "csv: every row has %d fields" % len(header))
    got = {}
    for r in rows[1:]:
        if len(r) != len(header):
            continue
        check(r[ix["pid"]] == str(pid), "csv: pid column") if r is rows[1] else None
        if r[ix["thread"]] in want and int(r[ix["allocs"]]) > 0:
            got.setdefault(r[ix["thread"]], {})[int(r[ix["class"]])] = r
    for name, classes in want.items():
        g = got.get(name, {})
        check(sorted(g) == sorted(classes), "csv: %r classes %s (got %s)" %
              (name, sorted(classes), sorted(g)))
        for cls, w in classes.items():
            r = g.get(cls)
            check(r is not None and all(int(r[ix[k]]) == w[k] for k in
                                        ("allocs", "frees", "requested_bytes", "live")),
                  "csv: %r class %d counts %s" % (name, cls, w))


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*)\} (-?[0-9]+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')


def unescape(v):
    return re.sub(r'\\(.)', lambda m: {"n": "\n", "\\": "\\", '"': '"'}[m.group(1)], v)


def check_prometheus(text, want, pid):
    helps, types, got = [], [], {}
    bad = []
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helps.append(line.split(" ")[2])
        elif line.startswith("# TYPE "):
            types.append(line.split(" ")[2])
        else:
            m = SAMPLE.match(line)
            if not m:
                bad.append(line)
                continue
            labels = {k: unescape(v) for k, v in LABEL.findall(m.group(2))}
            if m.group(1) in ("livealloc_allocs_total", "livealloc_frees_total",
                              "livealloc_requested_bytes_total", "livealloc_live_blocks"):
                key = (labels.get("thread"), int(labels.get("class", -1)))
                got.setdefault(key, {})[m.group(1)] = int(m.group(3))
                if labels.get("pid") != str(pid):
                    bad.append(line)
    check(not bad, "prometheus: every sample line is well formed (bad: %s)" % bad[:3])
    check(len(helps) == len(set(helps)) and sorted(helps) == sorted(types),
          "prometheus: one HELP and one TYPE per family (%d families)" % len(types))
    for name, classes in want.items():
        for cls, w in classes.items():
            v = got.get((name, cls), {})
            check(v.get("livealloc_allocs_total") == w["allocs"] and
                  v.get("livealloc_frees_total") == w["frees"] and
                  v.get("livealloc_requested_bytes_total") == w["requested_bytes"] and
                  v.get("livealloc_live_blocks") == w["live"],
                  "prometheus: thread=%r class=%d %s (got %s)" % (name, cls, w, v))


def option(snap, name):
    return next(o for o in snap["options"] if o["name"] == name)


def check_young_process(ml, wl):
    # `LD_PRELOAD=... LIVEALLOC_PROFILE=1 prog & memlive snapshot --pid $!`: memlive asked before
    # the shell's child had exec'd the program and said it publishes no segment (half the time).
    # A process started a moment ago gets until 2 s after its start to publish.
    plan = ["%s:%d:%d:%d" % p for p in PLAN]
    p = subprocess.Popen(["sh", "-c", 'sleep 0.3; exec "$0" "$@"', wl] + plan,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        r = run([ml, "snapshot", "--pid", str(p.pid)])
        pid = json.loads(r.stdout).get("pid") if r.returncode == 0 else None
        check(pid == p.pid, "snapshot --pid of a process started a moment ago, before it "
              "published its segment, waits for it (exit %d: %s)" % (r.returncode,
                                                                     r.stderr.strip()))
    finally:
        p.kill()
        p.wait()
        forget_segment(p.pid)


def check_serve_gone(ml, wl):
    # A process killed with its segment left behind: serve shows its last state, marked gone.
    w = Workload(wl)
    pid = w.pid
    try:
        os.kill(pid, signal.SIGKILL)
        w.proc.wait()
        p = subprocess.Popen([ml, "serve", "--pid", str(pid), "--port", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline() + p.stderr.readline()
            m = re.search(r"at http://127\.0\.0\.1:(\d+)/", line)
            status, _, body = request(int(m.group(1)), "GET", "/api/snapshot") if m else (0, 0, b"")
            snap = json.loads(body) if status == 200 else {}
            check("is gone (stale segment): serving its last state" in line and
                  snap.get("pid") == pid and snap.get("alive") is False,
                  "serve --pid of a killed process serves its last state, marked gone (%s)" %
                  line.strip())
        finally:
            terminate(p)
    finally:
        forget_segment(pid)


def check_tune_gone(ml, wl):
    # A process that dies while tune waits for the allocator to validate: exit 3, not "pending".
    # It dies once tune has stored the value (the generation moved): tune waits 2 s from there,
    # and a fixed 0.5 s from tune's start to the kill once ran past that on a loaded machine.
    w = Workload(wl)
    try:
        os.kill(w.pid, signal.SIGSTOP)  # no slow path validates anything now

        def generation():
            r = run([ml, "snapshot", "--pid", str(w.pid)])
            try:
                return json.loads(r.stdout)["control"]["generation"] if r.returncode == 0 else None
            except (ValueError, KeyError):
                return None

        before = generation()
        p = subprocess.Popen([ml, "tune", "--pid", str(w.pid), "page_recycle=5"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + TIMEOUT
        while generation() == before and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        w.kill()
        out, err = p.communicate(timeout=TIMEOUT)
        check(p.returncode == 3 and "exited before it validated" in err,
              "tune of a process that dies meanwhile: exit 3 (got %d: %s%s)" %
              (p.returncode, out, err.strip()))
    finally:
        w.kill()


def check_tune(ml, pid):
    snap = snapshot_json(ml, pid)
    if not snap:
        return
    pr = option(snap, "page_recycle")
    rb = option(snap, "remote_batch")
    new_pr = pr["effective"] + 3 if pr["effective"] + 3 <= pr["max"] else pr["min"]
    new_rb = rb["effective"] + 5 if rb["effective"] + 5 <= rb["max"] else rb["min"]
    r = run([ml, "tune", "--pid", str(pid), "page_recycle=%d" % new_pr,
             "remote_batch=%d" % new_rb])
    check(r.returncode == 0, "tune valid: exit 0 (got %d: %s%s)" % (r.returncode, r.stdout, r.stderr))
    check("page_recycle = %d: accepted" % new_pr in r.stdout and
          "remote_batch = %d: accepted" % new_rb in r.stdout, "tune valid: both accepted: %r" % r.stdout)
    check("next slow path" in r.stdout, "tune: says threads apply it at their next slow path")
    after = snapshot_json(ml, pid)
    if after:
        check(option(after, "page_recycle")["effective"] == new_pr and
              option(after, "remote_batch")["effective"] == new_rb,
              "tune valid: the next snapshot shows the effective values")

    def refused(args, code, says, what):
        before = snapshot_json(ml, pid)
        r = run([ml, "tune", "--pid", str(pid)] + args)
        check(r.returncode == code and says in r.stderr and "nothing applied" in r.stderr,
              "tune %s: exit %d naming %r, nothing applied (got %d: %s)" %
              (what, code, says, r.returncode, r.stderr.strip()))
        after = snapshot_json(ml, pid)
        if before and after:
            check(after["control"]["generation"] == before["control"]["generation"] and
                  after["options"] == before["options"], "tune %s: options unchanged" % what)

    refused(["page_recycle=99999"], 7, "page_recycle", "out of range")
    refused(["remote_batch=7", "nosuch=1"], 7, "nosuch", "valid + unknown")
    refused(["telemetry_slots=8"], 7, "telemetry_slots", "not live")
    refused(["remote_batch=7", "page_recycle=abc"], 2, "page_recycle", "not a number")
    refused(["page_recycle"], 2, "page_recycle", "without =")
    refused(["page_recycle=8.5"], 2, "not a whole number", "with a fraction")
    refused(["page_recycle=1e30"], 7, "out of range", "past 64 bits as a float")

    # Whole numbers written as POST /api/options takes them (8.0, 1e3), after "--".
    r = run([ml, "tune", "--pid", str(pid), "--", "page_recycle=%d.0" % pr["effective"],
             "remote_batch=%de0" % rb["effective"]])
    check(r.returncode == 0 and "page_recycle = %d: accepted" % pr["effective"] in r.stdout and
          "remote_batch = %d: accepted" % rb["effective"] in r.stdout,
          "tune -- 8.0 and 32e0: accepted as whole numbers (got %d: %s%s)" %
          (r.returncode, r.stdout, r.stderr))


def check_record(ml, pid, tmp):
    out = os.path.join(tmp, "rec.jsonl")
    r = run([ml, "record", "--pid", str(pid), "--interval", "20", "--out", out, "--count", "3"])
    check(r.returncode == 0, "record --count 3: exit 0 (%s)" % r.stderr.strip())
    lines = open(out).read().splitlines() if os.path.exists(out) else []
    check(len(lines) == 3, "record --count 3: 3 lines (got %d)" % len(lines))
    try:
        samples = [json.loads(l) for l in lines]
        check(all(s["pid"] == pid and s["schema"] == "memlive.snapshot/1" for s in samples) and
              all(a["taken_ns"] < b["taken_ns"] for a, b in zip(samples, samples[1:])),
              "record: every line a snapshot of the pid, in time order")
    except ValueError as e:
        check(False, "record: lines are JSON (%s)" % e)
    check_record_into_segment(ml, pid, tmp)
    # An existing file is replaced (truncated once it is known to be no segment).
    with open(out, "w") as f:
        f.write("x" * 100000 + "\n")
    r = run([ml, "record", "--pid", str(pid), "--interval", "20", "--out", out, "--count", "1"])
    lines = open(out).read().splitlines()
    check(r.returncode == 0 and len(lines) == 1 and json.loads(lines[0])["pid"] == pid,
          "record replaces an existing --out file (%d, %d lines)" % (r.returncode, len(lines)))

    # --duration: it stops by itself, and not before: the last sample is taken within one
    # interval of the end (a lower bound only; a loaded host spaces samples further apart).
    out_d = os.path.join(tmp, "rec_duration.jsonl")
    p = subprocess.Popen([ml, "record", "--pid", str(pid), "--interval", "200", "--out", out_d,
                          "--duration", "1"], stderr=subprocess.PIPE, text=True)
    err, lines = finish_record(p, out_d)
    try:
        taken = [json.loads(l)["taken_ns"] for l in lines]
    except ValueError:
        taken = []
    span_ms = (taken[-1] - taken[0]) / 1e6 if len(taken) >= 2 else 0
    check(p.returncode == 0 and "(done)" in err and len(taken) >= 2 and span_ms >= 700,
          "record --duration 1 --interval 200: stops by itself, exit 0, samples over at least "
          "0.7 s (got %s, %d samples over %.0f ms: %s)" % (p.returncode, len(taken), span_ms,
                                                         err.strip()))

    out2 = os.path.join(tmp, "rec2.jsonl")
    p = subprocess.Popen([ml, "record", "--pid", str(pid), "--interval", "50", "--out", out2],
                         stderr=subprocess.PIPE, text=True)
    time.sleep(0.4)
    p.send_signal(signal.SIGINT)
    err, lines = finish_record(p, out2)
    ok = len(lines) >= 2
    try:
        [json.loads(l) for l in lines]
    except ValueError:
        ok = False
    check(p.returncode == 0 and ok and "stopped by a signal" in err,
          "record + SIGINT: exit 0, %d complete JSON lines, says so (%s)" % (len(lines), err.strip()))

    # A record held up (SIGSTOP here; a debugger, a slow disk) skips the ticks it
    # missed: it took them all at once when it went on (3 s stopped at 100 ms: 30 samples in a
    # burst). After the longest gap, a second holds at most its 10 ticks and one more (load only
    # spaces samples further apart).
    out_stall = os.path.join(tmp, "rec_stall.jsonl")
    p = subprocess.Popen([ml, "record", "--pid", str(pid), "--interval", "100", "--out",
                          out_stall], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + TIMEOUT
    while p.poll() is None and time.monotonic() < deadline and (
            not os.path.exists(out_stall) or open(out_stall).read().count("\n") < 2):
        time.sleep(0.05)
    p.send_signal(signal.SIGSTOP)
    time.sleep(3)
    p.send_signal(signal.SIGCONT)
    time.sleep(1.5)
    p.send_signal(signal.SIGTERM)
    err, lines = finish_record(p, out_stall)
    taken = [json.loads(l)["taken_ns"] for l in lines]
    gaps = [b - a for a, b in zip(taken, taken[1:])]
    after = taken[gaps.index(max(gaps)) + 1:] if gaps else []
    burst = sum(1 for t in after if t - after[0] < 1000000000)
    check(p.returncode == 0 and max(gaps or [0]) >= 2000000000 and 1 <= burst <= 11,
          "record held up 3 s at --interval 100: no burst of the missed samples when it goes on "
          "(%d samples in the second after, %d in all: %s)" % (burst, len(taken), err.strip()))

    # A file size limit (as a full disk would) stops it mid-line: an error, exit 1, and the file
    # keeps only whole lines.
    size = len(open(out, "rb").read().splitlines()[0]) + 1
    limit = size * 5 // 2  # two lines and a half
    out3 = os.path.join(tmp, "rec3.jsonl")

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    r = subprocess.run([ml, "record", "--pid", str(pid), "--interval", "10", "--out", out3,
                        "--count", "10"], capture_output=True, text=True, timeout=TIMEOUT,
                       preexec_fn=limited)
    data = open(out3, "rb").read() if os.path.exists(out3) else b""
    try:
        whole = all(json.loads(l)["pid"] == pid for l in data.splitlines())
    except ValueError:
        whole = False
    check(r.returncode == 1 and "File too large" in r.stderr and "partial last line" in r.stderr
          and whole and data.endswith(b"\n") and 1 <= data.count(b"\n") <= 3,
          "record past a file size limit: exit 1, says why, the file ends on a whole line "
          "(%d, %d lines of %d bytes: %s)" % (r.returncode, data.count(b"\n"), len(data),
                                              r.stderr.strip()))


def check_record_into_segment(ml, pid, tmp):
    """record --out naming a segment (the process's own, by its name or a link, another
    livealloc.* of the directory, or stdout open on one) is refused with exit 2, and the file
    is left whole: opened with O_TRUNC, it was cut to 0 bytes under the process's mapping, and
    the process died by SIGBUS. On a copy of the segment (--dir), the lock held as the allocator
    holds it, so that the copy reads as the running process's."""
    d, path = fake_segment(pid, tmp, "record-into")
    other = os.path.join(d, "livealloc.1")
    shutil.copyfile(path, other)
    link = os.path.join(tmp, "record-into-link.jsonl")
    os.link(path, link)
    size = os.path.getsize(path)
    fake = FakeValidator(path)
    try:
        for out, says in ((path, path), (link, path), (other, other)):
            r = run([ml, "record", "--pid", str(pid), "--dir", d, "--interval", "10",
                     "--count", "1", "--out", out])
            lines = r.stderr.splitlines()
            check(r.returncode == 2 and len(lines) == 1 and
                  lines[0].startswith("memlive: record: --out %s is the telemetry segment %s: "
                                      % (out, says)) and
                  os.path.getsize(path) == size and os.path.getsize(other) == size,
                  "record --out %s: refused, exit 2, the segment left whole (got %d, %d bytes: "
                  "%s)" % (out, r.returncode, os.path.getsize(path), r.stderr.strip()))
        with open(path, "ab") as f:
            r = subprocess.run([ml, "record", "--pid", str(pid), "--dir", d, "--interval",
                                "10", "--count", "1", "--out", "-"], stdout=f,
                               stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)
        check(r.returncode == 2 and r.stderr.startswith(
                  "memlive: record: stdout is the telemetry segment %s: " % path) and
              os.path.getsize(path) == size,
              "record --out - with stdout on the segment: refused, exit 2 (got %d: %s)"
              % (r.returncode, r.stderr.strip()))
    finally:
        fake.close()


# ---- tune: concurrent writers, name=default, out-of-range values, the options in --help ----

def fake_segment(pid, tmp, name):
    """A copy of process `pid`'s segment in a directory of its own, for `memlive tune --dir`: the
    process is alive but never validates the copy, the test does (FakeValidator)."""
    d = os.path.join(tmp, name)
    os.mkdir(d)
    path = os.path.join(d, "livealloc.%d" % pid)
    shutil.copyfile("/dev/shm/livealloc.%d" % pid, path)
    return d, path


class FakeValidator:
    """Plays the allocator (and any other writer) on a fake segment. Layout (allocator/include/
    livealloc.h): segment_header.control_offset at 56; control_block: generation 0,
    validated_generation 8, rejected 16, option_count 24, options at 32, 96 bytes each: name[32],
    requested 32, effective 40, min 48, max 56, default_value 64."""

    def __init__(self, path):
        self.f = open(path, "r+b")
        # The allocator's mark of life: it holds this lock on its segment while its image runs.
        fcntl.flock(self.f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        self.m = mmap.mmap(self.f.fileno(), 0)
        self.ctl = struct.unpack_from("<Q", self.m, 56)[0]

    def close(self):
        self.m.close()
        self.f.close()

    def u64(self, off, value=None):
        if value is not None:
            struct.pack_into("<Q", self.m, self.ctl + off, value)
        return struct.unpack_from("<Q", self.m, self.ctl + off)[0]

    def field(self, name, field, value=None):
        n = struct.unpack_from("<I", self.m, self.ctl + 24)[0]
        at = {"requested": 32, "effective": 40, "min": 48, "max": 56, "default": 64}[field]
        for i in range(n):
            off = self.ctl + 32 + 96 * i
            if self.m[off:off + 32].split(b"\0")[0].decode() == name:
                if value is not None:
                    struct.pack_into("<q", self.m, off + at, value)
                return struct.unpack_from("<q", self.m, off + at)[0]
        raise KeyError(name)

    def tune(self, ml, pid, d, args, react):
        """Runs `memlive tune` on the copy; once it has stored its values (the generation moved),
        react(self) plays what happens next, then the copy is marked validated. No race: memlive
        waits for the validation (2 s, while this polls every 0.5 ms)."""
        gen = self.u64(0)
        p = subprocess.Popen([ml, "tune", "--pid", str(pid), "--dir", d] + args,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + TIMEOUT
        while p.poll() is None and self.u64(0) == gen and time.monotonic() < deadline:
            time.sleep(0.0005)
        if p.poll() is None:
            react(self)
            self.u64(8, self.u64(0))  # validated_generation = generation
        out, err = p.communicate(timeout=TIMEOUT)
        return p.returncode, out, err


def check_tune_writers_defaults_ranges(ml, pid, tmp):
    # Another tuner changes the same option after us, before the allocator validates: ours was
    # accepted, then superseded; nothing was rejected: exit 0, not "rejected by the allocator".
    d, path = fake_segment(pid, tmp, "superseded")
    v = FakeValidator(path)
    try:
        def other_writer(v):
            v.field("page_recycle", "requested", 20)
            v.u64(0, v.u64(0) + 1)  # its generation, after ours
            v.field("page_recycle", "effective", 20)
        code, out, err = v.tune(ml, pid, d, ["page_recycle=10"], other_writer)
        check(code == 0 and "page_recycle = 10: accepted, then superseded by another change "
              "(in force: 20)" in out and "rejected" not in out,
              "tune superseded by another writer: exit 0, says so (got %d: %s%s)" %
              (code, out, err.strip()))

        # A real rejection: the allocator counts it and sets requested back: exit 7.
        def reject(v):
            v.u64(16, v.u64(16) + 1)
            v.field("page_recycle", "requested", v.field("page_recycle", "effective"))
        code, out, err = v.tune(ml, pid, d, ["page_recycle=11"], reject)
        check(code == 7 and "page_recycle = 11: rejected by the allocator (in force: 20)" in out,
              "tune rejected by the allocator (rejected count grew): exit 7 (got %d: %s%s)" %
              (code, out, err.strip()))

        # Our value still requested but another in force: rejected too, even if not counted.
        code, out, err = v.tune(ml, pid, d, ["page_recycle=12"], lambda v: None)
        check(code == 7 and "page_recycle = 12: rejected by the allocator (in force: 20)" in out,
              "tune whose requested value stays but is not in force: exit 7 (got %d: %s%s)" %
              (code, out, err.strip()))

        # name=default: the default the segment publishes (7 here), not memlive's own table.
        v.field("page_recycle", "default", 7)
        def accept(v):
            v.field("page_recycle", "effective", v.field("page_recycle", "requested"))
        code, out, err = v.tune(ml, pid, d, ["page_recycle=default"], accept)
        check(code == 0 and "page_recycle = 7 (default): accepted (was 20)" in out and
              v.field("page_recycle", "requested") == 7,
              "tune name=default stores the segment's default (got %d: %s%s)" %
              (code, out, err.strip()))
    finally:
        v.close()

    # name=default on the real process: back to its published default, and reported so.
    snap = snapshot_json(ml, pid)
    if snap:
        pr = option(snap, "page_recycle")
        other = pr["default"] + 1 if pr["default"] < pr["max"] else pr["default"] - 1
        run([ml, "tune", "--pid", str(pid), "page_recycle=%d" % other])
        r = run([ml, "tune", "--pid", str(pid), "page_recycle=default"])
        after = snapshot_json(ml, pid)
        check(r.returncode == 0 and "page_recycle = %d (default): accepted (was %d)" %
              (pr["default"], other) in r.stdout and after and
              option(after, "page_recycle")["effective"] == pr["default"],
              "tune page_recycle=default: back to %d (got %d: %s%s)" %
              (pr["default"], r.returncode, r.stdout, r.stderr.strip()))
        # The keyword in any case, as the name (it was exit 2: "'DEFAULT' is not a whole
        # number").
        for spelled in ("PAGE_RECYCLE=DEFAULT", "page_recycle=Default"):
            run([ml, "tune", "--pid", str(pid), "page_recycle=%d" % other])
            r = run([ml, "tune", "--pid", str(pid), spelled])
            after = snapshot_json(ml, pid)
            check(r.returncode == 0 and "page_recycle = %d (default): accepted (was %d)" %
                  (pr["default"], other) in r.stdout and after and
                  option(after, "page_recycle")["effective"] == pr["default"],
                  "tune %s: back to %d (got %d: %s%s)" %
                  (spelled, pr["default"], r.returncode, r.stdout, r.stderr.strip()))
        # true/false/on/off in any case too: an integer option refuses the word (exit 7).
        r = run([ml, "tune", "--pid", str(pid), "page_recycle=ON"])
        check(r.returncode == 7 and "option 'page_recycle' takes an integer, not true, false, "
              "on or off; nothing applied" in r.stderr,
              "tune page_recycle=ON: exit 7, an integer option (got %d: %s)" %
              (r.returncode, r.stderr.strip()))
    for args, says in ((["nosuch=default"], "unknown option 'nosuch'"),
                       (["NOSUCH=DEFAULT"], "unknown option 'nosuch'"),
                       (["telemetry_slots=default"], "cannot change while the program runs")):
        r = run([ml, "tune", "--pid", str(pid)] + args)
        check(r.returncode == 7 and says in r.stderr and "nothing applied" in r.stderr,
              "tune %s: exit 7, %r (got %d: %s)" % (args[0], says, r.returncode, r.stderr.strip()))

    # Out of the option's range, whether or not it fits in 64 bits: one exit code, one message.
    before = snapshot_json(ml, pid)
    pr = option(before, "page_recycle") if before else {"min": 0, "max": 4096}
    for value in (str(pr["max"] + 1), str(pr["min"] - 1), "9223372036854775807",
                  "18446744073709551615", "-9223372036854775809", "+99999999999999999999999"):
        r = run([ml, "tune", "--pid", str(pid), "remote_batch=7", "page_recycle=" + value])
        check(r.returncode == 7 and "option 'page_recycle': %s is out of range [%d, %d]; "
              "nothing applied" % (value, pr["min"], pr["max"]) in r.stderr,
              "tune page_recycle=%s: exit 7, names the range (got %d: %s)" %
              (value, r.returncode, r.stderr.strip()))
    r = run([ml, "tune", "--pid", str(pid), "page_recycle=18446744073709551615", "x-y=1"])
    check(r.returncode == 2 and "x-y" in r.stderr,
          "tune: a syntax error still goes first, exit 2 (got %d: %s)" %
          (r.returncode, r.stderr.strip()))
    after = snapshot_json(ml, pid)
    if before and after:
        check(after["control"]["generation"] == before["control"]["generation"] and
              after["options"] == before["options"], "tune out of range: options unchanged")

    # --help lists the live options with their range and default (as the segment has them) and
    # name=default.
    r = run([ml, "tune", "--help"])
    snap = snapshot_json(ml, pid)
    check(r.returncode == 0 and "name=default" in r.stdout, "tune --help shows name=default")
    for o in (snap or {}).get("options", []):
        line = re.search(r"^  %s +(.*)$" % o["name"], r.stdout, re.M)
        if o["live"]:
            check(line is not None and line.group(1) == "%d to %d, default %d" %
                  (o["min"], o["max"], o["default"]),
                  "tune --help lists %s, range and default (%s)" %
                  (o["name"], line.group(0) if line else "missing"))
        else:
            check(line is None and re.search(r"\b%s\b" % o["name"], r.stdout.split(
                "not live")[-1]), "tune --help names %s as not live" % o["name"])


def check_errors(ml, workload_pid, tmp):
    dead = free_pid()
    for verb in (["snapshot"], ["tune", "page_recycle=1"],
                 ["record", "--interval", "10", "--out", os.path.join(tmp, "x")]):
        r = run([ml, verb[0], "--pid", str(dead)] + verb[1:])
        check(r.returncode == 3 and "no process" in r.stderr and
              r.stderr.startswith("memlive: %s: " % verb[0]),  # (was "memlive: no process...")
              "%s of pid %d that does not exist: exit 3 (got %d: %s)" %
              (verb[0], dead, r.returncode, r.stderr.strip()))
    me = os.getpid()
    r = run([ml, "snapshot", "--pid", str(me)])
    check(r.returncode == 4 and "LIVEALLOC_PROFILE=1" in r.stderr,
          "snapshot of a live pid without segment: exit 4 with a hint (got %d: %s)" %
          (r.returncode, r.stderr.strip()))

    bad_dir = os.path.join(tmp, "bad")
    os.mkdir(bad_dir)
    with open(os.path.join(bad_dir, "livealloc.%d" % me), "wb") as f:
        f.write(b"NOTASEGM" + b"\x01" * 4088)
    r = run([ml, "snapshot", "--pid", str(me), "--dir", bad_dir])
    check(r.returncode == 6 and "magic" in r.stderr,
          "malformed segment: exit 6 (got %d: %s)" % (r.returncode, r.stderr.strip()))
    ver_dir = os.path.join(tmp, "ver")
    os.mkdir(ver_dir)
    data = bytearray(open("/dev/shm/livealloc.%d" % workload_pid, "rb").read())
    data[8:12] = (2).to_bytes(4, "little")
    path = os.path.join(ver_dir, "livealloc.%d" % workload_pid)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, 0o600)
    r = run([ml, "snapshot", "--pid", str(workload_pid), "--dir", ver_dir])
    check(r.returncode == 6 and "version 2; this reader reads version 1" in r.stderr,
          "version mismatch: exit 6 naming both versions (got %d: %s)" %
          (r.returncode, r.stderr.strip()))

    # Libraries `run --lib` refuses before it starts anything: a directory, a file that is not
    # a 64-bit ELF shared object, and a real one at a path LD_PRELOAD cannot carry.
    not_elf = os.path.join(tmp, "notelf.so")
    with open(not_elf, "w") as f:
        f.write("not a library\n")
    spaced_dir = os.path.join(tmp, "lib dir")
    os.mkdir(spaced_dir)
    spaced_lib = os.path.join(spaced_dir, "liblivealloc.so")
    shutil.copyfile(os.path.realpath("/lib/x86_64-linux-gnu/libm.so.6"), spaced_lib)
    usage = [
        ([], "no verb"), (["frobnicate"], "unknown verb"),
        (["snapshot"], "--pid N (or --all) is required"),
        (["snapshot", "--all", "--pid", "1"], "--all and --pid exclude each other"),
        (["snapshot", "--all=yes"], "option --all takes no value"),
        (["snapshot", "--pid", "1", "--format", "xml"], "not json, csv or prometheus"),
        (["snapshot", "--pid", "1", "--format", "prometheus", "--by", "tid"],
         "not thread or class"),
        (["snapshot", "--pid", "1", "--by", "class"], "--by goes with --format prometheus"),
        (["snapshot", "--pid", "abc"], "not a process id"),
        # A one-dash word was taken as an argument, an option as the value before it, and an
        # empty --out as none.
        (["snapshot", "-p", "5"], "unknown option '-p'"),
        (["record", "--pid", "1", "--interval", "100", "--count", "2", "--out", "--budget",
          "live_bytes<=1"], "--out needs a value, not the option --budget"),
        (["record", "--pid", "1", "--interval", "100", "--out", ""], "--out: the path is empty"),
        # A repeated option kept the last; a sign passed as part of the number.
        (["snapshot", "--pid", "1", "--pid", "2"], "--pid is given more than once"),
        (["snapshot", "--pid", "1", "--format", "json", "--format=csv"],
         "--format is given more than once"),
        (["list", "--clean", "--clean"], "--clean is given more than once"),
        # (--interval: without the fix these end in another usage error, not in serving.)
        (["serve", "--all", "--port", "0", "--port", "0", "--interval", "100"],
         "--port is given more than once"),
        (["snapshot", "--pid", "+%d" % workload_pid], "--pid: '+%d' is not a process id"
         % workload_pid),
        (["serve", "--pid", str(workload_pid), "--port", "+0", "--interval", "20"],
         "--port: '+0' is not a port"),
        (["run", "--port", "0", "--exit-when-done", "--lib", "", "--", "true"],
         "--lib: the path is empty"),
        (["record", "--pid", str(workload_pid), "--interval", "5", "--out", "/dev/null"],
         "from 10"),
        (["record", "--pid", str(workload_pid), "--interval", "86400001", "--out", "/dev/null"],
         "from 10 to 86400000"),
        (["record", "--pid", str(workload_pid), "--interval", "99999999999999999999999",
          "--out", "/dev/null"], "from 10 to 86400000"),
        (["record", "--pid", str(workload_pid), "--interval", "10", "--count", "99999999999",
          "--out", "/dev/null"], "--count: '99999999999' is too large"),
        (["record", "--pid", str(workload_pid), "--interval", "10"], "--out FILE is required"),
        (["record", "--pid", str(workload_pid), "--interval", "10", "--out", "/dev/null",
          "--count", "3", "--duration", "5"], "give --count or --duration, not both"),
        (["record", "--pid", str(workload_pid), "--interval", "10", "--out", "/dev/null",
          "--duration", "0"], "--duration: '0' is not a positive number of seconds"),
        (["record", "--pid", str(workload_pid), "--interval", "10", "--out", "/dev/null",
          "--duration", "31536001"], "--duration: '31536001' is too large (at most 31536000)"),
        (["record", "--pid", str(workload_pid), "--interval", "10", "--out", "/dev/null",
          "--duration"], "option --duration needs a value"),
        (["list", "--bogus"], "unknown option"),
        (["tune", "--pid", str(workload_pid)], "at least one name=value"),
        (["serve"], "--pid N (or --all) is required"),
        (["serve", "--all", "--pid", "1"], "--all and --pid exclude each other"),
        (["serve", "--all", "--interval", "100"], "not with --all"),
        (["serve", "--all", "--history", "64"], "--history is the page's: not with --all"),
        (["serve", "--pid", str(workload_pid), "--port", "0", "--history", "0"],
         "--history: '0' is not a positive number of MiB"),
        (["serve", "--pid", str(workload_pid), "--port", "0", "--history", "65537"],
         "--history: '65537' is too large (at most 65536)"),
        (["run", "--port", "0", "--history", "1.5", "--", "true"],
         "--history: '1.5' is not a positive number of MiB"),
        (["serve", "--pid", str(workload_pid), "--port", "70000"], "from 0 to 65535"),
        (["serve", "--pid", str(workload_pid), "--port", "0", "--interval", "20"],
         "from 50 to 60000"),
        (["serve", "--pid", str(workload_pid), "--port", "0", "--host", "nohost"],
         "not an IPv4 address"),
        (["run"], "no program given"),
        (["run", "--port", "0", "--"], "no program given"),
        (["run", "--port", "0", "--interval", "20", "--", "true"], "from 50 to 60000"),
        (["run", "--port", "0", "--host", "nohost", "--", "true"], "not an IPv4 address"),
        (["run", "--port", "0", "--lib", "/nonexistent/liblivealloc.so", "--", "true"],
         "--lib PATH"),
        (["run", "--port", "0", "true"], "the program goes after --"),
        (["run", "--port", "0", "--lib", tmp, "--", "true"], "is not a file"),
        (["run", "--port", "0", "--lib", not_elf, "--", "true"],
         "is not a 64-bit ELF shared library"),
        (["run", "--port", "0", "--lib", spaced_lib, "--", "true"],
         "holds a space or a colon, which LD_PRELOAD cannot carry"),
        (["check"], "give the FILE"), (["check", "x.jsonl"], "give at least one budget"),
        (["check", "--pid", "1", "x", "live_bytes<=1"], "unknown option '--pid'"),
        (["check", "x.jsonl", "nosuch<=1"], "unknown metric 'nosuch'"),
        (["record", "--pid", str(workload_pid), "--interval", "10", "--out", "/dev/null",
          "--budget", "live_bytes=1"], "--budget: bad operator '='"),
    ]
    verbs = ("list", "snapshot", "tune", "record", "serve", "run", "check")
    for args, says in usage:
        r = run([ml] + args)
        # One pattern for every error line: "memlive: VERB: ..." (an option's error said
        # "memlive VERB: ..."), "memlive: ..." without a verb.
        verb = args[0] if args and args[0] in verbs else None
        start = "memlive: %s: " % verb if verb else "memlive: "
        check(r.returncode == 2 and says in r.stderr and r.stderr.startswith(start) and
              not (verb and r.stderr.startswith(start + verb + ": ")),
              "usage %s: exit 2, %r, %r first (got %d: %s)" % (args, says, start, r.returncode,
                                                             r.stderr.strip()))
    # After the error line, the verb's synopsis and where the options are, not its whole help
    # (`tune --pid abc` printed 40 lines of it).
    for args in (["tune", "--pid", "abc"], ["snapshot", "--bogus"], ["serve", "--port", "x"],
                 ["record", "--pid", "1"], ["list", "extra"]):
        lines = run([ml] + args).stderr.splitlines()
        check(2 <= len(lines) <= 4 and lines[1].startswith("usage: memlive " + args[0]) and
              lines[-1] == "run 'memlive %s --help' for the options" % args[0],
              "usage %s: the error, the synopsis and where the options are (got %r)" %
              (args, lines[:6]))
    r = run([ml, "--help"])
    check(r.returncode == 0 and "exit codes" in r.stdout and "7  tuning rejected" in r.stdout
          and "8  serve: the port is in use" in r.stdout,
          "--help lists the exit codes")
    for verb in ("list", "snapshot", "tune", "record", "serve", "run", "check"):
        r = run([ml, verb, "--help"])
        check(r.returncode == 0 and r.stdout.startswith("usage: memlive " + verb),
              "%s --help" % verb)
        for helpword in ("--help", "-h", "help"):
            r = run([ml, helpword, verb])
            check(r.returncode == 0 and r.stdout.startswith("usage: memlive " + verb),
                  "%s %s: the verb's help (got %d: %s)" % (helpword, verb, r.returncode,
                                                          r.stdout[:40]))
    for args, says in ((["--help", "nosuch"], "unknown verb 'nosuch'"),
                       (["help", "list", "tune"], "at most one verb"),
                       (["--version", "extra"], "--version takes no arguments")):
        r = run([ml] + args)
        check(r.returncode == 2 and says in r.stderr and not r.stdout,
              "%s: exit 2, %r (got %d: %s)" % (args, says, r.returncode, r.stderr.strip()))
    r = run([ml, "--version"])
    check(r.returncode == 0 and re.match(r"memlive \d+\.\d+\.\d+ ", r.stdout), "--version")

    empty_dir = os.path.join(tmp, "empty")
    os.mkdir(empty_dir)
    r = run([ml, "list", "--dir", empty_dir])
    check(r.returncode == 0 and r.stdout == "no process publishes a livealloc telemetry segment "
          "in %s\n" % empty_dir and not r.stderr,
          "list of a directory without segments says so, exit 0 (got %d: %s%s)" %
          (r.returncode, r.stdout, r.stderr))
    r = run([ml, "list", "--dir", os.path.join(tmp, "nosuch")])
    check(r.returncode == 1 and r.stderr == "memlive: list: cannot read %s: No such file or "
          "directory\n" % os.path.join(tmp, "nosuch"),
          "list of a directory that does not exist: exit 1, one line naming it once (got %d: %s)"
          % (r.returncode, r.stderr.strip()))
    stale_dir = os.path.join(tmp, "stale")
    os.mkdir(stale_dir)
    open(os.path.join(stale_dir, "livealloc.%d" % dead), "wb").write(b"\0" * 16)
    r = run([ml, "list", "--dir", stale_dir])
    check(r.returncode == 0 and str(dead) in r.stdout and "stale" in r.stdout,
          "list notes a stale segment: %s" % r.stdout.strip())
    r = run([ml, "list", "--clean=false", "--dir", stale_dir])
    check(r.returncode == 2 and "takes no value" in r.stderr and os.listdir(stale_dir),
          "list --clean=false: exit 2, nothing removed (got %d: %s)" % (r.returncode,
                                                                        r.stderr.strip()))
    os.mkdir(os.path.join(stale_dir, "livealloc.%d" % (dead + 1)))  # not a segment at all
    r = run([ml, "list", "--dir", stale_dir])
    check(r.returncode == 0 and "not a segment" in r.stdout and "1 stale segment " in r.stdout,
          "list: a directory with the name is not a segment, nor counted stale: %s" %
          r.stdout.strip())
    r = run([ml, "list", "--clean", "--dir", stale_dir])
    check(r.returncode == 0 and "removed 1 stale segment" in r.stdout and
          os.listdir(stale_dir) == ["livealloc.%d" % (dead + 1)],
          "list --clean removes the stale file, not the directory: %s" % r.stdout.strip())

    # A pid reused: a copy of the live workload's segment whose header says its process started
    # in 1970, long before the process now holding that pid: stale, and --clean removes it.
    start_ns = json.loads(run([ml, "snapshot", "--pid", str(workload_pid)]).stdout)["start_ns"]
    seg = bytearray(open("/dev/shm/livealloc.%d" % workload_pid, "rb").read())
    at = seg.find(start_ns.to_bytes(8, "little"), 0, 4096)
    check(at >= 0, "the workload's start_ns is in its segment's header")
    reused_dir = os.path.join(tmp, "reused")
    os.mkdir(reused_dir)
    seg[at:at + 8] = (10 ** 9).to_bytes(8, "little")
    open(os.path.join(reused_dir, "livealloc.%d" % workload_pid), "wb").write(seg)
    r = run([ml, "list", "--dir", reused_dir])
    check(r.returncode == 0 and "its pid now another process's" in r.stdout and
          "1 stale segment " in r.stdout, "list: a segment older than its pid's process is stale: %s"
          % r.stdout.strip())
    row = [ln.split() for ln in r.stdout.splitlines() if ln.split()[:1] == [str(workload_pid)]]
    check(len(row) == 1 and row[0][2] == "0",
          "list: the gone process of that segment has 0 threads alive (%s)" % r.stdout.strip())
    r = run([ml, "snapshot", "--pid", str(workload_pid), "--dir", reused_dir])
    check(r.returncode == 0 and json.loads(r.stdout)["alive"] is False and "stale" in r.stderr,
          "snapshot of that segment: alive false, a note (%d: %s)" % (r.returncode, r.stderr.strip()))
    states = [t["state"] for t in json.loads(r.stdout)["threads"]] if r.returncode == 0 else []
    check("ended" in states and "alive" not in states,
          "snapshot of that segment: its running threads ended with it, none alive (%s)" % states)
    r = run([ml, "snapshot", "--pid", str(workload_pid), "--dir", reused_dir, "--format", "csv"])
    states = {row[5] for row in list(csv.reader(io.StringIO(r.stdout)))[1:]}
    check(r.returncode == 0 and "ended" in states and "alive" not in states,
          "csv of that segment: ended, none alive (%s)" % sorted(states))
    r = run([ml, "list", "--clean", "--dir", reused_dir])
    check("removed 1 stale segment" in r.stdout and not os.listdir(reused_dir),
          "list --clean removes it: %s" % r.stdout.strip())
    # The workload's own segment, under a dead pid's name: its header names a live process, so
    # it is neither counted stale nor removed.
    seg[at:at + 8] = start_ns.to_bytes(8, "little")
    open(os.path.join(reused_dir, "livealloc.%d" % dead), "wb").write(seg)
    r = run([ml, "list", "--clean", "--dir", reused_dir])
    check("unreadable: " in r.stdout and "removed 0 stale segments" in r.stdout and
          os.listdir(reused_dir), "list --clean keeps a file whose header names a live process: %s"
          % r.stdout.strip())
    # ... unless that header is not ours: another magic or another version of the layout says
    # nothing of where its pid is, and the dead pid of the name decides.
    for what, at_, value in (("magic", 0, b"NOTLIVEA"), ("version", 8, (99).to_bytes(4, "little"))):
        odd = bytearray(seg)
        odd[at_:at_ + len(value)] = value
        open(os.path.join(reused_dir, "livealloc.%d" % dead), "wb").write(odd)
        r = run([ml, "list", "--clean", "--dir", reused_dir])
        check("stale: process gone; unreadable" in r.stdout and "removed 1 stale segment" in
              r.stdout and not os.listdir(reused_dir),
              "list --clean removes a dead pid's file with another %s: %s" % (what,
                                                                            r.stdout.strip()))
    # A program name with a newline and escape sequences: one row, the bytes escaped.
    at = seg.find(b"memlive_workload\0", 0, 4096)
    check(at >= 0, "the workload's program name is in its segment's header")
    odd = bytearray(seg)
    odd[at:at + 17] = b"we\nird\\\x1b[31mx\xc2\x9b\0\0"  # ... and U+009B, CSI
    open(os.path.join(reused_dir, "livealloc.%d" % workload_pid), "wb").write(odd)
    r = run([ml, "list", "--dir", reused_dir])
    rows = [line for line in r.stdout.splitlines() if str(workload_pid) in line]
    check(r.returncode == 0 and len(r.stdout.splitlines()) == 3 and len(rows) == 1 and
          "we\\nird\\\\\\x1b[31mx\\u009b" in rows[0] and "\x1b" not in r.stdout and
          "\x9b" not in r.stdout,
          "list escapes a program name's control bytes: %r" % r.stdout)
    os.unlink(os.path.join(reused_dir, "livealloc.%d" % workload_pid))

    # A segment of another user (not root) that names a live process of someone else: refused.
    forged_dir = os.path.join(tmp, "forged")
    os.mkdir(forged_dir)
    forged = os.path.join(forged_dir, "livealloc.%d" % workload_pid)
    shutil.copyfile("/dev/shm/livealloc.%d" % workload_pid, forged)
    if os.geteuid() == 0:
        os.chown(forged, 65534, -1)
        r = run([ml, "snapshot", "--pid", str(workload_pid), "--dir", forged_dir])
        check(r.returncode != 0 and "not written by that process" in r.stderr and not r.stdout,
              "snapshot of a segment owned by another uid than its process's: refused (%d: %s)" %
              (r.returncode, r.stderr.strip()))
    else:
        print("note: not root; the other user's segment is not checked")

    # 0.0.0.0 would listen everywhere while the Host check answers only the names it knows.
    for verb in (["serve", "--pid", str(workload_pid)], ["run", "--", "/bin/true"]):
        r = run([ml, verb[0], "--host", "0.0.0.0", "--port", "0"] + verb[1:])
        check(r.returncode == 2 and "0.0.0.0" in r.stderr and "refused" in r.stderr,
              "%s --host 0.0.0.0: exit 2, says why (got %d: %s)" % (verb[0], r.returncode,
                                                                  r.stderr.strip()[:200]))
        # Multicast and broadcast bind, but nothing connects: it said it served there.
        for host in ("224.0.0.1", "255.255.255.255"):
            r = run([ml, verb[0], "--host", host, "--port", "0"] + verb[1:])
            check(r.returncode == 2 and "multicast or broadcast" in r.stderr,
                  "%s --host %s: exit 2, says why (got %d: %s)" % (verb[0], host, r.returncode,
                                                                 r.stderr.strip()[:200]))
    # Another address than loopback: served, with a warning that there is no authentication.
    addrs = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    outside = [a for a in addrs if a.count(".") == 3 and not a.startswith("127.")]
    for host in ["127.0.0.1"] + outside[:1]:
        p = subprocess.Popen([ml, "serve", "--pid", str(workload_pid), "--host", host, "--port",
                              "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        served = "serving process" in p.stdout.readline()
        p.send_signal(signal.SIGINT)  # the warning is written before the server waits for it
        _, err = p.communicate(timeout=TIMEOUT)
        warned = "not a loopback address" in err and "no authentication" in err
        check(served and p.returncode == 0 and warned == (host != "127.0.0.1"),
              "serve --host %s: %s (exit %d: %s)" % (host, "warns" if host != "127.0.0.1" else
                                                     "no warning", p.returncode, err.strip()))
    if not outside:
        print("note: no address other than loopback here; the warning is not checked")
    # A reader that goes away: an error, not a silent death by SIGPIPE.
    p = subprocess.Popen([ml, "record", "--pid", str(workload_pid), "--interval", "10",
                          "--out", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.read(100)
    p.stdout.close()
    try:
        _, err = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
    check(p.returncode == 1 and b"Broken pipe" in err,
          "record --out - into a closed pipe: exit 1, says why (got %d: %s)" %
          (p.returncode, err.strip()[:200]))
    # A reader that stops reading: once the pipe is full, record waits in write(); SIGTERM must
    # still stop it (it waited in the restarted write for as long as the reader did not read).
    p = subprocess.Popen([ml, "record", "--pid", str(workload_pid), "--interval", "10",
                          "--out", "-"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    blocked = False
    deadline = time.monotonic() + TIMEOUT
    while not blocked and p.poll() is None and time.monotonic() < deadline:
        blocked = waits_on_pipe(p.pid)
        time.sleep(0.05)
    terminate(p)
    data = p.stdout.read()
    err = p.stderr.read()
    lines = data.split(b"\n")
    try:
        whole = all(json.loads(l)["pid"] == workload_pid for l in lines[:-1])
    except ValueError:
        whole = False
    cut = lines[-1] != b""
    check(blocked and p.returncode == 0 and b"stopped by a signal" in err and whole and
          len(lines) > 1 and cut == (b"last line is cut short" in err),
          "record --out - into a pipe nobody reads: SIGTERM stops it, exit 0, whole lines, a cut "
          "last line said (blocked %s, got %s: %s)" % (blocked, p.returncode, err.strip()[:200]))

    # Output that cannot be written is an error, not a silent exit 0.
    for verb in (["list"], ["tune", "--pid", str(workload_pid), "remote_batch=32"],
                 ["snapshot", "--pid", str(workload_pid)], ["--help"], ["--version"],
                 ["list", "--help"]):
        with open("/dev/full", "w") as full:
            r = subprocess.run([ml] + verb, stdout=full, stderr=subprocess.PIPE, text=True,
                               timeout=TIMEOUT)
        check(r.returncode == 1 and r.stderr.count("writing stdout: No space left on device") == 1,
              "%s > /dev/full: exit 1, says why (got %d: %s)" % (verb[0], r.returncode,
                                                                r.stderr.strip()))


def check_exec_without_livealloc(ml, wl):
    """A process that exec'd a program without livealloc keeps its pid, and its old segment its
    name, but nothing writes it any more: snapshot says alive false (and why, on stderr), and
    Prometheus livealloc_process_alive 0, as `memlive list` calls it stale (were: alive, 1)."""
    w = Workload(wl)
    try:
        w.proc.stdin.write("exec /bin/sleep 60\n")
        w.proc.stdin.flush()
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and os.path.realpath("/proc/%d/exe" % w.pid) != \
                os.path.realpath("/bin/sleep"):
            time.sleep(0.01)
        snap, r = None, None
        while time.monotonic() < deadline:  # the old image's lock goes with its memory
            r = run([ml, "snapshot", "--pid", str(w.pid)])
            snap = json.loads(r.stdout) if r.returncode == 0 else None
            if not snap or snap["alive"] is False:
                break
            time.sleep(0.05)
        check(snap is not None and snap["alive"] is False and
              "exec'd a program without livealloc" in r.stderr,
              "snapshot after an exec without livealloc: alive false, with a note (%s)" %
              (r.stderr.strip() if r else ""))
        r = run([ml, "snapshot", "--pid", str(w.pid), "--format", "prometheus"])
        check(r.returncode == 0 and
              ('\nlivealloc_process_alive{pid="%d"} 0\n' % w.pid) in r.stdout,
              "prometheus after an exec without livealloc: livealloc_process_alive 0")
        line = listed(ml, w.pid)
        check(line is not None and "exec'd a program without livealloc" in line,
              "list calls it stale: %s" % line)
        # Started together: each opens the segment at once, then waits 2 s for a new image, so
        # a profiled process of a test run alongside (ctest -j2) has no time to sweep the stale
        # segment away before all three hold it.
        verbs = (["tune", "page_recycle=3"],
                 ["record", "--interval", "100", "--count", "2", "--out", "-"],
                 ["serve", "--port", "0"])
        procs = [subprocess.Popen([ml, v[0], "--pid", str(w.pid)] + v[1:],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for v in verbs]
        for v, p in zip(verbs, procs):
            out, err = p.communicate(timeout=TIMEOUT)
            if v[0] == "tune":
                check(p.returncode == 4 and "exec'd a program without livealloc" in err and
                      not out,
                      "tune after an exec without livealloc: exit 4, nothing stored (was: "
                      "pending) (%d: %s%s)" % (p.returncode, out.strip(), err.strip()))
            else:
                check(p.returncode == 4 and "exec'd a program without livealloc" in err and
                      ("nothing to " + v[0]) in err and not out,
                      "%s after an exec without livealloc: exit 4, as tune (was: 'gone', exit "
                      "3) (%d: %s%s)" % (v[0], p.returncode, out.strip(), err.strip()))
    finally:
        w.kill()


def check_exec_chain(ml, wl, tmp):
    """A program reached through an exec chain (a wrapper script, pyenv's shim): memlive started
    between two images, while the old image's segment reads not alive and the next has not
    published, waits for the next (memlive/README.md, exit 4). serve and tune refused it with
    exit 4, "exec'd a program without livealloc", and snapshot printed the old image, gone. Here
    the gap is a shell without livealloc that sleeps 0.6 s before it execs the workload again."""
    chain = os.path.join(tmp, "chain.sh")
    with open(chain, "w") as f:
        f.write("#!/bin/sh\nsleep 0.6\nexec %s alpha:16:10:0\n" % os.path.realpath(wl))
    os.chmod(chain, 0o755)
    shell = os.path.realpath("/bin/sh")
    for verb in (["snapshot"], ["tune", "page_recycle=default"], ["serve", "--port", "0"]):
        w = Workload(wl)
        p = None
        try:
            w.proc.stdin.write("exec %s\n" % chain)
            w.proc.stdin.flush()
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline and \
                    os.path.realpath("/proc/%d/exe" % w.pid) != shell:
                time.sleep(0.005)
            t0 = time.monotonic()
            p = subprocess.Popen([ml, verb[0], "--pid", str(w.pid)] + verb[1:],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if verb[0] == "serve":
                line = p.stdout.readline()
                m = re.search(r"at http://127\.0\.0\.1:(\d+)/", line)
                health = None
                if m:
                    with urllib.request.urlopen("http://127.0.0.1:%s/healthz" % m.group(1),
                                                timeout=TIMEOUT) as h:
                        health = json.loads(h.read())
                p.terminate()
                out, err = p.communicate(timeout=TIMEOUT)
                ok = health is not None and health["alive"] is True and p.returncode == 0
                got = "%s %s" % (line.strip(), health)
            else:
                out, err = p.communicate(timeout=TIMEOUT)
                ok = p.returncode == 0 and "exec'd" not in err
                if verb[0] == "snapshot" and ok:
                    snap = json.loads(out)
                    ok = snap["alive"] is True and snap["pid"] == w.pid
                got = "%d: %s" % (p.returncode, err.strip()[:200])
            check(ok and w.proc.stdout.readline().startswith("ready "),
                  "%s started between two images of an exec chain waits for the next, not "
                  "'exec'd a program without livealloc' (%.2f s; %s)" %
                  (verb[0], time.monotonic() - t0, got))
        finally:
            if p and p.poll() is None:
                p.kill()
                p.wait()
            w.kill()


def check_tune_across_exec(ml, wl):
    """A process that execs while `tune` waits for its values to be validated: the values went
    with the old image, and the process runs on. tune said "exited before it validated the
    values", exit 3 (no such process), in 284 of 286 tries against an exec chain."""
    w = Workload(wl)
    p = None
    try:
        w.proc.stdin.write("pause\n")  # nothing reaches a slow path: the value stays pending
        w.proc.stdin.flush()
        time.sleep(0.05)
        p = subprocess.Popen([ml, "tune", "--pid", str(w.pid), "page_recycle=5"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)  # tune has stored the value and waits up to 2 s for its validation
        w.proc.stdin.write("exec /bin/sleep 30\n")
        w.proc.stdin.flush()
        out, err = p.communicate(timeout=TIMEOUT)
        check(p.returncode == 4 and "exec'd before it validated the values" in err and
              "tune it again" in err and w.proc.poll() is None,
              "tune across an exec: exit 4, 'exec'd before it validated the values' (was: "
              "'exited', exit 3) while the process runs on (%d: %s)" % (p.returncode, err.strip()))
    finally:
        if p and p.poll() is None:
            p.kill()
            p.wait()
        w.kill()


def check_descriptor_limit(ml, pid):
    """With too few descriptors for its workers, serve listened but could not accept: clients
    waited for nothing (ulimit -n 5). serve and run now refuse to start, saying why."""
    for verb in (["serve", "--pid", str(pid), "--port", "0"], ["run", "--port", "0", "--", "true"]):
        r = subprocess.run(["sh", "-c", 'ulimit -n 8 && exec "$@"', "sh", ml] + verb,
                           capture_output=True, text=True, timeout=TIMEOUT)
        check(r.returncode == 1 and "ulimit -n is 8" in r.stderr and "at least 32" in r.stderr
              and not r.stdout,
              "%s with ulimit -n 8: exit 1, says so (was: 'serving', clients hang) (%d: %s)" %
              (verb[0], r.returncode, r.stderr.strip()))


def check_closed_stdio(ml, pid):
    """Started with stdout or stderr closed, memlive opened the segment of tune on that number and
    wrote its messages into it: the process read as "not a livealloc telemetry segment" until it
    ended. Each run below must leave the segment readable, and say by its exit code what failed."""
    snap = snapshot_json(ml, pid)
    kept = {o["name"]: o["requested"] for o in (snap or {}).get("options", [])}
    same = ["tune", "--pid", str(pid), "page_recycle=%d" % kept.get("page_recycle", 2)]
    runs = (("2>&-", ["tune", "--pid", str(pid), "nosuch=1"], 7, ""),
            (">&-", same, 1, "stored all the same"),
            (">/dev/full", same, 1, "stored all the same"),
            ("<&- >&- 2>&-", ["snapshot", "--pid", str(pid)], 1, ""),
            (">&-", ["record", "--pid", str(pid), "--interval", "10", "--count", "2", "--out",
                     "-"], 1, "stdout is closed"))
    for redirect, args, code, says in runs:
        r = subprocess.run(["sh", "-c", 'exec "$@" ' + redirect, "sh", ml] + args,
                           capture_output=True, text=True, timeout=TIMEOUT)
        after = run([ml, "snapshot", "--pid", str(pid)])
        check(r.returncode == code and says in r.stderr and after.returncode == 0 and
              after.stdout.startswith('{"schema":"memlive.snapshot/1"'),
              "%s %s: exit %d, %r, the segment still readable (%d: %s; %s)" %
              (args[0], redirect, code, says, r.returncode, r.stderr.strip()[:120],
               after.stderr.strip()[:120]))


def check_thread_id(ml, pid):
    """A thread's id passes for a pid (kill(tid, 0) succeeds): memlive said the "process" publishes
    no segment and to run it with LD_PRELOAD. It names the process now."""
    tids = [int(t) for t in os.listdir("/proc/%d/task" % pid) if int(t) != pid]
    if not check(tids, "the workload has a thread besides its main one"):
        return
    for verb in (["snapshot"], ["tune", "page_recycle=2"]):
        r = run([ml, verb[0], "--pid", str(tids[0])] + verb[1:])
        check(r.returncode == 4 and "%d is a thread of process %d" % (tids[0], pid) in r.stderr,
              "%s --pid TID: exit 4, names the thread's process (%d: %s)" %
              (verb[0], r.returncode, r.stderr.strip()))


def check_record_follows_exec(ml, wl, tmp):
    """A process that execs a program with livealloc publishes a new segment under the same
    name, and record follows it at its next sample (memlive/README.md): it must not take the
    exec for the process's exit (the old image's segment is no longer attached once the exec
    drops its lock) and stop there."""
    w = Workload(wl)
    out = os.path.join(tmp, "exec.jsonl")
    try:
        p = subprocess.Popen([ml, "record", "--pid", str(w.pid), "--interval", "20", "--count",
                              "60", "--out", out], stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)
        w.proc.stdin.write("exec %s alpha:16:10:0\n" % os.path.realpath(wl))
        w.proc.stdin.flush()
        line = w.proc.stdout.readline()  # the new image is ready
        err, lines = finish_record(p, out)
        starts = {json.loads(l)["start_ns"] for l in lines}
        check(line.startswith("ready ") and p.returncode == 0 and "exited" not in err and
              len(lines) == 60 and len(starts) == 2,
              "record across an exec with livealloc: follows the new image, 60 samples of two "
              "images, not 'exited' (%d lines, %d images, rc %s: %s)" %
              (len(lines), len(starts), p.returncode, err.strip()))
    finally:
        w.kill()


# ---- check: budgets over a recording, and record --budget ----

def one_line_error(r, code, says):
    """An error of `memlive check`: exit `code`, one line on stderr, 'memlive: check: ...'."""
    lines = r.stderr.splitlines()
    return (r.returncode == code and len(lines) == 1 and lines[0].startswith("memlive: check: ")
            and says in lines[0] and not r.stdout)


def budget_line(stdout, budget):
    """The report line of `budget` in check's output, or None."""
    for line in stdout.splitlines():
        if line.split(" ")[1:2] == [budget + ":"]:
            return line
    return None


def worst(samples, value, upper=True):
    """The worst value over the samples and the first 1-based sample showing it."""
    vals = [value(s) for s in samples]
    w = max(vals) if upper else min(vals)
    return w, vals.index(w) + 1


def program_threads(s):
    return sum(1 for t in s["threads"] if t["state"] == "alive" and not t.get("memlive"))


def class_total(s, counter, cls):
    """The process total of a counter in class cls: exited threads' plus every thread's row."""
    i = 1 + s["counters"].index(counter)
    rows = s["exited"] + [row for t in s["threads"] for row in t["classes"]]
    return sum(row[i] for row in rows if row[0] == cls)


def without(sample, key):
    return {k: v for k, v in sample.items() if k != key}


def unit(v, is_bytes=True):
    """A value as check prints it: '1203456 (1.15 MiB)' for bytes from 1 KiB, else '1203456'."""
    if not is_bytes or v < 1024:
        return str(v)
    units = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"]
    x, u = v / 1024.0, 0
    while x >= 1024 and u + 1 < len(units):
        x, u = x / 1024.0, u + 1
    return "%d (%s %s)" % (v, ("%.2f" % x).rstrip("0").rstrip("."), units[u])


def signed(v, is_bytes=True, plus=True):
    """A growth as check prints it: '+1048576 (+1 MiB)', '-990', '0' (a limit: no '+')."""
    sign = "-" if v < 0 else "+" if v > 0 and plus else ""
    return sign + unit(abs(v), is_bytes).replace(" (", " (" + sign)


def secs(samples, n):
    """Sample n's time after the first, as check prints it: '+0.060 s'."""
    ns = samples[n - 1]["taken_ns"] - samples[0]["taken_ns"]
    return "+%d.%03d s" % (ns // 1000000000, ns // 1000000 % 1000)


def check_check(ml, pid, tmp):
    rec = os.path.join(tmp, "budget.jsonl")
    r = run([ml, "record", "--pid", str(pid), "--interval", "20", "--count", "5", "--out", rec])
    lines = open(rec).read().splitlines() if os.path.exists(rec) else []
    if not check(r.returncode == 0 and len(lines) == 5, "a recording of 5 samples to check (%s)"
                 % r.stderr.strip()):
        return
    samples = [json.loads(l) for l in lines]
    sizes = samples[0]["class_sizes"]
    c16, c48 = class_of(16, sizes), class_of(48, sizes)
    live, live_at = worst(samples, lambda s: s["process"]["live_bytes"])
    threads, threads_at = worst(samples, program_threads, upper=False)
    span = (samples[-1]["taken_ns"] - samples[0]["taken_ns"]) // 1000000

    # Every budget holds: the worst values as the file has them. The plan's 1,000 blocks of 16
    # bytes (alpha, none freed) and 250 of 48 are the only blocks of their classes.
    b48 = 250 * sizes[c48]
    budgets = ["live_bytes<=%d" % live, "threads>=%d" % threads, "class[%d].live<=1000" % c16,
               "class[%d].allocs >= 1000" % c16, "class[%d].live_bytes<=%d" % (c48, b48),
               "resident_bytes<=64GiB"]
    r = run([ml, "check", rec] + budgets)
    out = r.stdout.splitlines()
    check(r.returncode == 0 and len(out) == len(budgets) + 1 and
          all(l.startswith("PASS ") for l in out[:-1]) and
          out[-1] == "PASS: 0 of 6 budgets exceeded; 5 samples of process %d (memlive_workload) "
          "over %d.%03d s" % (pid, span // 1000, span % 1000) and not r.stderr,
          "check: every budget holds: exit 0, a PASS line each and the summary (%d: %s%s)" %
          (r.returncode, r.stdout, r.stderr.strip()))
    # The report lost to a full disk is an error (exit 1, said once) whatever the verdict: with
    # a budget exceeded it exited 9 without a word.
    for verdict, budget in (("pass", "live_bytes<=%d" % live), ("fail", "live_bytes<=1")):
        with open("/dev/full", "w") as full:
            f = subprocess.run([ml, "check", rec, budget], stdout=full, stderr=subprocess.PIPE,
                               text=True, timeout=TIMEOUT)
        check(f.returncode == 1 and
              f.stderr == "memlive: check: writing stdout: No space left on device\n",
              "check %s > /dev/full (%s): exit 1, says why (got %d: %s)" %
              (budget, verdict, f.returncode, f.stderr.strip()))
    line = budget_line(r.stdout, "live_bytes<=%d" % live) or ""
    check(line.startswith("PASS live_bytes<=%d: worst %d (" % (live, live)) and
          " at sample %d of 5 (+" % live_at in line,
          "check: the worst live_bytes is the file's largest, at its sample (%s)" % line)
    line = budget_line(r.stdout, "class[%d].live<=1000" % c16) or ""
    check(line == "PASS class[%d].live<=1000: worst 1000 at sample 1 of 5 (+0.000 s); limit "
          "1000" % c16, "check: class[%d].live is the plan's 1000 blocks of 16 bytes (%s)" %
          (c16, line))
    line = budget_line(r.stdout, "class[%d].live_bytes<=%d" % (c48, b48)) or ""
    unit = "%.2f" % (b48 / 1024.0)
    unit = unit.rstrip("0").rstrip(".")
    check(line.startswith("PASS class[%d].live_bytes<=%d: worst %d (%s KiB) at sample 1 of 5" %
                          (c48, b48, b48, unit)) and line.endswith("limit %d (%s KiB)" %
                                                                   (b48, unit)),
          "check: class[%d].live_bytes is 250 blocks of %d bytes, with its unit (%s)" %
          (c48, sizes[c48], line))
    line = budget_line(r.stdout, "threads>=%d" % threads) or ""
    check(threads >= 4 and line.startswith("PASS threads>=%d: worst %d at sample %d" %
                                           (threads, threads, threads_at)),
          "check: threads counts the workload's threads alive (%s)" % line)

    # Budgets exceeded: exit 9, the worst value, where it was, how many samples were over.
    r = run([ml, "check", rec, "live_bytes<=1KiB", "class[%d].live<1000" % c16,
             "class[%d].live<=1000" % c16])
    out = r.stdout.splitlines()
    line = budget_line(r.stdout, "live_bytes<=1KiB") or ""
    check(r.returncode == 9 and len(out) == 4 and out[-1].startswith(
        "FAIL: 2 of 3 budgets exceeded; 5 samples of process %d" % pid) and
          line.startswith("FAIL live_bytes<=1KiB: worst %d (" % live) and
          " at sample %d of 5 (+" % live_at in line and
          "; limit 1024 (1 KiB); over in 5 of 5 samples, first at sample 1 (+0.000 s)" in line,
          "check: live_bytes over 1 KiB: exit 9 and its line (%d: %s)" % (r.returncode, r.stdout))
    check(budget_line(r.stdout, "class[%d].live<1000" % c16) ==
          "FAIL class[%d].live<1000: worst 1000 at sample 1 of 5 (+0.000 s); limit 1000; over in 5 "
          "of 5 samples, first at sample 1 (+0.000 s)" % c16 and
          (budget_line(r.stdout, "class[%d].live<=1000" % c16) or "").startswith("PASS "),
          "check: < is strict, <= is not (%s)" % r.stdout)

    # stdin, and the last line cut short as a record killed while it wrote to a pipe leaves it.
    data = open(rec).read()
    r = run([ml, "check", "-", "live_bytes<=16GiB"], input=data)
    check(r.returncode == 0 and r.stdout.startswith("PASS live_bytes<=16GiB: worst %d" % live),
          "check - reads stdin (%d: %s%s)" % (r.returncode, r.stdout, r.stderr.strip()))
    r = run([ml, "check", "-", "live_bytes<=16GiB"], input=data + lines[0][:300])
    check(r.returncode == 0 and "of 5 (+" in r.stdout and r.stderr.startswith(
        "memlive: check: warning: stdin: the last line (6) is cut short") and
          len(r.stderr.splitlines()) == 1,
          "check: a last line cut short is left out with a warning (%d: %s%s)" %
          (r.returncode, r.stdout, r.stderr.strip()))
    r = run([ml, "check", "-", "live_bytes<=16GiB"], input=data.rstrip("\n"))
    check(r.returncode == 0 and "of 5 (+" in r.stdout and not r.stderr,
          "check: a whole last line without its newline is a sample (%s)" % r.stderr.strip())
    r = run([ml, "check", "-", "live_bytes<=16GiB"], input=data + "garbage")
    check(one_line_error(r, 6, "stdin: line 6: not JSON (at byte 1)"),
          "check: a last line that is not the start of a sample is an error (%d: %s)" %
          (r.returncode, r.stderr.strip()))

    # A budget that no sample of the process running gives a value: the final sample of a
    # record that followed the exit says alive false.
    gone = dict(samples[-1], alive=False)
    r = run([ml, "check", "-", "threads<=100", "live_bytes<=16GiB"], input=json.dumps(gone) + "\n")
    check(r.returncode == 9 and (budget_line(r.stdout, "threads<=100") or "").startswith(
        "FAIL threads<=100: no value in 1 sample") and
          (budget_line(r.stdout, "live_bytes<=16GiB") or "").startswith("PASS "),
          "check: threads of a process gone has no value, which fails (%d: %s)" %
          (r.returncode, r.stdout))

    # Bad budgets: exit 2, one line each, saying what is wrong.
    for budget, says in (
            ("resident<=512MiB", "unknown metric 'resident' in 'resident<=512MiB'; known: "
             "segment_bytes, "),
            ("resident<=512MiB", "resident_bytes, threads, class[N].live, class[N].live_bytes, "
             "class[N].COUNTER (allocs, frees,"),
            ("class[3].bogus<=1", "unknown metric 'class[3].bogus'"),
            ("class[53].live<=1", "size class '53' in 'class[53].live<=1' is not from 0 to 52"),
            ("class[-1].live<=1", "size class '-1'"), ("class[x].live<=1", "size class 'x'"),
            ("live_bytes=<1", "bad operator '=<' in 'live_bytes=<1': one of <=, <, >=, >"),
            ("live_bytes==1", "bad operator '=='"), ("live_bytes!=1", "bad operator '!='"),
            ("live_bytes=1", "bad operator '='"),
            ("live_bytes", "budget 'live_bytes' is not METRIC<=VALUE"),
            ("<=5", "budget '<=5' is not METRIC<=VALUE"),
            ("live_bytes<=", "bad number '' in 'live_bytes<='"),
            ("live_bytes<=1.5GiB", "bad number '1.5GiB'"),
            ("live_bytes<=12MB", "bad number '12MB'"),
            ("live_bytes<=-1", "bad number '-1'"), ("live_bytes<=0x10", "bad number '0x10'"),
            ("live_bytes<=18446744073709551616",
             "'18446744073709551616' in 'live_bytes<=18446744073709551616' is too large"),
            ("live_bytes<=16777216TiB", "'16777216TiB' in 'live_bytes<=16777216TiB' is too large"),
            # last() and growth()
            ("max(live_bytes)<=1", "unknown function 'max' in 'max(live_bytes)<=1': "
             "last(METRIC) (the last sample's value) or growth(METRIC) (the last sample's minus "
             "the first's)"),
            ("Last(live_bytes)<=1", "unknown function 'Last'"),
            ("class[3](live)<=1", "unknown function 'class[3]'"),
            ("last(live_bytes<=1", "unbalanced parentheses in 'last(live_bytes<=1': write "
             "last(METRIC)<=VALUE or growth(METRIC)<=VALUE"),
            ("last(live_bytes))<=1", "unbalanced parentheses in 'last(live_bytes))<=1'"),
            ("last)live_bytes(<=1", "unbalanced parentheses in 'last)live_bytes(<=1'"),
            ("live_bytes<=1)", "unbalanced parentheses"),
            ("last(live_bytes<=1)", "'last(live_bytes<=1)' is not FUNCTION(METRIC)<=VALUE: the "
             "parentheses hold the metric, as last(live_bytes)<=64MiB"),
            ("(live_bytes)<=1", "'(live_bytes)<=1' is not FUNCTION(METRIC)<=VALUE"),
            ("last(last(live_bytes))<=1", "is not FUNCTION(METRIC)<=VALUE"),
            ("last(live_bytes)x<=1", "is not FUNCTION(METRIC)<=VALUE"),
            ("live_bytes<=last(1)", "is not FUNCTION(METRIC)<=VALUE"),
            ("last()<=1", "no metric in 'last()<=1': last(METRIC), as last(live_bytes)"),
            ("growth(nosuch)<=1", "unknown metric 'nosuch' in 'growth(nosuch)<=1'; known: "),
            ("last(live_bytes)", "budget 'last(live_bytes)' is not METRIC<=VALUE"),
            ("growth(live_bytes)==1", "bad operator '==' in 'growth(live_bytes)==1'"),
            ("last(live_bytes)<=-1", "bad number '-1' in 'last(live_bytes)<=-1': a sign is for "
             "growth(METRIC) only, the one budget that can fall below 0"),
            ("live_bytes<=+1", "bad number '+1' in 'live_bytes<=+1': a sign is for growth"),
            ("growth(live_bytes)<=--1", "bad number '--1' in 'growth(live_bytes)<=--1': a whole "
             "number, optionally followed by B, KiB, MiB, GiB or TiB (1024-based), with a '-' in "
             "front for a fall"),
            ("growth(live_bytes)<=-", "bad number '-'"),
            ("growth(live_bytes)<=-1.5MiB", "bad number '-1.5MiB'"),
            ("growth(live_bytes)<=9223372036854775808", "'9223372036854775808' in "
             "'growth(live_bytes)<=9223372036854775808' is too large for a growth (from "
             "-9223372036854775808 to 9223372036854775807)"),
            ("growth(live_bytes)<=-9223372036854775809", "is too large for a growth"),
            ("growth(live_bytes)<=8388608TiB", "'8388608TiB' in 'growth(live_bytes)<=8388608TiB' "
             "is too large for a growth")):
        r = run([ml, "check", rec, budget])
        check(one_line_error(r, 2, says), "check %r: exit 2, one line, %r (got %d: %s)" %
              (budget, says, r.returncode, r.stderr.strip()))
    for budget, limit in (("live_bytes <= 64 MiB", 64 << 20), ("live_bytes<=3kib", 3072),
                          ("live_bytes<=7B", 7), ("live_bytes<=16777215TiB", 16777215 << 40),
                          ("live_bytes<=18446744073709551615", 2 ** 64 - 1),
                          ("last(live_bytes)<=18446744073709551615", 2 ** 64 - 1),
                          ("growth(live_bytes)<=9223372036854775807", 2 ** 63 - 1),
                          ("growth(live_bytes)<=+7", 7), ("growth ( live_bytes ) <= - 1KiB", -1024),
                          ("growth(live_bytes)>=-9223372036854775808", -2 ** 63),
                          ("growth(live_bytes)>=-8388608TiB", -2 ** 63)):
        r = run([ml, "check", rec, budget])
        text = budget.replace(" ", "")
        check(r.returncode in (0, 9) and "; limit %s;" % signed(limit, plus=False) in
              (budget_line(r.stdout, text) or "") + ";",
              "check %r: limit %d (%s)" % (budget, limit, r.stdout.splitlines()[:1]))
    for args, says in (([], "give the FILE"), ([rec], "give at least one budget")):
        r = run([ml, "check"] + args)
        check(r.returncode == 2 and r.stderr.startswith("memlive: check: " + says) and
              "usage: memlive check" in r.stderr,
              "check %s: exit 2, %r and the usage (%d: %s)" % (args, says, r.returncode,
                                                               r.stderr[:80]))
    r = run([ml, "check", os.path.join(tmp, "nonexistent.jsonl"), "live_bytes<=1"])
    check(one_line_error(r, 1, "nonexistent.jsonl: No such file or directory"),
          "check of a missing file: exit 1 (%d: %s)" % (r.returncode, r.stderr.strip()))
    r = run([ml, "check", tmp, "live_bytes<=1"])
    check(one_line_error(r, 1, "Is a directory"),
          "check of a directory: exit 1 (%d: %s)" % (r.returncode, r.stderr.strip()))

    # Files that are not a recording this memlive reads: exit 6, one line, the line number.
    other = dict(samples[0], layout_version=2)
    deep = "[" * 100000 + "]" * 100000
    for name, text, says in (
            ("empty", "", "holds no sample (it is empty)"),
            ("not JSON", lines[0] + "\nhello\n" + lines[1] + "\n", "line 2: not JSON (at byte 1)"),
            ("one letter", "x\n", "line 1: not JSON (at byte 1)"),
            ("JSON ending too soon", lines[0] + "\n{\"schema\": [1,\n", "line 2: not JSON (it "
             "ends too soon)"),
            ("an empty line", lines[0] + "\n\n", "line 2: empty"),
            ("another layout", lines[0] + "\n" + json.dumps(other) + "\n",
             "line 2: a recording of telemetry layout version 2; this memlive reads version 1"),
            ("another schema", json.dumps(dict(samples[0], schema="other/9")) + "\n",
             "line 1: schema 'other/9'; this memlive reads memlive.snapshot/1"),
            ("not a snapshot", "[1, 2, 3]\n", "line 1: not a JSON object"),
            ("no schema", "{\"pid\": 1}\n", "line 1: not a memlive snapshot (no \"schema\""),
            ("a field missing", json.dumps(dict(samples[0], process={})) + "\n",
             "line 1: no process.segment_bytes"),
            ("a negative number", lines[0].replace('"live_bytes":', '"live_bytes":-', 1) + "\n",
             "line 1: no process.live_bytes (a whole number)"),
            ("no pid", lines[0] + "\n" + json.dumps(without(samples[1], "pid")) + "\n",
             "line 2: no pid"),
            ("no start_ns", json.dumps(without(samples[0], "start_ns")) + "\n",
             "line 1: no start_ns"),
            ("nested deep", deep + "\n", "line 1: not a sample (nested too deep)"),
            # nlohmann ends its parse at such a number with an error of its own (406), which
            # aborted check (found by tests/fuzz/fuzz_recording).
            ("a number past a double's range",
             lines[0] + "\n{\"schema\": \"memlive.snapshot/1\", \"pid\": 1e400}\n",
             "line 2: not a sample (a number past a double's range, as 1e400)"),
            ("9 million numbers", "{\"options\": [" + "0," * (9 << 20) + "0]}\n",
             "line 1: not a sample (more than 8388608 values)"),
            ("a long line", "x" * 3000000 + "\n", "line 1: not JSON (at byte 1)"),
            ("NUL bytes", "\0" * 5000, "line 1: not JSON (at byte 1)")):
        path = os.path.join(tmp, "bad.jsonl")
        with open(path, "w") as f:
            f.write(text)
        r = run([ml, "check", path, "live_bytes<=1GiB"])
        check(one_line_error(r, 6, "bad.jsonl" + (": " if "line" in says else " ") + says),
              "check of a file with %s: exit 6, one line, %r (got %d: %s)" %
              (name, says, r.returncode, r.stderr.strip()[:200]))
    path = os.path.join(tmp, "cut.jsonl")
    with open(path, "w") as f:
        f.write(lines[0][:50])
    r = run([ml, "check", path, "live_bytes<=1GiB"])
    err = r.stderr.splitlines()
    check(r.returncode == 6 and len(err) == 2 and "the last line (1) is cut short" in err[0] and
          err[1] == "memlive: check: %s holds no sample" % path,
          "check of a file of one cut line: the warning, then exit 6 (%d: %s)" %
          (r.returncode, r.stderr.strip()))
    # The rows class budgets read are checked too.
    bad_rows = dict(samples[0], exited=[[99] + [0] * 16])
    r = run([ml, "check", "-", "class[1].live<=5"], input=json.dumps(bad_rows) + "\n")
    check(one_line_error(r, 6, "stdin: line 1: no \"exited\" rows"),
          "check: a row of a class that does not exist (%d: %s)" % (r.returncode,
                                                                    r.stderr.strip()))
    # A class total past 64 bits is held at 2^64 - 1, and so are its live blocks: 2^64 - 1
    # allocs and 1 adopted block made 0 live blocks, and the budget passed (found by
    # tests/fuzz/fuzz_recording).
    big = dict(samples[0], threads=[], exited=[[1, 2**64 - 1] + [0] * 5 + [1] + [0] * 9])
    r = run([ml, "check", "-", "class[1].live<=5"], input=json.dumps(big) + "\n")
    check(r.returncode == 9 and r.stdout.startswith(
        "FAIL class[1].live<=5: worst 18446744073709551615 at sample 1"),
          "check: live blocks past 64 bits held at 2^64 - 1: exit 9 (%d: %s)" %
          (r.returncode, r.stdout.strip()[:200]))
    # A line longer than any sample (256 MiB) stops the read there.
    p = subprocess.Popen([ml, "check", "-", "live_bytes<=1"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        block = b"7" * (1 << 20)
        for _ in range(300):
            p.stdin.write(block)
        p.stdin.close()
    except BrokenPipeError:
        pass
    _, err = p.communicate(timeout=TIMEOUT)
    check(p.returncode == 6 and err.decode().startswith(
        "memlive: check: stdin: line 1: longer than 256 MiB"),
          "check: a line past 256 MiB: exit 6 (%d: %s)" % (p.returncode, err.strip()[:200]))

    # Fuzzed input (a fixed seed): random bytes, random lines, a recording with bytes changed.
    # Never a crash or a hang: exit 6 (or 0 or 9 when a changed byte leaves a valid sample), and
    # one line on stderr.
    rng = random.Random(1234)
    raw = open(rec, "rb").read()
    cases = []
    for n in (1, 17, 4096, 1 << 20):
        cases.append(bytes(rng.getrandbits(8) for _ in range(min(n, 4096))) * max(1, n // 4096))
    for _ in range(6):
        cases.append(b"\n".join(bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 200)))
                                for _ in range(rng.randrange(1, 20))))
    for _ in range(30):
        b = bytearray(raw)
        for _ in range(rng.randrange(1, 5)):
            b[rng.randrange(len(b))] = rng.getrandbits(8)
        cases.append(bytes(b))
    cases.append(raw[:rng.randrange(len(raw))])
    bad = []
    for i, data in enumerate(cases):
        r = subprocess.run([ml, "check", "-", "live_bytes<=1GiB", "threads<=100",
                            "class[3].live<=10"], input=data, capture_output=True,
                           timeout=TIMEOUT)
        errs = r.stderr.decode(errors="replace").splitlines()
        if not (r.returncode in (0, 6, 9) and len(errs) <= 1 and
                (r.returncode != 6 or errs[0].startswith("memlive: check: "))):
            bad.append((i, r.returncode, errs[:2]))
    check(not bad, "check of %d fuzzed inputs: exit 0, 6 or 9, at most one line on stderr (%s)" %
          (len(cases), bad[:3]))

    # record --budget: checked at each sample, said when exceeded, the recording goes on.
    out = os.path.join(tmp, "budget-live.jsonl")
    r = run([ml, "record", "--pid", str(pid), "--interval", "20", "--count", "3", "--out", out,
             "--budget", "live_bytes<=1KiB", "--budget", "threads>=1"])
    err = r.stderr.splitlines()
    n = len(open(out).read().splitlines()) if os.path.exists(out) else 0
    check(r.returncode == 9 and n == 3 and len(err) == 4 and
          err[0].startswith("memlive: record: budget live_bytes<=1KiB exceeded at sample 1 "
                            "(+0.000 s): ") and err[0].endswith("; limit 1024 (1 KiB)") and
          err[1].startswith("memlive: recorded 3 samples to ") and
          err[2].startswith("FAIL live_bytes<=1KiB: worst ") and "of 3 (+" in err[2] and
          err[3].startswith("PASS threads>=1: worst "),
          "record --budget exceeded: said at sample 1, 3 samples written, the lines, exit 9 "
          "(%d, %d lines: %s)" % (r.returncode, n, r.stderr.strip()))
    r = run([ml, "record", "--pid", str(pid), "--interval", "20", "--count", "2", "--out", out,
             "--budget", "live_bytes<=16GiB"])
    err = r.stderr.splitlines()
    check(r.returncode == 0 and len(err) == 2 and err[1].startswith("PASS live_bytes<=16GiB"),
          "record --budget held: exit 0 and its PASS line (%d: %s)" % (r.returncode,
                                                                       r.stderr.strip()))
    r = run([ml, "record", "--pid", str(pid), "--interval", "20", "--count", "2", "--out", out,
             "--budget", "live<=1"])
    check(r.returncode == 2 and r.stderr.startswith("memlive: record: --budget: unknown metric "
                                                    "'live'") and len(r.stderr.splitlines()) == 1,
          "record --budget with an unknown metric: exit 2 (%d: %s)" % (r.returncode,
                                                                      r.stderr.strip()))

    r = run([ml, "check", "--help"])
    check(r.returncode == 0 and r.stdout.startswith("usage: memlive check FILE BUDGET") and
          "class[N].live" in r.stdout, "check --help")
    r = run([ml, "--help"])
    check("9  check, record --budget: a budget was exceeded" in r.stdout and
          "\n  check FILE BUDGET" in r.stdout, "--help lists check and exit code 9")


def record_across_exec(ml, wl, tmp):
    """A real recording of one process through an exec and its exit: the workload of the plan
    (1,000 blocks of 16 bytes), then its new image with 10 such blocks, which quits; record ends
    with the final sample of the process gone (alive false). Returns the lines and the pid."""
    w = Workload(wl)
    out = os.path.join(tmp, "exec-exit.jsonl")
    p = subprocess.Popen([ml, "record", "--pid", str(w.pid), "--interval", "20", "--out", out],
                         stderr=subprocess.PIPE, text=True)
    try:
        def lines():
            return open(out).read().splitlines() if os.path.exists(out) else []

        def wait_for(cond):  # progress of the recording, not a time: TIMEOUT only if it hangs
            deadline = time.monotonic() + TIMEOUT
            while not cond() and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            return cond()

        first = None
        if wait_for(lambda: len(lines()) >= 2):
            first = json.loads(lines()[0])["start_ns"]
            w.proc.stdin.write("exec %s alpha:16:10:0\n" % os.path.realpath(wl))
            w.proc.stdin.flush()
            w.proc.stdout.readline()  # the new image is ready
            # Two samples of the new image (one could be torn by the line being written).
            wait_for(lambda: sum(1 for l in lines()[:-1] if
                                 json.loads(l)["start_ns"] != first) >= 2)
        check(w.stop() == 0, "the exec'd workload exits 0")
        err, got = finish_record(p, out)
        check(first is not None and p.returncode == 0 and "exited; wrote a final sample" in err,
              "a record through an exec until the exit (%s)" % err.strip())
        return got, w.pid
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        w.kill()


def check_last_growth(ml, wl, pid, tmp):
    """last(METRIC) and growth(METRIC): the last sample's value and the last minus the first,
    exactly as the recordings have them, on the workload as it runs, and through an exec until
    the exit (a fall, the samples without a value); record --budget; recordings of two
    processes put together."""
    rec = os.path.join(tmp, "budget.jsonl")
    lines = open(rec).read().splitlines()
    samples = [json.loads(l) for l in lines]
    n = len(samples)
    c16 = class_of(16, samples[0]["class_sizes"])
    first_live = samples[0]["process"]["live_bytes"]
    last_live = samples[-1]["process"]["live_bytes"]
    grown = last_live - first_live
    budgets = ["last(live_bytes)<=%d" % last_live, "last(live_bytes)<%d" % last_live,
               "growth(live_bytes)<=%d" % grown, "growth(live_bytes)<%d" % grown,
               "growth(class[%d].live)<=0" % c16, "growth(class[%d].live)<0" % c16,
               "last(class[%d].live)>=1000" % c16]
    r = run([ml, "check", rec] + budgets)
    at = "%d of %d (%s)" % (n, n, secs(samples, n))
    want = [
        "PASS last(live_bytes)<=%d: last %s at sample %s; limit %s" %
        (last_live, unit(last_live), at, unit(last_live)),
        "FAIL last(live_bytes)<%d: last %s at sample %s; limit %s" %
        (last_live, unit(last_live), at, unit(last_live)),
        "PASS growth(live_bytes)<=%d: growth %s from sample 1 to %s: %s to %s; limit %s" %
        (grown, signed(grown), at, unit(first_live), unit(last_live), signed(grown, plus=False)),
        "FAIL growth(live_bytes)<%d: growth %s from sample 1 to %s: %s to %s; limit %s" %
        (grown, signed(grown), at, unit(first_live), unit(last_live), signed(grown, plus=False)),
        "PASS growth(class[%d].live)<=0: growth 0 from sample 1 to %s: 1000 to 1000; limit 0" %
        (c16, at),
        "FAIL growth(class[%d].live)<0: growth 0 from sample 1 to %s: 1000 to 1000; limit 0" %
        (c16, at),
        "PASS last(class[%d].live)>=1000: last 1000 at sample %s; limit 1000" % (c16, at),
        "FAIL: 3 of 7 budgets exceeded; %d samples of process %d (memlive_workload) over %s" %
        (n, pid, secs(samples, n)[1:])]
    got = r.stdout.splitlines()
    check(r.returncode == 9 and got == want and not r.stderr,
          "check last() and growth() on a running workload: the values of the file's last and "
          "first samples, each line exact, exit 9 (%d:\n%s\nwanted:\n%s\n%s)" %
          (r.returncode, r.stdout, "\n".join(want), r.stderr.strip()))

    # threads and resident_bytes have no value in a sample of the process gone: last() takes the
    # last sample that has one, and says so; with none at all, no value (FAIL).
    gone = json.dumps(dict(samples[-1], alive=False))
    threads, threads0 = program_threads(samples[-1]), program_threads(samples[0])
    r = run([ml, "check", "-", "last(threads)<=%d" % threads,
             "growth(threads)<=%d" % (threads - threads0)],
            input="\n".join(lines + [gone, gone]) + "\n")
    after = "%d of %d (%s), the last with a value (2 samples after it: alive false)" % (
        n, n + 2, secs(samples, n))
    want = ["PASS last(threads)<=%d: last %d at sample %s; limit %d" % (threads, threads, after,
                                                                        threads),
            "PASS growth(threads)<=%d: growth %s from sample 1 to %s: %d to %d; limit %d" %
            (threads - threads0, signed(threads - threads0, False), after, threads0, threads,
             threads - threads0)]
    check(r.returncode == 0 and r.stdout.splitlines()[:2] == want,
          "check last(threads), growth(threads) when the last samples have none: the last with "
          "a value, said (%d:\n%s\nwanted:\n%s)" % (r.returncode, r.stdout, "\n".join(want)))
    r = run([ml, "check", "-", "last(threads)<=100", "growth(resident_bytes)<=0",
             "last(live_bytes)<=16GiB"], input=gone + "\n")
    out = r.stdout.splitlines()
    check(r.returncode == 9 and len(out) == 4 and
          out[0].startswith("FAIL last(threads)<=100: no value in 1 sample (") and
          out[1].startswith("FAIL growth(resident_bytes)<=0: no value in 1 sample (") and
          out[2].startswith("PASS last(live_bytes)<=16GiB: last "),
          "check last(), growth() that no sample gives a value: FAIL (%d: %s)" %
          (r.returncode, r.stdout))

    # Through an exec until the exit: a real fall (the counters start again from zero), and
    # the last sample, of the process gone, without threads or resident_bytes.
    ex, ex_pid = record_across_exec(ml, wl, tmp)
    xs = [json.loads(l) for l in ex]
    m = len(xs)
    if not check(m >= 4 and xs[-1]["alive"] is False and
                 len({x["start_ns"] for x in xs}) == 2, "the exec recording: %d samples" % m):
        return
    allocs0, allocs1 = class_total(xs[0], "allocs", c16), class_total(xs[-1], "allocs", c16)
    live0 = allocs0 - class_total(xs[0], "frees", c16)
    live1 = allocs1 - class_total(xs[-1], "frees", c16)
    check((allocs0, live0, allocs1, live1) == (1000, 1000, 10, 0),
          "the exec recording: class %d from 1,000 blocks allocated and live to the new image's "
          "10, all freed at its exit (%s)" % (c16, (allocs0, live0, allocs1, live1)))
    starts = {x["process_start_ticks"] for x in xs if x["alive"]}
    check(len(starts) == 1 and 0 not in starts and xs[-1]["process_start_ticks"] == 0,
          "the exec recording: one process start in both images' samples, 0 once gone (%s)" %
          [x["process_start_ticks"] for x in xs])
    alive = [i + 1 for i, x in enumerate(xs) if x["alive"]]
    k = alive[-1]
    res = xs[k - 1]["process"]["resident_bytes"]
    res0 = xs[0]["process"]["resident_bytes"]
    lastlive = xs[-1]["process"]["live_bytes"]
    span = secs(xs, m)
    r = run([ml, "check", "-", "growth(class[%d].live)<=-1000" % c16,
             "growth(class[%d].live)<-1000" % c16, "growth(class[%d].allocs)>=-990" % c16,
             "growth(class[%d].allocs)>-990" % c16, "last(live_bytes)<=0",
             "last(resident_bytes)<=%d" % res, "growth(resident_bytes)<=%d" % (res - res0),
             "last(class[%d].allocs)<=10" % c16], input="\n".join(ex) + "\n")
    full = "%d of %d (%s)" % (m, m, span)
    res_at = "%d of %d (%s)%s" % (k, m, secs(xs, k), "" if k == m else
                                  ", the last with a value (%d sample%s after it: alive false)" %
                                  (m - k, "" if m - k == 1 else "s"))
    want = [
        "PASS growth(class[%d].live)<=-1000: growth -1000 from sample 1 to %s: 1000 to 0; limit "
        "-1000" % (c16, full),
        "FAIL growth(class[%d].live)<-1000: growth -1000 from sample 1 to %s: 1000 to 0; limit "
        "-1000" % (c16, full),
        "PASS growth(class[%d].allocs)>=-990: growth -990 from sample 1 to %s: 1000 to 10; limit "
        "-990" % (c16, full),
        "FAIL growth(class[%d].allocs)>-990: growth -990 from sample 1 to %s: 1000 to 10; limit "
        "-990" % (c16, full),
        "%s last(live_bytes)<=0: last %s at sample %s; limit 0" %
        ("PASS" if lastlive == 0 else "FAIL", unit(lastlive), full),
        "PASS last(resident_bytes)<=%d: last %s at sample %s; limit %s" %
        (res, unit(res), res_at, unit(res)),
        "PASS growth(resident_bytes)<=%d: growth %s from sample 1 to %s: %s to %s; limit %s" %
        (res - res0, signed(res - res0), res_at, unit(res0), unit(res),
         signed(res - res0, plus=False)),
        "PASS last(class[%d].allocs)<=10: last 10 at sample %s; limit 10" % (c16, full),
        "FAIL: 2 of 8 budgets exceeded; %d samples of process %d (memlive_workload) over %s" %
        (m, ex_pid, span[1:])]
    got = r.stdout.splitlines()
    check(r.returncode == 9 and got == want and lastlive == 0,
          "check a recording through an exec to the exit: one process; growth -1000 and -990 "
          "(a '-' limit), last(live_bytes) 0, resident_bytes from the last sample running "
          "(%d:\n%s\nwanted:\n%s\n%s)" % (r.returncode, r.stdout, "\n".join(want),
                                          r.stderr.strip()))

    # Recordings of two processes put together: exit 6, the line and both processes.
    r = run([ml, "check", "-", "live_bytes<=16GiB"], input="\n".join(lines + ex) + "\n")
    check(one_line_error(r, 6, "stdin: line %d: another process: pid %d (memlive_workload, "
                               "start_ns %d) after pid %d (memlive_workload, start_ns %d) on "
                               "line %d; a recording is of one process (two recordings put "
                               "together? check each)" %
                         (n + 1, ex_pid, xs[0]["start_ns"], pid, samples[-1]["start_ns"], n)),
          "check of two processes' recordings put together: exit 6, the line, both processes "
          "(%d: %s)" % (r.returncode, r.stderr.strip()))
    path = os.path.join(tmp, "twice.jsonl")
    with open(path, "w") as f:
        f.write("\n".join(ex + ex) + "\n")
    r = run([ml, "check", path, "last(live_bytes)<=16GiB"])
    check(one_line_error(r, 6, "twice.jsonl: line %d: another process: pid %d (memlive_workload, "
                               "start_ns %d) after pid %d (memlive_workload, start_ns %d) on "
                               "line %d, an image that started before that line's (record "
                               "follows a process through exec, to images that start later "
                               "only); a recording is "
                               "of one process" %
                         (m + 1, ex_pid, xs[0]["start_ns"], ex_pid, xs[-1]["start_ns"], m)),
          "check of one exec recording twice: the same pid, an earlier image: exit 6 (%d: %s)" %
          (r.returncode, r.stderr.strip()))

    # One recording put after itself: the same image, but counts that only grow fall back
    # (were judged as one longer run). Made sure of with a copy of sample 1 that has 5 more
    # mmap_calls, followed by sample 1 again; the real recording twice is refused as well when
    # one of those counts grew during it (not in every build: under ASan the workload's own
    # mallocs are not livealloc's), else it passes as the one run it repeats.
    more = json.loads(lines[0])
    more["process"]["mmap_calls"] += 5
    r = run([ml, "check", "-", "live_bytes<=16GiB"],
            input="\n".join([lines[0], json.dumps(more), lines[0]]) + "\n")
    mm = samples[0]["process"]["mmap_calls"]
    check(one_line_error(r, 6, "stdin: line 3: the same process as line 2, pid %d "
                               "(memlive_workload, start_ns %d), with fewer mmap_calls (%d after "
                               "%d), which only grow: a recording put after itself, or after a "
                               "later part of the same run? check each" %
                         (pid, samples[0]["start_ns"], mm, mm + 5)),
          "check: a sample with fewer mmap_calls than the line before, same image: exit 6, the "
          "line, the count (%d: %s)" % (r.returncode, r.stderr.strip()))
    growing = ("mmap_calls", "munmap_calls", "madvise_calls", "purges", "slots_used",
               "overflow_threads")
    fell = [f for f in growing if samples[0]["process"][f] < samples[-1]["process"][f]]
    r = run([ml, "check", "-", "live_bytes<=16GiB"], input="\n".join(lines + lines) + "\n")
    if fell:
        check(one_line_error(r, 6, "stdin: line %d: the same process as line %d, pid %d "
                                   "(memlive_workload, start_ns %d), with fewer %s (%d after %d), "
                                   "which only grow" %
                             (n + 1, n, pid, samples[0]["start_ns"], fell[0],
                              samples[0]["process"][fell[0]], samples[-1]["process"][fell[0]])),
              "check of one recording twice: exit 6, the line, the count that fell (%d: %s)" %
              (r.returncode, r.stderr.strip()))
    else:
        check(r.returncode == 0, "check of one recording twice, no count grown in it: passes "
              "(%d: %s)" % (r.returncode, r.stderr.strip()))
    back = dict(samples[0], taken_ns=samples[0]["taken_ns"] - 10**9)
    r = run([ml, "check", "-", "live_bytes<=16GiB"],
            input=lines[0] + "\n" + json.dumps(back) + "\n")
    check(r.returncode == 0 and "PASS live_bytes<=16GiB" in r.stdout,
          "check: a sample taken 'earlier' with no count fallen is the same run (%d: %s %s)" %
          (r.returncode, r.stdout.strip(), r.stderr.strip()))

    # The process's own start (process_start_ticks, field 22 of its stat line) tells a pid
    # reused from an exec: a later image with another one is another process, refused, also
    # when a sample of the process gone (no start: 0) lies between; with the same one it is
    # the exec it looks like.
    ticks = int(open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[19])
    check(all(x["process_start_ticks"] == ticks for x in samples),
          "record: every sample holds the process's start, %d ticks after boot (%s)" %
          (ticks, sorted({x.get("process_start_ticks") for x in samples})))
    later = dict(samples[0], start_ns=samples[0]["start_ns"] + 1)
    reused = dict(later, process_start_ticks=ticks + 7)
    gone_one = dict(samples[0], alive=False, process_start_ticks=0)
    for between, at in (([], 2), ([gone_one], 3)):
        r = run([ml, "check", "-", "live_bytes<=16GiB"],
                input="\n".join(json.dumps(x) for x in [samples[0]] + between + [reused]) + "\n")
        check(one_line_error(r, 6, "stdin: line %d: another process: pid %d (memlive_workload, "
                                   "start_ns %d) after pid %d (memlive_workload, start_ns %d) on "
                                   "line %d, which started at another time (process_start_ticks "
                                   "%d, not %d): a new process given the same pid" %
                             (at, pid, later["start_ns"], pid, samples[0]["start_ns"], at - 1,
                              ticks + 7, ticks)),
              "check: the same pid, a later image, another process start (after %d samples of "
              "the process gone): exit 6, a pid reused (%d: %s)" %
              (len(between), r.returncode, r.stderr.strip()))
        r = run([ml, "check", "-", "live_bytes<=16GiB"],
                input="\n".join(json.dumps(x) for x in [samples[0]] + between + [later]) + "\n")
        check(r.returncode == 0, "check: the same pid, a later image, the same process start "
              "(after %d samples of the process gone): an exec, passes (%d: %s)" %
              (len(between), r.returncode, r.stderr.strip()))
    bad_ticks = dict(samples[0], process_start_ticks=-1)
    r = run([ml, "check", "-", "live_bytes<=16GiB"], input=json.dumps(bad_ticks) + "\n")
    check(one_line_error(r, 6, "stdin: line 1: process_start_ticks is not a whole number"),
          "check: a process_start_ticks that is not a whole number: refused (%d: %s)" %
          (r.returncode, r.stderr.strip()))

    # record --budget: last() and growth() are judged at the end only (no 'exceeded at sample'
    # line), and exceeded give exit 9.
    out = os.path.join(tmp, "budget-last.jsonl")
    r = run([ml, "record", "--pid", str(pid), "--interval", "20", "--count", "3", "--out", out,
             "--budget", "last(live_bytes)<=1KiB", "--budget", "growth(class[%d].live)<=0" % c16])
    err = r.stderr.splitlines()
    rs = [json.loads(l) for l in open(out).read().splitlines()] if os.path.exists(out) else []
    if check(r.returncode == 9 and len(rs) == 3 and len(err) == 3,
             "record --budget last() exceeded: 3 samples, 3 lines on stderr, exit 9 (%d: %s)" %
             (r.returncode, r.stderr.strip())):
        at = "3 of 3 (%s)" % secs(rs, 3)
        v = rs[-1]["process"]["live_bytes"]
        want = ["memlive: recorded 3 samples to %s (done)" % out,
                "FAIL last(live_bytes)<=1KiB: last %s at sample %s; limit 1024 (1 KiB)" %
                (unit(v), at),
                "PASS growth(class[%d].live)<=0: growth 0 from sample 1 to %s: 1000 to 1000; "
                "limit 0" % (c16, at)]
        check(err == want, "record --budget last(), growth(): no line before the end, then "
              "each budget's line as check prints it (%s\nwanted:\n%s)" % (r.stderr.strip(),
                                                                          "\n".join(want)))
    r = run([ml, "record", "--pid", str(pid), "--interval", "20", "--count", "2", "--out", out,
             "--budget", "growth(live_bytes)<=16GiB", "--budget", "last(threads)>=1"])
    err = r.stderr.splitlines()
    check(r.returncode == 0 and len(err) == 3 and
          err[1].startswith("PASS growth(live_bytes)<=16GiB: growth ") and
          err[2].startswith("PASS last(threads)>=1: last "),
          "record --budget growth(), last() held: exit 0 (%d: %s)" % (r.returncode,
                                                                     r.stderr.strip()))
    for budget, says in (("last(live_bytes)<=-1", "a sign is for growth(METRIC) only"),
                         ("max(live_bytes)<=1", "unknown function 'max'"),
                         ("growth(live_bytes<=1", "unbalanced parentheses")):
        r = run([ml, "record", "--pid", str(pid), "--interval", "20", "--count", "2", "--out",
                 out, "--budget", budget])
        check(r.returncode == 2 and r.stderr.startswith("memlive: record: --budget: ") and
              says in r.stderr and len(r.stderr.splitlines()) == 1,
              "record --budget %r: exit 2, one line (%d: %s)" % (budget, r.returncode,
                                                                r.stderr.strip()))


def waits_on_pipe(pid):
    """Whether `memlive record` waits for its output pipe's reader: in write() (pipe_write) or
    in ppoll() on one fd (its waits between samples poll none)."""
    try:
        with open("/proc/%d/wchan" % pid) as f:
            if "pipe_write" in f.read():
                return True
        with open("/proc/%d/syscall" % pid) as f:
            fields = f.read().split()
        return fields[0] == "271" and int(fields[2], 16) == 1  # ppoll(fds, 1, ...)
    except (OSError, IndexError, ValueError):
        return False


def check_record_signal_window(ml, pid, tmp):
    """A stop signal taken between record's look at its stop flag and its wait for a full pipe
    ended only at the next signal. Under gdb, stopped at the entry of write() with the pipe
    already full, SIGTERM is given as it goes on: it lands exactly there."""
    gdb = shutil.which("gdb")
    if not gdb:
        print("note: no gdb; the signal before record's write is not checked")
        return
    rfd, wfd = os.pipe()
    fcntl.fcntl(wfd, fcntl.F_SETFL, os.O_NONBLOCK)
    try:
        while True:
            os.write(wfd, b"x" * 4096)
    except BlockingIOError:
        pass
    fcntl.fcntl(wfd, fcntl.F_SETFL, 0)
    # LeakSanitizer cannot run under ptrace (an ASan build's memlive would exit 1 at its end,
    # "LeakSanitizer has encountered a fatal error"): leak checks stay with the other runs.
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + " detect_leaks=0").strip()
    p = subprocess.Popen([gdb, "-nx", "-batch", "-ex", "set breakpoint pending on",
                          "-ex", "handle SIGTERM nostop noprint pass",
                          "-ex", "break write", "-ex", "run record --pid %d --interval 10 --out - "
                          ">&%d" % (pid, wfd), "-ex", "delete", "-ex", "signal SIGTERM", ml],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, pass_fds=(wfd,), env=env)
    os.close(wfd)
    try:
        out, err = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        err += "(hung)"
    os.close(rfd)
    if "ptrace" in err and "Operation not permitted" in err:
        print("note: gdb may not trace here; the signal before record's write is not checked")
        return
    check("Breakpoint 1" in out and "exited normally" in out and
          "memlive: recorded 0 samples to - (stopped by a signal" in err,
          "record: SIGTERM taken just before its write to a full pipe stops it (%s | %s)" %
          (out.strip()[-300:], err.strip()[-300:]))


def listed(ml, pid):
    r = run([ml, "list"])
    check(r.returncode == 0, "list: exit 0")
    for line in r.stdout.splitlines():
        f = line.split()
        if f and f[0] == str(pid):
            return line
    return None


def check_not_itself(ml, w):
    """Under an exported LD_PRELOAD of the allocator with profiling on, memlive's own segment is
    not among the processes it lists (it was: `memlive` running, 1 thread)."""
    lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(ml))), "allocator",
                       "liblivealloc.so")
    if not os.path.exists(lib):
        print("note: no %s (a sanitizer build): memlive under the preload is not tested" % lib)
        return
    env = dict(os.environ, LD_PRELOAD=lib, LIVEALLOC_PROFILE="1")
    r = run([ml, "list"], env=env)
    rows = [ln.split() for ln in r.stdout.splitlines()]
    check(r.returncode == 0 and any(f[:1] == [str(w.pid)] for f in rows) and
          not any(len(f) > 1 and f[1] == "memlive" for f in rows),
          "list under the preload with profiling: the workload, not memlive itself:\n" + r.stdout)
    r = run([ml, "snapshot", "--all"], env=env)
    programs = [json.loads(ln).get("program") for ln in r.stdout.splitlines() if ln.strip()]
    check(r.returncode == 0 and "memlive_workload" in programs and "memlive" not in programs,
          "snapshot --all under the preload with profiling: not memlive itself (%s)" % programs)


def only_pid(text, pid):
    """The Prometheus text's comment lines and the samples of process `pid`."""
    return "\n".join(ln for ln in text.splitlines()
                     if ln.startswith("#") or 'pid="%d"' % pid in ln) + "\n"


def request(port, method, path, body=None, headers=None, host=None):
    """(status, {lower-case header: value}, body bytes); Host is 127.0.0.1:port unless given."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        c.putheader("Host", host if host is not None else "127.0.0.1:%d" % port)
        data = body.encode() if isinstance(body, str) else body
        for k, v in (headers or {}).items():
            c.putheader(k, v)
        if data is not None:
            c.putheader("Content-Length", str(len(data)))
        c.endheaders(data)
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def get_text(port, path, method="GET", host=None):
    """(status, body as text) of a request without a body."""
    st, _, body = request(port, method, path, host=host)
    return st, body.decode()


def start_serve_all(ml, args=()):
    """`memlive serve --all --port 0 ARGS`: the process and its port (None if it did not say).
    `ml`: memlive's path, or a function giving the command line for memlive's arguments."""
    command = ml if callable(ml) else (lambda a: [ml] + a)
    srv = subprocess.Popen(command(["serve", "--all", "--port", "0"] + list(args)),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    m = re.search(r"^memlive: serving every profiled process of .* at "
                  r"http://127\.0\.0\.1:(\d+)/metrics ", srv.stdout.readline())
    return srv, int(m.group(1)) if m else None


def check_serve_all(ml, w, w2, want, one_by_class, d):
    """`serve --all`: /metrics of every running process, read at each request; /healthz; nothing
    else. `d`: a directory with w's segment, a gone one and a broken one for w2."""
    srv, port = start_serve_all(ml, ["--dir", d])
    try:
        st, text = get_text(port, "/metrics") if port else (0, "")
        comments = [ln for ln in text.splitlines() if ln.startswith("# memlive: ")]
        check(st == 200 and len(comments) == 1 and
              comments[0].startswith("# memlive: left out: %s/livealloc.%d: " % (d, w2.pid)) and
              'livealloc_process_info{pid="%d",' % w.pid in text and text.count(
                  "livealloc_process_info{") == 1 and
              "\nmemlive_unreadable_segments 1\n" in text,
              "serve --all: a broken segment is named in a comment and counted in "
              "memlive_unreadable_segments, the gone one left out, the live one served (%s)" %
              comments)
    finally:
        terminate(srv)
    srv, port = start_serve_all(ml)
    try:
        if not check(port is not None, "serve --all prints its URL"):
            return
        st, text = get_text(port, "/metrics")
        check(st == 200, "serve --all: GET /metrics 200")
        for pid in (w.pid, w2.pid):
            check_prometheus(only_pid(text, pid), want, pid)
        st, text = get_text(port, "/metrics?by=class")
        check(st == 200 and pick_planned(text, w.pid, want) and
              pick_planned(text, w.pid, want) == pick_planned(one_by_class, w.pid, want),
              "serve --all: /metrics?by=class has the process's classes as --pid --by class")
        st, body = get_text(port, "/healthz")
        h = json.loads(body) if st == 200 else {}
        check(sorted(h) == ["all", "ok", "uptime_ms", "version"] and h["all"] is True and
              h["ok"] is True and isinstance(h["uptime_ms"], int) and
              re.match(r"\d+\.\d+\.\d+$", h["version"]),
              "serve --all: /healthz has the fields README names (%s)" % body)
        st, body = get_text(port, "/")
        check(st == 200 and 'href="/metrics"' in body and 'href="/metrics?by=class"' in body,
              "serve --all: / links the two forms of /metrics")
        for method, path in (("GET", "/api/snapshot"), ("GET", "/index.html"),
                             ("POST", "/api/options"), ("GET", "/api/stream")):
            st, body = get_text(port, path, method)
            check(st == 404 and "serve --all answers /metrics and /healthz" in body,
                  "serve --all: %s %s is 404, saying what it serves (%d %s)" %
                  (method, path, st, body))
        st, body = get_text(port, "/metrics", host="evil.example")
        check(st == 403, "serve --all: a foreign Host header is refused (%d)" % st)
        check(w2.stop() == 0, "the second workload exits 0")
        st, text = get_text(port, "/metrics")
        check(st == 200 and 'pid="%d"' % w.pid in text and 'pid="%d"' % w2.pid not in text,
              "serve --all: a process that exited is gone from the next scrape")
    finally:
        check(terminate(srv) == 0, "serve --all exits 0 on SIGTERM")


def pick_planned(text, pid, want):
    """The by-class lines of the plan's classes of process `pid` (the ticker thread's move)."""
    planned = set('class="%d"' % c for classes in want.values() for c in classes)
    series = ("livealloc_allocs_total{", "livealloc_frees_total{", "livealloc_live_blocks{",
              "livealloc_requested_bytes_total{")
    return sorted(ln for ln in text.splitlines() if ln.startswith(series) and
                  'pid="%d"' % pid in ln and any(c in ln for c in planned))


def check_snapshot_all(ml, wl, w, tmp):
    """`snapshot --all`: every running process in one output, each as `--pid` shows it; gone
    segments left out, a broken one said on stderr (exit 6) with the others still printed."""
    w2 = Workload(wl)
    try:
        r = run([ml, "snapshot", "--all"])
        shots = {}
        for ln in r.stdout.splitlines():
            j = json.loads(ln)
            shots[j["pid"]] = j
        check(r.returncode == 0 and w.pid in shots and w2.pid in shots,
              "snapshot --all: exit 0, one JSON line per process, both workloads among them "
              "(%d lines, %s)" % (len(shots), r.stderr.strip()))
        for pid in (w.pid, w2.pid):
            if pid in shots:
                check_json(shots[pid], expected(shots[pid]["class_sizes"]))
        want = expected(shots[w.pid]["class_sizes"]) if w.pid in shots else {}
        r = run([ml, "snapshot", "--all", "--format", "csv"])
        lines = r.stdout.splitlines()
        check(r.returncode == 0 and sum(ln.startswith("taken_ns,") for ln in lines) == 1,
              "snapshot --all --format csv: one header for all processes")
        for pid in (w.pid, w2.pid):
            check_csv("\n".join([lines[0]] + [ln for ln in lines[1:]
                                              if ln.split(",")[1] == str(pid)]) + "\n",
                      want, pid)
        r = run([ml, "snapshot", "--all", "--format", "prometheus"])
        types = [ln.split()[2] for ln in r.stdout.splitlines() if ln.startswith("# TYPE ")]
        check(r.returncode == 0 and len(types) == len(set(types)) and
              "livealloc_thread_slow_paths_total" in types,
              "snapshot --all --format prometheus: each family once (%d)" % len(types))
        for pid in (w.pid, w2.pid):
            check_prometheus(only_pid(r.stdout, pid), want, pid)
            info = 'livealloc_process_info{pid="%d",program="memlive_workload"} 1' % pid
            check(info in r.stdout.splitlines(), "prometheus --all: %s" % info)
        # A family's samples stay together, under its TYPE: the format requires it.
        fams = [ln.split("{")[0] for ln in r.stdout.splitlines() if not ln.startswith("#")]
        runs = [f for i, f in enumerate(fams) if i == 0 or fams[i - 1] != f]
        check(len(runs) == len(set(runs)), "prometheus --all: no family is split in two")
        r = run([ml, "snapshot", "--all", "--format", "prometheus", "--by", "class"])
        one = run([ml, "snapshot", "--pid", str(w.pid), "--format", "prometheus", "--by", "class"])
        mine = pick_planned(r.stdout, w.pid, want)
        check(r.returncode == 0 and "thread=" not in r.stdout and mine and
              mine == pick_planned(one.stdout, w.pid, want),
              "snapshot --all --by class: the process's classes as --pid --by class gives them")

        # In a directory of its own: a copy of w's segment, one named for a gone pid (left
        # out), a broken one for w2 (said, exit 6; w still printed), an empty directory.
        d, copy = fake_segment(w.pid, tmp, "all")
        held = FakeValidator(copy)  # holds the copy's lock, as its live owner would
        shutil.copyfile("/dev/shm/livealloc.%d" % w.pid, os.path.join(d, "livealloc.%d" %
                                                                       free_pid()))
        with open(os.path.join(d, "livealloc.%d" % w2.pid), "wb") as f:
            f.write(b"not a segment")
        r = run([ml, "snapshot", "--all", "--dir", d])
        pids = [json.loads(ln)["pid"] for ln in r.stdout.splitlines()]
        err = r.stderr.splitlines()
        check(r.returncode == 6 and pids == [w.pid] and len(err) == 1 and
              err[0].startswith("memlive: snapshot: %s/livealloc.%d: " % (d, w2.pid)),
              "snapshot --all: a broken segment is said (exit 6), the readable one printed, the "
              "gone one left out (%d, %s, %s)" % (r.returncode, pids, r.stderr.strip()))
        r = run([ml, "snapshot", "--all", "--dir", d, "--format", "prometheus", "--by", "class"])
        check(r.returncode == 6 and r.stdout.count("livealloc_process_info{") == 1 and
              r.stdout.endswith("\nmemlive_unreadable_segments 1\n"),
              "snapshot --all --format prometheus: the broken segment counted in "
              "memlive_unreadable_segments (%d, %s)" % (r.returncode, r.stdout[-80:]))
        empty = os.path.join(tmp, "none")
        os.mkdir(empty)
        r = run([ml, "snapshot", "--all", "--dir", empty, "--format", "prometheus"])
        check(r.returncode == 0 and r.stdout.startswith("# HELP ") and
              all(ln.startswith("#") for ln in r.stdout.splitlines()[:-1]) and
              r.stdout.endswith("\nmemlive_unreadable_segments 0\n") and
              "no running process" in r.stderr,
              "snapshot --all of a directory without segments: exit 0, no series, a note (%s)" %
              r.stderr.strip())
        r = run([ml, "snapshot", "--all", "--dir", empty, "--format", "csv"])
        check(r.returncode == 0 and r.stdout.startswith("taken_ns,pid,") and
              r.stdout.count("\n") == 1, "snapshot --all --format csv with none: the header")
        check_serve_all(ml, w, w2, want, one.stdout, d)
        held.close()
    finally:
        w2.kill()


def cmd_cli(ml, wl):
    w = Workload(wl)
    tmp = tempfile.mkdtemp(prefix="memlive-test-")
    try:
        line = listed(ml, w.pid)
        check(line is not None and "memlive_workload" in line and "running" in line,
              "list shows the workload: %s" % line)
        snap = snapshot_json(ml, w.pid)
        if snap:
            check(snap["pid"] == w.pid and snap["alive"], "json: pid and alive")
            want = expected(snap["class_sizes"])
            check_json(snap, want)
            r = run([ml, "snapshot", "--pid", str(w.pid), "--format", "csv"])
            check(r.returncode == 0, "snapshot --format csv: exit 0")
            check_csv(r.stdout, want, w.pid)
            r = run([ml, "snapshot", "--pid", str(w.pid), "--format", "prometheus"])
            check(r.returncode == 0, "snapshot --format prometheus: exit 0")
            check_prometheus(r.stdout, want, w.pid)
        check_snapshot_all(ml, wl, w, tmp)
        check_not_itself(ml, w)
        check_overflow_note(ml, wl)
        check_tune(ml, w.pid)
        check_tune_writers_defaults_ranges(ml, w.pid, tmp)
        check_tune_gone(ml, wl)
        check_young_process(ml, wl)
        check_serve_gone(ml, wl)
        check_exec_without_livealloc(ml, wl)
        check_record(ml, w.pid, tmp)
        check_record_signal_window(ml, w.pid, tmp)
        check_record_follows_exec(ml, wl, tmp)
        check_exec_chain(ml, wl, tmp)
        check_tune_across_exec(ml, wl)
        check_descriptor_limit(ml, w.pid)
        check_closed_stdio(ml, w.pid)
        check_thread_id(ml, w.pid)
        check_errors(ml, w.pid, tmp)

        # Record until the process exits: a final sample, and the exit reported.
        out = os.path.join(tmp, "until-exit.jsonl")
        p = subprocess.Popen([ml, "record", "--pid", str(w.pid), "--interval", "20", "--out", out],
                             stderr=subprocess.PIPE, text=True)
        time.sleep(0.2)
        check(w.stop() == 0, "workload exits 0")
        err, lines = finish_record(p, out)
        last = json.loads(lines[-1]) if lines else {}
        check(p.returncode == 0 and "exited; wrote a final sample" in err and
              last.get("alive") is False,
              "record stops when the process exits, with a final sample (%s)" % err.strip())
        check(listed(ml, w.pid) is None, "list no longer shows the workload once it exited")
    finally:
        w.kill()
        shutil.rmtree(tmp, ignore_errors=True)


# A user's process that truncates and restores its own segment in a loop (what any user may do
# in the world-writable /dev/shm): header offsets as in FakeValidator, pid at 24, start_ns at 80.
TRUNCATOR = r"""
import mmap, os, struct, sys, time
d, src = sys.argv[1], sys.argv[2]
b = bytearray(open(src, "rb").read())
struct.pack_into("<i", b, 24, os.getpid())
struct.pack_into("<Q", b, 80, time.time_ns())
fd = os.open("%s/livealloc.%d" % (d, os.getpid()), os.O_RDWR | os.O_CREAT, 0o644)
os.write(fd, bytes(b))
m = mmap.mmap(fd, len(b))  # mapped by its pid: the segment reads as attached, the process alive
print(os.getpid(), flush=True)
while True:
    os.ftruncate(fd, 0)
    os.ftruncate(fd, len(b))
    os.pwrite(fd, bytes(b), 0)
"""


def cmd_truncate(ml, wl):
    """A segment truncated and restored in a loop by its owner while `list`, `snapshot --all`
    and `serve --all` read it: a read past the file's end raised SIGBUS and killed them (the
    machine exporter, run as root, was at the mercy of any user). None may die of a signal; one
    that caught the file cut says so, for that segment only."""
    w = Workload(wl)
    tmp = tempfile.mkdtemp(prefix="memlive-test-")
    cutter = None
    try:
        d = os.path.join(tmp, "shm")
        os.mkdir(d)
        shutil.copyfile("/dev/shm/livealloc.%d" % w.pid, os.path.join(d, "livealloc.%d" % w.pid))
        cutter = subprocess.Popen([sys.executable, "-c", TRUNCATOR, d,
                                   "/dev/shm/livealloc.%d" % w.pid],
                                  stdout=subprocess.PIPE, text=True)
        cpid = int(cutter.stdout.readline())
        # A read while the file is cut, or while its restore is half-written (a header field
        # still 0: "option_size is 0; ...", seen once under TSan), is refused naming why.
        cut = re.compile(r"truncated|grown|not a livealloc telemetry segment|magic number is zero"
                         r"|\b(is|version|pid) 0\b")
        signals, seen = [], set()
        for i in range(150):
            for args in (["list"], ["snapshot", "--all", "--format", "prometheus"]):
                r = run([ml] + args + ["--dir", d])
                if r.returncode < 0:
                    signals.append("%s: %s" % (" ".join(args), signal.Signals(-r.returncode).name))
                    continue
                if args[0] == "list":
                    row = [ln for ln in r.stdout.splitlines() if ln.split()[:1] == [str(cpid)]]
                    ok = r.returncode == 0 and len(row) == 1 and (
                        row[0].endswith("running") or cut.search(row[0]))
                    if not ok:
                        signals.append("list: exit %d, %r" % (r.returncode, row))
                    elif "truncated while being read" in row[0]:
                        seen.add("list")
                else:
                    # The workload's copy is not its segment (no lock, not mapped by it): gone.
                    ok = r.returncode in (0, 6) and (r.returncode == 0 or cut.search(r.stderr))
                    if not ok:
                        signals.append("snapshot --all: exit %d, %s" % (r.returncode, r.stderr))
                    elif "truncated while being read" in r.stderr:
                        seen.add("snapshot")
        check(not signals, "list and snapshot --all read a segment cut in a loop, 300 runs, "
              "without dying: %s" % signals[:5])
        print("note: 'truncated while being read' seen by: %s" % (sorted(seen) or "none"))
        srv, port = start_serve_all(ml, ["--dir", d])
        try:
            codes = []
            for i in range(150 if port else 0):
                try:
                    codes.append(get_text(port, "/metrics")[0])
                except OSError as e:  # it died
                    codes.append(type(e).__name__)
                    break
            check(port is not None and srv.poll() is None and codes == [200] * len(codes),
                  "serve --all answers /metrics 150 times from a segment cut in a loop, and runs "
                  "on (%s, exit %s)" % (sorted(set(map(str, codes))), srv.poll()))
        finally:
            terminate(srv)
    finally:
        if cutter:
            cutter.kill()
            cutter.wait()
        w.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def cmd_check_budgets(ml, wl):
    w = Workload(wl)
    tmp = tempfile.mkdtemp(prefix="memlive-test-")
    try:
        check_check(ml, w.pid, tmp)
        check_last_growth(ml, wl, w.pid, tmp)
        check(w.stop() == 0, "workload exits 0")
    finally:
        w.kill()
        shutil.rmtree(tmp, ignore_errors=True)


NOBODY = 65534  # Debian's nobody/nogroup: a user who owns nothing here


def denied(r, says, what):
    """An error the caller's rights cause: exit 5, one line `memlive: VERB: ...` naming `says`."""
    lines = r.stderr.splitlines()
    return check(r.returncode == 5 and len(lines) == 1 and lines[0].startswith("memlive: ") and
                 says in lines[0] and not r.stdout,
                 "%s: exit 5, one line saying %r (got %d: %s%s)" %
                 (what, says, r.returncode, r.stdout, r.stderr.strip()))


def page_recycle_of(ml, pid):
    snap = snapshot_json(ml, pid)
    return snap and option(snap, "page_recycle")


def check_own_and_dirs(user, uid, tmp):
    """A segment of the caller's own that its mode keeps it from reading, and directories it may
    not read or enter: exit 5, each with the reason."""
    own = os.path.join(tmp, "own")
    os.mkdir(own)
    os.chown(own, uid, -1)
    pid = os.getpid()  # alive: the reason must be the file, not a missing process
    path = os.path.join(own, "livealloc.%d" % pid)
    with open(path, "wb") as f:
        f.write(b"\0" * 4096)
    os.chown(path, uid, -1)
    os.chmod(path, 0)
    for verb in (["snapshot"], ["tune", "page_recycle=3"], ["serve", "--port", "0"]):
        denied(run(user([verb[0], "--pid", str(pid), "--dir", own] + verb[1:])),
               "%s: permission denied: the file's mode (000) does not let its owner read it" %
               path, "%s of an own segment of mode 000" % verb[0])
    closed = os.path.join(tmp, "closed")
    os.mkdir(closed)
    os.chmod(closed, 0)  # not for its owner either (and root's, for nobody)
    denied(run(user(["list", "--dir", closed])), "cannot read %s: Permission denied" % closed,
           "list of a directory the caller may not read")
    denied(run(user(["snapshot", "--pid", str(pid), "--dir", closed])),
           "%s/livealloc.%d: permission denied: this user may not enter %s" % (closed, pid, closed),
           "snapshot in a directory the caller may not enter")


def check_privileged_port(user, ml, pid, tmp):
    """A port below 1024 without the privilege: exit 5 and one line, for serve and for run,
    which then starts no program."""
    with open("/proc/sys/net/ipv4/ip_unprivileged_port_start") as f:
        if int(f.read()) <= 80:
            print("note: port 80 is not privileged on this machine; that case is not tested")
            return
    says = "cannot listen on 127.0.0.1:80: permission denied (ports below 1024 need " \
           "privileges); choose another with --port (0: any free port)"
    denied(run(user(["serve", "--pid", str(pid), "--port", "80"])), says, "serve --port 80")
    lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(ml))), "allocator",
                       "liblivealloc.so")
    if not os.path.exists(lib):
        print("note: no %s (a sanitizer build): run --port 80 is not tested" % lib)
        return
    shutil.copy(lib, os.path.join(tmp, "liblivealloc.so"))
    ran = os.path.join(tmp, "own", "ran")
    denied(run(user(["run", "--lib", os.path.join(tmp, "liblivealloc.so"), "--port", "80", "--",
                     "/bin/touch", ran])), says, "run --port 80")
    check(not os.path.exists(ran), "run --port 80 did not start the program")


def check_other_users_segment(user, ml, w):
    """Root's workload, read by nobody: its segment (0600) cannot be read, tuned or served and
    `list` says why; made 0644, it reads and serves but cannot be tuned, and the page's POST is
    refused."""
    seg = "/dev/shm/livealloc.%d" % w.pid
    before = page_recycle_of(ml, w.pid)
    says = "%s: permission denied: the segment belongs to another user (uid 0); run as " \
           "that user or as root" % seg
    r = run(user(["list"]))
    row = next((ln for ln in r.stdout.splitlines() if ln.split()[:1] == [str(w.pid)]), "")
    check(r.returncode == 0 and "unreadable: " + says in row,
          "list shows root's segment as unreadable, saying why (%s)" % row)
    for verb in (["snapshot"], ["tune", "page_recycle=3"], ["serve", "--port", "0"],
                 ["record", "--interval", "100", "--out", "-", "--count", "1"]):
        denied(run(user([verb[0], "--pid", str(w.pid)] + verb[1:])), says,
               "%s of another user's segment" % verb[0])
    # Every process at once: this one is said and left out, the others' output goes on.
    r = run(user(["snapshot", "--all"]))
    check(r.returncode == 5 and "memlive: snapshot: " + says in r.stderr.splitlines() and
          '"pid":%d,' % w.pid not in r.stdout,
          "snapshot --all: another user's segment is said, exit 5 (%d: %s)" %
          (r.returncode, r.stderr.strip()))
    srv, port = start_serve_all(user)
    try:
        st, text = get_text(port, "/metrics") if port else (0, "")
        check(st == 200 and "# memlive: left out: " + says in text.splitlines() and
              'pid="%d"' % w.pid not in text,
              "serve --all: another user's segment is named in a comment and left out")
    finally:
        terminate(srv)
    os.chmod(seg, 0o644)
    r = run(user(["snapshot", "--pid", str(w.pid)]))
    snap = json.loads(r.stdout) if r.returncode == 0 else {}
    check(snap.get("pid") == w.pid,
          "snapshot of another user's segment of mode 0644: exit 0, its pid (%d: %s)" %
          (r.returncode, r.stderr.strip()))
    denied(run(user(["tune", "--pid", str(w.pid), "page_recycle=3"])),
           "%s: permission denied: the segment can be read but not written, so it cannot "
           "be tuned; run as the process's user" % seg, "tune of a segment of mode 0644")
    srv = subprocess.Popen(user(["serve", "--pid", str(w.pid), "--port", "0"]),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = srv.stdout.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)/ .*; read-only segment: tuning disabled",
                      line)
        if check(m is not None, "serve of a segment of mode 0644 says it cannot tune (%r)" %
                 line):
            port = int(m.group(1))
            st, opts = get_text(port, "/api/options")
            check(st == 200 and json.loads(opts)["writable"] is False,
                  "GET /api/options: writable false")
            code, _, body = request(port, "POST", "/api/options", '{"page_recycle": 3}',
                                    {"Content-Type": "application/json"})
            body = json.loads(body)
            check(code == 403 and "read-only" in body.get("error", ""),
                  "POST /api/options: 403, read-only (%d %s)" % (code, body))
    finally:
        check(terminate(srv) == 0, "serve of a read-only segment exits 0 on SIGTERM")
    after = page_recycle_of(ml, w.pid)
    check(before is not None and after is not None and
          (after["requested"], after["effective"]) == (before["requested"],
                                                       before["effective"]),
          "page_recycle is as it was after the refused tunes (%s, %s)" % (before, after))


def cmd_permission(ml, wl):
    tmp = tempfile.mkdtemp(prefix="memlive-test-")
    os.chmod(tmp, 0o755)  # nobody enters it (mkdtemp makes it 0700)
    try:
        if os.geteuid() == 0:
            # Root reads anything: the cases run as nobody, with a copy of memlive nobody can run
            # (the build tree may lie where only root goes).
            if not shutil.which("setpriv"):
                print("SKIP: running as root without setpriv (util-linux) to drop to nobody")
                return 77
            mine = os.path.join(tmp, "memlive")
            shutil.copy(ml, mine)
            os.chmod(mine, 0o755)
            drop = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"]

            def user(args):
                return drop + [mine] + args
        else:
            def user(args):
                return [ml] + args
        check_own_and_dirs(user, NOBODY if os.geteuid() == 0 else os.geteuid(), tmp)
        w = Workload(wl)
        try:
            if os.geteuid() == 0:
                check_other_users_segment(user, ml, w)  # made readable by all (0644) on the way
            else:
                print("note: not root: another user's segment is not tested")
            check_privileged_port(user, ml, w.pid, tmp)
            check(w.stop() == 0, "workload exits 0")
        finally:
            w.kill()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def cmd_promtool(ml, wl):
    promtool = shutil.which("promtool")
    if not promtool:
        print("SKIP: promtool is not on PATH (tests/setup.sh fetches it; tests/run.sh adds it)")
        return 77
    w = Workload(wl)
    try:
        r = run([ml, "snapshot", "--pid", str(w.pid), "--format", "prometheus"])
        check(r.returncode == 0, "snapshot --format prometheus: exit 0")
        p = run([promtool, "check", "metrics"], input=r.stdout)
        check(p.returncode == 0, "promtool check metrics accepts it: %s%s" % (p.stdout, p.stderr))
        r = run([ml, "snapshot", "--pid", str(w.pid), "--format", "prometheus", "--by", "class"])
        p = run([promtool, "check", "metrics"], input=r.stdout)
        check(r.returncode == 0 and p.returncode == 0 and "thread=" not in r.stdout and
              "livealloc_allocs_total{" in r.stdout,
              "snapshot --format prometheus --by class: exit 0, no thread labels, promtool "
              "accepts it: %s%s" % (p.stdout, p.stderr))
        # Every process in one text (the workload among them), as a textfile collector takes it.
        for by in ("thread", "class"):
            r = run([ml, "snapshot", "--all", "--format", "prometheus", "--by", by])
            p = run([promtool, "check", "metrics"], input=r.stdout)
            check(r.returncode == 0 and p.returncode == 0 and
                  'livealloc_process_info{pid="%d",' % w.pid in r.stdout,
                  "snapshot --all --format prometheus --by %s: promtool accepts it: %s%s" %
                  (by, p.stdout, p.stderr))
        # The machine's exporter: GET /metrics of `memlive serve --all`, both forms.
        srv, port = start_serve_all(ml)
        try:
            for query in ("", "?by=class"):
                st, body = get_text(port, "/metrics" + query) if port else (0, "")
                p = run([promtool, "check", "metrics"], input=body)
                check(st == 200 and p.returncode == 0 and
                      'livealloc_process_info{pid="%d",' % w.pid in body,
                      "promtool check metrics accepts GET /metrics%s of serve --all: %s%s" %
                      (query, p.stdout, p.stderr))
        finally:
            terminate(srv)
        # The same text over HTTP, as a scraper gets it: GET /metrics of `memlive serve`.
        srv = subprocess.Popen([ml, "serve", "--pid", str(w.pid), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            line = srv.stdout.readline()
            m = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            check(m is not None, "memlive serve prints its URL (%r)" % line)
            if m:
                with urllib.request.urlopen("http://127.0.0.1:%s/metrics" % m.group(1),
                                            timeout=10) as resp:
                    body = resp.read().decode()
                    ctype = resp.headers.get("Content-Type", "")
                check(ctype.startswith("text/plain; version=0.0.4"),
                      "/metrics: Prometheus text content type (%s)" % ctype)
                p = run([promtool, "check", "metrics"], input=body)
                check(p.returncode == 0,
                      "promtool check metrics accepts GET /metrics: %s%s" % (p.stdout, p.stderr))
                with urllib.request.urlopen("http://127.0.0.1:%s/metrics?by=class" % m.group(1),
                                            timeout=10) as resp:
                    body = resp.read().decode()
                p = run([promtool, "check", "metrics"], input=body)
                check(p.returncode == 0 and "livealloc_allocs_total{" in body,
                      "promtool check metrics accepts GET /metrics?by=class: %s%s" %
                      (p.stdout, p.stderr))
        finally:
            srv.terminate()
            srv.wait(timeout=10)
        check(w.stop() == 0, "workload exits 0")
    finally:
        w.kill()
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--memlive", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("what", choices=["cli", "check", "permission", "promtool", "truncate"])
    a = ap.parse_args()
    if a.what == "cli":
        code = cmd_cli(a.memlive, a.workload) or 0
    elif a.what == "check":
        code = cmd_check_budgets(a.memlive, a.workload) or 0
    elif a.what == "truncate":
        code = cmd_truncate(a.memlive, a.workload)
    elif a.what == "permission":
        code = cmd_permission(a.memlive, a.workload)
    else:
        code = cmd_promtool(a.memlive, a.workload)
    if failures:
        print("\n%d check(s) failed:" % len(failures))
        for f in failures:
            print("  " + f)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
