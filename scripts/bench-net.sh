#!/usr/bin/env bash
# Network and transfer benchmark: urmove against its peers, in one run.
#
# Sections (all by default, in this order):
#   net    urmove bench --net vs iperf3, memory to memory on loopback: iperf3
#          as one process (-P $STREAMS: iperf3 3.12 runs all its streams on one
#          thread) and as $STREAMS processes side by side, each its own server,
#          rates summed (IPERF_TCP); the best of them is "iperf3 best"
#   veth   the same between two network namespaces joined by a veth pair
#   file   urmove send of one BIG_MB file vs rsync (rsync daemon on 127.0.0.1;
#          rsync -a, and rsync -a -W --inplace) vs scp (sshd on
#          127.0.0.1:$SSH_PORT; default cipher, and -c aes128-gcm@openssh.com),
#          cold cache, data on disk at the end; plus the limit the disk sets:
#          fio reading the source while fio writes as much to the destination
#          directory, concurrently; each peer's best configuration is named
#   tree   the same tools on a tree of TREE_FILES files of TREE_KB KiB
#   scale  urmove send of trees of SCALE_COUNTS files of 4 KiB: files/s per count
#   mem    peak RSS (/usr/bin/time -v) of urmove send and recv for a 1 GiB and
#          an 8 GiB file
#   crypt  the cost of --encrypt (AES-256-GCM): bench --net on loopback and
#          send of the BIG_MB file, each with and without it, alternating
#   udp    urmove bench --net --udp vs iperf3 -u -b 0 -l SIZE on loopback, as
#          fast as each sends, at each of UDP_SIZES: received rate and loss;
#          iperf3 as one process and as $STREAMS processes (IPERF_UDP)
# Each comparison runs ROUNDS times, tool order rotated per round; the script
# prints Markdown tables of medians and urmove/peer ratios (against each peer's
# best configuration, by median), then every round value. Every caption names
# the peers' versions (from their own --version) and configurations.
#
# Usage (as root):
#   scripts/bench-net.sh                      # every section
#   scripts/bench-net.sh net veth             # only these sections
#   scripts/bench-net.sh no-mem no-scale      # every section but these
#   ROUNDS=5 DUR=10 BIG_MB=4096 scripts/bench-net.sh file
#
# Environment:
#   ROUNDS=3            rounds per test and tool
#   DUR=10              seconds per network test (bench --net and iperf3 -t)
#   STREAMS=4           TCP streams (urmove -P, iperf3 -P or processes)
#   IPERF_TCP="P procs P-l1M procs-l1M"   iperf3 configurations of net and
#                       veth: one process -P STREAMS (P), STREAMS processes of
#                       -P 1 (procs); -l1M: 1 MiB writes instead of 128 KiB
#   IPERF_UDP="1proc procs"   iperf3 configurations of udp: one process, or
#                       STREAMS processes (one flow each)
#   RSYNC_CONFIGS="a W"  rsync configurations: a (rsync -a), W (rsync -a -W
#                       --inplace: whole files, written in place; new copies)
#   SCP_CIPHERS="default aes128-gcm@openssh.com"   scp configurations (-c)
#   UDP_SIZES="1460 8192"   datagram payload sizes of the udp section
#   BIG_MB=4096         size of the single file in MiB (random data, created once)
#   TREE_FILES=10000    files in the tree
#   TREE_KB=64          KiB per tree file
#   SCALE_COUNTS="1000 10000 100000"   file counts of the 4 KiB scaling trees
#   SCALE_SLOW_S=120    a scaling count whose first run took longer than this
#                       runs only once
#   SCP_TREE_TIMEOUT=600  seconds before scp -r of the tree is given up (n/a)
#   MEM_SMALL_MB=1024 MEM_BIG_MB=8192   file sizes of the memory section
#   TIMEOUT=900         seconds before any single tool run counts as hung
#   WORKDIR=/var/tmp/urmove-bench-net   work dir (sources, destinations, keys)
#   URMOVE=             urmove binary (default: cargo build --release in this repo)
#   KEEP=1              keep the generated files in $WORKDIR on exit
#   IPERF_PORT=15201 RSYNC_PORT=18730 SSH_PORT=2222   peer daemons' ports
#   NS_A=urmbench-a NS_B=urmbench-b   namespace names (10.201.0.1/30, 10.201.0.2/30)
#   TSV=                also write every round, configuration and version to
#                       this file, tab-separated (scripts/bench-all.sh reads it)
#   IPERF_PORT..IPERF_PORT+STREAMS-1 are the iperf3 servers' ports.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DUR=${DUR:-10}
STREAMS=${STREAMS:-4}
IPERF_TCP=${IPERF_TCP:-P procs P-l1M procs-l1M}
IPERF_UDP=${IPERF_UDP:-1proc procs}
RSYNC_CONFIGS=${RSYNC_CONFIGS:-a W}
SCP_CIPHERS=${SCP_CIPHERS:-default aes128-gcm@openssh.com}
TSV=${TSV:-}
UDP_SIZES=${UDP_SIZES:-1460 8192}
BIG_MB=${BIG_MB:-4096}
TREE_FILES=${TREE_FILES:-10000}
TREE_KB=${TREE_KB:-64}
SCALE_COUNTS=${SCALE_COUNTS:-1000 10000 100000}
SCALE_SLOW_S=${SCALE_SLOW_S:-120}
SCP_TREE_TIMEOUT=${SCP_TREE_TIMEOUT:-600}
MEM_SMALL_MB=${MEM_SMALL_MB:-1024}
MEM_BIG_MB=${MEM_BIG_MB:-8192}
TIMEOUT=${TIMEOUT:-900}
WORKDIR=${WORKDIR:-/var/tmp/urmove-bench-net}
URMOVE=${URMOVE:-}
KEEP=${KEEP:-0}
IPERF_PORT=${IPERF_PORT:-15201}
RSYNC_PORT=${RSYNC_PORT:-18730}
SSH_PORT=${SSH_PORT:-2222}
NS_A=${NS_A:-urmbench-a}
NS_B=${NS_B:-urmbench-b}
VETH_A=urmbvA
VETH_B=urmbvB
ADDR_A=10.201.0.1
ADDR_B=10.201.0.2

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CMDLINE="ROUNDS=$ROUNDS DUR=$DUR STREAMS=$STREAMS BIG_MB=$BIG_MB TREE_FILES=$TREE_FILES TREE_KB=$TREE_KB SCALE_COUNTS=\"$SCALE_COUNTS\" IPERF_TCP=\"$IPERF_TCP\" IPERF_UDP=\"$IPERF_UDP\" RSYNC_CONFIGS=\"$RSYNC_CONFIGS\" SCP_CIPHERS=\"$SCP_CIPHERS\" MEM_SMALL_MB=$MEM_SMALL_MB MEM_BIG_MB=$MEM_BIG_MB WORKDIR=$WORKDIR $0${*:+ $*}"

die() { echo "bench-net: $*" >&2; exit 1; }
log() { echo "bench-net: $(date +%H:%M:%S) $*" >&2; }

# --- sections -----------------------------------------------------------------
ALL_SECTIONS=(net veth file tree scale mem crypt udp)
declare -A RUN_SECTION=()
only=() skip=()
for a in "$@"; do
    case $a in
        no-*) skip+=("${a#no-}") ;;
        *) only+=("$a") ;;
    esac
done
for s in "${only[@]}" "${skip[@]}"; do
    [[ " ${ALL_SECTIONS[*]} " == *" $s "* ]] || die "unknown section '$s' (sections: ${ALL_SECTIONS[*]}; prefix no- to skip one)"
done
for s in "${ALL_SECTIONS[@]}"; do
    if [ ${#only[@]} -eq 0 ] || [[ " ${only[*]} " == *" $s "* ]]; then RUN_SECTION[$s]=1; fi
done
for s in "${skip[@]}"; do unset "RUN_SECTION[$s]"; done
want() { [ -n "${RUN_SECTION[$1]:-}" ]; }

# --- checks -----------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || die "must run as root (drops the page cache, creates network namespaces)"
command -v python3 >/dev/null || die "python3 not found (used for JSON parsing, statistics and file trees)"
for v in ROUNDS DUR STREAMS BIG_MB TREE_FILES TREE_KB SCALE_SLOW_S SCP_TREE_TIMEOUT MEM_SMALL_MB MEM_BIG_MB TIMEOUT; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
for c in $SCALE_COUNTS; do
    [[ $c =~ ^[1-9][0-9]*$ ]] || die "SCALE_COUNTS must be positive integers, got '$c'"
done
for c in $IPERF_TCP; do
    case $c in P|procs|P-l1M|procs-l1M) ;; *) die "IPERF_TCP: unknown configuration '$c' (P procs P-l1M procs-l1M)" ;; esac
done
for c in $IPERF_UDP; do
    case $c in 1proc|procs) ;; *) die "IPERF_UDP: unknown configuration '$c' (1proc procs)" ;; esac
