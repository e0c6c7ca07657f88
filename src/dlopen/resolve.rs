//! A dlopen target resolved as glibc resolves `dlopen(NAME)` called from
//! the caller object (glibc's `_dl_map_object` with the caller's link map):
//!
//! 1. an object already loaded under that name (its soname) answers at
//!    once: here, the caller's NEEDED closure ([`needed_closure`]), which
//!    is loaded whenever the caller is;
//! 2. the caller's DT_RPATH, only when it has no DT_RUNPATH (the RPATH of
//!    the objects that loaded it and of the program would count too; a
//!    library audited alone has none, so they are not guessed);
//! 3. `LD_LIBRARY_PATH`: ignored, a build's result must not depend on it;
//! 4. the caller's DT_RUNPATH (the caller's, not the program's: that is
//!    the rule that makes a split Nix tree fail), `$ORIGIN` its folder;
//! 5. the loader's default folders: inside the Nix store none beyond
//!    glibc's own (a Nix glibc has no `/etc/ld.so.cache` and no `/usr/lib`),
//!    so the host never answers for a store file.
//!
//! The GPU driver's libraries (`libcuda.so.1`, `libnvidia-ml.so.1`,
//! `libnvidia-ptxjitcompiler.so.1`, ...) and glibc's own resolve as the
//! audit's NEEDED check resolves them: provided by the machine.
//!
//! Files are looked at through a [`Probe`], so that the same resolution
//! serves real trees, NARs and binary caches (the audit's resolver reads
//! store paths from their unpacked copies) and the RUNPATH fixer.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::Target;
use crate::elf::dynamic::{DynamicFacts, C_RUNTIME};
use crate::elf::machine::Target as Machine;

/// What a candidate path turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probed {
    /// A file the loader would take (an ELF file for the caller's machine).
    Usable,
    /// Nothing there, or a file the loader skips.
    Unusable,
    /// Inside this store path, which was not fetched: unknown.
    Unfetched(PathBuf),
}

/// How resolution looks at files.
pub trait Probe: Sync {
    /// What the candidate at `path` (a logical path) is, for a caller of
    /// machine `target`.
    fn probe(&self, path: &Path, target: Machine) -> Probed;
    /// The loader facts of the library at `path` (found by [`Probe::probe`]),
    /// for the NEEDED closure; `None` when unreadable.
    fn facts(&self, path: &Path) -> Option<DynamicFacts>;
    /// Whether folder `dir` surely holds no `name` (a cheap answer before
    /// [`Probe::probe`]: many targets times a long RUNPATH are millions of
    /// candidates); `false` when not known.
    fn surely_absent(&self, _dir: &Path, _name: &str) -> bool {
        false
    }
    /// The release of the library at `path` (found by [`Probe::probe`]),
    /// read from the file ([`super::release`]); `None` when it says none.
    fn release(&self, path: &Path) -> Option<super::release::Release> {
        super::release::of_path(path)
    }
}

/// A [`Probe`] of the real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct DirectProbe;

impl Probe for DirectProbe {
    fn probe(&self, path: &Path, target: Machine) -> Probed {
        let Ok(mut file) = std::fs::File::open(path) else { return Probed::Unusable };
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Probed::Unusable;
        }
        let mut head = [0u8; 20];
        match file.read_exact(&mut head) {
            Ok(()) if Machine::peek(&head) == Some(target) => Probed::Usable,
            _ => Probed::Unusable,
        }
    }

    fn facts(&self, path: &Path) -> Option<DynamicFacts> {
        facts_of(path)
    }
}

/// The loader facts of the ELF file at `path`, read through a map.
pub fn facts_of(path: &Path) -> Option<DynamicFacts> {
    let file = std::fs::File::open(path).ok()?;
    // SAFETY: read-only map of a file we only read; a file truncated
    // meanwhile can fault, as for every mapped read of the audit.
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    let elf = crate::elf::Elf::parse(&map).ok()?;
    crate::elf::dynamic::facts(&elf).ok()
}

/// The object that calls `dlopen`.
#[derive(Debug, Clone)]
pub struct Caller<'a> {
    /// Its logical real path (symbolic links resolved): `$ORIGIN` is its folder.
    pub path: &'a Path,
    /// Its loader facts (RUNPATH, RPATH, machine).
    pub facts: &'a DynamicFacts,
    /// The loader's default folders that apply to it: empty inside the Nix
    /// store (or glibc's own folder when known), the host's outside.
    pub default_dirs: &'a [PathBuf],
    /// Sonames loaded whenever it is: its NEEDED closure ([`needed_closure`]).
    pub loaded: &'a [String],
}

/// Which step of the search answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "entry", rename_all = "kebab-case")]
pub enum Via {
    /// Already loaded with the caller (its NEEDED closure).
    Loaded,
    /// The GPU driver or glibc provides it.
    System,
    /// This DT_RPATH entry.
    Rpath(String),
    /// This DT_RUNPATH entry.
    Runpath(String),
    /// The loader's default folders.
    Default,
}

/// How one target resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum Resolved {
    /// One of the asked names resolves.
    Found {
        /// The name that resolved.
        name: String,
        /// Where (none for [`Via::Loaded`] and [`Via::System`]).
        #[serde(skip_serializing_if = "Option::is_none")]
        path: Option<PathBuf>,
        /// Which step answered.
        via: Via,
    },
    /// None resolves in any of the caller's search folders ([`search_dirs`],
    /// listed once per file, not per target: 4,096 targets times a
    /// 5,000-folder RUNPATH were 1.4 GB of JSON).
    Missing {
        /// How many folders were searched.
        folders: usize,
    },
    /// Not found in what was read, but the search went through store paths
    /// that were not fetched.
    Unfetched {
        /// Those store paths.
        store_paths: Vec<PathBuf>,
    },
}

