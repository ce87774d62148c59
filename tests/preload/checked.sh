#!/usr/bin/env bash
# Usage: checked.sh CHECKED_LIB PROGRAM
# PROGRAM is checked_errors (checked_errors.cpp). Under LD_PRELOAD=CHECKED_LIB, its correct run
# must exit 0 and each of its misuses (a double free, a free of a pointer livealloc never
# returned, a sized delete with a size larger than the block) must die of SIGABRT with
# livealloc's message naming the pointer the program printed.
set -euo pipefail
# shellcheck source=tests/preload/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

lib="$1"
prog="$2"
require_preload_lib "$lib"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

run() {  # run MODE: sets rc; output in $tmp/out, $tmp/err
  rc=0
  LD_PRELOAD="$lib" "$prog" "$1" >"$tmp/out" 2>"$tmp/err" || rc=$?
}

run ok
if ((rc != 0)) || ! grep -q "^ok " "$tmp/out"; then
  echo "FAIL: the correct run exited $rc:" >&2
  cat "$tmp/out" "$tmp/err" >&2
  exit 1
fi
echo "ok: the correct run passes under the checked library"

failed=0
for mode_message in "double:double free of" \
  "foreign:free of a pointer livealloc never returned:" \
  "sized:sized free with a size larger than the block:"; do
  mode="${mode_message%%:*}"
  message="${mode_message#*:}"
  run "$mode"
  pointer="$(head -n 1 "$tmp/out")"
  if ((rc != 134)) || [[ -z "$pointer" ]] || ! grep -qF "livealloc: $message" "$tmp/err" ||
    ! grep -qF "$pointer" "$tmp/err"; then
    echo "FAIL: $mode: exit $rc (want 134, SIGABRT), stdout '$(tr '\n' ' ' <"$tmp/out")'," \
      "stderr:" >&2
    cat "$tmp/err" >&2
    failed=1
    continue
  fi
  echo "ok: $mode aborts: $(grep -F "livealloc: " "$tmp/err" | head -n 1)"
done
exit "$failed"
