#!/usr/bin/env bash
# The survey of issue 30 (item 7): the audit run, as a new user would run it,
# on real packages nobody here wrote and no test here uses; the result is
# docs/survey.md. Rerun it on any build to see what the checks say about the
# world, not about the test corpus:
#
#   benches/survey.sh [BIN_DIR]        BIN_DIR holds cuda-elf-inspect and
#                                      auto-add-driver-runpath (default:
#                                      target/release, built by the caller:
#                                      cargo build --release --locked)
#   SURVEY_CACHE=DIR                   downloads, unpacked store paths and the
#                                      run's outputs (default .cache/survey/,
#                                      ignored by git; ~9 GB)
#   SURVEY_CAPS='8.0;9.0'              the --cuda-capabilities of every audit
#   SURVEY_ONLY='id id...'             only these packages (development; the
#                                      doc then says it is partial)
#   SURVEY_DOC=FILE                    where the report goes (docs/survey.md)
#   SURVEY_REFRESH_DEBS=1              ask apt again for the Debian packages
#                                      (they drift: see below)
#   SURVEY_FETCH_ONLY=1                download and check the packages, then
#                                      stop (no binaries needed: start the
#                                      long downloads while cargo builds)
#
# Steps (each package alone, as its own Nix store path):
#   1. download, pinned: PyPI wheels by version and sha256 (pip checks the hash
#      with --require-hashes, then we check it again); Debian packages with a
#      private apt state in the cache (no change to this machine's sources or
#      architectures), from bookworm main + non-free. Debian replaces a version
#      in place with each point release, so a .deb is taken as apt serves it:
#      the version and sha256 it had are in the report, with the pin it was
#      expected to have;
#   2. lay each out as $cache/store/nix/store/<32-char hash>-<pname>-<version>
#      (NVIDIA's redist wheels flattened into lib/ as Nixpkgs' redist builder
#      does; Python wheels under lib/python3.11/site-packages; a .deb's
#      multiarch folder as lib/), once, kept between runs;
#   3. audit it (JSON with --dlopen-facts, and text), then run
#      auto-add-driver-runpath on a copy and audit the copy again: what the
#      issue calls "warnings nothing can clear" is what remains after the fix;
#   4. the loader oracle (benches/survey-oracle.c, built with cc here): every
#      dlopen-resolved / dlopen-unresolved finding of an x86_64 file is checked
#      against glibc's own search list for that caller (dlinfo RTLD_DI_SERINFO);
#   5. benches/survey.py writes the report and prints one summary line.
#
# Idempotent: a second run downloads and unpacks nothing, only audits.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=$(cd "${1:-target/release}" 2>/dev/null && pwd || echo "${1:-target/release}")
cache=$(mkdir -p "${SURVEY_CACHE:-.cache/survey}" && cd "${SURVEY_CACHE:-.cache/survey}" && pwd)
pip=${PIP:-$root/.tools/venv/bin/pip}
if [[ -z ${SURVEY_FETCH_ONLY:-} ]]; then
  for tool in cuda-elf-inspect auto-add-driver-runpath; do
    [[ -x $bin/$tool ]] || { echo "survey.sh: no $bin/$tool (cargo build --release --locked)" >&2; exit 2; }
  done
fi
for tool in cc dpkg-deb apt-get python3; do
  command -v "$tool" >/dev/null || { echo "survey.sh: $tool is missing" >&2; exit 2; }
done
[[ -x $pip ]] || { echo "survey.sh: no pip at $pip (tests/tools/install.sh makes .tools/venv)" >&2; exit 2; }
mkdir -p "$cache/wheels" "$cache/debs"
exec 9>"$cache/.lock"
flock -n 9 || { echo "survey.sh: another survey runs on $cache" >&2; exit 2; }

