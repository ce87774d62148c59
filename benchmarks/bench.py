#!/usr/bin/python3
"""Runs the benchmark suite under every allocator and writes raw and summary CSV.

    bench.py run --build-dir DIR --out DIR [--reps N] [--smoke] [--scale F]
                 [--allocators a,b] [--workloads w,x] [--require-livealloc] [--livealloc-lib SO]
                 [--command STR] [--prog NAME]
                 (a complete run replaces results.csv, summary.csv, verdict.md and plots/ in OUT;
                 a failed or interrupted one exits 1 or 130 with its partial CSVs in OUT/failed/;
                 a usage error exits 2 before anything runs)
    bench.py summarize RESULTS.csv SUMMARY.csv (summary again from raw rows)
    bench.py plotdata SUMMARY.csv OUTDIR      (data files for plot.sh)
    bench.py table SUMMARY.csv [--metrics a,b] [--ranges] (Markdown table of ratios to glibc;
                                              a metric it cannot show is a usage error, exit 2)
    bench.py verdict RESULTS.csv              (the issue's targets: geometric means, A/A gap,
                                               every case against its fastest peer)
    bench.py profile --build-dir DIR CASE [--allocators a,b] [--reps N] [--cpus LIST] [--smoke]
                                              (CPU time per operation by function, perf sampling)
    bench.py list                             (workloads, what each stresses, allocators)

Standard library only: it must run on a bare /usr/bin/python3. run.sh is the front door.
"""
import argparse
import bisect
import csv
import datetime
import hashlib
import os
import http.client
import math
import re
import select
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LIBDIR = "/usr/lib/x86_64-linux-gnu"

# Allocator columns, in the order runs are interleaved. `lib` None means no preload (glibc).
# `{build}` is the build directory. Peers come from Debian packages, never from this repository.
ALLOCATORS = [
    {"name": "glibc", "lib": None, "env": {}},
    {"name": "livealloc", "lib": "{build}/allocator/liblivealloc.so", "env": {"LIVEALLOC_PROFILE": "0"}},
    # Before/after: another build of livealloc (--baseline-lib), run like `livealloc` and
    # interleaved with it; `bench.py verdict` gives the ratio of the two per case. Only with
    # --baseline-lib.
    {"name": "livealloc@baseline", "lib": None, "env": {"LIVEALLOC_PROFILE": "0"}, "baseline": True},
    # The cost of observing: the same library with profiling on (the counters published in
    # shared memory); the ratio livealloc+profile / livealloc in summary.csv is its price.
    {"name": "livealloc+profile", "lib": "{build}/allocator/liblivealloc.so", "env": {"LIVEALLOC_PROFILE": "1"}},
    # The cost of observing live: the same again, with `memlive serve` attached to the workload
    # and one client reading its 10 Hz /api/stream for the whole run (class Observer). Only for
    # the cases observed() selects; each run adds the metric `observer_events` (events received).
    {"name": "livealloc+memlive", "lib": "{build}/allocator/liblivealloc.so", "env": {"LIVEALLOC_PROFILE": "1"},
     "observer": "{build}/memlive/memlive"},
    # The same library with its background purge thread (option background_purge): what it gives
    # back in `pool_idle main=quiet`, where no thread allocates after the burst, and what it costs
    # elsewhere. Only when --allocators names it.
    {"name": "livealloc+bgpurge", "lib": "{build}/allocator/liblivealloc.so",
     "env": {"LIVEALLOC_PROFILE": "0", "LIVEALLOC_BACKGROUND_PURGE": "1"}, "optional": True},
    {"name": "mimalloc", "lib": LIBDIR + "/libmimalloc.so.2", "env": {}, "package": "libmimalloc2.0"},
    {"name": "jemalloc", "lib": LIBDIR + "/libjemalloc.so.2", "env": {}, "package": "libjemalloc2"},
    {"name": "tcmalloc", "lib": LIBDIR + "/libtcmalloc_minimal.so.4", "env": {}, "package": "libtcmalloc-minimal4"},
]
# Environment variables that tune an allocator: recorded in the header when set.
TUNING_PREFIXES = ("LIVEALLOC_", "MALLOC_", "GLIBC_TUNABLES", "MIMALLOC_", "JE_MALLOC_CONF", "TCMALLOC_")
PACKAGES = ["libc6", "libmimalloc2.0", "libjemalloc2", "libtcmalloc-minimal4"]


def bench_case(workload, *args):
    return {"workload": workload, "kind": "bench", "args": list(args)}


# Every run is its own process, so its peak RSS belongs to one case only.
# The one-line descriptions live at the top of each source file and in README.md.
CASES = (
    [bench_case("fastpath", "size=%s" % s) for s in ("16", "64", "256", "1024", "4096", "16384", "65536", "mixed")]
    + [bench_case("crossthread", "mode=%s" % m, "threads=%d" % t) for m in ("pc", "a2a") for t in (1, 2, 4)]
    + [bench_case("thread_churn")]
    + [bench_case("realloc_growth")]
    + [bench_case("large_blocks")]
    + [bench_case("vector_push", "elem=%s" % e, "threads=%d" % t) for e in ("small", "medium", "large") for t in (1, 4)]
    + [bench_case("sizeclass_xthread", "threads=%d" % t) for t in (2, 4)]
    + [bench_case("fragmentation")]
    + [bench_case("pool_idle"), bench_case("pool_idle", "main=quiet")]
    + [bench_case("idle_owner")]
    + [bench_case("tail_latency")]
    + [{"workload": "python", "kind": "python", "args": []}]
    + [{"workload": "clang", "kind": "clang", "args": []}]
    + [{"workload": "true", "kind": "true", "args": []}]
)

# The `clang` workload: clang++ compiles clang_input.cpp, -O2 in a full run, -O0 in a smoke run.
# The compiler's output does not depend on the allocator, so every run of a bench.py invocation
# must write the object file that clang++ writes without a preload (glibc); CLANG_OBJECTS holds
# its digest: the glibc column's first run, or a compile of its own made before the first run of
# another allocator (`--allocators livealloc` alone has no other reference).
CLANG = "/usr/bin/clang++"
CLANG_OBJECTS = {}


def clang_argv(args, obj):
    return [CLANG, "-std=c++17", "-O0" if args.smoke else "-O2", "-c",
            os.path.join(HERE, "clang_input.cpp"), "-o", obj]


def clang_reference(args):
    """None once CLANG_OBJECTS holds the object clang++ writes without a preload, else why not."""
    if "object" in CLANG_OBJECTS:
        return None
    with tempfile.TemporaryDirectory(prefix="bench-clang-") as scratch:
        obj = os.path.join(scratch, "out.o")
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        r = subprocess.run(clang_argv(args, obj), env=env, capture_output=True, text=True,
                           timeout=600)
        if r.returncode != 0:
            return "clang++ without a preload, for the reference object, exited %d: %s" % (
                r.returncode, " | ".join(r.stderr.strip().splitlines()[-3:]))
        return check_clang_object(obj, {"name": "glibc"})

# The livealloc+memlive column runs only our own benchmark binaries (kind "bench": the python3, clang
# and /bin/true cases go through bench_spawn, whose child has another pid), and only the cases whose
# process runs long enough for a 10 Hz stream to see it: at least OBSERVE_MIN_S. Wall seconds of
# one process at scale 1 under livealloc on the 2-core reference machine (2026-11, load ~7); a full
# run with --scale F observes the cases with seconds * F >= OBSERVE_MIN_S, a smoke run those of
# scale 1 (with tiny sizes, so only the machinery is tested).
OBSERVE_MIN_S = 0.3
CASE_SECONDS = {
    "fastpath size=16": 0.29, "fastpath size=64": 0.16, "fastpath size=256": 0.14,
    "fastpath size=1024": 0.15, "fastpath size=4096": 0.20, "fastpath size=16384": 0.25,
    "fastpath size=65536": 0.25, "fastpath size=mixed": 0.11,
    "crossthread mode=pc threads=1": 0.13, "crossthread mode=pc threads=2": 0.16,
    "crossthread mode=pc threads=4": 0.20, "crossthread mode=a2a threads=1": 0.13,
    "crossthread mode=a2a threads=2": 0.15, "crossthread mode=a2a threads=4": 0.25,
    "thread_churn": 0.68, "realloc_growth": 0.21, "large_blocks": 0.54,
    "vector_push elem=small threads=1": 0.19, "vector_push elem=small threads=4": 0.19,
    "vector_push elem=medium threads=1": 0.12, "vector_push elem=medium threads=4": 0.12,
    "vector_push elem=large threads=1": 0.22, "vector_push elem=large threads=4": 0.21,
    "sizeclass_xthread threads=2": 0.12, "sizeclass_xthread threads=4": 0.27, "fragmentation": 0.22,
    "tail_latency": 3.0,
}


def observed(case, args):
    scale = 1.0 if args.smoke else args.scale
    return case["kind"] == "bench" and CASE_SECONDS.get(case_label(case), 0) * scale >= OBSERVE_MIN_S


OBSERVER_INTERVAL_MS = 100  # 10 Hz
# Ctrl-C, `kill` of run.sh and a closed terminal: each stops the run (exit 130).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

RESULT_RE = re.compile(r"^RESULT (.*)$")
FIELDS = ["rep", "allocator", "workload", "case", "threads", "metric", "value", "unit"]


# Differences (end minus start) can be zero or negative: a ratio of two of them means nothing.
DIFFERENCES = {"rss_growth"}


def better(metric):
    """Which direction is good for a metric: 'higher', 'lower', or 'none' (a fact, not a score)."""
    if metric.endswith("per_s"):
        return "higher"
    if metric in ("live", "bytes_built", "timer_overhead", "observer_events", "batches"):
        return "none"
    return "lower"


