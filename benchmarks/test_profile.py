#!/usr/bin/python3
"""Checks `bench.py profile` on a short real run: glibc and livealloc on the 64-byte fast path.

Exit 77 (skipped) where perf cannot sample here; 0 when every check passes, 1 otherwise.
    test_profile.py BUILD_DIR"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def profile(build, *args):
    return subprocess.run([sys.executable, os.path.join(HERE, "bench.py"), "profile"] + list(args) +
                          ["--build-dir", build], capture_output=True, text=True, timeout=300)


def main():
    build = sys.argv[1]
    out = profile(build, "fastpath size=64", "--allocators", "glibc,livealloc", "--reps", "1",
                  "--scale", "0.05", "--freq", "20000", "--top", "20")
    if out.returncode == 3:
        print("skipped: " + out.stderr.strip())
        return 77
    failures = []
    if out.returncode != 0:
        failures.append("exit code %d: %s" % (out.returncode, out.stderr.strip()))
    text = out.stdout
    if "| part | glibc | livealloc |" not in text:
        failures.append("no table with a column per allocator")
    rows = {m.group(1): [float(x) for x in m.group(2).split(" | ")]
            for m in re.finditer(r"^\| (allocator|workload|libc|kernel|other) \| (.*) \|$", text, re.M)}
    total = re.search(r"^\| \*\*total\*\* \| (.*) \|$", text, re.M)
    if "allocator" not in rows or "workload" not in rows or not total:
        failures.append("the allocator, workload and total rows must all be there")
    else:
        # Both allocators spend time in their own malloc and free on this workload.
        if min(rows["allocator"]) <= 0 or min(rows["workload"]) <= 0:
            failures.append("allocator and workload time must be positive: %s" % rows)
        totals = [float(x.strip("*")) for x in total.group(1).split(" | ")]
        for i, t in enumerate(totals):
            parts = sum(r[i] for r in rows.values())
            if abs(parts - t) > 0.1 * len(rows) + 0.05:  # each cell is rounded to 0.1
                failures.append("column %d: parts add up to %.1f, total says %.1f" % (i, parts, t))
    mine = text.split("livealloc, the")[-1] if "livealloc, the" in text else ""
    if not re.search(r"\b(malloc|free) \(allocator\)", mine):
        failures.append("livealloc's own malloc or free is not among its functions (the preload "
                        "library was not recognized as the allocator)")
    # Bad requests: a one-line message and exit 2, never a traceback.
    for args, message in ((["no such case"], "no case"), (["python"], "runs another program"),
                          (["fastpath size=64", "--reps", "0"], "--reps must be"),
                          (["fastpath size=64", "--allocators", "nosuch"], "unknown allocator")):
        r = profile(build, *args)
        if r.returncode == 0 or message not in r.stderr or "Traceback" in r.stderr:
            failures.append("%s must fail with %r, got %d %r" % (args, message, r.returncode, r.stderr))
    for f in failures:
        print("FAIL:", f)
    if failures:
        print(text)
        return 1
    print("profile: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
