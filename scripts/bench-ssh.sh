#!/usr/bin/env bash
# Over-ssh benchmark (issue 36): urmove over ssh against scp, rsync -e ssh
# and sftp, in one run, to an OpenSSH sshd in a network namespace on a veth
# pair (scripts/ssh-netns.sh), cold cache, every copy checked.
#
# Two workloads, made once and kept under ROOT/src:
#   big    one file of BIG_MIB MiB (2 GiB) of pseudo-random bytes
#   tree   FILES files of FILE_KIB KiB (20,000 of 4 KiB) in DIRS directories
# ROUNDS rounds (order of the tools rotated each round); each run writes
# into a fresh remote directory (made, and afterwards removed, outside the
# timing) after `sync` and drop_caches:
#   scp     scp -F CFG -q [-r] SRC srv:DEST/      (OpenSSH's default: SFTP mode)
#   rsync   rsync -a -e "ssh -F CFG" SRC srv:DEST/
#   sftp    sftp -F CFG -b BATCH srv               (BATCH: put [-r] SRC DEST/NAME)
#   urmove  urmove send -e "ssh -F CFG" --remote-path BIN SRC srv:DEST/
#           (ssh mode: the remote urmove started through ssh; encrypted by default)
# Every tool runs with ssh's defaults (cipher as negotiated: printed in the
# report). Wall time: from the client's start until it has ended and
# `sync -f DEST` (syncfs of the destination's filesystem) has returned, the
# same for every tool. A run counts only when its copy checks: big: `cmp`
# with the source; tree: the same number of files and the same digest of
# every file's relative path and bytes. The table gives the median of the
# runs that counted: seconds and Gbit/s (big), seconds and files/s (tree),
# and urmove's against the best peer of the same run (ratio > 1: urmove is
# faster).
#
# Usage (as root):
#   URMOVE=target/release/urmove scripts/bench-ssh.sh
#   TOOLS="scp rsync sftp" ROUNDS=1 scripts/bench-ssh.sh      # the peers only
#
# Environment:
#   ROUNDS=3   TOOLS="scp rsync sftp urmove"   WORKLOADS="big tree"
#   BIG_MIB=2048  FILES=20000  DIRS=100  FILE_KIB=4
#   URMOVE=    urmove binary (default: cargo build --release here); installed
#              remotely as the ssh user's copy
#   URMOVE_SEND_ARGS=   more arguments for urmove send
#   ROOT=/var/tmp/urmove-bench-ssh   sources, the sshd setup, logs
#   KEEP_SRC=1   0: delete the sources at the end
#   RESERVE_MB=2048   free space left to others
#   OUT=results/bench-ssh-DATE.md   the report (relative: to the repository)
#   TSV=       also append the comparison rows, every round and the peers'
#              versions to this file (scripts/bench-all.sh's part "ssh")
#   TIMEOUT=3600  seconds before one run counts as hung
#   NS=urssh-bench ADDR=10.75.1.2 OUTSIDE=10.75.1.1   the namespace (ssh-netns.sh)
set -euo pipefail

