//! Library resolution as the dynamic loader does it, for the audit's
//! `unresolved-needed` check.
//!
//! glibc's order for a NEEDED name without a slash: DT_RPATH (only when the
//! object has no DT_RUNPATH), `LD_LIBRARY_PATH` (ignored here: a build's
//! result must not depend on it), DT_RUNPATH, then the cache and default
//! folders. A Nix-built glibc has no system cache or default folders beyond
//! its own `lib` folder, so inside the store the search ends at the
//! interpreter's folder; for files outside the store (or with
//! `--system-lib-dirs`) `/etc/ld.so.conf` and the usual folders count.
//! `$ORIGIN` expands to the folder holding the object.
//!
//! Some sonames are provided by the machine, not by the package: glibc's own
//! libraries and the GPU driver's (which NixOS puts in /run/opengl-driver/lib
//! at run time). They count as resolved.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, RwLock};

use crate::elf::dynamic::DynamicFacts;
use crate::elf::machine::Target;
use crate::store::mounts::{Located, Mount, Mounts, Tree};

/// Sonames glibc provides next to its loader.
pub use crate::elf::dynamic::C_RUNTIME;

/// Whether the machine, not the package, provides this soname.
pub fn provided_by_system(name: &str) -> bool {
    C_RUNTIME.contains(&name) || crate::cuda::driver::is_library(name)
}

/// What an object tells the loader, and where it lives.
#[derive(Debug, Clone)]
pub struct SearchInput<'a> {
    /// The object's real path, symbolic links resolved (its folder is `$ORIGIN`).
    pub path: &'a Path,
    /// DT_RPATH entries.
    pub rpath: &'a [String],
    /// DT_RUNPATH entries (when present, DT_RPATH is ignored).
    pub runpath: Option<&'a [String]>,
    /// The interpreter (PT_INTERP), whose folder a Nix glibc searches last.
    pub interpreter: Option<&'a Path>,
    /// The host's default folders, when they apply (outside the store).
    pub system_dirs: &'a [PathBuf],
    /// Machine, class and byte order the candidate must match (the loader
    /// skips a file for another and goes on searching).
    pub target: Option<Target>,
}

/// How a NEEDED entry resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Found at this path.
    Found(PathBuf),
    /// Provided by the C runtime or the GPU driver.
    System,
    /// Found nowhere; the folders searched, in order.
    Missing(Vec<PathBuf>),
    /// Not found in what was read, but the search went through store paths
    /// that were not fetched (a cache audit without `--closure`): it may be
    /// there. The store paths, in search order.
    Undecided(Vec<PathBuf>),
}

/// Expands `$ORIGIN`/`${ORIGIN}` in one search entry. Other tokens (`$LIB`,
/// `$PLATFORM`) are left as they are: such an entry rarely holds libraries
/// in a Nix output, and a wrong guess would hide a real miss.
pub fn expand_origin(entry: &str, origin: &Path) -> PathBuf {
    let o = origin.to_string_lossy();
    PathBuf::from(entry.replace("${ORIGIN}", &o).replace("$ORIGIN", &o))
}

/// Resolves NEEDED names for the files of one run. A tree's files share
/// most of their search folders and names (libgcc_s, libstdc++, the
/// package's own libraries), so what each candidate path turned out to be is
/// remembered, and `/etc/ld.so.conf` is read once: per-file probing was a
/// large share of the audit's system calls on a folder of small libraries
/// (1,364 of about 5,000 for 68 files).
#[derive(Debug, Default)]
pub struct Resolver {
    system_dirs: OnceLock<Vec<PathBuf>>,
    /// What each probed candidate path is (at most [`MAX_SEEN`] remembered).
    seen: Mutex<HashMap<PathBuf, Candidate>>,
    /// What each searched folder holds, by logical path: a name it does not
    /// hold is absent without a system call or an entry in `seen` (4,096
    /// dlopen targets over a 5,000-folder RUNPATH were 20 million entries
    /// and 4.2 GB when each pair was remembered).
    listings: Mutex<Listings>,
    /// Store paths read somewhere else than where they are named (fetched
    /// from a cache, unpacked from a NAR); empty for an audit of real paths.
    mounts: Mounts,
    /// The files of mounts whose copies were removed once audited, by
    /// logical path: what resolution reads of them (see [`Resolver::remember`]).
    gone: RwLock<HashMap<PathBuf, Remembered>>,
}

