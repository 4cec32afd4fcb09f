#!/usr/bin/env bash
# Long-path benchmark: urmove against iperf3 (and FDT, given a jar) through
# urmove-delayline, a user-space delay line between two network namespaces
# (this kernel has no netem): each path at each loss rate, the peers in the
# same run, medians of ROUNDS alternating rounds, each printed as a ratio to
# the path's rate.
#
# For each PATH (RATE:RTT) and each LOSS:
#   urmove bench --net   at defaults, then -P N for N in SWEEP
#   urmove send          of one FILE_MB file (disk to disk, O_DIRECT on the
#                        receiver), at defaults, then -P N for N in SWEEP;
#                        and at defaults by the wall clock (from the
#                        command's start to its end: the session's setup
#                        and round trips counted, not only its data)
#   iperf3 -c            -P N for N in IPERF_P (memory to memory), and N
#                        processes side by side (-P 1 each, each its own
#                        server, rates summed) for N in IPERF_PROCS
#   FDT                  -P N -ss 16M for N in FDT_P, memory to memory
#                        (-nettest) and the file, only when FDT_JAR is given
# Both namespaces get the per-namespace part (net.ipv4.*: socket buffer
# autotuning, congestion control) of the sysctl profile `urmove tune --rtt
# RTT --print-sysctl` prints (HOST=tuned, the default: what a data-transfer
# node runs), or keep
# the kernel's defaults (HOST=default: 4 MiB send buffers, where -P auto and
# urmove's buffer warning show).
#
# Usage (as root):
#   scripts/bench-wan.sh                                   # every path and loss
#   PATHS=1Gbit:100ms LOSSES="0 0.001 0.015" scripts/bench-wan.sh
#   FDT_JAR=/opt/fdt/fdt.jar PATHS=1Gbit:100ms scripts/bench-wan.sh
#
# Environment:
#   PATHS="1Gbit:100ms 10Gbit:20ms 2Gbit:100ms"  RATE:RTT of each path
#   LOSSES="0 0.001 0.015"   random loss each way (0.015 = 1.5%)
#   ROUNDS=3                 rounds per configuration (tool order rotates)
#   DUR=10                   seconds per memory-to-memory run
#   FILE_MB=2048             size of the file sent (random, made once)
#   SWEEP="1 4 8 12"         urmove -P values after the defaults ("" for none)
#   IPERF_P="1 4 8"          iperf3 -P values (one process: iperf3 3.12 runs
#                            its streams on one thread)
#   IPERF_PROCS=             iperf3 process counts (e.g. "8"; none by default)
#   FDT_P="4 8 12"           FDT -P values; FDT_JAR=path/to/fdt.jar to run it
#   HOST=tuned|default       sysctls in the namespaces (see above)
#   TIMEOUT=300              seconds before one run counts as hung
#   WORKDIR=/var/tmp/urmove-bench-wan    sources, receiver root, keys, logs
#   URMOVE=                  urmove binary (default: cargo build --release here)
#   NS_A=urmwan-a NS_B=urmwan-b ADDR_A=10.79.0.1 ADDR_B=10.79.0.2
#   TSV=                     also write every round, configuration and version
#                            to this file, tab-separated (scripts/bench-all.sh)
# The iperf3 servers listen on 15301 and up (one per process of IPERF_PROCS).
set -euo pipefail

PATHS=${PATHS:-1Gbit:100ms 10Gbit:20ms 2Gbit:100ms}
LOSSES=${LOSSES:-0 0.001 0.015}
ROUNDS=${ROUNDS:-3}
DUR=${DUR:-10}
FILE_MB=${FILE_MB:-2048}
SWEEP=${SWEEP-1 4 8 12}
IPERF_P=${IPERF_P-1 4 8}
IPERF_PROCS=${IPERF_PROCS-}
TSV=${TSV:-}
FDT_P=${FDT_P-4 8 12}
FDT_JAR=${FDT_JAR:-}
HOST=${HOST:-tuned}
TIMEOUT=${TIMEOUT:-300}
WORKDIR=${WORKDIR:-/var/tmp/urmove-bench-wan}
URMOVE=${URMOVE:-}
NS_A=${NS_A:-urmwan-a}
NS_B=${NS_B:-urmwan-b}
ADDR_A=${ADDR_A:-10.79.0.1}
ADDR_B=${ADDR_B:-10.79.0.2}
PORT=17878
IPERF_PORT=15301
FDT_PORT=54321

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "bench-wan: $*" >&2; exit 1; }
log() { echo "bench-wan: $(date +%H:%M:%S) $*" >&2; }

