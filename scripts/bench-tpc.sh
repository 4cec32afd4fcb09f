#!/usr/bin/env bash
# HTTP third-party-copy benchmark (issue 37): gfal2 (the client FTS3 drives
# storage with) copying between two HTTPS endpoints on this machine, both
# roots on the same filesystem under ROOT, cold cache, every copy checked.
#
# Peers (PEERS): each is a pair of endpoints of one kind, or SRC:DST kinds:
#   xrootd   two XRootD servers from Debian (XrdHttp + XrdHttpTPC), as nobody
#   urmove   two `urmove recv --http` endpoints (needs the HTTP front)
#   xrootd:urmove, urmove:xrootd   mixed pairs
# Cases (CASES):
#   big    one file of SIZE_MB MiB: gfal-copy --copy-mode pull -K adler32
#   tree   FILES files of FILE_KIB KiB in DIRS directories, submitted as ONE
#          FTS-like batch (TREE_DRIVER=fts, the default): scripts/tpc-batch.py
#          runs CONCURRENCY copies at once over kept-alive connections, per
#          file the source's adler32, the destination's directories made
#          once, the COPY (pull) with its markers, the destination's adler32
#          compared, as an FTS server's url-copy processes do. TREE_DRIVER=gfal
#          uses gfal2's bulk filecopy instead (one context, sequential; it
#          spends about 0.2 s of its own CPU per file, so it measures gfal).
#   send   the same big file by plain `urmove send` to `urmove recv` over
#          loopback (the engine without HTTP), once per round, peer "urmove-send"
# ROUNDS rounds, the order of the peers rotated each round; before each run
# `sync` and drop_caches; wall time from the client's start until it ended
# and `sync -f` of the destination returned. A run counts only when its
# copy checks (cmp; the file count and a digest of every path and byte).
# Prints one line per case and peer, the median of the runs that counted:
#   TSV=<case>\t<peer>\t<seconds>\t<rate>     (rate: Gbit/s or files/s)
#
# Usage (as root):
#   scripts/bench-tpc.sh                                   # xrootd, big tree send
#   SIZE_MB=256 FILES=500 ROUNDS=1 scripts/bench-tpc.sh    # a quick try
#   PEERS="xrootd urmove" URMOVE=target/release/urmove scripts/bench-tpc.sh
#
# Environment:
#   ROUNDS=3  PEERS=xrootd  CASES="big tree send"  SIZE_MB=4096  FILES=10000
#   DIRS=100  FILE_KIB=4  ROOT=/var/tmp/urmove-bench-tpc  KEEP_SRC=1
#   URMOVE=   urmove binary (default: cargo build --release here, when needed)
#   TOKEN=   the bearer token sent (default: one made by scripts/test-token.sh
#            for every path, which the urmove endpoints' issuers file trusts;
#            xrootd ignores it; without one gfal asks for X509 delegation,
#            which xrootd refuses)
#   TREE_DRIVER=fts  CONCURRENCY=4
#   STREAMS=  gfal-copy -n (default: gfal's)   TIMEOUT=3600   PORT=random 8100-8899
set -euo pipefail

ROUNDS=${ROUNDS:-3}
PEERS=${PEERS:-xrootd}
CASES=${CASES:-big tree send}
SIZE_MB=${SIZE_MB:-4096}
FILES=${FILES:-10000}
DIRS=${DIRS:-100}
FILE_KIB=${FILE_KIB:-4}
ROOT=${ROOT:-/var/tmp/urmove-bench-tpc}
KEEP_SRC=${KEEP_SRC:-1}
URMOVE=${URMOVE:-}
TOKEN=${TOKEN:-}
TREE_DRIVER=${TREE_DRIVER:-fts}
CONCURRENCY=${CONCURRENCY:-4}
STREAMS=${STREAMS:-}
TIMEOUT=${TIMEOUT:-3600}
PORT=${PORT:-$((8100 + RANDOM % 700))}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "bench-tpc: $*" >&2; exit 1; }
log() { echo "bench-tpc: $(date +%H:%M:%S) $*" >&2; }