/// What resolution reads of one file: its first bytes' verdict, and for an
/// ELF file its loader facts (the dlopen pass follows NEEDED through them).
#[derive(Debug, Clone)]
struct Remembered {
    kind: Candidate,
    facts: Option<DynamicFacts>,
}

/// At most this many candidate paths are remembered per run (beyond, a
/// candidate in a folder that could not be listed is probed each time).
pub const MAX_SEEN: usize = 1 << 16;

/// A folder with more entries than this is not listed (its candidates are
/// probed one by one, and remembered up to [`MAX_SEEN`]).
pub const MAX_LISTED: usize = 1 << 16;

/// At most this many names over all listings of a run.
pub const MAX_LISTED_NAMES: usize = 1 << 20;

/// The folder listings of a run (see [`Resolver::listing`]).
#[derive(Debug, Default)]
struct Listings {
    /// By the folder's logical path, as bytes (hashing a `Path` walks its
    /// components: this is looked up once per folder and target).
    by_folder: HashMap<std::ffi::OsString, std::sync::Arc<Listing>>,
    names: usize,
}

/// What a searched folder holds.
#[derive(Debug)]
enum Listing {
    /// These names (any kind of entry).
    Names(std::collections::HashSet<std::ffi::OsString>),
    /// No folder there: nothing in it.
    Absent,
    /// Inside this store path, which was not fetched.
    Unfetched(PathBuf),
    /// Not listed (unreadable, too large, or a removed copy): probe each name.
    Unknown,
}

/// What a candidate path for a NEEDED name is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Candidate {
    /// Nothing there (or it cannot be opened).
    Absent,
    /// Something that is not a regular file (what it is), not opened.
    NotRegular(&'static str),
    /// A file, not ELF.
    NotElf,
    /// An ELF file for this machine, class and byte order.
    Elf(Target),
    /// In a store path that was not fetched: unknown.
    Unfetched(PathBuf),
}

/// Whether a candidate is one the loader would take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Usable {
    Yes,
    No,
    /// Inside this store path, which was not fetched.
    Unknown(PathBuf),
}

impl Resolver {
    /// A resolver whose candidates below `mounts`' logical paths are read
    /// from their local copies.
    pub fn with_mounts(mounts: Mounts) -> Resolver {
        Resolver { mounts, ..Resolver::default() }
    }

    /// The mounts this resolver reads through.
    pub fn mounts(&self) -> &Mounts {
        &self.mounts
    }

    /// Reads, from `mount`'s copy, everything a later lookup through it
    /// needs (its [`Tree`]; each file's kind and loader facts, as
    /// [`probe`] and [`crate::dlopen::resolve::facts_of`] read them), and
    /// points the mounts at that: the copy can then be removed and every
    /// resolution through it answers as before. Costs a walk of the copy
    /// and one parse per ELF file.
    pub fn remember(&self, mount: &Mount) -> std::io::Result<()> {
        let tree = Tree::read(&mount.local)?;
        let mut known = Vec::new();
        for rel in tree.files() {
            let (local, logical) = match rel.as_os_str().is_empty() {
                true => (mount.local.clone(), mount.logical.clone()),
                false => (mount.local.join(rel), mount.logical.join(rel)),
            };
            let kind = probe(&local);
            let facts = match kind {
                Candidate::Elf(_) => crate::dlopen::resolve::facts_of(&local),
                _ => None,
            };
            known.push((logical, Remembered { kind, facts }));
        }
        self.gone.write().unwrap_or_else(|e| e.into_inner()).extend(known);
        self.mounts.dropped(&mount.logical, tree);
        Ok(())
    }

    /// The loader facts of a file of a removed copy, by logical path.
    pub(crate) fn remembered_facts(&self, logical: &Path) -> Option<DynamicFacts> {
        let gone = self.gone.read().unwrap_or_else(|e| e.into_inner());
        gone.get(logical).and_then(|r| r.facts.clone())
    }

    /// Whether the file at `path` (a logical path) is in the Nix store
    /// `store_dir`: inside a mount that says so, or below `store_dir`.
    pub fn in_store(&self, path: &Path, store_dir: &Path) -> bool {
        match self.mounts.mount_of(path) {
            Some(m) => m.in_store,
            None => path.starts_with(store_dir),
        }
    }

    /// The host's default library folders ([`system_lib_dirs`]), read once.
    pub fn system_lib_dirs(&self) -> &[PathBuf] {
        self.system_dirs.get_or_init(system_lib_dirs)
    }

