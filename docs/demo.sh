#!/usr/bin/env bash
# `make demo`: the whole suite on real CUDA device code, no GPU needed.
#
# Fetches one small pinned wheel from PyPI (nvidia-nvjpeg-cu12 12.3.5.92,
# 4.3 MB: libnvjpeg.so.12, NVIDIA's build, SASS for sm_50..sm_120 and PTX),
# checks its sha256, lays it out as a Nix output in a throw-away store, then:
#   1. audits it (cuda-elf-inspect) for the capabilities 8.6 and 9.0;
#   2. fixes the RUNPATH finding (auto-add-driver-runpath);
#   3. audits again: the finding is gone;
#   4. lists its cubins like cuobjdump --list-elf;
#   5. checks the output's symlinks as a Nix build would (no-broken-symlinks),
#      finds a dangling one, removes it, checks again.
# The wheel is cached in .cache/demo/; later runs need no network.
set -euo pipefail
bin=$(cd "${1:?usage: demo.sh BIN_DIR}" && pwd)
cd "$(dirname "$0")/.."
cache=$PWD/.cache/demo
wheel_name=nvidia_nvjpeg_cu12-12.3.5.92-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
url=https://files.pythonhosted.org/packages/7e/bb/f38342c276289f6f35442188ab45152473d7a8cabb687bba19e7d4918281/$wheel_name
sha256=253056503901a68dc00e29508ebf40362c3da04b9b9366ee32ef56909e0fc0d3
wheel=$cache/$wheel_name

step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "$2"; }
# Runs a tool, shows its exit status, never stops the demo on a finding.
show() {
  local rc=0
  "$@" || rc=$?
  echo "(exit status $rc)"
}

mkdir -p "$cache"
if ! echo "$sha256  $wheel" | sha256sum -c --status 2>/dev/null; then
  echo "downloading $wheel_name (4.3 MB) from PyPI"
  tmp=$(mktemp "$cache/.download.XXXXXX")
  if command -v curl >/dev/null; then
    curl -fsSL --retry 3 -o "$tmp" "$url"
  else
    wget -q -O "$tmp" "$url"
  fi
  echo "$sha256  $tmp" | sha256sum -c --status || {
    rm -f "$tmp"
    echo "demo.sh: the download does not have the pinned sha256" >&2
    exit 2
  }
  mv "$tmp" "$wheel"
fi

demo=$(mktemp -d)
trap 'rm -rf "$demo"' EXIT
store=$demo/nix/store
out=$store/q8bkzgxzzxd6mw0y9yv2xcw1l4b2c6ny-libnvjpeg-12.3.5.92
mkdir -p "$out/lib" "$out/include" "$out/share/doc" "$demo/build"
python3 - "$wheel" "$out" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for member, dest in [("nvidia/nvjpeg/lib/libnvjpeg.so.12", "lib/libnvjpeg.so.12"),
                         ("nvidia/nvjpeg/include/nvjpeg.h", "include/nvjpeg.h")]:
        with z.open(member) as src, open(f"{sys.argv[2]}/{dest}", "wb") as dst:
            dst.write(src.read())
PY
chmod 755 "$out/lib/libnvjpeg.so.12"
ln -s libnvjpeg.so.12 "$out/lib/libnvjpeg.so"
# A link into a folder the packaging forgot to copy: a broken symlink.
ln -s ../../share/licenses/nvjpeg/LICENSE "$out/share/doc/LICENSE"
lib=$out/lib/libnvjpeg.so.12
short() { sed "s|$store/|/nix/store/|g"; }

step "1. audit the output for capabilities 8.6 and 9.0" \
  "cuda-elf-inspect --cuda-capabilities '8.6;9.0' \$out"
show "$bin/cuda-elf-inspect" --color never --cuda-capabilities '8.6;9.0' "$out" | short

step "2. fix the RUNPATH (what autoAddDriverRunpath does in a build)" \
  "auto-add-driver-runpath --check \$out; auto-add-driver-runpath \$out"
show "$bin/auto-add-driver-runpath" --check "$out" | short
show "$bin/auto-add-driver-runpath" "$out" 2>&1 | short
readelf -d "$lib" | grep -E 'RUNPATH|RPATH' | sed 's/^ *//'

step "3. audit again: missing-driver-runpath is gone" \
  "cuda-elf-inspect --cuda-capabilities '8.6;9.0' \$out"
show "$bin/cuda-elf-inspect" --color never --cuda-capabilities '8.6;9.0' "$out" | short

step "4. the cubins, listed like cuobjdump --list-elf" "cuda-elf-inspect --list-elf \$out/lib/libnvjpeg.so.12 | head -n 5"
{ "$bin/cuda-elf-inspect" --list-elf "$lib" || true; } | head -n 5

step "5. broken symlinks, checked as a Nix build does (NIX_LOG_FD=2 NIX_DEBUG=1)" \
  "no-broken-symlinks   # in a build: outputs=out out=\$out"
export NIX_STORE=$store TMPDIR=$demo/build outputs=out out=$out
NIX_LOG_FD=2 NIX_DEBUG=1 show "$bin/no-broken-symlinks" 2>&1 | short
rm "$out/share/doc/LICENSE"
echo "\$ rm \$out/share/doc/LICENSE; no-broken-symlinks"
NIX_LOG_FD=2 NIX_DEBUG=1 show "$bin/no-broken-symlinks" 2>&1 | short
