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

# Sourced again: nothing to do while autoFixElfFiles is still ours. Nixpkgs'
# auto-fix-elf-files.sh sourced in between (propagated by a hook listed in
# buildInputs, e.g. autoAddCudaCompatRunpath, whose guard then registers
# nothing) has redefined it: wrap that one again.
if [[ -n ${autoFixElfFilesDriverRunpathSourced-} ]] &&
    [[ $(declare -f autoFixElfFiles) == *nixCudaHooksDriverLink* ]]; then
    return 0
fi
declare -g autoFixElfFilesDriverRunpathSourced=1

# One postFixupHooks entry for every RUNPATH fix (docs/nix.md, "One RUNPATH
# pass"): at preFixup, after every prePhase (removeStubsFromRunpathHook
# registers its entry in one), the entries below are replaced by one entry,
# nixCudaHooksFixRunpaths, at the place of the last of them (after
# autoPatchelf however the hooks were listed), which runs the binary once
# with every fix they ask for:
#   autoFixElfFiles addDriverRunpath        the driver entry (ours or Nixpkgs')
#   autoFixElfFiles addCudaCompatRunpath    --cuda-compat (ours or Nixpkgs')
#   autoFixElfFiles removeStubsFromRunpath  --remove-stubs (Nixpkgs')
# Only when the driver entry or our compat entry is among them: Nixpkgs'
# removeStubsFromRunpath alone keeps its own run (it puts the driver entry in
# the stubs entry's place, where the binary, which always adds the driver
# entry, puts it first).
preFixupHooks+=(nixCudaHooksOneRunpathEntry)
declare -ga nixCudaHooksRunpathFixes=()

nixCudaHooksOneRunpathEntry() {
    local hook driver=
    local -a kept=() fixes=()
    local -i at=-1
    for hook in "${postFixupHooks[@]}"; do
        case $hook in
        "autoFixElfFiles addDriverRunpath" | "autoFixElfFiles addCudaCompatRunpath" | "autoFixElfFiles removeStubsFromRunpath")
            [[ $hook == *removeStubsFromRunpath ]] || driver=1
            fixes+=("${hook#autoFixElfFiles }")
            at=${#kept[@]}
            ;;
        *) kept+=("$hook") ;;
        esac
    done
    ((at >= 0)) && [[ -n $driver ]] || return 0
    nixCudaHooksRunpathFixes=("${fixes[@]}")
    postFixupHooks=("${kept[@]:0:at}" nixCudaHooksFixRunpaths "${kept[@]:at}")
    if declare -F nixInfoLog >/dev/null; then
        nixInfoLog "one entry, nixCudaHooksFixRunpaths, for: ${fixes[*]}"
    fi
}

# The folder of Nixpkgs' addCudaCompatRunpath function (the one it puts
# first); fails when the function is not recognisably that.
nixCudaHooksUpstreamCompatDir() {
    local def re='patchelf --set-rpath "([^"$]+):\$origRpath"'
    def=$(declare -f addCudaCompatRunpath) || return 1
    [[ $def =~ $re ]] || return 1
    echo "${BASH_REMATCH[1]}"
}

# The one entry: every fix of nixCudaHooksRunpathFixes in one run, one
# rewrite per file.
nixCudaHooksFixRunpaths() {
    local -r bin="@autoAddDriverRunpath@"
    local -a flags=(--in-place)
    local fix link dir
    if link=$(nixCudaHooksDriverLink); then
        flags+=(--driver-link "$link")
    fi
    for fix in "${nixCudaHooksRunpathFixes[@]}"; do
        case $fix in
        removeStubsFromRunpath) flags+=(--remove-stubs) ;;
        addCudaCompatRunpath)
            dir=${nixCudaHooksCudaCompatDir-}
            [[ -n $dir ]] || dir=$(nixCudaHooksUpstreamCompatDir) || {
                echo "nixCudaHooksFixRunpaths: ERROR: cannot read the cuda_compat folder of addCudaCompatRunpath" >&2
                exit 2
            }
            flags+=(--cuda-compat "$dir")
            ;;
        esac
    done
    local search
    if declare -F nixCudaHooksDlopenSearch >/dev/null && search=$(nixCudaHooksDlopenSearch) &&
        [[ -n $search ]]; then
        flags+=(--dlopen-search "$search")
    fi
    NIX_LOG_FD="${NIX_LOG_FD-}" NIX_DEBUG="${NIX_DEBUG-}" __structuredAttrs="${__structuredAttrs-}" \
        "$bin" "${flags[@]}" || exit $?
}

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
    # Our autoAddCudaCompatRunpath (hooks/auto-add-cuda-compat-runpath.sh)
    # names its folder: the driver entry's run then writes compat first and
    # driver second in one rewrite, and the compat entry's run (registered
    # after) finds every file so.
    local -a compat=()
    if [[ -n ${nixCudaHooksCudaCompatDir-} ]]; then
        compat=(--cuda-compat "$nixCudaHooksCudaCompatDir")
    fi
    # Our autoAddDlopenRunpath (hooks/auto-add-dlopen-runpath.sh) names the
    # folders that may provide what the outputs dlopen: the same run
    # appends those each file needs.
    local -a dlopen=()
    local search
    if declare -F nixCudaHooksDlopenSearch >/dev/null && search=$(nixCudaHooksDlopenSearch) &&
        [[ -n $search ]]; then
        dlopen=(--dlopen-search "$search")
    fi
    if [[ $# -eq 1 && $1 == addCudaCompatRunpath && ${#compat[@]} -gt 0 ]]; then
        local -a driver=()
        if link=$(nixCudaHooksDriverLink); then
            driver=(--driver-link "$link")
        fi
        NIX_LOG_FD="${NIX_LOG_FD-}" NIX_DEBUG="${NIX_DEBUG-}" __structuredAttrs="${__structuredAttrs-}" \
            "@autoAddDriverRunpath@" --in-place "${compat[@]}" "${driver[@]}" "${dlopen[@]}" || exit $?
        return 0
    fi
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
            "$bin" --in-place --driver-link "$link" "${compat[@]}" "${dlopen[@]}" || exit $?
        return 0
    fi
    if ! declare -F nixCudaHooksUpstreamAutoFixElfFiles >/dev/null; then
        echo "autoFixElfFiles: ERROR: Nixpkgs' autoFixElfFiles was not sourced before" \
            "nix-cuda-hooks' auto-fix-elf-files-driver-runpath hook (nix/hooks.nix propagates both, in order)" >&2
        exit 2
    fi
    nixCudaHooksUpstreamAutoFixElfFiles "$@"
}