    /// Resolves one NEEDED name.
    pub fn resolve(&self, name: &str, input: &SearchInput<'_>) -> Resolution {
        if provided_by_system(name) {
            return Resolution::System;
        }
        if name.contains('/') {
            let p = PathBuf::from(name);
            return match self.usable(&p, input.target) {
                Usable::Yes => Resolution::Found(p),
                Usable::No => Resolution::Missing(vec![]),
                Usable::Unknown(store_path) => Resolution::Undecided(vec![store_path]),
            };
        }
        let origin = input.path.parent().unwrap_or(Path::new("/")).to_path_buf();
        let mut dirs: Vec<PathBuf> = Vec::new();
        let entries = match input.runpath {
            Some(runpath) => runpath,
            None => input.rpath,
        };
        dirs.extend(entries.iter().filter(|e| !e.is_empty()).map(|e| expand_origin(e, &origin)));
        if let Some(interp) = input.interpreter.and_then(Path::parent) {
            dirs.push(interp.to_path_buf());
        }
        dirs.extend(input.system_dirs.iter().cloned());
        let mut unknown: Vec<PathBuf> = Vec::new();
        for dir in &dirs {
            let candidate = dir.join(name);
            match self.usable(&candidate, input.target) {
                Usable::Yes => return Resolution::Found(candidate),
                Usable::No => {}
                Usable::Unknown(store_path) => {
                    if !unknown.contains(&store_path) {
                        unknown.push(store_path);
                    }
                }
            }
        }
        if unknown.is_empty() {
            Resolution::Missing(dirs)
        } else {
            Resolution::Undecided(unknown)
        }
    }

    /// The candidates of a search that turned out not to be regular files
    /// (a device, a FIFO: never opened), with what each is, for the
    /// finding of a NEEDED name found nowhere.
    pub fn not_files(&self, dirs: &[PathBuf], name: &str) -> Vec<(PathBuf, &'static str)> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        dirs.iter()
            .map(|d| d.join(name))
            .filter_map(|p| match seen.get(&p) {
                Some(Candidate::NotRegular(kind)) => Some((p, *kind)),
                _ => None,
            })
            .collect()
    }

    /// Whether `path` is a file the loader would accept: it exists and, when
    /// a class and machine are given, is an ELF of that class and machine
    /// (the loader skips others and goes on searching).
    pub(crate) fn usable(&self, path: &Path, target: Option<Target>) -> Usable {
        let folder = path.parent().filter(|f| !f.as_os_str().is_empty());
        if let (Some(folder), Some(name)) = (folder, path.file_name()) {
            match &*self.listing(folder) {
                Listing::Names(names) if !names.contains(name) => return Usable::No,
                Listing::Absent => return Usable::No,
                Listing::Unfetched(p) => return Usable::Unknown(p.clone()),
                _ => {}
            }
        }
        let known = self.seen.lock().unwrap_or_else(|e| e.into_inner()).get(path).cloned();
        let kind = known.unwrap_or_else(|| {
            // Without mounts the kernel resolves the path (no extra calls).
            let kind = if self.mounts.is_empty() {
                probe(path)
            } else {
                match self.mounts.locate(path) {
                    Located::Local(local) => probe(&local),
                    Located::Absent => Candidate::Absent,
                    Located::Unfetched(store_path) => Candidate::Unfetched(store_path),
                    Located::Gone(logical) => {
                        let gone = self.gone.read().unwrap_or_else(|e| e.into_inner());
                        gone.get(&logical).map_or(Candidate::Absent, |r| r.kind.clone())
                    }
                }
            };
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.len() < MAX_SEEN {
                seen.insert(path.to_path_buf(), kind.clone());
            }
            kind
        });
        let yes = |b: bool| if b { Usable::Yes } else { Usable::No };
        match (kind, target) {
            (Candidate::Absent | Candidate::NotRegular(_), _) => Usable::No,
            (Candidate::Unfetched(p), _) => Usable::Unknown(p),
            (_, None) => Usable::Yes,
            (Candidate::NotElf, Some(_)) => Usable::No,
            (Candidate::Elf(found), Some(want)) => yes(found == want),
        }
    }
}

impl Resolver {
    /// Whether the folder `folder` (a logical path) surely has no `name`:
    /// by its listing, without a system call.
    pub(crate) fn surely_absent(&self, folder: &Path, name: &std::ffi::OsStr) -> bool {
        if folder.as_os_str().is_empty() {
            return false;
        }
        match &*self.listing(folder) {
            Listing::Names(names) => !names.contains(name),
            Listing::Absent => true,
            _ => false,
        }
    }

