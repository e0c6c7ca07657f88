//! `build-only-reference`: an output references a store path that only the
//! build needs (docs/references.md says which and why). One finding per
//! file and build-only path, naming the first place that holds it, and a
//! fix: the exact `remove-references-to` command, and whether it may be run
//! (only when every occurrence is bytes Nix sees outside compressed device
//! code).

use std::path::Path;

use crate::audit::finding::{strip_store_hash, CheckId, Finding, Subject};
use crate::audit::references::{Reference, Settings};

/// Output names of CUDA packages that hold headers, static libraries and
/// link-time pieces (Nixpkgs' `cudaPackages` split outputs): a runtime file
/// never needs them.
const BUILD_OUTPUTS: [&str; 2] = ["-dev", "-static"];

/// Name prefixes of the CUDA packages of Nixpkgs' `cudaPackages`.
const CUDA_PACKAGES: [&str; 10] = [
    "cuda_", "cuda-", "libcu", "libnv", "libnpp", "cudnn", "nccl", "cutensor", "tensorrt",
    "nvidia-",
];

/// The compiler wrappers' names (Nixpkgs' cc-wrapper and bintools-wrapper).
const WRAPPERS: [&str; 5] = [
    "gcc-wrapper-",
    "clang-wrapper-",
    "gfortran-wrapper-",
    "binutils-wrapper-",
    "bintools-wrapper-",
];

/// Why `r` is build-only, or `None`.
pub fn why_build_only(r: &Reference, settings: &Settings) -> Option<String> {
    if settings.build_top.as_deref() == Some(r.target.as_str()) {
        return Some("the build folder, which does not exist after the build".into());
    }
    let base = r.base();
    let name = strip_store_hash(base);
    let forbidden = settings.forbidden.iter().any(|f| {
        let f = f.trim_end_matches('/');
        f == r.target || f == base || (!f.contains('/') && strip_store_hash(f) == name)
    });
    if forbidden {
        return Some(
            "forbidden (--forbid-reference, disallowedReferences or disallowedRequisites)".into(),
        );
    }
    if !settings.defaults {
        return None;
    }
    if r.tail.starts_with("/lib/stubs") || r.tail.starts_with("/lib64/stubs") {
        return Some("the CUDA driver stubs folder, which must never be loaded at run time".into());
    }
    if name.starts_with("cuda_nvcc") || name.starts_with("cuda-nvcc") || r.tail == "/bin/nvcc" {
        return Some("the CUDA compiler".into());
    }
    if WRAPPERS.iter().any(|w| name.starts_with(w)) {
        return Some("a compiler wrapper".into());
    }
    let cuda = CUDA_PACKAGES.iter().any(|p| name.starts_with(p));
    if cuda && BUILD_OUTPUTS.iter().any(|o| name.ends_with(o)) {
        return Some("a CUDA package's headers or static libraries".into());
    }
    // Content: a toolkit holding nvcc, whatever its name (realised paths only).
    if Path::new(&r.target).join("bin/nvcc").exists() {
        return Some("a package holding the CUDA compiler (bin/nvcc)".into());
    }
    None
}

/// The build-only references of the file at `path` (whose own store path,
/// `own`, never counts).
pub fn build_only(
    path: &Path,
    own: Option<&str>,
    refs: &[Reference],
    settings: &Settings,
    findings: &mut Vec<Finding>,
) {
    let mut seen: Vec<(&str, String)> = Vec::new();
    for r in refs {
        if own.is_some_and(|o| o == r.base()) || settings.outputs.iter().any(|o| o == r.base()) {
            continue;
        }
        let Some(why) = why_build_only(r, settings) else { continue };
        let stubs = why.starts_with("the CUDA driver stubs");
        let key = match stubs {
            true => format!("{}{}", strip_store_hash(r.base()), "/lib/stubs"),
            false => strip_store_hash(r.base()).to_string(),
        };
        if seen.iter().any(|(t, k)| *t == r.target && *k == key) {
            continue;
        }
        seen.push((&r.target, key.clone()));
        let all: Vec<&Reference> = refs.iter().filter(|o| o.target == r.target).collect();
        let first = all.iter().find(|o| o.visible).unwrap_or(&all[0]);
        let message = format!(
            "references {} ({why}) at {}{}; {}",
            r.target,
            first.place(),
            match all.len() {
                1 => String::new(),
                n => format!(" and {} more place{}", n - 1, if n == 2 { "" } else { "s" }),
            },
            fix(path, &r.target, &all, settings)
        );
        let subject =
            if r.target.starts_with(&settings.store_dir) { key } else { "build folder".into() };
        findings.push(
            Finding::new(CheckId::BuildOnlyReference, path, message)
                .about(Subject::Reference(subject)),
        );
    }
}

/// The fix: the command, and whether it is safe here.
fn fix(path: &Path, target: &str, all: &[&Reference], settings: &Settings) -> String {
    if !target.starts_with(&settings.store_dir) {
        return "fix the build so that it does not write the build folder into the output".into();
    }
    if all.iter().any(|r| r.section.as_deref() == Some("symlink")) {
        return "point the link elsewhere (remove-references-to rewrites files, not links)".into();
    }
    if all.iter().any(|r| r.section.as_deref() == Some("name")) {
        return "rename the file or folder (remove-references-to rewrites contents, not names)"
            .into();
    }
    let command = format!("remove-references-to -t {target} {}", path.display());
    let visible: Vec<&&Reference> = all.iter().filter(|r| r.visible).collect();
    if visible.is_empty() {
        return "Nix does not see it (compressed device code only); nothing to rewrite".into();
    }
    match visible.iter().find(|r| !r.rewritable()) {
        None if visible.iter().any(|r| r.entry.is_some()) => format!(
            "`{command}` can rewrite it safely (uncompressed device code: a file name in debug information or an entry header; the code is unchanged)"
        ),
        None => format!("`{command}` can rewrite it safely (uncompressed bytes)"),
        Some(r) => format!(
            "remove-references-to cannot rewrite it safely ({} is inside a compressed payload): build without the path (e.g. without -lineinfo/-G, or from sources outside the store)",
            r.place()
        ),
    }
}
