# Audit the GPU code of built packages with cuda-elf-inspect, as ordinary
# derivations: each audit is a build whose inputs are the package's outputs,
# so Nix (or Hydra) schedules it on its own builders, caches it, and audits a
# whole package set in parallel across machines. One machine never has to
# hold the whole set.
#
#   audit = pkgs.callPackage ./nix/audit.nix { nix-cuda-hooks = ...; };
#   audit { package = pkgs.cudaPackages.cudnn; }                 # one package
#   audit.set { packages = pkgs.cudaPackages; }                  # every derivation in a set
#
# Each audit's $out holds report.txt, report.json and report.sarif (SARIF
# 2.1.0, for code-scanning UIs) and lists them in
# nix-support/hydra-build-products, so Hydra offers them for download. The
# exit status of cuda-elf-inspect decides the result:
#   0  no findings: the build succeeds;
#   1  findings: $out/nix-support/failed is written (Hydra shows the build as
#      failed and still keeps the reports); with failOnFindings = true the
#      build fails instead (for `nix flake check` and CI gates);
#   2  the tool failed: the build fails, whatever failOnFindings says.
{
  lib,
  runCommand,
  nix-cuda-hooks,
}:
let
  audit =
    {
      package,
      # Override the package's CUDA capabilities (list of strings); null: the
      # tool's default (its own reading of the files' policy).
      cudaCapabilities ? null,
      # A previous report.json (or a --write-baseline file): only findings
      # not in it count.
      baseline ? null,
      failOnFindings ? false,
      # More cuda-elf-inspect flags, e.g. [ "--system-lib-dirs" ].
      extraFlags ? [ ],
    }:
    let
      outputs = map (name: package.${name}) (package.outputs or [ "out" ]);
      flags =
        lib.optionals (cudaCapabilities != null) [
          "--cuda-capabilities"
          (lib.concatStringsSep ";" cudaCapabilities)
        ]
        ++ lib.optionals (baseline != null) [
          "--baseline"
          "${baseline}"
        ]
        ++ extraFlags;
      inspect = lib.getExe' nix-cuda-hooks "cuda-elf-inspect";
      # The name is what Hydra lists: keep the package's.
      name = "cuda-elf-inspect-${package.pname or package.name or "package"}";
    in
    runCommand name
      {
        passthru = {
          inherit package;
        };
        meta = {
          description = "cuda-elf-inspect audit of ${package.name or "a package"}";
        };
      }
      ''
        mkdir -p "$out/nix-support"
        status=0
        for format in json sarif text; do
          case $format in
            text) file=$out/report.txt ;;
            *) file=$out/report.$format ;;
          esac
          code=0
          ${inspect} --format "$format" ${lib.escapeShellArgs flags} \
            ${lib.escapeShellArgs (map toString outputs)} >"$file" || code=$?
          if [ "$code" -ge 2 ]; then
            echo "cudaElfInspectAudit: ERROR: cuda-elf-inspect failed (exit $code) on ${package.name or "the package"}" >&2
            exit "$code"
          fi
          status=$code
        done
        cat "$out/report.txt"
        {
          echo "report json $out/report.json"
          echo "report sarif $out/report.sarif"
          echo "doc none $out/report.txt"
        } >"$out/nix-support/hydra-build-products"
        if [ "$status" -eq 1 ]; then
          touch "$out/nix-support/failed"
          ${lib.optionalString failOnFindings ''
            echo "cudaElfInspectAudit: findings in ${package.name or "the package"} (failOnFindings is set)" >&2
            exit 1
          ''}
        fi
      '';

  # Every derivation of an attribute set (not recursing), by attribute name.
  # Packages not available on this platform or marked broken are left out.
  set =
    {
      packages,
      ...
    }@args:
    lib.mapAttrs (_: package: audit ((removeAttrs args [ "packages" ]) // { inherit package; })) (
      lib.filterAttrs (
        _: value:
        let
          tried = builtins.tryEval (lib.isDerivation value && (value.meta.available or true));
        in
        tried.success && tried.value
      ) packages
    );
in
{
  __functor = _: audit;
  inherit audit set;
}
