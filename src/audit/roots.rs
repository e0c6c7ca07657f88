//! What the audit is pointed at, and the walk from there to files: paths
//! of this machine (a `result` link followed, folders walked in parallel)
//! and store paths unpacked elsewhere, each file named as the user sees it
//! and located for baselines by a name without the store hash.

use std::path::{Path, PathBuf};

use super::failure::{self, Failure};
use super::references::{self, Reference};
use super::{audit_walked_at, checks, Audit, FileOutcome, Policy};
use crate::devicecode::host;
use crate::fs::typed::{self, Follow};
use crate::fs::walk;

/// Audits files and folders (folders walked in parallel, links inside them
/// not followed; a path given directly that is a link is followed, as
/// `result` links are meant to be).
pub fn audit_paths(paths: &[PathBuf], policy: &Policy) -> Audit {
    let roots: Vec<Root> = paths.iter().cloned().map(Root::Path).collect();
    audit_roots(&roots, policy)
}

/// What to audit: a path of this machine, or a store path unpacked elsewhere.
#[derive(Debug, Clone)]
pub enum Root {
    /// A file or folder as given.
    Path(PathBuf),
    /// A store path's contents at `mount.local`, reported and decided under
    /// `mount.logical` (the policy's resolver must hold the same mounts).
    Mounted {
        /// Where it is and what it stands for.
        mount: crate::store::mounts::Mount,
        /// Its name in baseline locations (the store name without the hash).
        name: String,
    },
    /// Could not be read at all (a failed fetch): one failure line.
    Failed(Failure),
}

/// One examined file: the path shown, its stable location for baselines,
/// the outcome, and its store references (with reference finding on).
type Examined = (PathBuf, String, FileOutcome, Refs);

/// A file's or link's store references and its own store path's base name
/// (never build-only), or why they could not be read.
type Refs = Result<(Vec<Reference>, Option<String>), Failure>;

/// Examines one entry of a walk (or a root): a regular file is audited, and
/// with reference finding on a file or link is scanned for references.
/// `None`: nothing to examine (a folder, a link with reference finding off).
/// `below`: the entry lies below the root (its name is part of the
/// output's NAR, and scanned; the root's own name is the store path's).
fn examine(
    local: &Path,
    logical: &Path,
    shown: &Path,
    file_type: std::fs::FileType,
    below: bool,
    policy: &Policy,
) -> Option<(FileOutcome, Refs)> {
    let is_file = file_type.is_file();
    let Some(settings) = &policy.references else {
        // A file that is no object is not kept: 12,000 Python files of a
        // PyTorch tree would be sorted and named for nothing.
        let outcome = is_file.then(|| audit_walked_at(local, logical, shown, policy))?;
        return (!matches!(outcome, Ok(None))).then_some((outcome, Ok((Vec::new(), None))));
    };
    let own = own_base(logical, &settings.store_dir);
    let mut refs = match local.file_name().filter(|_| below) {
        Some(name) => references::scan_name(name.as_encoded_bytes(), settings),
        None => Vec::new(),
    };
    if !is_file {
        if file_type.is_symlink() {
            match references::scan_path(local, settings) {
                Ok(found) => refs.extend(found.unwrap_or_default()),
                Err(e) => return Some((Ok(None), Err(Failure::io(shown, &e)))),
            }
        } else if refs.is_empty() {
            // A folder (or a FIFO) whose name names no store path.
            return None;
        }
        return Some((Ok(None), Ok((refs, own))));
    }
    // One map for both: the audit reads headers and device code, then the
    // reference scan streams every byte of the same map.
    let data = match host::open_walked(local).and_then(|f| host::map_file(&f)) {
        Ok(data) => data,
        Err(e) => return Some((Err(Failure::io(shown, &e)), Ok((Vec::new(), None)))),
    };
    let outcome = super::audit_mapped(&data, local, logical, shown, policy);
    // A file that could not be read fails once, as the audit says.
    if outcome.is_ok() {
        refs.extend(references::scan_mapped(&data, settings));
    }
    Some((outcome, Ok((refs, own))))
}

/// The base name of the store path `path` lies in, if any.
fn own_base(path: &Path, store_dir: &str) -> Option<String> {
    let rest = path.strip_prefix(store_dir).ok()?;
    rest.components().next().map(|c| c.as_os_str().to_string_lossy().into_owned())
}

/// Audits roots: [`audit_paths`]'s walk, with mounted store paths read from
/// their local copies and reported exactly as the realised paths would be.
pub fn audit_roots(roots: &[Root], policy: &Policy) -> Audit {
    conclude(roots.iter().map(|root| examine_root(root, policy)).collect(), policy)
}

/// What the walk of one root found: its examined files and its failures.
#[derive(Debug, Default)]
pub(super) struct Walked {
    outcomes: Vec<Examined>,
    failures: Vec<Failure>,
}

/// Examines the files of one root (in parallel); [`conclude`] makes the
/// audit of several, so that roots can be examined apart (a closure's
/// store paths, each once its references are) and still report as one.
pub(super) fn examine_root(root: &Root, policy: &Policy) -> Walked {
    let mut w = Walked::default();
    match root {
        Root::Path(path) => path_root(path, policy, &mut w.outcomes, &mut w.failures),
        Root::Failed(failure) => w.failures.push(failure.clone()),
        Root::Mounted { mount, name } => {
            mounted_root(mount, name, policy, &mut w.outcomes, &mut w.failures)
        }
    }
    w
}