done
for c in $RSYNC_CONFIGS; do
    case $c in a|W) ;; *) die "RSYNC_CONFIGS: unknown configuration '$c' (a W)" ;; esac
done
for v in IPERF_TCP IPERF_UDP RSYNC_CONFIGS SCP_CIPHERS; do
    [ -n "${!v// /}" ] || die "$v needs at least one configuration"
done
if want net || want veth || want udp; then
    command -v iperf3 >/dev/null || die "iperf3 not found; install the peers with ../shared/peers/setup.sh"
fi
if want veth; then command -v ip >/dev/null || die "ip (iproute2) not found"; fi
if want file || want tree; then
    command -v rsync >/dev/null || die "rsync not found; install the peers with ../shared/peers/setup.sh"
    if ! command -v scp >/dev/null || [ ! -x /usr/sbin/sshd ]; then
        die "scp or /usr/sbin/sshd not found (openssh-client, openssh-server)"
    fi
fi
if want file; then command -v fio >/dev/null || die "fio not found"; fi
if want mem && [ ! -x /usr/bin/time ]; then
    log "installing GNU time (/usr/bin/time)"
    apt-get install -y time >&2 || die "could not install the 'time' package"
fi

if [ -z "$URMOVE" ]; then
    log "building urmove (cargo build --release in $ROOT)"
    (cd "$ROOT" && cargo build --release >&2) || die "cargo build failed"
    URMOVE=$ROOT/target/release/urmove
fi
[ -x "$URMOVE" ] || die "urmove binary not executable: $URMOVE"

created_dir=0
if [ ! -d "$WORKDIR" ]; then mkdir -p "$WORKDIR"; created_dir=1; fi
WORKDIR=$(cd "$WORKDIR" && pwd)
WORK=$(mktemp -d)   # tool outputs, logs and the results list
KEY=$WORK/urmove.key
SSHD=$WORK/ssh
BIG=$WORKDIR/big.bin
TREE=$WORKDIR/tree-${TREE_FILES}x${TREE_KB}k
DST_UR=$WORKDIR/dst-urmove     # urmove recv --root
DST_RS=$WORKDIR/dst-rsync      # rsync daemon module 'ur'
DST_SCP=$WORKDIR/dst-scp
DST_FIO=$WORKDIR/dst-fio

STARTED_PIDS=()
CREATED_NS=()

cleanup() {
    local p
    for p in "${STARTED_PIDS[@]}"; do
        pkill -TERM -P "$p" 2>/dev/null || true    # a daemon run under /usr/bin/time
        if kill "$p" 2>/dev/null; then wait "$p" 2>/dev/null || true; fi
    done
    for p in "${CREATED_NS[@]}"; do ip netns del "$p" 2>/dev/null || true; done   # takes the veth pair along
    rm -rf "$DST_UR" "$DST_RS" "$DST_SCP" "$DST_FIO" "$WORKDIR/dst-mem" "$WORKDIR"/mem-*.bin
    if [ "$KEEP" = 1 ]; then
        log "keeping the sources in $WORKDIR (KEEP=1)"
    else
        rm -rf "$BIG" "$TREE" "$WORKDIR"/scale-*
        if [ "$created_dir" = 1 ]; then rmdir "$WORKDIR" 2>/dev/null || true; fi
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- helpers ----------------------------------------------------------------
# jget FILE PATH: print the value at a dotted path of the JSON document in FILE
# (text before the first '{' is skipped).
jget() {
    python3 - "$1" "$2" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
doc, _ = json.JSONDecoder().raw_decode(text[text.index("{"):])
for key in sys.argv[2].split("."):
    doc = doc[int(key)] if isinstance(doc, list) else doc[key]
print(doc)
EOF
}

ZC_WARN="zero-copy sends were copied by the kernel"
# run OUT CMD...: run CMD (under timeout) with stdout to OUT and stderr to
# OUT.err; show its stderr (but the expected zero-copy fallback warning on
# loopback/veth); on failure record it and return 1.
run() {
    local out=$1 rc=0; shift
    timeout -k 10 "$TIMEOUT" "$@" >"$out" 2>"$out.err" || rc=$?
    grep -v "$ZC_WARN" "$out.err" | sed 's/^/    | /' >&2 || true
    if [ "$rc" -ne 0 ]; then
        [ "$rc" -eq 124 ] && log "TIMEOUT after ${TIMEOUT}s"
        fail "exit $rc: $*"
        log "FAILED (exit $rc): $*"
        return 1
    fi
}

FAILS=$WORK/failures.txt
: >"$FAILS"
fail() { echo "$*" >>"$FAILS"; }   # works from inside $(...) too

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.6f\n", b - a }'; }

RESULTS=$WORK/results.tsv
: >"$RESULTS"
# record SECTION TOOL ROUND VALUE [EXTRA]
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "${5:-}" >>"$RESULTS"; }
CONFS=$WORK/confs.tsv
: >"$CONFS"
# record_conf SECTION TOOL DESCRIPTION: how TOOL ran in SECTION (captions, TSV)
record_conf() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$CONFS"; }

tcp_open() { # tcp_open [netns] host port
    if [ -n "$1" ]; then ip netns exec "$1" bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null
    else bash -c "exec 3<>/dev/tcp/$2/$3" 2>/dev/null; fi
}
wait_port() { # wait_port netns host port
    local i
    for (( i = 0; i < 100; i++ )); do tcp_open "$@" && return 0; sleep 0.1; done
    return 1
}

stop_pid() { # stop one of our own background processes (SIGTERM, then wait)
    local p=$1 q keep=()
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
    for q in "${STARTED_PIDS[@]}"; do [ "$q" != "$p" ] && keep+=("$q"); done
    STARTED_PIDS=("${keep[@]}")
}

# start_recv VAR ERRFILE ROOTDIR LISTEN [PREFIX...]: start urmove recv in the
# background (optionally under PREFIX, e.g. ip netns exec NS or /usr/bin/time),
# wait for its listening line and set VAR_PID / VAR_PORT.
start_recv() {
    local var=$1 err=$2 dir=$3 listen=$4 pid i port=""; shift 4
    mkdir -p "$dir"
    : >"$err"   # exists before the background job opens it
    local -a udp=()
    [ "${1:-}" = env ] && [ "${2:-}" = URMOVE_RECV_UDP=1 ] && { udp=(--udp); shift 2; }
    "$@" "$URMOVE" recv --listen "$listen" --root "$dir" --key-file "$KEY" "${udp[@]}" 2>"$err" &
    pid=$!; STARTED_PIDS+=("$pid")
    for (( i = 0; i < 100; i++ )); do
        port=$(sed -n 's/^urmove recv: listening on .*:\([0-9][0-9]*\), root .*/\1/p' "$err" | head -1 || true)
        [ -n "$port" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -n "$port" ] || { cat "$err" >&2; die "urmove recv did not start ($*)"; }
    printf -v "${var}_PID" '%s' "$pid"
    printf -v "${var}_PORT" '%s' "$port"
}

# make_file PATH MiB: random data, kept if it already has the size
make_file() {
    local f=$1 mb=$2
    if [ -f "$f" ] && [ "$(stat -c %s "$f")" -eq $(( mb * 1048576 )) ]; then return; fi
    log "creating $f (${mb} MiB of random data)"
    rm -f "$f"
    head -c $(( mb * 1048576 )) /dev/urandom >"$f"
    sync
}

# make_tree DIR COUNT KIB: COUNT files of KIB KiB random data, 1000 per subdirectory
make_tree() {
    local d=$1 n=$2 kb=$3
    if [ -f "$d/.complete" ]; then return; fi
    log "creating $d ($n files of $kb KiB)"
    rm -rf "$d"
    python3 - "$d" "$n" "$kb" <<'EOF'
import os, sys
d, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) * 1024
for i in range(n):
    sub = os.path.join(d, f"d{i // 1000:04d}")
    if i % 1000 == 0:
        os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, f"f{i:07d}"), "wb") as f:
        f.write(os.urandom(size))
EOF
    sync
    touch "$d/.complete"   # a marker (one more, empty file in the tree for every tool)
}

count_files() { find "$1" -type f | wc -l; }

# The peers' versions, each from the tool's own --version.
iperf3_version() { iperf3 --version 2>/dev/null | head -1 | awk '{ print "iperf3", $2 }'; }
rsync_version() { rsync --version 2>/dev/null | head -1 | awk '{ print "rsync", $3, "(protocol " $6 ")" }'; }
ssh_version() { ssh -V 2>&1 | cut -d, -f1 | awk '{ sub(/^OpenSSH_/, "", $1); print "OpenSSH", $1 }'; }
fio_version() { fio --version 2>/dev/null; }

space_mb() { df -Pm "$WORKDIR" | awk 'NR == 2 { print $4 }'; }

