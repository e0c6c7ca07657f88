# shellcheck shell=bash
# Evaluation tests, sourced by nix/tests/run.sh (which defines eval_true,
# eval_fails, $bin_dir). Expressions are evaluated from the repository root.

# Nixpkgs, stubbed, with our overlay; `cfg` is Nixpkgs' config.
pk='cfg: import ./nix/tests/stub { config = cfg; overlays = [ (import ./nix/overlay.nix) ]; }'
p="(($pk) { })"

# ---- without Nixpkgs -------------------------------------------------------------
eval_true "stub lib: getExe' and fixed points behave as in Nixpkgs" '
  let lib = import ./nix/tests/stub/lib.nix;
      drv = { type = "derivation"; outPath = "/s/x"; meta.mainProgram = "m"; };
      ext = lib.composeManyExtensions [ (f: p: { a = p.a + 1; }) (f: p: { b = f.a * 10; }) ];
      fixed = lib.fix (lib.extends ext (self: { a = 1; b = 0; }));
  in lib.getExe'"'"' drv "x" == "/s/x/bin/x" && lib.getExe drv == "/s/x/bin/m"
     && fixed == { a = 2; b = 20; }
     && (lib.makeExtensible (_: { l = [ 1 ]; })).extend (_: p: { l = p.l ++ [ 2 ]; }) ? l'

eval_true "test builders: the static binaries present are found" "
  builtins.elem \"no-broken-symlinks\" (import ./nix/tests/lib.nix { binDir = \"$bin_dir\"; }).presentBinaries"

