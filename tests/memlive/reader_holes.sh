#!/usr/bin/env bash
# Usage: reader_holes.sh MEMLIVE WORKLOAD [--full]
# Reading a segment must not write it. The segment is a sparse tmpfs file: the writer reserves a
# thread's slot and its row of the free matrix when the thread starts, and leaves the rest as
# holes. On tmpfs a load through a shared mapping from a hole allocates a page, so a reader that
# loaded every slot's state and the whole matrix filled the file (an idle process at 512 slots
# grew by about 4 MB on its first snapshot), and on a full /dev/shm it died by SIGBUS.
#   default: a workload (4 threads, 512 slots) on the real /dev/shm; snapshots in every format,
#            list and record must leave the file's allocated blocks as they were and show the
#            workload's threads.
#   --full:  the same on a private tmpfs over /dev/shm (unshare --mount) that is then filled up:
#            every command must exit 0 (not 135, SIGBUS). Needs root and unshare: exits 77
#            (skipped) without them.
set -uo pipefail

memlive="${1:-}"
workload="${2:-}"
mode="${3:-}"
if [[ ! -x "$memlive" || ! -x "$workload" ]]; then
  echo "FAIL: usage: reader_holes.sh MEMLIVE WORKLOAD [--full]" >&2
  exit 1
fi

if [[ "$mode" == --full ]]; then
  if [[ "$(id -u)" != 0 ]] || ! unshare --mount --propagation private true 2>/dev/null; then
    echo "SKIP: needs root and unshare --mount" >&2
    exit 77
  fi
  exec unshare --mount --propagation private "$BASH" "$0" "$memlive" "$workload" --inside
fi

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

if [[ "$mode" == --inside ]]; then
  # Private to this mount namespace: the machine's /dev/shm stays as it is.
  mount -t tmpfs -o size=16m,mode=1777 livealloc-reader-holes /dev/shm ||
    { echo "SKIP: cannot mount a tmpfs over /dev/shm" >&2; exit 77; }
fi

# The workload: 3 planned threads and its ticker, each with its slot; it waits on its stdin.
wl_err=$(mktemp)
coproc WL { LIVEALLOC_TELEMETRY_SLOTS=512 exec "$workload" a:64:200:100 b:4096:20:5 c:32:50:0 2>"$wl_err"; }
wl_pid=$WL_PID  # (bash unsets WL_PID once the coprocess ends)
read -r -t 30 ready pid <&"${WL[0]}"
if [[ "${ready:-}" != ready || -z "${pid:-}" ]]; then
  echo "FAIL: the workload did not start" >&2
  exit 1
fi
seg=/dev/shm/livealloc.$pid
[[ -f "$seg" ]] || fail "no segment $seg"

# The snapshot shows the workload's threads alive (the ticker may start after "ready").
shows_workload() {
  python3 -c '
import json, sys
s = json.loads(sys.argv[1])
names = [t["name"] for t in s["threads"] if t["state"] == "alive"]
sys.exit(0 if all(n in names for n in sys.argv[2].split()) else 1)' "$1" "$want"
}
blocks() { stat -c %b "$seg"; }
first=$(blocks)  # before any read
want="a b c ticker"
if [[ "$mode" == --inside ]]; then
  # Fill what is left of the tmpfs before any read, so that from now on no page can be added to
  # any file. The threads of the plan have their slots ("ready" follows their work); the ticker
  # may start later and then share the overflow slot.
  dd if=/dev/zero of=/dev/shm/filler bs=64k 2>/dev/null
  df -k /dev/shm | tail -1
  want="a b c"
fi
for _ in $(seq 100); do
  shows_workload "$("$memlive" snapshot --pid "$pid" 2>/dev/null)" && break
  sleep 0.1
done
before=$(blocks)
echo "segment: $(stat -c %s "$seg") bytes, $before blocks allocated"

run() {  # run NAME CMD...: exit 0 expected; stdout kept in $out
  out=$("$@" 2>/tmp/reader_holes.err.$$)
  local rc=$?
  if [[ $rc -ne 0 ]]; then
    fail "$* exited $rc$( ((rc > 128)) && echo " (signal $((rc - 128)))"): $(cat /tmp/reader_holes.err.$$)"
  else
    echo "ok    $*"
  fi
}
run "$memlive" snapshot --pid "$pid"
json=$out
run "$memlive" snapshot --pid "$pid" --format prometheus
run "$memlive" snapshot --pid "$pid" --format prometheus --by class
run "$memlive" snapshot --pid "$pid" --format csv
run "$memlive" list
run "$memlive" record --pid "$pid" --interval 10 --count 5 --out /dev/null
rm -f /tmp/reader_holes.err.$$

shows_workload "$json" ||
  fail "the snapshot does not show the workload's threads ($want) alive"

# Strictly no growth while the commands ran, and little since the first read: a thread that
# started meanwhile (the ticker) reserved its slot and row (16 KiB at this layout), where the
# reader that loaded every slot's state and the whole matrix filled about 4 MB on its first read.
after=$(blocks)
if [[ "$after" != "$before" ]]; then
  fail "reading the segment allocated $(((after - before) * 512)) bytes of it ($before -> $after blocks)"
else
  echo "ok    the segment's allocated blocks stayed at $after"
fi
if ((after - first > 128)); then
  fail "the segment grew by $(((after - first) * 512)) bytes since before the first read"
else
  echo "ok    $(((after - first) * 512)) bytes allocated since before the first read"
fi

if [[ -n "${WL_PID:-}" ]]; then
  echo quit >&"${WL[1]}"
fi
wait "$wl_pid"
rc=$?
((rc == 0)) || fail "the workload exited $rc: $(cat "$wl_err")"
rm -f "$wl_err"
((failures == 0)) && echo "PASS" || echo "$failures failure(s)"
exit $((failures > 0))
