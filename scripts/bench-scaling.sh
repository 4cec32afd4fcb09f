#!/usr/bin/env bash
# Lanes: how urmove's data path scales with its threads, against iperf3 and
# fio in the same run, on loopback.
#
# For lanes 1, 2, 4, ... up to the cores this process may run on, and auto
# (each side of the session given the same --lanes), it runs
#   bench --net                 memory to memory
#   bench --net --verify        every frame checksummed on both sides
#   bench --net --encrypt       every frame sealed (AES-256-GCM)
#   send cached                 a SIZE_MB file from the page cache (--direct off)
#   send direct                 the same file read with O_DIRECT (--direct required)
#   send cached --encrypt
# and prints, per line: the rate (median of ROUNDS alternating rounds), the
# ratio to iperf3 -P STREAMS -l 1M (bench lines) or to bench --net at the
# same lanes (send lines), CPU seconds per GB (machine-wide from /proc/stat,
# and each side's process), and the busiest lane thread's share of its
# side's lane CPU (the sender from its JSON, the daemon from /proc). fio's
# O_DIRECT sequential read of the same file is the disk's limit for "send
# direct", and its O_DIRECT write under DEST the receiving side's for every
# send line. Nothing in it assumes two cores: run it unchanged on a larger host.
#
# Usage (as root, for the page-cache drop):
#   scripts/bench-scaling.sh
#   ROUNDS=5 DUR=10 STREAMS=16 scripts/bench-scaling.sh
#
# Environment:
#   ROUNDS=3     rounds (the order of lanes and modes rotates per round)
#   DUR=10       seconds per bench --net and iperf3 run
#   STREAMS=     TCP streams (-P; default: 4, or the core count when larger)
#   SIZE_MB=2048 the file sent, MiB of random data (created once)
#   LANES=       lane counts to run (default: 1 2 4 ... up to the cores, and auto)
#   MODES=       modes to run (default: all six, named as in the table:
#                bench bench-verify bench-encrypt send-cached send-direct send-encrypt)
#   WORKDIR=/var/tmp/urmove-bench-scaling   the source file and logs
#   DEST=        the daemon's root (default: $WORKDIR/dest; on tmpfs, such as
#                /dev/shm, the send lines measure the data path, not a disk)
#   URMOVE=      urmove binary (default: cargo build --release in this repo)
#   PORT=17979 IPERF_PORT=15279
set -euo pipefail

ROUNDS=${ROUNDS:-3}
DUR=${DUR:-10}
CORES=$(nproc)
STREAMS=${STREAMS:-$(( CORES > 4 ? CORES : 4 ))}
SIZE_MB=${SIZE_MB:-2048}
WORKDIR=${WORKDIR:-/var/tmp/urmove-bench-scaling}
DEST=${DEST:-$WORKDIR/dest}
URMOVE=${URMOVE:-}
PORT=${PORT:-17979}
IPERF_PORT=${IPERF_PORT:-15279}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

die() { echo "bench-scaling: $*" >&2; exit 1; }
log() { echo "bench-scaling: $(date +%H:%M:%S) $*" >&2; }

[ "$(id -u)" -eq 0 ] || die "must run as root (drops the page cache)"
for t in python3 iperf3 fio; do
    command -v $t >/dev/null || die "$t not found; install the peers with ../shared/peers/setup.sh"
done
for v in ROUNDS DUR STREAMS SIZE_MB; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
if [ -z "${LANES:-}" ]; then
    LANES=""
    for ((l = 1; l <= CORES && l <= STREAMS; l *= 2)); do LANES="$LANES $l"; done
    LANES="$LANES auto"
fi
MODES=${MODES:-bench bench-verify bench-encrypt send-cached send-direct send-encrypt}
if [ -z "$URMOVE" ]; then
    log "building urmove (cargo build --release in $ROOT)"
    (cd "$ROOT" && cargo build --release >&2) || die "cargo build failed"
    URMOVE=$ROOT/target/release/urmove
