//! The libraries an ELF file loads with `dlopen`, which no NEEDED entry
//! shows, and whether the loader would find them (docs/dlopen.md).
//!
//! One pass per file ([`scan`]), typed results: a file that does not import
//! `dlopen`/`dlmopen` is not read further; otherwise its `.note.dlopen`
//! notes are taken as given ([`note`]), its read-only data is searched for
//! soname-shaped strings ([`strings`]), and the reviewed table of facts
//! ([`table`]) adds names built at run time and says which are needed.
//! [`resolve`] then answers as glibc's `dlopen` would from that object.
//!
//! Memory is bounded per file whatever the file holds: at most
//! [`MAX_TARGETS`] distinct names, a note's JSON at most [`MAX_NOTE`] bytes;
//! past a bound the scan stops and says so in [`Scan::problems`], itself at
//! most [`MAX_PROBLEMS`] and one [`Problem::More`] that counts the rest.
//! Overlapping sections are read once ([`crate::elf::ranges`]).

pub mod fold;
pub mod note;
pub mod release;
pub mod resolve;
pub mod strings;
pub mod symbols;
pub mod table;

pub use resolve::{
    needed_closure, resolve, resolve_in, search_dirs, Caller, DirectProbe, Probe, Probed, Resolved,
    Via,
};
pub use table::{provider, Need};

use serde::Serialize;

use crate::elf::Elf;

/// At most this many distinct names per file: far above any real library
/// (cuDNN's graph library holds about 20), small enough that a hostile
/// file of ten million soname-shaped strings costs nothing.
pub const MAX_TARGETS: usize = 4096;

/// A `.note.dlopen` note's JSON may be at most this long (systemd's own
/// notes are a few hundred bytes).
pub const MAX_NOTE: usize = 64 << 10;

/// At most this many problems per file, then one [`Problem::More`]: a
/// 16 MB section of broken 20-byte notes was 838,861 problems (462 MB).
pub const MAX_PROBLEMS: usize = 64;

/// Which loader entry point the file imports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Import {
    /// `dlopen`.
    Dlopen,
    /// `dlmopen` (and not `dlopen`).
    Dlmopen,
}

/// Where a name was found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Origin {
    /// A string in a read-only data section, at this offset in the section.
    Section {
        /// The section's name (`.rodata`).
        section: String,
        /// Offset of the string's first byte inside the section.
        offset: u64,
    },
    /// A `.note.dlopen` entry (FDO ELF dlopen metadata).
    Note {
        /// File offset of the note.
        offset: u64,
        /// The entry's `feature`, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        feature: Option<String>,
    },
    /// A row of the facts table (a name built at run time that the file
    /// holds in no usable form).
    Table {
        /// The row's source column.
        source: &'static str,
    },
}

impl Origin {
    /// As a message says it: `.rodata+0x1a2b`, `.note.dlopen at 0x3c0`,
    /// `the dlopen facts table`.
    pub fn describe(&self) -> String {
        match self {
            Origin::Section { section, offset } => format!("{section}+{offset:#x}"),
            Origin::Note { offset, feature: Some(f) } => {
                format!(".note.dlopen at {offset:#x} (feature {f})")
            }
            Origin::Note { offset, feature: None } => format!(".note.dlopen at {offset:#x}"),
            // The row's source is provenance: it stays in the table and the
            // JSON facts, not in a finding's sentence.
            Origin::Table { .. } => "the dlopen facts table".to_string(),
        }
    }
}

/// One library the file may load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Target {
    /// The name reported and remembered by baselines: the soname the
    /// loader ends up asked for (`libcudnn_graph.so.9`), or the first of a
    /// note's alternatives.
    pub soname: String,
    /// Every name the caller asks `dlopen` for, in the order it asks; the
    /// target resolves when one of them does (cuDNN asks
    /// `libcudnn_graph.so.9.19.0`, `.9.19`, then `.9`; a note's `soname`
    /// array lists alternatives).
    pub asked: Vec<String>,
    /// Where the name was found.
    pub origin: Origin,
    /// Needed for the library's main job, or optional.
    pub need: Need,
    /// Whether a reviewed fact (the facts table's `release` column) says the
    /// library must be of the caller's own release (cuDNN's sub-libraries):
    /// one of another release found first is a failure, not a fact.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub same_release: bool,
}

