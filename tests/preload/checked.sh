#!/usr/bin/env bash
# Usage: checked.sh CHECKED_LIB PROGRAM PLAIN_LIB
# PROGRAM is checked_errors (checked_errors.cpp). Under LD_PRELOAD=CHECKED_LIB, its correct run
# must exit 0 and each of its misuses (a double free, a free of a pointer livealloc never
# returned, a sized delete with a size larger than the block) must die of SIGABRT with
# livealloc's message naming the pointer the program printed. Under PLAIN_LIB (liblivealloc.so)
# the double frees must too (each frees its block again at once, the case the plain library
# catches), and so must the frees of a pointer into a large block and of a misaligned one, the
# realloc of a misaligned one and the malloc_usable_size of one into a large block.
set -euo pipefail
# shellcheck source=tests/preload/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

lib="$1"
prog="$2"
plain="$3"
require_preload_lib "$lib"
require_preload_lib "$plain"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

run() {  # run MODE [LIB]: sets rc; output in $tmp/out, $tmp/err
  rc=0
  LD_PRELOAD="${2:-$lib}" "$prog" "$1" >"$tmp/out" 2>"$tmp/err" || rc=$?
}

run ok
if ((rc != 0)) || ! grep -q "^ok " "$tmp/out"; then
  echo "FAIL: the correct run exited $rc:" >&2
  cat "$tmp/out" "$tmp/err" >&2
  exit 1
fi
echo "ok: the correct run passes under the checked library"

failed=0
expect_abort() {  # expect_abort LIB MODE MESSAGE: dies of SIGABRT naming the pointer it printed
  run "$2" "$1"
  local what="$2 under $(basename "$1")" pointer
  pointer="$(head -n 1 "$tmp/out")"
  if ((rc != 134)) || [[ -z "$pointer" ]] || ! grep -qF "livealloc: $3" "$tmp/err" ||
    ! grep -qF "$pointer" "$tmp/err"; then
    echo "FAIL: $what: exit $rc (want 134, SIGABRT), stdout '$(tr '\n' ' ' <"$tmp/out")'," \
      "stderr:" >&2
    cat "$tmp/err" >&2
    failed=1
    return
  fi
  echo "ok: $what aborts: $(grep -F "livealloc: " "$tmp/err" | head -n 1)"
}
expect_abort "$lib" double "double free of"
expect_abort "$lib" double_large "double free of"
expect_abort "$lib" foreign "free of a pointer livealloc never returned:"
expect_abort "$lib" sized "sized free with a size larger than the block:"
expect_abort "$lib" inside_large "free of a pointer livealloc never returned:"
expect_abort "$lib" misaligned "free of a pointer livealloc never returned:"
expect_abort "$lib" realloc_misaligned "realloc of a pointer livealloc never returned:"
expect_abort "$lib" realloc_freed "realloc of a freed block:"
expect_abort "$lib" usable_inside "malloc_usable_size of a pointer livealloc never returned:"
expect_abort "$plain" double "double free of"
expect_abort "$plain" double_large "double free of"
expect_abort "$plain" inside_large "free of a pointer livealloc never returned:"
expect_abort "$plain" misaligned "free of a pointer livealloc never returned:"
expect_abort "$plain" realloc_misaligned "realloc of a pointer livealloc never returned:"
expect_abort "$plain" usable_inside "malloc_usable_size of a pointer livealloc never returned:"
exit "$failed"
