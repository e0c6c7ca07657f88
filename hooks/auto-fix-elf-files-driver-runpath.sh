# shellcheck shell=bash
# Makes "autoFixElfFiles addDriverRunpath" (the postFixupHooks entry of
# autoAddDriverRunpath, ours and upstream's) one run of the static
# `auto-add-driver-runpath` binary over all outputs, in place of Nixpkgs'
# find + isELF + two patchelf processes per file. nix/hooks.nix propagates it
# after Nixpkgs' addDriverRunpath and autoFixElfFiles, and setup.sh sources
# propagated inputs in that order, so this wraps their autoFixElfFiles:
#   autoFixElfFiles addDriverRunpath  the binary, while addDriverRunpath is
#                                     still Nixpkgs' function (the driver
#                                     link is read from it);
#   any other call                    Nixpkgs' autoFixElfFiles, unchanged
#                                     (e.g. "autoFixElfFiles addCudaCompatRunpath").
# A derivation that redefines addDriverRunpath gets upstream's path with its
# own function, as with upstream's hook.

if [[ -n ${autoFixElfFilesDriverRunpathSourced-} ]]; then
    return 0
fi
declare -g autoFixElfFilesDriverRunpathSourced=1

if declare -F autoFixElfFiles >/dev/null; then
    # Keep Nixpkgs' function under another name (its body, verbatim).
    __nchAutoFixElfFilesDef=$(declare -f autoFixElfFiles)
    eval "nixCudaHooksUpstreamAutoFixElfFiles ${__nchAutoFixElfFilesDef#autoFixElfFiles }"
    unset __nchAutoFixElfFilesDef
fi

# Prints the driver link of Nixpkgs' addDriverRunpath function (the folder
# whose lib/ it prepends); fails when the function is not recognisably that.
nixCudaHooksDriverLink() {
    local def re='patchelf --set-rpath "([^"$]+)/lib:\$origRpath"'
    def=$(declare -f addDriverRunpath) || return 1
    [[ $def =~ $re ]] || return 1
    echo "${BASH_REMATCH[1]}"
}

autoFixElfFiles() {
    local link
    if [[ $# -eq 1 && $1 == addDriverRunpath ]] && link=$(nixCudaHooksDriverLink); then
        local -r bin="@autoAddDriverRunpath@"
        if [[ ! -x $bin ]]; then
            echo "autoFixElfFiles: ERROR: the auto-add-driver-runpath binary '$bin' is not executable;" \
                "install this hook through nix-cuda-hooks' nix/hooks.nix (makeSetupHook substitutes the path)" >&2
            exit 2
        fi
        # The binary reads the outputs itself ($outputs and each output's
        # variable, or the structured attributes file). --in-place: inside a
        # build nothing else uses the outputs, so writable files are patched
        # in place (append, verify, one header write; no copy).
        NIX_LOG_FD="${NIX_LOG_FD-}" NIX_DEBUG="${NIX_DEBUG-}" __structuredAttrs="${__structuredAttrs-}" \
            "$bin" --in-place --driver-link "$link" || exit $?
        return 0
    fi
    if ! declare -F nixCudaHooksUpstreamAutoFixElfFiles >/dev/null; then
        echo "autoFixElfFiles: ERROR: Nixpkgs' autoFixElfFiles was not sourced before" \
            "nix-cuda-hooks' auto-fix-elf-files-driver-runpath hook (nix/hooks.nix propagates both, in order)" >&2
        exit 2
    fi
    nixCudaHooksUpstreamAutoFixElfFiles "$@"
}
