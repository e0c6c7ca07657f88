//! What a baseline remembers of a finding: its check, where it is and what
//! it is about, written without what a version bump changes, so that the
//! most common CUDA pull request (`libcufft-11.2.1.3-lib` becoming
//! `libcufft-11.4.1.4-lib`) does not fail CI on findings it already had.
//!
//! Left out, everywhere in the location and in a path-shaped subject:
//! - a store hash (`<hash>-name` -> `name`);
//! - a store name's version, as `builtins.parseDrvName` splits it, the
//!   output kept (`libcufft-11.4.1.4-lib` -> `libcufft-lib`, so that a
//!   package's `lib` and `dev` outputs stay apart). A component is a store
//!   name when it carries a store hash, and the first component of a
//!   location is one (the audited root's name, its hash already gone);
//! - a shared object's version after its major (`libcufft.so.11.4.1.4` ->
//!   `libcufft.so.11`): the file a release installs under its full version
//!   keeps its soname's major, which is what its users load. Two files of
//!   one folder that differ only there share one identity.
//!
//! Every function here maps its own output to itself, so identities from
//! any version of the tool, once restated, compare with today's.

use crate::store::name::{hashed, stable};

/// The identity of a finding: `check<TAB>place<TAB>subject`, the place and
/// subject made stable; `kind` is the kind of subject the check names
/// (`entry`, `reference`, ...: `CheckId::subject_kind`).
pub fn fingerprint(check: &str, place: &str, subject: &str, kind: &str) -> String {
    format!("{check}\t{}\t{}", stable_place(place), stable_subject(kind, subject))
}

/// The parts of an identity (`check`, `place`, `subject`), as any version
/// of the tool wrote it; `None`: it is no `check<TAB>place<TAB>subject`.
pub fn parts(entry: &str) -> Option<(&str, &str, &str)> {
    let (check, rest) = entry.split_once('\t')?;
    let (place, subject) = rest.rsplit_once('\t')?;
    Some((check, place, subject))
}

/// A location (`libcufft-11.4.1.4-lib/lib/libcufft.so.11.4.1.4`) or a
/// path, stable: store names without hash and version, the file name
/// without its version after the soname's major.
pub fn stable_place(place: &str) -> String {
    let parts: Vec<&str> = place.split('/').collect();
    let relative = !place.starts_with('/');
    let last = parts.len() - 1;
    let mut out: Vec<String> = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let root_name = i == 0 && relative && last > 0;
        let mut part =
            if hashed(part).is_some() || root_name { stable(part) } else { part.to_string() };
        if i == last {
            part = soname_major(&part).to_string();
        }
        out.push(part);
    }
    out.join("/")
}

/// A subject, stable: a build-only reference names a store path by its
/// name (without hash already); a RUNPATH entry may hold store paths.
/// Capabilities, libraries and architectures are kept as they are.
fn stable_subject(kind: &str, subject: &str) -> String {
    if kind == "reference" {
        // `name` or `name/lib/stubs`, or `build folder`.
        return match subject.split_once('/') {
            Some((name, rest)) => format!("{}/{rest}", stable(name)),
            None => stable(subject),
        };
    }
    let mut out = String::with_capacity(subject.len());
    for piece in subject.split_inclusive(['/', ':']) {
        let (part, sep) = match piece.char_indices().last() {
            Some((i, c)) if c == '/' || c == ':' => (&piece[..i], &piece[i..]),
            _ => (piece, ""),
        };
        match hashed(part) {
            Some(_) => out.push_str(&stable(part)),
            None => out.push_str(part),
        }
        out.push_str(sep);
    }
    out
}