def case_label(case):
    return " ".join([case["workload"]] + case["args"])


# ---------------------------------------------------------------------------------------------
# Environment facts for the CSV header.

def sh(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False,
                              timeout=60).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def cmake_cache(build_dir, name):
    """The value of `name` in build_dir's CMakeCache.txt ("" when unset), or None without a cache."""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
            m = re.search(r"^%s:\w+=(.*)$" % re.escape(name), f.read(), re.M)
    except OSError:
        return None
    return m.group(1) if m else ""


def compiler_version(build_dir):
    """The C++ compiler CMake configured in build_dir, with its version line."""
    cxx = cmake_cache(build_dir, "CMAKE_CXX_COMPILER") or "c++"
    version = sh([cxx, "--version"]).splitlines()
    return "%s (%s)" % (version[0] if version else "?", cxx)


def build_type(build_dir):
    """CMAKE_BUILD_TYPE of build_dir: -O2 (RelWithDebInfo) and -O3 (Release) are different programs."""
    value = cmake_cache(build_dir, "CMAKE_BUILD_TYPE")
    return "? (no CMakeCache.txt)" if value is None else (value or "(none)")


def repository(path):
    """The commit checked out at path, and whether tracked files differ from it (untracked files,
    such as a results folder being written, do not change what was measured)."""
    rev = sh(["git", "-C", path, "rev-parse", "--short", "HEAD"]) or "no commit yet"
    dirty = sh(["git", "-C", path, "status", "--porcelain", "--untracked-files=no"])
    return rev + (" (uncommitted changes)" if dirty else "")


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


QUIET_HOST = 0.15  # the probe's spread above which the verdict calls the host noisy


def probe_host():
    """Seconds a fixed loop of integer additions takes in this process: no allocator of the run's,
    no system call, so its spread between repetitions is the host's (other tenants of the CPU, its
    clock), not any allocator's. About 15 ms."""
    started = time.perf_counter()
    x = 0
    for i in range(300000):
        x += i
    return time.perf_counter() - started


SETTLE_TOLERANCE = 0.10  # --settle: a probe within 10% of the run's reference is a quiet host
SETTLE_CALIBRATION = 50  # probes back to back at the start of a --settle run


class Settle:
    """--settle S: before each run, probes the host back to back until a probe is within
    SETTLE_TOLERANCE of the reference (the 10th percentile of every probe of the run so far: its
    fastest alone can be an outlier), for at most S seconds, and probes once after the run. On a
    shared host the noise comes in phases (other tenants of the CPU), so a run that starts in a
    quiet phase mostly ends in one. The probes keep the CPU busy while they wait: after a sleep
    the first probes run up to twice as slow on this host, so waiting idle would wait for
    itself. Every allocator's run is gated alike, and the counts go into the results."""

    def __init__(self, limit):
        self.limit = limit
        self.seen = []  # every probe of the run, sorted
        self.runs = self.waited_runs = self.late = self.ended_quiet = 0
        self.waited = 0.0
        for _ in range(SETTLE_CALIBRATION):
            self.quiet(probe_host())

    def reference(self):
        return self.seen[len(self.seen) // 10]

    def quiet(self, seconds):
        """Whether a probe of `seconds` is a quiet host's (and the reference counts it)."""
        bisect.insort(self.seen, seconds)
        return seconds <= self.reference() * (1 + SETTLE_TOLERANCE)

    def before(self):
        self.runs += 1
        started = time.monotonic()
        if self.quiet(probe_host()):
            return
        self.waited_runs += 1
        while not self.quiet(probe_host()):
            if time.monotonic() - started >= self.limit:
                self.late += 1
                break
        self.waited += time.monotonic() - started

    def after(self):
        self.ended_quiet += self.quiet(probe_host())

    def line(self):
        """The results' footer line (read by the verdict)."""
        return ("# settle: %d of %d runs ended on a quiet host (a probe within %d%% of the "
                "run's reference, %.4f s); %d waited for one before they started, %.1f s in all, "
                "%d of them started after the limit of %g s"
                % (self.ended_quiet, self.runs, round(100 * SETTLE_TOLERANCE), self.reference(),
                   self.waited_runs, self.waited, self.late, self.limit))


def spread(values):
    """(max - min) / median of a case's repetitions; None for fewer than 2 or a median of 0."""
    if len(values) < 2 or statistics.median(values) <= 0:
        return None
    return (max(values) - min(values)) / statistics.median(values)


def median_spread(groups):
    """(median over the groups of their spread, groups counted), or None if no group has one."""
    spreads = [s for s in map(spread, groups) if s is not None]
    return (statistics.median(spreads), len(spreads)) if spreads else None


def header_lines(args, allocators, notes):
    """The '# ' comment lines both CSV files start with."""
    lscpu = sh(["lscpu"])
    model = re.search(r"Model name:\s*(.*)", lscpu)
    cpus = re.search(r"^CPU\(s\):\s*(\d+)", lscpu, re.M)
    mem = re.search(r"MemTotal:\s*(\d+) kB", open("/proc/meminfo").read())
    packages = sh(["dpkg-query", "-W", "-f", "${Package} ${Version}, "] + PACKAGES).rstrip(", ")
    lines = [
        "date: " + datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command: " + args.command,
        "machine: %s, %s cores, %s GiB RAM" % (model.group(1) if model else "?", cpus.group(1) if cpus else "?",
                                              round(int(mem.group(1)) / 2**20) if mem else "?"),
        "kernel: " + sh(["uname", "-srvm"]),
        "compiler: " + compiler_version(args.build_dir),
        "build type: " + build_type(args.build_dir),
        "packages: " + packages,
        # The real programs run are workloads too: their versions decide what they allocate.
        "programs: %s; %s" % (sh(["/usr/bin/python3", "--version"]) or "python3 missing",
                              (sh([CLANG, "--version"]).splitlines() or ["clang++ missing"])[0]),
        "repository: " + repository(HERE),
        "mode: %s, repetitions %d, %s" % ("smoke" if args.smoke else "full", args.reps,
                                          "tiny sizes" if args.smoke else "scale %g" % args.scale),
        # Other work on a shared machine moves multi-threaded results most: record how busy it was.
        "load average at start: " + loadavg(),
        "allocators: " + ", ".join("%s=%s" % (a["name"], a["path"] or "(no preload)") for a in allocators),
    ]
    for a in allocators:
        if a.get("memlive"):
            lines.append("%s: observed by `%s serve --pid PID --port 0 --interval %d`, one client on "
                         "/api/stream?interval_ms=%d; only these cases: %s" % (
                             a["name"], a["memlive"], OBSERVER_INTERVAL_MS, OBSERVER_INTERVAL_MS,
                             "; ".join(case_label(c) for c in CASES if observed(c, args)) or "none"))
    # No commit may describe the library under test (work in progress): identify it by content.
    for a in allocators:
        if a["name"] in ("livealloc", "livealloc@baseline"):
            with open(a["path"], "rb") as f:
                digest = hashlib.sha256(f.read()).hexdigest()[:16]
            built = datetime.datetime.fromtimestamp(os.path.getmtime(a["path"])).astimezone()
            lines.append("%s library: sha256 %s, built %s" % (a["name"], digest, built.isoformat(timespec="seconds")))
    tuning = sorted("%s=%s" % kv for kv in os.environ.items() if kv[0].startswith(TUNING_PREFIXES))
    if tuning:
        lines.append("allocator environment (all columns): " + " ".join(tuning))
    lines += ["note: " + n for n in notes]
    return ["# " + l for l in lines]


# ---------------------------------------------------------------------------------------------
# One run.

class ObserverError(Exception):
    pass


class Observer:
    """`memlive serve --pid PID --port 0` plus one client on GET /api/stream?interval_ms=100.

    The workload (a bench binary started with BENCH_OBSERVER_FD, see bench_common.h) waits before
    main() on a pipe; attach() waits for its telemetry segment, starts serve, connects the client
    and releases the workload only once the first event has arrived. The events received until
    the workload exits are the run's `observer_events`: the proof it was observed.
    """

    def __init__(self, memlive, cwd):
        self.memlive, self.cwd = memlive, cwd
        self.serve = None
        self.conn = None
        self.thread = None
        self.events = 0
        self.first = threading.Event()
        self.stream_error = None  # why the stream ended, once it has
        self.stream_done = threading.Event()
        self.serve_out = ""

    def attach(self, proc, gate_fd):
        pid = proc.pid
        seg = "/dev/shm/livealloc.%d" % pid
        deadline = time.monotonic() + 2
        while not os.path.exists(seg):
            if proc.poll() is not None:
                raise ObserverError("the workload exited before its telemetry segment %s appeared" % seg)
            if time.monotonic() > deadline:
                raise ObserverError("no telemetry segment %s within 2 s (LIVEALLOC_PROFILE=1 ignored?)" % seg)
            time.sleep(0.002)
        argv = [self.memlive, "serve", "--pid", str(pid), "--port", "0",
                "--interval", str(OBSERVER_INTERVAL_MS)]
        self.serve = subprocess.Popen(argv, cwd=self.cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      start_new_session=True)
        line = b""
        deadline = time.monotonic() + 5
        while not line.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.serve.stdout], [], [], left)[0]:
                raise ObserverError("`%s` printed no URL within 5 s" % " ".join(argv))
            chunk = os.read(self.serve.stdout.fileno(), 1)
            if not chunk:
                self.serve.wait()
                raise ObserverError("`%s` exited with code %s: %s" % (
                    " ".join(argv), self.serve.returncode, self.serve.stderr.read().decode(errors="replace").strip()))
            line += chunk
        self.serve_out = line.decode(errors="replace").strip()
        m = re.search(r"http://[^/\s]+:(\d+)/", self.serve_out)
        if not m:
            raise ObserverError("cannot read the port from memlive serve: %r" % self.serve_out)
        port = int(m.group(1))
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        self.conn.request("GET", "/api/stream?interval_ms=%d" % OBSERVER_INTERVAL_MS)
        resp = self.conn.getresponse()
        if resp.status != 200:
            raise ObserverError("GET /api/stream on port %d: HTTP %d %s" % (port, resp.status, resp.read(200)))
        self.start_reader(resp)
        if not self.first.wait(3):
            raise ObserverError("no event on /api/stream within 3 s (%s)" % (self.stream_error or "stream open"))
        os.write(gate_fd, b"g")  # the workload may start

    def start_reader(self, resp):
        """Starts the thread that counts the stream's events. Signals wait until it runs: an
        interrupt taken inside start(), before the new thread had run, let the interpreter exit
        under it, and python3.11 died with SIGSEGV in the thread's bootstrap instead of exiting
        with 130 (seen once under ctest -j2). The thread inherits the mask, so it never takes
        them; the main thread does, once they are unblocked."""
        self.thread = threading.Thread(target=self._read, args=(resp,), daemon=True)
        old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self.thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def _read(self, resp):
        try:
            while True:
                line = resp.readline()
                if not line:
                    self.stream_error = "the server closed the stream"
                    break
                if line.startswith(b"data:"):
                    self.events += 1
                    self.first.set()
        except (OSError, http.client.HTTPException) as e:
            self.stream_error = "stream read failed: %s" % e
        finally:
            self.stream_done.set()

    def finish(self):
        """At the workload's exit: (events, None) or (events, why the observation broke)."""
        events = self.events
        problem = None
        if self.stream_done.is_set():
            problem = "the observer stopped before the workload ended (%s)" % self.stream_error
        elif self.serve is not None and self.serve.poll() is not None:
            problem = "memlive serve exited (code %s) before the workload ended" % self.serve.returncode
        return events, problem

    def stop(self):
        if self.serve is not None and self.serve.poll() is None:
            self.serve.send_signal(signal.SIGTERM)
            try:
                self.serve.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(self.serve.pid, signal.SIGKILL)
                self.serve.wait()
        if self.conn is not None:
            self.conn.close()
        # An interrupt may come between the thread's creation and its start (attach), where
        # join() raises "cannot join thread before it is started": the run then ended in that
        # traceback, exit 1, leaving the workload's segment.
        if self.thread is not None and self.thread.ident is not None:
            self.thread.join(timeout=5)
        if self.serve is not None:
            self.serve.stdout.close()
            self.serve.stderr.close()


