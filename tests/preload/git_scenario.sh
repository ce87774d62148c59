#!/usr/bin/env bash
# A git session in a throw-away repository: commits, a rename, a repack (zlib, delta search on
# threads), fsck and history queries. Names and dates are fixed, so the commit ids, and the
# whole transcript on stdout, are the same on every run: compare.sh checks that they are the
# same under the preloaded allocator, and this script checks the answers it knows.
set -euo pipefail

repo="$(mktemp -d)"
trap 'rm -rf "$repo"' EXIT
cd "$repo"

# Keep the user's and the system's git configuration out, and make the ids reproducible.
export HOME="$repo" GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null LC_ALL=C
export GIT_AUTHOR_NAME=livealloc GIT_AUTHOR_EMAIL=test@livealloc.invalid
export GIT_COMMITTER_NAME=livealloc GIT_COMMITTER_EMAIL=test@livealloc.invalid
export GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

git init -q -b main .

# Commit 1: 1500 files of varied size in 30 directories.
for ((i = 0; i < 1500; i++)); do
  mkdir -p "d$((i % 30))"
  {
    for ((j = 0; j <= i % 40; j++)); do echo "file $i line $j $((i * j % 977))"; done
  } >"d$((i % 30))/f$i.txt"
done
git add -A
git commit -q -m "add 1500 files"

# Commit 2: change every fifth file.
for ((i = 0; i < 1500; i += 5)); do echo "changed $i" >>"d$((i % 30))/f$i.txt"; done
git commit -q -a -m "change 300 files"

# Commit 3: a rename and a deletion.
git mv d0/f0.txt renamed.txt
git rm -q d1/f1.txt
git commit -q -m "rename and delete"

git gc -q --aggressive
git fsck --full --strict --no-progress || fail "git fsck found problems"

count="$(git rev-list --count HEAD)"
[[ "$count" == 3 ]] || fail "expected 3 commits, got $count"
files="$(git ls-files | wc -l)"
[[ "$files" == 1499 ]] || fail "expected 1499 tracked files, got $files"
expected="$(printf 'file 7 line %s %s\n' 0 0 1 7 2 14 3 21 4 28 5 35 6 42 7 49)"
[[ "$(git show HEAD:d7/f7.txt)" == "$expected" ]] || fail "d7/f7.txt has the wrong contents"
# Content-addressed: any byte wrong anywhere in the history changes this id.
head="$(git rev-parse HEAD)"
[[ "$head" == a8ab80958cd0026268f98f00af28fc541522b036 ]] || fail "unexpected HEAD commit id $head"

echo "commits $count files $files"
git log --format='%H %s'
git diff --stat HEAD~2 HEAD | tail -n 1
git cat-file -p 'HEAD^{tree}' | sha256sum
