#!/usr/bin/env bash
# Every benchmark the README reports, in one run: runs the bench scripts'
# parts once, one after the other, and writes docs/benchmarks.md in full from
# this run's output (a header naming the machine, the urmove commit and every
# peer's version; each table with its caption, its round values and how it
# was measured), then prints the short comparison table the README's
# "## Comparison" section shows (job | urmove | best peer configuration and
# version | urmove/peer), to paste there. Nothing in it assumes this machine:
# sizes and rounds come from the environment, with each script's defaults.
#
# Parts (all by default, in this order):
#   net veth file tree scale mem crypt udp   scripts/bench-net.sh's sections
#   disk     scripts/bench-disk.sh   (urmove bench --disk vs fio and dd)
#   lanes    scripts/bench-scaling.sh (urmove's lanes vs iperf3 and fio)
#   shards   scripts/bench-shards.sh (send --shard over 1, 2, 4 shards)
#   wan      scripts/bench-wan.sh    (long paths through urmove-delayline)
#   ssh      scripts/bench-ssh.sh    (urmove through ssh vs scp, rsync -e ssh,
#                                     sftp: a 2 GiB file and 20,000 small ones)
# How long, at the defaults on a 2-core VM (counted from the runs each part
# makes, not timed whole): about 30 min without wan (bench-net about 18,
# lanes 8, disk 3, shards 2), and wan about 70 more (3 paths x 3 losses x 14
# configurations x 3 rounds of 10 s or a 2 GiB send); each part's time is in
# the document.
# Each script drops the page cache where its tables say "cold cache", and
# each stays usable on its own; this one gives each TSV=FILE, the
# machine-readable rounds, configurations, versions and comparison rows that
# it reads besides their Markdown.
#
# Usage (as root; the peers from ../shared/peers/setup.sh):
#   scripts/bench-all.sh                        # every part, default sizes
#   scripts/bench-all.sh no-wan                 # every part but wan
#   scripts/bench-all.sh net veth disk          # only these parts
#   ROUNDS=1 DUR=2 BIG_MB=256 TREE_FILES=500 SCALE_COUNTS=500 \
#     MEM_SMALL_MB=64 MEM_BIG_MB=256 scripts/bench-all.sh no-wan   # a smoke run
#
# Environment (defaults are the scripts' own):
#   OUT=docs/benchmarks.md    where the document goes (relative: to the repo)
#   ROUNDS=3 DUR=10 STREAMS=4 every part's rounds, seconds per network test,
#                             TCP streams
#   bench-net.sh:   BIG_MB=4096 TREE_FILES=10000 TREE_KB=64
#                   SCALE_COUNTS="1000 10000 100000" MEM_SMALL_MB=1024
#                   MEM_BIG_MB=8192 UDP_SIZES="1460 8192" and its IPERF_TCP,
#                   IPERF_UDP, RSYNC_CONFIGS, SCP_CIPHERS, WORKDIR
#   bench-disk.sh:  DISK_SIZE_MB=2048 RAND_S=15 DISK_DIR=/var/tmp/urmove-bench-disk
#   bench-scaling:  LANES_SIZE_MB=2048 LANES= MODES= (its defaults: all)
#   bench-shards:   SHARDS_SIZE_MB=2048 SHARD_FILES=2000 SHARDS="1 2 4"
#   bench-ssh.sh:   SSH_BIG_MIB=2048 SSH_FILES=20000
#   bench-wan.sh:   WAN_PATHS="1Gbit:100ms 10Gbit:20ms 2Gbit:100ms"
#                   WAN_LOSSES="0 0.001 0.015" WAN_FILE_MB=2048
#                   WAN_SWEEP="1 4 8 12" WAN_IPERF_P="1 4 8" WAN_IPERF_PROCS=8
#   RESUME=DIR      finish an interrupted run: keep the parts that finished in
#                   DIR (its "logs and raw results" directory), run the rest
#                   again with the same settings, and write the document from
#                   both (its Date row says so)
#   SMOKE=1         mark the document as a smoke run even at default sizes
#                   (it is marked so anyway when any size or round count is
#                   below the defaults above)
#   URMOVE=         urmove binary (default: cargo build --release in this repo)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "bench-all: $*" >&2; exit 1; }
log() { echo "bench-all: $(date +%H:%M:%S) $*" >&2; }

