#!/usr/bin/env bash
# Usage: sort_big.sh LIB [MEGABYTES]
# GNU sort of a generated text file of about 250 MB, without and with LD_PRELOAD=LIB: the two
# outputs must have the same sha256. sort allocates its big buffers, runs threads and merges
# temporary files, all on the allocator under test. Temporary files are always removed.
set -euo pipefail
# shellcheck source=tests/preload/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

lib="$1"
megabytes="${2:-250}"
require_preload_lib "$lib"

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export LC_ALL=C

# Deterministic input: base64 lines (76 characters) from a seeded generator, written in bulk so
# generating costs about a second.
/usr/bin/python3 - "$tmp/input.txt" "$megabytes" <<'PY'
import base64, random, sys
path, total = sys.argv[1], int(sys.argv[2]) << 20
rng = random.Random(20260101)
chunk = 57 * 1024 * 64  # 57 input bytes make one 76-character base64 line
with open(path, "wb") as f:
    written = 0
    while written < total:
        data = base64.encodebytes(rng.randbytes(chunk))
        f.write(data)
        written += len(data)
PY

# -S caps the buffer so sort also writes and merges temporary runs (in $tmp) rather than
# sorting everything in one buffer.
# sorted_sha ENV-ARGS...: sha256 of the sorted input; any exit status or stderr output fails.
# (The loader's "cannot be preloaded" warning goes to stderr, so an ignored LD_PRELOAD fails.)
sorted_sha() {
  local rc=0
  env "$@" sort --parallel=2 -S 64M -T "$tmp" "$tmp/input.txt" 2>"$tmp/err" |
    sha256sum >"$tmp/sha" || rc=$?
  if ((rc != 0)) || [[ -s "$tmp/err" ]]; then
    echo "FAIL: sort with env $* exited with status $rc" >&2
    cat "$tmp/err" >&2
    exit 1
  fi
  cut -d' ' -f1 "$tmp/sha"
}
plain="$(sorted_sha -u LD_PRELOAD)"
preloaded="$(sorted_sha "LD_PRELOAD=$lib")"
echo "input $(wc -l <"$tmp/input.txt") lines, $(du -m "$tmp/input.txt" | cut -f1) MB"
echo "sha256 plain     $plain"
echo "sha256 preloaded $preloaded"
empty="$(sha256sum </dev/null | cut -d' ' -f1)"
if [[ "$plain" == "$empty" || "$plain" != "$preloaded" ]]; then
  echo "FAIL: sorted output differs (or is empty) under LD_PRELOAD=$lib" >&2
  exit 1
fi
echo "OK"