# --- daemons -----------------------------------------------------------------
"$URMOVE" keygen "$KEY" >/dev/null

RECV_PID="" RECV_PORT=""
start_loopback_recv() {
    [ -n "$RECV_PID" ] && return
    start_recv RECV "$WORK/recv.log" "$DST_UR" 127.0.0.1:0
    log "urmove recv on 127.0.0.1:$RECV_PORT (pid $RECV_PID, root $DST_UR)"
}

RSYNCD_PID=""
start_rsyncd() {
    [ -n "$RSYNCD_PID" ] && return
    tcp_open "" 127.0.0.1 "$RSYNC_PORT" && die "port $RSYNC_PORT is in use; set RSYNC_PORT"
    mkdir -p "$DST_RS"
    cat >"$WORK/rsyncd.conf" <<EOF
use chroot = no
pid file = $WORK/rsyncd.pid
[ur]
  path = $DST_RS
  read only = no
  uid = root
  gid = root
EOF
    rsync --daemon --no-detach --config="$WORK/rsyncd.conf" --address=127.0.0.1 \
        --port="$RSYNC_PORT" --log-file="$WORK/rsyncd.log" &
    RSYNCD_PID=$!; STARTED_PIDS+=("$RSYNCD_PID")
    wait_port "" 127.0.0.1 "$RSYNC_PORT" || die "rsync daemon did not start (see $WORK/rsyncd.log)"
    log "rsync daemon on 127.0.0.1:$RSYNC_PORT (pid $RSYNCD_PID, module ur -> $DST_RS)"
}

SSHD_PID=""
SSH_OPTS=()
SCP_DEFAULT_CIPHER=""
start_sshd() {
    [ -n "$SSHD_PID" ] && return
    tcp_open "" 127.0.0.1 "$SSH_PORT" && die "port $SSH_PORT is in use; set SSH_PORT"
    mkdir -p "$SSHD" /run/sshd; chmod 700 "$SSHD"
    ssh-keygen -q -t ed25519 -N '' -f "$SSHD/host_ed25519"
    ssh-keygen -q -t ed25519 -N '' -f "$SSHD/client_ed25519"
    cp "$SSHD/client_ed25519.pub" "$SSHD/authorized_keys"
    cat >"$SSHD/sshd_config" <<EOF
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $SSHD/host_ed25519
PidFile $SSHD/sshd.pid
AuthorizedKeysFile $SSHD/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 100
Subsystem sftp internal-sftp
EOF
    /usr/sbin/sshd -D -f "$SSHD/sshd_config" -E "$SSHD/sshd.log" &
    SSHD_PID=$!; STARTED_PIDS+=("$SSHD_PID")
    wait_port "" 127.0.0.1 "$SSH_PORT" || die "sshd did not start (see $SSHD/sshd.log)"
    SSH_OPTS=(-P "$SSH_PORT" -i "$SSHD/client_ed25519" -o StrictHostKeyChecking=no
              -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR)
    # the cipher client and server agree on by default, as ssh -v names it
    SCP_DEFAULT_CIPHER=$(ssh -v -p "$SSH_PORT" -i "$SSHD/client_ed25519" -o StrictHostKeyChecking=no \
        -o UserKnownHostsFile=/dev/null -o BatchMode=yes root@127.0.0.1 true 2>&1 \
        | sed -n 's/.*kex: client->server cipher: \([^ ]*\) .*/\1/p' | head -1 || true)
    SCP_DEFAULT_CIPHER=${SCP_DEFAULT_CIPHER:-unknown}
    log "sshd on 127.0.0.1:$SSH_PORT (pid $SSHD_PID, throwaway host and client keys in $SSHD)"
}

# --- network: bench --net vs iperf3 -----------------------------------------
# iperf3 3.12 (Debian bookworm's) runs every stream of one process on one
# thread; from 3.16 on each stream has a thread of its own. On a multi-core
# host its best is therefore several processes side by side, each with its
# own server, rates summed. Each configuration in IPERF_TCP is one of
#   P          one process, iperf3 -c -P STREAMS (default 128 KiB writes)
#   procs      STREAMS processes, iperf3 -c -P 1 each, each its own server port
#   P-l1M      as P with -l 1M (1 MiB writes)
#   procs-l1M  as procs with -l 1M
# and the table names the best of them (by median) and urmove's ratio to it.
iperf_conf() { # iperf_conf CONFIG: the words that describe it in a caption
    local l=""
    case $1 in *-l1M) l=" -l 1M" ;; esac
    case $1 in
        P*) echo "one process, iperf3 -c -P $STREAMS$l -t $DUR" ;;
        procs*) echo "$STREAMS processes side by side, iperf3 -c -P 1$l -t $DUR each, each to its own server (port), rates summed" ;;
    esac
}

# start_iperf_servers VAR NETNS ADDR COUNT: COUNT iperf3 servers on
# IPERF_PORT, IPERF_PORT+1, ...; their PIDs in the array VAR.
start_iperf_servers() {
    local -n pids_=$1
    local ns=$2 addr=$3 count=$4 i p
    local -a pre=()
    [ -n "$ns" ] && pre=(ip netns exec "$ns")
    pids_=()
    for (( i = 0; i < count; i++ )); do
        p=$(( IPERF_PORT + i ))
        # the client side of a netns pair cannot see the server's loopback
        [ -z "$ns" ] && tcp_open "" "$addr" "$p" && die "port $p is in use; set IPERF_PORT"
        "${pre[@]}" iperf3 -s -B "$addr" -p "$p" >"$WORK/iperf3-s-$p.log" 2>&1 &
        pids_+=($!); STARTED_PIDS+=($!)
    done
}
stop_iperf_servers() { # stop_iperf_servers PID...
    local p
    for p in "$@"; do stop_pid "$p"; done
}

# iperf_procs OUT COUNT PREFIX... -- ARGS...: COUNT iperf3 clients at once,
# the k-th to IPERF_PORT+k, each ARGS plus -J; prints the sum of the
# receivers' rates in bits/s and, with -u, "rate loss%" over all of them.
iperf_procs() {
    local out=$1 count=$2 i rc=0; shift 2
    local -a pre=() pids=()
    while [ "$1" != -- ]; do pre+=("$1"); shift; done
    shift
    for (( i = 0; i < count; i++ )); do
        run "$out.$i" "${pre[@]}" iperf3 -p $(( IPERF_PORT + i )) "$@" -J &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i" || rc=1; done
    [ "$rc" = 0 ] || return 1
    python3 - "$out" "$count" <<'EOF'
import json, sys
rate = lost = packets = 0
udp = False
for i in range(int(sys.argv[2])):
    r = json.load(open(f"{sys.argv[1]}.{i}"))["end"]["sum_received"]
    rate += r["bits_per_second"]
    if "lost_packets" in r:
        udp = True
        lost += r["lost_packets"]
        packets += r["packets"]
print(f"{rate} {100 * lost / packets if packets else 0}" if udp else rate)
EOF
}

# net_measure TOOL NETNS HOST PORT: print bits/s
net_measure() {
    local tool=$1 ns=$2 host=$3 port=$4 out=$WORK/net.json
    local -a pre=() len=()
    [ -n "$ns" ] && pre=(ip netns exec "$ns")
    case $tool in *-l1M) len=(-l 1M) ;; esac
    case $tool in
        urmove)
            run "$out" "${pre[@]}" "$URMOVE" bench --net "$host" -p "$port" -P "$STREAMS" \
                --time "${DUR}s" --key-file "$KEY" --json || return 1
            [ "$(jget "$out" status)" = ok ] || { fail "bench --net status != ok"; return 1; }
            jget "$out" rate_bits_per_s ;;
        iperf3-P*)
            run "$out" "${pre[@]}" iperf3 -c "$host" -p "$IPERF_PORT" -P "$STREAMS" "${len[@]}" -t "$DUR" -J || return 1
            jget "$out" end.sum_received.bits_per_second ;;
        iperf3-procs*)
            iperf_procs "$out" "$STREAMS" "${pre[@]}" -- -c "$host" -P 1 "${len[@]}" -t "$DUR" ;;
    esac
}

IPERF_TOOLS=()
for c in $IPERF_TCP; do IPERF_TOOLS+=("iperf3-$c"); done

