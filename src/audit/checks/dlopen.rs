//! Libraries loaded with dlopen (docs/dlopen.md): the rows
//! `dlopen-unresolved`, `dlopen-wrong-release`, `dlopen-not-fetched`,
//! `dlopen-incomplete` and `dlopen-resolved` of the checks table. A target
//! that must be of the caller's own release and resolves to a file of
//! another one (both read from the files) is `dlopen-wrong-release`, an
//! error; when either release cannot be read, `dlopen-resolved` says it
//! was not checked, never that it is the same. A file that imports no dlopen
//! has no [`Loads`] and gets no finding. A target the machine provides (the
//! GPU driver's libraries, glibc's) or that the file's NEEDED closure
//! already loads gets none either: no packaging changes where it comes
//! from (whether the driver folder is on the RUNPATH is
//! `missing-driver-runpath`'s concern); `dlopen-resolved` is for the
//! targets found in a folder, which a CI diffs.
//!
//! The severity policy, in one sentence: a warning needs a reviewed fact or
//! a loader-proven failure. An unresolved target is an error when the
//! facts table (or a `.note.dlopen` priority `required`) says the
//! library's main job needs it, a warning when a row or a note says
//! `recommended`, and an info otherwise: a bare string in `.rodata` proves
//! neither that the library is ever loaded nor that its absence matters
//! (CUPTI's graphics interop, NVSHMEM's bootstraps, Android's
//! `libneuralnetworks.so`).

use std::path::Path;

use crate::audit::dlopen::{Loads, ReleaseCheck};
use crate::audit::finding::{CheckId, Finding, Severity, Subject};
use crate::dlopen::release::Release;
use crate::dlopen::{provider, Need, Origin, Resolved, Via};

/// The findings of one file's dlopen targets.
pub fn dlopen(path: &Path, loads: &Loads, out: &mut Vec<Finding>) {
    for p in &loads.problems {
        out.push(Finding::new(CheckId::DlopenIncomplete, path, p.describe()));
    }
    for load in &loads.targets {
        let t = &load.target;
        let name = &t.soname;
        let asked = if t.asked.len() > 1 || t.asked[0] != *name {
            format!(" (asked as {})", t.asked.join(", then "))
        } else {
            String::new()
        };
        let place = t.origin.describe();
        let subject = Subject::Library(name.clone());
        let finding = match &load.resolved {
            Resolved::Found { path: None, .. } => continue,
            Resolved::Found { name: found, path: Some(at), via } => {
                let how = match via {
                    Via::Runpath(e) => format!("at {} through RUNPATH entry {e}", at.display()),
                    Via::Rpath(e) => format!("at {} through RPATH entry {e}", at.display()),
                    _ => format!("at {} in the loader's default folders", at.display()),
                };
                let head =
                    format!("dlopens {name}{asked}, named at {place}: {found} resolves {how}");
                match &load.release {
                    Some(ReleaseCheck::Other { caller, target }) => {
                        wrong_release(path, &head, name, caller, target, via)
                    }
                    Some(ReleaseCheck::Unknown { caller, target }) => Finding::new(
                        CheckId::DlopenResolved,
                        path,
                        format!("{head}; {}", unchecked(caller.as_ref(), target.as_ref())),
                    ),
                    _ => Finding::new(CheckId::DlopenResolved, path, head),
                }
            }
            Resolved::Missing { .. } => {
                let searched = searched(&loads.searched);
                let fix = fix(name, t, loads.caller.as_deref());
                let (need, severity) = match t.need {
                    Need::Needed => ("needed", Severity::Error),
                    Need::Recommended => ("recommended", Severity::Warning),
                    Need::Optional => ("optional", Severity::Info),
                };
                let mut f = Finding::new(
                    CheckId::DlopenUnresolved,
                    path,
                    format!("dlopens {name}{asked} ({need}, named at {place}), found nowhere (searched {searched}){fix}"),
                );
                f.severity = severity;
                f
            }
            Resolved::Unfetched { store_paths } => {
                let list: Vec<String> =
                    store_paths.iter().map(|p| p.display().to_string()).collect();
                Finding::new(
                    CheckId::DlopenNotFetched,
                    path,
                    format!("dlopens {name}{asked} (named at {place}), which may be in store paths this audit did not read ({}): audit the closure (--substituter URL --closure) to decide", list.join(", ")),
                )
            }
        };
        out.push(finding.about(subject));
    }
}

/// The error of a target found at another release than the caller's:
/// both releases, where each was read, where the other one was found, and
/// a fix true of that place (a folder appended to the RUNPATH wins over
/// the default folders, not over an earlier RUNPATH entry).
fn wrong_release(
    path: &Path,
    head: &str,
    name: &str,
    caller: &Release,
    target: &Release,
    via: &Via,
) -> Finding {
    let (c, t) = (&caller.version, &target.version);
    let fix = match via {
        Via::Runpath(e) | Via::Rpath(e) => format!(
            "replace RUNPATH entry {e} by the folder that holds release {c} of {name} (or put that folder before it: auto-add-driver-runpath --dlopen-search appends after the existing entries)"
        ),
        _ => format!(
            "put the folder that holds release {c} of {name} on this file's RUNPATH, which the loader searches before its default folders (auto-add-driver-runpath --dlopen-search DIR, or the autoAddDlopenRunpath hook)"
        ),
    };
    Finding::new(
        CheckId::DlopenWrongRelease,
        path,
        format!(
            "{head}, which is release {t} ({} there) while this file is release {c} ({}): it must be of this file's own release; {fix}",
            target.describe_source(),
            caller.describe_source()
        ),
    )
}

