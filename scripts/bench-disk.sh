#!/usr/bin/env bash
# Disk benchmark: urmove against its peers on the same file, in one run.
#
# Tools: urmove bench --disk, fio (io_uring, fixedbufs + registerfiles),
# fio (psync) and dd (oflag/iflag=direct), all with O_DIRECT on $DIR/bench.dat.
# Tests: sequential write and read (1 MiB blocks, QD 32, SIZE_MB MiB) and 4 KiB
# random read (QD 32, time-based; fio psync is QD 1, dd has no random read).
# Each test runs ROUNDS times, tool order rotated per round; the script prints
# a Markdown table of medians and urmove/peer ratios (and against the best
# peer configuration of each test), then every round value; the caption
# names fio's and dd's versions (their own --version) and options.
#
# Usage (as root):
#   scripts/bench-disk.sh [DIR]
#   ROUNDS=5 SIZE_MB=4096 RAND_S=30 scripts/bench-disk.sh /mnt/raid
#
# Environment:
#   ROUNDS=3        rounds per test and tool
#   SIZE_MB=2048    test file size in MiB (sequential tests move all of it; >= 1024)
#   RAND_S=15       seconds of 4k random read per tool and round
#   DIR=/var/tmp/urmove-bench-disk   work dir (the first argument overrides it)
#   URMOVE=         urmove binary (default: cargo build --release in this repo)
#   KEEP=1          keep $DIR/bench.dat on exit
#   TSV=            also write every round, configuration and version to this
#                   file, tab-separated (scripts/bench-all.sh reads it)
set -euo pipefail

ROUNDS=${ROUNDS:-3}
SIZE_MB=${SIZE_MB:-2048}
RAND_S=${RAND_S:-15}
DIR=${1:-${DIR:-/var/tmp/urmove-bench-disk}}
URMOVE=${URMOVE:-}
KEEP=${KEEP:-0}
TSV=${TSV:-}

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CMDLINE="ROUNDS=$ROUNDS SIZE_MB=$SIZE_MB RAND_S=$RAND_S $0${*:+ $*}"

die() { echo "bench-disk: $*" >&2; exit 1; }
log() { echo "bench-disk: $*" >&2; }

# --- checks -----------------------------------------------------------------
[ "$(id -u)" -eq 0 ] || die "must run as root (drops the page cache between read tests)"
command -v fio >/dev/null || die "fio not found; install the peers with ../shared/peers/setup.sh (relative to the repo root)"
command -v dd >/dev/null || die "dd not found (coreutils)"
command -v python3 >/dev/null || die "python3 not found (used for JSON parsing and statistics)"
for v in ROUNDS SIZE_MB RAND_S; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer, got '${!v}'"
done
[ "$SIZE_MB" -ge 1024 ] || log "warning: SIZE_MB=$SIZE_MB is below 1024; sequential results will be short and noisy"

if [ -z "$URMOVE" ]; then
    log "building urmove (cargo build --release in $ROOT)"
    (cd "$ROOT" && cargo build --release >&2) || die "cargo build failed"
    URMOVE=$ROOT/target/release/urmove
fi
[ -x "$URMOVE" ] || die "urmove binary not executable: $URMOVE"

created_dir=0
if [ ! -d "$DIR" ]; then mkdir -p "$DIR"; created_dir=1; fi
FILE=$DIR/bench.dat
WORK=$(mktemp -d)   # tool outputs and the results list

