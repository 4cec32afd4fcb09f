#!/usr/bin/env bash
# Build the previous release of urmove from this repository's history, for
# the compatibility tests (tests/compat.rs), which run it against the
# current build both ways (old client to new daemon, new client to old
# daemon):
#
#   scripts/compat.sh               build it (or find it built) and say where
#   scripts/compat.sh --print-bin   the same, printing only the binary's path
#                                   on stdout (everything else on stderr)
#
# The previous release is the newest tag vX.Y.Z at or below the version in
# Cargo.toml: while that version is still the last release's, that release;
# once it is raised for the next one, the last one. Release candidates
# (vX.Y.Z-rc1) are not releases. Without tags (a clone made with --no-tags,
# or offline) it is the commit CHANGELOG.md records for that version (a
# line naming the version and "commit <hash>", or a heading naming the
# version with "commit <hash>" below it).
# A shallow clone is deepened from origin first (git fetch --unshallow
# --tags); one without an origin is an error that says what to fetch.
#
# The release is checked out in a detached worktree, target/compat/vX.Y.Z,
# and built there with `cargo build --release --locked --bin urmove` into
# target/compat/target (shared by every release built, so a second release
# builds only what changed); the binary is copied to
# target/compat/bin/urmove-vX.Y.Z-<commit>, which is the cache: when it is
# there, nothing is checked out or built again.
#
# Environment:
#   COMPAT_TAG    the release to build, as a tag (v0.1.0) instead of the
#                 newest one at or below Cargo.toml's version
#   CARGO         the cargo to build with (default: cargo)
# Exits 1 when the release cannot be found or built, saying why (never
# skips); 2 on a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: scripts/compat.sh [--print-bin]" >&2
  exit 2
}
print_bin=0
case "${1:-}" in
  "") ;;
  --print-bin) print_bin=1 ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
  *) usage ;;
esac
[ $# -le 1 ] || usage

say() { echo "compat: $*" >&2; }
die() {
  echo "compat: $*" >&2
  exit 1
}
# Never end without saying why.
set -E
trap 'die "failed at line $LINENO: $BASH_COMMAND"' ERR

compat_dir="$PWD/target/compat"
cargo="${CARGO:-cargo}"
current="$(sed -n 's/^version *= *"\(.*\)"/\1/p' Cargo.toml | head -n 1)"
[ -n "$current" ] || die "no version in Cargo.toml"

has_origin() { git remote get-url origin >/dev/null 2>&1; }

# A shallow clone lacks the release's commit: deepen it, or say how.
if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
  has_origin || die "this clone is shallow and has no origin to fetch from: fetch the history and the tags (git fetch --unshallow --tags <repository>), or set URMOVE_PREVIOUS_BIN to a previous release's binary"
  say "this clone is shallow: fetching the history and tags from origin"
  git fetch --quiet --unshallow --tags origin >&2 || die "git fetch --unshallow --tags origin failed"
fi

# Release tags vX.Y.Z at or below $current, oldest first.
release_tags() {
  git tag -l 'v[0-9]*' | { grep -E '^v[0-9]+\.[0-9]+\.[0-9]+$' || true; } | while read -r t; do
    if at_most "${t#v}" "$current"; then echo "$t"; fi
  done | sort -V
}

# Whether version $1 is at or below version $2.
at_most() {
  [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)" = "$1" ]
}

# The commit CHANGELOG.md records for each version: "VERSION COMMIT" lines.
changelog_commits() {
  [ -f CHANGELOG.md ] || return 0
  awk '
    match($0, /commit [0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f][0-9a-f]+/) {
      c = substr($0, RSTART + 7, RLENGTH - 7)
      if (match($0, /[0-9]+\.[0-9]+\.[0-9]+/)) print substr($0, RSTART, RLENGTH), c
      else if (v != "") print v, c
      v = ""
      next
    }
    /^#/ { v = ""; if (match($0, /[0-9]+\.[0-9]+\.[0-9]+/)) v = substr($0, RSTART, RLENGTH) }
  ' CHANGELOG.md
}

# Sets $name (vX.Y.Z) and $commit (full hash) of the previous release.
find_release() {
  if [ -n "${COMPAT_TAG:-}" ]; then
    name="$COMPAT_TAG"
    if ! git rev-parse -q --verify "refs/tags/$name^{commit}" >/dev/null && has_origin; then
      say "no tag $name here: fetching tags from origin"
      git fetch --quiet --tags origin >&2 || true
    fi
    commit="$(git rev-parse -q --verify "refs/tags/$name^{commit}")" ||
      die "COMPAT_TAG=$name names no tag here (git fetch --tags <repository> brings them)"
    return
  fi
  if [ -z "$(release_tags)" ] && has_origin; then
    say "no release tag here: fetching tags from origin"
    git fetch --quiet --tags origin >&2 || say "fetching tags from origin failed; trying CHANGELOG.md"
  fi
  name="$(release_tags | tail -n 1)"
  if [ -n "$name" ]; then
    commit="$(git rev-parse "refs/tags/$name^{commit}")"
    return
  fi
  # No tags: the newest version CHANGELOG.md gives a commit for.
  local line version short
  line="$(changelog_commits | while read -r v c; do
    if at_most "$v" "$current"; then echo "$v $c"; fi
  done | sort -V | tail -n 1)"
  [ -n "$line" ] ||
    die "no release tag v* at or below $current and no commit for one in CHANGELOG.md: fetch the tags (git fetch --tags <repository>) or set COMPAT_TAG"
  read -r version short <<<"$line"
  name="v$version"
  commit="$(git rev-parse -q --verify "$short^{commit}")" ||
    die "CHANGELOG.md gives commit $short for $version, which this clone lacks: fetch the history (git fetch --unshallow <repository>)"
  say "no tag $name here: CHANGELOG.md gives its commit, ${commit:0:12}"
}

find_release
bin="$compat_dir/bin/urmove-$name-${commit:0:12}"
if [ -x "$bin" ]; then
  say "$name (${commit:0:12}) is built already: $bin"
else
  tree="$compat_dir/$name"
  if [ -e "$tree" ] && [ "$(git -C "$tree" rev-parse --show-toplevel 2>/dev/null)" = "$tree" ]; then
    say "checking out $name (${commit:0:12}) in $tree"
    git -C "$tree" checkout --quiet --detach "$commit" >&2
  else
    # A directory left from a worktree git no longer knows: start over.
    [ ! -e "$tree" ] || rm -rf "$tree"
    git worktree prune
    say "checking out $name (${commit:0:12}) in a worktree, $tree"
    mkdir -p "$compat_dir"
    git worktree add --quiet --detach "$tree" "$commit" >&2
  fi
  say "building $name (cargo build --release --locked --bin urmove)"
  (cd "$tree" && CARGO_TARGET_DIR="$compat_dir/target" "$cargo" build --release --locked --bin urmove >&2) ||
    die "building $name in $tree failed"
  mkdir -p "$compat_dir/bin"
  cp "$compat_dir/target/release/urmove" "$bin.tmp"
  mv "$bin.tmp" "$bin"
fi
"$bin" --version >/dev/null || die "$bin does not run"

if [ "$print_bin" = 1 ]; then
  echo "$bin"
else
  echo "previous release $name (${commit:0:12}): $bin"
fi
