//! The audit's dlopen pass (docs/dlopen.md): the libraries a host ELF file
//! loads with `dlopen` ([`crate::dlopen::scan`], run beside the loader facts
//! on the file's one parse), each resolved from the file as glibc would
//! ([`crate::dlopen::resolve`]) through the run's [`Resolver`], so that
//! trees, NARs and caches resolve alike. Off with `--no-dlopen`.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::linkage::{sysroot_lib_dirs, Resolver};
use super::Policy;
use crate::dlopen::release::Release;
use crate::dlopen::{self, Caller, Import, Origin, Probe, Probed, Problem, Resolved, Scan, Target};
use crate::elf::dynamic::DynamicFacts;
use crate::elf::machine::Target as Machine;
use crate::store::mounts::Located;

/// What the audit reports of a file's dlopen targets (in the JSON facts).
#[derive(Debug, Clone, Serialize)]
pub struct Loads {
    /// The loader entry point the file imports.
    pub imports: Import,
    /// Each target and how it resolved.
    pub targets: Vec<Load>,
    /// The folders the file's dlopen searches, in order (`$ORIGIN`
    /// expanded, each once): what a `missing` target was searched in,
    /// listed once per file.
    pub searched: Vec<PathBuf>,
    /// printf-style names no table row expands (computed at run time).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub patterns: Vec<(String, Origin)>,
    /// What the scan could not read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
    /// The caller's SONAME: a fix never tells a library to add its own
    /// package (the JSON facts have it in the loader facts already).
    #[serde(skip)]
    pub caller: Option<String>,
}

/// One target and its resolution.
#[derive(Debug, Clone, Serialize)]
pub struct Load {
    /// The target.
    #[serde(flatten)]
    pub target: Target,
    /// How it resolved.
    pub resolved: Resolved,
    /// For a target that must be of the caller's own release and was found
    /// in a folder: the two releases as read from the files.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub release: Option<ReleaseCheck>,
}

/// A target of the caller's own release, compared (docs/dlopen.md,
/// "Libraries of the caller's own release").
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum ReleaseCheck {
    /// Both releases read, and equal.
    Same {
        /// The release.
        release: Release,
    },
    /// Both read, and different: the loader finds another release.
    Other {
        /// The caller's.
        caller: Release,
        /// The file found.
        target: Release,
    },
    /// One of them cannot be read from its file: not checked.
    Unknown {
        /// The caller's, when read.
        #[serde(skip_serializing_if = "Option::is_none")]
        caller: Option<Release>,
        /// The found file's, when read.
        #[serde(skip_serializing_if = "Option::is_none")]
        target: Option<Release>,
    },
}

/// Compares the caller's release with the one of the file found.
fn check_release(caller: Option<&Release>, target: Option<Release>) -> ReleaseCheck {
    match (caller, target) {
        (Some(c), Some(t)) if c.same(&t) => ReleaseCheck::Same { release: t },
        (Some(c), Some(t)) => ReleaseCheck::Other { caller: c.clone(), target: t },
        (c, t) => ReleaseCheck::Unknown { caller: c.cloned(), target: t },
    }
}

impl Probe for Resolver {
    fn probe(&self, path: &Path, target: Machine) -> Probed {
        match self.usable(path, Some(target)) {
            super::linkage::Usable::Yes => Probed::Usable,
            super::linkage::Usable::No => Probed::Unusable,
            super::linkage::Usable::Unknown(p) => Probed::Unfetched(p),
        }
    }

    fn surely_absent(&self, dir: &Path, name: &str) -> bool {
        Resolver::surely_absent(self, dir, name.as_ref())
    }

    fn release(&self, path: &Path) -> Option<Release> {
        if self.mounts().is_empty() {
            return dlopen::release::of_path(path);
        }
        // A removed copy's release was not remembered: unknown, not assumed.
        match self.mounts().locate(path) {
            Located::Local(local) => dlopen::release::of_path(&local),
            _ => None,
        }
    }

