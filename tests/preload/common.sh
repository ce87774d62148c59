# shellcheck shell=bash
# Sourced by the preload test scripts (tests/preload/*.sh).

# require_preload_lib LIB: exits 1 unless LIB is an existing absolute path. A relative one would
# be lost by a preloaded child that changes directory (git does).
require_preload_lib() {
  if [[ "$1" != /* || ! -f "$1" ]]; then
    echo "FAIL: preload library must be an existing absolute path: '$1'" >&2
    exit 1
  fi
}
