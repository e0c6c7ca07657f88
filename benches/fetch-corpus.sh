#!/usr/bin/env bash
# Downloads the real-library corpus (PyPI wheels with CUDA libraries nobody
# here wrote) into .cache/wheels/ (git-ignored), once. Used by the opt-in
# tests `cargo test --release -- --ignored` (the benchmark, compare.sh, fetches
# its own inputs into .cache/bench).
#   nvidia-cublas-cu12   libcublasLt.so.12: 715 MiB, 5,839 cubins, LZ4 + ZSTD
#   nvidia-curand-cu12   libcurand.so.10: 143 cubins, raw ELF + LZ4 PTX
#   cupy-cuda12x         Python extension modules with fatbins (LZ4)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=.cache/wheels
mkdir -p "$dest"
pip=(python3 -m pip)
[ -x .tools/venv/bin/pip ] && pip=(.tools/venv/bin/pip)
fetch() {
  ls "$dest"/"$1"-* >/dev/null 2>&1 && return 0
  "${pip[@]}" download -q --disable-pip-version-check --no-deps --only-binary :all: \
    "${@:3}" -d "$dest" "$2"
}
fetch nvidia_cublas_cu12 nvidia-cublas-cu12==12.9.3.13
fetch nvidia_curand_cu12 nvidia-curand-cu12==10.3.10.19
fetch cupy_cuda12x cupy-cuda12x==14.2.0 --python-version 3.11 --platform manylinux2014_x86_64
ls -la "$dest"/*.whl
