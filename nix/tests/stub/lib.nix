# The few Nixpkgs `lib` functions our nix/ expressions call, written here
# with Nixpkgs' semantics so that those expressions can be evaluated (and the
# hooks really built) without Nixpkgs, which is not available offline. Keep
# it minimal: add a function only when nix/ starts using it, and keep its
# behaviour what Nixpkgs documents (lib/*.nix), including its errors.
let
  inherit (builtins)
    attrNames
    concatStringsSep
    elem
    filter
    foldl'
    isAttrs
    listToAttrs
    map
    pathExists
    ;

  lib = rec {
    inherit concatStringsSep elem filter;

    # lib.trivial / fixed-points
    id = x: x;
    fix =
      f:
      let
        x = f x;
      in
      x;
    extends =
      overlay: f: final:
      let
        prev = f final;
      in
      prev // overlay final prev;
    composeExtensions =
      f: g: final: prev:
      let
        fApplied = f final prev;
        prev' = prev // fApplied;
      in
      fApplied // g final prev';
    composeManyExtensions = foldl' composeExtensions (_: _: { });
    makeExtensible =
      rattrs:
      fix (
        self:
        rattrs self
        // {
          extend = f: makeExtensible (extends f rattrs);
        }
      );
    warn = msg: builtins.trace "evaluation warning: ${msg}";

    # lib.attrsets
    mapAttrs = builtins.mapAttrs;
    attrValues = builtins.attrValues;
    filterAttrs =
      pred: set:
      listToAttrs (
        map (name: {
          inherit name;
          value = set.${name};
        }) (filter (name: pred name set.${name}) (attrNames set))
      );
    genAttrs =
      names: f:
      listToAttrs (
        map (name: {
          inherit name;
          value = f name;
        }) names
      );
    optionalAttrs = cond: set: if cond then set else { };
    isDerivation = value: value.type or null == "derivation";
    recurseIntoAttrs = set: set // { recurseForDerivations = true; };

    # lib.lists / lib.strings
    optional = cond: elem: if cond then [ elem ] else [ ];
    optionals = cond: list: if cond then list else [ ];
    optionalString = cond: string: if cond then string else "";
    boolToString = b: if b then "true" else "false";
    escapeShellArg = arg: "'${builtins.replaceStrings [ "'" ] [ "'\\''" ] (toString arg)}'";
    escapeShellArgs = args: concatStringsSep " " (map escapeShellArg args);
    hasPrefix = prefix: s: builtins.substring 0 (builtins.stringLength prefix) s == prefix;

    # lib.meta
    getExe' =
      drv: name:
      assert isDerivation drv || throw "lib.getExe': the first argument is not a derivation";
      "${drv.bin or drv}/bin/${name}";
    getExe =
      drv:
      getExe' drv (
        drv.meta.mainProgram or (throw "lib.getExe: ${drv.name or "package"} has no meta.mainProgram")
      );

    # lib.customisation
    makeOverridable =
      f: args:
      let
        result = f args;
      in
      if isAttrs result then
        result
        // {
          override = newArgs: makeOverridable f (args // (if builtins.isFunction newArgs then newArgs args else newArgs));
        }
      else
        result;

    # lib.trivial
    importTOML = path: builtins.fromTOML (builtins.readFile path);
    versionAtLeast = v: o: builtins.compareVersions v o >= 0;

    # lib.fileset: only unions of paths, checked to exist as Nixpkgs does.
    fileset = {
      unions = paths: {
        _type = "fileset";
        inherit paths;
      };
      maybeMissing = path: if pathExists path then path else null;
      toSource =
        { root, fileset }:
        let
          paths = filter (p: p != null) (if fileset._type or null == "fileset" then fileset.paths else [ fileset ]);
          missing = filter (p: !pathExists p) paths;
        in
        assert
          missing == [ ]
          || throw "lib.fileset.toSource: path ${toString (builtins.head missing)} does not exist";
        {
          _type = "stub-source";
          inherit root;
          files = map toString paths;
          outPath = "/nix/store/00000000000000000000000000000000-source";
        };
    };

    licenses = {
      mit = {
        spdxId = "MIT";
        shortName = "mit";
        free = true;
      };
      asl20 = {
        spdxId = "Apache-2.0";
        shortName = "asl20";
        free = true;
      };
    };
    platforms.linux = [
      "x86_64-linux"
      "aarch64-linux"
    ];
    maintainers = { };
  };
in
lib
