# shellcheck shell=bash
# Real-build tests, sourced by nix/tests/run.sh (which defines build, expect,
# refute, check, pass, fail, $log, $result, $rc, $work, $bin_dir,
# $cuda_fixture). Each case is an attribute of nix/tests/builds.nix. A failing
# builder makes nix-build exit 100.

summary() { echo "ERROR: noBrokenSymlinks: found $1 dangling symlinks, $2 reflexive symlinks and $3 unreadable symlinks"; }

# ---- what the hooks rely on in Nixpkgs' setup.sh ---------------------------------
test_setup_order() {
  if expect setup-order 0 "INFO: postFixup: info from the derivation's postFixup" \
    "INFO: probeFunction: info from a function" "WARN: probeFunction: warn from a function"; then
    check "setup-order: phases, fixupOutput per output, own postFixup, then registered entries" \
      test "$(tr '\n' ' ' <"$result/order")" = \
      "build preInstall preFixup fixupOutput setup-order fixupOutput setup-order-dev postFixup function-entry string-entry "
  fi
  # NIX_DEBUG unset: only ERROR would show.
  if expect setup-order-sa 0 "structuredAttrs is enabled"; then
    refute setup-order-sa "WARN: probeFunction"
    check "setup-order-sa: outputs from the structured attributes" \
      grep -qx "outputs: dev out " "$result/order"
  fi
}

# ---- noBrokenSymlinks ------------------------------------------------------------
test_no_broken_symlinks() {
  expect nbs-dangling-absolute 100 "$(summary 1 0 0)" "points to a missing target"
  expect nbs-dangling-relative 100 "$(summary 1 0 0)"
  expect nbs-reflexive 100 "$(summary 0 1 0)" "is reflexive"
  expect nbs-both 100 "$(summary 1 1 0)"
  expect nbs-tmpdir 100 "$(summary 1 0 0)" "directory:"
  expect nbs-valid 0
  expect nbs-outside-store 0
  expect nbs-opt-out 0
  # Nix exports false as "": not an opt-out.
  expect nbs-opt-out-false 100 "$(summary 1 0 0)"
  expect nbs-made-in-postfixup 100 "$(summary 1 0 0)"
  if expect nbs-multiple-outputs 100 "$(summary 1 0 0)" "INFO: noBrokenSymlinks: running on"; then
    # Outputs in order, each checked until the broken one.
    check "nbs-multiple-outputs: outputs checked in order out, dev, lib" \
      test "$(grep -o 'running on [^ ]*' "$log" | sed 's/.*-nbs-multiple-outputs//' | tr '\n' ' ')" = " -dev -lib "
  fi
  if expect nbs-stops-at-first-output 100 "$(summary 1 0 0)"; then
    check "nbs-stops-at-first-output: one summary, the build stops at the first broken output" \
      test "$(grep -c 'found .* dangling symlinks' "$log")" = 1
  fi
  if expect nbs-logs-info 0 "INFO: noBrokenSymlinks: running on" "points to relative target file"; then
    refute nbs-logs-info "ERROR:"
  fi
  if expect nbs-sourced-twice 0 "skipping because the hook has been propagated more than once"; then
    check "nbs-sourced-twice: postFixupHooks holds the hook once" \
      test "$(tr ' ' '\n' <"$result/registered" | grep -cx noBrokenSymlinksInAllOutputs)" = 1
    check "nbs-sourced-twice: the check ran once" test "$(grep -c 'INFO: noBrokenSymlinks: running on' "$log")" = 1
  fi
  expect nbs-unsubstituted 100 "noBrokenSymlinks: ERROR: the binary '@noBrokenSymlinks@' is not executable" \
    "nix/hooks.nix"
  # An output the build did not create: the hook warns and goes on (upstream),
  # and Nix fails the build naming the output.
  selected "build nbs-missing-output" && build nbs-missing-output
  if ! selected "build nbs-missing-output"; then
    :
  elif [[ $rc != 0 ]] && grep -qF "WARN: noBrokenSymlinks: skipping non-existent output" "$log" &&
    grep -q "failed to produce output path for output 'doc'" "$log"; then
    pass "build nbs-missing-output (exit $rc: hook warned, Nix named the output)"
  else
    fail "build nbs-missing-output" "exit $rc; log:"$'\n'"$(tail -n 20 "$log")"
  fi
}

