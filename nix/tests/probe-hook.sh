# shellcheck shell=bash
# A setup hook that records the order in which Nixpkgs' real setup.sh runs
# phases and hooks, which our hooks rely on (builds.nix: setup-order*).
fixupOutputHooks+=(probeFixupOutput)
postFixupHooks+=(probeFunction "echo string-entry >>\"\$out/order\"")
probeFixupOutput() { echo "fixupOutput $(basename "$prefix" | cut -d- -f2-)" >>"$out/order"; }
probeFunction() {
  echo function-entry >>"$out/order"
  nixInfoLog "info from a function"
  nixWarnLog "warn from a function"
}