for v in ROUNDS SIZE_MB FILES DIRS FILE_KIB PORT CONCURRENCY; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
for c in $CASES; do [[ " big tree send " == *" $c "* ]] || die "unknown case '$c' (big tree send)"; done
kinds=""
for p in $PEERS; do
    for k in ${p/:/ }; do
        [[ " xrootd urmove " == *" $k "* ]] || die "unknown endpoint kind '$k' in peer '$p' (xrootd urmove)"
        [[ " $kinds " == *" $k "* ]] || kinds="$kinds $k"
    done
done
has_case() { [[ " $CASES " == *" $1 "* ]]; }
[ "$(id -u)" = 0 ] || die "needs root (drop_caches; xrootd runs as nobody)"
PY=/usr/bin/python3
$PY -c 'import gfal2' 2>/dev/null || die "needs python3-gfal2 (apt-get install gfal2-util-scripts)"
for t in gfal-copy openssl; do command -v $t >/dev/null || die "needs $t"; done
[[ " $kinds " == *" xrootd "* ]] && { [ -x /usr/bin/xrootd ] || die "needs xrootd-server and xrootd-server-plugins"; }
if { [[ " $kinds " == *" urmove "* ]] || has_case send; } && [ -z "$URMOVE" ]; then
    log "building urmove (cargo build --release --bins in $REPO)"
    (cd "$REPO" && cargo build --release --quiet --bins) || die "cargo build failed"
    URMOVE=${CARGO_TARGET_DIR:-$REPO/target}/release/urmove
fi
[ -z "$URMOVE" ] || { [ -x "$URMOVE" ] || die "no urmove binary at $URMOVE"; URMOVE=$(realpath "$URMOVE"); }
ISSUER=$ROOT/issuer
if [ -z "$TOKEN" ]; then
    TOKEN=$("$REPO/scripts/test-token.sh" "$ISSUER" https://localhost \
        "storage.read:/ storage.create:/ storage.modify:/" 24) || die "scripts/test-token.sh failed"
fi
export GFAL_PYTHONBIN=$PY BEARER_TOKEN=$TOKEN
unset X509_USER_PROXY X509_USER_CERT X509_USER_KEY

mkdir -p "$ROOT"
ROOT=$(cd "$ROOT" && pwd)
SRC=$ROOT/srcroot          # exported by every source endpoint: src/big, src/tree
WORK=$ROOT/run             # configs, logs, the PKI, the destination roots
rm -rf "$WORK"
mkdir -p "$SRC/src" "$WORK/logs"
ROUNDS_TSV=$WORK/logs/rounds.tsv
: >"$ROUNDS_TSV"
export X509_CERT_DIR=$WORK/pki/ca

# --- space, sources -------------------------------------------------------------
need=$(( (SIZE_MB * 2 + FILES * (FILE_KIB + 4) * 2 / 1024 + 2048) * 1048576 ))
free=$(df -B1 --output=avail "$ROOT" | tail -1 | tr -d ' ')
[ -f "$SRC/big.done" ] && need=$((need - SIZE_MB * 1048576))
[ "$need" -le "$free" ] || die "needs $((need >> 20)) MiB free on $ROOT, $((free >> 20)) MiB free"

# tree_sum DIR: "FILES DIGEST" over every file's relative path and bytes
tree_sum() {
    $PY - "$1" <<'PY'
import hashlib, os, sys
root = sys.argv[1]
h, n = hashlib.sha256(), 0
for d, subdirs, files in os.walk(root):
    subdirs.sort()
    for f in sorted(files):
        p = os.path.join(d, f)
        h.update(os.path.relpath(p, root).encode() + b"\0")
        with open(p, "rb") as fh:
            h.update(fh.read())
        n += 1
print(n, h.hexdigest())
PY
}
big_id="big-${SIZE_MB}m"
tree_id="tree-${FILES}x${FILE_KIB}k-${DIRS}d"
if { has_case big || has_case send; } && [ "$(cat "$SRC/big.done" 2>/dev/null)" != "$big_id" ]; then
    log "making $SRC/src/big ($SIZE_MB MiB)"
    rm -f "$SRC/src/big" "$SRC/big.done"
    head -c $((SIZE_MB << 20)) /dev/urandom >"$SRC/src/big"
    echo "$big_id" >"$SRC/big.done"
