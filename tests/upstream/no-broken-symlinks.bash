# shellcheck shell=bash
# The upstream noBrokenSymlinks decision procedure, re-implemented in bash from
# the behavioural description in ../shared/reference/upstream-hooks.md §3 (not
# copied from Nixpkgs). It is the oracle of the differential test
# (tests/no_broken_symlinks.rs) and the "upstream" anchor of the benchmark:
# it costs what the real hook costs, several processes per link.
#
# Usage: source this file, define nix*Log functions (or source
# tests/upstream/setup-stub.bash), then call `noBrokenSymlinks PATH` (the function keeps upstream's name, which is
# the caller every log line shows).
# Exits the shell with 1 on broken links, like the real hook.

noBrokenSymlinks() {
  local -r root="${1:?}"
  local link parent target
  local -i dangling=0 reflexive=0 unreadable=0

  if [[ ! -e $root ]]; then
    nixWarnLog "skipping non-existent output $root"
    return 0
  fi
  nixInfoLog "running on $root"

  while IFS= read -r -d '' link; do
    parent="$(dirname "$link")"
    if ! target="$(readlink "$link")"; then
      nixErrorLog "the symlink $link is unreadable"
      unreadable+=1
      continue
    fi
    if [[ $target == /* ]]; then
      nixInfoLog "symlink $link points to absolute target $target"
    else
      nixInfoLog "symlink $link points to relative target $target"
      target="$(realpath --no-symlinks --canonicalize-missing "$parent/$target")"
    fi
    if [[ $target == "$TMPDIR"/* ]]; then
      nixErrorLog "the symlink $link points to $TMPDIR directory: $target"
      dangling+=1
      continue
    fi
    if [[ $target != "$NIX_STORE"/* ]]; then
      nixInfoLog "symlink $link points outside the Nix store; ignoring"
      continue
    fi
    if [[ $link == "$target" ]]; then
      nixErrorLog "the symlink $link is reflexive"
      reflexive+=1
    elif [[ ! -e $target ]]; then
      nixErrorLog "the symlink $link points to a missing target: $target"
      dangling+=1
    else
      nixDebugLog "the symlink $link is irreflexive and points to a target which exists"
    fi
  done < <(find "$root" -type l -print0)

  if ((dangling > 0 || reflexive > 0 || unreadable > 0)); then
    nixErrorLog "found $dangling dangling symlinks, $reflexive reflexive symlinks and $unreadable unreadable symlinks"
    exit 1
  fi
  return 0
}

noBrokenSymlinksInAllOutputs() {
  if [[ -z ${dontCheckForBrokenSymlinks-} ]]; then
    local name
    for name in $outputs; do
      noBrokenSymlinks "${!name}"
    done
  fi
}
