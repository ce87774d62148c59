#!/usr/bin/python3
"""Checks `bench.py verdict` on synthetic results whose answers are known by construction.

Three repetitions of two speed cases and one memory-only case. livealloc runs case A at twice
mimalloc's throughput and case B in twice tcmalloc's time, so every ratio below is exact."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

ROWS = []
def add(alloc, workload, case, metric, values, unit):
    for rep, v in enumerate(values, 1):
        ROWS.append("%d,%s,%s,%s,1,%s,%g,%s" % (rep, alloc, workload, case, metric, v, unit))

# Case A: throughput (higher is better); livealloc 2x mimalloc, equal to tcmalloc.
for alloc, v in {"glibc": 100, "livealloc": 200, "livealloc+profile": 196, "mimalloc": 100,
                 "tcmalloc": 200, "livealloc@baseline": 100}.items():
    add(alloc, "fastpath", "size=16", "ops_per_s", [v, v * 1.1, v * 0.9], "pairs/s")
    add(alloc, "fastpath", "size=16", "time", [1.0 / v] * 3, "s")  # ignored: the case has a rate
# Case B: time only (lower is better); livealloc takes twice tcmalloc's time, in every repetition.
for alloc, v in {"glibc": 4, "livealloc": 2, "livealloc+profile": 2, "mimalloc": 2, "tcmalloc": 1,
                 "livealloc@baseline": 2}.items():
    add(alloc, "python", "json", "time", [v, v * 1.2, v * 0.8], "s")
# Peak RSS in every case, and a memory-only case (fragmentation is not a speed case).
for workload, case in (("fastpath", "size=16"), ("python", "json"), ("fragmentation", "keep")):
    for alloc, kib in {"glibc": 100, "livealloc": 100, "livealloc+profile": 100, "mimalloc": 125,
                       "tcmalloc": 200, "livealloc@baseline": 110}.items():
        add(alloc, workload, case, "peak_rss", [kib] * 3, "KiB")
add("livealloc", "fragmentation", "keep", "time", [9, 9, 9], "s")  # not a speed case either
# The background purge column: resident memory after idling, 4x less than livealloc's in two
# repetitions and 2x in the third (a column no target judges).
add("livealloc", "pool_idle", "burst+quiet", "rss_idle", [400, 400, 400], "KiB")
add("livealloc+bgpurge", "pool_idle", "burst+quiet", "rss_idle", [100, 100, 200], "KiB")

EXPECT = [
    "over 2 cases",                                   # A and B, not fragmentation
    # livealloc's own spread: A (220 - 180) / 200, B (2.4 - 1.6) / 2; their median 30%
    "moved by a median of 30.0% between its slowest and fastest repetition of a case "
    "(over 2 cases)",
    "geometric mean against mimalloc: **1.414x**",    # sqrt(2 * 1)
    "geometric mean against tcmalloc: **0.707x**",    # sqrt(1 * 0.5)
    "geometric mean against glibc: **2.000x**",       # sqrt(2 * 2)
    "livealloc+profile against livealloc: 0.990x",    # sqrt(0.98 * 1)
    "peak RSS: mimalloc uses **1.250x**",             # over 3 cases
    "peak RSS: tcmalloc uses **2.000x**",
    "- python json 1t: tcmalloc 0.500 (0.50-0.50)",   # the one loss, in every repetition
    "fastest peer on every workload: **not met** (1 of 2 cases slower at the median, 1 of them",
    "faster than mimalloc on the geometric mean: **met** (1.414x)",
    "no worse than mimalloc's geometric mean: **met**",
    "profiling on costs at most 3%: **met**",
    # Before/after against another build (run.sh --baseline-lib): 2x on A, level on B.
    "- fastpath size=16 1t: 2.000 (2.00-2.00)",
    "speed, geometric mean: **1.414x** the baseline's over 2 cases",
    "peak RSS: the baseline uses **1.100x** this build's",
    "- resident after idling, pool_idle burst+quiet 1t: livealloc holds 4.000 (2.00-4.00) "
    "livealloc+bgpurge's (paired, min-max)",
]

# A partial run (run.sh --allocators): a target whose allocator was not run is "not measured",
# never met or failed on a NaN; the speed target names the peers it was judged against.
PARTIAL = {
    ("livealloc", "tcmalloc"): [
        "fastest peer on every workload: **not met** (1 of 2 cases slower at the median, 1 of them "
        "in every repetition; compared with tcmalloc only)",
        "faster than mimalloc on the geometric mean: **not measured** (mimalloc not in this run)",
        "no worse than mimalloc's geometric mean: **not measured** (mimalloc not in this run)",
        "profiling on costs at most 3%: **not measured** (livealloc+profile not in this run)",
    ],
    ("livealloc", "glibc"): [
        "fastest peer on every workload: **not measured** (no peer but glibc in this run)",
    ],
    # livealloc not run at all (its library did not build): nothing of it is judged.
    ("glibc", "tcmalloc"): [
        "No speed case that livealloc and a peer both ran.",
        "fastest peer on every workload: **not measured** (no speed case that livealloc and "
        "tcmalloc ran)",
    ],
}
# A run of the memory workloads alone (fragmentation): no speed case, and the peak RSS compared.
MEMORY_ONLY = [
    "No speed case that livealloc and a peer both ran.",
    "peak RSS: mimalloc uses **1.250x** livealloc's (geometric mean over 1 cases)",
    "peak RSS: tcmalloc uses **2.000x** livealloc's (geometric mean over 1 cases)",
    "no worse than mimalloc's geometric mean: **met** (mimalloc uses 1.250x livealloc's)",
    "fastest peer on every workload: **not measured** (no speed case that livealloc and "
    "mimalloc or tcmalloc ran)",
]

# The host probe's line, as run_suite writes it after the rows: its spread is read back.
PROBE = ("# host probe: 0.1250, the median over 2 cases of the spread of a fixed loop of integer "
         "additions timed before the case in each repetition\n")
PROBE_SAYS = "moved by a median of 12.5% the same way (over 2 cases)"
# A run with --settle: its footer line, and what the verdict makes of it.
SETTLE = ("# settle: 40 of 42 runs ended on a quiet host (a probe within 10% of the run's "
          "reference, 0.0072 s); 7 waited for one before they started, 12.4 s in all, 1 of them "
          "started after the limit of 5 s\n")
SETTLE_SAYS = ("With `--settle 5`, each run started once a fixed loop of integer additions ran "
               "within 10% of its reference time (its 10th percentile in this run), waiting up "
               "to 5 s: 7 of 42 runs waited (12.4 s in all), 1 of them started after the limit, "
               "and 40 of 42 ended on a quiet host.")

def write_results(path, rows, end=""):
    with open(path, "w") as f:
        f.write("# date: test\n# repository: synthetic\n# mode: full, repetitions 3, scale 1\n")
        f.write("rep,allocator,workload,case,threads,metric,value,unit\n" + "\n".join(rows) + "\n")
        f.write(end)

def verdict(path):
    return subprocess.run([sys.executable, os.path.join(HERE, "bench.py"), "verdict", path],
                          capture_output=True, text=True)

def main():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "results.csv")
        write_results(path, ROWS, PROBE)
        out = verdict(path)
        noisy_path = os.path.join(tmp, "noisy.csv")  # a probe spread of 55%: the host is noisy
        write_results(noisy_path, ROWS, PROBE.replace("0.1250", "0.5510"))
        noisy = verdict(noisy_path).stdout
        if "moved by a median of 55.1%" not in noisy or "**A noisy host**" not in noisy:
            failures.append("a probe spread of 55%% is not called noisy: %r" % noisy[:900])
        if "noisy host" in out.stdout:
            failures.append("a probe spread of 12.5% is called noisy")
        if "--settle" in out.stdout.split("**A noisy")[0] or "--settle" not in noisy:
            failures.append("a run without --settle: it is reported, or not suggested on a noisy "
                            "host: %r" % noisy[:900])
        settled_path = os.path.join(tmp, "settled.csv")  # noisy, and settled
        write_results(settled_path, ROWS, PROBE.replace("0.1250", "0.5510") + SETTLE)
        settled = verdict(settled_path).stdout
        if SETTLE_SAYS not in settled or "waited for by `--settle`" not in settled:
            failures.append("a run with --settle: its waits are not reported: %r" % settled[:1200])
        # One repetition has no spread, and the settle line is reported all the same.
        one_path = os.path.join(tmp, "one.csv")
        write_results(one_path, [r for r in ROWS if r.startswith("1,")], SETTLE)
        if SETTLE_SAYS not in verdict(one_path).stdout:
            failures.append("a run of one repetition with --settle: its waits are not reported")
        for allocators, expect in PARTIAL.items():
            part = os.path.join(tmp, "partial.csv")
            write_results(part, [r for r in ROWS if r.split(",")[1] in allocators])
            got = verdict(part)
            if got.returncode != 0 or "nan" in got.stdout:
                failures.append("partial run %s: exit %d, %s" % (allocators, got.returncode, got.stdout))
            if "fixed loop" in got.stdout:  # no probe line in these files: nothing to report
                failures.append("partial run %s: a host probe line without a probe" % (allocators,))
            failures += ["partial run %s: missing %r" % (allocators, e) for e in expect if e not in got.stdout]
        mem = os.path.join(tmp, "memory.csv")
        write_results(mem, [r for r in ROWS if r.split(",")[2] == "fragmentation"])
        got = verdict(mem)
        if got.returncode != 0 or "nan" in got.stdout or "| case |" in got.stdout:
            failures.append("memory-only run: exit %d, %s" % (got.returncode, got.stdout))
        failures += ["memory-only run: missing %r" % e for e in MEMORY_ONLY if e not in got.stdout]
        # Bad inputs: each fails with a one-line message naming the problem, never a traceback.
        bad_inputs = {"empty.csv": ("rep,allocator,workload,case,threads,metric,value,unit\n", "no rows"),
                      "other.csv": ("a,b\n1,2\n", "not a results.csv"),
                      "nan.csv": ("rep,allocator,workload,case,threads,metric,value,unit\n"
                                  "1,glibc,w,c,1,time,fast,s\n", "is not a number"),
                      "missing.csv": (None, "cannot read")}
        bad = {}
        for name, (text, _) in bad_inputs.items():
            if text is not None:
                open(os.path.join(tmp, name), "w").write(text)
            bad[name] = subprocess.run([sys.executable, os.path.join(HERE, "bench.py"), "verdict",
                                        os.path.join(tmp, name)], capture_output=True, text=True)
    failures += [e for e in EXPECT + [PROBE_SAYS] if e not in out.stdout]
    if out.returncode != 0:
        failures.append("exit code %d: %s" % (out.returncode, out.stderr))
    if "mimalloc 0." in out.stdout.split("Cases where")[1]:
        failures.append("case A counted as a loss to mimalloc")
    if "livealloc@baseline" in out.stdout.split("| case |")[1].split("\n")[0]:
        failures.append("the baseline build is listed as a peer")
    for name, (_, message) in bad_inputs.items():
        r = bad[name]
        if r.returncode == 0 or message not in r.stderr or "Traceback" in r.stderr:
            failures.append("%s must fail with %r, got %d %r" % (name, message, r.returncode, r.stderr))
    for f in failures:
        print("FAIL:", f)
    if failures:
        print(out.stdout)
        return 1
    print("verdict: %d checks passed" % (len(EXPECT) + 7 + len(bad_inputs) + len(MEMORY_ONLY) + 1 +
                                         sum(len(e) + 2 for e in PARTIAL.values())))
    return 0

if __name__ == "__main__":
    sys.exit(main())