/// Why a target that must be of the caller's release was not compared.
fn unchecked(caller: Option<&Release>, target: Option<&Release>) -> String {
    let what = |r: Option<&Release>, who: &str| {
        match r {
        Some(r) => format!("{who} is release {} ({})", r.version, r.describe_source()),
        None => format!("{who}'s release cannot be read from the file (no version object, no full version in its real file name)"),
    }
    };
    format!(
        "whether it is this file's own release, as it must be, could not be checked: {}; {}",
        what(caller, "this file"),
        what(target, "the file found")
    )
}

/// A `Missing` target's folders, as its message says them: all of them up
/// to [`SHOWN_FOLDERS`], else the first few and how many more, with where
/// the whole list is (once per file: every target of a file searches the
/// same folders).
fn searched(folders: &[std::path::PathBuf]) -> String {
    let list: Vec<String> =
        folders.iter().take(SHOWN_FOLDERS).map(|p| p.display().to_string()).collect();
    match folders.len() {
        0 => "nothing: the file has no RUNPATH or RPATH and the loader's default folders do not apply".to_string(),
        n if n <= SHOWN_FOLDERS => list.join(":"),
        n => format!(
            "{n} folders: {}:... and {} more; --dlopen-facts lists them once, as the file's dlopen `searched`",
            list.join(":"),
            n - SHOWN_FOLDERS
        ),
    }
}

/// A `dlopen-unresolved` message names at most this many folders.
pub const SHOWN_FOLDERS: usize = 8;

/// The fix clause of an unresolved target: a package only when the
/// providers table names one for it and it is not the caller's own (a
/// library missing from its own package is a packaging split to undo, not
/// a dependency to add). "Install it beside this file" was untrue: NVRTC
/// 13.0.88's wheel has no RUNPATH, and with its builtins in its own folder
/// every compile still fails (glibc's dlopen searches the caller's RUNPATH,
/// never the caller's folder; tests/dlopen_programs.rs).
fn fix(name: &str, t: &crate::dlopen::Target, caller: Option<&str>) -> String {
    let own = caller.and_then(provider).map(|p| p.attribute);
    let found = t.asked.iter().chain(std::iter::once(&t.soname)).find_map(|n| provider(n));
    match found {
        Some(p) if Some(p.attribute) == own => format!(
            "; {name} belongs to {}, this file's own package: put the folder that holds it on this file's RUNPATH ($ORIGIN where it is beside this file: dlopen does not search the caller's own folder)",
            p.attribute
        ),
        Some(p) => format!(
            "; {name} is in {}: add its lib folder to this file's RUNPATH (auto-add-driver-runpath --dlopen-search DIR)",
            p.attribute
        ),
        None if matches!(t.origin, Origin::Table { .. }) => {
            "; no package provides it (a plugin a user installs): nothing to fix in this package".to_string()
        }
        None => "; no package is known to provide it: if one does, add its lib folder to this file's RUNPATH (auto-add-driver-runpath --dlopen-search DIR)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::dlopen::Load;
    use crate::dlopen::release::From;
    use crate::dlopen::{Import, Target};
    use std::path::PathBuf;

    fn loads(via: Via, release: Option<ReleaseCheck>) -> Loads {
        let target = Target {
            soname: "libcudnn_graph.so.9".into(),
            asked: vec!["libcudnn_graph.so.9".into()],
            origin: Origin::Section { section: ".rodata".into(), offset: 0x2b },
            need: Need::Needed,
            same_release: true,
        };
        let resolved = Resolved::Found {
            name: "libcudnn_graph.so.9".into(),
            path: Some(PathBuf::from("/usr/lib/x86_64-linux-gnu/libcudnn_graph.so.9")),
            via,
        };
        Loads {
            imports: Import::Dlopen,
            targets: vec![Load { target, resolved, release }],
            searched: vec![],
            patterns: vec![],
            problems: vec![],
            caller: Some("libcudnn.so.9".into()),
        }
    }

    fn rel(v: &str, from: From) -> Release {
        Release { version: v.into(), from }
    }

    /// The fix is true of where the other release was found: a folder put on
    /// the RUNPATH wins over the default folders, not over an earlier entry.
    #[test]
    fn the_fix_depends_on_where_the_other_release_was_found() {
        let other = || ReleaseCheck::Other {
            caller: rel("9.19.0", From::FileName("libcudnn.so.9.19.0".into())),
            target: rel("9.14.0", From::Symbol("cudnn_graph_version".into())),
        };
        let mut out = Vec::new();
        dlopen(Path::new("/x/libcudnn.so.9.19.0"), &loads(Via::Default, Some(other())), &mut out);
        assert_eq!(out[0].check, CheckId::DlopenWrongRelease);
        let m = &out[0].message;
        assert!(m.contains("in the loader's default folders, which is release 9.14.0"), "{m}");
        assert!(
            m.contains(
                "on this file's RUNPATH, which the loader searches before its default folders"
            ),
            "{m}"
        );
        let mut out = Vec::new();
        let via = Via::Runpath("/opt/cudnn".into());
        dlopen(Path::new("/x/libcudnn.so.9.19.0"), &loads(via, Some(other())), &mut out);
        assert!(out[0].message.contains("replace RUNPATH entry /opt/cudnn"), "{}", out[0].message);
        // Same release, or none asked: the resolved info as before.
        let same = ReleaseCheck::Same { release: rel("9.19.0", From::Symbol("x".into())) };
        for r in [Some(same), None] {
            let mut out = Vec::new();
            dlopen(Path::new("/x/l"), &loads(Via::Default, r), &mut out);
            assert_eq!(out[0].check, CheckId::DlopenResolved);
            assert!(!out[0].message.contains("release"), "{}", out[0].message);
        }
    }
}
