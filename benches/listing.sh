#!/usr/bin/env bash
# Side-by-side benchmark of cuda-elf-inspect and cuobjdump 13.5 on the real
# corpus (tests/tools/corpus.sh --bench: cuBLAS 12.9's libcublasLt, 749 MB),
# as recorded in BENCHMARKS.md. Checks the listings are identical first.
# Needs `make tools`; uses hyperfine when installed, else /usr/bin/time.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --bin cuda-elf-inspect >/dev/null
ours=target/release/cuda-elf-inspect
theirs=.tools/cuda/bin/cuobjdump
bash tests/tools/corpus.sh --bench >/dev/null
lt=$(find .cache/corpus/lib/nvidia-cublas-cu12-12.9.3.13 -name 'libcublasLt.so.12' | head -n 1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "## --list-elf on $(basename "$lt") ($(du -m "$lt" | cut -f1) MB)"
"$theirs" --list-elf "$lt" >"$tmp/theirs"
"$ours" --list-elf "$lt" >"$tmp/ours"
cmp "$tmp/theirs" "$tmp/ours"
echo "identical output: $(wc -l <"$tmp/ours") lines"
for tool in "$theirs" "$ours"; do
  /usr/bin/time -f "$(basename "$tool"): %e s, %M KB max resident" "$tool" --list-elf "$lt" >/dev/null
done
if command -v hyperfine >/dev/null; then
  hyperfine -N --warmup 1 --runs 5 "$theirs --list-elf $lt" "$ours --list-elf $lt"
fi

echo "## whole corpus folder"
corpus=.cache/corpus/lib
n=$(find "$corpus" -type f -name '*.so*' | wc -l)
start=$(date +%s.%N)
# (not xargs: it stops at cuobjdump's exit status 255)
while IFS= read -r -d '' f; do
  "$theirs" --list-elf "$f" >/dev/null 2>&1 || true
done < <(find "$corpus" -type f -name '*.so*' -print0)
mid=$(date +%s.%N)
"$ours" --headers-only "$corpus" >/dev/null
end=$(date +%s.%N)
echo "$n files: cuobjdump one by one $(echo "$mid - $start" | bc) s; cuda-elf-inspect --headers-only folder walk $(echo "$end - $mid" | bc) s"
/usr/bin/time -f "cuda-elf-inspect (deep summary of the folder): %e s, %M KB max resident" "$ours" "$corpus" >/dev/null
