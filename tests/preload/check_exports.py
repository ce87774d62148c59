#!/usr/bin/python3
"""Checks the dynamic symbol table of liblivealloc.so (nm -D --defined-only).

Every symbol a program may reach for must be there as a function, or some program breaks
(node aborts without posix_memalign, for one). Nothing else of ours may be exported: a leaked
internal symbol can bind to another library's and becomes ABI we never meant to promise.

Usage: check_exports.py LIB [NM]
"""
import re
import subprocess
import sys

REQUIRED = """
malloc free calloc realloc reallocarray aligned_alloc posix_memalign memalign valloc pvalloc
malloc_usable_size free_sized free_aligned_sized malloc_trim mallinfo2
_Znwm _Znam _ZnwmRKSt9nothrow_t _ZnamRKSt9nothrow_t
_ZdlPv _ZdaPv _ZdlPvm _ZdaPvm _ZdlPvRKSt9nothrow_t _ZdaPvRKSt9nothrow_t
_ZnwmSt11align_val_t _ZnamSt11align_val_t
_ZnwmSt11align_val_tRKSt9nothrow_t _ZnamSt11align_val_tRKSt9nothrow_t
_ZdlPvSt11align_val_t _ZdaPvSt11align_val_t _ZdlPvmSt11align_val_t _ZdaPvmSt11align_val_t
_ZdlPvSt11align_val_tRKSt9nothrow_t _ZdaPvSt11align_val_tRKSt9nothrow_t
_exit _Exit
""".split()  # _exit and _Exit: they remove the telemetry segment's name first

# The allow-list: what else may be exported, and why.
ALLOWED_PREFIXES = (
    "livealloc_",  # our own C API (livealloc_version, ...), prefixed so it cannot clash
)
ALLOWED_NAMES = {
    # Provided by the linker in every shared object, not by our code.
    "_init", "_fini", "__bss_start", "_edata", "_end",
}
# Symbol version nodes (type A) if a version script names them LIVEALLOC_*.
VERSION_NODE = re.compile(r"^LIVEALLOC[A-Z0-9_.]*$")

FUNCTION_TYPES = set("TWi")  # global text, weak, GNU indirect function


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    lib = sys.argv[1]
    nm = sys.argv[2] if len(sys.argv) == 3 else "nm"
    out = subprocess.run([nm, "-D", "--defined-only", lib], check=True,
                         capture_output=True, text=True).stdout
    symbols = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        kind, name = fields[-2], fields[-1].split("@")[0]  # drop @VERSION / @@VERSION
        symbols[name] = kind

    problems = []
    for name in REQUIRED:
        if name not in symbols:
            problems.append(f"missing: {name}")
        elif symbols[name] not in FUNCTION_TYPES:
            problems.append(f"not exported as a function (nm type {symbols[name]}): {name}")
    for name, kind in sorted(symbols.items()):
        if name in REQUIRED or name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES):
            continue
        if kind == "A" and VERSION_NODE.match(name):
            continue
        problems.append(f"unexpected export (nm type {kind}): {name}")

    if problems:
        print(f"FAIL: {lib} exports the wrong set of symbols:")
        for p in problems:
            print("  " + p)
        sys.exit(1)
    print(f"OK: all {len(REQUIRED)} required symbols exported as functions, "
          f"{len(symbols) - len(REQUIRED)} other exports all allowed")


main()