ROUNDS=${ROUNDS:-3}
TOOLS=${TOOLS:-scp rsync sftp urmove}
WORKLOADS=${WORKLOADS:-big tree}
BIG_MIB=${BIG_MIB:-2048}
FILES=${FILES:-20000}
DIRS=${DIRS:-100}
FILE_KIB=${FILE_KIB:-4}
URMOVE=${URMOVE:-}
URMOVE_SEND_ARGS=${URMOVE_SEND_ARGS:-}
ROOT=${ROOT:-/var/tmp/urmove-bench-ssh}
KEEP_SRC=${KEEP_SRC:-1}
RESERVE_MB=${RESERVE_MB:-2048}
TIMEOUT=${TIMEOUT:-3600}
export NS=${NS:-urssh-bench} ADDR=${ADDR:-10.75.1.2} OUTSIDE=${OUTSIDE:-10.75.1.1}

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-results/bench-ssh-$(date -u +%Y%m%d-%H%M).md}
[[ $OUT = /* ]] || OUT=$REPO/$OUT
die() { echo "bench-ssh: $*" >&2; exit 1; }
log() { echo "bench-ssh: $(date +%H:%M:%S) $*" >&2; }

ALL_TOOLS="scp rsync sftp urmove"
for t in $TOOLS; do [[ " $ALL_TOOLS " == *" $t "* ]] || die "unknown tool '$t' (tools: $ALL_TOOLS)"; done
for w in $WORKLOADS; do [[ " big tree " == *" $w "* ]] || die "unknown workload '$w' (big tree)"; done
for v in ROUNDS BIG_MIB FILES DIRS FILE_KIB; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
uses() { [[ " $TOOLS " == *" $1 "* ]]; }
[ "$(id -u)" = 0 ] || die "needs root (drop_caches, a namespace, sshd)"
command -v python3 >/dev/null || die "needs python3 (sources and the table)"
uses rsync && { command -v rsync >/dev/null || die "needs rsync"; }
for t in scp sftp ssh; do command -v $t >/dev/null || die "needs $t (openssh-client)"; done

SMOKE=
if [ "$ROUNDS" -lt 3 ] || [ "$BIG_MIB" -lt 2048 ] || [ "$FILES" -lt 20000 ]; then SMOKE=1; fi

if uses urmove && [ -z "$URMOVE" ]; then
    log "building urmove (cargo build --release --bins in $REPO)"
    (cd "$REPO" && cargo build --release --quiet --bins) || die "cargo build failed"
    URMOVE=${CARGO_TARGET_DIR:-$REPO/target}/release/urmove
fi
if uses urmove; then [ -x "$URMOVE" ] || die "no urmove binary at $URMOVE"; URMOVE=$(realpath "$URMOVE"); fi

mkdir -p "$ROOT"
ROOT=$(cd "$ROOT" && pwd)
SRC=$ROOT/src
LOGS=$ROOT/logs
SETUP=$ROOT/ssh
mkdir -p "$SRC" "$LOGS"
ROUNDS_TSV=$LOGS/rounds.tsv
: >"$ROUNDS_TSV"

# --- space, sources ------------------------------------------------------------
need=$(( (BIG_MIB * 2 + FILES * (FILE_KIB + 4) * 2 / 1024 + RESERVE_MB) * 1048576 ))
free=$(df -B1 --output=avail "$ROOT" | tail -1 | tr -d ' ')
[ -f "$SRC/big.done" ] && need=$((need - BIG_MIB * 1048576))
[ "$need" -le "$free" ] || die "needs $((need >> 20)) MiB free on $ROOT (source, one copy, RESERVE_MB), $((free >> 20)) MiB free"

# tree_sum DIR: "FILES DIGEST" over every file's relative path and bytes
tree_sum() {
    python3 - "$1" <<'PY'
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

big_id="big-${BIG_MIB}m"
tree_id="tree-${FILES}x${FILE_KIB}k-${DIRS}d"
if [[ " $WORKLOADS " == *" big "* ]] && [ "$(cat "$SRC/big.done" 2>/dev/null)" != "$big_id" ]; then
    log "making $SRC/big ($BIG_MIB MiB)"
    rm -f "$SRC/big" "$SRC/big.done"
    python3 - "$SRC/big" "$BIG_MIB" <<'PY'
import random, sys
r = random.Random(1)
with open(sys.argv[1], "wb") as f:
    for _ in range(int(sys.argv[2])):
        f.write(r.randbytes(1 << 20))
PY
    echo "$big_id" >"$SRC/big.done"
fi
if [[ " $WORKLOADS " == *" tree "* ]] && [ "$(head -1 "$SRC/tree.done" 2>/dev/null)" != "$tree_id" ]; then
    log "making $SRC/tree ($FILES files of $FILE_KIB KiB in $DIRS directories)"
    rm -rf "$SRC/tree" "$SRC/tree.done"
    python3 - "$SRC/tree" "$FILES" "$DIRS" "$FILE_KIB" <<'PY'
import os, random, sys
root, n, dirs, kib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(2)
for i in range(n):
    d = os.path.join(root, f"d{i % dirs:03d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:06d}"), "wb") as f:
        f.write(r.randbytes(kib * 1024))
PY
    sync -f "$SRC"
    { echo "$tree_id"; tree_sum "$SRC/tree"; } >"$SRC/tree.done.tmp"
    mv "$SRC/tree.done.tmp" "$SRC/tree.done"
fi

# --- the sshd -----------------------------------------------------------------
cleanup() {
    [ -n "${REMOTE_DIR:-}" ] && rm -rf "${REMOTE_DIR:?}"/r-* 2>/dev/null
    [ -f "$SETUP/env" ] && "$REPO/scripts/ssh-netns.sh" down "$SETUP" >/dev/null
    if [ "$KEEP_SRC" = 0 ]; then rm -rf "$SRC"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
[ ! -f "$SETUP/env" ] || "$REPO/scripts/ssh-netns.sh" down "$SETUP" >/dev/null
URMOVE=$URMOVE "$REPO/scripts/ssh-netns.sh" up "$SETUP" >"$LOGS/ssh-netns.txt"
# shellcheck disable=SC1091
. "$SETUP/env"
CFG=$SETUP/ssh_config
[[ -z "$REMOTE_URMOVE" ]] && uses urmove && die "no remote urmove installed"
CIPHER=$(ssh -F "$CFG" -v srv true 2>&1 | sed -n 's/.*kex: server->client cipher: \([^ ]*\).*/\1/p' | head -1)
log "sshd in $NS at $ADDR; ssh cipher $CIPHER"

# --- one run --------------------------------------------------------------------
now() { echo "$EPOCHREALTIME"; }
SEQ=0

# run_once TOOL WORKLOAD: one timed copy, checked; appends to ROUNDS_TSV:
# workload tool wall status
run_once() {
    local tool=$1 w=$2 dest rc=0 status=ok t0 t1
    SEQ=$((SEQ + 1))
    dest=$REMOTE_DIR/r-$SEQ
    install -d -o "$REMOTE_USER" -g "$REMOTE_USER" -m 755 "$dest"
    local src=$SRC/$w name=$w flag=
    [ "$w" = tree ] && flag=-r
    sync; echo 3 >/proc/sys/vm/drop_caches
    t0=$(now)
    case $tool in
        scp) timeout "$TIMEOUT" scp -F "$CFG" -q $flag "$src" "srv:$dest/" 2>>"$LOGS/scp.log" || rc=$? ;;
        rsync) timeout "$TIMEOUT" rsync -a -e "ssh -F $CFG" "$src" "srv:$dest/" 2>>"$LOGS/rsync.log" || rc=$? ;;
        sftp)
            echo "put $flag $src $dest/$name" >"$LOGS/sftp.batch"
            timeout "$TIMEOUT" sftp -F "$CFG" -q -b "$LOGS/sftp.batch" srv >>"$LOGS/sftp.log" 2>&1 || rc=$? ;;
        urmove)
            # shellcheck disable=SC2086
            timeout "$TIMEOUT" "$URMOVE" send -e "ssh -F $CFG" --remote-path "$REMOTE_URMOVE" \
                $URMOVE_SEND_ARGS "$src" "srv:$dest/" >>"$LOGS/urmove.log" 2>&1 || rc=$? ;;
    esac
    sync -f "$dest"
    t1=$(now)
    [ "$rc" = 0 ] || status=exit-$rc
    if [ "$status" = ok ]; then
        if [ "$w" = big ]; then
            cmp -s "$src" "$dest/big" || status=mismatch
        else
            [ "$(tail -1 "$SRC/tree.done")" = "$(tree_sum "$dest/tree")" ] || status=mismatch
        fi
        [ "$status" = ok ] || log "$tool $w: the copy differs from the source"
    fi
    rm -rf "${dest:?}"
    local wall
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
    printf '%s\t%s\t%s\t%s\n' "$w" "$tool" "$wall" "$status" >>"$ROUNDS_TSV"
    log "$w, $tool: $status, $wall s"
}

