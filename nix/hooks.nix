# The setup hooks, as Nixpkgs packages them: `makeSetupHook` writes
# hooks/<name>.sh to $out/nix-support/setup-hook with its placeholders
# substituted, and a package that lists the hook in nativeBuildInputs sources
# it. Call with callPackage and the binaries package:
#
#   hooks = pkgs.callPackage ./nix/hooks.nix { nix-cuda-hooks = pkgs.pkgsStatic.callPackage ./nix/package.nix { }; };
#
# callPackage also hands over Nixpkgs' own `addDriverRunpath` and
# `autoFixElfFiles` packages: our autoAddDriverRunpath propagates them, as
# upstream's does, so their shell functions exist in every build using it.
#
# Placeholders (each hook fails with a message naming itself and this file
# when one is left unsubstituted):
#   @noBrokenSymlinks@      path of the no-broken-symlinks binary
#   @autoAddDriverRunpath@  path of the auto-add-driver-runpath binary
#   @cudaElfInspect@        path of the cuda-elf-inspect binary
#   @cudaPreflight@         path of the cuda-preflight binary
#   @cudaCapabilities@      the CUDA package set's capabilities, ";"-separated
#                           ("8.6;9.0", the form `--cuda-capabilities` takes)
#   @cudaForwardCompat@     "1" when forward compatibility (a PTX target for the
#                           last capability) is on, "" when off: the way Nix
#                           exports a boolean, so `[[ -n ... ]]` reads it
#   @cudaVersion@           the set's CUDA major.minor version ("12.8")
# The three CUDA values are defaults: a derivation that sets cudaCapabilities,
# cudaForwardCompat or cudaMajorMinorVersion itself overrides them
# (hooks/cuda-elf-inspect.sh).
{
  lib,
  makeSetupHook,
  nix-cuda-hooks,
  # Nixpkgs' own setup hooks (pkgs/by-name): addDriverRunpath defines the
  # addDriverRunpath function, autoFixElfFiles defines autoFixElfFiles and
  # elfHasDynamicSection.
  addDriverRunpath,
  autoFixElfFiles,
  # A CUDA package set, for cudaElfInspectHook's defaults; null outside one.
  cudaPackages ? null,
}:
let
  bin = lib.getExe' nix-cuda-hooks;

  meta = description: {
    inherit description;
    inherit (nix-cuda-hooks.meta) homepage license platforms;
  };

  # A CUDA package set's policy, read where the Nixpkgs of the day keeps it:
  # cudaStdenv/backendStdenv carry cudaCapabilities (the user's list or the
  # set's default) and cudaForwardCompat; older sets had them in `flags`.
  cudaPolicyOf =
    cudaPackages:
    let
      std = cudaPackages.cudaStdenv or cudaPackages.backendStdenv or { };
      flags = cudaPackages.flags or { };
    in
    {
      cudaCapabilities =
        std.cudaCapabilities or flags.cudaCapabilities
          or (throw "nix-cuda-hooks: cannot find cudaCapabilities in this CUDA package set");
      cudaForwardCompat = std.cudaForwardCompat or flags.cudaForwardCompat or true;
      cudaVersion =
        cudaPackages.cudaMajorMinorVersion or cudaPackages.cudaVersion
          or (throw "nix-cuda-hooks: cannot find the CUDA version of this CUDA package set");
    };

  mkCudaElfInspectHook =
    {
      cudaCapabilities,
      cudaForwardCompat ? true,
      cudaVersion,
    }:
    assert lib.elem (builtins.typeOf cudaCapabilities) [ "list" ]
      || throw "mkCudaElfInspectHook: cudaCapabilities must be a list of strings like [ \"8.6\" \"9.0\" ]";
    makeSetupHook {
      name = "cuda-elf-inspect-hook";
      substitutions = {
        cudaElfInspect = bin "cuda-elf-inspect";
        cudaCapabilities = lib.concatStringsSep ";" cudaCapabilities;
        cudaForwardCompat = if cudaForwardCompat then "1" else "";
        inherit cudaVersion;
      };
      passthru = {
        inherit cudaCapabilities cudaForwardCompat cudaVersion;
      };
      meta = meta "Fails a CUDA build whose ELF files lack GPU code for the requested cudaCapabilities";
    } ../hooks/cuda-elf-inspect.sh;

  # For GPU test derivations (passthru.gpuCheck): checks the sandbox before
  # the check phase and fails at once with the reason (docs/preflight.md).
  cudaPreflightHook = makeSetupHook {
    name = "cuda-preflight-hook";
    substitutions.cudaPreflight = bin "cuda-preflight";
    meta = meta "Fails a GPU test build at once, with the reason, when GPU code cannot run in its sandbox";
  } ../hooks/cuda-preflight.sh;

  noBrokenSymlinksHook = makeSetupHook {
    name = "no-broken-symlinks-hook";
    substitutions.noBrokenSymlinks = bin "no-broken-symlinks";
    meta = meta "Fails the build when an output holds dangling or reflexive symlinks (fast noBrokenSymlinks)";
  } ../hooks/no-broken-symlinks.sh;
  # Sourced after Nixpkgs' autoFixElfFiles (propagated after it, below): runs
  # "autoFixElfFiles addDriverRunpath" as one call of our binary.
  autoFixElfFilesDriverRunpath = makeSetupHook {
    name = "auto-fix-elf-files-driver-runpath";
    substitutions.autoAddDriverRunpath = bin "auto-add-driver-runpath";
    meta = meta "Runs autoFixElfFiles addDriverRunpath as one call of the static auto-add-driver-runpath binary";
  } ../hooks/auto-fix-elf-files-driver-runpath.sh;

  # Drop-in for cudaPackages.autoAddCudaCompatRunpath: the same guard (only
  # from nativeBuildInputs), entry and place in postFixupHooks; cuda_compat's
  # `compat` folder first and the driver entry second, written in one
  # rewrite with our autoAddDriverRunpath. Platforms as upstream's:
  # cuda_compat's.
  mkAutoAddCudaCompatRunpath =
    { cuda_compat }:
    makeSetupHook {
      name = "auto-add-cuda-compat-runpath-hook";
      # As upstream's, it propagates autoFixElfFiles; and our wrapper after
      # it, which makes the entry one run of the binary.
      propagatedBuildInputs = [
        autoFixElfFiles
        autoFixElfFilesDriverRunpath
      ];
      substitutions = {
        autoAddDriverRunpath = bin "auto-add-driver-runpath";
        libcudaPath = "${cuda_compat}/compat";
      };
      meta =
        let
          platforms = cuda_compat.meta.platforms or [ ];
        in
        meta "Puts cuda_compat's libcuda first and the driver second on the RUNPATH of every dynamic ELF file"
        // {
          inherit platforms;
          badPlatforms = cuda_compat.meta.badPlatforms or platforms;
        };
    } ../hooks/auto-add-cuda-compat-runpath.sh;
  # Drop-in for Nixpkgs' autoAddDriverRunpath: same postFixupHooks entry
  # ("autoFixElfFiles addDriverRunpath"), same opt-out
  # (dontUseAutoAddDriverRunpath), same propagated packages; the order of
  # propagatedBuildInputs matters: ours last, so that it wraps theirs.
  autoAddDriverRunpath = makeSetupHook {
    name = "auto-add-driver-runpath-hook";
    propagatedBuildInputs = [
      addDriverRunpath
      autoFixElfFiles
      autoFixElfFilesDriverRunpath
    ];
    meta = meta "Adds the driver directory (/run/opengl-driver/lib) to the RUNPATH of every dynamic ELF file in the outputs";
  } ../hooks/auto-add-driver-runpath.sh;
