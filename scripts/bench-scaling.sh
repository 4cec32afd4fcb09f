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
# ratio to iperf3 at its best (bench lines: the better by median of one
# process, iperf3 -P STREAMS -l 1M, and STREAMS processes of -P 1 -l 1M side
# by side, each to its own server, rates summed: iperf3 3.12 runs all the
# streams of one process on one thread) or to bench --net at the
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
#   PORT=17979 IPERF_PORT=15279   (the iperf3 processes: IPERF_PORT and up)
#   TSV=         also write every round, configuration and version to this
#                file, tab-separated (scripts/bench-all.sh reads it)
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

V_IPERF3=$(iperf3 --version 2>/dev/null | head -1 | awk '{ print "iperf3", $2 }')
V_FIO=$(fio --version 2>/dev/null)
COMMIT=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo "?")
TSV=${TSV:-}
export URMOVE ROUNDS DUR STREAMS BIG DEST PORT IPERF_PORT LANES MODES WORKDIR CORES V_IPERF3 V_FIO COMMIT TSV
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

IPERF_CONFS = {
    "P": f"one process, iperf3 -c -P {STREAMS} -l 1M -t {DUR}",
    "procs": f"{STREAMS} processes side by side, iperf3 -c -P 1 -l 1M -t {DUR} each, each to its own server, rates summed",
}

