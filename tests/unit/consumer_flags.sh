#!/bin/bash
# The headers as a consumer sees them without CMake (plain -I or pkg-config: no system-header
# shelter), with one compiler:
#   consumer_flags.sh CXX WORKDIR -IDIR [-IDIR...]
# - consumer_flags.cpp compiles cleanly under the strict flags users put in -Werror builds,
#   C++17 and C++20, with and without LIVEALLOC_OVERRIDE, -fno-exceptions and -fno-rtti, and runs
#   (without exceptions a failed allocation must abort saying why);
# - LIVEALLOC_OVERRIDE after an earlier include (consumer_flags_late.cpp) and LIVEALLOC_OVERRIDE
#   under -fsanitize=address or thread must fail with their #error;
# - the normal order (consumer_flags_twice.cpp, with memlive.h: strict warnings too) and the
#   sanitizers without the override compile.
# The memlive.h cases run when an -I directory holds memlive.h. Exit 1 names every failed check.
set -u
if [ $# -lt 3 ]; then
  echo "usage: $0 CXX WORKDIR -IDIR [-IDIR...]" >&2
  exit 2
fi
cxx=$1
work=$2
shift 2
includes=("$@")
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$work"

strict=(-Wall -Wextra -Wpedantic -Wconversion -Wsign-conversion -Wshadow -Werror)
strict+=(-Wold-style-cast -Wcast-qual -Wundef -Wzero-as-null-pointer-constant -Wextra-semi)
strict+=(-Wnull-dereference -Wdouble-promotion -Wformat=2 -Wimplicit-fallthrough)
strict+=(-Wnon-virtual-dtor -Woverloaded-virtual)
if "$cxx" --version 2>/dev/null | grep -qi clang; then
  strict+=(-Wcomma -Wshadow-all -Wextra-semi-stmt -Wunreachable-code)
  # The override's sized deletes need a prior declaration (clang 14: no sized deallocation).
  strict+=(-Wmissing-prototypes)
  # Every global of the headers is constant-initialized: malloc runs before constructors do.
  strict+=(-Wglobal-constructors)
else
  strict+=(-Wmissing-declarations)  # gcc: the override's C23 functions need a prior declaration
  strict+=(-Wuseless-cast -Wduplicated-cond -Wduplicated-branches -Wlogical-op -Wredundant-decls)
  strict+=(-Wsuggest-override -Wcast-align=strict)
fi
memlive=()
for i in "${includes[@]}"; do
  [ -f "${i#-I}/memlive.h" ] && memlive=(-DCONSUMER_FLAGS_MEMLIVE)
done

failed=0
pass() { echo "ok    $1"; }
fail() {
  echo "FAIL  $1"
  [ -n "${2:-}" ] && head -n 8 <<<"$2" | sed 's/^/      /'
  failed=$((failed + 1))
}

# Must compile and link cleanly: check NAME OUTPUT SOURCE FLAGS...
build() {
  local name=$1 out=$2 src=$3
  shift 3
  local log
  if log=$("$cxx" "$@" "${includes[@]}" "$here/$src" -o "$out" 2>&1); then
    pass "$name"
    return 0
  fi
  fail "$name" "$log"
  return 1
}

# Must fail to compile with TEXT among the errors: refuse NAME TEXT SOURCE FLAGS...
refuse() {
  local name=$1 text=$2 src=$3
  shift 3
  local log
  if log=$("$cxx" -fsyntax-only "$@" "${includes[@]}" "$here/$src" 2>&1); then
    fail "$name: compiled, expected the #error \"$text...\""
  elif grep -qF "$text" <<<"$log"; then
    pass "$name"
  else
    fail "$name: failed without the #error \"$text...\"" "$log"
  fi
}

for std in c++17 c++20; do
  for override in "" -DLIVEALLOC_OVERRIDE; do
    for lang in "" -fno-exceptions -fno-rtti "-fno-exceptions -fno-rtti"; do
      # shellcheck disable=SC2206  # lang holds zero, one or two flags
      flags=(-std=$std $override $lang)
      name="$cxx ${flags[*]}"
      exe="$work/consumer_${std}${override:+_override}$(tr -d ' -' <<<"$lang")"
      if ! build "strict warnings: $name" "$exe" consumer_flags.cpp "${strict[@]}" -O2 \
        "${flags[@]}" -pthread; then
        # Without the warnings too, so that the failure says whether the flags or a warning broke
        # the build (only then: it costs a compile, a second for every combination).
        [ -n "$lang" ] && build "compiles: $name" /dev/null consumer_flags.cpp -fsyntax-only \
          "${flags[@]}"
        continue
      fi
      if log=$("$exe" 2>&1); then pass "runs: $name"; else fail "runs: $name" "$log"; fi
      if [[ $lang == *-fno-exceptions* ]]; then
        log=$("$exe" new-fails 2>&1)
        rc=$?
        if [ $rc -eq 134 ] && grep -q "livealloc: operator new failed .*-fno-exceptions" <<<"$log"; then
          pass "failed allocation aborts with a message: $name"
        else
          fail "failed allocation aborts with a message: $name (exit $rc)" "$log"
        fi
      fi
    done
  done
done

# A program with its own daemon() and _Exit(): livealloc's are weak, the program's are used.
if build "LIVEALLOC_OVERRIDE beside the program's own daemon and _Exit: the allocator's file" \
  "$work/own_daemon_a.o" consumer_flags_own_daemon.cpp -c -std=c++17 -DLIVEALLOC_OVERRIDE \
  "${strict[@]}" &&
  build "LIVEALLOC_OVERRIDE beside the program's own daemon and _Exit: the program's file" \
    "$work/own_daemon_b.o" consumer_flags_own_daemon.cpp -c -std=c++17 "${strict[@]}" &&
  { log=$("$cxx" "$work/own_daemon_a.o" "$work/own_daemon_b.o" -pthread -o "$work/own_daemon" \
    2>&1) || { fail "the program's own daemon and _Exit link beside livealloc's" "$log"; false; }; }
then
  log=$("$work/own_daemon" 2>&1)
  rc=$?
  if [ $rc -eq 3 ]; then pass "the program's own daemon and _Exit run"; else
    fail "the program's own daemon and _Exit run (exit $rc, expected 3)" "$log"
  fi
fi

late="LIVEALLOC_OVERRIDE was defined after livealloc.h was first included"
refuse "late LIVEALLOC_OVERRIDE after livealloc_reader.h" "$late" consumer_flags_late.cpp -std=c++17
if [ ${#memlive[@]} -gt 0 ]; then
  refuse "late LIVEALLOC_OVERRIDE after memlive.h" "$late" consumer_flags_late.cpp -std=c++17 \
    "${memlive[@]}"
fi
if [ ${#memlive[@]} -gt 0 ]; then
  refuse "memlive.h with -fno-exceptions" "memlive.h needs C++ exceptions" \
    consumer_flags_twice.cpp -std=c++17 -fno-exceptions "${memlive[@]}"
  # ... and nothing else: the compilers go on after an #error, the header must not.
  log=$("$cxx" -fsyntax-only -std=c++17 -fno-exceptions "${memlive[@]}" "${includes[@]}" \
    "$here/consumer_flags_twice.cpp" 2>&1)
  if [ "$(grep -cE ': (fatal )?error: ' <<<"$log")" -eq 1 ]; then
    pass "memlive.h with -fno-exceptions: the #error is the only error"
  else
    fail "memlive.h with -fno-exceptions: errors besides the #error" "$(grep 'error: ' <<<"$log")"
  fi
fi
# (memlive.h too, when found: it needs exceptions, but not fewer warnings.)
for std in c++17 c++20; do
  build "LIVEALLOC_OVERRIDE first, headers included again, strict warnings: -std=$std" \
    "$work/twice.o" consumer_flags_twice.cpp -c -std=$std "${strict[@]}" "${memlive[@]}"
done

sanitized="LIVEALLOC_OVERRIDE cannot be combined with -fsanitize"
for san in address thread; do
  refuse "LIVEALLOC_OVERRIDE with -fsanitize=$san" "$sanitized" consumer_flags.cpp -std=c++17 \
    -DLIVEALLOC_OVERRIDE -fsanitize=$san
  build "-fsanitize=$san without LIVEALLOC_OVERRIDE" "$work/san_$san.o" consumer_flags.cpp -c \
    -std=c++17 -fsanitize=$san
done
build "LIVEALLOC_OVERRIDE with -fsanitize=undefined" "$work/san_undefined.o" consumer_flags.cpp -c \
  -std=c++17 -DLIVEALLOC_OVERRIDE -fsanitize=undefined

if [ $failed -ne 0 ]; then
  echo "consumer_flags: $failed check(s) failed with $cxx"
  exit 1
fi
echo "consumer_flags: every check passed with $cxx"
