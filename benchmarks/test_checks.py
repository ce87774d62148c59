#!/usr/bin/python3
"""The runner's check of the `clang` workload's output: every run of one bench.py invocation must
write the object file its first run wrote (the compiler's output does not depend on the allocator),
and a run that wrote none, or another one, fails with a message naming the first allocator. A run
under a preload is compared with clang++ without one (glibc) even when glibc is not in the run.

Exit 0 when every check passes, 1 otherwise.
    test_checks.py BUILD_DIR"""
import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    failures = []
    with tempfile.TemporaryDirectory() as d:
        def run(alloc, content):
            path = os.path.join(d, "out.o")
            if content is None:
                if os.path.exists(path):
                    os.unlink(path)
            else:
                with open(path, "wb") as f:
                    f.write(content)
            return bench.check_clang_object(path, {"name": alloc})

        checks = [
            ("glibc", b"\x7fELF one", None),
            ("livealloc", b"\x7fELF one", None),
            ("mimalloc", b"\x7fELF two", "a different object file than under glibc"),
            ("jemalloc", None, "wrote no object file"),
            ("tcmalloc", b"\x7fELF one", None),
        ]
        for alloc, content, expect in checks:
            got = run(alloc, content)
            if (got is None) != (expect is None) or (expect and expect not in got):
                failures.append("%s: expected %r, got %r" % (alloc, expect, got))
    # `--allocators livealloc` alone: its clang++ writes another object than without a preload
    # (a fake clang++ stands for an allocator that corrupts the compiler's data), and the run
    # must fail rather than take its own output for the reference.
    build = sys.argv[1]
    lib = os.path.join(build, "allocator", "liblivealloc.so")
    with tempfile.TemporaryDirectory() as d:
        fake = os.path.join(d, "clang++")
        with open(fake, "w") as f:
            f.write('#!/bin/sh\nwhile [ $# -gt 1 ]; do [ "$1" = -o ] && out=$2; shift; done\n'
                    'printf "object %s\\n" "${LD_PRELOAD:+corrupted}" > "$out"\n')
        os.chmod(fake, 0o755)
        bench.CLANG, bench.CLANG_OBJECTS = fake, {}
        case = next(c for c in bench.CASES if c["kind"] == "clang")
        args = argparse.Namespace(smoke=True, scale=1.0)
        alloc = {"name": "livealloc", "path": lib, "env": {}}
        _, failure = bench.run_case(case, alloc, args, build)
        if not failure or "a different object file than under glibc" not in failure:
            failures.append("clang++ under livealloc alone, another object than without a "
                            "preload: %r, want a failure" % failure)
        alloc = {"name": "glibc", "path": None, "env": {}}
        _, failure = bench.run_case(case, alloc, args, build)
        if failure:
            failures.append("clang++ under glibc after the reference: %r" % failure)
        checks.append("reference")
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("checks: %d passed" % len(checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
