#!/usr/bin/env bash
# The HTML report at scale: is the page still usable at 10,000 files with
# device code? Builds a tree of 100 store paths, each of 100 hard links to
# real CUDA libraries of the test corpus (cuRAND 10.3 and 10.4, CuPy's
# _generator_api), audits it once as JSON and once as HTML, and times
# headless Chromium on the page: to a first screenshot (what a person sees)
# and to a loaded DOM after the page's script ran (--dump-dom).
#
#   benches/html-scale.sh [PATHS]   PATHS store paths (default 100) of 100 files each
#   BIN_DIR=DIR benches/html-scale.sh   these binaries (default target/release)
#
# Prints one Markdown table (the numbers in BENCHMARKS.md's HTML section) and
# the machine's load before and after. The tree lives in .cache/bench/html-scale.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
paths=${1:-100}
bin=$(cd "${BIN_DIR:-target/release}" && pwd)
cei=$bin/cuda-elf-inspect
[[ -x $cei ]] || { echo "html-scale.sh: $cei not found (cargo build --release, or BIN_DIR=)" >&2; exit 2; }
command -v chromium >/dev/null || { echo "html-scale.sh: chromium not found (make tools installs it)" >&2; exit 2; }

mapfile -t corpus < <(bash tests/tools/corpus.sh)
libs=()
for f in "${corpus[@]}"; do
  case $f in
    */nvidia-curand-10.4.5.25/*/libcurand.so.10 | */nvidia-curand-cu12-10.3.10.19/nvidia/*/libcurand.so.10 | */cupy/random/_generator_api*.so) libs+=("$f") ;;
  esac
done
((${#libs[@]} == 3)) || { echo "html-scale.sh: expected 3 libraries in the corpus, found ${#libs[@]}" >&2; exit 2; }

work=$root/.cache/bench/html-scale
rm -rf "$work"
mkdir -p "$work/store"
alphabet=0123456789abcdfghijklmnpqrsvwxyz
for ((p = 0; p < paths; p++)); do
  hash=$(printf '%032d' "$p" | tr 0-9 "${alphabet:10:10}")
  dir=$work/store/$hash-pkg-$p/lib
  mkdir -p "$dir"
  for ((i = 0; i < 100; i++)); do
    ln "${libs[i % 3]}" "$dir/lib$i.so"
  done
done

ms() { echo $((($2 - $1) / 1000000)); }
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "load before: $(load)"
args=(--cuda-capabilities "8.0 9.0" "$work/store")
t0=$(date +%s%N)
"$cei" --format json "${args[@]}" >"$work/report.json" || [[ $? == 1 ]]
t1=$(date +%s%N)
"$cei" --format html "${args[@]}" >"$work/report.html" || [[ $? == 1 ]]
t2=$(date +%s%N)
chrome=(chromium --headless --no-sandbox --disable-gpu --no-first-run --hide-scrollbars
  --user-data-dir="$work/profile" --window-size=1400,2000)
"${chrome[@]}" --screenshot="$work/shot.png" "file://$work/report.html" >/dev/null 2>&1
t3=$(date +%s%N)
"${chrome[@]}" --dump-dom "file://$work/report.html" >"$work/dom.html" 2>/dev/null
t4=$(date +%s%N)
echo "load after: $(load)"

files=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["files"]))' "$work/report.json")
rows=$(grep -o '<tr data-path=' "$work/dom.html" | wc -l)
size() { du -b "$1" | awk '{printf "%.1f MB", $1 / 1e6}'; }
echo
echo "| files | JSON report | HTML report | audit to JSON | audit to HTML | Chromium to a first screenshot | Chromium to a loaded DOM | matrix rows in the DOM |"
echo "|---|---|---|---|---|---|---|---|"
echo "| $files | $(size "$work/report.json") | $(size "$work/report.html") | $(ms "$t0" "$t1") ms | $(ms "$t1" "$t2") ms | $(ms "$t2" "$t3") ms | $(ms "$t3" "$t4") ms | $rows |"
