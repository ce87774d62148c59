#!/usr/bin/python3
"""Checks how run.sh (bench.py run) treats the results in --out: a complete run replaces
results.csv, summary.csv, verdict.md and plots/ together; a run with a failed case, or one
interrupted, leaves them as they were and puts its partial CSVs in <out>/failed/; one interrupted
while it attaches memlive to a workload leaves neither memlive serve nor the workload's segment
behind; a full run without glibc completes and says why it has no plots; memlive_bench.sh with
a failed run keeps its last complete CSV and writes none of the failed run's numbers, and one
interrupted ends bench_memlive, memlive serve and the workload with it, exit 130; the
header's command, split as a shell would, gives back the arguments. Also: a peer
named in --allocators but not installed is a usage error naming its Debian package (a note when
the default set is run), and the CSV header gives the build type and ignores untracked files.

Exit 0 when every check passes, 1 otherwise.
    test_run.py BUILD_DIR"""
import argparse
import os
import re
import shutil
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import bench  # noqa: E402

KEPT = ("results.csv", "summary.csv", "verdict.md", "plots/old.png")


def snapshot(out):
    files = {}
    for name in KEPT:
        path = os.path.join(out, name)
        if os.path.exists(path):
            with open(path, "rb") as f:
                files[name] = f.read()
    return files


def check_allocators(failures):
    """A missing peer: an error when named, a note in the default set."""
    saved = [dict(a) for a in bench.ALLOCATORS]
    try:
        for a in bench.ALLOCATORS:
            if a["name"] == "mimalloc":
                a["lib"] = bench.LIBDIR + "/libmimalloc.so.NOT-INSTALLED"
        def pick(allocators, require=False):
            args = argparse.Namespace(allocators=allocators, baseline_lib="", livealloc_lib="",
                                      require_livealloc=require)
            notes = []
            try:
                names = [a["name"] for a in bench.pick_allocators(args, "/nonexistent-build", notes)]
                return names, notes, None
            except bench.UsageError as e:
                return None, notes, str(e)
        names, notes, error = pick("glibc,mimalloc")
        if error is None or "libmimalloc2.0" not in error or "mimalloc" not in error:
            failures.append("--allocators glibc,mimalloc without mimalloc: %r, want an error naming "
                            "libmimalloc2.0" % (error or names))
        names, notes, error = pick("")
        if error or "mimalloc" in names or not any(n.startswith("mimalloc skipped") for n in notes):
            failures.append("default allocators without mimalloc: %r %r %r, want a note" % (names, notes, error))
        if error is None and ("glibc" not in names or "jemalloc" not in names):
            failures.append("default allocators without mimalloc: %r, want the others still" % names)
        # livealloc is not in /nonexistent-build: skipped by default, an error when required or named.
        if pick("", require=True)[2] is None or "livealloc_preload" not in (pick("livealloc")[2] or ""):
            failures.append("a missing livealloc must be an error with --require-livealloc or when named")
    finally:
        bench.ALLOCATORS[:] = saved


def check_header(failures, tmp):
    """The build type from CMakeCache.txt; untracked files do not make the tree dirty."""
    cache = os.path.join(tmp, "cache")
    os.mkdir(cache)
    for line, want in (("CMAKE_BUILD_TYPE:STRING=Release\n", "Release"), ("CMAKE_BUILD_TYPE:STRING=\n", "(none)")):
        with open(os.path.join(cache, "CMakeCache.txt"), "w") as f:
            f.write("CMAKE_CXX_COMPILER:FILEPATH=/usr/bin/c++\n" + line)
        if bench.build_type(cache) != want:
            failures.append("build_type for %r: %r, want %r" % (line, bench.build_type(cache), want))
    if not bench.build_type(tmp).startswith("?"):
        failures.append("build_type without a cache: %r" % bench.build_type(tmp))
    if not shutil.which("git"):
        return
    repo = os.path.join(tmp, "repo")
    git = ["git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.org"]
    os.mkdir(repo)
    with open(os.path.join(repo, "tracked"), "w") as f:
        f.write("one\n")
    for cmd in (["init", "-q"], ["add", "tracked"], ["commit", "-q", "-m", "one"]):
        subprocess.run(git + cmd, check=True, capture_output=True)
    with open(os.path.join(repo, "untracked.csv"), "w") as f:
        f.write("new results\n")
    if "uncommitted" in bench.repository(repo):
        failures.append("an untracked file marks the tree dirty: %r" % bench.repository(repo))
    with open(os.path.join(repo, "tracked"), "w") as f:
        f.write("two\n")
    if not bench.repository(repo).endswith("(uncommitted changes)"):
        failures.append("a changed tracked file is not reported: %r" % bench.repository(repo))


