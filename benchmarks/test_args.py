#!/usr/bin/python3
"""Bad arguments to the benchmark binaries and to run.sh end in a clear usage error (exit 64 for
the binaries, 2 and one line starting with the program's name for the runner, run.sh or
bench.py run; an unusable --out too), and a refused run leaves the results it would have replaced
untouched. Bad results or summary files given to bench.py's plotdata, table, summarize and
verdict end in a one-line error naming the file, and write nothing; a metric that `table
--metrics` cannot show is a usage error (exit 2) naming those it can. `bench.py list` describes
every workload (from README.md).

Exit 0 when every check passes, 1 otherwise.
    test_args.py BUILD_DIR"""
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# (binary, arguments, text the error must contain)
BAD = [
    ("fastpath", ["size=abc"], "size=abc: expected an integer from 16 to 1048576"),
    ("fastpath", ["size=8"], "size=8: expected an integer from 16"),
    ("fastpath", ["sizes=64"], "unknown argument 'sizes=64'"),
    ("fastpath", ["iters=0"], "iters=0: expected an integer from 1"),
    ("crossthread", ["threads=0"], "threads=0: expected an integer from 1 to 256"),
    ("crossthread", ["mode=zz"], "mode=zz: expected one of pc|a2a"),
    ("crossthread", ["threads=2x"], "threads=2x: expected an integer"),
    ("vector_push", ["elem=huge"], "elem=huge: expected one of small|medium|large"),
    ("fragmentation", ["keep_percent=101"], "keep_percent=101: expected an integer from 0 to 100"),
    ("realloc_growth", ["max=1e3"], "max=1e3: expected an integer"),
    ("thread_churn", ["rounds=-5"], "rounds=-5: expected an integer from 1"),
    ("large_blocks", ["scale=0"], "scale=0: expected a number from 1e-06 to 1e+06"),
    ("large_blocks", ["scale=nan"], "scale=nan: expected a number"),
    ("sizeclass_xthread", ["--smoke", "thread=4"], "unknown argument 'thread=4'"),
    ("pool_idle", ["idle_ms=-1"], "idle_ms=-1: expected an integer from 0 to 600000"),
    ("pool_idle", ["threads=300"], "threads=300: expected an integer from 1 to 256"),
    ("idle_owner", ["pause_ms=-1"], "pause_ms=-1: expected an integer from 0 to 600000"),
    ("idle_owner", ["live_kib=0"], "live_kib=0: expected an integer from 1"),
    ("tail_latency", ["seconds=0"], "seconds=0: expected a number from 0.01 to 3600"),
    ("tail_latency", ["period_ms=x"], "period_ms=x: expected an integer from 1 to 600000"),
]


