# shellcheck shell=bash
# autoAddDriverRunpath, backed by the static `auto-add-driver-runpath` binary
# of nix-cuda-hooks. Sourced by setup.sh when the package carrying it is in
# nativeBuildInputs. Registers one postFixup hook (postFixup, not fixupOutput,
# so that `patchelf --shrink-rpath` has already run and cannot drop the driver
# entry again), like upstream's "autoFixElfFiles addDriverRunpath".
#
# Differences from upstream, on purpose: double inclusion is guarded; the
# opt-out is also checked when the hook runs, so a derivation may set it in a
# phase. The binary reads the outputs itself ($outputs or structured attrs).
# --in-place: inside a build nothing else uses the outputs, so writable files
# are patched in place (append, verify, one header write; no copy), the
# others through a temporary file and a rename.

echo "Sourcing auto-add-driver-runpath-hook"

if [[ -n ${autoAddDriverRunpathHookSourced-} ]]; then
    if declare -F nixInfoLog >/dev/null; then
        nixInfoLog "skipping because the hook has been propagated more than once"
    fi
    return 0
fi
declare -g autoAddDriverRunpathHookSourced=1

if [[ -n ${dontUseAutoAddOpenGLRunpath-} ]]; then
    echo "dontUseAutoAddOpenGLRunpath is deprecated, use dontUseAutoAddDriverRunpath instead"
fi

autoAddDriverRunpathFixup() {
    if [[ -n ${dontUseAutoAddDriverRunpath-} || -n ${dontUseAutoAddOpenGLRunpath-} ]]; then
        return 0
    fi
    # With autoAddCudaCompatRunpath (ours) in the build too: its folder
    # first, the driver second, in this one rewrite.
    local -a compat=()
    if [[ -n ${autoAddCudaCompatRunpathDir-} && -z ${dontUseAutoAddCudaCompatRunpath-} ]]; then
        compat=(--cuda-compat "$autoAddCudaCompatRunpathDir")
    fi
    "@autoAddDriverRunpath@" --in-place "${compat[@]}"
}

# Upstream's hook propagates addDriverRunpath, whose shell function some
# derivations call by hand on chosen files (`addDriverRunpath $out/bin/x`,
# optionally `--force-rpath`). Offer the same entry point unless the real one
# is already defined.
if ! declare -F addDriverRunpath >/dev/null; then
    addDriverRunpath() {
        local -a flags=()
        while [[ $# -gt 0 ]]; do
            case $1 in
            --) shift; break ;;
            --force-rpath) flags+=(--force-rpath); shift ;;
            --*)
                echo "addDriverRunpath: ERROR: Invalid command line argument: $1" >&2
                return 1
                ;;
            *) break ;;
            esac
        done
        # Upstream skips what is not an ELF file, a missing one (an unmatched
        # glob) included.
        local -a files=()
        local f
        for f in "$@"; do
            [[ -f $f ]] && files+=("$f")
        done
        [[ ${#files[@]} -gt 0 ]] || return 0
        "@autoAddDriverRunpath@" --in-place "${flags[@]}" -- "${files[@]}"
    }
fi

if [[ -z ${dontUseAutoAddDriverRunpath-} && -z ${dontUseAutoAddOpenGLRunpath-} ]]; then
    echo "Using autoAddDriverRunpath"
    postFixupHooks+=(autoAddDriverRunpathFixup)
fi
