//! The audit's checks, one function per concern, each producing findings of
//! the ids in [`crate::finding::CHECKS`]. They read facts only; reading files
//! happens in [`super::audit_file`].

use std::path::{Path, PathBuf};

use crate::devicecode::model::capability;
use crate::devicecode::DeviceCode;
use super::dynamic::DynamicFacts;
use super::Policy;
use crate::capabilities::{coverage, Capability, CodeKind, Runs, Variant};
use crate::finding::{ids, Finding};
use crate::linkage::{Resolution, SearchInput};

/// RUNPATH/RPATH checks: stubs, driver folder, build folder, empty entries,
/// RPATH instead of RUNPATH, static cudart.
pub fn runpath(path: &Path, d: &DynamicFacts, policy: &Policy, out: &mut Vec<Finding>) {
    if !d.dynamic {
        return;
    }
    if d.static_cudart {
        out.push(Finding::new(
            ids::CUDART_STATIC,
            path,
            "links the CUDA runtime statically; it dlopens libcuda.so.1 at run time",
        ));
    }
    if let (Some(rpath), None) = (&d.rpath, &d.runpath) {
        out.push(
            Finding::new(
                ids::RPATH_INSTEAD_OF_RUNPATH,
                path,
                format!("has DT_RPATH '{rpath}' and no DT_RUNPATH"),
            )
            .with("entry", rpath.as_str()),
        );
    }
    let search = d.search_path();
    let entries: Vec<&str> = search.map(|s| s.split(':').collect()).unwrap_or_default();
    let tag = if d.runpath.is_none() && d.rpath.is_some() { "RPATH" } else { "RUNPATH" };
    if let Some(s) = search {
        if entries.iter().any(|e| e.is_empty()) {
            let positions: Vec<String> = entries
                .iter()
                .enumerate()
                .filter(|(_, e)| e.is_empty())
                .map(|(i, _)| (i + 1).to_string())
                .collect();
            out.push(
                Finding::new(
                    ids::EMPTY_RUNPATH_ENTRY,
                    path,
                    format!(
                        "{tag} '{s}' has an empty entry (position {}): the loader searches the current directory",
                        positions.join(", ")
                    ),
                )
                .with("entry", s),
            );
        }
    }
    for e in &entries {
        if is_stubs_folder(e) {
            out.push(
                Finding::new(
                    ids::LIBCUDA_STUB_IN_RUNPATH,
                    path,
                    format!("{tag} entry {e} is a CUDA stubs folder"),
                )
                .with("entry", *e),
            );
        }
        if let Some(prefix) =
            policy.build_dirs.iter().find(|p| e == p || e.starts_with(&format!("{p}/")))
        {
            out.push(
                Finding::new(
                    ids::TMPDIR_IN_RUNPATH,
                    path,
                    format!("{tag} entry {e} is inside the build folder {prefix}"),
                )
                .with("entry", *e),
            );
        }
    }
    if d.needs_driver() {
        let driver = policy.driver_lib.trim_end_matches('/');
        if !entries.iter().any(|e| e.trim_end_matches('/') == driver) {
            let why = if d.static_cudart {
                "the static CUDA runtime dlopens libcuda.so.1"
            } else {
                "it needs libcuda.so.1"
            };
            out.push(
                Finding::new(
                    ids::MISSING_DRIVER_RUNPATH,
                    path,
                    format!("{why}, but {driver} is not on its {tag}"),
                )
                .with("entry", driver),
            );
        }
    }
}

/// Whether a search entry is a CUDA stubs folder (`*/lib/stubs`, `*/lib64/stubs`).
fn is_stubs_folder(entry: &str) -> bool {
    let e = entry.trim_end_matches('/');
    e.ends_with("/lib/stubs") || e.ends_with("/lib64/stubs") || e == "stubs"
}

/// NEEDED libraries the loader would not find. `path` is the file's real
/// path (see [`super::audit_file`]).
pub fn needed(path: &Path, d: &DynamicFacts, policy: &Policy, out: &mut Vec<Finding>) {
    if !d.dynamic || d.kind == "relocatable" {
        return;
    }
    let in_store = path.starts_with(&policy.store_dir);
    let system: &[PathBuf] =
        if policy.system_lib_dirs || !in_store { policy.resolver.system_lib_dirs() } else { &[] };
    let split = |s: &Option<String>| -> Vec<String> {
        s.as_deref().map(|s| s.split(':').map(str::to_string).collect()).unwrap_or_default()
    };
    let rpath = split(&d.rpath);
    let runpath = d.runpath.as_ref().map(|_| split(&d.runpath));
    let interp = d.interpreter.as_deref().map(Path::new);
    let input = SearchInput {
        path,
        rpath: &rpath,
        runpath: runpath.as_deref(),
        interpreter: interp,
        system_dirs: system,
        class_machine: Some((d.is64, d.machine)),
    };
    for name in &d.needed {
        if let Resolution::Missing(searched) = policy.resolver.resolve(name, &input) {
            let list: Vec<String> = searched.iter().map(|p| p.display().to_string()).collect();
            let searched =
                if list.is_empty() { "nothing to search".to_string() } else { list.join(":") };
            out.push(
                Finding::new(
                    ids::UNRESOLVED_NEEDED,
                    path,
                    format!("NEEDED {name} is found nowhere (searched {searched})"),
                )
                .with("library", name.as_str()),
            );
        }
    }
}

