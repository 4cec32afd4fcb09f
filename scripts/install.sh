#!/usr/bin/env bash
# Install urmove as a service: the binary, the hardened systemd unit, the
# config file, the sysctl profile for fast transfers, docs, man pages and
# shell completions; then (on a real install) the urmove user, the root
# directory and a key.
#
#   sudo scripts/install.sh                      # build (cargo --release) and install
#   sudo scripts/install.sh --bin ./urmove       # install a binary built elsewhere
#   sudo scripts/install.sh --root /data/in      # receive into /data/in
#   DESTDIR=/tmp/stage scripts/install.sh --bin target/release/urmove   # stage only
#
# Options: --bin PATH, --root DIR (default /srv/urmove), --prefix DIR
# (default /usr/local), --apply-sysctl (load the profile now; otherwise it is
# loaded at the next boot). With DESTDIR set, files are staged under it and
# nothing else on the host changes (no user, key, sysctl or systemctl).
# Existing /etc/urmove/urmove.toml and keys are never overwritten.
set -euo pipefail
cd "$(dirname "$0")/.."

bin="" root=/srv/urmove prefix=/usr/local apply_sysctl=0
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --root) root=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --apply-sysctl) apply_sysctl=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "install: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
dest=${DESTDIR:-}
stage_only=0
[ -n "$dest" ] && stage_only=1
if [ "$stage_only" = 0 ] && [ "$(id -u)" != 0 ]; then
  echo "install: run as root (or set DESTDIR to stage the files)" >&2
  exit 2
fi
case $root in /*) ;; *) echo "install: --root must be an absolute path" >&2; exit 2 ;; esac

if [ -z "$bin" ]; then
  echo "install: building urmove (cargo build --release)"
  cargo build --release --quiet
  bin=target/release/urmove
fi
[ -x "$bin" ] || { echo "install: $bin is not an executable" >&2; exit 2; }

say() { echo "install: $*"; }
put() { # put MODE SRC DST
  install -D -m "$1" "$2" "$dest$3"
  say "$3"
}

put 0755 "$bin" "$prefix/bin/urmove"

unit=$(mktemp)
trap 'rm -f "$unit"' EXIT
sed -e "s|/usr/local/bin/urmove|$prefix/bin/urmove|" \
    -e "s|^ReadWritePaths=.*|ReadWritePaths=$root|" \
    -e "s|/usr/local/share/doc/urmove|$prefix/share/doc/urmove|" \
    tuning/systemd/urmove-recv.service >"$unit"
put 0644 "$unit" /etc/systemd/system/urmove-recv.service

if [ -e "$dest/etc/urmove/urmove.toml" ]; then
  say "/etc/urmove/urmove.toml exists: kept"
else
  conf=$(mktemp)
  sed "s|^root = .*|root = \"$root\"|" tuning/urmove.toml >"$conf"
  put 0644 "$conf" /etc/urmove/urmove.toml
  rm -f "$conf"
fi

if [ -f tuning/sysctl.d/90-urmove.conf ]; then
  put 0644 tuning/sysctl.d/90-urmove.conf /etc/sysctl.d/90-urmove.conf
else
  say "no tuning/sysctl.d/90-urmove.conf in this tree: sysctl profile skipped"
fi
put 0644 README.md "$prefix/share/doc/urmove/README.md"
# The pages the README links, beside it (docs/ and docs/internals/).
for page in docs/*.md docs/*.svg docs/internals/*.md; do
  if [ -f "$page" ]; then put 0644 "$page" "$prefix/share/doc/urmove/$page"; fi
done

# Man pages and completions, when this urmove can write them.
mandir=$(mktemp -d)
if "$bin" man --dir "$mandir" >/dev/null 2>&1; then
  for page in "$mandir"/*.1; do
    put 0644 "$page" "$prefix/share/man/man1/$(basename "$page")"
  done
fi
rm -rf "$mandir"
comp=$(mktemp)
if "$bin" completions bash >"$comp" 2>/dev/null && [ -s "$comp" ]; then
  put 0644 "$comp" /usr/share/bash-completion/completions/urmove
fi
rm -f "$comp"

if [ "$stage_only" = 1 ]; then
  say "staged under $dest; nothing else on this host was changed"
  exit 0
fi

if ! id urmove >/dev/null 2>&1; then
  useradd --system --no-create-home --home-dir "$root" --shell /usr/sbin/nologin urmove
  say "created the system user urmove"
fi
install -d -m 0750 -o urmove -g urmove "$root"
say "$root (owned by urmove)"
if [ ! -e /etc/urmove/key ]; then
  "$prefix/bin/urmove" keygen /etc/urmove/key
  chown urmove:urmove /etc/urmove/key
  say "/etc/urmove/key (new; copy it to the senders, mode 0600)"
fi
if [ "$apply_sysctl" = 1 ] && [ -f /etc/sysctl.d/90-urmove.conf ]; then
  sysctl -p /etc/sysctl.d/90-urmove.conf
fi
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload
  say "start it: systemctl enable --now urmove-recv; logs: journalctl -u urmove-recv"
else
  say "systemd is not running here: start by hand with $prefix/bin/urmove recv --config /etc/urmove/urmove.toml"
fi
