//! The ratchet: a baseline file lists known findings; an audit against it
//! fails only on findings that are new (as nixpkgs-vet does for Nixpkgs), so
//! a large package set can adopt the audit without fixing everything first.
//!
//! A finding is known when its check, path and subject (capability, RUNPATH
//! entry, library) match a baseline entry; message wording may change freely,
//! and so may store hashes and versions ([`crate::audit::identity`]): a
//! version bump keeps its old findings known.
//!
//! Format versions: 1 remembered the store name's version and the file's
//! full version; 2 remembers neither. A version 1 baseline still loads, its
//! entries restated as version 2 would write them, so no baseline needs
//! migrating; `--write-baseline` writes version 2 (which a tool that knows
//! only version 1 refuses by name rather than matching nothing).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::audit::finding::{CheckId, Finding};
use crate::audit::identity;

/// The format `--write-baseline` writes.
pub const VERSION: u32 = 2;

/// The on-disk format (JSON, sorted, stable across runs).
#[derive(Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Baseline {
    /// Format version ([`VERSION`]; 1 is read too).
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
        Baseline { version: VERSION, known: findings.iter().map(Finding::fingerprint).collect() }
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
        if !(1..=VERSION).contains(&b.version) {
            return Err(invalid(format!(
                "unsupported version {} (this tool reads 1 to {VERSION})",
                b.version
            )));
        }
        let known = b.known.iter().map(|e| {
            restate(e).ok_or_else(|| {
                invalid(format!("entry {e:?} is not check<TAB>location<TAB>subject"))
            })
        });
        Ok(Baseline { version: VERSION, known: known.collect::<Result<_, _>>()? })
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

/// An entry of any format version as today's identity of it.
fn restate(entry: &str) -> Option<String> {
    let (check, place, subject) = identity::parts(entry)?;
    let kind = CheckId::from_id(check).map_or("", CheckId::subject_kind);
    Some(identity::fingerprint(check, place, subject, kind))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::finding::Subject;

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
    fn a_version_1_baseline_still_matches_after_a_bump() {
        // As version 1 wrote it: the store name's version and the file's
        // full version in the location.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.json");
        let v1 = r#"{"version":1,"known":["missing-driver-runpath\tlibcufft-11.2.1.3-lib/lib/libcufft.so.11.2.1.3\t/run/opengl-driver/lib"]}"#;
        std::fs::write(&path, v1).unwrap();
        let mut f = Finding::new(CheckId::MissingDriverRunpath, "/x", "m")
            .about(Subject::Entry("/run/opengl-driver/lib".into()));
        f.location = Some("libcufft-11.4.1.4-lib/lib/libcufft.so.11.4.1.4".into());
        let (left, known) = Baseline::load(&path).unwrap().filter(vec![f]);
        assert_eq!((left.len(), known), (0, 1));
    }

    #[test]
    fn a_bad_entry_or_version_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.json");
        std::fs::write(&path, r#"{"version":2,"known":["no tabs here"]}"#).unwrap();
        let err = Baseline::load(&path).unwrap_err().to_string();
        assert!(
            err.contains("b.json: not a cuda-elf-inspect baseline: entry \"no tabs here\""),
            "{err}"
        );
        std::fs::write(&path, r#"{"version":3,"known":[]}"#).unwrap();
        let err = Baseline::load(&path).unwrap_err().to_string();
        assert!(err.contains("unsupported version 3 (this tool reads 1 to 2)"), "{err}");
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