test_no_broken_symlinks_structured_attrs() {
  expect nbs-sa-dangling 100 "structuredAttrs is enabled" "$(summary 1 0 0)"
  expect nbs-sa-opt-out 0 "structuredAttrs is enabled"
  expect nbs-sa-valid 0 "structuredAttrs is enabled"
  expect nbs-sa-multiple-outputs 100 "$(summary 1 0 0)" "-nbs-sa-multiple-outputs-dev/dangling"
  expect nbs-sa-without-json 100 "noBrokenSymlinks: ERROR: __structuredAttrs is set but the attributes file" \
    "export NIX_ATTRS_JSON_FILE"
}

# Which noBrokenSymlinksInAllOutputs a build registered: ours calls the binary.
is_ours() { grep -q '/bin/no-broken-symlinks"' "$1/registered"; }
test_stdenv_precedence() {
  # setup.sh sources the stdenv's default hooks after the derivation's inputs:
  # ours in nativeBuildInputs (or propagated) registers first and the
  # upstream file skips through the shared guard.
  expect nbs-stdenv-nativeBuildInputs-only 100 "$(summary 1 0 0)" \
    "skipping because the hook has been propagated more than once"
  if expect nbs-stdenv-which 0; then
    check "nbs-stdenv-which: ours in nativeBuildInputs replaces the stdenv's check" is_ours "$result"
  fi
  if expect nbs-stdenv-propagated 0; then
    check "nbs-stdenv-propagated: ours propagated by an input replaces it too" is_ours "$result"
  fi
  if expect nbs-stdenv-upstream 0; then
    check "nbs-stdenv-upstream: without ours, Nixpkgs' own hook is the check" eval '! is_ours "$result"'
    check "nbs-stdenv-upstream: ... and it is the real one (find-based)" grep -q 'noBrokenSymlinks ' "$result/registered"
  fi
  if expect nbs-stdenv-adapter 100 "$(summary 1 0 0)" "skipping because the hook has been propagated more than once"; then
    check "nbs-stdenv-adapter: one check ran (ours), the stdenv's own file skipped" \
      test "$(grep -c 'INFO: noBrokenSymlinks: running on' "$log")" = 1
  fi
}

# Every case of Nixpkgs' pkgs/test/stdenv/no-broken-symlinks.nix, the list read
# from the file: with ours (stdenv adapter) and, to check the harness, with
# Nixpkgs' own hook. A pass-* case must build, a fail-* case is upstream's own
# runCommand checking the exit status and summary line of the failed build.
test_upstream_cases() {
  local side names name
  for side in ours upstream; do
    if ! names=$(nix-instantiate "${nix_opts[@]}" --eval --json -E \
      "builtins.attrNames (import $here/builds.nix { binDir = \"$bin_dir\"; nixpkgs = \"$nixpkgs\"; patchelf = \"$patchelf\"; }).upstream-cases-$side" 2>&1); then
      fail "upstream cases ($side): list" "$names"
      continue
    fi
    names=$(python3 -c 'import json,sys; print("\n".join(json.loads(sys.argv[1])))' "$names")
    if [[ -z $names ]]; then
      fail "upstream cases ($side): list" "no case in pkgs/test/stdenv/no-broken-symlinks.nix"
      continue
    fi
    for name in $names; do
      expect "upstream-cases-$side.$name" 0
    done
  done
}

# ---- autoAddDriverRunpath ----------------------------------------------------------
runpath() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p'; }
has_driver() { [[ :$(runpath "$1"): == *:/run/opengl-driver/lib:* ]]; }
# output_path ATTR OUTPUT: the store path of one output of a built attribute.
output_path() {
  nix-build "${nix_opts[@]}" "$here/builds.nix" -A "$1.$2" "${build_args[@]}" --no-out-link 2>/dev/null
}

