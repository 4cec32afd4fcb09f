#!/usr/bin/env bash
# Build the .deb (scripts/build-deb.sh, which takes the same options), install
# it on this machine, check what it installed and created, install it again
# (an upgrade in place), remove it, purge it, and check what each leaves.
# Root only; refuses to run where urmove is installed or its paths exist.
# The machine ends as it began: the check deletes the urmove user itself when
# it made it (the package's purge keeps it, see dist/deb/postrm).
#
#   sudo scripts/check-deb.sh                       # release build
#   sudo scripts/check-deb.sh --bin target/debug/urmove
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive

fail() { echo "check-deb: FAIL: $*" >&2; exit 1; }
ok() { echo "check-deb: ok: $*"; }
[ "$(id -u)" = 0 ] || fail "run as root (it installs and purges the package)"

state=$(dpkg-query -W -f='${db:Status-Status}' urmove 2>/dev/null || true)
case $state in ""|not-installed) ;; *) fail "urmove is $state here; purge it first" ;; esac
for p in /usr/bin/urmove /etc/urmove /var/lib/urmove; do
  [ ! -e "$p" ] || fail "$p exists before the install; this check would lose it"
done
user_before=0
getent passwd urmove >/dev/null && user_before=1

deb=$(scripts/build-deb.sh "$@" | tail -n 1) || fail "scripts/build-deb.sh $* failed"
[ -f "$deb" ] || fail "build-deb.sh made no .deb ($deb)"
version=$(dpkg-deb -f "$deb" Version)
ok "built $deb ($version)"
sysctl_before=$(sysctl -n net.core.rmem_max 2>/dev/null || echo none)

# What an install must leave: the files, the user and state directory, a
# unit systemd accepts, man pages with FILES, the conffile; and nothing
# started, enabled or applied.
check_installed() {
  local want got f
  got=$(/usr/bin/urmove --version) || fail "/usr/bin/urmove --version"
  [ "$got" = "urmove ${version//\~/-}" ] || fail "/usr/bin/urmove --version says '$got', not $version"
  ok "/usr/bin/urmove --version: $got"
  for f in /usr/lib/systemd/system/urmove-recv.service /usr/lib/sysctl.d/90-urmove.conf \
    /usr/share/bash-completion/completions/urmove /usr/share/zsh/vendor-completions/_urmove \
    /usr/share/fish/vendor_completions.d/urmove.fish /usr/share/doc/urmove/copyright; do
    [ -s "$f" ] || fail "$f is missing"
  done
  ok "unit, sysctl profile, completions and copyright in place"
  got=$(getent passwd urmove | cut -d: -f6,7) || fail "no urmove user"
  [ "$got" = /var/lib/urmove:/usr/sbin/nologin ] || fail "urmove's home:shell is $got"
  getent group urmove >/dev/null || fail "no urmove group"
  got=$(stat -c '%U:%G %a' /var/lib/urmove) || fail "no /var/lib/urmove"
  [ "$got" = "urmove:urmove 700" ] || fail "/var/lib/urmove is $got, not urmove:urmove 700"
  ok "system user urmove (home /var/lib/urmove, nologin); /var/lib/urmove urmove:urmove 0700"
  got=$(systemd-analyze verify /usr/lib/systemd/system/urmove-recv.service 2>&1) ||
    fail "systemd-analyze verify: $got"
  ! grep -q urmove-recv <<<"$got" || fail "systemd-analyze verify warns: $got"
  ok "systemd-analyze verify urmove-recv.service"
  ! grep -rqs '^path-exclude.*/usr/share/man' /etc/dpkg/dpkg.cfg.d ||
    fail "dpkg here excludes /usr/share/man (/etc/dpkg/dpkg.cfg.d): the pages cannot be checked"
  for page in urmove urmove-recv; do
    f=$(man -w "$page") || fail "man -w $page finds no page"
    zcat "$f" | grep -q '^\.SH FILES' || fail "$f has no FILES section"
    zcat "$f" | grep -q '^\.SH "CONFIGURATION FILE"' || fail "$f has no CONFIGURATION FILE section"
    zcat "$f" | grep -q 'max_buffer_memory' || fail "$f lists no config keys"
  done
  ok "man -w urmove, urmove-recv: FILES and CONFIGURATION FILE sections"
  got=$(dpkg-query -W -f='${Conffiles}' urmove)
  grep -q '^ /etc/urmove/urmove.toml ' <<<"$got" || fail "conffiles: '$got'"
  ok "conffile /etc/urmove/urmove.toml"
  [ ! -e /etc/systemd/system/multi-user.target.wants/urmove-recv.service ] ||
    fail "the install enabled the service"
  got=$(sysctl -n net.core.rmem_max 2>/dev/null || echo none)
  [ "$got" = "$sysctl_before" ] || fail "the install applied the sysctl profile"
  ok "not enabled, sysctl not applied"
}

