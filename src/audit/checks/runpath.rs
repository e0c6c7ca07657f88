//! RUNPATH and RPATH, the rows `libcuda-stub-in-runpath`,
//! `missing-driver-runpath`, `tmpdir-in-runpath`, `empty-runpath-entry`,
//! `rpath-instead-of-runpath` and `cudart-static` of the checks table.

use std::path::Path;

use crate::audit::dynamic::HostFacts;
use crate::audit::finding::{CheckId, Finding, Subject};
use crate::audit::Policy;

/// RUNPATH/RPATH checks: stubs, driver folder, build folder, empty entries,
/// RPATH instead of RUNPATH, static cudart.
pub fn runpath(path: &Path, h: &HostFacts, policy: &Policy, out: &mut Vec<Finding>) {
    let d = &h.loader;
    if !d.dynamic {
        return;
    }
    if h.static_cudart {
        out.push(Finding::new(
            CheckId::CudartStatic,
            path,
            "links the CUDA runtime statically; it dlopens libcuda.so.1 at run time",
        ));
    }
    if let (Some(rpath), None) = (&d.rpath, &d.runpath) {
        out.push(
            Finding::new(
                CheckId::RpathInsteadOfRunpath,
                path,
                format!("has DT_RPATH '{rpath}' and no DT_RUNPATH"),
            )
            .about(Subject::Entry(rpath.clone())),
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
                    CheckId::EmptyRunpathEntry,
                    path,
                    format!(
                        "{tag} '{s}' has an empty entry (position {}): the loader searches the current directory",
                        positions.join(", ")
                    ),
                )
                .about(Subject::Entry(s.to_string())),
            );
        }
    }
    for e in &entries {
        if is_stubs_folder(e) {
            out.push(
                Finding::new(
                    CheckId::LibcudaStubInRunpath,
                    path,
                    format!("{tag} entry {e} is a CUDA stubs folder"),
                )
                .about(Subject::Entry(e.to_string())),
            );
        }
        if let Some(prefix) =
            policy.build_dirs.iter().find(|p| e == p || e.starts_with(&format!("{p}/")))
        {
            out.push(
                Finding::new(
                    CheckId::TmpdirInRunpath,
                    path,
                    format!("{tag} entry {e} is inside the build folder {prefix}"),
                )
                .about(Subject::Entry(e.to_string())),
            );
        }
    }
    if let Some(why) = h.driver_use() {
        let driver = policy.driver_lib.trim_end_matches('/');
        if !entries.iter().any(|e| e.trim_end_matches('/') == driver) {
            out.push(
                Finding::new(
                    CheckId::MissingDriverRunpath,
                    path,
                    format!("{why}, but {driver} is not on its {tag}"),
                )
                .about(Subject::Entry(driver.to_string())),
            );
        }
    }
}

/// Whether a search entry is a CUDA stubs folder (`*/lib/stubs`, `*/lib64/stubs`).
pub(super) fn is_stubs_folder(entry: &str) -> bool {
    let e = entry.trim_end_matches('/');
    e.ends_with("/lib/stubs") || e.ends_with("/lib64/stubs") || e == "stubs"
}