/// Why the scan of a file stopped early or skipped something.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Problem {
    /// More than [`MAX_TARGETS`] distinct names: the rest were not read.
    TooManyNames {
        /// The bound.
        limit: usize,
        /// The section the scan stopped in.
        section: String,
        /// Offset in that section where it stopped.
        offset: u64,
    },
    /// A `.note.dlopen` note that cannot be read (truncated, too large,
    /// not JSON of the documented shape).
    BadNote {
        /// File offset of the note (or of the section when the note
        /// header itself is cut).
        offset: u64,
        /// Why.
        reason: String,
    },
    /// Past [`MAX_PROBLEMS`]: how many more there were, not kept.
    More {
        /// How many.
        count: u64,
    },
}

impl Problem {
    /// One sentence.
    pub fn describe(&self) -> String {
        match self {
            Problem::TooManyNames { limit, section, offset } => format!(
                "more than {limit} distinct soname-shaped strings (the scan stopped at {section}+{offset:#x}): names past that were not checked"
            ),
            Problem::BadNote { offset, reason } => {
                format!("the .note.dlopen note at {offset:#x} cannot be read: {reason}")
            }
            Problem::More { count } => format!(
                "{count} more problems reading its dlopen targets (at most {MAX_PROBLEMS} are listed per file)"
            ),
        }
    }
}

/// What [`scan`] found in one file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Scan {
    /// Which loader entry point the file imports; `None`: it loads nothing
    /// by name at run time and nothing else was read.
    pub imports: Option<Import>,
    /// The libraries it may load, in file order (notes first, then
    /// strings, then table rows), each name once.
    pub targets: Vec<Target>,
    /// printf-style names (`libfoo.so.%d`) no table row expands: the
    /// name is computed at run time and cannot be checked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub patterns: Vec<(String, Origin)>,
    /// What could not be read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<Problem>,
    /// Whether the static CUDA runtime's `libcuda.so.1` string occurs in
    /// the read-only data searched ([`strings::Found::libcuda`]); `None`
    /// when the strings were not all searched. Not reported: the audit's
    /// static-runtime check reads it instead of searching again.
    #[serde(skip)]
    pub libcuda_string: Option<bool>,
    /// The caller's own release ([`release`]), read only when a target
    /// must be of it ([`Scan::wants_release`]); not reported here (the
    /// audit's release checks carry it).
    #[serde(skip)]
    pub release: Option<release::Release>,
}

impl Scan {
    /// Whether a target must be of the caller's own release (then the
    /// caller's release is worth reading).
    pub fn wants_release(&self) -> bool {
        self.targets.iter().any(|t| t.same_release)
    }
}

impl Scan {
    /// Records a problem: the first [`MAX_PROBLEMS`] as they are, then only
    /// their count, in one [`Problem::More`].
    pub fn problem(&mut self, p: Problem) {
        push_problem(&mut self.problems, p)
    }
}

/// [`Scan::problem`] on a list of problems.
pub fn push_problem(problems: &mut Vec<Problem>, p: Problem) {
    if problems.len() < MAX_PROBLEMS {
        problems.push(p);
    } else if let Some(Problem::More { count }) = problems.last_mut() {
        *count += 1;
    } else {
        problems.push(Problem::More { count: 1 });
    }
}

/// Scans one parsed ELF file: `soname` is its DT_SONAME (the facts table is
/// keyed by it; the file's own name is never a target), `version` the
/// caller's full version when its file name says it (`libcudnn.so.9.19.0`
/// -> `9.19.0`: the names cuDNN builds from its own version start with
/// it). `release` is called with each stretch of bytes once read (the
/// audit drops those pages, see `devicecode::host::Mapped::release`).
///
/// Nothing is read beyond the dynamic symbol table unless the file imports
/// `dlopen`/`dlmopen`.
pub fn scan(
    elf: &Elf<'_>,
    soname: Option<&str>,
    version: Option<&str>,
    release: &(dyn Fn(&[u8]) + Sync),
) -> Scan {
    let Some(imports) = symbols::imports(elf) else { return Scan::default() };
    let mut out = Scan { imports: Some(imports), ..Scan::default() };
    let mut seen = std::collections::HashSet::new();
    if let Some(own) = soname {
        seen.insert(own.to_string());
    }
    note::read(elf, &mut out, &mut seen);
    let found = strings::find(elf, &mut out.problems, release);
    out.libcuda_string = found.libcuda;
    let rows = table::facts_for(soname);
    for (name, origin) in found.names {
        table::apply(name, origin, &rows, soname, version, &mut out, &mut seen);
    }
    table::runtime_rows(&rows, &mut out, &mut seen);
    out
}

/// The caller's full version from its file name (`libcudnn.so.9.19.0` ->
/// `9.19.0`), when the name has more than the soname's major.
pub fn version_of_file_name(name: &str) -> Option<&str> {
    let (_, v) = name.split_once(".so.")?;
    (v.contains('.')
        && v.split('.').all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())))
    .then_some(v)
}
