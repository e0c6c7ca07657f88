//! A cache audit that holds on disk only the store paths it is auditing.
//!
//! Resolving a file's NEEDED, RUNPATH and dlopen targets reads the store
//! paths it refers to, and through their libraries' own NEEDED (the dlopen
//! pass's NEEDED closure) the paths those refer to: a store path's audit
//! needs its whole closure. So the NARs are fetched references first (a
//! store path once every reference of its narinfo is audited or failed),
//! and once a path is audited its files are removed and its bytes given
//! back to the disk budget; what later lookups need of them (folders,
//! links, each file's kind and loader facts) is kept in memory by the
//! resolver ([`Resolver::remember`]). Each step fetches the ready paths
//! whose `NarSize` (what their objects can take at most) fits in what is
//! left of `--max-unpack-bytes`, at least one and at most `jobs`, in
//! parallel. The result is the audit of all paths at once: the files are
//! examined root by root and concluded in the roots' order.
//!
//! Under Ctrl-C in a coverage run ([`interrupt::requested`]) the transfers
//! under way stop, the paths fetched are still audited, and every path not
//! fetched is a [`Failure::interrupted`].
//!
//! Nix refuses references that form a cycle between store paths; a cache
//! that declares one gets its remaining paths fetched and audited together
//! (held together, within the budget).

use std::collections::HashMap;
use std::path::Path;

use rayon::prelude::*;

use super::failure::Failure;
use super::linkage::Resolver;
use super::roots::{conclude, examine_root, Walked};
use super::{Audit, Policy, Root};
use crate::fs::interrupt;
use crate::store::cache::{Cache, CacheError};
use crate::store::narinfo::NarInfo;
use crate::store::scratch::Scratch;

/// How far fetching has come, for a progress line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Store paths done (fetched or failed).
    pub paths: usize,
    /// Bytes of NAR read (uncompressed).
    pub bytes: u64,
}

/// Where the NARs of a cache audit come from.
pub struct Fetch {
    /// The cache.
    pub cache: Cache,
    /// Unpack every file (`--why`), not only object files.
    pub keep_all: bool,
    /// Transfers at a time.
    pub jobs: usize,
}

impl std::fmt::Debug for Fetch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetch").field("store", &self.cache.store_dir()).finish_non_exhaustive()
    }
}

/// One store path to fetch and audit: its root's index, narinfo and the
/// indices of the roots it refers to.
struct Node<'a> {
    root: usize,
    info: &'a NarInfo,
    refs: Vec<usize>,
}

/// Audits `roots` (a cache's store paths, mounted but not fetched yet, and
/// the failures of their lookup), fetching each NAR into `scratch` when its
/// references are done and removing its files once audited. A NAR that
/// cannot be read turns its root into a failure.
pub(super) fn audit(
    roots: &mut [Root],
    infos: &[NarInfo],
    fetch: &Fetch,
    scratch: &Scratch,
    policy: &Policy,
    progress: &(dyn Fn(Progress) + Sync),
) -> Audit {
    let nodes = graph(roots, infos, fetch.cache.store_dir());
    let mut walked: Vec<Option<Walked>> = roots.iter().map(|_| None).collect();
    let mut done: Vec<bool> = roots.iter().map(|r| !matches!(r, Root::Mounted { .. })).collect();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(fetch.jobs.max(1)).build().ok();
    let mut seen = Progress::default();
    loop {
        let left: Vec<&Node> = nodes.iter().filter(|n| !done[n.root]).collect();
        if left.is_empty() {
            break;
        }
        // Ctrl-C in a coverage run: what is left is named, not fetched.
        if interrupt::requested() {
            for node in left {
                if let Root::Mounted { mount, .. } = &roots[node.root] {
                    policy.resolver.mounts().failed(&mount.logical);
                    roots[node.root] = Root::Failed(Failure::interrupted(&mount.logical));
                }
                done[node.root] = true;
            }
            break;
        }
        let ready: Vec<&Node> =
            left.iter().copied().filter(|n| n.refs.iter().all(|&r| done[r])).collect();
        let batch = match ready.is_empty() {
            // A reference cycle: the rest is held together.
            true => left,
            false => admit(&ready, scratch, fetch.jobs),
        };
        let fetched = fetch_batch(&batch, roots, fetch, scratch, pool.as_ref());
        for (node, result) in batch.iter().zip(fetched) {
            let Root::Mounted { mount, .. } = &roots[node.root] else { continue };
            match result {
                Ok(stored) => {
                    scratch.hold(&mount.local, stored);
                    policy.resolver.mounts().fetched(&mount.logical);
                    seen.bytes += node.info.nar_size;
                }
                Err(e) => {
                    policy.resolver.mounts().failed(&mount.logical);
                    // A transfer Ctrl-C cut is not the cache's failure.
                    roots[node.root] = Root::Failed(match interrupt::requested() {
                        true => Failure::interrupted(&mount.logical),
                        false => Failure::of_fetch(&e),
                    });
                }
            }
            seen.paths += 1;
            progress(seen);
        }
        let examined: Vec<(usize, Walked)> =
            batch.par_iter().map(|n| (n.root, examine_root(&roots[n.root], policy))).collect();
        for (i, w) in examined {
            walked[i] = Some(w);
        }
        for node in &batch {
            if let Root::Mounted { mount, .. } = &roots[node.root] {
                drop_files(&policy.resolver, mount, scratch);
            }
            done[node.root] = true;
        }
    }
    let walked = roots
        .iter()
        .zip(walked)
        .map(|(root, w)| w.unwrap_or_else(|| examine_root(root, policy)))
        .collect();
    conclude(walked, policy)
}

