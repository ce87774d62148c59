#!/usr/bin/env bash
# Usage: stale_sweep.sh LIB
# Profiled processes that are killed leave their segments in /dev/shm; the next process that
# publishes one removes those past the newest LIVEALLOC_STALE_SEGMENTS (8 by default), the oldest
# first, and never a running process's. Real processes (sleep under LD_PRELOAD=LIB with
# LIVEALLOC_PROFILE=1, killed with SIGKILL) in a mount namespace of their own with a private tmpfs
# on /dev/shm, so that no other process's segments are touched. Needs root and unshare; exits 77
# (skipped) without them. Every check ends in the exit code.
set -uo pipefail
# shellcheck source=tests/preload/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

lib="${1:-}"
require_preload_lib "$lib"
if [[ -z "${STALE_SWEEP_TEST_INNER:-}" ]]; then
  if [[ "$(id -u)" != 0 ]] || ! unshare --mount --propagation private true 2>/dev/null; then
    echo "SKIP: needs root and unshare --mount" >&2
    exit 77
  fi
  exec unshare --mount --propagation private env STALE_SWEEP_TEST_INNER=1 \
    bash "$0" "$lib"
fi
mount -t tmpfs -o mode=1777 tmpfs /dev/shm || { echo "FAIL: mount a tmpfs on /dev/shm" >&2; exit 1; }

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
running=()
cleanup() {
  for p in "${running[@]}"; do kill -KILL "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
}
trap cleanup EXIT

# profiled VAR [ENV...]: starts a profiled `sleep 60`, waits for its segment, sets VAR to its pid.
profiled() {
  local -n out=$1
  shift
  env "$@" LD_PRELOAD="$lib" LIVEALLOC_PROFILE=1 sleep 60 &
  out=$!
  for _ in $(seq 500); do
    [[ -e /dev/shm/livealloc.$out ]] && return 0
    sleep 0.01
  done
  fail "process $out published no segment"
}
# killed VAR: a profiled process that is killed, whose segment stays; VAR gets its pid.
killed() {
  local -n pid_out=$1
  profiled pid_out LIVEALLOC_STALE_SEGMENTS=64
  kill -KILL "$pid_out"
  wait "$pid_out" 2>/dev/null
  [[ -e /dev/shm/livealloc.$pid_out ]] || fail "the killed process $pid_out left no segment"
}
segments() { (cd /dev/shm && ls -1 | sort -V | tr '\n' ' '); }
expect() {
  local want
  want=$(printf '%s\n' "$@" | sort -V | tr '\n' ' ')
  [[ "$(segments)" == "$want" ]] || fail "expected /dev/shm to hold [$want], it holds [$(segments)]"
}

stale=()
for i in 1 2 3 4 5; do
  killed p
  stale+=("livealloc.$p")
  sleep 0.01  # start times in this order
done
# A running process published with the default (8): all five stale segments stay, and its own.
profiled r
running+=("$r")
expect "${stale[@]}" "livealloc.$r"

# Keep 2: the two killed last stay, with the running process's segment; the process's own
# segment goes at its exit. LIVEALLOC_VERBOSE says how many went.
said=$(LIVEALLOC_VERBOSE=1 LIVEALLOC_STALE_SEGMENTS=2 LIVEALLOC_PROFILE=1 LD_PRELOAD="$lib" \
  /bin/true 2>&1) || fail "a profiled /bin/true failed"
expect "${stale[3]}" "${stale[4]}" "livealloc.$r"
want="livealloc: removed 3 stale segments of processes that are gone from /dev/shm"
want+=" (the newest 2 kept: LIVEALLOC_STALE_SEGMENTS)"
[[ "$said" == *"$want"* ]] || fail "LIVEALLOC_VERBOSE=1 did not say '$want': $said"

# Ten more killed ones, each published with room for all: twelve stale. The default keeps eight.
for i in $(seq 10); do
  killed p
  stale+=("livealloc.$p")
done
LIVEALLOC_PROFILE=1 LD_PRELOAD="$lib" /bin/true || fail "a profiled /bin/true failed"
expect "${stale[@]:7}" "livealloc.$r"

# 0 keeps none; a file that is not this version's segment is left alone.
printf 'not a segment' > /dev/shm/livealloc.999999
LIVEALLOC_STALE_SEGMENTS=0 LIVEALLOC_PROFILE=1 LD_PRELOAD="$lib" /bin/true ||
  fail "a profiled /bin/true failed"
expect "livealloc.$r" livealloc.999999

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "PASS: stale segments swept past the newest kept"
