//! GPU depth: the served paths' NARs audited as `--substituter` audits one
//! path (object files only, fetched in parallel within the disk budget,
//! each path's files removed once audited: [`crate::audit::closure`]), one
//! session per cache for the paths it serves first; then, per path, what
//! its device code covers. A path's answer for a capability is its worst
//! file's: one library of a package without code for the GPU is the
//! "no kernel image is available" the user meets.
//!
//! The capabilities answered are the requested ones; with only a driver
//! given, each path's own: those its SASS or PTX targets (what the build
//! was made for), each with the driver's verdict by the audit's one rule
//! ([`crate::audit::coverage_of`]).
//!
//! Ctrl-C (caught by the caller's [`crate::fs::interrupt::Interrupt`])
//! stops the pass: the paths audited keep their answer, the others are
//! [`NOT_EXAMINED`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::model::{CapabilityAnswer, Gpu, PathResult, Runs};
use crate::audit::failure::Reason;
use crate::audit::session::{AuditArgs, BaselineArgs, Outcome, Session, SessionError};
use crate::audit::{coverage_of, policy, Audit, Coverage, FileFacts};
use crate::buildenv::BuildEnv;
use crate::cuda::capabilities::{Capability, Runs as CodeRuns};
use crate::cuda::driver::Driver;
use crate::devicecode::model::capability;
use crate::devicecode::Scan;
use crate::fs::interrupt;

/// Why a served path has no GPU answer: the run was interrupted first.
pub const NOT_EXAMINED: &str = "interrupted";

/// Audits the served paths of `results` and fills in their `gpu`, an
/// answer for each of `requested` (capabilities as reports write them; none:
/// each path's own, with the driver's verdicts).
pub fn audit_served(
    results: &mut [PathResult],
    requested: &[String],
    args: &AuditArgs,
    env: &BuildEnv,
) -> Result<(), SessionError> {
    let driver = policy::driver(args)?;
    let mut by_cache: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in results.iter() {
        if let Some(url) = &r.served_by {
            by_cache.entry(url.clone()).or_default().insert(r.path.clone());
        }
    }
    for (url, paths) in by_cache {
        let served = |r: &&mut PathResult| r.served_by.as_deref() == Some(url.as_str());
        if interrupt::requested() {
            results.iter_mut().filter(served).for_each(not_examined);
            continue;
        }
        let audit = audit_from(&url, &paths, args, env)?;
        for r in results.iter_mut().filter(served) {
            match interrupted(&r.path, &audit) {
                true => not_examined(r),
                false => r.gpu = Some(gpu_of(&r.path, &audit, requested, driver.as_ref())),
            }
        }
    }
    Ok(())
}

/// Marks a served path as left unexamined by Ctrl-C.
pub fn not_examined(r: &mut PathResult) {
    r.gpu = None;
    r.not_examined = Some(NOT_EXAMINED.to_string());
}

/// One session: `paths` from the cache at `url`, with the run's
/// capabilities, driver and keys; no dlopen or reference pass (coverage
/// does not report them).
fn audit_from(
    url: &str,
    paths: &BTreeSet<String>,
    args: &AuditArgs,
    env: &BuildEnv,
) -> Result<Audit, SessionError> {
    let args = AuditArgs {
        substituter: vec![url.to_string()],
        closure: false,
        why: Vec::new(),
        no_dlopen: true,
        dlopen_facts: false,
        references: false,
        no_references: true,
        forbid_reference: Vec::new(),
        ..args.clone()
    };
    let session = Session::new(&args, &BaselineArgs::default(), Scan::Found, env)?;
    let paths: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
    let prepared = session.prepare(&paths)?;
    match prepared.finish(&|_| {})? {
        Outcome::Audited { audit, .. } => Ok(audit),
        Outcome::BaselineWritten { failures, .. } => Ok(Audit { failures, ..Audit::default() }),
    }
}

/// Whether `file` lies in the store path `root`.
fn inside(file: &Path, root: &str) -> bool {
    file == Path::new(root) || file.starts_with(root)
}

/// Whether the audit left `root` unexamined because of Ctrl-C.
fn interrupted(root: &str, audit: &Audit) -> bool {
    audit.failures.iter().any(|f| f.reason == Reason::Interrupted && inside(&f.path, root))
}