eval_true "builds.nix: every test derivation evaluates to a named derivation" "
  let b = import ./nix/tests/builds.nix { binDir = \"$bin_dir\"; };
  in builtins.all (n: builtins.isString b.\${n}.name) (builtins.attrNames b)"

# Every @placeholder@ of a hook script is substituted by nix/hooks.nix, and
# every substitution names a placeholder the script has (catches typos both ways).
for pair in no-broken-symlinks.sh:noBrokenSymlinksHook auto-add-driver-runpath.sh:autoAddDriverRunpath \
  cuda-elf-inspect.sh:cuda; do
  script=${pair%%:*} attr=${pair#*:}
  [[ -f hooks/$script ]] || continue
  if [[ $attr == cuda ]]; then hook="$p.cudaPackages.cudaElfInspectHook"; else hook="$p.nixCudaHooks.$attr"; fi
  eval_true "hooks.nix substitutes exactly the placeholders of hooks/$script" "
    let
      text = builtins.readFile ./hooks/$script;
      pieces = builtins.split \"@([A-Za-z_][A-Za-z0-9_]*)@\" text;
      found = builtins.sort builtins.lessThan (builtins.concatMap (x: if builtins.isList x then x else [ ]) pieces);
      unique = builtins.foldl' (acc: x: if builtins.elem x acc then acc else acc ++ [ x ]) [ ] found;
      hook = $hook;
      keys = builtins.attrNames hook.stub.args.substitutions;
      unsubstituted = builtins.filter (x: !(builtins.elem x keys)) unique;
      unused = builtins.filter (x: !(builtins.elem x unique)) keys;
    in
      if hook.stub.args.script != ./hooks/$script then \"the hook is not built from hooks/$script\"
      else if unsubstituted != [ ] || unused != [ ] then
        \"placeholders nix/hooks.nix leaves unsubstituted: \${builtins.toJSON unsubstituted}; substitutions the script does not use: \${builtins.toJSON unused}\"
      else true"
done

# ---- nix/package.nix -----------------------------------------------------------
eval_true "package.nix: static buildRustPackage, version from Cargo.toml, cargoLock" "
  let pkg = $p.nix-cuda-hooks; cargo = builtins.fromTOML (builtins.readFile ./Cargo.toml);
  in pkg.stub.kind == \"buildRustPackage\" && pkg.stub.isStatic
     && pkg.version == cargo.package.version && pkg.pname == cargo.package.name
     && pkg.stub.args.cargoLock.lockFile == ./Cargo.lock
     && builtins.elem \"$root/src\" pkg.stub.args.src.files
     && !(builtins.elem \"$root/nix\" pkg.stub.args.src.files)"

eval_true "package.nix: the build checks that the hooks' three binaries are installed" "
  let pkg = $p.nix-cuda-hooks;
  in pkg.binaries == [ \"no-broken-symlinks\" \"auto-add-driver-runpath\" \"cuda-elf-inspect\" ]
     && builtins.all (b: builtins.match \".*'\${b}'.*\" (builtins.replaceStrings [ \"\\n\" ] [ \" \" ] pkg.stub.args.postInstall) != null) pkg.binaries
     && pkg.stub.args.cargoTestFlags == [ \"--lib\" \"--bins\" ]"

eval_true "package.nix: meta is complete" "
  let m = $p.nix-cuda-hooks.meta;
  in builtins.all (a: m ? \${a}) [ \"description\" \"longDescription\" \"homepage\" \"changelog\" \"license\" \"mainProgram\" \"platforms\" \"maintainers\" ]
     && builtins.map (l: l.spdxId) m.license == [ \"MIT\" \"Apache-2.0\" ]
     && m.homepage == (builtins.fromTOML (builtins.readFile ./Cargo.toml)).package.repository"

eval_true "package.nix: passthru.tests build the hooks in stdenv, failures through testBuildFailure" "
  let t = $p.nix-cuda-hooks.passthru.tests;
  in builtins.attrNames t == [ \"dangling\" \"danglingStructuredAttrs\" \"optOut\" \"reflexive\" \"valid\" ]
     && t.dangling.stub.args.failed.stub.kind == \"testBuildFailure\"
     && t.optOut.stub.kind == \"mkDerivation\"
     && t.danglingStructuredAttrs.stub.args.failed.stub.args.drv.stub.args.__structuredAttrs
     && (builtins.head t.optOut.extraNativeBuildInputs).name == \"no-broken-symlinks-hook\""

# ---- nix/hooks.nix -----------------------------------------------------------------
eval_true "hooks.nix: noBrokenSymlinksHook calls the package's binary" "
  let h = $p.nixCudaHooks.noBrokenSymlinksHook;
  in h.stub.kind == \"makeSetupHook\" && h.name == \"no-broken-symlinks-hook\"
     && h.stub.args.substitutions.noBrokenSymlinks == \"\${$p.nix-cuda-hooks}/bin/no-broken-symlinks\"
     && h.meta.description != \"\""

eval_true "hooks.nix: autoAddDriverRunpath calls the package's binary" "
  let h = $p.nixCudaHooks.autoAddDriverRunpath;
  in h.stub.args.substitutions.autoAddDriverRunpath == \"\${$p.nix-cuda-hooks}/bin/auto-add-driver-runpath\"
     && h.stub.args.script == ./hooks/auto-add-driver-runpath.sh"

eval_true "hooks.nix: cudaElfInspectHook takes each CUDA package set's defaults" "
  let a = $p.cudaPackages_12_8.cudaElfInspectHook.stub.args.substitutions;
      b = $p.cudaPackages_13_0.cudaElfInspectHook.stub.args.substitutions;
  in a == { cudaElfInspect = \"\${$p.nix-cuda-hooks}/bin/cuda-elf-inspect\"; cudaCapabilities = \"7.5;8.0;8.6;8.9;9.0;10.0;12.0\"; cudaForwardCompat = \"1\"; cudaVersion = \"12.8\"; }
     && b.cudaVersion == \"13.0\" && b.cudaCapabilities == \"7.5;8.0;8.6;8.9;9.0;10.0;10.3;12.0;12.1\"
     && $p.cudaPackages.cudaElfInspectHook.cudaVersion == \"12.8\""

eval_true "hooks.nix: cudaElfInspectHook follows the user's cudaCapabilities and cudaForwardCompat" "
  let s = (($pk) { cudaCapabilities = [ \"8.6\" \"9.0a\" ]; cudaForwardCompat = false; }).cudaPackages.cudaElfInspectHook.stub.args.substitutions;
  in s.cudaCapabilities == \"8.6;9.0a\" && s.cudaForwardCompat == \"\""

eval_true "hooks.nix: older CUDA sets with flags.* are read too" "
  let lib = import ./nix/tests/stub/lib.nix;
      hooks = import ./nix/hooks.nix {
        inherit lib;
        makeSetupHook = args: script: args;
        nix-cuda-hooks = $p.nix-cuda-hooks;
        cudaPackages = { cudaVersion = \"11.8\"; flags = { cudaCapabilities = [ \"8.6\" ]; cudaForwardCompat = false; }; };
      };
  in hooks.cudaElfInspectHook.substitutions.cudaCapabilities == \"8.6\"
     && hooks.cudaElfInspectHook.substitutions.cudaVersion == \"11.8\""

eval_fails "hooks.nix: cudaElfInspectHook outside a CUDA package set says what to use" \
  "$p.nixCudaHooks.cudaElfInspectHook.name" "use cudaPackages.cudaElfInspectHook"
eval_fails "hooks.nix: mkCudaElfInspectHook rejects a string of capabilities" \
  "($p.nixCudaHooks.mkCudaElfInspectHook { cudaCapabilities = \"8.6\"; cudaVersion = \"12.8\"; }).name" \
  "cudaCapabilities must be a list"

eval_true "hooks.nix: withNoBrokenSymlinksHook puts ours before the stdenv's own hooks" "
  let s = $p.nixCudaHooks.withNoBrokenSymlinksHook ($p.stdenv.override { extraNativeBuildInputs = [ \"x\" ]; });
  in s.extraNativeBuildInputs == [ $p.nixCudaHooks.noBrokenSymlinksHook \"x\" ]"

# ---- nix/overlay.nix ----------------------------------------------------------------
eval_true "overlay.nix: autoAddDriverRunpath is ours, Nixpkgs' kept under nixCudaHooks.upstream" "
  $p.autoAddDriverRunpath == $p.nixCudaHooks.autoAddDriverRunpath
  && $p.autoAddDriverRunpath.stub.kind == \"makeSetupHook\"
  && $p.nixCudaHooks.upstream.autoAddDriverRunpath.stub.kind == \"upstream\""

eval_true "overlay.nix: every CUDA package set gets cudaElfInspectHook, other attributes untouched" "
  $p.cudaPackages_12_8 ? cudaElfInspectHook && $p.cudaPackages_13_0 ? cudaElfInspectHook
  && $p.cudaPackages_12_8.cuda_nvcc.name == (import ./nix/tests/stub { }).cudaPackages_12_8.cuda_nvcc.name"

eval_true "overlay.nix: without the overlay nothing changes" "
  let plain = import ./nix/tests/stub { };
  in !(plain ? nix-cuda-hooks) && plain.autoAddDriverRunpath.stub.kind == \"upstream\"
     && !(plain.cudaPackages ? cudaElfInspectHook)"

eval_true "overlay.nix: composes with a later overlay going back to Nixpkgs' autoAddDriverRunpath" "
  let q = import ./nix/tests/stub { overlays = [ (import ./nix/overlay.nix)
            (final: prev: { autoAddDriverRunpath = prev.nixCudaHooks.upstream.autoAddDriverRunpath; }) ]; };
  in q.autoAddDriverRunpath.stub.kind == \"upstream\" && q.cudaPackages ? cudaElfInspectHook"

# ---- nix/audit.nix ------------------------------------------------------------------
eval_true "audit.nix: one package, all outputs, JSON + SARIF products" "
  let pkg = $p.stdenv.mkDerivation { pname = \"demo\"; version = \"1\"; outputs = [ \"out\" \"lib\" ]; };
      a = $p.nixCudaHooksAudit { package = pkg; cudaCapabilities = [ \"8.6\" \"9.0\" ]; baseline = ./nix/tests/stub/lib.nix; };
      cmd = a.stub.args.buildCommand;
      has = s: builtins.match \".*\${s}.*\" (builtins.replaceStrings [ \"\\n\" ] [ \" \" ] cmd) != null;
  in a.stub.kind == \"runCommand\" && a.name == \"cuda-elf-inspect-demo\"
     && has (builtins.replaceStrings [\".\"] [\"[.]\"] pkg.out.outPath) && has \"\${pkg.lib.outPath}\"
     && has \"--cuda-capabilities' '8[.]6;9[.]0'\" && has \"--baseline\"
     && has \"hydra-build-products\" && has \"report json\" && has \"report sarif\" && has \"nix-support/failed\"
     && a.package == pkg"

eval_true "audit.nix: a whole set audits each available derivation" "
  let set = $p.nixCudaHooksAudit.set { packages = $p.cudaPackages // { notADrv = 1; broken = throw \"x\"; }; };
  in builtins.elem \"cuda_nvcc\" (builtins.attrNames set) && set.cuda_nvcc.package == $p.cudaPackages.cuda_nvcc
     && !(set ? notADrv) && !(set ? broken) && !(set ? callPackage)"

# ---- default.nix and flake.nix ---------------------------------------------------------
eval_true "default.nix: packages, hooks and audit with a given Nixpkgs" "
  let d = import ./default.nix { nixpkgs = ./nix/tests/stub; };
  in d.nix-cuda-hooks.stub.isStatic && d.hooks.noBrokenSymlinksHook.name == \"no-broken-symlinks-hook\"
     && d.hooks.cudaElfInspectHook.name == \"cuda-elf-inspect-hook\"
     && d.autoAddDriverRunpath.name == \"auto-add-driver-runpath-hook\"
     && builtins.isFunction d.audit.__functor && d.tests ? dangling"

flake='let
    flake = import ./flake.nix;
    self = flake.outputs { inherit self; nixpkgs = { lib = import ./nix/tests/stub/lib.nix; outPath = ./nix/tests/stub; }; };
  in self'
eval_true "flake.nix: packages, overlays.default, checks, lib.audit" "
  let f = $flake; s = \"x86_64-linux\";
  in builtins.attrNames f == [ \"checks\" \"lib\" \"overlays\" \"packages\" ]
     && f.packages.\${s}.default.stub.isStatic
     && f.packages.\${s}.cudaElfInspectHook.name == \"cuda-elf-inspect-hook\"
     && f.packages.\${s}.noBrokenSymlinksHook.name == \"no-broken-symlinks-hook\"
     && f.packages.aarch64-linux.default.system == \"aarch64-linux\"
     && builtins.isFunction f.overlays.default
     && builtins.attrNames f.checks.\${s} == [ \"dangling\" \"danglingStructuredAttrs\" \"optOut\" \"package\" \"reflexive\" \"valid\" ]
     && (f.lib.audit (import ./nix/tests/stub { })).set { packages = { }; } == { }
     && (f.lib.audit (import ./nix/tests/stub { })) { package = (import ./nix/tests/stub { }).autoAddDriverRunpath; } ? package"
eval_true "flake.nix: inputs" '(import ./flake.nix).inputs.nixpkgs.url == "github:NixOS/nixpkgs/nixos-unstable"'
