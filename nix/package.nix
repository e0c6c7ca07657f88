# The nix-cuda-hooks binaries: no-broken-symlinks, auto-add-driver-runpath and
# cuda-elf-inspect. Call it from the static package set so that the hooks'
# binaries have no runtime closure and run in any build environment:
#
#   pkgs.pkgsStatic.callPackage ./nix/package.nix { }
#
# which is what nix/overlay.nix, default.nix and flake.nix do.
{
  lib,
  rustPlatform,
  stdenv,
  callPackage,
  testers,
  # The stdenv passthru.tests run the hooks in: the ordinary one users build
  # with (nix/overlay.nix passes pkgs.stdenv). The binaries themselves come
  # from pkgsStatic, whose stdenv the tests also use, suffixed "Static".
  testStdenv ? stdenv,
}:
let
  cargoToml = lib.importTOML ../Cargo.toml;
  # The binaries the hooks call; each has src/bin/<name>.rs.
  binaries = [
    "no-broken-symlinks"
    "auto-add-driver-runpath"
    "cuda-elf-inspect"
    "cuda-preflight"
  ];
in
rustPlatform.buildRustPackage (finalAttrs: {
  pname = cargoToml.package.name;
  inherit (cargoToml.package) version;

  # Only what the build and its tests read: a change to docs/ or nix/ must not
  # rebuild the binaries.
  src = lib.fileset.toSource {
    root = ../.;
    fileset = lib.fileset.unions [
      ../Cargo.toml
      ../Cargo.lock
      ../src
      ../tests
      ../hooks
      ../rustfmt.toml
    ];
  };
  cargoLock.lockFile = ../Cargo.lock;

  # The integration tests under tests/ need nvcc, cuobjdump and patchelf from
  # tests/tools/install.sh and a writable scratch store; inside the sandbox
  # run the unit tests, which need nothing. The hooks themselves are tested in
  # real builds by passthru.tests (and nix/tests/run.sh in CI).
  cargoTestFlags = [
    "--lib"
    "--bins"
  ];

  # The hooks call these by path: fail here, not in a user's build, if one is
  # missing.
  postInstall = ''
    for b in ${lib.escapeShellArgs binaries}; do
      if [ ! -x "$out/bin/$b" ]; then
        echo "nix-cuda-hooks: the binary $b was not built (is src/bin/$b.rs in Cargo.toml?)" >&2
        exit 1
      fi
    done
  '';

  passthru = {
    inherit binaries;
    # The setup hooks built from this package, in real stdenv builds: the
    # ordinary stdenv, and the static one this package is built with.
    tests =
      let
        testsWith =
          stdenv:
          import ./tests/nixpkgs-hook-tests.nix {
            inherit
              lib
              stdenv
              callPackage
              testers
              ;
            nix-cuda-hooks = finalAttrs.finalPackage;
          };
      in
      testsWith testStdenv
      // lib.mapAttrs' (name: lib.nameValuePair "${name}Static") (testsWith stdenv);
  };

  meta = {
    description = "Fast static replacements for Nixpkgs' CUDA post-build hooks, and an auditor of the GPU code a build produced";
    longDescription = ''
      Static Rust binaries that do the work of Nixpkgs' noBrokenSymlinks and
      autoAddDriverRunpath setup hooks (same decisions, log lines and exit
      status; much faster), and cuda-elf-inspect, which lists the GPU code in
      ELF files and checks it against the CUDA package set's cudaCapabilities.
      The setup hooks that call them are in nix/hooks.nix.
    '';
    homepage = cargoToml.package.repository;
    changelog = "${cargoToml.package.repository}/releases/tag/v${cargoToml.package.version}";
    license = with lib.licenses; [
      mit
      asl20
    ];
    mainProgram = "cuda-elf-inspect";
    platforms = lib.platforms.linux;
    maintainers = [ ];
  };
})
