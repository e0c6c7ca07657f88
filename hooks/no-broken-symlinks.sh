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
  # The binary reads the outputs from the environment ($outputs and each output's
  # variable, or the structured attributes file). Logging variables may be plain
  # shell variables: hand them over explicitly.
  NIX_LOG_FD="${NIX_LOG_FD-}" NIX_DEBUG="${NIX_DEBUG-}" "$bin" || exit $?
}
