#!/usr/bin/env bash
# Puts each of our binaries beside its anchor on the same input, alternating
# runs (A B A B ...) after a warm-up, and prints one Markdown table: median and
# min-max wall time, peak resident memory, and the ratio anchor/ours.
#
#   benches/compare.sh                 full run (the numbers in BENCHMARKS.md)
#   benches/compare.sh --quick         small inputs, few rounds: CI's smoke test
#   PREVIOUS=DIR benches/compare.sh    also the audit against an earlier build's binaries
#   benches/compare.sh --only LIST     only these sections (comma-separated):
#                                      symlinks, runpath, onepass, cross, listing, audit, reading, references, why, scaling, cache, torch, coverage, preflight
#   READING_DIRS="DIR..." benches/compare.sh --only reading
#                                      the reading rows on these folders too (e.g. the NVIDIA
#                                      wheels of CUDA 11.8-13 unpacked, docs/reading-survey.md)
#   TORCH_TREE=DIR benches/compare.sh  also the PyTorch 2.11 + NVIDIA wheels tree (benches/survey.sh's
#                                      torch-2.11 store path) against PREVIOUS, all threads and one
#   TORCH_WHEEL=FILE                   (with PREVIOUS) also the torch wheel's files that are no library
#   BIN_DIR=DIR benches/compare.sh     these binaries (e.g. target/release) instead of
#                                      `make static`'s (which builds first); the table says so
#
# Inputs are generated or downloaded (pinned) into .cache/bench (ignored by
# git); the test corpus comes from tests/tools/corpus.sh (.cache/corpus). The
# full run also needs libcublasLt.so.12 from nvidia-cublas-cu12==12.9.3.13
# (581 MB wheel, downloaded once); --quick does not.
#
# Timings are for people, read as ratios: the machines here are small and
# shared. The script must not fail on a slow or odd machine: a run that fails
# is still timed, and the checks of equal output are reported, not enforced.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
quick=false
only=symlinks,runpath,onepass,cross,listing,audit,reading,references,why,scaling,cache,torch,coverage,preflight
while (($#)); do
  case $1 in
    --quick) quick=true ;;
    --only) only=$2; shift ;;
    *) echo "usage: $0 [--quick] [--only symlinks,runpath,onepass,cross,listing,audit,reading,references,why,scaling,cache,torch,coverage,preflight]" >&2; exit 2 ;;
  esac
  shift
done
want() { [[ ,$only, == *,$1,* ]]; }

host=$(rustc -vV | sed -n 's/^host: //p')
if [[ -n ${BIN_DIR:-} ]]; then
  bin=$(cd "$BIN_DIR" && pwd)
else
  make -s static >/dev/null
  bin=$root/target/$host/release
fi
cache=$root/.cache/bench
mkdir -p "$cache"
patchelf=$root/.tools/patchelf
cuobjdump=$root/.tools/cuda/bin/cuobjdump
pip=(python3 -m pip)
[[ -x $root/.tools/venv/bin/pip ]] && pip=("$root/.tools/venv/bin/pip")
notes=()
note() { notes+=("$*"); echo "compare.sh: $*" >&2; }

# measure LABEL CMD... : one run; appends "microseconds maxrss_kb" to $cache/LABEL.times
measure() {
  local label=$1
  shift
  local t0 t1 rss
  t0=$(date +%s%N)
  # Some inputs hold broken links or damage on purpose: a non-zero exit is expected.
  /usr/bin/time -f '%M' -o "$cache/rss" "$@" >/dev/null 2>&1 || true
  rss=$(tail -n 1 "$cache/rss")
  t1=$(date +%s%N)
  echo "$(((t1 - t0) / 1000)) $rss" >>"$cache/$label.times"
}

# stats LABEL -> "median min max rss" (seconds, MB)
stats() {
  sort -n "$cache/$1.times" | awk '
    { t[NR] = $1 / 1e6; if ($2 > rss) rss = $2 }
    END {
      m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
      printf "%.4f %.4f %.4f %.1f\n", m, t[1], t[NR], rss / 1024
    }'
}

fmt_time() { awk -v s="$1" 'BEGIN { if (s < 1) printf "%.1f ms", s * 1000; else printf "%.2f s", s }'; }

# Dropping the page cache needs root and a writable /proc/sys (not in every
# container); without it the "cold" rows are not measured, and the table says so.
can_drop=false
if ! $quick && [[ -w /proc/sys/vm/drop_caches ]] && (echo 3 >/proc/sys/vm/drop_caches) 2>/dev/null; then
  can_drop=true
fi
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

rows=()
# [SETUP=fn] [WARMUP=false] compare WORKLOAD SIZE ROUNDS_ANCHOR ROUNDS_OURS ANCHOR_NAME -- OURS... -- ANCHOR...
# SETUP, when set, is called untimed before every run (the warm-up too) with
# "ours" or "anchor": fresh copies of inputs a run destroys, or a cache drop.
compare() {
  local workload=$1 size=$2 ra=$3 ro=$4 anchor_name=$5
  shift 5
  local ours=() anchor=()
  [[ $1 == -- ]] && shift
  while [[ $1 != -- ]]; do ours+=("$1"); shift; done
  shift
  anchor=("$@")
  local setup=${SETUP:-true} warmup=${WARMUP:-true}
  local la=a-$RANDOM lo=o-$RANDOM
  : >"$cache/$la.times"
  : >"$cache/$lo.times"
  echo "compare.sh: $workload, $size: ours ($ro runs) vs $anchor_name ($ra runs)" >&2
  if $warmup; then # page cache, dentries, the binaries themselves
    "$setup" ours
    "${ours[@]}" >/dev/null 2>&1 || true
  fi
  local i
  for ((i = 0; i < (ra > ro ? ra : ro); i++)); do
    if ((i < ro)); then "$setup" ours; measure "$lo" "${ours[@]}"; fi
    if ((i < ra)); then "$setup" anchor; measure "$la" "${anchor[@]}"; fi
  done
  read -r om omin omax orss < <(stats "$lo")
  read -r am amin amax arss < <(stats "$la")
  local ratio
  ratio=$(awk -v a="$am" -v o="$om" 'BEGIN { r = a / o; printf (r >= 10 ? "%.0fx" : "%.2fx"), r }')
  rows+=("| $workload | $size | $(fmt_time "$om") ($(fmt_time "$omin")-$(fmt_time "$omax")) | $orss MB | $anchor_name | $(fmt_time "$am") ($(fmt_time "$amin")-$(fmt_time "$amax")) | $arss MB | $ratio | $ro/$ra |")
  rm -f "$cache/$la.times" "$cache/$lo.times"
}

# corpus SET...: the library files of these corpus sets (tests/tools/corpus.sh,
# the one downloader: pinned wheels, locked, verified, unpacked once).
corpus() { PIP=${pip[*]} bash tests/tools/corpus.sh "$@"; }

mb() { # total size in MB (10^6 bytes), links followed
  find -L "$@" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%d MB", s / 1e6 }'
}

# ---- noBrokenSymlinks -------------------------------------------------------
# A store with one output of N links in nested folders: 1/10 dangling, the rest
# valid, relative and absolute, so every link takes the full decision path.
make_links_tree() {
  local n=$1 dir=$cache/links-$1
  if [[ ! -f $dir/.done ]]; then
    rm -rf "$dir"
    mkdir -p "$dir/store/out"
    python3 - "$dir/store/out" "$n" <<'PY'
import os, sys
out, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(out, f"a{i % 50}", f"b{i % 7}")
    os.makedirs(d, exist_ok=True)
    f = os.path.join(d, f"f{i}")
    if i % 10 == 0:
        os.symlink(f"missing{i}", os.path.join(d, f"l{i}"))
        continue
    open(f, "w").close()
    os.symlink(f"f{i}" if i % 2 else f, os.path.join(d, f"l{i}"))
PY
    touch "$dir/.done"
  fi
  echo "$dir"
}

