//! `--coverage`: what a set of binary caches holds for a package set, and
//! with GPU depth what it runs on (docs/binary-cache.md, "Coverage").
//!
//! The input ([`input`]) is store paths or nix-eval-jobs' lines; the
//! presence pass ([`presence`]) asks each cache for each path's narinfo in
//! Nix's order; the depth pass ([`depth`]) audits the served paths' NARs
//! when capabilities or a driver are given; [`shard`] splits and joins runs.
//! The result is one [`model::Report`], which the emitters of
//! `crate::report::coverage` print; every bad answer is a path's result,
//! and only what stops the run as a whole (a bad URL or key, a depth pass
//! that cannot start) is an error. Ctrl-C during either pass is caught for
//! the whole run: the paths answered (and audited) are reported, the rest
//! are `not-done` (presence) or `not_examined` (depth), status 1.

pub mod args;
pub mod depth;
pub mod input;
pub mod model;
pub mod presence;
pub mod shard;

pub use args::CoverageArgs;

use crate::audit::session::{AuditArgs, SessionError};
use crate::buildenv::BuildEnv;
use crate::fs::interrupt::Interrupt;
use crate::store::cache::CacheError;
use crate::store::narinfo::{NarInfoError, PublicKey};

/// The coverage report's schema version.
pub const VERSION: u32 = 1;

/// Why a coverage run has no report.
#[derive(Debug, thiserror::Error)]
pub enum CoverageError {
    /// No `--substituter`.
    #[error("--coverage needs at least one --substituter (or --merge)")]
    NoCaches,
    /// A `--trusted-public-key` that does not parse.
    #[error("--trusted-public-key: {0}")]
    Key(#[from] NarInfoError),
    /// A `--substituter` that is not a cache URL.
    #[error("--substituter: {0}")]
    Cache(#[from] CacheError),
    /// `--cuda-capabilities` that does not parse.
    #[error("--cuda-capabilities: {0}")]
    Capabilities(String),
    /// The depth pass could not start.
    #[error(transparent)]
    Depth(#[from] SessionError),
}

/// Runs the presence pass (and the depth pass when capabilities or a
/// driver are asked for) over `input`; `progress` gets done and total.
pub fn run(
    args: &CoverageArgs,
    audit: &AuditArgs,
    input: input::Input,
    env: &BuildEnv,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<model::Report, CoverageError> {
    if audit.substituter.is_empty() {
        return Err(CoverageError::NoCaches);
    }
    let keys: Vec<PublicKey> =
        audit.trusted_public_key.iter().map(|k| PublicKey::parse(k)).collect::<Result<_, _>>()?;
    let capabilities: Vec<String> = match &audit.cuda_capabilities {
        Some(text) => crate::cuda::capabilities::parse_list(text)
            .map_err(|e| CoverageError::Capabilities(e.to_string()))?
            .capabilities
            .iter()
            .map(|c| c.to_string())
            .collect(),
        None => Vec::new(),
    };
    let items: Vec<(usize, input::Item)> = input
        .items
        .into_iter()
        .enumerate()
        .filter(|(i, _)| args.shard.is_none_or(|s| s.takes(*i)))
        .collect();
    let limits = audit.limits();
    let pool = args.jobs.map_or(64, |j| j as usize);
    let caches = presence::open(&audit.substituter, limits, pool, args.retries)?;
    let jobs = args.jobs.map_or_else(|| presence::default_jobs(&caches), |j| j as usize);
    let options =
        presence::Options { keys: &keys, closure: audit.closure, jobs, retries: args.retries };
    // Ctrl-C ends either pass with a report (the cleanup handler of the
    // depth pass's temporary folders is installed first: the guard gives
    // it back, not the default, when it is dropped).
    crate::store::scratch::install_signal_cleanup();
    let interrupt = Interrupt::catch();
    let mut paths = presence::ask_all(&caches, &items, &options, &interrupt, progress);
    let mut infos: Vec<model::CacheInfo> = caches.iter().map(|c| c.info.clone()).collect();
    for (info, gone) in infos.iter_mut().zip(presence::gone_reasons(&caches)) {
        info.unreachable = gone;
    }
    drop(caches);
    let driver = audit.driver_version.clone().or_else(|| audit.driver_cuda.clone());
    if audit.cuda_capabilities.is_some() || driver.is_some() {
        match interrupt.requested() {
            true => {
                paths.iter_mut().filter(|p| p.served_by.is_some()).for_each(depth::not_examined)
            }
            false => depth::audit_served(&mut paths, &capabilities, audit, env)?,
        }
    }
    drop(interrupt);
    let mut report = model::Report {
        version: VERSION,
        caches: infos,
        capabilities,
        driver,
        shard: args.shard.map(|s| s.to_string()),
        summary: model::Summary::default(),
        paths,
        bad_lines: input.bad_lines,
    };
    report.summarise();
    Ok(report)
}
