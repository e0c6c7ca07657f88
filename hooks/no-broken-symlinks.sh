# shellcheck shell=bash
# Setup hook: fail the build when an output holds dangling or reflexive
# symlinks. A drop-in for Nixpkgs' no-broken-symlinks.sh: same guard variable,
# same postFixup registration, same opt-out (dontCheckForBrokenSymlinks), same
# log lines and exit status, with the work done by the static
# `no-broken-symlinks` binary (substituted for the placeholder below by Nix).

# Sourced twice (propagated from several inputs): register once.
if (("${noBrokenSymlinksHookInstalled:-0}" > 0)); then
  nixInfoLog "skipping because the hook has been propagated more than once"
  return 0
fi
declare -ig noBrokenSymlinksHookInstalled=1

# Links are often made in postFixup itself, so check after it (not in
# fixupOutputHooks, which run before).
postFixupHooks+=(noBrokenSymlinksInAllOutputs)

noBrokenSymlinksInAllOutputs() {
  # Checked here too: with structured attributes a shell variable set by the
  # derivation is not in the binary's environment.
  if [[ -n ${dontCheckForBrokenSymlinks-} ]]; then
    return 0
  fi
  local -r bin="@noBrokenSymlinks@"
  if [[ ! -x $bin ]]; then
    echo "noBrokenSymlinks: ERROR: the binary '$bin' is not executable; install this hook through" \
      "nix-cuda-hooks' nix/hooks.nix (makeSetupHook substitutes the path)" >&2
    exit 2
  fi
  # With structured attributes the outputs are only listed in the JSON file;
  # without it the binary would see the exported $out alone and check less.
  local -r attrs="${NIX_ATTRS_JSON_FILE:-${NIX_BUILD_TOP:-.}/.attrs.json}"
  if [[ -n ${__structuredAttrs-} && ! -f $attrs ]]; then
    echo "noBrokenSymlinks: ERROR: __structuredAttrs is set but the attributes file '$attrs' does not exist;" \
      "run the phases where Nix wrote it (nix-build, nix develop or nix-shell set NIX_ATTRS_JSON_FILE)," \
      "or export NIX_ATTRS_JSON_FILE with its path" >&2
    exit 2
  fi
  # The binary reads the outputs from the environment ($outputs and each output's
  # variable, or the structured attributes file). Logging variables and
  # setup.sh's __structuredAttrs may be plain shell variables: hand them over.
  NIX_LOG_FD="${NIX_LOG_FD-}" NIX_DEBUG="${NIX_DEBUG-}" __structuredAttrs="${__structuredAttrs-}" \
    "$bin" || exit $?
}