read -ra tools <<<"$TOOLS"
nt=${#tools[@]}
for ((r = 0; r < ROUNDS; r++)); do
    for w in $WORKLOADS; do
        for ((k = 0; k < nt; k++)); do run_once "${tools[$(((k + r) % nt))]}" "$w"; done
    done
done

# --- the report -------------------------------------------------------------------
ver() { "$@" 2>&1 | head -1 || true; }
COMMIT=$(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null || echo "?")
{
    echo "Date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo "Host: $(nproc) cores (nproc), $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), kernel $(uname -r)"
    echo "Path: veth pair into namespace $NS, sshd $ADDR:22 ($(ver ssh -V)), cipher $CIPHER; ROOT $ROOT, $(findmnt -no FSTYPE -T "$ROOT"), remote dir $REMOTE_DIR, $(findmnt -no FSTYPE -T "$REMOTE_DIR")"
    if uses urmove; then echo "urmove: $("$URMOVE" --version 2>/dev/null | head -1) ($COMMIT), send args: ${URMOVE_SEND_ARGS:-none}"; fi
    echo "Peers: $(ver rsync --version | sed 's/  */ /g'); scp and sftp of $(ver ssh -V)"
} >"$LOGS/host.txt"

mkdir -p "$(dirname "$OUT")"
TSV="${TSV:-}" RSYNC_V="$(ver rsync --version | sed 's/  */ /g')" SSH_V="$(ver ssh -V)" \
SMOKE=$SMOKE ROUNDS=$ROUNDS TOOLS="$TOOLS" WORKLOADS="$WORKLOADS" BIG_MIB=$BIG_MIB FILES=$FILES \
DIRS=$DIRS FILE_KIB=$FILE_KIB python3 - "$LOGS" "$OUT" <<'PY'
import os, sys
from statistics import median

logs, out = sys.argv[1], sys.argv[2]
E = os.environ
rows = [l.rstrip("\n").split("\t") for l in open(f"{logs}/rounds.tsv") if l.strip()]
tools, works = E["TOOLS"].split(), E["WORKLOADS"].split()
big_bytes = int(E["BIG_MIB"]) << 20
files = int(E["FILES"])
peers = [t for t in tools if t != "urmove"]
names = {"scp": "scp (SFTP mode)", "rsync": "rsync -a -e ssh", "sftp": "sftp -b (put)",
         "urmove": "urmove send (ssh mode)"}