[ "$(id -u)" = 0 ] || die "needs root (network namespaces, TUN devices, tc)"
[ -e /dev/net/tun ] || die "needs /dev/net/tun"
command -v ip >/dev/null || die "needs iproute2 (ip)"
command -v tc >/dev/null || die "needs tc (iproute2)"
command -v iperf3 >/dev/null || die "needs iperf3 (../shared/peers/setup.sh installs it)"
command -v python3 >/dev/null || die "needs python3 (to read JSON)"
if [ -n "$FDT_JAR" ]; then
  [ -f "$FDT_JAR" ] || die "FDT_JAR=$FDT_JAR: no such file"
  command -v java >/dev/null || die "FDT needs java"
fi

if [ -z "$URMOVE" ]; then
  log "building urmove (release)"
  (cd "$ROOT" && cargo build --release --quiet --bins)
  URMOVE=$ROOT/target/release/urmove
fi
DELAYLINE=$(dirname "$URMOVE")/urmove-delayline
[ -x "$URMOVE" ] || die "no urmove binary at $URMOVE"
[ -x "$DELAYLINE" ] || die "no urmove-delayline beside $URMOVE"

mkdir -p "$WORKDIR"/{root,state,logs,fdt-dest}
KEY=$WORKDIR/key
[ -f "$KEY" ] || "$URMOVE" keygen "$KEY" >/dev/null
FILE=$WORKDIR/file-${FILE_MB}M.dat
if [ ! -f "$FILE" ]; then
  log "making $FILE ($FILE_MB MiB of random data)"
  head -c "$((FILE_MB << 20))" /dev/urandom >"$FILE.tmp" && mv "$FILE.tmp" "$FILE"
fi

# --- the line and the daemons --------------------------------------------------
LINE_PID=
RECV_PID=
IPERF_PID=
FDT_PID=
stop_line() {
  for p in $FDT_PID $IPERF_PID $RECV_PID; do kill "$p" 2>/dev/null || true; done
  for p in $FDT_PID $IPERF_PID $RECV_PID; do wait "$p" 2>/dev/null || true; done
  FDT_PID='' IPERF_PID='' RECV_PID=''
  if [ -n "$LINE_PID" ]; then
    { echo quit >&"${LINE[1]}"; } 2>/dev/null || true
    wait "$LINE_PID" 2>/dev/null || true
    LINE_PID=
  fi
}
trap stop_line EXIT

# bits per second of a rate as tbf takes it (1Gbit, 500Mbit)
rate_bits() {
  python3 - "$1" <<'EOF'
import re, sys
m = re.fullmatch(r"([0-9.]+)([kKmMgG]?)bit", sys.argv[1])
if not m:
    sys.exit(f"bench-wan: rate {sys.argv[1]!r}: give it as 1Gbit, 500Mbit")
print(int(float(m[1]) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m[2].lower()]))
EOF
}

start_line() { # RATE RTT LOSS
  local rate=$1 rtt=$2 loss=$3
  coproc LINE { exec "$DELAYLINE" --replace --ns-a "$NS_A" --ns-b "$NS_B" \
    --addr-a "$ADDR_A" --addr-b "$ADDR_B" --rate "$rate" --rtt "$rtt" --loss "$loss" \
    2>>"$WORKDIR/logs/delayline.log"; }
  # shellcheck disable=SC2269 # coproc LINE set it; named here for the reader
  LINE_PID=$LINE_PID
  local ready
  read -r -t 30 ready <&"${LINE[0]}" || die "the delay line did not start (see $WORKDIR/logs/delayline.log)"
  log "line: $ready rate=$rate loss=$loss"
  if [ "$HOST" = tuned ]; then
    # Only the profile's per-namespace keys (net.ipv4.*): net.core.* are
    # the host's own, shared by every namespace, and stay as they are.
    "$URMOVE" tune --rtt "$rtt" --print-sysctl | grep '^net\.ipv4\.' >"$WORKDIR/sysctl.conf"
    for ns in "$NS_A" "$NS_B"; do
      ip netns exec "$ns" sysctl -q -p "$WORKDIR/sysctl.conf" >/dev/null
    done
  fi
  ip netns exec "$NS_B" "$URMOVE" recv --listen "$ADDR_B:$PORT" --root "$WORKDIR/root" \
    --key-file "$KEY" --state-dir "$WORKDIR/state" --interval 0 \
    2>>"$WORKDIR/logs/recv.log" &
  RECV_PID=$!
  ip netns exec "$NS_B" iperf3 -s -p "$IPERF_PORT" >/dev/null 2>&1 &
  IPERF_PID=$!
  local k most=0
  for k in $IPERF_PROCS; do [ "$k" -gt "$most" ] && most=$k; done
  for ((k = 1; k < most; k++)); do
    ip netns exec "$NS_B" iperf3 -s -p $((IPERF_PORT + k)) >/dev/null 2>&1 &
    IPERF_PID="$IPERF_PID $!"
  done
  if [ -n "$FDT_JAR" ]; then
    ip netns exec "$NS_B" java -jar "$FDT_JAR" -p "$FDT_PORT" -noupdates \
      >>"$WORKDIR/logs/fdt-server.log" 2>&1 &
    FDT_PID=$!
  fi
  sleep 1
}

