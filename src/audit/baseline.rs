//! The ratchet: a baseline file lists known findings; an audit against it
//! fails only on findings that are new (as nixpkgs-vet does for Nixpkgs), so
//! a large package set can adopt the audit without fixing everything first.
//!
//! A finding is known when its check, path and subject (capability, RUNPATH
//! entry, library) match a baseline entry; message wording may change freely.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::audit::finding::Finding;

/// The on-disk format (JSON, sorted, stable across runs).
#[derive(Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Baseline {
    /// Format version (1).
    pub version: u32,
    /// Known findings, as fingerprints `check<TAB>path<TAB>subject`.
    pub known: BTreeSet<String>,
}

/// Why a baseline could not be used.
#[derive(Debug, thiserror::Error)]
pub enum BaselineError {
    /// Unreadable or unwritable.
    #[error("{}: {}", path.display(), crate::error::describe_io(source))]
    Io {
        /// The baseline path.
        path: PathBuf,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// Could not be written (the old baseline, if any, is untouched).
    #[error("{0}")]
    Write(#[from] crate::error::PathError),
    /// Not a baseline.
    #[error("{}: not a cuda-elf-inspect baseline: {reason}", path.display())]
    Invalid {
        /// The baseline path.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl Baseline {
    /// A baseline of these findings.
    pub fn of(findings: &[Finding]) -> Baseline {
        Baseline { version: 1, known: findings.iter().map(Finding::fingerprint).collect() }
    }

    /// Reads a baseline file: one written by `--write-baseline`, or a JSON
    /// report of an earlier audit (`--format json`), whose findings become
    /// the known ones (so a CI job can ratchet against its last report).
    pub fn load(path: &Path) -> Result<Baseline, BaselineError> {
        let bytes = std::fs::read(path)
            .map_err(|source| BaselineError::Io { path: path.to_path_buf(), source })?;
        let invalid = |reason: String| BaselineError::Invalid { path: path.to_path_buf(), reason };
        let value: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
        if let Some(findings) = value.get("findings") {
            let findings: Vec<Finding> = serde_json::from_value(findings.clone())
                .map_err(|e| invalid(format!("report findings: {e}")))?;
            return Ok(Baseline::of(&findings));
        }
        let b: Baseline = serde_json::from_value(value).map_err(|e| invalid(e.to_string()))?;
        if b.version != 1 {
            return Err(BaselineError::Invalid {
                path: path.to_path_buf(),
                reason: format!("unsupported version {}", b.version),
            });
        }
        Ok(b)
    }

    /// Writes the baseline whole ([`crate::fs::atomic::write_whole`]: the
    /// old baseline or the complete new one, its mode kept).
    pub fn save(&self, path: &Path) -> Result<(), BaselineError> {
        crate::fs::atomic::write_whole(path, |w| {
            serde_json::to_writer_pretty(&mut *w, self)?;
            w.write_all(b"\n")
        })
        .map_err(BaselineError::Write)
    }

    /// Splits findings into (new, number known).
    pub fn filter(&self, findings: Vec<Finding>) -> (Vec<Finding>, usize) {
        let before = findings.len();
        let new: Vec<Finding> =
            findings.into_iter().filter(|f| !self.known.contains(&f.fingerprint())).collect();
        let known = before - new.len();
        (new, known)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::finding::{CheckId, Subject};

    #[test]
    fn round_trip_hides_known_and_keeps_new() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("baseline.json");
        let old = Finding::new(CheckId::PtxOnlyCapability, "/a.so", "m")
            .about(Subject::Capability("9.0".into()));
        Baseline::of(std::slice::from_ref(&old)).save(&path).unwrap();
        let b = Baseline::load(&path).unwrap();
        let reworded = Finding { message: "other words".into(), ..old.clone() };
        let new = Finding::new(CheckId::PtxOnlyCapability, "/a.so", "m")
            .about(Subject::Capability("8.6".into()));
        let (left, known) = b.filter(vec![reworded, new.clone()]);
        assert_eq!((left, known), (vec![new], 1));
    }

    #[test]
    fn a_json_report_serves_as_a_baseline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        let f = Finding::new(CheckId::UnresolvedNeeded, "/a.so", "m")
            .about(Subject::Library("libx.so".into()));
        let report = serde_json::json!({ "findings": [f], "summary": {} });
        std::fs::write(&path, report.to_string()).unwrap();
        let (left, known) = Baseline::load(&path).unwrap().filter(vec![f]);
        assert_eq!((left.len(), known), (0, 1));
    }

    #[test]
    fn a_file_that_is_no_baseline_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.json");
        std::fs::write(&path, "[]").unwrap();
        let err = Baseline::load(&path).unwrap_err().to_string();
        assert!(err.contains("b.json: not a cuda-elf-inspect baseline"), "{err}");
    }
}
