# shellcheck shell=bash
# A reduced but faithful stand-in for Nixpkgs' pkgs/stdenv/generic/setup.sh,
# for real `nix-build`s here, where Nixpkgs (and so stdenv) is not available.
# Written from ../../../shared/reference/upstream-hooks.md §1-§2 and the
# behaviour of setup.sh; no text is copied. What it keeps, because hooks rely
# on it:
#   - structured attributes: on when Nix wrote .attrs.sh / NIX_ATTRS_JSON_FILE;
#     then `outputs` is an associative array and each output is exported;
#     otherwise `outputs` defaults to "out";
#   - the nix*Log family (levels 0-7, `LEVEL: caller: message` on $NIX_LOG_FD,
#     gated by NIX_DEBUG; caller = the logging function, or the hook name
#     inside _callImplicitHook) and the unlevelled nixLog;
#   - setup hooks: every nativeBuildInputs entry (and what it propagates) is
#     activated once, in order, after `defaultNativeBuildInputs` (stdenv's own
#     hooks, listed first as in stdenv/generic/default.nix); a file is sourced
#     as is, a package's nix-support/setup-hook is sourced, its bin/ goes on
#     PATH;
#   - runHook (the derivation's own hook string first, then the registered
#     `<name>Hooks` entries: function names or strings to eval) and the
#     phases, with fixupPhase's order: chmod, preFixup, fixupOutput per output,
#     postFixup;
#   - buildCommand instead of the phases, as runCommand uses it.
# What it leaves out: compilers and wrappers, cross-compilation offsets, the
# dependency-offset arrays, substitute*, strip/patchShebangs and other default
# hooks. PATH is the host's /usr/bin:/bin (sandbox off), standing in for
# stdenv's initialPath.
set -eu
set -o pipefail

# ---- structured attributes -------------------------------------------------
if [[ -n ${NIX_ATTRS_JSON_FILE:-} || -f ${NIX_ATTRS_SH_FILE:-${NIX_BUILD_TOP:-.}/.attrs.sh} ]]; then
  __structuredAttrs=1
  echo "structuredAttrs is enabled"
  for outputName in "${!outputs[@]}"; do
    export "$outputName=${outputs[$outputName]}"
  done
  [[ -n ${NIX_ATTRS_JSON_FILE:-} ]] || export NIX_ATTRS_JSON_FILE="$NIX_BUILD_TOP/.attrs.json"
  [[ -n ${NIX_ATTRS_SH_FILE:-} ]] || export NIX_ATTRS_SH_FILE="$NIX_BUILD_TOP/.attrs.sh"
else
  __structuredAttrs=
  : "${outputs:=out}"
fi

# getAllOutputNames, the nix*Log family, the hook arrays and runHook: shared
# with the cargo tests' stand-in (tests/upstream/setup-stub.bash).
# shellcheck disable=SC1090,SC2154 # `setupFunctions` is a derivation attribute
source "$setupFunctions"

addToSearchPath() {
  local -n var=$1
  [[ -d $2 ]] || return 0
  var="$2${var:+:$var}"
}

# ---- inputs ------------------------------------------------------------------
declare -A __activated=()
activatePackage() {
  local pkg=$1
  [[ -z ${__activated[$pkg]-} ]] || return 0
  __activated[$pkg]=1
  if [[ -f $pkg ]]; then
    # A bare hook file (stdenv's defaultNativeBuildInputs are such files).
    # shellcheck disable=SC1090
    source "$pkg"
    return 0
  fi
  if [[ ! -d $pkg ]]; then
    echo "setup.sh stand-in: input '$pkg' does not exist" >&2
    exit 1
  fi
  addToSearchPath PATH "$pkg/bin"
  if [[ -f $pkg/nix-support/setup-hook ]]; then
    # shellcheck disable=SC1091
    source "$pkg/nix-support/setup-hook"
  fi
  local file dep
  for file in propagated-native-build-inputs propagated-build-inputs; do
    if [[ -f $pkg/nix-support/$file ]]; then
      for dep in $(<"$pkg/nix-support/$file"); do
        activatePackage "$dep"
      done
    fi
  done
}

# A list attribute is a bash array with structured attributes and a
# space-separated string otherwise; yield its words either way.
_listWords() {
  local name=$1
  if [[ $(declare -p "$name" 2>/dev/null) == "declare -a"* ]]; then
    local -n arr=$name
    printf '%s\n' "${arr[@]}"
  elif [[ -n ${!name-} ]]; then
    printf '%s\n' ${!name}
  fi
}

for __input in $(_listWords defaultNativeBuildInputs) $(_listWords nativeBuildInputs); do
  activatePackage "$__input"
done
unset __input

# ---- phases ------------------------------------------------------------------
unpackPhase() {
  runHook preUnpack
  if [[ -n ${src:-} ]]; then
    cp -r --no-preserve=mode "$src" source
    cd source
  fi
  runHook postUnpack
}
patchPhase() {
  runHook prePatch
  runHook postPatch
}
configurePhase() {
  runHook preConfigure
  runHook postConfigure
}
buildPhase() {
  runHook preBuild
  echo "no Makefile or custom buildPhase, doing nothing"
  runHook postBuild
}
checkPhase() {
  runHook preCheck
  runHook postCheck
}
installPhase() {
  runHook preInstall
  runHook postInstall
}
fixupPhase() {
  local output
  for output in $(getAllOutputNames); do
    if [[ -e ${!output} ]]; then
      chmod -R u+w,u-s,g-s "${!output}"
    fi
  done
  runHook preFixup
  for output in $(getAllOutputNames); do
    # shellcheck disable=SC2034 # read by fixupOutput hooks
    prefix="${!output}" runHook fixupOutput
  done
  runHook postFixup
}
installCheckPhase() {
  runHook preInstallCheck
  runHook postInstallCheck
}
distPhase() {
  runHook preDist
  runHook postDist
}

_phaseSkipped() {
  case $1 in
    unpackPhase) [[ -n ${dontUnpack:-} ]] ;;
    configurePhase) [[ -n ${dontConfigure:-} ]] ;;
    buildPhase) [[ -n ${dontBuild:-} ]] ;;
    checkPhase) [[ -z ${doCheck:-} ]] ;;
    installPhase) [[ -n ${dontInstall:-} ]] ;;
    fixupPhase) [[ -n ${dontFixup:-} ]] ;;
    installCheckPhase) [[ -z ${doInstallCheck:-} ]] ;;
    distPhase) [[ -z ${doDist:-} ]] ;;
    *) return 1 ;;
  esac
}

genericBuild() {
  if [[ -n ${buildCommand:-} ]]; then
    eval "$buildCommand"
    return
  fi
  local allPhases=${phases:-unpackPhase patchPhase configurePhase buildPhase checkPhase installPhase fixupPhase installCheckPhase distPhase}
  local curPhase
  for curPhase in $allPhases; do
    _phaseSkipped "$curPhase" && continue
    echo "Running phase: $curPhase"
    # A phase given as a string by the derivation replaces the function.
    eval "${!curPhase:-$curPhase}"
  done
}
