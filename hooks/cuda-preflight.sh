# shellcheck shell=bash
# Setup hook for GPU test derivations (passthru.gpuCheck, requiredSystemFeatures
# = [ "cuda" ]): before the check phase (or the install check phase, whichever
# runs first), run the static `cuda-preflight` binary on the sandbox and fail
# the build at once with the reason and the fix (no /dev/nvidiactl, a driver
# link without its target, a driver of another release than the kernel
# module, a driver without a function the outputs import) instead of letting
# the tests fail later, or pass without a GPU. docs/preflight.md.
#
# Off with dontCudaPreflight=1. cudaPreflightFlags: extra arguments (a bash
# array or a string), e.g. --gpu-capability 8.6 or --probe CMD. The outputs
# are checked against the driver found, unless dontCudaPreflightOutputs is set.

if (("${cudaPreflightHookInstalled:-0}" > 0)); then
  nixInfoLog "skipping because the hook has been propagated more than once"
  return 0
fi
declare -ig cudaPreflightHookInstalled=1

preCheckHooks+=(cudaPreflightHook)
preInstallCheckHooks+=(cudaPreflightHook)

cudaPreflightHook() {
  # Once per build: the first of the two check phases runs it.
  if [[ -n ${dontCudaPreflight-} || -n ${cudaPreflightDone-} ]]; then
    return 0
  fi
  cudaPreflightDone=1
  local -r bin="@cudaPreflight@"
  if [[ ! -x $bin ]]; then
    echo "cudaPreflightHook: ERROR: the binary '$bin' is not executable; install this hook through" \
      "nix-cuda-hooks' nix/hooks.nix (makeSetupHook substitutes the path)" >&2
    exit 2
  fi
  local -a flags=()
  if [[ $(declare -p cudaPreflightFlags 2>/dev/null) == "declare -a"* ]]; then
    flags=("${cudaPreflightFlags[@]}")
  else
    # shellcheck disable=SC2206  # a string of flags is split as Nix passes lists
    flags=(${cudaPreflightFlags-})
  fi
  local -a paths=()
  local o
  if [[ -z ${dontCudaPreflightOutputs-} ]]; then
    if [[ $(declare -p outputs 2>/dev/null) == "declare -A"* ]]; then
      # Structured attributes: output name -> path.
      for o in "${outputs[@]}"; do
        [[ -e $o ]] && paths+=("$o")
      done
    else
      for o in ${outputs-out}; do
        [[ -e ${!o-} ]] && paths+=("${!o}")
      done
    fi
  fi
  nixInfoLog "checking the sandbox for GPU code${paths[*]:+ against ${paths[*]}}"
  local rc=0
  "$bin" "${flags[@]}" "${paths[@]}" >&2 || rc=$?
  if ((rc == 1)); then
    echo "cudaPreflightHook: ERROR: GPU code will not run in this sandbox (reasons above);" \
      "set dontCudaPreflight = true to run the checks anyway" >&2
    exit 1
  elif ((rc != 0)); then
    echo "cudaPreflightHook: ERROR: cuda-preflight failed (exit $rc)" >&2
    exit "$rc"
  fi
}
