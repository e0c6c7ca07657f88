#!/usr/bin/env bash
# `make demo`: builds a small fake Nix output with good and broken symlinks and
# runs no-broken-symlinks on it the way a Nix build would (NIX_LOG_FD=2,
# NIX_DEBUG=3), then as an audit with JSON output.
set -u
bin=${1:?usage: demo.sh BIN_DIR}
demo=$(mktemp -d)
trap 'rm -rf "$demo"' EXIT
store=$demo/nix/store
out=$store/0000000000000000000000000000000-demo
mkdir -p "$out/lib" "$out/share" "$demo/build"
echo 'int x;' > "$out/lib/libdemo.so.1"
ln -s libdemo.so.1 "$out/lib/libdemo.so"
ln -s ../lib/libgone.so "$out/share/dangling"
ln -s /etc/hostname "$out/share/outside-store"
ln -s self "$out/share/self"
echo "== inside a build (NIX_LOG_FD=2 NIX_DEBUG=3)"
NIX_STORE=$store TMPDIR=$demo/build NIX_LOG_FD=2 NIX_DEBUG=3 outputs=out out=$out \
  "$bin/no-broken-symlinks"
echo "exit status: $?"
echo "== audit with extra findings, JSON"
NIX_STORE=$store "$bin/no-broken-symlinks" --format json "$out" | head -n 30
echo "exit status: ${PIPESTATUS[0]}"
