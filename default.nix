# Non-flake entry point:
#   nix-build -A nix-cuda-hooks                   # the static binaries
#   nix-build -A hooks.noBrokenSymlinksHook
#   nix-build -A audit.set --arg ... (see docs/nix.md)
# Uses <nixpkgs> unless given another Nixpkgs (a path or a fetched tree).
{
  nixpkgs ? <nixpkgs>,
  system ? builtins.currentSystem,
  config ? { },
}:
let
  pkgs = import nixpkgs {
    inherit system config;
    overlays = [ overlay ];
  };
  overlay = import ./nix/overlay.nix;
in
{
  inherit overlay pkgs;
  inherit (pkgs) nix-cuda-hooks autoAddDriverRunpath;
  hooks = pkgs.nixCudaHooks // {
    inherit (pkgs.cudaPackages) cudaElfInspectHook;
  };
  audit = pkgs.nixCudaHooksAudit;
  tests = pkgs.nix-cuda-hooks.passthru.tests;
}