# net_rounds SECTION CLIENT_NS HOST UR_PORT
net_rounds() {
    local sec=$1 ns=$2 host=$3 urport=$4 r tool val n
    local -a tools=(urmove "${IPERF_TOOLS[@]}") order
    n=${#tools[@]}
    record_conf "$sec" urmove "urmove bench --net -P $STREAMS --time ${DUR}s (defaults otherwise)"
    for tool in "${IPERF_TOOLS[@]}"; do record_conf "$sec" "$tool" "$(iperf_conf "${tool#iperf3-}")"; done
    for (( r = 0; r < ROUNDS; r++ )); do
        order=("${tools[@]:r % n}" "${tools[@]:0:r % n}")
        for tool in "${order[@]}"; do
            if val=$(net_measure "$tool" "$ns" "$host" "$urport"); then
                record "$sec" "$tool" $(( r + 1 )) "$val"
                log "$sec round $((r + 1))/$ROUNDS $tool: $(awk -v v="$val" 'BEGIN { printf "%.2f Gbit/s", v / 1e9 }')"
            else
                log "$sec round $((r + 1))/$ROUNDS $tool: failed"
            fi
        done
    done
}

section_net() {
    log "section net: loopback, $STREAMS streams, ${DUR}s; iperf3: $IPERF_TCP"
    start_loopback_recv
    local -a ipids=()
    start_iperf_servers ipids "" 127.0.0.1 "$STREAMS"
    wait_port "" 127.0.0.1 $(( IPERF_PORT + STREAMS - 1 )) || die "iperf3 -s did not start"
    wait_port "" 127.0.0.1 "$IPERF_PORT" || die "iperf3 -s did not start"
    net_rounds net "" 127.0.0.1 "$RECV_PORT"
    stop_iperf_servers "${ipids[@]}"
}

section_veth() {
    log "section veth: $NS_A ($ADDR_A) -> $NS_B ($ADDR_B), $STREAMS streams, ${DUR}s"
    if ip netns list | grep -qwE "^($NS_A|$NS_B)"; then
        log "skip veth: netns $NS_A or $NS_B already exists (delete it or set NS_A/NS_B)"
        fail "veth skipped: namespace exists"; return
    fi
    ip netns add "$NS_A" && CREATED_NS+=("$NS_A")
    ip netns add "$NS_B" && CREATED_NS+=("$NS_B")
    ip link add "$VETH_A" netns "$NS_A" type veth peer name "$VETH_B" netns "$NS_B"
    ip -n "$NS_A" addr add "$ADDR_A/30" dev "$VETH_A"
    ip -n "$NS_B" addr add "$ADDR_B/30" dev "$VETH_B"
    local ns
    for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
    ip -n "$NS_A" link set "$VETH_A" up
    ip -n "$NS_B" link set "$VETH_B" up
    local VR_PID VR_PORT
    start_recv VR "$WORK/recv-veth.log" "$DST_UR" "$ADDR_B:0" ip netns exec "$NS_B"
    local -a ipids=()
    start_iperf_servers ipids "$NS_B" "$ADDR_B" "$STREAMS"
    wait_port "$NS_A" "$ADDR_B" $(( IPERF_PORT + STREAMS - 1 )) || die "iperf3 -s in $NS_B did not start"
    wait_port "$NS_A" "$ADDR_B" "$IPERF_PORT" || die "iperf3 -s in $NS_B did not start"
    net_rounds veth "$NS_A" "$ADDR_B" "$VR_PORT"
    stop_iperf_servers "${ipids[@]}"
    stop_pid "$VR_PID"
    for ns in "${CREATED_NS[@]}"; do ip netns del "$ns"; done
    CREATED_NS=()
}

# --- UDP: bench --net --udp vs iperf3 -u ----------------------------------------
# IPERF_UDP: 1proc (one iperf3 -u flow) and/or procs (STREAMS processes,
# one flow each, each to its own server, rates and losses summed).
# udp_measure TOOL SIZE PORT: print "received-bits/s loss-percent"
udp_measure() {
    local tool=$1 size=$2 port=$3 out=$WORK/udp.json
    case $tool in
        urmove)
            run "$out" "$URMOVE" bench --net 127.0.0.1 -p "$port" --udp --size "$size" \
                --time "${DUR}s" --key-file "$KEY" --json || return 1
            [ "$(jget "$out" status)" = ok ] || { fail "bench --net --udp status != ok"; return 1; }
            echo "$(jget "$out" summary.received_bits_per_s) $(jget "$out" summary.loss_percent)" ;;
        iperf3-1proc)
            run "$out" iperf3 -c 127.0.0.1 -p "$IPERF_PORT" -u -b 0 -l "$size" -t "$DUR" -J || return 1
            echo "$(jget "$out" end.sum_received.bits_per_second) $(jget "$out" end.sum_received.lost_percent)" ;;
        iperf3-procs)
            iperf_procs "$out" "$STREAMS" -- -c 127.0.0.1 -u -b 0 -l "$size" -t "$DUR" ;;
    esac
}

section_udp() {
    log "section udp: loopback, datagrams of $UDP_SIZES bytes, ${DUR}s, as fast as each sends; iperf3: $IPERF_UDP"
    local UR_PID UR_PORT
    start_recv UR "$WORK/recv-udp.log" "$DST_UR" 127.0.0.1:0 env URMOVE_RECV_UDP=1
    local -a ipids=()
    start_iperf_servers ipids "" 127.0.0.1 "$STREAMS"
    wait_port "" 127.0.0.1 $(( IPERF_PORT + STREAMS - 1 )) || die "iperf3 -s did not start"
    wait_port "" 127.0.0.1 "$IPERF_PORT" || die "iperf3 -s did not start"
    local size r tool val c n
    local -a tools=(urmove) order
    for c in $IPERF_UDP; do tools+=("iperf3-$c"); done
    n=${#tools[@]}
    for size in $UDP_SIZES; do
        record_conf "udp-$size" urmove "urmove bench --net --udp --size $size --time ${DUR}s (one flow, unpaced)"
        record_conf "udp-$size" iperf3-1proc "one process, iperf3 -c -u -b 0 -l $size -t $DUR (one flow)"
        record_conf "udp-$size" iperf3-procs "$STREAMS processes side by side, iperf3 -c -u -b 0 -l $size -t $DUR each, each to its own server, rates and losses summed"
        for (( r = 0; r < ROUNDS; r++ )); do
            order=("${tools[@]:r % n}" "${tools[@]:0:r % n}")
            for tool in "${order[@]}"; do
                if val=$(udp_measure "$tool" "$size" "$UR_PORT"); then
                    record "udp-$size" "$tool" $(( r + 1 )) "${val% *}" "${val#* }"
                    log "udp $size round $((r + 1))/$ROUNDS $tool: $(awk -v v="${val% *}" 'BEGIN { printf "%.2f Gbit/s", v / 1e9 }'), loss ${val#* }%"
                else
                    log "udp $size round $((r + 1))/$ROUNDS $tool: failed"
                fi
            done
        done
    done
    stop_iperf_servers "${ipids[@]}"
    stop_pid "$UR_PID"
}

# --- transfers ----------------------------------------------------------------
# The peers' configurations: rsync-a (rsync -a, what most people type) and
# rsync-W (rsync -a -W --inplace: no delta algorithm and no temporary file
# renamed into place, the fastest correct way to make a new copy); scp-default
# (OpenSSH's default cipher, named in the caption) and scp-CIPHER (-c CIPHER).
rsync_flags() { # rsync_flags TOOL: its options, one word
    case $1 in rsync-a) echo "-a" ;; rsync-W) echo "-aW --inplace" ;; esac
}
PEER_TOOLS=()
for c in $RSYNC_CONFIGS; do PEER_TOOLS+=("rsync-$c"); done
for c in $SCP_CIPHERS; do PEER_TOOLS+=("scp-$c"); done
xfer_confs() { # xfer_confs SECTION: describe the transfer tools
    local t
    record_conf "$1" urmove "urmove send -P $STREAMS to urmove recv on 127.0.0.1 (defaults otherwise)"
    for t in "${PEER_TOOLS[@]}"; do
        case $t in
            rsync-*) record_conf "$1" "$t" "rsync $(rsync_flags "$t") to an rsync daemon on 127.0.0.1, then sync" ;;
            scp-default) record_conf "$1" "$t" "scp$([ "$1" = tree ] && echo " -r") (SFTP protocol), default cipher ($SCP_DEFAULT_CIPHER), to sshd on 127.0.0.1, then sync" ;;
            scp-*) record_conf "$1" "$t" "scp$([ "$1" = tree ] && echo " -r") (SFTP protocol) -c ${t#scp-}, to sshd on 127.0.0.1, then sync" ;;
        esac
    done
}
# xfer TOOL SRC EXPECT_FILES: cold cache, empty destination; run one transfer
# and print its wall time in seconds (rsync and scp: including a sync after).
xfer() {
    local tool=$1 src=$2 expect=$3 out=$WORK/xfer.out t0 t1 dst got
    local -a r=()
    [ -d "$src" ] && r=(-r)
    case $tool in
        urmove) dst=$DST_UR ;; rsync-*) dst=$DST_RS ;; scp-*) dst=$DST_SCP ;;
    esac
    find "$dst" -mindepth 1 -delete 2>/dev/null || true
    mkdir -p "$dst"
    drop_caches
    t0=$(now)
    case $tool in
        urmove)
            run "$out" "$URMOVE" send -p "$RECV_PORT" -P "$STREAMS" --key-file "$KEY" --json \
                "$src" 127.0.0.1: || return 1 ;;
        rsync-*)
            local -a rf
            read -ra rf <<<"$(rsync_flags "$tool")"
            run "$out" rsync "${rf[@]}" "$src" "rsync://127.0.0.1:$RSYNC_PORT/ur/" || return 1
            sync ;;
        scp-*)
            local tmo=$TIMEOUT
            local -a cipher=()
            [ "$tool" != scp-default ] && cipher=(-c "${tool#scp-}")
            [ -d "$src" ] && tmo=$SCP_TREE_TIMEOUT
            TIMEOUT=$tmo run "$out" scp -q "${r[@]}" "${SSH_OPTS[@]}" "${cipher[@]}" "$src" "root@127.0.0.1:$dst/" || return 1
            sync ;;
    esac
    t1=$(now)
    if [ "$tool" = urmove ]; then
        local st f fv
        st=$(jget "$out" status); f=$(jget "$out" files); fv=$(jget "$out" files_verified)
        if [ "$st" != ok ] || [ "$f" != "$expect" ] || [ "$fv" != "$expect" ]; then
            fail "urmove send $src: status=$st files=$f files_verified=$fv, expected $expect"
            log "urmove send: status=$st files=$f files_verified=$fv, expected $expect"
            return 1
        fi
    fi
    got=$(count_files "$dst")
    if [ "$got" != "$expect" ]; then
        fail "$tool $src: $got files at the destination, expected $expect"
        log "$tool: $got files at the destination, expected $expect"
        return 1
    fi
    if [ ! -d "$src" ] && [ "$(stat -c %s "$dst/$(basename "$src")")" != "$(stat -c %s "$src")" ]; then
        fail "$tool $src: size differs at the destination"
        return 1
    fi
    elapsed "$t0" "$t1"
}

