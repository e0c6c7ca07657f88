# shellcheck shell=bash
# The builder of every test derivation (`bash -e builder.sh`), standing in for
# Nixpkgs' default-builder.sh: load the structured attributes if Nix wrote
# them, source the setup.sh stand-in, run the phases. PATH is the host's
# (sandbox off), in place of stdenv's initialPath.
export PATH=/usr/bin:/bin
if [[ -n ${NIX_ATTRS_SH_FILE:-} && -f $NIX_ATTRS_SH_FILE ]]; then
  # shellcheck disable=SC1090
  source "$NIX_ATTRS_SH_FILE"
elif [[ -f .attrs.sh ]]; then
  # shellcheck disable=SC1091
  source .attrs.sh
fi
# shellcheck disable=SC1090,SC2154 # `setup` is a derivation attribute
source "$setup"
genericBuild
