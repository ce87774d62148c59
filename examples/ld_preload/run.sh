#!/usr/bin/env bash
# ld_preload: profile an unmodified program with `memlive run`, which starts it with
# LD_PRELOAD=<absolute path of liblivealloc.so> and LIVEALLOC_PROFILE=1 and serves its telemetry.
#
# Usage: examples/ld_preload/run.sh [--build DIR] [--port P] [--smoke]
#   --build DIR  the build directory (default: build/ in the repository)
#   --port P     the page's port (default 8080)
#   --smoke      the test: port 0, three rounds, then check /api/snapshot of the program; exit 0
#                only if memlive served it and its named threads are in the snapshot
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="$root/build"
port=8080
smoke=0
usage() { echo "usage: $0 [--build DIR] [--port P] [--smoke]" >&2; exit 2; }
while (($# > 0)); do
  case "$1" in
    --build) (($# >= 2)) || usage; build="$2"; shift 2 ;;
    --port) (($# >= 2)) || usage; port="$2"; shift 2 ;;
    --smoke) smoke=1; shift ;;
    *) usage ;;
  esac
done
memlive="$build/memlive/memlive"
program="$build/examples/ld_preload/text_index"
for f in "$memlive" "$program"; do
  [[ -x "$f" ]] || { echo "ld_preload: $f is missing; build first (cmake --build $build)" >&2; exit 1; }
done

if ((smoke == 0)); then
  # The whole example: no change to the program, one command.
  exec "$memlive" run --port "$port" -- "$program"
fi

# --smoke: memlive and the program run as a coprocess; we read memlive's output for the address
# (memlive prints its own lines on stderr, the program's "text_index: done" is on stdout: 2>&1),
# wait until the program has built its indexes, check the snapshot, then close the program's input.
coproc ML { exec "$memlive" run --port 0 --exit-when-done -- "$program" --rounds 3 --wait 2>&1; }
ml_pid=$ML_PID
exec {ml_out}<&"${ML[0]}"  # our own copy: bash closes ML's descriptors when it reaps memlive
url="" pid="" done=0
while IFS= read -r line <&"$ml_out"; do
  echo "$line"
  if [[ "$line" =~ serving\ process\ ([0-9]+)\ .*\ at\ (http://[0-9.]+:[0-9]+/) ]]; then
    pid="${BASH_REMATCH[1]}" url="${BASH_REMATCH[2]}"
  fi
  if [[ "$line" == "text_index: done" ]]; then done=1; break; fi
done
status=0
if [[ -z "$url" || "$done" != 1 ]]; then
  echo "FAILED: memlive did not serve the program (address: '${url}', program done: $done)" >&2
  status=1
else
  /usr/bin/python3 - "$url" "$pid" <<'PY' || status=1
import json, sys, urllib.request
url, pid = sys.argv[1], int(sys.argv[2])
snap = json.load(urllib.request.urlopen(url + "api/snapshot"))
env = open("/proc/%d/environ" % pid, "rb").read().split(b"\0")
checks = [
    (snap["pid"] == pid, "the snapshot is of the program (pid %d)" % pid),
    (snap["alive"], "the program is alive"),
    (any(e.startswith(b"LD_PRELOAD=/") and e.endswith(b"liblivealloc.so") for e in env),
     "its LD_PRELOAD is the absolute path of liblivealloc.so"),
    (snap["process"]["live_blocks"] > 0 or any(
        sum(r[1] for r in t["classes"]) > 0 for t in snap["threads"]) or
     any(r[1] > 0 for r in snap["exited"]), "allocations were counted"),
    (sum(r[1] for r in snap["exited"]) >= 3 * 3 * 400, "the exited indexer threads' allocations are in the totals"),
]
for ok, what in checks:
    print("%s: %s" % ("ok" if ok else "FAILED", what))
sys.exit(0 if all(ok for ok, _ in checks) else 1)
PY
fi
ml_in=${ML[1]}
exec {ml_in}>&- # end of input: the program exits, and memlive with it (--exit-when-done)
while IFS= read -r line <&"$ml_out"; do echo "$line"; done
rc=0
wait "$ml_pid" || rc=$?
if ((rc != 0)); then
  echo "FAILED: memlive run exited with status $rc" >&2
  status=1
fi
exit "$status"
