# shellcheck shell=bash
# A setup hook that records the order in which the setup.sh stand-in runs
# things, for the stand-in's own tests (builds.nix: standin-*).
fixupOutputHooks+=(probeFixupOutput)
postFixupHooks+=(probeFunction "echo string-entry >>\"\$out/order\"")
probeFixupOutput() { echo "fixupOutput $(basename "$prefix" | cut -d- -f2-)" >>"$out/order"; }
probeFunction() {
  echo function-entry >>"$out/order"
  nixInfoLog "info from a function"
  nixWarnLog "warn from a function"
}
