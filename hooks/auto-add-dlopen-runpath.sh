# shellcheck shell=bash
# autoAddDlopenRunpath: autoAddDriverRunpath, plus, for every dynamic ELF
# file of every output, the library folder of each library the file loads
# with dlopen and cannot find otherwise (docs/auto-add-driver-runpath.md,
# "--dlopen-search"). nix/hooks.nix propagates our autoAddDriverRunpath with
# it; this file only says where to look, and the driver hook's one run of
# auto-add-driver-runpath (hooks/auto-fix-elf-files-driver-runpath.sh) asks
# nixCudaHooksDlopenSearch for the folders and passes them as
# `--dlopen-search`: one rewrite per file, driver entry and dlopen folders
# together.
#
# Where it looks, in this order (the first folder holding a library wins,
# as the loader would take the first RUNPATH entry holding it):
#   dlopenSearchPath        folders named by the derivation (a list: an
#                           array with __structuredAttrs, else
#                           space-separated), each as given;
#   addDlopenSearchPath     folders added by hand in a phase (like
#                           autoPatchelf's addAutoPatchelfSearchPath: every
#                           folder below the given ones holding a *.so or
#                           *.so.* file; --no-recurse for the given folders
#                           only);
#   the outputs             every folder of the build's own outputs holding
#                           a *.so or *.so.* file (a library dlopened from
#                           another output of the same derivation);
#   the host inputs         `<input>/lib` of every input of the host
#                           platform (buildInputs and what they propagate),
#                           gathered as autoPatchelfHook gathers its
#                           libraries (addEnvHooks "$targetOffset").
# A file only gets the folders that hold something it dlopens and does not
# find through its own RUNPATH, its NEEDED libraries or the driver.
#
# Opt out with dontUseAutoAddDlopenRunpath (the driver entry is still
# added); dontUseAutoAddDriverRunpath turns both off, since the folders are
# added by the driver hook's run.

echo "Sourcing auto-add-dlopen-runpath-hook"

if [[ -n ${autoAddDlopenRunpathHookSourced-} ]]; then
    if declare -F nixInfoLog >/dev/null; then
        nixInfoLog "skipping because the hook has been propagated more than once"
    fi
    return 0
fi
declare -g autoAddDlopenRunpathHookSourced=1

# `<input>/lib` of each host-platform input, in the order setup.sh visits them.
declare -ga autoAddDlopenRunpathLibs=()
# Folders from addDlopenSearchPath.
declare -ga extraDlopenSearchPath=()

gatherDlopenSearchLibs() {
    if [[ -d $1/lib ]]; then
        autoAddDlopenRunpathLibs+=("$1/lib")
    fi
}

# shellcheck disable=SC2154  # targetOffset is set by setup.sh while sourcing
addEnvHooks "$targetOffset" gatherDlopenSearchLibs

# Prints, NUL-separated, each folder below the given ones (or only the given
# ones with --no-recurse) that holds a *.so or *.so.* file.
nixCudaHooksLibraryFolders() {
    local -a depth=()
    if [[ ${1-} == --no-recurse ]]; then
        depth=(-maxdepth 1)
        shift
    fi
    (($# > 0)) || return 0
    find "$@" "${depth[@]}" ! -type d \( -name '*.so' -o -name '*.so.*' \) -print0 |
        sed -z 's#/[^/]*$##' | sort -zu
}

# addDlopenSearchPath [--no-recurse] [--] DIR...: search these folders too.
addDlopenSearchPath() {
    local -a opts=()
    while (($# > 0)); do
        case $1 in
        --) shift && break ;;
        --no-recurse) opts=(--no-recurse) && shift ;;
        --*)
            echo "addDlopenSearchPath: ERROR: invalid command line argument: $1" >&2
            return 1
            ;;
        *) break ;;
        esac
    done
    local dir
    while IFS= read -r -d '' dir; do
        extraDlopenSearchPath+=("$dir")
    done < <(nixCudaHooksLibraryFolders "${opts[@]}" "$@")
}

# Prints the --dlopen-search value (folders joined by ':', each once, in
# the order above); prints nothing and fails when the hook is turned off.
nixCudaHooksDlopenSearch() {
    [[ -z ${dontUseAutoAddDlopenRunpath-} ]] || return 1
    local -a named=() dirs=()
    if [[ -n ${__structuredAttrs-} ]]; then
        if declare -p dlopenSearchPath &>/dev/null; then
            named=("${dlopenSearchPath[@]}")
        fi
    else
        read -ra named <<<"${dlopenSearchPath-}"
    fi
    local output dir
    local -a outputDirs=()
    for output in $(getAllOutputNames); do
        [[ -d ${!output} ]] || continue
        while IFS= read -r -d '' dir; do
            outputDirs+=("$dir")
        done < <(nixCudaHooksLibraryFolders "${!output}")
    done
    local -A seen=()
    for dir in "${named[@]}" "${extraDlopenSearchPath[@]}" "${outputDirs[@]}" "${autoAddDlopenRunpathLibs[@]}"; do
        [[ -n $dir && -z ${seen[$dir]-} ]] || continue
        seen[$dir]=1
        dirs+=("$dir")
    done
    local IFS=:
    echo "${dirs[*]}"
}
