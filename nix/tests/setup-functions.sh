# shellcheck shell=bash
# The parts of Nixpkgs' setup.sh that hooks call, written from
# ../../../shared/reference/upstream-hooks.md §1-§2 (no text copied), in one
# place for both stand-ins that need them: the nix-build stand-in
# (nix/tests/setup.sh) and the cargo tests' (tests/upstream/setup-stub.bash).
#   - getAllOutputNames, with and without structured attributes;
#   - the nix*Log family: levels 0-7, `LEVEL: caller: message` on $NIX_LOG_FD,
#     gated by NIX_DEBUG (not a number counts as 0); caller = the function
#     that logged, or the hook name inside _callImplicitHook; plus the
#     unlevelled nixLog;
#   - the hook arrays hooks append to, and runHook (the derivation's own hook
#     first, then the registered entries: function names or strings to eval).

getAllOutputNames() {
  if [[ -n ${__structuredAttrs-} ]]; then
    echo "${!outputs[*]}"
  else
    echo "${outputs:-out}"
  fi
}

# ---- logging -----------------------------------------------------------------
_nixLogWithLevel() {
  [[ -n ${NIX_LOG_FD-} ]] || return 0
  local -ri level=$1
  shift
  local debug=${NIX_DEBUG:-0}
  [[ $debug =~ ^[0-9]+$ ]] || debug=0
  ((debug >= level)) || return 0
  local -ra names=(ERROR WARN NOTICE INFO TALKATIVE CHATTY DEBUG VOMIT)
  local caller=${FUNCNAME[2]}
  if [[ $caller == _callImplicitHook ]]; then
    caller=${hookName:-$caller}
  fi
  printf '%s: %s: %s\n' "${names[level]}" "$caller" "$*" >&"$NIX_LOG_FD"
}
nixErrorLog() { _nixLogWithLevel 0 "$*"; }
nixWarnLog() { _nixLogWithLevel 1 "$*"; }
nixNoticeLog() { _nixLogWithLevel 2 "$*"; }
nixInfoLog() { _nixLogWithLevel 3 "$*"; }
nixTalkativeLog() { _nixLogWithLevel 4 "$*"; }
nixChattyLog() { _nixLogWithLevel 5 "$*"; }
nixDebugLog() { _nixLogWithLevel 6 "$*"; }
nixVomitLog() { _nixLogWithLevel 7 "$*"; }
nixLog() {
  [[ -n ${NIX_LOG_FD-} ]] || return 0
  printf '%s: %s\n' "${FUNCNAME[1]}" "$*" >&"$NIX_LOG_FD"
}

# ---- hooks -------------------------------------------------------------------
# The hook arrays setup.sh declares; hooks append to them when sourced.
declare -a preFixupHooks=() fixupOutputHooks=() postFixupHooks=() \
  preInstallHooks=() postInstallHooks=() preBuildHooks=() postBuildHooks=()

_eval() {
  if declare -F "$1" >/dev/null 2>&1; then
    "$@"
  else
    eval "$1"
  fi
}

# The derivation's own hook: a function of that name, else a string to eval;
# status $1 when neither exists.
_callImplicitHook() {
  local def=$1
  local hookName=$2
  if declare -F "$hookName" >/dev/null; then
    "$hookName"
  elif [[ -n ${!hookName-} ]]; then
    eval "${!hookName}"
  else
    return "$def"
  fi
}

# Under `set -e` (as builds run) the first failing entry ends the build.
runHook() {
  local hookName=$1
  shift
  local hooksSlice="${hookName%Hook}Hooks[@]"
  local hook
  for hook in "_callImplicitHook 0 $hookName" ${!hooksSlice+"${!hooksSlice}"}; do
    _eval "$hook" "$@"
  done
  return 0
}