cleanup() {
    if [ "$KEEP" = 1 ]; then
        log "keeping $FILE (KEEP=1)"
    else
        rm -f "$FILE"
        if [ "$created_dir" = 1 ]; then rmdir "$DIR" 2>/dev/null || true; fi
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

avail_mb=$(df -Pm "$DIR" | awk 'NR == 2 { print $4 }')
have_mb=0
[ -f "$FILE" ] && have_mb=$(( $(stat -c %s "$FILE") / 1048576 ))
[ $(( avail_mb + have_mb )) -ge $(( SIZE_MB + 256 )) ] \
    || die "not enough free space in $DIR: need ${SIZE_MB} MiB + 256 MiB margin, have ${avail_mb} MiB"

# --- helpers ----------------------------------------------------------------
# jget FILE PATH: print the value at a dotted path (list indices as numbers) of
# the JSON document in FILE; text before the first '{' (fio notes) is skipped.
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

# run OUT CMD...: run CMD with stdout to OUT; on failure show its stderr and stop.
run() {
    local out=$1; shift
    if ! "$@" >"$out" 2>"$out.err"; then
        cat "$out.err" >&2
        die "failed: $*"
    fi
    if [ -s "$out.err" ]; then sed 's/^/    | /' "$out.err" >&2; fi
}

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# timed CMD...: run CMD, print its wall time in seconds.
timed() {
    local t0 t1
    t0=$(date +%s.%N)
    run "$WORK/timed.out" "$@"
    t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.6f\n", b - a }'
}

BYTES=$(( SIZE_MB * 1048576 ))
FIO_COMMON=(--name=x "--filename=$FILE" --direct=1 "--size=${SIZE_MB}M"
            --end_fsync=0 --invalidate=1 --output-format=json)

# measure TEST TOOL: run one test with one tool, print the value (bytes/s for
# seq-write / seq-read, IOPS for rand-read).
measure() {
    local test=$1 tool=$2 out=$WORK/out.json secs
    local rw section
    local -a fiorw
    case $test in
        seq-write) rw="write";    fiorw=(--rw=write --bs=1M);    section="write" ;;
        seq-read)  rw="read";     fiorw=(--rw=read --bs=1M);     section="read" ;;
        rand-read) rw=randread; fiorw=(--rw=randread --bs=4k --time_based "--runtime=$RAND_S"); section="read" ;;
    esac
    case $tool in
        urmove)
            if [ "$test" = rand-read ]; then
                run "$out" "$URMOVE" bench --disk "$FILE" --mode randread --bs 4k --qd 32 \
                    --time "${RAND_S}s" --size "${SIZE_MB}M" --direct required --json
                jget "$out" results.0.iops
            else
                run "$out" "$URMOVE" bench --disk "$FILE" --mode "$rw" --size "${SIZE_MB}M" \
                    --bs 1M --qd 32 --direct required --json
                jget "$out" results.0.rate_bytes_per_s
            fi ;;
        fio-uring|fio-psync)
            local engine=(--ioengine=io_uring --fixedbufs=1 --registerfiles=1 --iodepth=32)
            [ "$tool" = fio-psync ] && engine=(--ioengine=psync --numjobs=1)
            run "$out" fio "${FIO_COMMON[@]}" "${engine[@]}" "${fiorw[@]}"
            if [ "$test" = rand-read ]; then
                jget "$out" "jobs.0.$section.iops"
            else
                jget "$out" "jobs.0.$section.bw_bytes"
            fi ;;
        dd)
            if [ "$test" = seq-write ]; then
                secs=$(timed dd if=/dev/zero "of=$FILE" bs=1M "count=$SIZE_MB" oflag=direct conv=notrunc status=none)
            else
                secs=$(timed dd "if=$FILE" of=/dev/null bs=1M "count=$SIZE_MB" iflag=direct status=none)
            fi
            awk -v b="$BYTES" -v s="$secs" 'BEGIN { printf "%.1f\n", b / s }' ;;
    esac
}

# --- run --------------------------------------------------------------------
TOOLS=(urmove fio-uring fio-psync dd)
TESTS=(seq-write seq-read rand-read)
RESULTS=$WORK/results.tsv
: >"$RESULTS"
START=$(date +%s)

