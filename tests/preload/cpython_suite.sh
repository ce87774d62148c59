#!/usr/bin/env bash
# Usage: cpython_suite.sh LIB PYTHON TEST...
# Runs CPython's own regression tests (Debian's libpython3.11-testsuite, installed by
# tests/setup.sh) with LD_PRELOAD=LIB and LIVEALLOC_PROFILE=1: threads, signals, fork, process
# pools, mmap, ctypes and the object types, checked by thousands of assertions that neither we
# nor the allocator wrote. regrtest's workers are child processes, so they run preloaded too.
# A test that fails preloaded is run again without the preload: it fails this script only if it
# passes there (a test that fails either way is this machine's, such as a socket family the
# kernel lacks, and is listed; but if every test fails so, nothing was checked: a failure).
set -euo pipefail
# shellcheck source=tests/preload/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

lib="$1"
python="$2"
shift 2
require_preload_lib "$lib"
if (($# == 0)); then
  echo "FAIL: no test named" >&2
  exit 1
fi
missing=$("$python" - "$@" <<'PY'
import importlib.util, sys
print(" ".join(t for t in sys.argv[1:] if importlib.util.find_spec("test." + t) is None))
PY
)
if [[ -n "$missing" ]]; then
  echo "FAIL: $python has no test module $missing (libpython3.11-testsuite, which" \
    "tests/setup.sh installs, has CPython's tests)" >&2
  exit 1
fi

# The preload must really be in effect: the loader only warns when it cannot load LIB.
maps=$(LD_PRELOAD="$lib" "$python" -c "print(open('/proc/self/maps').read())")
if ! grep -qF "$(realpath "$lib")" <<<"$maps"; then
  echo "FAIL: $lib is not mapped in a preloaded $python" >&2
  exit 1
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# regrtest writes its scratch directories into the working directory.
cd "$tmp"

# Failed tests are the names regrtest lists after "N tests failed:" (or "N test failed:").
failed_tests() {
  awk '/^[0-9]+ tests? failed/{on=1; next} on && /^$/{if (seen) on=0; next}
       on && /^ /{seen=1; for (i=1;i<=NF;i++) print $i}' "$1"
}

rc=0
LD_PRELOAD="$lib" LIVEALLOC_PROFILE=1 "$python" -m test -j2 --timeout 300 "$@" \
  >"$tmp/preloaded.log" 2>&1 || rc=$?
# A test that passed but left a thread, file or setting behind ("altered the execution
# environment", more likely a loaded machine's timing than the allocator) is a SUCCESS without
# --fail-env-changed; the summary names it.
if grep -q "^Tests result: SUCCESS$" "$tmp/preloaded.log"; then
  if ((rc != 0)); then
    echo "FAIL: regrtest said $(grep "^Tests result" "$tmp/preloaded.log") but exited with" \
      "status $rc" >&2
    exit 1
  fi
  grep -E "tests? OK\.$|altered the execution environment|^Total duration|^Tests result" \
    "$tmp/preloaded.log"
  echo "OK: CPython's tests pass under LD_PRELOAD=$lib: $*"
  exit 0
fi

mapfile -t failed < <(failed_tests "$tmp/preloaded.log")
if ((${#failed[@]} == 0)); then
  echo "FAIL: regrtest exited with status $rc and named no failed test (last 30 lines):" >&2
  tail -n 30 "$tmp/preloaded.log" >&2
  exit 1
fi
echo "preloaded: ${#failed[@]} failed: ${failed[*]}; again without the preload:"
plain_rc=0
env -u LD_PRELOAD "$python" -m test -j2 --timeout 300 "${failed[@]}" >"$tmp/plain.log" 2>&1 ||
  plain_rc=$?
mapfile -t plain_failed < <(failed_tests "$tmp/plain.log")
ours=()
for t in "${failed[@]}"; do
  if ! printf '%s\n' "${plain_failed[@]}" | grep -qxF "$t"; then ours+=("$t"); fi
done
if ((${#ours[@]} > 0)) || { ((plain_rc != 0)) && ((${#plain_failed[@]} == 0)); }; then
  echo "FAIL: failed only under LD_PRELOAD=$lib:" \
    "${ours[*]:-(regrtest status $plain_rc without)}" >&2
  grep -A25 -E "^test test_[a-z0-9_]+ (failed|crashed)|Fatal Python error" "$tmp/preloaded.log" |
    head -n 80 >&2
  exit 1
fi
if ((${#failed[@]} >= $#)); then
  echo "FAIL: every test failed, with and without the preload: nothing was checked" >&2
  exit 1
fi
echo "OK: the rest pass under LD_PRELOAD=$lib; these fail without it too (this machine's):" \
  "${failed[*]}"
