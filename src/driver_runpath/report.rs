//! What a run found and did: per file ([`FileReport`]), per walk event
//! ([`WalkEvent`]), and in total ([`RunReport`], [`Summary`]). The JSON
//! output is these types serialized; [`super::emit`] writes the text.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::dlopen_folders::DlopenReport;
use super::plan::{DriverRule, StubEntry};
use crate::elf::classify::Skip;
use crate::elf::patch::Strategy;
use crate::elf::runpath::Tag;
use crate::fs::side::Recovery;

/// What happened to one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// The RUNPATH was rewritten.
    Patched,
    /// `--check`: it would be rewritten.
    WouldPatch,
    /// Already has the driver entry: untouched.
    Unchanged,
    /// Not a file we patch: untouched.
    Skipped,
    /// Could not be patched: untouched, reported.
    Error,
}

/// Whether an error is about the file's content or about I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorKind {
    /// A malformed or unsupported ELF file (exit 1; a warning with `--skip-unsupported`).
    Elf,
    /// The file could not be read or written (exit 2).
    Io,
}

/// The report for one inode.
#[derive(Clone, Debug, Serialize)]
pub struct FileReport {
    /// The name that was processed.
    #[serde(serialize_with = "ser_path")]
    pub path: PathBuf,
    /// Other hard links to the same file.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "ser_paths")]
    pub links: Vec<PathBuf>,
    /// What happened.
    pub action: Action,
    /// Why it was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skip: Option<Skip>,
    /// The machine the file is for (`x86_64`, `aarch64`, `ppc64le`, ...,
    /// `e_machine N` for one this project does not name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
    /// Which rule chose the driver entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_rule: Option<DriverRule>,
    /// The driver entry this file gets (or has).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_entry: Option<String>,
    /// The search path before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old: Option<String>,
    /// Its tag before.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_tag: Option<Tag>,
    /// The search path written (or to be written).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new: Option<String>,
    /// Its tag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<Tag>,
    /// How the file was rewritten.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strategy: Option<Strategy>,
    /// Whether it was patched in place (else replaced through a rename).
    pub in_place: bool,
    /// Hard links to the file outside the walked tree: they keep the old
    /// file (both modes; a warning).
    #[serde(skip_serializing_if = "is_zero")]
    pub outside_links: u64,
    /// `--dlopen-search`, for a file that loads libraries by name: the
    /// folders it needs and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dlopen: Option<DlopenReport>,
    /// `--remove-stubs`: what removeStubsFromRunpath's pass did with each
    /// entry it met (the `NIX_DEBUG` 6 lines).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stubs: Vec<StubEntry>,
    /// `--remove-stubs`: stubs folders left in the search path because
    /// upstream's patterns do not match them (a warning).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stubs_kept: Vec<String>,
    /// Error class.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_kind: Option<ErrorKind>,
    /// Error text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn ser_path<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}

fn ser_paths<S: serde::Serializer>(p: &[PathBuf], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(p.iter().map(|p| p.to_string_lossy()))
}

impl FileReport {
    pub(super) fn new(path: &Path, links: &[PathBuf], action: Action) -> FileReport {
        FileReport {
            path: path.to_path_buf(),
            links: links.to_vec(),
            action,
            skip: None,
            machine: None,
            driver_rule: None,
            driver_entry: None,
            old: None,
            old_tag: None,
            new: None,
            tag: None,
            strategy: None,
            in_place: false,
            outside_links: 0,
            dlopen: None,
            stubs: Vec::new(),
            stubs_kept: Vec::new(),
            error_kind: None,
            error: None,
        }
    }

    pub(super) fn failed(mut self, kind: ErrorKind, message: String) -> FileReport {
        self.action = Action::Error;
        self.error_kind = Some(kind);
        self.error = Some(message);
        self
    }
}

/// Something the walk met or did before any file was processed. Kept in
/// order, so that the emitter logs them as they happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WalkEvent {
    /// An output that does not exist (also in [`RunReport::missing_outputs`]).
    MissingOutput(PathBuf),
    /// A folder, entry or side file that could not be read, removed or
    /// replayed (also in [`RunReport::walk_errors`]).
    Error(String),
    /// A journal left by a killed run, replayed (its temporary file
    /// removed, or its in-place patch finished or undone) and removed.
    Replayed(PathBuf, Recovery),
    /// A file named like our side files that is not provably ours, or that
    /// a running process may still use: not touched (a warning; also in
    /// [`RunReport::warnings`]).
    LeftAlone(PathBuf, String),
}

/// The result of a whole run.
#[derive(Debug, Default, Serialize)]
pub struct RunReport {
    /// Every ELF file (and every file that failed), sorted by path.
    pub files: Vec<FileReport>,
    /// Outputs that do not exist.
    #[serde(serialize_with = "ser_paths")]
    pub missing_outputs: Vec<PathBuf>,
    /// Folders or entries that could not be read, side files refused.
    pub walk_errors: Vec<String>,
    /// Side files left alone, files whose hard links outside the tree keep
    /// the old file.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Counts.
    pub summary: Summary,
    /// What the walk met, in order (for the log; the JSON has the two lists
    /// above).
    #[serde(skip)]
    pub events: Vec<WalkEvent>,
}

/// Counts of a run.
#[derive(Debug, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    /// Files rewritten.
    pub patched: usize,
    /// Files `--check` would rewrite.
    pub would_patch: usize,
    /// ELF files that already had the driver entry.
    pub unchanged: usize,
    /// ELF files skipped on purpose.
    pub skipped: usize,
    /// Files that failed.
    pub errors: usize,
}

impl Summary {
    pub(super) fn count(files: &[FileReport]) -> Summary {
        let mut s = Summary::default();
        for f in files {
            match f.action {
                Action::Patched => s.patched += 1,
                Action::WouldPatch => s.would_patch += 1,
                Action::Unchanged => s.unchanged += 1,
                Action::Skipped => s.skipped += 1,
                Action::Error => s.errors += 1,
            }
        }
        s
    }
}

impl RunReport {
    pub(super) fn left_alone(&mut self, path: &Path, why: String) {
        self.warnings.push(format!("{}: left alone: {why}", path.display()));
        self.events.push(WalkEvent::LeftAlone(path.to_path_buf(), why));
    }

    pub(super) fn walk_error(&mut self, message: String) {
        self.events.push(WalkEvent::Error(message.clone()));
        self.walk_errors.push(message);
    }
}