test_auto_add_driver_runpath() {
  local out lib
  if expect aadr-elf 0; then
    out=$(output_path aadr-elf out)
    lib=$(output_path aadr-elf lib)
    check "aadr-elf: executable gets the driver RUNPATH" has_driver "$out/bin/hello"
    check "aadr-elf: shared library in another output gets it" has_driver "$lib/lib/libfoo.so"
    check "aadr-elf: no empty RUNPATH entry" eval '[[ :$(runpath "$out/bin/hello"): != *::* ]]'
  fi
  if expect aadr-opt-out 0; then
    out=$(output_path aadr-opt-out out)
    check "aadr-opt-out: dontUseAutoAddDriverRunpath leaves RUNPATH alone" eval '! has_driver "$out/bin/hello"'
  fi
  if expect aadr-sa 0 "structuredAttrs is enabled"; then
    lib=$(output_path aadr-sa lib)
    check "aadr-sa: structured attributes, lib output patched" has_driver "$lib/lib/libfoo.so"
  fi
  # Bad input: a clear error naming the hook (or the functions it replaces).
  local aadr_name='re:autoAddDriverRunpath|auto-add-driver-runpath|autoFixElfFiles|addDriverRunpath'
  expect aadr-unsubstituted 100 "$aadr_name" "@autoAddDriverRunpath@"
  expect aadr-sa-without-json 100 "$aadr_name" "re:attrs[.]json|NIX_ATTRS_JSON_FILE"
  # Upstream fails on a missing output (after patching the others); the
  # message must name it.
  expect aadr-missing-output 100 "$aadr_name" "-aadr-missing-output-lib"
  if expect aadr-sourced-twice 0; then
    out=$(output_path aadr-sourced-twice out)
    check "aadr-sourced-twice: registered once (and folded into our one entry)" \
      test "$(cat "$out/folded")" = addDriverRunpath
    check "aadr-sourced-twice: one RUNPATH entry in postFixupHooks" \
      test "$(grep -cx -e nixCudaHooksFixRunpaths -e 'autoFixElfFiles addDriverRunpath' "$out/registered")" = 1
    check "aadr-sourced-twice: one driver entry in RUNPATH" \
      test "$(runpath "$out/bin/hello" | tr ':' '\n' | grep -cx /run/opengl-driver/lib)" = 1
  fi
  if expect together 0; then
    out=$(output_path together out)
    check "together: hooks registered in upstream order (noBrokenSymlinks first)" \
      eval '[[ $(cat "$out/registered") == noBrokenSymlinksInAllOutputs*nixCudaHooksFixRunpaths* ]]'
    check "together: ELF patched" has_driver "$out/bin/hello"
    if [[ -f hooks/cuda-elf-inspect.sh && -n $cuda_fixture ]]; then
      check "together: the inspect hook registered after the other two" \
        eval '[[ $(cat "$out/registered") == noBrokenSymlinksInAllOutputs*nixCudaHooksFixRunpaths*cudaElfInspect* ]]'
      check "together: the CUDA library patched too" has_driver "$(output_path together lib)/lib/libkernel.so"
    fi
  fi
  expect together-dangling 100 "$(summary 1 0 0)"
}

# ---- autoAddCudaCompatRunpath (ours) -------------------------------------------------
test_cuda_compat() {
  local out lib compat=/nix/store/00000000000000000000000000000000-cuda_compat/compat
  if expect compat-elf 0 "Sourcing auto-add-cuda-compat-runpath-hook"; then
    out=$(output_path compat-elf out)
    lib=$(output_path compat-elf lib)
    check "compat-elf: upstream's entry, after the driver hook's, folded into one" \
      test "$(tr "\n" " " <"$out/folded")" = "addDriverRunpath addCudaCompatRunpath "
    check "compat-elf: one RUNPATH entry left in postFixupHooks" \
      eval '[[ $(tr "\n" " " <"$out/registered") == "nixCudaHooksFixRunpaths "* && $(cat "$out/registered") != *autoFixElfFiles* ]]'
    check "compat-elf: cuda_compat first, the driver second (executable)" \
      test "$(runpath "$out/bin/hello")" = "$compat:/run/opengl-driver/lib"
    check "compat-elf: the same in the lib output" \
      test "$(runpath "$lib/lib/libfoo.so")" = "$compat:/run/opengl-driver/lib"
  fi
  if expect compat-build-inputs 0; then
    out=$(output_path compat-build-inputs out)
    check "compat-build-inputs: from buildInputs the hook registers nothing (upstream's guard)" \
      eval '[[ $(tr "\n" " " <"$out/registered") != *addCudaCompatRunpath* ]]'
    check "compat-build-inputs: the driver entry alone" \
      test "$(runpath "$out/bin/hello")" = /run/opengl-driver/lib
  fi
}

# ---- autoAddDriverRunpath among Nixpkgs' own hooks ----------------------------------
test_aadr_dropin() {
  local out lib
  if expect aadr-functions 0; then
    out=$(output_path aadr-functions out)
    check "aadr-functions: autoFixElfFiles, addDriverRunpath, elfHasDynamicSection exist after sourcing" \
      test "$(tr '\n' ' ' <"$out/functions")" = "autoFixElfFiles addDriverRunpath elfHasDynamicSection "
    check "aadr-functions: the entry is the string upstream's checks look for" \
      grep -qx addDriverRunpath "$out/folded"
    check "aadr-functions: 'autoFixElfFiles myAction' ran Nixpkgs' autoFixElfFiles on each dynamic ELF file" \
      test "$(sed 's|.*/||' "$out/my-action" | sort | tr '\n' ' ')" = "hello libfoo.so "
    check "aadr-functions: and ours patched them (one run)" has_driver "$out/bin/hello"
  fi
  if expect aadr-by-hand 0; then
    out=$(output_path aadr-by-hand out)
    check "aadr-by-hand: Nixpkgs' addDriverRunpath function, called by hand" has_driver "$out/bin/hello"
  fi
  if expect aadr-remove-stubs 0 "discovered 'autoFixElfFiles addDriverRunpath' in postFixupHooks" \
    "added removeStubsFromRunpath to postFixupHooks"; then
    lib=$(output_path aadr-remove-stubs lib)
    check "aadr-remove-stubs: driver entry added (ours), stubs entry dropped (Nixpkgs')" \
      test "$(runpath "$lib/lib/libstubbed.so")" = /run/opengl-driver/lib
  fi
}

