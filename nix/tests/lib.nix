# Real builders for nix/tests/run.sh, made of Nixpkgs' real parts where they
# can be had offline: Nixpkgs' lib, its stdenv setup.sh and default-builder.sh,
# its default setup hooks, and the real addDriverRunpath / autoFixElfFiles /
# autoAddDriverRunpath packages (their own package.nix, called here), all read
# in place from the pinned Nixpkgs files (tests/tools/nixpkgs-upstream.sh).
# What is still a stand-in (makeSetupHook, the stdenv derivation, runCommand,
# testers.testBuildFailure, the host's /usr/bin in place of bootstrap tools and
# the cc wrapper) is listed with its reason in nix/tests/README.md. Builds run
# with the sandbox off and use the host's /usr/bin:/bin (gcc, readelf, coreutils).
{
  # Absolute path of the folder holding the static binaries (`make static`).
  binDir,
  # The folder of real Nixpkgs files (a checkout or the pinned copy).
  nixpkgs,
  # Absolute path of a static patchelf binary (patchelf 0.19, .tools/patchelf).
  patchelf,
  system ? builtins.currentSystem,
}:
let
  # A file of Nixpkgs, copied into the (throwaway) store as Nix does with ./paths.
  upstream = p: /. + "${nixpkgs}/${p}";
  lib = import (upstream "lib");
  bash = "/bin/bash";

  binaryNames = [
    "no-broken-symlinks"
    "auto-add-driver-runpath"
    "cuda-elf-inspect"
    "cuda-preflight"
  ];
  presentBinaries = builtins.filter (n: builtins.pathExists "${binDir}/${n}") binaryNames;

  # A plain builder script run by bash with the host's tools.
  plain =
    name: script: attrs:
    derivation (
      {
        inherit name system;
        builder = bash;
        args = [
          "-e"
          (builtins.toFile "${name}-builder.sh" ("export PATH=/usr/bin:/bin\n" + script))
        ];
      }
      // attrs
    );

  # The static binaries, copied into the store (builtins.path) and installed
  # in $out/bin like the real package.
  nix-cuda-hooks =
    plain "nix-cuda-hooks-static"
      ''
        mkdir -p "$out/bin"
        for b in $binaries; do
          base=''${b##*/}
          cp "$b" "$out/bin/''${base#*-}"
        done
      ''
      {
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

  # patchelf as a package (bin/patchelf), what a Linux stdenv carries in
  # extraNativeBuildInputs: upstream's autoFixElfFiles needs it on PATH.
  patchelfPackage =
    plain "patchelf-0.19"
      ''
        mkdir -p "$out/bin"
        cp "$src" "$out/bin/patchelf"
      ''
      {
        src = builtins.path {
          path = /. + patchelf;
          name = "patchelf";
        };
      };

  withPassthru =
    drv: passthru: meta:
    drv // passthru // { inherit meta; };

  # Stand-in for Nixpkgs' makeSetupHook (which needs replaceVars and all of
  # Nixpkgs): the script with its @placeholders@ substituted, in
  # $out/nix-support/setup-hook, and propagatedBuildInputs recorded where
  # setup.sh's findInputs reads them.
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
        inherit name system script;
        builder = bash;
        args = [
          "-e"
          ./make-setup-hook.sh
        ];
        inherit propagatedBuildInputs;
        substitutionNames = builtins.attrNames substitutions;
      }
      // substitutions
    )) passthru meta;

  # The default setup hooks a Linux stdenv sources after the derivation's own
  # inputs (stdenv/generic's defaultNativeBuildInputs), those of the pinned
  # files: no-broken-symlinks.sh first, as upstream lists it. Not
  # audit-tmpdir.sh: the pinned one calls `header`/`stopNest`, which the
  # pinned (newer) setup.sh no longer defines (the pins are per file).
  defaultHooks = map (f: upstream "pkgs/build-support/setup-hooks/${f}") [
    "no-broken-symlinks.sh"
    "make-symlinks-relative.sh"
    "move-lib64.sh"
    "multiple-outputs.sh"
    "patch-shebangs.sh"
    "prune-libtool-files.sh"
    "strip.sh"
  ];

  # A stdenv: `$stdenv/setup` is the prelude stdenv/generic/builder.sh writes
  # (SHELL, initialPath, defaultNativeBuildInputs, preHook) then the real
  # setup.sh; mkDerivation's builder is the real default-builder.sh.
  # `override` takes a set or a function of the old arguments, as
  # makeOverridable does. preHook exports STRIP/RANLIB as the bintools
  # wrapper's setup hook does, so that strip.sh really strips.
  mkStdenv =
    args@{
      extraNativeBuildInputs ? [ patchelfPackage ],
      hooks ? defaultHooks,
    }:
    let
      stdenvDrv = plain "stdenv-linux" ''
        mkdir -p "$out"
        {
          echo "export SHELL=$shell"
          echo "initialPath=\"$initialPath\""
          echo "defaultNativeBuildInputs=\"$defaultNativeBuildInputs\""
          echo "defaultBuildInputs=\"\""
          echo "$preHook"
          cat "$setup"
        } >"$out/setup"
      '' {
        shell = bash;
        setup = upstream "pkgs/stdenv/generic/setup.sh";
        initialPath = "/usr /";
        defaultNativeBuildInputs = extraNativeBuildInputs ++ hooks;
        preHook = "export STRIP=strip RANLIB=ranlib";
      };
    in
    {
      inherit extraNativeBuildInputs;
      hostPlatform = {
        inherit system;
        isLinux = true;
        isDarwin = false;
        isBSD = false;
        isi686 = false;
      };
      override = f: mkStdenv (args // (if builtins.isFunction f then f args else f));
      mkDerivation =
        attrs:
        let
          drv = derivation (
            {
              inherit system;
              builder = bash;
              args = [
                "-e"
                (upstream "pkgs/stdenv/generic/default-builder.sh")
              ];
              stdenv = stdenvDrv;
            }
            // removeAttrs attrs [
              "passthru"
              "meta"
            ]
          );
        in
        withPassthru drv (attrs.passthru or { }) (attrs.meta or { })
        // {
          # What testers.testBuildFailure needs to rebuild it with another builder.
          drvAttrs = attrs;
        };
    };

  stdenv = mkStdenv { };

  runCommand =
    name: env: buildCommand:
    stdenv.mkDerivation ({ inherit name buildCommand; } // env);

  # Stand-in for testers.testBuildFailure: the same derivation (same stdenv,
  # same attributes) with a builder that runs the real one, expects it to
  # fail, and keeps its exit status and log in $out/testBuildFailure.{exit,log}.
  testBuildFailure =
    drv:
    let
      attrs = drv.drvAttrs;
      outputs = attrs.outputs or [ "out" ];
    in
    withPassthru (derivation (
      {
        inherit system;
        builder = bash;
        args = [
          "-c"
          ''
            export PATH=/usr/bin:/bin
            set +e
            bash -e "$realBuilder" >"$NIX_BUILD_TOP/testBuildFailure.log" 2>&1
            status=$?
            set -e
            cat "$NIX_BUILD_TOP/testBuildFailure.log"
            if [ "$status" = 0 ]; then
              echo "testBuildFailure: the build was expected to fail but succeeded" >&2
              exit 1
            fi
            # The failed build's outputs are this derivation's: start them afresh.
            paths=()
            if [ -f .attrs.sh ]; then
              . ./.attrs.sh
              first=''${outputs[out]}
              paths=("''${outputs[@]}")
            else
              first=$out
              for o in $outputs; do paths+=("''${!o}"); done
            fi
            rm -rf "''${paths[@]}"
            mkdir -p "''${paths[@]}"
            echo "$status" >"$first/testBuildFailure.exit"
            cp "$NIX_BUILD_TOP/testBuildFailure.log" "$first/testBuildFailure.log"
            # End on a builtin: `bash -c` would exec a last external command,
            # and coreutils close stderr before exiting, which Nix takes for
            # the builder's end and answers with SIGKILL (a race).
            exit 0
          ''
        ];
        inherit (drv) stdenv;
        realBuilder = upstream "pkgs/stdenv/generic/default-builder.sh";
      }
      // removeAttrs attrs [
        "passthru"
        "meta"
      ]
      // {
        name = "${attrs.name or "${attrs.pname}-${attrs.version}"}-failing";
        outputs = outputs;
      }
    )) { } { };

  # Nixpkgs' own packages, from their own package.nix, with the stand-ins above.
  addDriverRunpath = import (upstream "pkgs/by-name/ad/addDriverRunpath/package.nix") {
    inherit lib stdenv makeSetupHook;
  };
  autoFixElfFiles = import (upstream "pkgs/by-name/au/autoFixElfFiles/package.nix") {
    inherit makeSetupHook;
  };
  upstreamAutoAddDriverRunpath = import (upstream "pkgs/by-name/au/autoAddDriverRunpath/package.nix") {
    inherit addDriverRunpath autoFixElfFiles makeSetupHook;
  };
in
{
  inherit
    lib
    nixpkgs
    upstream
    nix-cuda-hooks
    presentBinaries
    patchelfPackage
    makeSetupHook
    mkStdenv
    stdenv
    runCommand
    testBuildFailure
    addDriverRunpath
    autoFixElfFiles
    upstreamAutoAddDriverRunpath
    ;
  # A stdenv without Nixpkgs' noBrokenSymlinks: only ours decides.
  stdenvWithoutUpstreamHook = mkStdenv { hooks = builtins.tail defaultHooks; };
  # Enough of Nixpkgs for pkgs/test/stdenv/no-broken-symlinks.nix.
  pkgs = {
    inherit runCommand;
    testers = { inherit testBuildFailure; };
  };
  hooks = import ../hooks.nix {
    inherit
      lib
      makeSetupHook
      nix-cuda-hooks
      addDriverRunpath
      autoFixElfFiles
      ;
  };
  audit = import ../audit.nix { inherit lib runCommand nix-cuda-hooks; };
}