nbs_env() { # the environment of a build for tree $1
  echo "NIX_STORE=$1/store TMPDIR=$1/build NIX_LOG_FD=2 NIX_DEBUG=0 outputs=out out=$1/store/out"
}

bench_symlinks() {
  local n=$1 upstream_rounds=$2 rounds=$3 dir
  dir=$(make_links_tree "$n")
  local envs
  read -ra envs < <(nbs_env "$dir")
  if ((upstream_rounds > 0)); then
    # Both hooks inside Nixpkgs' real setup.sh (tests/upstream/real-setup.bash):
    # Nixpkgs' own no-broken-symlinks.sh against ours calling the binary.
    local nixpkgs ours_hook=$cache/no-broken-symlinks-hook.sh
    nixpkgs=$(tests/tools/nixpkgs-upstream.sh) || exit 2
    sed "s|@noBrokenSymlinks@|$bin/no-broken-symlinks|g" hooks/no-broken-symlinks.sh >"$ours_hook"
    compare "noBrokenSymlinks" "$n links" "$upstream_rounds" "$rounds" "upstream hook, real setup.sh" \
      -- env "${envs[@]}" NCH_NIXPKGS="$nixpkgs" bash tests/upstream/real-setup.bash "$ours_hook" \
      -- env "${envs[@]}" NCH_NIXPKGS="$nixpkgs" bash tests/upstream/real-setup.bash \
      "$nixpkgs/pkgs/build-support/setup-hooks/no-broken-symlinks.sh"
  fi
  compare "noBrokenSymlinks" "$n links" "$rounds" "$rounds" "find -xtype l" \
    -- env "${envs[@]}" "$bin/no-broken-symlinks" \
    -- find "$dir/store/out" -xtype l
}

if want symlinks; then
  if $quick; then
    bench_symlinks 1000 1 3
  else
    bench_symlinks 1000 3 9
    bench_symlinks 20000 1 9
    bench_symlinks 200000 0 5
  fi
fi

# ---- autoAddDriverRunpath -----------------------------------------------------
# Anchor: the upstream method per file, `patchelf --print-rpath` then
# `patchelf --set-rpath /run/opengl-driver/lib:<old>` (patchelf 0.19 from
# .tools). Patching is destructive, so every run (warm-up included) starts from
# fresh copies, made untimed and synced to disk before the clock starts.
upstream_runpath='for f in "$1"/*; do old=$("$0" --print-rpath "$f"); "$0" --set-rpath "/run/opengl-driver/lib${old:+:$old}" "$f"; done'

make_small_elfs() {
  local n=$1 dir=$cache/elf-$1
  # (the last file too: a cache emptied by hand or by a crash is rebuilt)
  if [[ ! -f $dir/.done || ! -f $dir/p$((n - 1)) ]]; then
    rm -rf "$dir" "$cache/p" "$cache/p.c"
    mkdir -p "$dir"
    if command -v cc >/dev/null; then
      printf '#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n' >"$cache/p.c"
      cc -O2 -o "$cache/p" "$cache/p.c" -Wl,-rpath,'$ORIGIN/../lib' || return 1
    else
      cp /bin/true "$cache/p" || return 1
    fi
    for ((i = 0; i < n; i++)); do cp "$cache/p" "$dir/p$i" || return 1; done
    touch "$dir/.done"
  fi
  echo "$dir"
}

runpath_src=
fresh_copies() { # fresh copies of $runpath_src into work/ours or work/anchor
  rm -rf "$cache/work/$1"
  mkdir -p "$cache/work/$1"
  cp -rL "$runpath_src"/. "$cache/work/$1/"
  rm -f "$cache/work/$1/.done"
  sync
}

check_runpath() { # same RUNPATH from ours and from patchelf on one file?
  local f=$1 a b
  a=$("$patchelf" --print-rpath "$cache/work/ours/$f" 2>&1 || true)
  b=$("$patchelf" --print-rpath "$cache/work/anchor/$f" 2>&1 || true)
  if [[ $a == "$b" && $a == /run/opengl-driver/lib* ]]; then
    note "runpath check ($2): ours and patchelf both wrote RUNPATH '$a'"
  else
    note "runpath check ($2): DIFFERENT: ours '$a', patchelf '$b'"
  fi
}

bench_runpath() { # SRC_DIR SIZE_LABEL ROUNDS
  runpath_src=$1
  local size=$2 rounds=$3 first mode flags
  first=$(find -L "$runpath_src" -maxdepth 1 -type f ! -name .done -printf '%f\n' | sort | head -n 1)
  for mode in default --in-place; do
    flags=()
    [[ $mode == --in-place ]] && flags=(--in-place)
    SETUP=fresh_copies compare "autoAddDriverRunpath ($mode)" "$size" "$rounds" "$rounds" \
      "patchelf --print-rpath + --set-rpath" \
      -- "$bin/auto-add-driver-runpath" "${flags[@]}" "$cache/work/ours" \
      -- bash -c "$upstream_runpath" "$patchelf" "$cache/work/anchor"
    check_runpath "$first" "$size, $mode"
  done
  rm -rf "$cache/work"
}

cublas_dir=$root/.cache/corpus/lib/nvidia-cublas-cu12-12.9.3.13/nvidia/cublas/lib
need_cublas() {
  corpus cublaslt >/dev/null ||
    { note "libcublasLt.so.12 unavailable (download failed): its rows are missing"; return 1; }
}

