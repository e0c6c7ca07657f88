//! The coverage matrix of an audit: per file with device code, per
//! capability, what a GPU of that capability would run. The HTML report
//! draws it and the Hydra metrics count it, both from the report the JSON
//! emitter writes, so none of them can disagree with the JSON:
//!
//! - a requested capability's cell is the file's `coverage` entry (the
//!   audit's own verdict, with the driver's when one was given);
//! - any other capability some file carries code for gets a column too,
//!   its cells decided by the same rules on the same code: [`covering`]
//!   for the code, and with a driver given the audit's driver verdict
//!   ([`crate::audit::checks::verdict`]) on that code and the file's runtime;
//! - a cell whose code the given driver cannot run (its CUDA runtime, or
//!   its PTX's ISA, too new; or not decided) is never `S` or `P`: it is `D`;
//! - where nothing runs, the cell says why: only link stubs target it, the
//!   file holds device code the audit did not read (never "nothing" about
//!   code not read), or nothing at all.

use std::collections::BTreeSet;
use std::path::Path;

use crate::audit::{checks, Coverage, DriverVerdict, FileFacts};
use crate::cuda::capabilities::{covering, Capability, Runs};
use crate::cuda::driver::{Driver, NotRunning, PtxVerdict, RuntimeVerdict};
use crate::devicecode::model::capability;
use crate::devicecode::DeviceCode;

/// What one cell says. The letter is the cell's text, so the matrix reads
/// without colour (and in a text dump of the page).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cell {
    /// SASS runs natively.
    Sass,
    /// Only PTX, JIT-compiled by the driver (runs, or no driver given).
    Ptx,
    /// Only PTX, and the given driver cannot run it (too new PTX or runtime,
    /// or not decided).
    PtxDriverFails,
    /// SASS, and the given driver cannot run it (too new runtime, or not
    /// decided).
    SassDriverFails,
    /// Only link stubs (cubins without kernels) target it: nothing runs.
    LinkStubs,
    /// Device code outside the fatbin sections was not read (`--no-scan`):
    /// the cell is not decided.
    NotRead,
    /// Nothing runs.
    Nothing,
}

impl Cell {
    /// Every kind, in legend order.
    pub const ALL: [Cell; 7] = [
        Cell::Sass,
        Cell::Ptx,
        Cell::SassDriverFails,
        Cell::PtxDriverFails,
        Cell::LinkStubs,
        Cell::NotRead,
        Cell::Nothing,
    ];

    /// One per letter, in legend order (`D` is one row: SASS or PTX the
    /// driver cannot run reads the same to whoever must fix it).
    pub const LEGEND: [Cell; 6] = [
        Cell::Sass,
        Cell::Ptx,
        Cell::PtxDriverFails,
        Cell::LinkStubs,
        Cell::NotRead,
        Cell::Nothing,
    ];

    /// The letter shown in the cell.
    pub fn letter(self) -> &'static str {
        match self {
            Cell::Sass => "S",
            Cell::Ptx => "P",
            Cell::PtxDriverFails | Cell::SassDriverFails => "D",
            Cell::LinkStubs => "L",
            Cell::NotRead => "?",
            Cell::Nothing => "N",
        }
    }

    /// The CSS class (and the kind's stable name in tests and metrics).
    pub fn class(self) -> &'static str {
        match self {
            Cell::Sass => "sass",
            Cell::Ptx => "ptx",
            Cell::PtxDriverFails | Cell::SassDriverFails => "driver-fails",
            Cell::LinkStubs => "link-stubs",
            Cell::NotRead => "not-read",
            Cell::Nothing => "nothing",
        }
    }

    /// The legend's words.
    pub fn meaning(self) -> &'static str {
        match self {
            Cell::Sass => "SASS: machine code for this capability runs natively",
            Cell::Ptx => "PTX only: the driver JIT-compiles it (slow first start; runs on the given driver, or no driver was given)",
            Cell::PtxDriverFails | Cell::SassDriverFails => "the given driver cannot run this code, SASS or PTX: its CUDA runtime or its PTX's ISA is too new, or it was not decided (the cell's title says which)",
            Cell::LinkStubs => "link stubs only: cubins without kernels target it, nothing runs",
            Cell::NotRead => "not read: the file holds device code outside its fatbin sections, left unread by --no-scan (the default reads it)",
            Cell::Nothing => "nothing runs: no SASS or PTX covers this capability",
        }
    }
}