cleanup() {
  dpkg --purge urmove >/dev/null 2>&1 || true
  # Neither was there before the check (it refuses to run otherwise).
  rm -rf /var/lib/urmove /etc/urmove
  if [ "$user_before" = 0 ] && getent passwd urmove >/dev/null; then
    deluser --system --quiet urmove >/dev/null 2>&1 || true
    getent group urmove >/dev/null && delgroup --system --quiet urmove >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT

apt-get install -y -qq --no-install-recommends "$(realpath "$deb")" >/dev/null ||
  fail "apt-get install $deb"
ok "installed with apt-get"
check_installed

dpkg -i "$deb" >/dev/null || fail "installing the same package again"
getent passwd urmove >/dev/null || fail "the user went on the second install"
check_installed >/dev/null
ok "installs again over itself, and checks the same"

apt-get remove -y -qq urmove >/dev/null || fail "apt-get remove urmove"
[ ! -e /usr/bin/urmove ] || fail "/usr/bin/urmove is still there after remove"
[ ! -e /usr/lib/systemd/system/urmove-recv.service ] || fail "the unit is still there after remove"
[ -f /etc/urmove/urmove.toml ] || fail "remove took the conffile (only purge should)"
[ -d /var/lib/urmove ] || fail "remove took /var/lib/urmove (only purge should)"
ok "remove: binary and unit gone; conffile and state kept"

dpkg --purge urmove >/dev/null || fail "dpkg --purge urmove"
for p in /etc/urmove/urmove.toml /var/lib/urmove; do
  [ ! -e "$p" ] || fail "$p is still there after purge"
done
[ -z "$(dpkg-query -W -f='${db:Status-Status}' urmove 2>/dev/null | grep -v not-installed)" ] ||
  fail "dpkg still knows urmove after purge"
getent passwd urmove >/dev/null || fail "purge removed the urmove user (postrm says it stays)"
ok "purge: conffile and /var/lib/urmove gone; the urmove user kept, as documented"

# An admin who tried urmove by hand as root before installing the package:
# that run made /var/lib/urmove/secret, root's (mode 0600). The package takes
# it over, and the unit's ExecStart, run as urmove with the unit's memlock
# limit and state directory, starts; purge leaves what the package did not make.
trial=$(mktemp -d)
dpkg-deb -x "$deb" "$trial/pkg"
u="$trial/pkg/usr/bin/urmove"
"$u" keygen "$trial/key" >/dev/null
mkdir -p "$trial/root" "$trial/src" "$trial/state"
echo "a file" >"$trial/src/f"
"$u" recv --listen 127.0.0.1:0 --root "$trial/root" --key-file "$trial/key" \
  --state-dir "$trial/state" 2>"$trial/recv.log" &
rpid=$!
for _ in $(seq 50); do grep -q 'listening on' "$trial/recv.log" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on 127.0.0.1:\([0-9]*\),.*/\1/p' "$trial/recv.log" | head -n 1)
[ -n "$port" ] || fail "the trial daemon did not start: $(cat "$trial/recv.log")"
"$u" send -q -p "$port" --key-file "$trial/key" "$trial/src/f" 127.0.0.1: ||
  fail "a root send by hand failed"
kill "$rpid"; wait "$rpid" 2>/dev/null || true
got=$(stat -c '%U %a' /var/lib/urmove/secret) || fail "the root send made no /var/lib/urmove/secret"
[ "$got" = "root 600" ] || fail "/var/lib/urmove/secret after a root send is $got"
ok "a send by hand as root made /var/lib/urmove/secret (root, 0600)"

apt-get install -y -qq --no-install-recommends "$(realpath "$deb")" >/dev/null ||
  fail "apt-get install $deb after a root run"
got=$(stat -c '%U:%G %a' /var/lib/urmove/secret)
[ "$got" = "urmove:urmove 600" ] || fail "the install left /var/lib/urmove/secret $got"
ok "the install gave /var/lib/urmove and its secret to urmove"
unit=/usr/lib/systemd/system/urmove-recv.service
exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
memlock=$(sed -n 's/^LimitMEMLOCK=//p' "$unit")
/usr/bin/urmove keygen /etc/urmove/key >/dev/null && chown urmove:urmove /etc/urmove/key
install -d -o urmove -g urmove -m 0750 "$trial/srv"
# The shipped config's root and listen address, for a trial on loopback.
sed -e "s|^root = .*|root = \"$trial/srv\"|" -e 's|^listen = .*|listen = "127.0.0.1:0"|' \
  -e 's|^metrics = .*|metrics = "127.0.0.1:0"|' /etc/urmove/urmove.toml >"$trial/urmove.toml"
chmod 0644 "$trial/urmove.toml"; chmod 0755 "$trial"
# The unit's LimitMEMLOCK= where this root may raise the limit (it needs
# CAP_SYS_RESOURCE, which some containers withhold), else CAP_IPC_LOCK.
lock=(prlimit --memlock="$(numfmt --from=iec "$memlock")") caps=()
if ! "${lock[@]}" true 2>/dev/null; then
  lock=() caps=(--inh-caps=+ipc_lock --ambient-caps=+ipc_lock)
fi
# shellcheck disable=SC2086
STATE_DIRECTORY=/var/lib/urmove "${lock[@]}" \
  setpriv --reuid=urmove --regid=urmove --init-groups "${caps[@]}" \
  ${exec_start/\/etc\/urmove\/urmove.toml/$trial/urmove.toml} 2>"$trial/service.log" &
spid=$!
for _ in $(seq 50); do grep -q 'listening on' "$trial/service.log" && break; sleep 0.1; done
kill "$spid" 2>/dev/null || true; wait "$spid" 2>/dev/null || true
grep -q 'listening on' "$trial/service.log" ||
  fail "the unit's ExecStart as urmove did not start: $(cat "$trial/service.log")"
ok "the unit's ExecStart starts as urmove over the secret a root run made"
rm -f /etc/urmove/key
dpkg --purge urmove >"$trial/purge.log" 2>&1 || fail "dpkg --purge urmove: $(cat "$trial/purge.log")"
[ -f /var/lib/urmove/secret ] || fail "purge removed /var/lib/urmove, which the package did not make"
grep -q 'left /var/lib/urmove' "$trial/purge.log" || fail "purge said nothing of /var/lib/urmove: $(cat "$trial/purge.log")"
ok "purge left the /var/lib/urmove it did not make, and said so"
rm -rf /var/lib/urmove "$trial"
echo "check-deb: all checks passed for urmove $version"
