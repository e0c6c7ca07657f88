//! Turns the audit's arguments into roots: paths of this machine as they
//! are, NAR files (`x.nar`, `.nar.xz`, `.nar.zst`, `.nar.bz2`) unpacked, and
//! with `--substituter` store paths fetched from a binary cache (with
//! `--closure`, everything they refer to). Unpacked store paths become
//! [`Mount`]s, so the audit reports and decides under their store names
//! (see [`crate::store::mounts`]).
//!
//! Only object files reach the disk (the keep-filter is
//! [`super::interesting`] on a file's first bytes): documentation, headers
//! and Python sources stream past. They go to one private temporary folder
//! (mode 0700, removed when [`Sources`] is dropped); nothing else is kept,
//! and memory stays what the NAR reader and the decompressors hold.
//!
//! A cache's store paths are only looked up here (their narinfo files,
//! the closure): their NARs are fetched by [`Sources::audit`], in an order
//! that lets each path's files be removed once audited
//! ([`super::closure`]).

use std::path::{Path, PathBuf};

use super::failure::Failure;
use super::Root;
use crate::audit::finding::strip_store_hash;
use crate::store::budget::Limits;
use crate::store::cache::{self, Cache, CacheError};
use crate::store::mounts::{Mount, Mounts};
use crate::store::narinfo::{NarInfoError, PublicKey};
use crate::store::scratch::Scratch;

/// `--substituter` and what goes with it.
#[derive(Debug, Clone, Default)]
pub struct CacheArgs {
    /// The cache's URL (`file://`, `http://`, `https://`).
    pub url: String,
    /// `--trusted-public-key NAME:KEY`, each; with any, narinfo files must be signed by one.
    pub keys: Vec<String>,
    /// `--closure`: follow References.
    pub closure: bool,
    /// Transfers at a time.
    pub jobs: usize,
    /// Unpack every file, not only object files (`--why`: the files that
    /// hold each reference are named).
    pub keep_all: bool,
}