    fn facts(&self, path: &Path) -> Option<DynamicFacts> {
        let local = if self.mounts().is_empty() {
            path.to_path_buf()
        } else {
            match self.mounts().locate(path) {
                Located::Local(local) => local,
                Located::Gone(logical) => return self.remembered_facts(&logical),
                _ => return None,
            }
        };
        dlopen::resolve::facts_of(&local)
    }
}

/// Scans a parsed host file (see [`crate::dlopen::scan`]); `local` names
/// the bytes' file, whose name may carry the full version. One target per
/// library, none for the file's own names ([`crate::dlopen::fold`]).
pub fn scan(
    elf: &crate::elf::Elf<'_>,
    loader: &DynamicFacts,
    local: &Path,
    release: &(dyn Fn(&[u8]) + Sync),
) -> Scan {
    if !loader.dynamic {
        return Scan::default();
    }
    let name = local.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut scan =
        dlopen::scan(elf, loader.soname.as_deref(), dlopen::version_of_file_name(&name), release);
    let own: Vec<&str> = loader.soname.as_deref().into_iter().chain([name.as_str()]).collect();
    dlopen::fold::fold(&mut scan, &own);
    if scan.wants_release() {
        scan.release = dlopen::release::of_elf(elf, loader.soname.as_deref(), &name);
    }
    scan
}

/// The loader's default folders for `path`: the interpreter's folder (a
/// Nix glibc searches its own), then the machine's folders where they
/// apply, as for NEEDED entries (see [`super::checks::needed`]).
fn default_dirs(path: &Path, d: &DynamicFacts, policy: &Policy) -> Vec<PathBuf> {
    let target = d.target();
    let foreign = !target.is_build_machine();
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(i) = d.interpreter.as_deref().map(Path::new) {
        let interp = if foreign && !i.starts_with(&policy.store_dir) {
            policy.sysroot.as_deref().map(|r| r.join(i.strip_prefix("/").unwrap_or(i)))
        } else {
            Some(i.to_path_buf())
        };
        dirs.extend(interp.and_then(|i| i.parent().map(Path::to_path_buf)));
    }
    if foreign {
        if let Some(root) = &policy.sysroot {
            dirs.extend(sysroot_lib_dirs(root, target));
        }
    } else if policy.system_lib_dirs || !policy.resolver.in_store(path, &policy.store_dir) {
        dirs.extend(policy.resolver.system_lib_dirs().iter().cloned());
    }
    dirs
}

/// Resolves every target of `scan` from the file at `path` (its logical
/// real path). The NEEDED closure is read only when a target is not found
/// by the search itself: most are, and the closure costs a parse per
/// library.
pub fn resolve(path: &Path, d: &DynamicFacts, scan: Scan, policy: &Policy) -> Option<Loads> {
    let imports = scan.imports?;
    let dirs = default_dirs(path, d, policy);
    let probe: &Resolver = &policy.resolver;
    let mut caller = Caller { path, facts: d, default_dirs: &dirs, loaded: &[] };
    let search = dlopen::search_dirs(&caller);
    let mut resolved: Vec<Resolved> =
        scan.targets.iter().map(|t| dlopen::resolve_in(t, &caller, &search, probe)).collect();
    if resolved.iter().any(|r| !matches!(r, Resolved::Found { .. })) {
        let loaded = dlopen::needed_closure(&caller, probe);
        caller.loaded = &loaded;
        for (r, t) in resolved.iter_mut().zip(&scan.targets) {
            if !matches!(r, Resolved::Found { .. }) {
                *r = dlopen::resolve_in(t, &caller, &search, probe);
            }
        }
    }
    let searched = search.into_iter().map(|(d, _)| d).collect();
    let caller_release = scan.release.as_ref();
    let targets = scan
        .targets
        .into_iter()
        .zip(resolved)
        .map(|(target, resolved)| {
            let release = match &resolved {
                Resolved::Found { path: Some(at), .. } if target.same_release => {
                    Some(check_release(caller_release, probe.release(at)))
                }
                _ => None,
            };
            Load { target, resolved, release }
        })
        .collect();
    let caller = d.soname.clone();
    Some(Loads {
        imports,
        targets,
        searched,
        patterns: scan.patterns,
        problems: scan.problems,
        caller,
    })
}