fi
[ -x "$URMOVE" ] || die "urmove binary not executable: $URMOVE"
mkdir -p "$WORKDIR" "$DEST"
BIG=$WORKDIR/big-${SIZE_MB}m.bin
if [ ! -f "$BIG" ] || [ "$(stat -c %s "$BIG")" -ne $((SIZE_MB << 20)) ]; then
    log "creating $BIG ($SIZE_MB MiB of random data)"
    head -c $((SIZE_MB << 20)) /dev/urandom >"$BIG"
fi

export URMOVE ROUNDS DUR STREAMS BIG DEST PORT IPERF_PORT LANES MODES WORKDIR CORES
exec python3 - <<'EOF'
import json, os, shutil, signal, statistics, subprocess, sys, time

U = os.environ["URMOVE"]
ROUNDS, DUR, STREAMS = int(os.environ["ROUNDS"]), int(os.environ["DUR"]), int(os.environ["STREAMS"])
BIG, DEST, WORK = os.environ["BIG"], os.environ["DEST"], os.environ["WORKDIR"]
PORT, IPORT = int(os.environ["PORT"]), int(os.environ["IPERF_PORT"])
LANES = os.environ["LANES"].split()
MODES = os.environ["MODES"].split()
KEY = os.path.join(WORK, "key")
TICK = os.sysconf("SC_CLK_TCK")
GB = 1e9

def log(m):
    print(f"bench-scaling: {time.strftime('%H:%M:%S')} {m}", file=sys.stderr, flush=True)

