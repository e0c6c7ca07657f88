#!/usr/bin/env bash
# The one downloader of the real-library corpus: pinned PyPI wheels of CUDA
# libraries nobody here wrote, fetched into the git-ignored .cache/corpus/ and
# unpacked (only the shared objects that matter). Prints the library files of
# the chosen sets, sorted. Idempotent: a second run only checks.
#
#   tests/tools/corpus.sh              the test set: curand12 curand13 cupy cufft
#   tests/tools/corpus.sh SET...       only these sets (e.g. `curand12` for the
#                                      quick benchmark, `cublaslt` for the full one)
#
# Safe to run concurrently (cargo runs tests in parallel; a benchmark may run
# beside them): one flock serialises the runs, a wheel is downloaded into a
# temporary folder and moved into place only once `unzip -t` accepts it, and a
# set's folder appears (by rename) only when completely unpacked. A damaged
# wheel left by an older, interrupted run is deleted and fetched again.
set -euo pipefail
cd "$(dirname "$0")/../.."
cache=$PWD/.cache/corpus
pip=${PIP:-.tools/venv/bin/pip}
mkdir -p "$cache/wheels" "$cache/lib"

# set | wheel spec | members to unpack (globs inside the wheel)
sets=(
  "curand12|nvidia-curand-cu12==10.3.10.19|*/libcurand.so.10"
  "curand13|nvidia-curand==10.4.5.25|*/libcurand.so.10"
  "cupy|cupy-cuda12x==14.2.0|*.so"
  "cufft|nvidia-cufft-cu12==11.4.1.4|*/libcufft.so.11"
  "cublaslt|nvidia-cublas-cu12==12.9.3.13|*/libcublasLt.so.12"
  "cudnn|nvidia-cudnn-cu12==9.28.0.42|*/libcudnn_ext.so.9"
)
wanted=("$@")
((${#wanted[@]})) || wanted=(curand12 curand13 cupy cufft)

exec 9>"$cache/.lock"
flock 9

# wheel_for SPEC: path of a verified wheel for SPEC, downloaded if needed.
wheel_for() {
  local spec=$1 name version pattern wheel tmp
  name=${spec%%==*}
  version=${spec#*==}
  pattern="$cache/wheels/$(echo "$name" | tr - _)-$version-*.whl"
  for wheel in $pattern; do
    [[ -f $wheel ]] || continue
    if unzip -tqq "$wheel" >/dev/null 2>&1; then
      echo "$wheel"
      return 0
    fi
    echo "corpus.sh: $wheel is damaged (an interrupted download?): fetching it again" >&2
    rm -f "$wheel"
  done
  echo "corpus.sh: downloading $spec" >&2
  tmp=$(mktemp -d "$cache/wheels/.download.XXXXXX")
  # For this machine's platform and Python (the venv's), as CI has.
  if ! "$pip" download -q --disable-pip-version-check --no-deps --only-binary :all: \
    -d "$tmp" "$spec" >&2; then
    rm -rf "$tmp"
    echo "corpus.sh: pip could not download $spec (needs PyPI and \`make tools\`)" >&2
    return 1
  fi
  for wheel in "$tmp"/*.whl; do
    if ! unzip -tqq "$wheel" >/dev/null 2>&1; then
      rm -rf "$tmp"
      echo "corpus.sh: the downloaded wheel of $spec is not a valid zip" >&2
      return 1
    fi
    mv "$wheel" "$cache/wheels/"
    echo "$cache/wheels/${wheel##*/}"
  done
  rm -rf "$tmp"
}

dests=()
for want in "${wanted[@]}"; do
  item=
  for s in "${sets[@]}"; do
    [[ ${s%%|*} == "$want" ]] && item=$s
  done
  [[ -n $item ]] || { echo "corpus.sh: unknown set '$want'" >&2; exit 2; }
  rest=${item#*|}
  spec=${rest%%|*}
  members=${rest#*|}
  dest=$cache/lib/${spec%%==*}-${spec#*==}
  dests+=("$dest")
  [[ -e $dest/.done ]] && continue
  wheel=$(wheel_for "$spec")
  rm -rf "$dest" "$dest.partial"
  mkdir -p "$dest.partial"
  # shellcheck disable=SC2086  # members are globs for unzip
  unzip -q -o "$wheel" $members -d "$dest.partial"
  n=$(find "$dest.partial" -type f -name '*.so*' | wc -l)
  [[ $n -gt 0 ]] || { echo "corpus.sh: no '$members' in $wheel" >&2; exit 1; }
  touch "$dest.partial/.done"
  mv "$dest.partial" "$dest"
done
find "${dests[@]}" -type f -name '*.so*' | sort