/// One cell: its kind and the code it refers to (`sm_90a`, `compute_80`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// What runs.
    pub cell: Cell,
    /// The code the driver would pick, if any.
    pub code: Option<String>,
    /// With a driver given: its verdict in words.
    pub driver: Option<String>,
}

/// A column: a capability, requested or only present in some file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// As requested (`9.0a`) or as present (`8.6`).
    pub name: String,
    /// Whether the audit was asked for it.
    pub requested: bool,
}

/// One file's row.
#[derive(Debug, Clone)]
pub struct Row<'a> {
    /// The file's facts.
    pub file: &'a FileFacts,
    /// One entry per column.
    pub cells: Vec<Entry>,
}

/// Rows of one store path (or folder).
#[derive(Debug, Clone)]
pub struct Group<'a> {
    /// The store path (`/nix/store/<hash>-name`), NAR, or folder.
    pub name: String,
    /// Its files, in report order.
    pub rows: Vec<Row<'a>>,
}

/// The matrix.
#[derive(Debug, Clone)]
pub struct Matrix<'a> {
    /// Requested capabilities first (as requested), then the others present.
    pub columns: Vec<Column>,
    /// Files with device code, grouped.
    pub groups: Vec<Group<'a>>,
    /// Files examined without device code (not shown as rows).
    pub without_device_code: usize,
}

/// Builds the matrix of `files` (sorted by path, as the report keeps them)
/// without a driver for the columns nobody requested (the requested ones
/// carry the audit's verdict in their coverage entries).
pub fn build(files: &[FileFacts]) -> Matrix<'_> {
    build_for(files, None)
}

/// The matrix, the columns nobody requested judged on `driver` too, by the
/// audit's rule.
pub fn build_for<'a>(files: &'a [FileFacts], driver: Option<&Driver>) -> Matrix<'a> {
    let columns = columns(files);
    let mut groups: Vec<Group<'_>> = Vec::new();
    let mut without = 0;
    for f in files {
        let Some(dev) = &f.device else {
            without += 1;
            continue;
        };
        let cells = columns.iter().map(|c| entry(f, dev, c, driver)).collect();
        let name = group_of(&f.path);
        match groups.last_mut() {
            Some(g) if g.name == name => g.rows.push(Row { file: f, cells }),
            _ => groups.push(Group { name, rows: vec![Row { file: f, cells }] }),
        }
    }
    Matrix { columns, groups, without_device_code: without }
}

/// The requested capabilities (in the order the coverage lists them), then
/// every base capability some file has SASS, PTX or link stubs for.
fn columns(files: &[FileFacts]) -> Vec<Column> {
    let mut requested: Vec<String> = Vec::new();
    for f in files {
        for c in &f.coverage {
            if !requested.contains(&c.capability) {
                requested.push(c.capability.clone());
            }
        }
    }
    let taken: BTreeSet<Capability> =
        requested.iter().filter_map(|r| Capability::parse(r)).map(|c| c.device()).collect();
    let mut present = BTreeSet::new();
    for dev in files.iter().filter_map(|f| f.device.as_ref()) {
        for a in dev.sass().into_iter().chain(dev.ptx()).chain(dev.link_stub_only()) {
            if let Some(c) = capability(a) {
                present.insert(c.device());
            }
        }
    }
    let mut out: Vec<Column> =
        requested.into_iter().map(|name| Column { name, requested: true }).collect();
    out.extend(
        present.difference(&taken).map(|c| Column { name: c.to_string(), requested: false }),
    );
    out
}

/// One cell: the file's coverage entry for a requested column, the same
/// rules on the same code (and the same driver) for the others.
fn entry(f: &FileFacts, dev: &DeviceCode, column: &Column, driver: Option<&Driver>) -> Entry {
    if column.requested {
        if let Some(c) = f.coverage.iter().find(|c| c.capability == column.name) {
            return from_coverage(c, dev);
        }
    }
    let cap = Capability::parse(&column.name);
    match cap.and_then(|cap| covering(&dev.codes(), cap)) {
        Some((runs, code)) => {
            let verdict = driver.map(|d| {
                checks::verdict(d, cap, runs, checks::isa_of(dev, &code), f.runtime.as_ref())
            });
            Entry {
                cell: runs_cell(runs, verdict.as_ref()),
                code: Some(code.name()),
                driver: verdict.as_ref().map(driver_words),
            }
        }
        None => Entry { cell: uncovered(dev, cap), code: None, driver: None },
    }
}