/// A shared object's file name down to its soname's major
/// (`libcufft.so.11.4.1.4` -> `libcufft.so.11`); any other name, and one
/// whose version is not numbers and dots, as it is.
pub fn soname_major(name: &str) -> &str {
    let Some(at) = name.rfind(".so.") else { return name };
    let version = &name[at + 4..];
    let numeric = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !version.split('.').all(numeric) {
        return name;
    }
    match version.find('.') {
        Some(dot) => &name[..at + 4 + dot],
        None => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H1: &str = "0a1b2c3d4f5g6h7i8j9k0l1m2n3p4q5r";
    const H2: &str = "9z8y7x6w5v4s3r2q1p0n9m8l7k6j5i4h";

    #[test]
    fn a_version_bump_keeps_the_place() {
        let old = stable_place("libcufft-11.2.1.3-lib/lib/libcufftw.so.11.2.1.3");
        let new = stable_place("libcufft-11.4.1.4-lib/lib/libcufftw.so.11.4.1.4");
        assert_eq!(old, "libcufft-lib/lib/libcufftw.so.11");
        assert_eq!(old, new);
        // Absolute paths: store names are known by their hash.
        let a = stable_place(&format!("/nix/store/{H1}-libcufft-11.2.1.3-lib/lib/libcufft.so.11"));
        let b = stable_place(&format!("/nix/store/{H2}-libcufft-11.4.1.4-lib/lib/libcufft.so.11"));
        assert_eq!(
            (a.as_str(), b.as_str()),
            ("/nix/store/libcufft-lib/lib/libcufft.so.11", a.as_str())
        );
        // A folder of store paths, audited as one root.
        let c = stable_place(&format!("store/{H2}-libcufft-11.4.1.4-lib/lib/libcufft.so.11"));
        assert_eq!(c, "store/libcufft-lib/lib/libcufft.so.11");
    }

    #[test]
    fn outputs_folders_and_other_files_stay_apart() {
        assert_ne!(
            stable_place("libcufft-11.4.1.4-lib/lib/libcufft.so.11"),
            stable_place("libcufft-11.4.1.4-dev/lib/libcufft.so.11")
        );
        // Only the root's name and hashed names are store names.
        assert_eq!(stable_place("pkg-1.0/lib/foo-2.0/x.so"), "pkg/lib/foo-2.0/x.so");
        // A file given alone is named by its file name only.
        assert_eq!(stable_place("tool-1.2"), "tool-1.2");
        assert_eq!(stable_place("libfoo.so.1.2"), "libfoo.so.1");
    }

    #[test]
    fn shared_objects_keep_their_major() {
        assert_eq!(soname_major("libcufft.so.11.4.1.4"), "libcufft.so.11");
        assert_eq!(soname_major("libnvrtc-builtins.so.13.0"), "libnvrtc-builtins.so.13");
        for kept in ["libcufft.so.11", "libcufft.so", "libLLVM-17.so", "libx.so.1a", "a.so.", "x"] {
            assert_eq!(soname_major(kept), kept);
        }
    }

    #[test]
    fn runpath_subjects_lose_store_hashes_and_versions() {
        let entry = format!("/nix/store/{H1}-cuda_cudart-12.2.140-lib/lib:$ORIGIN/../lib");
        assert_eq!(
            stable_subject("entry", &entry),
            "/nix/store/cuda_cudart-lib/lib:$ORIGIN/../lib"
        );
        assert_eq!(stable_subject("capability", "9.0"), "9.0");
        assert_eq!(stable_subject("reference", "cuda_nvcc-13.5"), "cuda_nvcc");
        assert_eq!(
            stable_subject("reference", "cuda_cudart-12.8.90/lib/stubs"),
            "cuda_cudart/lib/stubs"
        );
        assert_eq!(stable_subject("reference", "build folder"), "build folder");
    }

    #[test]
    fn identities_are_fixed_points() {
        let restate = |e: &str, kind: &str| {
            let (check, place, subject) = parts(e).unwrap();
            fingerprint(check, place, subject, kind)
        };
        let entries = [
            ("missing-driver-runpath\tlibcufft-11.2.1.3-lib/lib/libcufft.so.11.2.1.3\t/run/opengl-driver/lib", "entry"),
            ("build-only-reference\tpkg-1.0/bin/x\tgcc-13.2.0", "reference"),
            ("cudart-static\t/a.so\t", ""),
        ];
        for (e, kind) in entries {
            let once = restate(e, kind);
            assert_eq!(restate(&once, kind), once, "{e}");
        }
        assert_eq!(parts("no tabs"), None);
        assert_eq!(parts("one\ttab"), None);
    }
}
