#!/usr/bin/env bash
# Benchmark: auto-add-driver-runpath against the upstream method (per file:
# `patchelf --print-rpath`, then `patchelf --set-rpath <driver>:<old>`), on
#   1. N small ELF files (default 1000; BENCH_SMALL=N), and
#   2. one 750 MB CUDA library (libcublasLt.so.12 from the PyPI wheel
#      nvidia-cublas-cu12==12.9.3.13), when BENCH_BIG=1 (downloads 581 MB once
#      into .cache/, git-ignored).
# Prints wall time, peak RSS and the ratio. Needs `make static tools` first
# (or a release build: the binary is taken from target/ if present).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
patchelf=$root/.tools/patchelf
bin=$root/target/x86_64-unknown-linux-gnu/release/auto-add-driver-runpath
[ -x "$bin" ] || bin=$root/target/release/auto-add-driver-runpath
for t in "$patchelf" "$bin" /usr/bin/time gcc; do
  command -v "$t" >/dev/null || { echo "missing $t (run make static tools)" >&2; exit 2; }
done
driver=/run/opengl-driver/lib
work=$(mktemp -d "${TMPDIR:-/tmp}/runpath-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

upstream() { # the per-file method of addDriverRunpath
  local f old
  for f in "$@"; do
    old=$("$patchelf" --print-rpath "$f")
    "$patchelf" --set-rpath "$driver:$old" "$f"
  done
}
export -f upstream
export patchelf driver

seconds() { # run a command, print "wall_seconds max_rss_kb"
  /usr/bin/time -f '%e %M' -o "$work/time" "$@" >/dev/null 2>&1
  cat "$work/time"
}

# /usr/bin/time has 10 ms resolution: a 0.00 s run counts as 0.01 s ("at least").
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { p = ""; if (b <= 0) { b = 0.01; p = ">=" } printf "%s%.0f", p, a / b }'; }

n=${BENCH_SMALL:-1000}
printf '#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n' >"$work/p.c"
gcc -o "$work/p" "$work/p.c" -Wl,-rpath,'$ORIGIN/../lib'
for set in ours theirs; do
  mkdir -p "$work/$set"
  for i in $(seq 1 "$n"); do cp "$work/p" "$work/$set/p$i"; done
done
sync
read -r t_theirs m_theirs < <(seconds bash -c 'upstream "$0"/*' "$work/theirs")
read -r t_ours m_ours < <(seconds "$bin" ${BENCH_FLAGS:-} "$work/ours")
cmp <("$patchelf" --print-rpath "$work/ours/p1") <("$patchelf" --print-rpath "$work/theirs/p1")
echo "small files ($n): upstream ${t_theirs}s, ours ${t_ours}s: $(ratio "$t_theirs" "$t_ours")x faster"

if [ "${BENCH_BIG:-0}" = 1 ]; then
  big=$root/.cache/big/libcublasLt.so.12
  if [ ! -f "$big" ]; then
    mkdir -p "$root/.cache/wheels" "$root/.cache/big"
    python3 -m pip download -q --no-deps --only-binary :all: -d "$root/.cache/wheels" \
      nvidia-cublas-cu12==12.9.3.13
    unzip -o -j -q "$root"/.cache/wheels/nvidia_cublas_cu12-12.9.3.13-*.whl \
      nvidia/cublas/lib/libcublasLt.so.12 -d "$root/.cache/big"
  fi
  mkdir -p "$work/big-ours" "$work/big-theirs"
  cp "$big" "$work/big-ours/" && cp "$big" "$work/big-theirs/" && sync
  read -r t_theirs m_theirs < <(seconds bash -c 'upstream "$0"' "$work/big-theirs/libcublasLt.so.12")
  sync
  read -r t_ours m_ours < <(seconds "$bin" ${BENCH_FLAGS:-} "$work/big-ours")
  cmp <("$patchelf" --print-rpath "$work/big-ours/libcublasLt.so.12") \
      <("$patchelf" --print-rpath "$work/big-theirs/libcublasLt.so.12")
  echo "libcublasLt.so.12 ($(du -m "$big" | cut -f1) MB): upstream ${t_theirs}s peak ${m_theirs} KB," \
       "ours ${t_ours}s peak ${m_ours} KB: $(ratio "$t_theirs" "$t_ours")x faster"
fi