# ---- side by side with Nixpkgs' autoAddDriverRunpath ---------------------------------
# RUNPATH (or "-" without a dynamic RUNPATH) of FILE.
runpath_or_dash() { local r; r=$(runpath "$1"); echo "${r:--}"; }
test_aadr_side_by_side() {
  local none up ours f name a b base side o driver=/run/opengl-driver/lib
  for side in none upstream ours; do
    expect "side-$side" 0 || return
  done
  declare -A deviation=(
    [bin/no-runpath]="no empty entry: upstream writes '$driver:' (its old RUNPATH was empty)"
    [bin/static-pie]="static-pie left alone: upstream patches it (patchelf sees a dynamic section)"
    [lib/ld-linux-x86-64.so.2]="the dynamic loader left alone: upstream patches it"
    [lib/libdriver-already.so]="idempotent: upstream prepends the driver entry a second time"
  )
  local -A seen=()
  for o in out lib; do
    none=$(output_path side-none $o)
    up=$(output_path side-upstream $o)
    ours=$(output_path side-ours $o)
    while IFS= read -r f; do
      name=${f#./}
      base=$(runpath_or_dash "$none/$f")
      a=$(runpath_or_dash "$up/$f")
      b=$(runpath_or_dash "$ours/$f")
      seen[$name]=1
      case $name in
      bin/no-runpath)
        check "side by side $name: ${deviation[$name]}" \
          test "$base|$a|$b" = "-|$driver:|$driver" ;;
      bin/static-pie | lib/ld-linux-x86-64.so.2)
        check "side by side $name: ${deviation[$name]}" \
          eval '[[ $a == "$driver"* && $b == "$base" ]]' ;;
      lib/libdriver-already.so)
        check "side by side $name: ${deviation[$name]}" \
          test "$base|$a|$b" = "$driver|$driver:$driver|$driver" ;;
      *)
        check "side by side $name: same RUNPATH as upstream ($a)" test "$a" = "$b" ;;
      esac
    done < <(cd "$none" && find . -type f ! -path './nix-support/*' | sort)
  done
  for name in "${!deviation[@]}"; do
    check "side by side: the deviation case $name was built" test -n "${seen[$name]-}"
  done
  check "side by side: upstream patched the plain files (the comparison is not vacuous)" \
    eval '[[ $(runpath "$(output_path side-upstream out)/bin/with-runpath") == "$driver:/opt/x/lib" ]]'
}

# ---- cudaElfInspectHook ---------------------------------------------------------------
test_cuda_elf_inspect() {
  expect cei-wrong-capability 100 "cudaElfInspect"
  expect cei-sa-wrong-capability 100 "cudaElfInspect"
  expect cei-warn-only 0
  expect cei-right-capability 0
  expect cei-derivation-overrides 0
  expect cei-opt-out 0
  local cei_name='re:cudaElfInspect|cuda-elf-inspect'
  expect cei-unsubstituted 100 "$cei_name" "@cudaElfInspect@"
  expect cei-sa-without-json 100 "$cei_name" "re:attrs[.]json|NIX_ATTRS_JSON_FILE"
  if expect cei-after-remove-stubs 0 "added removeStubsFromRunpath to postFixupHooks"; then
    refute cei-after-remove-stubs "runs before"
    check "cei-after-remove-stubs: the inspect entry moved after Nixpkgs' removeStubsFromRunpath" \
      test "$(tail -n 2 "$result/registered" | tr '\n' '|')" = "nixCudaHooksFixRunpaths|cudaElfInspect|"
  fi
  if expect cei-sourced-twice 0; then
    check "cei-sourced-twice: registered once" test "$(grep -cx cudaElfInspect "$result/registered")" = 1
  fi
  test_cuda_elf_inspect_references
}

