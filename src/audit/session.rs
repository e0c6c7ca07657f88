//! One audit from its arguments to its result, in the order the tool works:
//! the arguments are checked (bad ones fail before anything is read), the
//! paths chosen (given, or the build's outputs), the sources prepared (NAR
//! files unpacked, store paths fetched from a cache), the policy built for
//! what was prepared (its store folder and the mounts its resolver reads
//! through), the files audited, and the baseline applied or written.
//!
//! The front end (`cli::inspect`) parses the arguments into [`AuditArgs`]
//! and [`BaselineArgs`], shows progress and prints what comes back.

use std::path::PathBuf;
use std::sync::Arc;

pub use super::args::{AuditArgs, BaselineArgs};
use super::baseline::{Baseline, BaselineError};
use super::failure::Failure;
use super::linkage::Resolver;
use super::policy::{self, Checks, PolicyError};
use super::sources::{self, CacheArgs, Progress, SourceError, Sources};
use super::{Audit, Policy};
use crate::buildenv::{BuildEnv, BuildEnvError};
use crate::devicecode::Scan;
use crate::log::{Logger, Msg};

/// Why a session stops before it has a result.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A flag is malformed or out of range.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// No paths, and the build environment names no outputs.
    #[error("no paths given and no build outputs found (try --help)")]
    NoOutputs(#[source] BuildEnvError),
    /// More than one `--substituter` without `--coverage`.
    #[error("the audit reads one --substituter (--coverage asks several)")]
    ManySubstituters,
    /// `--substituter` with nothing to fetch.
    #[error("--substituter needs store paths to audit (try --help)")]
    NothingToFetch,
    /// The sources could not be prepared at all.
    #[error(transparent)]
    Sources(#[from] SourceError),
    /// The baseline could not be read or written.
    #[error(transparent)]
    Baseline(#[from] BaselineError),
}

/// An audit whose arguments have been checked.
#[derive(Debug)]
pub struct Session {
    checks: Checks,
    cache: Option<CacheArgs>,
    limits: crate::store::budget::Limits,
    scan: Scan,
    store_dir: PathBuf,
    baseline: BaselineArgs,
}

/// A session whose sources are ready, with the policy made for them.
#[derive(Debug)]
pub struct Prepared {
    /// With a cache: the closure as its narinfo files describe it.
    pub nodes: Vec<super::why::Node>,
    sources: Sources,
    policy: Policy,
    unsigned: bool,
    baseline: BaselineArgs,
}

/// What a session ends with.
#[derive(Debug)]
pub enum Outcome {
    /// The audit, findings the baseline knows left out (`baselined` of them).
    Audited {
        /// Files, findings not in the baseline, failures.
        audit: Audit,
        /// How many findings the baseline knew.
        baselined: usize,
    },
    /// `--write-baseline`: all findings written to `path`.
    BaselineWritten {
        /// The baseline file.
        path: PathBuf,
        /// How many findings it holds.
        findings: usize,
        /// Files that could not be examined (their findings are missing).
        failures: Vec<Failure>,
    },
}

impl Session {
    /// Checks the arguments against the build environment (`scan`: how to
    /// read fatbin containers outside the fatbin sections).
    pub fn new(
        args: &AuditArgs,
        baseline: &BaselineArgs,
        scan: Scan,
        env: &BuildEnv,
    ) -> Result<Session, SessionError> {
        if args.substituter.len() > 1 {
            return Err(SessionError::ManySubstituters);
        }
        Ok(Session {
            checks: policy::checks(args, env)?,
            cache: args.cache(),
            limits: args.limits(),
            scan,
            store_dir: PathBuf::from(env.store_dir()),
            baseline: baseline.clone(),
        })
    }

    /// What the audit checks against, as reports name it.
    pub fn asked(&self) -> super::policy::Asked {
        super::policy::Asked {
            capabilities: self.checks.capabilities_from.clone(),
            driver: self.checks.driver,
        }
    }

    /// The paths to audit: `given` (from the command line), or with none
    /// the build's outputs, those that do not exist skipped with a warning.
    pub fn paths(
        &self,
        given: Vec<PathBuf>,
        env: &BuildEnv,
        log: &Logger,
    ) -> Result<Vec<PathBuf>, SessionError> {
        if !given.is_empty() {
            return Ok(given);
        }
        let outputs = env.outputs().map_err(SessionError::NoOutputs)?;
        let (present, missing): (Vec<_>, Vec<_>) =
            outputs.into_iter().partition(|o| o.path.exists());
        for o in missing {
            log.warn(&Msg::new("skipping non-existent output ").p(&o.path));
        }
        Ok(present.into_iter().map(|o| o.path).collect())
    }

    /// Prepares `paths` (NAR files unpacked, store paths looked up in the
    /// cache) within the session's limits and builds the policy for them.
    pub fn prepare(self, paths: &[PathBuf]) -> Result<Prepared, SessionError> {
        if self.cache.is_some() && paths.is_empty() {
            return Err(SessionError::NothingToFetch);
        }
        let sources = sources::prepare(paths, self.cache.as_ref(), &self.store_dir, &self.limits)?;
        // A cache's paths are named in its store; its mounts are what the
        // resolver must read through.
        let store_dir = sources.store_dir.clone().unwrap_or(self.store_dir);
        let resolver = match sources.mounts.is_empty() {
            true => Resolver::default(),
            false => Resolver::with_mounts(sources.mounts.clone()),
        };
        let default_on = self.cache.is_some()
            || paths.iter().any(|p| sources::is_nar_file(p) || in_store(p, &store_dir));
        let store_text = store_dir.to_string_lossy().trim_end_matches('/').to_string();
        let nodes: Vec<super::why::Node> = sources
            .infos
            .iter()
            .map(|i| super::why::Node {
                path: i.store_path.clone(),
                nar_size: i.nar_size,
                references: i
                    .references
                    .iter()
                    .map(|r| format!("{store_text}/{r}"))
                    .filter(|r| *r != i.store_path)
                    .collect(),
            })
            .collect();
        // A closure's paths are the candidates Nix itself would scan for.
        let closure: Vec<String> = nodes.iter().map(|n| n.path.clone()).collect();
        let closure = (self.cache.as_ref().is_some_and(|c| c.closure)).then_some(&closure[..]);
        let references = self.checks.reference_settings(default_on, &store_dir, closure);
        let mut policy = self.checks.policy(self.scan, store_dir, Arc::new(resolver));
        policy.references = references.map(Arc::new);
        let unsigned = self.cache.as_ref().is_some_and(|c| c.keys.is_empty());
        Ok(Prepared { nodes, sources, policy, unsigned, baseline: self.baseline })
    }
}

/// Whether `path` (links followed) lies in the store folder.
fn in_store(path: &std::path::Path, store_dir: &std::path::Path) -> bool {
    std::fs::canonicalize(path).is_ok_and(|p| p.starts_with(store_dir))
        || path.starts_with(store_dir)
}

impl Prepared {
    /// Whether narinfo signatures go unchecked (a cache and no
    /// `--trusted-public-key`): Nix would refuse such paths unless told
    /// otherwise, so the front end says it.
    pub fn signatures_unchecked(&self) -> bool {
        self.unsigned
    }

    /// Reference finding's settings, when it is on.
    pub fn reference_settings(&self) -> Option<Arc<super::references::Settings>> {
        self.policy.references.clone()
    }

    /// Audits the sources (a cache's NARs fetched on the way, `progress`
    /// after each; the unpacked copies are removed once audited), then
    /// writes the baseline or leaves out the findings it knows.
    pub fn finish(self, progress: &(dyn Fn(Progress) + Sync)) -> Result<Outcome, SessionError> {
        let mut audit = self.sources.audit(&self.policy, progress);
        if let Some(path) = self.baseline.write_baseline {
            Baseline::of(&audit.findings).save(&path)?;
            let findings = audit.findings.len();
            return Ok(Outcome::BaselineWritten { path, findings, failures: audit.failures });
        }
        let baselined = match &self.baseline.baseline {
            Some(path) => {
                let (new, known) = Baseline::load(path)?.filter(audit.findings);
                audit.findings = new;
                known
            }
            None => 0,
        };
        Ok(Outcome::Audited { audit, baselined })
    }
}
