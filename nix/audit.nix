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
# Each audit's $out holds report.txt, report.json, report.sarif (SARIF
# 2.1.0, for code-scanning UIs) and report.html (one self-contained page: the
# coverage matrix and the findings by check) and lists them in
# nix-support/hydra-build-products, so Hydra offers them for download; its
# nix-support/hydra-metrics holds the numbers Hydra charts over time
# (findings per check and severity, files lacking each requested capability,
# device code bytes per architecture; the names are stable and documented in
# docs/cuda-elf-inspect.md, "Hydra metrics"). `set` adds `_index`: one page
# across the set (package x requested capability, each package linked to its
# report, copied beside it). The exit status of cuda-elf-inspect decides the
# result:
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
      # The CUDA capabilities the files must cover (list of strings, as
      # Nixpkgs' config.cudaCapabilities); null: none is checked (the tool
      # has no capability to hold the files to). `set` passes the package
      # set's own (backendStdenv.cudaCapabilities).
      cudaCapabilities ? null,
      # Whether PTX for the last capability is expected (Nixpkgs'
      # cudaForwardCompat); null: the tool's default (expected).
      cudaForwardCompat ? null,
      # The CUDA version the files were built for ("12.8"): capabilities too
      # old or too new for it are findings; null: not checked. `set` passes
      # the package set's cudaMajorMinorVersion.
      cudaVersion ? null,
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
        ++ lib.optionals (cudaForwardCompat != null) [
          (if cudaForwardCompat then "--forward-compat" else "--no-forward-compat")
        ]
        ++ lib.optionals (cudaVersion != null) [
          "--cuda-version"
          cudaVersion
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
        # One audit, every report (--output writes each file whole).
        status=0
        ${inspect} --format text --color never ${lib.escapeShellArgs flags} \
          --output "json=$out/report.json" --output "sarif=$out/report.sarif" \
          --output "html=$out/report.html" \
          --output "hydra-metrics=$out/nix-support/hydra-metrics" \
          ${lib.escapeShellArgs (map toString outputs)} >"$out/report.txt" || status=$?
        if [ "$status" -ge 2 ]; then
          echo "cudaElfInspectAudit: ERROR: cuda-elf-inspect failed (exit $status) on ${package.name or "the package"}" >&2
          exit "$status"
        fi
        cat "$out/report.txt"
        {
          echo "report json $out/report.json"
          echo "report sarif $out/report.sarif"
          echo "report html $out/report.html"
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

  # One page across a set's audits (attribute name -> audit): a row per
  # package, a column per capability any of them was asked for, each cell
  # read from the package's hydra-metrics (the numbers its report counts).
  # Every package's report.html and report.json are copied into reports/
  # (numbered: an attribute name may hold any character) and linked, so the
  # folder is whole on its own (Hydra serves it as one product).
  index =
    audits:
    runCommand "cuda-elf-inspect-index"
      {
        passthru = { inherit audits; };
        meta.description = "cuda-elf-inspect audits of a package set, one page";
      }
      ''
        mkdir -p "$out/reports" "$out/nix-support"
        # HTML-escaped text (names are attribute names: any character).
        esc() { printf '%s' "$1" | sed -e 's/&/\&amp;/g; s/</\&lt;/g; s/>/\&gt;/g; s/"/\&quot;/g' -e "s/'/\&#39;/g"; }
        # A metric's value ("" when absent), by its name after the prefix.
        metric() {
          local name=''${2//./\\.}
          sed -n "s/^cuda-elf-inspect\.$name \([0-9][0-9]*\)\( .*\)\{0,1\}$/\1/p" "$1/nix-support/hydra-metrics"
        }
        caps=$(for a in ${lib.escapeShellArgs (lib.attrValues audits)}; do
          sed -n 's/^cuda-elf-inspect\.capability\.\([0-9][0-9.]*[af]\{0,1\}\)\.sass [0-9][0-9]*$/\1/p' "$a/nix-support/hydra-metrics"
        done | sort -u -V)
        cell() { printf '<td class="%s" title="%s">%s</td>' "$1" "$2" "$3"; }
        n=0
        row() {
          n=$((n + 1))
          cp "$2/report.html" "$out/reports/$n.html"
          cp "$2/report.json" "$out/reports/$n.json"
          local dev cap lacking
          dev=$(metric "$2" files.device-code)
          printf '<tr data-package="%s"><th scope="row"><a href="reports/%s.html">%s</a> <small><a href="reports/%s.json">json</a></small></th>' \
            "$(esc "$1")" "$n" "$(esc "$1")" "$n"
          for cap in $caps; do
            lacking=$(metric "$2" "capability.$cap.lacking")
            if [ -z "$lacking" ]; then
              cell unrequested "$cap: not requested" "&#183;"
            elif [ "$dev" = 0 ]; then
              cell none "no device code" "&#8211;"
            elif [ "$lacking" != 0 ]; then
              cell nothing "$cap: $lacking of $dev files run nothing" "N $lacking"
            elif [ "$(metric "$2" "capability.$cap.driver-fails")" != 0 ]; then
              cell driver-fails "$cap: code the given driver cannot run (SASS or PTX)" D
            elif [ "$(metric "$2" "capability.$cap.not-read")" != 0 ]; then
              cell not-read "$cap: device code not read" "?"
            elif [ "$(metric "$2" "capability.$cap.ptx-only")" != 0 ]; then
              cell ptx "$cap: PTX only in some files (JIT)" P
            else
              cell sass "$cap: SASS in every file with device code" S
            fi
          done
          printf '<td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>\n' "$dev" \
            "$(metric "$2" findings.error)" "$(metric "$2" findings.warning)" "$(metric "$2" findings.info)"
        }
        {
          cat <<'EOF'
        <!DOCTYPE html>
        <html lang="en"><head><meta charset="utf-8">
        <meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
        <title>cuda-elf-inspect: package set</title>
        <style>body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em}table{border-collapse:collapse}th,td{padding:2px 8px;text-align:left}td{text-align:center;font-weight:bold;border:1px solid #fff}thead th{border-bottom:2px solid #444}.sass{background:#b9e4bb}.ptx{background:#ffe9a6}.driver-fails{background:#ffb38a}.not-read{background:#d5d5d5}.nothing{background:#f4a6a6}</style>
        </head><body><h1>cuda-elf-inspect: package set</h1>
        <p>Per package and requested capability: S every file with device code has SASS; P some only PTX (JIT); D code (SASS or PTX) the given driver cannot run; ? device code not read; N k: k files run nothing; &#8211; no device code; &#183; not requested. Each package links to its report.</p>
        EOF
          if [ -z "$caps" ]; then
            printf '<p id="no-capabilities">No capability was requested of these packages: their audits checked linkage, RUNPATH and the driver only, not GPU code coverage (give cudaCapabilities, or audit a CUDA package set, whose own capabilities are used).</p>\n'
          fi
          printf '<table id="index"><thead><tr><th>package</th>'
          for cap in $caps; do printf '<th data-cap="%s">%s</th>' "$cap" "$cap"; done
          printf '<th>files with device code</th><th>errors</th><th>warnings</th><th>infos</th></tr></thead><tbody>\n'
          ${lib.concatStrings (
            lib.mapAttrsToList (name: a: "row ${lib.escapeShellArg name} ${a}
") audits
          )}
          printf '</tbody></table></body></html>\n'
        } >"$out/index.html"
        echo "doc index $out index.html" >"$out/nix-support/hydra-build-products"
        echo "cudaElfInspectAudit: index of $n packages in $out/index.html"
      '';

  # Every derivation of an attribute set (not recursing), by attribute name,
  # plus `_skipped`: what was left out and why, and `_index`: one page across
  # the audits. A CUDA package set is audited for what it was built for: its
  # backendStdenv's cudaCapabilities and cudaForwardCompat and its
  # cudaMajorMinorVersion, each overridable by the argument of that name.
  set =
    {
      packages,
      aliases ? cudaAliasNames,
      includeUnavailable ? false,
      ...
    }@args:
    let
      # What the package set was built for (Nixpkgs' CUDA package sets carry
      # it in backendStdenv and cudaMajorMinorVersion), unless the caller
      # says otherwise: a set audited without capabilities would check no
      # coverage and its index would have no column.
      fromSet =
        attr: value:
        let
          tried = builtins.tryEval value;
        in
        lib.optionalAttrs (!(args ? ${attr}) && tried.success && tried.value != null) {
          ${attr} = tried.value;
        };
      stdenvOfSet = packages.backendStdenv or { };
      auditArgs =
        removeAttrs args [
          "packages"
          "aliases"
          "includeUnavailable"
        ]
        // fromSet "cudaCapabilities" (stdenvOfSet.cudaCapabilities or null)
        // fromSet "cudaForwardCompat" (stdenvOfSet.cudaForwardCompat or null)
        // fromSet "cudaVersion" (packages.cudaMajorMinorVersion or null);
      reasons = lib.mapAttrs (skipReason { inherit aliases includeUnavailable; }) packages;
      skipped = lib.filterAttrs (_: reason: reason != null) reasons;
      audited = lib.filterAttrs (name: _: reasons.${name} == null) packages;
      counts = lib.foldlAttrs (acc: _: reason: acc // { ${reason} = (acc.${reason} or 0) + 1; }) { } skipped;
    in
    let
      audits = lib.mapAttrs (_: package: audit (auditArgs // { inherit package; })) audited;
    in
    audits
    // {
      _index = index audits;
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