/// The audit of roots examined apart, in the roots' order: findings, the
/// tree checks over all files, everything sorted.
pub(super) fn conclude(walked: Vec<Walked>, policy: &Policy) -> Audit {
    let mut audit = Audit::default();
    let mut outcomes: Vec<Examined> = Vec::new();
    for w in walked {
        outcomes.extend(w.outcomes);
        audit.failures.extend(w.failures);
    }
    let mut cudart = Vec::new();
    for (shown, location, outcome, refs) in outcomes {
        let refs = match refs {
            Ok((refs, own)) => {
                if let Some(settings) = &policy.references {
                    let mut found = Vec::new();
                    checks::build_only(&shown, own.as_deref(), &refs, settings, &mut found);
                    audit.findings.extend(found.into_iter().map(|mut f| {
                        f.location = Some(location.clone());
                        f
                    }));
                }
                refs
            }
            Err(e) => {
                audit.failures.push(e);
                Vec::new()
            }
        };
        audit.references.extend(refs.iter().map(|r| (shown.clone(), r.clone())));
        match outcome {
            Ok(Some((mut facts, findings))) => {
                facts.path = shown.clone();
                facts.references = refs;
                audit.findings.extend(findings.into_iter().map(|mut f| {
                    f.path = shown.clone();
                    f.location = Some(location.clone());
                    f
                }));
                cudart.push((shown, facts.dynamic.as_ref().and_then(|d| d.cudart_major())));
                audit.files.push(facts);
            }
            Ok(None) => {}
            Err(e) => audit.failures.push(e),
        }
    }
    checks::mixed_cudart(&cudart, &mut audit.findings);
    super::links::fold(&audit.files, &mut audit.findings);
    audit.files.sort_by(|a, b| a.path.cmp(&b.path));
    audit.references.sort_by(|a, b| (&a.0, a.1.offset).cmp(&(&b.0, b.1.offset)));
    failure::sort(&mut audit.failures);
    audit
}

/// A root's name in baseline locations: the store hash stripped from the
/// real name (a `result` link's target, `.` made a name).
fn root_name(real: &Path) -> String {
    let name = real.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    crate::audit::finding::strip_store_hash(&name).to_string()
}

/// A file or folder of this machine, as given.
fn path_root(
    path: &Path,
    policy: &Policy,
    outcomes: &mut Vec<Examined>,
    failures: &mut Vec<Failure>,
) {
    // Links are followed, a `result` link's files named under it: the
    // checks need real paths ($ORIGIN, in the store or not).
    let typed = match typed::resolve(path, Follow::Everything) {
        Ok(typed) => typed,
        Err(e) => return failures.push(Failure::from(&e)),
    };
    let root = &typed.root;
    if typed.is_dir {
        let rel = |p: &Path| p.strip_prefix(root).map(Path::to_path_buf).unwrap_or_default();
        let walked = walk::walk(root, &walk::Options::default(), |p, kind| {
            examine(p, p, &typed.shown(p), kind.file_type, kind.depth > 0, policy)
        });
        failures.extend(walked.errors.iter().map(Failure::from));
        let base = root_name(root);
        for (p, (outcome, refs)) in walked.items {
            let location = Path::new(&base).join(rel(&p)).to_string_lossy().into_owned();
            outcomes.push((typed.shown(&p), location, outcome, refs));
        }
    } else {
        // Files found by the walk below a real root are real already
        // (links inside folders are not followed).
        let kind = std::fs::symlink_metadata(root).map(|m| m.file_type());
        let examined = kind.ok().and_then(|k| examine(root, root, path, k, false, policy));
        // Not a file (a FIFO, a device): the audit says why, as before.
        let (outcome, refs) = examined
            .unwrap_or_else(|| (super::audit_file(root, path, policy), Ok((Vec::new(), None))));
        outcomes.push((path.to_path_buf(), root_name(root), outcome, refs));
    }
}

/// A store path unpacked at `mount.local`, reported under `mount.logical`.
fn mounted_root(
    mount: &crate::store::mounts::Mount,
    name: &str,
    policy: &Policy,
    outcomes: &mut Vec<Examined>,
    failures: &mut Vec<Failure>,
) {
    let (local, logical) = (&mount.local, &mount.logical);
    let meta = match std::fs::symlink_metadata(local) {
        Ok(m) => m,
        // The store path is one file that is no object: the
        // unpacking left it out, as the audit would skip it.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
        Err(e) => {
            failures.push(Failure::io(logical, &e));
            return;
        }
    };
    if meta.is_dir() {
        let rel = |p: &Path| p.strip_prefix(local).map(Path::to_path_buf).unwrap_or_default();
        let walked = walk::walk(local, &walk::Options::default(), |p, kind| {
            let shown = logical.join(rel(p));
            examine(p, &shown, &shown, kind.file_type, kind.depth > 0, policy)
        });
        failures.extend(walked.errors.iter().map(|e| {
            let failure = Failure::from(e);
            match mount.logical_of(&failure.path) {
                Some(shown) => failure.renamed(shown),
                None => failure,
            }
        }));
        for (p, (outcome, refs)) in walked.items {
            let location = Path::new(name).join(rel(&p)).to_string_lossy().into_owned();
            outcomes.push((logical.join(rel(&p)), location, outcome, refs));
        }
    } else if meta.is_file() {
        if let Some((outcome, refs)) =
            examine(local, logical, logical, meta.file_type(), false, policy)
        {
            outcomes.push((logical.clone(), name.to_string(), outcome, refs));
        }
    } else if meta.file_type().is_symlink() {
        // Rare (`nix-store --add` of a link); its target is a
        // path of its own: say so rather than audit nothing.
        let target = std::fs::read_link(local).unwrap_or_default();
        let reason = failure::Reason::StoreLink(target);
        failures.push(Failure { path: logical.clone(), reason });
    }
}
