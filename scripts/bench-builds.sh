#!/usr/bin/env bash
# Two builds of urmove against the same peers in one run, for a change that
# must not cost speed (a refactor): `bench --net` against iperf3 on loopback,
# and `send` of one file to a daemon (cold cache, O_DIRECT writes) against
# fio writing the same size with O_DIRECT, in alternating rounds whose order
# turns each round. Prints each tool's median, each build's ratio to its peer
# and how far the NEW build's ratios are from the OLD's (a refactor should
# stay within a few percent on this noisy kind of machine).
#
# Usage (as root, iperf3 and fio installed):
#   scripts/bench-builds.sh OLD_URMOVE NEW_URMOVE
#   git worktree add /tmp/old <commit> && (cd /tmp/old && cargo build --release)
#   scripts/bench-builds.sh /tmp/old/target/release/urmove target/release/urmove
#
# Environment: ROUNDS=5 DUR=10 (seconds per network test) STREAMS=4
#   FILE_MB=2048 (the file sent and fio's size) WORKDIR=/var/tmp/urmove-bench-builds
#   JOBS="net send" (either alone runs only its rounds)
set -euo pipefail

die() { echo "bench-builds: $*" >&2; exit 1; }
log() { echo "bench-builds: $(date +%H:%M:%S) $*" >&2; }
[ $# -eq 2 ] || die "usage: $0 OLD_URMOVE NEW_URMOVE"
OLD=$(realpath "$1"); NEW=$(realpath "$2")
for b in "$OLD" "$NEW"; do [ -x "$b" ] || die "not an executable: $b"; done
[ "$(id -u)" -eq 0 ] || die "must run as root (it drops the page cache)"
for t in iperf3 fio python3; do command -v $t >/dev/null || die "$t not found"; done
ROUNDS=${ROUNDS:-5} DUR=${DUR:-10} STREAMS=${STREAMS:-4} FILE_MB=${FILE_MB:-2048}
WORKDIR=${WORKDIR:-/var/tmp/urmove-bench-builds}
IPERF_PORT=${IPERF_PORT:-5301}
JOBS=${JOBS:-net send}
for j in $JOBS; do [[ $j = net || $j = send ]] || die "JOBS: net and send, not '$j'"; done

mkdir -p "$WORKDIR"
WORK=$(mktemp -d "$WORKDIR/run.XXXXXX")
PIDS=()
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

jget() { python3 -c 'import json,sys; t=open(sys.argv[1]).read(); d,_=json.JSONDecoder().raw_decode(t[t.index("{"):]); print(d[sys.argv[2]])' "$1" "$2"; }
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# recv BUILD NAME: a daemon of BUILD on 127.0.0.1, its port in NAME_PORT.
recv() {
    local bin=$1 name=$2 err=$WORK/$2.recv.log port="" i
    mkdir -p "$WORK/$name.root"
    "$bin" recv --listen 127.0.0.1:0 --root "$WORK/$name.root" --key-file "$WORK/key" 2>"$err" &
    PIDS+=($!)
    for (( i = 0; i < 100; i++ )); do
        port=$(sed -n 's/^urmove recv: listening on .*:\([0-9][0-9]*\), root .*/\1/p' "$err" | head -1)
        [ -n "$port" ] && break
        sleep 0.1
    done
    [ -n "$port" ] || { cat "$err" >&2; die "$bin recv did not start"; }
    printf -v "${name}_PORT" '%s' "$port"
}

# measure TOOL: one round of TOOL, its rate (bits/s for net, bytes/s for disk).
measure() {
    local out=$WORK/out.json t0 t1
    case $1 in
        iperf3) iperf3 -c 127.0.0.1 -p "$IPERF_PORT" -P "$STREAMS" -l 1M -t "$DUR" -J >"$out"
                python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"])' "$out" ;;
        net-old|net-new)
            local bin=$OLD port=$old_PORT
            [ "$1" = net-new ] && { bin=$NEW; port=$new_PORT; }
            "$bin" bench --net 127.0.0.1 -p "$port" -P "$STREAMS" --time "${DUR}s" --key-file "$WORK/key" --json >"$out" 2>/dev/null
            [ "$(jget "$out" status)" = ok ] || die "$1: status $(jget "$out" status)"
            jget "$out" rate_bits_per_s ;;
        fio)
            rm -f "$WORK/fio.dat"
            fio --name=w --filename="$WORK/fio.dat" --rw=write --bs=1M --size="${FILE_MB}M" --direct=1 \
                --ioengine=io_uring --iodepth=16 --end_fsync=1 --output-format=json >"$out"
            python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs"][0]["write"]["bw_bytes"])' "$out"
            rm -f "$WORK/fio.dat" ;;
        send-old|send-new)
            local bin=$OLD port=$old_PORT root=$WORK/old.root
            [ "$1" = send-new ] && { bin=$NEW; port=$new_PORT; root=$WORK/new.root; }
            find "$root" -mindepth 1 -delete
            drop_caches
            t0=$(date +%s.%N)
            "$bin" send -p "$port" -P "$STREAMS" --key-file "$WORK/key" --json "$WORK/src.bin" 127.0.0.1: >"$out" 2>/dev/null
            t1=$(date +%s.%N)
            [ "$(jget "$out" status)" = ok ] && [ "$(jget "$out" files_verified)" = 1 ] || die "$1: $(cat "$out")"
            cmp -s "$WORK/src.bin" "$root/src.bin" || die "$1: the copy differs"
            python3 -c "import sys; print($FILE_MB * 1048576 / ($t1 - $t0))" ;;
    esac
}

