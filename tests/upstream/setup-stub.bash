# shellcheck shell=bash
# The setup.sh stand-in of the cargo tests: the functions hooks call
# (logging, getAllOutputNames, hook arrays, runHook), shared with the
# nix-build stand-in. Tests source this file, then a hook, then call it.
# shellcheck source=nix/tests/setup-functions.sh
source "$(dirname "${BASH_SOURCE[0]}")/../../nix/tests/setup-functions.sh"