/// The depth of one store path from the session's audit: the requested
/// capabilities' answers from the audit's coverage, or with none requested
/// and a driver given, the answers for the capabilities the path's code
/// targets.
fn gpu_of(root: &str, audit: &Audit, requested: &[String], driver: Option<&Driver>) -> Gpu {
    let files: Vec<&FileFacts> = audit
        .files
        .iter()
        .filter(|f| inside(&f.path, root))
        .filter(|f| f.device.as_ref().is_some_and(|d| d.has_code()))
        .collect();
    let mut sass = BTreeSet::new();
    let mut ptx = BTreeSet::new();
    for dev in files.iter().filter_map(|f| f.device.as_ref()) {
        sass.extend(dev.sass());
        ptx.extend(dev.ptx());
    }
    let caps = |archs: &BTreeSet<crate::fatbin::Arch>| -> BTreeSet<Capability> {
        archs.iter().filter_map(|a| capability(*a)).collect()
    };
    let names =
        |c: BTreeSet<Capability>| -> Vec<String> { c.iter().map(|c| c.to_string()).collect() };
    let mut newer_than_driver = Vec::new();
    let capabilities = match (requested.is_empty(), driver) {
        (true, Some(driver)) => {
            // GPUs newer than the driver are no machine's: named, not answered.
            let (own, newer): (Vec<Capability>, Vec<Capability>) = caps(&sass)
                .union(&caps(&ptx))
                .copied()
                .partition(|c| driver.predates_gpu(*c).is_none());
            newer_than_driver = newer.iter().map(|c| c.to_string()).collect();
            let covs: Vec<(&FileFacts, Vec<Coverage>)> = files
                .iter()
                .map(|f| {
                    let dev = f
                        .device
                        .as_ref()
                        .map(|d| coverage_of(d, f.runtime.as_ref(), &own, Some(driver)));
                    (*f, dev.unwrap_or_default())
                })
                .collect();
            let per_file: Vec<(&FileFacts, &[Coverage])> =
                covs.iter().map(|(f, c)| (*f, c.as_slice())).collect();
            own.iter().map(|cap| answer_for(&cap.to_string(), &per_file)).collect()
        }
        _ => {
            let per_file: Vec<(&FileFacts, &[Coverage])> =
                files.iter().map(|f| (*f, f.coverage.as_slice())).collect();
            requested.iter().map(|cap| answer_for(cap, &per_file)).collect()
        }
    };
    let failures = audit
        .failures
        .iter()
        .filter(|f| inside(&f.path, root))
        .map(|f| crate::output::sanitize(&f.to_string(), crate::output::Controls::Replace))
        .collect();
    Gpu {
        files: files.len(),
        built_for: names(caps(&sass)),
        ptx: names(caps(&ptx)),
        capabilities,
        newer_than_driver,
        failures,
    }
}

/// One capability over the files with kernels (each with its coverage):
/// the worst file decides.
fn answer_for(cap: &str, files: &[(&FileFacts, &[Coverage])]) -> CapabilityAnswer {
    let mut answer = CapabilityAnswer {
        capability: cap.to_string(),
        runs: if files.is_empty() { Runs::NoDeviceCode } else { Runs::Sass },
        lacking: Vec::new(),
        driver_runs: None,
        driver_reason: None,
    };
    for (f, coverage) in files {
        let Some(cov) = coverage.iter().find(|c| c.capability == cap) else { continue };
        let runs = match cov.runs {
            CodeRuns::Native => Runs::Sass,
            CodeRuns::Jit => Runs::PtxJit,
            CodeRuns::No => Runs::Nothing,
        };
        if runs == Runs::Nothing {
            answer.lacking.push(f.path.to_string_lossy().into_owned());
        }
        answer.runs = answer.runs.min(runs);
        if let Some(d) = &cov.driver {
            let all = answer.driver_runs.unwrap_or(true) && d.runs;
            answer.driver_runs = Some(all);
            if !d.runs && answer.driver_reason.is_none() {
                answer.driver_reason = d.reason.map(|r| r.id().to_string());
            }
        }
    }
    answer
}