def machine_busy():
    """CPU seconds the whole machine spent busy (all but idle and iowait)."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(f[:8]) - f[3] - f[4]) / TICK

def proc_cpu(pid):
    try:
        rest = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(rest[11]) + int(rest[12]) + int(rest[13]) + int(rest[14])) / TICK
    except OSError:
        return 0.0

def lane_threads(pid):
    out = {}
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                comm = open(f"/proc/{pid}/task/{t}/comm").read().strip()
                if comm.startswith("urmove-lane-"):
                    rest = open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()
                    out[t] = (int(rest[11]) + int(rest[12])) / TICK
            except OSError:
                pass
    except OSError:
        pass
    return out

class Daemon:
    def __init__(self, lanes):
        shutil.rmtree(DEST, ignore_errors=True)
        os.makedirs(DEST, exist_ok=True)
        self.p = subprocess.Popen([U, "recv", "--root", DEST, "--key-file", KEY,
                                   "--listen", f"127.0.0.1:{PORT}", "--lanes", lanes],
                                  stdout=subprocess.DEVNULL, stderr=open(os.path.join(WORK, "recv.log"), "a"))
        time.sleep(0.5)
        if self.p.poll() is not None:
            sys.exit("bench-scaling: the daemon did not start (see recv.log)")
    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait()

def run_client(args, daemon_pid):
    """Run urmove with `args`; returns (json, machine cpu s, client cpu s,
    daemon cpu s, the daemon's busiest lane share)."""
    m0, d0 = machine_busy(), proc_cpu(daemon_pid)
    r0 = os.times()
    p = subprocess.Popen([U] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lanes = {}
    while p.poll() is None:
        lanes.update(lane_threads(daemon_pid))
        time.sleep(0.2)
    out, err = p.communicate()
    r1 = os.times()
    m1, d1 = machine_busy(), proc_cpu(daemon_pid)
    try:
        doc = json.loads(out)
    except ValueError:
        sys.exit(f"bench-scaling: {' '.join(args)} gave no JSON: {err.decode()[-400:]}")
    if doc.get("status") != "ok":
        sys.exit(f"bench-scaling: {' '.join(args)} failed: {doc.get('error')}")
    client = (r1.children_user - r0.children_user) + (r1.children_system - r0.children_system)
    share = max(lanes.values()) / sum(lanes.values()) if lanes and sum(lanes.values()) else 1.0
    return doc, m1 - m0, client, d1 - d0, share

def client_share(doc):
    cpu = [l["cpu_s"] for l in doc.get("lanes", [])]
    return max(cpu) / sum(cpu) if cpu and sum(cpu) > 0 else 1.0

def urmove_line(mode, lanes, daemon_pid):
    common = ["-p", str(PORT), "--key-file", KEY, "-P", str(STREAMS), "--lanes", lanes, "--json"]
    if mode.startswith("bench"):
        args = ["bench", "--net", "127.0.0.1", "--time", f"{DUR}s"] + common
        args += {"bench": [], "bench-verify": ["--verify"], "bench-encrypt": ["--encrypt"]}[mode]
    else:
        if mode == "send-direct":
            subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=True)
            flags = ["--direct", "required"]
        else:
            subprocess.run(["cat", BIG], stdout=subprocess.DEVNULL, check=True)
            flags = ["--direct", "off"] + (["--encrypt"] if mode == "send-encrypt" else [])
        dest = f"127.0.0.1:{mode}-{lanes}"
        args = ["send"] + common + flags + [BIG, dest]
    doc, machine, client, daemon, dshare = run_client(args, daemon_pid)
    shutil.rmtree(DEST, ignore_errors=True)
    os.makedirs(DEST, exist_ok=True)
    gb = doc["bytes"] / GB
    return {"rate": doc["rate_bits_per_s"] / 1e9, "machine": machine / gb, "client": client / gb,
            "daemon": daemon / gb, "cshare": client_share(doc), "dshare": dshare,
            "lanes": len(doc.get("lanes", []))}

def iperf_line():
    srv = subprocess.Popen(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(IPORT)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    m0 = machine_busy()
    out = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(IPORT), "-P", str(STREAMS),
                          "-l", "1M", "-t", str(DUR), "-J"], capture_output=True, check=True).stdout
    m1 = machine_busy()
    srv.terminate(); srv.wait()
    e = json.loads(out)["end"]
    gb = e["sum_received"]["bytes"] / GB
    cpu = e["cpu_utilization_percent"]
    secs = e["sum_received"]["seconds"]
    return {"rate": e["sum_received"]["bits_per_second"] / 1e9, "machine": (m1 - m0) / gb,
            "client": cpu["host_total"] / 100 * secs / gb, "daemon": cpu["remote_total"] / 100 * secs / gb}