def runs(w, t):
    rs = [r for r in rows if r[0] == w and r[1] == t]
    return [float(r[2]) for r in rs if r[3] == "ok"], [r[3] for r in rs if r[3] != "ok"]

med = {}
for w in works:
    for t in tools:
        ok, _ = runs(w, t)
        med[(w, t)] = median(ok) if ok else None

def cell(w, t):
    s = med.get((w, t))
    if s is None:
        return ["fail", "-"] if w in works else ["", ""]
    rate = f"{big_bytes * 8 / s / 1e9:.2f}" if w == "big" else f"{files / s:.0f}"
    return [f"{s:.2f}", rate]

doc = ["# bench-ssh: urmove over ssh against scp, rsync -e ssh and sftp", ""]
if E.get("SMOKE"):
    doc += ["> **A smoke run** (below ROUNDS=3, BIG_MIB=2048 or FILES=20000): it shows that the "
            "script runs; its numbers are not results.", ""]
doc += [l.rstrip("\n") for l in open(f"{logs}/host.txt")]
doc.append("")
doc.append(f"Workloads: one file of {int(E['BIG_MIB']):,} MiB; {files:,} files of {E['FILE_KIB']} KiB "
           f"in {E['DIRS']} directories. Cold cache before each run (sync; drop_caches), a fresh remote "
           "directory each run; wall time from the client's start until it ended and `sync -f` of the "
           "destination returned. A run counts only when its copy checks (cmp; file count and a digest "
           f"of every path and byte). Medians of the runs that counted (of {E['ROUNDS']}), tools rotated "
           "each round.")
doc.append("")
doc.append("| tool | big s | big Gbit/s | tree s | tree files/s | runs big (s) | runs tree (s) |")
doc.append("|---|---:|---:|---:|---:|---|---|")
for t in tools:
    cols = []
    for w in ("big", "tree"):
        ok, bad = runs(w, t)
        txt = " ".join(f"{x:.2f}" for x in ok)
        if bad:
            txt += f" (not counted: {', '.join(bad)})"
        cols.append(txt if w in works else "")
    doc.append(f"| {names[t]} | " + " | ".join(cell("big", t) + cell("tree", t)) + f" | {cols[0]} | {cols[1]} |")
doc.append("")
if "urmove" in tools and peers:
    line = []
    for w in works:
        best = min((med[(w, p)], p) for p in peers if med[(w, p)] is not None) if any(
            med[(w, p)] is not None for p in peers) else None
        u = med[(w, "urmove")]
        if best and u:
            line.append(f"{w}: {best[0] / u:.2f}x the best peer ({names[best[1]]})")
        else:
            line.append(f"{w}: -")
    doc.append("urmove against the best peer of this run (time of the best peer / urmove's; "
               "the issue's goal: at least 3x on both): " + "; ".join(line))
if E.get("TSV") and "urmove" in tools and peers:
    import re
    ssh_v = re.search(r"OpenSSH_([0-9.p]+)", E["SSH_V"])
    ssh_v = f"OpenSSH {ssh_v.group(1)}" if ssh_v else E["SSH_V"]
    rsync_v = re.search(r"version ([0-9.]+) +protocol version ([0-9]+)", E["RSYNC_V"])
    rsync_v = f"rsync {rsync_v.group(1)} (protocol {rsync_v.group(2)})" if rsync_v else E["RSYNC_V"]
    version = {"scp": ssh_v, "sftp": ssh_v, "rsync": rsync_v}
    jobs = {"big": f"one {int(E['BIG_MIB'])} MiB file over ssh, cold cache, synced",
            "tree": f"{files} files of {E['FILE_KIB']} KiB over ssh, cold cache, synced"}
    def rate(w, t):
        s = med[(w, t)]
        return f"{big_bytes * 8 / s / 1e9:.2f} Gbit/s" if w == "big" else f"{files / s:.0f} files/s"
    with open(E["TSV"], "a") as f:
        for r in rows:
            f.write("\t".join(["round", "ssh"] + r) + "\n")
        for w in works:
            ok = [p for p in peers if med[(w, p)] is not None]
            if not ok or med[(w, "urmove")] is None:
                continue
            best = min(ok, key=lambda p: med[(w, p)])
            f.write("\t".join(["cmp", "ssh", jobs[w], f"`send` through ssh (encrypted): {rate(w, 'urmove')}",
                               f"{names[best]} ({version[best]}): {rate(w, best)}",
                               f"{med[(w, best)] / med[(w, 'urmove')]:.2f}"]) + "\n")
text = "\n".join(doc) + "\n"
open(out, "w").write(text)
sys.stdout.write(text)
PY
log "report in $OUT; every run in $ROUNDS_TSV"