def main():
    build = sys.argv[1]
    failures = []
    for name, args, want in BAD:
        exe = os.path.join(build, "benchmarks", "bench_" + name)
        out = subprocess.run([exe] + args, capture_output=True, text=True, timeout=60)
        if out.returncode != 64 or want not in out.stderr or "RESULT" in out.stdout:
            failures.append("bench_%s %s: exit %d, stderr %r (want 64 and %r, no results)" % (
                name, " ".join(args), out.returncode, out.stderr.strip(), want))
    memlive = os.path.join(build, "benchmarks", "bench_memlive")  # built only with memlive
    if os.access(memlive, os.X_OK):
        for args, want in ((["serialise", "--threads", "0"], "--threads 0: expected an integer"),
                           (["serialise", "--thread", "4"], "unknown option --thread")):
            out = subprocess.run([memlive] + args, capture_output=True, text=True, timeout=60)
            if out.returncode == 0 or want not in out.stderr or "RESULT" in out.stdout:
                failures.append("bench_memlive %s: exit %d, stderr %r" % (
                    " ".join(args), out.returncode, out.stderr.strip()))
    # A valid explicit value still runs: the parser rejects only what is wrong.
    ok = subprocess.run([os.path.join(build, "benchmarks", "bench_fastpath"), "size=64", "iters=2000"],
                        capture_output=True, text=True, timeout=60)
    if ok.returncode != 0 or "case=size=64" not in ok.stdout:
        failures.append("bench_fastpath size=64 iters=2000: exit %d, %r" % (ok.returncode, ok.stderr))

    # The runner: refused with exit 2 and one line naming the problem (and the program the user
    # ran), before anything is written over an existing results.csv.
    with tempfile.TemporaryDirectory() as out_dir, tempfile.TemporaryDirectory() as empty_build:
        results = os.path.join(out_dir, "results.csv")
        with open(results, "w") as f:
            f.write("earlier results\n")
        a_file = os.path.join(out_dir, "a-file")
        with open(a_file, "w") as f:
            f.write("not a folder\n")
        read_only = os.path.join(out_dir, "read-only")
        os.mkdir(read_only)
        os.chmod(read_only, 0o555)  # root writes there anyway: made immutable below if it can be
        if os.geteuid() == 0 and subprocess.run(["chattr", "+i", read_only], capture_output=True).returncode != 0:
            read_only = None
        runner = [os.path.join(HERE, "run.sh"), "--no-build", "--build-dir", build, "--out", out_dir]
        bench_run = [sys.executable, os.path.join(HERE, "bench.py"), "run", "--build-dir", build, "--out", out_dir]
        refusals = [(["--reps", "0"], "--reps must be at least 1"),
                    (["--scale", "0"], "--scale must be from"),
                    (["--reps"], "--reps needs a value"),
                    (["--reps", "abc"], "--reps must be an integer (got 'abc')"),
                    (["--reps", "1.5"], "--reps must be an integer"),
                    (["--scale", "x"], "--scale must be a number (got 'x')"),
                    (["--settle", "-1"], "--settle must be from 0 to 600 seconds (got -1)"),
                    (["--settle", "601"], "--settle must be from 0 to 600 seconds"),
                    (["--settle", "nan"], "--settle must be from 0 to 600 seconds"),
                    (["--settle", "soon"], "--settle must be a number (got 'soon')"),
                    (["--settle"], "--settle needs a value"),
                    (["--build-dir", os.path.join(out_dir, "typo")],
                     "--build-dir %s: not a directory" % os.path.join(out_dir, "typo")),
                    (["--build-dir", a_file], "--build-dir %s: not a directory" % a_file),
                    (["--livealloc-lib", os.path.join(out_dir, "missing.so")], "--livealloc-lib %s" % out_dir),
                    (["--baseline-lib", os.path.join(out_dir, "missing.so")], "--baseline-lib %s" % out_dir),
                    (["--livealloc-lib", out_dir], "--livealloc-lib %s: not a file" % out_dir),
                    (["--baseline-lib", out_dir], "--baseline-lib %s: not a file" % out_dir),
                    # a library no selected column loads would be ignored without a word
                    # (--smoke: were it not refused, a short run would show it)
                    (["--livealloc-lib", a_file, "--allocators", "glibc", "--smoke",
                      "--workloads", "true"],
                     "--livealloc-lib: no column of --allocators glibc runs it"),
                    (["--baseline-lib", a_file, "--allocators", "glibc,livealloc+profile",
                      "--smoke", "--workloads", "true"],
                     "--baseline-lib: livealloc@baseline is compared with livealloc, which "
                     "--allocators glibc,livealloc+profile leaves out"),
                    (["--workloads", "nosuch"], "no workload matches nosuch"),
                    (["--workloads", "fastpath,nosuch"], "no workload matches nosuch"),
                    (["--workloads", ","], "--workloads ',': empty name"),
                    (["--workloads", "fastpath,"], "--workloads 'fastpath,': empty name"),
                    (["--allocators", "glibc,nosuch"], "unknown allocator(s) nosuch"),
                    (["--allocators", ","], "--allocators ',': empty name"),
                    (["--out", a_file], "--out %s: not a directory" % a_file),
                    (["--out", os.path.join(a_file, "sub")], "%s is not a directory" % a_file),
                    # a build folder with no benchmarks in it
                    (["--build-dir", empty_build, "--allocators", "glibc", "--workloads", "true"],
                     "missing %s" % os.path.join(empty_build, "benchmarks", "bench_spawn")),
                    # writable by its mode, and no folder can be made there
                    (["--out", "/proc/livealloc-bench", "--allocators", "glibc", "--smoke",
                      "--workloads", "true"], "--out /proc/livealloc-bench: cannot create")]
        if read_only:
            refusals += [(["--out", read_only], "--out %s: not writable" % read_only),
                         (["--out", os.path.join(read_only, "sub")], "%s is not writable" % read_only)]
        try:
            for extra, want in refusals:
                out = subprocess.run(runner + extra, capture_output=True, text=True, timeout=60)
                lines = out.stderr.strip().splitlines()
                if out.returncode != 2 or want not in out.stderr or len(lines) != 1 or not lines[0].startswith("run.sh: "):
                    failures.append("run.sh %s: exit %d, stderr %r (want 2 and one line 'run.sh: ...%s')" % (
                        " ".join(extra), out.returncode, out.stderr.strip()[-300:], want))
            # Without --no-build a build folder that cannot be made is refused the same way.
            sub = os.path.join(a_file, "sub")
            out = subprocess.run([runner[0], "--build-dir", sub, "--out", out_dir],
                                 capture_output=True, text=True, timeout=60)
            want = "run.sh: --build-dir %s: cannot create or enter it\n" % sub
            if out.returncode != 2 or out.stderr != want:
                failures.append("run.sh --build-dir %s: exit %d, stderr %r" % (
                    sub, out.returncode, out.stderr))
            # bench.py run on its own: the same refusals under its own name.
            for extra, want in ((["--reps", "0"], "bench.py: --reps must be at least 1"),
                                (["--scale", "fast"], "bench.py: --scale must be a number"),
                                (["--settle", "-0.5"], "bench.py: --settle must be from 0 to 600"),
                                (["--livealloc-lib", out_dir],
                                 "bench.py: --livealloc-lib: %s not a file" % out_dir),
                                (["--workloads", ","], "bench.py: --workloads ',': empty name"),
                                (["--livealloc-lib", a_file, "--allocators", "glibc",
                                  "--smoke", "--workloads", "true"],
                                 "bench.py: --livealloc-lib: no column of --allocators glibc"),
                                (["--out", a_file], "bench.py: --out %s: not a directory" % a_file)):
                out = subprocess.run(bench_run + extra, capture_output=True, text=True, timeout=60)
                if out.returncode != 2 or out.stderr.strip() != out.stderr.strip().splitlines()[0] or want not in out.stderr:
                    failures.append("bench.py run %s: exit %d, stderr %r (want 2 and %r)" % (
                        " ".join(extra), out.returncode, out.stderr.strip()[-300:], want))
        finally:
            if read_only and os.geteuid() == 0:
                subprocess.run(["chattr", "-i", read_only])
        with open(results) as f:
            if f.read() != "earlier results\n":
                failures.append("a refused run changed results.csv")
        if sorted(os.listdir(out_dir)) != sorted(["results.csv", "a-file", "read-only"]):
            failures.append("a refused run wrote into --out: %s" % sorted(os.listdir(out_dir)))
        help_text = subprocess.run([runner[0], "--help"], capture_output=True, text=True, timeout=60).stdout
        if not all(code in help_text for code in ("  0  ", "  1  ", "  2  ", "usage error")):
            failures.append("run.sh --help does not document the exit codes 0, 1 and 2")
        # memlive_bench.sh: the same refusals, before it builds or measures anything.
        script = os.path.join(HERE, "memlive_bench.sh")
        mlb = [script, "--no-build", "--build-dir", build]
        typo = os.path.join(out_dir, "typo")
        for args, want in ((mlb + ["--reps", "0"], "--reps must be an integer from 1 to 100"),
                           (mlb + ["--reps", "2x"], "--reps must be an integer"),
                           (mlb + ["--out"], "--out needs a value"),
                           (mlb + ["--bogus"], "unknown option --bogus"),
                           # a file, not a folder: was mkdir's own message, exit 1
                           (mlb + ["--out", os.path.abspath(__file__)], "cannot write there"),
                           # were a missing bench_memlive, exit 1; and cmake's errors
                           (mlb + ["--build-dir", typo], "--build-dir %s: not a directory" % typo),
                           ([script, "--build-dir", a_file],
                            "--build-dir %s: not a directory" % a_file)):
            out = subprocess.run(args, capture_output=True, text=True, timeout=60)
            lines = out.stderr.strip().splitlines()
            if out.returncode != 2 or want not in out.stderr or len(lines) != 1 or \
                    not lines[0].startswith("memlive_bench.sh: "):
                failures.append("memlive_bench.sh %s: exit %d, stderr %r (want 2 and one line %r)"
                                % (" ".join(args[1:]), out.returncode, out.stderr.strip()[-300:],
                                   want))

    # bench.py's readers of results and summary files: a bad file is named in one line of
    # stderr, never a traceback, and nothing is written.
    with tempfile.TemporaryDirectory() as tmp:
        files = {"missing.csv": None, "empty.csv": "workload,case,threads,metric,better,allocator,"
                 "ratio_to_glibc,paired_to_glibc,rep,unit,value\n",
                 "other.csv": "a,b\n1,2\n",
                 "nan.csv": "workload,case,threads,metric,better,allocator,ratio_to_glibc,"
                 "paired_to_glibc,rep,unit,value\nw,c,1,m,higher,glibc,fast,1,1,s,zz\n"}
        want = {"missing.csv": "cannot read", "empty.csv": "no rows", "other.csv": "(no column",
                "nan.csv": "is not a number"}
        for name, text in files.items():
            if text is not None:
                with open(os.path.join(tmp, name), "w") as f:
                    f.write(text)
        bench = [sys.executable, os.path.join(HERE, "bench.py")]
        for command in ("plotdata", "table", "summarize", "verdict"):
            for name in files:
                path = os.path.join(tmp, name)
                out_path = os.path.join(tmp, "out-" + command)
                extra = {"plotdata": [out_path], "summarize": [out_path]}.get(command, [])
                out = subprocess.run(bench + [command, path] + extra, capture_output=True, text=True,
                                     timeout=60)
                if (out.returncode == 0 or "Traceback" in out.stderr or
                        not out.stderr.startswith(command + ": ") or want[name] not in out.stderr):
                    failures.append("bench.py %s %s: exit %d, stderr %r (want %r)" % (
                        command, name, out.returncode, out.stderr.strip()[-300:], want[name]))
                if os.path.exists(out_path):
                    failures.append("bench.py %s %s wrote %s" % (command, name, out_path))
        # `table --metrics` with a metric the table cannot show (a typo, or one without a
        # better direction) is a usage error naming the valid ones, not an empty table.
        summary = os.path.join(tmp, "summary.csv")
        with open(summary, "w") as f:
            f.write("workload,case,threads,metric,better,allocator,ratio_to_glibc,paired_to_glibc\n"
                    "w,c,1,ops_per_s,higher,glibc,1,1\nw,c,1,ops_per_s,higher,livealloc,2,2\n"
                    "w,c,1,peak_rss,lower,livealloc,1,1\nw,c,1,live,none,livealloc,1,1\n")
        for metrics, want in (("typo", "unknown metric(s) typo (valid for %s: ops_per_s,peak_rss)"
                               % summary),
                              ("ops_per_s,typo", "unknown metric(s) typo"),
                              ("live", "unknown metric(s) live"),
                              (",", "--metrics ',': empty name")):
            out = subprocess.run(bench + ["table", summary, "--metrics", metrics],
                                 capture_output=True, text=True, timeout=60)
            if (out.returncode != 2 or out.stdout or len(out.stderr.splitlines()) != 1 or
                    not out.stderr.startswith("table: ") or want not in out.stderr):
                failures.append("bench.py table --metrics %s: exit %d, stdout %r, stderr %r "
                                "(want 2 and one line %r)" % (metrics, out.returncode,
                                                              out.stdout[:200], out.stderr, want))
        out = subprocess.run(bench + ["table", summary, "--metrics", "peak_rss"],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0 or "| w | c | 1 | peak_rss (lower) |" not in out.stdout:
            failures.append("bench.py table --metrics peak_rss: exit %d, %r" % (
                out.returncode, (out.stdout + out.stderr)[-300:]))

    # bench.py list: every workload with what it stresses (its row of README.md's table) above
    # its first case, so a workload added without its row fails here.
    out = subprocess.run([sys.executable, os.path.join(HERE, "bench.py"), "list"],
                         capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    cases = [l for l in lines if l and not l.startswith(("#", "allocators: "))]
    for w in dict.fromkeys(c.split()[0] for c in cases):
        first = next(i for i, l in enumerate(lines) if l.split()[0] == w)
        if first == 0 or not re.match(r"# %s: \w" % re.escape(w), lines[first - 1]):
            failures.append("bench.py list: no description above %s (its row in README.md's "
                            "workload table)" % w)
    if out.returncode != 0 or len(cases) < 30:
        failures.append("bench.py list: exit %d, %d cases" % (out.returncode, len(cases)))

    for f in failures:
        print("FAIL: " + f)
    print("%d checks failed" % len(failures) if failures else "all argument checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
