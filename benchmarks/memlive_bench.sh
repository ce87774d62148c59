#!/bin/bash
# memlive's judged criteria as benchmarks (benchmarks/README.md, "memlive"): runs bench_memlive
# and writes one CSV with the machine, kernel, compiler, package versions and the exact command
# in its header. Measured, never asserted: the exit status says only whether every measurement
# completed with correct data (1: the last complete CSV stays, this run's goes to *-failed.csv;
# 130: interrupted, the same, and every program it started is ended).
#
#   benchmarks/memlive_bench.sh [--smoke] [--reps N] [--build-dir DIR] [--no-build] [--out DIR]
#
# Full run: serialisation (2,000 iterations), streaming CPU (N repetitions of 10 s, via memlive
# serve and in-process; once more at 50 ms), latency (30 trials at 250, 100, 80 (the default) and 50 ms, both ways):
# about 2.5 minutes.
# --smoke: tiny sizes, one repetition, a few seconds (the ctest entry benchmarks.memlive_smoke).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
build="$repo/build" out="$here/results" reps=3 smoke=0 do_build=1
command_line="benchmarks/memlive_bench.sh"  # quoted: it runs again as written
[ $# -eq 0 ] || command_line+="$(printf ' %q' "$@")"
while [ $# -gt 0 ]; do
  case $1 in
    --reps | --build-dir | --out)
      [ $# -ge 2 ] || { echo "memlive_bench.sh: $1 needs a value (try --help)" >&2; exit 2; } ;;
  esac
  case $1 in
    --smoke) smoke=1 ;;
    --reps) reps=$2; shift ;;
    --build-dir) build=$2; shift ;;
    --no-build) do_build=0 ;;
    --out) out=$2; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "memlive_bench.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
