#!/usr/bin/env bash
# Sharded sends: one transfer over 1, 2 and 4 shards (send --shard K/N)
# against the same two receivers sharing one root, the shards' reports
# merged by `urmove report`. Per shard count it prints the aggregate rate
# (bytes over the union of the shards' time spans; median of ROUNDS
# alternating rounds), each shard's rate, the slowest shard, and the ratio
# to 1 shard and to fio's O_DIRECT write of the same bytes under DEST (the
# receiving disk's limit) measured in the same round.
#
# On one host (the default: receivers on 127.0.0.1 and 127.0.0.2, shards
# as local processes) the shards share its cores, disk and loopback: the
# run shows what sharding costs (the same bytes, the split file committed
# once), not a gain. On several DTN pairs, give RECEIVERS (their hosts,
# each running `urmove recv` on PORT over one shared filesystem) and
# LAUNCH=slurm (the shards as a Slurm array, dist/slurm/urmove-array.sbatch,
# one task per sender host): each shard then brings its own NIC, cores
# and disk path, and the aggregate is what adds up.
#
# Usage (as root):
#   scripts/bench-shards.sh
#   ROUNDS=5 SIZE_MB=8192 RECEIVERS=dtn1,dtn2 KEY=/etc/urmove/key LAUNCH=slurm scripts/bench-shards.sh
#
# Environment:
#   ROUNDS=3       rounds (the order of shard counts rotates per round)
#   SHARDS="1 2 4" shard counts
#   SIZE_MB=2048   the one large file (split over the shards), MiB
#   FILES=2000     small files beside it (4-64 KiB each)
#   RECEIVERS=     receiver hosts (default: two local daemons, started here)
#   KEY=           their key file (default: a new one for the local daemons)
#   DEST=          the local daemons' shared root (default: $WORKDIR/dest)
#   LAUNCH=local   local (shards as processes here) or slurm (sbatch --array)
#   ARGS=          more send options for every shard (-P, --block, ...)
#   WORKDIR=/var/tmp/urmove-bench-shards   sources, reports and logs
#   URMOVE=        urmove binary (default: cargo build --release in this repo)
#   PORT=17980
#   TSV=           also write every round, configuration and version to this
#                  file, tab-separated (scripts/bench-all.sh reads it)
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SHARDS=${SHARDS:-"1 2 4"}
SIZE_MB=${SIZE_MB:-2048}
FILES=${FILES:-2000}
WORKDIR=${WORKDIR:-/var/tmp/urmove-bench-shards}
DEST=${DEST:-$WORKDIR/dest}
LAUNCH=${LAUNCH:-local}
ARGS=${ARGS:-}
PORT=${PORT:-17980}
URMOVE=${URMOVE:-}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() { echo "bench-shards: $*" >&2; exit 1; }
log() { echo "bench-shards: $(date +%H:%M:%S) $*" >&2; }

[ "$(id -u)" -eq 0 ] || die "must run as root (drops the page cache)"
command -v python3 >/dev/null || die "python3 not found"
command -v fio >/dev/null || die "fio not found; install the peers with ../shared/peers/setup.sh"
for v in ROUNDS SIZE_MB FILES PORT; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a number"
done
case $LAUNCH in local|slurm) ;; *) die "LAUNCH is local or slurm" ;; esac
if [ -z "$URMOVE" ]; then
  (cd "$ROOT" && cargo build --release -q) || die "cargo build failed"
  URMOVE=$ROOT/target/release/urmove
fi
mkdir -p "$WORKDIR"
src=$WORKDIR/src/set
if [ ! -s "$src/big.dat" ] || [ "$(stat -c %s "$src/big.dat")" -ne $((SIZE_MB << 20)) ]; then
  log "making the sources: ${SIZE_MB} MiB and $FILES small files"
  rm -rf "$WORKDIR/src"
  mkdir -p "$src/small"
  head -c $((SIZE_MB << 20)) /dev/urandom > "$src/big.dat"
  for i in $(seq 1 "$FILES"); do head -c $(( (RANDOM % 61 + 4) << 10 )) /dev/urandom > "$src/small/f$i"; done
fi
bytes=$(du -sb "$src" | cut -f1)

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT
if [ -z "${RECEIVERS:-}" ]; then
  RECEIVERS=127.0.0.1,127.0.0.2
  KEY=${KEY:-$WORKDIR/key}
  [ -s "$KEY" ] || "$URMOVE" keygen "$KEY" >/dev/null
  mkdir -p "$DEST" "$WORKDIR/state"
  for h in 127.0.0.1 127.0.0.2; do
    "$URMOVE" recv --listen "$h:$PORT" --root "$DEST" --key-file "$KEY" \
      --state-dir "$WORKDIR/state" > "$WORKDIR/recv-$h.log" 2>&1 &
    pids+=($!)
  done
  sleep 1
  local_dest=1
else
  [ -n "${KEY:-}" ] || die "RECEIVERS needs KEY, their key file"
  local_dest=0
fi

