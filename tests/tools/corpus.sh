#!/usr/bin/env bash
# Downloads the real-library corpus (pinned PyPI wheels of CUDA libraries
# nobody here wrote) into the git-ignored .cache/corpus/ and unpacks only the
# shared objects that carry device code. Idempotent: a second run only checks.
# Used by tests/corpus.rs (listing parity with cuobjdump) and the benchmark.
#
#   tests/tools/corpus.sh          the test corpus (~480 MB of wheels)
#   tests/tools/corpus.sh --bench  also cuBLAS 12.9 (581 MB wheel, 749 MB libcublasLt)
set -euo pipefail
cd "$(dirname "$0")/../.."
cache=$PWD/.cache/corpus
pip=${PIP:-.tools/venv/bin/pip}
mkdir -p "$cache/wheels" "$cache/lib"

# wheel spec | members to unpack (globs inside the wheel)
corpus=(
  "nvidia-curand-cu12==10.3.10.19|*/libcurand.so.10"
  "nvidia-curand==10.4.5.25|*/libcurand.so.10"
  "cupy-cuda12x==14.2.0|*.so"
  "nvidia-cufft-cu12==11.4.1.4|*/libcufft.so.11"
)
if [ "${1:-}" = --bench ]; then
  corpus+=("nvidia-cublas-cu12==12.9.3.13|*/libcublasLt.so.12")
fi

dests=()
for item in "${corpus[@]}"; do
  spec=${item%%|*}
  members=${item#*|}
  name=${spec%%==*}
  version=${spec#*==}
  dest=$cache/lib/$name-$version
  dests+=("$dest")
  if [ -e "$dest/.done" ]; then
    continue
  fi
  echo "corpus.sh: $spec"
  # For this machine's platform and Python (the venv's), as CI has.
  "$pip" download -q --disable-pip-version-check --no-deps --only-binary :all: \
    -d "$cache/wheels" "$spec"
  wheel=$(ls "$cache/wheels/$(echo "$name" | tr - _)-$version-"*.whl | head -n 1)
  rm -rf "$dest"
  mkdir -p "$dest"
  # shellcheck disable=SC2086  # members are globs for unzip
  unzip -q -o "$wheel" $members -d "$dest" || true
  # Flatten: keep each library under its own name, paths as in the wheel.
  n=$(find "$dest" -type f -name '*.so*' | wc -l)
  [ "$n" -gt 0 ] || { echo "corpus.sh: nothing unpacked from $wheel" >&2; exit 1; }
  touch "$dest/.done"
done
# The libraries of the chosen set only (the benchmark's cuBLAS is not a test input).
find "${dests[@]}" -type f -name '*.so*' | sort
