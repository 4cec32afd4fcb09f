#!/usr/bin/env bash
# Network and transfer benchmark: urmove against its peers, in one run.
#
# Sections (all by default, in this order):
#   net    urmove bench --net vs iperf3 -P $STREAMS, memory to memory on loopback
#   veth   the same between two network namespaces joined by a veth pair
#   file   urmove send of one BIG_MB file vs rsync (rsync daemon on 127.0.0.1)
#          vs scp (sshd on 127.0.0.1:$SSH_PORT), cold cache, data on disk at
#          the end; plus the limit the disk sets: fio reading the source while
#          fio writes as much to the destination directory, concurrently
#   tree   the same three tools on a tree of TREE_FILES files of TREE_KB KiB
#   scale  urmove send of trees of SCALE_COUNTS files of 4 KiB: files/s per count
#   mem    peak RSS (/usr/bin/time -v) of urmove send and recv for a 1 GiB and
#          an 8 GiB file
#   crypt  the cost of --encrypt (AES-256-GCM): bench --net on loopback and
#          send of the BIG_MB file, each with and without it, alternating
#   udp    urmove bench --net --udp vs iperf3 -u -b 0 -l SIZE on loopback, as
#          fast as each sends, at each of UDP_SIZES: received rate and loss
# Each comparison runs ROUNDS times, tool order rotated per round; the script
# prints Markdown tables of medians and urmove/peer ratios, then every round value.
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
#   STREAMS=4           TCP streams (urmove -P, iperf3 -P)
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
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DUR=${DUR:-10}
STREAMS=${STREAMS:-4}
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
CMDLINE="ROUNDS=$ROUNDS DUR=$DUR STREAMS=$STREAMS BIG_MB=$BIG_MB TREE_FILES=$TREE_FILES TREE_KB=$TREE_KB SCALE_COUNTS=\"$SCALE_COUNTS\" MEM_SMALL_MB=$MEM_SMALL_MB MEM_BIG_MB=$MEM_BIG_MB WORKDIR=$WORKDIR $0${*:+ $*}"

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
if want net || want veth || want udp; then
    command -v iperf3 >/dev/null || die "iperf3 not found; install the peers with ../shared/peers/setup.sh"
fi
if want veth; then command -v ip >/dev/null || die "ip (iproute2) not found"; fi
if want file || want tree; then
    command -v rsync >/dev/null || die "rsync not found; install the peers with ../shared/peers/setup.sh"
    command -v scp >/dev/null && [ -x /usr/sbin/sshd ] || die "scp or /usr/sbin/sshd not found (openssh-client, openssh-server)"
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
        kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true
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
    log "sshd on 127.0.0.1:$SSH_PORT (pid $SSHD_PID, throwaway host and client keys in $SSHD)"
}

# --- network: bench --net vs iperf3 -----------------------------------------
# net_measure TOOL NETNS HOST PORT: print bits/s
net_measure() {
    local tool=$1 ns=$2 host=$3 port=$4 out=$WORK/net.json
    local -a pre=()
    [ -n "$ns" ] && pre=(ip netns exec "$ns")
    case $tool in
        urmove)
            run "$out" "${pre[@]}" "$URMOVE" bench --net "$host" -p "$port" -P "$STREAMS" \
                --time "${DUR}s" --key-file "$KEY" --json || return 1
            [ "$(jget "$out" status)" = ok ] || { fail "bench --net status != ok"; return 1; }
            jget "$out" rate_bits_per_s ;;
        iperf3)
            run "$out" "${pre[@]}" iperf3 -c "$host" -p "$port" -P "$STREAMS" -t "$DUR" -J || return 1
            jget "$out" end.sum_received.bits_per_second ;;
    esac
}

# net_rounds SECTION CLIENT_NS HOST UR_PORT IPERF_PORT
net_rounds() {
    local sec=$1 ns=$2 host=$3 urport=$4 ipport=$5 r tool val
    local -a tools=(urmove iperf3) order
    for (( r = 0; r < ROUNDS; r++ )); do
        order=("${tools[@]:r % 2}" "${tools[@]:0:r % 2}")
        for tool in "${order[@]}"; do
            local port=$urport
            [ "$tool" = iperf3 ] && port=$ipport
            if val=$(net_measure "$tool" "$ns" "$host" "$port"); then
                record "$sec" "$tool" $(( r + 1 )) "$val"
                log "$sec round $((r + 1))/$ROUNDS $tool: $(awk -v v="$val" 'BEGIN { printf "%.2f Gbit/s", v / 1e9 }')"
            else
                log "$sec round $((r + 1))/$ROUNDS $tool: failed"
            fi
        done
    done
}

