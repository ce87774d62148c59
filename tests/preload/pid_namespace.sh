#!/usr/bin/env bash
# Usage: pid_namespace.sh LIB
# Two profiled processes with the same pid in two pid namespaces that share /dev/shm (containers
# that mount the same /dev/shm, `unshare --pid`): both want the name /dev/shm/livealloc.<pid>.
# Each runs as pid 1 of its own namespace (unshare --pid --fork --mount-proc), under
# LD_PRELOAD=LIB with LIVEALLOC_PROFILE=1, and waits on a FIFO until the script releases it.
#   1. A (which execs once, so its second image must take over the first one's name) publishes,
#      replacing a stale file left under the name; B, started while A runs, must leave A's name
#      alone and say why on stderr; B's exit must not remove A's name; A's exit removes it.
#   2. The name is taken from a running A by another file (a writer that does not check, such as
#      an older livealloc in another container): A's exit must not remove that file.
# Needs root and unshare; exits 77 (skipped) without them. Every check ends in the exit code.
set -uo pipefail
# shellcheck source=tests/preload/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

lib="${1:-}"
require_preload_lib "$lib"
if [[ "$(id -u)" != 0 ]] || ! unshare --pid --fork --mount-proc --kill-child true 2>/dev/null; then
  echo "SKIP: needs root and unshare --pid --fork --mount-proc" >&2
  exit 77
fi

name=/dev/shm/livealloc.1  # every payload is pid 1 of its namespace (checked)
tmp="$(mktemp -d)"
failures=0
declare -A job=()

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
inode() { stat -c %i "$1" 2>/dev/null; }
# True when no process holds the segment's lock (a stale file, or none), so the test may remove it.
unheld() { [[ ! -e "$name" ]] || flock -n -s "$name" true; }

cleanup() {
  for k in "${!job[@]}"; do
    # unshare ignores SIGTERM while it waits; --kill-child: its namespace dies with it
    kill -KILL "${job[$k]}" 2>/dev/null
    wait "${job[$k]}" 2>/dev/null
  done
  if [[ -e "$name" ]] && unheld; then rm -f "$name"; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

if [[ -e "$name" ]]; then
  if ! unheld; then
    echo "SKIP: $name belongs to a running process" >&2
    exit 77
  fi
  rm -f "$name"
fi

# start KEY [exec]: a payload as pid 1 of a new pid namespace. It writes its pid to the FIFO
# $tmp/KEY.ready, then blocks reading $tmp/KEY.go. With "exec", the shell first execs a new one.
# Sets $pid to the payload's pid (as it sees it); the segment is published when this returns.
start() {
  local key="$1" how="${2:-}" ready="$tmp/$1.ready" go="$tmp/$1.go"
  mkfifo "$ready" "$go"
  exec {fd}<>"$ready"  # read-write: never blocks, and the payload's open for writing neither
  local payload='echo $$ > "$1"; read -r x < "$2"'
  if [[ "$how" == exec ]]; then
    set -- sh -c 'exec sh -c "$1" sh "$2" "$3"' sh "$payload" "$ready" "$go"
  else
    set -- sh -c "$payload" sh "$ready" "$go"
  fi
  unshare --pid --fork --mount-proc --kill-child \
    env LD_PRELOAD="$lib" LIVEALLOC_PROFILE=1 "$@" </dev/null >/dev/null 2>"$tmp/$key.err" &
  job[$key]=$!
  pid=""
  read -r -t 60 -u "$fd" pid  # a hang guard only: the payload answers at once
  exec {fd}<&-
}
# finish KEY: releases the payload and waits for its namespace to end.
finish() {
  echo go >"$tmp/$1.go"
  wait "${job[$1]}"
  local rc=$?
  unset "job[$1]"
  [[ $rc == 0 ]] || fail "$1 exited with status $rc: $(cat "$tmp/$1.err")"
}

# --- 1. B starts while A runs under the same name -----------------------------------------------
printf 'left by a dead process\n' >"$name"  # unlocked: A must replace it
stale=$(inode "$name")
start A exec
if [[ "$pid" != 1 ]]; then
  fail "the payload is not pid 1 of its namespace ('$pid'): nothing would collide"
  exit 1
fi
a=$(inode "$name")
if [[ -z "$a" || "$a" == "$stale" ]]; then
  fail "A did not replace the stale file under $name ($(cat "$tmp/A.err"))"
fi
[[ -s "$tmp/A.err" ]] && fail "A wrote to stderr: $(cat "$tmp/A.err")"

start B
[[ "$pid" == 1 ]] || fail "B is not pid 1 of its namespace ('$pid')"
now=$(inode "$name")
[[ "$now" == "$a" ]] || fail "B, started while A ran, replaced A's $name (inode $a, now '$now')"
grep -q "$name" "$tmp/B.err" ||
  fail "B did not say on stderr that $name is taken (stderr: '$(cat "$tmp/B.err")')"

finish B
now=$(inode "$name")
[[ "$now" == "$a" ]] || fail "B's exit removed A's $name (inode $a, now '$now')"

finish A
[[ -e "$name" ]] && fail "$name is left after A's exit (inode $(inode "$name"); A's was $a)"
unheld && rm -f "$name"

# --- 2. another file takes the name from a running A -------------------------------------------
start C
[[ "$pid" == 1 ]] || fail "C is not pid 1 of its namespace ('$pid')"
c=$(inode "$name")
[[ -n "$c" ]] || fail "C published no $name ($(cat "$tmp/C.err"))"
cp "$name" "$name.other" && mv -f "$name.other" "$name"
other=$(inode "$name")
finish C
now=$(inode "$name")
[[ -n "$now" && "$now" == "$other" ]] ||
  fail "C's exit removed $name, which another file (inode $other) had taken over from it"
rm -f "$name"

if ((failures)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "pid_namespace: same-pid processes in two namespaces keep each other's segment name"