fi
if has_case tree && [ "$(head -1 "$SRC/tree.done" 2>/dev/null)" != "$tree_id" ]; then
    log "making $SRC/src/tree ($FILES files of $FILE_KIB KiB in $DIRS directories)"
    rm -rf "$SRC/src/tree" "$SRC/tree.done"
    $PY - "$SRC/src/tree" "$FILES" "$DIRS" "$FILE_KIB" <<'PY'
import os, random, sys
root, n, dirs, kib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(2)
for i in range(n):
    d = os.path.join(root, f"d{i % dirs:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}"), "wb") as f:
        f.write(r.randbytes(kib * 1024))
PY
    { echo "$tree_id"; tree_sum "$SRC/src/tree"; } >"$SRC/tree.done"
fi
chown -R nobody:nogroup "$SRC"

# --- the PKI, the endpoints ---------------------------------------------------------
pki() {
    local d=$WORK/pki
    mkdir -p "$d/ca"
    (cd "$d" &&
        openssl req -x509 -newkey rsa:2048 -nodes -days 3 -keyout ca.key -out ca/ca.pem \
            -subj "/CN=bench-tpc CA" -addext basicConstraints=critical,CA:true \
            -addext keyUsage=critical,keyCertSign,cRLSign &&
        openssl req -newkey rsa:2048 -nodes -keyout host.key -out host.csr -subj /CN=localhost &&
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >host.ext &&
        openssl x509 -req -in host.csr -CA ca/ca.pem -CAkey ca.key -CAcreateserial -days 3 \
            -out host.pem -extfile host.ext &&
        openssl rehash ca) >"$WORK/logs/pki.log" 2>&1 || die "openssl failed: $WORK/logs/pki.log"
}
pki
"$URMOVE" keygen "$WORK/psk" >/dev/null
PIDS=()

# wait_port PORT WHAT: until 127.0.0.1:PORT accepts (60 s at most) while
# the last process started lives
wait_port() {
    local i pid=${PIDS[-1]}
    for ((i = 0; i < 600; i++)); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || die "$2 exited (logs in $WORK/logs and $WORK/ep-*/xrootd.log)"
        sleep 0.1
    done
    die "$2 not listening on $1 (logs in $WORK/logs and $WORK/ep-*/xrootd.log)"
}

# start_endpoint KIND NAME ROOT PORT: an HTTPS endpoint serving ROOT on
# 127.0.0.1:PORT (urmove: its own protocol on PORT+1), in the background.
start_endpoint() {
    local kind=$1 name=$2 root=$3 port=$4 d=$WORK/ep-$2
    mkdir -p "$d" "$root"
    case $kind in
        xrootd)
            mkdir -p "$d/adm" "$d/run" "$d/tls"
            cp "$WORK/pki/host.pem" "$WORK/pki/host.key" "$d/tls/"
            cp -rL "$WORK/pki/ca" "$d/tls/ca"
            cat >"$d/xrootd.cfg" <<EOF
