#!/usr/bin/python3
"""Checks where the fast paths sit in liblivealloc.so (its full symbol table, nm -n).

The functions every malloc and free runs (LIVEALLOC_HOT: malloc, free, calloc, realloc, operator
new and delete, malloc_medium, take_foreign) must each start a 64-byte line and lie together, with
no other function between them. Then a change to any other code moves them only together and by
whole lines: before, two builds of the same fast-path instructions measured up to 4-6% apart on
the fast path, because unrelated code had moved these functions against each other.

Usage: check_hot_layout.py LIB [NM]
"""
import re
import subprocess
import sys

EXPORTED = re.compile(r"^(malloc|free|calloc|realloc|_Znw.*|_Zna.*|_Zdl.*|_Zda.*)$")
# Mangled names of the internal ones: livealloc::v0::detail::take_foreign and malloc_medium<...>.
INTERNAL = re.compile(r"^_ZN9livealloc2v06detail(12take_foreign|13malloc_medium)")
FUNCTION_TYPES = set("tTwWi")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    lib = sys.argv[1]
    nm = sys.argv[2] if len(sys.argv) == 3 else "nm"
    out = subprocess.run([nm, "-n", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    functions = []  # (address, name), in address order
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[1] in FUNCTION_TYPES:
            functions.append((int(fields[0], 16), fields[2].split("@")[0]))
    if not functions:
        sys.exit(f"{lib}: no function symbols (a stripped library cannot be checked)")

    def hot(name):
        return bool(EXPORTED.match(name) or INTERNAL.match(name))

    problems = []
    found = {name for _, name in functions if hot(name)}
    for needed in ("malloc", "free", "_Znwm", "_ZdlPv"):
        if needed not in found:
            problems.append(f"missing: {needed}")
    for kind in ("12take_foreign", "13malloc_medium"):
        if not any(n.startswith("_ZN9livealloc2v06detail" + kind) for n in found):
            problems.append(f"missing: livealloc::v0::detail::{kind[2:]}")
    for address, name in functions:
        if hot(name) and address % 64:
            problems.append(f"not on a 64-byte line: {name} at {address:#x}")
    # One run of hot functions in address order; symbols sharing an address are aliases.
    hot_addresses = {a for a, n in functions if hot(n)}
    cold_between = [(a, n) for a, n in functions if a not in hot_addresses
                    and min(hot_addresses, default=0) < a < max(hot_addresses, default=0)]
    for address, name in cold_between:
        problems.append(f"between the hot functions: {name} at {address:#x}")

    if problems:
        print(f"{lib}: {len(problems)} problem(s)")
        for p in problems:
            print("  " + p)
        return 1
    first, last = min(hot_addresses), max(hot_addresses)
    print(f"{lib}: {len(found)} hot functions on 64-byte lines, together at "
          f"{first:#x}-{last:#x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
