# shellcheck shell=bash
# Stands in for Nixpkgs' own pkgs/build-support/setup-hooks/no-broken-symlinks.sh
# in the stdenv-precedence tests: the same double-inclusion guard
# (noBrokenSymlinksHookInstalled) and postFixup registration, with its check
# replaced by one log line, so a test can see which of the two hooks ran.
if (("${noBrokenSymlinksHookInstalled:-0}" > 0)); then
  nixInfoLog "skipping because the hook has been propagated more than once"
  return 0
fi
declare -ig noBrokenSymlinksHookInstalled=1
postFixupHooks+=(upstreamNoBrokenSymlinksStandIn)
upstreamNoBrokenSymlinksStandIn() {
  echo "upstream noBrokenSymlinks stand-in ran" >&2
}
