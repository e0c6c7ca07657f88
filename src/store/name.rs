//! Store names as Nix reads them: `<hash>-<name>`, where the name splits
//! into a package name and a version the way `builtins.parseDrvName` splits
//! it, and an output other than `out` is appended as `-<output>`.
//!
//! The audit's baselines need a name that survives a rebuild (the hash
//! changes) and a version bump (the hash and the version change) but still
//! tells a package's outputs apart (`libcufft-11.4.1.4-lib` holds other
//! files than `libcufft-11.4.1.4-dev`): [`stable`].

/// The characters of a Nix store hash (Nix's base-32 alphabet: no e, o, t, u).
const NIX_BASE32: &[u8] = b"0123456789abcdfghijklmnpqrsvwxyz";

/// Removes a Nix store hash from a path component (`<32 base32 chars>-name`
/// -> `name`); anything else is returned as it is.
pub fn strip_hash(name: &str) -> &str {
    hashed(name).unwrap_or(name)
}

/// The name after the hash when `component` is `<32 base32 chars>-name`.
pub fn hashed(component: &str) -> Option<&str> {
    let b = component.as_bytes();
    let is_hashed = b.len() > 33 && b[32] == b'-' && b[..32].iter().all(|c| NIX_BASE32.contains(c));
    is_hashed.then(|| &component[33..])
}

/// Splits a name as `builtins.parseDrvName` does: the version starts after
/// the first `-` that is followed by a character other than an ASCII letter
/// (`libcufft-11.4.1.4-lib` -> `libcufft`, `11.4.1.4-lib`;
/// `foo-unstable-2024-01-01` -> `foo-unstable`, `2024-01-01`). `None`: the
/// name has no version.
pub fn split(name: &str) -> (&str, Option<&str>) {
    let b = name.as_bytes();
    for i in 0..b.len() {
        if b[i] == b'-' && i + 1 < b.len() && !b[i + 1].is_ascii_alphabetic() {
            return (&name[..i], Some(&name[i + 1..]));
        }
    }
    (name, None)
}

/// The output a store name ends in, read from its version: Nix names an
/// output other than `out` `<name>-<version>-<output>`, and output names
/// are words (`lib`, `dev`, `bin`, `static`, `installedTests`), so the last
/// `-` part of the version counts as the output when it is ASCII letters
/// only. A version that ends in a word (`1.0-beta`) reads as an output too:
/// that costs one baseline miss when it becomes `1.0`, never a merge of two
/// outputs.
pub fn output(version: &str) -> Option<&str> {
    let (_, last) = version.rsplit_once('-')?;
    (!last.is_empty() && last.bytes().all(|c| c.is_ascii_alphabetic())).then_some(last)
}

/// A store name without its hash and its version, its output kept:
/// `<hash>-libcufft-11.4.1.4-lib` -> `libcufft-lib`, `libcufft-11.2.1.3`
/// -> `libcufft`. The same for every release of one package's output; a
/// name it returns is returned unchanged (its package name has no `-`
/// before a non-letter, and neither has `-<output>`).
pub fn stable(name: &str) -> String {
    let name = strip_hash(name);
    match split(name) {
        (pname, Some(version)) => match output(version) {
            Some(out) => format!("{pname}-{out}"),
            None => pname.to_string(),
        },
        (pname, None) => pname.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_as_parse_drv_name_splits_them() {
        // Nix's own examples and corner cases (tests/trust_baseline.rs asks
        // `builtins.parseDrvName` itself about more).
        assert_eq!(split("libcufft-11.4.1.4-lib"), ("libcufft", Some("11.4.1.4-lib")));
        assert_eq!(split("nix-0.12pre12876"), ("nix", Some("0.12pre12876")));
        assert_eq!(split("a-b-c-1.0"), ("a-b-c", Some("1.0")));
        assert_eq!(split("foo-"), ("foo-", None));
        assert_eq!(split("foo-_x"), ("foo", Some("_x")));
        assert_eq!(split("hello"), ("hello", None));
    }

    #[test]
    fn stable_names_drop_hash_and_version_and_keep_the_output() {
        let h = "0a1b2c3d4f5g6h7i8j9k0l1m2n3p4q5r";
        assert_eq!(stable(&format!("{h}-libcufft-11.4.1.4-lib")), "libcufft-lib");
        assert_eq!(stable("libcufft-11.2.1.3-lib"), "libcufft-lib");
        assert_eq!(stable("libcufft-11.2.1.3-dev"), "libcufft-dev");
        assert_eq!(stable("libcufft-11.2.1.3"), "libcufft");
        assert_eq!(stable("glibc-2.40-66"), "glibc");
        assert_eq!(stable("python3.12-torch-2.5.1"), "python3.12-torch");
        for s in ["libcufft-lib", "libcufft", "python3.12-torch", "foo-"] {
            assert_eq!(stable(s), s, "not idempotent on {s}");
        }
    }

    #[test]
    fn only_a_real_hash_is_stripped() {
        assert_eq!(strip_hash("0a1b2c3d4f5g6h7i8j9k0l1m2n3p4q5r-x"), "x");
        // `e` is not a Nix base-32 digit; 31 characters are no hash.
        assert_eq!(
            strip_hash("ea1b2c3d4f5g6h7i8j9k0l1m2n3p4q5r-x"),
            "ea1b2c3d4f5g6h7i8j9k0l1m2n3p4q5r-x"
        );
        assert_eq!(
            strip_hash("a1b2c3d4f5g6h7i8j9k0l1m2n3p4q5r-x"),
            "a1b2c3d4f5g6h7i8j9k0l1m2n3p4q5r-x"
        );
    }
}