    /// What the folder `folder` (a logical path) holds, listed once per run:
    /// its names when it can be listed, has at most [`MAX_LISTED`] and the
    /// run's listings stay within [`MAX_LISTED_NAMES`]. A name it does not
    /// hold cannot be opened there, so the answer is the kernel's.
    fn listing(&self, folder: &Path) -> std::sync::Arc<Listing> {
        let lock = || self.listings.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(known) = lock().by_folder.get(folder.as_os_str()) {
            return known.clone();
        }
        let local = match self.mounts.is_empty() {
            true => Located::Local(folder.to_path_buf()),
            false => self.mounts.locate(folder),
        };
        let listing = match local {
            Located::Local(local) => list(&local),
            Located::Absent => Listing::Absent,
            Located::Unfetched(store_path) => Listing::Unfetched(store_path),
            Located::Gone(_) => Listing::Unknown,
        };
        let mut all = lock();
        let listing = match listing {
            Listing::Names(n) if all.names + n.len() > MAX_LISTED_NAMES => Listing::Unknown,
            other => other,
        };
        if let Listing::Names(n) = &listing {
            all.names += n.len();
        }
        let listing = std::sync::Arc::new(listing);
        all.by_folder.insert(folder.as_os_str().to_os_string(), listing.clone());
        listing
    }
}

/// The names in the folder at `local`.
fn list(local: &Path) -> Listing {
    let entries = match std::fs::read_dir(local) {
        Ok(entries) => entries,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
            return Listing::Absent
        }
        Err(_) => return Listing::Unknown,
    };
    let mut names = std::collections::HashSet::new();
    for entry in entries {
        match entry {
            Ok(e) if names.len() < MAX_LISTED => {
                names.insert(e.file_name());
            }
            _ => return Listing::Unknown,
        }
    }
    Listing::Names(names)
}

/// Looks at a candidate file (its first 20 bytes). Only a regular file is
/// opened: the path is a RUNPATH entry and a NEEDED name of the file
/// audited, which may name `/dev/watchdog` (issue 29).
fn probe(path: &Path) -> Candidate {
    use crate::devicecode::host;
    let Ok(meta) = std::fs::metadata(path) else { return Candidate::Absent };
    if let Some(kind) = host::not_regular(&meta) {
        return Candidate::NotRegular(kind);
    }
    let Ok(mut file) = host::open_regular(path) else {
        return Candidate::Absent;
    };
    let mut head = [0u8; 20];
    if file.read_exact(&mut head).is_err() || &head[..4] != b"\x7fELF" {
        return Candidate::NotElf;
    }
    Target::peek(&head).map_or(Candidate::NotElf, Candidate::Elf)
}

/// The host's default library folders: `/etc/ld.so.conf` (with `include`
/// globs of plain `*.conf` form), then the folders this host's glibc was
/// built to search ([`builtin_dirs`]). Only folders the loader searches:
/// Debian's x86_64 glibc searches `/lib/x86_64-linux-gnu`,
/// `/usr/lib/x86_64-linux-gnu`, `/lib`, `/usr/lib` (LD_DEBUG shows it), never
/// `/lib64`, so a list naming `/lib64` was untrue there.
pub fn system_lib_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    read_ld_so_conf(Path::new("/etc/ld.so.conf"), &mut dirs, 0);
    for d in builtin_dirs(Path::new("/")) {
        if !dirs.contains(&d) {
            dirs.push(d);
        }
    }
    dirs
}

/// glibc's built-in folders on the system under `root`, told by where its
/// `libc.so.6` lives: a multiarch glibc (Debian, Ubuntu) searches
/// `lib/TRIPLE`, `usr/lib/TRIPLE`, `lib`, `usr/lib`; a `lib64` one (Fedora,
/// SUSE, Arch's lib64 link aside) `lib64`, `usr/lib64`; else `lib`, `usr/lib`.
pub fn builtin_dirs(root: &Path) -> Vec<PathBuf> {
    let triple = match std::env::consts::ARCH {
        "x86_64" => "x86_64-linux-gnu",
        "aarch64" => "aarch64-linux-gnu",
        "powerpc64" => "powerpc64le-linux-gnu",
        "s390x" => "s390x-linux-gnu",
        "riscv64" => "riscv64-linux-gnu",
        other => other,
    };
    let has_libc = |d: &str| root.join(d).join("libc.so.6").exists();
    let names: &[String] = &if has_libc(&format!("lib/{triple}"))
        || has_libc(&format!("usr/lib/{triple}"))
    {
        vec![format!("lib/{triple}"), format!("usr/lib/{triple}"), "lib".into(), "usr/lib".into()]
    } else if has_libc("lib64") || has_libc("usr/lib64") {
        vec!["lib64".into(), "usr/lib64".into()]
    } else {
        vec!["lib".into(), "usr/lib".into()]
    };
    names.iter().map(|n| root.join(n)).collect()
}