def fio_line():
    subprocess.run(["sh", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=True)
    out = subprocess.run(["fio", "--name=r", f"--filename={BIG}", "--rw=read", "--bs=1M", "--direct=1",
                          "--ioengine=io_uring", "--iodepth=32", "--output-format=json"],
                         capture_output=True, check=True).stdout
    j = json.loads(out[out.index(b"{"):])
    return {"rate": j["jobs"][0]["read"]["bw_bytes"] * 8 / 1e9}

def fio_write_line():
    """fio's O_DIRECT write of a file as large as BIG under DEST: what the
    daemon's root takes at most (the send lines' other limit)."""
    target = os.path.join(DEST, "fio-write.bin")
    out = subprocess.run(["fio", "--name=w", f"--filename={target}", "--rw=write", "--bs=1M",
                          "--direct=1", f"--size={os.path.getsize(BIG)}", "--ioengine=io_uring", "--iodepth=32",
                          "--output-format=json"], capture_output=True, check=True).stdout
    os.unlink(target)
    j = json.loads(out[out.index(b"{"):])
    return {"rate": j["jobs"][0]["write"]["bw_bytes"] * 8 / 1e9}

subprocess.run([U, "keygen", KEY], check=True, stdout=subprocess.DEVNULL) if not os.path.exists(KEY) else None
log(f"{os.cpu_count()} cores, streams {STREAMS}, lanes {' '.join(LANES)}, modes {' '.join(MODES)}, {ROUNDS} rounds of {DUR} s")
rows = {}   # (lanes, mode) -> list of results
peers = {"iperf3": [], "fio": [], "fio-write": []}
for rnd in range(ROUNDS):
    order = LANES[rnd % len(LANES):] + LANES[:rnd % len(LANES)]
    for lanes in order:
        d = Daemon(lanes)
        modes = MODES[rnd % len(MODES):] + MODES[:rnd % len(MODES)]
        for mode in modes:
            log(f"round {rnd + 1}: lanes {lanes}: {mode}")
            rows.setdefault((lanes, mode), []).append(urmove_line(mode, lanes, d.p.pid))
        d.stop()
    log(f"round {rnd + 1}: iperf3 -P {STREAMS} -l 1M")
    peers["iperf3"].append(iperf_line())
    if "send-direct" in MODES:
        log(f"round {rnd + 1}: fio O_DIRECT read of the file")
        peers["fio"].append(fio_line())
    if any(m.startswith("send") for m in MODES):
        log(f"round {rnd + 1}: fio O_DIRECT write under the daemon's root")
        os.makedirs(DEST, exist_ok=True)
        peers["fio-write"].append(fio_write_line())

med = lambda xs, k: statistics.median(x[k] for x in xs)
ip = peers["iperf3"]
print(f"\n#### Scaling on {os.cpu_count()} cores: -P {STREAMS}, loopback, medians of {ROUNDS} rounds\n")
print(f"iperf3 -P {STREAMS} -l 1M: {med(ip, 'rate'):.2f} Gbit/s, {med(ip, 'machine'):.3f} CPU s/GB machine-wide"
      f" ({med(ip, 'client'):.3f} client, {med(ip, 'daemon'):.3f} server)")
if peers["fio"]:
    print(f"fio O_DIRECT read of the file: {med(peers['fio'], 'rate'):.2f} Gbit/s")
if peers["fio-write"]:
    print(f"fio O_DIRECT write under the daemon's root ({DEST}): {med(peers['fio-write'], 'rate'):.2f} Gbit/s")
print()
print("| lanes | line | Gbit/s | vs | CPU s/GB machine | vs iperf3 | sender s/GB | receiver s/GB | busiest lane, sender | busiest lane, daemon |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for lanes in LANES:
    for mode in MODES:
        r = rows[(lanes, mode)]
        rate = med(r, "rate")
        if mode.startswith("bench"):
            vs = f"{rate / med(ip, 'rate'):.2f} iperf3"
        else:
            b = rows.get((lanes, "bench"))
            vs = f"{rate / med(b, 'rate'):.2f} bench" if b else "-"
        print(f"| {lanes} ({r[0]['lanes']}) | {mode} | {rate:.2f} | {vs} | {med(r, 'machine'):.3f} | "
              f"{med(r, 'machine') / med(ip, 'machine'):.2f} | {med(r, 'client'):.3f} | {med(r, 'daemon'):.3f} | "
              f"{med(r, 'cshare'):.2f} | {med(r, 'dshare'):.2f} |")
if "auto" in LANES and "1" in LANES:
    print("\n`--lanes auto` against `--lanes 1`, per line (median rates):")
    for mode in MODES:
        a, o = med(rows[("auto", mode)], "rate"), med(rows[("1", mode)], "rate")
        print(f"- {mode}: {a / o:.2f}")
print("\nEvery round (Gbit/s):")
for (lanes, mode), r in sorted(rows.items()):
    print(f"- lanes {lanes} {mode}: " + " ".join(f"{x['rate']:.2f}" for x in r))
print("- iperf3: " + " ".join(f"{x['rate']:.2f}" for x in ip))
if peers["fio-write"]:
    print("- fio write: " + " ".join(f"{x['rate']:.2f}" for x in peers["fio-write"]))
EOF
