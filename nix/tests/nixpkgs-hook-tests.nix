# passthru.tests of nix/package.nix (imported, not callPackage'd, so that it is a plain set of derivations): the hooks in real Nixpkgs stdenv builds
# (cases nix/tests/run.sh also builds here with Nixpkgs' real setup.sh, for
# machines with all of Nixpkgs). Expected failures use testers.testBuildFailure and
# check the upstream summary line in its log.
{
  lib,
  stdenv,
  callPackage,
  testers,
  nix-cuda-hooks,
}:
let
  hooks = callPackage ../hooks.nix { inherit nix-cuda-hooks; };
  # Ours must be sourced before the stdenv's own noBrokenSymlinks.
  stdenv' = hooks.withNoBrokenSymlinksHook stdenv;

  withLinks =
    name: attrs: script:
    stdenv'.mkDerivation (
      {
        inherit name;
        dontUnpack = true;
        # Keep the links as written: stdenv's make-symlinks-relative would
        # rewrite absolute ones before our postFixup check.
        dontRewriteSymlinks = true;
        installPhase = ''
          runHook preInstall
          mkdir -p "$out"
          ${script}
          runHook postInstall
        '';
      }
      // attrs
    );

  failsWith =
    line: drv:
    stdenv.mkDerivation {
      name = "${drv.name}-fails";
      failed = testers.testBuildFailure drv;
      dontUnpack = true;
      installPhase = ''
        grep -F ${lib.escapeShellArg line} "$failed/testBuildFailure.log"
        [ "$(cat "$failed/testBuildFailure.exit")" = 1 ]
        touch "$out"
      '';
    };
in
{
  dangling = failsWith "ERROR: noBrokenSymlinks: found 1 dangling symlinks, 0 reflexive symlinks and 0 unreadable symlinks" (
    withLinks "dangling" { } ''ln -s "$out/missing" "$out/dangling"''
  );
  reflexive = failsWith "ERROR: noBrokenSymlinks: found 0 dangling symlinks, 1 reflexive symlinks and 0 unreadable symlinks" (
    withLinks "reflexive" { } ''ln -s "$out/self" "$out/self"''
  );
  danglingStructuredAttrs =
    failsWith "ERROR: noBrokenSymlinks: found 1 dangling symlinks, 0 reflexive symlinks and 0 unreadable symlinks"
      (withLinks "dangling-structured" { __structuredAttrs = true; } ''ln -s missing "$out/dangling"'');
  optOut = withLinks "opt-out" {
    dontCheckForBrokenSymlinks = true;
  } ''ln -s "$out/missing" "$out/dangling"'';
  valid = withLinks "valid" { } ''
    touch "$out/file"
    ln -s file "$out/relative"
    ln -s "$out/file" "$out/absolute"
    ln -s /etc/my_file "$out/outside-store"
  '';
}
