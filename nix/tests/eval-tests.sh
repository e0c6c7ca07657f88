# shellcheck shell=bash
# Evaluation tests, sourced by nix/tests/run.sh (which defines eval_true,
# eval_fails, $bin_dir). Expressions are evaluated from the repository root.

# Nixpkgs, stubbed, with our overlay; `cfg` is Nixpkgs' config.
pk='cfg: import ./nix/tests/stub { config = cfg; overlays = [ (import ./nix/overlay.nix) ]; }'
p="(($pk) { })"

# ---- Nixpkgs' real lib, the test builders -------------------------------------------------------------
L="(import (/. + \"$nixpkgs/lib\"))"
eval_true "real lib: Nixpkgs' lib evaluates with this Nix (>= 2.18), lib.fileset.toSource copies only the files given" "
  let lib = $L;
      src = lib.fileset.toSource { root = ./.; fileset = lib.fileset.unions [ ./Cargo.toml ./hooks ]; };
  in builtins.compareVersions builtins.nixVersion \"2.18\" >= 0
     && builtins.attrNames (builtins.readDir src) == [ \"Cargo.toml\" \"hooks\" ]"

targs="binDir = \"$bin_dir\"; nixpkgs = \"$nixpkgs\"; patchelf = \"$patchelf\";"
eval_true "test builders: the static binaries present are found" "
  builtins.elem \"no-broken-symlinks\" (import ./nix/tests/lib.nix { $targs }).presentBinaries"

eval_true "builds.nix: every test derivation evaluates to a named derivation" "
  let b = import ./nix/tests/builds.nix { $targs };
  in builtins.all (n: builtins.isString (b.\${n}.name or null) || builtins.all (m: builtins.isString b.\${n}.\${m}.name) (builtins.attrNames b.\${n})) (builtins.attrNames b)"

# Every @placeholder@ of a hook script is substituted by nix/hooks.nix, and
# every substitution names a placeholder the script has (catches typos both ways).
for pair in no-broken-symlinks.sh:noBrokenSymlinksHook auto-add-driver-runpath.sh:autoAddDriverRunpath \
  auto-fix-elf-files-driver-runpath.sh:autoFixElfFilesDriverRunpath cuda-elf-inspect.sh:cuda \
  auto-add-cuda-compat-runpath.sh:compat auto-add-dlopen-runpath.sh:autoAddDlopenRunpath \
  cuda-preflight.sh:cudaPreflightHook; do
  script=${pair%%:*} attr=${pair#*:}
  [[ -f hooks/$script ]] || continue
  if [[ $attr == cuda ]]; then hook="$p.cudaPackages.cudaElfInspectHook"
  elif [[ $attr == compat ]]; then
    hook="($p.nixCudaHooks.mkAutoAddCudaCompatRunpath { cuda_compat = { outPath = \"/nix/store/00000000000000000000000000000000-cuda_compat\"; meta = { }; }; })"
  else hook="$p.nixCudaHooks.$attr"; fi
  eval_true "hooks.nix substitutes exactly the placeholders of hooks/$script" "
    let
      text = builtins.readFile ./hooks/$script;
      pieces = builtins.split \"@([A-Za-z_][A-Za-z0-9_]*)@\" text;
      found = builtins.sort builtins.lessThan (builtins.concatMap (x: if builtins.isList x then x else [ ]) pieces);
      unique = builtins.foldl' (acc: x: if builtins.elem x acc then acc else acc ++ [ x ]) [ ] found;
      hook = $hook;
      keys = builtins.attrNames (hook.stub.args.substitutions or { });
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
     && builtins.attrNames (builtins.readDir pkg.stub.args.src)
        == [ \"Cargo.lock\" \"Cargo.toml\" \"hooks\" \"rustfmt.toml\" \"src\" \"tests\" ]"

eval_true "package.nix: the build checks that the four binaries are installed" "
  let pkg = $p.nix-cuda-hooks;
  in pkg.binaries == [ \"no-broken-symlinks\" \"auto-add-driver-runpath\" \"cuda-elf-inspect\" \"cuda-preflight\" ]
     && builtins.match \".*for b in no-broken-symlinks auto-add-driver-runpath cuda-elf-inspect cuda-preflight; do.*\" (builtins.replaceStrings [ \"\\n\" ] [ \" \" ] pkg.stub.args.postInstall) != null
     && pkg.stub.args.cargoTestFlags == [ \"--lib\" \"--bins\" ]"

eval_true "package.nix: meta is complete" "
  let m = $p.nix-cuda-hooks.meta;
  in builtins.all (a: m ? \${a}) [ \"description\" \"longDescription\" \"homepage\" \"changelog\" \"license\" \"mainProgram\" \"platforms\" \"maintainers\" ]
     && builtins.map (l: l.spdxId) m.license == [ \"MIT\" \"Apache-2.0\" ]
     && m.homepage == (builtins.fromTOML (builtins.readFile ./Cargo.toml)).package.repository"

eval_true "package.nix: passthru.tests build the hooks in the ordinary stdenv and the static one, failures through testBuildFailure" "
  let t = $p.nix-cuda-hooks.passthru.tests;
      names = [ \"dangling\" \"danglingStructuredAttrs\" \"optOut\" \"reflexive\" \"valid\" ];
  in builtins.attrNames t == builtins.sort builtins.lessThan (names ++ map (n: n + \"Static\") names)
     && t.dangling.stub.args.failed.stub.kind == \"testBuildFailure\"
     && t.optOut.stub.kind == \"mkDerivation\"
     && !t.optOut.stub.isStatic && t.optOutStatic.stub.isStatic
     && t.danglingStructuredAttrs.stub.args.failed.stub.args.drv.stub.args.__structuredAttrs
     && (builtins.head t.optOut.extraNativeBuildInputs).name == \"no-broken-symlinks-hook\""

# ---- nix/hooks.nix -----------------------------------------------------------------
eval_true "hooks.nix: noBrokenSymlinksHook calls the package's binary" "
  let h = $p.nixCudaHooks.noBrokenSymlinksHook;
  in h.stub.kind == \"makeSetupHook\" && h.name == \"no-broken-symlinks-hook\"
     && h.stub.args.substitutions.noBrokenSymlinks == \"\${$p.nix-cuda-hooks}/bin/no-broken-symlinks\"
     && h.meta.description != \"\""

eval_true "hooks.nix: autoAddDriverRunpath propagates Nixpkgs' addDriverRunpath and autoFixElfFiles, then our binary's wrapper" "
  let q = $p; h = q.nixCudaHooks.autoAddDriverRunpath; w = q.nixCudaHooks.autoFixElfFilesDriverRunpath;
  in h.stub.args.script == ./hooks/auto-add-driver-runpath.sh
     && h.stub.args.propagatedBuildInputs == [ q.addDriverRunpath q.autoFixElfFiles w ]
     && q.addDriverRunpath.stub.kind == \"upstream\" && q.autoFixElfFiles.stub.kind == \"upstream\"
     && w.stub.args.substitutions.autoAddDriverRunpath == \"\${q.nix-cuda-hooks}/bin/auto-add-driver-runpath\"
     && w.stub.args.script == ./hooks/auto-fix-elf-files-driver-runpath.sh"

eval_true "hooks.nix: autoAddDlopenRunpath propagates our autoAddDriverRunpath; the overlay adds it at the top level" "
  let q = $p; h = q.nixCudaHooks.autoAddDlopenRunpath;
  in h.stub.kind == \"makeSetupHook\" && h.name == \"auto-add-dlopen-runpath-hook\"
     && h.stub.args.script == ./hooks/auto-add-dlopen-runpath.sh
     && h.stub.args.propagatedBuildInputs == [ q.nixCudaHooks.autoAddDriverRunpath ]
     && q.autoAddDlopenRunpath == h && h.meta.description != \"\""

eval_true "hooks.nix: the cuda_compat hook substitutes the compat folder, propagates autoFixElfFiles then our wrapper, and takes cuda_compat's platforms" "
  let q = $p; c = { outPath = \"/nix/store/00000000000000000000000000000000-cuda_compat\"; meta.platforms = [ \"aarch64-linux\" ]; };
      h = q.nixCudaHooks.mkAutoAddCudaCompatRunpath { cuda_compat = c; };
  in h.stub.args.script == ./hooks/auto-add-cuda-compat-runpath.sh
     && h.name == \"auto-add-cuda-compat-runpath-hook\"
     && h.stub.args.substitutions.libcudaPath == \"/nix/store/00000000000000000000000000000000-cuda_compat/compat\"
     && h.stub.args.propagatedBuildInputs == [ q.autoFixElfFiles q.nixCudaHooks.autoFixElfFilesDriverRunpath ]
     && h.meta.platforms == [ \"aarch64-linux\" ] && h.meta.badPlatforms == [ \"aarch64-linux\" ]"

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
  let lib = $L;
      hooks = import ./nix/hooks.nix {
        inherit lib;
        addDriverRunpath = { };
        autoFixElfFiles = { };
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
      a = $p.nixCudaHooksAudit { package = pkg; cudaCapabilities = [ \"8.6\" \"9.0\" ]; baseline = ./nix/tests/stub/default.nix; };
      cmd = a.stub.args.buildCommand;
      has = s: builtins.match \".*\${s}.*\" (builtins.replaceStrings [ \"\\n\" ] [ \" \" ] cmd) != null;
  in a.stub.kind == \"runCommand\" && a.name == \"cuda-elf-inspect-demo\"
     && has (builtins.replaceStrings [\".\"] [\"[.]\"] pkg.out.outPath) && has \"\${pkg.lib.outPath}\"
     && has \"--cuda-capabilities '8[.]6;9[.]0'\" && has \"--baseline\"
     && has \"hydra-build-products\" && has \"report json\" && has \"report sarif\" && has \"nix-support/failed\"
     && has \"report html\" && has \"nix-support/hydra-metrics\"
     && a.package == pkg"

eval_true "audit.nix: a set audits each derivation once; aliases (unevaluated: no warning), stdenvs, hooks, non-derivations, unavailable skipped with the reason" "
  let q = $p;
      s = q.nixCudaHooksAudit.set { packages = q.cudaPackages // { notADrv = 1; broken = throw \"x\"; }; };
      why = s._skipped.skipped;
      audited = builtins.attrNames (removeAttrs s [ \"_skipped\" \"_index\" ]);
      paths = map (n: s.\${n}.package.outPath) audited;
  in builtins.elem \"cuda_nvcc\" audited && s.cuda_nvcc.package == q.cudaPackages.cuda_nvcc
     && builtins.elem \"libcusparse_lt\" audited && !(s ? cusparselt) && !(s ? cudaFlags)
     && builtins.length paths == builtins.length (q.lib.unique paths)
     && why.cusparselt == \"an alias (Nixpkgs' cuda-modules/aliases.nix), audited under the name it points to\"
     && why.cudaStdenv == \"a stdenv\" && why.backendStdenv == \"a stdenv\"
     && why.setupCudaHook == \"a setup hook\" && why.notADrv == \"not a derivation\"
     && why.callPackage == \"not a derivation\" && why.broken == \"does not evaluate\"
     && q.lib.hasPrefix \"meta.available is false\" why.cudnn && !(s ? cudnn)
     && s._skipped.counts.\"a stdenv\" == 2
     && builtins.attrNames s._index.audits == audited
     && (q.nixCudaHooksAudit.set { packages = q.cudaPackages; includeUnavailable = true; }) ? cudnn"

eval_true "audit.nix: a CUDA package set is audited for its own capabilities, forward compatibility and CUDA version; arguments override them" "
  let q = ($pk) { cudaCapabilities = [ \"8.6\" \"9.0\" ]; cudaForwardCompat = false; };
      cmd = s: n: builtins.replaceStrings [ \"\\n\" ] [ \" \" ] s.\${n}.stub.args.buildCommand;
      has = s: n: re: builtins.match \".*\${re}.*\" (cmd s n) != null;
      own = q.nixCudaHooksAudit.set { packages = q.cudaPackages; };
      given = q.nixCudaHooksAudit.set { packages = q.cudaPackages; cudaCapabilities = [ \"8.0\" ]; cudaForwardCompat = true; };
      plain = $p.nixCudaHooksAudit.set { packages = $p.cudaPackages_13_0; };
      none = q.nixCudaHooksAudit.set { packages = { inherit (q.cudaPackages) cuda_nvcc; }; };
  in has own \"cuda_nvcc\" \"--cuda-capabilities '8[.]6;9[.]0'\" && has own \"cuda_nvcc\" \"--no-forward-compat\"
     && has own \"cuda_nvcc\" \"--cuda-version 12[.]8\"
     && has given \"cuda_nvcc\" \"--cuda-capabilities 8[.]0 \" && has given \"cuda_nvcc\" \"--forward-compat\"
     && has plain \"cuda_nvcc\" \"--cuda-capabilities '7[.]5;8[.]0;8[.]6;8[.]9;9[.]0;10[.]0;10[.]3;12[.]0;12[.]1'\"
     && has plain \"cuda_nvcc\" \"--cuda-version 13[.]0\" && has plain \"cuda_nvcc\" \"--forward-compat\"
     && !(has none \"cuda_nvcc\" \"--cuda-capabilities\")"

eval_true "overlay.nix: composes with Nixpkgs' real _cuda fixed point and aliases.nix" "
  let q = $p; plain = import ./nix/tests/stub { };
  in builtins.length q._cuda.extensions == 1 && plain._cuda.extensions == [ ]
     && builtins.isFunction q._cuda.lib.formatCapabilities
     && q._cuda.db.cudaCapabilityToInfo ? \"8.6\"
     && q.cudaPackages ? cudaElfInspectHook && builtins.elem \"cusparselt\" (builtins.attrNames q.cudaPackages)
     && q.cudaPackages_13_0.cudaElfInspectHook.cudaVersion == \"13.0\""

eval_warns "overlay.nix: an alias of the composed set still warns like upstream's (aliases.nix is really applied)" \
  "$p.cudaPackages.cusparselt.name" "cudaPackages.cusparselt is deprecated, use cudaPackages.libcusparse_lt instead"

# ---- default.nix and flake.nix ---------------------------------------------------------
eval_true "default.nix: packages, hooks and audit with a given Nixpkgs" "
  let d = import ./default.nix { nixpkgs = ./nix/tests/stub; };
  in d.nix-cuda-hooks.stub.isStatic && d.hooks.noBrokenSymlinksHook.name == \"no-broken-symlinks-hook\"
     && d.hooks.cudaElfInspectHook.name == \"cuda-elf-inspect-hook\"
     && d.autoAddDriverRunpath.name == \"auto-add-driver-runpath-hook\"
     && builtins.isFunction d.audit.__functor && d.tests ? dangling"

flake="let
    flake = import ./flake.nix;
    self = flake.outputs { inherit self; nixpkgs = { lib = $L; outPath = ./nix/tests/stub; }; };
  in self"
eval_true "flake.nix: packages, overlays.default, checks, lib.audit" "
  let f = $flake; s = \"x86_64-linux\";
  in builtins.attrNames f == [ \"checks\" \"lib\" \"overlays\" \"packages\" ]
     && f.packages.\${s}.default.stub.isStatic
     && f.packages.\${s}.cudaElfInspectHook.name == \"cuda-elf-inspect-hook\"
     && f.packages.\${s}.noBrokenSymlinksHook.name == \"no-broken-symlinks-hook\"
     && f.packages.aarch64-linux.default.system == \"aarch64-linux\"
     && builtins.isFunction f.overlays.default
     && builtins.elem \"package\" (builtins.attrNames f.checks.\${s}) && f.checks.\${s} ? optOut && f.checks.\${s} ? optOutStatic
     && builtins.attrNames ((f.lib.audit (import ./nix/tests/stub { })).set { packages = { }; }) == [ \"_index\" \"_skipped\" ]
     && (f.lib.audit (import ./nix/tests/stub { })) { package = (import ./nix/tests/stub { }).autoAddDriverRunpath; } ? package"
eval_true "flake.nix: inputs" '(import ./flake.nix).inputs.nixpkgs.url == "github:NixOS/nixpkgs/nixos-unstable"'
