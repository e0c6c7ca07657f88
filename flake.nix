{
  description = "Fast static replacements for Nixpkgs' CUDA post-build hooks, and an auditor of the GPU code a build produced";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-unstable";

  outputs =
    { self, nixpkgs }:
    let
      inherit (nixpkgs) lib;
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      pkgsFor = lib.genAttrs systems (
        system:
        import nixpkgs {
          inherit system;
          overlays = [ self.overlays.default ];
        }
      );
      forAllSystems = f: lib.genAttrs systems (system: f pkgsFor.${system});
    in
    {
      overlays.default = import ./nix/overlay.nix;

      packages = forAllSystems (pkgs: {
        default = pkgs.nix-cuda-hooks;
        inherit (pkgs) nix-cuda-hooks autoAddDriverRunpath;
        inherit (pkgs.nixCudaHooks) noBrokenSymlinksHook;
        inherit (pkgs.cudaPackages) cudaElfInspectHook;
      });

      # `nix flake check`: the package's own tests (unit tests in its build,
      # the hooks in real stdenv builds).
      checks = forAllSystems (pkgs: pkgs.nix-cuda-hooks.passthru.tests // {
        package = pkgs.nix-cuda-hooks;
      });

      # (lib.audit pkgs) { package = pkgs.cudaPackages.cudnn; }
      # (lib.audit pkgs).set { packages = pkgs.cudaPackages; }
      lib.audit = pkgs: pkgs.nixCudaHooksAudit or (pkgs.extend self.overlays.default).nixCudaHooksAudit;
    };
}