/// The store paths to fetch, each with the roots its references name.
fn graph<'a>(roots: &[Root], infos: &'a [NarInfo], store_dir: &str) -> Vec<Node<'a>> {
    let index: HashMap<&Path, usize> = roots
        .iter()
        .enumerate()
        .filter_map(|(i, r)| match r {
            Root::Mounted { mount, .. } => Some((mount.logical.as_path(), i)),
            _ => None,
        })
        .collect();
    infos
        .iter()
        .filter_map(|info| {
            let root = *index.get(Path::new(&info.store_path))?;
            let refs = info
                .references
                .iter()
                .filter_map(|r| index.get(Path::new(&format!("{store_dir}/{r}"))).copied())
                .filter(|&r| r != root)
                .collect();
            Some(Node { root, info, refs })
        })
        .collect()
}

/// The ready paths to fetch now: in order, those whose `NarSize` fits in
/// the budget left (first fit), at least one, at most `jobs`. `NarSize`
/// bounds what a path's objects take once its NAR is verified; a narinfo
/// that lies about it is stopped by the budget itself.
fn admit<'a>(ready: &[&'a Node<'a>], scratch: &Scratch, jobs: usize) -> Vec<&'a Node<'a>> {
    let disk = scratch.disk();
    let mut free = disk.limit().saturating_sub(disk.used());
    let mut batch: Vec<&Node> = Vec::new();
    for &node in ready {
        if batch.len() >= jobs.max(1) {
            break;
        }
        let size = node.info.nar_size;
        if batch.is_empty() || size <= free {
            free = free.saturating_sub(size);
            batch.push(node);
        }
    }
    batch
}

/// Fetches the NARs of `batch` in parallel; for each, the bytes it holds.
fn fetch_batch(
    batch: &[&Node],
    roots: &[Root],
    fetch: &Fetch,
    scratch: &Scratch,
    pool: Option<&rayon::ThreadPool>,
) -> Vec<Result<u64, CacheError>> {
    let keep_all = |_: &[u8]| true;
    let keep: &(dyn Fn(&[u8]) -> bool + Sync) =
        if fetch.keep_all { &keep_all } else { &super::interesting };
    let one = |node: &&Node| {
        let Root::Mounted { mount, .. } = &roots[node.root] else { return Ok(0) };
        let unpacked = fetch.cache.fetch_nar(node.info, &mount.local, keep, scratch.disk())?;
        Ok(unpacked.stored)
    };
    match pool {
        Some(pool) => pool.install(|| batch.par_iter().map(one).collect()),
        None => batch.iter().map(one).collect(),
    }
}

/// Removes an audited path's files, once the resolver has what later
/// lookups need of them; if it cannot read them (an I/O error), they stay.
fn drop_files(resolver: &Resolver, mount: &crate::store::mounts::Mount, scratch: &Scratch) {
    if resolver.remember(mount).is_ok() {
        scratch.discard(&mount.local);
    }
}
