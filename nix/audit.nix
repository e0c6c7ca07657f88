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
# `set` audits each derivation of the set once: Nixpkgs' CUDA aliases
# (cuda-modules/aliases.nix, read from `path`, i.e. pkgs.path) are skipped
# unevaluated (evaluating one warns, and it names a package audited under its
# own name); so are non-derivations, stdenvs (cudaStdenv, backendStdenv) and
# setup hooks (attributes named *Hook, derivations named *-hook), and, unless
# includeUnavailable = true, packages whose meta.available is false (broken,
# unfree without allowUnfree, unsupported platform). Each skipped attribute is
# listed with its reason in the set's `_skipped` derivation (skipped.json, and
# the counts in its build log) and in `_skipped.skipped` at evaluation time.
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
  # Nixpkgs' root (callPackage passes pkgs.path), to read the CUDA alias
  # names from; null: no alias list.
  path ? null,
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

  # The attribute names Nixpkgs' aliases.nix adds to every CUDA package set
  # (its keys are known without evaluating any alias).
  aliasesFile = if path == null then null else path + "/pkgs/development/cuda-modules/aliases.nix";
  cudaAliasNames =
    if aliasesFile != null && builtins.pathExists aliasesFile then
      builtins.attrNames ((import aliasesFile { inherit lib; }) { } { })
    else
      [ ];

  # Why an attribute of a set is not audited, or null when it is.
  skipReason =
    {
      aliases,
      includeUnavailable,
    }:
    name: value:
    let
      isDrv = builtins.tryEval (lib.isDerivation value);
      isStdenv = builtins.tryEval (builtins.isAttrs value && value ? mkDerivation);
      available = builtins.tryEval (value.meta.available or true);
      drvName = builtins.tryEval (value.name or "");
    in
    if builtins.elem name aliases then
      "an alias (Nixpkgs' cuda-modules/aliases.nix), audited under the name it points to"
    else if !isDrv.success || !isStdenv.success then
      "does not evaluate"
    else if isStdenv.value then
      "a stdenv"
    else if !isDrv.value then
      "not a derivation"
    else if lib.hasSuffix "Hook" name || (drvName.success && lib.hasSuffix "-hook" drvName.value) then
      "a setup hook"
    else if !includeUnavailable && !(available.success && available.value) then
      "meta.available is false (broken, unfree or unsupported here); includeUnavailable = true audits it"
    else
      null;

  # Every derivation of an attribute set (not recursing), by attribute name,
  # plus `_skipped`: what was left out and why.
  set =
    {
      packages,
      aliases ? cudaAliasNames,
      includeUnavailable ? false,
      ...
    }@args:
    let
      auditArgs = removeAttrs args [
        "packages"
        "aliases"
        "includeUnavailable"
      ];
      reasons = lib.mapAttrs (skipReason { inherit aliases includeUnavailable; }) packages;
      skipped = lib.filterAttrs (_: reason: reason != null) reasons;
      audited = lib.filterAttrs (name: _: reasons.${name} == null) packages;
      counts = lib.foldlAttrs (acc: _: reason: acc // { ${reason} = (acc.${reason} or 0) + 1; }) { } skipped;
    in
    lib.mapAttrs (_: package: audit (auditArgs // { inherit package; })) audited
    // {
      _skipped =
        runCommand "cuda-elf-inspect-skipped"
          {
            skippedJson = builtins.toJSON skipped;
            countsText = lib.concatStringsSep "\n" (
              lib.mapAttrsToList (reason: n: "${toString n} ${reason}") counts
            );
            passAsFile = [ "skippedJson" ];
            passthru = { inherit skipped counts; };
          }
          ''
            mkdir -p "$out"
            cp "$skippedJsonPath" "$out/skipped.json"
            echo "cudaElfInspectAudit: ${toString (builtins.length (builtins.attrNames audited))} audited, ${toString (builtins.length (builtins.attrNames skipped))} skipped:"
            echo "$countsText"
          '';
    };
in
{
  __functor = _: audit;
  inherit audit set;
}
