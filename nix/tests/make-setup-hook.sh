# shellcheck shell=bash
# Builder of the makeSetupHook stand-in (nix/tests/lib.nix): copies the hook
# script to $out/nix-support/setup-hook with every @name@ of
# $substitutionNames replaced by the value of the attribute of that name, as
# Nixpkgs' makeSetupHook (substituteAll) does, and records
# propagatedBuildInputs.
export PATH=/usr/bin:/bin
mkdir -p "$out/nix-support"
# shellcheck disable=SC2154 # derivation attributes
content=$(cat "$script" && echo x)
content=${content%x}
for name in $substitutionNames; do
  content=${content//"@$name@"/"${!name}"}
done
printf '%s' "$content" >"$out/nix-support/setup-hook"
if [[ -n ${propagatedBuildInputs:-} ]]; then
  echo "$propagatedBuildInputs" >"$out/nix-support/propagated-build-inputs"
fi