# Lay out the whole file once, untimed, so every tool overwrites and reads the
# same allocated blocks (and urmove does not treat it as its own temp file).
log "preparing $FILE (${SIZE_MB} MiB)"
dd if=/dev/zero of="$FILE" bs=1M count="$SIZE_MB" oflag=direct conv=notrunc status=none
sync

for (( r = 0; r < ROUNDS; r++ )); do
    # rotate the tool order each round so drift on the disk favours no tool
    order=("${TOOLS[@]:r % ${#TOOLS[@]}}" "${TOOLS[@]:0:r % ${#TOOLS[@]}}")
    for test in "${TESTS[@]}"; do
        for tool in "${order[@]}"; do
            [ "$test" = rand-read ] && [ "$tool" = dd ] && continue
            [ "$test" != seq-write ] && drop_caches
            val=$(measure "$test" "$tool")
            printf '%s\t%s\t%d\t%s\n' "$test" "$tool" "$((r + 1))" "$val" >>"$RESULTS"
            if [ "$test" = rand-read ]; then
                log "round $((r + 1))/$ROUNDS $test $tool: $(awk -v v="$val" 'BEGIN { printf "%.0f IOPS", v }')"
            else
                log "round $((r + 1))/$ROUNDS $test $tool: $(awk -v v="$val" 'BEGIN { printf "%.0f MB/s", v / 1e6 }')"
            fi
        done
    done
done
ELAPSED=$(( $(date +%s) - START ))

# --- report -----------------------------------------------------------------
FS=$(findmnt -no FSTYPE,SOURCE -T "$DIR" 2>/dev/null | awk '{ print $1 " on " $2 }' || true)
[ -n "$FS" ] || FS=$(df -PT "$DIR" | awk 'NR == 2 { print $2 " on " $1 }')

V_FIO=$(fio --version 2>/dev/null || echo "fio (version unknown)")
V_DD=$(dd --version 2>/dev/null | head -1 || echo "dd (version unknown)")
COMMIT=$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo "?")

SIZE_MB=$SIZE_MB RAND_S=$RAND_S V_FIO="$V_FIO" V_DD="$V_DD" TSV="$TSV" python3 - "$RESULTS" <<'EOF'
import os, sys
from collections import defaultdict
from statistics import median

E = os.environ
vals = defaultdict(list)           # (test, tool) -> [value per round]
rounds = []
for line in open(sys.argv[1]):
    test, tool, rnd, v = line.rstrip("\n").split("\t")
    vals[test, tool].append(float(v))
    rounds.append((test, tool, rnd, v))
size, rand_s, vfio, vdd = E["SIZE_MB"], E["RAND_S"], E["V_FIO"], E["V_DD"]
conf = {
    "urmove": f"urmove bench --disk FILE --size {size}M --bs 1M --qd 32 --direct required (--mode write, read);"
              f" --mode randread --bs 4k --qd 32 --time {rand_s}s",
    "fio-uring": f"{vfio} --ioengine=io_uring --fixedbufs=1 --registerfiles=1 --iodepth=32 --direct=1"
                 f" --invalidate=1 --size={size}M --bs=1M (--rw=write, read); --rw=randread --bs=4k"
                 f" --time_based --runtime={rand_s}",
    "fio-psync": f"{vfio} --ioengine=psync --numjobs=1 --direct=1 --invalidate=1 --size={size}M (queue depth 1)",
    "dd": f"{vdd}: bs=1M count={size} oflag=direct conv=notrunc (write, zeros); iflag=direct (read)",
}
print(f"### Disk: urmove bench --disk vs {vfio} and {vdd}, O_DIRECT on one {size} MiB file\n")
print("Each tool, as run (all on the same file, page cache dropped before each read):\n")
names = {"urmove": "urmove", "fio-uring": "fio io_uring", "fio-psync": "fio psync", "dd": "dd"}
for t, text in conf.items():
    print(f"- {names[t]}: {text}")
print()

