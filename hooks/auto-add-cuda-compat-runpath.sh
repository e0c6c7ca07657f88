# shellcheck shell=bash
# autoAddCudaCompatRunpath (cudaPackages; Jetson, and x86_64/SBSA with
# enableCudaDriverCompat), backed by the static `auto-add-driver-runpath`
# binary of nix-cuda-hooks.
#
# Upstream's hook (pkgs/development/cuda-modules/packages/
# autoAddCudaCompatRunpath) does nothing unless it comes from
# nativeBuildInputs (hostOffset -1, targetOffset 0: in a cross build, the
# build platform's hook over the host platform's outputs), appends
# "autoFixElfFiles addCudaCompatRunpath" to postFixupHooks, and
# addCudaCompatRunpath then runs `patchelf --set-rpath "<compat>:$old"` on
# every dynamic ELF file: a second pass after addDriverRunpath's, which is
# registered first, so that cuda_compat's libcuda.so is found before the
# driver's. Same guard and same place here, but one rewrite per file: this
# hook tells the driver hook (hooks/auto-add-driver-runpath.sh) the compat
# folder, which then writes "<compat>:<driver>:<old>" at once; this hook's own
# postFixup run finds every file already so and changes nothing (the binary
# is idempotent). Without the driver hook this run writes the same order.
#
# Differences from upstream, on purpose: the driver entry is always second
# (cuda_compat's libcuda needs the driver's own libraries from
# /run/opengl-driver/lib); double inclusion is guarded; an opt-out,
# dontUseAutoAddCudaCompatRunpath, like the driver hook's (upstream has none).

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

autoAddCudaCompatRunpathFixup() {
    if [[ -n ${dontUseAutoAddCudaCompatRunpath-} ]]; then
        return 0
    fi
    "@autoAddDriverRunpath@" --in-place --cuda-compat "@libcudaPath@"
}

# Upstream's per-file entry point, with its argument checks and messages.
if ! declare -F addCudaCompatRunpath >/dev/null; then
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
fi

if [[ -z ${dontUseAutoAddCudaCompatRunpath-} ]]; then
    # Read by the driver hook's run: one rewrite for both.
    declare -g autoAddCudaCompatRunpathDir="@libcudaPath@"
    postFixupHooks+=(autoAddCudaCompatRunpathFixup)
fi
