# Real builders for nix/tests/run.sh: plain `derivation`s with a bash builder,
# offering the interfaces of the Nixpkgs functions nix/hooks.nix and
# nix/audit.nix call (makeSetupHook, runCommand, stdenv.mkDerivation,
# stdenv.override), so that those files are built for real, unchanged, here
# where Nixpkgs is not available. Builds run with the sandbox off and use the
# host's /usr/bin:/bin (gcc, readelf, coreutils).
{
  # Absolute path of the folder holding the static binaries (`make static`).
  binDir,
  system ? builtins.currentSystem,
}:
let
  lib = import ./stub/lib.nix;
  bash = "/bin/bash";

  binaryNames = [
    "no-broken-symlinks"
    "auto-add-driver-runpath"
    "cuda-elf-inspect"
  ];
  presentBinaries = builtins.filter (n: builtins.pathExists "${binDir}/${n}") binaryNames;

  # The static binaries, copied into the store (builtins.path) and installed
  # in $out/bin like the real package.
  nix-cuda-hooks =
    derivation {
      name = "nix-cuda-hooks-static";
      inherit system;
      builder = bash;
      args = [
        "-e"
        (builtins.toFile "install-binaries.sh" ''
          export PATH=/usr/bin:/bin
          mkdir -p "$out/bin"
          for b in $binaries; do
            base=''${b##*/}
            cp "$b" "$out/bin/''${base#*-}"
          done
        '')
      ];
      binaries = map (
        n:
        builtins.path {
          path = /. + "${binDir}/${n}";
          name = n;
        }
      ) presentBinaries;
    }
    // {
      meta = {
        homepage = "https://github.com/nix-cuda-hooks/nix-cuda-hooks";
        license = [ ];
        platforms = [ system ];
        mainProgram = "cuda-elf-inspect";
      };
      binaries = presentBinaries;
    };

  withPassthru =
    drv: passthru: meta:
    drv // passthru // { inherit meta; };

  makeSetupHook =
    {
      name,
      propagatedBuildInputs ? [ ],
      depsTargetTargetPropagated ? [ ],
      meta ? { },
      passthru ? { },
      substitutions ? { },
    }:
    script:
    withPassthru (derivation (
      {
        inherit name system script propagatedBuildInputs;
        builder = bash;
        args = [
          "-e"
          ./make-setup-hook.sh
        ];
        substitutionNames = builtins.attrNames substitutions;
      }
      // substitutions
    )) passthru meta;

  # A stdenv: mkDerivation runs builder.sh, which sources the setup.sh
  # stand-in. `defaultNativeBuildInputs` = extraNativeBuildInputs ++ the
  # stdenv's own hooks, as in stdenv/generic/default.nix; `override` takes a
  # set or a function of the old arguments, as makeOverridable does.
  mkStdenv =
    args@{
      extraNativeBuildInputs ? [ ],
      ownHooks ? [ ],
    }:
    {
      inherit extraNativeBuildInputs;
      override = f: mkStdenv (args // (if builtins.isFunction f then f args else f));
      mkDerivation =
        attrs:
        withPassthru (derivation (
          {
            inherit system;
            builder = bash;
            args = [
              "-e"
              ./builder.sh
            ];
            setup = ./setup.sh;
            setupFunctions = ./setup-functions.sh;
            defaultNativeBuildInputs = extraNativeBuildInputs ++ ownHooks;
          }
          // removeAttrs attrs [
            "passthru"
            "meta"
          ]
        )) (attrs.passthru or { }) (attrs.meta or { });
    };

  stdenv = mkStdenv { };
  # A stdenv whose own hooks include (a stand-in of) Nixpkgs' noBrokenSymlinks.
  stdenvWithUpstreamHook = mkStdenv { ownHooks = [ ./upstream-no-broken-symlinks.sh ]; };

  runCommand =
    name: env: buildCommand:
    stdenv.mkDerivation ({ inherit name buildCommand; } // env);
in
{
  inherit
    lib
    nix-cuda-hooks
    presentBinaries
    makeSetupHook
    mkStdenv
    stdenv
    stdenvWithUpstreamHook
    runCommand
    ;
  hooks = import ../hooks.nix { inherit lib makeSetupHook nix-cuda-hooks; };
  audit = import ../audit.nix { inherit lib runCommand nix-cuda-hooks; };
}