# The test corpus (cuRAND x2, cuFFT, CuPy; 835 MB unpacked) and
# libcublasLt.so.12. --quick uses cuRAND 10.3 alone (68 MB wheel, 160 MB unpacked).
corpus_dirs=()
need_corpus() {
  ((${#corpus_dirs[@]})) && return 0
  if $quick; then
    corpus curand12 >/dev/null ||
      { note "corpus unavailable (download failed): listing, audit and scaling rows are missing"; return 1; }
    corpus_dirs=("$root/.cache/corpus/lib/nvidia-curand-cu12-10.3.10.19")
  else
    corpus >/dev/null ||
      { note "corpus unavailable (tests/tools/corpus.sh failed): listing, audit and scaling rows are missing"; return 1; }
    need_cublas || return 1
    corpus_dirs=("$root/.cache/corpus/lib")
  fi
}
corpus_files() { find -L "${corpus_dirs[@]}" -type f -name '*.so*' | sort; }

if want runpath; then
  if $quick; then
    if src=$(make_small_elfs 100); then bench_runpath "$src" "100 small ELF files" 3; else note "small ELF files could not be built: their rows are missing"; fi
  else
    if src=$(make_small_elfs 1000); then bench_runpath "$src" "1,000 small ELF files" 5; else note "small ELF files could not be built: their rows are missing"; fi
    need_cublas && bench_runpath "$cublas_dir" "libcublasLt.so.12, $(mb "$cublas_dir")" 3
  fi
fi

# ---- one RUNPATH pass -------------------------------------------------------------
# 1. Nixpkgs' whole chain inside its real setup.sh (tests/upstream/real-setup.bash):
#    auto-fix-elf-files.sh, addDriverRunpath, autoAddDriverRunpath,
#    autoAddCudaCompatRunpath and removeStubsFromRunpathHook (with
#    getRunpathEntries and isDeclaredArray), their placeholders substituted as
#    makeSetupHook would, patchelf 0.19 first in initialPath, the stubs hook's prePhase
#    then `runHook postFixup`; against our one run with the same fixes
#    (default mode) on the same 100 small ELF files, each linked with a
#    `-cuda...-stubs/lib` entry and $ORIGIN.
# 2. Our default mode against `patchelf --add-rpath` per file on 100 small
#    ELF files.
# 3. Our default mode on libcublasLt.so.12 against `cp --reflink=auto` of it,
#    and against that copy renamed over the original.
onepass_compat=/nix/store/00000000000000000000000000000000-cuda_compat/compat
make_stub_elfs() {
  local n=$1 dir=$cache/stub-elf-$1
  if [[ ! -f $dir/.done || ! -f $dir/p$((n - 1)) ]]; then
    rm -rf "$dir" && mkdir -p "$dir" || return 1
    printf '#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n' >"$cache/sp.c"
    cc -O2 -o "$cache/sp" "$cache/sp.c" \
      -Wl,--enable-new-dtags,-rpath,'/nix/store/00000000000000000000000000000000-cuda12.8-cuda_cudart-12.8-stubs/lib:$ORIGIN/../lib' || return 1
    for ((i = 0; i < n; i++)); do cp "$cache/sp" "$dir/p$i" || return 1; done
    touch "$dir/.done"
  fi
  echo "$dir"
}
upstream_chain_hooks() { # the substituted hook files, in the order buildRedist lists them
  local nixpkgs=$1 d=$cache/upstream-hooks
  mkdir -p "$d/bin"
  ln -sf "$patchelf" "$d/bin/patchelf"
  local p=$nixpkgs/pkgs
  cp "$p/build-support/setup-hooks/arrayUtilities/isDeclaredArray/isDeclaredArray.bash" "$d/1-isDeclaredArray.sh"
  cp "$p/build-support/setup-hooks/arrayUtilities/getRunpathEntries/getRunpathEntries.bash" "$d/2-getRunpathEntries.sh"
  cp "$p/by-name/au/autoFixElfFiles/auto-fix-elf-files.sh" "$d/3-auto-fix-elf-files.sh"
  sed 's|@driverLink@|/run/opengl-driver|g' "$p/by-name/ad/addDriverRunpath/setup-hook.sh" >"$d/4-add-driver-runpath.sh"
  cp "$p/by-name/au/autoAddDriverRunpath/auto-add-driver-runpath-hook.sh" "$d/5-auto-add-driver-runpath.sh"
  sed "s|@libcudaPath@|$onepass_compat|g" \
    "$p/development/cuda-modules/packages/autoAddCudaCompatRunpath/auto-add-cuda-compat-runpath.sh" >"$d/6-compat.sh"
  sed 's|@driverLinkLib@|/run/opengl-driver/lib|g' \
    "$p/development/cuda-modules/packages/removeStubsFromRunpathHook/removeStubsFromRunpathHook.bash" >"$d/7-stubs.sh"
  echo "$d"
}
if want onepass; then
  if src=$(make_stub_elfs 100) && nixpkgs=$(bash tests/tools/nixpkgs-upstream.sh) && hd=$(upstream_chain_hooks "$nixpkgs"); then
    runpath_src=$src
    # setup.sh builds PATH from initialPath: the folder holding bin/patchelf first.
    # NIX_BUILD_TOP: where setup.sh dumps env-vars (not the checkout).
    chain_env=(outputs=out out="$cache/work/anchor" NIX_STORE=/nix/store NCH_NIXPKGS="$nixpkgs" NIX_BUILD_TOP="$cache/work"
      NCH_PRE="initialPath=\"$hd /usr /\"" NCH_RUN='for p in $prePhases; do $p; done; runHook postFixup')
    SETUP=fresh_copies compare "one RUNPATH pass: driver + cuda_compat + stubs (default mode)" \
      "100 small ELF files" 3 3 "Nixpkgs' chain in setup.sh (patchelf 0.19)" \
      -- "$bin/auto-add-driver-runpath" --remove-stubs --cuda-compat "$onepass_compat" "$cache/work/ours" \
      -- env "${chain_env[@]}" bash tests/upstream/real-setup.bash "$hd"/[1-7]-*.sh
    a=$("$patchelf" --print-rpath "$cache/work/ours/p0" 2>&1 || true)
    b=$("$patchelf" --print-rpath "$cache/work/anchor/p0" 2>&1 || true)
    if [[ $a == "$b" && $a == "$onepass_compat:/run/opengl-driver/lib:"* ]]; then
      note "one pass check: ours and Nixpkgs' chain both wrote RUNPATH '$a'"
    else
      note "one pass check: DIFFERENT: ours '$a', Nixpkgs' chain '$b'"
    fi
    rm -rf "$cache/work"
  else
    note "the one-pass chain row is missing (ELF files or Nixpkgs files unavailable)"
  fi
  # The file-system floor of any atomic replacement (benches/floor/replace.c:
  # read, write a new file beside the old, rename; no ELF work, no checks, no
  # journal): how close the bounds can be got on this machine's file system.
  floor=
  if command -v cc >/dev/null && cc -O2 -pthread -o "$cache/replace-floor" "$root/benches/floor/replace.c"; then
    floor=$cache/replace-floor
  else
    note "benches/floor/replace.c could not be built: the floor rows are missing"
  fi
  if src=$(make_small_elfs 100); then
    runpath_src=$src
    SETUP=fresh_copies compare "autoAddDriverRunpath (default mode)" "100 small ELF files" 5 5 \
      "patchelf --add-rpath per file" \
      -- "$bin/auto-add-driver-runpath" "$cache/work/ours" \
      -- bash -c 'for f in "$1"/*; do "$0" --add-rpath /run/opengl-driver/lib "$f"; done' "$patchelf" "$cache/work/anchor"
    if [[ -n $floor ]]; then
      SETUP=fresh_copies compare "the floor of a replacement (benches/floor/replace.c, 2 threads)" "100 small ELF files" 5 5 \
        "patchelf --add-rpath per file" \
        -- "$floor" small "$cache/work/ours" 2 \
        -- bash -c 'for f in "$1"/*; do "$0" --add-rpath /run/opengl-driver/lib "$f"; done' "$patchelf" "$cache/work/anchor"
      SETUP=fresh_copies compare "autoAddDriverRunpath (default mode) vs the floor" "100 small ELF files" 5 5 \
        "the floor (benches/floor/replace.c, 2 threads)" \
        -- "$bin/auto-add-driver-runpath" "$cache/work/ours" \
        -- "$floor" small "$cache/work/anchor" 2
    fi
    rm -rf "$cache/work"
  fi
  if ! $quick && need_cublas; then
    lt=$(find -L "$cublas_dir" -maxdepth 1 -name 'libcublasLt.so.12' | head -n 1)
    onepass_lt() { rm -rf "$cache/work/$1" && mkdir -p "$cache/work/$1" && cp -L "$lt" "$cache/work/$1/" && sync; }
    SETUP=onepass_lt compare "autoAddDriverRunpath (default mode), one file" "libcublasLt.so.12, $(mb "$lt")" 5 5 \
      "cp --reflink=auto of it" \
      -- "$bin/auto-add-driver-runpath" "$cache/work/ours" \
      -- cp --reflink=auto "$cache/work/anchor/libcublasLt.so.12" "$cache/work/anchor/copy"
    # The same copy renamed over the original, as any replacement must: on
    # ext4 the rename frees the old file's blocks and (auto_da_alloc) starts
    # writing the new one back.
    SETUP=onepass_lt compare "autoAddDriverRunpath (default mode), one file" "libcublasLt.so.12, $(mb "$lt")" 5 5 \
      "cp --reflink=auto, then mv over the original" \
      -- "$bin/auto-add-driver-runpath" "$cache/work/ours" \
      -- sh -c 'cp --reflink=auto "$1" "$1.new" && mv "$1.new" "$1"' sh "$cache/work/anchor/libcublasLt.so.12"
    if [[ -n $floor ]]; then
      # The floor: the kernel's copy, the exchange and the old file's unlink,
      # nothing else (what this mode does for 16 MiB and up, less the ELF work).
      SETUP=onepass_lt compare "the floor of a replacement (benches/floor/replace.c), one file" "libcublasLt.so.12, $(mb "$lt")" 5 5 \
        "cp --reflink=auto of it" \
        -- "$floor" large "$cache/work/ours/libcublasLt.so.12" \
        -- cp --reflink=auto "$cache/work/anchor/libcublasLt.so.12" "$cache/work/anchor/copy"
      SETUP=onepass_lt compare "autoAddDriverRunpath (default mode) vs the floor, one file" "libcublasLt.so.12, $(mb "$lt")" 5 5 \
        "the floor (benches/floor/replace.c)" \
        -- "$bin/auto-add-driver-runpath" "$cache/work/ours" \
        -- "$floor" large "$cache/work/anchor/libcublasLt.so.12"
    fi
    rm -rf "$cache/work"
  fi
fi

# ---- autoAddDriverRunpath in a cross build ------------------------------------------
# A cross build's hook runs on x86_64 over aarch64 outputs: the aarch64 (SBSA)
# wheels of cuRAND and CUPTI (6 libraries), and cuRAND alone for aarch64 and
# for x86_64 side by side, so that the ratio of a foreign file can be read
# against the native one. The anchor is the same patchelf method.
flat_dir() { # NAME FILES...: a folder of links to FILES (fresh_copies follows them)
  local dir=$cache/$1 f
  shift
  rm -rf "$dir"
  mkdir -p "$dir"
  for f in "$@"; do ln -s "$f" "$dir/${f##*/}"; done
  echo "$dir"
}
if want cross && ! $quick; then
  if aarch64=$(corpus curand12-aarch64 cupti12-aarch64) && native=$(corpus curand12); then
    src=$(flat_dir cross-aarch64-wheels $aarch64)
    bench_runpath "$src" "aarch64 wheels: cuRAND + CUPTI, 6 files, $(mb "$src")" 3
    src=$(flat_dir cross-aarch64-curand $(grep /libcurand <<<"$aarch64"))
    bench_runpath "$src" "aarch64 libcurand.so.10, $(mb "$src")" 3
    src=$(flat_dir cross-x86_64-curand $native)
    bench_runpath "$src" "x86_64 libcurand.so.10, $(mb "$src")" 3
  else
    note "aarch64 wheels unavailable (tests/tools/corpus.sh failed): the cross rows are missing"
  fi
fi

# ---- listing ----------------------------------------------------------------------
# cuda-elf-inspect --list-elf / --list-ptx against cuobjdump 13.5 on the same
# file; on a folder, cuobjdump runs once per file (it takes one) and ours once
# with all the files. The outputs are compared first and the result noted.
check_listing() { # FLAG LABEL FILES...
  local flag=$1 label=$2 f same=0 differ=0
  shift 2
  for f in "$@"; do
    # (messages start with the tool's name: "cuobjdump info    : File ... does not contain device code")
    if cmp -s <("$bin/cuda-elf-inspect" "$flag" "$f" 2>&1 | sed 's/^cuda-elf-inspect /cuobjdump /') \
      <("$cuobjdump" "$flag" "$f" 2>&1); then
      same=$((same + 1))
    else
      differ=$((differ + 1))
    fi
  done
  note "listing check ($label, $flag): output identical to cuobjdump's on $same of $# files$( ((differ)) && echo " ($differ differ)")"
}

bench_listing() { # LABEL ROUNDS FILES...
  local label=$1 rounds=$2 flag
  shift 2
  for flag in --list-elf --list-ptx; do
    check_listing "$flag" "$label" "$@"
    if (($# == 1)); then
      compare "listing $flag" "$label" "$rounds" "$rounds" "cuobjdump $flag" \
        -- "$bin/cuda-elf-inspect" "$flag" "$1" \
        -- "$cuobjdump" "$flag" "$1"
    else
      compare "listing $flag" "$label" "$rounds" "$rounds" "cuobjdump $flag, once per file" \
        -- "$bin/cuda-elf-inspect" "$flag" "$@" \
        -- bash -c 'for f in "$@"; do "$0" '"$flag"' "$f" || true; done' "$cuobjdump" "$@"
    fi
  done
}

if want listing && need_corpus; then
  mapfile -t files < <(corpus_files)
  if $quick; then
    bench_listing "$(basename "${files[0]}"), $(mb "${files[0]}")" 3 "${files[0]}"
  else
    bench_listing "libcublasLt.so.12, $(mb "$cublas_dir/libcublasLt.so.12")" 5 "$cublas_dir/libcublasLt.so.12"
    bench_listing "corpus: ${#files[@]} files, $(mb "${files[@]}")" 3 "${files[@]}"
  fi
fi

# ---- audit ---------------------------------------------------------------------------
# `cuda-elf-inspect FOLDERS` (the default audit: every payload decoded) and with
# requested capabilities, warm and cold-ish (page cache dropped before every
# run of either side). No tool does this audit; the anchor is what a shell
# audit would need at least: cuobjdump --list-elf and --list-ptx on every file.
anchor_audit='for f in "$@"; do "$0" --list-elf "$f" || true; "$0" --list-ptx "$f" || true; done'
cold() { drop_caches; }

if want audit && need_corpus; then
  mapfile -t files < <(corpus_files)
  size="corpus: ${#files[@]} files, $(mb "${files[@]}")"
  r=3
  $quick && r=2
  # Issue 5's second goal: the audit within 2x of just listing the same
  # files (our own -lelf -lptx, one process): a ratio of 0.50x or more.
  compare "audit (default) vs just listing, warm" "$size" "$((r * 3))" "$((r * 3))" "cuda-elf-inspect -lelf -lptx, same files" \
    -- "$bin/cuda-elf-inspect" "${corpus_dirs[@]}" \
    -- "$bin/cuda-elf-inspect" -lelf -lptx "${files[@]}"
  # Issue 23: the default reads the fatbins kept outside the fatbin sections
  # (cuFFT's 24,000, cuBLASLt's, cuRAND 13's); --no-scan only probes for
  # them, as the default did before. The ratio is the price of reading them.
  compare "audit (default) vs --no-scan, warm" "$size" "$((r * 3))" "$((r * 3))" "cuda-elf-inspect --no-scan, same files" \
    -- "$bin/cuda-elf-inspect" "${corpus_dirs[@]}" \
    -- "$bin/cuda-elf-inspect" --no-scan "${corpus_dirs[@]}"
  for caps in "" "8.0 9.0"; do
    args=()
    wl="audit (default)"
    if [[ -n $caps ]]; then
      args=(--cuda-capabilities "$caps")
      wl="audit --cuda-capabilities \"$caps\""
    fi
    compare "$wl, warm" "$size" "$r" "$r" "cuobjdump -lelf + -lptx per file" \
      -- "$bin/cuda-elf-inspect" "${args[@]}" "${corpus_dirs[@]}" \
      -- bash -c "$anchor_audit" "$cuobjdump" "${files[@]}"
    if $can_drop; then
      SETUP=cold WARMUP=false compare "$wl, cold" "$size" "$r" "$r" "cuobjdump -lelf + -lptx per file" \
        -- "$bin/cuda-elf-inspect" "${args[@]}" "${corpus_dirs[@]}" \
        -- bash -c "$anchor_audit" "$cuobjdump" "${files[@]}"
    fi
  done
  # A refactoring must not make the audit slower: with PREVIOUS=DIR (the
  # binaries of an earlier revision, e.g. built from its worktree), the same
  # audit by both builds, side by side.
  if [[ -n ${PREVIOUS:-} ]]; then
    compare "audit --cuda-capabilities \"8.0 9.0\" vs the previous build, warm" "$size" "$((r * 3))" "$((r * 3))" "previous build $(cut -c1-7 "$PREVIOUS/REV" 2>/dev/null || echo "$PREVIOUS")" \
      -- "$bin/cuda-elf-inspect" --cuda-capabilities "8.0 9.0" "${corpus_dirs[@]}" \
      -- "$PREVIOUS/cuda-elf-inspect" --cuda-capabilities "8.0 9.0" "${corpus_dirs[@]}"
    # Like for like when the previous build predates issue 23 (it read no
    # fatbins outside the sections): ours with --no-scan.
    if ! "$PREVIOUS/cuda-elf-inspect" --help | grep -q -- --no-scan; then
      compare "audit --no-scan --cuda-capabilities \"8.0 9.0\" vs the previous build's default, warm" "$size" "$((r * 3))" "$((r * 3))" "previous build $(cut -c1-7 "$PREVIOUS/REV" 2>/dev/null || echo "$PREVIOUS")" \
        -- "$bin/cuda-elf-inspect" --no-scan --cuda-capabilities "8.0 9.0" "${corpus_dirs[@]}" \
        -- "$PREVIOUS/cuda-elf-inspect" --cuda-capabilities "8.0 9.0" "${corpus_dirs[@]}"
    fi
  fi
  # Issue 23: the HTML report (matrix, findings by check) within 2x of the
  # JSON report of the same audit: a ratio of 0.50x or more.
  compare "audit --format html vs --format json, warm" "$size" "$((r * 3))" "$((r * 3))" "same audit, --format json" \
    -- "$bin/cuda-elf-inspect" --format html --cuda-capabilities "8.0 9.0" "${corpus_dirs[@]}" \
    -- "$bin/cuda-elf-inspect" --format json --cuda-capabilities "8.0 9.0" "${corpus_dirs[@]}"
  # audit.set's five reports: one audit with --output against one audit per
  # format (what nix/audit.nix ran before --output).
  reports=$cache/reports
  mkdir -p "$reports"
  compare "five reports: one audit with --output vs one audit per format, warm" "$size" "$r" "$r" "five runs, one --format each" \
    -- "$bin/cuda-elf-inspect" --format text --cuda-capabilities "8.0 9.0" \
    --output "json=$reports/o.json" --output "sarif=$reports/o.sarif" --output "html=$reports/o.html" \
    --output "hydra-metrics=$reports/o.metrics" "${corpus_dirs[@]}" \
    -- bash -c 'b=$1; d=$2; shift 2; for f in json sarif html hydra-metrics text; do "$b" --format $f --cuda-capabilities "8.0 9.0" "$@" >"$d/a.$f"; done; true' _ "$bin/cuda-elf-inspect" "$reports" "${corpus_dirs[@]}"
  # Issue 21: the dlopen pass may add at most 20% to the audit: the audit
  # with it ("ours") against --no-dlopen ("anchor"): 0.83x or more.
  compare "audit with the dlopen pass vs --no-dlopen, warm" "$size" "$((r * 3))" "$((r * 3))" "cuda-elf-inspect --no-dlopen" \
    -- "$bin/cuda-elf-inspect" "${corpus_dirs[@]}" \
    -- "$bin/cuda-elf-inspect" --no-dlopen "${corpus_dirs[@]}"
  if $quick; then
    note "cold rows skipped under --quick"
  elif ! $can_drop; then
    note "cold rows not measured: the page cache cannot be dropped here (needs root and a writable /proc/sys/vm/drop_caches)"
  fi
fi

# ---- reading -------------------------------------------------------------------------
# Issue 30: the default reading searches every loaded data section whole for
# fatbin containers (one memmem); the old rule probed each section's start
# and sampled 64 KiB every MiB (and missed CUPTI's, in the middle of its
# .rodata). Side by side in one run: the default against --scan (every byte
# but host code) and against --no-scan (the probe), and with PREVIOUS=DIR
# against that build's default (the old rule), all --no-dlopen so the rows
# measure the reading alone; on the corpus, then on READING_DIRS.
reading_rows() {
  local size=$1 r=$2
  shift 2
  local a=(--no-dlopen --cuda-capabilities "8.0 9.0")
  compare "reading: default (every data section searched) vs --scan, warm" "$size" "$r" "$r" "cuda-elf-inspect --scan" \
    -- "$bin/cuda-elf-inspect" "${a[@]}" "$@" \
    -- "$bin/cuda-elf-inspect" --scan "${a[@]}" "$@"
  compare "reading: default vs --no-scan (probe only), warm" "$size" "$r" "$r" "cuda-elf-inspect --no-scan" \
    -- "$bin/cuda-elf-inspect" "${a[@]}" "$@" \
    -- "$bin/cuda-elf-inspect" --no-scan "${a[@]}" "$@"
  if [[ -n ${PREVIOUS:-} ]]; then
    compare "reading: default vs the previous build's default (its rule), warm" "$size" "$r" "$r" "previous build $(cut -c1-7 "$PREVIOUS/REV" 2>/dev/null || echo "$PREVIOUS")" \
      -- "$bin/cuda-elf-inspect" "${a[@]}" "$@" \
      -- "$PREVIOUS/cuda-elf-inspect" "${a[@]}" "$@"
  fi
}
if want reading && need_corpus; then
  mapfile -t files < <(corpus_files)
  r=9
  $quick && r=3
  reading_rows "corpus: ${#files[@]} files, $(mb "${files[@]}")" "$r" "${corpus_dirs[@]}"
  if [[ -n ${READING_DIRS:-} ]]; then
    read -r -a dirs <<<"$READING_DIRS"
    mapfile -t files < <(find -L "${dirs[@]}" -type f -name '*.so*' | sort)
    reading_rows "wheels: ${#files[@]} files, $(mb "${files[@]}")" 5 "${dirs[@]}"
  fi
fi

# ---- torch ---------------------------------------------------------------------------
# Issue 30's speed goal: the audit of the PyTorch 2.11 + NVIDIA wheels tree
# (benches/survey.sh lays it out as a store path: 3.6 GB, 55 shared objects
# with their executables) back to the time of the build before the dlopen
# pass and the default reading of code outside the sections (e20bad5), as
# measured on the GPU machine: --cuda-capabilities 9.0 --format json, on all
# threads and on one. TORCH_TREE=DIR names the tree (too big to download
# here); skipped without it and under --quick. Without PREVIOUS, the second
# row still says what the two passes cost: ours against ours with both off
# (--no-scan --no-dlopen, the previous build's work).
if want torch; then
  if $quick || [[ -z ${TORCH_TREE:-} ]]; then
    note "torch rows skipped (--quick, or TORCH_TREE unset: the torch-2.11 store path benches/survey.sh makes)"
  else
    tsize="PyTorch 2.11 + NVIDIA wheels: $(find -L "$TORCH_TREE" -type f -name '*.so*' | wc -l) shared objects, $(mb "$TORCH_TREE")"
    targs=(--cuda-capabilities 9.0 --format json "$TORCH_TREE")
    r=5
    if [[ -n ${PREVIOUS:-} ]]; then
      prev="previous build $(cut -c1-7 "$PREVIOUS/REV" 2>/dev/null || echo "$PREVIOUS")"
      compare "audit --cuda-capabilities 9.0 vs the previous build, warm" "$tsize" "$r" "$r" "$prev" \
        -- "$bin/cuda-elf-inspect" "${targs[@]}" \
        -- "$PREVIOUS/cuda-elf-inspect" "${targs[@]}"
      compare "audit --cuda-capabilities 9.0 vs the previous build, warm, RAYON_NUM_THREADS=1" "$tsize" "$r" "$r" "$prev, 1 thread" \
        -- env RAYON_NUM_THREADS=1 "$bin/cuda-elf-inspect" "${targs[@]}" \
        -- env RAYON_NUM_THREADS=1 "$PREVIOUS/cuda-elf-inspect" "${targs[@]}"
    fi
    compare "audit --cuda-capabilities 9.0 vs --no-scan --no-dlopen, warm" "$tsize" "$r" "$r" "cuda-elf-inspect --no-scan --no-dlopen" \
      -- "$bin/cuda-elf-inspect" "${targs[@]}" \
      -- "$bin/cuda-elf-inspect" --no-scan --no-dlopen "${targs[@]}"
  fi
  # The rest of an installed PyTorch: the wheel's files that are no library
  # (Python sources, headers: 11,830 of its 11,885 files), each opened and
  # sniffed. TORCH_WHEEL=FILE names the wheel (benches/survey.sh keeps it).
  if ! $quick && [[ -n ${TORCH_WHEEL:-} && -n ${PREVIOUS:-} ]]; then
    pytree=$cache/torch-wheel-no-libraries
    if [[ ! -f $pytree/.done ]]; then
      rm -rf "$pytree" && mkdir -p "$pytree"
      unzip -q -o "$TORCH_WHEEL" -x '*.so' '*.so.*' -d "$pytree" && touch "$pytree/.done"
    fi
    psize="torch wheel without its libraries: $(find "$pytree" -type f | wc -l) files, $(mb "$pytree")"
    prev="previous build $(cut -c1-7 "$PREVIOUS/REV" 2>/dev/null || echo "$PREVIOUS")"
    compare "audit --cuda-capabilities 9.0 of files that are no object vs the previous build, warm" "$psize" 5 5 "$prev" \
      -- "$bin/cuda-elf-inspect" --cuda-capabilities 9.0 --format json "$pytree" \
      -- "$PREVIOUS/cuda-elf-inspect" --cuda-capabilities 9.0 --format json "$pytree"
  fi
fi

# ---- references ----------------------------------------------------------------------
# Reference finding (docs/references.md) reads every byte of every file, where
# the default audit reads headers: its added cost is the audit with
# --references ("ours") against the same audit without ("anchor"); the ratio
# is anchor/ours (0.80x = 25% added). Off by default for such a corpus (no
# store paths); on inside builds, for store paths and for caches.
if want references && need_corpus; then
  mapfile -t files < <(corpus_files)
  size="corpus: ${#files[@]} files, $(mb "${files[@]}")"
  r=5
  $quick && r=2
  compare "audit --references vs the audit without, warm" "$size" "$r" "$r" "cuda-elf-inspect (no reference finding)" \
    -- "$bin/cuda-elf-inspect" --references "${corpus_dirs[@]}" \
    -- "$bin/cuda-elf-inspect" --no-references "${corpus_dirs[@]}"
  # The floor of any scan by Nix's rule (every byte): the audit without it,
  # then every byte of the same files read once more (cat). Ours at 1.00x or
  # more: reference finding costs no more than reading the bytes.
  compare "audit --references vs the audit without + cat of every file, warm" "$size" "$r" "$r" "cuda-elf-inspect --no-references; cat every file" \
    -- "$bin/cuda-elf-inspect" --references "${corpus_dirs[@]}" \
    -- bash -c 'b=$1; shift; "$b" --no-references "$@" >/dev/null; find -H "$@" -type f -exec cat {} + >/dev/null' _ "$bin/cuda-elf-inspect" "${corpus_dirs[@]}"
  if ! $quick && $can_drop; then
    SETUP=cold WARMUP=false compare "audit --references vs the audit without, cold" "$size" "$r" "$r" "cuda-elf-inspect (no reference finding)" \
      -- "$bin/cuda-elf-inspect" --references "${corpus_dirs[@]}" \
      -- "$bin/cuda-elf-inspect" --no-references "${corpus_dirs[@]}"
  fi
fi

# ---- scaling -------------------------------------------------------------------------
# The audit against itself: 2 threads ("ours") vs 1 thread ("anchor"): the
# ratio is the speed-up; and the corpus ("ours") vs the corpus twice ("anchor",
# a second real copy: hard links would be the same inodes, the same pages): the
# ratio is how cost grows when the input doubles (2.00x = linear).
if want scaling && need_corpus; then
  mapfile -t files < <(corpus_files)
  size="corpus: ${#files[@]} files, $(mb "${files[@]}")"
  r=5
  $quick && r=2
  compare "audit scaling: RAYON_NUM_THREADS=2 vs 1" "$size" "$r" "$r" "same, 1 thread" \
    -- env RAYON_NUM_THREADS=2 "$bin/cuda-elf-inspect" "${corpus_dirs[@]}" \
    -- env RAYON_NUM_THREADS=1 "$bin/cuda-elf-inspect" "${corpus_dirs[@]}"
  twice=$cache/corpus-copy
  if $quick; then twice=$cache/corpus-copy-quick; fi
  if [[ ! -f $twice/.done ]]; then
    rm -rf "$twice"
    mkdir -p "$twice"
    i=0
    for d in "${corpus_dirs[@]}"; do
      mkdir -p "$twice/$i"
      # -H: follow the corpus folder if it is a link, but copy links inside
      # it as links (the Debian packages hold dangling /usr/share/doc links,
      # which -L cannot copy, and the audit does not follow them anyway).
      cp -rH --reflink=auto "$d" "$twice/$i/"
      i=$((i + 1))
    done
    touch "$twice/.done"
  fi
  compare "audit scaling: corpus x1 vs x2" "$size, then twice" "$r" "$r" "corpus x2 (real copy)" \
    -- "$bin/cuda-elf-inspect" "${corpus_dirs[@]}" \
    -- "$bin/cuda-elf-inspect" "${corpus_dirs[@]}" "$twice"
fi

# A throwaway Nix store under a folder (the why and cache sections).
nixenv() {
  local d=$1
  shift
  env NIX_STORE_DIR="$d/store" NIX_STATE_DIR="$d/state" NIX_LOG_DIR="$d/log" \
    NIX_CONF_DIR="$d/etc" HOME="$d/home" NIX_PATH= \
    NIX_CONFIG=$'build-hook =\nsandbox = false\nsubstituters =\nbuild-users-group =\n' "$@"
}
wipe_store() { [[ -d $1/store ]] && chmod -R u+w "$1/store"; rm -rf "$1/store" "$1/state" "$1/log"; }

# ---- why ---------------------------------------------------------------------------------
# Issue 22: "why is nvcc in my runtime closure?" answered from a file:// cache
# (--closure --why build-only: narinfo References, NARs streamed, each hop's
# file and place) against `nix why-depends --all` on the same paths realised
# in a throwaway store: with --precise (the byte context, as ours names the
# place: it reads the files of every path on a chain) and without (the
# reference graph from Nix's database alone, no file named). The closure:
# app -> a copy of cuRAND 12 (167 MB) with the nvcc path appended to its
# library -> cuda_nvcc-13.5.
make_why_store() { # DIR -> prints "APP NVCC"
  local dir=$1 curand=$2
  if [[ ! -f $dir/.done ]]; then
    wipe_store "$dir"
    rm -rf "$dir"
    mkdir -p "$dir/etc" "$dir/home" "$dir/tmp"
    local expr app
    expr='let mk = name: script: attrs: derivation ({ inherit name; system = builtins.currentSystem; builder = "/bin/sh"; args = [ "-c" ("PATH=/usr/bin:/bin; " + script) ]; } // attrs);
      nvcc = mk "cuda_nvcc-13.5" "mkdir -p $out/bin; echo nvcc > $out/bin/nvcc" {};
      lib = mk "libcurand-leaky" "cp -r $src $out; chmod -R u+w $out; for f in $(find $out -name \"libcurand.so*\" -type f); do printf \"%s/bin/nvcc\" $nvcc >> $f; done" { inherit nvcc; src = builtins.path { path = '"$curand"'; name = "corpus-curand"; }; };
    in mk "app" "echo $lib > $out" { inherit lib; }'
    app=$(nixenv "$dir" "$root/.tools/nix/bin/nix-build" --no-out-link -E "$expr") || return 1
    nixenv "$dir" "$root/.tools/nix/bin/nix" --extra-experimental-features nix-command \
      copy --to "file://$dir/cache?compression=zstd" "$app" >&2 || return 1
    echo "$app $(nixenv "$dir" "$root/.tools/nix/bin/nix-store" -qR "$app" | grep -- -cuda_nvcc-)" >"$dir/paths"
    touch "$dir/.done"
  fi
  cat "$dir/paths"
}
if want why && need_corpus; then
  whydir=$(realpath "$cache")/nixwhy
  r=5
  $quick && r=2
  if read -r app nvcc < <(make_why_store "$whydir" "$(realpath "$root/.cache/corpus/lib/nvidia-curand-cu12-10.3.10.19")") && [[ -n $nvcc ]]; then
    size="closure of 3 paths (app -> cuRAND 12 copy, 167 MB, nvcc path appended -> cuda_nvcc), $(du -cm "$whydir"/cache/nar/*.nar.zst | tail -n 1 | cut -f1) MB zstd"
    ours=(env NIX_STORE="$whydir/store" TMPDIR="$whydir/tmp" "$bin/cuda-elf-inspect" --substituter "file://$whydir/cache" --closure --why build-only "$app")
    # (a command, not the nixenv function: /usr/bin/time runs it)
    why_nix=(env NIX_STORE_DIR="$whydir/store" NIX_STATE_DIR="$whydir/state" NIX_LOG_DIR="$whydir/log"
      NIX_CONF_DIR="$whydir/etc" HOME="$whydir/home" NIX_PATH= NIX_CONFIG=$'build-hook =\nsandbox = false\nsubstituters =\nbuild-users-group =\n'
      "$root/.tools/nix/bin/nix" --extra-experimental-features nix-command why-depends --all)
    compare "why is nvcc in the closure: --closure --why from the cache" "$size" "$r" "$r" "nix why-depends --all --precise, realised" \
      -- "${ours[@]}" -- "${why_nix[@]}" --precise "$app" "$nvcc"
    compare "why is nvcc in the closure: --closure --why from the cache" "$size" "$r" "$r" "nix why-depends --all (graph only), realised" \
      -- "${ours[@]}" -- "${why_nix[@]}" "$app" "$nvcc"
    # Same chains: tests/references.rs compares the edges; here the hop count.
    # (ours exits 1: nvcc is a build-only error; neither may stop the script)
    hops=$("${ours[@]}" --format json 2>/dev/null | python3 -c 'import json,sys; print(sum(len(c["hops"]) for c in json.load(sys.stdin)["chains"]))') || true
    nix_hops=$("${why_nix[@]}" "$app" "$nvcc" 2>/dev/null | grep -c -- '───') || true
    [[ $hops == "$nix_hops" ]] && note "why: the same number of hops as nix why-depends --all ($hops)" ||
      note "why: $hops hops, nix why-depends --all printed $nix_hops (not equal)"
  else
    note "the why store could not be made: the why rows are missing"
  fi
fi

# ---- cache -----------------------------------------------------------------------------
# Issue 16: the audit of a closure as a binary cache serves it (`--substituter
# file://... --closure`: fetch, check NarHash, unpack the objects, audit) vs
# what one does without it: realise the closure (`nix copy --from` the same
# cache into an empty store) and audit the realised paths. Plus the bound: plain
# decompression of the closure's NARs (`zstd -dc`). The closure: a top path
# referring to corpus folders imported into a throwaway store (cuRAND 12 for
# --quick; cuRAND 12 and cuFFT 11 for the full run), copied by Nix with zstd.
make_nix_cache() { # DIR CORPUS_DIR... -> prints the top store path
  local dir=$1
  shift
  if [[ ! -f $dir/.done ]]; then
    wipe_store "$dir"
    rm -rf "$dir"
    mkdir -p "$dir/etc" "$dir/home"
    local refs="" i=0
    for c in "$@"; do refs+=" \${builtins.path { path = $c; name = \"corpus-$i\"; }}"; i=$((i + 1)); done
    local top
    top=$(nixenv "$dir" "$root/.tools/nix/bin/nix-build" --no-out-link -E \
      "derivation { name = \"closure\"; system = builtins.currentSystem; builder = \"/bin/sh\"; args = [ \"-c\" \"echo$refs > \$out\" ]; }") || return 1
    nixenv "$dir" "$root/.tools/nix/bin/nix" --extra-experimental-features nix-command \
      copy --to "file://$dir/cache?compression=${compression:-zstd}" "$top" >&2 || return 1
    echo "$top" >"$dir/top"
    wipe_store "$dir" # what remains is the cache
    touch "$dir/.done"
  fi
  cat "$dir/top"
}
if want cache && need_corpus; then
  if $quick; then
    nixdir=$(realpath "$cache")/nixcache-quick # Nix refuses a store below a link
    sources=("$root/.cache/corpus/lib/nvidia-curand-cu12-10.3.10.19")
    r=2
  else
    nixdir=$(realpath "$cache")/nixcache
    corpus cufft >/dev/null || note "cuFFT unavailable: the cache rows use cuRAND alone"
    sources=("$root/.cache/corpus/lib/nvidia-curand-cu12-10.3.10.19")
    [[ -d $root/.cache/corpus/lib/nvidia-cufft-cu12-11.4.1.4 ]] && sources+=("$root/.cache/corpus/lib/nvidia-cufft-cu12-11.4.1.4")
    r=3
  fi
  if top=$(make_nix_cache "$nixdir" "${sources[@]}"); then
    nars=("$nixdir"/cache/nar/*.nar.zst)
    size="closure of $(($(ls "$nixdir"/cache/*.narinfo | wc -l))) paths, $(mb "${sources[@]}") unpacked, $(du -cm "${nars[@]}" | tail -n 1 | cut -f1) MB zstd"
    fresh_store() { wipe_store "$nixdir"; mkdir -p "$nixdir/tmp"; }
    export nixdir top root bin
    realise_and_audit='nixenv() { local d=$1; shift; env NIX_STORE_DIR="$d/store" NIX_STATE_DIR="$d/state" NIX_LOG_DIR="$d/log" NIX_CONF_DIR="$d/etc" HOME="$d/home" NIX_PATH= NIX_CONFIG=$'"'"'build-hook =\nsandbox = false\nsubstituters =\nbuild-users-group =\n'"'"' "$@"; }
      nixenv "$nixdir" "$root/.tools/nix/bin/nix" --extra-experimental-features nix-command copy --no-check-sigs --from "file://$nixdir/cache" "$top" &&
      NIX_STORE="$nixdir/store" "$bin/cuda-elf-inspect" $(nixenv "$nixdir" "$root/.tools/nix/bin/nix-store" -qR "$top")'
    SETUP=fresh_store compare "audit of a cached closure (--substituter file:// --closure)" "$size" "$r" "$r" "nix copy --from the cache + audit of the realised paths" \
      -- env TMPDIR="$nixdir/tmp" "$bin/cuda-elf-inspect" --substituter "file://$nixdir/cache" --closure "$top" \
      -- bash -c "$realise_and_audit"
    compare "audit of a cached closure (--substituter file:// --closure)" "$size" "$r" "$r" "the bound: zstd -dc of its NARs" \
      -- env TMPDIR="$nixdir/tmp" "$bin/cuda-elf-inspect" --substituter "file://$nixdir/cache" --closure "$top" \
      -- bash -c 'zstd -dc "$@" >/dev/null' zstd "${nars[@]}"
    wipe_store "$nixdir"
  else
    note "the Nix binary cache could not be made: the cache rows are missing"
  fi
  # A Python CUDA package as Nix installs it: the whole cupy wheel unpacked
  # (65 shared objects beside Python sources, Cython files and CUDA headers,
  # which the audit never writes out), in the two compressions caches use:
  # zstd, and xz (cache.nixos.org's).
  wheel=$root/.cache/corpus/wheels/cupy_cuda12x-14.2.0-cp311-cp311-manylinux2014_x86_64.whl
  if ! $quick && [[ -f $wheel ]]; then
    tree=$cache/cupy-wheel
    if [[ ! -f $tree.done ]]; then
      rm -rf "$tree" && python3 -m zipfile -e "$wheel" "$tree" && touch "$tree.done"
    fi
    for compression in zstd xz; do
      nixdir=$(realpath "$cache")/nixcache-cupy-$compression
      if top=$(compression=$compression make_nix_cache "$nixdir" "$tree"); then
        nars=("$nixdir"/cache/nar/*.nar.*)
        size="cupy 14.2.0 wheel as a store path ($(find "$tree" -type f | wc -l) files, $(find "$tree" -name '*.so' | wc -l) objects), $(mb "$tree") unpacked, $(du -cm "${nars[@]}" | tail -n 1 | cut -f1) MB $compression"
        export nixdir top
        SETUP=fresh_store compare "audit of a cached closure (--substituter file:// --closure)" "$size" 3 3 "nix copy --from the cache + audit of the realised paths" \
          -- env TMPDIR="$nixdir/tmp" "$bin/cuda-elf-inspect" --substituter "file://$nixdir/cache" --closure "$top" \
          -- bash -c "$realise_and_audit"
        wipe_store "$nixdir"
      else
        note "the cupy binary cache ($compression) could not be made: its row is missing"
      fi
    done
  fi
fi

# ---- coverage ----------------------------------------------------------------------------
# Issue 31: which of N store paths does a remote cache serve? `--coverage`
# (narinfo lookups, --jobs at a time over kept-alive connections) against
# `nix path-info --store http://...` on the same list, the cache served by
# benches/cache_server.py with 50 ms added before every answer (a remote
# cache's round trip). Nix's narinfo disk cache is removed before each of its
# runs (ours keeps none). Then the deep pass (--cuda-capabilities: every
# served NAR fetched, decompressed and its objects audited) over the corpus
# cache against `zstd -dc` of the same NARs on one core (the goal: within 1.3x
# of twice that time).
make_many_paths_cache() { # DIR COUNT -> the cache folder holds COUNT small store paths
  local dir=$1 count=$2
  if [[ ! -f $dir/.done ]]; then
    wipe_store "$dir"
    rm -rf "$dir"
    mkdir -p "$dir/etc" "$dir/home" "$dir/files"
    local i
    for ((i = 0; i < count; i++)); do echo "file $i" >"$dir/files/f$i"; done
    nixenv "$dir" "$root/.tools/nix/bin/nix-store" --add "$dir"/files/* >"$dir/paths" || return 1
    local -a added
    mapfile -t added <"$dir/paths"
    nixenv "$dir" "$root/.tools/nix/bin/nix" --extra-experimental-features nix-command \
      copy --to "file://$dir/cache?compression=zstd" "${added[@]}" >&2 || return 1
    wipe_store "$dir"
    touch "$dir/.done"
  fi
}
if want coverage; then
  n=2000
  $quick && n=200
  covdir=$(realpath "$cache")/nixcover-$n
  if make_many_paths_cache "$covdir" "$n"; then
    coproc server { exec python3 "$root/benches/cache_server.py" "$covdir/cache" 50; }
    read -r port <&"${server[0]}"
    mapfile -t cpaths <"$covdir/paths"
    clear_nix_cache() { rm -rf "$covdir/home/.cache"; }
    path_info=(env NIX_STORE_DIR="$covdir/store" NIX_STATE_DIR="$covdir/state" NIX_LOG_DIR="$covdir/log"
      NIX_CONF_DIR="$covdir/etc" HOME="$covdir/home" NIX_PATH= NIX_CONFIG=$'substituters =\nbuild-users-group =\n'
      "$root/.tools/nix/bin/nix" --extra-experimental-features nix-command path-info --store "http://127.0.0.1:$port")
    ra=1
    $quick && ra=1
    SETUP=clear_nix_cache compare "presence of store paths on a cache with 50 ms latency (--coverage)" "$n paths, HTTP/1.1 on 127.0.0.1" "$ra" 3 "nix path-info --store http://" \
      -- "$bin/cuda-elf-inspect" --coverage --substituter "http://127.0.0.1:$port" "${cpaths[@]}" \
      -- "${path_info[@]}" "${cpaths[@]}"
    served=$("$bin/cuda-elf-inspect" --coverage --substituter "http://127.0.0.1:$port" --format json "${cpaths[@]}" 2>/dev/null |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["summary"]["served"])') || true
    note "coverage: $served of $n paths served (all are in the cache)"
    kill "$server_PID" 2>/dev/null || true
  else
    note "the $n-path cache could not be made: the presence row is missing"
  fi
  if need_corpus; then
    nixdir=$(realpath "$cache")/nixcache
    $quick && nixdir=$(realpath "$cache")/nixcache-quick
    sources=("$root/.cache/corpus/lib/nvidia-curand-cu12-10.3.10.19")
    ! $quick && [[ -d $root/.cache/corpus/lib/nvidia-cufft-cu12-11.4.1.4 ]] && sources+=("$root/.cache/corpus/lib/nvidia-cufft-cu12-11.4.1.4")
    if make_nix_cache "$nixdir" "${sources[@]}" >/dev/null; then
      nars=("$nixdir"/cache/nar/*.nar.zst)
      mapfile -t dpaths < <(sed -n 's/^StorePath: //p' "$nixdir"/cache/*.narinfo)
      mkdir -p "$nixdir/tmp"
      size="${#dpaths[@]} paths, $(du -cm "${nars[@]}" | tail -n 1 | cut -f1) MB zstd"
      # The goal is stated against 2 x this single-core time (BENCHMARKS.md): the
      # row's ratio is anchor/ours, so "within 1.3x of 2 x zstd" is a ratio >= 0.38.
      compare "coverage deep pass (--cuda-capabilities, file:// cache)" "$size" 3 3 "zstd -dc of its NARs, one core" \
        -- env TMPDIR="$nixdir/tmp" "$bin/cuda-elf-inspect" --coverage --substituter "file://$nixdir/cache" --cuda-capabilities "8.0 9.0" "${dpaths[@]}" \
        -- bash -c 'zstd -dc "$@" >/dev/null' zstd "${nars[@]}"
    else
      note "the corpus cache could not be made: the deep-pass row is missing"
    fi
  fi
fi

# ---- cuda-preflight ------------------------------------------------------------------------
# A sandbox's pre-flight against a closure (issue 32): the test corpus
# (cuRAND 12 and 13, cupy, cuFFT; --quick: cuRAND 12) as the closure, the
# driver folder of Debian's libcuda 550.163.01 (tests/tools/corpus.sh), the
# GPU's capability given. The anchor is the audit alone on the same files
# with that driver: what the device, driver-folder and symbol checks add.
# The issue's bound: under 50 ms.
if want preflight; then
  sets=(curand12 curand13 cupy cufft)
  $quick && sets=(curand12)
  if pre_files=$(corpus "${sets[@]}") && corpus libcuda550 >/dev/null; then
    mapfile -t pre_dirs < <(for f in $pre_files; do d=${f#"$root/.cache/corpus/lib/"}; echo "$root/.cache/corpus/lib/${d%%/*}"; done | sort -u)
    drv=$root/.cache/corpus/lib/libcuda550/libcuda1/usr/lib/x86_64-linux-gnu/nvidia/current
    r=9
    $quick && r=3
    size="closure: ${sets[*]} ($(wc -w <<<"$pre_files") files, $(mb $pre_files)); driver 550.163.01"
    compare "cuda-preflight of a sandbox against a closure, warm" "$size" "$r" "$r" "cuda-elf-inspect --driver-version 550.163.01 --cuda-capabilities 9.0 (the audit alone)" \
      -- "$bin/cuda-preflight" --driver-folder "$drv" --gpu-capability 9.0 "${pre_dirs[@]}" \
      -- "$bin/cuda-elf-inspect" --driver-version 550.163.01 --cuda-capabilities 9.0 "${pre_dirs[@]}"
  else
    note "the corpus or Debian's libcuda could not be had: the cuda-preflight row is missing"
  fi
fi

# ---- report -----------------------------------------------------------------------------
echo
[[ -n ${BIN_DIR:-} ]] && note "binaries from BIN_DIR=$BIN_DIR, not make static"
echo "Machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1), $(awk '/MemTotal/ { printf "%.0f GB RAM", $2 / 1048576 }' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%Y-%m-%d %H:%M UTC'); benches/compare.sh${quick:+}$($quick && echo ' --quick')"
echo
echo "| workload | input | ours median (min-max) | ours peak RSS | anchor | anchor median (min-max) | anchor peak RSS | anchor/ours | runs ours/anchor |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
if ((${#notes[@]})); then
  echo
  printf -- '- %s\n' "${notes[@]}"
fi