all.export / writable
oss.localroot $root
all.adminpath $d/adm
all.pidpath $d/run
xrd.port any
xrd.protocol XrdHttp:$port libXrdHttp.so
xrd.allow host localhost
xrd.tls $d/tls/host.pem $d/tls/host.key
xrd.tlsca certdir $d/tls/ca
http.exthandler xrdtpc libXrdHttpTPC.so
xrootd.chksum max 32 adler32 md5 crc32c
EOF
            chown -R nobody:nogroup "$d" "$root"
            # as nobody, it writes its log in its own directory
            /usr/bin/xrootd -R nobody -c "$d/xrootd.cfg" -l "$d/xrootd.log" </dev/null >"$WORK/logs/$name.out" 2>&1 &
            PIDS+=($!) ;;
        urmove)
            "$URMOVE" recv --root "$root" --listen "127.0.0.1:$((port + 1))" --key-file "$WORK/psk" \
                --state-dir "$d/state" --http "127.0.0.1:$port" \
                --http-cert "$WORK/pki/host.pem" --http-key "$WORK/pki/host.key" \
                --http-ca "$WORK/pki/ca/ca.pem" --token-issuers "$ISSUER/issuers.toml" \
                </dev/null >"$WORK/logs/$name.log" 2>&1 &
            PIDS+=($!) ;;
        *) die "start_endpoint: unknown kind $kind" ;;
    esac
    wait_port "$port" "$name ($kind)"
}

cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "${WORK:?}"/dst-* 2>/dev/null || true
    if [ "$KEEP_SRC" = 0 ]; then rm -rf "$SRC"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# One source endpoint of each kind over SRC, one destination endpoint of
# each kind with its own root; URL_<role>_<kind> their base URLs.
declare -A URL DST
next=$PORT
for k in $kinds; do
    start_endpoint "$k" "src-$k" "$SRC" "$next"
    URL[src-$k]=davs://localhost:$next
    next=$((next + 2))
    DST[$k]=$WORK/dst-$k
    start_endpoint "$k" "dst-$k" "${DST[$k]}" "$next"
    URL[dst-$k]=davs://localhost:$next
    next=$((next + 2))
done
if has_case send; then
    SEND_ROOT=$WORK/dst-send
    SEND_PORT=$next
    mkdir -p "$SEND_ROOT"
    "$URMOVE" recv --root "$SEND_ROOT" --key-file "$WORK/psk" --listen "127.0.0.1:$SEND_PORT" \
        --state-dir "$WORK/send-state" </dev/null >"$WORK/logs/send-recv.log" 2>&1 &
    PIDS+=($!)
    wait_port "$SEND_PORT" "urmove recv"
fi
log "endpoints up: ${URL[*]}"

# The batch: one gfal2 context, one bulk filecopy of every (source, destination).
cat >"$WORK/batch.py" <<'PY'
import sys, gfal2
lines = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
ctx = gfal2.creat_context()
ctx.set_opt_boolean("HTTP PLUGIN", "ENABLE_REMOTE_COPY", True)
ctx.set_opt_boolean("HTTP PLUGIN", "ENABLE_FALLBACK_TPC_COPY", False)
ctx.set_opt_string("HTTP PLUGIN", "DEFAULT_COPY_MODE", "3rd pull")
p = ctx.transfer_parameters()
p.create_parent = True
p.timeout = int(sys.argv[2])
p.set_checksum(gfal2.checksum_mode.both, "adler32", "")
errors = ctx.filecopy(p, [l[0] for l in lines], [l[1] for l in lines])
bad = [(l[0], e) for l, e in zip(lines, errors) if e is not None]
for s, e in bad[:5]:
    print(f"{s}: {e.message}", file=sys.stderr)
sys.exit(1 if bad else 0)
PY

# --- one run -------------------------------------------------------------------------
now() { echo "$EPOCHREALTIME"; }
SEQ=0

