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

# set | wheel spec | members to unpack (globs inside the wheel) [| pip platform]
# A set with a platform is for another machine (cross builds: aarch64 SBSA and
# Jetson wheels); without one, for this machine.
# A spec `deb:ARCH` is a Debian package set instead: the members are package
# names, fetched with `apt-get download` for that architecture (multiarch,
# `dpkg --add-architecture`) from this machine's Debian release; their shared
# libraries are unpacked. `deb:ARCH:SUITE/COMPONENT` fetches from that
# suite and component of deb.debian.org instead, through a private apt
# configuration under .cache/corpus/apt (the machine's own sources and
# lists are left alone).
sets=(
  "curand12|nvidia-curand-cu12==10.3.10.19|*/libcurand.so.10"
  "curand13|nvidia-curand==10.4.5.25|*/libcurand.so.10"
  "cupy|cupy-cuda12x==14.2.0|*.so"
  "cufft|nvidia-cufft-cu12==11.4.1.4|*/libcufft.so.11"
  "cublaslt|nvidia-cublas-cu12==12.9.3.13|*/libcublasLt.so.12"
  "curand12-aarch64|nvidia-curand-cu12==10.3.10.19|*/libcurand.so.10|manylinux_2_27_aarch64"
  "cupti12-aarch64|nvidia-cuda-cupti-cu12==12.8.90|*.so*|manylinux2014_aarch64"
  "deb-arm64|deb:arm64|zlib1g libzstd1 libffi8 libgomp1 libssl3 libstdc++6"
  "deb-armhf|deb:armhf|zlib1g libzstd1 libffi8 libgomp1 libssl3 libstdc++6"
  "deb-ppc64el|deb:ppc64el|zlib1g libzstd1 libffi8 libgomp1 libssl3 libstdc++6"
  "deb-s390x|deb:s390x|zlib1g libzstd1 libffi8 libgomp1 libssl3 libstdc++6"
  "cudnn|nvidia-cudnn-cu12==9.28.0.42|*/libcudnn_ext.so.9"
  # issue 21 (dlopen): the libraries the GPU run of tests/gpu/dlopen_workloads.py
  # watched load others, at the versions it ran (cuDNN 9.19.0.56, NCCL 2.28.9,
  # NVRTC 13.0.88: /work/gt/libs.txt of that run, kept in tests/data/dlopen-observed.tsv)
  "cudnn-full|nvidia-cudnn-cu13==9.19.0.56|*/libcudnn.so.9 */libcudnn_graph.so.9 */libcudnn_heuristic.so.9 */libcudnn_engines_runtime_compiled.so.9"
  "nvrtc13|nvidia-cuda-nvrtc==13.0.88|*/libnvrtc.so.13 */libnvrtc-builtins.so.13.0"
  "nccl|nvidia-nccl-cu13==2.28.9|*/libnccl.so.2"
  # issue 21 (the dlopen fix on this machine): procps' libproc2 dlopens
  # libnuma.so, then libnuma.so.1 (`ps -o numa`); this machine's own packages
  "deb-dlopen|deb:amd64|libproc2-0 libnuma1"
  # issue 30 (the reading rule): CUPTI keeps 3 containers (42 cubins) in the
  # middle of its 0.6 MB .rodata, where the old default's probes did not look
  "cupti12|nvidia-cuda-cupti-cu12==12.8.90|*/libcupti.so.12"
  # issue 30 (no false clean, no false runs): the shared CUDA 12.9 runtime, which
  # dlopens libcuda.so.1, and Debian's ffmpeg libraries, which dlopen libcuda.so.1,
  # libnvcuvid.so.1 and libnvidia-encode.so.1 (a Debian package pinned as
  # NAME=VERSION: the version bookworm serves)
  "cudart12|nvidia-cuda-runtime-cu12==12.9.79|*/libcudart.so.12"
  "deb-ffmpeg|deb:amd64|libavutil57=7:5.1.9-0+deb12u1 libavcodec59=7:5.1.9-0+deb12u1"
  "cudnn910|nvidia-cudnn-cu12==9.10.2.21|*/libcudnn_adv.so.9"
  # issue 32 (cuda-preflight): the driver's user-space libraries of two
  # releases, from Debian's non-free component (bookworm 535, trixie 550):
  # the symbol-by-symbol check reads their .dynsym; never loaded
  "libcuda535|deb:amd64:bookworm/non-free|libcuda1=535.261.03-1 libnvidia-ptxjitcompiler1=535.261.03-1"
  "libcuda550|deb:amd64:trixie/non-free|libcuda1=550.163.01-2 libnvidia-ptxjitcompiler1=550.163.01-2"
  # issue 30 (a dlopen target of another release): cuDNN 9.14, the release the
  # GPU machine's default folders held when PyTorch's cuDNN 9.19 picked up its
  # sub-libraries there; beside cudnn-full (9.19) it makes the Nix-style split
  "cudnn914|nvidia-cudnn-cu13==9.14.0.64|*/libcudnn.so.9 */libcudnn_graph.so.9 */libcudnn_ops.so.9 */libcudnn_cnn.so.9 */libcudnn_adv.so.9 */libcudnn_heuristic.so.9"
)
# sha256 of a wheel, by spec (and platform): a wheel that differs is refused.
declare -A pinned=(
  ["nvidia-cuda-cupti-cu12==12.8.90"]=ea0cb07ebda26bb9b29ba82cda34849e73c166c18162d3913575b0c9db9a6182
  ["nvidia-cuda-runtime-cu12==12.9.79"]=25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3
  ["nvidia-cudnn-cu12==9.10.2.21"]=949452be657fa16687d0930933f032835951ef0892b37d2d53824d1a84dc97a8
  ["nvidia-cudnn-cu13==9.14.0.64"]=024ce8f7571d322991ecadbe82907df2e89b5f36597d03436413ec6dd7c9fe54
)

