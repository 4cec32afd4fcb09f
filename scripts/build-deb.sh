#!/usr/bin/env bash
# Build the Debian package urmove_VERSION_ARCH.deb with dpkg-deb: the binary,
# the hardened unit, /etc/urmove/urmove.toml (a conffile), the sysctl profile,
# man pages, bash/zsh/fish completions and the docs, with the maintainer
# scripts of dist/deb/ (they create the urmove user and /var/lib/urmove).
#
#   scripts/build-deb.sh                      # cargo build --release, then package
#   scripts/build-deb.sh --bin PATH           # package a binary built elsewhere
#   scripts/build-deb.sh --out DIR            # where the .deb goes (default target/deb)
#
# Needs dpkg-deb, and dpkg-shlibdeps (dpkg-dev) for Depends. Runs as any
# user: files are owned by root in the package (--root-owner-group). Prints
# the path of the .deb on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
umask 022

bin="" out=target/deb
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "build-deb: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
say() { echo "build-deb: $*"; }
die() { echo "build-deb: $*" >&2; exit 1; }
for tool in dpkg-deb dpkg-shlibdeps gzip; do
  command -v "$tool" >/dev/null 2>&1 || die "needs $tool (apt-get install dpkg-dev)"
done

# The version of [package] in Cargo.toml; a Cargo pre-release (1.0.0-rc.1)
# sorts before its release in Debian as 1.0.0~rc.1.
version=$(awk -F'"' '/^\[/ { p = ($0 == "[package]") } p && /^version *=/ { print $2; exit }' Cargo.toml)
[ -n "$version" ] || die "no version in Cargo.toml's [package]"
debversion=${version//-/\~}
arch=$(dpkg --print-architecture)

if [ -z "$bin" ]; then
  say "building urmove (cargo build --release)"
  cargo build --release --quiet --bin urmove
  bin=${CARGO_TARGET_DIR:-target}/release/urmove
fi
[ -x "$bin" ] || die "$bin is not an executable"
got=$("$bin" --version)
[ "$got" = "urmove $version" ] || die "$bin says '$got', Cargo.toml says $version"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root=$stage/root
put() { # put MODE SRC DST
  install -D -m "$1" "$2" "$root$3"
}

put 0755 "$bin" /usr/bin/urmove
if command -v strip >/dev/null 2>&1; then
  # As dh_strip does; the release profile keeps line tables for backtraces.
  strip --remove-section=.comment --remove-section=.note --strip-unneeded "$root/usr/bin/urmove"
fi

# The repo's unit names the scripts/install.sh paths (/usr/local).
sed -e 's|/usr/local/bin/urmove|/usr/bin/urmove|' \
    -e 's|^Documentation=.*|Documentation=man:urmove-recv(1) file:///usr/share/doc/urmove/README.md.gz|' \
    -e 's|^# urmove receiver daemon, hardened. Install with scripts/install.sh, which$|# urmove receiver daemon, hardened. From the urmove package, whose postinst|' \
    -e 's|^# creates the urmove user, /etc/urmove/urmove.toml, the key and /srv/urmove.$|# creates the urmove user; see README.md.gz for the key and /srv/urmove.|' \
    tuning/systemd/urmove-recv.service >"$stage/unit"
grep -q '^ExecStart=/usr/bin/urmove ' "$stage/unit" || die "the unit's ExecStart was not rewritten"
put 0644 "$stage/unit" /usr/lib/systemd/system/urmove-recv.service
put 0644 tuning/urmove.toml /etc/urmove/urmove.toml
put 0644 tuning/sysctl.d/90-urmove.conf /usr/lib/sysctl.d/90-urmove.conf

mkdir -p "$stage/man"
"$bin" man --dir "$stage/man" >/dev/null
for page in "$stage/man"/*.1; do
  gzip -9n <"$page" >"$stage/page.gz"
  put 0644 "$stage/page.gz" "/usr/share/man/man1/$(basename "$page").gz"
done

"$bin" completions bash >"$stage/c" && put 0644 "$stage/c" /usr/share/bash-completion/completions/urmove
"$bin" completions zsh >"$stage/c" && put 0644 "$stage/c" /usr/share/zsh/vendor-completions/_urmove
"$bin" completions fish >"$stage/c" && put 0644 "$stage/c" /usr/share/fish/vendor_completions.d/urmove.fish

put 0644 dist/deb/copyright /usr/share/doc/urmove/copyright
gzip -9n <README.md >"$stage/readme.gz"
put 0644 "$stage/readme.gz" /usr/share/doc/urmove/README.md.gz
# The pages the README links, beside it (kept as they are, so the links
# between them hold).
for page in docs/*.md docs/*.svg docs/internals/*.md; do
  if [ -f "$page" ]; then put 0644 "$page" "/usr/share/doc/urmove/$page"; fi
done

# Depends: the shared libraries the binary links, at the versions it needs
# (dpkg-shlibdeps reads them from the installed libraries' symbols files).
mkdir -p "$stage/src/debian"
printf 'Source: urmove\n\nPackage: urmove\nArchitecture: any\n' >"$stage/src/debian/control"
shlibs=$(cd "$stage/src" && dpkg-shlibdeps -O "$root/usr/bin/urmove" 2>/dev/null |
  sed -n 's/^shlibs:Depends=//p')
[ -n "$shlibs" ] || die "dpkg-shlibdeps found no dependencies for $bin"

# Installed-Size in KiB, counted as dpkg does: each file rounded up, each
# directory one.
size=$(find "$root" \( -type f -printf '%s\n' \) -o \( -type d -printf '1024\n' \) |
  awk '{ kib += int(($1 + 1023) / 1024) } END { print kib }')
maintainer=${DEBFULLNAME:+$DEBFULLNAME <${DEBEMAIL:-}>}
[ -n "$maintainer" ] || maintainer=$(git log -1 --format='%an <%ae>' 2>/dev/null || true)
[ -n "$maintainer" ] || die "set DEBFULLNAME and DEBEMAIL for the Maintainer field"

install -d -m 0755 "$root/DEBIAN"
sed -e "s|@VERSION@|$debversion|" -e "s|@ARCH@|$arch|" -e "s|@MAINTAINER@|$maintainer|" \
    -e "s|@INSTALLED_SIZE@|$size|" -e "s|@SHLIBS@|$shlibs|" \
    dist/deb/control.in >"$root/DEBIAN/control"
install -m 0644 dist/deb/conffiles "$root/DEBIAN/conffiles"
for script in postinst prerm postrm; do
  install -m 0755 "dist/deb/$script" "$root/DEBIAN/$script"
done

mkdir -p "$out"
deb=$out/urmove_${debversion}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
say "Depends: $shlibs, adduser; Installed-Size: $size KiB"
echo "$deb"
