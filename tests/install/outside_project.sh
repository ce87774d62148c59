#!/usr/bin/env bash
# Installs a livealloc build into WORK/prefix and builds an outside project against it.
# Usage: outside_project.sh --build DIR --source DIR --work DIR --generator G --cxx PATH [--deb]
# --deb: instead of `cmake --install`, build the Debian package with `cpack` (the build's
# CPackConfig.cmake), check its control fields, and unpack it (`dpkg-deb -x`): its /usr is the
# prefix the same checks then run against.
# Exit 0 only when every step succeeded and both programs checked their results.
set -euo pipefail

while (($# > 0)); do
  case "$1" in
    --build) build="$2" ;;
    --source) source="$2" ;;
    --work) work="$2" ;;
    --generator) generator="$2" ;;
    --cxx) cxx="$2" ;;
    --deb) deb=1; shift; continue ;;
    *)
      echo "usage: $0 --build DIR --source DIR --work DIR --generator G --cxx PATH [--deb]" >&2
      exit 2
      ;;
  esac
  shift 2
done

rm -rf "$work"
mkdir -p "$work"
prefix="$work/prefix"   # installed into a path unlike the configured CMAKE_INSTALL_PREFIX:
                        # the CMake and pkg-config files must not depend on it
step() { echo "=== $*"; }
fail() { echo "FAILED: $*" >&2; exit 1; }

if [[ -n "${deb:-}" ]]; then
  step "cpack -G DEB, then dpkg-deb -x"
  cpack -G DEB -B "$work/cpack" --config "$build/CPackConfig.cmake" >"$work/cpack.log" ||
    { cat "$work/cpack.log" >&2; fail "cpack -G DEB"; }
  debs=("$work"/cpack/livealloc_*_amd64.deb)
  [[ ${#debs[@]} == 1 && -f "${debs[0]}" ]] || fail "cpack made no single livealloc_*_amd64.deb"
  field() { dpkg-deb --field "${debs[0]}" "$1"; }
  version="$(sed -n 's/^Version: //p' "$build/allocator/livealloc.pc")"
  [[ "$(field Package)" == livealloc && "$(field Version)" == "$version" ]] ||
    fail "package $(field Package) $(field Version), expected livealloc $version"
  # dpkg-shlibdeps found what memlive links: a package without it would install and not run.
  [[ "$(field Depends)" == *libcivetweb1* && "$(field Depends)" == *libc6* ]] ||
    fail "Depends: $(field Depends)"
  dpkg-deb -x "${debs[0]}" "$work/root"
  prefix="$work/root/usr"
  [[ -f "$prefix/share/doc/livealloc/LICENSE" ]] || fail "no LICENSE in the package"
else
  step "cmake --install $build --prefix $prefix"
  cmake --install "$build" --prefix "$prefix" >"$work/install.log"
fi

step "the installed files"
libdir="$(dirname "$(find "$prefix" -name liblivealloc.so -print -quit)")"
[[ -f "$libdir/liblivealloc.so" ]] || fail "no liblivealloc.so under $prefix"
missing=0
[[ -f "$libdir/liblivealloc-checked.so" ]] ||
  { echo "FAILED: $libdir/liblivealloc-checked.so is missing" >&2; missing=1; }
for f in include/livealloc.h include/livealloc_reader.h include/memlive.h \
  include/memlive_web_assets.h bin/memlive; do
  [[ -f "$prefix/$f" ]] || { echo "FAILED: $prefix/$f is missing" >&2; missing=1; }
done
for f in cmake/livealloc/liveallocConfig.cmake cmake/livealloc/liveallocConfigVersion.cmake \
  cmake/memlive/memliveConfig.cmake cmake/memlive/memliveConfigVersion.cmake \
  pkgconfig/livealloc.pc pkgconfig/memlive.pc; do
  [[ -f "$libdir/$f" ]] || { echo "FAILED: $libdir/$f is missing" >&2; missing=1; }
done
((missing == 0)) || fail "files missing (above)"
# Nothing of the build or source tree leaks into the installed package files.
if grep -rl -e "$build" "$libdir/cmake" "$libdir/pkgconfig"; then
  fail "the files above name the build tree $build"
fi

step "find_package: configure, build and run the outside project"
cmake -S "$source" -B "$work/build" -G "$generator" -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$work/build"
"$work/build/outside_allocator"
"$work/build/outside_memlive"

step "pkg-config: the same sources with pkg-config --cflags --libs"
export PKG_CONFIG_PATH="$libdir/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
pkg-config --exists --print-errors "livealloc = $(pkg-config --modversion livealloc)" memlive
preload="$(pkg-config --variable=preload livealloc)"
[[ "$(realpath "$preload")" == "$(realpath "$libdir/liblivealloc.so")" ]] ||
  fail "pkg-config --variable=preload livealloc: $preload"
# shellcheck disable=SC2046
"$cxx" -std=c++17 -O1 -Wall -Wextra -Werror -DPRELOAD_PATH="\"$preload\"" \
  $(pkg-config --cflags livealloc) "$source/allocator_main.cpp" $(pkg-config --libs livealloc) \
  -o "$work/pc_allocator"
# shellcheck disable=SC2046
"$cxx" -std=c++17 -O1 -Wall -Wextra -Werror $(pkg-config --cflags memlive) \
  "$source/memlive_main.cpp" $(pkg-config --libs memlive) -o "$work/pc_memlive"
"$work/pc_allocator"
"$work/pc_memlive"

step "the installed memlive command"
"$prefix/bin/memlive" --version
# `memlive run` finds the installed liblivealloc.so beside it (exit 2 would mean it did not);
# the program checks that it runs preloaded.
"$prefix/bin/memlive" run --port 0 --exit-when-done -- "$work/build/outside_allocator" --expect-preload
echo "install.outside_project: all steps passed"
