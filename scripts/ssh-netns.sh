#!/usr/bin/env bash
# An OpenSSH sshd in a network namespace, for hand runs and benchmarks of
# urmove over ssh (issue 36); the same setup as tests/sshd.rs, one instance.
#
#   scripts/ssh-netns.sh up DIR     make it; keys, configs and the log in DIR
#   scripts/ssh-netns.sh down DIR   remove it (DIR too)
#
# `up` makes the namespace NS, a veth pair with OUTSIDE/30 here and ADDR/30
# in it, the test user (shared with the tests: made once, under the same
# file lock; its password set to `*` so that key logins work with UsePAM no),
# a remote directory REMOTE_DIR owned by the user with a copy of URMOVE as
# REMOTE_DIR/bin/urmove, an sshd on ADDR:22 (its own host key, key logins of
# that user only) and DIR/ssh_config whose `Host srv` reaches it (strict
# host-key checking, BatchMode). It prints what to use and writes the same
# as shell assignments in DIR/env:
#   RSH='ssh -F DIR/ssh_config'  HOST=srv  REMOTE_DIR=...  REMOTE_URMOVE=...
# e.g.  urmove send -e "$RSH" --remote-path "$REMOTE_URMOVE" SRC "srv:$REMOTE_DIR/"
#
# Environment (up):
#   NS=urssh-hand  ADDR=10.75.0.2  OUTSIDE=10.75.0.1  (the tests use 10.76.x.x)
#   URMOVE=        the binary to install remotely (default: target/release/urmove,
#                  else target/debug/urmove; none: no copy)
#   REMOTE_DIR=/home/urssh/h-NS
# The ssh session's RLIMIT_MEMLOCK is sshd's (here 8 MiB); it is left so.
set -euo pipefail

USER_NAME=urssh
HOME_DIR=/home/urssh
USER_LOCK=/var/tmp/urmove-sshd-user.lock
SSHD=/usr/sbin/sshd
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "ssh-netns: $*" >&2; exit 1; }

