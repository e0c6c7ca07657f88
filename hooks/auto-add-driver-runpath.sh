# shellcheck shell=bash
# autoAddDriverRunpath, a drop-in for Nixpkgs' hook of that name: same
# messages, same opt-outs, and the same postFixupHooks entry,
# "autoFixElfFiles addDriverRunpath", the string other hooks look for
# (removeStubsFromRunpathHook does). nix/hooks.nix propagates Nixpkgs' own
# addDriverRunpath and autoFixElfFiles with it, as upstream does, so their
# functions (addDriverRunpath, autoFixElfFiles, elfHasDynamicSection) exist
# after sourcing; then hooks/auto-fix-elf-files-driver-runpath.sh, sourced
# after them, makes that entry ONE run of the static auto-add-driver-runpath
# binary over all outputs. postFixup, not fixupOutput: `patchelf
# --shrink-rpath` (strip, fixup) has run and cannot drop the entry again.
#
# Difference from upstream, on purpose: sourcing it twice (two packages
# propagating copies) registers the entry once.

echo "Sourcing auto-add-driver-runpath-hook"

if [[ -n ${autoAddDriverRunpathHookSourced-} ]]; then
    if declare -F nixInfoLog >/dev/null; then
        nixInfoLog "skipping because the hook has been propagated more than once"
    fi
    return 0
fi
declare -g autoAddDriverRunpathHookSourced=1

if [[ -n ${dontUseAutoAddOpenGLRunpath-} ]]; then
    echo "dontUseAutoAddOpenGLRunpath has been deprecated, please use dontUseAutoAddDriverRunpath instead"
fi

if [[ -z ${dontUseAutoAddDriverRunpath-} && -z ${dontUseAutoAddOpenGLRunpath-} ]]; then
    echo "Using autoAddDriverRunpath"
    postFixupHooks+=("autoFixElfFiles addDriverRunpath")
fi
