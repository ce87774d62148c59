#!/usr/bin/env bash
# Usage: compare.sh LIB COMMAND [ARGS...]
# Runs COMMAND once without and once with LD_PRELOAD=LIB and fails unless both exit 0 and print
# the same, non-empty standard output. The preloaded run must also really be preloaded: the
# loader only warns (and carries on with the system malloc) when it cannot load LIB.
set -euo pipefail
# shellcheck source=tests/preload/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

lib="$1"
shift
require_preload_lib "$lib"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# run NAME [VAR=VALUE...]: runs the command under `env`, output to $tmp/NAME.{out,err}.
run() {
  local name="$1"
  shift
  local rc=0
  env -u LD_PRELOAD "$@" "${cmd[@]}" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  if ((rc != 0)); then
    echo "FAIL: $name run exited with status $rc$( ((rc > 128)) && echo " (signal $((rc - 128)))")" >&2
    echo "--- $name stderr (last 30 lines):" >&2
    tail -n 30 "$tmp/$name.err" >&2
    exit 1
  fi
}

cmd=("$@")
run plain
run preloaded "LD_PRELOAD=$lib"

if grep -q "cannot be preloaded" "$tmp/preloaded.err"; then
  echo "FAIL: the loader ignored LD_PRELOAD:" >&2
  grep "cannot be preloaded" "$tmp/preloaded.err" >&2
  exit 1
fi
if [[ ! -s "$tmp/plain.out" ]]; then
  echo "FAIL: the command printed nothing, so there is nothing to compare" >&2
  exit 1
fi
if ! cmp -s "$tmp/plain.out" "$tmp/preloaded.out"; then
  echo "FAIL: output differs with LD_PRELOAD=$lib (diff plain preloaded, first 40 lines):" >&2
  diff "$tmp/plain.out" "$tmp/preloaded.out" | head -n 40 >&2 || true
  exit 1
fi
echo "OK: same output with and without LD_PRELOAD ($(wc -l <"$tmp/plain.out") lines):"
head -n 20 "$tmp/plain.out"
