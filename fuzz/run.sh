#!/usr/bin/env bash
# Runs fuzz targets for a fixed time each, at most JOBS at a time, and
# records executions and findings.
#   fuzz/run.sh [SECONDS] [TARGET...]     (default: 600 s, every target)
# Stable toolchain, no sanitizer (no nightly here): cargo-fuzz with
# RUSTC_BOOTSTRAP=1 --sanitizer none; panics abort, so a panic is a crash.
# Each run appends one line to fuzz/results.tsv:
#   date  target  seconds  executions  exec/s  corpus  crashes  artifact
# and keeps its libFuzzer log in fuzz/logs/ (ignored by git). A crash stops
# that target's run; its input is in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:-600}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(reader hostelf runpath capabilities emitters nar nar_unpack printf)
jobs=${JOBS:-2}
[ -d corpus ] || ./seeds.sh
# cargo-fuzz from crates.io when missing (pinned; builds in about 4 minutes).
cargo fuzz --version >/dev/null 2>&1 || cargo install --locked cargo-fuzz --version 0.13.2
mkdir -p logs
RUSTC_BOOTSTRAP=1 cargo fuzz build --sanitizer none -O "${targets[@]/#/}" >/dev/null 2>&1 ||
    for t in "${targets[@]}"; do RUSTC_BOOTSTRAP=1 cargo fuzz build --sanitizer none -O "$t"; done

one() {
    local t=$1 log
    log=logs/$(date -u +%Y%m%dT%H%M%S)-$t.log
    mkdir -p "corpus/$t" "artifacts/$t"
    local before
    before=$(ls "artifacts/$t" | wc -l)
    set +e
    RUSTC_BOOTSTRAP=1 cargo fuzz run --sanitizer none -O "$t" "corpus/$t" -- \
        -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2048 -timeout=10 \
        -max_len=1048576 >"$log" 2>&1
    set -e
    local execs rate corpus after crashes art
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    corpus=$(ls "corpus/$t" | wc -l)
    after=$(ls "artifacts/$t" | wc -l)
    crashes=$((after - before))
    art=$(ls -t "artifacts/$t" | head -1)
    [ "$crashes" -gt 0 ] || art=-
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$secs" "${execs:-?}" \
        "${rate:-?}" "$corpus" "$crashes" "$art" | tee -a results.tsv
}

running=0
for t in "${targets[@]}"; do
    one "$t" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
done
wait