def run_process(argv, env, timeout, cwd, observer=None):
    """Runs argv; returns (status, stdout, stderr, observer_events), status None when it exited
    with 0. With `observer` (memlive's path) the run is observed live (class Observer)."""
    gate_r = gate_w = None
    obs = None
    if observer:
        gate_r, gate_w = os.pipe()
        env = dict(env, BENCH_OBSERVER_FD=str(gate_r))
    # Own session, so a timeout kills the whole group (bench_spawn and its child included).
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, pass_fds=(gate_r,) if observer else ())
    events, status = None, None

    def abandon():
        """Interrupted: the workload and memlive serve have sessions of their own, so Ctrl-C
        does not reach them; end them here, and remove the segment the killed workload left."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:  # it had just exited
            pass
        proc.wait()
        if obs is not None:
            obs.stop()
        seg = "/dev/shm/livealloc.%d" % proc.pid
        if os.path.exists(seg):
            os.unlink(seg)

    if observer:
        os.close(gate_r)
        obs = Observer(observer, cwd)
        try:
            obs.attach(proc, gate_w)
        except (ObserverError, OSError, http.client.HTTPException) as e:
            status = "observer failed: %s" % e
            os.killpg(proc.pid, signal.SIGKILL)
        except BaseException:  # interrupted while attaching (serve may be running already)
            os.close(gate_w)
            gate_w = None
            abandon()
            raise
        finally:
            if gate_w is not None:
                os.close(gate_w)  # the workload sees end of file if it was not released
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        status = status or "timed out after %d s" % timeout
    except BaseException:
        abandon()
        raise
    if obs is not None:
        events, problem = obs.finish()
        obs.stop()
        seg = "/dev/shm/livealloc.%d" % proc.pid
        if proc.returncode < 0 and os.path.exists(seg):  # killed: no exit handler unlinked it
            os.unlink(seg)
        status = status or (("observer failed: " + problem) if problem else None)
    stdout, stderr = out.decode(errors="replace"), err.decode(errors="replace")
    if status is None and proc.returncode < 0:
        status = "killed by signal %s" % signal.Signals(-proc.returncode).name
    elif status is None and proc.returncode > 128 and "killed by signal" in stderr:  # from bench_spawn
        status = "killed by signal %s" % signal.Signals(proc.returncode - 128).name
    elif status is None and proc.returncode != 0:
        status = "exit code %d" % proc.returncode
    if status is None and "cannot be preloaded" in stderr:
        status = "LD_PRELOAD ignored by ld.so"
    return status, stdout, stderr, events


def parse_results(stdout):
    rows = []
    for line in stdout.splitlines():
        m = RESULT_RE.match(line)
        if m:
            rows.append(dict(kv.split("=", 1) for kv in m.group(1).split()))
    return rows


def bench_argv(case, args, build_dir):
    """The command line of a benchmark binary's case (kind "bench")."""
    exe = os.path.join(build_dir, "benchmarks", "bench_" + case["workload"])
    return [exe] + case["args"] + (["--smoke"] if args.smoke else ["scale=%g" % args.scale])


def run_case(case, alloc, args, build_dir):
    """Returns (rows, failure message or None)."""
    # Tuning variables the caller set (LIVEALLOC_*, MALLOC_CONF, ...) pass through and are listed
    # in the CSV header; LIVEALLOC_PROFILE belongs to the columns.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env.update(alloc["env"])
    env["PYTHONHASHSEED"] = "0"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if alloc["path"]:
        env["LD_PRELOAD"] = alloc["path"]
    timeout = 120 if args.smoke else 600
    if case["kind"] == "bench":
        argv = bench_argv(case, args, build_dir)
        status, stdout, stderr, events = run_process(argv, env, timeout, build_dir, alloc.get("memlive"))
        rows = parse_results(stdout)
        if status is None:
            status = check_preload(stdout, alloc)
        if status is None and not rows:
            status = "printed no RESULT lines"
        if status is None and events is not None:
            main = next((r for r in rows if r["metric"] in ("ops_per_s", "threads_per_s", "time")), rows[0])
            rows.append(result_row(main["workload"], main["case"], main["threads"], "observer_events",
                                   events, "events"))
    else:
        # External programs go through bench_spawn, which reports each child's own peak RSS.
        spawn = os.path.join(build_dir, "benchmarks", "bench_spawn")
        scratch = None
        if case["kind"] == "python":
            rounds = 1 if args.smoke else max(1, round(6 * args.scale))
            target, runs = ["/usr/bin/python3", os.path.join(HERE, "python_alloc.py"), str(rounds)], 1
        elif case["kind"] == "clang":
            scratch = tempfile.mkdtemp(prefix="bench-clang-")
            target, runs = clang_argv(args, os.path.join(scratch, "out.o")), 1
        else:  # /bin/true: the cost of loading the allocator at all (start-up time, resident set)
            target, runs = ["/bin/true"], (3 if args.smoke else 20)
        argv = [spawn, str(runs)] + target
        status, stdout, stderr, _ = run_process(argv, env, timeout, build_dir)
        if scratch:
            if status is None and alloc["path"]:  # compared with glibc's object, never its own
                status = clang_reference(args)
            if status is None:
                status = check_clang_object(os.path.join(scratch, "out.o"), alloc)
            shutil.rmtree(scratch, ignore_errors=True)
        rows = parse_results(stdout)
        spawns = [dict(kv.split("=", 1) for kv in l.split()[1:]) for l in stdout.splitlines()
                  if l.startswith("SPAWN ")]
        if status is None and len(spawns) != runs:
            status = "bench_spawn reported %d of %d runs" % (len(spawns), runs)
        if status is None:
            w, c = case["workload"], {"python": "json+bytes", "clang": "compile"}.get(case["kind"], "exec")
            walls = [float(s["wall_s"]) for s in spawns]
            # The compile is the whole process: its wall time is the case's `time`. python3
            # reports the time of its own work, so its process's wall time is `wall`.
            wall = "exec_time" if runs > 1 else ("time" if case["kind"] == "clang" else "wall")
            rows += [result_row(w, c, 1, wall, statistics.median(walls) * (1 if runs == 1 else 1e3),
                                "s" if runs == 1 else "ms"),
                     # User + system time: on a shared machine far steadier than wall time.
                     result_row(w, c, 1, "cpu_time", statistics.median(float(s["cpu_s"]) for s in spawns)
                                * (1 if runs == 1 else 1e3), "s" if runs == 1 else "ms"),
                     result_row(w, c, 1, "peak_rss", max(int(s["maxrss_kib"]) for s in spawns), "KiB"),
                     result_row(w, c, 1, "minflt", statistics.median(int(s["minflt"]) for s in spawns), "faults")]
    if status:
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        prefix = " ".join("%s=%s" % kv for kv in sorted(alloc["env"].items()))
        prefix += (" LD_PRELOAD=" + alloc["path"]) if alloc["path"] else ""
        if alloc.get("memlive"):
            prefix = "(observed by %s serve, stream at %d ms) %s" % (alloc["memlive"], OBSERVER_INTERVAL_MS, prefix)
        return rows, "%s: %s%s" % (status, (prefix + " " + " ".join(argv)).strip(),
                                   (" -- stderr: " + tail) if tail else "")
    return rows, None


