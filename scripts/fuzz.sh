#!/usr/bin/env bash
# Fuzz the wire protocol for a bounded time:
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET]        (default 60)
#
# Runs each cargo-fuzz target (frame, handshake, manifest, conversation,
# bodies in src/protocol/fuzz/; resume, in src/session/fuzz.rs) on nightly
# under libFuzzer, starting from the seeds
# in fuzz/corpus/<target> and the past findings in fuzz/regressions/<target>.
# Inputs the fuzzer discovers go to a temporary directory, so the committed
# corpus stays small. Exits 1 if any target found a crash, a timeout or a
# leak, and names the input that triggers it; 2 on a usage error.
#
# Environment:
#   FUZZ_TARGETS     targets to run (default: "frame handshake manifest
#                    conversation resume")
#   FUZZ_SANITIZER   address (default) or none
#   FUZZ_CORPUS_OUT  keep the grown corpus in this directory (default: dropped)
#   CARGO_TARGET_DIR where to build (honoured as by cargo)
# Installs the nightly toolchain and cargo-fuzz when missing (fine in CI=true
# on a clean clone).
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-60}"
if ! [[ "$secs" =~ ^[1-9][0-9]*$ ]]; then
  echo "usage: scripts/fuzz.sh [SECONDS_PER_TARGET]" >&2
  exit 2
fi
targets="${FUZZ_TARGETS:-frame handshake manifest conversation resume}"
sanitizer="${FUZZ_SANITIZER:-address}"

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "fuzz: installing the nightly toolchain (cargo-fuzz needs it)"
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz"
  cargo install --locked cargo-fuzz
fi
if ! command -v c++ >/dev/null 2>&1; then
  # libfuzzer-sys compiles libFuzzer (C++).
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "fuzz: installing g++ (libFuzzer is C++)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends g++ >/dev/null
  else
    echo "fuzz: no C++ compiler; install g++ or clang (libFuzzer is built from source)" >&2
    exit 2
  fi
fi

if [ -n "${FUZZ_CORPUS_OUT:-}" ]; then
  work="$FUZZ_CORPUS_OUT"
  mkdir -p "$work"
else
  work="$(mktemp -d "${TMPDIR:-/tmp}/urmove-fuzz.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
fi

echo "fuzz: building ($sanitizer sanitizer, release with debug assertions)"
cargo +nightly fuzz build --sanitizer "$sanitizer"

failed=()
for t in $targets; do
  mkdir -p "$work/$t" "fuzz/artifacts/$t"
  log="$work/$t.log"
  echo "fuzz: $t for ${secs}s"
  # The first corpus directory receives new inputs; the committed ones are
  # only read.
  if cargo +nightly fuzz run --sanitizer "$sanitizer" "$t" \
      "$work/$t" "fuzz/corpus/$t" "fuzz/regressions/$t" -- \
      -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n1 || true)
    echo "fuzz: $t ok: ${runs:-?} runs, ${rate:-?} exec/s, ${cov:-cov: ?}, corpus $(find "$work/$t" -type f | wc -l) new inputs"
  else
    failed+=("$t")
    cp "$log" "fuzz/artifacts/$t/fuzz.log"
    echo "fuzz: $t FAILED (full log: fuzz/artifacts/$t/fuzz.log):" >&2
    grep -A1 -E "panicked at|^==[0-9]+==ERROR|^SUMMARY|deadly signal|ALARM|out-of-memory" "$log" \
      | head -n 20 >&2 || tail -n 20 "$log" >&2
    inputs=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log")
    for input in $inputs; do
      echo "fuzz: $t: crashing input: $input" >&2
      echo "fuzz:   reproduce: cargo +nightly fuzz run $t $input" >&2
      echo "fuzz:   once fixed, keep it: cp $input fuzz/regressions/$t/" >&2
    done
    [ -n "$inputs" ] || echo "fuzz: $t: no input written; full log in fuzz/artifacts/$t/fuzz.log" >&2
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: no findings (${secs}s per target: $targets)"
