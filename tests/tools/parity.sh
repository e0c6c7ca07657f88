#!/usr/bin/env bash
# Differential check of two builds of the three binaries on inputs nobody here
# wrote: every output format, exit status and stderr must be byte-identical.
# Used when a change must keep behaviour (a refactoring): build the previous
# revision, then compare.
#
#   tests/tools/parity.sh OLD_BIN_DIR NEW_BIN_DIR
#
# Inputs: the real-library corpus (tests/tools/corpus.sh: cuRAND, cuFFT, cuPy,
# Debian's foreign libraries), the nvcc fixtures the tests built in
# .cache/fixtures (when present), and a sample of this machine's libraries.
# Prints one line per difference and a count; exits 1 when anything differs.
set -euo pipefail
cd "$(dirname "$0")/../.."
old=$(realpath "$1")
new=$(realpath "$2")
work=$(mktemp -d "${TMPDIR:-/tmp}/parity.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Big-endian files (deb-s390x) are left out: builds before the one-parse
# audit refused them (tests/big_endian.rs checks them against readelf).
mapfile -t corpus < <(bash tests/tools/corpus.sh curand12 curand13 cupy cufft deb-ppc64el deb-arm64 2>/dev/null)
inputs=("${corpus[@]}")
[ -d .cache/fixtures ] && inputs+=(.cache/fixtures)
for f in /usr/lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libstdc++.so.6 /bin/ls; do
  [ -e "$f" ] && inputs+=("$f")
done

compared=0
differ=0
# run NAME ARGS...: both binaries' stdout, stderr and status, compared.
run() {
  local bin=$1; shift
  local tag=$((compared))
  (cd "$work" && "$old/$bin" "$@" >"o.$tag" 2>"oe.$tag"; echo $? >"os.$tag") || true
  (cd "$work" && "$new/$bin" "$@" >"n.$tag" 2>"ne.$tag"; echo $? >"ns.$tag") || true
  # The program's own path differs between the two builds: stderr lines that
  # name it are compared after replacing it.
  sed -i "s#$old/#BIN/#g" "$work/oe.$tag"
  sed -i "s#$new/#BIN/#g" "$work/ne.$tag"
  compared=$((compared + 1))
  local what
  for what in "" e s; do
    if ! cmp -s "$work/o$what.$tag" "$work/n$what.$tag"; then
      differ=$((differ + 1))
      local shown="$*"
      echo "DIFFERS (${what:-stdout}): $bin ${shown:0:160}"
      diff "$work/o$what.$tag" "$work/n$what.$tag" | head -5
      break
    fi
  done
  rm -f "$work"/{o,oe,os,n,ne,ns}."$tag"
}

abs_inputs=()
for i in "${inputs[@]}"; do abs_inputs+=("$(realpath "$i")"); done

for fmt in text json sarif github; do
  run cuda-elf-inspect --format "$fmt" "${abs_inputs[@]}"
  run cuda-elf-inspect --format "$fmt" --cuda-capabilities "8.6;9.0" "${abs_inputs[@]}"
  run cuda-elf-inspect --format "$fmt" --cuda-capabilities "7.5;8.0;9.0+PTX" --cuda-version 12.8 --scan "${abs_inputs[@]}"
  run cuda-elf-inspect --format "$fmt" --driver-version 580.95.05 --cuda-capabilities 9.0 "${abs_inputs[@]}"
  run cuda-elf-inspect --format "$fmt" --driver-cuda 12.2 --no-forward-compat --cuda-capabilities "8.6" "${abs_inputs[@]}"
done
run cuda-elf-inspect --format json --write-baseline "$work/base.json" "${abs_inputs[@]}"
run cuda-elf-inspect --format github --baseline "$work/base.json" "${abs_inputs[@]}"
run cuda-elf-inspect --summary "${abs_inputs[@]}"
run cuda-elf-inspect --summary --format json --scan "${abs_inputs[@]}"
run cuda-elf-inspect --summary --headers-only "${abs_inputs[@]}"
while IFS= read -r -d '' f; do
  run cuda-elf-inspect --list-elf --list-ptx "$f"
  run cuda-elf-inspect -lelf -all "$f"
done < <(find "${abs_inputs[@]}" -type f -print0 | sort -z)
run cuda-elf-inspect --format sarif --list-elf "${abs_inputs[0]}"
run cuda-elf-inspect --cuda-capabilities "nonsense" "${abs_inputs[0]}"
run cuda-elf-inspect /nonexistent "${abs_inputs[0]}"
run auto-add-driver-runpath --check "${abs_inputs[@]}"
run auto-add-driver-runpath --check --format json "${abs_inputs[@]}"
run no-broken-symlinks --extra "${abs_inputs[@]}"
run no-broken-symlinks --format json "${abs_inputs[@]}"
for bin in cuda-elf-inspect auto-add-driver-runpath no-broken-symlinks; do
  run "$bin" --help
  run "$bin" --version
  run "$bin" --no-such-flag
done

# The patcher: both builds patch copies of the same files; the bytes must match.
mkdir -p "$work/a" "$work/b"
for i in "${abs_inputs[@]}"; do
  [ -f "$i" ] || continue
  n=$(basename "$i")
  cp "$i" "$work/a/$n"; cp "$i" "$work/b/$n"
done
"$old/auto-add-driver-runpath" "$work/a" >"$work/pa" 2>&1 || true
"$new/auto-add-driver-runpath" "$work/b" >"$work/pb" 2>&1 || true
sed -i "s#$work/a#W#g" "$work/pa"; sed -i "s#$work/b#W#g" "$work/pb"
compared=$((compared + 1))
if ! cmp -s "$work/pa" "$work/pb" || ! diff -r "$work/a" "$work/b" >/dev/null; then
  differ=$((differ + 1)); echo "DIFFERS: auto-add-driver-runpath patching (output or bytes)"
fi

echo "parity: $compared comparisons on ${#inputs[@]} inputs, $differ differ"
[ "$differ" -eq 0 ]