/// Whether the machine provides `name`: the GPU driver's libraries and glibc's.
pub fn provided_by_system(name: &str) -> bool {
    crate::cuda::driver::is_library(name) || C_RUNTIME.contains(&name)
}

/// Expands `$ORIGIN`/`${ORIGIN}` in one search entry.
fn expand_origin(entry: &str, origin: &Path) -> PathBuf {
    let o = origin.to_string_lossy();
    PathBuf::from(entry.replace("${ORIGIN}", &o).replace("$ORIGIN", &o))
}

/// The folders the caller searches, in order, each with the step it is;
/// a folder named twice is searched once, at its first place (as glibc's
/// `fillin_rpath` drops a folder it has already).
pub fn search_dirs(caller: &Caller<'_>) -> Vec<(PathBuf, Via)> {
    let mut seen = HashSet::new();
    let mut dirs = all_search_dirs(caller);
    dirs.retain(|(d, _)| seen.insert(d.clone()));
    dirs
}

/// [`search_dirs`], duplicates kept.
fn all_search_dirs(caller: &Caller<'_>) -> Vec<(PathBuf, Via)> {
    let origin = caller.path.parent().unwrap_or(Path::new("/"));
    let split = |s: &str| -> Vec<String> {
        s.split(':').filter(|e| !e.is_empty()).map(str::to_string).collect()
    };
    let mut dirs: Vec<(PathBuf, Via)> = Vec::new();
    match (&caller.facts.runpath, &caller.facts.rpath) {
        (Some(runpath), _) => {
            for e in split(runpath) {
                dirs.push((expand_origin(&e, origin), Via::Runpath(e)));
            }
        }
        (None, Some(rpath)) => {
            for e in split(rpath) {
                dirs.push((expand_origin(&e, origin), Via::Rpath(e)));
            }
        }
        (None, None) => {}
    }
    for d in caller.default_dirs {
        dirs.push((d.clone(), Via::Default));
    }
    dirs
}

/// Resolves one target from `caller`: the first of its asked names that
/// resolves, else how many folders were searched.
pub fn resolve(target: &Target, caller: &Caller<'_>, probe: &dyn Probe) -> Resolved {
    resolve_in(target, caller, &search_dirs(caller), probe)
}

/// [`resolve`] through the caller's [`search_dirs`], computed once for all
/// its targets.
pub fn resolve_in(
    target: &Target,
    caller: &Caller<'_>,
    dirs: &[(PathBuf, Via)],
    probe: &dyn Probe,
) -> Resolved {
    let machine = caller.facts.target();
    for name in &target.asked {
        if caller.loaded.iter().any(|l| l == name) {
            return Resolved::Found { name: name.clone(), path: None, via: Via::Loaded };
        }
        if provided_by_system(name) {
            return Resolved::Found { name: name.clone(), path: None, via: Via::System };
        }
    }
    let mut unfetched: Vec<PathBuf> = Vec::new();
    for name in &target.asked {
        for (dir, via) in dirs {
            if probe.surely_absent(dir, name) {
                continue;
            }
            let candidate = dir.join(name);
            match probe.probe(&candidate, machine) {
                Probed::Usable => {
                    return Resolved::Found {
                        name: name.clone(),
                        path: Some(candidate),
                        via: via.clone(),
                    }
                }
                Probed::Unusable => {}
                Probed::Unfetched(p) => {
                    if !unfetched.contains(&p) {
                        unfetched.push(p);
                    }
                }
            }
        }
    }
    if unfetched.is_empty() {
        Resolved::Missing { folders: dirs.len() }
    } else {
        Resolved::Unfetched { store_paths: unfetched }
    }
}

/// At most this many objects in a NEEDED closure.
pub const MAX_CLOSURE: usize = 512;

/// The sonames loaded whenever `caller` is: its NEEDED entries, theirs,
/// and so on (each object's own RUNPATH/RPATH and the default folders),
/// with each found object's SONAME; at most [`MAX_CLOSURE`] objects.
/// Names that resolve nowhere are still listed (they were asked for, and
/// the NEEDED check reports them).
pub fn needed_closure(caller: &Caller<'_>, probe: &dyn Probe) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut seen_paths: HashSet<PathBuf> = HashSet::new();
    let mut queue: Vec<(PathBuf, DynamicFacts)> =
        vec![(caller.path.to_path_buf(), caller.facts.clone())];
    while let Some((path, facts)) = queue.pop() {
        let me = Caller { path: &path, facts: &facts, ..caller.clone() };
        let dirs = search_dirs(&me);
        for n in &facts.needed {
            if names.contains(n) {
                continue;
            }
            names.push(n.clone());
            if provided_by_system(n) || seen_paths.len() >= MAX_CLOSURE {
                continue;
            }
            let found = dirs
                .iter()
                .map(|(d, _)| d.join(n))
                .find(|c| probe.probe(c, facts.target()) == Probed::Usable);
            let Some(found) = found else { continue };
            if !seen_paths.insert(found.clone()) {
                continue;
            }
            if let Some(f) = probe.facts(&found) {
                if let Some(s) = &f.soname {
                    if !names.contains(s) {
                        names.push(s.clone());
                    }
                }
                queue.push((found, f));
            }
        }
    }
    names
}
