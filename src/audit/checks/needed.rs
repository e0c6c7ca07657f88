//! NEEDED libraries as the loader resolves them: the rows
//! `unresolved-needed`, `needed-not-fetched` and `needed-undecided` of the
//! checks table.

use std::path::{Path, PathBuf};

use crate::audit::finding::{CheckId, Finding, Subject};
use crate::audit::linkage::{sysroot_lib_dirs, Resolution, SearchInput};
use crate::audit::Policy;
use crate::elf::dynamic::{DynamicFacts, Kind};

/// NEEDED libraries the loader would not find. `path` is the file's real
/// path (see [`super::audit_file`]).
pub fn needed(path: &Path, d: &DynamicFacts, policy: &Policy, out: &mut Vec<Finding>) {
    if !d.dynamic || d.kind == Kind::Relocatable {
        return;
    }
    let in_store = policy.resolver.in_store(path, &policy.store_dir);
    let target = d.target();
    let foreign = !target.is_build_machine();
    let sysroot_dirs;
    let system: &[PathBuf] = if foreign {
        // Another machine's file: this machine's folders hold this machine's
        // libraries; only an explicit sysroot stands for that machine's.
        sysroot_dirs = policy.sysroot.as_deref().map(|r| sysroot_lib_dirs(r, target));
        sysroot_dirs.as_deref().unwrap_or(&[])
    } else if policy.system_lib_dirs || !in_store {
        policy.resolver.system_lib_dirs()
    } else {
        &[]
    };
    let split = |s: &Option<String>| -> Vec<String> {
        s.as_deref().map(|s| s.split(':').map(str::to_string).collect()).unwrap_or_default()
    };
    let rpath = split(&d.rpath);
    let runpath = d.runpath.as_ref().map(|_| split(&d.runpath));
    let interp_in_sysroot;
    let interp = match d.interpreter.as_deref().map(Path::new) {
        // Outside the store, a foreign file's interpreter folder is that
        // machine's `/lib`: in the sysroot, or nowhere here.
        Some(i) if foreign && !i.starts_with(&policy.store_dir) => {
            interp_in_sysroot =
                policy.sysroot.as_deref().map(|r| r.join(i.strip_prefix("/").unwrap_or(i)));
            interp_in_sysroot.as_deref()
        }
        other => other,
    };
    let input = SearchInput {
        path,
        rpath: &rpath,
        runpath: runpath.as_deref(),
        interpreter: interp,
        system_dirs: system,
        target: Some(target),
    };
    let mut undecided: Vec<(&str, Vec<PathBuf>)> = Vec::new();
    for name in &d.needed {
        let resolution = policy.resolver.resolve(name, &input);
        if let Resolution::Undecided(store_paths) = resolution {
            undecided.push((name, store_paths));
            continue;
        }
        if let Resolution::Missing(dirs) = resolution {
            if foreign && policy.sysroot.is_none() && !in_store {
                // That machine's default folders are not here: the library
                // may well be there. Undecidable, not a failure.
                out.push(
                    Finding::new(
                        CheckId::NeededUndecided,
                        path,
                        format!(
                            "NEEDED {name} is not in the folders its RUNPATH/RPATH names; the file is for {}, whose default library folders are not on this machine: give them with --sysroot DIR to decide",
                            target.describe()
                        ),
                    )
                    .about(Subject::Library(name.clone())),
                );
                continue;
            }
            let list: Vec<String> = dirs.iter().map(|p| p.display().to_string()).collect();
            let searched =
                if list.is_empty() { "nothing to search".to_string() } else { list.join(":") };
            let mut message = format!("NEEDED {name} is found nowhere (searched {searched})");
            for (p, kind) in policy.resolver.not_files(&dirs, name) {
                message
                    .push_str(&format!("; {} is {kind}, not a library (not opened)", p.display()));
            }
            if foreign {
                message.push_str(&format!(
                    "; the file is for {}, so this machine's library folders do not count{}",
                    target.describe(),
                    if policy.sysroot.is_some() {
                        ""
                    } else {
                        " (give that machine's libraries with --sysroot DIR)"
                    }
                ));
            }
            out.push(
                Finding::new(CheckId::UnresolvedNeeded, path, message)
                    .about(Subject::Library(name.clone())),
            );
        }
    }
    if !undecided.is_empty() {
        out.push(not_fetched(path, &undecided));
    }
}

/// The one finding for a file's NEEDED libraries searched in store paths
/// that were not read (see [`crate::store::mounts::Located::Unfetched`]).
fn not_fetched(path: &Path, undecided: &[(&str, Vec<PathBuf>)]) -> Finding {
    let names: Vec<&str> = undecided.iter().map(|(n, _)| *n).collect();
    let parts: Vec<String> = undecided
        .iter()
        .map(|(name, paths)| {
            let paths: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            format!("{name} (in {})", paths.join(", "))
        })
        .collect();
    Finding::new(
        CheckId::NeededNotFetched,
        path,
        format!(
            "NEEDED {} may be in store paths this audit did not read: audit the closure (--substituter URL --closure) to decide",
            parts.join(", ")
        ),
    )
    .about(Subject::Library(names.join(" ")))
}