def check_clang_object(path, alloc):
    """None if clang++ wrote the same object as in this invocation's first run, else the problem."""
    try:
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
    except OSError as e:
        return "clang++ wrote no object file (%s)" % e.strerror
    first = CLANG_OBJECTS.setdefault("object", (digest, alloc["name"]))
    if first[0] != digest:
        return "clang++ wrote a different object file than under %s (output corrupted)" % first[1]
    return None


def check_preload(stdout, alloc):
    """The binary reports which library answers `malloc`; it must be the one we preloaded."""
    m = re.search(r"^INFO malloc_from=(.*)$", stdout, re.M)
    if not m:
        return "did not report which library provides malloc"
    got = os.path.realpath(m.group(1))
    if alloc["path"] is None:
        return None if "/libc.so" in got else "malloc comes from %s, expected glibc" % got
    return None if got == os.path.realpath(alloc["path"]) else "malloc comes from %s, not the preload" % got


def result_row(workload, case, threads, metric, value, unit):
    return {"workload": workload, "case": case, "threads": str(threads), "metric": metric,
            "value": "%.6g" % value, "unit": unit}


# ---------------------------------------------------------------------------------------------
# The suite.

class UsageError(Exception):
    """A run that cannot start as asked: printed as one line, exit code 2."""


def comma_list(option, value):
    """The names of a comma list option; an empty name (`--workloads ,`) is a usage error."""
    items = value.split(",")
    if "" in items:
        raise UsageError("%s %r: empty name in the comma list" % (option, value))
    return items


def pick_allocators(args, build_dir, notes):
    """The columns to run. A column named in --allocators (or required) whose library is missing
    is a UsageError; one of the default set is skipped with a note."""
    explicit = bool(args.allocators)
    wanted = comma_list("--allocators", args.allocators) if explicit else [
        a["name"] for a in ALLOCATORS
        if not a.get("optional") and (not a.get("baseline") or args.baseline_lib)]
    unknown = [w for w in wanted if w not in {a["name"] for a in ALLOCATORS}]
    if unknown:
        raise UsageError("--allocators: unknown allocator(s) %s (known: %s)"
                         % (",".join(unknown), ",".join(a["name"] for a in ALLOCATORS)))
    if "livealloc@baseline" in wanted and not args.baseline_lib:
        raise UsageError("livealloc@baseline needs --baseline-lib PATH (another build's liblivealloc.so)")
    # The converse: a library that no column of the run loads would be ignored without a word.
    users = [w for w in wanted if w.startswith("livealloc") and w != "livealloc@baseline"]
    if args.livealloc_lib and not users:
        raise UsageError("--livealloc-lib: no column of --allocators %s runs it (only livealloc, "
                         "livealloc+profile, livealloc+memlive and livealloc+bgpurge do)"
                         % args.allocators)
    if args.baseline_lib and "livealloc" not in wanted:
        raise UsageError("--baseline-lib: livealloc@baseline is compared with livealloc, which "
                         "--allocators %s leaves out" % args.allocators)
    if args.baseline_lib and "livealloc@baseline" not in wanted:
        wanted.append("livealloc@baseline")
    chosen = []
    for a in ALLOCATORS:
        if a["name"] not in wanted:
            continue
        if a.get("baseline"):
            lib = args.baseline_lib
        elif args.livealloc_lib and a["name"].startswith("livealloc"):
            lib = args.livealloc_lib
        else:
            lib = a["lib"]
        path = os.path.abspath(lib.format(build=build_dir)) if lib else None
        memlive = os.path.abspath(a["observer"].format(build=build_dir)) if a.get("observer") else None
        missing = None
        if path and not os.path.isfile(path):  # a folder too: ld.so can preload only a file
            found = "not a file" if os.path.exists(path) else "not found"
            if a.get("baseline"):
                raise UsageError("--baseline-lib: %s %s" % (path, found))
            if args.livealloc_lib and a["name"].startswith("livealloc"):  # asked for by name
                raise UsageError("--livealloc-lib: %s %s" % (path, found))
            how = ("install the Debian package %s" % a["package"] if a.get("package") else
                   "build the target livealloc_preload, or give --livealloc-lib")
            missing = "%s not found (%s)" % (path, how)
        elif memlive and not os.access(memlive, os.X_OK):
            missing = "%s not found (build the target memlive)" % memlive
        if missing:
            required = args.require_livealloc and a["name"].startswith("livealloc")
            if explicit or required:
                raise UsageError("%s: %s" % (a["name"], missing) + ("" if explicit else
                                 "; --require-livealloc makes that an error"))
            notes.append("%s skipped: %s" % (a["name"], missing))
            continue
        chosen.append(dict(a, path=path, memlive=memlive))
    return chosen


def unusable_dir(path):
    """None if path is a directory this process can write in, or can be created as one; else why not."""
    probe = path
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return "not a directory" if probe == path else "%s is not a directory" % probe
    if not os.access(probe, os.W_OK | os.X_OK):
        return "not writable" if probe == path else "cannot create it: %s is not writable" % probe
    return None


def cmd_run(args):
    try:
        return run_suite(args)
    except UsageError as e:
        print("%s: %s" % (args.prog, e), file=sys.stderr)
        return 2


def interrupted(signum, _frame):
    raise KeyboardInterrupt("signal %d" % signum)


def number(option, text, kind):
    """--reps and --scale as given (not argparse's type=, whose error is a usage block under
    bench.py's name rather than one line under run.sh's)."""
    try:
        return kind(text)
    except ValueError:
        raise UsageError("%s must be %s (got %r)" % (
            option, "an integer" if kind is int else "a number", text)) from None


