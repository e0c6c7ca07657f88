#!/usr/bin/env bash
# Makes the picture of the HTML report in docs/ (docs/html-report.png):
# the audit's page of the real-library test corpus (tests/tools/corpus.sh),
# run from .cache/corpus so the page shows relative paths, for capabilities
# 8.0 and 9.0, screenshotted by headless Chromium (`make tools` installs it).
#
#   tests/tools/report-screenshot.sh OUT.png [WIDTH HEIGHT]
#
# Uses target/release/cuda-elf-inspect (cargo build --release first).
set -euo pipefail
out=$(realpath -m "${1:?usage: report-screenshot.sh OUT.png [WIDTH HEIGHT]}")
width=${2:-1400}
height=${3:-1000}
root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$root/target/release/cuda-elf-inspect
[[ -x $bin ]] || { echo "report-screenshot.sh: build first (cargo build --release)" >&2; exit 2; }
command -v chromium >/dev/null || { echo "report-screenshot.sh: chromium not found (make tools)" >&2; exit 2; }
mapfile -t files < <(bash "$root/tests/tools/corpus.sh")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$root/.cache/corpus"
rel=()
for f in "${files[@]}"; do rel+=("${f#"$PWD"/}"); done
# Exit status 1 (error findings) is a report like any other.
status=0
"$bin" --format html --cuda-capabilities "8.0;9.0" "${rel[@]}" >"$tmp/report.html" || status=$?
[[ $status -le 1 ]] || { echo "report-screenshot.sh: the audit failed ($status)" >&2; exit 1; }
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
  --disable-background-networking --disable-component-update \
  --user-data-dir="$tmp/profile" --window-size="$width,$height" \
  --screenshot="$out" "file://$tmp/report.html" 2>/dev/null
[[ -s $out ]] || { echo "report-screenshot.sh: chromium wrote no screenshot" >&2; exit 1; }
echo "$out"
