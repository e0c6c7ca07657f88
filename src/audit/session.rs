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

use super::baseline::{Baseline, BaselineError};
use super::failure::Failure;
use super::linkage::Resolver;
use super::policy::{self, Checks, PolicyError};
use super::sources::{self, CacheArgs, Progress, SourceError, Sources};
use super::{Audit, Policy};
use crate::buildenv::{BuildEnv, BuildEnvError};
use crate::log::{Logger, Msg};

/// The modes that take none of the audit's flags (clap argument ids of the
/// front end).
const NOT_AUDIT: [&str; 3] = ["summary", "list_elf", "list_ptx"];

/// The audit's arguments: what to check against and where the files come
/// from. Flattened into the front end's arguments (the `--help` order is
/// the fields' order).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AuditArgs {
    /// Audit store paths as a binary cache serves them (file://, http://,
    /// https://), without realising them: each narinfo and NAR is fetched,
    /// checked against NarHash/NarSize and unpacked (object files only) to a
    /// temporary folder. Proxies: HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY.
    #[arg(long, value_name = "URL", conflicts_with_all = NOT_AUDIT)]
    pub substituter: Option<String>,
    /// With --substituter: a key trusted to sign narinfo files (repeatable);
    /// with any, an unsigned or badly signed narinfo is refused.
    #[arg(long, value_name = "NAME:KEY", requires = "substituter")]
    pub trusted_public_key: Vec<String>,
    /// With --substituter: audit the closure (follow each narinfo's References).
    #[arg(long, requires = "substituter")]
    pub closure: bool,
    /// Capabilities the build was asked for: `8.6 9.0`, `8.6;9.0`, `86;90`,
    /// `sm_86,sm_90`, `8.6;9.0+PTX`. Default: $cudaCapabilities, $CUDAARCHS,
    /// $TORCH_CUDA_ARCH_LIST; none means no capability checks.
    #[arg(long, value_name = "LIST", conflicts_with_all = NOT_AUDIT)]
    pub cuda_capabilities: Option<String>,
    /// Expect PTX for the last capability (Nixpkgs' cudaForwardCompat; the default).
    #[arg(long, overrides_with = "no_forward_compat", conflicts_with_all = NOT_AUDIT)]
    pub forward_compat: bool,
    /// Do not expect forward-compatibility PTX.
    #[arg(long, conflicts_with_all = NOT_AUDIT)]
    pub no_forward_compat: bool,
    /// CUDA version of the build (`12.8`): capabilities too old or too new for it are an error.
    #[arg(long, value_name = "X.Y", conflicts_with_all = NOT_AUDIT)]
    pub cuda_version: Option<String>,
    /// The driver link whose `lib` folder must be on RUNPATH.
    #[arg(long, value_name = "DIR", default_value = "/run/opengl-driver")]
    pub driver_link: String,
    /// Search the host's default library folders for files in the Nix store too.
    #[arg(long, conflicts_with_all = NOT_AUDIT)]
    pub system_lib_dirs: bool,
    /// Libraries for files of another machine (a cross build's outputs): its
    /// root, e.g. /usr/aarch64-linux-gnu. This machine's folders never count
    /// for them.
    #[arg(long, value_name = "DIR", conflicts_with_all = NOT_AUDIT)]
    pub sysroot: Option<PathBuf>,
    /// The driver the files must run on, as nvidia-smi prints it
    /// (`580.95.05`): findings when it cannot load a file's CUDA runtime or
    /// JIT-compile PTX that is a capability's only code; verdicts on the
    /// coverage lines.
    #[arg(long, value_name = "VERSION", conflicts_with_all = ["driver_cuda", "summary", "list_elf", "list_ptx"])]
    pub driver_version: Option<String>,
    /// The same, named by the CUDA version the driver supports (nvidia-smi's
    /// "CUDA Version", e.g. 13.0).
    #[arg(long, value_name = "X.Y", conflicts_with_all = NOT_AUDIT)]
    pub driver_cuda: Option<String>,
}