section_net() {
    log "section net: loopback, $STREAMS streams, ${DUR}s"
    start_loopback_recv
    tcp_open "" 127.0.0.1 "$IPERF_PORT" && die "port $IPERF_PORT is in use; set IPERF_PORT"
    iperf3 -s -B 127.0.0.1 -p "$IPERF_PORT" >"$WORK/iperf3-s.log" 2>&1 &
    local ipid=$!; STARTED_PIDS+=("$ipid")
    wait_port "" 127.0.0.1 "$IPERF_PORT" || die "iperf3 -s did not start"
    net_rounds net "" 127.0.0.1 "$RECV_PORT" "$IPERF_PORT"
    stop_pid "$ipid"
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
    ip netns exec "$NS_B" iperf3 -s -B "$ADDR_B" -p "$IPERF_PORT" >"$WORK/iperf3-s-veth.log" 2>&1 &
    local ipid=$!; STARTED_PIDS+=("$ipid")
    wait_port "$NS_A" "$ADDR_B" "$IPERF_PORT" || die "iperf3 -s in $NS_B did not start"
    net_rounds veth "$NS_A" "$ADDR_B" "$VR_PORT" "$IPERF_PORT"
    stop_pid "$ipid"
    stop_pid "$VR_PID"
    for ns in "${CREATED_NS[@]}"; do ip netns del "$ns"; done
    CREATED_NS=()
}

# --- UDP: bench --net --udp vs iperf3 -u ----------------------------------------
# udp_measure TOOL SIZE PORT: print "received-bits/s loss-percent"
udp_measure() {
    local tool=$1 size=$2 port=$3 out=$WORK/udp.json
    case $tool in
        urmove)
            run "$out" "$URMOVE" bench --net 127.0.0.1 -p "$port" --udp --size "$size" \
                --time "${DUR}s" --key-file "$KEY" --json || return 1
            [ "$(jget "$out" status)" = ok ] || { fail "bench --net --udp status != ok"; return 1; }
            echo "$(jget "$out" summary.received_bits_per_s) $(jget "$out" summary.loss_percent)" ;;
        iperf3)
            run "$out" iperf3 -c 127.0.0.1 -p "$port" -u -b 0 -l "$size" -t "$DUR" -J || return 1
            echo "$(jget "$out" end.sum_received.bits_per_second) $(jget "$out" end.sum_received.lost_percent)" ;;
    esac
}

section_udp() {
    log "section udp: loopback, datagrams of $UDP_SIZES bytes, ${DUR}s, as fast as each sends"
    local UR_PID UR_PORT
    start_recv UR "$WORK/recv-udp.log" "$DST_UR" 127.0.0.1:0 env URMOVE_RECV_UDP=1
    tcp_open "" 127.0.0.1 "$IPERF_PORT" && die "port $IPERF_PORT is in use; set IPERF_PORT"
    iperf3 -s -B 127.0.0.1 -p "$IPERF_PORT" >"$WORK/iperf3-s-udp.log" 2>&1 &
    local ipid=$!; STARTED_PIDS+=("$ipid")
    wait_port "" 127.0.0.1 "$IPERF_PORT" || die "iperf3 -s did not start"
    local size r tool val port
    local -a tools=(urmove iperf3) order
    for size in $UDP_SIZES; do
        for (( r = 0; r < ROUNDS; r++ )); do
            order=("${tools[@]:r % 2}" "${tools[@]:0:r % 2}")
            for tool in "${order[@]}"; do
                port=$UR_PORT; [ "$tool" = iperf3 ] && port=$IPERF_PORT
                if val=$(udp_measure "$tool" "$size" "$port"); then
                    record "udp-$size" "$tool" $(( r + 1 )) "${val% *}" "${val#* }"
                    log "udp $size round $((r + 1))/$ROUNDS $tool: $(awk -v v="${val% *}" 'BEGIN { printf "%.2f Gbit/s", v / 1e9 }'), loss ${val#* }%"
                else
                    log "udp $size round $((r + 1))/$ROUNDS $tool: failed"
                fi
            done
        done
    done
    stop_pid "$ipid"
    stop_pid "$UR_PID"
}