# check_pin SPEC PLATFORM WHEEL: fails when SPEC has a pinned sha256 that WHEEL lacks.
check_pin() {
  local want=${pinned[$1${2:+|$2}]:-} got
  [[ -n $want ]] || return 0
  got=$(sha256sum "$3" | cut -d' ' -f1)
  [[ $got == "$want" ]] && return 0
  echo "corpus.sh: $3 has sha256 $got, not the pinned $want" >&2
  return 1
}
wanted=("$@")
((${#wanted[@]})) || wanted=(curand12 curand13 cupy cufft)

exec 9>"$cache/.lock"
flock 9

# wheel_for SPEC [PLATFORM]: path of a verified wheel for SPEC, downloaded if needed.
wheel_for() {
  local spec=$1 platform=${2:-} name version pattern wheel tmp
  local -a where=()
  name=${spec%%==*}
  version=${spec#*==}
  # The machine is the last part of a wheel's platform tag.
  if [[ -n $platform ]]; then
    where=(--platform "$platform")
    pattern="$cache/wheels/$(echo "$name" | tr - _)-$version-*_${platform##*_}.whl"
  else
    pattern="$cache/wheels/$(echo "$name" | tr - _)-$version-*_$(uname -m).whl"
  fi
  for wheel in $pattern; do
    [[ -f $wheel ]] || continue
    if unzip -tqq "$wheel" >/dev/null 2>&1 && check_pin "$spec" "$platform" "$wheel"; then
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
    ${where[@]+"${where[@]}"} -d "$tmp" "$spec" >&2; then
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
    if ! check_pin "$spec" "$platform" "$wheel"; then
      rm -rf "$tmp"
      return 1
    fi
    mv "$wheel" "$cache/wheels/"
    echo "$cache/wheels/${wheel##*/}"
  done
  rm -rf "$tmp"
}

# debs_for ARCH DEST PACKAGE...: the packages' shared libraries unpacked
# into DEST (as DEST/<package>/...). Adds the architecture and refreshes the
# package lists when this machine does not know it yet (as root, under the
# apt lock the test tools share).
debs_for() {
  local arch=$1 dest=$2 tmp pkg want apt=()
  shift 2
  if [[ $arch == *:* ]]; then
    # A suite and component of Debian's archive, read through private lists.
    local where=${arch#*:} dir
    arch=${arch%%:*}
    dir=$cache/apt/${where//\//-}
    mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
    echo "deb [arch=$arch signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian ${where%%/*} ${where#*/}" >"$dir/sources.list"
    apt=(-o "Dir::Etc::SourceList=$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
      -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache")
    if ! ls "$dir/lists/"*Packages* >/dev/null 2>&1; then
      apt-get "${apt[@]}" -o APT::Sandbox::User=root update -qq >&2
    fi
  elif [[ $arch != "$(dpkg --print-architecture)" ]] &&
    { ! dpkg --print-foreign-architectures | grep -qx "$arch" ||
      ! apt-cache show "zlib1g:$arch" >/dev/null 2>&1; }; then
    echo "corpus.sh: adding the $arch architecture to apt" >&2
    flock /var/lock/nch-apt.lock dpkg --add-architecture "$arch"
    flock /var/lock/nch-apt.lock apt-get -o APT::Sandbox::User=root update -qq >&2
  fi
  tmp=$(mktemp -d "$cache/.deb.XXXXXX")
  for pkg in "$@"; do
    # NAME=VERSION pins a version: apt spells it NAME:ARCH=VERSION.
    if [[ $pkg == *=* ]]; then want="${pkg%%=*}:$arch=${pkg#*=}"; else want="$pkg:$arch"; fi
    if ! (cd "$tmp" && apt-get ${apt[@]+"${apt[@]}"} -o APT::Sandbox::User=root download -qq "$want" >&2); then
      rm -rf "$tmp"
      echo "corpus.sh: apt-get download $pkg:$arch failed" >&2
      return 1
    fi
  done
  for deb in "$tmp"/*.deb; do
    pkg=${deb##*/}
    dpkg-deb -x "$deb" "$dest/${pkg%%_*}"
  done
  rm -rf "$tmp"
  # Only the shared libraries matter; documentation and the rest go.
  find "$dest" -type f \( ! -name '*.so*' -o -name '*.py' \) -delete
}

dests=()
for want in "${wanted[@]}"; do
  item=
  for s in "${sets[@]}"; do
    [[ ${s%%|*} == "$want" ]] && item=$s
  done
  [[ -n $item ]] || { echo "corpus.sh: unknown set '$want'" >&2; exit 2; }
  IFS='|' read -r _ spec members platform <<<"$item"
  if [[ $spec == deb:* ]]; then
    dest=$cache/lib/$want
  else
    dest=$cache/lib/${spec%%==*}-${spec#*==}${platform:+-${platform##*_}}
  fi
  dests+=("$dest")
  [[ -e $dest/.done ]] && continue
  rm -rf "$dest" "$dest.partial"
  mkdir -p "$dest.partial"
  if [[ $spec == deb:* ]]; then
    debs_for "${spec#deb:}" "$dest.partial" $members
  else
    wheel=$(wheel_for "$spec" "$platform")
    # shellcheck disable=SC2086  # members are globs for unzip
    unzip -q -o "$wheel" $members -d "$dest.partial"
  fi
  n=$(find "$dest.partial" -type f -name '*.so*' | wc -l)
  [[ $n -gt 0 ]] || { echo "corpus.sh: no '$members' in $wheel" >&2; exit 1; }
  touch "$dest.partial/.done"
  mv "$dest.partial" "$dest"
done
find "${dests[@]}" -type f -name '*.so*' | sort