# One sharded transfer into a fresh destination: its merged report.
run_shards() {
  local n=$1
  local out=$WORKDIR/reports-$n dest=bench-$n
  rm -rf "$out"; mkdir -p "$out"
  [ "$local_dest" = 1 ] && rm -rf "${DEST:?}/$dest"
  sync; echo 3 > /proc/sys/vm/drop_caches
  if [ "$LAUNCH" = slurm ]; then
    URMOVE=$URMOVE URMOVE_SOURCES=$src URMOVE_TO="$RECEIVERS:$dest" URMOVE_KEY=$KEY \
      URMOVE_REPORTS=$out URMOVE_ARGS="-p $PORT $ARGS" \
      sbatch --array=0-$((n - 1)) --wait -o "$out/task-%a.out" "$ROOT/dist/slurm/urmove-array.sbatch" >/dev/null || true
  else
    local k spids=()
    for k in $(seq 0 $((n - 1))); do
      # shellcheck disable=SC2086 # ARGS is a list
      "$URMOVE" send --shard "$k/$n" --json -p "$PORT" --key-file "$KEY" $ARGS "$src" \
        "$RECEIVERS:$dest" > "$out/shard-$k.json" 2> "$out/shard-$k.err" &
      spids+=($!)
    done
    for k in "${spids[@]}"; do wait "$k" || true; done
  fi
  "$URMOVE" report --json "$out"/shard-*.json > "$out/merged.json" || log "$n shards: not complete (see $out)"
  cat "$out/merged.json"
}

# fio's O_DIRECT sequential write of the same bytes under DEST (local) or
# WORKDIR: what the receiving disk takes.
fio_write() {
  local at=$WORKDIR
  [ "$local_dest" = 1 ] && at=$DEST
  fio --name=w --filename="$at/fio.tmp" --rw=write --bs=4M --direct=1 --ioengine=libaio \
    --iodepth=8 --size="$bytes" --output-format=json 2>/dev/null \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["write"]["bw_bytes"]*8)'
  rm -f "$at/fio.tmp"
}

results=$WORKDIR/results.txt
: > "$results"
read -ra counts <<< "$SHARDS"
for round in $(seq 1 "$ROUNDS"); do
  rot=$(( (round - 1) % ${#counts[@]} ))
  order=("${counts[@]:rot}" "${counts[@]:0:rot}")
  log "round $round: fio, then ${order[*]} shards"
  echo "fio $round $(fio_write)" >> "$results"
  for n in "${order[@]}"; do
    run_shards "$n" | python3 -c '
import json, sys
m = json.load(sys.stdin)
per = " ".join("%d:%.0f" % (s["index"], s["rate_bits_per_s"] / 1e6) for s in m["per_shard"])
slow = m["slowest"]["index"] if m.get("slowest") else -1
print("shards %s %s %.0f %s %s %s" % (sys.argv[1], sys.argv[2], m["rate_bits_per_s"], m["complete"], slow, per or "-"))
' "$n" "$round" >> "$results"
  done
done

V_FIO=$(fio --version 2>/dev/null)
COMMIT=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo "?")
V_FIO=$V_FIO LAUNCH=$LAUNCH RECEIVERS=$RECEIVERS FILES=$FILES SIZE_MB=$SIZE_MB ARGS=$ARGS TSV=${TSV:-} \
python3 - "$results" "$bytes" <<'EOF'
import os, statistics, sys
E = os.environ
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
fio = {r[1]: float(r[2]) for r in rows if r[0] == "fio"}
runs = [r for r in rows if r[0] == "shards"]
counts = sorted({int(r[1]) for r in runs})
def med(xs): return statistics.median(xs) if xs else float("nan")
one = {r[2]: float(r[3]) for r in runs if r[1] == str(counts[0])}
print(f"### Sharded sends: one transfer over {', '.join(map(str, counts))} shards (urmove alone; the"
      f" receiving disk's limit from {E['V_FIO']})\n")
print(f"{int(sys.argv[2]) / 2**20:.0f} MiB per transfer (one {E['SIZE_MB']} MiB file split over the shards and"
      f" {E['FILES']} small files), receivers {E['RECEIVERS']} sharing one root, shards launched {E['LAUNCH']},"
      f" reports merged by urmove report; median of {len(fio)} rounds. fio: --rw=write --bs=4M --direct=1"
      f" --ioengine=libaio --iodepth=8 of as many bytes under the receivers' root, in the same round.\n")
print(f"| shards | aggregate Gbit/s | x {counts[0]} shard | x fio write | complete | per-shard Mb/s, last round (slowest) |")
print("|---:|---:|---:|---:|---|---|")
for n in counts:
    rs = [r for r in runs if int(r[1]) == n]
    agg = med([float(r[3]) for r in rs])
    vs1 = med([float(r[3]) / one[r[2]] for r in rs if r[2] in one])
    vsf = med([float(r[3]) / fio[r[2]] for r in rs if r[2] in fio])
    done = all(r[4] == "True" for r in rs)
    last = rs[-1]
    print(f"| {n} | {agg / 1e9:.2f} | {vs1:.2f} | {vsf:.2f} | {done} | {' '.join(last[6:])} (shard {last[5]}) |")
print("\nEvery round (Gbit/s):\n")
print("```text")
for n in counts:
    print(f"  {n} shards: " + ", ".join(f"{float(r[3]) / 1e9:.2f}" for r in runs if int(r[1]) == n))
print("  fio write: " + ", ".join(f"{v / 1e9:.2f}" for v in fio.values()))
print("```")
if E.get("TSV"):
    with open(E["TSV"], "a") as t:
        for r in runs:
            t.write(f"round\tshards\tshards\t{r[1]}\t{r[2]}\t{r[3]}\t{r[4]}\n")
        for k, v in fio.items():
            t.write(f"round\tshards\tshards\tfio-write\t{k}\t{v}\t\n")
        t.write(f"version\tshards\tfio\t{E['V_FIO']}\n")
EOF
cat <<EOF

\`\`\`text
Command: ROUNDS=$ROUNDS SHARDS="$SHARDS" SIZE_MB=$SIZE_MB FILES=$FILES LAUNCH=$LAUNCH scripts/bench-shards.sh
urmove:  $URMOVE ($COMMIT)
Date:    $(date -Is)
\`\`\`
EOF