# disk_limit: fio reads BIG while a second fio job writes as much into the
# destination directory, concurrently; prints "limit read_bw write_bw" in bytes/s.
disk_limit() {
    local out=$WORK/fio.json
    rm -rf "$DST_FIO"; mkdir -p "$DST_FIO"
    drop_caches
    run "$out" fio --output-format=json --ioengine=io_uring --direct=1 --bs=4M --iodepth=8 \
        --invalidate=1 \
        --name=read "--filename=$BIG" --rw=read "--size=${BIG_MB}M" \
        --name=write "--filename=$DST_FIO/fio.dat" --rw=write "--size=${BIG_MB}M" --end_fsync=1 \
        || return 1
    rm -rf "$DST_FIO"
    python3 - "$out" "$(( BIG_MB * 1048576 ))" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
doc, _ = json.JSONDecoder().raw_decode(text[text.index("{"):])
nbytes = int(sys.argv[2])
jobs = {j["jobname"]: j for j in doc["jobs"]}
r, w = jobs["read"]["read"], jobs["write"]["write"]
# the pair moves nbytes each way; the slower job's runtime is the pair's time
slow_ms = max(r["runtime"], w["runtime"])
print(nbytes / (slow_ms / 1000), r["bw_bytes"], w["bw_bytes"])
EOF
}

# big_file_ready SECTION: make $BIG (once) when there is room for it and a
# copy at the destination; otherwise record the section as skipped.
big_file_ready() {
    local need=$(( BIG_MB * 2 + 1024 ))
    [ -f "$BIG" ] && need=$(( need - BIG_MB ))
    if [ "$(space_mb)" -lt "$need" ]; then
        log "skip $1: need $need MiB free in $WORKDIR, have $(space_mb) MiB"
        fail "$1 skipped: not enough space"; return 1
    fi
    make_file "$BIG" "$BIG_MB"
}

