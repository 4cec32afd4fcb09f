#!/usr/bin/env bash
# Many-files benchmark (issue 35): trees of FILES small files moved by urmove
# and its peers, in one run, cold cache, every copy compared with its source.
#
# For each tree size N in FILES, a tree of N files (made once by
# scripts/bench-files-helper.c and kept under ROOT, by size, seed and sigma):
# 1,000 files a directory two levels deep (t/AAA/BB/fNNNNNNN), 2% of them
# empty and the others of sizes drawn from a log-normal with a median of
# 4 KiB (sigma SIGMA), clipped to 64 KiB; pseudo-random bytes. Then ROUNDS
# rounds of each tool (order rotated each round), each into an emptied
# destination (rm -rf, outside the timing) after `sync` and drop_caches:
#   urmove-lo    urmove recv --root DST --key-file K --state-dir S (O_DIRECT:
#                its default) on 127.0.0.1; urmove send --key-file K -p PORT
#                --json SRC 127.0.0.1:
#   urmove-ns    the same between two network namespaces joined by a veth pair
#   rsyncd-lo    rsync -a SRC rsync://127.0.0.1:PORT/mod/ to an rsync daemon
#                (use chroot = no, uid = gid = root)
#   rsyncd-ns    the same between the namespaces
#   rsync-local  rsync -a SRC DST/
#   tar-lo       tar -C PARENT -cf - t | socat -> socat | tar -C DST -xf -, over
#                TCP on 127.0.0.1 (ncat or nc.openbsd when there is no socat)
#   cp           cp -a SRC DST/
# Every receiver starts afresh each round (its start is outside the timing).
# Each round measures:
#   files/s      N / wall time, from the client command's start until both
#                sides have ended and `sync -f DST` (syncfs of the
#                destination's filesystem) has returned; the same syncfs for
#                every tool, urmove included (it syncs its files itself: the
#                syncfs then finds nothing of its to write)
#   first byte   from the client command's start until a regular file with at
#                least one byte (st_size > 0; a tool's temporary file counts)
#                is anywhere under DST, seen by a poller walking DST every 5 ms
#                (its granularity: 5 ms plus one walk); META=1: the first file
#   RSS          peak RSS of the sending side and of the receiving side, each
#                the largest process of the side (getrusage ru_maxrss of the
#                side's command and every process it reaped: an rsync
#                daemon's per-connection children, tar and socat of a pipe
#                side). cp -a and rsync -a local are one command: one RSS
#   CPU          user + system seconds of both sides, per GB of file data
#                (1e9 bytes) and per file
# A round counts only when DST/t then matches the source: the helper's `sum`
# of both trees (every entry's path, type, permission bits; every file's
# size, mtime in whole seconds and every byte) is equal. The table gives the
# median of the rounds that counted, each RSS against the same tool's at the
# smallest size, and urmove's files/s against the rsync daemon's (same
# transport) and tar | tar's, in the same run.
#
# Before making a tree or running a size, the free space (and inodes) of
# ROOT's filesystem must hold the source (unless already made), one
# destination and RESERVE_MB more; a size that does not fit is skipped with
# what it needs said in the table. META=1 (or SIZES=empty) makes trees of
# empty files only: files/s, first file and memory, no data.
#
# Usage (as root):
#   scripts/bench-files.sh                          # 100k, 1M and 10M files
#   FILES="20000 100000" scripts/bench-files.sh     # a smaller run (a smoke run)
#   META=1 FILES=10000000 scripts/bench-files.sh    # 10M empty files
#   TOOLS="urmove-lo rsyncd-lo" FILES=100000 scripts/bench-files.sh
#
# Environment:
#   FILES="100000 1000000 10000000"   tree sizes (files)
#   ROUNDS=3               rounds per tool and size
#   TOOLS="urmove-lo urmove-ns rsyncd-lo rsyncd-ns rsync-local tar-lo cp"
#   SEED=1 SIGMA=1.0       the trees' seed, and the log-normal's sigma
#   META=0                 1 (or SIZES=empty): empty files only
#   ROOT=/var/tmp/urmove-bench-files   trees, destination, keys, logs
#   KEEP_TREES=1           0: delete each source tree once its size is done
#   RESERVE_MB=2048        free space left to others on ROOT's filesystem
#   OUT=results/bench-files-DATE.md    the report (relative: to the repository)
#   TIMEOUT=7200           seconds before one run counts as hung
#   URMOVE=                urmove binary (default: cargo build --release here)
#   URMOVE_RECV_ARGS= URMOVE_SEND_ARGS=   more arguments for recv and send
#                          (none by default; a tree of more entries than recv's
#                          --max-files default gets --max-files to fit it)
#   PORT=18470             urmove's port; the rsync daemon PORT+1, tar PORT+2
#   NS_A=urmfiles-a NS_B=urmfiles-b ADDR_A=10.81.0.1 ADDR_B=10.81.0.2
set -euo pipefail

