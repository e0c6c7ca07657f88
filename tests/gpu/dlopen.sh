#!/usr/bin/env bash
# The dlopen proof (issue 21), run on the lent GPU machine, never in CI:
#
#   tests/gpu/dlopen.sh BIN_DIR OUT_DIR
#
# BIN_DIR holds our static binaries (built here with `make static`, carried
# over). Uses the machine's driver, PyTorch and NVIDIA's wheels in PyTorch's
# environment. OUT_DIR receives results.md (PASS/FAIL lines), compare.md (the
# recall/precision table of docs/dlopen.md) and the raw logs.
#
# 1. Real workloads (tests/gpu/dlopen_workloads.py) under LD_DEBUG: what the
#    loader dlopened, and from which caller.
# 2. The audit of the same folders, and every seen load of a native library
#    compared with its prediction (tests/gpu/dlopen_compare.py).
# 3. cuDNN split as Nix splits packages (front library in one folder, its
#    sub-libraries in another, no RUNPATH between them): the audit flags it,
#    the program fails at the dlopen; `auto-add-driver-runpath
#    --dlopen-search` fixes it, the audit agrees, and a cuDNN kernel runs.
set -u
BIN=$(cd "${1:?BIN_DIR}" && pwd)
OUT=$(mkdir -p "${2:?OUT_DIR}" && cd "$2" && pwd)
SRC=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d /tmp/gpu-dlopen.XXXX)
results=$OUT/results.md
: >"$results"
pass=0
fail=0
record() { # record PASS|FAIL|INFO text
  echo "- $1: $2" | tee -a "$results"
  case $1 in PASS) pass=$((pass + 1)) ;; FAIL) fail=$((fail + 1)) ;; esac
}
section() { echo | tee -a "$results"; echo "## $1" | tee -a "$results"; }
want() { [[ -z ${SECTIONS-} || " $SECTIONS " == *" $1 "* ]]; }

SP=$(python3 -c 'import site; print(site.getsitepackages()[0])')
DRIVER=/usr/local/nvidia/lib64
section "Machine"
record INFO "date $(date -u +%Y-%m-%dT%H:%MZ)"
record INFO "GPU $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>&1 | head -n 1)"
record INFO "PyTorch $(python3 -c 'import torch; print(torch.__version__, torch.backends.cudnn.version())' 2>&1)"
record INFO "wheels: $(python3 -m pip list 2>/dev/null | grep -E '^nvidia-(cudnn|nccl|cufft|cublas |cuda-nvrtc)' | tr -s ' ' | tr '\n' ';')"

if want 1; then
  section "1. Workloads under LD_DEBUG"
  PYTHONUNBUFFERED=1 python3 "$SRC/dlopen_workloads.py" "$work/ld" >"$OUT/workloads.log" 2>&1
  st=$?
  cp "$work/ld/loaded.tsv" "$OUT/loaded.tsv"
  record "$([[ $st == 0 ]] && echo INFO || echo FAIL)" "workloads exit $st: $(grep -E '^[a-z]+: ' "$OUT/workloads.log" | tr '\n' ' ')"
fi

if want 2; then
  section "2. Audit prediction vs what the loader did"
  start=$(date +%s.%N)
  "$BIN/cuda-elf-inspect" --format json --dlopen-facts "$SP/nvidia" "$SP/torch/lib" "$DRIVER" >"$OUT/audit.json" 2>"$OUT/audit.log"
  st=$?
  end=$(date +%s.%N)
  record INFO "audit of $SP/nvidia, $SP/torch/lib and $DRIVER: exit $st in $(python3 -c "print(round($end-$start,2))") s"
  python3 "$SRC/dlopen_compare.py" "$OUT/loaded.tsv" "$OUT/audit.json" "$SP/nvidia" "$SP/torch/lib" "$DRIVER" >"$OUT/compare.md" 2>&1
  st=$?
  record "$([[ $st == 0 ]] && echo PASS || echo FAIL)" "$(grep -E '^(recall|precision)' "$OUT/compare.md" | tr '\n' ' ')"
fi