def run_suite(args):
    # Checked before anything is written: a run that cannot happen must not replace the results.
    args.reps, args.scale = number("--reps", args.reps, int), number("--scale", args.scale, float)
    args.settle = number("--settle", args.settle, float)
    if args.reps < 1:
        raise UsageError("--reps must be at least 1 (got %d)" % args.reps)
    if not (1e-6 <= args.scale <= 1e6):  # also false for nan
        raise UsageError("--scale must be from 1e-06 to 1e+06 (got %g)" % args.scale)
    if not (0 <= args.settle <= 600):
        raise UsageError("--settle must be from 0 to 600 seconds (got %g)" % args.settle)
    build_dir = os.path.abspath(args.build_dir)
    out_dir = os.path.abspath(args.out)
    notes = []
    allocators = pick_allocators(args, build_dir, notes)
    cases = CASES
    if args.workloads:
        wanted = set(comma_list("--workloads", args.workloads))
        known = {c["workload"] for c in CASES}
        unknown = sorted(w for w in wanted if w not in known)
        if unknown:  # one typo in a list must not quietly drop that workload from the run
            raise UsageError("--workloads: no workload matches %s (known: %s)"
                             % (",".join(unknown), ",".join(sorted(known))))
        cases = [c for c in CASES if c["workload"] in wanted]
    for c in cases:
        # Programs not our own (python3, clang, /bin/true) run under bench_spawn.
        exe = os.path.join(build_dir, "benchmarks",
                           "bench_" + (c["workload"] if c["kind"] == "bench" else "spawn"))
        if not os.access(exe, os.X_OK):
            raise UsageError("missing %s: build the benchmarks first (run.sh without --no-build)" % exe)
        if c["kind"] == "clang" and not os.access(CLANG, os.X_OK):
            raise UsageError("missing %s for the clang workload: install Debian's clang (tests/setup.sh "
                             "does), or leave it out with --workloads" % CLANG)
    why = unusable_dir(out_dir)
    if why:
        raise UsageError("--out %s: %s" % (args.out, why))
    for n in notes:
        print("note: " + n, file=sys.stderr)

    # The run writes into <out>/incomplete/. Only a complete run moves its results.csv,
    # summary.csv, verdict.md and plots/ into <out>, together; a failed or interrupted one
    # becomes <out>/failed/ and leaves the last complete results in place.
    stage = os.path.join(out_dir, "incomplete")
    failed_dir = os.path.join(out_dir, "failed")
    # `kill` of run.sh (which execs bench.py) as Ctrl-C, and a closed terminal's SIGHUP: the
    # workloads and memlive serve run in sessions of their own, which neither signal reaches.
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, interrupted)
    # The header's facts come from short programs (lscpu, dpkg-query, git). An interrupt raised
    # between the start of one and the wait for it would leave it running: signals wait until
    # the header is complete (each program has 60 s), and one that came stops the run there.
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        facts = header_lines(args, allocators, notes)  # once, at the start: its date and load
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # raises for a signal that came
    except KeyboardInterrupt:
        print("%s: interrupted before the first run; nothing was written" % args.prog,
              file=sys.stderr)
        return 130
    shutil.rmtree(stage, ignore_errors=True)
    try:
        os.makedirs(stage)  # (only once every argument has been checked)
    except OSError as e:  # a place that says it is writable and is not: /proc, /sys
        print("%s: --out %s: cannot create %s: %s" % (args.prog, args.out, stage, e.strerror),
              file=sys.stderr)
        return 2
    failures = []
    stopped = False
    all_rows = []
    def applies(case, alloc):
        return not alloc.get("memlive") or observed(case, args)

    total = args.reps * sum(applies(c, a) for c in cases for a in allocators)
    probes = {}  # case -> the host probe's seconds, timed before the case in each repetition
    done = 0
    started = time.monotonic()
    settle = None
    with open(os.path.join(stage, "results.csv"), "w", newline="") as raw:
        raw.write("\n".join(["# livealloc benchmarks: raw rows, one per metric per run"] + facts) + "\n")
        writer = csv.DictWriter(raw, fieldnames=FIELDS)
        writer.writeheader()
        # Interleaved: each case runs under every allocator in turn (A B C D E A B C D E ...), and
        # the whole sweep repeats, so slow drift on a shared machine hits every allocator alike.
        try:
            if args.settle > 0:  # (its calibration, 50 probes, is interruptible as a run is)
                settle = Settle(args.settle)
            for rep in range(1, args.reps + 1):
                for case in cases:
                    probes.setdefault(case_label(case), []).append(probe_host())
                    if settle:
                        settle.quiet(probes[case_label(case)][-1])
                    for alloc in allocators:
                        if not applies(case, alloc):
                            continue
                        done += 1
                        elapsed = time.monotonic() - started
                        eta = elapsed / (done - 1) * (total - done + 1) if done > 1 else 0
                        print("[%3d/%d, %d left, ~%ds to go] rep %d/%d  %-18s %s" % (
                            done, total, total - done, eta, rep, args.reps, alloc["name"], case_label(case)),
                            file=sys.stderr, flush=True)
                        if settle:
                            settle.before()
                        rows, failure = run_case(case, alloc, args, build_dir)
                        if settle:
                            settle.after()
                        if failure:
                            msg = "FAILED allocator=%s workload=%s (rep %d): %s" % (
                                alloc["name"], case_label(case), rep, failure)
                            print(msg, file=sys.stderr, flush=True)
                            failures.append(msg)
                            continue
                        for r in rows:
                            r.update(rep=rep, allocator=alloc["name"])
                            writer.writerow({k: r[k] for k in FIELDS})
                        raw.flush()
                        all_rows += rows
        except KeyboardInterrupt:
            stopped = True
            failures.append("INTERRUPTED during run %d of %d" % (done, total))
            print("\n" + failures[-1], file=sys.stderr)
        end = ["# load average at end: %s; %d runs in %.0f s" % (loadavg(), total, time.monotonic() - started)]
        host = median_spread(probes.values())
        if host:  # read by the verdict
            end.append("# host probe: %.4f, the median over %d cases of the spread of a fixed "
                       "loop of integer additions timed before the case in each repetition"
                       % host)
        if settle:
            end.append(settle.line())
        end += ["# " + f for f in failures]
        raw.write("\n".join(end) + "\n")
    try:
        write_summary(all_rows, os.path.join(stage, "summary.csv"),
                      ["# livealloc benchmarks: summary (median over repetitions)"] + facts + end)
        if not failures:
            failures += finish_run(stage, args)
    except KeyboardInterrupt:  # after the last run: a failed run all the same, and said so
        stopped = True
        failures.append("INTERRUPTED after the last run, before the summary, verdict and plots "
                        "were complete")
        print("\n" + failures[-1], file=sys.stderr)
        with open(os.path.join(stage, "results.csv"), "a") as raw:
            raw.write("# " + failures[-1] + "\n")
    if failures:
        shutil.rmtree(failed_dir, ignore_errors=True)
        os.replace(stage, failed_dir)
        print("%d run(s) FAILED:" % len(failures), file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        print("%s: this run's partial results.csv and summary.csv are in %s; the results of the last "
              "complete run in %s are left as they were" % (args.prog, failed_dir, out_dir), file=sys.stderr)
        return 130 if stopped else 1
    # Complete: replace the last complete results, all of them, and drop an earlier failed run's.
    for name in ("results.csv", "summary.csv", "verdict.md"):
        os.replace(os.path.join(stage, name), os.path.join(out_dir, name))
    shutil.rmtree(os.path.join(out_dir, "plots"), ignore_errors=True)  # stale once the CSVs change
    if os.path.isdir(os.path.join(stage, "plots")):
        os.replace(os.path.join(stage, "plots"), os.path.join(out_dir, "plots"))
    shutil.rmtree(stage)
    shutil.rmtree(failed_dir, ignore_errors=True)
    print("wrote results.csv, summary.csv, verdict.md%s in %s (%d runs in %.0f s)" % (
        " and plots/" if os.path.isdir(os.path.join(out_dir, "plots")) else "", out_dir, total,
        time.monotonic() - started), file=sys.stderr)
    with open(os.path.join(out_dir, "verdict.md")) as f:
        sys.stdout.write(f.read())
    return 0


def finish_run(stage, args):
    """verdict.md and, in a full run with gnuplot, plots/ in the stage folder; [] or the failures."""
    with open(os.path.join(stage, "verdict.md"), "w") as f:
        v = subprocess.run([sys.executable, os.path.abspath(__file__), "verdict", os.path.join(stage, "results.csv")],
                           stdout=f, stderr=subprocess.PIPE, text=True)
    if v.returncode != 0:
        return ["FAILED bench.py verdict: %s" % v.stderr.strip()]
    if args.smoke:
        return []
    if not shutil.which("gnuplot"):
        print("%s: note: no plots/ (gnuplot is not installed; the previous run's would be stale): "
              "`apt-get install gnuplot-nox`, then "
              "`benchmarks/plot.sh %s`" % (args.prog, os.path.join(os.path.abspath(args.out), "summary.csv")),
              file=sys.stderr)
        return []
    # Its own session, so an interrupt ends plot.sh and its gnuplot together (killpg).
    p = subprocess.Popen(["bash", os.path.join(HERE, "plot.sh"), os.path.join(stage, "summary.csv"),
                          os.path.join(stage, "plots")], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        err = p.communicate()[1]
    except BaseException:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    # plotdata names what it cannot draw (a workload without glibc's results, or all of them:
    # every plot is a ratio to glibc); anything else on stderr, a gnuplot warning, is a failure.
    lines = err.strip().splitlines()
    skip, nothing_drawn = "plotdata: no plot of ", "plotdata: nothing to draw "
    notes = [l for l in lines if l.startswith((skip, nothing_drawn))]
    nothing = any(l.startswith(nothing_drawn) for l in notes)
    if len(notes) != len(lines) or (p.returncode != 0 and not nothing):
        return ["FAILED plot.sh (exit %d): %s" % (p.returncode, err.strip()[-500:])]
    for n in notes:  # named where the summary will be once the run is complete
        n = n.replace(os.path.join(stage, ""), os.path.join(os.path.abspath(args.out), ""))
        print("%s: note: %s" % (args.prog, n), file=sys.stderr)
    return []


def write_summary(rows, path, header):
    groups = {}
    by_rep = {}  # key -> allocator -> rep -> value, for the paired ratios
    for r in rows:
        key = (r["workload"], r["case"], r["threads"], r["metric"], r["unit"])
        groups.setdefault(key, {}).setdefault(r["allocator"], []).append(float(r["value"]))
        by_rep.setdefault(key, {}).setdefault(r["allocator"], {})[r["rep"]] = float(r["value"])
    fields = ["workload", "case", "threads", "metric", "unit", "better", "allocator", "n",
              "median", "min", "max", "q1", "q3", "ratio_to_glibc", "ratio_to_livealloc",
              "paired_to_glibc", "paired_to_glibc_min", "paired_to_glibc_max", "paired_to_livealloc"]
    order = [a["name"] for a in ALLOCATORS]
    with open(path, "w", newline="") as f:
        f.write("\n".join(header) + "\n")
        f.write("# ratio_to_X = median / median of X; read it with `better` (higher or lower is good)\n")
        f.write("# paired_to_X = median over repetitions of value / X's value in the same repetition, with\n"
                "# its min and max: runs of one repetition are back to back, so a slow phase of a shared\n"
                "# machine, which lasts seconds, hits the allocators of a repetition alike\n")
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for key, per_alloc in groups.items():
            medians = {a: statistics.median(v) for a, v in per_alloc.items()}
            for alloc in sorted(per_alloc, key=order.index):
                v = sorted(per_alloc[alloc])
                q1, q3 = (statistics.quantiles(v, n=4, method="inclusive")[::2] if len(v) > 1 else (v[0], v[0]))
                w.writerow(dict(zip(fields[:5], key), better=better(key[3]), allocator=alloc, n=len(v),
                                median="%.6g" % medians[alloc], min="%.6g" % v[0], max="%.6g" % v[-1],
                                q1="%.6g" % q1, q3="%.6g" % q3,
                                ratio_to_glibc=ratio(medians[alloc], medians.get("glibc"), key[3]),
                                ratio_to_livealloc=ratio(medians[alloc], medians.get("livealloc"), key[3]),
                                **paired(by_rep[key], alloc, key[3])))


def paired(reps, alloc, metric):
    """Per-repetition ratios of `alloc` to glibc (median, min, max) and to livealloc (median)."""
    def ratios(base):
        if metric in DIFFERENCES or base not in reps:
            return []
        return sorted(v / reps[base][rep] for rep, v in reps[alloc].items()
                      if rep in reps[base] and v > 0 and reps[base][rep] > 0)
    g, l = ratios("glibc"), ratios("livealloc")
    fmt = lambda x: "%.4g" % x
    return {"paired_to_glibc": fmt(statistics.median(g)) if g else "",
            "paired_to_glibc_min": fmt(g[0]) if g else "",
            "paired_to_glibc_max": fmt(g[-1]) if g else "",
            "paired_to_livealloc": fmt(statistics.median(l)) if l else ""}


def ratio(a, b, metric):
    """median / median; blank for differences and unless both are positive."""
    if metric in DIFFERENCES or b is None or b <= 0 or a <= 0:
        return ""
    return "%.4g" % (a / b)


# ---------------------------------------------------------------------------------------------
# Reading results and summary files back (verdict, table, plotdata, summarize).

RESULT_COLUMNS = ("rep", "allocator", "workload", "case", "threads", "metric", "unit", "value")
SUMMARY_COLUMNS = ("workload", "case", "threads", "metric", "better", "allocator", "ratio_to_glibc",
                   "paired_to_glibc")


def load_rows(command, path, columns, kind):
    """The rows of a results or summary CSV of run.sh and its comment lines. A file that cannot be
    read, has no rows, lacks one of `columns` or holds a non-number where a value or ratio belongs
    ends the command with a message naming the file (exit 1)."""
    def fail(message):
        print("%s: %s" % (command, message), file=sys.stderr)
        sys.exit(1)
    try:
        with open(path) as f:
            lines = f.read().splitlines()
        rows = list(csv.DictReader(l for l in lines if not l.startswith("#")))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        fail("cannot read %s: %s" % (path, e))
    if not rows:
        fail("no rows in %s" % path)
    missing = [c for c in columns if c not in rows[0]]
    if missing:
        fail("%s is not a %s of run.sh (no column %s)" % (path, kind, ", ".join(missing)))
    numbers = [c for c in rows[0] if c == "value" or c.startswith(("ratio_", "paired_"))]
    for i, r in enumerate(rows):
        for c in numbers:
            try:
                if r[c] not in ("", None):
                    float(r[c])
            except (TypeError, ValueError):
                fail("%s, row %d: %s %r is not a number" % (path, i + 1, c, r[c]))
    return rows, [l for l in lines if l.startswith("#")]


# ---------------------------------------------------------------------------------------------
# Plot data: one file per (workload, metric), one row per case, one column per allocator, values
# oriented so that > 1 always means "better than glibc" (lower-is-better metrics inverted).

def cmd_plotdata(args):
    """Writes OUTDIR/<workload>.<metric>.dat and prints "<workload> <metric> <file> <colours>
    <ymin>:<ymax>" per file, in order. A file has three columns (value, low, high: the median of
    the paired ratios and their min and max, the error bar) only for the allocators with a value in
    it (an empty column makes gnuplot warn); <colours> gives each allocator its line colour, the
    same in every panel (1-based positions among the allocators of the run, comma-separated); the
    y range holds every value and the glibc line at 1 with a margin (gnuplot's own would be empty,
    and warn, when every bar is exactly 1)."""
    rows, _ = load_rows("plotdata", args.summary, SUMMARY_COLUMNS, "summary.csv")
    os.makedirs(args.outdir, exist_ok=True)
    present = [a["name"] for a in ALLOCATORS if a["name"] != "glibc" and any(r["allocator"] == a["name"] for r in rows)]
    # `time` only mirrors the throughput of the same run; drawing both would double every panel.
    has_rate = {(r["workload"], r["case"], r["threads"]) for r in rows if r["metric"].endswith("per_s")}
    threads_seen = {}
    for r in rows:
        threads_seen.setdefault(r["workload"], set()).add(r["threads"])
    table = {}  # (workload, metric) -> label -> allocator -> (value, low, high)
    for r in rows:
        if r["better"] == "none" or r["allocator"] == "glibc" or not r["ratio_to_glibc"]:
            continue
        if r["metric"] == "time" and (r["workload"], r["case"], r["threads"]) in has_rate:
            continue
        value = float(r.get("paired_to_glibc") or r["ratio_to_glibc"])
        # The spread: min-max of the paired ratios (none for a ratio of medians: low = high = value).
        spread = [float(r[c]) for c in ("paired_to_glibc_min", "paired_to_glibc_max") if r.get("paired_to_glibc") and r.get(c)]
        low, high = spread if len(spread) == 2 else (value, value)
        if r["better"] == "lower":
            inv = lambda x: 1 / x if x > 0 else float("nan")
            value, low, high = inv(value), inv(high), inv(low)
        label = r["case"] if len(threads_seen[r["workload"]]) == 1 else "%s %st" % (r["case"], r["threads"])
        table.setdefault((r["workload"], r["metric"]), {}).setdefault(label, {})[r["allocator"]] = (value, low, high)
    plotted = set()
    for (workload, metric), labels in table.items():
        drawn = lambda vals, a: a in vals and all(x == x for x in vals[a])  # NaN: nothing to draw
        columns = [a for a in present if any(drawn(vals, a) for vals in labels.values())]
        if not columns:
            continue
        plotted.add(workload)
        path = os.path.join(args.outdir, "%s.%s.dat" % (workload, metric))
        with open(path, "w") as f:
            f.write("label " + " ".join('"%s" min max' % a for a in columns) + "\n")
            for label, vals in labels.items():
                cells = [" ".join("%.4g" % x for x in vals[a]) if drawn(vals, a) else "? ? ?" for a in columns]
                f.write('"%s" %s\n' % (label, " ".join(cells)))
        values = [x for vals in labels.values() for a in columns if drawn(vals, a)
                  for x in vals[a] if x > 0]
        ymin, ymax = min(values + [1.0]) / 1.2, max(values + [1.0]) * 1.2
        print(workload, metric, path, ",".join(str(present.index(a) + 1) for a in columns),
              "%.4g:%.4g" % (ymin, ymax))
    # Every bar is a ratio to glibc: a workload that glibc (or every other allocator) did not
    # run has nothing to draw, which is said rather than left out quietly.
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    if not plotted:
        ran = {r["allocator"] for r in rows}
        print("plotdata: nothing to draw in %s: every plot is a ratio to glibc, and no workload "
              "has results of glibc and of another allocator (%s)"
              % (args.summary, "run another allocator beside glibc" if ran == {"glibc"}
                 else "run glibc in --allocators"), file=sys.stderr)
        return 1
    for w in workloads:
        if w not in plotted:
            print("plotdata: no plot of %s: %s has no ratio to glibc for it" % (w, args.summary),
                  file=sys.stderr)
    return 0


def cmd_summarize(args):
    """Rebuilds a summary from a raw results file (its header block carries over)."""
    rows, comments = load_rows("summarize", args.results, RESULT_COLUMNS, "results.csv")
    facts = comments[1:]
    write_summary(rows, args.summary, ["# livealloc benchmarks: summary (median over repetitions)"] + facts)
    return 0


def cmd_table(args):
    """A Markdown table of ratios to glibc (paired, where the summary has them), for README.md."""
    rows, _ = load_rows("table", args.summary, SUMMARY_COLUMNS, "summary.csv")
    present = [a["name"] for a in ALLOCATORS if any(r["allocator"] == a["name"] for r in rows)]
    # A metric the table cannot show (a typo, one this summary lacks, or one without a better
    # direction) would leave an empty table and exit 0: a usage error, naming those it can show.
    shown = sorted({r["metric"] for r in rows if r["better"] != "none"})
    try:
        wanted = set(comma_list("--metrics", args.metrics)) if args.metrics else None
    except UsageError as e:
        print("table: %s" % e, file=sys.stderr)
        return 2
    unknown = sorted(wanted - set(shown)) if wanted else []
    if unknown:
        print("table: --metrics: unknown metric(s) %s (valid for %s: %s)" % (
            ",".join(unknown), args.summary, ",".join(shown)), file=sys.stderr)
        return 2
    table = {}
    for r in rows:
        if r["better"] == "none" or (wanted and r["metric"] not in wanted):
            continue
        key = (r["workload"], r["case"], r["threads"], r["metric"], r["better"])
        cell = r.get("paired_to_glibc") or r["ratio_to_glibc"]
        if args.ranges and cell and r.get("paired_to_glibc_min"):
            cell = "%.2f (%.2f-%.2f)" % (float(cell), float(r["paired_to_glibc_min"]), float(r["paired_to_glibc_max"]))
        table.setdefault(key, {})[r["allocator"]] = cell
    print("| workload | case | threads | metric (better) | " + " | ".join(present) + " |")
    print("|---|---|---|---|" + "---:|" * len(present))
    for (w, c, t, m, b), vals in table.items():
        print("| %s | %s | %s | %s (%s) | %s |" % (w, c, t, m, b, " | ".join(vals.get(a, "") or "-" for a in present)))
    return 0


# ---------------------------------------------------------------------------------------------
# Verdict: the targets, computed from the raw rows so that every figure is paired (one
# repetition's runs are back to back) and comes with its spread.

PEERS = ("mimalloc", "jemalloc", "tcmalloc", "glibc")
# Time there is not what the workload measures.
NOT_SPEED = {"fragmentation", "pool_idle", "idle_owner", "true"}


def gmean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def advantage(reps, alloc, base, sense):
    """Per-repetition ratios, oriented so that > 1 means `alloc` is better than `base`."""
    if alloc not in reps or base not in reps:
        return []
    out = []
    for rep, v in reps[alloc].items():
        b = reps[base].get(rep)
        if b and v > 0 and b > 0:
            out.append(v / b if sense == "higher" else b / v)
    return sorted(out)


def verdict_cases(rows):
    """Three dicts keyed by (workload, case, threads), values (metric, sense, {allocator: {rep:
    value}}): the speed cases (throughput where a case has it, else time), peak RSS, and the
    memory held after idling (pool_idle's rss_idle)."""
    reps = {}
    for r in rows:
        key = (r["workload"], r["case"], r["threads"])
        reps.setdefault(key, {}).setdefault(r["metric"], {}).setdefault(r["allocator"], {})[r["rep"]] = r["value"]
    speed, rss, idle = {}, {}, {}
    for key, metrics in reps.items():
        if "peak_rss" in metrics:
            rss[key] = ("peak_rss", "lower", metrics["peak_rss"])
        if "rss_idle" in metrics:
            idle[key] = ("rss_idle", "lower", metrics["rss_idle"])
        if key[0] in NOT_SPEED:
            continue
        rate = [m for m in metrics if m.endswith("per_s")]
        metric = rate[0] if rate else ("time" if "time" in metrics else None)
        if metric:
            speed[key] = (metric, better(metric), metrics[metric])
    return speed, rss, idle


def by_case(cases, alloc, base):
    """{case: sorted per-repetition ratios of alloc against base (> 1: alloc better)}, for the
    cases both ran."""
    out = {}
    for key, (_, sense, reps) in cases.items():
        v = advantage(reps, alloc, base, sense)
        if v:
            out[key] = v
    return out


def gmean_of_medians(ratios):
    return gmean([statistics.median(v) for v in ratios.values()])


def run_noise(speed):
    """(median over the speed cases of livealloc's spread between repetitions, (max - min) /
    median, cases): how much the host moved the same build's runs; None for fewer than 2 reps."""
    return median_spread(list(reps.get("livealloc", {}).values()) for _, _, reps in speed.values())


def cmd_verdict(args):
    rows, comments = load_rows("verdict", args.results, RESULT_COLUMNS, "results.csv")
    for r in rows:
        r["value"] = float(r["value"])
    facts = dict(l[2:].split(": ", 1) for l in comments if l.startswith("# ") and ": " in l)
    print("# Verdict: livealloc against the peers\n")
    print("Run of %s, commit %s, %s; `bench.py verdict` over its %d rows.\n"
          % (facts.get("date", "?"), facts.get("repository", "?"), facts.get("mode", "?"), len(rows)))
    if "smoke" in facts.get("mode", ""):
        print("A smoke run: tiny sizes, one repetition; the ratios below say nothing about speed.\n")
    speed, rss, idle = verdict_cases(rows)
    noise = run_noise(speed)
    if noise:
        print("The host's noise in this run: livealloc's own speed moved by a median of %.1f%% "
              "between its slowest and fastest repetition of a case (over %d cases); compare it "
              "between runs before comparing their ratios." % (100 * noise[0], noise[1]))
        probe = re.match(r"([0-9.]+), the median over ([0-9]+) cases", facts.get("host probe", ""))
        if probe:
            host = float(probe.group(1))
            print("A fixed loop of integer additions, timed before each case in each repetition, "
                  "moved by a median of %.1f%% the same way (over %s cases): that much is the "
                  "host's alone, with no allocator in it." % (100 * host, probe.group(2)))
            if host > QUIET_HOST and "settle" not in facts:
                print("**A noisy host**: back to back on a quiet one the loop moves by 4-8%; read "
                      "this run's ratios with their min-max, or run again when the host is quiet "
                      "or with `--settle`.")
            elif host > QUIET_HOST:
                print("**A noisy host**, waited for by `--settle` (below): back to back on a "
                      "quiet one the loop moves by 4-8%; read this run's ratios with their "
                      "min-max.")
        print()
    settled = re.match(r"([0-9]+) of ([0-9]+) runs ended on a quiet host .*; ([0-9]+) waited "
                       r"for one before they started, ([0-9.]+) s in all, ([0-9]+) of them "
                       r"started after the limit of ([0-9.e+]+) s$", facts.get("settle", ""))
    if settled:
        quiet, runs, waited, seconds, late, limit = settled.groups()
        print("With `--settle %s`, each run started once a fixed loop of integer additions ran "
              "within %d%% of its reference time (its 10th percentile in this run), waiting up "
              "to %s s: %s of %s runs waited (%s s in all), %s of them started after the limit, "
              "and %s of %s ended on a quiet host.\n"
              % (limit, round(100 * SETTLE_TOLERANCE), limit, waited, runs, seconds, late, quiet,
                 runs))
    label = lambda k: "%s %s %st" % k
    fmt = lambda v: "%.3f (%.2f-%.2f)" % (statistics.median(v), v[0], v[-1]) if v else "-"
    # A peer of this run: one that ran a speed case or a memory case (a run of the memory
    # workloads alone has no speed case, and its peak RSS is still compared).
    peers = [p for p in PEERS if any(p in reps for _, _, reps in (*speed.values(), *rss.values()))]
    against = {p: by_case(speed, "livealloc", p) for p in peers}
    # The speed cases livealloc and a peer both ran: the table and the speed targets need them.
    compared = [k for k in speed if any(k in against[p] for p in peers)]
    if compared:
        print("Speed of livealloc against each peer, paired per repetition, over %d cases"
              % len(compared))
        print("(> 1: livealloc faster; median of the per-repetition ratios, then their min-max):\n")
        print("| case | metric | " + " | ".join(peers) + " | fastest peer |")
        print("|---|---|" + "---:|" * (len(peers) + 1))
    else:
        print("No speed case that livealloc and a peer both ran.")
    losses = []  # (livealloc / fastest peer, case, peer, ratios)
    for key in compared:
        metric = speed[key][0]
        seen = [(statistics.median(against[p][key]), p) for p in peers if p != "glibc" and key in against[p]]
        best = min(seen, key=lambda t: t[0]) if seen else None  # ties: the first in PEERS
        print("| %s | %s | %s | %s |" % (label(key), metric, " | ".join(fmt(against[p].get(key)) for p in peers),
                                         best[1] if best else "-"))
        if best and best[0] < 1:
            losses.append((best[0], key, best[1], against[best[1]][key]))
    print()
    for p in peers:
        if against[p]:
            print("- speed, geometric mean against %s: **%.3fx** over %d cases"
                  % (p, gmean_of_medians(against[p]), len(against[p])))
    variants = ("livealloc+profile", "livealloc+memlive", "livealloc+bgpurge")
    cost = {v: by_case(speed, v, "livealloc") for v in variants}
    for variant, ratios in cost.items():
        if ratios:
            print("- %s against livealloc: %.3fx the speed over %d cases (geometric mean; 1 = no cost)"
                  % (variant, gmean_of_medians(ratios), len(ratios)))
    # What the background purge is for: the memory held after idling (> 1: it holds less).
    for key, kept in by_case(idle, "livealloc+bgpurge", "livealloc").items():
        print("- resident after idling, %s: livealloc holds %s livealloc+bgpurge's (paired, "
              "min-max)" % (label(key), fmt(kept)))
    mem = {p: by_case(rss, "livealloc", p) for p in peers}  # > 1: the peer uses more than we do
    print()
    for p in peers:
        if mem[p]:
            print("- peak RSS: %s uses **%.3fx** livealloc's (geometric mean over %d cases)"
                  % (p, gmean_of_medians(mem[p]), len(mem[p])))
    before = by_case(speed, "livealloc", "livealloc@baseline")
    if before:
        print("\nBefore/after: livealloc against livealloc@baseline (> 1: this build faster; paired, min-max):\n")
        for key, v in before.items():
            print("- %s: %s" % (label(key), fmt(v)))
        print("\n- speed, geometric mean: **%.3fx** the baseline's over %d cases" % (gmean_of_medians(before), len(before)))
        mem_b = by_case(rss, "livealloc", "livealloc@baseline")
        if mem_b:
            print("- peak RSS: the baseline uses **%.3fx** this build's (geometric mean over %d cases)"
                  % (gmean_of_medians(mem_b), len(mem_b)))
    if compared:
        print("\nCases where a peer is faster (livealloc / fastest peer, paired, min-max):\n")
        for _, key, p, v in sorted(losses):
            print("- %s: %s %s" % (label(key), p, fmt(v)))
        if not losses:
            print("- none")
    clear = [l for l in losses if l[3][-1] < 1]  # slower in every repetition
    profile = cost["livealloc+profile"]
    rivals = [p for p in peers if p != "glibc"]
    # Each target: met (True), not met (False) or not measured (None: what it needs was not run).
    rival_cases = [k for k in compared if any(k in against[p] for p in rivals)]
    if not rivals:
        fastest = (None, "no peer but glibc in this run")
    elif not rival_cases:
        fastest = (None, "no speed case that livealloc and %s ran" % " or ".join(rivals))
    else:
        fastest = (not losses, "%d of %d cases slower at the median, %d of them in every repetition%s"
                   % (len(losses), len(rival_cases), len(clear),
                      "" if len(rivals) == len(PEERS) - 1 else "; compared with %s only" % ", ".join(rivals)))
    def judged(ratios, ok, text, absent):
        if not ratios:
            return None, absent
        v = gmean_of_medians(ratios)
        return ok(v), text % v
    verdicts = [
        ("at least as fast as the fastest peer on every workload", fastest),
        ("faster than mimalloc on the geometric mean",
         judged(against.get("mimalloc"), lambda v: v > 1, "%.3fx", "mimalloc not in this run")),
        ("peak resident memory no worse than mimalloc's geometric mean",
         judged(mem.get("mimalloc"), lambda v: v >= 1, "mimalloc uses %.3fx livealloc's", "mimalloc not in this run")),
        ("profiling on costs at most 3%",
         judged(profile, lambda v: v >= 0.97, "livealloc+profile runs %.3fx livealloc's speed",
                "livealloc+profile not in this run")),
    ]
    print("\nTargets of the benchmark issue in this run:\n")
    for what, (met, why) in verdicts:
        print("- %s: **%s** (%s)" % (what, {True: "met", False: "not met", None: "not measured"}[met], why))
    return 0


# ---------------------------------------------------------------------------------------------
# Where the time goes: CPU time per operation, split into the allocator's own code, the
# workload's code, libc and the kernel, from perf's cpu-clock sampling (a software clock, so it
# works on virtual machines without hardware counters). A ratio from `run` says that livealloc
# is slower on a case; this says whether the time is spent in our code or in the workload's
# accesses to the blocks we handed out (a cache footprint, not an instruction count).

def perf_usable():
    """None if `perf record -e cpu-clock` works here, else why not."""
    if not shutil.which("perf"):
        return "perf is not installed (Debian package linux-perf)"
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-o", os.path.join(tmp, "p"), "--", "/bin/true"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return "perf record fails here: %s" % (r.stderr.strip().splitlines() or ["exit %d" % r.returncode])[-1]
    return None


# glibc's allocator lives in libc beside memset and the rest: these of its functions are malloc's.
GLIBC_MALLOC_RE = re.compile(r"malloc|free|alloc|_int_|tcache|unlink_chunk|arena|consolidate|systrim|"
                             r"heap_trim|munmap_chunk|mremap_chunk|alloc_perturb")


def part_of(dso, sym, alloc):
    """Which part of the process a sampled function is."""
    if alloc["path"] is None:
        if dso.startswith("libc.so") and GLIBC_MALLOC_RE.search(sym):
            return "allocator"
    elif dso in (os.path.basename(alloc["path"]), os.path.basename(os.path.realpath(alloc["path"]))):
        return "allocator"
    if dso.startswith("bench_"):
        return "workload"
    if dso.startswith("libc.so") or dso.startswith("libstdc++") or dso.startswith("libm.so"):
        return "libc"
    if dso.startswith("[kernel") or dso == "[vdso]":
        return "kernel"
    return "other"


def profile_once(case, alloc, args, build_dir, tmp):
    """{part: samples}, {(part, symbol): samples}, operations, unit; or raises RuntimeError."""
    data = os.path.join(tmp, "perf.data")
    argv = bench_argv(case, args, build_dir)
    if args.cpus:
        argv = ["taskset", "-c", args.cpus] + argv
    env = ["env"] + ["%s=%s" % kv for kv in sorted(alloc["env"].items())]
    if alloc["path"]:
        env.append("LD_PRELOAD=" + alloc["path"])
    cmd = ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(args.freq), "-o", data, "--"] + env + argv
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (" ".join(cmd), r.returncode, " | ".join(r.stderr.strip().splitlines()[-3:])))
    status = check_preload(r.stdout, alloc)
    if status:
        raise RuntimeError(status)
    rows = parse_results(r.stdout)
    rate = next((x for x in rows if x["metric"].endswith("per_s")), None)
    took = next((x for x in rows if x["metric"] == "time"), None)
    if not rate or not took:
        raise RuntimeError("%s reported no rate and time" % case_label(case))
    ops = float(rate["value"]) * float(took["value"])
    unit = rate["unit"].split("/")[0]
    unit = unit[:-1] if unit.endswith("s") else unit  # blocks/s: ns per block
    rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "-q", "--sort", "dso,sym",
                          "-F", "sample,dso,sym"], capture_output=True, text=True, timeout=300)
    if rep.returncode != 0:
        raise RuntimeError("perf report failed: %s" % rep.stderr.strip())
    parts, symbols = {}, {}
    for line in rep.stdout.splitlines():
        m = re.match(r"^\s*(\d+)\s+(\S+)\s+\[[.k]\]\s+(.*?)\s*$", line)
        if not m:
            continue
        n, dso, sym = int(m.group(1)), m.group(2), m.group(3)
        part = part_of(dso, sym, alloc)
        parts[part] = parts.get(part, 0) + n
        symbols[(part, sym)] = symbols.get((part, sym), 0) + n
    if not parts:
        raise RuntimeError("perf recorded no samples")
    return parts, symbols, ops, unit


