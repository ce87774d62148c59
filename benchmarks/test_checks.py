#!/usr/bin/python3
"""The runner's check of the `clang` workload's output: every run of one bench.py invocation must
write the object file its first run wrote (the compiler's output does not depend on the allocator),
and a run that wrote none, or another one, fails with a message naming the first allocator.

Exit 0 when every check passes, 1 otherwise."""
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
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("checks: %d passed" % len(checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
