# shellcheck shell=bash
# Setup hook: audit every ELF file of every output after fixup with the static
# `cuda-elf-inspect` binary: driver RUNPATH, stub and TMPDIR entries, NEEDED
# libraries, and whether the GPU code covers the requested capabilities.
#
# Knobs (derivation attributes):
#   dontInspectCudaElfFiles   skip the audit
#   cudaElfInspectWarnOnly    report error findings but do not fail the build
#   cudaCapabilities          capabilities to check (default: the CUDA package
#                             set's, substituted by nix/hooks.nix)
#   cudaForwardCompat         expect PTX for the last capability ("1"/"")
#   cudaElfInspectFlags       extra flags (e.g. --system-lib-dirs)
#   cudaElfInspectBaseline    a baseline file (--write-baseline): only findings
#                             not in it fail the build (the ratchet for
#                             existing build-only references, see
#                             docs/references.md)
#   cudaElfInspectForbidReferences
#                             store paths no output may reference, besides
#                             disallowedReferences/disallowedRequisites and the
#                             reviewed build-only set (build-only-reference)

if (("${cudaElfInspectHookInstalled:-0}" > 0)); then
  nixInfoLog "skipping because the hook has been propagated more than once"
  return 0
fi
declare -ig cudaElfInspectHookInstalled=1

# After the RUNPATH hooks, which also live in postFixupHooks: list this hook
# after them in nativeBuildInputs. cudaElfInspect warns when one of them runs
# later: autoAddDriverRunpath ("autoFixElfFiles addDriverRunpath", ours and
# Nixpkgs'), autoAddCudaCompatRunpath ("autoFixElfFiles addCudaCompatRunpath"),
# removeStubsFromRunpathHook ("autoFixElfFiles removeStubsFromRunpath") and
# autoPatchelfHook (autoPatchelfPostFixup). removeStubsFromRunpathHook
# registers in a prePhase, after every hook was sourced: so at preFixup
# (after all prePhases) this entry moves itself to the end of postFixupHooks.
postFixupHooks+=(cudaElfInspect)
preFixupHooks+=(cudaElfInspectMoveLast)

cudaElfInspectMoveLast() {
  local -a kept=()
  local hook
  for hook in "${postFixupHooks[@]}"; do
    [[ $hook == cudaElfInspect ]] || kept+=("$hook")
  done
  postFixupHooks=("${kept[@]}" cudaElfInspect)
}

cudaElfInspect() {
  if [[ -n ${dontInspectCudaElfFiles-} ]]; then
    return 0
  fi
  local -r bin="@cudaElfInspect@"
  if [[ ! -x $bin ]]; then
    echo "cudaElfInspect: ERROR: the binary '$bin' is not executable; install this hook through" \
      "nix-cuda-hooks' nix/hooks.nix (makeSetupHook substitutes the path)" >&2
    exit 2
  fi

  local hook seenSelf=
  for hook in "${postFixupHooks[@]}"; do
    if [[ $hook == cudaElfInspect ]]; then
      seenSelf=1
    elif [[ -n $seenSelf && $hook =~ (addDriverRunpath|addCudaCompatRunpath|removeStubsFromRunpath|nixCudaHooksFixRunpaths|autoPatchelf) ]]; then
      nixWarnLog "runs before '$hook', which changes RUNPATHs: list cudaElfInspectHook after it in nativeBuildInputs"
    fi
  done

  # The CUDA package set's policy, unless the derivation set its own. A list
  # attribute is an array under __structuredAttrs and a string otherwise.
  local caps fwd version
  caps="${cudaCapabilities[*]-@cudaCapabilities@}"
  fwd="${cudaForwardCompat-@cudaForwardCompat@}"
  version="${cudaMajorMinorVersion-@cudaVersion@}"
  local -a flags=()
  # An unsubstituted placeholder (hook used outside nix/hooks.nix) means "not set".
  [[ $caps == @*@ ]] && caps=
  [[ $fwd == @*@ ]] && fwd=1
  [[ $version == @*@ ]] && version=
  [[ -n $caps ]] && flags+=(--cuda-capabilities "$caps")
  if [[ -n $fwd && $fwd != 0 && $fwd != false ]]; then flags+=(--forward-compat); else flags+=(--no-forward-compat); fi
  [[ -n $version ]] && flags+=(--cuda-version "$version")
  [[ -n ${cudaElfInspectBaseline-} ]] && flags+=(--baseline "$cudaElfInspectBaseline")
  local forbid
  # shellcheck disable=SC2068 # a list attribute: an array, or words of a string
  for forbid in ${cudaElfInspectForbidReferences[@]-}; do
    flags+=(--forbid-reference "$forbid")
  done
  # shellcheck disable=SC2206 # word splitting of user flags is intended
  flags+=(${cudaElfInspectFlags[*]-})

  local status=0
  NIX_LOG_FD="${NIX_LOG_FD-}" NIX_DEBUG="${NIX_DEBUG-}" "$bin" "${flags[@]}" || status=$?
  if ((status == 1)) && [[ -n ${cudaElfInspectWarnOnly-} ]]; then
    nixWarnLog "error findings ignored because cudaElfInspectWarnOnly is set"
    return 0
  fi
  if ((status != 0)); then
    exit "$status"
  fi
}
