#!/usr/bin/env bash
# One-off scale check (too slow for CI): no-broken-symlinks over 1,000,000
# symlinks (1,000 folders of 1,000 links to a file of the same output; the
# last one dangling), with time and peak memory. Usage:
#   tests/tools/million-symlinks.sh [path/to/no-broken-symlinks]
set -euo pipefail
bin=${1:-target/release/no-broken-symlinks}
bin=$(realpath "$bin")
# Links are only judged inside the store (upstream): make the work folder it.
export NIX_STORE
work=$(mktemp -d)
NIX_STORE=$work
trap 'rm -rf "$work"' EXIT
out=$work/out
mkdir -p "$out"
echo x >"$out/target"
python3 - "$out" <<'PY'
import os, sys
out = sys.argv[1]
for d in range(1000):
    p = os.path.join(out, f"d{d:03}")
    os.mkdir(p)
    for i in range(1000):
        os.symlink("../target", os.path.join(p, f"l{i:03}"))
PY
echo "made $(find "$out" -type l | wc -l) symlinks"
/usr/bin/time -f "ok tree: %e s, %M KiB peak" "$bin" "$out"
echo "status $?"
ln -s nowhere "$out/d999/dangling"
set +e
/usr/bin/time -f "one dangling: %e s, %M KiB peak" "$bin" "$out" 2>&1 | tail -3
echo "status ${PIPESTATUS[0]}"