/// Capability coverage of the device code against the requested list.
pub fn capabilities(path: &Path, dev: &DeviceCode, policy: &Policy, out: &mut Vec<Finding>) {
    let Some(req) = &policy.requested else { return };
    if !dev.has_code() {
        return;
    }
    let codes = dev.codes();
    // "SASS sm_80 sm_86" / "no PTX": what the file has of one kind, for messages.
    let have = |kind: CodeKind| -> String {
        let (label, prefix) = match kind {
            CodeKind::Sass => ("SASS", "sm"),
            CodeKind::Ptx => ("PTX", "compute"),
        };
        let v: Vec<String> = codes
            .iter()
            .filter(|c| c.kind == kind)
            .map(|c| format!("{prefix}_{}{}", c.target.sm(), c.target.variant.suffix()))
            .collect();
        if v.is_empty() {
            format!("no {label}")
        } else {
            format!("{label} {}", v.join(" "))
        }
    };
    for cap in &req.capabilities {
        match coverage(&codes, *cap) {
            Runs::No => out.push(
                Finding::new(
                    ids::NO_CODE_FOR_CAPABILITY,
                    path,
                    format!(
                        "nothing runs on capability {cap}: the file has {} and {}",
                        have(CodeKind::Sass),
                        have(CodeKind::Ptx)
                    ),
                )
                .with("capability", cap.to_string()),
            ),
            Runs::Jit => out.push(
                Finding::new(
                    ids::PTX_ONLY_CAPABILITY,
                    path,
                    format!(
                        "capability {cap} runs only through the PTX JIT (the file has {})",
                        have(CodeKind::Ptx)
                    ),
                )
                .with("capability", cap.to_string()),
            ),
            Runs::Native => {}
        }
    }
    // Forward compatibility: PTX for the last capability (Nixpkgs' rule), and
    // for every capability written with +PTX. Plain PTX of an equal or lower
    // capability of the same kind serves as well: it JITs on anything newer.
    let mut want_ptx: Vec<Capability> = req.ptx.clone();
    if policy.forward_compat {
        if let Some(last) = req.capabilities.last() {
            if !want_ptx.contains(last) {
                want_ptx.push(*last);
            }
        }
    }
    for cap in want_ptx {
        let ok = codes.iter().any(|c| {
            c.kind == CodeKind::Ptx
                && match cap.variant {
                    Variant::Base => {
                        c.target.variant == Variant::Base && c.target.device() <= cap.device()
                    }
                    _ => c.target == cap,
                }
        });
        if !ok {
            out.push(
                Finding::new(
                    ids::MISSING_FORWARD_COMPAT_PTX,
                    path,
                    format!(
                        "forward compatibility needs PTX for capability {cap} or lower, to JIT on newer GPUs; the file has {}",
                        have(CodeKind::Ptx)
                    ),
                )
                .with("capability", cap.to_string()),
            );
        }
    }
    // Family code (`sm_100f`) serves its base capability natively: asking
    // for 10.0 asks for it too (nvcc's `-arch=sm_100f` is how one builds
    // once for 10.0 and 10.3).
    let asked = |list: &[Capability], cap: Capability| {
        list.contains(&cap) || (cap.variant == Variant::Family && list.contains(&cap.device()))
    };
    let (sass, ptx) = (dev.sass(), dev.ptx());
    for a in sass.iter().map(|a| (CodeKind::Sass, a)).chain(ptx.iter().map(|a| (CodeKind::Ptx, a)))
    {
        let Some(cap) = capability(*a.1) else { continue };
        let last = req.capabilities.last().copied();
        let requested = match a.0 {
            CodeKind::Sass => asked(&req.capabilities, cap),
            CodeKind::Ptx => {
                asked(&req.ptx, cap)
                    || (policy.forward_compat && last.is_some_and(|l| asked(&[l], cap)))
                    || asked(&req.capabilities, cap)
            }
        };
        if !requested {
            let (kind, name) = match a.0 {
                CodeKind::Sass => ("SASS", a.1.name()),
                CodeKind::Ptx => ("PTX", a.1.name().replacen("sm_", "compute_", 1)),
            };
            let list: Vec<String> = req.capabilities.iter().map(|c| c.to_string()).collect();
            out.push(
                Finding::new(
                    ids::UNREQUESTED_ARCH,
                    path,
                    format!("{kind} {name} was not requested (requested: {})", list.join(" ")),
                )
                .with("arch", name),
            );
        }
    }
}

/// Tree-wide: files linking different libcudart majors.
pub fn mixed_cudart(files: &[(PathBuf, Option<u32>)], out: &mut Vec<Finding>) {
    let mut majors: Vec<u32> = files.iter().filter_map(|(_, m)| *m).collect();
    majors.sort_unstable();
    majors.dedup();
    if majors.len() < 2 {
        return;
    }
    for (path, major) in files {
        let Some(major) = major else { continue };
        let others: Vec<String> =
            majors.iter().filter(|m| *m != major).map(|m| m.to_string()).collect();
        let example = files
            .iter()
            .find(|(_, m)| m.is_some_and(|m| m != *major))
            .map(|(p, _)| p.display().to_string())
            .unwrap_or_default();
        out.push(
            Finding::new(
                ids::MIXED_CUDART_VERSIONS,
                path,
                format!(
                    "links libcudart.so.{major}; the tree also links major {} (e.g. {example})",
                    others.join(", ")
                ),
            )
            .with("library", format!("libcudart.so.{major}")),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stubs_folders() {
        assert!(is_stubs_folder("/nix/store/x-cuda_cudart-12.8/lib/stubs"));
        assert!(is_stubs_folder("/usr/local/cuda/lib64/stubs/"));
        assert!(!is_stubs_folder("/nix/store/x/lib"));
    }
}
