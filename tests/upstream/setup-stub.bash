# shellcheck shell=bash
# A small, faithful stand-in for the parts of Nixpkgs' setup.sh that hooks use:
# the nix*Log family (levels 0-7 gated by NIX_LOG_FD and NIX_DEBUG, format
# `LEVEL: caller: message`, caller = the calling function's name, or the hook
# name inside _callImplicitHook), postFixupHooks and runHook, and
# getAllOutputNames with and without structured attributes.
# Written from ../shared/reference/upstream-hooks.md §1-2, not copied.

_stubLog() {
  local -ri level=$1
  shift
  [[ -n ${NIX_LOG_FD-} ]] || return 0
  # A NIX_DEBUG that is not a number counts as 0.
  local debug=${NIX_DEBUG:-0}
  [[ $debug =~ ^[0-9]+$ ]] || debug=0
  ((debug >= level)) || return 0
  local -ra names=(ERROR WARN NOTICE INFO TALKATIVE CHATTY DEBUG VOMIT)
  local caller=${FUNCNAME[2]}
  [[ $caller == _callImplicitHook ]] && caller=${hookName:-$caller}
  printf '%s: %s: %s\n' "${names[level]}" "$caller" "$*" >&"$NIX_LOG_FD"
}
nixErrorLog() { _stubLog 0 "$*"; }
nixWarnLog() { _stubLog 1 "$*"; }
nixNoticeLog() { _stubLog 2 "$*"; }
nixInfoLog() { _stubLog 3 "$*"; }
nixTalkativeLog() { _stubLog 4 "$*"; }
nixChattyLog() { _stubLog 5 "$*"; }
nixDebugLog() { _stubLog 6 "$*"; }
nixVomitLog() { _stubLog 7 "$*"; }
nixLog() { [[ -n ${NIX_LOG_FD-} ]] && printf '%s: %s\n' "${FUNCNAME[1]}" "$*" >&"$NIX_LOG_FD"; return 0; }

declare -a postFixupHooks=()

getAllOutputNames() {
  if [[ -n ${__structuredAttrs-} ]]; then
    echo "${!outputs[@]}"
  else
    echo "${outputs:-out}"
  fi
}

# runHook NAME: run the derivation's own hook string, then every registered
# entry (a function name or a string to eval), stopping at the first failure.
runHook() {
  local hookName=$1
  shift
  local hooksSlice="${hookName%Hook}Hooks[@]"
  local hook
  for hook in "_callImplicitHook 0 $hookName" ${!hooksSlice+"${!hooksSlice}"}; do
    _eval "$hook" "$@" || return $?
  done
  return 0
}
_eval() {
  if declare -F "$1" >/dev/null 2>&1; then "$@"; else eval "$1"; fi
}
_callImplicitHook() {
  local def=$1 hookName=$2
  if declare -F "$hookName" >/dev/null; then "$hookName"
  elif [[ -n ${!hookName-} ]]; then eval "${!hookName}"
  else return "$def"; fi
}
