#!/bin/bash
# usage: shm_full.sh LIBLIVEALLOC SHM_THREADS SHM_LOCALE
# A profiled process whose /dev/shm fills up must go on running: the threads that find no room
# for a telemetry slot share the overflow slot and the library warns once, naming the error.
# Before the fix the first store into a page the tmpfs could not supply killed it with SIGBUS.
# Mounts a small private tmpfs over /dev/shm (unshare --mount, so the machine's /dev/shm is not
# touched), sized from the real segment layout to hold two segments (the process and its fork
# child) and a few thread slots, then runs shm_threads (many threads at once, in a fork child and
# in the parent). Needs root and unshare: exits 77 (skipped) without them.
# Then shm_locale (the library built in) fills the tmpfs and checks that the warning, under a
# locale other than C, does not allocate while a thread is being given its heap.
set -u
lib=$1
prog=$2
locale_prog=$3

if [ "${4:-}" = --inside ]; then
  room=$5
  # Private to this mount namespace: the machine's /dev/shm stays as it is.
  mount -t tmpfs -o size="$room",mode=1777 livealloc-shm-full /dev/shm ||
    { echo "SKIP: cannot mount a tmpfs over /dev/shm"; exit 77; }
  err=$(mktemp)
  env LD_PRELOAD="$lib" LIVEALLOC_PROFILE=1 "$prog" 24 2>"$err"
  rc=$?
  echo "--- stderr:"
  cat "$err"
  echo "---"
  failures=0
  if [ "$rc" -ne 0 ]; then
    echo "FAIL  shm_threads exited with $rc$([ "$rc" -gt 128 ] && echo " (signal $((rc - 128)))")"
    failures=1
  else
    echo "ok    shm_threads exited 0"
  fi
  if grep -q "livealloc: .*No space left on device" "$err"; then
    echo "ok    the library warned, naming ENOSPC"
  else
    echo "FAIL  no warning naming 'No space left on device' on stderr"
    failures=1
  fi
  lines=$(grep -c "telemetry slot" "$err")
  if [ "$lines" -le 2 ]; then  # once in the parent, once in the fork child
    echo "ok    warned at most once per process ($lines lines)"
  else
    echo "FAIL  $lines warnings about telemetry slots: one per process expected"
    failures=1
  fi
  rm -f "$err"
  LIVEALLOC_PROFILE=1 "$locale_prog" || failures=1
  exit "$failures"
fi

if [ "$(id -u)" -ne 0 ]; then echo "SKIP: needs root (mounts a tmpfs)"; exit 77; fi
if ! command -v unshare >/dev/null || ! unshare --mount --propagation private true 2>/dev/null;
then
  echo "SKIP: unshare --mount is not available here"
  exit 77
fi

# The layout of a segment, from a profiled run on the real /dev/shm.
if ! layout=$(env LD_PRELOAD="$lib" LIVEALLOC_PROFILE=1 "$prog" --layout); then
  echo "FAIL  cannot read the segment layout"
  exit 1
fi
read -r slots_offset slot_size slot_count <<<"$layout"
page=4096
# One process needs its header and tables, the overflow slot and the main thread's slot, and a
# page of the free matrix for each of those two slots; the fork child's copy as much again. Then
# room for 4 more slots (with their matrix pages) among the 24 threads of each process.
each=$((slots_offset + 2 * slot_size + 2 * page))
room=$((2 * each + 4 * (slot_size + page)))
echo "layout: slots_offset $slots_offset, slot_size $slot_size, $slot_count slots; tmpfs of $room bytes"
exec unshare --mount --propagation private "$BASH" "$0" "$lib" "$prog" "$locale_prog" --inside \
  "$room"
