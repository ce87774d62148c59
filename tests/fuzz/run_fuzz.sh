#!/bin/sh
# Runs one libFuzzer target for a bounded time, as a ctest entry or by hand:
#   run_fuzz.sh FUZZER SEED_DIR CRASH_DIR SECONDS [extra libFuzzer flags...]
# First every reproducer CRASH_DIR/<target>-* (regressions: bugs found before), then a fresh
# campaign of at most SECONDS over a scratch copy of the seeds (the committed seeds are never
# written). Exit status: libFuzzer's (non-zero on a crash, a leak, a timeout or a violated
# property), so ctest fails on any of them.
set -eu
fuzzer=$1 seeds=$2 crashes=$3 seconds=$4
shift 4
target=$(basename "$fuzzer" | sed 's/^fuzz_//')
work=$(mktemp -d "${TMPDIR:-/tmp}/fuzz-$target-XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
cd "$work"  # crash-* artifacts land here; they are printed (base64) in the log anyway

repros=$(find "$crashes" -maxdepth 1 -type f -name "$target-*" 2>/dev/null | sort)
if [ -n "$repros" ]; then
  echo "fuzz.$target: reproducers of earlier findings (regressions):"
  # shellcheck disable=SC2086
  "$fuzzer" -error_exitcode=1 $repros
fi
mkdir corpus
echo "fuzz.$target: $seconds s over $(ls "$seeds" | wc -l) seeds"
"$fuzzer" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=2048 -error_exitcode=1 -print_final_stats=1 \
  "$@" corpus "$seeds"
