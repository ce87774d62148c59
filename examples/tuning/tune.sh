#!/usr/bin/env bash
# tuning: start build/examples/tuning/tuning with a threshold from the environment, then change
# thresholds from the command line with `memlive tune` and watch the process take them up.
#
# Usage: examples/tuning/tune.sh [--build DIR]
# Exits 0 only if every step behaved as described (this is also the example's test).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$root/build"
if [[ $# -eq 2 && "$1" == "--build" ]]; then
  build="$2"
elif [[ $# -ne 0 ]]; then
  echo "usage: $0 [--build DIR]" >&2
  exit 2
fi
memlive="$build/memlive/memlive"
program="$build/examples/tuning/tuning"
for f in "$memlive" "$program"; do
  [[ -x "$f" ]] || { echo "tuning: $f is missing; build first (cmake --build $build)" >&2; exit 1; }
done

status=0
fail() { echo "FAILED: $*" >&2; status=1; }

# 1. From the environment, at start.
coproc P { LIVEALLOC_PURGE_DELAY=100 exec "$program"; }
p_pid=$P_PID
exec {p_out}<&"${P[0]}" {p_in}>&"${P[1]}"
p_w=${P[1]}
exec {p_w}>&-
pid=""
while IFS= read -r line <&"$p_out"; do
  echo "$line"
  [[ "$line" == FAILED* ]] && status=1
  if [[ "$line" =~ ^ready\ ([0-9]+)$ ]]; then pid="${BASH_REMATCH[1]}"; break; fi
done
[[ -n "$pid" ]] || { echo "FAILED: the program did not start" >&2; exit 1; }

# expect NAME VALUE: the program allocates until the value is in effect, then says so.
expect() {
  echo "expect $1 $2" >&"$p_in"
  local reply=""
  while IFS= read -r reply <&"$p_out"; do
    echo "$reply"
    [[ "$reply" == ok\ * ]] && break
  done
  [[ "$reply" == "ok $1=$2" ]] || fail "$1 did not become $2"
}
expect purge_delay 100

# 2. From the command line, while it runs: validated by memlive, then by the allocator.
echo "\$ memlive tune --pid $pid page_recycle=16 remote_batch=64"
rc=0
"$memlive" tune --pid "$pid" page_recycle=16 remote_batch=64 || rc=$?
((rc == 0)) || fail "memlive tune exited $rc"
expect page_recycle 16
expect remote_batch 64

# Refused changes: exit 7 (tuning rejected) and nothing applied.
for bad in "page_recycle=999999" "no_such_option=1" "telemetry_slots=8" "page_recycle=4 large_cache=-1"; do
  echo "\$ memlive tune --pid $pid $bad"
  rc=0
  # shellcheck disable=SC2086
  "$memlive" tune --pid "$pid" $bad || rc=$?
  ((rc == 7)) || fail "memlive tune $bad exited $rc, not 7"
done
expect page_recycle 16

echo "quit" >&"$p_in"
exec {p_in}>&-
rc=0
wait "$p_pid" || rc=$?
while IFS= read -r line <&"$p_out"; do echo "$line"; done
((rc == 0)) || fail "the program exited $rc"
((status == 0)) && echo "tuning: all steps behaved as described"
exit "$status"