# Build-only references: the finding id and the file in the log, the ratchet.
test_cuda_elf_inspect_references() {
  local leak='re:build-only-reference.*share/leak[.]conf|share/leak[.]conf.*build-only-reference'
  if expect cei-ref-allowed 0; then
    refute cei-ref-allowed "build-only-reference"
  fi
  expect cei-ref-forbidden 100 "$leak" "-leak-dep (forbidden"
  # Nix's own check would fail too, after ours, without saying where.
  expect cei-ref-disallowed 100 "$leak" "disallowedReferences"
  if expect cei-ref-baseline 0; then
    check "cei-ref-baseline: the baseline holds the reference" grep -q "leak-dep" "$result"
  fi
  if expect cei-ref-ratchet 0; then
    refute cei-ref-ratchet "ERROR"
  fi
  if expect cei-ref-ratchet-new 100 "$leak" "leak-dep-two"; then
    # The baselined one is not reported again.
    refute cei-ref-ratchet-new "-leak-dep (forbidden"
  fi
}

# ---- nix/audit.nix ------------------------------------------------------------------
test_audit() {
  local products
  if expect audit-fixture 0; then
    products=$result/nix-support/hydra-build-products
    check "audit: hydra-build-products lists the JSON and SARIF reports" \
      eval 'grep -qx "report json $result/report.json" "$products" && grep -qx "report sarif $result/report.sarif" "$products"'
    check "audit: the JSON report is JSON" python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$result/report.json"
    check "audit: the SARIF report is SARIF 2.1.0" python3 -c \
      'import json,sys; assert json.load(open(sys.argv[1]))["version"] == "2.1.0"' "$result/report.sarif"
    check "audit: no findings, not marked failed" test ! -e "$result/nix-support/failed"
    check "audit: hydra-metrics parse as Hydra parses them and count what report.json says" \
      python3 "$here/hydra-parse.py" metrics "$result"
    check "audit: every hydra-build-products line is one Hydra keeps (HTML report included)" \
      eval 'python3 "$here/hydra-parse.py" products "$result" && grep -qx "report html $result/report.html" "$products"'
  fi
  if expect audit-fixture-findings 0; then
    check "audit: findings mark the build failed for Hydra, reports kept" \
      eval 'test -e "$result/nix-support/failed" && test -s "$result/report.json"'
    check "audit: hydra-metrics of a report with findings parse as Hydra parses them" \
      python3 "$here/hydra-parse.py" metrics "$result"
  fi
  expect audit-fixture-strict 100 "failOnFindings is set"
  if expect audit-set 0; then
    check "audit.set: the index links every package's report and JSON" \
      python3 "$here/hydra-parse.py" index "$result" kernels "odd <b>&\"name'" plain
  fi
}

# ---- run -------------------------------------------------------------------------------
# ---- autoAddDlopenRunpath ---------------------------------------------------------
# A program that dlopens libplug.so.1, which lives in another derivation's lib/
# (dlopen-plugin) with no RUNPATH to it: it must fail to load it with the
# driver hook alone and load it with ours; the RUNPATH is the driver entry,
# then the plugin's folder, once.
plugin_dir() { runpath "$1" | tr ':' '\n' | grep -- '-dlopen-plugin/lib$'; }
test_dlopen_runpath() {
  local out lib dir added='re:autoFixElfFiles: .*/bin/app: added /[^ ]* for dlopen of libplug\.so\.1'
  if expect dlopen-driver-only 0; then
    out=$(output_path dlopen-driver-only out)
    check "dlopen-driver-only: the driver entry alone" test "$(runpath "$out/bin/app")" = /run/opengl-driver/lib
    check "dlopen-driver-only: the program cannot load the library (negative control)" \
      eval '! "$out/bin/app" >/dev/null 2>&1'
  fi
  if expect dlopen-inputs 0 "Sourcing auto-add-dlopen-runpath-hook" "Using autoAddDriverRunpath" "$added"; then
    out=$(output_path dlopen-inputs out)
    dir=$(plugin_dir "$out/bin/app")
    check "dlopen-inputs: the driver entry, then the plugin input's lib/" \
      test "$(runpath "$out/bin/app")" = "/run/opengl-driver/lib:$dir"
    check "dlopen-inputs: the program loads the library" test "$("$out/bin/app")" = "answer 42"
    check "dlopen-inputs: no postFixupHooks entry of its own (the driver hook's one run does both)" \
      test "$(grep -ci -e autoFixElfFiles -e dlopen "$out/registered")" = 1
  fi
  local attr
  for attr in dlopen-named dlopen-named-sa dlopen-added; do
    if expect "$attr" 0 "$added"; then
      out=$(output_path "$attr" out)
      dir=$(plugin_dir "$out/bin/app")
      check "$attr: the plugin's folder after the driver entry" \
        test "$(runpath "$out/bin/app")" = "/run/opengl-driver/lib:$dir"
      check "$attr: the program loads the library" test "$("$out/bin/app")" = "answer 42"
    fi
  done
  if expect dlopen-own-output 0 "$added"; then
    out=$(output_path dlopen-own-output out)
    lib=$(output_path dlopen-own-output lib)
    check "dlopen-own-output: the lib output's plugin folder" \
      test "$(runpath "$out/bin/app")" = "/run/opengl-driver/lib:$lib/lib/plugins"
    check "dlopen-own-output: the program loads the library" test "$("$out/bin/app")" = "answer 42"
  fi
  if expect dlopen-opt-out 0 "Sourcing auto-add-dlopen-runpath-hook"; then
    out=$(output_path dlopen-opt-out out)
    check "dlopen-opt-out: dontUseAutoAddDlopenRunpath keeps the driver entry alone" \
      test "$(runpath "$out/bin/app")" = /run/opengl-driver/lib
  fi
  expect dlopen-missing-folder 100 "/nonexistent/dlopen/lib" "no such file or directory"
}