fn read_ld_so_conf(path: &Path, dirs: &mut Vec<PathBuf>, depth: usize) {
    if depth > 8 {
        return;
    }
    let Ok(text) = std::fs::read_to_string(path) else { return };
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(pattern) = line.strip_prefix("include").map(str::trim) {
            // Only the `DIR/*.conf` form, which is what distributions use.
            if let Some(dir) = pattern.strip_suffix("/*.conf") {
                if let Ok(rd) = std::fs::read_dir(dir) {
                    let mut files: Vec<PathBuf> = rd
                        .filter_map(|e| e.ok().map(|e| e.path()))
                        .filter(|p| p.extension().is_some_and(|x| x == "conf"))
                        .collect();
                    files.sort();
                    for f in files {
                        read_ld_so_conf(&f, dirs, depth + 1);
                    }
                }
            }
        } else if line.starts_with('/') {
            let d = PathBuf::from(line);
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
}

/// The library folders of a sysroot for a machine, in the loader's default
/// order: Debian's multiarch folders, then `lib64`/`lib` and their `usr`
/// twins (a cross toolchain's sysroot, e.g. `/usr/aarch64-linux-gnu`, has
/// `lib` alone).
pub fn sysroot_lib_dirs(root: &Path, target: crate::elf::machine::Target) -> Vec<PathBuf> {
    let triple = match (target.machine, target.is64) {
        (62, true) => Some("x86_64-linux-gnu"),
        (3, false) => Some("i386-linux-gnu"),
        (183, true) => Some("aarch64-linux-gnu"),
        (40, false) => Some("arm-linux-gnueabihf"),
        (21, true) => Some("powerpc64le-linux-gnu"),
        (243, true) => Some("riscv64-linux-gnu"),
        (22, true) => Some("s390x-linux-gnu"),
        _ => None,
    };
    let mut dirs = Vec::new();
    if let Some(t) = triple {
        dirs.push(root.join("lib").join(t));
        dirs.push(root.join("usr/lib").join(t));
    }
    for d in ["lib64", "lib", "usr/lib64", "usr/lib"] {
        dirs.push(root.join(d));
    }
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runpath_hides_rpath_and_origin_expands() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        std::fs::create_dir_all(dir.path().join("lib")).unwrap();
        std::fs::create_dir_all(dir.path().join("other")).unwrap();
        std::fs::write(dir.path().join("lib/libx.so.1"), b"x").unwrap();
        std::fs::write(dir.path().join("other/liby.so.1"), b"y").unwrap();
        let exe = dir.path().join("bin/prog");
        std::fs::write(&exe, b"").unwrap();
        let rpath = vec![dir.path().join("other").to_string_lossy().into_owned()];
        let runpath = vec!["$ORIGIN/../lib".to_string()];
        let input = SearchInput {
            path: &exe,
            rpath: &rpath,
            runpath: Some(&runpath),
            interpreter: None,
            system_dirs: &[],
            target: None,
        };
        assert!(matches!(Resolver::default().resolve("libx.so.1", &input), Resolution::Found(_)));
        // DT_RPATH is ignored when DT_RUNPATH exists.
        assert!(matches!(Resolver::default().resolve("liby.so.1", &input), Resolution::Missing(_)));
        let input = SearchInput { runpath: None, ..input };
        assert!(matches!(Resolver::default().resolve("liby.so.1", &input), Resolution::Found(_)));
        assert_eq!(Resolver::default().resolve("libcuda.so.1", &input), Resolution::System);
        assert_eq!(Resolver::default().resolve("libc.so.6", &input), Resolution::System);
    }

    #[test]
    fn wrong_machine_candidates_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("libz.so"), b"not an elf at all, but long enough").unwrap();
        let exe = dir.path().join("prog");
        let runpath = vec![dir.path().to_string_lossy().into_owned()];
        let input = SearchInput {
            path: &exe,
            rpath: &[],
            runpath: Some(&runpath),
            interpreter: None,
            system_dirs: &[],
            target: Some(Target { machine: 62, is64: true, little: true }),
        };
        assert!(matches!(Resolver::default().resolve("libz.so", &input), Resolution::Missing(_)));
    }
}
