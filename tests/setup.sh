#!/usr/bin/env bash
# Installs what this project needs on a fresh Debian 12 machine, and nothing else.
# Idempotent and silent when everything is already there, so every entry script can call it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(build-essential cmake ninja-build git doctest-dev libcivetweb-dev civetweb
  nlohmann-json3-dev libmimalloc2.0 libjemalloc2 libtcmalloc-minimal4 nodejs npm python3
  time gnuplot-nox hyperfine binutils chromium clang linux-perf libpython3.11-testsuite)

installed() {
  dpkg -s "$1" 2>/dev/null | grep -q '^Status: install ok installed'
}

missing=()
for pkg in "${packages[@]}"; do
  case "$pkg" in
    # Node may come from NodeSource, whose nodejs package bundles npm and *conflicts* with
    # Debian's npm: installing npm there would remove node. A working command is enough.
    nodejs) command -v node >/dev/null 2>&1 && continue ;;
    npm) command -v npm >/dev/null 2>&1 && continue ;;
  esac
  installed "$pkg" || missing+=("$pkg")
done

if ((${#missing[@]} > 0)); then
  echo "setup: installing ${missing[*]}"
  sudo=()
  if [[ "$(id -u)" != 0 ]]; then sudo=(sudo); fi
  # One update and one install: a second concurrent apt-get would fail on the dpkg lock.
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

# promtool checks /metrics as Prometheus parses it (tests/memlive/cli_test.py promtool). Only that
# binary is taken out of Debian's prometheus package, into the user's cache (tests/run.sh puts it
# on PATH): installing the package would also start a Prometheus server on the machine.
tools="${XDG_CACHE_HOME:-$HOME/.cache}/livealloc/bin"
if ! command -v promtool >/dev/null 2>&1 && [[ ! -x "$tools/promtool" ]]; then
  echo "setup: promtool from Debian's prometheus package into $tools"
  tmp="$(mktemp -d)"
  if (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1 &&
    dpkg-deb -x prometheus_*.deb x && [[ -x x/usr/bin/promtool ]]); then
    mkdir -p "$tools"
    install -m 0755 "$tmp/x/usr/bin/promtool" "$tools/promtool"
  else
    echo "setup: could not fetch the prometheus package; the promtool check will be skipped"
  fi
  rm -rf "$tmp"
fi

# The web page's npm dependencies, once web/package.json exists. `npm ci` again only when the
# lock file is newer than node_modules (i.e. someone changed the dependencies).
web="$root/web"
if [[ -f "$web/package.json" ]]; then
  if [[ ! -d "$web/node_modules" ]] ||
    { [[ -f "$web/package-lock.json" ]] && [[ "$web/package-lock.json" -nt "$web/node_modules" ]]; }; then
    echo "setup: npm ci in web/"
    (cd "$web" && npm ci --no-audit --no-fund --loglevel=error)
    # npm ci makes no node_modules when there are no dependencies yet; the directory's time
    # records when we last installed.
    mkdir -p "$web/node_modules"
    touch "$web/node_modules"
  fi
fi