# ---- cudaPreflightHook ------------------------------------------------------------
test_cuda_preflight() {
  # This machine has no GPU: the hook stops the build before the tests run.
  if expect preflight-gpucheck 100 "ERROR: cuda-preflight: no-device-node: no /dev/nvidiactl: the sandbox has no GPU" \
    "programs.nix-required-mounts.presets.nvidia-gpu" "ERROR: cuda-preflight: no-driver-folder" \
    "cudaPreflightHook: ERROR: GPU code will not run in this sandbox"; then
    refute preflight-gpucheck "GPU TESTS RAN"
  fi
  if expect preflight-sa 100 "ERROR: cuda-preflight: no-device-node" "structuredAttrs is enabled" \
    "INFO: cuda-preflight: closure-not-checked"; then
    refute preflight-sa "GPU TESTS RAN"
  fi
  expect preflight-off 0 "GPU TESTS RAN"
  if expect preflight-installcheck 100 "ERROR: cuda-preflight: no-device-node"; then
    refute preflight-installcheck "GPU TESTS RAN"
  fi
}

# ---- one RUNPATH pass: Nixpkgs' hook chain in every order it supports vs ours ------
# "FILE RUNPATH" for every file of a redist-like build, its own outputs
# written OUT and LIB (each build has its own).
one_pass_runpaths() {
  local out lib f
  out=$(output_path "onePass.$1" out) && lib=$(output_path "onePass.$1" lib) || return 1
  for f in "$out"/bin/* "$out"/lib/* "$lib"/lib/*; do
    printf '%s %s\n' "${f#"${f%/*/*}"/}" "$(runpath_or_dash "$f" | sed "s|$out|OUT|g; s|$lib|LIB|g")"
  done
}
# removeStubsFromRunpath's per-entry DEBUG lines of a build's log, sorted,
# its outputs written OUT and LIB; bin/dlopener's left out (Nixpkgs' chain
# has its dlopen folder from the derivation's postFixup, which runs before
# the hooks and so meets their stubs pass; ours appends it after).
one_pass_stub_lines() {
  local out lib
  out=$(output_path "onePass.$1" out) && lib=$(output_path "onePass.$1" lib) || return 1
  grep -E '^DEBUG: removeStubsFromRunpath: (keeping|replacing|dropping) ' "$work/onePass.$1.log" |
    grep -v '/bin/dlopener runpath entry' | sed "s|$out|OUT|g; s|$lib|LIB|g" | sort
}
test_one_runpath_pass() {
  local compat=/nix/store/00000000000000000000000000000000-cuda_compat/compat
  local driver=/run/opengl-driver/lib order ref want out lib
  local -a ours=(compat-driver-stubs compat-stubs-driver driver-compat-stubs driver-stubs-compat
    stubs-compat-driver stubs-driver-compat)
  # Nixpkgs supports the orders with its compat hook after its driver hook
  # (buildRedist: "autoAddCudaCompatRunpath must appear AFTER
  # autoAddDriverRunpath"); its stubs hook goes last whatever its place.
  local -a upstream=(driver-compat-stubs driver-stubs-compat stubs-driver-compat)
  for order in "${ours[@]}"; do
    expect "onePass.ours-$order" 0 "re:INFO: nixCudaHooksOneRunpathEntry: one entry, nixCudaHooksFixRunpaths, for: " \
      "re:WARN: removeStubsFromRunpath: .*/lib/libother-stubs.so: keeps the stubs folder /nix/store/0+-nvidia-x11-stubs/lib" ||
      return
  done
  for order in "${upstream[@]}" compat-driver-stubs; do
    expect "onePass.upstream-$order" 0 "added removeStubsFromRunpath to postFixupHooks" || return
  done
  ref=$(one_pass_runpaths ours-driver-compat-stubs)
  # The oracle first: upstream's rules written out for three files, read
  # back with readelf (not from our report).
  want="bin/stubbed-tool $compat:$driver:\$ORIGIN/../lib"
  check "one pass: the stubs entries of an executable gone, compat and driver first" grep -qxF "$want" <<<"$ref"
  want="lib/libstubbed.so $compat:$driver:/opt/a:\$ORIGIN"
  check "one pass: a library's stubs entry after /opt/a gone, \$ORIGIN kept" grep -qxF "$want" <<<"$ref"
  want="bin/dlopener $compat:$driver:LIB/lib"
  check "one pass: the dlopen target's folder in the other output, last" grep -qxF "$want" <<<"$ref"
  for order in "${ours[@]}"; do
    check "one pass: ours in the order $order gives the RUNPATHs of driver-compat-stubs" \
      test "$(one_pass_runpaths "ours-$order")" = "$ref"
  done
  for order in "${upstream[@]}"; do
    check "one pass: Nixpkgs' chain in the order $order gives ours" \
      test "$(one_pass_runpaths "upstream-$order")" = "$ref"
    check "one pass: Nixpkgs' removeStubsFromRunpath DEBUG lines ($order) are ours, line for line" \
      test "$(one_pass_stub_lines "upstream-$order")" = "$(one_pass_stub_lines ours-driver-compat-stubs)"
  done
  check "one pass: the stub lines are there (the comparison is not vacuous)" \
    test "$(one_pass_stub_lines ours-driver-compat-stubs | grep -c 'dropping .*libstubbed.so runpath entry: .*-stubs/lib')" = 1
  check "one pass: Nixpkgs' chain with compat before driver (unsupported) differs (negative control)" \
    eval '[[ $(one_pass_runpaths upstream-compat-driver-stubs) != "$ref" ]]'
  # The loader agrees: run what can run, and what cannot.
  out=$(output_path onePass.ours-stubs-driver-compat out)
  check "one pass: a program finds its library through \$ORIGIN/../lib" "$out/bin/tool"
  check "one pass: the program dlopens its plugin from the other output" \
    test "$("$out/bin/dlopener")" = "answer 42"
  check "one pass: the stub libcuda is no longer found (its folder left the RUNPATH)" \
    eval '[[ $("$out/bin/stubbed-tool" 2>&1) == *"libcuda.so.1: cannot open shared object file"* ]]'
  out=$(output_path onePass.upstream-driver-compat-stubs out)
  check "one pass: the same under Nixpkgs' chain" test "$("$out/bin/dlopener")" = "answer 42"
  # The binary alone on the same files: one run and separate runs in two
  # orders give the same RUNPATHs; a second run changes no byte.
  local src tmp
  src=$(nix-build "${nix_opts[@]}" "$here/builds.nix" -A redistSrcOut "${build_args[@]}" --no-out-link 2>/dev/null)
  tmp=$(mktemp -d "$work/one-pass.XXXXXX")
  for order in one split reversed; do
    cp -r "$src/tree" "$tmp/$order" && chmod -R u+w "$tmp/$order"
  done
  local bin=$bin_dir/auto-add-driver-runpath
  "$bin" --remove-stubs --cuda-compat "$compat" --append-origin "$tmp/one" >/dev/null 2>&1
  { "$bin" --cuda-compat "$compat" "$tmp/split" && "$bin" --append-origin "$tmp/split" &&
    "$bin" --remove-stubs "$tmp/split"; } >/dev/null 2>&1
  { "$bin" --remove-stubs "$tmp/reversed" && "$bin" --append-origin "$tmp/reversed" &&
    "$bin" --cuda-compat "$compat" "$tmp/reversed"; } >/dev/null 2>&1
  local f same=1
  for f in "$tmp"/one/*/*; do
    f=${f#"$tmp/one/"}
    [[ $(runpath_or_dash "$tmp/one/$f") == "$(runpath_or_dash "$tmp/split/$f")" &&
      $(runpath_or_dash "$tmp/one/$f") == "$(runpath_or_dash "$tmp/reversed/$f")" ]] || same=
  done
  check "one pass: separate runs in two orders give one run's RUNPATHs (readelf, every file)" test -n "$same"
  # And the same bytes: a file our writer made is rewritten from its
  # original, not given one more segment per run.
  same=1
  for f in "$tmp"/one/*/*; do
    f=${f#"$tmp/one/"}
    cmp -s "$tmp/one/$f" "$tmp/split/$f" && cmp -s "$tmp/one/$f" "$tmp/reversed/$f" || same=
  done
  check "one pass: separate runs in two orders give one run's bytes (cmp, every file)" test -n "$same"
  # With --dlopen-search (one folder for every copy: the source's plugins):
  # the folder's run before $ORIGIN's, and after it, give one run's bytes.
  local plugins=$src/tree/plugins
  for order in dl-one dl-first dl-last; do
    cp -r "$src/tree" "$tmp/$order" && chmod -R u+w "$tmp/$order"
  done
  "$bin" --remove-stubs --cuda-compat "$compat" --append-origin --dlopen-search "$plugins" "$tmp/dl-one" >/dev/null 2>&1
  { "$bin" --dlopen-search "$plugins" "$tmp/dl-first" && "$bin" --append-origin "$tmp/dl-first" &&
    "$bin" --remove-stubs --cuda-compat "$compat" "$tmp/dl-first"; } >/dev/null 2>&1
  { "$bin" --append-origin --remove-stubs "$tmp/dl-last" && "$bin" --cuda-compat "$compat" "$tmp/dl-last" &&
    "$bin" --dlopen-search "$plugins" "$tmp/dl-last"; } >/dev/null 2>&1
  same=1
  for f in "$tmp"/dl-one/*/*; do
    f=${f#"$tmp/dl-one/"}
    cmp -s "$tmp/dl-one/$f" "$tmp/dl-first/$f" && cmp -s "$tmp/dl-one/$f" "$tmp/dl-last/$f" || same=
  done
  check "one pass: with --dlopen-search, its run before \$ORIGIN's and after give one run's bytes (cmp, every file)" test -n "$same"
  check "one pass: the dlopen folder after \$ORIGIN, whatever the order (readelf)" \
    test "$(runpath "$tmp/dl-first/bin/dlopener")" = "$compat:$driver:\$ORIGIN:$plugins"
  check "one pass: the dlopener finds its plugin after separate runs" "$tmp/dl-first/bin/dlopener"
  cp -r "$tmp/one" "$tmp/again"
  "$bin" --remove-stubs --cuda-compat "$compat" --append-origin "$tmp/again" >/dev/null 2>&1
  check "one pass: a second run changes no byte" diff -r "$tmp/one" "$tmp/again"
  check "one pass: \$ORIGIN appended once where absent" \
    test "$(runpath "$tmp/one/lib/libplain.so")" = "$compat:$driver:\$ORIGIN"
}

test_setup_order
test_no_broken_symlinks
test_no_broken_symlinks_structured_attrs
test_stdenv_precedence
test_upstream_cases

# The hooks being written in parallel: run once their hook file is merged;
# from then on a missing binary or prerequisite is a failure, not a skip.
requires() {
  local what=$1
  shift
  local missing=()
  local p
  for p in "$@"; do
    [[ -e $p ]] || missing+=("$p")
  done
  if ((${#missing[@]} > 0)); then
    fail "$what" "missing: ${missing[*]}"
    return 1
  fi
}
if [[ -f hooks/auto-add-driver-runpath.sh ]]; then
  requires "autoAddDriverRunpath prerequisites" "$bin_dir/auto-add-driver-runpath" && {
    test_auto_add_driver_runpath
    test_cuda_compat
    test_aadr_dropin
    test_aadr_side_by_side
    test_dlopen_runpath
    test_one_runpath_pass
  }
else
  echo "note: hooks/auto-add-driver-runpath.sh not merged yet; its build tests wait for it"
fi
requires "cudaPreflightHook prerequisites" "$bin_dir/cuda-preflight" && test_cuda_preflight
# The inspect hook may land before its binary: its cases (and audit.nix's) run
# once Cargo.toml declares the binary, and then require it built.
declared_bin() { grep -Eq "^name = \"$1\"" Cargo.toml; }
if declared_bin cuda-elf-inspect || [[ -x $bin_dir/cuda-elf-inspect ]]; then
  if [[ -f hooks/cuda-elf-inspect.sh ]]; then
    requires "cudaElfInspectHook prerequisites (binary, nvcc fixture)" "$bin_dir/cuda-elf-inspect" \
      "${cuda_fixture:-.tools/cuda/bin/nvcc}" && test_cuda_elf_inspect
  else
    echo "note: hooks/cuda-elf-inspect.sh not merged yet; its build tests wait for it"
  fi
  requires "audit prerequisites (binary, nvcc fixture)" "$bin_dir/cuda-elf-inspect" \
    "${cuda_fixture:-.tools/cuda/bin/nvcc}" && test_audit
else
  echo "note: the cuda-elf-inspect binary is not in Cargo.toml yet; the cudaElfInspectHook and audit.nix build tests wait for it"
fi
