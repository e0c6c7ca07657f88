#!/usr/bin/env bash
# Prints the folder of real Nixpkgs files that the tests use as their oracle
# (setup.sh, the default setup hooks, autoAddDriverRunpath and friends, lib/,
# the CUDA package-set pieces, pkgs/test/stdenv/no-broken-symlinks.nix),
# laid out at their Nixpkgs paths. The first that exists wins:
#   1. $NIXPKGS, a full Nixpkgs checkout (taken as is: the user chose it);
#   2. ../shared/nixpkgs-upstream beside the repository (CI has it, read-only);
#   3. .cache/nixpkgs-upstream, downloaded file by file from the pinned commit.
# In 2 and 3 every file listed in tests/tools/nixpkgs-pins.tsv is checked
# against its sha256. A missing file or a mismatch is an error naming the
# file: there is no fall-back to a stand-in.
#
# Usage: tests/tools/nixpkgs-upstream.sh              prints the folder; exit 1 on error
#        tests/tools/nixpkgs-upstream.sh --check DIR  checks DIR against the pins only
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
pins=$root/tests/tools/nixpkgs-pins.tsv

# check DIR: every pinned file is there with its sha256.
check() {
  local dir=$1 path repo commit sha got bad=0
  while IFS=$'\t' read -r path repo commit sha; do
    [[ $path == '#'* || -z $path ]] && continue
    if [[ ! -f $dir/$path ]]; then
      echo "nixpkgs-upstream: $dir/$path is missing (pinned: $repo $commit)" >&2
      bad=1
      continue
    fi
    got=$(sha256sum "$dir/$path")
    if [[ ${got%% *} != "$sha" ]]; then
      echo "nixpkgs-upstream: $dir/$path has sha256 ${got%% *}, pinned $sha ($repo $commit)" >&2
      bad=1
    fi
  done <"$pins"
  return "$bad"
}

if [[ ${1-} == --check ]]; then
  check "${2:?usage: $0 --check DIR}"
  exit
fi

if [[ -n ${NIXPKGS-} ]]; then
  dir=$(cd "$NIXPKGS" 2>/dev/null && pwd) || {
    echo "nixpkgs-upstream: NIXPKGS='$NIXPKGS' is not a folder" >&2
    exit 1
  }
  for f in pkgs/stdenv/generic/setup.sh lib/default.nix pkgs/test/stdenv/no-broken-symlinks.nix; do
    [[ -f $dir/$f ]] || {
      echo "nixpkgs-upstream: NIXPKGS='$dir' is not a Nixpkgs checkout: $dir/$f is missing" >&2
      exit 1
    }
  done
  echo "$dir"
  exit 0
fi

shared=$root/../shared/nixpkgs-upstream
if [[ -d $shared ]]; then
  dir=$(cd "$shared" && pwd)
  check "$dir" || exit 1
  echo "$dir"
  exit 0
fi

# Download, each file into place only once its sha256 matches; under a lock,
# so that parallel test runs share one copy.
cache=$root/.cache/nixpkgs-upstream
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
while IFS=$'\t' read -r path repo commit sha; do
  [[ $path == '#'* || -z $path ]] && continue
  [[ -f $cache/$path ]] && continue
  mkdir -p "$(dirname "$cache/$path")"
  url=https://raw.githubusercontent.com/$repo/$commit/$path
  if ! curl -fsSL --retry 3 -o "$cache/$path.part" "$url"; then
    echo "nixpkgs-upstream: cannot download $path from $url" >&2
    exit 1
  fi
  got=$(sha256sum "$cache/$path.part")
  if [[ ${got%% *} != "$sha" ]]; then
    echo "nixpkgs-upstream: $url has sha256 ${got%% *}, pinned $sha" >&2
    rm -f "$cache/$path.part"
    exit 1
  fi
  mv "$cache/$path.part" "$cache/$path"
done <"$pins"
check "$cache" || exit 1
echo "$cache"
