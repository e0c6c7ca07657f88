# The nix-cuda-hooks overlay.
#
# What it changes:
#   - `autoAddDriverRunpath` becomes ours (same interface: add it to
#     nativeBuildInputs; opt out with dontUseAutoAddDriverRunpath; same
#     postFixupHooks entry "autoFixElfFiles addDriverRunpath"; it propagates
#     Nixpkgs' addDriverRunpath and autoFixElfFiles as upstream's does). Every CUDA
#     package in Nixpkgs takes it from the top level, so all of them switch.
#     This rebuilds the packages that use it (their inputs change).
#   - every CUDA package set's `autoAddCudaCompatRunpath` (Jetson builds, and
#     others with enableCudaDriverCompat) becomes ours where the set has a
#     cuda_compat: cuda_compat's folder first, the driver second, one rewrite
#     per file together with our autoAddDriverRunpath.
#   - `autoAddDlopenRunpath` is added (no such hook in Nixpkgs): our
#     autoAddDriverRunpath plus, per ELF file, the library folders of what it
#     dlopens and cannot find (host inputs' lib/, the outputs, a
#     `dlopenSearchPath` list). Nothing uses it until a package adds it to
#     nativeBuildInputs.
#   - every CUDA package set (cudaPackages, cudaPackages_12_8, ...) gains
#     `cudaElfInspectHook`, built with that set's cudaCapabilities,
#     cudaForwardCompat and CUDA version. Nothing uses it until a package adds
#     it to nativeBuildInputs.
#   - `nix-cuda-hooks` (the static binaries), `nixCudaHooks` (the hooks and
#     helpers of nix/hooks.nix) and `nixCudaHooksAudit` (nix/audit.nix) are
#     added.
#   - Nixpkgs' own noBrokenSymlinks check is NOT replaced by default: it is
#     part of every stdenv and swapping it rebuilds the world. setup.sh
#     sources a stdenv's default hooks after a derivation's own inputs, so
#     ours in a package's nativeBuildInputs (or propagated to it) replaces the
#     check for that package; for every package of a stdenv use
#     `final.nixCudaHooks.withNoBrokenSymlinksHook`, e.g. in your own overlay:
#       final: prev: { stdenv = final.nixCudaHooks.withNoBrokenSymlinksHook prev.stdenv; }
#     (or only for CUDA packages, by passing such a stdenv to them).
#
# How to enable it:
#   flake:              nixpkgs.overlays = [ nix-cuda-hooks.overlays.default ];
#   configuration.nix:  nixpkgs.overlays = [ (import /path/to/nix-cuda-hooks/nix/overlay.nix) ];
#   plain Nix:          import <nixpkgs> { overlays = [ (import ./nix/overlay.nix) ]; }
# How to go back: remove it from the overlays list; nothing else keeps state.
# To keep the new attributes but Nixpkgs' autoAddDriverRunpath, add after it:
#   final: prev: { autoAddDriverRunpath = prev.nixCudaHooks.upstream.autoAddDriverRunpath; }
final: prev:
let
  inherit (prev) lib;

  hooksFor =
    cudaPackages:
    final.callPackage ./hooks.nix {
      inherit (final) nix-cuda-hooks;
      inherit cudaPackages;
    };

  # Adds cudaElfInspectHook to a CUDA package set, and replaces its
  # autoAddCudaCompatRunpath where it has one and a cuda_compat to back it
  # (the set keeps upstream's, marked unavailable, where cuda_compat is null).
  cudaExtension =
    finalCuda: prevCuda:
    {
      cudaElfInspectHook = (hooksFor finalCuda).cudaElfInspectHook;
    }
    // lib.optionalAttrs (prevCuda ? autoAddCudaCompatRunpath) {
      autoAddCudaCompatRunpath =
        if (prevCuda.cuda_compat or null) == null then
          prevCuda.autoAddCudaCompatRunpath
        else
          (hooksFor finalCuda).autoAddCudaCompatRunpath;
    };
in
{
  # Built static; its passthru.tests run the hooks in the ordinary stdenv too.
  nix-cuda-hooks = final.pkgsStatic.callPackage ./package.nix { testStdenv = final.stdenv; };

  nixCudaHooks = hooksFor null // {
    # What the overlay replaced, to go back per attribute.
    upstream = {
      inherit (prev) autoAddDriverRunpath;
    };
  };

  nixCudaHooksAudit = final.callPackage ./audit.nix { inherit (final) nix-cuda-hooks; };

  autoAddDriverRunpath = final.nixCudaHooks.autoAddDriverRunpath;
  autoAddDlopenRunpath = final.nixCudaHooks.autoAddDlopenRunpath;
}
# Current Nixpkgs applies `_cuda.extensions` to every CUDA package set; older
# ones had `cudaPackagesExtensions`.
// lib.optionalAttrs (prev ? _cuda) {
  _cuda = prev._cuda.extend (
    _: prevCuda: {
      extensions = (prevCuda.extensions or [ ]) ++ [ cudaExtension ];
    }
  );
}
// lib.optionalAttrs (!(prev ? _cuda) && prev ? cudaPackagesExtensions) {
  cudaPackagesExtensions = prev.cudaPackagesExtensions ++ [ cudaExtension ];
}
