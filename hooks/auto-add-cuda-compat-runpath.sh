# shellcheck shell=bash
# autoAddCudaCompatRunpath (cudaPackages; Jetson, and x86_64/SBSA with
# enableCudaDriverCompat), a drop-in for Nixpkgs' hook of that name backed by
# the static `auto-add-driver-runpath` binary.
#
# Upstream's hook (pkgs/development/cuda-modules/packages/
# autoAddCudaCompatRunpath) returns at once unless it comes from
# nativeBuildInputs (hostOffset -1, targetOffset 0: in a cross build the build
# platform's hook, run over the host platform's outputs), appends
# "autoFixElfFiles addCudaCompatRunpath" to postFixupHooks, and its
# addCudaCompatRunpath runs `patchelf --set-rpath "<compat>:$old"` per file: a
# second pass after addDriverRunpath's entry (registered first), so that
# cuda_compat's libcuda.so is found before the driver's. Here: the same
# guard, the same entry in the same place, the same per-file function and
# messages; and nix-cuda-hooks' autoFixElfFiles wrapper
# (hooks/auto-fix-elf-files-driver-runpath.sh, propagated with this hook)
# reads nixCudaHooksCudaCompatDir, so the driver entry's run writes
# "<compat>:<driver>:<old>" in one rewrite and this entry's run changes
# nothing (the binary is idempotent). Alone, without the driver hook, this
# entry writes the same order.
#
# Differences from upstream, on purpose: the driver entry is always second
# (cuda_compat's libcuda needs the driver's own libraries from
# /run/opengl-driver/lib); sourcing it twice registers the entry once.

# Only from nativeBuildInputs, as upstream.
if ((${hostOffset:?} == -1 && ${targetOffset:?} == 0)); then
    echo "Sourcing auto-add-cuda-compat-runpath-hook"
else
    return 0
fi

if [[ -n ${autoAddCudaCompatRunpathHookSourced-} ]]; then
    if declare -F nixInfoLog >/dev/null; then
        nixInfoLog "skipping because the hook has been propagated more than once"
    fi
    return 0
fi
declare -g autoAddCudaCompatRunpathHookSourced=1

# Read by the autoFixElfFiles wrapper.
declare -g nixCudaHooksCudaCompatDir="@libcudaPath@"

postFixupHooks+=("autoFixElfFiles addCudaCompatRunpath")

# Upstream's per-file function, with its argument checks and messages, for
# Nixpkgs' autoFixElfFiles (when the wrapper is absent) and for derivations
# that call it by hand.
addCudaCompatRunpath() {
    if (($# == 0)); then
        echo "addCudaCompatRunpath: no library path provided" >&2
        exit 1
    elif (($# > 1)); then
        echo "addCudaCompatRunpath: too many arguments" >&2
        exit 1
    elif [[ -z ${1:-} ]]; then
        echo "addCudaCompatRunpath: empty library path" >&2
        exit 1
    fi
    "@autoAddDriverRunpath@" --in-place --cuda-compat "@libcudaPath@" -- "$1"
}