[ $# = 2 ] || die "usage: $0 up|down DIR"
CMD=$1
DIR=$2
[ "$(id -u)" = 0 ] || die "needs root (namespaces, sshd, a user)"

down() {
    [ -f "$DIR/env" ] || die "$DIR/env: not a directory made by '$0 up'"
    # shellcheck disable=SC1091
    . "$DIR/env"
    local pids=
    if [ -e "/run/netns/$NS" ]; then pids=$(ip netns pids "$NS" || true); fi
    if [ -s "$DIR/sshd.pid" ]; then pids="$pids $(cat "$DIR/sshd.pid")"; fi
    # Whatever runs the remote copy (outside the namespace too).
    for p in /proc/[0-9]*; do
        if [[ $(readlink "$p/exe" 2>/dev/null) == "$REMOTE_DIR/"* ]]; then pids="$pids ${p#/proc/}"; fi
    done
    # shellcheck disable=SC2086
    if [ -n "${pids// /}" ]; then kill -KILL $pids 2>/dev/null || true; fi
    ip netns del "$NS" 2>/dev/null || true
    ip link del "$VETH" 2>/dev/null || true
    rm -rf "$REMOTE_DIR" "$AUTH_KEYS" "$DIR"
    echo "ssh-netns: $NS removed"
}

up() {
    NS=${NS:-urssh-hand}
    ADDR=${ADDR:-10.75.0.2}
    OUTSIDE=${OUTSIDE:-10.75.0.1}
    REMOTE_DIR=${REMOTE_DIR:-$HOME_DIR/h-$NS}
    VETH=${VETH:-${NS:0:12}-h}
    AUTH_KEYS=$HOME_DIR/.ssh/ak-$NS
    URMOVE=${URMOVE:-}
    if [ -z "$URMOVE" ]; then
        for b in "$REPO/target/release/urmove" "$REPO/target/debug/urmove"; do
            if [ -x "$b" ]; then URMOVE=$b; break; fi
        done
    fi
    [ -x "$SSHD" ] || die "needs $SSHD (apt-get install openssh-server)"
    for t in ip ssh ssh-keygen useradd flock; do command -v $t >/dev/null || die "needs $t"; done
    [ ! -e "/run/netns/$NS" ] || die "namespace $NS exists already ('$0 down DIR' of its DIR, or NS=other)"
    [ ! -e "$DIR/env" ] || die "$DIR holds a setup already ('$0 down $DIR' first)"
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd)
    chmod 700 "$DIR"
    cat >"$DIR/env" <<ENV
NS='$NS'
ADDR='$ADDR'
VETH='$VETH'
RSH='ssh -F $DIR/ssh_config'
HOST=srv
REMOTE_USER='$USER_NAME'
REMOTE_DIR='$REMOTE_DIR'
REMOTE_URMOVE='$([ -n "$URMOVE" ] && echo "$REMOTE_DIR/bin/urmove")'
AUTH_KEYS='$AUTH_KEYS'
ENV
    # From here a failure leaves something: take it down again.
    trap 'echo "ssh-netns: up failed; removing what was made" >&2; down >/dev/null' ERR

    (
        flock 9
        id -u "$USER_NAME" >/dev/null 2>&1 || useradd -m -d "$HOME_DIR" -s /bin/bash "$USER_NAME"
        usermod -p '*' "$USER_NAME"
        install -d -o "$USER_NAME" -g "$USER_NAME" -m 700 "$HOME_DIR/.ssh"
    ) 9>"$USER_LOCK"

    ip netns add "$NS"
    ip link add "$VETH" type veth peer name eth0 netns "$NS"
    ip addr add "$OUTSIDE/30" dev "$VETH"
    ip link set "$VETH" up
    ip -n "$NS" addr add "$ADDR/30" dev eth0
    ip -n "$NS" link set eth0 up
    ip -n "$NS" link set lo up

    for k in host_key client_key; do ssh-keygen -q -t ed25519 -N '' -C urmove-hand -f "$DIR/$k"; done
    install -o "$USER_NAME" -g "$USER_NAME" -m 600 "$DIR/client_key.pub" "$AUTH_KEYS"
    install -d -o "$USER_NAME" -g "$USER_NAME" -m 755 "$REMOTE_DIR" "$REMOTE_DIR/bin"
    if [ -n "$URMOVE" ]; then install -o "$USER_NAME" -g "$USER_NAME" -m 755 "$URMOVE" "$REMOTE_DIR/bin/urmove"; fi
    cat >"$DIR/sshd_config" <<CONF
Port 22
ListenAddress $ADDR
HostKey $DIR/host_key
PidFile $DIR/sshd.pid
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin no
AuthorizedKeysFile $AUTH_KEYS
AllowUsers $USER_NAME
StrictModes yes
LogLevel VERBOSE
MaxStartups 64:30:128
Subsystem sftp internal-sftp
CONF
    cat >"$DIR/ssh_config" <<CONF
Host srv
  HostName $ADDR
  User $USER_NAME
  IdentityFile $DIR/client_key
  IdentitiesOnly yes
  UserKnownHostsFile $DIR/known_hosts
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  BatchMode yes
  ConnectTimeout 10
CONF
    echo "$ADDR $(cut -d' ' -f1,2 "$DIR/host_key.pub")" >"$DIR/known_hosts"
    install -d -m 755 /run/sshd
    "$SSHD" -t -f "$DIR/sshd_config"
    # It forks; the pid file is written once it listens.
    ip netns exec "$NS" "$SSHD" -f "$DIR/sshd_config" -E "$DIR/sshd.log"
    for ((k = 0; k < 200; k++)); do [ -s "$DIR/sshd.pid" ] && break; sleep 0.05; done
    [ -s "$DIR/sshd.pid" ] || { cat "$DIR/sshd.log" >&2; false; }
    ssh -F "$DIR/ssh_config" srv true || { cat "$DIR/sshd.log" >&2; false; }
    trap - ERR
    # shellcheck disable=SC1091
    . "$DIR/env"
    echo "namespace:     $NS (sshd on $ADDR:22, pid $(cat "$DIR/sshd.pid"), log $DIR/sshd.log)"
    echo "-e:            $RSH"
    echo "host:          srv (user $USER_NAME)"
    echo "remote dir:    $REMOTE_DIR"
    echo "remote urmove: ${REMOTE_URMOVE:-(none: give URMOVE=)}"
    echo "shell:         . $DIR/env"
}

case $CMD in
    up) up ;;
    down) down ;;
    *) die "usage: $0 up|down DIR" ;;
esac