# run_once CASE PEER: one timed copy, checked; appends "case peer wall status"
run_once() {
    local case=$1 peer=$2 sk dk rc=0 status=ok t0 t1 dest rel
    SEQ=$((SEQ + 1))
    rel=r-$SEQ
    if [ "$peer" = urmove-send ]; then dest=$SEND_ROOT; else
        sk=${peer%%:*}; dk=${peer##*:}; dest=${DST[$dk]}/$rel
    fi
    if [ "$case" = tree ]; then
        local su=${URL[src-$sk]} du=${URL[dst-$dk]}
        [ "$TREE_DRIVER" = gfal ] || { su=${su/davs:/https:}; du=${du/davs:/https:}; }
        (cd "$SRC/src" && find tree -type f) | awk -v s="$su/src" -v d="$du/$rel" \
            '{ print s "/" $0 "\t" d "/" $0 }' >"$WORK/batch.list"
    fi
    sync; echo 3 >/proc/sys/vm/drop_caches
    t0=$(now)
    case $case in
        big)
            # shellcheck disable=SC2086
            timeout "$TIMEOUT" gfal-copy -p --copy-mode pull -K adler32 ${STREAMS:+-n $STREAMS} \
                "${URL[src-$sk]}/src/big" "${URL[dst-$dk]}/$rel/big" >>"$WORK/logs/gfal.log" 2>&1 || rc=$? ;;
        tree)
            if [ "$TREE_DRIVER" = gfal ]; then
                timeout "$TIMEOUT" $PY "$WORK/batch.py" "$WORK/batch.list" "$TIMEOUT" >>"$WORK/logs/gfal.log" 2>&1 || rc=$?
            else
                timeout "$TIMEOUT" $PY "$REPO/scripts/tpc-batch.py" "$WORK/batch.list" "$WORK/pki/ca/ca.pem" \
                    "$TOKEN" "$CONCURRENCY" pull >>"$WORK/logs/batch.log" 2>&1 || rc=$?
            fi ;;
        send)
            timeout "$TIMEOUT" "$URMOVE" send --key-file "$WORK/psk" -p "$SEND_PORT" "$SRC/src/big" 127.0.0.1: \
                >>"$WORK/logs/send.log" 2>&1 || rc=$? ;;
    esac
    sync -f "$dest" 2>/dev/null || sync
    t1=$(now)
    [ "$rc" = 0 ] || status=exit-$rc
    if [ "$status" = ok ]; then
        if [ "$case" = tree ]; then
            [ "$(tail -1 "$SRC/tree.done")" = "$(tree_sum "$dest/tree")" ] || status=mismatch
        else
            cmp -s "$SRC/src/big" "$dest/big" || status=mismatch
        fi
        [ "$status" = ok ] || log "$case $peer: the copy differs from the source"
    fi
    if [ "$peer" = urmove-send ]; then rm -f "$dest/big"; else rm -rf "${dest:?}"; fi
    local wall
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
    printf '%s\t%s\t%s\t%s\n' "$case" "$peer" "$wall" "$status" >>"$ROUNDS_TSV"
    log "$case, $peer: $status, $wall s"
}

read -ra peers <<<"$PEERS"
for p in "${!peers[@]}"; do [[ ${peers[$p]} == *:* ]] || peers[p]=${peers[$p]}:${peers[$p]}; done
np=${#peers[@]}
for ((r = 0; r < ROUNDS; r++)); do
    for c in $CASES; do
        if [ "$c" = send ]; then run_once send urmove-send; continue; fi
        for ((k = 0; k < np; k++)); do run_once "$c" "${peers[$(((k + r) % np))]}"; done
    done
done

# --- the medians ------------------------------------------------------------------------
SIZE_MB=$SIZE_MB FILES=$FILES $PY - "$ROUNDS_TSV" <<'PY'
import os, sys
from statistics import median
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
big = int(os.environ["SIZE_MB"]) << 20
files = int(os.environ["FILES"])
seen = []
for c, p, _, _ in rows:
    if (c, p) not in seen:
        seen.append((c, p))
for c, p in seen:
    ok = [float(r[2]) for r in rows if r[0] == c and r[1] == p and r[3] == "ok"]
    bad = [r[3] for r in rows if r[0] == c and r[1] == p and r[3] != "ok"]
    if not ok:
        print(f"TSV={c}\t{p}\tfail\t-" + (f"\t({', '.join(bad)})" if bad else ""))
        continue
    s = median(ok)
    rate = f"{files / s:.0f} files/s" if c == "tree" else f"{big * 8 / s / 1e9:.2f} Gbit/s"
    print(f"TSV={c}\t{p}\t{s:.2f}\t{rate}" + (f"\t(not counted: {', '.join(bad)})" if bad else ""))
PY
log "every run in $ROUNDS_TSV; logs in $WORK/logs"