FILES=${FILES:-100000 1000000 10000000}
ROUNDS=${ROUNDS:-3}
TOOLS=${TOOLS:-urmove-lo urmove-ns rsyncd-lo rsyncd-ns rsync-local tar-lo cp}
SEED=${SEED:-1}
SIGMA=${SIGMA:-1.0}
META=${META:-0}
if [ "${SIZES-unset}" = empty ]; then META=1; fi
ROOT=${ROOT:-/var/tmp/urmove-bench-files}
KEEP_TREES=${KEEP_TREES:-1}
RESERVE_MB=${RESERVE_MB:-2048}
TIMEOUT=${TIMEOUT:-7200}
URMOVE=${URMOVE:-}
URMOVE_RECV_ARGS=${URMOVE_RECV_ARGS:-}
URMOVE_SEND_ARGS=${URMOVE_SEND_ARGS:-}
PORT=${PORT:-18470}
NS_A=${NS_A:-urmfiles-a}
NS_B=${NS_B:-urmfiles-b}
ADDR_A=${ADDR_A:-10.81.0.1}
ADDR_B=${ADDR_B:-10.81.0.2}
RSYNC_PORT=$((PORT + 1))
TAR_PORT=$((PORT + 2))

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-results/bench-files-$(date -u +%Y%m%d-%H%M).md}
[[ $OUT = /* ]] || OUT=$REPO/$OUT
die() { echo "bench-files: $*" >&2; exit 1; }
log() { echo "bench-files: $(date +%H:%M:%S) $*" >&2; }

ALL_TOOLS="urmove-lo urmove-ns rsyncd-lo rsyncd-ns rsync-local tar-lo cp"
for t in $TOOLS; do
    [[ " $ALL_TOOLS " == *" $t "* ]] || die "unknown tool '$t' (tools: $ALL_TOOLS)"
done
for n in $FILES; do [[ $n =~ ^[1-9][0-9]*$ ]] || die "FILES: '$n' is not a count of files"; done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer, got '$ROUNDS'"
[[ $META = [01] ]] || die "META must be 0 or 1, got '$META'"
uses() { [[ " $TOOLS " == *" $1 "* ]]; }
uses_ns() { [[ " $TOOLS " == *-ns\ * ]]; }

[ "$(id -u)" = 0 ] || die "needs root (drop_caches, network namespaces, daemons as root)"
command -v cc >/dev/null || die "needs a C compiler (cc) for scripts/bench-files-helper.c"
command -v python3 >/dev/null || die "needs python3 (the table)"
command -v ss >/dev/null || die "needs ss (iproute2)"
if uses_ns; then command -v ip >/dev/null || die "needs iproute2 (ip) for the namespaces"; fi
if uses rsyncd-lo || uses rsyncd-ns || uses rsync-local; then
    command -v rsync >/dev/null || die "needs rsync (../shared/peers/setup.sh installs it)"
fi
PIPE=
if uses tar-lo; then
    for p in socat ncat nc.openbsd; do
        if command -v "$p" >/dev/null; then PIPE=$p; break; fi
    done
    [ -n "$PIPE" ] || die "tar-lo needs socat, ncat or nc.openbsd: apt-get install socat"
fi

# The smallest settings a full run uses; less is a smoke run.
SMOKE=
for n in $FILES; do if [ "$n" -lt 100000 ]; then SMOKE=1; fi; done
if [ "$ROUNDS" -lt 3 ]; then SMOKE=1; fi

if [ -z "$URMOVE" ] && { uses urmove-lo || uses urmove-ns; }; then
    log "building urmove (cargo build --release --bins in $REPO)"
    (cd "$REPO" && cargo build --release --quiet --bins) || die "cargo build failed"
    URMOVE=${CARGO_TARGET_DIR:-$REPO/target}/release/urmove
fi
if uses urmove-lo || uses urmove-ns; then [ -x "$URMOVE" ] || die "no urmove binary at $URMOVE"; fi

mkdir -p "$ROOT"
ROOT=$(cd "$ROOT" && pwd)
LOGS=$ROOT/logs
DST=$ROOT/dst
STATE=$ROOT/state
mkdir -p "$LOGS"
ROUNDS_TSV=$LOGS/rounds.tsv
: >"$ROUNDS_TSV"

# The helper, compiled when its source changed.
HELPER_SRC=$REPO/scripts/bench-files-helper.c
HELPER=$ROOT/helper-$(sha256sum "$HELPER_SRC" | cut -c1-12)
if [ ! -x "$HELPER" ]; then
    cc -O2 -o "$HELPER.tmp" "$HELPER_SRC" -lm || die "compiling $HELPER_SRC failed"
    mv "$HELPER.tmp" "$HELPER"
fi
KEY=$ROOT/key
if uses urmove-lo || uses urmove-ns; then
    [ -f "$KEY" ] || "$URMOVE" keygen "$KEY" >/dev/null
fi

# --- cleanup and namespaces ---------------------------------------------------
BG=()     # background processes this script started and still runs
NS_MADE=
forget() { # PID: no longer running
    local p keep=()
    for p in "${BG[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    BG=("${keep[@]}")
}
cleanup() {
    local p
    for p in "${BG[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${BG[@]}"; do wait "$p" 2>/dev/null || true; done
    BG=()
    if [ -n "$NS_MADE" ]; then ip netns del "$NS_A" 2>/dev/null || true; ip netns del "$NS_B" 2>/dev/null || true; fi
    rm -rf "$DST" "$STATE"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if uses_ns; then
    for ns in "$NS_A" "$NS_B"; do
        if ip netns list | grep -qw "$ns"; then die "namespace $ns exists already (another run? NS_A/NS_B name others)"; fi
    done
    VA=ubf$$a VB=ubf$$b
    ip netns add "$NS_A"; NS_MADE=1; ip netns add "$NS_B"
    ip link add "$VA" type veth peer name "$VB"
    ip link set "$VA" netns "$NS_A"; ip link set "$VB" netns "$NS_B"
    ip -n "$NS_A" addr add "$ADDR_A/24" dev "$VA"; ip -n "$NS_B" addr add "$ADDR_B/24" dev "$VB"
    for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
    ip -n "$NS_A" link set "$VA" up; ip -n "$NS_B" link set "$VB" up
    log "namespaces $NS_A ($ADDR_A) and $NS_B ($ADDR_B), veth $VA-$VB"
fi

# --- the trees ------------------------------------------------------------------
fs_free() { df -B1 --output=avail "$ROOT" | tail -1 | tr -d ' '; }
fs_ifree() { df --output=iavail "$ROOT" | tail -1 | tr -d ' '; }
fs_itotal() { df --output=itotal "$ROOT" | tail -1 | tr -d ' '; }
gb() { python3 -c "print(f'{$1 / 1e9:.1f} GB')"; }

# tree_dir N: where the tree of N files is kept (its t/ inside)
tree_dir() { echo "$ROOT/src-$1-seed$SEED-sigma$SIGMA$([ "$META" = 1 ] && echo -meta)"; }

# fits N: whether source (unless made) and one destination fit; else says why
# (on stdout, for the table) and fails
fits() {
    local n=$1 est files alloc dirs need inodes free ifree
    est=$("$HELPER" est "$n" "$SEED" "$SIGMA" "$META")
    read -r files _ alloc dirs <<<"$est"
    # Each entry's directory record (~40 B) and each directory's own blocks.
    local one=$((alloc + (files + dirs) * 64 + dirs * 4096))
    local copies=2
    if [ -f "$(tree_dir "$n")/done" ]; then copies=1; fi
    need=$((one * copies + RESERVE_MB * 1048576))
    inodes=$(((files + dirs) * copies))
    free=$(fs_free); ifree=$(fs_ifree)
    if [ "$need" -gt "$free" ]; then
        echo "needs $(gb "$need") on $ROOT ($([ "$copies" = 2 ] && echo "source $(gb "$one") + ")destination $(gb "$one") + RESERVE_MB=$RESERVE_MB), $(gb "$free") free"
        return 1
    fi
    if [ "$(fs_itotal)" -gt 0 ] && [ "$inodes" -gt "$ifree" ]; then
        echo "needs $inodes inodes on $ROOT, $ifree free"
        return 1
    fi
}

# make_tree N: the tree of N files, made once; its sum in DIR/done
make_tree() {
    local n=$1 dir t0
    dir=$(tree_dir "$n")
    [ -f "$dir/done" ] && return 0
    rm -rf "$dir"; mkdir -p "$dir"
    log "making $n files in $dir/t"
    t0=$(date +%s)
    "$HELPER" gen "$dir/t" "$n" "$SEED" "$SIGMA" "$META" || die "making the tree of $n files failed"
    sync -f "$dir"
    "$HELPER" sum "$dir/t" >"$dir/done.tmp" && mv "$dir/done.tmp" "$dir/done"
    log "made $n files in $(($(date +%s) - t0)) s: $(cat "$dir/done")"
}

# --- one run ------------------------------------------------------------------
# The side a receiver or client runs in: nothing for loopback, ip netns exec.
ns_a() { if [ "$1" = ns ]; then echo "ip netns exec $NS_A"; fi; }
ns_b() { if [ "$1" = ns ]; then echo "ip netns exec $NS_B"; fi; }

wait_port() { # NS-or-empty PORT: until something listens there (10 s)
    local pre=$1 port=$2 k
    for ((k = 0; k < 200; k++)); do
        # shellcheck disable=SC2086 # $pre is a command prefix or nothing
        if [ -n "$($pre ss -Hltn "sport = :$port" 2>/dev/null)" ]; then return 0; fi
        sleep 0.05
    done
    return 1
}

RECV_PID=
start_recv() { # TOOL WHERE N: the receiver of TOOL in its own helper run
    local tool=$1 where=$2 n=$3 pre addr port
    pre=$(ns_b "$where")
    addr=127.0.0.1
    [ "$where" = ns ] && addr=$ADDR_B
    rm -f "$LOGS/recv.rss"
    case $tool in
        urmove)
            local more=()
            # The daemon refuses more entries than --max-files (10,000,000 by default).
            if [ $((n + n / 500 + 16)) -gt 10000000 ]; then more=(--max-files $((n + n / 500 + 16))); fi
            # shellcheck disable=SC2086
            $pre "$HELPER" run "$LOGS/recv.rss" "$URMOVE" recv --listen "$addr:$PORT" --root "$DST" \
                --key-file "$KEY" --state-dir "$STATE" "${more[@]}" $URMOVE_RECV_ARGS \
                2>>"$LOGS/urmove-recv.log" &
            RECV_PID=$! port=$PORT ;;
        rsyncd)
            cat >"$LOGS/rsyncd.conf" <<EOF
use chroot = no
uid = root
gid = root
max connections = 0
log file = $LOGS/rsyncd.log
[mod]
path = $DST
read only = false
EOF
            # shellcheck disable=SC2086
            $pre "$HELPER" run "$LOGS/recv.rss" rsync --daemon --no-detach --config="$LOGS/rsyncd.conf" \
                --address="$addr" --port="$RSYNC_PORT" 2>>"$LOGS/rsyncd.log" &
            RECV_PID=$! port=$RSYNC_PORT ;;
        tar)
            local listen
            case $PIPE in
                socat) listen="socat -u TCP-LISTEN:$TAR_PORT,bind=$addr,reuseaddr STDOUT" ;;
                ncat) listen="ncat -l --recv-only $addr $TAR_PORT" ;;
                nc.openbsd) listen="nc.openbsd -l $addr $TAR_PORT" ;;
            esac
            # shellcheck disable=SC2086
            $pre "$HELPER" run "$LOGS/recv.rss" bash -c "set -o pipefail; $listen | tar -C '$DST' -xf -" \
                2>>"$LOGS/tar-recv.log" &
            RECV_PID=$! port=$TAR_PORT ;;
    esac
    BG+=("$RECV_PID")
    # shellcheck disable=SC2086
    wait_port "$pre" "$port" || { log "$tool receiver did not start (see $LOGS)"; return 1; }
}

# stop_recv: end the receiver once its children (an rsync daemon's
# connection) have ended, so that its RSS counts theirs
stop_recv() {
    [ -n "$RECV_PID" ] || return 0
    local d k
    d=$(tr -d ' ' <"/proc/$RECV_PID/task/$RECV_PID/children" 2>/dev/null || true)
    for ((k = 0; k < 200; k++)); do
        if [ -z "$d" ] || [ -z "$(cat "/proc/$d/task/$d/children" 2>/dev/null)" ]; then break; fi
        sleep 0.05
    done
    kill -TERM "$RECV_PID" 2>/dev/null || true
    wait "$RECV_PID" 2>/dev/null || true
    forget "$RECV_PID"
    RECV_PID=
}

now() { echo "$EPOCHREALTIME"; }

# run_once TOOL N: one round of TOOL on the tree of N files; appends its row
# to ROUNDS_TSV: n tool wall first send_kb recv_kb cpu_s status
run_once() {
    local label=$1 n=$2 src tree tool where
    tree=$(tree_dir "$n")
    src=$tree/t
    tool=${label%-*} where=${label##*-}
    case $label in rsync-local) tool=rsync-local where=local ;; cp) tool=cp where=local ;; esac
    rm -rf "$DST" "$STATE"
    mkdir -p "$DST" "$STATE"
    rm -f "$LOGS/send.rss" "$LOGS/recv.rss" "$LOGS/first"
    sync; echo 3 >/proc/sys/vm/drop_caches
    local host=127.0.0.1 pre rc=0 status=ok
    [ "$where" = ns ] && host=$ADDR_B
    pre=$(ns_a "$where")
    case $tool in
        urmove | rsyncd | tar) start_recv "$tool" "$where" "$n" || status=no-receiver ;;
    esac
    "$HELPER" first "$DST" "$([ "$META" = 1 ] && echo any || echo data)" >"$LOGS/first" &
    local poll=$! t0 t1
    BG+=("$poll")
    t0=$(now)
    if [ "$status" = ok ]; then
        # shellcheck disable=SC2086 # $pre: a command prefix or nothing
        case $tool in
            urmove)
                $pre timeout "$TIMEOUT" "$HELPER" run "$LOGS/send.rss" "$URMOVE" send --key-file "$KEY" \
                    -p "$PORT" --json $URMOVE_SEND_ARGS "$src" "$host:" \
                    >"$LOGS/send.json" 2>>"$LOGS/urmove-send.log" || rc=$? ;;
            rsyncd)
                $pre timeout "$TIMEOUT" "$HELPER" run "$LOGS/send.rss" rsync -a "$src" \
                    "rsync://$host:$RSYNC_PORT/mod/" 2>>"$LOGS/rsync.log" || rc=$? ;;
            rsync-local)
                timeout "$TIMEOUT" "$HELPER" run "$LOGS/send.rss" rsync -a "$src" "$DST/" \
                    2>>"$LOGS/rsync.log" || rc=$? ;;
            cp)
                timeout "$TIMEOUT" "$HELPER" run "$LOGS/send.rss" cp -a "$src" "$DST/" \
                    2>>"$LOGS/cp.log" || rc=$? ;;
            tar)
                local connect
                case $PIPE in
                    socat) connect="socat -u STDIN TCP:$host:$TAR_PORT" ;;
                    ncat) connect="ncat --send-only $host $TAR_PORT" ;;
                    nc.openbsd) connect="nc.openbsd -N $host $TAR_PORT" ;;
                esac
                $pre timeout "$TIMEOUT" "$HELPER" run "$LOGS/send.rss" bash -c \
                    "set -o pipefail; tar -C '$tree' -cf - t | $connect" 2>>"$LOGS/tar-send.log" || rc=$?
                # The receiving side ends when it has read and written
                # everything (or is ended when the sending side failed).
                if [ "$rc" != 0 ]; then kill -TERM "$RECV_PID" 2>/dev/null || true; fi
                local rrc=0
                wait "$RECV_PID" || rrc=$?
                if [ "$rc" = 0 ]; then rc=$rrc; fi
                forget "$RECV_PID"
                RECV_PID= ;;
        esac
        sync -f "$DST"
    fi
    t1=$(now)
    kill "$poll" 2>/dev/null || true
    wait "$poll" 2>/dev/null || true
    forget "$poll"
    stop_recv
    if [ "$status" = ok ] && [ "$rc" != 0 ]; then status="exit-$rc"; fi
    if [ "$status" = ok ] && [ "$tool" = urmove ]; then
        python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1])).get("status") != "ok")' \
            "$LOGS/send.json" 2>/dev/null || status=urmove-status
    fi
    if [ "$status" = ok ]; then
        local want got
        want=$(cat "$tree/done")
        got=$("$HELPER" sum "$DST/t" 2>>"$LOGS/sum.log" || echo "no tree")
        if [ "$got" != "$want" ]; then
            status=mismatch
            log "$label: DST/t differs from the source: source '$want', copy '$got'"
        fi
    fi
    local first=- send_kb=- recv_kb=- cpu=0 f
    if [ -s "$LOGS/first" ]; then first=$(awk -v t0="$t0" '{printf "%.3f", $1 - t0}' "$LOGS/first"); fi
    for f in send recv; do
        if [ -s "$LOGS/$f.rss" ]; then
            read -r kb u s <"$LOGS/$f.rss"
            printf -v "${f}_kb" '%s' "$kb"
            cpu=$(awk -v a="$cpu" -v u="$u" -v s="$s" 'BEGIN {printf "%.3f", a + u + s}')
        fi
    done
    local wall
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$label" "$wall" "$first" "$send_kb" "$recv_kb" \
        "$cpu" "$status" >>"$ROUNDS_TSV"
    log "$n files, $label: $status, $wall s, first byte $first s, RSS send ${send_kb} KiB recv ${recv_kb} KiB, CPU $cpu s"
}

# --- the matrix -----------------------------------------------------------------
declare -A SKIPPED=()
read -ra tools <<<"$TOOLS"
nt=${#tools[@]}
for n in $FILES; do
    if ! why=$(fits "$n"); then
        SKIPPED[$n]=$why
        log "$n files: skipped: $why"
        continue
    fi
    make_tree "$n"
    for ((r = 0; r < ROUNDS; r++)); do
        for ((k = 0; k < nt; k++)); do
            run_once "${tools[$(((k + r) % nt))]}" "$n"
        done
    done
    rm -rf "$DST"
    if [ "$KEEP_TREES" = 0 ]; then rm -rf "$(tree_dir "$n")"; fi
done

# --- the report -----------------------------------------------------------------
: >"$LOGS/skipped.tsv"
for n in "${!SKIPPED[@]}"; do printf '%s\t%s\n' "$n" "${SKIPPED[$n]}" >>"$LOGS/skipped.tsv"; done
: >"$LOGS/trees.tsv"
for n in $FILES; do
    d=$(tree_dir "$n")
    if [ -f "$d/done" ]; then printf '%s\t%s\n' "$n" "$(cat "$d/done")" >>"$LOGS/trees.tsv"; fi
done
ver() { "$@" 2>&1 | head -1 || true; }
pipe_ver() {
    case $PIPE in
        socat) socat -V 2>/dev/null | grep -m1 '^socat version' | cut -d' ' -f1-3 ;;
        "") ;;
        *) ver "$PIPE" --version ;;
    esac
}
COMMIT=$(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null || echo "?")
{
    echo "Date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "Host: $(nproc) cores (nproc), $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), kernel $(uname -r)"
    echo "ROOT: $ROOT, $(findmnt -no FSTYPE -T "$ROOT") on $(findmnt -no SOURCE -T "$ROOT")"
    [ -n "$URMOVE" ] && echo "urmove: $("$URMOVE" --version 2>/dev/null | head -1) ($COMMIT)"
    echo "Peers: $(ver rsync --version | sed 's/  */ /g'); $(ver tar --version); $(ver cp --version)${PIPE:+; $(pipe_ver)}"
} >"$LOGS/host.txt"

mkdir -p "$(dirname "$OUT")"
SMOKE=$SMOKE META=$META ROUNDS=$ROUNDS SIGMA=$SIGMA PIPE=$PIPE FILES="$FILES" TOOLS="$TOOLS" \
python3 - "$LOGS" "$OUT" <<'EOF'
import os, sys
from statistics import median

logs, out = sys.argv[1], sys.argv[2]
E = os.environ
meta = E["META"] == "1"
rows = [l.rstrip("\n").split("\t") for l in open(f"{logs}/rounds.tsv") if l.strip()]
skipped = dict(l.rstrip("\n").split("\t", 1) for l in open(f"{logs}/skipped.tsv") if l.strip())
trees = {}
for l in open(f"{logs}/trees.tsv"):
    n, s = l.rstrip("\n").split("\t")
    entries, files, dirs, nbytes, _ = s.split()
    trees[n] = (int(files), int(dirs), int(nbytes))
sizes = E["FILES"].split()
tools = E["TOOLS"].split()
names = {"urmove-lo": "urmove, loopback", "urmove-ns": "urmove, netns veth",
         "rsyncd-lo": "rsync daemon, loopback", "rsyncd-ns": "rsync daemon, netns veth",
         "rsync-local": "rsync -a, local", "tar-lo": f"tar \\| {E['PIPE'] or 'socat'} \\| tar, loopback",
         "cp": "cp -a, local"}

def med(xs):
    xs = [x for x in xs if x is not None]
    return median(xs) if xs else None

def num(s):
    return None if s in ("-", "") else float(s)

stats = {}
for n in sizes:
    for t in tools:
        rs = [r for r in rows if r[0] == n and r[1] == t]
        ok = [r for r in rs if r[7] == "ok"]
        fps = [int(n) / float(r[2]) for r in ok]
        stats[(n, t)] = {
            "fps": med(fps), "first": med(num(r[3]) for r in ok),
            "send": med(num(r[4]) for r in ok), "recv": med(num(r[5]) for r in ok),
            "cpu": med(float(r[6]) for r in ok), "rounds": fps,
            "bad": [r[7] for r in rs if r[7] != "ok"], "count": len(rs)}
measured = [n for n in sizes if n in trees and n not in skipped]
smallest = min(measured, key=int) if measured else None

def mib(kb):
    return "-" if kb is None else f"{kb / 1024:.1f}"

def rss(n, t, side):
    v = stats[(n, t)][side]
    if v is None:
        return "-"
    base = stats[(smallest, t)][side] if smallest else None
    return f"{mib(v)} ({v / base:.2f}x)" if base else mib(v)

doc = []
doc.append(f"# bench-files: {'META=1, empty files: files/s, first file and memory only' if meta else 'trees of small files'}")
doc.append("")
if E.get("SMOKE"):
    doc.append("> **A smoke run** (sizes or rounds below the defaults: FILES=\"100000 1000000 10000000\" "
               "ROUNDS=3): its numbers show that the script runs, they are not results.")
    doc.append("")
doc += [l.rstrip("\n") for l in open(f"{logs}/host.txt")]
doc.append("")
dist = ("every file empty" if meta else
        f"2% empty, the others log-normal with median 4 KiB, sigma {E['SIGMA']}, clipped to 64 KiB; "
        "1,000 files a directory, two levels")
doc.append(f"Trees: {dist}. Cold cache before each round (sync; drop_caches), destination emptied "
           "outside the timing, a fresh receiver each round. Wall time: from the client's start until "
           "both sides ended and `sync -f DST` returned (the same syncfs for every tool). "
           f"{'First file' if meta else 'First byte'}: until a regular file{'' if meta else ' with st_size > 0'} "
           "is under DST, polled every 5 ms. RSS: the largest process of each side (ru_maxrss of the "
           "side and what it reaped); local tools are one command (one RSS). CPU: user + system of both sides. "
           "A round counts only when the copy's sum (every path, type, permission bits, size, mtime to the "
           f"second and every byte) equals the source's; medians of the rounds that counted (of {E['ROUNDS']}), "
           "RSS also against the same tool's at the smallest size measured.")
doc.append("")
first_h = "first file s" if meta else "first byte s"
doc.append(f"| files | tool | files/s | {first_h} | RSS send MiB | RSS recv MiB | CPU s/GB | CPU µs/file | rounds (files/s) |")
doc.append("|---:|---|---:|---:|---:|---:|---:|---:|---|")
for n in sizes:
    if n in skipped:
        doc.append(f"| {int(n):,} | skipped: {skipped[n]} | | | | | | | |")
        continue
    files, dirs, nbytes = trees[n]
    for t in tools:
        s = stats[(n, t)]
        if s["count"] == 0:
            continue
        fps = "fail" if s["fps"] is None else f"{s['fps']:.0f}"
        first = "-" if s["first"] is None else f"{s['first']:.3f}"
        cpu_gb = "-" if s["cpu"] is None or nbytes == 0 else f"{s['cpu'] / (nbytes / 1e9):.2f}"
        cpu_f = "-" if s["cpu"] is None else f"{s['cpu'] / files * 1e6:.0f}"
        recv = "(one command)" if t in ("rsync-local", "cp") else rss(n, t, "recv")
        rounds = " ".join(f"{x:.0f}" for x in s["rounds"])
        if s["bad"]:
            rounds += f" (not counted: {', '.join(s['bad'])})"
        doc.append(f"| {int(n):,} | {names[t]} | {fps} | {first} | {rss(n, t, 'send')} | {recv} | "
                   f"{cpu_gb} | {cpu_f} | {rounds} |")
doc.append("")
pairs = [("urmove-lo", "rsyncd-lo"), ("urmove-ns", "rsyncd-ns"), ("urmove-lo", "tar-lo"), ("urmove-ns", "tar-lo")]
pairs = [p for p in pairs if p[0] in tools and p[1] in tools]
if pairs and measured:
    doc.append("| files | " + " | ".join(f"{names[a]} / {names[b]}" for a, b in pairs) + " |")
    doc.append("|---:|" + "---:|" * len(pairs))
    for n in measured:
        cells = []
        for a, b in pairs:
            x, y = stats[(n, a)]["fps"], stats[(n, b)]["fps"]
            cells.append("-" if not x or not y else f"{x / y:.2f}")
        doc.append(f"| {int(n):,} | " + " | ".join(cells) + " |")
    doc.append("")
    doc.append("(files/s, medians; the issue's goals at 1,000,000 files: 3x the rsync daemon, 1.5x tar | tar)")
text = "\n".join(doc) + "\n"
open(out, "w").write(text)
sys.stdout.write(text)
EOF
log "report in $OUT; every round in $ROUNDS_TSV"
