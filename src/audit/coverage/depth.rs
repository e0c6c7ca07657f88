//! GPU depth: the served paths' NARs audited as `--substituter` audits one
//! path (object files only, fetched in parallel within the disk budget,
//! each path's files removed once audited: [`crate::audit::closure`]), one
//! session per cache for the paths it serves first; then, per path, what
//! its device code covers. A path's answer for a capability is its worst
//! file's: one library of a package without code for the GPU is the
//! "no kernel image is available" the user meets.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::model::{CapabilityAnswer, Gpu, PathResult, Runs};
use crate::audit::session::{AuditArgs, BaselineArgs, Outcome, Session, SessionError};
use crate::audit::{Audit, FileFacts};
use crate::buildenv::BuildEnv;
use crate::cuda::capabilities::Runs as CodeRuns;
use crate::devicecode::model::capability;
use crate::devicecode::Scan;

/// Audits the served paths of `results` and fills in their `gpu`, an
/// answer for each of `requested` (capabilities as reports write them).
pub fn audit_served(
    results: &mut [PathResult],
    requested: &[String],
    args: &AuditArgs,
    env: &BuildEnv,
) -> Result<(), SessionError> {
    let mut by_cache: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in results.iter() {
        if let Some(url) = &r.served_by {
            by_cache.entry(url.clone()).or_default().insert(r.path.clone());
        }
    }
    for (url, paths) in by_cache {
        let audit = audit_from(&url, &paths, args, env)?;
        for r in results.iter_mut().filter(|r| r.served_by.as_deref() == Some(url.as_str())) {
            r.gpu = Some(gpu_of(&r.path, &audit, requested));
        }
    }
    Ok(())
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

/// The depth of one store path from the session's audit.
fn gpu_of(root: &str, audit: &Audit, requested: &[String]) -> Gpu {
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
    let names = |archs: BTreeSet<crate::fatbin::Arch>| -> Vec<String> {
        archs.into_iter().filter_map(capability).map(|c| c.to_string()).collect()
    };
    let capabilities = requested.iter().map(|cap| answer_for(cap, &files)).collect();
    let failures = audit
        .failures
        .iter()
        .filter(|f| inside(&f.path, root))
        .map(|f| crate::output::sanitize(&f.to_string(), crate::output::Controls::Replace))
        .collect();
    Gpu { files: files.len(), built_for: names(sass), ptx: names(ptx), capabilities, failures }
}

/// One capability over the files with kernels: the worst file decides.
fn answer_for(cap: &str, files: &[&FileFacts]) -> CapabilityAnswer {
    let mut answer = CapabilityAnswer {
        capability: cap.to_string(),
        runs: if files.is_empty() { Runs::NoDeviceCode } else { Runs::Sass },
        lacking: Vec::new(),
        driver_runs: None,
        driver_reason: None,
    };
    for f in files {
        let Some(cov) = f.coverage.iter().find(|c| c.capability == cap) else { continue };
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
