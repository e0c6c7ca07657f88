# A minimal stub of Nixpkgs' package set, importable like Nixpkgs
# (`import ./stub { system; overlays; config; }`), with only the attributes
# our nix/ expressions touch, around Nixpkgs' REAL lib (read in place from
# $NCH_NIXPKGS, which nix/tests/run.sh sets: tests/tools/nixpkgs-upstream.sh).
# It exists because all of Nixpkgs is not available offline: with it,
# nix/tests/run.sh evaluates nix/package.nix, hooks.nix, overlay.nix,
# audit.nix, default.nix and flake.nix and checks what they pass to Nixpkgs'
# functions.
#
# Honesty rules: a stub function takes the same arguments as the Nixpkgs one
# and refuses unknown ones where Nixpkgs would; it builds nothing: it returns
# a record (`type = "derivation"`, a fake outPath, `stub.kind`, `stub.args`)
# that tests inspect. The overlay mechanics (fixed point, `extend`,
# `callPackage` auto-arguments, `_cuda.extensions` applied to every CUDA
# package set, `pkgsStatic`, `stdenv.override`) are real, because what they
# do to our overlay is what is under test.
{
  system ? builtins.currentSystem,
  overlays ? [ ],
  config ? { },
  isStatic ? false,
}:
let
  nixpkgsFiles = builtins.getEnv "NCH_NIXPKGS";
  lib =
    if nixpkgsFiles == "" then
      throw "nix/tests/stub: NCH_NIXPKGS is not set (the folder of tests/tools/nixpkgs-upstream.sh; nix/tests/run.sh sets it)"
    else
      import (/. + "${nixpkgsFiles}/lib");

  fakeHash = s: builtins.substring 0 32 (builtins.hashString "sha256" s);

  # A derivation-shaped record.
  mkStub =
    kind: name: args: extra:
    let
      outputs = args.outputs or [ "out" ];
      base = {
        type = "derivation";
        inherit name outputs system;
        outPath = "/nix/store/${fakeHash "${kind}-${name}-${if isStatic then "static" else ""}"}-${name}";
        drvPath = "/nix/store/${fakeHash "drv-${kind}-${name}"}-${name}.drv";
        stub = { inherit kind args isStatic; };
        meta = args.meta or { };
        passthru = args.passthru or { };
      };
      self =
        base
        // (args.passthru or { })
        // extra
        // lib.genAttrs outputs (o: self // { outPath = "${base.outPath}${if o == "out" then "" else "-${o}"}"; outputName = o; });
    in
    self;

  pkgsFun =
    final:
    let
      callPackageWith =
        autoArgs: fn: args:
        let
          f = if builtins.isFunction fn then fn else import fn;
          wanted = builtins.functionArgs f;
          missing = builtins.filter (n: !(wanted.${n}) && !(autoArgs ? ${n}) && !(args ? ${n})) (builtins.attrNames wanted);
          result = f (builtins.intersectAttrs wanted autoArgs // args);
        in
        assert missing == [ ] || throw "stub callPackage: function called without required argument \"${builtins.head missing}\"";
        if builtins.isAttrs result then result // { override = newArgs: callPackageWith autoArgs fn (args // newArgs); } else result;

      mkStdenv = lib.makeOverridable (
        {
          extraNativeBuildInputs ? [ ],
          name ? "stdenv",
        }:
        mkStub "stdenv" name { } {
          inherit extraNativeBuildInputs;
          isLinux = true;
          hostPlatform = {
            inherit system isStatic;
            isLinux = true;
            isi686 = false;
          };
          mkDerivation =
            fnOrAttrs:
            let
              attrs = if builtins.isFunction fnOrAttrs then lib.fix fnOrAttrs else fnOrAttrs;
            in
            mkStub "mkDerivation" (attrs.name or "${attrs.pname}-${attrs.version}") attrs (
              {
                inherit extraNativeBuildInputs;
              }
              // lib.optionalAttrs (attrs ? pname) { inherit (attrs) pname version; }
            );
        }
      );

      # The CUDA package sets: a base set per version, then every extension of
      # `_cuda.extensions` applied on top, as Nixpkgs does.
      mkCudaPackages =
        cudaMajorMinorVersion: defaultCapabilities:
        let
          base = cfinal: {
            inherit cudaMajorMinorVersion;
            callPackage = callPackageWith (final // cfinal);
            cudaStdenv = final.stdenv // {
              cudaCapabilities = config.cudaCapabilities or defaultCapabilities;
              cudaForwardCompat = config.cudaForwardCompat or true;
            };
            backendStdenv = cfinal.cudaStdenv;
            cuda_nvcc = mkStub "redist" "cuda_nvcc-${cudaMajorMinorVersion}" { } { };
            libcusparse_lt = mkStub "redist" "libcusparse_lt-${cudaMajorMinorVersion}" { } { };
            cudatoolkit = mkStub "redist" "cudatoolkit-${cudaMajorMinorVersion}" { } { };
            cudnn = mkStub "redist" "cudnn-${cudaMajorMinorVersion}" {
              meta.available = false;
            } { };
            setupCudaHook = mkStub "makeSetupHook" "setup-cuda-hook" { } { };
            flags = { };
          };
        in
        # As Nixpkgs' cuda-modules/default.nix composes them: its real
        # aliases.nix (when config.allowAliases), then `_cuda.extensions`.
        lib.fix (
          lib.extends (lib.composeManyExtensions (
            lib.optionals (config.allowAliases or true) [
              (import (/. + "${nixpkgsFiles}/pkgs/development/cuda-modules/aliases.nix") { inherit lib; })
            ]
            ++ final._cuda.extensions
          )) base
        );
    in
    {
      inherit lib config system;
      callPackage = callPackageWith final;
      extend = overlay: import ./. {
        inherit system config isStatic;
        overlays = overlays ++ [ overlay ];
      };

      stdenv = mkStdenv { };
      pkgsStatic =
        if isStatic then
          final
        else
          import ./. {
            inherit system overlays config;
            isStatic = true;
          };

      rustPlatform.buildRustPackage =
        fnOrAttrs:
        let
          attrs = if builtins.isFunction fnOrAttrs then fnOrAttrs (attrs // { finalPackage = drv; }) else fnOrAttrs;
          drv = mkStub "buildRustPackage" "${attrs.pname}-${attrs.version}" attrs { inherit (attrs) pname version; };
        in
        assert attrs ? cargoLock || attrs ? cargoHash || throw "buildRustPackage: cargoLock or cargoHash is required";
        drv;

      makeSetupHook =
        {
          name,
          propagatedBuildInputs ? [ ],
          depsTargetTargetPropagated ? [ ],
          meta ? { },
          passthru ? { },
          substitutions ? { },
        }@args:
        script:
        mkStub "makeSetupHook" name (args // { inherit script; }) { };

      runCommand =
        name: env: buildCommand:
        mkStub "runCommand" name (env // { inherit buildCommand; }) { };

      testers.testBuildFailure = drv: mkStub "testBuildFailure" "${drv.name}-failure" { inherit drv; } { };

      # What the overlay replaces, and what nix/hooks.nix takes from Nixpkgs.
      autoAddDriverRunpath = mkStub "upstream" "auto-add-driver-runpath-hook" { } { };
      addDriverRunpath = mkStub "upstream" "add-driver-runpath-hook" { } { };
      autoFixElfFiles = mkStub "upstream" "auto-fix-elf-files" { } { };

      # Nixpkgs' real `_cuda` fixed point (cuda-modules/_cuda), read in place.
      _cuda = import (/. + "${nixpkgsFiles}/pkgs/development/cuda-modules/_cuda");
      # Nixpkgs' root, as pkgs.path.
      path = /. + nixpkgsFiles;

      cudaPackages_12_8 = mkCudaPackages "12.8" [ "7.5" "8.0" "8.6" "8.9" "9.0" "10.0" "12.0" ];
      cudaPackages_13_0 = mkCudaPackages "13.0" [ "7.5" "8.0" "8.6" "8.9" "9.0" "10.0" "10.3" "12.0" "12.1" ];
      cudaPackages = final.cudaPackages_12_8;
    };
in
lib.fix (builtins.foldl' (f: overlay: lib.extends overlay f) pkgsFun overlays)