/// Why the arguments cannot be turned into roots at all (a single store
/// path failing is a [`Root::Failed`], not this).
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// A `--trusted-public-key` that does not parse.
    #[error("--trusted-public-key: {0}")]
    Key(#[from] NarInfoError),
    /// The cache cannot be opened (bad URL, unreadable `nix-cache-info`).
    #[error("--substituter: {0}")]
    Cache(#[from] CacheError),
    /// The private temporary folder cannot be made.
    #[error("cannot make a temporary folder: {0}")]
    TempDir(String),
}

pub use super::closure::Progress;

/// The roots to audit and what they need.
#[derive(Debug)]
pub struct Sources {
    /// In argument order (store paths sorted, as fetched).
    pub roots: Vec<Root>,
    /// The mounts the policy's resolver must read through.
    pub mounts: Mounts,
    /// With `--substituter`: the cache's store folder, which the audit uses
    /// as the store (the paths are named in it).
    pub store_dir: Option<PathBuf>,
    /// With `--substituter`: the narinfo of each store path to audit.
    pub infos: Vec<crate::store::narinfo::NarInfo>,
    /// The temporary folder of the unpacked copies (and their disk budget).
    scratch: Option<Scratch>,
    /// With `--substituter`: the cache the NARs are still to come from.
    fetch: Option<super::closure::Fetch>,
}

impl Sources {
    /// Audits the roots (`progress` after each store path fetched); a
    /// cache's NARs are fetched on the way, each store path's files removed
    /// once nothing needs them ([`super::closure`]). The unpacked copies
    /// are gone when this returns.
    pub fn audit(
        self,
        policy: &super::Policy,
        progress: &(dyn Fn(Progress) + Sync),
    ) -> super::Audit {
        let Sources { mut roots, scratch, fetch, infos, .. } = self;
        match (fetch, &scratch) {
            (Some(fetch), Some(scratch)) => {
                super::closure::audit(&mut roots, &infos, &fetch, scratch, policy, progress)
            }
            _ => super::audit_roots(&roots, policy),
        }
    }
}

/// Whether `path` is an argument to unpack: a regular file (links
/// followed) named like a NAR.
pub fn is_nar_file(path: &Path) -> bool {
    cache::nar_file_compression(path).is_some()
        && std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

fn temp_dir(limits: &Limits) -> Result<Scratch, SourceError> {
    // Removed on SIGINT, SIGTERM and SIGHUP too; stale ones of dead runs are swept.
    Scratch::create(limits.max_unpack_bytes)
        .map_err(|e| SourceError::TempDir(crate::error::describe_io(&e)))
}

/// Prepares the arguments within `limits`. Without a cache, NAR files are
/// unpacked and other paths are kept as they are; with one, every argument
/// is a store path of the cache, looked up (with `--closure`, its closure
/// too) and fetched later by [`Sources::audit`].
pub fn prepare(
    paths: &[PathBuf],
    cache: Option<&CacheArgs>,
    store_dir: &Path,
    limits: &Limits,
) -> Result<Sources, SourceError> {
    match cache {
        Some(args) => from_cache(paths, args, limits),
        None => from_files(paths, store_dir, limits),
    }
}

/// NAR files unpacked (logical name `FILE!`), other paths as given; the
/// store paths a NAR refers to (in `store_dir`) count as not read.
fn from_files(
    paths: &[PathBuf],
    store_dir: &Path,
    limits: &Limits,
) -> Result<Sources, SourceError> {
    let mut tmp = None;
    let mut roots = Vec::new();
    let mut mounts = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        if !is_nar_file(path) {
            roots.push(Root::Path(path.clone()));
            continue;
        }
        let tmp = match &mut tmp {
            Some(tmp) => tmp,
            None => tmp.insert(temp_dir(limits)?),
        };
        let local = tmp.path().join(i.to_string());
        let stall = limits.stall_timeout;
        match cache::unpack_file(path, &local, &super::interesting, tmp.disk(), stall) {
            Ok(unpacked) => {
                tmp.hold(&local, unpacked.stored);
                let mut logical = path.as_os_str().to_os_string();
                logical.push("!");
                let mount = Mount { logical: logical.into(), local, in_store: true };
                mounts.push(mount.clone());
                roots.push(Root::Mounted { mount, name: nar_root_name(path) });
            }
            Err(e) => roots.push(Root::Failed(Failure::of_fetch(&e))),
        }
    }
    // NAR files only: nothing of this machine is read for them (a hostile
    // NAR cannot point the resolver at host files).
    let only_nars = roots.iter().all(|r| !matches!(r, Root::Path(_)));
    let mounts = Mounts::of_files(mounts, store_dir.to_path_buf()).sealed(only_nars);
    Ok(Sources { roots, mounts, store_dir: None, infos: Vec::new(), scratch: tmp, fetch: None })
}

/// A NAR file's name in baseline locations: its file name without the
/// `.nar*` extension and without a store hash, so that `<hash>-foo.nar.xz`
/// is located as the realised `/nix/store/<hash>-foo` is.
pub fn nar_root_name(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let stem = [".nar.xz", ".nar.zst", ".nar.bz2", ".nar"]
        .iter()
        .find_map(|ext| name.strip_suffix(ext))
        .unwrap_or(&name);
    strip_store_hash(stem).to_string()
}

/// Store paths of the cache, looked up: each narinfo read and checked, and
/// with `--closure` their references, transitively (within `--max-paths`).
/// Each path with a narinfo is a mount not fetched yet.
fn from_cache(
    paths: &[PathBuf],
    args: &CacheArgs,
    limits: &Limits,
) -> Result<Sources, SourceError> {
    let keys =
        args.keys.iter().map(|k| PublicKey::parse(k)).collect::<Result<Vec<PublicKey>, _>>()?;
    let cache = Cache::open(&args.url, keys, *limits)?;
    let tmp = temp_dir(limits)?;
    let store_dir = PathBuf::from(cache.store_dir());
    let wanted: Vec<String> = paths.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let looked_up = cache.closure(&wanted, args.closure, args.jobs.max(1));
    let mut roots = Vec::new();
    let mut mounts = Vec::new();
    let mut infos = Vec::new();
    for (path, result) in looked_up {
        match result {
            Ok(info) => {
                infos.push(info);
                let base = cache.base_name(&path).unwrap_or_default().to_string();
                let mount = Mount {
                    logical: PathBuf::from(&path),
                    local: tmp.path().join(&base),
                    in_store: true,
                };
                mounts.push(mount.clone());
                roots.push(Root::Mounted { mount, name: strip_store_hash(&base).to_string() });
            }
            Err(e) => roots.push(Root::Failed(Failure::of_fetch(&e))),
        }
    }
    let fetch = super::closure::Fetch { cache, keep_all: args.keep_all, jobs: args.jobs.max(1) };
    Ok(Sources {
        roots,
        mounts: Mounts::of_cache(mounts, store_dir.clone()).pending(),
        store_dir: Some(store_dir),
        infos,
        scratch: Some(tmp),
        fetch: Some(fetch),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::failure::Reason;

    #[test]
    fn fetch_failures_are_split_into_path_and_reason() {
        let e = CacheError::NotFound { path: "/nix/store/x-a".into(), url: "x.narinfo".into() };
        let f = Failure::of_fetch(&e);
        assert_eq!(f.path, PathBuf::from("/nix/store/x-a"));
        assert_eq!(f.reason, Reason::Fetch("x.narinfo not found in the cache".into()));
        assert_eq!(f.to_string(), e.to_string());
    }

    #[test]
    fn nar_files_are_located_like_their_store_paths() {
        let cases = [
            ("/tmp/0123456789abcdfghijklmnpqrsvwxyz-foo-1.0.nar.xz", "foo-1.0"),
            ("x.nar", "x"),
            ("dir/x.nar.zst", "x"),
            ("odd", "odd"),
        ];
        for (path, want) in cases {
            assert_eq!(nar_root_name(Path::new(path)), want, "{path}");
        }
    }
}
