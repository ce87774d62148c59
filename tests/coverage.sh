#!/usr/bin/env bash
# Which lines of our own code the tests run: a gcov build (-O0 --coverage), its ctest, and the
# line counts of every translation unit merged per source line (a header's line counts as run
# if any unit ran it). Not part of tests/run.sh: the build and its tests take about 8 minutes on
# two cores. Needs GCC's gcov and python3, and what tests/setup.sh installs (the page's tests
# need web/node_modules: without it they fail or skip, and their lines count as not run).
#
#   tests/coverage.sh [--no-build] [BUILD_DIR]     (default BUILD_DIR: <repo>/build-cov)
#
# Prints "run/lines percent file" for every source file of the repository that a test ran,
# then the lines no test ran of allocator/include/*.h, memlive/include/memlive.h and
# memlive/src/*, as "file:line: text" (also in BUILD_DIR/uncovered.txt).
# Left out: the fuzz targets (their own clang build), preload.exports (gcov's runtime adds
# exports to liblivealloc.so, which that test rightly refuses). Lines run only by a process
# that ends without exit() (abort, _exit, exec, a signal) count as not run: gcov writes its
# counts at exit. Lines of always_inline functions are often charged to their callers.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build=1
dir="$root/build-cov"
for arg in "$@"; do
  case "$arg" in
    --no-build) build=0 ;;
    -h | --help)
      sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "tests/coverage.sh: unknown option $arg (try --help)" >&2
      exit 2
      ;;
    *) dir="$(realpath -m "$arg")" ;;
  esac
done
command -v gcov > /dev/null || { echo "tests/coverage.sh: gcov is missing" >&2; exit 2; }

if [[ $build == 1 ]]; then
  cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug \
    -DCMAKE_C_FLAGS="--coverage -O0 -fprofile-update=atomic" \
    -DCMAKE_CXX_FLAGS="--coverage -O0 -fprofile-update=atomic" \
    -DCMAKE_EXE_LINKER_FLAGS=--coverage -DCMAKE_SHARED_LINKER_FLAGS=--coverage
  cmake --build "$dir" -j2
  find "$dir" -name '*.gcda' -delete
  # A failed test still leaves its counts; the report says what ran either way.
  (cd "$dir" && ctest -j2 -E '^fuzz\.|^preload\.exports$' --timeout 600) || true
fi

json="$dir/coverage-json"
rm -rf "$json"
mkdir -p "$json"
count=0
while IFS= read -r -d '' gcda; do
  (cd "$json" && gcov --json-format --preserve-paths -o "$(dirname "$gcda")" "$gcda" \
    > /dev/null 2>&1) || true
  count=$((count + 1))
done < <(find "$dir" -name '*.gcda' -print0)
if [[ $count == 0 ]]; then
  echo "tests/coverage.sh: no .gcda file in $dir: build and run the tests first" >&2
  exit 1
fi

python3 - "$root" "$json" "$dir/uncovered.txt" << 'PY'
import collections, glob, gzip, json, os, sys

root, json_dir, out = sys.argv[1], sys.argv[2], sys.argv[3]
runs = collections.defaultdict(dict)  # file -> line -> times run, summed over the units
for name in glob.glob(os.path.join(json_dir, "*.gcov.json.gz")):
    with gzip.open(name) as f:
        data = json.load(f)
    for entry in data["files"]:
        path = os.path.normpath(os.path.join(data.get("current_working_directory", ""),
                                             entry["file"]))
        if not path.startswith(root + "/"):
            continue
        lines = runs[path]
        for line in entry["lines"]:
            n = line["line_number"]
            lines[n] = lines.get(n, 0) + max(0, line["count"])
shown = ("allocator/include/", "memlive/include/memlive.h", "memlive/src/")
with open(out, "w") as report:
    for path in sorted(runs):
        rel = os.path.relpath(path, root)
        lines = runs[path]
        ran = sum(1 for n in lines.values() if n > 0)
        print("%6d/%-6d %5.1f%% %s" % (ran, len(lines), 100.0 * ran / max(1, len(lines)), rel))
        if rel.startswith(shown):
            text = open(path, errors="replace").read().split("\n")
            for n in sorted(k for k, v in lines.items() if v == 0):
                report.write("%s:%d: %s\n" % (rel, n, text[n - 1].strip()[:100]))
print("lines no test ran: %s" % out)
PY