impl AuditArgs {
    /// `--forward-compat` (`Some(true)`), `--no-forward-compat`
    /// (`Some(false)`, which wins), or neither.
    pub fn forward_compat(&self) -> Option<bool> {
        match (self.forward_compat, self.no_forward_compat) {
            (_, true) => Some(false),
            (true, _) => Some(true),
            _ => None,
        }
    }

    /// With `--substituter`: the cache, its keys, and transfers at a time:
    /// as many as the audit's own threads (rayon's pool: the CPUs this
    /// process may use, or `RAYON_NUM_THREADS`), since each transfer also
    /// decompresses and unpacks.
    fn cache(&self) -> Option<CacheArgs> {
        self.substituter.as_ref().map(|url| CacheArgs {
            url: url.clone(),
            keys: self.trusted_public_key.clone(),
            closure: self.closure,
            jobs: rayon::current_num_threads(),
        })
    }
}

/// The ratchet: compare with a baseline, or write one.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BaselineArgs {
    /// Fail only on findings not in this baseline (a ratchet).
    #[arg(long, value_name = "FILE", conflicts_with_all = NOT_AUDIT)]
    pub baseline: Option<PathBuf>,
    /// Write all findings to this baseline file and exit 0.
    #[arg(long, value_name = "FILE", conflicts_with_all = NOT_AUDIT)]
    pub write_baseline: Option<PathBuf>,
}

/// Why a session stops before it has a result.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A flag is malformed or out of range.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// No paths, and the build environment names no outputs.
    #[error("no paths given and no build outputs found (try --help)")]
    NoOutputs(#[source] BuildEnvError),
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
    scan: bool,
    store_dir: PathBuf,
    baseline: BaselineArgs,
}

/// A session whose sources are ready, with the policy made for them.
#[derive(Debug)]
pub struct Prepared {
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
    /// Checks the arguments against the build environment (`scan`: read
    /// fatbin containers outside the fatbin sections).
    pub fn new(
        args: &AuditArgs,
        baseline: &BaselineArgs,
        scan: bool,
        env: &BuildEnv,
    ) -> Result<Session, SessionError> {
        Ok(Session {
            checks: policy::checks(args, env)?,
            cache: args.cache(),
            scan,
            store_dir: PathBuf::from(env.store_dir()),
            baseline: baseline.clone(),
        })
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

    /// Prepares `paths` (NAR files unpacked, store paths fetched;
    /// `progress` after each store path) and builds the policy for them.
    pub fn prepare(
        self,
        paths: &[PathBuf],
        progress: &(dyn Fn(Progress) + Sync),
    ) -> Result<Prepared, SessionError> {
        if self.cache.is_some() && paths.is_empty() {
            return Err(SessionError::NothingToFetch);
        }
        let sources = sources::prepare(paths, self.cache.as_ref(), &self.store_dir, progress)?;
        // A cache's paths are named in its store; its mounts are what the
        // resolver must read through.
        let store_dir = sources.store_dir.clone().unwrap_or(self.store_dir);
        let resolver = match sources.mounts.is_empty() {
            true => Resolver::default(),
            false => Resolver::with_mounts(sources.mounts.clone()),
        };
        let policy = self.checks.policy(self.scan, store_dir, Arc::new(resolver));
        let unsigned = self.cache.as_ref().is_some_and(|c| c.keys.is_empty());
        Ok(Prepared { sources, policy, unsigned, baseline: self.baseline })
    }
}

impl Prepared {
    /// Whether narinfo signatures go unchecked (a cache and no
    /// `--trusted-public-key`): Nix would refuse such paths unless told
    /// otherwise, so the front end says it.
    pub fn signatures_unchecked(&self) -> bool {
        self.unsigned
    }

    /// Audits the sources (their unpacked copies are removed after), then
    /// writes the baseline or leaves out the findings it knows.
    pub fn finish(self) -> Result<Outcome, SessionError> {
        let mut audit = super::audit_roots(&self.sources.roots, &self.policy);
        drop(self.sources);
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