# --- transfers ----------------------------------------------------------------
# xfer TOOL SRC EXPECT_FILES: cold cache, empty destination; run one transfer
# and print its wall time in seconds (rsync and scp: including a sync after).
xfer() {
    local tool=$1 src=$2 expect=$3 out=$WORK/xfer.out t0 t1 dst got
    local -a r=()
    [ -d "$src" ] && r=(-r)
    case $tool in
        urmove) dst=$DST_UR ;; rsync) dst=$DST_RS ;; scp) dst=$DST_SCP ;;
    esac
    find "$dst" -mindepth 1 -delete 2>/dev/null || true
    mkdir -p "$dst"
    drop_caches
    t0=$(now)
    case $tool in
        urmove)
            run "$out" "$URMOVE" send -p "$RECV_PORT" -P "$STREAMS" --key-file "$KEY" --json \
                "$src" 127.0.0.1: || return 1 ;;
        rsync)
            run "$out" rsync -a "$src" "rsync://127.0.0.1:$RSYNC_PORT/ur/" || return 1
            sync ;;
        scp)
            local tmo=$TIMEOUT
            [ -d "$src" ] && tmo=$SCP_TREE_TIMEOUT
            TIMEOUT=$tmo run "$out" scp -q "${r[@]}" "${SSH_OPTS[@]}" "$src" "root@127.0.0.1:$dst/" || return 1
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
    local -a tools=(urmove rsync scp disk) order
    local r tool val n=${#tools[@]} bytes=$(( BIG_MB * 1048576 ))
    for (( r = 0; r < ROUNDS; r++ )); do
        order=("${tools[@]:r % n}" "${tools[@]:0:r % n}")
        for tool in "${order[@]}"; do
            if [ "$tool" = disk ]; then
                if val=$(disk_limit); then
                    set -- $val
                    record file disk $(( r + 1 )) "$1" "$2 $3"
                    log "file round $((r + 1))/$ROUNDS disk limit: $(awk -v v="$1" -v a="$2" -v b="$3" 'BEGIN { printf "%.0f MB/s (fio read %.0f, write %.0f concurrently)", v / 1e6, a / 1e6, b / 1e6 }')"
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
    local -a tools=(urmove rsync scp) order
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
    local -a counts=($SCALE_COUNTS) order
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
            [ "$(jget "$out" status)" = ok ] && [ "$(jget "$out" files_verified)" = 1 ] \
                || { fail "send $mode: status=$(jget "$out" status)"; return 1; }
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

STREAMS=$STREAMS DUR=$DUR BIG_MB=$BIG_MB TREE_FILES=$TREE_FILES TREE_KB=$TREE_KB \
MEM_SMALL_MB=$MEM_SMALL_MB MEM_BIG_MB=$MEM_BIG_MB SCALE_COUNTS="$SCALE_COUNTS" \
SCALE_SLOW_S=$SCALE_SLOW_S python3 - "$RESULTS" <<'EOF'
import os, sys
from collections import defaultdict
from statistics import median

vals = defaultdict(list)     # (section, tool) -> [value per round]
extra = defaultdict(list)
for line in open(sys.argv[1]):
    sec, tool, rnd, v, x = line.rstrip("\n").split("\t")
    vals[sec, tool].append(float(v))
    extra[sec, tool].append(x)

E = os.environ
streams, dur = E["STREAMS"], E["DUR"]
big_mb, tree_files, tree_kb = int(E["BIG_MB"]), int(E["TREE_FILES"]), int(E["TREE_KB"])

def med(sec, tool):
    return median(vals[sec, tool]) if vals.get((sec, tool)) else None

def f(x, fmt):
    return "n/a" if x is None else format(x, fmt)

def ratio(a, b):
    return "n/a" if a is None or b is None or b == 0 else f"{a / b:.2f}"

out = []
if any(s in ("net", "veth") for s, _ in vals):
    out.append(f"### Memory to memory: urmove bench --net vs iperf3 -P {streams}, {dur} s (Gbit/s)\n")
    out.append("| path | urmove bench --net | iperf3 | urmove/iperf3 |")
    out.append("|---|---|---|---|")
    for sec, label in (("net", "loopback 127.0.0.1"), ("veth", "veth between two netns")):
        if (sec, "urmove") in vals or (sec, "iperf3") in vals:
            u, i = med(sec, "urmove"), med(sec, "iperf3")
            out.append(f"| {label} | {f(u and u / 1e9, '.2f')} | {f(i and i / 1e9, '.2f')} | {ratio(u, i)} |")
    out.append("")

udp = sorted((s for s, t in vals if s.startswith("udp-")), key=lambda s: int(s[4:]))
if udp:
    out.append(f"### UDP: urmove bench --net --udp vs iperf3 -u -b 0 -l SIZE, loopback, {dur} s, as fast as each sends\n")
    out.append("| datagram | urmove received Gbit/s | urmove loss % | iperf3 received Gbit/s | iperf3 loss % | urmove/iperf3 |")
    out.append("|---|---|---|---|---|---|")
    for sec in list(dict.fromkeys(udp)):
        u, i = med(sec, "urmove"), med(sec, "iperf3")
        loss = lambda t: f(median(float(x) for x in extra[sec, t]) if extra.get((sec, t)) else None, ".3f")
        out.append(f"| {sec[4:]} B | {f(u and u / 1e9, '.2f')} | {loss('urmove')} | {f(i and i / 1e9, '.2f')} | {loss('iperf3')} | {ratio(u, i)} |")
    out.append("")

if any(s.startswith("crypt-") for s, _ in vals):
    out.append(f"### Cost of --encrypt (AES-256-GCM per frame), {streams} streams, loopback\n")
    out.append("| test | plain | --encrypt | encrypted/plain |")
    out.append("|---|---|---|---|")
    for sec, label, scale, unit in (("crypt-net", f"bench --net, {dur} s", 1e9, "Gbit/s"),
                                    ("crypt-send", f"send of one {big_mb} MiB file, cold cache", 1e6, "MB/s")):
        if (sec, "plain") in vals or (sec, "sealed") in vals:
            p, e = med(sec, "plain"), med(sec, "sealed")
            out.append(f"| {label} ({unit}) | {f(p and p / scale, '.2f')} | {f(e and e / scale, '.2f')} | {ratio(e, p)} |")
    out.append("")

if any(s == "file" for s, _ in vals):
    u, r, s, d = (med("file", t) for t in ("urmove", "rsync", "scp", "disk"))
    out.append(f"### One {big_mb} MiB file, cold cache, data on disk at the end (MB/s)\n")
    out.append("| urmove send | rsync daemon | scp | disk limit (fio read + write) | urmove/rsync | urmove/scp | urmove/disk limit |")
    out.append("|---|---|---|---|---|---|---|")
    sc = lambda x: f(x and x / 1e6, ".0f")
    out.append(f"| {sc(u)} | {sc(r)} | {sc(s)} | {sc(d)} | {ratio(u, r)} | {ratio(u, s)} | {ratio(u, d)} |")
    out.append("")

if any(s == "tree" for s, _ in vals):
    tb = tree_files * tree_kb * 1024
    secs = {t: med("tree", t) for t in ("urmove", "rsync", "scp")}
    fps = {t: (tree_files / v if v else None) for t, v in secs.items()}
    mbs = {t: (tb / v / 1e6 if v else None) for t, v in secs.items()}
    out.append(f"### Tree of {tree_files} files of {tree_kb} KiB, cold cache, data on disk at the end\n")
    out.append("| metric | urmove send | rsync daemon | scp -r | urmove/rsync | urmove/scp |")
    out.append("|---|---|---|---|---|---|")
    for name, d, fmt in (("files/s", fps, ".0f"), ("MB/s", mbs, ".1f"), ("seconds", secs, ".2f")):
        rr = (ratio(d["urmove"], d["rsync"]), ratio(d["urmove"], d["scp"]))
        if name == "seconds":
            rr = ("", "")
        out.append(f"| {name} | {f(d['urmove'], fmt)} | {f(d['rsync'], fmt)} | {f(d['scp'], fmt)} | {rr[0]} | {rr[1]} |")
    out.append("")

counts = [c for c in E["SCALE_COUNTS"].split() if ("scale", c) in vals]
if counts:
    out.append("### Scaling: urmove send of trees of 4 KiB files, cold cache\n")
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
    out.append(f"### Peak memory: max RSS (/usr/bin/time -v), one run per size\n")
    out.append(f"| process | {sm} MiB file | {bg} MiB file | ratio {bg} MiB / {sm} MiB |")
    out.append("|---|---|---|---|")
    for p in ("send", "recv"):
        a, b = med("mem", f"{p}-small"), med("mem", f"{p}-big")
        mib = lambda kb: "n/a" if kb is None else f"{kb / 1024:.1f} MiB"
        out.append(f"| urmove {p} | {mib(a)} | {mib(b)} | {ratio(b, a)} |")
    out.append("")

print("\n".join(out))

print("Round values (medians above):")
names = {"net": "loopback Gbit/s", "veth": "veth Gbit/s", "file": "file MB/s",
         "tree": "tree seconds", "scale": "scale seconds", "mem": "max RSS kB",
         "crypt-net": "crypt Gbit/s", "crypt-send": "crypt MB/s"}
order = ["net", "veth", "file", "tree", "scale", "mem", "crypt-net", "crypt-send"]
order += sorted({s for s, _ in vals if s.startswith("udp-")}, key=lambda s: int(s[4:]))
names.update({s: f"udp {s[4:]} B Gbit/s" for s in order if s.startswith("udp-")})
tools = ["urmove", "iperf3", "rsync", "scp", "disk"]
def key(k):
    sec, tool = k
    t = tools.index(tool) if tool in tools else (int(tool) if tool.isdigit() else 0)
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
    label = f"{tool} files" if sec == "scale" else tool
    print(f"  {names[sec]:16} {label:14} {shown}")
EOF

if [ -s "$FAILS" ]; then
    echo
    echo "Failures and skips:"
    sed 's/^/  /' "$FAILS"
fi

echo
echo "Notes: MB/s are decimal (1e6 bytes/s), Gbit/s are 1e9 bit/s; ratios are of medians;"
echo "tool order rotated each round; source and destinations on the same disk ($FS)."
if want net || want veth; then cat <<EOF
- Network: urmove bench --net (4 MiB frames, no checksums) vs iperf3 -c -P $STREAMS
  -t $DUR (default 128 KiB writes), iperf3's receiver-side rate; veth: client in
  $NS_A ($ADDR_A), servers in $NS_B ($ADDR_B).
EOF
fi
if want udp; then cat <<EOF
- UDP: urmove bench --net --udp (GSO writes, GRO reads, one flow) vs iperf3 -u -b 0
  -l SIZE (one flow), both as fast as they send; received rate and loss as each
  receiver counted them.
EOF
fi
if want file || want tree || want scale; then cat <<EOF
- Transfers: page cache dropped and destination emptied before every run; times
  are wall clock from start to end of the client process. urmove send ends after
  the receiver fsynced every file; rsync (plain rsync -a to an rsync daemon on
  127.0.0.1) and scp (sshd on 127.0.0.1:$SSH_PORT, default cipher) are followed by
  a system-wide sync that is included in their time.
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

Command: $CMDLINE
Date:    $(date -Is)
Kernel:  $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) RAM
Workdir: $WORKDIR on ${FS}
urmove:  $URMOVE ($(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo "?")$(cd "$ROOT" && [ -n "$(git status --porcelain 2>/dev/null)" ] && echo ", dirty tree"))
Peers:   $(iperf3 --version 2>/dev/null | head -1 | cut -d' ' -f1-2), $(rsync --version 2>/dev/null | head -1 | awk '{ print $1, $3 }'), $(ssh -V 2>&1 | cut -d, -f1), $(fio --version 2>/dev/null)
Load:    $LOAD_START at start, $LOAD_END at end (1/5/15 min)
Rounds:  $ROUNDS, ${DUR}s per network test, took ${ELAPSED}s
EOF