section_file() {
    log "section file: one ${BIG_MB} MiB file"
    big_file_ready file || return 0
    start_loopback_recv; start_rsyncd; start_sshd
    xfer_confs file
    record_conf file disk "$(fio_version): two concurrent jobs, io_uring, O_DIRECT, bs 4M, iodepth 8: one reads the source, one writes ${BIG_MB} MiB into the destination directory (end_fsync=1)"
    local -a tools=(urmove "${PEER_TOOLS[@]}" disk) order
    local r tool val n=${#tools[@]} bytes=$(( BIG_MB * 1048576 ))
    for (( r = 0; r < ROUNDS; r++ )); do
        order=("${tools[@]:r % n}" "${tools[@]:0:r % n}")
        for tool in "${order[@]}"; do
            if [ "$tool" = disk ]; then
                if val=$(disk_limit); then
                    local -a lim
                    read -ra lim <<<"$val"
                    record file disk $(( r + 1 )) "${lim[0]}" "${lim[1]} ${lim[2]}"
                    log "file round $((r + 1))/$ROUNDS disk limit: $(awk -v v="${lim[0]}" -v a="${lim[1]}" -v b="${lim[2]}" 'BEGIN { printf "%.0f MB/s (fio read %.0f, write %.0f concurrently)", v / 1e6, a / 1e6, b / 1e6 }')"
                else
                    log "file round $((r + 1))/$ROUNDS disk limit: failed"
                fi
                continue
            fi
            if val=$(xfer "$tool" "$BIG" 1); then
                record file "$tool" $(( r + 1 )) "$(awk -v b="$bytes" -v s="$val" 'BEGIN { printf "%.1f", b / s }')" "$val"
                log "file round $((r + 1))/$ROUNDS $tool: $(awk -v b="$bytes" -v s="$val" 'BEGIN { printf "%.0f MB/s (%.2f s)", b / s / 1e6, s }')"
            else
                log "file round $((r + 1))/$ROUNDS $tool: failed"
            fi
        done
    done
    find "$DST_UR" "$DST_RS" "$DST_SCP" -mindepth 1 -delete 2>/dev/null || true
}

section_tree() {
    log "section tree: $TREE_FILES files of $TREE_KB KiB"
    local need=$(( TREE_FILES * (TREE_KB + 4) * 2 / 1024 + 1024 ))
    if [ "$(space_mb)" -lt "$need" ]; then
        log "skip tree: need $need MiB free in $WORKDIR, have $(space_mb) MiB"
        fail "tree skipped: not enough space"; return
    fi
    make_tree "$TREE" "$TREE_FILES" "$TREE_KB"
    start_loopback_recv; start_rsyncd; start_sshd
    xfer_confs tree
    local -a tools=(urmove "${PEER_TOOLS[@]}") order
    local r tool val n=${#tools[@]} expect=$(( TREE_FILES + 1 ))
    for (( r = 0; r < ROUNDS; r++ )); do
        order=("${tools[@]:r % n}" "${tools[@]:0:r % n}")
        for tool in "${order[@]}"; do
            if val=$(xfer "$tool" "$TREE" "$expect"); then
                record tree "$tool" $(( r + 1 )) "$val"
                log "tree round $((r + 1))/$ROUNDS $tool: $(awk -v n="$TREE_FILES" -v s="$val" 'BEGIN { printf "%.0f files/s (%.2f s)", n / s, s }')"
            else
                log "tree round $((r + 1))/$ROUNDS $tool: failed"
            fi
        done
    done
    find "$DST_UR" "$DST_RS" "$DST_SCP" -mindepth 1 -delete 2>/dev/null || true
}

section_scale() {
    log "section scale: urmove send of trees of ($SCALE_COUNTS) files of 4 KiB"
    local -a counts order
    read -ra counts <<<"$SCALE_COUNTS"
    local c r val n=${#counts[@]}
    declare -A slow=()
    local total=0
    for c in "${counts[@]}"; do total=$(( total + c )); done
    if [ "$(space_mb)" -lt $(( total * 8 * 2 / 1024 + 1024 )) ]; then
        log "skip scale: not enough space"; fail "scale skipped: not enough space"; return
    fi
    for c in "${counts[@]}"; do make_tree "$WORKDIR/scale-$c" "$c" 4; done
    start_loopback_recv
    for (( r = 0; r < ROUNDS; r++ )); do
        order=("${counts[@]:r % n}" "${counts[@]:0:r % n}")
        for c in "${order[@]}"; do
            if [ -n "${slow[$c]:-}" ]; then
                log "scale round $((r + 1))/$ROUNDS $c files: skipped (first run took over ${SCALE_SLOW_S}s)"
                continue
            fi
            if val=$(xfer urmove "$WORKDIR/scale-$c" $(( c + 1 ))); then
                record scale "$c" $(( r + 1 )) "$val"
                log "scale round $((r + 1))/$ROUNDS $c files: $(awk -v n="$c" -v s="$val" 'BEGIN { printf "%.0f files/s (%.2f s)", n / s, s }')"
                if awk -v s="$val" -v m="$SCALE_SLOW_S" 'BEGIN { exit !(s > m) }'; then slow[$c]=1; fi
            else
                log "scale round $((r + 1))/$ROUNDS $c files: failed"
            fi
        done
    done
    find "$DST_UR" -mindepth 1 -delete 2>/dev/null || true
}

# --- encryption cost --------------------------------------------------------------
# crypt_measure KIND MODE: KIND net (bits/s of bench --net) or send (bytes/s
# of a cold-cache send of $BIG); MODE plain or sealed (--encrypt).
crypt_measure() {
    local kind=$1 mode=$2 out=$WORK/crypt.json
    local -a enc=()
    [ "$mode" = sealed ] && enc=(--encrypt)
    case $kind in
        net)
            run "$out" "$URMOVE" bench --net 127.0.0.1 -p "$RECV_PORT" -P "$STREAMS" \
                --time "${DUR}s" --key-file "$KEY" --json "${enc[@]}" || return 1
            [ "$(jget "$out" status)" = ok ] || { fail "bench --net $mode status != ok"; return 1; }
            jget "$out" rate_bits_per_s ;;
        send)
            find "$DST_UR" -mindepth 1 -delete 2>/dev/null || true
            drop_caches
            run "$out" "$URMOVE" send -p "$RECV_PORT" -P "$STREAMS" --key-file "$KEY" --json \
                "${enc[@]}" "$BIG" 127.0.0.1: || return 1
            if [ "$(jget "$out" status)" != ok ] || [ "$(jget "$out" files_verified)" != 1 ]; then
                fail "send $mode: status=$(jget "$out" status)"; return 1
            fi
            awk -v b="$(jget "$out" rate_bits_per_s)" 'BEGIN { printf "%.1f", b / 8 }' ;;
    esac
}

section_crypt() {
    log "section crypt: --encrypt vs plain, bench --net ${DUR}s and send of ${BIG_MB} MiB"
    big_file_ready crypt || return 0
    start_loopback_recv
    local -a modes=(plain sealed) order
    local r kind mode val
    for kind in net send; do
        for (( r = 0; r < ROUNDS; r++ )); do
            order=("${modes[@]:r % 2}" "${modes[@]:0:r % 2}")
            for mode in "${order[@]}"; do
                if val=$(crypt_measure "$kind" "$mode"); then
                    record "crypt-$kind" "$mode" $(( r + 1 )) "$val"
                    log "crypt $kind round $((r + 1))/$ROUNDS $mode: $(awk -v k="$kind" -v v="$val" 'BEGIN { if (k == "net") printf "%.2f Gbit/s", v / 1e9; else printf "%.0f MB/s", v / 1e6 }')"
                else
                    log "crypt $kind round $((r + 1))/$ROUNDS $mode: failed"
                fi
            done
        done
    done
    find "$DST_UR" -mindepth 1 -delete 2>/dev/null || true
}

# --- memory ---------------------------------------------------------------------
maxrss() { awk -F': ' '/Maximum resident set size/ { print $2 }' "$1"; }

mem_one() { # mem_one LABEL FILE
    local label=$1 f=$2 dir=$WORKDIR/dst-mem M_PID M_PORT child out=$WORK/mem.out
    rm -rf "$dir"
    start_recv M "$WORK/recv-mem.log" "$dir" 127.0.0.1:0 /usr/bin/time -v -o "$WORK/recv.time"
    drop_caches
    if run "$out" /usr/bin/time -v -o "$WORK/send.time" "$URMOVE" send -p "$M_PORT" -P "$STREAMS" \
            --key-file "$KEY" --json "$f" 127.0.0.1: \
        && [ "$(jget "$out" status)" = ok ]; then
        record mem "send-$label" 1 "$(maxrss "$WORK/send.time")"
    else
        log "mem $label: send failed"
    fi
    # SIGTERM the daemon itself (its parent, time, would not report if killed)
    child=$(pgrep -P "$M_PID" | head -1 || true)
    [ -n "$child" ] && kill "$child"
    local i
    for (( i = 0; i < 300; i++ )); do kill -0 "$M_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$M_PID" 2>/dev/null; then
        fail "urmove recv did not exit within 30 s of SIGTERM"
        log "urmove recv did not exit within 30 s of SIGTERM"
    fi
    stop_pid "$M_PID"
    if [ -s "$WORK/recv.time" ]; then
        record mem "recv-$label" 1 "$(maxrss "$WORK/recv.time")"
    fi
    log "mem $label: send max RSS $(maxrss "$WORK/send.time") kB, recv max RSS $(maxrss "$WORK/recv.time" 2>/dev/null) kB"
    rm -rf "$dir"
}

section_mem() {
    log "section mem: peak RSS for ${MEM_SMALL_MB} MiB and ${MEM_BIG_MB} MiB files"
    local need=$(( MEM_SMALL_MB * 2 + MEM_BIG_MB * 2 + 1024 ))
    if [ "$(space_mb)" -lt "$need" ]; then
        log "skip mem: need $need MiB free in $WORKDIR, have $(space_mb) MiB"
        fail "mem skipped: not enough space"; return
    fi
    make_file "$WORKDIR/mem-small.bin" "$MEM_SMALL_MB"
    mem_one small "$WORKDIR/mem-small.bin"
    rm -f "$WORKDIR/mem-small.bin"
    make_file "$WORKDIR/mem-big.bin" "$MEM_BIG_MB"
    mem_one big "$WORKDIR/mem-big.bin"
    rm -f "$WORKDIR/mem-big.bin"
}

# --- run --------------------------------------------------------------------
START=$(date +%s)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
for s in "${ALL_SECTIONS[@]}"; do
    want "$s" && "section_$s"
done
RECV_HWM=""
if [ -n "$RECV_PID" ]; then
    RECV_HWM=$(awk '/VmHWM/ { print $2 }' "/proc/$RECV_PID/status" 2>/dev/null || true)
    stop_pid "$RECV_PID"
fi
ELAPSED=$(( $(date +%s) - START ))
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# --- report -----------------------------------------------------------------
FS=$(findmnt -no FSTYPE,SOURCE -T "$WORKDIR" 2>/dev/null | awk '{ print $1 " on " $2 }' || true)
[ -n "$FS" ] || FS=$(df -PT "$WORKDIR" | awk 'NR == 2 { print $2 " on " $1 }')
V_IPERF3=$(iperf3_version 2>/dev/null || true)
V_RSYNC=$(rsync_version 2>/dev/null || true)
V_SSH=$(ssh_version 2>/dev/null || true)
V_FIO=$(fio_version 2>/dev/null || true)
COMMIT=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo "?")
if [ -n "$(cd "$ROOT" && git status --porcelain 2>/dev/null)" ]; then COMMIT="$COMMIT, dirty tree"; fi

STREAMS=$STREAMS DUR=$DUR BIG_MB=$BIG_MB TREE_FILES=$TREE_FILES TREE_KB=$TREE_KB \
MEM_SMALL_MB=$MEM_SMALL_MB MEM_BIG_MB=$MEM_BIG_MB SCALE_COUNTS="$SCALE_COUNTS" \
SCALE_SLOW_S=$SCALE_SLOW_S V_IPERF3="$V_IPERF3" V_RSYNC="$V_RSYNC" V_SSH="$V_SSH" V_FIO="$V_FIO" \
SCP_CIPHER="${SCP_DEFAULT_CIPHER:-default}" TSV="$TSV" python3 - "$RESULTS" "$CONFS" <<'EOF'
import os, sys
from collections import defaultdict
from statistics import median

vals = defaultdict(list)     # (section, tool) -> [value per round]
extra = defaultdict(list)
rounds = []
for line in open(sys.argv[1]):
    sec, tool, rnd, v, x = line.rstrip("\n").split("\t")
    vals[sec, tool].append(float(v))
    extra[sec, tool].append(x)
    rounds.append((sec, tool, rnd, v, x))
conf = {}
for line in open(sys.argv[2]):
    sec, tool, text = line.rstrip("\n").split("\t")
    conf[sec, tool] = text

E = os.environ
streams, dur = E["STREAMS"], E["DUR"]
big_mb, tree_files, tree_kb = int(E["BIG_MB"]), int(E["TREE_FILES"]), int(E["TREE_KB"])
V = {"iperf3": E["V_IPERF3"] or "iperf3 (version unknown)", "rsync": E["V_RSYNC"] or "rsync (version unknown)",
     "scp": E["V_SSH"] or "OpenSSH (version unknown)", "fio": E["V_FIO"] or "fio (version unknown)"}
cmp_rows = []      # rows of the README's comparison table: job, urmove, peer, ratio

def med(sec, tool):
    return median(vals[sec, tool]) if vals.get((sec, tool)) else None

def f(x, fmt):
    return "n/a" if x is None else format(x, fmt)

def ratio(a, b):
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}"

def tools_of(sec, prefix):
    return [t for (s, t) in vals if s == sec and t.startswith(prefix)]

def best(sec, prefix, lower=False):
    """The configuration of a peer with the best median in a section."""
    ts = [t for t in tools_of(sec, prefix) if med(sec, t) is not None]
    if not ts:
        return None
    return (min if lower else max)(ts, key=lambda t: med(sec, t))

