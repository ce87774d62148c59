#!/usr/bin/env bash
# A shell pipeline of five programs; under compare.sh every one of them (and bash) runs with
# the preloaded allocator. 7919 * i mod 100003 (a prime) takes every residue once per 100003
# values of i, so there must be exactly 100003 distinct lines.
set -euo pipefail
export LC_ALL=C

out="$(seq 1 2000000 | awk '{ print ($1 * 7919) % 100003 }' | sort | uniq -c | sort -k1,1nr -k2,2n)"
lines="$(wc -l <<<"$out")"
if [[ "$lines" != 100003 ]]; then
  echo "FAIL: expected 100003 distinct values, got $lines" >&2
  exit 1
fi
echo "distinct $lines"
head -n 3 <<<"$out"
sha256sum <<<"$out"