# A memlive that starts to serve but never sends an event: the runner waits up to 3 s for the
# first one, before the workload may start. It notes its pid and the workload's.
FAKE_MEMLIVE = r"""#!/usr/bin/python3
import os, socket, sys, time
workload = sys.argv[sys.argv.index("--pid") + 1]
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(1)
port = s.getsockname()[1]
print("memlive: serving pid %s at http://127.0.0.1:%d/" % (workload, port), flush=True)
c, _ = s.accept()
c.recv(4096)
c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
with open(os.environ["FAKE_MEMLIVE_PIDS"], "w") as f:
    f.write("%d %s\n" % (os.getpid(), workload))
time.sleep(60)
"""


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def check_interrupt_observed(failures, tmp, build, sig):
    """Interrupted (`sig`) while the livealloc+memlive column attaches its observer: memlive
    serve (in a session of its own, so Ctrl-C does not reach it, nor a closed terminal's SIGHUP)
    and the workload's segment must not outlive the run."""
    fake = os.path.join(tmp, "fake-build")
    if not os.path.exists(fake):
        os.makedirs(os.path.join(fake, "memlive"))
        for d in ("allocator", "benchmarks"):
            os.symlink(os.path.join(build, d), os.path.join(fake, d))
        memlive = os.path.join(fake, "memlive", "memlive")
        with open(memlive, "w") as f:
            f.write(FAKE_MEMLIVE)
        os.chmod(memlive, 0o755)
    pids = os.path.join(tmp, "fake-memlive-%s.pids" % sig.name)
    p = subprocess.Popen([os.path.join(HERE, "run.sh"), "--no-build", "--build-dir", fake,
                          "--out", os.path.join(tmp, "observed"), "--smoke",
                          "--allocators", "livealloc+memlive", "--workloads", "large_blocks"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, FAKE_MEMLIVE_PIDS=pids))
    serve = workload = None
    try:
        for _ in range(300):
            if os.path.exists(pids) and open(pids).read().endswith("\n"):
                serve, workload = (int(x) for x in open(pids).read().split())
                break
            if p.poll() is not None:
                break
            time.sleep(0.01)
        p.send_signal(sig)
        err = p.communicate(timeout=60)[1]
        if serve is None:
            failures.append("the fake memlive never got the stream request: %r" % err[-500:])
            return
        time.sleep(0.2)  # the stray, if any, is reparented and still runs; a reaped one is gone
        if p.returncode != 130 or alive(serve):
            failures.append("%s while attaching the observer: exit %d, memlive serve %s" % (
                sig.name, p.returncode, "still running" if alive(serve) else "ended"))
        if os.path.exists("/dev/shm/livealloc.%d" % workload):
            failures.append("%s while attaching the observer: the workload's segment "
                            "/dev/shm/livealloc.%d was left behind" % (sig.name, workload))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if serve is not None and alive(serve):
            os.kill(serve, signal.SIGKILL)
        if workload is not None and os.path.exists("/dev/shm/livealloc.%d" % workload):
            os.unlink("/dev/shm/livealloc.%d" % workload)


# A bench_memlive whose latency runs fail after printing a number (and memlive, never run here).
FAKE_BENCH_MEMLIVE = r"""#!/bin/sh
echo "RESULT workload=memlive case=$1 threads=1 metric=from_$1 value=1 unit=ms"
[ "$1" = latency ] && exit 1
exit 0
"""