in
{
  inherit
    autoAddDriverRunpath
    cudaPreflightHook
    noBrokenSymlinksHook
    mkCudaElfInspectHook
    mkAutoAddCudaCompatRunpath
    cudaPolicyOf
    autoFixElfFilesDriverRunpath
    ;

  # autoAddDriverRunpath plus the library folders of what the outputs
  # dlopen and cannot find (hooks/auto-add-dlopen-runpath.sh): the host
  # inputs' lib/ (as autoPatchelfHook gathers them), the outputs' own
  # library folders and the derivation's `dlopenSearchPath`. It propagates
  # our autoAddDriverRunpath, whose one run adds both.
  autoAddDlopenRunpath = makeSetupHook {
    name = "auto-add-dlopen-runpath-hook";
    propagatedBuildInputs = [ autoAddDriverRunpath ];
    meta = meta "Adds the driver directory and the library folders of what each ELF file dlopens to its RUNPATH";
  } ../hooks/auto-add-dlopen-runpath.sh;

  # The compat hook (mkAutoAddCudaCompatRunpath) for the given CUDA package
  # set's cuda_compat.
  autoAddCudaCompatRunpath =
    if cudaPackages == null || (cudaPackages.cuda_compat or null) == null then
      throw "nix-cuda-hooks: autoAddCudaCompatRunpath needs a CUDA package set with cuda_compat"
    else
      mkAutoAddCudaCompatRunpath { inherit (cudaPackages) cuda_compat; };

  # The inspect hook with the given CUDA package set's policy.
  cudaElfInspectHook =
    if cudaPackages == null then
      throw "nix-cuda-hooks: cudaElfInspectHook needs a CUDA package set; use cudaPackages.cudaElfInspectHook (nix/overlay.nix) or mkCudaElfInspectHook"
    else
      mkCudaElfInspectHook (cudaPolicyOf cudaPackages);

  # Nixpkgs' noBrokenSymlinks is not a package but a file every stdenv lists
  # in defaultNativeBuildInputs, and setup.sh sources those LAST, after the
  # derivation's own (propagated) inputs. Ours sets the same guard
  # (`noBrokenSymlinksHookInstalled`), so ours in nativeBuildInputs, or
  # propagated by any input, is sourced first and replaces the upstream check
  # for that derivation. This stdenv adapter makes it the check of every
  # derivation built with the stdenv (extraNativeBuildInputs come before the
  # default hooks). Changing a stdenv rebuilds everything built with it: opt
  # in per stdenv.
  withNoBrokenSymlinksHook =
    stdenv:
    stdenv.override (old: {
      extraNativeBuildInputs = [ noBrokenSymlinksHook ] ++ (old.extraNativeBuildInputs or [ ]);
    });
}