def iperf_line(conf):
    """iperf3 as one process (-P STREAMS) or as STREAMS processes of -P 1."""
    n = 1 if conf == "P" else STREAMS
    srvs = [subprocess.Popen(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(IPORT + k)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for k in range(n)]
    time.sleep(0.5)
    m0 = machine_busy()
    clients = [subprocess.Popen(["iperf3", "-c", "127.0.0.1", "-p", str(IPORT + k),
                                 "-P", str(STREAMS if conf == "P" else 1), "-l", "1M", "-t", str(DUR), "-J"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for k in range(n)]
    outs = [c.communicate()[0] for c in clients]
    m1 = machine_busy()
    for srv in srvs:
        srv.terminate(); srv.wait()
    if any(c.returncode for c in clients):
        sys.exit(f"bench-scaling: iperf3 ({IPERF_CONFS[conf]}) failed")
    ends = [json.loads(o)["end"] for o in outs]
    gb = sum(e["sum_received"]["bytes"] for e in ends) / GB
    cpu = lambda k: sum(e["cpu_utilization_percent"][k] / 100 * e["sum_received"]["seconds"] for e in ends)
    return {"rate": sum(e["sum_received"]["bits_per_second"] for e in ends) / 1e9, "machine": (m1 - m0) / gb,
            "client": cpu("host_total") / gb, "daemon": cpu("remote_total") / gb}

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
peers = {"iperf3-P": [], "iperf3-procs": [], "fio": [], "fio-write": []}
for rnd in range(ROUNDS):
    order = LANES[rnd % len(LANES):] + LANES[:rnd % len(LANES)]
    for lanes in order:
        d = Daemon(lanes)
        modes = MODES[rnd % len(MODES):] + MODES[:rnd % len(MODES)]
        for mode in modes:
            log(f"round {rnd + 1}: lanes {lanes}: {mode}")
            rows.setdefault((lanes, mode), []).append(urmove_line(mode, lanes, d.p.pid))
        d.stop()
    for conf in ("P", "procs")[rnd % 2:] + ("P", "procs")[:rnd % 2]:
        log(f"round {rnd + 1}: iperf3, {IPERF_CONFS[conf]}")
        peers["iperf3-" + conf].append(iperf_line(conf))
    if "send-direct" in MODES:
        log(f"round {rnd + 1}: fio O_DIRECT read of the file")
        peers["fio"].append(fio_line())
    if any(m.startswith("send") for m in MODES):
        log(f"round {rnd + 1}: fio O_DIRECT write under the daemon's root")
        os.makedirs(DEST, exist_ok=True)
        peers["fio-write"].append(fio_write_line())

med = lambda xs, k: statistics.median(x[k] for x in xs)
V_IPERF3, V_FIO = os.environ["V_IPERF3"], os.environ["V_FIO"]
best_conf = max(("P", "procs"), key=lambda c: med(peers["iperf3-" + c], "rate"))
ip = peers["iperf3-" + best_conf]
print(f"### Lanes: urmove's data path by thread count vs {V_IPERF3} at its best and {V_FIO},"
      f" {os.cpu_count()} cores, -P {STREAMS}, loopback, medians of {ROUNDS} rounds\n")
print(f"{V_IPERF3} runs every stream of one process on one thread; both configurations ran, each round:\n")
for conf in ("P", "procs"):
    x = peers["iperf3-" + conf]
    print(f"- {IPERF_CONFS[conf]}: {med(x, 'rate'):.2f} Gbit/s, {med(x, 'machine'):.3f} CPU s/GB machine-wide"
          f" ({med(x, 'client'):.3f} client, {med(x, 'daemon'):.3f} server)" + (" (best: the iperf3 column below)" if conf == best_conf else ""))
if peers["fio"]:
    print(f"- {V_FIO} --rw=read --bs=1M --direct=1 --ioengine=io_uring --iodepth=32 of the file (cold cache): {med(peers['fio'], 'rate'):.2f} Gbit/s")
if peers["fio-write"]:
    print(f"- {V_FIO} --rw=write --bs=1M --direct=1 --ioengine=io_uring --iodepth=32 under the daemon's root ({DEST}): {med(peers['fio-write'], 'rate'):.2f} Gbit/s")
print()
print("| lanes | line | Gbit/s | vs | CPU s/GB machine | vs iperf3 best | sender s/GB | receiver s/GB | busiest lane, sender | busiest lane, daemon |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for lanes in LANES:
    for mode in MODES:
        r = rows[(lanes, mode)]
        rate = med(r, "rate")
        if mode.startswith("bench"):
            vs = f"{rate / med(ip, 'rate'):.2f} iperf3 best"
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
print("\nEvery round (Gbit/s):\n")
print("```text")
for (lanes, mode), r in sorted(rows.items()):
    print(f"  lanes {lanes} {mode}: " + " ".join(f"{x['rate']:.2f}" for x in r))
for conf in ("P", "procs"):
    print(f"  iperf3 {conf}: " + " ".join(f"{x['rate']:.2f}" for x in peers["iperf3-" + conf]))
if peers["fio"]:
    print("  fio read: " + " ".join(f"{x['rate']:.2f}" for x in peers["fio"]))
if peers["fio-write"]:
    print("  fio write: " + " ".join(f"{x['rate']:.2f}" for x in peers["fio-write"]))
print("```")
print(f"\nHow it was measured: both sides on this host, loopback; the daemon restarted per lane count with"
      f" the same --lanes; rates are what the receiver had; CPU s/GB machine-wide from /proc/stat, per side"
      f" from the processes' own counters; send lines: the file from the page cache (cat first) or read with"
      f" O_DIRECT after a page-cache drop; the daemon writes under {DEST}.\n")
print("```text")
print(f"Command: ROUNDS={ROUNDS} DUR={DUR} STREAMS={STREAMS} SIZE_MB={os.path.getsize(BIG) >> 20} LANES=\"{' '.join(LANES)}\" MODES=\"{' '.join(MODES)}\" scripts/bench-scaling.sh")
print(f"urmove:  {U} ({os.environ['COMMIT']})")
print(f"Peers:   {V_IPERF3}, {V_FIO}")
print(f"Date:    {time.strftime('%Y-%m-%dT%H:%M:%S%z')}")
print("```")
if os.environ.get("TSV"):
    with open(os.environ["TSV"], "a") as t:
        for (lanes, mode), r in rows.items():
            for i, x in enumerate(r):
                t.write(f"round\tscaling\t{mode}\tlanes-{lanes}\t{i + 1}\t{x['rate'] * 1e9}\t{x['machine']}\n")
        for k, xs in peers.items():
            for i, x in enumerate(xs):
                t.write(f"round\tscaling\tpeer\t{k}\t{i + 1}\t{x['rate'] * 1e9}\t{x.get('machine', '')}\n")
        for conf, text in IPERF_CONFS.items():
            t.write(f"conf\tscaling\tpeer\tiperf3-{conf}\t{text}\n")
        t.write(f"version\tscaling\tiperf3\t{V_IPERF3}\n")
        t.write(f"version\tscaling\tfio\t{V_FIO}\n")
EOF
