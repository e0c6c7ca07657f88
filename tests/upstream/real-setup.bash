# shellcheck shell=bash
# Runs setup hooks inside Nixpkgs' REAL stdenv setup.sh, outside Nix, for the
# cargo tests and benches: what stdenv/generic/builder.sh writes before
# setup.sh (SHELL, initialPath, defaultNativeBuildInputs), then setup.sh itself
# read in place from the pinned Nixpkgs files (tests/tools/nixpkgs-upstream.sh),
# then `runHook postFixup`, where noBrokenSymlinks and autoAddDriverRunpath
# register. The caller's environment is the builder's: outputs, $out..., TMPDIR,
# NIX_STORE, NIX_LOG_FD, NIX_DEBUG.
#
# Usage: bash tests/upstream/real-setup.bash HOOK...
#   HOOK: a setup-hook file, listed in defaultNativeBuildInputs in this order
#   (stdenv sources them last, after nativeBuildInputs; none here).
# $NCH_NIXPKGS: the folder of Nixpkgs files, when the caller resolved it already.
# $NCH_PRE: shell code run before setup.sh (a derivation's shell variables);
# $NCH_RUN: shell code run after it, instead of `runHook postFixup`.
# Exit status: the hooks' (1 for broken links), 0 when all passed.
nixpkgs=${NCH_NIXPKGS:-$("$(dirname "${BASH_SOURCE[0]}")/../tools/nixpkgs-upstream.sh")} || exit 2
export SHELL=${BASH:-/bin/bash}
# Nix sets it to the build folder; TMPDIR is that folder too.
export NIX_BUILD_TOP=${NIX_BUILD_TOP:-${TMPDIR:-$PWD}}
initialPath="/usr /"
defaultNativeBuildInputs="$*"
defaultBuildInputs=
eval "${NCH_PRE-}"
# shellcheck disable=SC1091
source "$nixpkgs/pkgs/stdenv/generic/setup.sh"
eval "${NCH_RUN:-runHook postFixup}"