PARTS = ("allocator", "workload", "libc", "kernel", "other")


def cmd_profile(args):
    build_dir = os.path.abspath(args.build_dir)
    labels = {case_label(c): c for c in CASES}
    case = labels.get(args.case)
    if case is None:
        print("profile: no case %r; `bench.py list` shows them" % args.case, file=sys.stderr)
        return 2
    if case["kind"] != "bench":
        print("profile: %r runs another program (bench_spawn); profile a benchmark binary" % args.case,
              file=sys.stderr)
        return 2
    if args.reps < 1 or args.freq < 1 or args.freq > 100000:
        print("profile: --reps must be at least 1 and --freq within 1..100000", file=sys.stderr)
        return 2
    exe = bench_argv(case, args, build_dir)[0]
    if not os.access(exe, os.X_OK):
        print("profile: no %s (build the target livealloc_benchmarks, or give --build-dir)" % exe,
              file=sys.stderr)
        return 2
    why = perf_usable()
    if why:
        print("profile: %s" % why, file=sys.stderr)
        return 3
    notes = []
    try:
        allocators = pick_allocators(args, build_dir, notes)
    except UsageError as e:
        print("profile: %s" % e, file=sys.stderr)
        return 2
    for n in notes:
        print("note: " + n, file=sys.stderr)
    if not allocators:
        print("profile: no allocator to run", file=sys.stderr)
        return 2
    # {alloc: [per repetition ({part: ns}, {(part, sym): ns})]}
    runs = {a["name"]: [] for a in allocators}
    unit = "op"
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(1, args.reps + 1):
            for a in allocators:  # interleaved, as in `run`
                print("[rep %d/%d] %-20s %s" % (rep, args.reps, a["name"], args.case), file=sys.stderr)
                try:
                    parts, symbols, ops, unit = profile_once(case, a, args, build_dir, tmp)
                except (RuntimeError, subprocess.TimeoutExpired) as e:
                    print("profile: %s: %s" % (a["name"], e), file=sys.stderr)
                    return 1
                ns = 1e9 / args.freq / ops  # one sample is 1/freq CPU seconds
                runs[a["name"]].append(({p: n * ns for p, n in parts.items()},
                                        {k: n * ns for k, n in symbols.items()}))
    names = list(runs)
    part_ns = {a: {p: statistics.median(r[0].get(p, 0.0) for r in runs[a]) for p in PARTS} for a in names}
    print("# %s: CPU ns per %s, by part of the process\n" % (args.case, unit))
    print("perf cpu-clock sampling at %d Hz, %d repetition(s) (median)%s; the whole process, so "
          "start-up and the final checks count too.\n" % (args.freq, args.reps,
                                                          ", pinned to CPUs " + args.cpus if args.cpus else ""))
    print("| part | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for p in PARTS:
        if any(part_ns[a][p] >= 0.05 for a in names):
            print("| %s | %s |" % (p, " | ".join("%.1f" % part_ns[a][p] for a in names)))
    print("| **total** | %s |" % " | ".join("**%.1f**" % sum(part_ns[a].values()) for a in names))
    for a in names:
        seen = set().union(*(symbols for _, symbols in runs[a]))
        sym_ns = {k: statistics.median(r[1].get(k, 0.0) for r in runs[a]) for k in seen}
        top = sorted(sym_ns.items(), key=lambda kv: -kv[1])[:args.top]
        print("\n%s, the %d costliest functions (ns per %s):\n" % (a, len(top), unit))
        for (p, sym), v in top:
            print("- %.2f  %s (%s)" % (v, sym, p))
    return 0


def workload_descriptions():
    """What each workload stresses, from its row of the table in README.md (the one place it is
    written): {workload: text}."""
    try:
        with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        m = re.match(r"\| `([a-z_0-9]+)` \| [^|]* \| (.+) \|$", line)
        if m:
            out.setdefault(m.group(1), m.group(2).replace("`", ""))
    return out


def cmd_list(_args):
    about = workload_descriptions()
    shown = set()
    for c in CASES:
        w = c["workload"]
        if w not in shown and w in about:  # once, above the workload's first case
            print("# %s: %s" % (w, about[w]))
        shown.add(w)
        print(case_label(c))
    print("allocators: " + ", ".join(a["name"] for a in ALLOCATORS))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--build-dir", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--reps", default="5")  # checked by run_suite, as every other value
    r.add_argument("--smoke", action="store_true")
    r.add_argument("--scale", default="1")
    r.add_argument("--settle", default="0", help="seconds each run may wait for a quiet host (0: none)")
    r.add_argument("--allocators", default="")
    r.add_argument("--workloads", default="")
    r.add_argument("--require-livealloc", action="store_true")
    r.add_argument("--livealloc-lib", default="", help="another liblivealloc.so (default: the build's)")
    r.add_argument("--baseline-lib", default="", help="a second liblivealloc.so to compare with (column livealloc@baseline)")
    r.add_argument("--command", default=shlex.join(sys.argv))
    r.add_argument("--prog", default="bench.py", help="the name error messages start with (run.sh passes its own)")
    d = sub.add_parser("plotdata")
    d.add_argument("summary")
    d.add_argument("outdir")
    t = sub.add_parser("table")
    t.add_argument("summary")
    t.add_argument("--metrics", default="", help="comma list, e.g. ops_per_s,peak_rss (default: all)")
    t.add_argument("--ranges", action="store_true", help="each cell as median (min-max)")
    v = sub.add_parser("verdict")
    v.add_argument("results")
    m = sub.add_parser("summarize")
    m.add_argument("results")
    m.add_argument("summary")
    f = sub.add_parser("profile")
    f.add_argument("case", help='a case as `bench.py list` prints it, e.g. "crossthread mode=a2a threads=2"')
    f.add_argument("--build-dir", required=True)
    f.add_argument("--allocators", default="livealloc,tcmalloc")
    f.add_argument("--reps", type=int, default=3)
    f.add_argument("--freq", type=int, default=10000, help="samples per CPU second")
    f.add_argument("--cpus", default="", help="run pinned to these CPUs (taskset -c), e.g. 0")
    f.add_argument("--top", type=int, default=8)
    f.add_argument("--smoke", action="store_true")
    f.add_argument("--scale", type=float, default=1.0)
    f.add_argument("--livealloc-lib", default="")
    f.add_argument("--baseline-lib", default="")
    f.set_defaults(require_livealloc=False)
    sub.add_parser("list")
    args = p.parse_args()
    commands = {"run": cmd_run, "summarize": cmd_summarize, "plotdata": cmd_plotdata, "table": cmd_table,
                "verdict": cmd_verdict, "profile": cmd_profile, "list": cmd_list}
    if args.cmd in ("plotdata", "table", "verdict", "list"):
        # Printing commands end quietly when their reader does (`bench.py table ... | head`);
        # not `run`, whose sockets to memlive must not kill it.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    return commands[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
