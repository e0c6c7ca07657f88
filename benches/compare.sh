#!/usr/bin/env bash
# Puts each of our binaries beside its anchor on the same input, alternating
# runs (A B A B ...) after a warm-up, and prints a Markdown table: median and
# min-max wall time, peak resident memory, and the ratio anchor/ours.
#
#   benches/compare.sh            full run (numbers for BENCHMARKS.md)
#   benches/compare.sh --quick    small inputs, one round: a smoke test for CI
#
# Inputs are generated here into .cache/bench (ignored by git). Timings are
# for people, read as ratios: the machines here are small and shared.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
quick=false
[[ ${1-} == --quick ]] && quick=true

host=$(rustc -vV | sed -n 's/^host: //p')
make -s static >/dev/null
bin=$root/target/$host/release
cache=$root/.cache/bench
mkdir -p "$cache"

# measure LABEL CMD... : one run; appends "seconds maxrss_kb" to $cache/LABEL.times
measure() {
  local label=$1
  shift
  local t0 t1 rss
  t0=$(date +%s%N)
  # The checked trees hold broken links on purpose: a non-zero exit is expected.
  /usr/bin/time -f '%M' -o "$cache/rss" "$@" >/dev/null 2>&1 || true
  rss=$(tail -n 1 "$cache/rss")
  t1=$(date +%s%N)
  echo "$(( (t1 - t0) / 1000 )) $rss" >>"$cache/$label.times"
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

rows=()
# compare WORKLOAD SIZE ROUNDS_ANCHOR ROUNDS_OURS ANCHOR_NAME -- OURS... -- ANCHOR...
compare() {
  local workload=$1 size=$2 ra=$3 ro=$4 anchor_name=$5
  shift 5
  local ours=() anchor=()
  [[ $1 == -- ]] && shift
  while [[ $1 != -- ]]; do ours+=("$1"); shift; done
  shift
  anchor=("$@")
  local la=a-$RANDOM lo=o-$RANDOM
  : >"$cache/$la.times"
  : >"$cache/$lo.times"
  "${ours[@]}" >/dev/null 2>&1 || true # warm-up (page cache, dentries)
  local i
  for ((i = 0; i < (ra > ro ? ra : ro); i++)); do
    ((i < ro)) && measure "$lo" "${ours[@]}"
    ((i < ra)) && measure "$la" "${anchor[@]}"
  done
  read -r om omin omax orss < <(stats "$lo")
  read -r am amin amax arss < <(stats "$la")
  local ratio
  ratio=$(awk -v a="$am" -v o="$om" 'BEGIN { printf "%.1fx", a / o }')
  rows+=("| $workload | $size | $(fmt_time "$om") ($(fmt_time "$omin")-$(fmt_time "$omax")) | $orss MB | $anchor_name | $(fmt_time "$am") ($(fmt_time "$amin")-$(fmt_time "$amax")) | $arss MB | $ratio |")
  rm -f "$cache/$la.times" "$cache/$lo.times"
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
    compare "noBrokenSymlinks" "$n links" "$upstream_rounds" "$rounds" "upstream bash hook" \
      -- env "${envs[@]}" "$bin/no-broken-symlinks" \
      -- env "${envs[@]}" bash -c "source tests/upstream/setup-stub.bash; source tests/upstream/no-broken-symlinks.bash; noBrokenSymlinksInAllOutputs"
  fi
  compare "noBrokenSymlinks" "$n links" "$rounds" "$rounds" "find -xtype l" \
    -- env "${envs[@]}" "$bin/no-broken-symlinks" \
    -- find "$dir/store/out" -xtype l
}

if $quick; then
  bench_symlinks 1000 1 3
else
  bench_symlinks 1000 3 9
  bench_symlinks 20000 1 9
  bench_symlinks 200000 0 5
fi

# ---- report -------------------------------------------------------------------
echo
echo "Machine: $(nproc) cores, $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1), $(date -u +%Y-%m-%d)"
echo
echo "| workload | input | ours median (min-max) | ours peak RSS | anchor | anchor median (min-max) | anchor peak RSS | anchor/ours |"
echo "|---|---|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