log "keys, a ${FILE_MB} MiB file, daemons of both builds, iperf3 -s"
"$NEW" keygen "$WORK/key" >/dev/null
if [[ " $JOBS " = *" send "* ]]; then head -c $(( FILE_MB * 1048576 )) /dev/urandom >"$WORK/src.bin"; fi
recv "$OLD" old
recv "$NEW" new
iperf3 -s -p "$IPERF_PORT" >/dev/null 2>&1 &
PIDS+=($!)
sleep 0.5

TOOLS=(iperf3 net-old net-new fio send-old send-new)
: >"$WORK/rounds.tsv"
for (( r = 0; r < ROUNDS; r++ )); do
    # Each group turns: the builds alternate which goes first.
    if (( r % 2 )); then order=(net-new net-old iperf3 send-new send-old fio)
    else order=(iperf3 net-old net-new fio send-old send-new); fi
    for t in "${order[@]}"; do
        case $t in iperf3|net-*) job=net ;; *) job=send ;; esac
        [[ " $JOBS " = *" $job "* ]] || continue
        v=$(measure "$t")
        printf '%s\t%s\t%s\n' "$t" "$r" "$v" >>"$WORK/rounds.tsv"
        log "round $(( r + 1 ))/$ROUNDS $t: $v"
    done
done

ROUNDS=$ROUNDS OLD_V=$("$OLD" --version | head -1) NEW_V=$("$NEW" --version | head -1) \
python3 - "$WORK/rounds.tsv" "${TOOLS[@]}" <<'EOF'
import os, sys
from statistics import median
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
med = {t: median(float(v) for tt, _, v in rows if tt == t) for t in sys.argv[2:] if any(r[0] == t for r in rows)}
print(f"old: {os.environ['OLD_V']}; new: {os.environ['NEW_V']}; medians of {os.environ['ROUNDS']} rounds")
print("| job | peer | old | new | old/peer | new/peer | new vs old |")
print("|---|---|---|---|---|---|---|")
for job, peer, unit, scale in (("bench --net", "iperf3", "Gbit/s", 1e9), ("send", "fio", "MB/s", 1e6)):
    k = "net" if job.startswith("bench") else "send"
    if peer not in med:
        continue
    p, o, n = med[peer], med[f"{k}-old"], med[f"{k}-new"]
    print(f"| {job} | {peer} {p / scale:.2f} {unit} | {o / scale:.2f} | {n / scale:.2f} | "
          f"{o / p:.3f} | {n / p:.3f} | {100 * (n / p - o / p) / (o / p):+.1f}% |")
EOF