if want 3; then
  section "3. cuDNN split as Nix splits it"
  # Two store paths, as Nix would lay them out: the front library in one,
  # its sub-libraries in the other, no RUNPATH entry between them. Inside
  # the store the audit searches no host folder, as a Nix glibc does not.
  store=/nix/store
  front=$store/0123456789abcdfghijklmnpqrsvwxyz-cudnn-9.19.0.56-lib/lib
  sub=$store/zyxwvsrqpnmlkjihgfdcba9876543210-cudnn-sub-9.19.0.56/lib
  rm -rf "${front%/lib}" "${sub%/lib}"
  mkdir -p "$front" "$sub"
  cp -L "$SP/nvidia/cudnn/lib/libcudnn.so.9" "$front/"
  for f in "$SP"/nvidia/cudnn/lib/libcudnn_*.so.9; do cp -L "$f" "$sub/"; done
  cudart=$(ls "$SP"/nvidia/cu13/lib/libcudart.so.* "$SP"/nvidia/cuda_runtime/lib/libcudart.so.* 2>/dev/null | head -n 1)
  # This machine has another cuDNN (9.14, in /usr/lib/x86_64-linux-gnu,
  # in ld.so.cache) that the loader would find, which NixOS has not: its
  # files are moved aside for the runs and put back after (a private mount
  # namespace cannot cover single files on this machine's runtime).
  hidden=$work/hidden-cudnn
  mkdir -p "$hidden"
  system_cudnn=$(ldconfig -p | sed -n 's/.*libcudnn[^ ]* .*=> //p' | while read -r f; do readlink -f "$f"; echo "$f"; done | sort -u)
  for f in $system_cudnn; do [[ -e $f || -L $f ]] && mv "$f" "$hidden/$(echo "$f" | tr / _)"; done
  restore() { for f in $system_cudnn; do [[ -e $hidden/$(echo "$f" | tr / _) || -L $hidden/$(echo "$f" | tr / _) ]] && mv "$hidden/$(echo "$f" | tr / _)" "$f"; done; }
  trap restore EXIT
  record INFO "cuDNN of the system, moved aside for the runs: $(echo $system_cudnn | wc -w) files"
  run_split() { # run_split LOG: the cuDNN kernel through the split tree
    LD_DEBUG=files,libs LD_DEBUG_OUTPUT="$1" python3 "$SRC/cudnn_split.py" "$front/libcudnn.so.9" "$cudart" >"$1.out" 2>&1
  }
  "$BIN/cuda-elf-inspect" --format json "$front" >"$OUT/split-before.json" 2>"$OUT/split-before.log"
  count() { # count JSON CHECK: findings of CHECK naming libcudnn_graph
    python3 - "$1" "$2" <<'PY'
import json, sys
def walk(x):
    if isinstance(x, dict):
        if isinstance(x.get("check"), str): yield x
        for v in x.values(): yield from walk(v)
    elif isinstance(x, list):
        for v in x: yield from walk(v)
d = json.load(open(sys.argv[1]))
print(sum(1 for f in walk(d) if f["check"] == sys.argv[2] and "libcudnn_graph" in json.dumps(f)))
PY
  }
  before=$(count "$OUT/split-before.json" dlopen-unresolved)
  run_split "$OUT/ld-split-before"
  st_before=$?
  # cuDNN either returns a status (exit 3) or aborts in its own loader
  # ("Invalid handle. Cannot load symbol ..."): either way the sub-library
  # was not found, which the loader's log must confirm.
  graph_loaded=$(cat "$OUT"/ld-split-before.[0-9]* 2>/dev/null | grep -c "file=libcudnn_graph.so.9 \[0\];  generating link map")
  record "$([[ $st_before != 0 && $graph_loaded == 0 && $before -gt 0 ]] && echo PASS || echo FAIL)" \
    "unpatched: the audit flags libcudnn_graph ($before dlopen-unresolved); the loader found it $graph_loaded times; the program exits $st_before ($(tr '\n' ' ' <"$OUT/ld-split-before.out" | cut -c1-200))"
  "$BIN/auto-add-driver-runpath" --dlopen-search "$sub" "$front" >"$OUT/split-patch.log" 2>&1
  record INFO "auto-add-driver-runpath --dlopen-search: exit $? ($(tr '\n' ' ' <"$OUT/split-patch.log" | cut -c1-300))"
  record INFO "RUNPATH now: $(readelf -d "$front/libcudnn.so.9" | grep -E 'RUNPATH|RPATH' | sed 's/.*\[//; s/\]//')"
  "$BIN/cuda-elf-inspect" --format json "$front" >"$OUT/split-after.json" 2>"$OUT/split-after.log"
  after=$(count "$OUT/split-after.json" dlopen-unresolved)
  resolved=$(count "$OUT/split-after.json" dlopen-resolved)
  run_split "$OUT/ld-split-after"
  st_after=$?
  from_sub=$(cat "$OUT"/ld-split-after.[0-9]* 2>/dev/null | grep -c "trying file=$sub/libcudnn_graph")
  record "$([[ $st_after == 0 && $after == 0 && $resolved -gt 0 && $from_sub -gt 0 ]] && echo PASS || echo FAIL)" \
    "patched: the audit resolves libcudnn_graph ($after dlopen-unresolved, $resolved dlopen-resolved); the program exits $st_after ($(tr '\n' ' ' <"$OUT/ld-split-after.out" | cut -c1-200)); sub-libraries loaded from the other store path: $from_sub"
fi

section "Total"
record INFO "$pass passed, $fail failed"
tar -czf "$OUT/logs.tgz" -C "$OUT" $(cd "$OUT" && ls ld-* 2>/dev/null) 2>/dev/null && rm -f "$OUT"/ld-*
[[ $fail == 0 ]]
