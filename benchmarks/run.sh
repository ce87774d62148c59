#!/bin/bash
# Builds the benchmarks and liblivealloc.so, runs every workload under every allocator
# (interleaved, repeated) and writes results.csv, summary.csv, verdict.md (the targets, also
# printed) and, in a full run with gnuplot installed, plots/ (plot.sh). See benchmarks/README.md.
#
#   benchmarks/run.sh                  full suite, 5 repetitions -> benchmarks/results/
#   benchmarks/run.sh --smoke          tiny sizes, 1 repetition: does everything complete intact?
#
# Options:
#   --reps N             repetitions per allocator and workload (default 5; --smoke forces 1)
#   --scale F            multiply iteration counts (full runs; default 1)
#   --settle S           on a shared host: before each run, wait up to S seconds (0 to 600;
#                        default 0, no wait) until a fixed loop runs within 10% of its usual
#                        (10th-percentile) time in this run; the results count the waits
#   --allocators LIST    comma list among glibc,livealloc,livealloc+profile,livealloc+memlive,
#                        mimalloc,jemalloc,tcmalloc (default: all, skipping a peer that is not
#                        installed; one named here must be there)
#   --workloads LIST     comma list of workloads (bench.py list shows them)
#   --build-dir DIR      CMake build directory (default <repo>/build)
#   --no-build           use the binaries already in --build-dir (ctest does this)
#   --out DIR            where the results go (default benchmarks/results, or
#                        <build-dir>/benchmarks/smoke-results for --smoke); a complete run
#                        replaces results.csv, summary.csv, verdict.md and plots/ there together
#   --require-livealloc  refuse to run (exit 2) when liblivealloc.so is missing, instead of
#                        skipping it
#   --livealloc-lib PATH use this liblivealloc.so instead of <build-dir>/allocator/liblivealloc.so
#                        (for livealloc, livealloc+profile and livealloc+memlive: a usage error
#                        when --allocators names none of them)
#   --baseline-lib PATH  also run this liblivealloc.so (another build) as the column
#                        livealloc@baseline, interleaved: the before/after ratio of a change
#                        (against livealloc: a usage error when --allocators leaves it out)
# Exit status:
#   0    every run completed and validated its data; its results replaced those in --out
#   1    a run failed (crash, timeout, corrupted data, ...): --out keeps the last complete
#        results and this run's partial results.csv and summary.csv go to <out>/failed/
#   2    usage error, nothing run: a bad option or value, an unusable --out, a missing
#        library of an allocator named in --allocators (or of livealloc with --require-livealloc)
#   130  interrupted (Ctrl-C, SIGTERM or SIGHUP): as for 1
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
# The exact command for the CSV header, quoted so that it runs again as written (a path with a
# space stays one argument).
command_line="benchmarks/run.sh"
(($# == 0)) || command_line+="$(printf ' %q' "$@")"

smoke=0 build=1 reps=5 scale=1 settle=0 allocators="" workloads="" out="" require="" livealloc_lib="" baseline_lib=""
build_dir="$repo/build"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps|--scale|--settle|--allocators|--workloads|--build-dir|--out|--livealloc-lib|--baseline-lib)
      if [[ $# -lt 2 ]]; then echo "run.sh: $1 needs a value (try --help)" >&2; exit 2; fi ;;
  esac
  case "$1" in
    --smoke) smoke=1 ;;
    --no-build) build=0 ;;
    --reps) reps="$2"; shift ;;
    --scale) scale="$2"; shift ;;
    --settle) settle="$2"; shift ;;
    --allocators) allocators="$2"; shift ;;
    --workloads) workloads="$2"; shift ;;
    --build-dir) build_dir="$2"; shift ;;
    --out) out="$2"; shift ;;
    --require-livealloc) require="--require-livealloc" ;;
    --livealloc-lib|--baseline-lib)
      if [[ ! -f "$2" ]]; then  # a folder would reach ld.so (and the header's sha256)
        echo "run.sh: $1 $2: $([[ -e "$2" ]] && echo "not a file" || echo "no such file")" >&2
        exit 2
      fi
      if [[ $1 == --livealloc-lib ]]; then livealloc_lib="$(realpath -- "$2")"; else baseline_lib="$(realpath -- "$2")"; fi
      shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "run.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
if [[ $build == 0 && ! -d $build_dir ]]; then  # a typo must not become an empty folder
  echo "run.sh: --build-dir $build_dir: not a directory (--no-build uses an existing build)" >&2
  exit 2
fi
# absolute: LD_PRELOAD paths derive from it
absolute="$(mkdir -p -- "$build_dir" 2>/dev/null && cd -- "$build_dir" && pwd)" ||
  { echo "run.sh: --build-dir $build_dir: cannot create or enter it" >&2; exit 2; }
build_dir="$absolute"
if [[ $smoke == 1 ]]; then
  reps=1
  out="${out:-$build_dir/benchmarks/smoke-results}"
else
  out="${out:-$here/results}"
fi

if [[ $build == 1 ]]; then
  cache="$build_dir/CMakeCache.txt"
  if [[ ! -f "$cache" ]]; then
    cmake -S "$repo" -B "$build_dir" -G Ninja -DLIVEALLOC_BUILD_BENCHMARKS=ON
  elif grep -q '^LIVEALLOC_SANITIZE:STRING=.' "$cache"; then
    echo "run.sh: $build_dir is a sanitizer build, which has no benchmarks; use --build-dir" >&2
    exit 2
  elif ! grep -q '^LIVEALLOC_BUILD_BENCHMARKS:BOOL=ON' "$cache"; then
    # A tree configured with the benchmarks off (or before they existed): switch them on.
    cmake -S "$repo" -B "$build_dir" -DLIVEALLOC_BUILD_BENCHMARKS=ON
  fi
  cmake --build "$build_dir" --target livealloc_benchmarks
  # The allocator is another engineer's work in progress: if it does not build, the peers still run
  # (bench.py notes the missing library, and --require-livealloc turns that into a failure).
  if ! cmake --build "$build_dir" --target livealloc_preload; then
    echo "run.sh: note: livealloc_preload did not build; running without livealloc" >&2
  fi
  # memlive serve observes the livealloc+memlive column.
  if ! cmake --build "$build_dir" --target memlive; then
    echo "run.sh: note: memlive did not build; running without livealloc+memlive" >&2
  fi
fi

mode=()
[[ $smoke == 1 ]] && mode=(--smoke)
# bench.py checks the other options, runs, writes the verdict (the issue's targets; in smoke mode
# only a check that it computes) and the plots, and prints the verdict. exec: a signal to run.sh
# reaches it, and its exit status is ours.
exec /usr/bin/python3 "$here/bench.py" run --prog run.sh --build-dir "$build_dir" --out "$out" --reps "$reps" \
  --scale "$scale" --settle "$settle" --allocators "$allocators" --workloads "$workloads" ${require:+"$require"} \
  --livealloc-lib "$livealloc_lib" --baseline-lib "$baseline_lib" --command "$command_line" "${mode[@]+"${mode[@]}"}"