# Digits first, then compared in base 10 (08 is 8): a 20-digit value made test(1) print its own
# "integer expression expected" before this message.
[[ $reps =~ ^0*[0-9]{1,3}$ ]] && ((10#$reps >= 1 && 10#$reps <= 100)) ||
  { echo "memlive_bench.sh: --reps must be an integer from 1 to 100 (got '$reps')" >&2; exit 2; }
reps=$((10#$reps))
# A --build-dir that is not a folder (with --no-build, one that does not exist: a typo) is a usage
# error, as in run.sh: it ended as a missing bench_memlive, exit 1, as if the build were broken.
if [ ! -d "$build" ] && { [ "$do_build" = 0 ] || [ -e "$build" ]; }; then
  why=""
  [ "$do_build" = 1 ] || why=" (--no-build uses an existing build)"
  echo "memlive_bench.sh: --build-dir $build: not a directory$why" >&2
  exit 2
fi

# Interrupted (Ctrl-C, SIGTERM, or SIGHUP from a closed terminal), as run.sh is: the program of
# the moment and everything it started are ended, the partial CSV goes to *-failed.csv (the last
# complete one stays), one line says so, exit 130. bash runs a trap only between commands, so
# each program runs in the background, in a session of its own that a `kill` of this script
# does not reach (nor its memlive serve and workload child), and the script waits for it.
csv="" n=0 total=0 label=""
run_out=$(mktemp)
trap 'rm -f "$run_out"' EXIT
in_background() {  # in_background COMMAND...: its exit status
  setsid --wait "$@" &
  wait $!
}
interrupted() {
  trap '' INT TERM HUP
  local sid pid pids
  for sid in $(jobs -p); do  # the program running, if any: its pid is its session's id
    {  # (bash's own "Killed" line for it is no news)
      kill -KILL "$sid" || true  # first, so that it starts nothing more
      pids=$(ps -o pid= --sid "$sid" || true)
      kill -KILL -- "-$sid" || true
      wait "$sid" || true
      for _ in $(seq 100); do  # until they are gone (or zombies)
        ps -o stat= --sid "$sid" | grep -qv '^Z' || break
        sleep 0.05
      done
    } 2>/dev/null
    # A profiled process that was killed leaves its telemetry segment's name in /dev/shm.
    for pid in $sid $pids; do rm -f "/dev/shm/livealloc.$pid"; done
  done
  if [ "$n" -gt 0 ]; then
    echo "# INTERRUPTED ($1) during run $n of $total" >> "$csv.tmp"
    mv "$csv.tmp" "${csv%.csv}-failed.csv"
    echo "memlive_bench.sh: interrupted ($1) during run $n of $total ($label); $csv is left as" \
      "it was, this run's rows are in ${csv%.csv}-failed.csv" >&2
  else
    [ -z "$csv" ] || rm -f "$csv.tmp"
    echo "memlive_bench.sh: interrupted ($1) before the first run; nothing was written" >&2
  fi
  exit 130
}
for sig in INT TERM HUP; do
  # shellcheck disable=SC2064  # (the name of each signal, now)
  trap "interrupted SIG$sig" "$sig"
done

if [ "$do_build" = 1 ]; then
  [ -f "$build/CMakeCache.txt" ] ||
    in_background cmake -S "$repo" -B "$build" -G Ninja
  in_background cmake --build "$build" --target bench_memlive memlive
fi
bench="$build/benchmarks/bench_memlive" memlive="$build/memlive/memlive"
for f in "$bench" "$memlive"; do
  [ -x "$f" ] || { echo "memlive_bench.sh: $f is missing (build the targets bench_memlive, memlive)" >&2; exit 1; }
done
mkdir -p "$out" 2>/dev/null && [ -w "$out" ] ||
  { echo "memlive_bench.sh: --out $out: cannot write there (not a folder, or no permission)" >&2; exit 2; }
csv="$out/memlive.csv"
[ "$smoke" = 1 ] && csv="$out/memlive-smoke.csv" && reps=1

# The runs: "label|arguments". Smoke: tiny sizes, the same code paths.
if [ "$smoke" = 1 ]; then
  runs=("serialise|serialise --threads 4 --iters 20"
        "stream serve|stream --memlive $memlive --threads 4 --clients 4 --interval 100 --seconds 1"
        "stream in-process|stream --inprocess --threads 4 --clients 4 --interval 100 --seconds 1"
        "latency serve|latency --memlive $memlive --threads 2 --trials 3 --interval 50"
        "latency in-process|latency --inprocess --threads 2 --trials 3 --interval 50")
else
  runs=("serialise|serialise --threads 64 --iters 2000")
  for r in $(seq "$reps"); do
    runs+=("stream serve #$r|stream --memlive $memlive --threads 64 --clients 4 --interval 100 --seconds 10"
           "stream in-process #$r|stream --inprocess --threads 64 --clients 4 --interval 100 --seconds 10")
  done
  # For information: streaming at the fastest interval (20 Hz), once.
  runs+=("stream serve 50 ms|stream --memlive $memlive --threads 64 --clients 4 --interval 50 --seconds 10"
         "stream in-process 50 ms|stream --inprocess --threads 64 --clients 4 --interval 50 --seconds 10")
  for i in 250 100 80 50; do
    runs+=("latency serve ${i} ms|latency --memlive $memlive --threads 16 --trials 30 --interval $i"
           "latency in-process ${i} ms|latency --inprocess --threads 16 --trials 30 --interval $i")
  done
fi

compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
compiler=${compiler:-c++}
{
  echo "# memlive benchmarks (issue 5, judged criteria): raw rows, one per metric per run"
  echo "# date: $(date -u +%Y-%m-%dT%H:%M:%S+00:00)"
  echo "# command: $command_line"
  echo "# machine: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores, $(awk '/MemTotal/ {printf "%d GiB RAM", $2/1048576 + 0.5}' /proc/meminfo)"
  echo "# kernel: $(uname -srvm)"
  echo "# compiler: $("$compiler" --version | head -1) ($compiler)"
  echo "# build type: $(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)"
  echo "# packages: $(dpkg-query -W -f '${Package} ${Version}, ' libc6 libcivetweb-dev nlohmann-json3-dev 2>/dev/null | sed 's/, $//')"
  echo "# repository: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$repo" diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "# mode: $([ "$smoke" = 1 ] && echo smoke || echo full), repetitions $reps"
  echo "# load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# memlive: $memlive; bench: $bench"
  echo "rep,allocator,workload,case,threads,metric,value,unit"
} > "$csv.tmp"

failed=0 n=0 total=${#runs[@]} started=$SECONDS
for run in "${runs[@]}"; do
  n=$((n + 1))
  label=${run%%|*} cmdargs=${run#*|}
  rep=1
  [[ $label =~ \#([0-9]+)$ ]] && rep=${BASH_REMATCH[1]}
  echo "[$n/$total] $label" >&2
  # shellcheck disable=SC2086
  if ! in_background "$bench" $cmdargs > "$run_out"; then
    # A failed run reports no number: its rows are dropped, and the failure is in the CSV.
    echo "FAILED $label: $bench $cmdargs" >&2
    echo "# FAILED $label: $bench $cmdargs" >> "$csv.tmp"
    failed=$((failed + 1))
    continue
  fi
  row='^RESULT workload=\([^ ]*\) case=\([^ ]*\) threads=\([^ ]*\) metric=\([^ ]*\)'
  row+=' value=\([^ ]*\) unit=\([^ ]*\)$'
  sed -n "s/$row/$rep,livealloc,\1,\2,\3,\4,\5,\6/p" "$run_out" >> "$csv.tmp"
done
echo "# load average at end: $(cut -d' ' -f1-3 /proc/loadavg); $total runs in $((SECONDS - started)) s" >> "$csv.tmp"
if [ "$failed" != 0 ]; then  # the last complete CSV stays; this run's goes beside it
  mv "$csv.tmp" "${csv%.csv}-failed.csv"
  echo "memlive_bench.sh: $failed run(s) FAILED; $csv is left as it was, this run's rows are in" \
    "${csv%.csv}-failed.csv" >&2
  exit 1
fi
rm -f "${csv%.csv}-failed.csv"
mv "$csv.tmp" "$csv"
echo "wrote $csv" >&2