NAMES = {"iperf3-P": f"iperf3 -P {streams}", "iperf3-procs": f"{streams} x iperf3 -P 1",
         "iperf3-P-l1M": f"iperf3 -P {streams} -l 1M", "iperf3-procs-l1M": f"{streams} x iperf3 -P 1 -l 1M",
         "iperf3-1proc": "iperf3 (1 process)", "iperf3-procs@udp": f"{streams} x iperf3",
         "rsync-a": "rsync -a", "rsync-W": "rsync -aW --inplace", "scp-default": f"scp (default: {E['SCP_CIPHER']})"}
def name(t, sec=""):
    if sec.startswith("udp-") and t == "iperf3-procs":
        return NAMES["iperf3-procs@udp"]
    if t.startswith("scp-") and t not in NAMES:
        return f"scp -c {t[4:]}"
    return NAMES.get(t, t)

def described(sec, ts):
    """A list of how each tool ran, for a caption."""
    return "\n".join(f"- {name(t, sec)}: {conf.get((sec, t), '(not recorded)')}" for t in ts)

out = []
net_secs = [s for s in ("net", "veth") if any(k[0] == s for k in vals)]
if net_secs:
    ips = sorted({t for s in net_secs for t in tools_of(s, "iperf3-")},
                 key=lambda t: list(NAMES).index(t) if t in NAMES else 99)
    out.append(f"### Memory to memory: urmove bench --net -P {streams} vs {V['iperf3']} at its best, {dur} s (Gbit/s)\n")
    out.append(f"{V['iperf3']} runs every stream of one process on one thread (from 3.16 on, a thread per "
               f"stream; Debian bookworm has 3.12), so on a multi-core host its best is several processes side "
               f"by side. Each configuration, as run:\n")
    out.append(described(net_secs[0], ["urmove"] + ips) + "\n")
    out.append("| path | urmove bench --net | " + " | ".join(name(t) for t in ips)
               + " | iperf3 best | urmove/iperf3 best |")
    out.append("|---" * (4 + len(ips)) + "|")
    for sec, label, job in (("net", "loopback 127.0.0.1", "loopback"), ("veth", "veth between two netns", "veth between two netns")):
        if sec not in net_secs:
            continue
        u = med(sec, "urmove")
        b = best(sec, "iperf3-")
        bv = med(sec, b) if b else None
        cells = [f(med(sec, t) and med(sec, t) / 1e9, ".2f") for t in ips]
        out.append(f"| {label} | {f(u and u / 1e9, '.2f')} | " + " | ".join(cells)
                   + f" | {name(b) if b else 'n/a'} | {ratio(u, bv)} |")
        cmp_rows.append((f"memory to memory, {job}, {streams} streams",
                         f"`bench --net -P {streams}`: {f(u and u / 1e9, '.1f')} Gbit/s",
                         f"{name(b) if b else 'n/a'} ({V['iperf3']}): {f(bv and bv / 1e9, '.1f')} Gbit/s",
                         ratio(u, bv)))
    out.append("")

udp = sorted((s for s in {s for s, _ in vals} if s.startswith("udp-")), key=lambda s: int(s[4:]))
if udp:
    ips = [t for t in ("iperf3-1proc", "iperf3-procs") if any((s, t) in vals for s in udp)]
    out.append(f"### UDP: urmove bench --net --udp vs {V['iperf3']} -u -b 0 -l SIZE at its best, loopback, {dur} s, as fast as each sends\n")
    out.append("Received rate (Gbit/s) and loss as each receiver counted them; each configuration, as run:\n")
    out.append(described(udp[0], ["urmove"] + ips).replace(f"-l {udp[0][4:]}", "-l SIZE").replace(f"--size {udp[0][4:]}", "--size SIZE") + "\n")
    out.append("| datagram | urmove Gbit/s | urmove loss % | " + " | ".join(f"{name(t, 'udp-')} Gbit/s | loss %" for t in ips)
               + " | iperf3 best | urmove/iperf3 best |")
    out.append("|---" * (5 + 2 * len(ips)) + "|")
    for sec in udp:
        loss = lambda t: f(median(float(x) for x in extra[sec, t]) if extra.get((sec, t)) else None, ".3f")
        u = med(sec, "urmove")
        b = best(sec, "iperf3-")
        bv = med(sec, b) if b else None
        cells = [f"{f(med(sec, t) and med(sec, t) / 1e9, '.2f')} | {loss(t)}" for t in ips]
        out.append(f"| {sec[4:]} B | {f(u and u / 1e9, '.2f')} | {loss('urmove')} | " + " | ".join(cells)
                   + f" | {name(b, sec) if b else 'n/a'} | {ratio(u, bv)} |")
        cmp_rows.append((f"UDP, {sec[4:]}-byte datagrams, loopback",
                         f"`bench --net --udp`: {f(u and u / 1e9, '.1f')} Gbit/s, {loss('urmove')}% lost",
                         f"{name(b, sec) if b else 'n/a'} -u -b 0 ({V['iperf3']}): {f(bv and bv / 1e9, '.1f')} Gbit/s, {loss(b) if b else 'n/a'}% lost",
                         ratio(u, bv)))
    out.append("")

if any(s.startswith("crypt-") for s, _ in vals):
    out.append(f"### Cost of --encrypt (AES-256-GCM per frame), {streams} streams, loopback (urmove alone)\n")
    out.append("| test | plain | --encrypt | encrypted/plain |")
    out.append("|---|---|---|---|")
    for sec, label, scale, unit in (("crypt-net", f"bench --net, {dur} s", 1e9, "Gbit/s"),
                                    ("crypt-send", f"send of one {big_mb} MiB file, cold cache", 1e6, "MB/s")):
        if (sec, "plain") in vals or (sec, "sealed") in vals:
            p, e = med(sec, "plain"), med(sec, "sealed")
            out.append(f"| {label} ({unit}) | {f(p and p / scale, '.2f')} | {f(e and e / scale, '.2f')} | {ratio(e, p)} |")
    out.append("")

def peers_in(sec):
    order = ["rsync-a", "rsync-W"]
    ts = tools_of(sec, "rsync-") + tools_of(sec, "scp-")
    return sorted(set(ts), key=lambda t: (order.index(t) if t in order else (2 if t == "scp-default" else 3), t))

if any(s == "file" for s, _ in vals):
    ps = peers_in("file")
    u, d = med("file", "urmove"), med("file", "disk")
    br, bs = best("file", "rsync-"), best("file", "scp-")
    out.append(f"### One {big_mb} MiB file, cold cache, data on disk at the end (MB/s): urmove send vs {V['rsync']} and {V['scp']} scp\n")
    out.append("Each configuration, as run:\n")
    out.append(described("file", ["urmove"] + ps + ["disk"]) + "\n")
    sc = lambda x: f(x and x / 1e6, ".0f")
    out.append("| urmove send | " + " | ".join(name(t) for t in ps)
               + " | disk limit (fio read + write) | urmove/rsync best | urmove/scp best | urmove/disk limit |")
    out.append("|---" * (5 + len(ps)) + "|")
    out.append(f"| {sc(u)} | " + " | ".join(sc(med("file", t)) for t in ps)
               + f" | {sc(d)} | {ratio(u, br and med('file', br))} ({name(br) if br else 'n/a'}) "
               f"| {ratio(u, bs and med('file', bs))} ({name(bs) if bs else 'n/a'}) | {ratio(u, d)} |")
    out.append("")
    if br:
        cmp_rows.append((f"one {big_mb} MiB file, disk to disk, synced", f"`send`: {sc(u)} MB/s",
                         f"{name(br)} to a daemon ({V['rsync']}): {sc(med('file', br))} MB/s", ratio(u, med("file", br))))
    if bs:
        cmp_rows.append((f"one {big_mb} MiB file, disk to disk, synced", f"`send`: {sc(u)} MB/s",
                         f"{name(bs)} ({V['scp']}): {sc(med('file', bs))} MB/s",
                         ratio(u, med("file", bs))))