def check_memlive_bench_failed(failures, tmp):
    """memlive_bench.sh with a failed run: exit 1, no number of the failed run, the failure in
    the CSV, and the last complete CSV kept."""
    fake = os.path.join(tmp, "fake-memlive-build")
    for path, text in (("benchmarks/bench_memlive", FAKE_BENCH_MEMLIVE),
                       ("memlive/memlive", "#!/bin/sh\nexit 0\n")):
        os.makedirs(os.path.dirname(os.path.join(fake, path)), exist_ok=True)
        with open(os.path.join(fake, path), "w") as f:
            f.write(text)
        os.chmod(os.path.join(fake, path), 0o755)
    out = os.path.join(tmp, "memlive-out")
    os.mkdir(out)
    kept = os.path.join(out, "memlive-smoke.csv")
    with open(kept, "w") as f:
        f.write("the last complete run\n")
    r = subprocess.run([os.path.join(HERE, "memlive_bench.sh"), "--smoke", "--no-build",
                        "--build-dir", fake, "--out", out], capture_output=True, text=True,
                       timeout=60)
    with open(kept) as f:
        if r.returncode != 1 or f.read() != "the last complete run\n":
            failures.append("memlive_bench.sh with a failed run: exit %d, %s replaced; stderr %r"
                            % (r.returncode, kept, r.stderr[-400:]))
    try:
        with open(os.path.join(out, "memlive-smoke-failed.csv")) as f:
            text = f.read()
        if ("# FAILED latency serve" not in text or "from_latency" in text or
                "from_serialise" not in text):
            failures.append("memlive-smoke-failed.csv: want the failure, the runs that completed "
                            "and no number of a failed run: %r" % text[-600:])
    except OSError as e:
        failures.append("memlive_bench.sh with a failed run wrote no -failed.csv: %s" % e)


def descendants(pid):
    """{pid: command name} of pid's descendants, from the parent links in /proc."""
    children = {}
    for d in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % d) as f:
                stat = f.read()
        except OSError:  # not a process, or it has just exited
            continue
        name, fields = stat.split("(", 1)[1].rsplit(")", 1)
        children.setdefault(int(fields.split()[1]), []).append((int(d), name))
    found, todo = {}, [pid]
    while todo:
        for child, name in children.get(todo.pop(), []):
            found[child] = name
            todo.append(child)
    return found