NET_PARTS=(net veth file tree scale mem crypt udp)
ALL_PARTS=("${NET_PARTS[@]}" disk lanes shards wan ssh)
declare -A RUN=()
only=() skip=()
for a in "$@"; do
    case $a in
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        no-*) skip+=("${a#no-}") ;;
        *) only+=("$a") ;;
    esac
done
for p in "${only[@]}" "${skip[@]}"; do
    [[ " ${ALL_PARTS[*]} " == *" $p "* ]] || die "unknown part '$p' (parts: ${ALL_PARTS[*]}; prefix no- to skip one)"
done
for p in "${ALL_PARTS[@]}"; do
    if [ ${#only[@]} -eq 0 ] || [[ " ${only[*]} " == *" $p "* ]]; then RUN[$p]=1; fi
done
for p in "${skip[@]}"; do unset "RUN[$p]"; done
want() { [ -n "${RUN[$1]:-}" ]; }

[ "$(id -u)" -eq 0 ] || die "must run as root (the scripts drop the page cache and make network namespaces)"
command -v python3 >/dev/null || die "python3 not found"

# The settings, with the defaults a full run uses (a smaller one is a smoke run).
# bench-scaling.sh's own default is 4 streams or one per core when more: it
# gets STREAMS only when it is given here.
GIVEN_STREAMS=${STREAMS:-}
declare -A DEFAULTS=([ROUNDS]=3 [DUR]=10 [STREAMS]=4 [BIG_MB]=4096 [TREE_FILES]=10000
    [TREE_KB]=64 [MEM_SMALL_MB]=1024 [MEM_BIG_MB]=8192 [DISK_SIZE_MB]=2048 [RAND_S]=15
    [LANES_SIZE_MB]=2048 [SHARDS_SIZE_MB]=2048 [SHARD_FILES]=2000 [WAN_FILE_MB]=2048
    [SSH_BIG_MIB]=2048 [SSH_FILES]=20000)
for v in "${!DEFAULTS[@]}"; do
    printf -v "$v" '%s' "${!v:-${DEFAULTS[$v]}}"
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
SCALE_COUNTS=${SCALE_COUNTS:-1000 10000 100000}
UDP_SIZES=${UDP_SIZES:-1460 8192}
SHARDS=${SHARDS:-1 2 4}
WAN_PATHS=${WAN_PATHS:-1Gbit:100ms 10Gbit:20ms 2Gbit:100ms}
WAN_LOSSES=${WAN_LOSSES:-0 0.001 0.015}
WAN_SWEEP=${WAN_SWEEP-1 4 8 12}
WAN_IPERF_P=${WAN_IPERF_P-1 4 8}
WAN_IPERF_PROCS=${WAN_IPERF_PROCS-8}
DISK_DIR=${DISK_DIR:-/var/tmp/urmove-bench-disk}
OUT=${OUT:-docs/benchmarks.md}
[[ $OUT = /* ]] || OUT=$ROOT/$OUT
SMOKE=${SMOKE:-}
small=() changed=()
for v in "${!DEFAULTS[@]}"; do
    if [ "${!v}" -lt "${DEFAULTS[$v]}" ]; then small+=("$v=${!v}"); fi
    if [ "${!v}" != "${DEFAULTS[$v]}" ]; then changed+=("$v=${!v}"); fi
done
if [ "$SCALE_COUNTS" != "1000 10000 100000" ]; then
    small+=("SCALE_COUNTS=\"$SCALE_COUNTS\""); changed+=("SCALE_COUNTS=\"$SCALE_COUNTS\"")
fi
declare -A LIST_DEFAULTS=([UDP_SIZES]="1460 8192" [SHARDS]="1 2 4"
    [WAN_PATHS]="1Gbit:100ms 10Gbit:20ms 2Gbit:100ms" [WAN_LOSSES]="0 0.001 0.015"
    [WAN_SWEEP]="1 4 8 12" [WAN_IPERF_P]="1 4 8" [WAN_IPERF_PROCS]=8)
for v in "${!LIST_DEFAULTS[@]}"; do
    if [ "${!v}" != "${LIST_DEFAULTS[$v]}" ]; then changed+=("$v=\"${!v}\""); fi
done
for v in LANES MODES IPERF_TCP IPERF_UDP RSYNC_CONFIGS SCP_CIPHERS; do
    if [ -n "${!v:-}" ]; then changed+=("$v=\"${!v}\""); fi
done
if [ "$DISK_DIR" != /var/tmp/urmove-bench-disk ]; then changed+=("DISK_DIR=$DISK_DIR"); fi
if [ ${#small[@]} -gt 0 ]; then SMOKE=1; fi

if [ -z "${URMOVE:-}" ]; then
    log "building urmove (cargo build --release --bins in $ROOT)"
    (cd "$ROOT" && cargo build --release --bins >&2) || die "cargo build failed"
    URMOVE=${CARGO_TARGET_DIR:-$ROOT/target}/release/urmove
fi
[ -x "$URMOVE" ] || die "urmove binary not executable: $URMOVE"
export URMOVE

COMMIT=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo "?")
if [ -n "$(cd "$ROOT" && git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    COMMIT="$COMMIT with uncommitted changes"
fi

# The rows each part writes to the TSV carry its script's tag.
declare -A TAG=([net]=net [disk]=disk [lanes]=scaling [shards]=shards [wan]=wan [ssh]=ssh)
if [ -n "${RESUME:-}" ]; then
    RUNDIR=$RESUME
    [ -f "$RUNDIR/status.tsv" ] && [ -f "$RUNDIR/results.tsv" ] \
        || die "RESUME=$RUNDIR is not a bench-all run directory (no status.tsv and results.tsv)"
else
    RUNDIR=$(mktemp -d /var/tmp/urmove-bench-all.XXXXXX)
    : >"$RUNDIR/results.tsv"
    : >"$RUNDIR/status.tsv"
    date -Is >"$RUNDIR/started"
    cut -d' ' -f1-3 /proc/loadavg >"$RUNDIR/load-start"
fi
TSV=$RUNDIR/results.tsv
STATUS=$RUNDIR/status.tsv   # part, script, exit code, seconds
log "logs and raw results in $RUNDIR"
DATE=$(cat "$RUNDIR/started" 2>/dev/null || echo "an unrecorded time")
LOAD_START=$(cat "$RUNDIR/load-start" 2>/dev/null || echo "unrecorded")
RESUMED=
# done_before NAME: whether a resumed run finished part NAME (exit 0); a part that
# is run again first loses what its interrupted or failed run left.
done_before() {
    [ -n "${RESUME:-}" ] || return 1
    if awk -F'\t' -v n="$1" '$1 == n && $3 == 0 { ok = 1 } END { exit !ok }' "$STATUS"; then
        log "part $1: kept from $RUNDIR (it finished there)"
        return 0
    fi
    awk -F'\t' -v n="$1" '$1 != n' "$STATUS" >"$STATUS.new" && mv "$STATUS.new" "$STATUS"
    awk -F'\t' -v t="${TAG[$1]}" '$2 != t' "$TSV" >"$TSV.new" && mv "$TSV.new" "$TSV"
    RESUMED="$RESUMED $1"
    return 1
}

# part NAME SCRIPT [VAR=VALUE...] -- [ARGS...]: run one script, its Markdown
# to $RUNDIR/NAME.md, its log to $RUNDIR/NAME.log and to stderr.
part() {
    local name=$1 script=$2 t0 rc=0; shift 2
    if done_before "$name"; then return 0; fi
    local -a env=()
    while [ "$1" != -- ]; do env+=("$1"); shift; done
    shift
    log "part $name: $script $*"
    t0=$(date +%s)
    env "${env[@]}" TSV="$TSV" ROUNDS="$ROUNDS" URMOVE="$URMOVE" "$ROOT/scripts/$script" "$@" \
        >"$RUNDIR/$name.md" 2> >(tee "$RUNDIR/$name.log" >&2) || rc=$?
    # The commit each part measured (a resumed run's parts may differ).
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$script" "$rc" $(( $(date +%s) - t0 )) "$COMMIT" >>"$STATUS"
    [ "$rc" = 0 ] || log "part $name: $script exited $rc (see $RUNDIR/$name.log); going on"
}

net_sections=()
for s in "${NET_PARTS[@]}"; do want "$s" && net_sections+=("$s"); done
if [ ${#net_sections[@]} -gt 0 ]; then
    part net bench-net.sh DUR="$DUR" STREAMS="$STREAMS" BIG_MB="$BIG_MB" TREE_FILES="$TREE_FILES" \
        TREE_KB="$TREE_KB" SCALE_COUNTS="$SCALE_COUNTS" MEM_SMALL_MB="$MEM_SMALL_MB" \
        MEM_BIG_MB="$MEM_BIG_MB" UDP_SIZES="$UDP_SIZES" -- "${net_sections[@]}"
fi
if want disk; then
    part disk bench-disk.sh SIZE_MB="$DISK_SIZE_MB" RAND_S="$RAND_S" -- "$DISK_DIR"
fi
if want lanes; then
    part lanes bench-scaling.sh DUR="$DUR" ${GIVEN_STREAMS:+STREAMS="$STREAMS"} SIZE_MB="$LANES_SIZE_MB" \
        ${LANES:+LANES="$LANES"} ${MODES:+MODES="$MODES"} --
fi
if want shards; then
    part shards bench-shards.sh SIZE_MB="$SHARDS_SIZE_MB" FILES="$SHARD_FILES" SHARDS="$SHARDS" --
fi
if want ssh; then
    part ssh bench-ssh.sh BIG_MIB="$SSH_BIG_MIB" FILES="$SSH_FILES" OUT="$RUNDIR/ssh-report.md" --
fi
if want wan; then
    part wan bench-wan.sh DUR="$DUR" PATHS="$WAN_PATHS" LOSSES="$WAN_LOSSES" FILE_MB="$WAN_FILE_MB" \
        SWEEP="$WAN_SWEEP" IPERF_P="$WAN_IPERF_P" IPERF_PROCS="$WAN_IPERF_PROCS" --
fi
ELAPSED=$(awk -F'\t' '{ s += $4 } END { print s + 0 }' "$STATUS")
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)

# --- the machine and the peers ------------------------------------------------
disk_of() { # disk_of DIR: its filesystem, device and what the device is
    local dir=$1 src fs dev
    while [ ! -d "$dir" ]; do dir=$(dirname "$dir"); done
    fs=$(findmnt -no FSTYPE -T "$dir" 2>/dev/null || echo "?")
    src=$(findmnt -no SOURCE -T "$dir" 2>/dev/null || echo "?")
    dev=$(lsblk -ndo PKNAME "$src" 2>/dev/null || true)
    [ -n "$dev" ] || dev=$(basename "$src")
    local info
    info=$(lsblk -ndo SIZE,ROTA,TRAN,MODEL "/dev/$dev" 2>/dev/null \
        | awk '{ r = $2 == 1 ? "rotational" : "non-rotational"; m = ""; for (i = 4; i <= NF; i++) m = m " " $i;
                 print $1 ", " r (($3 != "") ? ", " $3 : "") (m != "" ? "," m : "") }' || true)
    echo "$fs on $src${info:+ ($info)}"
}
ver() { "$@" 2>&1 | head -1 || true; }
MACHINE=$RUNDIR/machine.tsv
# A resumed run's parts kept from before were measured by the urmove its
# machine table named then (runs before the commit column).
# The first machine table's urmove, kept once: later tables name several.
if [ ! -f "$RUNDIR/urmove-first" ]; then
    awk -F'\t' '$1 == "urmove" { print $2 }' "$MACHINE" >"$RUNDIR/urmove-first" 2>/dev/null || true
fi
EARLIER=$(cat "$RUNDIR/urmove-first" 2>/dev/null || true)
# Every resume of this run, kept: the parts each ran again or added.
if [ -n "$RESUMED" ]; then
    echo "resumed at $(date -Is) for:$RESUMED" >>"$RUNDIR/resumes"
fi
RESUMES=$(paste -sd ';' "$RUNDIR/resumes" 2>/dev/null | sed 's/;/; /g' || true)
NOW="$COMMIT ($("$URMOVE" --version 2>/dev/null | head -1))"
URMOVE_ROW=$(awk -F'\t' -v earlier="${EARLIER:-unrecorded}" -v commit="$COMMIT" -v now="$NOW" '
    { c = ($5 == "") ? earlier : ($5 == commit) ? now : $5
      if (!(c in parts)) order[n++] = c; parts[c] = parts[c] (parts[c] ? ", " : "") $1 }
    END { if (n <= 1) { print now; exit }
          for (i = 0; i < n; i++) printf "%s%s for %s", (i ? "; " : ""), order[i], parts[order[i]]; print "" }' "$STATUS")
{
    printf 'Date\t%s (took %s min; load %s at start, %s at end)%s\n' "$DATE" $(( (ELAPSED + 59) / 60 )) \
        "$LOAD_START" "$LOAD_END" "${RESUMES:+; $RESUMES (parts it had not finished or did not have)}"
    printf 'CPUs\t%s (nproc), %s\n' "$(nproc)" "$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)"
    printf 'Memory\t%s\n' "$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
    printf 'Kernel\t%s\n' "$(uname -r)"
    printf 'Disk (bench-net, lanes, shards, wan work dirs under /var/tmp)\t%s\n' "$(disk_of /var/tmp)"
    printf 'Disk (bench-disk, %s)\t%s\n' "$DISK_DIR" "$(disk_of "$DISK_DIR")"
    printf 'urmove\t%s\n' "$URMOVE_ROW"
    printf 'iperf3\t%s\n' "$(ver iperf3 --version)"
    printf 'rsync\t%s\n' "$(ver rsync --version)"
    printf 'OpenSSH (scp, sshd)\t%s\n' "$(ver ssh -V)"
    printf 'fio\t%s\n' "$(ver fio --version)"
    printf 'dd\t%s\n' "$(ver dd --version)"
} >"$MACHINE"

# --- the document -------------------------------------------------------------
mkdir -p "$(dirname "$OUT")"
SMOKE=$SMOKE SMALL="${small[*]}" ROOT="$ROOT" OUT="$OUT" WAN_PATHS="$WAN_PATHS" \
ARGS="$*" CMD_ENV="${changed[*]}" \
python3 - "$RUNDIR" <<'EOF'
import os, re, sys

run = sys.argv[1]
E = os.environ
rows = [l.rstrip("\n").split("\t") for l in open(os.path.join(run, "results.tsv")) if l.strip()]
status = [l.rstrip("\n").split("\t") for l in open(os.path.join(run, "status.tsv")) if l.strip()]
machine = [l.rstrip("\n").split("\t", 1) for l in open(os.path.join(run, "machine.tsv")) if l.strip()]

# The comparison table: each script's own rows, then the first long path's.
cmp = [r[2:] for r in rows if r[0] == "cmp"]
wan = [r for r in rows if r[0] == "round" and r[1] == "wan"]
if wan:
    from statistics import median
    first = E["WAN_PATHS"].split()[0].replace(":", " x ")
    vals = {}
    for _, _, where, label, _, v, bits in wan:
        if v.replace(".", "", 1).isdigit():
            vals.setdefault((where, label), []).append(float(v))
    for where in dict.fromkeys(w for w, _ in vals):
        if not where.startswith(first + " "):
            continue
        u = vals.get((where, "urmove bench --net (defaults)"))
        peers = {l: median(v) for (w, l), v in vals.items() if w == where and l.startswith("iperf3")}
        if not u or not peers:
            continue
        best = max(peers, key=peers.get)
        ver = next((r[3] for r in rows if r[0] == "version" and r[1] == "wan"), "iperf3")
        loss = where.rsplit(" loss ", 1)[1]
        cmp.append([f"memory to memory, {first}, loss {float(loss) * 100:g}% (urmove-delayline)",
                    f"`bench --net` (defaults): {median(u):.0f} Mbit/s", f"{best} ({ver}): {peers[best]:.0f} Mbit/s",
                    f"{median(u) / peers[best]:.2f}"])

table = ["| job | urmove | best peer configuration (version): rate | urmove/peer |", "|---|---|---|---|"]
table += [f"| {' | '.join(c)} |" for c in cmp]

smoke = E.get("SMOKE") == "1"
doc = ["# Benchmarks", ""]
doc.append("Generated by `scripts/bench-all.sh` from one run: every table below, its caption, "
           "its round values and how it was measured come from that run's output. Do not edit by hand; "
           "run `sudo scripts/bench-all.sh` on a quiet machine and commit what it writes.")
doc.append("")
if smoke:
    small = E.get("SMALL") or "SMOKE=1"
    doc.append(f"> **This copy is from a short smoke run, to be regenerated.** It ran with settings below the "
               f"defaults ({small}) to show that the script runs end to end; its numbers are not results "
               f"and must not be quoted.")
    doc.append("")
doc.append("## The machine and the peers")
doc.append("")
doc.append("| | |")
doc.append("|---|---|")
doc += [f"| {k} | {v} |" for k, v in machine]
cmd = " ".join(x for x in (E["CMD_ENV"], "scripts/bench-all.sh", E["ARGS"]) if x)
doc.append(f"| Command | `{cmd}` (settings not given are the defaults `scripts/bench-all.sh --help` lists) |")
doc.append("")
doc.append("## Comparison")
doc.append("")
doc.append("Each peer at the best configuration this run measured (by median of its rounds), "
           "urmove at its defaults; the parts below show every configuration, every round and how each ran. "
           "`scripts/bench-all.sh` prints this table; the README shows it.")
doc.append("")
doc += table
doc.append("")

titles = {"net": "Network and transfers: `scripts/bench-net.sh`", "disk": "Disk: `scripts/bench-disk.sh`",
          "lanes": "Lanes: `scripts/bench-scaling.sh`", "shards": "Sharded sends: `scripts/bench-shards.sh`",
          "wan": "Long paths: `scripts/bench-wan.sh`", "ssh": "Over ssh: `scripts/bench-ssh.sh`"}

def shifted(md, top):
    """Markdown with its headings moved so that the biggest is level `top`."""
    lines, fence = md.splitlines(), False
    levels = []
    for l in lines:
        if l.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#+ ", l):
            levels.append(len(l) - len(l.lstrip("#")))
    if not levels:
        return md
    d = top - min(levels)
    out, fence = [], False
    for l in lines:
        if l.startswith("```"):
            fence = not fence
        elif not fence and re.match(r"#+ ", l):
            l = "#" * (len(l) - len(l.lstrip("#")) + d) + l[len(l) - len(l.lstrip("#")):]
        out.append(l)
    return "\n".join(out)

for name, script, rc, secs, *_ in status:
    doc.append(f"## {titles.get(name, name)}")
    doc.append("")
    path = os.path.join(run, f"{name}.md")
    md = open(path).read().strip() if os.path.exists(path) else ""
    if rc != "0":
        doc.append(f"**`{script}` exited {rc}** after {secs} s; what it printed follows (its log was {run}/{name}.log).")
        doc.append("")
    doc.append(shifted(md, 3) if md else "(no output)")
    doc.append("")
    doc.append(f"*This part took {int(secs) // 60} min {int(secs) % 60} s.*")
    doc.append("")

open(E["OUT"], "w").write("\n".join(doc).rstrip() + "\n")
print("\n".join(table))
EOF
log "wrote $OUT ($(( ELAPSED / 60 )) min $(( ELAPSED % 60 )) s); raw results in $RUNDIR"
if [ "$SMOKE" = 1 ]; then log "settings below the defaults (${small[*]:-SMOKE=1}): a smoke run; its numbers are not results"; fi
if awk -F'\t' '$3 != 0 { bad = 1 } END { exit !bad }' "$STATUS"; then
    log "some parts failed:"; awk -F'\t' '$3 != 0 { print "  " $1 ": " $2 " exited " $3 }' "$STATUS" >&2
    exit 1
fi