if any(s == "tree" for s, _ in vals):
    ps = peers_in("tree")
    tb = tree_files * tree_kb * 1024
    ts = ["urmove"] + ps
    secs = {t: med("tree", t) for t in ts}
    fps = {t: (tree_files / v if v else None) for t, v in secs.items()}
    mbs = {t: (tb / v / 1e6 if v else None) for t, v in secs.items()}
    br, bs = best("tree", "rsync-", lower=True), best("tree", "scp-", lower=True)
    out.append(f"### Tree of {tree_files} files of {tree_kb} KiB, cold cache, data on disk at the end: urmove send vs {V['rsync']} and {V['scp']} scp -r\n")
    out.append("Each configuration, as run:\n")
    out.append(described("tree", ts) + "\n")
    out.append("| metric | urmove send | " + " | ".join(name(t) for t in ps) + " | urmove/rsync best | urmove/scp best |")
    out.append("|---" * (4 + len(ps)) + "|")
    for nm, dd, fmt in (("files/s", fps, ".0f"), ("MB/s", mbs, ".1f"), ("seconds", secs, ".2f")):
        rr = (f"{ratio(dd['urmove'], br and dd[br])} ({name(br) if br else 'n/a'})",
              f"{ratio(dd['urmove'], bs and dd[bs])} ({name(bs) if bs else 'n/a'})")
        if nm == "seconds":
            rr = ("", "")
        out.append(f"| {nm} | {f(dd['urmove'], fmt)} | " + " | ".join(f(dd[t], fmt) for t in ps) + f" | {rr[0]} | {rr[1]} |")
    out.append("")
    if br:
        cmp_rows.append((f"{tree_files} files of {tree_kb} KiB, synced", f"`send`: {f(fps['urmove'], '.0f')} files/s",
                         f"{name(br)} to a daemon ({V['rsync']}): {f(fps[br], '.0f')} files/s", ratio(fps["urmove"], fps[br])))
    if bs:
        cmp_rows.append((f"{tree_files} files of {tree_kb} KiB, synced", f"`send`: {f(fps['urmove'], '.0f')} files/s",
                         f"{name(bs).replace('scp', 'scp -r', 1)} ({V['scp']}): {f(fps[bs], '.0f')} files/s", ratio(fps["urmove"], fps[bs])))

counts = [c for c in E["SCALE_COUNTS"].split() if ("scale", c) in vals]
if counts:
    out.append("### Scaling: urmove send of trees of 4 KiB files, cold cache (urmove alone)\n")
    out.append("| files | rounds | seconds | files/s | MB/s |")
    out.append("|---|---|---|---|---|")
    fps = {}
    for c in counts:
        s = med("scale", c)
        fps[c] = int(c) / s
        out.append(f"| {c} | {len(vals['scale', c])} | {s:.2f} | {fps[c]:.0f} | {int(c) * 4096 / s / 1e6:.1f} |")
    lo = min(counts, key=int); hi = max(counts, key=int)
    if lo != hi:
        out.append(f"\nfiles/s at {hi} files / files/s at {lo} files: {fps[hi] / fps[lo]:.2f}")
    out.append("")

if any(s == "mem" for s, _ in vals):
    sm, bg = int(E["MEM_SMALL_MB"]), int(E["MEM_BIG_MB"])
    out.append(f"### Peak memory: max RSS (/usr/bin/time -v), one run per size (urmove alone)\n")
    out.append(f"| process | {sm} MiB file | {bg} MiB file | ratio {bg} MiB / {sm} MiB |")
    out.append("|---|---|---|---|")
    for p in ("send", "recv"):
        a, b = med("mem", f"{p}-small"), med("mem", f"{p}-big")
        mib = lambda kb: "n/a" if kb is None else f"{kb / 1024:.1f} MiB"
        out.append(f"| urmove {p} | {mib(a)} | {mib(b)} | {ratio(b, a)} |")
    out.append("")

print("\n".join(out))

print("Round values (medians above):\n")
print("```text")
names = {"net": "loopback Gbit/s", "veth": "veth Gbit/s", "file": "file MB/s",
         "tree": "tree seconds", "scale": "scale seconds", "mem": "max RSS kB",
         "crypt-net": "crypt Gbit/s", "crypt-send": "crypt MB/s"}
order = ["net", "veth", "file", "tree", "scale", "mem", "crypt-net", "crypt-send"]
order += sorted({s for s, _ in vals if s.startswith("udp-")}, key=lambda s: int(s[4:]))
names.update({s: f"udp {s[4:]} B Gbit/s" for s in order if s.startswith("udp-")})
tools = ["urmove"] + list(NAMES) + ["disk"]
def key(k):
    sec, tool = k
    t = tools.index(tool) if tool in tools else (int(tool) if tool.isdigit() else len(tools))
    return (order.index(sec), t, tool)
for (sec, tool), vs in sorted(vals.items(), key=lambda kv: key(kv[0])):
    if sec in ("net", "veth", "crypt-net"):
        shown = ", ".join(f"{v / 1e9:.2f}" for v in vs)
    elif sec.startswith("udp-"):
        shown = ", ".join(f"{v / 1e9:.2f} ({float(x):.3f}% lost)" for v, x in zip(vs, extra[sec, tool]))
    elif sec == "crypt-send":
        shown = ", ".join(f"{v / 1e6:.0f}" for v in vs)
    elif sec == "file":
        shown = ", ".join(f"{v / 1e6:.0f}" for v in vs)
        if tool == "disk":
            shown += "  (fio read, write MB/s per round: " + "; ".join(
                ", ".join(f"{float(x) / 1e6:.0f}" for x in e.split()) for e in extra[sec, tool]) + ")"
    elif sec in ("tree", "scale"):
        shown = ", ".join(f"{v:.2f}" for v in vs)
    else:
        shown = ", ".join(f"{v:.0f}" for v in vs)
    label = f"{tool} files" if sec == "scale" else name(tool, sec)
    print(f"  {names[sec]:16} {label:40} {shown}")
print("```")

if E.get("TSV"):
    with open(E["TSV"], "a") as t:
        clean = lambda x: str(x).replace("\t", " ").replace("\n", " ")
        for r in rounds:
            t.write("\t".join(["round", "net"] + [clean(x) for x in r]) + "\n")
        for (sec, tool), text in conf.items():
            t.write("\t".join(["conf", "net", sec, tool, clean(text)]) + "\n")
        for k in ("iperf3", "rsync", "scp", "fio"):
            if any(s for s, tl in vals if tl.startswith(k) or (k == "fio" and tl == "disk")):
                t.write("\t".join(["version", "net", k if k != "scp" else "openssh", V[k]]) + "\n")
        for row in cmp_rows:
            t.write("\t".join(["cmp", "net"] + [clean(x) for x in row]) + "\n")
EOF

if [ -s "$FAILS" ]; then
    echo
    echo "Failures and skips:"
    echo
    sed 's/^/- /' "$FAILS"
fi

echo
echo "How it was measured: MB/s are decimal (1e6 bytes/s), Gbit/s are 1e9 bit/s; ratios are of medians,"
echo "against each peer's best configuration (by median) in this run; tool order rotated each round;"
echo "source and destinations on the same disk ($FS)."
echo
if want net || want veth; then cat <<EOF
- Network: urmove bench --net at its defaults (256 KiB frames, no checksums) with
  -P $STREAMS against each iperf3 configuration above, iperf3's receiver-side rate
  (summed over the processes where there are several); veth: clients in
  $NS_A ($ADDR_A), servers in $NS_B ($ADDR_B).
EOF
fi
if want udp; then cat <<EOF
- UDP: urmove bench --net --udp (GSO writes, GRO reads, one flow) vs iperf3 -u -b 0
  -l SIZE, both as fast as they send; received rate and loss as each receiver
  counted them (several iperf3 processes: rates summed, loss over all datagrams).
EOF
fi
if want file || want tree || want scale; then cat <<EOF
- Transfers: page cache dropped and destination emptied before every run; times
  are wall clock from start to end of the client process. urmove send ends after
  the receiver fsynced every file; rsync (to an rsync daemon on 127.0.0.1) and
  scp (sshd on 127.0.0.1:$SSH_PORT) are followed by a system-wide sync that is
  included in their time. Every run's file count (and a file's size) is checked
  at the destination; a run that copied less counts as failed.
EOF
fi
if want file; then cat <<EOF
- Disk limit: one fio run, two concurrent jobs (io_uring, O_DIRECT, 4 MiB, iodepth
  8): one reads the source file, one writes ${BIG_MB} MiB into the destination
  directory (end_fsync=1); limit = ${BIG_MB} MiB / runtime of the slower job.
EOF
fi
if want tree || want scale; then cat <<EOF
- Trees: 1000 files per directory plus one empty marker file (.complete), which
  every tool copies. Scaling counts whose first run took over ${SCALE_SLOW_S}s ran once.
EOF
fi
if want mem; then cat <<EOF
- Memory: max RSS from /usr/bin/time -v; urmove recv started under it and
  stopped with SIGTERM after the send; one run per size.
EOF
fi
if [ -n "$RECV_HWM" ]; then echo "- The long-lived loopback urmove recv daemon's peak RSS (VmHWM) after all sections: $RECV_HWM kB."; fi

cat <<EOF

\`\`\`text
Command: $CMDLINE
Date:    $(date -Is)
Kernel:  $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) RAM
Workdir: $WORKDIR on ${FS}
urmove:  $URMOVE ($COMMIT)
Peers:   $V_IPERF3, $V_RSYNC, $V_SSH, $V_FIO
Load:    $LOAD_START at start, $LOAD_END at end (1/5/15 min)
Rounds:  $ROUNDS, ${DUR}s per network test, took ${ELAPSED}s
\`\`\`
EOF