# id | source | spec | pin | layout | why it is in the survey
#   source wheel: spec `name==version`, pin `FILE SHA256`; layout `redist`
#                 (nvidia/*/lib/* into lib/) or `python` (site-packages), or
#                 `tree:ID,ID...` (a pip-installed tree: this wheel and those)
#   source deb:ARCH: spec a Debian package, pin `VERSION SHA256` as first
#                 fetched (the report says when apt serves another)
packages=(
  # --- CUDA 11.8: the oldest toolkit Nixpkgs still builds for.
  "cudart-11.8|wheel|nvidia-cuda-runtime-cu11==11.8.89|nvidia_cuda_runtime_cu11-11.8.89-py3-none-manylinux2014_x86_64.whl 92d04069a987e1fbc9213f8376d265df0f7bb42617d44f5eda1f496acea7f2d1|redist|a shared CUDA runtime of the 11 major: dlopens libcuda.so.1, no RUNPATH"
  "cufft-10.9|wheel|nvidia-cufft-cu11==10.9.0.58|nvidia_cufft_cu11-10.9.0.58-py3-none-manylinux2014_x86_64.whl e21037259995243cc370dd63c430d77ae9280bedb68d5b5a18226bfc92e5d748|redist|cuFFT of CUDA 11.8: no runtime inside, calls the driver by name"
  "cupti-11.8|wheel|nvidia-cuda-cupti-cu11==11.8.87|nvidia_cuda_cupti_cu11-11.8.87-py3-none-manylinux2014_x86_64.whl 4191a17913a706b5098681280cd089cd7d8d3df209a6f5cb79384974a96d24f2|redist|CUPTI: device code deep in .rodata, graphics-interop dlopens"
  "nvrtc-11.8|wheel|nvidia-cuda-nvrtc-cu11==11.8.89|nvidia_cuda_nvrtc_cu11-11.8.89-py3-none-manylinux2014_x86_64.whl a8d02f3cba345be56b1ffc3e74d8f61f02bb758dd31b0f20e12277a5a244f756|redist|NVRTC and its builtins library of 11.8"
  "cudnn-8.7|wheel|nvidia-cudnn-cu11==8.7.0.84|nvidia_cudnn_cu11-8.7.0.84-py3-none-manylinux1_x86_64.whl b3e062498fbbb1c1930435a6a454c1b41c903e1e65b7063bd2b4021e8285408e|redist|cuDNN 8: the sub-library split of 8.x (ops/cnn/adv infer/train)"
  # --- CUDA 12.x: the issue's own cases and the libraries PyTorch 2.x pulled in.
  "cudart-12.9|wheel|nvidia-cuda-runtime-cu12==12.9.79|nvidia_cuda_runtime_cu12-12.9.79-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 25bba2dfb01d48a9b59ca474a1ac43c6ebf7011f1b0b8cc44f54eb6ac48a96c3|redist|the issue's false clean: libcudart.so.12 dlopens libcuda.so.1 without a RUNPATH"
  "cufft-11.2|wheel|nvidia-cufft-cu12==11.2.1.3|nvidia_cufft_cu12-11.2.1.3-py3-none-manylinux2014_x86_64.whl f083fc24912aa410be21fa16d157fed2055dab1cc4b6934a0e03cba69eb242b9|redist|the version-bump pair with cuFFT 11.4 (baselines)"
  "cufft-11.4|wheel|nvidia-cufft-cu12==11.4.1.4|nvidia_cufft_cu12-11.4.1.4-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl c67884f2a7d276b4b80eb56a79322a95df592ae5e765cf1243693365ccab4e28|redist|the issue's false runs: no runtime inside, PTX ISA 7.0/7.8, dlopens libnvJitLink.so.12"
  "cupti-12.8|wheel|nvidia-cuda-cupti-cu12==12.8.90|nvidia_cuda_cupti_cu12-12.8.90-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl ea0cb07ebda26bb9b29ba82cda34849e73c166c18162d3913575b0c9db9a6182|redist|the issue's missed code (SASS at .rodata+0x5aa60) and its 18 driver-library warnings"
  "nvjitlink-12.9|wheel|nvidia-nvjitlink-cu12==12.9.86|nvidia_nvjitlink_cu12-12.9.86-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl e3f1171dbdc83c5932a45f0f4c99180a70de9bd2718c1ab77d14104f6d7147f9|redist|the JIT linker cuFFT and cuSPARSE dlopen or need"
  "curand-10.3.9|wheel|nvidia-curand-cu12==10.3.9.90|nvidia_curand_cu12-10.3.9.90-py3-none-manylinux_2_27_x86_64.whl b32331d4f4df5d6eefa0554c565b626c7216f87a06a4f56fab27c3b68a830ec9|redist|cuRAND of 12.8 (the corpus has 10.3.10, not this one)"
  "cusolver-11.7|wheel|nvidia-cusolver-cu12==11.7.3.90|nvidia_cusolver_cu12-11.7.3.90-py3-none-manylinux_2_27_x86_64.whl 4376c11ad263152bd50ea295c05370360776f8c3427b30991df774f9fb26c450|redist|cuSOLVER: NEEDs cuBLAS/cuSPARSE/nvJitLink of other wheels"
  "cusparse-12.5|wheel|nvidia-cusparse-cu12==12.5.8.93|nvidia_cusparse_cu12-12.5.8.93-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 1ec05d76bbbd8b61b06a80e1eaf8cf4959c3d4ce8e711b65ebd0443bb0ebb13b|redist|cuSPARSE: NEEDs nvJitLink from another wheel"
  "cudnn-9.10|wheel|nvidia-cudnn-cu12==9.10.2.21|nvidia_cudnn_cu12-9.10.2.21-py3-none-manylinux_2_27_x86_64.whl 949452be657fa16687d0930933f032835951ef0892b37d2d53824d1a84dc97a8|redist|cuDNN 9.10 (the issue's sm_90a sentence on libcudnn_adv.so.9)"
  "nccl-2.27|wheel|nvidia-nccl-cu12==2.27.3|nvidia_nccl_cu12-2.27.3-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl adf27ccf4238253e0b826bce3ff5fa532d65fc42322c8bfdfaf28024c0fbe039|redist|NCCL: table-only plugins, verbs, the forward-compat sentence"
  "nvshmem-3.3|wheel|nvidia-nvshmem-cu12==3.3.20|nvidia_nvshmem_cu12-3.3.20-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl d00f26d3f9b2e3c3065be895e3059d6479ea5c638a3f38c9fec49b1b9dd7c1e5|redist|NVSHMEM: bootstrap plugins loaded by name"
  "cusparselt-0.7|wheel|nvidia-cusparselt-cu12==0.7.1|nvidia_cusparselt_cu12-0.7.1-py3-none-manylinux2014_x86_64.whl f1bb701d6b930d5a7cea44c19ceb973311500847f81b634d802b7b539dc55623|redist|cuSPARSELt: a large single library, not part of the toolkit"
  "cupy-13.6|wheel|cupy-cuda12x==13.6.0|cupy_cuda12x-13.6.0-cp311-cp311-manylinux2014_x86_64.whl 77ba6745a130d880c962e687e4e146ebbb9014f290b0a80dbc4e4634eb5c3b48|python|CuPy 13 (the corpus has 14.2): Python extensions that dlopen the whole toolkit"
  "jax-plugin-0.7|wheel|jax-cuda12-plugin==0.7.2|jax_cuda12_plugin-0.7.2-cp311-cp311-manylinux_2_27_x86_64.whl adc924ebc7a45c8d3400ea0118dc70a7082b2a86e35711738d403dd3815d09bf|python|JAX's CUDA plugin: Python extensions around XLA"
  "jax-pjrt-0.7|wheel|jax-cuda12-pjrt==0.7.2|jax_cuda12_pjrt-0.7.2-py3-none-manylinux_2_27_x86_64.whl 3977726a2a332b0bd34831bdeb2b5653363442f3012c2996fc88080aaf6b3bad|python|JAX's PJRT plugin: one large library with its own device code"
  # --- CUDA 13: the toolkit PyTorch 2.11 installs (cuda-toolkit 13.0.2's pins).
  "cudart-13.0|wheel|nvidia-cuda-runtime==13.0.96|nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548|redist|the CUDA runtime of the 13 major"
  "cufft-12.0|wheel|nvidia-cufft==12.0.0.61|nvidia_cufft-12.0.0.61-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 6c44f692dce8fd5ffd3e3df134b6cdb9c2f72d99cf40b62c32dde45eea9ddad3|redist|cuFFT of CUDA 13"
  "cupti-13.0|wheel|nvidia-cuda-cupti==13.0.85|nvidia_cuda_cupti-13.0.85-py3-none-manylinux_2_25_x86_64.whl 4eb01c08e859bf924d222250d2e8f8b8ff6d3db4721288cf35d14252a4d933c8|redist|CUPTI of CUDA 13"
  "nvrtc-13.0|wheel|nvidia-cuda-nvrtc==13.0.88|nvidia_cuda_nvrtc-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl ad9b6d2ead2435f11cbb6868809d2adeeee302e9bb94bcf0539c7a40d80e8575|redist|NVRTC 13 and its builtins (a family that must match its release)"
  "nvjitlink-13.0|wheel|nvidia-nvjitlink==13.0.88|nvidia_nvjitlink-13.0.88-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl 13a74f429e23b921c1109976abefacc69835f2f433ebd323d3946e11d804e47b|redist|nvJitLink 13"
  "curand-10.4|wheel|nvidia-curand==10.4.0.35|nvidia_curand-10.4.0.35-py3-none-manylinux_2_27_x86_64.whl 1aee33a5da6e1db083fe2b90082def8915f30f3248d5896bcec36a579d941bfc|redist|cuRAND of CUDA 13.0"
  "cusolver-12.0|wheel|nvidia-cusolver==12.0.4.66|nvidia_cusolver-12.0.4.66-py3-none-manylinux_2_27_x86_64.whl 0a759da5dea5c0ea10fd307de75cdeb59e7ea4fcb8add0924859b944babf1112|redist|cuSOLVER of CUDA 13"
  "cusparse-12.6|wheel|nvidia-cusparse==12.6.3.3|nvidia_cusparse-12.6.3.3-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 2b3c89c88d01ee0e477cb7f82ef60a11a4bcd57b6b87c33f789350b59759360b|redist|cuSPARSE of CUDA 13"
  "cublas-13.1|wheel|nvidia-cublas==13.1.0.3|nvidia_cublas-13.1.0.3-py3-none-manylinux_2_27_x86_64.whl ee8722c1f0145ab246bccb9e452153b5e0515fd094c3678df50b2a0888b8b171|redist|cuBLAS/cuBLASLt 13: the largest device-code library; dlopens libcuda.so.1"
  "cudnn-9.19|wheel|nvidia-cudnn-cu13==9.19.0.56|nvidia_cudnn_cu13-9.19.0.56-py3-none-manylinux_2_27_x86_64.whl d20e1734305e9d68889a96e3f35094d733ff1f83932ebe462753973e53a572bf|redist|cuDNN 9.19: the version ladder and graph/engine sub-libraries"
  "nccl-2.28|wheel|nvidia-nccl-cu13==2.28.9|nvidia_nccl_cu13-2.28.9-py3-none-manylinux_2_18_x86_64.whl e4553a30f34195f3fa1da02a6da3d6337d28f2003943aa0a3d247bbc25fefc42|redist|NCCL for CUDA 13"
  "nvshmem-3.4|wheel|nvidia-nvshmem-cu13==3.4.5|nvidia_nvshmem_cu13-3.4.5-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl 290f0a2ee94c9f3687a02502f3b9299a9f9fe826e6d0287ee18482e78d495b80|redist|NVSHMEM for CUDA 13"
  "cusparselt-0.8|wheel|nvidia-cusparselt-cu13==0.8.0|nvidia_cusparselt_cu13-0.8.0-py3-none-manylinux2014_x86_64.whl 25e30a8a7323935d4ad0340b95a0b69926eee755767e8e0b1cf8dd85b197d3fd|redist|cuSPARSELt for CUDA 13"
  "torch-2.11|wheel|torch==2.11.0|torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl 7aa2f9bbc6d4595ba72138026b2074be1233186150e9292865e04b7a63b8c67a|tree:cudart-13.0,cufft-12.0,cupti-13.0,nvrtc-13.0,nvjitlink-13.0,curand-10.4,cusolver-12.0,cusparse-12.6,cublas-13.1,cudnn-9.19,nccl-2.28,nvshmem-3.4,cusparselt-0.8|PyTorch 2.11 (CUDA 13) with the NVIDIA wheels pip installs beside it: the issue's GPU-machine tree"
  # --- Debian bookworm: libraries that load the GPU driver or plugins by name.
  "libavutil|deb:amd64|libavutil57|7:5.1.9-0+deb12u1 3e2c42d9e7235c96cb0329dbe3c13377faaa5aba81ac2d6f3cf54fcd978c9a5f|deb|ffmpeg's util library: dlopens libcuda.so.1 (hwcontext_cuda)"
  "libavcodec|deb:amd64|libavcodec59|7:5.1.9-0+deb12u1 a1c6cfeefe7437ad3ff999d3dad39edb9cfd4d2068a944243fa4f313470b59b1|deb|ffmpeg's codecs: dlopen libnvcuvid.so.1 and libnvidia-encode.so.1 (nvdec/nvenc)"
  "mesa-dri|deb:amd64|libgl1-mesa-dri|22.3.6-1+deb12u2 350e4263aaacd521f6f757951262b57c003930edaf0419508f2c5675317577fe|deb|mesa's DRI megadriver: one inode under many hard-linked names"
  "mesa-egl|deb:amd64|libegl-mesa0|22.3.6-1+deb12u2 731a406af777d0606dc932da21c2214f189069caa437b8bb4063c328bab840ca|deb|mesa's EGL vendor library: dlopens the DRI drivers and GBM"
  "ocl-icd|deb:amd64|ocl-icd-libopencl1|2.3.1-1 ddd8509c0430545173752bed272c7f44f8b5f7d125265b20456207aaefbb52c8|deb|the OpenCL ICD loader: dlopens vendor ICDs named in /etc/OpenCL"
  "gnutls|deb:amd64|libgnutls30|3.7.9-2+deb12u7 30abec8c824feb1d2d7e9000a34083cccd19d139625e1b21547e3ac53b922f8e|deb|GnuTLS: dlopens optional crypto/TPM libraries; no device code"
  "curl|deb:amd64|libcurl4|7.88.1-10+deb12u15 3042904de01f9c4fbdcf1452b8f81abedcf2b015f9b9deba109063322b5bd68b|deb|curl: a plain library (a control: nothing to say about CUDA)"
  "libcuda1|deb:amd64|libcuda1|535.309.01-0+deb12u1 36b96d4b10d3a51573f56cae5a4ac9bcf206c1f2613bba7063793ab3da47305f|deb|NVIDIA's user-space driver (non-free): the library everything above dlopens"
  # --- Foreign machines: files this x86_64 audit cannot load (no --sysroot given).
  "gnutls-arm64|deb:arm64|libgnutls30|3.7.9-2+deb12u7 84f7f70084c9179d6670f4a6ebdf32adc36c6e4741a3a118104377e18cfa977f|deb|an aarch64 library audited on x86_64 without --sysroot"
  "ocl-icd-ppc64el|deb:ppc64el|ocl-icd-libopencl1|2.3.1-1 2bfdaf13c9aa9dcd2868e04184319a9f9a87edfbc7649f85f7535b87d8ceb42d|deb|a ppc64le library with dlopen targets, audited on x86_64"
)

