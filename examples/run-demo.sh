#!/usr/bin/env bash
# The main demo: build liblivealloc.so and the demo workload, then run the workload with the
# allocator preloaded. Usage: examples/run-demo.sh [threads] [scale]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"

"$root/tests/setup.sh"
# The same configuration as tests/run.sh's main build, so the two share build/.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLIVEALLOC_SANITIZE= \
  -DLIVEALLOC_BUILD_TESTS=ON -DLIVEALLOC_BUILD_EXAMPLES=ON -DLIVEALLOC_BUILD_BENCHMARKS=ON >/dev/null
cmake --build "$build" -j2 --target livealloc_preload demo_workload

# An absolute path: a preloaded child that changes directory would lose a relative one.
lib="$build/allocator/liblivealloc.so"
if [[ ! -f "$lib" ]]; then
  echo "run-demo: $lib was not built" >&2
  exit 1
fi

echo "run-demo: LD_PRELOAD=$lib $build/examples/demo_workload --expect-preload${*:+ $*}"
# --expect-preload makes the workload fail if the loader silently ignored LD_PRELOAD.
LD_PRELOAD="$lib" "$build/examples/demo_workload" --expect-preload "$@"
