#!/usr/bin/python3
"""Checks the dynamic interface of liblivealloc.so: its symbols (nm -D --defined-only) and the
libraries it needs (readelf -d).

Every symbol a program may reach for must be there as a function, or some program breaks
(node aborts without posix_memalign, for one). Nothing else of ours may be exported: a leaked
internal symbol can bind to another library's and becomes ABI we never meant to promise.
The library needs libc alone: every preloaded process loads what it needs, so a needless
libgcc_s.so.1 (for one helper, __popcountdi2) cost a `/bin/true` 8 page faults and 17% of its
CPU time.

Usage: check_exports.py LIB [NM [READELF]]
"""
import re
import subprocess
import sys

REQUIRED = """
malloc free calloc realloc reallocarray aligned_alloc posix_memalign memalign valloc pvalloc
malloc_usable_size free_sized free_aligned_sized malloc_trim mallinfo2 mallinfo malloc_stats
malloc_info
__libc_malloc __libc_free __libc_calloc __libc_realloc __libc_memalign __libc_valloc
__libc_pvalloc __libc_mallinfo cfree
_Znwm _Znam _ZnwmRKSt9nothrow_t _ZnamRKSt9nothrow_t
_ZdlPv _ZdaPv _ZdlPvm _ZdaPvm _ZdlPvRKSt9nothrow_t _ZdaPvRKSt9nothrow_t
_ZnwmSt11align_val_t _ZnamSt11align_val_t
_ZnwmSt11align_val_tRKSt9nothrow_t _ZnamSt11align_val_tRKSt9nothrow_t
_ZdlPvSt11align_val_t _ZdaPvSt11align_val_t _ZdlPvmSt11align_val_t _ZdaPvmSt11align_val_t
_ZdlPvSt11align_val_tRKSt9nothrow_t _ZdaPvSt11align_val_tRKSt9nothrow_t
_exit _Exit daemon
""".split()  # _exit, _Exit and daemon: they remove the telemetry segment's name first

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

NEEDED_ALLOWED = {"libc.so.6"}


def needed_libraries(lib, readelf):
    out = subprocess.run([readelf, "-d", "-W", lib], check=True,
                         capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def main():
    if len(sys.argv) not in (2, 3, 4):
        sys.exit(__doc__)
    lib = sys.argv[1]
    nm = sys.argv[2] if len(sys.argv) >= 3 else "nm"
    readelf = sys.argv[3] if len(sys.argv) >= 4 else "readelf"
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
    needed = needed_libraries(lib, readelf)
    if "libc.so.6" not in needed:
        problems.append(f"does not name libc.so.6 as needed (readelf -d found {needed})")
    for name in needed:
        if name not in NEEDED_ALLOWED:
            problems.append(f"needs {name}: every preloaded process would load it")

    if problems:
        print(f"FAIL: {lib} has the wrong dynamic interface:")
        for p in problems:
            print("  " + p)
        sys.exit(1)
    print(f"OK: all {len(REQUIRED)} required symbols exported as functions, "
          f"{len(symbols) - len(REQUIRED)} other exports all allowed, needs {', '.join(needed)}")


main()
