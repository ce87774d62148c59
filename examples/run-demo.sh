#!/usr/bin/env bash
# The demo: builds the whole tree in build/ (after tests/setup.sh has installed what is missing),
# then runs examples/demo_workload.cpp -- a request-processing pipeline with named threads
# (producer-N, worker-N, cache, reporter) -- under liblivealloc.so with `memlive run`, which serves
# the live page at http://127.0.0.1:PORT until Ctrl-C.
#
# Usage: examples/run-demo.sh [--port P] [--seconds N] [--no-build] [--build DIR] [-- demo options]
#   --port P      the page's port (default 8080; 0 picks a free one)
#   --seconds N   stop after N seconds instead of at Ctrl-C (so does a demo bounded by its own
#                 --seconds or --requests: the script ends with it)
#   --no-build    skip setup and build (use what the build directory holds)
#   --build DIR   the build directory (default: build/ in the repository)
#   demo options  passed to demo_workload (--workers N, --producers N, --rate N, --cache-mib N;
#                 see build/examples/demo_workload --help)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"
port=8080
seconds=""
do_build=1
demo_args=()

usage() { sed -n '2,14p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while (($# > 0)); do
  case "$1" in
    --port)
      # Digits first, then arithmetic in base 10: bash reads 08 as octal (and stopped here on
      # its own "value too great for base" before this message), and a number of more than 19
      # digits wraps (18446744073709551616 was port 0). Leading zeros are decimal: 08 is 8.
      [[ $# -ge 2 && "$2" =~ ^0*[0-9]{1,5}$ ]] && ((10#$2 <= 65535)) || {
        echo "run-demo: --port needs a port number from 0 to 65535" >&2
        exit 2
      }
      port=$((10#$2))
      shift 2
      ;;
    --seconds)
      [[ $# -ge 2 && "$2" =~ ^[1-9][0-9]*$ ]] || {
        echo "run-demo: --seconds needs a positive number" >&2
        exit 2
      }
      seconds="$2"
      shift 2
      ;;
    --no-build)
      do_build=0
      shift
      ;;
    --build)
      [[ $# -ge 2 ]] || {
        echo "run-demo: --build needs a directory" >&2
        exit 2
      }
      build="$2"  # made absolute below, once --no-build (which may come after) is known
      shift 2
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    --)
      shift
      demo_args+=("$@")
      break
      ;;
    *)
      echo "run-demo: unknown option '$1'" >&2
      usage >&2
      exit 2
      ;;
  esac
done

# A demo bounded by its own --requests or --seconds (given after --) ends by itself, and so must
# the script: memlive run then stops with it (--exit-when-done), as for the script's --seconds;
# it kept serving the demo's last state until Ctrl-C. One bound or the other (demo_workload
# refuses both): say so before anything is started.
bounded=""
[[ -n "$seconds" ]] && bounded=1
for a in "${demo_args[@]}"; do
  if [[ "$a" == --requests && -n "$seconds" ]]; then
    echo "run-demo: --seconds and the demo's --requests cannot be used together" >&2
    exit 2
  fi
  # Both went to the demo, whose last --seconds won: the script's was dropped without a word.
  if [[ "$a" == --seconds && -n "$seconds" ]]; then
    echo "run-demo: --seconds given twice, to the script and to the demo (after --)" >&2
    exit 2
  fi
  if [[ "$a" == --requests || "$a" == --seconds ]]; then bounded=1; fi
done

# --no-build uses a build that exists: a mistyped --build must not leave a new empty folder
# behind (it did, before the message that memlive was missing there).
if ((do_build)); then
  build="$(mkdir -p "$build" && cd "$build" && pwd)"
elif [[ -d "$build" ]]; then
  build="$(cd "$build" && pwd)"
else
  echo "run-demo: --no-build: there is no build directory $build;" \
    "give --build the folder that holds the build, or run without --no-build" >&2
  exit 1
fi

if ((do_build)); then
  "$root/tests/setup.sh"
  # The same configuration as tests/run.sh's main build, so the two share build/.
  echo "run-demo: building everything in $build/ (the first time takes a few minutes)"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIVEALLOC_SANITIZE= \
    -DLIVEALLOC_BUILD_TESTS=ON -DLIVEALLOC_BUILD_EXAMPLES=ON -DLIVEALLOC_BUILD_BENCHMARKS=ON >/dev/null
  cmake --build "$build" -j2
fi

memlive="$build/memlive/memlive"
demo="$build/examples/demo_workload"
lib="$build/allocator/liblivealloc.so"
for f in "$memlive" "$demo" "$lib"; do
  if [[ ! -f "$f" ]]; then
    echo "run-demo: $f is missing; run examples/run-demo.sh without --no-build" >&2
    exit 1
  fi
done

# A taken port is the most likely failure: say so before anything starts.
if [[ "$port" != 0 ]] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  next=$((port + 1))
  echo "run-demo: port $port on 127.0.0.1 is taken by another program." >&2
  echo "run-demo: run 'examples/run-demo.sh --port $next' (or --port 0 for any free port)," >&2
  echo "run-demo: or see what holds it with: ss -ltnp 'sport = :$port'" >&2
  exit 8
fi

url="http://127.0.0.1:$port"
[[ "$port" == 0 ]] && url="(the address memlive prints below)"
memlive_args=(run --port "$port")
[[ -n "$bounded" ]] && memlive_args+=(--exit-when-done)
[[ -n "$seconds" ]] && demo_args=(--seconds "$seconds" "${demo_args[@]}")
[[ "$port" != 0 ]] && demo_args=(--url "$url" "${demo_args[@]}")

echo "run-demo: starting the demo under livealloc; open $url in a browser"
echo "run-demo: Ctrl-C stops it"
# memlive run preloads $lib into the demo (LD_PRELOAD, absolute path) with LIVEALLOC_PROFILE=1,
# serves its telemetry, passes Ctrl-C on to it and exits with its status.
rc=0
"$memlive" "${memlive_args[@]}" -- "$demo" --expect-preload "${demo_args[@]}" || rc=$?
if ((rc == 8)); then
  echo "run-demo: port $port is in use; run 'examples/run-demo.sh --port $((port + 1))'" \
    "(or --port 0 for any free port)" >&2
fi
exit "$rc"
