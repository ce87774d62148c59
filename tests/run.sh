#!/usr/bin/env bash
# The project's test command. Runs every configuration and ends with one line "N passed,
# N failed" (ctest tests, summed over the configurations; a configuration that does not
# configure or build counts as one failure). Exits non-zero if anything failed.
#
#   build/        RelWithDebInfo, everything: unit, stress, memlive, LD_PRELOAD runs of real
#                 programs, examples and the demo, the browser page, install, fuzz (libFuzzer
#                 targets built with clang and their own ASan+UBSan), benchmarks smoke
#   build-tsan/   -DLIVEALLOC_SANITIZE=thread:    unit, stress and memlive tests
#   build-ubsan/  -DLIVEALLOC_SANITIZE=undefined: unit, stress and memlive tests
#   build-asan/   -DLIVEALLOC_SANITIZE=address:   unit, stress and memlive tests, LeakSanitizer on
# The sanitizer builds leave out what needs liblivealloc.so (they make none: LD_PRELOAD runs,
# examples, the browser page) and, under ASan and TSan, whose runtimes own malloc, what replaces
# malloc in-process (LIVEALLOC_OVERRIDE); tests/CMakeLists.txt and each folder's CMakeLists.txt
# say what they leave out and why. ASan sees livealloc's own blocks as plain mapped memory (it
# does not poison them), so it checks memlive, the tests and the allocator's stack and globals;
# the allocator's blocks are checked by LIVEALLOC_CHECKED (unit/checked) and tests/fuzz.
#
# Usage: tests/run.sh [--quick]    (or LIVEALLOC_TEST_QUICK=1): only build/, for local runs.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

quick="${LIVEALLOC_TEST_QUICK:-0}"
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    *)
      echo "usage: tests/run.sh [--quick]" >&2
      exit 2
      ;;
  esac
done

# Make sanitizer reports fatal and readable. A suppressions file, if one is ever needed, lives
# in tests/ with a reason per entry.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1${TSAN_OPTIONS:+ $TSAN_OPTIONS}"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1${UBSAN_OPTIONS:+ $UBSAN_OPTIONS}"
# LeakSanitizer on: ASan's malloc serves everything but livealloc's own blocks, which livealloc
# maps itself (LSan neither sees nor scans them), so a leak report is a leak of ours or of a test.
export ASAN_OPTIONS="halt_on_error=1 detect_leaks=1${ASAN_OPTIONS:+ $ASAN_OPTIONS}"
if [[ -f "$root/tests/tsan-suppressions.txt" ]]; then
  TSAN_OPTIONS+=" suppressions=$root/tests/tsan-suppressions.txt"
fi

passed=0
failed=0
skipped=0
results=()

# configuration NAME DIR [CMAKE ARGS...]: configure, build, ctest; adds to the counts.
# RelWithDebInfo with line tables only (-g1; CMake's default is -g): sanitizer reports and
# backtraces still name file and line, and the builds take less CPU (on 2 cores, 2026-12-02:
# build/ 7% less, build-tsan/ 17%, build-asan/ 34%; tests/memlive/format.cpp under UBSan 98 s
# with -g, 67 s with -g1).
# A configuration may pass its own CMAKE_<LANG>_FLAGS_RELWITHDEBINFO after these.
configuration() {
  local name="$1" dir="$2"
  shift 2
  echo "=== $name: configure and build in $dir/"
  if ! cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" "$@" ||
    ! cmake --build "$dir" -j2; then
    failed=$((failed + 1))
    results+=("$name: FAILED to configure or build")
    return 0
  fi

  echo "=== $name: ctest"
  local log="$dir/run-ctest.log" rc=0
  # --no-tests=error: a configuration that silently defines no test must not look green.
  ctest --test-dir "$dir" --output-on-failure -j2 --no-tests=error 2>&1 | tee "$log" || rc=$?

  # ctest's summary: "NN% tests passed, F tests failed out of T".
  local summary total fails
  summary="$(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -n 1 || true)"
  if [[ -n "$summary" ]]; then
    fails="$(sed -E 's/.* ([0-9]+) tests? failed out of.*/\1/' <<<"$summary")"
    total="$(sed -E 's/.* out of ([0-9]+).*/\1/' <<<"$summary")"
  else
    fails=0 total=0
  fi
  # A non-zero exit with no failure counted (no tests, ctest error) is still a failure.
  if ((rc != 0 && fails == 0)); then fails=1 total=$((total + 1)); fi
  # ctest counts a skipped test (SKIP_RETURN_CODE) as not failed; report it apart.
  local skips
  skips="$(grep -cE '^[[:space:]]+[0-9]+ - .* \(Skipped\)$' "$log" || true)"
  passed=$((passed + total - fails - skips))
  failed=$((failed + fails))
  skipped=$((skipped + skips))
  results+=("$name: $((total - fails - skips)) passed, $fails failed, $skips skipped")
}