tools = [("urmove", "urmove"), ("fio-uring", "fio io_uring"),
         ("fio-psync", "fio psync"), ("dd", "dd")]
tests = [("seq-write", "seq write 1 MiB QD32 (MB/s)", 1e6),
         ("seq-read", "seq read 1 MiB QD32 (MB/s)", 1e6),
         ("rand-read", "4k rand read QD32 (IOPS)", 1)]

def cell(test, tool, scale):
    if (test, tool) not in vals:
        return "n/a"
    s = f"{median(vals[test, tool]) / scale:.0f}"
    return s + " (QD1)" if test == "rand-read" and tool == "fio-psync" else s

peers = tools[1:]
print("| test | " + " | ".join(n for _, n in tools) + " | "
      + " | ".join(f"urmove/{n}" for _, n in peers) + " |")
print("|---" * (1 + len(tools) + len(peers)) + "|")
for test, label, scale in tests:
    row = [cell(test, t, scale) for t, _ in tools]
    for t, _ in peers:
        if (test, t) in vals and (test, "urmove") in vals:
            row.append(f"{median(vals[test, 'urmove']) / median(vals[test, t]):.2f}")
        else:
            row.append("n/a")
    print(f"| {label} | " + " | ".join(row) + " |")

print("\nBest peer per test (by median):\n")
cmp_rows = []
jobs = {"seq-write": f"sequential write, {size} MiB, O_DIRECT, 1 MiB QD32",
        "seq-read": f"sequential read, {size} MiB, O_DIRECT, 1 MiB QD32",
        "rand-read": "4 KiB random read, QD32"}
for test, label, scale in tests:
    ps = [t for t, _ in peers if (test, t) in vals]
    if not ps or (test, "urmove") not in vals:
        continue
    b = max(ps, key=lambda t: median(vals[test, t]))
    u, bv = median(vals[test, "urmove"]), median(vals[test, b])
    unit = "IOPS" if test == "rand-read" else "MB/s"
    bname = dict(tools)[b] + (" (QD1)" if b == "fio-psync" else "")
    print(f"- {label}: {bname}, urmove/{bname} {u / bv:.2f}")
    ver = vdd if b == "dd" else vfio
    cmp_rows.append((jobs[test], f"`bench --disk`: {u / scale:.0f} {unit}",
                     f"{bname} ({ver}): {bv / scale:.0f} {unit}", f"{u / bv:.2f}"))

print("\nRound values (medians above):\n")
print("```text")
for test, label, scale in tests:
    for t, name in tools:
        if (test, t) in vals:
            rs = ", ".join(f"{v / scale:.0f}" for v in vals[test, t])
            print(f"  {label:30} {name:13} {rs}")
print("```")

if E.get("TSV"):
    with open(E["TSV"], "a") as f:
        for r in rounds:
            f.write("\t".join(("round", "disk") + r) + "\n")
        for t, text in conf.items():
            f.write("\t".join(("conf", "disk", "disk", t, text)) + "\n")
        f.write("\t".join(("version", "disk", "fio", vfio)) + "\n")
        f.write("\t".join(("version", "disk", "dd", vdd)) + "\n")
        for row in cmp_rows:
            f.write("\t".join(("cmp", "disk") + row) + "\n")
EOF

cat <<EOF

How it was measured: MB/s are decimal (1e6 bytes/s); ratios are of medians.
All tools use O_DIRECT on the same file, tool order rotated each round; fio
psync runs at QD1 by nature; dd writes zeros (urmove and fio write non-zero
data) and has no random read mode.

\`\`\`text
Command: $CMDLINE
Date:    $(date -Is)
Kernel:  $(uname -r)
File:    $FILE (${SIZE_MB} MiB) on ${FS}
urmove:  $URMOVE ($COMMIT)
Peers:   $V_FIO, $V_DD
Rounds:  $ROUNDS, rand-read ${RAND_S}s per tool and round, took ${ELAPSED}s
\`\`\`
EOF