line_stats() {
  echo stats >&"${LINE[1]}"
  local s
  read -r -t 5 s <&"${LINE[0]}" && echo "$s"
}

# --- one run of each tool: prints Mb/s (or "fail") -----------------------------
in_a() { timeout "$TIMEOUT" ip netns exec "$NS_A" "$@"; }

json_rate() { # FILE: urmove's rate_bits_per_s, when its status is ok
  python3 - "$1" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    print("fail"); sys.exit()
print(f"{d['rate_bits_per_s'] / 1e6:.0f}" if d.get("status") == "ok" else "fail")
EOF
}

run_urmove_net() { # P-or-empty
  local out=$WORKDIR/logs/last.json
  in_a "$URMOVE" bench --net "$ADDR_B" -p "$PORT" --key-file "$KEY" --time "$DUR" \
    ${1:+-P "$1"} --json >"$out" 2>>"$WORKDIR/logs/client.log" || true
  json_rate "$out"
}

run_urmove_send() { # P-or-empty
  local out=$WORKDIR/logs/last.json
  rm -rf "$WORKDIR/root/wan"
  sync; echo 3 >/proc/sys/vm/drop_caches
  in_a "$URMOVE" send --key-file "$KEY" -p "$PORT" ${1:+-P "$1"} --json \
    "$FILE" "$ADDR_B:wan" >"$out" 2>>"$WORKDIR/logs/client.log" || true
  json_rate "$out"
}

run_urmove_send_wall() { # the file's bits over the run's whole wall time
  local out=$WORKDIR/logs/last.json
  rm -rf "$WORKDIR/root/wan"
  sync; echo 3 >/proc/sys/vm/drop_caches
  in_a "$URMOVE" send --key-file "$KEY" -p "$PORT" --json \
    "$FILE" "$ADDR_B:wan" >"$out" 2>>"$WORKDIR/logs/client.log" || true
  python3 - "$out" <<'EOF2'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception:
    print("fail"); sys.exit()
ok = d.get("status") == "ok" and d.get("wall_s", 0) > 0
print(f"{d['bytes'] * 8 / d['wall_s'] / 1e6:.0f}" if ok else "fail")
EOF2
}

run_iperf3() { # P
  local out=$WORKDIR/logs/iperf3.json
  in_a iperf3 -c "$ADDR_B" -p "$IPERF_PORT" -P "$1" -t "$DUR" -J >"$out" 2>/dev/null || true
  python3 - "$out" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
    print(f"{d['end']['sum_received']['bits_per_second'] / 1e6:.0f}")
except Exception:
    print("fail")
EOF
}

run_iperf3_procs() { # N: N clients of -P 1 at once, to IPERF_PORT and up
  local k rc=0 pids=()
  for ((k = 0; k < $1; k++)); do
    in_a iperf3 -c "$ADDR_B" -p $((IPERF_PORT + k)) -P 1 -t "$DUR" -J \
      >"$WORKDIR/logs/iperf3-$k.json" 2>/dev/null &
    pids+=($!)
  done
  for k in "${pids[@]}"; do wait "$k" || rc=1; done
  [ "$rc" = 0 ] || { echo fail; return; }
  python3 - "$WORKDIR/logs/iperf3" "$1" <<'EOF'
import json, sys
try:
    print(f"{sum(json.load(open(f'{sys.argv[1]}-{k}.json'))['end']['sum_received']['bits_per_second'] for k in range(int(sys.argv[2]))) / 1e6:.0f}")
except Exception:
    print("fail")
EOF
}

fdt_rate() { # LOG: FDT's last average, Mb/s
  python3 - "$1" <<'EOF'
import re, sys
text = open(sys.argv[1], errors="replace").read()
m = re.findall(r"Avg:\s*([0-9.]+)\s*([KMG])b/s", text)
if not m:
    print("fail"); sys.exit()
v, u = m[-1]
print(f"{float(v) * {'K': 1e-3, 'M': 1, 'G': 1e3}[u]:.0f}")
EOF
}

run_fdt_net() { # P
  local out=$WORKDIR/logs/fdt-client.log
  in_a java -jar "$FDT_JAR" -c "$ADDR_B" -p "$FDT_PORT" -P "$1" -ss 16M -nettest \
    -N -noupdates >"$out" 2>&1 &
  local pid=$!
  sleep "$DUR"; kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true
  fdt_rate "$out"
}