"$root/tests/setup.sh"
export PATH="$PATH:${XDG_CACHE_HOME:-$HOME/.cache}/livealloc/bin"  # promtool, from setup.sh

# Every option spelled out, so a build/ configured differently by hand cannot quietly drop tests.
configuration main "$root/build" -DLIVEALLOC_SANITIZE= -DLIVEALLOC_BUILD_TESTS=ON \
  -DLIVEALLOC_BUILD_EXAMPLES=ON -DLIVEALLOC_BUILD_BENCHMARKS=ON

if [[ "$quick" == 1 ]]; then
  echo "=== sanitizer builds skipped (--quick)"
  results+=("tsan: skipped (--quick)" "ubsan: skipped (--quick)" "asan: skipped (--quick)")
elif [[ ! -f "$root/tests/unit/CMakeLists.txt" && ! -f "$root/tests/stress/CMakeLists.txt" ]]; then
  # Sanitizer builds run only the unit and stress tests; before those exist there is nothing
  # to run, and an empty ctest would fail.
  echo "=== sanitizer builds skipped: tests/unit and tests/stress define no tests yet"
  results+=("tsan: skipped (no unit/stress tests)" "ubsan: skipped (no unit/stress tests)"
    "asan: skipped (no unit/stress tests)")
else
  # Examples and benchmarks are off: they exist to run under LD_PRELOAD, which sanitizers
  # (owning malloc themselves) rule out; tests/CMakeLists.txt leaves the preload tests out.
  sanitizer_args=(-DLIVEALLOC_BUILD_TESTS=ON -DLIVEALLOC_BUILD_EXAMPLES=OFF
    -DLIVEALLOC_BUILD_BENCHMARKS=OFF)
  configuration tsan "$root/build-tsan" -DLIVEALLOC_SANITIZE=thread "${sanitizer_args[@]}"
  # UBSan at -O1 too: GCC adds its checks as it parses, before any optimisation, so they are the
  # same at -O1, and the build takes 27% less CPU than at -O2 (440 s to 321 s with -g1).
  configuration ubsan "$root/build-ubsan" -DLIVEALLOC_SANITIZE=undefined "${sanitizer_args[@]}" \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
  # ASan at -O1, which its documentation suggests: with g++ 12 at -O2 this build took the
  # longest of the four (tests/unit/telemetry_reader.cpp, the largest file: 75 s of CPU at -O2,
  # 26 s at -O1; 18 s plain, 31 s under UBSan). Stricter checks in this configuration only (the
  # fuzz targets of build/ keep their defaults): stack frames used after their return, globals
  # read before their initialisation in another file, string arguments read to their end. They
  # cost its ctest about 8 s (32 s to 40 s).
  asan_strict="detect_stack_use_after_return=1 check_initialization_order=1 strict_init_order=1"
  asan_strict+=" strict_string_checks=1"
  ASAN_OPTIONS="$ASAN_OPTIONS $asan_strict" \
    configuration asan "$root/build-asan" -DLIVEALLOC_SANITIZE=address "${sanitizer_args[@]}" \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
    "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
fi

echo "=== summary"
printf '  %s\n' "${results[@]}"
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