only=" ${SURVEY_ONLY:-} "
wanted() { [[ $only == "  " || $only == *" $1 "* ]]; }
# A tree needs the wheels of its members too.
if [[ $only != "  " ]]; then
  for p in "${packages[@]}"; do
    IFS='|' read -r id _ _ _ layout _ <<<"$p"
    if wanted "$id" && [[ $layout == tree:* ]]; then
      only+="${layout#tree:} "
      only=${only//,/ }
    fi
  done
fi

# fetch_wheel SPEC FILE SHA256: $cache/wheels/FILE, checked. pip picks the
# file by the hash (--require-hashes), for this venv's Python (3.11) as
# tests/tools/corpus.sh does; a checked file gets a stamp so that later runs do
# not hash gigabytes again.
fetch_wheel() {
  local spec=$1 file=$2 sha=$3 tmp
  local wheel=$cache/wheels/$file
  if [[ -f $wheel && -f $wheel.ok && $wheel.ok -nt $wheel && $(cat "$wheel.ok") == "$sha" ]]; then
    return 0
  fi
  echo "survey.sh: downloading $spec ($file)" >&2
  tmp=$(mktemp -d "$cache/wheels/.download.XXXXXX")
  printf '%s --hash=sha256:%s\n' "$spec" "$sha" >"$tmp/req.txt"
  if ! "$pip" download -q --disable-pip-version-check --no-deps --only-binary :all: \
    --require-hashes -r "$tmp/req.txt" -d "$tmp" >&2; then
    rm -rf "$tmp"
    echo "survey.sh: pip could not download $spec with sha256 $sha" >&2
    return 1
  fi
  if [[ ! -f $tmp/$file ]] || ! echo "$sha  $tmp/$file" | sha256sum -c --status; then
    echo "survey.sh: pip's download of $spec is not $file with sha256 $sha: $(ls "$tmp")" >&2
    rm -rf "$tmp"
    return 1
  fi
  mv "$tmp/$file" "$wheel"
  echo "$sha" >"$wheel.ok"
  rm -rf "$tmp"
}

# apt: a private state in the cache (bookworm main + non-free, the three
# machines), so that neither this machine's sources nor its dpkg architectures
# change. Lists older than a day are fetched again only when a .deb is needed.
aptdir=$cache/apt
apt_opts=(-o "Dir::Etc::SourceList=$aptdir/sources.list" -o "Dir::Etc::SourceParts=$aptdir/none"
  -o "Dir::State::Lists=$aptdir/lists" -o "Dir::Cache=$aptdir/cache"
  -o APT::Architectures::=amd64 -o APT::Architectures::=arm64 -o APT::Architectures::=ppc64el
  -o APT::Sandbox::User=root -o Debug::NoLocking=1 -qq)
apt_ready=false
apt_update() {
  $apt_ready && return 0
  mkdir -p "$aptdir/lists/partial" "$aptdir/cache/archives/partial" "$aptdir/none"
  local mirror=${SURVEY_DEBIAN_MIRROR:-http://deb.debian.org}
  local key=/usr/share/keyrings/debian-archive-keyring.gpg
  cat >"$aptdir/sources.list" <<LIST
deb [signed-by=$key] $mirror/debian bookworm main non-free
deb [signed-by=$key] $mirror/debian bookworm-updates main non-free
deb [signed-by=$key] $mirror/debian-security bookworm-security main non-free
LIST
  if [[ -z $(find "$aptdir/lists" -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -n 1) ]]; then
    echo "survey.sh: apt-get update (private state in $aptdir)" >&2
    apt-get "${apt_opts[@]}" update >&2
  fi
  apt_ready=true
}

# fetch_deb PKG ARCH: prints the path of PKG:ARCH's .deb in $cache/debs,
# downloaded when there is none (or SURVEY_REFRESH_DEBS=1).
fetch_deb() {
  local pkg=$1 arch=$2 tmp deb
  for deb in "$cache/debs/${pkg}_"*"_$arch.deb"; do
    if [[ -f $deb && -z ${SURVEY_REFRESH_DEBS:-} ]] && dpkg-deb -I "$deb" >/dev/null 2>&1; then
      echo "$deb"
      return 0
    fi
  done
  apt_update
  echo "survey.sh: apt-get download $pkg:$arch" >&2
  tmp=$(mktemp -d "$cache/debs/.download.XXXXXX")
  if ! (cd "$tmp" && apt-get "${apt_opts[@]}" download "$pkg:$arch" >&2); then
    rm -rf "$tmp"
    echo "survey.sh: apt-get download $pkg:$arch failed" >&2
    return 1
  fi
  rm -f "$cache/debs/${pkg}_"*"_$arch.deb"
  for deb in "$tmp"/*.deb; do
    mv "$deb" "$cache/debs/"
    echo "$cache/debs/${deb##*/}"
  done
  rmdir "$tmp"
}

# The manifest survey.py reads: one line per package, tab-separated:
# id source spec file sha256 pinned layout why
manifest=$cache/manifest.tsv
: >"$manifest.new"
for p in "${packages[@]}"; do
  IFS='|' read -r id source spec pin layout why <<<"$p"
  wanted "$id" || continue
  read -r pin_a pin_sha <<<"$pin"
  if [[ $source == wheel ]]; then
    fetch_wheel "$spec" "$pin_a" "$pin_sha"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$source" "$spec" "$cache/wheels/$pin_a" \
      "$pin_sha" "$pin_sha" "$layout" "$why" >>"$manifest.new"
  else
    deb=$(fetch_deb "$spec" "${source#deb:}")
    sha=$(sha256sum "$deb" | cut -d' ' -f1)
    version=$(dpkg-deb -f "$deb" Version)
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$id" "$source" "$spec=$version" "$deb" \
      "$sha" "$pin_a $pin_sha" "$layout" "$why" >>"$manifest.new"
  fi
done
mv "$manifest.new" "$manifest"
if [[ -n ${SURVEY_FETCH_ONLY:-} ]]; then
  echo "survey.sh: $(wc -l <"$manifest") packages downloaded and checked in $cache (SURVEY_FETCH_ONLY)" >&2
  exit 0
fi

mkdir -p "$cache/run"
cc -O1 -Wall -o "$cache/run/survey-oracle" benches/survey-oracle.c -ldl
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain --untracked-files=no -- src Cargo.toml Cargo.lock 2>/dev/null | head -n 1)
exec python3 benches/survey.py --cache "$cache" --bin "$bin" --manifest "$manifest" \
  --caps "${SURVEY_CAPS:-8.0;9.0}" --commit "$commit${dirty:+ (with uncommitted changes to src)}" \
  --reasons benches/survey-reasons.tsv --doc "${SURVEY_DOC:-docs/survey.md}" \
  --partial "$([[ $only == "  " ]] && echo no || echo yes)"
