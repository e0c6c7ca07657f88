#!/usr/bin/env bash
# Issue 30 item 3: the reading rule measured on NVIDIA's library wheels of
# CUDA 11.8, 12.4, 12.8 and 13 (166 libraries, 15.3 GB unpacked; docs/reading-survey.md).
# Downloads the wheels (9.2 GB) into DIR/wheels, unpacks their shared objects into
# DIR/unpacked, then compares the default reading with --scan per file for each binary:
#
#   benches/reading-survey.sh DIR OLD_BIN NEW_BIN   (e.g. a build of 9d4e9fb and target/release)
#
# Writes DIR/survey-old.json, DIR/survey-new.json, DIR/times.json and prints the table.
set -euo pipefail
dir=$(realpath "$1") old=$(realpath "$2") new=$(realpath "$3")
here=$(cd "$(dirname "$0")" && pwd)
pip=${PIP:-$here/../.tools/venv/bin/pip}
mkdir -p "$dir/wheels" "$dir/unpacked"
specs=(
  nvidia-cuda-runtime-cu11==11.8.89 nvidia-cuda-cupti-cu11==11.8.87 nvidia-cuda-nvrtc-cu11==11.8.89
  nvidia-cublas-cu11==11.11.3.6 nvidia-cufft-cu11==10.9.0.58 nvidia-curand-cu11==10.3.0.86
  nvidia-cusolver-cu11==11.4.1.48 nvidia-cusparse-cu11==11.7.5.86 nvidia-npp-cu11==11.8.0.86
  nvidia-nvjpeg-cu11==11.9.0.86 nvidia-cudnn-cu11==8.9.6.50 nvidia-nccl-cu11==2.21.5
  nvidia-cuda-runtime-cu12==12.4.127 nvidia-cuda-cupti-cu12==12.4.127 nvidia-cuda-nvrtc-cu12==12.4.127
  nvidia-nvjitlink-cu12==12.4.127 nvidia-cublas-cu12==12.4.5.8 nvidia-cufft-cu12==11.2.1.3
  nvidia-curand-cu12==10.3.5.147 nvidia-cusolver-cu12==11.6.1.9 nvidia-cusparse-cu12==12.3.1.170
  nvidia-npp-cu12==12.2.5.30 nvidia-nvjpeg-cu12==12.3.1.117 nvidia-cudnn-cu12==8.9.2.26
  nvidia-cudnn-cu12==9.1.0.70 nvidia-nccl-cu12==2.21.5
  nvidia-cuda-runtime-cu12==12.8.90 nvidia-cuda-cupti-cu12==12.8.90 nvidia-cuda-nvrtc-cu12==12.8.93
  nvidia-nvjitlink-cu12==12.8.93 nvidia-cublas-cu12==12.8.4.1 nvidia-cufft-cu12==11.3.3.83
  nvidia-curand-cu12==10.3.9.90 nvidia-cusolver-cu12==11.7.3.90 nvidia-cusparse-cu12==12.5.8.93
  nvidia-npp-cu12==12.4.1.87 nvidia-nvjpeg-cu12==12.4.0.76 nvidia-cudnn-cu12==9.10.2.21
  nvidia-nccl-cu12==2.27.7
  nvidia-cuda-runtime==13.5.37 nvidia-cuda-cupti==13.5.25 nvidia-cuda-nvrtc==13.5.37
  nvidia-nvjitlink==13.5.37 nvidia-cublas==13.10.0.20 nvidia-cufft==12.5.0.14 nvidia-curand==10.4.5.25
  nvidia-cusolver==12.4.1.2 nvidia-cusparse==12.9.4.2 nvidia-npp==13.2.0.93 nvidia-nvjpeg==13.3.2.43
  nvidia-cudnn-cu13==9.28.1.4 nvidia-nccl-cu13==2.28.9
)
for spec in "${specs[@]}"; do
  name=$(echo "${spec%%==*}" | tr - _)
  compgen -G "$dir/wheels/$name-${spec#*==}-*.whl" >/dev/null ||
    "$pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$dir/wheels" "$spec"
done
for w in "$dir"/wheels/*.whl; do
  n=$(basename "$w" .whl)
  n=${n%%-py3*}
  [[ -e $dir/unpacked/$n/.done ]] && continue
  rm -rf "${dir:?}/unpacked/$n"
  mkdir -p "$dir/unpacked/$n"
  unzip -qo "$w" '*.so*' -d "$dir/unpacked/$n" || true
  touch "$dir/unpacked/$n/.done"
done
python3 "$here/reading-survey.py" survey "$dir/unpacked" "$old" "$dir/survey-old.json"
python3 "$here/reading-survey.py" survey "$dir/unpacked" "$new" "$dir/survey-new.json"
python3 "$here/reading-survey.py" times "$dir/unpacked" "$old" "$new" "$dir/times.json"
python3 "$here/reading-survey.py" table "$dir/survey-old.json" "$dir/survey-new.json" "$dir/times.json"