fn from_coverage(c: &Coverage, dev: &DeviceCode) -> Entry {
    let cell = match c.runs {
        Runs::No => uncovered(dev, Capability::parse(&c.capability)),
        runs => runs_cell(runs, c.driver.as_ref()),
    };
    Entry { cell, code: c.code.clone(), driver: c.driver.as_ref().map(driver_words) }
}

/// The cell of code that runs (`runs` is native or JIT) on a GPU of the
/// column's capability, given the driver's verdict on it, if any.
fn runs_cell(runs: Runs, verdict: Option<&DriverVerdict>) -> Cell {
    let fails = verdict.is_some_and(|v| !v.runs);
    match (runs, fails) {
        (Runs::Native, false) => Cell::Sass,
        (Runs::Native, true) => Cell::SassDriverFails,
        (_, false) => Cell::Ptx,
        (_, true) => Cell::PtxDriverFails,
    }
}

/// The driver's verdict in words, with the reason when it cannot run the code.
fn driver_words(v: &DriverVerdict) -> String {
    let has = &v.has_cuda;
    let needs = v.needs_cuda.as_deref().unwrap_or("newer");
    match (v.runs, v.reason) {
        (true, _) => format!("runs on the CUDA {has} driver"),
        (false, Some(NotRunning::Runtime(RuntimeVerdict::BelowMinorFloor { major, floor }))) => {
            format!(
                "the driver cannot load the file's CUDA {major} runtime: CUDA {major} needs driver {floor} or newer"
            )
        }
        (false, Some(NotRunning::Runtime(_))) => format!(
            "the CUDA {has} driver cannot load the file's CUDA runtime: it needs a CUDA {needs} driver"
        ),
        (false, Some(NotRunning::Ptx(PtxVerdict::TooNew { .. }))) => {
            format!(
                "the CUDA {has} driver cannot JIT-compile this PTX (its ISA needs a CUDA {needs} driver)"
            )
        }
        (false, _) => format!(
            "whether the CUDA {has} driver runs it was not decided: {}",
            v.why.as_deref().unwrap_or("the runtime's version or the PTX's ISA is unknown")
        ),
    }
}

/// Why nothing covers `cap`: code not read, link stubs, or nothing.
fn uncovered(dev: &DeviceCode, cap: Option<Capability>) -> Cell {
    if dev.unscanned.is_some() {
        return Cell::NotRead;
    }
    let stub = |c: Capability| {
        dev.link_stub_only().into_iter().filter_map(capability).any(|s| s.device() == c.device())
    };
    match cap {
        Some(c) if stub(c) => Cell::LinkStubs,
        _ => Cell::Nothing,
    }
}

/// The group a file belongs to: its store path (the path up to the first
/// component that looks like a store object, `<32 base-32 chars>-name`),
/// its NAR (`x.nar!`), else its folder.
pub fn group_of(path: &Path) -> String {
    let text = path.to_string_lossy();
    if let Some(at) = text.find(".nar!") {
        return text[..at + 5].to_string();
    }
    let mut end = 0;
    for part in text.split('/') {
        end += part.len();
        if is_store_name(part) {
            return text[..end].to_string();
        }
        end += 1;
    }
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_string_lossy().into_owned(),
        _ => ".".to_string(),
    }
}

/// `<hash>-name` with a Nix base-32 hash of 32 characters.
fn is_store_name(part: &str) -> bool {
    let b = part.as_bytes();
    b.len() > 33
        && b[32] == b'-'
        && b[..32].iter().all(
            |c| matches!(c, b'0'..=b'9' | b'a'..=b'd' | b'f'..=b'n' | b'p'..=b's' | b'v'..=b'z'),
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_group_by_store_path_nar_or_folder() {
        let h = "0123456789abcdfghijklmnpqrsvwxyz";
        let p = format!("/nix/store/{h}-cudnn-9.1/lib/libcudnn.so");
        assert_eq!(group_of(Path::new(&p)), format!("/nix/store/{h}-cudnn-9.1"));
        assert_eq!(group_of(Path::new("x.nar!/lib/a.so")), "x.nar!");
        assert_eq!(group_of(Path::new("result/lib/a.so")), "result/lib");
        assert_eq!(group_of(Path::new("a.so")), ".");
        // `e`, `o`, `t`, `u` are not in Nix's base 32.
        let bad = format!("/nix/store/{}e-x/lib/a.so", &h[..31]);
        assert_eq!(group_of(Path::new(&bad)), format!("/nix/store/{}e-x/lib", &h[..31]));
    }
}
