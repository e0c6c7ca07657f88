#!/usr/bin/env bash
# Driver prediction vs reality (issue 16), in two steps:
#
#   tests/gpu/driver.sh build DIR   # here: nvcc 13.5 of `make tools` builds the programs
#   tests/gpu/driver.sh run DIR OUT # on the GPU machine (no nvcc needed there)
#
# `build` compiles tests/gpu/driver.cu six ways (SASS sm_90; PTX compute_90
# only; both; each with the static and with the shared runtime, the shared
# ones finding libcudart.so.13 of the pip wheel in .tools beside them through
# RUNPATH $ORIGIN) and copies cuda-elf-inspect (CUDA_ELF_INSPECT, default the
# static build of `make static`) into DIR. `run` asks nvidia-smi for the
# driver, audits every program with `--driver-version <that driver>`, runs
# it, and writes OUT/results.md: per program our prediction, what it did,
# and whether they agree. docs/gpu-validation.md is written from it.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

build() {
  local dir=$1
  mkdir -p "$dir"
  local nvcc=$root/.tools/cuda/bin/nvcc
  local cudart
  cudart=$(find "$root/.tools/venv" -name libcudart.so.13 | head -n 1)
  [[ -x $nvcc && -n $cudart ]] || { echo "nvcc or libcudart.so.13 missing: make tools" >&2; exit 2; }
  local sass='-gencode arch=compute_90,code=sm_90'
  local ptx='-gencode arch=compute_90,code=compute_90'
  local both='-gencode arch=compute_90,code=[sm_90,compute_90]'
  for v in sass ptx both; do
    # shellcheck disable=SC2086
    "$nvcc" ${!v} -o "$dir/${v}_static" "$here/driver.cu" || exit 2
    # shellcheck disable=SC2086
    "$nvcc" ${!v} -cudart shared -Xlinker -rpath -Xlinker '$ORIGIN' -o "$dir/${v}_shared" "$here/driver.cu" || exit 2
  done
  cp -L "$cudart" "$dir/libcudart.so.13"
  cp "${CUDA_ELF_INSPECT:-$root/target/x86_64-unknown-linux-gnu/release/cuda-elf-inspect}" "$dir/cuda-elf-inspect"
  "$nvcc" --version | sed -n 's/.*release \([0-9.]*\), \(V[0-9.]*\).*/\1 \2/p' >"$dir/nvcc-version"
}

run() {
  local dir out
  dir=$(cd "$1" && pwd)
  out=$(mkdir -p "$2" && cd "$2" && pwd)
  local results=$out/results.md pass=0 fail=0
  : >"$results"
  local driver
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1 | tr -d ' ')
  {
    echo "- GPU: $(nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader | head -n 1)"
    echo "- nvidia-smi: $(nvidia-smi | grep -o 'CUDA Version: [0-9.]*')"
    echo "- programs built with nvcc $(cat "$dir/nvcc-version")"
    echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "| program | predicted (--driver-version $driver) | coverage line (--cuda-capabilities 9.0) | observed | agree |"
    echo "|---|---|---|---|---|"
  } >>"$results"
  for p in sass_static ptx_static both_static sass_shared ptx_shared both_shared; do
    "$dir/cuda-elf-inspect" --driver-version "$driver" --no-forward-compat --format json \
      "$dir/$p" >"$out/$p.audit.json" 2>"$out/$p.audit.err"
    "$dir/cuda-elf-inspect" --driver-version "$driver" --no-forward-compat --cuda-capabilities 9.0 \
      "$dir/$p" >"$out/$p.audit.txt" 2>&1
    # The prediction: which driver finding fired (none: it runs).
    local predicted
    predicted=$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
ids = sorted({f["check"] for f in r["findings"]
              if f["check"] in ("driver-too-old-for-runtime", "ptx-too-new-for-driver", "driver-verdict-unknown")})
print(",".join(ids) or "runs")' "$out/$p.audit.json" 2>&1)
    local coverage
    coverage=$(grep -m1 'requested 9.0' "$out/$p.audit.txt" | sed 's/^ *requested //')
    CUDA_CACHE_DISABLE=1 "$dir/$p" >"$out/$p.run.txt" 2>&1
    local status=$?
    local observed
    observed="exit $status: $(tr '\n' ';' <"$out/$p.run.txt" | sed 's/;$//')"
    local agree=no
    case $predicted in
      runs) [[ $status == 0 ]] && agree=yes ;;
      ptx-too-new-for-driver) [[ $status != 0 ]] && grep -q 'unsupported toolchain' "$out/$p.run.txt" && agree=yes ;;
      driver-too-old-for-runtime) [[ $status != 0 ]] && grep -q 'insufficient' "$out/$p.run.txt" && agree=yes ;;
    esac
    if [[ $agree == yes ]]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
    echo "| \`$p\` | $predicted | $coverage | $observed | $agree |" >>"$results"
  done
  echo >>"$results"
  echo "$pass passed, $fail failed" | tee -a "$results"
  cat "$results"
  [[ $fail == 0 ]]
}

case ${1-} in
  build) build "${2:?DIR}" ;;
  run) run "${2:?DIR}" "${3:?OUT}" ;;
  *) echo "usage: $0 build DIR | run DIR OUT" >&2; exit 2 ;;
esac