run_fdt_file() { # P
  local out=$WORKDIR/logs/fdt-client.log
  rm -f "$WORKDIR/fdt-dest/"*
  sync; echo 3 >/proc/sys/vm/drop_caches
  in_a java -jar "$FDT_JAR" -c "$ADDR_B" -p "$FDT_PORT" -P "$1" -ss 16M -noupdates \
    -d "$WORKDIR/fdt-dest" "$FILE" >"$out" 2>&1 || true
  fdt_rate "$out"
}

# --- the matrix -----------------------------------------------------------------
median() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -n | awk '{v[NR]=$1} END {if (NR==0) print "fail"; else if (NR%2) print v[(NR+1)/2]; else printf "%.0f\n", (v[NR/2]+v[NR/2+1])/2}'; }

REPORT=$WORKDIR/report.md
: >"$REPORT"
echo "# bench-wan $(date -u +%Y-%m-%dT%H:%MZ): HOST=$HOST ROUNDS=$ROUNDS DUR=$DUR FILE_MB=$FILE_MB" | tee -a "$REPORT"
V_IPERF3="iperf3 $(iperf3 --version | head -1 | awk '{print $2}')"
echo "urmove $("$URMOVE" --version 2>/dev/null | head -1), $V_IPERF3, kernel $(uname -r)" | tee -a "$REPORT"
echo "Peers: $V_IPERF3 -c -t $DUR, memory to memory: \"iperf3 -P N\" is one process (3.12 runs its streams on one thread), \"iperf3 x N processes\" N processes of -P 1 side by side, each to its own server, rates summed.$([ -n "$FDT_JAR" ] && echo " FDT: $FDT_JAR, -P N -ss 16M.") Sysctls in both namespaces: HOST=$HOST." | tee -a "$REPORT"
if [ -n "$TSV" ]; then printf 'version\twan\tiperf3\t%s\n' "$V_IPERF3" >>"$TSV"; fi

for path in $PATHS; do
  rate=${path%%:*} rtt=${path##*:}
  bits=$(rate_bits "$rate")
  for loss in $LOSSES; do
    start_line "$rate" "$rtt" "$loss"
    # Each configuration: "label|command"; rounds rotate their order.
    configs=("urmove bench --net (defaults)|run_urmove_net ''")
    for p in $SWEEP; do configs+=("urmove bench --net -P $p|run_urmove_net $p"); done
    configs+=("urmove send (defaults)|run_urmove_send ''")
    configs+=("urmove send (defaults), wall clock|run_urmove_send_wall")
    for p in $SWEEP; do configs+=("urmove send -P $p|run_urmove_send $p"); done
    for p in $IPERF_P; do configs+=("iperf3 -P $p|run_iperf3 $p"); done
    for p in $IPERF_PROCS; do configs+=("iperf3 x $p processes|run_iperf3_procs $p"); done
    if [ -n "$FDT_JAR" ]; then
      for p in $FDT_P; do
        configs+=("FDT -nettest -P $p -ss 16M|run_fdt_net $p" "FDT file -P $p -ss 16M|run_fdt_file $p")
      done
    fi
    declare -A got=()
    n=${#configs[@]}
    for ((r = 0; r < ROUNDS; r++)); do
      for ((k = 0; k < n; k++)); do
        i=$(((k + r * 3) % n))
        label=${configs[$i]%%|*} cmd=${configs[$i]#*|}
        v=$(eval "$cmd")
        got[$i]="${got[$i]:-} $v"
        log "$rate x $rtt loss $loss round $((r + 1)): $label: $v Mb/s"
      done
    done
    # The line's counters (read here: its pipes are this shell's own).
    line_stats >"$WORKDIR/stats.txt" || true
    {
      echo
      echo "## $rate x $rtt, loss $loss ($(cat "$WORKDIR/stats.txt"))"
      echo
      echo "| tool | median Mb/s | of the path | rounds |"
      echo "|---|---:|---:|---|"
      for ((i = 0; i < n; i++)); do
        label=${configs[$i]%%|*}
        m=$(echo "${got[$i]}" | median)
        ratio=-
        if [ "$m" != fail ]; then ratio=$(python3 -c "print(f'{$m * 1e6 / $bits:.2f}')"); fi
        echo "| $label | $m | $ratio | ${got[$i]# } |"
      done
    } | tee -a "$REPORT"
    if [ -n "$TSV" ]; then
      for ((i = 0; i < n; i++)); do
        r=0
        for v in ${got[$i]}; do
          r=$((r + 1))
          printf 'round\twan\t%s\t%s\t%s\t%s\t%s\n' "$rate x $rtt loss $loss" "${configs[$i]%%|*}" "$r" "$v" "$bits" >>"$TSV"
        done
      done
    fi
    unset got
    stop_line
  done
done
echo
echo "bench-wan: report in $REPORT" >&2