def check_memlive_bench_interrupted(failures, tmp, build, sig):
    """memlive_bench.sh interrupted (`sig`) while bench_memlive streams to memlive serve: its
    programs run in a session of their own, which the signal does not reach; bench_memlive, serve
    and the workload child must end with the script, leave no segment and no .tmp file, and the
    script says so in one line and exits 130 (as run.sh does)."""
    if not os.access(os.path.join(build, "benchmarks", "bench_memlive"), os.X_OK):
        return  # built only with memlive
    out = os.path.join(tmp, "memlive-interrupted-" + sig.name)
    # stderr to a file: a pipe would stay open, and its reader wait, as long as a stray runs.
    stderr = open(os.path.join(tmp, "memlive-interrupted-%s.err" % sig.name), "w+")
    p = subprocess.Popen([os.path.join(HERE, "memlive_bench.sh"), "--smoke", "--no-build",
                          "--build-dir", build, "--out", out],
                         stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    started = {}
    try:
        for _ in range(3000):  # until memlive serve runs (the run "stream serve")
            started = descendants(p.pid)
            if "memlive" in started.values() or p.poll() is not None:
                break
            time.sleep(0.01)
        time.sleep(0.3)  # bench_memlive connects its clients to serve
        started.update(descendants(p.pid))
        p.send_signal(sig)
        p.wait(timeout=60)
        time.sleep(0.2)  # a stray, if any, is reparented and still runs; a killed one is gone
        stderr.seek(0)
        err = stderr.read()
        names = sorted(started.values())
        if names.count("bench_memlive") < 2 or "memlive" not in names:
            failures.append("memlive_bench.sh --smoke: never saw bench_memlive, its workload and "
                            "memlive serve running (saw %s): %r" % (names, err[-400:]))
            return
        left = sorted("%s (%d)" % (name, pid) for pid, name in started.items() if alive(pid))
        segments = [pid for pid in started if os.path.exists("/dev/shm/livealloc.%d" % pid)]
        tmps = [f for f in os.listdir(out) if f.endswith(".tmp")] if os.path.isdir(out) else []
        said = [l for l in err.splitlines() if l.startswith("memlive_bench.sh: ")]
        want = "memlive_bench.sh: interrupted (%s) during run " % sig.name
        if (p.returncode != 130 or left or segments or tmps or len(said) != 1 or
                not said[0].startswith(want)):
            failures.append("memlive_bench.sh interrupted by %s: exit %s, still running %s, "
                            "segments of %s, %s left, stderr %r (want 130 and %r)" % (
                                sig.name, p.returncode, left, segments, tmps, err[-400:], want))
        try:
            with open(os.path.join(out, "memlive-smoke-failed.csv")) as f:
                if "# INTERRUPTED (%s) during run" % sig.name not in f.read():
                    failures.append("memlive-smoke-failed.csv does not say it was interrupted")
        except OSError as e:
            failures.append("memlive_bench.sh interrupted: no memlive-smoke-failed.csv: %s" % e)
        if os.path.exists(os.path.join(out, "memlive-smoke.csv")):
            failures.append("memlive_bench.sh interrupted wrote memlive-smoke.csv")
    finally:
        stderr.close()
        if p.poll() is None:
            p.kill()
            p.wait()
        for pid in started:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
            if os.path.exists("/dev/shm/livealloc.%d" % pid):
                os.unlink("/dev/shm/livealloc.%d" % pid)


def check_observer_stop_unstarted(failures):
    """An interrupt between the observer thread's creation and its start (Observer.attach):
    stop() must still end serve and return (it raised "cannot join thread before it is
    started", so the run ended in a traceback, exit 1, the workload's segment left behind)."""
    obs = bench.Observer("/bin/true", HERE)
    obs.serve = subprocess.Popen(["sleep", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)
    obs.thread = threading.Thread(target=lambda: None, daemon=True)  # created, not started
    try:
        obs.stop()
    except Exception as e:  # pylint: disable=broad-except
        failures.append("Observer.stop() with its thread not yet started: %r" % e)
    finally:
        if obs.serve.poll() is None:
            obs.serve.kill()
            obs.serve.wait()


def check_observer_reader_start_masked(failures):
    """An interrupt taken inside Thread.start() of the observer's reader, before the new thread
    had run, let python3.11 exit under it and die with SIGSEGV in the thread's bootstrap: the
    stop signals must be blocked while it starts, and as they were once it has."""
    class Stream:  # a response whose stream has ended
        def readline(self):
            return b""
    obs = bench.Observer("/bin/true", HERE)
    seen = []
    start = threading.Thread.start
    def start_and_look(thread):
        seen.append(signal.pthread_sigmask(signal.SIG_BLOCK, []))
        start(thread)
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    threading.Thread.start = start_and_look
    try:
        obs.start_reader(Stream())
    finally:
        threading.Thread.start = start
    obs.thread.join(5)
    blocked = seen[0] if seen else set()
    if not set(bench.STOP_SIGNALS) <= blocked:
        failures.append("the observer's reader started with %s not blocked" %
                        sorted(s.name for s in set(bench.STOP_SIGNALS) - blocked))
    if signal.pthread_sigmask(signal.SIG_BLOCK, []) != before:
        failures.append("the signal mask was not restored after the observer's reader started")
    if not obs.stream_done.is_set():
        failures.append("the observer's reader did not run")


def main():
    build = sys.argv[1]
    failures = []
    check_allocators(failures)
    check_observer_stop_unstarted(failures)
    check_observer_reader_start_masked(failures)
    with tempfile.TemporaryDirectory() as tmp:
        check_header(failures, tmp)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            check_interrupt_observed(failures, tmp, build, sig)
        check_memlive_bench_failed(failures, tmp)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            check_memlive_bench_interrupted(failures, tmp, build, sig)
        out = os.path.join(tmp, "out")
        run = [os.path.join(HERE, "run.sh"), "--no-build", "--build-dir", build, "--out", out,
               "--allocators", "glibc,livealloc"]

        # A complete run writes everything and prints the verdict; the header names the build type.
        r = subprocess.run(run + ["--smoke", "--workloads", "true"], capture_output=True, text=True, timeout=120)
        if r.returncode != 0 or "# Verdict" not in r.stdout:
            failures.append("a complete run: exit %d, stderr %r" % (r.returncode, r.stderr[-500:]))
        if sorted(os.listdir(out)) != ["results.csv", "summary.csv", "verdict.md"]:
            failures.append("after a complete run --out holds %s" % sorted(os.listdir(out)))
        with open(os.path.join(out, "results.csv")) as f:
            with open(os.path.join(build, "CMakeCache.txt")) as cache:
                configured = re.search(r"^CMAKE_BUILD_TYPE:\w+=(.*)$", cache.read(), re.M)
            want = "# build type: %s\n" % ((configured.group(1) if configured else "") or "(none)")
            if want not in f.read():
                failures.append("results.csv has no line %r" % want)
        # The header's command runs again as written: a path with a space stays one argument.
        spaced = os.path.join(tmp, "with space")
        argv = ["--no-build", "--build-dir", build, "--out", spaced, "--smoke", "--workloads",
                "true", "--allocators", "glibc"]
        r = subprocess.run([os.path.join(HERE, "run.sh")] + argv, capture_output=True, text=True,
                           timeout=120)
        try:
            with open(os.path.join(spaced, "results.csv")) as f:
                command = re.search(r"^# command: (.*)$", f.read(), re.M).group(1)
            if shlex.split(command) != ["benchmarks/run.sh"] + argv:
                failures.append("the header's command %r does not give back %r" % (command, argv))
        except (OSError, AttributeError) as e:
            failures.append("a run with --out %r: exit %d, %s: %r" % (spaced, r.returncode, e,
                                                                     r.stderr[-300:]))
        os.mkdir(os.path.join(out, "plots"))
        with open(os.path.join(out, "plots", "old.png"), "w") as f:
            f.write("the last complete run's plot\n")
        before = snapshot(out)

        # A failed case: livealloc from a file that is not a library (ld.so ignores the preload).
        bad = os.path.join(tmp, "not-a-library.so")
        with open(bad, "w") as f:
            f.write("not an ELF file\n")
        r = subprocess.run(run + ["--smoke", "--workloads", "true", "--livealloc-lib", bad],
                           capture_output=True, text=True, timeout=120)
        failed = os.path.join(out, "failed")
        if r.returncode != 1 or failed not in r.stderr:
            failures.append("a failed run: exit %d, stderr %r (want 1 and where its rows went)"
                            % (r.returncode, r.stderr[-500:]))
        if snapshot(out) != before:
            failures.append("a failed run changed the last complete results")
        try:
            with open(os.path.join(failed, "results.csv")) as f:
                text = f.read()
            if ",glibc,true," not in text or "# FAILED allocator=livealloc" not in text:
                failures.append("failed/results.csv lacks glibc's rows or the failure: %r" % text[-500:])
            if not os.path.exists(os.path.join(failed, "summary.csv")):
                failures.append("no failed/summary.csv")
        except OSError as e:
            failures.append("no partial results of the failed run: %s" % e)

        # Interrupted (SIGTERM to run.sh) after its first run: the same.
        p = subprocess.Popen(run + ["--smoke", "--workloads", "fastpath,crossthread,thread_churn"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in p.stderr:
            if line.startswith("[  2/"):
                p.send_signal(signal.SIGTERM)
                break
        p.stderr.read()
        p.wait(timeout=60)
        if p.returncode != 130 or snapshot(out) != before:
            failures.append("an interrupted run: exit %d, results %s" % (
                p.returncode, "kept" if snapshot(out) == before else "changed"))
        try:
            with open(os.path.join(failed, "results.csv")) as f:
                if not re.search(r"^# INTERRUPTED during run \d+ of \d+$", f.read(), re.M):
                    failures.append("failed/results.csv does not say the run was interrupted")
        except OSError as e:
            failures.append("no partial results of the interrupted run: %s" % e)
        if os.path.exists(os.path.join(out, "incomplete")):
            failures.append("an interrupted run left %s/incomplete" % out)

        # Interrupted before the first run (while the header is gathered: a slow lscpu, which
        # the runner lets finish) and after the last (while plot.sh draws: a slow gnuplot): exit
        # 130 with a message, no traceback, the last complete results kept, no stage folder and
        # no program left running.
        for tool, extra, want in (
                ("lscpu", ["--smoke"], "interrupted before the first run; nothing was written"),
                ("gnuplot", ["--reps", "1", "--scale", "0.01"], "INTERRUPTED after the last run")):
            slow = os.path.join(tmp, "slow-" + tool)
            os.mkdir(slow)
            pid_file = os.path.join(tmp, tool + ".pid")
            with open(os.path.join(slow, tool), "w") as f:
                f.write("#!/bin/sh\necho $$ > %s\nexec sleep %d\n"
                        % (pid_file, 2 if tool == "lscpu" else 60))
            os.chmod(os.path.join(slow, tool), 0o755)
            env = dict(os.environ, PATH=slow + os.pathsep + os.environ["PATH"])
            p = subprocess.Popen(run + extra + ["--workloads", "true"], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True, env=env)
            pid = None
            for _ in range(3000):
                if os.path.exists(pid_file) and open(pid_file).read().endswith("\n"):
                    pid = int(open(pid_file).read())
                    break
                if p.poll() is not None:
                    break
                time.sleep(0.01)
            p.send_signal(signal.SIGTERM)
            err = p.communicate(timeout=60)[1]
            time.sleep(0.2)
            if (pid is None or p.returncode != 130 or want not in err or "Traceback" in err or
                    snapshot(out) != before or os.path.exists(os.path.join(out, "incomplete"))):
                failures.append("interrupted while %s ran: exit %s, results %s, incomplete/ %s, "
                                "stderr %r" % (tool, p.returncode,
                                               "kept" if snapshot(out) == before else "changed",
                                               os.path.exists(os.path.join(out, "incomplete")),
                                               err[-400:]))
            if pid is not None and alive(pid):
                failures.append("interrupted while %s ran: it is still running" % tool)
                os.kill(pid, signal.SIGKILL)

        # A complete full run replaces everything, plots included (drawn by plot.sh when gnuplot is
        # there), and drops the failed run's folder.
        r = subprocess.run(run + ["--reps", "1", "--scale", "0.01", "--workloads", "true"],
                           capture_output=True, text=True, timeout=120)
        after = snapshot(out)
        if r.returncode != 0 or any(after.get(n) == before[n] for n in before) or os.path.exists(failed):
            failures.append("a complete run after a failed one: exit %d, unchanged %s, failed/ %s, stderr %r" % (
                r.returncode, [n for n in before if after.get(n) == before[n]],
                "kept" if os.path.exists(failed) else "removed", r.stderr[-500:]))
        with open(os.path.join(out, "results.csv")) as f:  # one repetition has no spread
            if "# host probe:" in f.read():
                failures.append("a run of one repetition reports the host probe's spread")
        drawn = os.path.exists(os.path.join(out, "plots", "true.png"))
        if shutil.which("gnuplot") and not drawn:
            failures.append("a complete full run drew no plots: %r" % r.stderr[-500:])
        if not shutil.which("gnuplot") and "no plots" not in r.stderr:
            failures.append("without gnuplot, no note about the plots: %r" % r.stderr[-500:])
        # Without glibc nothing can be drawn (every plot is a ratio to glibc): the run is
        # complete all the same, and says why it has no plots. With two repetitions the
        # results end with the host probe's spread over the one case.
        alone = os.path.join(tmp, "alone")
        r = subprocess.run(run[:-2] + ["--out", alone, "--allocators", "livealloc", "--reps", "2",
                                       "--scale", "0.01", "--workloads", "true"],
                           capture_output=True, text=True, timeout=120)
        if shutil.which("gnuplot") and (r.returncode != 0 or "nothing to draw" not in r.stderr):
            failures.append("a full run without glibc: exit %d, stderr %r (want 0 and a note why "
                            "there are no plots)" % (r.returncode, r.stderr[-500:]))
        try:
            with open(os.path.join(alone, "results.csv")) as f:
                probe = re.search(r"^# host probe: ([0-9.]+), the median over 1 cases ", f.read(),
                                  re.M)
            if not probe or not 0 <= float(probe.group(1)) < 100:
                failures.append("a run of two repetitions has no host probe line for its case")
        except OSError as e:
            failures.append("a full run without glibc wrote no results.csv: %s" % e)
        # --settle: every run is counted (2 allocators x 2 repetitions of one case), the counts
        # add up, and the verdict reports them; without it, no such line.
        settled = os.path.join(tmp, "settled")
        r = subprocess.run(run[:-4] + ["--out", settled, "--allocators", "glibc,livealloc",
                                       "--reps", "2", "--scale", "0.01", "--workloads", "true",
                                       "--settle", "0.5"],
                           capture_output=True, text=True, timeout=300)
        try:
            with open(os.path.join(settled, "results.csv")) as f:
                line = re.search(r"^# settle: ([0-9]+) of ([0-9]+) runs ended on a quiet host .*"
                                 r"; ([0-9]+) waited for one before they started, [0-9.]+ s in "
                                 r"all, ([0-9]+) of them started after the limit of 0.5 s$",
                                 f.read(), re.M)
            counts = [int(n) for n in line.groups()] if line else None
            if (r.returncode != 0 or not counts or counts[1] != 4 or counts[0] > 4
                    or counts[3] > counts[2] or counts[2] > 4):
                failures.append("a run with --settle 0.5: exit %d, settle line %s, stderr %r"
                                % (r.returncode, counts, r.stderr[-500:]))
            if "With `--settle 0.5`" not in r.stdout:
                failures.append("a run with --settle: its verdict does not report the waits")
            with open(os.path.join(alone, "results.csv")) as f:
                if "# settle:" in f.read():
                    failures.append("a run without --settle has a settle line")
        except OSError as e:
            failures.append("a run with --settle wrote no results.csv: %s" % e)

    for f in failures:
        print("FAIL: " + f)
    print("%d failures" % len(failures) if failures else "run: all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
